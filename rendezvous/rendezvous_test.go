package rendezvous

import (
	"context"
	"errors"
	"github.com/gorun-dev/gorun/internal/setting"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

func TestLocalRounds(t *testing.T) {
	ctx := context.Background()
	l := NewLocal(LocalConfig{RunID: "r"})
	node := Node{LocalWorldSize: 4, Role: "default"}
	seen := map[int]bool{}
	for i := range 5 {
		r, err := l.Next(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if r.Number != i || r.WorldSize != 4 || r.GroupWorldSize != 1 || r.MasterAddr != DefaultLocalAddr || r.RunID != "r" || r.MasterPort == 0 {
			t.Fatalf("round %d = %+v", i, r)
		}
		seen[r.MasterPort] = true
		// The port is free: a worker can bind it.
		ln, err := net.Listen("tcp", net.JoinHostPort(r.MasterAddr, strconv.Itoa(r.MasterPort)))
		if err != nil {
			t.Fatalf("round %d port %d not bindable: %v", i, r.MasterPort, err)
		}
		ln.Close()
	}
	if len(seen) < 2 {
		t.Errorf("five rounds used ports %v; want fresh ports", seen)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Next(ctx, node); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v; want ErrClosed", err)
	}
	if _, err := NewLocal(LocalConfig{}).Next(ctx, Node{Role: "x"}); !errors.Is(err, ErrInvalidNode) {
		t.Errorf("Next with no workers = %v; want ErrInvalidNode", err)
	}
	fixed, err := NewLocal(LocalConfig{MasterPort: 12345, MasterAddr: "127.0.0.2"}).Next(ctx, node)
	if err != nil || fixed.MasterPort != 12345 || fixed.MasterAddr != "127.0.0.2" {
		t.Errorf("fixed port round = %+v, %v", fixed, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := NewLocal(LocalConfig{}).Next(cancelled, node); !errors.Is(err, context.Canceled) {
		t.Errorf("Next with a cancelled context = %v", err)
	}
}

// freePort is a port the kernel reports free on 127.0.0.1.
func freePort(t *testing.T) int { return proctest.FreePort(t, "127.0.0.1") }

// meetAll runs every node's first Next at once.
func meetAll(statics []*Static, nodes []Node) ([]Round, []error) {
	rounds, errs := make([]Round, len(statics)), make([]error, len(statics))
	var wg sync.WaitGroup
	for i, s := range statics {
		wg.Go(func() { rounds[i], errs[i] = s.Next(context.Background(), nodes[i]) })
	}
	wg.Wait()
	return rounds, errs
}

// TestStaticNodesThatCannotMeet: every node learns at once why the job
// cannot form (a different --nnodes), a node whose rank is taken is
// refused, a missing node ends the wait at the join timeout naming its
// rank, and what answers at the master port that is not node 0's gorun
// is named.
func TestStaticNodesThatCannotMeet(t *testing.T) {
	t.Parallel()
	node := Node{LocalWorldSize: 1, Role: "default"}
	static := func(nnodes, rank, port int, timeout time.Duration) *Static {
		s, err := NewStatic(StaticConfig{RunID: "j", NNodes: nnodes, NodeRank: rank, MasterAddr: "127.0.0.1", MasterPort: port, JoinTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("different --nnodes", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		// Node 0 shows the settings to node 1's user as ShowSetting
		// names them; its own error names them as the library does.
		s0, s1 := static(2, 0, port, time.Minute), static(3, 1, port, time.Minute)
		s0.cfg.ShowSetting = func(s setting.Name) string { return "--" + strings.ToLower(string(s)) }
		_, errs := meetAll([]*Static{s0, s1}, []Node{node, node})
		for i, want := range []string{"(claiming NodeRank=1) has NNodes=3, node 0 NNodes=2", "(claiming --noderank=1) has --nnodes=3, node 0 --nnodes=2"} {
			if !errors.Is(errs[i], ErrShapeMismatch) || !strings.Contains(errs[i].Error(), want) {
				t.Errorf("node %d: %v; want the mismatch named: %q", i, errs[i], want)
			}
		}
	})
	t.Run("a missing node", func(t *testing.T) {
		t.Parallel()
		// Node 1 came, node 2 did not: both end with the join timeout
		// (node 1 is not told its shape is wrong).
		port := freePort(t)
		_, errs := meetAll([]*Static{static(3, 0, port, time.Second), static(3, 1, port, time.Minute)}, []Node{node, node})
		for i, err := range errs {
			if !errors.Is(err, ErrJoinTimeout) || !strings.Contains(err.Error(), "ranks [2]") {
				t.Errorf("node %d: Next = %v; want a join timeout naming rank 2", i, err)
			}
		}
	})
	t.Run("a stranger does not hold node 0", func(t *testing.T) {
		t.Parallel()
		// A caller that says nothing is closed when the nodes have met,
		// not when its hello deadline passes: worker rank 0 waits for
		// node 0.
		port := freePort(t)
		host := static(2, 0, port, time.Minute)
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := host.Next(context.Background(), node); done <- err }()
		var stranger net.Conn
		for stranger == nil {
			stranger, _ = net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		}
		defer stranger.Close()
		if _, err := static(2, 1, port, time.Minute).Next(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= HelloTimeout {
			t.Errorf("node 0 met its node after %v, held by a silent caller (hello deadline %v)", took, HelloTimeout)
		}
	})
	t.Run("node 0 never comes", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		_, err := static(2, 1, port, 300*time.Millisecond).Next(context.Background(), node)
		if !errors.Is(err, ErrJoinTimeout) || !strings.Contains(err.Error(), "node 0 did not answer") {
			t.Errorf("Next = %v; want node 0 named", err)
		}
	})
	for _, tc := range []struct {
		name, says, want string
		kind             error
	}{
		{"not node 0's gorun", "HTTP/1.1 400 Bad Request\r\n", "not node 0's gorun", ErrInvalidNode},
		{"closed without a word", "", "closed the connection without a word", ErrInvalidNode},
		// Tables from whatever answers on the port, bounded as hellos are.
		{"a huge worker count", `{"gorun_static":1,"nprocs":[9223372036854775807,1],"roles":["x","default"]}` + "\n", "answered 9223372036854775807 workers for node 0", ErrInvalidNode},
		{"a negative worker count", `{"gorun_static":1,"nprocs":[-4611686018427387904,1],"roles":["x","default"]}` + "\n", "answered -4611686018427387904 workers for node 0", ErrInvalidNode},
		{"a bad secret", `{"gorun_static":1,"nprocs":[1,1],"roles":["default","default"],"job_secret":"chosen"}` + "\n", "not 64 hexadecimal digits", ErrInvalidNode},
		// Its words shown, never obeyed: a terminal's escapes and a forged line.
		{"escapes in its error", `{"gorun_static":1,"error":"\u001b[2JFAKE\ngorun: forged line\u0007"}` + "\n", `\x1b[2JFAKE\ngorun: forged line\a`, ErrShapeMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Write([]byte(tc.says))
					c.Close() // as a store that takes no such line
				}
			}()
			_, err = static(2, 1, ln.Addr().(*net.TCPAddr).Port, time.Minute).Next(context.Background(), node)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) || strings.ContainsAny(err.Error(), "\x1b\n\a") {
				t.Errorf("Next = %v; want %q", err, tc.want)
			}
		})
	}
	t.Run("a taken rank", func(t *testing.T) {
		t.Parallel()
		// Two nodes of rank 1 while rank 2 is not there yet: the second
		// to come is refused; rank 2 then completes the job.
		port := freePort(t)
		type result struct {
			rank int
			err  error
		}
		done := make(chan result, 3)
		for _, rank := range []int{0, 1, 1} {
			go func() {
				_, err := static(3, rank, port, time.Minute).Next(context.Background(), node)
				done <- result{rank, err}
			}()
		}
		first := <-done
		if first.rank != 1 || !errors.Is(first.err, ErrShapeMismatch) || !strings.Contains(first.err.Error(), "NodeRank=1 is taken") {
			t.Fatalf("first to end: node of rank %d, %v; want a node of rank 1 refused, naming its rank", first.rank, first.err)
		}
		if _, err := static(3, 2, port, time.Minute).Next(context.Background(), node); err != nil {
			t.Errorf("node 2: %v", err)
		}
		for range 2 {
			if r := <-done; r.err != nil {
				t.Errorf("node of rank %d: %v", r.rank, r.err)
			}
		}
	})
}

func TestStatic(t *testing.T) {
	t.Parallel()
	// Three nodes of different worker counts and roles, as torchrun's
	// quickstart mixes them: ranks in node-rank order, each role apart.
	port := freePort(t)
	nodes := []Node{{LocalWorldSize: 1, Role: "a"}, {LocalWorldSize: 2, Role: "b"}, {LocalWorldSize: 3, Role: "a"}}
	want := []Round{
		{RunID: "j", GroupRank: 0, GroupWorldSize: 3, BaseRank: 0, WorldSize: 6, BaseRoleRank: 0, RoleWorldSize: 4, MasterAddr: "127.0.0.1", MasterPort: port},
		{RunID: "j", GroupRank: 1, GroupWorldSize: 3, BaseRank: 1, WorldSize: 6, BaseRoleRank: 0, RoleWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port},
		{RunID: "j", GroupRank: 2, GroupWorldSize: 3, BaseRank: 3, WorldSize: 6, BaseRoleRank: 1, RoleWorldSize: 4, MasterAddr: "127.0.0.1", MasterPort: port},
	}
	statics := make([]*Static, 3)
	for i := range statics {
		s, err := NewStatic(StaticConfig{RunID: "j", NNodes: 3, NodeRank: i, MasterAddr: "127.0.0.1", MasterPort: port})
		if err != nil {
			t.Fatal(err)
		}
		statics[i] = s
	}
	rounds, errs := meetAll(statics, nodes)
	// Node 0 hands every node the same job secret (64 hex digits).
	secret := string(rounds[0].JobSecret)
	for i := range statics {
		if len(secret) != 64 || string(rounds[i].JobSecret) != secret {
			t.Errorf("node %d: job secret %d digits, the same as node 0's: %v; want 64, the same", i, len(rounds[i].JobSecret), string(rounds[i].JobSecret) == secret)
		}
		rounds[i].JobSecret = nil
		if errs[i] != nil || !reflect.DeepEqual(rounds[i], want[i]) {
			t.Errorf("node %d: Next = %+v, %v; want %+v", i, rounds[i], errs[i], want[i])
		}
	}
	// A restart keeps the ranks and meets nobody (node 0 no longer
	// listens: worker rank 0's store has the port).
	if r2, err := statics[2].Next(context.Background(), nodes[2]); err != nil || r2.Number != 1 || r2.BaseRank != 3 {
		t.Errorf("second round %+v, %v; want number 1, base rank 3", r2, err)
	}
	for _, bad := range []StaticConfig{
		{NNodes: 0, MasterAddr: "a", MasterPort: 1},
		{NNodes: 2, NodeRank: 2, MasterAddr: "a", MasterPort: 1},
		{NNodes: 2, NodeRank: -1, MasterAddr: "a", MasterPort: 1},
		{NNodes: 2, MasterPort: 1},
		{NNodes: 2, MasterAddr: "a", MasterPort: 70000},
	} {
		if _, err := NewStatic(bad); err == nil || !strings.Contains(err.Error(), "static") {
			t.Errorf("NewStatic(%+v) = %v; want an error", bad, err)
		}
	}
}

func TestSplitEndpoint(t *testing.T) {
	tests := []struct {
		in   string
		host string
		port int
		err  bool
	}{
		{"node0", "node0", 29500, false},
		{"node0:1234", "node0", 1234, false},
		{"[::1]:99", "::1", 99, false},
		{"[fe80::1]", "fe80::1", 29500, false},
		{"::1", "", 0, true},
		{":80", "", 0, true},
		{"h:0", "", 0, true},
		{"h:x", "", 0, true},
		{"[::1", "", 0, true},
		{"[::1]x", "", 0, true},
	}
	for _, tt := range tests {
		h, p, err := SplitEndpoint(tt.in, DefaultStaticPort)
		if (err != nil) != tt.err || h != tt.host || p != tt.port {
			t.Errorf("SplitEndpoint(%q) = %q, %d, %v; want %q, %d, error %v", tt.in, h, p, err, tt.host, tt.port, tt.err)
		}
	}
}

func TestFreePortOnHostName(t *testing.T) {
	if p, err := FreePort("localhost"); err != nil || p == 0 {
		t.Errorf("FreePort(localhost) = %d, %v", p, err)
	}
}

func TestParseSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"30", 30 * time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{"1m30s", 90 * time.Second, ""},
		{"0", 0, ""},
		{"-3", 0, "want 0 or more"},
		{"-3s", 0, "want 0 or more"},
		{"soon", 0, "want a duration such as 30s or 1m"},
	} {
		got, err := ParseSeconds(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: %v; want an error saying %q", tt.in, err, tt.err)
		}
	}
}

func TestJobFailureText(t *testing.T) {
	for _, tc := range []struct {
		f    JobFailure
		want string
	}{
		{JobFailure{Reason: "rank 1 on host7 exited with code 3", ExitCode: 3}, "failed (exit code 3): rank 1 on host7 exited with code 3"},
		{JobFailure{Reason: "stopped: SIGTERM on node 0"}, "stopped: SIGTERM on node 0"},
		{JobFailure{Reason: "no node came in time"}, "failed: no node came in time"},
	} {
		if got := tc.f.Text(); got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.f, got, tc.want)
		}
	}
	if got := (&JobFailure{Reason: "stopped: SIGTERM"}).Error(); got != "rendezvous: job stopped: SIGTERM" {
		t.Errorf("JobFailure = %q", got)
	}
}
