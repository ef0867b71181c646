package rendezvous

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
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

func TestStatic(t *testing.T) {
	s, err := NewStatic(StaticConfig{RunID: "j", NNodes: 3, NodeRank: 2, MasterAddr: "10.0.0.1", MasterPort: DefaultStaticPort})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Next(context.Background(), Node{LocalWorldSize: 8, Role: "default"})
	want := Round{RunID: "j", GroupRank: 2, GroupWorldSize: 3, BaseRank: 16, WorldSize: 24, BaseRoleRank: 16, RoleWorldSize: 24,
		MasterAddr: "10.0.0.1", MasterPort: 29500}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("Next = %+v, %v; want %+v", r, err, want)
	}
	if r2, _ := s.Next(context.Background(), Node{LocalWorldSize: 8, Role: "default"}); r2.Number != 1 {
		t.Errorf("second round number %d; want 1", r2.Number)
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
