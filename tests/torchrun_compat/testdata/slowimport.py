"""A module whose import waits until the file SLOW_IMPORT_GATE names exists
(the torchrun compatibility tests' slow --warm-imports)."""
import os
import time

_gate = os.environ.get("SLOW_IMPORT_GATE")
while _gate and not os.path.exists(_gate):
    time.sleep(0.02)
