package rendezvous

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/gorun-dev/gorun/internal/secret"

	"github.com/gorun-dev/gorun/internal/idleconns"
	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/proc"
)

// DefaultStaticJoinTimeout is how long the nodes of a static job wait for
// each other at their first round, as torchrun's join_timeout.
const DefaultStaticJoinTimeout = 10 * time.Minute

// staticVersion marks the meeting's messages: anything else on the master
// port (worker rank 0's store of a job that started without this node,
// another program) is told from node 0's gorun.
const staticVersion = 1

// StaticMeetingByte begins every message of the static meeting (a JSON
// line): a byte that begins no query of PyTorch's TCPStore, so that the
// agent's store on the master port can tell the meeting's callers from
// its own clients.
const StaticMeetingByte = '{'

// HelloTimeout bounds how long node 0 waits for a caller's hello line.
const HelloTimeout = 10 * time.Second

// staticHello is what a node tells node 0 when the job starts.
type staticHello struct {
	Version     int    `json:"gorun_static"`
	RunID       string `json:"run_id"`
	NNodes      int    `json:"nnodes"`
	NodeRank    int    `json:"node_rank"`
	Nproc       int    `json:"nproc"`
	Role        string `json:"role"`
	MaxRestarts int    `json:"max_restarts"`
}

// staticTable is node 0's answer: every node's worker count and role by
// node rank, or why the job cannot form.
type staticTable struct {
	Version int    `json:"gorun_static"`
	Error   string `json:"error,omitempty"`
	// Ended says that the error is node 0's end, not the job's shape:
	// "timeout" (not every node came) or "stopped" (node 0 was).
	Ended  string   `json:"ended,omitempty"`
	Nprocs []int    `json:"nprocs,omitempty"`
	Roles  []string `json:"roles,omitempty"`
	// JobSecret is the job's secret (hex) that node 0 made, the same for
	// every node's workers (GORUN_JOB_SECRET): their store and mesh
	// authenticate each other with it. The meeting is plain TCP, as
	// torchrun's TCPStore is: whoever can join it as a node reads it.
	JobSecret string `json:"job_secret,omitempty"`
}

