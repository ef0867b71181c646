# gorun's warm interpreter (--warm-start; see launcher/warm.go and
# docs/launcher.md). gorun starts it as `PYTHON -u -c THIS MODE TARGET
# IMPORTS ARGS...` with the worker's environment less the variables
# that change from round to round, and file descriptor 3 a socket to
# gorun. It imports IMPORTS (comma-separated) as the script would see
# them imported (sys.argv, sys.path[0], __main__.__file__), tells gorun
# it is ready ("ready" and how many environment variables the imports
# looked up; "failed" and why when an import failed), and waits. On "go"
# it takes the worker's command line and environment and runs TARGET as
# `PYTHON -u TARGET`, `-m TARGET` or `-c TARGET` would: the same sys.argv,
# sys.orig_argv, sys.path[0], __main__, environment, exit codes and
# tracebacks ("warm"). Where it cannot be trusted to (an import failed or
# read a variable that the round changes: "cold" and why; the script is
# not a Python source file it can compile, or its folder moved: "fresh"
# and why), it execs the worker's command line instead: a cold start in
# this process, with Python's own messages.
def _gorun_warm():
    import os, signal

    # A SIGINT before the script runs (gorun stops a worker whose spare
    # still imports, or is being handed the round) ends the process as it
    # would a cold worker that had not started its script: by SIGINT.
    def die_by_sigint(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)

    sigint = signal.getsignal(signal.SIGINT)
    if sigint is signal.default_int_handler:
        signal.signal(signal.SIGINT, die_by_sigint)
    import importlib, json, sys

    ctl = 3
    mode, target, imports = sys.argv[1], sys.argv[2], sys.argv[3]
    args = sys.argv[4:]
    main = sys.modules["__main__"]
    del main.__dict__["_gorun_warm"]

    def send(line):
        # One short line: gorun reads each with a bound.
        data = line.encode(errors="replace")[:4000] + b"\n"
        while data:
            data = data[os.write(ctl, data):]

    # sys.path[0] as the interpreter sets it for MODE (nothing under
    # -P, PYTHONSAFEPATH or -I), and sys.argv and __main__.__file__ as
    # the script's own imports see them.
    safe = getattr(sys.flags, "safe_path", False)

    def script_dir():
        return os.path.dirname(os.path.realpath(target))

    def script_file():
        return target if os.path.isabs(target) else os.path.join(os.getcwd(), target)

    if mode == "script":
        if not safe:
            sys.path[0] = script_dir()
        sys.argv[:] = [target] + args
        main.__file__ = script_file()
    elif mode == "module":
        if not safe:
            sys.path[0] = os.getcwd()
        sys.argv[:] = ["-m"] + args
    else:
        sys.argv[:] = ["-c"] + args
    path0 = sys.path[0]

    # The variables the imports look up (the first module to ask, and the
    # value it saw; "*" for a module that went through all of them), and
    # the ones they set, so that a round that changes what they read gets
    # a cold start, and what they set is set again in the round's.
    reads = {}
    environ_class = type(os.environ)
    get_item, iterate = environ_class.__getitem__, environ_class.__iter__
    skipped = {"os", "collections.abc", "_collections_abc", "importlib", "importlib._bootstrap", "importlib._bootstrap_external"}

    def who():
        f = sys._getframe(2)
        while f is not None and f.f_globals.get("__name__") in skipped:
            f = f.f_back
        return f.f_globals.get("__name__", "?") if f is not None else "?"

    def tracked(self, key):
        if self is os.environ or self is getattr(os, "environb", None):
            name = os.fsdecode(key) if isinstance(key, bytes) else key
            if isinstance(name, str) and name not in reads:
                try:
                    value = get_item(self, key)
                except KeyError:
                    reads[name] = [who(), None]
                    raise
                reads[name] = [who(), os.fsdecode(value) if isinstance(value, bytes) else value]
                return value
        return get_item(self, key)

    def whole(method):
        def tracked_whole(self, *a):
            if (self is os.environ or self is getattr(os, "environb", None)) and "*" not in reads:
                reads["*"] = [who(), None]
            return method(self, *a)
        return tracked_whole

    represent = environ_class.__repr__
    before = dict(os.environb)
    environ_class.__getitem__, environ_class.__iter__, environ_class.__repr__ = tracked, whole(iterate), whole(represent)
    failed = None
    try:
        for name in filter(None, imports.split(",")):
            try:
                importlib.import_module(name)
            except BaseException as e:
                # The exception's type, not its text: it may hold a value.
                failed = "import %s failed: %s" % (name, type(e).__name__)
                if isinstance(e, ImportError) and e.name:
                    failed += " (no module %s)" % e.name if isinstance(e, ModuleNotFoundError) else " (in %s)" % e.name
                break
    finally:
        environ_class.__getitem__, environ_class.__iter__, environ_class.__repr__ = get_item, iterate, represent
    after = dict(os.environb)
    set_by_imports = {k: v for k, v in after.items() if before.get(k) != v}
    unset_by_imports = [k for k in before if k not in after]
    if failed:
        send("failed " + json.dumps(failed[:2000]))
    else:
        send("ready %d" % len(reads))

    # "go N\n" and N bytes: NUL-terminated fields, the count of argv's
    # items, argv (the worker's own command line), then NAME=VALUE items.
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(ctl, 65536)
        if not chunk:
            os._exit(0)  # gorun is gone, or let this spare go
        buf += chunk
    head, buf = buf.split(b"\n", 1)
    size = int(head.split()[1])
    while len(buf) < size:
        chunk = os.read(ctl, 65536)
        if not chunk:
            os._exit(0)
        buf += chunk
    fields = buf[:size].split(b"\0")[:-1]
    n = int(fields[0])
    argv = [os.fsdecode(a) for a in fields[1:1 + n]]
    env = {}
    for item in fields[1 + n:]:
        k, _, v = item.partition(b"=")
        env[k] = v

    # A module imported early that read a variable this round sets
    # otherwise would keep the old value (the values are never shown:
    # some are secrets).
    verdict, why = "warm", ""
    if not failed:
        for name, (module, value) in sorted(reads.items()):
            if name == "*":  # what it saw lacks the round's variables
                failed = "importing %s went through the whole environment, which every round changes" % module
                break
            now = env.get(os.fsencode(name))
            now = None if now is None else os.fsdecode(now)
            if now != value:
                change = "sets" if value is None else "unsets" if now is None else "changes"
                failed = "importing %s read %s, which this round %s: a module imported early would keep the old value" % (module, name, change)
                break
    if failed:
        verdict, why = "cold", failed
    code = None
    if not failed and mode == "script":
        # Python's own messages for what is not a source file it can
        # compile (a folder, a zip, a .pyc, a syntax error): a cold start.
        if not safe and script_dir() != path0:
            verdict, why = "fresh", "the script's folder is %s now, %s when its interpreter started" % (script_dir(), path0)
        else:
            try:
                with open(target, "rb") as f:
                    source = f.read()
                code = compile(source, script_file(), "exec", dont_inherit=True)
            except (OSError, SyntaxError, ValueError) as e:
                verdict, why = "fresh", "%s is not a Python source file that compiles (%s)" % (target, type(e).__name__)
    elif not failed and mode == "module" and not safe and os.getcwd() != path0:
        verdict, why = "fresh", "the working folder moved"
    elif not failed and mode == "code":
        code = compile(target, "<string>", "exec", dont_inherit=True)
    if verdict != "warm":
        send(verdict + " " + json.dumps(why[:2000]))
        os.close(ctl)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # the interpreter's own
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            print("gorun --warm-start: cannot start %s: %s" % (argv[0], e), file=sys.stderr)
            os._exit(127)
    send("warm")
    os.close(ctl)
    if sigint is signal.default_int_handler:
        signal.signal(signal.SIGINT, sigint)  # the script's, as Python sets it
    # The round's environment, then what the imports set in it, as they
    # would have had they run in the round.
    os.environb.clear()
    os.environb.update(env)
    for k in unset_by_imports:
        os.environb.pop(k, None)
    os.environb.update(set_by_imports)
    sys.orig_argv[:] = argv
    # gorun's worker probe (sitecustomize) loaded before the round's
    # environment named its files: start it now.
    probe = getattr(sys.modules.get("sitecustomize"), "_gorun_probe_start", None)
    if probe is not None:
        probe()

    if mode == "script":
        from importlib.machinery import SourceFileLoader

        sys.argv[:] = [target] + args
        path = script_file()
        main.__dict__.update(__file__=path, __cached__=None, __loader__=SourceFileLoader("__main__", path))
    elif mode == "module":
        import runpy

        sys.argv[:] = ["-m"] + args
        run_module = runpy._run_module_as_main
        del runpy
    else:
        sys.argv[:] = ["-c"] + args
    me = sys._getframe().f_code
    try:
        if code is not None:
            exec(code, main.__dict__)
        else:
            run_module(target)
    except SystemExit:
        raise
    except BaseException as e:
        # As the interpreter reports an uncaught exception: the traceback
        # from the program's own first frame, exit code 1, or, for
        # KeyboardInterrupt, death by SIGINT once the other threads and
        # the atexit handlers are done.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code is me:
            tb = tb.tb_next
        e = e.with_traceback(tb)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e, tb)
        if not isinstance(e, KeyboardInterrupt):
            sys.exit(1)
        import atexit, threading

        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


_gorun_warm()
