# gorun's worker probe. gorun puts this file's folder first on PYTHONPATH
# of Python workers, so that Python loads it at start as sitecustomize,
# for scripts that know nothing of gorun. It loads the sitecustomize it
# shadows, then, in the worker's own process only (not in data-loader or
# other children), starts one daemon thread that every GORUN_PROBE_INTERVAL
# seconds replaces GORUN_PROBE_FILE with a JSON snapshot of the process:
# its main thread's stack, its optimizer steps (PyTorch 2.x) and the
# newest entries of PyTorch's flight recorder (2.x, any backend). When
# the file GORUN_PROBE_REQUEST holds a new request id, it writes every
# thread's stack and the flight recorder in full beside it, without
# stopping the process. It never imports torch itself, never raises, and
# stops writing when gorun's folder is gone. The format is
# docs/hangs.md's; launcher/probe reads it.
import os
import sys


def _private(path, mode="w"):
    """Opens path for writing as a new file only this user may read (0600),
    never through a link left in its place."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o600), mode)


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        try:
            if not d or os.path.abspath(d) == here:
                continue
            path = os.path.join(d, "sitecustomize.py")
            if not os.path.isfile(path):
                continue
            import importlib.util

            spec = importlib.util.spec_from_file_location("_gorun_shadowed_sitecustomize", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except Exception as e:  # the shadowed one failing must not stop the worker
            sys.stderr.write("gorun probe: the sitecustomize at %s failed: %r\n" % (d, e))
        return None
    return None


_shadowed = _chain()


def __getattr__(name):
    # "import sitecustomize" in the script finds this module: the names
    # of the one it shadows are read through it.
    if _shadowed is not None:
        return getattr(_shadowed, name)
    raise AttributeError(name)


class _Probe(object):
    MAX_FRAMES = 16
    MAX_ENTRIES = 64
    MAX_STEP_TIMES = 64

    def __init__(self, path, request, interval):
        self.path, self.request, self.interval = path, request, interval
        self.pid = os.getpid()
        self.steps = 0
        self.step_times = []
        self.first_step = 0  # time of the first optimizer step
        self.saves = 0  # torch.save / torch.distributed.checkpoint.save calls that returned
        self.last_save = 0
        self.steps_at_save = 0
        self.saves_hooked = set()
        self.hooked = False  # looked for the optimizer's hook
        self.step_hook = False  # and registered it
        self.handled = ""
        self.dumped = ""
        import threading

        self.lock = threading.Lock()
        # Set after a checkpoint: the next snapshot is written at once, so
        # a rank killed right after its save still shows it.
        self.wake = threading.Event()

    def on_step(self, *args, **kwargs):
        import time

        self.steps += 1
        now = time.time_ns()
        if not self.first_step:
            self.first_step = now
        self.step_times.append(now)
        if len(self.step_times) > self.MAX_STEP_TIMES:
            del self.step_times[0]

    def hook_optimizer(self):
        optim = sys.modules.get("torch.optim.optimizer")
        if self.hooked or optim is None:
            return
        register = getattr(optim, "register_optimizer_step_post_hook", None)
        if register is None:  # PyTorch 1.x: no global hook
            self.hooked = True
            return
        register(self.on_step)
        self.hooked = self.step_hook = True

    def on_save(self):
        import time

        self.saves += 1
        self.last_save = time.time_ns()
        self.steps_at_save = self.steps
        self.wake.set()

    def hook_saves(self):
        """Wraps torch.save and torch.distributed.checkpoint.save, once
        their modules are loaded, to see the script's checkpoints."""
        for name, attr in (("torch", "save"), ("torch.distributed.checkpoint", "save")):
            mod = sys.modules.get(name)
            if mod is None or name in self.saves_hooked or not callable(getattr(mod, attr, None)):
                continue
            self.saves_hooked.add(name)
            setattr(mod, attr, self.wrap_save(getattr(mod, attr)))

    def wrap_save(self, orig):
        import functools

        @functools.wraps(orig)
        def save(*args, **kwargs):
            out = orig(*args, **kwargs)
            self.on_save()
            return out

        return save

    def stack(self):
        import threading

        frame = sys._current_frames().get(threading.main_thread().ident)
        out = []
        while frame is not None and len(out) < self.MAX_FRAMES:
            code = frame.f_code
            out.append([code.co_filename, frame.f_lineno, code.co_name])
            frame = frame.f_back
        return out

    def distributed(self):
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            return None
        try:
            if not dist.is_available() or not dist.is_initialized():
                return None
            return dist
        except Exception:
            return None

    def recorder_json(self):
        c10d = sys.modules.get("torch._C._distributed_c10d")
        dump = getattr(c10d, "_dump_fr_trace_json", None)
        if dump is None:
            return None
        import json

        try:
            fr = json.loads(dump(True, False))
        except Exception:
            return None
        self.mend_config(fr)
        return fr

    def mend_config(self, fr):
        """PyTorch 2.15's gloo recorder keeps one pg_config, unnamed (""),
        for the group made last: its analyzer and gorun's then cannot tell
        the groups' members. torch.distributed's own table of the groups
        this rank is in replaces it."""
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        world = getattr(c10d, "_world", None)
        try:
            names = dict(getattr(world, "pg_names", {}))
            members = dict(getattr(world, "pg_group_ranks", {}))
        except Exception:
            return
        if not names:
            return
        descs = {}
        for e in fr.get("entries") or []:
            group = e.get("process_group") or ("", "")
            descs[group[0]] = group[1]
        config = {}
        for pg, name in names.items():
            ranks = sorted(members.get(pg, {}).keys())
            config[name] = {"name": name, "desc": descs.get(name, getattr(pg, "group_desc", "")), "ranks": str(ranks)}
        fr["pg_config"] = config

    def snapshot(self):
        import time

        snap = {
            "version": 1,
            "pid": self.pid,
            "time_ns": time.time_ns(),
            "cpu_ns": time.process_time_ns(),
            "stack": self.stack(),
            "steps": self.steps,
            "step_times_ns": list(self.step_times),
            "step_hook": self.step_hook,
            "first_step_ns": self.first_step,
            "saves": self.saves,
            "last_save_ns": self.last_save,
            "steps_at_save": self.steps_at_save,
            "dumped": self.dumped,
        }
        dist = self.distributed()
        if dist is not None:
            try:
                snap["rank"], snap["world_size"] = dist.get_rank(), dist.get_world_size()
            except Exception:
                pass
            fr = self.recorder_json()
            if fr is not None:
                entries = fr.get("entries") or []
                snap["flight_recorder"] = {
                    "pg_config": fr.get("pg_config"),
                    "pg_status": fr.get("pg_status"),
                    "entries": entries[-self.MAX_ENTRIES:],
                }
        return snap

    def write(self, path, data):
        tmp = path + ".tmp"
        with self.lock:
            with _private(tmp) as f:
                f.write(data)
            os.replace(tmp, path)

    def final(self):
        """The last snapshot, as the interpreter exits: what the rank had
        done when it left."""
        import json

        try:
            if os.path.isdir(os.path.dirname(self.path)):
                self.write(self.path, json.dumps(self.snapshot()))
        except Exception:
            pass

    def serve_request(self):
        try:
            with open(self.request) as f:
                req = f.read(64).strip()
        except OSError:
            return
        if not req or req == self.handled:
            return
        self.handled = req
        import faulthandler

        dist = self.distributed()
        out = os.environ.get("GORUN_FR_DUMP_DIR", "")
        stacks = os.path.join(os.path.dirname(self.path), "stacks.txt")
        if dist is not None and out:
            # Beside the flight recorder, which outlives the run's folder.
            os.makedirs(out, mode=0o700, exist_ok=True)
            stacks = os.path.join(out, "stacks_rank_%d.txt" % dist.get_rank())
        try:
            with _private(stacks) as f:
                faulthandler.dump_traceback(file=f, all_threads=True)
        except Exception as e:
            sys.stderr.write("gorun probe: could not write the stacks: %r\n" % (e,))
        c10d = sys.modules.get("torch._C._distributed_c10d")
        pickled = getattr(c10d, "_dump_fr_trace", None)
        if dist is not None and out and pickled is not None:
            try:
                self.dump_recorder(dist, pickled, out, req)
            except Exception as e:
                sys.stderr.write("gorun probe: could not dump the flight recorder: %r\n" % (e,))
        self.dumped = req

    def dump_recorder(self, dist, pickled, out, req):
        """Writes one snapshot of the flight recorder twice: as PyTorch's
        pickle (its analyzer: python -m
        torch.distributed.flight_recorder.fr_trace OUT/pytorch) and as
        gorun's JSON (gorun trace OUT)."""
        import json
        import pickle
        import time

        rank = dist.get_rank()
        fr = pickle.loads(pickled())
        self.mend_config(fr)
        pickled_bytes = pickle.dumps(fr)
        os.makedirs(os.path.join(out, "pytorch"), mode=0o700, exist_ok=True)
        with _private(os.path.join(out, "pytorch", "rank_%d" % rank), "wb") as f:
            f.write(pickled_bytes)
        for e in fr.get("entries") or []:
            e.pop("frames", None)
        fr["rank"], fr["world_size"] = rank, dist.get_world_size()
        fr["reason"] = "gorun request " + req
        fr["time_dumped_ns"] = time.time_ns()
        self.write(os.path.join(out, "fr_trace_rank_%d.json" % rank), json.dumps(fr, default=str))

    def run(self):
        import json

        while True:
            self.wake.wait(self.interval)
            self.wake.clear()
            if not os.path.isdir(os.path.dirname(self.path)):
                return  # gorun's attempt folder is gone
            try:
                self.hook_optimizer()
                self.hook_saves()
                self.serve_request()
                self.write(self.path, json.dumps(self.snapshot()))
            except Exception as e:
                sys.stderr.write("gorun probe: %r; stopped\n" % (e,))
                return


def _gorun_probe_start():
    path = os.environ.get("GORUN_PROBE_FILE", "")
    if not path:
        return
    owner = os.environ.get("GORUN_PROBE_OWNER", "")
    if owner and owner != str(os.getpid()):
        return  # a child of the worker: the worker's own probe reports
    os.environ["GORUN_PROBE_OWNER"] = str(os.getpid())
    try:
        interval = float(os.environ.get("GORUN_PROBE_INTERVAL", "1"))
    except ValueError:
        interval = 1.0
    import threading

    probe = _Probe(path, os.environ.get("GORUN_PROBE_REQUEST", ""), max(interval, 0.05))
    threading.Thread(target=probe.run, name="gorun-probe", daemon=True).start()
    import atexit

    atexit.register(probe.final)


try:
    _gorun_probe_start()
except Exception as _e:
    sys.stderr.write("gorun probe: not started: %r\n" % (_e,))
