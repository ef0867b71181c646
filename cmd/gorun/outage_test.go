package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/timing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestElasticEtcdOutageLongerThanTheLease: Debian's etcd is killed for
// three lease TTLs under a running 2-node job. The nodes' leases end and
// their workers are stopped; once etcd is back the job forms its next
// round by itself, completes, and no desync is reported.
func TestElasticEtcdOutageLongerThanTheLease(t *testing.T) {
	t.Parallel()
	ttl := timing.LeaseTTL(t)
	ep, stop, restart := etcdServer(t, "http")
	dir := t.TempDir()
	script := startWorker(t, `while [ ! -e "$1/go" ]; do sleep 0.02; done`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append([]string{"--rdzv-backend=etcd", "--rdzv-endpoint=" + ep, "--rdzv-id=outage", "--nnodes=2",
			"--rdzv-conf=lease_ttl=" + timing.Seconds(ttl), "--local-addr=127.0.0." + strconv.Itoa(i+1), "--no-python", script}, dir)
	})
	waitStarts(t, dir, "0.2.0", "1.2.0")
	stop()
	down := time.Now()
	waitFor(t, "both nodes to stop their workers", func() bool {
		return strings.Contains(nodes[0].stderr.String(), "lease ended") && strings.Contains(nodes[1].stderr.String(), "lease ended")
	})
	// The outage lasts three TTLs: a scenario's length, not a wait for an
	// event.
	time.Sleep(time.Until(down.Add(3 * ttl)))
	restart()
	// Round 1 forms without a restart spent (the stop was not a failure).
	waitNewStarts(t, dir, map[string]int{"0.2.0": 1, "1.2.0": 1}, "0.2.0", "1.2.0")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d exit %d\n%s", i, code, n.stderr)
		}
		if s := n.stderr.String(); strings.Contains(s, "desync") {
			t.Errorf("node %d reported a desync for a stop:\n%s", i, s)
		}
	}
}

// TestElasticForgedValuesInARunningJob writes, into a running job's keys
// on an etcd without authentication, what any client of that etcd could:
// a round record that names another master, a malformed round counter, a
// forged outcome and an oversized value. The job refuses each with a log
// line naming the key, and completes.
func TestElasticForgedValuesInARunningJob(t *testing.T) {
	t.Parallel()
	ep, _, _ := etcdServer(t, "http")
	dir := t.TempDir()
	script := startWorker(t, `while [ ! -e "$1/go" ]; do sleep 0.02; done`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append([]string{"--rdzv-backend=etcd", "--rdzv-endpoint=" + ep, "--rdzv-id=forged", "--nnodes=2",
			"--local-addr=127.0.0." + strconv.Itoa(i+1), "--no-python", script}, dir)
	})
	waitStarts(t, dir, "0.2.0", "1.2.0")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := "/gorun/forged/ctl/"
	forged := map[string]string{
		root + "closed/0": `{"round":0,"size":2,"world_size":2,"master_addr":"203.0.113.66","master_port":1234,"restarts":0}`,
		root + "round":    "abc",
		root + "outcome":  "failed: forged",
		root + "junk":     strings.Repeat("x", 1<<20),
	}
	for key, value := range forged {
		if _, err := cli.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a refusal of "+key, func() bool {
			return strings.Contains(nodes[0].stderr.String()+nodes[1].stderr.String(), "refused the value of "+key)
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d exit %d after forged values\n%s", i, code, n.stderr)
		}
	}
	if got := starts(dir); got["0.2.0"] != 1 || got["1.2.0"] != 1 || len(got) != 2 {
		t.Errorf("starts %v; want each rank once: the forgeries must not restart the job", got)
	}
}

// TestEmbeddedStoreRefusesStrangers: a client without the job's
// credentials can neither read nor write the embedded store of a running
// job, and the job completes.
func TestEmbeddedStoreRefusesStrangers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := "127.0.0.1:" + strconv.Itoa(freePort(t, "127.0.0.1"))
	script := startWorker(t, `while [ ! -e "$1/go" ]; do sleep 0.02; done`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append(elasticArgs(ep, "strangers", i, "--nnodes=2", "--no-python", script), dir)
	})
	waitStarts(t, dir, "0.2.0", "1.2.0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cred := range []struct{ user, password string }{{"", ""}, {"gorun", "guess"}, {"root", "root"}} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Username: cred.user, Password: cred.password})
		if err != nil {
			continue // refused at login
		}
		if _, err := cli.Put(ctx, "/gorun/strangers/ctl/outcome", "failed: forged"); err == nil {
			t.Errorf("user %q wrote the job's outcome", cred.user)
		}
		if resp, err := cli.Get(ctx, "/gorun/", clientv3.WithPrefix()); err == nil {
			t.Errorf("user %q read %d of the job's keys", cred.user, len(resp.Kvs))
		}
		cli.Close()
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
}
