"""A distributed sum over gloo, as PyTorch's elastic agent tests' _dist_sum.

  distsum.py DIR [TAG] [--init-method=URL]

Every worker joins the process group (env:// unless --init-method), all-reduces
its global rank and checks the sum is 0 + 1 + ... + WORLD_SIZE-1; then it
writes its torchrun variables and the sum to DIR/r<RANK>.json (TAG names the
agent that started it).
"""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist


def main(argv):
    out = argv[0]
    tag = ""
    init = "env://"
    for a in argv[1:]:
        if a.startswith("--init-method="):
            init = a.split("=", 1)[1]
        else:
            tag = a
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend="gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.tensor(rank)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    dist.barrier()
    dist.destroy_process_group()
    keys = ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
            "WORLD_SIZE", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE"]
    rec = {k: os.environ[k] for k in keys if k in os.environ}
    rec["TAG"] = tag
    rec["SUM"] = str(t.item())
    with open(os.path.join(out, "r%d.json" % rank), "w") as f:
        json.dump(rec, f)
    want = sum(range(world))
    if t.item() != want:
        sys.exit("rank sum %d, want %d" % (t.item(), want))


if __name__ == "__main__":
    main(sys.argv[1:])
