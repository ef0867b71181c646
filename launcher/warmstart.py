# gorun's warm interpreter (--warm-start; see launcher/warm.go and
# docs/launcher.md). gorun starts it as `PYTHON -u -c THIS MODE TARGET
# IMPORTS ARGS...` with the worker's environment less the variables
# that change from round to round, and file descriptor 3 a socket to
# gorun. It imports IMPORTS (comma-separated), tells gorun it is ready
# ("ready" and how many environment variables those imports looked up;
# "failed" and why when an import failed), and waits. On "go" it
# takes the worker's command line and environment and, unless an import
# failed or read a variable that the round gives another value ("cold"
# and why: it then execs the command line, a cold start in this process),
# says "warm" and runs TARGET as `PYTHON -u TARGET`, `-m TARGET` or
# `-c TARGET` would: the same sys.argv, sys.orig_argv, sys.path[0],
# __main__, exit codes and tracebacks.
def _gorun_warm():
    import importlib, json, os, sys

    ctl = 3
    mode, target, imports = sys.argv[1], sys.argv[2], sys.argv[3]
    main = sys.modules["__main__"]
    del main.__dict__["_gorun_warm"]

    # sys.path[0] as the interpreter sets it for MODE, before the imports,
    # which then find what the worker would.
    if mode == "script":
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    elif mode == "module":
        sys.path[0] = os.getcwd()

    def send(line):
        # One short line: gorun reads each with a bound.
        data = line.encode(errors="replace")[:4000] + b"\n"
        while data:
            data = data[os.write(ctl, data):]

    # The variables the imports look up (the first module to ask, and the
    # value it saw), so that gorun can refuse to hand this interpreter a
    # round whose value differs.
    reads = {}
    environ_class = type(os.environ)
    get_item = environ_class.__getitem__
    skipped = {"os", "collections.abc", "_collections_abc", "importlib", "importlib._bootstrap", "importlib._bootstrap_external"}

    def tracked(self, key):
        if self is os.environ or self is getattr(os, "environb", None):
            name = os.fsdecode(key) if isinstance(key, bytes) else key
            if isinstance(name, str) and name not in reads:
                f = sys._getframe(1)
                while f is not None and f.f_globals.get("__name__") in skipped:
                    f = f.f_back
                who = f.f_globals.get("__name__", "?") if f is not None else "?"
                try:
                    value = get_item(self, key)
                except KeyError:
                    reads[name] = [who, None]
                    raise
                reads[name] = [who, os.fsdecode(value) if isinstance(value, bytes) else value]
                return value
        return get_item(self, key)

    environ_class.__getitem__ = tracked
    failed = None
    try:
        for name in filter(None, imports.split(",")):
            try:
                importlib.import_module(name)
            except BaseException as e:
                failed = "import %s failed: %s: %s" % (name, type(e).__name__, e)
                break
    finally:
        environ_class.__getitem__ = get_item
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
    # otherwise would keep the old value: start the worker cold instead,
    # in this process (same pid, files and process group), as gorun would.
    if not failed:
        for name, (who, value) in sorted(reads.items()):
            now = env.get(os.fsencode(name))
            now = None if now is None else os.fsdecode(now)
            if now != value:
                show = lambda v: "unset" if v is None else json.dumps(v)
                failed = "importing %s read %s, %s then and %s in this round: a module imported early would keep the old value" % (
                    who, name, show(value), show(now))
                break
    if failed:
        send("cold " + json.dumps(failed[:2000]))
        os.close(ctl)
        import signal

        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # the interpreter's own
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            print("gorun --warm-start: cannot start %s: %s" % (argv[0], e), file=sys.stderr)
            os._exit(127)
    send("warm")
    os.close(ctl)
    os.environb.clear()
    os.environb.update(env)
    sys.orig_argv[:] = argv
    sys.argv[:] = sys.argv[4:]

    code = None
    if mode == "script":
        from importlib.machinery import SourceFileLoader

        path = os.path.abspath(target)
        try:
            with open(target, "rb") as f:
                source = f.read()
        except OSError as e:
            print("%s: can't open file %r: [Errno %d] %s" % (argv[0], path, e.errno, e.strerror), file=sys.stderr)
            sys.exit(2)
        sys.argv.insert(0, target)
        main.__dict__.update(__file__=path, __cached__=None, __loader__=SourceFileLoader("__main__", path))
        code = compile(source, path, "exec")
    elif mode == "module":
        import runpy

        sys.argv.insert(0, "-m")
        run_module = runpy._run_module_as_main
        del runpy
    else:
        sys.argv.insert(0, "-c")
        code = compile(target, "<string>", "exec")
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
        # from the program's own first frame, exit code 1, or death by
        # SIGINT for KeyboardInterrupt, after the atexit handlers.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code is me:
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if not isinstance(e, KeyboardInterrupt):
            sys.exit(1)
        import atexit, signal

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


_gorun_warm()
