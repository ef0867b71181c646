package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestAgentServesTheWorkersStore: for PyTorch workers gorun holds the
// master port before any worker starts (a worker that tries to bind it
// finds it taken) and serves the store there (every rank, rank 0 too, a
// client: TORCHELASTIC_USE_AGENT_STORE=True); a restart's ranks, which
// use the same keys, start afresh on the same port; a --master-port held
// by another process is refused at once, naming it.
func TestAgentServesTheWorkersStore(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	dir := t.TempDir()
	body := `import os, socket, sys, torch, torch.distributed as dist
port, attempt = int(os.environ["MASTER_PORT"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
s = socket.socket(socket.AF_INET6)
try:
    s.bind(("::", port))
    print("bound MASTER_PORT myself", flush=True)
except OSError:
    pass
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 0:
    print(f"attempt {attempt} sum {t.item():.0f} agent store {os.environ['TORCHELASTIC_USE_AGENT_STORE']} port {port}", flush=True)
dist.destroy_process_group()
if attempt == 0 and os.environ["RANK"] == "1":
    sys.exit(3)
`
	script := writePython(t, dir, body)
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--max-restarts=1", "--python", py, script)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "bound MASTER_PORT myself") {
		t.Errorf("a worker could bind MASTER_PORT: gorun did not hold it\n%s", r.stdout)
	}
	var ports []string
	for attempt := range 2 {
		prefix := "attempt " + strconv.Itoa(attempt) + " sum 2 agent store True port "
		i := strings.Index(r.stdout, prefix)
		if i < 0 {
			t.Fatalf("stdout lacks %q\n%s\n%s", prefix, r.stdout, r.stderr)
		}
		ports = append(ports, strings.Fields(r.stdout[i+len(prefix):])[0])
	}
	if ports[0] != ports[1] {
		t.Errorf("ports %v; want one port held for both attempts", ports)
	}

	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	r = runGorun(t, testEnv(), "--nproc-per-node=1", "--master-port="+port, "--python", py, script)
	if r.code != 1 || !strings.Contains(r.stderr, "--master-port="+port+" is taken by another process") {
		t.Errorf("with --master-port held: exit %d; want 1 naming the port\n%s", r.code, r.stderr)
	}
}
