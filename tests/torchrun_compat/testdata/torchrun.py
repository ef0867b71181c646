"""torchrun, as `torchrun ARGS` runs it, with one fix for Debian's build.

Debian's python3-torch 1.13 on Python 3.11 fails every launch that does not
give both --redirects and --tee (Std.from_str returns None for "0": Python
3.11 only iterates single-bit IntFlag members; meta-llama/llama#86,
docs/sources.md, torchrun: Debian's 1.13). This replaces Std.from_str with one
that parses the same syntax, and then calls torchrun's own main, so that
everything else (argparse, the agent, @record on main) is torchrun's.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api



def _from_str(vm):
    if re.fullmatch(r"[0-3]", vm):
        return api.Std(int(vm))
    return {int(k): api.Std(int(v)) for k, v in (p.split(":") for p in vm.split(","))}


# Guarded: --run-path's workers are multiprocessing "spawn" children, which
# import this file again as __mp_main__.
if __name__ == "__main__":
    if api.Std.from_str("0") is None:
        api.Std.from_str = staticmethod(_from_str)
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
