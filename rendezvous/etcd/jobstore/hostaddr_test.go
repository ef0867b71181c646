package jobstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// fakeView is a machine with the names in hosts, the addresses in local
// and the host name name.
func fakeView(name string, local []string, hosts map[string][]string) hostView {
	ips := func(list []string) []net.IP {
		var out []net.IP
		for _, s := range list {
			out = append(out, net.ParseIP(s))
		}
		return out
	}
	return hostView{
		lookup: func(_ context.Context, host string) ([]net.IP, error) {
			if a, ok := hosts[host]; ok {
				return ips(a), nil
			}
			return nil, errors.New("no such host")
		},
		local:    func() ([]net.IP, error) { return ips(local), nil },
		hostname: func() (string, error) { return name, nil },
	}
}

func TestListenAddress(t *testing.T) {
	// node1: a cluster node whose own name maps to 127.0.1.1 in
	// /etc/hosts (Debian's default), reached by the others at 10.0.0.1.
	v := fakeView("node1", []string{"127.0.0.1", "10.0.0.1"}, map[string][]string{
		"node1":     {"127.0.1.1"},
		"node1-ib":  {"10.0.0.1"},
		"localhost": {"127.0.0.1", "::1"},
		"node2":     {"10.0.0.2"},
		"dual":      {"192.0.2.9", "10.0.0.1"},
	})
	tests := []struct {
		in, want, err string
	}{
		{"10.0.0.1:2380", "10.0.0.1:2380", ""},
		{"[::1]:2380", "[::1]:2380", ""},
		{":2380", ":2380", ""},
		{"node1-ib:2380", "10.0.0.1:2380", ""},
		{"dual:2380", "10.0.0.1:2380", ""},
		{"localhost:2380", "127.0.0.1:2380", ""},
		{"node1:2380", "0.0.0.0:2380", ""},
		{"node2:2380", "", "none of which is an address of this host"},
		{"nowhere:2380", "", `look up host "nowhere"`},
		{"node1", "", "missing port"},
	}
	for _, tt := range tests {
		got, err := v.listenAddress(context.Background(), tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("listenAddress(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("listenAddress(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSameHost(t *testing.T) {
	v := fakeView("node1", []string{"127.0.0.1", "10.0.0.1"}, map[string][]string{
		"node1":     {"127.0.1.1"},
		"node1-ib":  {"10.0.0.1"},
		"node2":     {"10.0.0.2"},
		"localhost": {"127.0.0.1"},
	})
	tests := []struct {
		host, local string
		want        bool
	}{
		{"node1", "node1", true},
		{"NODE1", "node1", true},
		{"node2", "node1", false},
		// Slurm: store_hosts as addresses, --local-addr the node's name.
		{"10.0.0.1", "node1", true},
		{"10.0.0.2", "node1", false},
		{"127.0.0.1", "node1", false}, // a loopback address is every host's
		// Names and addresses that resolve alike.
		{"node1-ib", "10.0.0.1", true},
		{"10.0.0.1", "node1-ib", true},
		{"node2", "10.0.0.1", false},
		// Several agents on one host, each with its own loopback address.
		{"127.0.0.2", "127.0.0.2", true},
		{"127.0.0.1", "127.0.0.2", false},
		// No --local-addr: the machine's name, localhost, or its addresses.
		{"node1", "", true},
		{"localhost", "", true},
		{"10.0.0.1", "", true},
		{"node1-ib", "", true},
		{"node2", "", false},
		{"nowhere", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := v.sameHost(context.Background(), tt.host, tt.local); got != tt.want {
			t.Errorf("sameHost(%q, %q) = %v; want %v", tt.host, tt.local, got, tt.want)
		}
	}
}
