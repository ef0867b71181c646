# A gloo job where rank 1 gets stuck in a Python function while the others
# wait for it in an all-reduce; nothing here knows about gorun.
import time

import torch
import torch.distributed as dist

# Output resets the hang timer: a slow import (a loaded machine) is not
# the hang this job is about.
print("imported", flush=True)


def stuck_in_data_loading():
    while True:
        time.sleep(0.05)


dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.ones(4)
dist.all_reduce(x)
print(f"rank {rank}: first all-reduce done", flush=True)
if rank == 1:
    stuck_in_data_loading()
dist.all_reduce(x)
