"""A module whose import waits until the file SLOW_IMPORT_GATE names exists,
having created the one SLOW_IMPORT_STARTED names, if any (the torchrun
compatibility tests' slow --warm-imports)."""
import os
import time

_started = os.environ.get("SLOW_IMPORT_STARTED")
if _started:
    open("%s.%d" % (_started, os.getpid()), "w").close()
_gate = os.environ.get("SLOW_IMPORT_GATE")
while _gate and not os.path.exists(_gate):
    time.sleep(0.02)
