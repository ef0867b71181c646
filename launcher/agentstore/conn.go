package agentstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// op is a store operation, whatever its number on the wire.
type op int

const (
	opValidate op = iota
	opSet
	opCompareSet
	opGet
	opAdd
	opCheck
	opWait
	opNumKeys
	opWatchKey
	opDeleteKey
	opAppend
	opMultiGet
	opMultiSet
	opCancelWait
	opPing
	opQueuePush
	opQueuePop
	opQueueLen
	opListKeys
	opBarrier
)

// The operations' numbers on the wire: PyTorch 2.x's (after the
// connection's validation message) and 1.x's.
var (
	ops2 = [...]op{opValidate, opSet, opCompareSet, opGet, opAdd, opCheck, opWait, opNumKeys, opDeleteKey, opAppend,
		opMultiGet, opMultiSet, opCancelWait, opPing, opQueuePush, opQueuePop, opQueueLen, opListKeys, opBarrier}
	ops1 = [...]op{opSet, opCompareSet, opGet, opAdd, opCheck, opWait, opNumKeys, opWatchKey, opDeleteKey}
)

// validateMagic follows PyTorch 2.x's validation byte (0) on every new
// connection.
const validateMagic = 0x3C85F7CE

// Replies of one byte.
const (
	stopWaiting     = 0 // WAIT, BARRIER: the keys are there
	waitCanceled    = 1 // CANCEL_WAIT
	checkReady      = 0
	checkNotReady   = 1
	callbackOK      = 3 // 1.x WATCH_KEY: registered
	maxKey          = 64 << 10
	maxValue        = 256 << 20
	maxKeysInAQuery = 1 << 17
)

// errBadQuery ends a connection that sent something that is not the
// protocol.
var errBadQuery = errors.New("not a TCPStore query")

// conn is one client connection.
type conn struct {
	s   *Server
	nc  net.Conn
	r   *bufio.Reader
	wmu sync.Mutex // replies come from its reader and from waits it parked
	w   *bufio.Writer
	// spoke is set once a query came: a client, not a connection that
	// never said anything (WaitIdle does not wait for those).
	spoke atomic.Bool
	// parked are its WAITs and BARRIERs not answered yet; the server's
	// mu guards it.
	parked []*waiter
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{s: s, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriter(nc)}
}

// serve reads queries until the connection ends; a query it cannot read
// ends it.
func (c *conn) serve() {
	if c.s.diverts(c) {
		return // another protocol's now
	}
	defer c.s.forget(c)
	defer c.nc.Close()
	table := ops1[:]
	if head, err := c.r.Peek(5); err == nil && head[0] == 0 && binary.LittleEndian.Uint32(head[1:]) == validateMagic {
		table = ops2[:]
	}
	for {
		code, err := c.r.ReadByte()
		if err != nil {
			return
		}
		c.spoke.Store(true)
		if int(code) >= len(table) {
			err = fmt.Errorf("%w: operation %d", errBadQuery, code)
		} else {
			err = c.handle(table[code])
		}
		if err != nil {
			if errors.Is(err, errBadQuery) {
				c.s.log.Warnf("workers' store: closed the connection from %s: %v", c.nc.RemoteAddr(), err)
			}
			return
		}
	}
}

// reply writes b and flushes it.
func (c *conn) reply(b ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.write(b)
}

// replyWithin is reply, given at most d to be written.
func (c *conn) replyWithin(d time.Duration, b ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(d))
	defer c.nc.SetWriteDeadline(time.Time{})
	return c.write(b)
}

// write writes and flushes b; c.wmu held.
func (c *conn) write(b [][]byte) error {
	for _, p := range b {
		if _, err := c.w.Write(p); err != nil {
			return err
		}
	}
	return c.w.Flush()
}

