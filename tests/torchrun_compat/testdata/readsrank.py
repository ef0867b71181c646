"""A module that reads RANK when it is imported: --warm-start must not
import it before the round sets RANK (the torchrun compatibility tests)."""
import os

RANK_AT_IMPORT = os.environ.get("RANK")
