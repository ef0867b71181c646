"""Tell gorun --hang-timeout that this worker makes progress.

A worker counts as hung when it writes no output and does not touch the
file in GORUN_HEARTBEAT_FILE for the hang timeout. A script that may stay
silent longer calls beat() once per step or so:

    from gorun_heartbeat import beat
    for step in range(steps):
        train_step()
        beat()

Without gorun (no GORUN_HEARTBEAT_FILE) beat() does nothing.
"""
import os


def beat():
    path = os.environ.get("GORUN_HEARTBEAT_FILE")
    if not path:
        return
    with open(path, "a"):
        os.utime(path, None)
