"""Prints what setsenv, imported here (or before, by a warm interpreter),
left in the environment."""
import os

import setsenv  # noqa: F401

print("SET_BY_IMPORT=%s UNSET_BY_IMPORT=%s" % (os.environ.get("SET_BY_IMPORT"), os.environ.get("UNSET_BY_IMPORT")), flush=True)
