"""A module that sets an environment variable when it is imported, as
libraries that tune their threads do (the torchrun compatibility tests)."""
import os

os.environ["SET_BY_IMPORT"] = "yes"
os.environ.pop("UNSET_BY_IMPORT", None)
