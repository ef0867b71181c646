"""A small DistributedDataParallel training job that runs unchanged under
torchrun and gorun, on CPUs (gloo) and on NVIDIA GPUs (NCCL).

    gorun --nproc-per-node=3 examples/pytorch/train_ddp.py --steps 20
    gorun --nproc-per-node=gpu examples/pytorch/train_ddp.py

It fits a linear model to synthetic data, so it needs no data set. Every
rank prints its loss; rank 0 checks at the end that the parameters are the
same on every rank (what DDP guarantees). --fail-rank makes one rank raise
an exception on the first attempt, to show restarts and the failure report;
the @record decorator writes the exception to TORCHELASTIC_ERROR_FILE.

--checkpoint DIR resumes from DIR (model, optimizer, each rank's data
generator, next step; one file ckpt-rank<R>.pt per rank) and saves there
when gorun asks the job to stop (gorun_preempt: every rank stops after the
same step), then exits 0: a resumed run ends with the same final line as
an uninterrupted one.
"""
import argparse
import os
import time

# First: its import catches gorun's stop signal, so a stop that comes while
# torch is still being imported is kept for the first check.
# gorun puts gorun_preempt on every Python worker's path: no file to copy.
try:
    from gorun_preempt import Preemption
except ImportError:  # not under gorun (torchrun): no stop requests to honour
    class Preemption:
        def should_stop(self, step):
            return False

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--fail-rank", type=int, default=-1,
                   help="rank that raises on attempt 0 (-1: none)")
    p.add_argument("--fail-always", action="store_true",
                   help="raise on every attempt, not only the first")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="seconds each step takes at least (a real model's compute; fault drills)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="resume from DIR if it holds a checkpoint; save there when gorun asks the job to stop")
    return p.parse_args()


@record
def main():
    args = parse_args()
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    print(f"rank {rank}/{world} local_rank {local_rank} backend {backend} attempt {attempt}", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).to(device)
    true_w = torch.arange(16, dtype=torch.float32, device=device) / 16
    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)
    ckpt = os.path.join(args.checkpoint, f"ckpt-rank{rank}.pt") if args.checkpoint else None
    state = torch.load(ckpt, map_location="cpu") if ckpt and os.path.exists(ckpt) else None
    if state:
        model.load_state_dict(state["model"])
        gen.set_state(state["generator"])
    ddp = DDP(model, device_ids=[local_rank] if backend == "nccl" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    start, last_loss = (state["step"], state["loss"]) if state else (0, float("nan"))
    if state:
        opt.load_state_dict(state["optimizer"])
    # Every rank must resume at the same step (its own file each).
    span = torch.tensor([start, -start], device=device)
    dist.all_reduce(span, op=dist.ReduceOp.MAX)
    if span[0].item() != -span[1].item():
        raise RuntimeError(f"ranks resume at steps {-span[1].item()} to {span[0].item()}: checkpoints of different steps in {args.checkpoint}")
    if state and rank == 0:
        print(f"resumed at step {start}", flush=True)
    stop = Preemption()

    for step in range(start, args.steps):
        if args.step_time > 0:
            time.sleep(args.step_time)
        if rank == args.fail_rank and (attempt == 0 or args.fail_always) and step == args.steps // 2:
            raise RuntimeError(f"deliberate failure on rank {rank} at step {step}")
        x = torch.randn(args.batch, 16, generator=gen).to(device)
        y = x @ true_w + 0.01 * torch.randn(args.batch, generator=gen).to(device)
        loss = torch.nn.functional.mse_loss(ddp(x).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        last_loss = loss.item()
        print(f"step {step} loss {last_loss:.4f}", flush=True)
        # A collective at the same point of every step: all ranks stop
        # after the same step. One after the last step is no stop.
        if stop.should_stop(step) and step + 1 < args.steps:
            print(f"rank {rank} stopping at step {step + 1}", flush=True)
            if ckpt:
                save(ckpt, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "generator": gen.get_state(), "step": step + 1, "loss": last_loss})
            dist.barrier()  # every rank's file is complete
            if rank == 0:
                print(f"preempted: saved step {step + 1} to {args.checkpoint}" if ckpt else
                      f"preempted at step {step + 1}: no --checkpoint, nothing saved", flush=True)
            dist.destroy_process_group()
            return

    # DDP keeps replicas identical: compare every rank's parameters.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    if rank == 0:
        same = all(torch.equal(gathered[0], g) for g in gathered)
        print(f"parameters identical on all {world} ranks: {same}", flush=True)
        if not same:
            raise RuntimeError("DDP replicas diverged")
        print(f"final loss={last_loss:.6f} checksum={flat.sum().item():.6f} world={world}", flush=True)
    # Every rank reaches the end before any destroys its group: with gloo
    # on torch 1.13, rank 0 once hung in destroy_process_group after the
    # other rank had left (PyTorch's advice for that hang, issue 75097).
    dist.barrier()
    dist.destroy_process_group()


def save(path, state):
    """Write state to path atomically: a temporary file, synced, renamed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
