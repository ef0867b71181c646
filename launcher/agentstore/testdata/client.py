"""Drives gorun's agent store with PyTorch's own TCPStore client.

    client.py ops PORT      every store operation this PyTorch has
    client.py train PORT    one rank of a 2-rank gloo job whose store is
                            the agent's (TORCHELASTIC_USE_AGENT_STORE=True,
                            RANK and WORLD_SIZE from the environment)

Prints "ok" at the end; any mismatch raises.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

mode, port = sys.argv[1], int(sys.argv[2])
v2 = int(torch.__version__.split(".")[0]) >= 2


def ops():
    s = dist.TCPStore("127.0.0.1", port, 1, False, timeout=datetime.timedelta(seconds=20))
    s.set("a", "1")
    assert s.get("a") == b"1", s.get("a")
    assert s.add("n", 5) == 5 and s.add("n", -2) == 3 and s.get("n") == b"3"
    assert s.compare_set("cs", "", "first") == b"first"
    assert s.compare_set("cs", "wrong", "second") == b"first"
    assert s.compare_set("cs", "first", "second") == b"second"
    assert s.compare_set("missing", "x", "y") == b"x"
    if hasattr(s, "check"):  # 2.x
        assert s.check(["a", "n"]) and not s.check(["a", "nope"])
    s.wait(["a"])
    s.set_timeout(datetime.timedelta(milliseconds=300))
    try:
        s.wait(["never"])
        raise AssertionError("wait on a missing key returned")
    except Exception as e:  # the client's own timeout
        assert "timeout" in str(e).lower() or "wait" in str(e).lower(), e
    s.set_timeout(datetime.timedelta(seconds=20))
    if v2:  # after a cancelled wait, the connection still works
        assert s.get("a") == b"1"
    n = s.num_keys()
    assert n >= 4, n
    assert s.delete_key("a") and not s.delete_key("a")
    if v2:
        s.append("ap", "x")
        s.append("ap", "y")
        assert s.get("ap") == b"xy"
        s.multi_set(["m1", "m2"], ["v1", "v2"])
        assert s.multi_get(["m1", "m2"]) == [b"v1", b"v2"]
        s.queue_push("q", "one")
        s.queue_push("q", "two")
        assert s.queue_len("q") == 2
        assert s.queue_pop("q") == b"one" and s.queue_pop("q") == b"two"
        assert "m1" in s.list_keys()
    print("ok", flush=True)


def train():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True")
    os.environ.setdefault("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
    dist.barrier()
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    assert t.item() == 3.0, t
    dist.destroy_process_group()
    print("ok", flush=True)


{"ops": ops, "train": train}[mode]()