func (c *conn) u32() (uint32, error) {
	var b [4]byte
	_, err := io.ReadFull(c.r, b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func (c *conn) u64() (uint64, error) {
	var b [8]byte
	_, err := io.ReadFull(c.r, b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

// bytes reads a length-prefixed field of at most limit bytes.
func (c *conn) bytes(limit int) ([]byte, error) {
	n, err := c.u64()
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("%w: a field of %d bytes, more than the %d allowed", errBadQuery, n, limit)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(c.r, b)
	return b, err
}

func (c *conn) key() (string, error) {
	b, err := c.bytes(maxKey)
	return string(b), err
}

// keyValue reads a key and a value: the fields of SET, APPEND and
// QUEUE_PUSH, each pair of MULTI_SET, and COMPARE_SET's first two.
func (c *conn) keyValue() (string, []byte, error) {
	k, err := c.key()
	if err != nil {
		return "", nil, err
	}
	v, err := c.bytes(maxValue)
	return k, v, err
}

// keyList reads a count and that many keys.
func (c *conn) keyList() ([]string, error) {
	n, err := c.u64()
	if err != nil {
		return nil, err
	}
	if n > maxKeysInAQuery {
		return nil, fmt.Errorf("%w: %d keys, more than the %d allowed", errBadQuery, n, maxKeysInAQuery)
	}
	keys := make([]string, n)
	for i := range keys {
		if keys[i], err = c.key(); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func u64Bytes(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// field is a length-prefixed field.
func field(b []byte) []byte { return append(u64Bytes(uint64(len(b))), b...) }

// handle reads one query's fields and answers it.
func (c *conn) handle(o op) error {
	s := c.s
	switch o {
	case opValidate:
		magic, err := c.u32()
		if err != nil {
			return err
		}
		if magic != validateMagic {
			return fmt.Errorf("%w: validation magic %#x, want %#x", errBadQuery, magic, validateMagic)
		}
		return nil
	case opPing:
		nonce, err := c.u32()
		if err != nil {
			return err
		}
		return c.reply(binary.LittleEndian.AppendUint32(nil, nonce))
	case opSet, opAppend:
		k, v, err := c.keyValue()
		if err != nil {
			return err
		}
		s.update([]string{k}, func() {
			if o == opAppend {
				v = append(s.keys[k], v...)
			}
			s.keys[k] = v
		})
		return nil
	case opMultiSet:
		n, err := c.u64()
		if err != nil {
			return err
		}
		if n > maxKeysInAQuery {
			return fmt.Errorf("%w: %d pairs, more than the %d allowed", errBadQuery, n, maxKeysInAQuery)
		}
		keys, values := make([]string, n), make([][]byte, n)
		for i := range keys {
			if keys[i], values[i], err = c.keyValue(); err != nil {
				return err
			}
		}
		s.update(keys, func() {
			for i, k := range keys {
				s.keys[k] = values[i]
			}
		})
		return nil
	case opCompareSet:
		k, expected, err := c.keyValue()
		if err != nil {
			return err
		}
		desired, err := c.bytes(maxValue)
		if err != nil {
			return err
		}
		var out []byte
		s.update([]string{k}, func() {
			cur, ok := s.keys[k]
			switch {
			case !ok && len(expected) == 0, ok && bytes.Equal(cur, expected):
				s.keys[k], out = desired, desired
			case !ok:
				out = expected
			default:
				out = cur
			}
		})
		return c.reply(field(out))
	case opGet:
		k, err := c.key()
		if err != nil {
			return err
		}
		s.mu.Lock()
		v := s.keys[k] // missing: empty, as PyTorch 2.x's server answers
		s.mu.Unlock()
		return c.reply(field(v))
	case opMultiGet:
		keys, err := c.keyList()
		if err != nil {
			return err
		}
		// The values themselves, not copies: a key asked for many times
		// costs its length's header each time, not its value again (a
		// value is replaced, never changed in place, by a SET).
		out := make([][]byte, 0, 2*len(keys))
		s.mu.Lock()
		for _, k := range keys {
			v := s.keys[k]
			out = append(out, u64Bytes(uint64(len(v))), v)
		}
		s.mu.Unlock()
		return c.reply(out...)
	case opAdd:
		k, err := c.key()
		if err != nil {
			return err
		}
		delta, err := c.u64()
		if err != nil {
			return err
		}
		var sum int64
		s.update([]string{k}, func() {
			cur, _ := strconv.ParseInt(string(s.keys[k]), 10, 64)
			sum = cur + int64(delta)
			s.keys[k] = []byte(strconv.FormatInt(sum, 10))
		})
		return c.reply(u64Bytes(uint64(sum)))
	case opCheck:
		keys, err := c.keyList()
		if err != nil {
			return err
		}
		s.mu.Lock()
		ready := s.have(keys)
		s.mu.Unlock()
		if ready {
			return c.reply([]byte{checkReady})
		}
		return c.reply([]byte{checkNotReady})
	case opWait:
		keys, err := c.keyList()
		if err != nil {
			return err
		}
		return s.wait(&waiter{c: c, keys: keys})
	case opBarrier:
		k, err := c.key()
		if err != nil {
			return err
		}
		world, err := c.u64()
		if err != nil {
			return err
		}
		return s.barrier(c, k, int64(world))
	case opCancelWait:
		s.mu.Lock()
		s.dropWaits(c)
		s.mu.Unlock()
		return c.reply([]byte{waitCanceled})
	case opNumKeys:
		s.mu.Lock()
		n := len(s.keys)
		s.mu.Unlock()
		return c.reply(u64Bytes(uint64(n)))
	case opListKeys:
		s.mu.Lock()
		out := [][]byte{u64Bytes(uint64(len(s.keys)))}
		for k := range s.keys {
			out = append(out, field([]byte(k)))
		}
		s.mu.Unlock()
		return c.reply(out...)
	case opDeleteKey:
		k, err := c.key()
		if err != nil {
			return err
		}
		s.mu.Lock()
		_, had := s.keys[k]
		delete(s.keys, k)
		s.mu.Unlock()
		if had {
			return c.reply(u64Bytes(1))
		}
		return c.reply(u64Bytes(0))
	case opWatchKey:
		// PyTorch 1.x's callbacks: registered, never called (no default
		// path of PyTorch's uses them).
		if _, err := c.key(); err != nil {
			return err
		}
		return c.reply([]byte{callbackOK})
	case opQueuePush:
		k, v, err := c.keyValue()
		if err != nil {
			return err
		}
		s.push(k, v)
		return nil
	case opQueuePop:
		k, err := c.key()
		if err != nil {
			return err
		}
		s.mu.Lock()
		q := s.queues[k]
		n := len(q)
		var v []byte
		if n > 0 {
			v, s.queues[k] = q[0], q[1:]
		}
		s.mu.Unlock()
		if n == 0 {
			return c.reply(u64Bytes(0))
		}
		return c.reply(u64Bytes(uint64(n)), field(v))
	case opQueueLen:
		k, err := c.key()
		if err != nil {
			return err
		}
		s.mu.Lock()
		n := len(s.queues[k])
		s.mu.Unlock()
		return c.reply(u64Bytes(uint64(n)))
	}
	return errBadQuery
}