// meet has the static job's nodes tell each other their worker counts and
// roles once, at the first round, over the master port: node 0 listens
// there until every node came, answers them all with the table, and
// closes the port before worker rank 0's store takes it. Nodes that
// disagree on the job (--nnodes, the run id, --max-restarts) are all told
// why at once, and so is a node whose rank is taken.
func (s *Static) meet(ctx context.Context, me staticHello) (staticTable, error) {
	timeout := s.cfg.JoinTimeout
	if timeout <= 0 {
		timeout = DefaultStaticJoinTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if s.cfg.NodeRank == 0 {
		return s.host(ctx, me)
	}
	return s.join(ctx, me)
}

// mismatch says how hello, from the caller at from, differs from node
// 0's own, or nil. The caller is named by its address and the rank it
// claims: it may be no node of the job at all.
func (me staticHello) mismatch(h staticHello, from net.Addr) error {
	nodeRank, nnodes, maxRestarts := setting.Name("NodeRank"), setting.Name("NNodes"), setting.Name("MaxRestarts")
	switch {
	case h.RunID != me.RunID:
		return setting.Errorf("the caller at %s (claiming %s=%d) has run id %.100q, node 0 %q (%s)", from, nodeRank, h.NodeRank, h.RunID, me.RunID, setting.Name("RunID"))
	case h.NNodes != me.NNodes:
		return setting.Errorf("the caller at %s (claiming %s=%d) has %s=%d, node 0 %s=%d", from, nodeRank, h.NodeRank, nnodes, h.NNodes, nnodes, me.NNodes)
	case h.MaxRestarts != me.MaxRestarts:
		return setting.Errorf("the caller at %s (claiming %s=%d) has %s=%d, node 0 %s=%d", from, nodeRank, h.NodeRank, maxRestarts, h.MaxRestarts, maxRestarts, me.MaxRestarts)
	}
	return nil
}

// shown is err as the users of the other nodes read it: with the
// settings named as they know them (StaticConfig.ShowSetting).
func (s *Static) shown(err error) string {
	if s.cfg.ShowSetting == nil {
		return err.Error()
	}
	return setting.Message(err, s.cfg.ShowSetting)
}

// arrival is one caller at node 0 and its hello.
type arrival struct {
	conn  net.Conn
	hello staticHello
}

// host is node 0's side of meet.
func (s *Static) host(ctx context.Context, me staticHello) (staticTable, error) {
	start := time.Now()
	ln, shared := s.meetingListener()
	if ln == nil {
		addr := net.JoinHostPort("", strconv.Itoa(s.cfg.MasterPort))
		var err error
		if ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", addr); err != nil {
			return staticTable{}, fmt.Errorf("rendezvous: static: node 0 meets the other nodes on the master port %d before worker rank 0's store takes it%s: %w", s.cfg.MasterPort, proc.PortHolderNote(addr), err)
		}
	}
	// Cancelled when host returns, not by ctx (the nodes that came must be
	// told why first): callers that never said hello are closed then, not
	// when their hello deadline passes (worker rank 0 waits).
	ending, end := context.WithCancel(context.WithoutCancel(ctx))
	arrivals := make(chan arrival)
	var wg sync.WaitGroup
	wg.Go(func() { acceptHellos(ending, ln, arrivals, &wg) })
	conns := make([]net.Conn, me.NNodes)
	defer func() {
		end()
		ln.Close()
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		wg.Wait()
	}()
	table := staticTable{Version: staticVersion, Nprocs: make([]int, me.NNodes), Roles: make([]string, me.NNodes)}
	table.Nprocs[0], table.Roles[0] = me.Nproc, me.Role
	tell := func(t staticTable) {
		for _, c := range conns {
			if c != nil {
				writeLine(c, t)
			}
		}
	}
	for came := 1; came < me.NNodes; {
		select {
		case a := <-arrivals:
			h := a.hello
			if why := me.mismatch(h, a.conn.RemoteAddr()); why != nil {
				writeLine(a.conn, staticTable{Version: staticVersion, Error: s.shown(why)})
				a.conn.Close()
				tell(staticTable{Version: staticVersion, Error: s.shown(why)})
				return staticTable{}, fmt.Errorf("%w: %w", ErrShapeMismatch, why)
			}
			if why := refusal(h, me.NNodes, conns, table.Nprocs); why != nil {
				writeLine(a.conn, staticTable{Version: staticVersion, Error: s.shown(why)})
				a.conn.Close()
				continue
			}
			conns[h.NodeRank] = a.conn
			table.Nprocs[h.NodeRank], table.Roles[h.NodeRank] = h.Nproc, h.Role
			came++
		case <-ctx.Done():
			var missing []int
			for r := 1; r < me.NNodes; r++ {
				if conns[r] == nil {
					missing = append(missing, r)
				}
			}
			waited := fmt.Sprintf("node 0 waited %v at port %d for the nodes of ranks %v", time.Since(start).Round(100*time.Millisecond), s.cfg.MasterPort, missing)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				tell(staticTable{Version: staticVersion, Error: waited, Ended: "timeout"})
				return staticTable{}, fmt.Errorf("%w: %s", ErrJoinTimeout, waited)
			}
			tell(staticTable{Version: staticVersion, Error: "node 0 was stopped before the job formed (" + waited + ")", Ended: "stopped"})
			return staticTable{}, ctx.Err()
		}
	}
	if !shared {
		// Worker rank 0's store, not the agents', on the port: the
		// workers (gorun's Go workers) authenticate with the job's secret.
		secret, err := NewToken()
		if err != nil {
			tell(staticTable{Version: staticVersion, Error: err.Error()})
			return staticTable{}, err
		}
		table.JobSecret = string(secret)
	}
	tell(table)
	// The callers close first: the port is free of our connections when
	// worker rank 0's store binds it.
	for _, c := range conns {
		if c != nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Read(make([]byte, 1))
		}
	}
	return table, nil
}

