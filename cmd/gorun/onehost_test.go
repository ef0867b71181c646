package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestElasticSeveralAgentsOnOneHost: two and three agents on one host,
// each given the same c10d endpoint on that host and no --local-addr (how
// a multi-node job is tried on one machine). The first to bind the port
// hosts the store; the others say so in one line and join it as clients,
// as torchrun's agents do. Every rank starts once, with one master.
func TestElasticSeveralAgentsOnOneHost(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3} {
		t.Run(strconv.Itoa(n)+" agents", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
			script := startWorker(t, "")
			var nodes []*node
			for range n {
				cmd, out, errb := startGorun(t, testEnv(), "--rdzv-backend=c10d", "--rdzv-endpoint="+ep, "--rdzv-id=onehost",
					"--nnodes="+strconv.Itoa(n), "--nproc-per-node=2", "--no-python", script, dir)
				nodes = append(nodes, &node{cmd, out, errb})
			}
			clients := 0
			for i, nd := range nodes {
				if code := waitExit(t, nd.cmd); code != 0 {
					t.Fatalf("agent %d exit %d\n%s", i, code, nd.stderr)
				}
				if strings.Contains(nd.stderr.String(), "joining it as a client") {
					clients++
				}
			}
			if clients != n-1 {
				t.Errorf("%d agents said they joined as clients; want %d", clients, n-1)
			}
			got := starts(dir)
			for r := range 2 * n {
				if k := fmt.Sprintf("%d.%d.0", r, 2*n); got[k] != 1 {
					t.Errorf("rank %d started %d times with WORLD_SIZE=%d; starts %v", r, got[k], 2*n, got)
				}
			}
		})
	}
}
