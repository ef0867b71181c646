"""A worker whose main is decorated with torch's @record: rank 1 raises, and
the error file carries its message to the launcher's summary."""
import sys

print("torch preloaded: %s" % ("torch" in sys.modules), flush=True)

import os  # noqa: E402

from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402


@record
def main():
    if os.environ["RANK"] == "1":
        raise RuntimeError("recorded failure from rank 1")


if __name__ == "__main__":
    main()