// Bounds of what a hello may claim: a node's workers, its role's
// length, and the job's world size (PyTorch's ranks are 32-bit).
const (
	maxStaticNproc   = 1 << 16
	maxStaticRoleLen = 256
	maxStaticWorld   = 1<<31 - 1
)

// refusal says why node 0 refuses a node that agrees on the job, or nil;
// nprocs are the worker counts of the nodes that came so far.
func refusal(h staticHello, nnodes int, conns []net.Conn, nprocs []int) error {
	world := 0
	for _, n := range nprocs {
		world += n
	}
	switch {
	case h.NodeRank < 1 || h.NodeRank >= nnodes:
		return setting.Errorf("%s=%d is outside 1..%d (%s=%d)", setting.Name("NodeRank"), h.NodeRank, nnodes-1, setting.Name("NNodes"), nnodes)
	case conns[h.NodeRank] != nil:
		return setting.Errorf("%s=%d is taken: another node of that rank came first", setting.Name("NodeRank"), h.NodeRank)
	case h.Nproc < 1 || h.Nproc > maxStaticNproc:
		return fmt.Errorf("node %d has %d workers; want 1..%d", h.NodeRank, h.Nproc, maxStaticNproc)
	case world > maxStaticWorld-h.Nproc:
		return fmt.Errorf("node %d's %d workers would make the job's world larger than %d ranks", h.NodeRank, h.Nproc, maxStaticWorld)
	case len(h.Role) > maxStaticRoleLen || !printableRole(h.Role):
		return fmt.Errorf("node %d's role is not a name of at most %d printable characters", h.NodeRank, maxStaticRoleLen)
	}
	return nil
}

// printableRole says whether role holds printable ASCII only, as a role
// name given on the command line does.
func printableRole(role string) bool {
	for _, r := range role {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}

// MaxPendingHellos bounds the callers that have not said hello yet
// (package idleconns; a quarter of the descriptor limit when that is
// lower): past it, the one that waited longest is closed.
const MaxPendingHellos = 256

// acceptHellos accepts callers until ln closes and sends each caller's
// hello to arrivals; a caller that sends no hello of a gorun node within
// HelloTimeout, or by the end of ctx, is closed. An accept that fails
// for a reason that passes (EMFILE under a flood) is retried after a
// back-off, never the end of the meeting.
func acceptHellos(ctx context.Context, ln net.Listener, arrivals chan<- arrival, wg *sync.WaitGroup) {
	var backoff ctxtime.AcceptBackoff
	var pending idleconns.Queue
	limit := idleconns.Limit(MaxPendingHellos)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || !backoff.Wait(ctx.Done()) {
				return
			}
			continue
		}
		backoff.Reset()
		_ = c.SetReadDeadline(time.Now().Add(HelloTimeout))
		pending.Add(c, limit)
		wg.Go(func() {
			defer pending.Remove(c)
			context.AfterFunc(ctx, func() { c.Close() })
			var h staticHello
			line, err := bufio.NewReaderSize(c, 4096).ReadSlice('\n')
			if err != nil || json.Unmarshal(line, &h) != nil || h.Version != staticVersion {
				c.Close()
				return
			}
			pending.Remove(c) // before the deadline: Add may cut c off until then
			_ = c.SetReadDeadline(time.Time{})
			select {
			case arrivals <- arrival{c, h}:
			case <-ctx.Done():
				c.Close()
			}
		})
	}
}

// join is the other nodes' side of meet: it calls node 0 until it answers
// or the join timeout passes.
func (s *Static) join(ctx context.Context, me staticHello) (staticTable, error) {
	start := time.Now()
	addr := net.JoinHostPort(s.cfg.MasterAddr, strconv.Itoa(s.cfg.MasterPort))
	var last error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return s.ask(ctx, c, me, addr)
		}
		last = err
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return staticTable{}, setting.Errorf("%w: node 0 did not answer at %s within %v (is it started, with the same %s and %s?): %v", ErrJoinTimeout, addr, time.Since(start).Round(100*time.Millisecond), setting.Name("MasterAddr"), setting.Name("MasterPort"), last)
			}
			return staticTable{}, ctx.Err()
		}
	}
}

