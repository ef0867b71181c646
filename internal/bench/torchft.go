package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// torchftName is torchft in the recovery benchmark: one replica group per
// agent (a single-node torchrun each), their quorum at a lighthouse.
const torchftName = "torchft"

// torchftTimeout is the workers' Manager timeout: torchft's own example
// (train_ddp.py) uses 10 s; its default is 60 s.
const torchftTimeout = 10

// torchftWorker is recoveryWorker written for torchft: a Manager over a
// gloo process group, torchft's optimizer wrapper, and the gradients
// averaged across the replica groups by the Manager's allreduce, which is
// what torchft's DDP wrapper does in its communication hook. The wrapper
// itself cannot be used with torch 2.15: after a failed allreduce its
// hook raises "AttributeError: 'Future' object has no attribute '_fut'"
// (torchft/ddp.py), and the survivors crash instead of going on. It
// prints each committed step with the number of replica groups that took
// part in it (the world), and stops making progress mid-step where the
// hang file names it.
var torchftWorker = fmt.Sprintf(`import os, sys, time
from datetime import timedelta
import torch
from torchft import Manager, Optimizer, ProcessGroupGloo
print(f"imported={time.time():.6f}", flush=True)
group = int(os.environ["REPLICA_GROUP_ID"])
a = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
hang = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), f"hang.{os.getpid()}")
model = torch.nn.Linear(1000, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
def load_state_dict(sd):
    model.load_state_dict(sd["model"])
    opt.load_state_dict(sd["optim"])
def state_dict():
    return {"model": model.state_dict(), "optim": opt.state_dict()}
manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=%[1]d)), min_replica_size=1,
                  load_state_dict=load_state_dict, state_dict=state_dict,
                  replica_id=f"group{group}", timeout=timedelta(seconds=%[1]d))
print(f"pid={os.getpid()} rank={group}", flush=True)
optimizer = Optimizer(manager, opt)
x = torch.ones(4, 1000)
while True:
    if os.path.exists(hang):  # the hang fault: stuck mid-step
        time.sleep(3600)
    optimizer.zero_grad()  # starts the step's quorum
    model(x).sum().backward()
    for p in model.parameters():
        manager.allreduce(p.grad).wait()
    optimizer.step()  # commits where every replica agrees
    print(f"t={time.time():.6f} step={manager.current_step()} world={manager.num_participants()} attempt={a} rank={group}", flush=True)
    time.sleep(0.1)
`, torchftTimeout)

// torchftScript writes torchftWorker beside the benchmark's worker and
// returns its path.
func (r *recoveryRun) torchftScript() string {
	p := filepath.Join(filepath.Dir(r.script), "torchft_worker.py")
	if _, err := os.Stat(p); err != nil {
		_ = os.WriteFile(p, []byte(torchftWorker), 0o644)
	}
	return p
}

// startLighthouse starts torchft's lighthouse at addr (its recommended
// settings: a quorum of at least one replica group, a 100-ms tick) and
// waits until it listens.
func startLighthouse(ctx context.Context, lighthouse, addr string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, lighthouse, "--min_replicas", "1", "--quorum_tick_ms", "100", "--join_timeout_ms", "10000", "--bind", addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("torchft's lighthouse: %w", err)
	}
	if err := WaitListening(ctx, addr, time.Minute); err != nil {
		stopProcess(cmd)
		return nil, fmt.Errorf("torchft's lighthouse never listened at %s: %w", addr, err)
	}
	return cmd, nil
}

// stopProcess kills cmd's process group and reaps it.
func stopProcess(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

// hitReplica makes the run's fault on the victim's replica group: its
// torchrun and worker killed (node-kill), its worker killed (worker-kill:
// its torchrun restarts it), or its worker stuck mid-step (worker-hang).
func (r *recoveryRun) hitReplica(ag *recoveryAgents) error {
	if r.fault.name == "node-kill" {
		ag.killNode(ag.victim)
		return nil
	}
	return r.hitWorker(ag, ag.victim)
}
