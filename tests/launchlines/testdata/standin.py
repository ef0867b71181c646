"""A stand-in for a project's training script (standard library only).

Each entry script of testdata calls run(NAME). The worker:

- records its torchrun variables, its arguments and its node in
  $LAUNCHLINES_OUT/n<NODE>.l<LOCAL_RANK>.a<RESTART>.p<PID>.json (NODE is
  $LAUNCHLINES_NODE, the test's index of the launcher that started it);
- joins its world over MASTER_ADDR:MASTER_PORT, as init_process_group's
  env:// does: with $LAUNCHLINES_GLOO=1 by a gloo all-reduce of the ranks
  (torch); otherwise, with the agent's store off
  (TORCHELASTIC_USE_AGENT_STORE=False: worker rank 0 hosts the store), by
  a TCP exchange in which rank 0 listens on MASTER_PORT, every other rank
  connects and sends its rank, and rank 0 checks it heard ranks
  1..WORLD_SIZE-1 once each and answers the sum of all ranks; with the
  agent's store on (TORCHELASTIC_USE_AGENT_STORE=True), through that
  store as PyTorch 2.x's TCPStore client speaks to it: every rank sets
  its key, waits for every rank's and sums them;
- prints "standin: RANK=... WORLD_SIZE=..." to stdout and
  "standin stderr: RANK=..." to stderr.

With $LAUNCHLINES_WAIT_WORLD=N, a worker of a world smaller than N (an
elastic round that closed before every agent joined) does nothing but
wait to be stopped: the agents' next round, with every node, replaces it.
"""
import json
import os
import socket
import struct
import sys
import time

KEYS = [
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
    "LOCAL_WORLD_SIZE", "WORLD_SIZE", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF", "TORCHFT_LIGHTHOUSE", "CUDA_DEVICE_MAX_CONNECTIONS",
]

DEADLINE = 120  # seconds: the machine is small and shared


def meet(rank, world):
    """A stdlib stand-in for init_process_group + all_reduce(rank)."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    end = time.time() + DEADLINE
    if rank == 0:
        if socket.has_dualstack_ipv6():
            srv = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            srv = socket.create_server(("", port))
        srv.settimeout(DEADLINE)
        peers, heard = [], []
        while len(peers) < world - 1:
            conn, _ = srv.accept()
            conn.settimeout(max(1, end - time.time()))
            line = conn.makefile().readline().strip()
            peers.append(conn)
            heard.append(int(line))
        srv.close()
        total = sum(heard)
        if sorted(heard) != list(range(1, world)):
            reply = "bad ranks %s" % sorted(heard)
        else:
            reply = "sum=%d world=%d" % (total, world)
        for c in peers:
            c.sendall((reply + "\n").encode())
            c.close()
        return reply
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.05)
    conn.settimeout(max(1, end - time.time()))
    conn.sendall(("%d\n" % rank).encode())
    reply = conn.makefile().readline().strip()
    conn.close()
    return reply


def gloo(rank, world):
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=DEADLINE))
    t = torch.tensor([rank])
    dist.all_reduce(t)
    dist.barrier()
    dist.destroy_process_group()
    return "sum=%d world=%d" % (t.item(), world)


def store_meet(rank, world):
    """The same through the agent's store, in PyTorch 2.x's TCPStore
    protocol: validate, set standin/<rank>, wait for every rank's key,
    get them and sum."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    conn = socket.create_connection((addr, port), timeout=DEADLINE)
    f = conn.makefile("rb")

    def field(b):
        return struct.pack("<Q", len(b)) + b

    def exact(n):
        b = f.read(n)
        if len(b) != n:
            raise OSError("the store closed the connection")
        return b

    conn.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", os.getpid()))
    if struct.unpack("<I", exact(4))[0] != os.getpid():
        raise OSError("the store did not answer the ping")
    conn.sendall(b"\x01" + field(b"standin/%d" % rank) + field(b"%d" % rank))  # SET
    keys = [b"standin/%d" % r for r in range(world)]
    conn.sendall(b"\x06" + struct.pack("<Q", len(keys)) + b"".join(field(k) for k in keys))  # WAIT
    if exact(1) != b"\x00":
        raise OSError("the store did not end the wait")
    total = 0
    for k in keys:
        conn.sendall(b"\x03" + field(k))  # GET
        n = struct.unpack("<Q", exact(8))[0]
        total += int(exact(n))
    conn.close()
    return "sum=%d world=%d" % (total, world)


def run(name):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    want = os.environ.get("LAUNCHLINES_WAIT_WORLD")
    if want and world < int(want):
        print("standin: RANK=%d WORLD_SIZE=%d: waiting to be replaced by a world of %s" % (rank, world, want), flush=True)
        time.sleep(DEADLINE)
        sys.exit("standin: a world of %d was never replaced by one of %s" % (world, want))
    rec = {k: os.environ[k] for k in KEYS if k in os.environ}
    rec["ENTRY"] = name
    rec["ARGV"] = sys.argv[1:]
    rec["NODE"] = os.environ.get("LAUNCHLINES_NODE", "")
    if os.environ.get("LAUNCHLINES_GLOO") == "1":
        rec["JOINED"] = "gloo " + gloo(rank, world)
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        rec["JOINED"] = "tcp " + meet(rank, world)
    else:
        rec["JOINED"] = "store " + store_meet(rank, world)
    print("standin: RANK=%d WORLD_SIZE=%d LOCAL_RANK=%s GROUP_RANK=%s ROLE_NAME=%s MASTER_ADDR=%s MASTER_PORT=%s %s argv=%s"
          % (rank, world, rec.get("LOCAL_RANK"), rec.get("GROUP_RANK"), rec.get("ROLE_NAME"),
             rec.get("MASTER_ADDR"), rec.get("MASTER_PORT"), rec["JOINED"], rec["ARGV"]), flush=True)
    print("standin stderr: RANK=%d" % rank, file=sys.stderr, flush=True)
    out = os.environ["LAUNCHLINES_OUT"]
    fname = "n%s.l%s.a%s.p%d.json" % (rec["NODE"], rec.get("LOCAL_RANK"), rec.get("TORCHELASTIC_RESTART_COUNT"), os.getpid())
    with open(os.path.join(out, fname + ".tmp"), "w") as f:
        json.dump(rec, f)
    os.rename(os.path.join(out, fname + ".tmp"), os.path.join(out, fname))
    if not rec["JOINED"].startswith(("gloo sum=", "tcp sum=", "store sum=")):
        sys.exit("standin: did not join the world: " + rec["JOINED"])
