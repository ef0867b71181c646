import sys, os
print("later ran", "torch" in sys.modules, os.environ["TORCHELASTIC_RESTART_COUNT"], sys.path[0])
