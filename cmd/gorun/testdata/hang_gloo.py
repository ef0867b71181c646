# A gloo job where rank 1 gets stuck in a Python function while the others
# wait for it in an all-reduce; nothing here knows about gorun.
import threading
import time

# Output resets the hang timer. Until the first all-reduce is done (a slow
# import or rendezvous on a loaded machine), a ticker prints: the hang
# this job is about comes after.
ready = threading.Event()


def tick():
    while not ready.wait(1):
        print("starting", flush=True)


ticker = threading.Thread(target=tick, daemon=True)
ticker.start()

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
ready.set()
ticker.join()
if rank == 1:
    stuck_in_data_loading()
dist.all_reduce(x)
