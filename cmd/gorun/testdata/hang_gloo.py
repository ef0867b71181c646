# A gloo job where rank 1 gets stuck in a Python function while the others
# wait for it in an all-reduce; nothing here knows about gorun.
import subprocess
import time

# Output resets the hang timer. Until the first all-reduce is done (a slow
# import or rendezvous on a loaded machine), a ticker prints: the hang
# this job is about comes after. The ticker is a process of its own: a
# thread cannot print while the import holds the GIL (loading libtorch
# took more than 10 s on 2 busy cores).
ticker = subprocess.Popen(["sh", "-c", "while :; do echo starting; sleep 1; done"])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def stuck_in_data_loading():
    while True:
        time.sleep(0.05)


dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.ones(4)
dist.all_reduce(x)
print(f"rank {rank}: first all-reduce done", flush=True)
ticker.kill()
ticker.wait()
if rank == 1:
    stuck_in_data_loading()
dist.all_reduce(x)
