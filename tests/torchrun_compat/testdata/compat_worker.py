"""Worker stand-ins for the torchrun compatibility tests (standard library only).

Run as a script, as a module (-m compat_worker) or through --run-path:

  compat_worker.py MODE DIR [ARGS...]

touch DIR [--fail]   a file named by RANK in DIR (PyTorch's bin/test_script.py)
env DIR [TAG]        the worker's whole environment as JSON in DIR
failonce DIR         env, then rank 1 kills itself with SIGKILL on attempt 0
bipolar DIR CODE     env, then odd ranks exit with CODE
sad DIR              rank 1 writes an @record error file and exits 1
sleep DIR            writes its pid to DIR/pid.RANK and sleeps until stopped
stubborn DIR HOW     rank 0 ignores SIGTERM and SIGINT and sleeps; rank 1 then
                     fails and writes the time to DIR/failed_at (HOW fail), or
                     writes DIR/ready and sleeps (HOW sleep)
echo DIR             prints "hello stdout from RANK" to stdout and
                     "hello stderr from RANK" to stderr (upstream's echo1.py)
stdin DIR            prints "read: " and the first line of its stdin
timer DIR            rank 1 overruns a torch.distributed.elastic.timer scope
                     (TORCHELASTIC_TIMER_FILE); rank 0 sleeps 10 s and ends
drift DIR            the workers of GROUP_RANK 1 sleep 8 s, the others end
oddfail DIR          odd ranks exit 1 at once, even ones sleep 20 s
launched DIR         writes whether torch.distributed.is_torchelastic_launched()
                     would say True (TORCHELASTIC_RUN_ID is set)
"""
import json
import os
import signal
import sys
import time


def dump(out, tag=""):
    env = dict(os.environ)
    env["TAG"] = tag
    name = "a%s.r%s.json" % (os.environ.get("TORCHELASTIC_RESTART_COUNT", "x"), os.environ["RANK"])
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(env, f)
    os.rename(tmp, os.path.join(out, name))


def main(argv):
    mode, out = argv[0], argv[1]
    rank = int(os.environ["RANK"])
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if mode == "touch":
        if os.environ.get("TEST_SENTINEL_PARENT") != "FOOBAR":
            sys.exit("TEST_SENTINEL_PARENT not inherited from the launcher")
        if "--fail" in argv[2:]:
            raise RuntimeError("failing on purpose (--fail)")
        open(os.path.join(out, str(rank)), "w").close()
    elif mode == "env":
        dump(out, argv[2] if len(argv) > 2 else "")
    elif mode == "failonce":
        dump(out)
        if rank == 1 and attempt == "0":
            os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "bipolar":
        dump(out)
        if rank % 2 == 1:
            sys.exit(int(argv[2]))
    elif mode == "sad":
        dump(out)
        if rank == 1:
            # What @record writes for an uncaught exception.
            msg = "RuntimeError: sad because i throw"
            data = {"message": {"message": msg, "extraInfo": {
                "py_callstack": "Traceback (most recent call last):\n  File \"compat_worker.py\"\n" + msg + "\n",
                "timestamp": str(int(time.time()))}}}
            with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
                json.dump(data, f)
            sys.exit(1)
    elif mode == "sleep":
        tmp = os.path.join(out, ".pid.%d.tmp" % rank)
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.rename(tmp, os.path.join(out, "pid.%d" % rank))
        time.sleep(600)
    elif mode == "stubborn":
        # Rank 0 ignores SIGTERM and SIGINT, so only SIGKILL after the
        # shutdown timeout ends it; rank 1, once rank 0 ignores them,
        # fails ("fail") and records when, or sleeps ("sleep") after
        # writing DIR/ready.
        if rank == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            open(os.path.join(out, "ignoring"), "w").close()
            time.sleep(600)
        while not os.path.exists(os.path.join(out, "ignoring")):
            time.sleep(0.01)
        if argv[2] == "sleep":
            open(os.path.join(out, "ready"), "w").close()
            time.sleep(600)
        with open(os.path.join(out, "failed_at"), "w") as f:
            f.write(repr(time.time()))
        sys.exit(1)
    elif mode == "timer":
        # torch's worker watchdog client: rank 1 overruns its timer's
        # scope and is reaped by the launcher; rank 0 ends on its own.
        from torch.distributed.elastic.timer import FileTimerClient, configure, expires
        configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
        with expires(after=1, scope="stuck" if rank == 1 else "fine"):
            if rank == 1:
                time.sleep(60)
        time.sleep(10)
    elif mode == "drift":
        # The second node's workers finish 8 s after the first's.
        if os.environ["GROUP_RANK"] == "1":
            time.sleep(8)
    elif mode == "oddfail":
        # Odd ranks fail at once; even ones would sleep 20 s.
        if rank % 2:
            sys.exit(1)
        time.sleep(20)
    elif mode == "echo":
        print("hello stdout from %d" % rank, flush=True)
        print("hello stderr from %d" % rank, file=sys.stderr, flush=True)
    elif mode == "stdin":
        print("read: " + sys.stdin.readline().strip(), flush=True)
    elif mode == "launched":
        with open(os.path.join(out, "launched.%d" % rank), "w") as f:
            f.write(str("TORCHELASTIC_RUN_ID" in os.environ))
    else:
        sys.exit("unknown mode " + mode)
    print("worker %d done" % rank, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
