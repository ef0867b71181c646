package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// TestStoreSurvivesAFloodOfIdleConnections: a `gorun store` with a job
// token, allowed 256 descriptors, gets 1,000 idle connections (another
// user's flood), and still serves a job: connections that do not prove
// the token are capped and closed, and cost one descriptor each. A flood
// used to cost three descriptors a connection until etcd died of EMFILE.
func TestStoreSurvivesAFloodOfIdleConnections(t *testing.T) {
	t.Parallel()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("SKIPPED: no prlimit (util-linux) to give the store a small descriptor limit")
	}
	const files, flood = 256, 1000
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	store := exec.Command(prlimit, "--nofile="+strconv.Itoa(files)+":"+strconv.Itoa(files), "--",
		gorunBin, "store", "--listen", "127.0.0.1:0", "--token-file", tokenFile, "--log-level", "panic")
	store.Env = testEnv()
	out, errb := &proctest.Buffer{}, &proctest.Buffer{}
	store.Stdout, store.Stderr = out, errb
	store.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := store.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = store.Wait(); close(exited) }()
	defer func() { _ = store.Process.Kill(); <-exited }()
	serving := regexp.MustCompile(`serving at \[([0-9.]+:[0-9]+)\]`)
	waitFor(t, "the store to serve", func() bool { return serving.MatchString(out.String()) })
	ep := serving.FindStringSubmatch(out.String())[1]

	for range flood {
		c, err := net.Dial("tcp", ep)
		if err != nil {
			t.Fatalf("flood: %v", err)
		}
		defer c.Close()
	}
	r := runGorun(t, testEnv(), "--nnodes=1:2", "--rdzv-backend=etcd", "--rdzv-endpoint="+ep,
		"--rdzv-conf=token_file="+tokenFile+",last_call_timeout=0.1", "--rdzv-id=flooded",
		"--nproc-per-node=1", "--no-python", "echo", "trained")
	if r.code != 0 || !strings.Contains(r.stdout, "trained") {
		t.Errorf("a job during the flood: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	select {
	case <-exited:
		t.Fatalf("the store died of the flood:\n%s%s", out.String(), errb.String())
	default:
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(store.Process.Pid) + "/fd")
	if err == nil && len(fds) >= files/2 {
		t.Errorf("the store holds %d descriptors during a flood of %d; want under %d", len(fds), flood, files/2)
	}
}

// TestEtcdBackendWaitsForALateGorunStore: agents of --rdzv-backend=etcd
// with the job's token start before the `gorun store` they name: once it
// serves and proves the token, they log in as the job's user. They used
// to decide on one probe that it was no store of the job's, then fail for
// good with "the port speaks TLS, but no TLS settings were given".
func TestEtcdBackendWaitsForALateGorunStore(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	ep := "127.0.0.1:" + strconv.Itoa(freePort(t, "127.0.0.1"))
	var nodes []*exec.Cmd
	var errs []*proctest.Buffer
	for i := range 2 {
		cmd, _, errb := startGorun(t, testEnv(), "--nnodes=2", "--rdzv-backend=etcd", "--rdzv-endpoint="+ep, "--rdzv-id=late-store",
			"--rdzv-conf=token_file="+tokenFile+",connect_timeout=60", "--nproc-per-node=1", "--no-python", "echo", "node"+strconv.Itoa(i))
		nodes, errs = append(nodes, cmd), append(errs, errb)
	}
	waitFor(t, "both agents to find no store yet", func() bool {
		return strings.Contains(errs[0].String(), "unreachable") && strings.Contains(errs[1].String(), "unreachable")
	})
	store, _, storeErr := startGorun(t, testEnv(), "store", "--listen", ep, "--token-file", tokenFile, "--log-level", "panic")
	for i, n := range nodes {
		if code := waitExit(t, n); code != 0 {
			t.Errorf("node %d exit %d\n%s", i, code, errs[i].String())
		}
	}
	_ = store.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, store); code != 0 {
		t.Errorf("gorun store exit %d\n%s", code, storeErr.String())
	}
}
