package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// storeWorkerEnv makes the test binary a worker that meets the others
// through the store gorun gives it (see storeWorker).
const storeWorkerEnv = "GORUN_TEST_STORE_WORKER"

// storeWorker is a worker of TestStandaloneWorkersShareAStore: it puts its
// rank under GORUN_STORE_PREFIX and waits until every rank has, the way a
// Go process group bootstraps through the store.
func storeWorker() int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
		return 1
	}
	endpoints, prefix := os.Getenv("GORUN_STORE_ENDPOINTS"), os.Getenv("GORUN_STORE_PREFIX")
	world, err := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	if endpoints == "" || prefix == "" || err != nil {
		return fail("no store: GORUN_STORE_ENDPOINTS=%q GORUN_STORE_PREFIX=%q WORLD_SIZE=%q", endpoints, prefix, os.Getenv("WORLD_SIZE"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 30 * time.Second, Logger: zap.NewNop(),
		Username: os.Getenv("GORUN_STORE_USER"), Password: os.Getenv("GORUN_STORE_PASSWORD")})
	if err != nil {
		return fail("connect %s: %v", endpoints, err)
	}
	defer cli.Close()
	ranks := prefix + "ranks/"
	watch := cli.Watch(ctx, ranks, clientv3.WithPrefix())
	if _, err := cli.Put(ctx, ranks+os.Getenv("RANK"), "up"); err != nil {
		return fail("put: %v", err)
	}
	for {
		resp, err := cli.Get(ctx, ranks, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fail("get: %v", err)
		}
		if int(resp.Count) == world {
			fmt.Printf("met %d ranks through the store\n", world)
			return 0
		}
		select {
		case <-watch:
		case <-ctx.Done():
			return fail("only %d of %d ranks after 30s", resp.Count, world)
		}
	}
}

func TestStandaloneWorkersShareAStore(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, testEnv(storeWorkerEnv+"=1", "TMPDIR="+tmp), "--standalone", "--nproc-per-node=3", "--no-python", self)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if got := len(linesWithPrefix(r.stdout, "[default")); got != 3 || !strings.Contains(r.stdout, "met 3 ranks through the store") {
		t.Errorf("want 3 workers meeting through the store:\n%s", r.stdout)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}
