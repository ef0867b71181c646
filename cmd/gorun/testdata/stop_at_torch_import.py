# Runs the script given as its first argument (with the rest as its
# arguments) and, the moment that script starts to import torch, stops
# the job the way a scheduler would: it sends SIGTERM to gorun (its
# parent) once every rank got there, and waits for gorun's stop file
# before it lets the import go on. gorun's own SIGTERM to the ranks then
# comes while they import torch.
import os
import runpy
import signal
import sys
import time


class StopAtTorch:
    def __init__(self):
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.done:
            return None
        self.done = True
        folder, rank = os.path.dirname(os.environ["GORUN_STOP_FILE"]), os.environ["LOCAL_RANK"]
        open(os.path.join(folder, "at-torch." + rank), "w").close()
        if rank == "0":
            world = int(os.environ["LOCAL_WORLD_SIZE"])
            while not all(os.path.exists(os.path.join(folder, "at-torch." + str(r))) for r in range(world)):
                time.sleep(0.01)
            os.kill(os.getppid(), signal.SIGTERM)
        while not os.path.exists(os.environ["GORUN_STOP_FILE"]):
            time.sleep(0.01)
        return None


sys.meta_path.insert(0, StopAtTorch())
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
