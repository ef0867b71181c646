package bench

// noopWorker does nothing: the launch measurement is the launcher's
// overhead plus each interpreter's start-up.
const noopWorker = "pass\n"

// failOnceWorker: on the first attempt rank 1 records the time and exits
// 1; rank 0 sleeps (so the launcher has to stop it) unless SLEEP_RANK0=0.
// Every worker of a later attempt records the time of its first statement.
// Lines go to $BENCH_TS_FILE as "<event> <rank> <restart> <unix seconds>".
const failOnceWorker = `import time
T0 = time.time()
import os, sys
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
def log(event, t):
    with open(os.environ["BENCH_TS_FILE"], "a") as f:
        f.write(f"{event} {rank} {restart} {t:.6f}\n")
if restart > 0:
    log("start", T0)
    sys.exit(0)
if rank == 1:
    log("fail", time.time())
    sys.exit(1)
time.sleep(float(os.environ.get("SLEEP_RANK0", "30")))
`

// torchrunMain runs torchrun's entry point. Debian's torch 1.13 on Python
// 3.11 crashes on its default --redirects/--tee because Std.from_str looks
// members up by iterating an IntFlag; this builds the member from its value
// instead when that bug is present, and changes nothing else.
const torchrunMain = `import re, sys
from torch.distributed.elastic.multiprocessing import api
if api.Std.from_str("0") is None:
    def from_str(vm):
        if re.fullmatch(r"[0-3]", vm):
            return api.Std(int(vm))
        return {int(k): api.Std(int(v)) for k, v in (p.split(":") for p in vm.split(","))}
    api.Std.from_str = staticmethod(from_str)
from torch.distributed.run import main
sys.argv[0] = "torchrun"
sys.exit(main())
`
