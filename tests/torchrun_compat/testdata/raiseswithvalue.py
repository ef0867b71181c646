"""A module whose import fails with a message that holds a variable's value:
gorun's warning must not repeat it (the torchrun compatibility tests)."""
import os

raise ValueError("bad value " + os.environ.get("WARM_TEST_VALUE", ""))
