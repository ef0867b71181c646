"""A small FSDP2 training job, written the PyTorch 2.x way, that runs
unchanged under torchrun and gorun, on CPUs (gloo) and NVIDIA GPUs (NCCL).

    gorun --nproc-per-node=3 examples/pytorch/train_fsdp.py --steps 40 --checkpoint ckpt
    gorun --nnodes=2:3 --max-restarts=3 ... examples/pytorch/train_fsdp.py --checkpoint /shared/ckpt

The model (a small MLP) is sharded with fully_shard over a device mesh of
every rank; torch.distributed.checkpoint (DCP) saves the sharded model and
optimizer every --save-every steps, and when gorun asks the job to stop
(gorun_preempt: every rank stops after the same step), to
DIR/step-<N>/, then names it in DIR/latest. A (re)started job resumes from
DIR/latest, whatever its world size now: DCP reshards on load, so a job
that shrinks or grows after a restart goes on where it left off.

The data is synthetic and depends only on the step: every step's global
batch of 48 rows is split evenly between the ranks, so the training is
the same for any world size that divides 48 (1, 2, 3, 4, 6, ...), up to
rounding. Only rank 0 prints. --fail-rank and --fail-step make one rank
raise on the first attempt, to show restarts: the job resumes from the
last checkpoint and ends as an uninterrupted run does.
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
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import (  # noqa: E402
    StateDictOptions, get_model_state_dict, get_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

GLOBAL_BATCH = 48
FEATURES = 16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--checkpoint", metavar="DIR", help="resume from DIR/latest; save there")
    p.add_argument("--save-every", type=int, default=0, help="save every N steps (0: only when asked to stop)")
    p.add_argument("--fail-rank", type=int, default=-1, help="rank that raises on attempt 0 (-1: none)")
    p.add_argument("--fail-step", type=int, default=-1, help="the step at which it raises")
    p.add_argument("--step-time", type=float, default=0.0, help="seconds each step takes at least")
    return p.parse_args()


def batch(step, rank, world):
    """This rank's share of step's global batch: the same data whatever the world size."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
    true_w = torch.linspace(-1, 1, FEATURES)
    y = (x @ true_w).unsqueeze(-1) + 0.01 * torch.randn(GLOBAL_BATCH, 1, generator=g)
    return x[rank::world], y[rank::world]


def latest(ckpt_dir):
    """The step of the newest complete checkpoint in ckpt_dir, or 0."""
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        return 0


def save(ckpt_dir, step, model, opt, rank):
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=os.path.join(ckpt_dir, f"step-{step}"))
    dist.barrier()  # every rank's shard is written
    if rank == 0:
        tmp = os.path.join(ckpt_dir, "latest.tmp")
        with open(tmp, "w") as f:
            f.write(f"{step}\n")
        os.replace(tmp, os.path.join(ckpt_dir, "latest"))


@record
def main():
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if GLOBAL_BATCH % world:
        raise ValueError(f"world size {world} does not divide the global batch of {GLOBAL_BATCH}")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    device = "cpu"
    if use_cuda:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = "cuda"
    mesh = init_device_mesh(device, (world,))

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 1)).to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    start = latest(args.checkpoint) if args.checkpoint else 0
    if start:
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=os.path.join(args.checkpoint, f"step-{start}"))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if rank == 0:
        print(f"world {world} attempt {attempt} " + (f"resumed at step {start}" if start else "from scratch"), flush=True)
    stop = Preemption()

    loss = torch.zeros(())
    for step in range(start, args.steps):
        if args.step_time > 0:
            time.sleep(args.step_time)
        if rank == args.fail_rank and attempt == 0 and step == args.fail_step:
            raise RuntimeError(f"deliberate failure on rank {rank} at step {step}")
        x, y = batch(step, rank, world)
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        done = step + 1
        # A collective at the same point of every step: all ranks stop
        # after the same step. One after the last step is no stop.
        if stop.should_stop(step) and done < args.steps:
            if args.checkpoint:
                save(args.checkpoint, done, model, opt, rank)
            if rank == 0:
                print(f"preempted: saved step {done} to {args.checkpoint}" if args.checkpoint else
                      f"preempted at step {done}: no --checkpoint, nothing saved", flush=True)
            dist.destroy_process_group()
            return
        if args.checkpoint and args.save_every and done % args.save_every == 0 and done < args.steps:
            save(args.checkpoint, done, model, opt, rank)

    # The whole model on rank 0, and the global batch's loss.
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    total = loss.detach().to(device) * (GLOBAL_BATCH // world)
    dist.all_reduce(total)
    if rank == 0:
        checksum = sum(t.abs().sum().item() for t in full.values())
        print(f"final loss={total.item() / GLOBAL_BATCH:.5f} checksum={checksum:.4f} world={world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
