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
    try:
        os.utime(path, None, follow_symlinks=False)
    except FileNotFoundError:  # the first beat makes it, private (0600)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600))
