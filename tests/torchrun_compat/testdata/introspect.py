"""What a worker script can see of how it was started (standard library only).

  introspect.py MODE DIR [ARGS...]    (also -m introspect, --run-path)

Writes DIR/a<restart count>.r<rank>.json with the command line, sys.path[0],
__main__'s names, the environment, the signal handlers, the open files and
more; then, by MODE: "ok" exits 0; on rank 1, once rank 0's record is
written, "raise" raises ValueError, "exit N" calls sys.exit(N) and
"interrupt" raises KeyboardInterrupt; "failonce" exits 3 on rank 1 of
attempt 0, "failwhen FILE" too, once FILE exists.
"""
import json
import os
import signal
import sys
import time

# Before anything else: what a warm interpreter imported (the tests warm
# this module; nothing here imports it).
PRELOADED = sorted(m for m in ("xml.dom.minidom", "readsrank", "slowimport") if m in sys.modules)
WARM = "xml.dom.minidom" in PRELOADED


def describe(handler):
    if handler is None:
        return None
    if callable(handler):
        return getattr(handler, "__qualname__", repr(handler))
    return int(handler)


def record(out):
    import __main__

    spec = getattr(__main__, "__spec__", None)
    rec = {
        "warm": WARM,
        "pid": os.getpid(),
        "preloaded": PRELOADED,
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "path0": sys.path[0],
        "main_names": sorted(vars(__main__)),
        "file": getattr(__main__, "__file__", None),
        "cached": getattr(__main__, "__cached__", "unset"),
        "package": getattr(__main__, "__package__", "unset"),
        "spec": None if spec is None else [spec.name, spec.origin],
        "loader": type(getattr(__main__, "__loader__", None)).__name__,
        "name": __name__,
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "signals": {s.name: describe(signal.getsignal(s)) for s in signal.valid_signals() if isinstance(s, signal.Signals)},
        "fds": sorted(os.listdir("/proc/self/fd")),
        "flags": repr(sys.flags),
        "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.encoding],
        "group_leader": os.getpgrp() == os.getpid(),
        "parent_is_launcher": os.getppid() != 1,
    }
    name = "a%s.r%s.json" % (os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"])
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        json.dump(rec, f, sort_keys=True)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def main(argv):
    mode, out = argv[0], argv[1]
    record(out)
    if mode in ("raise", "exit", "interrupt", "failonce", "failwhen"):
        # Rank 1 fails, once rank 0 has written its record and ended.
        if os.environ["RANK"] == "0":
            return
        rank0 = os.path.join(out, "a%s.r0.json" % os.environ["TORCHELASTIC_RESTART_COUNT"])
        deadline = time.monotonic() + 60
        while not os.path.exists(rank0) and time.monotonic() < deadline:
            time.sleep(0.01)
    if mode == "raise":
        raise ValueError("raised on purpose")
    if mode == "exit":
        sys.exit(int(argv[2]))
    if mode == "interrupt":
        raise KeyboardInterrupt
    if mode in ("failonce", "failwhen") and os.environ["RANK"] == "1" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        while mode == "failwhen" and not os.path.exists(argv[2]):
            time.sleep(0.01)
        sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
