"""Stop every rank at the same step when gorun asks the job to stop.

gorun asks by creating the file in GORUN_STOP_FILE and, if configured,
sending the signal named in GORUN_STOP_SIGNAL (TERM, USR1, ...); the job
then has a grace period to save a checkpoint and exit 0. Each rank learns
of it at a moment of its own, so should_stop() makes them agree: every
rank calls it at the same point of every step (after the optimizer step),
and it ORs the local flags of all ranks with one all-reduce MAX of a
one-element int tensor. Because every rank runs the same collective at the
same step, all get the same answer at the same step and stop together:

    from gorun_preempt import Preemption   # first: before import torch
    stop = Preemption()          # catches GORUN_STOP_SIGNAL's signal, if set
    for step in range(start, steps):
        train_step()
        if stop.should_stop(step):   # collective: every rank, every step
            save(step + 1)
            break

The cost is one 4-byte all-reduce per check; every=k checks after every
k-th step only. should_stop() also writes the step to GORUN_PROGRESS_FILE
("step=S time=NS first_step=S0 first_time=NS0", replaced atomically).
Without gorun (torchrun: no GORUN_STOP_* variables, set on every rank or
none) it runs no collective and answers False.

Import it before torch: the import itself catches GORUN_STOP_SIGNAL's
signal, so a stop that comes while the rank still imports torch (seconds;
a scheduler's signal may come at any time) is kept for the first check
instead of killing the rank before it could save.
"""
import os, signal, sys, time


def _private(path, mode="w"):
    """Opens path for writing as a new file only this user may read (0600),
    never through a link left in its place."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o600), mode)


# The stop signal seen before (or without) a Preemption: the import's own
# handler keeps it here.
_early = {"armed": False, "flag": False}


def _is_request(file, wait=5.0):
    # gorun makes the stop file before it signals a stop request, the mark
    # FILE.plain before a plain stop. Neither: the signal came from outside
    # (Slurm signals every process of a job, gorun too): wait for its word.
    deadline = time.monotonic() + wait
    while not os.path.exists(file):
        if os.path.exists(file + ".plain") or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _on_signal(sig, frame):
    file = os.environ.get("GORUN_STOP_FILE")
    # A plain stop (the attempt ends after a failure): die of it as before.
    if file and not _is_request(file):
        signal.signal(sig, signal.SIG_DFL), os.kill(os.getpid(), sig)
    # The request is known: more of the same signal (Slurm sends SIGTERM
    # twice, gorun once more) must not kill the rank as it saves or exits
    # (Python restores the default action while it shuts down).
    signal.signal(sig, signal.SIG_IGN)
    _early["flag"] = True


def _arm():
    # Catches GORUN_STOP_SIGNAL's signal once; a bad name raises
    # AttributeError, naming it.
    name = os.environ.get("GORUN_STOP_SIGNAL", "").strip().upper().removeprefix("SIG")
    if name and not _early["armed"]:
        signal.signal(getattr(signal, "SIG" + name), _on_signal)
        _early["armed"] = True
    return bool(name)


_arm()
import torch, torch.distributed as dist  # noqa: E402  (after the handler)


class Preemption:
    def __init__(self, every=1):
        self.every, self.flag, self.first, self.warned, self._last = every, False, None, False, None
        self.file, self.progress = os.environ.get("GORUN_STOP_FILE"), os.environ.get("GORUN_PROGRESS_FILE")
        self.enabled = _arm() or bool(self.file)

    def requested(self):  # this rank's own view
        self.flag = self.flag or _early["flag"] or bool(self.file and os.path.exists(self.file))
        return self.flag

    def report(self, step):  # GORUN_PROGRESS_FILE (internal/workerenv's ProgressLine), replaced atomically; never raises
        now = time.time_ns()
        self.first = self.first or (step, now)
        try:
            if self.progress:
                with _private(self.progress + ".tmp") as f:
                    f.write(f"step={step} time={now} first_step={self.first[0]} first_time={self.first[1]}\n")
                os.replace(self.progress + ".tmp", self.progress)
        except OSError as e:
            if not self.warned:  # said once; training goes on
                self.warned = print(f"gorun_preempt: GORUN_PROGRESS_FILE: {e}", file=sys.stderr) or True

    def should_stop(self, step):  # a collective: every rank, every step
        self.report(step)
        if not self.enabled or (step + 1) % self.every:
            return False
        cuda = dist.is_initialized() and dist.get_backend() == "nccl"
        t = torch.tensor([int(self.requested())], dtype=torch.int32, device="cuda" if cuda else "cpu")
        if dist.is_initialized():
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        # Kept until the next check: PyTorch (seen with 1.13's gloo) may
        # free a collective's tensor on the group's worker thread after the
        # call returned, and freeing one whose Python object is gone takes
        # the GIL. If the group is destroyed then (its destructor holds the
        # GIL and joins that thread), the rank hangs at its very end.
        self._last = t
        return bool(t.item())
