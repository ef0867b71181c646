package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Transports a group may use between two ranks.
const (
	TransportAuto = ""    // shared memory on the same host, else TCP
	TransportTCP  = "tcp" // TCP only
	TransportSHM  = "shm" // shared memory only (every rank on one host)
)

// TransportEnv forces a transport for every group of the process.
const TransportEnv = "GORUN_CPU_TRANSPORT"

// sameHost reports whether both ends of c are on this host.
func sameHost(c net.Conn) bool {
	l, lok := c.LocalAddr().(*net.TCPAddr)
	r, rok := c.RemoteAddr().(*net.TCPAddr)
	return lok && rok && (l.IP.Equal(r.IP) || (l.IP.IsLoopback() && r.IP.IsLoopback()))
}

// setupShm moves the peers on this host to shared memory, as transport
// asks. For each pair the lower rank creates the two ring files and sends
// their names; the higher maps them and answers; the lower then removes
// the files, so none is left even if a rank is killed later. Pairs are
// taken in rank order on both sides, so no two ranks wait on each other.
func (m *mesh) setupShm(transport string) error {
	if transport == TransportTCP {
		return nil
	}
	sweepDeadRings(shmDir())
	for r, p := range m.peers {
		if p == nil {
			continue
		}
		if !sameHost(p.conn) {
			if transport == TransportSHM {
				return fmt.Errorf("%s=shm: rank %d is on another host (%s)", TransportEnv, r, p.conn.RemoteAddr())
			}
			continue
		}
		_ = p.conn.SetDeadline(time.Now().Add(30 * time.Second))
		var err error
		if m.rank < r {
			err = m.offerShm(p)
		} else {
			err = m.acceptShm(p)
		}
		_ = p.conn.SetDeadline(time.Time{})
		if err != nil {
			return fmt.Errorf("rank %d: shared memory with rank %d: %w", m.rank, r, err)
		}
		link := p.shm
		m.watchers.Add(1)
		go func() {
			defer m.watchers.Done()
			b := make([]byte, 64)
			for { // returns when the peer or this rank closes
				n, err := p.conn.Read(b)
				if n > 0 {
					link.rang()
				}
				if err != nil && !isTimeout(err) {
					break
				}
			}
			link.dead.Store(true)
			link.rang()
		}()
	}
	return nil
}

func (m *mesh) offerShm(p *peer) error {
	upName, downName, err := m.cfg.newShmNames(m.rank, p.rank)
	if err != nil {
		return err
	}
	up, down := filepath.Join(shmDir(), upName), filepath.Join(shmDir(), downName)
	out, err := mapRing(up, true)
	if err == nil {
		out.prefault()
	}
	if err != nil {
		return err
	}
	in, err := mapRing(down, true)
	if err != nil {
		out.unmap()
		os.Remove(up)
		return err
	}
	defer os.Remove(up)
	defer os.Remove(down)
	for _, s := range []string{upName, downName} {
		if err := writeString(p.conn, s); err != nil {
			out.unmap()
			in.unmap()
			return err
		}
	}
	var ok [1]byte
	if _, err := io.ReadFull(p.conn, ok[:]); err != nil {
		out.unmap()
		in.unmap()
		return err
	}
	p.shm = newShmLink(out, in, p.conn)
	return nil
}

// acceptShm maps the ring files the lower rank p named, once each name
// is one of this job's for this pair (checkShmName).
func (m *mesh) acceptShm(p *peer) error {
	var paths [2]string
	for i, dir := range []string{"up", "down"} {
		name, err := readString(p.conn)
		if err != nil {
			return err
		}
		if err := m.cfg.checkShmName(name, p.rank, m.rank, dir); err != nil {
			return fmt.Errorf("refused: %w", err)
		}
		paths[i] = filepath.Join(shmDir(), name)
	}
	in, err := mapRing(paths[0], false)
	if err != nil {
		return err
	}
	out, err := mapRing(paths[1], false)
	if err != nil {
		in.unmap()
		return err
	}
	out.prefault()
	if _, err := p.conn.Write([]byte{1}); err != nil {
		in.unmap()
		out.unmap()
		return err
	}
	p.shm = newShmLink(out, in, p.conn)
	return nil
}

func writeString(w io.Writer, s string) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	_, err := w.Write(append(n[:], s...))
	return err
}

func readString(r io.Reader) (string, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	if l := binary.LittleEndian.Uint32(n[:]); l > 4096 {
		return "", fmt.Errorf("a name of %d bytes", l)
	} else {
		b := make([]byte, l)
		_, err := io.ReadFull(r, b)
		return string(b), err
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
