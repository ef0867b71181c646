"""A small DDP training loop as people write them: only rank 0 prints,
checkpoints every few steps, knows nothing of gorun. --fault injects one
of the faults gorun's hang and straggler watch must name, on --fault-rank
(a rank, or ranks: 2,3) at --fault-step:

  none        train normally
  sleep       sleep before the step's all_reduce (a hung rank)
  desync      broadcast where the others all_reduce
  dataloader  block in the data loader, outside any collective
  exit0       leave the loop and exit 0 while the others go on
  slow        every step takes --slow-factor times longer from the start
  slowafter   every step from --fault-step on takes --delay seconds longer
  evaluate    compute alone for --delay seconds at --fault-step (an
              evaluation on one rank) while the others wait in all_reduce
  raise       raise an exception at --fault-step (after its optimizer step)
  kill        SIGKILL itself at --fault-step (after its optimizer step): no
              exit handler runs
  loader      (every rank, healthy) each batch takes a data loader's worker
              process --delay seconds of CPU while the rank itself waits
"""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--fault", default="none")
    p.add_argument("--fault-rank", type=lambda v: [int(r) for r in v.split(",")], default=[1])
    p.add_argument("--fault-step", type=int, default=20)
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--delay", type=float, default=0.2)
    p.add_argument("--checkpoint", default="")
    p.add_argument("--print-every", type=int, default=10)
    return p.parse_args()


class BusyDataset(torch.utils.data.Dataset):
    """Each item costs its loader worker `cost` seconds of CPU."""

    def __init__(self, cost, rank):
        self.cost, self.rank = cost, rank

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        end = time.monotonic() + self.cost
        while time.monotonic() < end:
            pass
        g = torch.Generator().manual_seed(self.rank * 100003 + i)
        return torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)


def batches(rank, args):
    if args.fault == "loader":
        yield from torch.utils.data.DataLoader(BusyDataset(args.delay, rank), batch_size=None, num_workers=1)
        return
    g = torch.Generator().manual_seed(rank)
    step = 0
    while True:
        if args.fault == "dataloader" and rank in args.fault_rank and step == args.fault_step:
            time.sleep(3600)  # a shard that never arrives
        yield torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
        step += 1


def main():
    args = parse()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.module.load_state_dict(state["model"])
        start = state["step"]
    data = batches(rank, args)
    mine = rank in args.fault_rank
    for step in range(start, args.steps):
        x, y = next(data)
        work = args.step_time
        if args.fault == "slow" and mine:
            work *= args.slow_factor
        if args.fault == "slowafter" and mine and step >= args.fault_step:
            work += args.delay
        time.sleep(work)  # the model's real work, on a small CPU
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.fault == "exit0" and mine and step == args.fault_step:
            return
        if args.fault == "raise" and mine and step == args.fault_step:
            raise RuntimeError("a fault at step %d" % step)
        if args.fault == "kill" and mine and step == args.fault_step:
            os.kill(os.getpid(), signal.SIGKILL)
        t = loss.detach().clone()
        if step == args.fault_step and mine and args.fault == "evaluate":
            end = time.monotonic() + args.delay
            while time.monotonic() < end:
                model(torch.randn(64, 32))  # busy, printing nothing
        if step == args.fault_step and mine and args.fault == "sleep":
            time.sleep(3600)
        if step == args.fault_step and mine and args.fault == "desync":
            dist.broadcast(t, src=rank)
        else:
            dist.all_reduce(t)
        if rank == 0 and step % args.print_every == 0:
            print(f"step {step} loss {t.item() / dist.get_world_size():.4f}", flush=True)
        if args.checkpoint and rank == 0 and step % 10 == 9:
            torch.save({"model": model.module.state_dict(), "step": step + 1}, args.checkpoint)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