// ask sends this node's hello on c and reads node 0's answer.
func (s *Static) ask(ctx context.Context, c net.Conn, me staticHello, addr string) (staticTable, error) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := writeLine(c, me); err != nil {
		return staticTable{}, fmt.Errorf("rendezvous: static: tell node 0 at %s: %w", addr, err)
	}
	var t staticTable
	// A table of every node, some 10 bytes each: thousands of nodes.
	line, err := bufio.NewReaderSize(c, 4<<20).ReadSlice('\n')
	if err == nil {
		err = json.Unmarshal(line, &t)
	}
	if err != nil || t.Version != staticVersion {
		switch {
		case ctx.Err() != nil:
			return staticTable{}, fmt.Errorf("%w: node 0 at %s did not answer in time", ErrJoinTimeout, addr)
		case len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)): // a reset: closed with the hello unread
			return staticTable{}, fmt.Errorf("%w: what answers at %s closed the connection without a word: node 0's workers' store, if the job formed without this node (a node of that rank came first, or the job is running), or node 0 stopping", ErrInvalidNode, addr)
		}
		return staticTable{}, fmt.Errorf("%w: what answers at %s does not speak the static meeting: not node 0's gorun (its workers' store, if the job is running without this node, or another program there)", ErrInvalidNode, addr)
	}
	// Node 0's words, as whatever answers there wrote them: shown, never
	// obeyed by the terminal or the log.
	said := printableText(t.Error, maxSaid)
	switch {
	case t.Ended == "timeout":
		return staticTable{}, fmt.Errorf("%w: %s", ErrJoinTimeout, said)
	case t.Ended != "":
		return staticTable{}, fmt.Errorf("rendezvous: static: %s", said)
	case t.Error != "":
		return staticTable{}, fmt.Errorf("%w: %s", ErrShapeMismatch, said)
	}
	if why := t.invalid(me); why != "" {
		return staticTable{}, fmt.Errorf("%w: what answers at %s as node 0 %s", ErrInvalidNode, addr, why)
	}
	return t, nil
}

// invalid says why a table that node 0 answered cannot be this job's,
// or "": every number and name in it is bounded as node 0 bounds the
// hellos (refusal), so that what answers on the port cannot hand this
// node's workers a negative or overflowing rank.
func (t staticTable) invalid(me staticHello) string {
	if len(t.Nprocs) != me.NNodes || len(t.Roles) != me.NNodes || t.Nprocs[me.NodeRank] != me.Nproc {
		return fmt.Sprintf("answered a table of %d nodes that does not hold this node's %d workers", len(t.Nprocs), me.Nproc)
	}
	world := 0
	for i, n := range t.Nprocs {
		if n < 1 || n > maxStaticNproc || world > maxStaticWorld-n {
			return fmt.Sprintf("answered %d workers for node %d (want 1..%d, and a world of at most %d ranks)", n, i, maxStaticNproc, maxStaticWorld)
		}
		world += n
		if r := t.Roles[i]; len(r) > maxStaticRoleLen || !printableRole(r) {
			return fmt.Sprintf("answered a role for node %d that is not a name of at most %d printable characters", i, maxStaticRoleLen)
		}
	}
	if t.JobSecret != "" && !isHex(t.JobSecret, 2*secret.Bytes) {
		return fmt.Sprintf("answered a job secret that is not %d hexadecimal digits", 2*secret.Bytes)
	}
	return ""
}

// maxSaid bounds what a node shows of node 0's error: node 0's own are
// a line or two.
const maxSaid = 2000

// printableText is s with every character that is not printable (escape
// sequences, new lines, bells) written as a Go escape, cut to max bytes.
func printableText(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			b.WriteString("...")
			break
		}
		if unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// isHex says whether s is n hexadecimal digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// writeLine writes v as one JSON line.
func writeLine(c net.Conn, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(HelloTimeout))
	_, err = c.Write(append(data, '\n'))
	return err
}
