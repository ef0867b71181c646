"""A folder that Python runs as a program (python appdir)."""
import sys

print("appdir ran with %s" % sys.argv[1:], flush=True)
