"""python -m pprofkit run [options] (script.py | -m module) [args...]
python -m pprofkit top [--sample-type T] [-n N] FILE...
python -m pprofkit collapsed [--sample-type T] FILE...
python -m pprofkit diff [--sample-type T] [-n N] BEFORE AFTER
python -m pprofkit flame [--sample-type T] [--title TEXT] -o OUT.html FILE...

Runs a Python program under the sampling profiler, like `python -m cProfile`: profiles
(.pb.gz, read by `go tool pprof`) go to a directory every --export-period seconds and at
exit, and a one-line summary is printed at exit. Every option can also come from the
environment (PPROFKIT_* names; the Datadog and Pyroscope variables where they exist).
With --subprocesses, the Python processes the program starts (subprocess, multiprocessing
spawn) profile themselves with the same options, each into files of its own pid: the
options go to them through the environment (PPROFKIT_*), and a sitecustomize module put
first on their PYTHONPATH starts the profiler (a child run with -E, -I or -S ignores
it).

`flame` writes one HTML page (no network needed) with an interactive flame graph of the
files summed; `run --flame OUT.html` writes it at exit from the files this process
wrote (not its subprocesses' nor its forked children's).
"""

import argparse
import io
import marshal
import os
import pkgutil
import runpy
import sys
import types

from . import profiler


def _env(*names):
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


def _boolean(text):
    """True or False for the booleans a variable (or --datadog=, --otlp=) may give, in
    any case; None for another text."""
    t = text.strip().lower()
    return True if t in ("1", "true", "yes", "on") else False if t in (
        "0", "false", "no", "off") else None


def _url_like(text):
    return "://" in text or text.startswith("unix:")


def _url_or_boolean(text):
    return text if _url_like(text) else _boolean(text)


def _size(text):
    """A byte count: 1048576, 64M, 512K, 1G. ValueError if it is not one."""
    t = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if scale > 1 else t) * scale)
    except OverflowError:  # inf, 1e400
        raise ValueError("not a byte count: %r" % text) from None


# run's options that come from the environment when the command line does not give
# them (their parser default is None), read when run starts, not when the parser is
# made (a bad value must not break the other commands): (option, variables, the
# conversion, what a value must be, the default). A variable set and not empty is
# taken, the first one; a value that does not convert is a one-line error.
_FROM_ENV = (
    ("rate", ("PPROFKIT_RATE",), float, "a number", 100.0),
    ("export_period", ("PPROFKIT_EXPORT_PERIOD",), float, "a number", 60.0),
    ("memory_limit", ("PPROFKIT_MEMORY_LIMIT",), _size, "a byte count (64M, ...)", None),
    ("max_frames", ("PPROFKIT_MAX_FRAMES",), int, "an integer", None),
    ("max_tasks_per_tick", ("PPROFKIT_MAX_TASKS_PER_TICK",), int, "an integer", 1000),
    ("cpu_budget", ("PPROFKIT_CPU_BUDGET", "DD_PROFILING_MAX_TIME_USAGE_PCT"), float,
     "a number", 1.0),
    ("datadog", ("PPROFKIT_DATADOG",), _url_or_boolean, "an agent URL or a boolean", None),
    ("datadog", ("DD_PROFILING_ENABLED",), _boolean, "a boolean", None),
    ("otlp", ("PPROFKIT_OTLP",), _url_or_boolean, "a URL or a boolean", None),
) + tuple((flag, ("PPROFKIT_" + flag.upper(),), _boolean, "a boolean", False) for flag in (
    "no_wall", "no_cpu", "no_asyncio_tasks", "no_asyncio_task_hook", "quiet", "subprocesses"))


def _options_from_env(ns):
    """Fills in run's options from the environment (_FROM_ENV); --datadog and --otlp
    become a URL, True, or None (a false boolean: none)."""
    for dest, names, convert, what, default in _FROM_ENV:
        if getattr(ns, dest) is not None:
            continue
        value = default
        name = next((n for n in names if os.environ.get(n)), None)
        if name is not None:
            try:
                value = convert(os.environ[name])
            except ValueError:
                value = None
            if value is None:
                sys.exit("python -m pprofkit run: %s must be %s, not %r" % (
                    name, what, os.environ[name]))
        setattr(ns, dest, value)
    for option in ("datadog", "otlp"):
        value = getattr(ns, option)
        if isinstance(value, str):  # a URL, or --datadog=VALUE, --otlp=VALUE
            value = _url_or_boolean(value)
            if value is None:
                sys.exit("python -m pprofkit run: --%s must be a URL or a boolean, not %r"
                         % (option, getattr(ns, option)))
        setattr(ns, option, value or None)


def _parser():
    p = argparse.ArgumentParser(prog="python -m pprofkit", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a program under the profiler")
    e = os.environ.get
    r.add_argument("--rate", type=float,
                   help="samples per second per thread (PPROFKIT_RATE; default 100)")
    r.add_argument("--export-period", type=float,
                   help="seconds between exports (PPROFKIT_EXPORT_PERIOD; default 60)")
    r.add_argument("--out", default=e("PPROFKIT_OUT", "pprofkit-out"),
                   help="directory of the .pb.gz files (PPROFKIT_OUT; default "
                        "./pprofkit-out; '' for none)")
    r.add_argument("--codec", choices=("gzip", "zstd", "none"),
                   default=e("PPROFKIT_CODEC") or "gzip", help="(PPROFKIT_CODEC)")
    r.add_argument("--memory-limit", type=_size,
                   help="bytes per window, e.g. 64M (PPROFKIT_MEMORY_LIMIT)")
    r.add_argument("--max-frames", type=int,
                   help="deepest stack kept (PPROFKIT_MAX_FRAMES; default 512)")
    r.add_argument("--service", default=_env("PPROFKIT_SERVICE", "DD_SERVICE"),
                   help="service name for uploads (PPROFKIT_SERVICE, DD_SERVICE)")
    r.add_argument("--env", default=_env("PPROFKIT_ENV", "DD_ENV"),
                   help="(PPROFKIT_ENV, DD_ENV)")
    r.add_argument("--version", default=_env("PPROFKIT_VERSION", "DD_VERSION"),
                   help="(PPROFKIT_VERSION, DD_VERSION)")
    r.add_argument("--tags", default=_env("PPROFKIT_TAGS", "DD_TAGS"),
                   help="k:v,k:v for uploads (PPROFKIT_TAGS, DD_TAGS)")
    r.add_argument("--datadog", nargs="?", const=True,
                   metavar="AGENT_URL",
                   help="upload to a Datadog agent: its URL (http://, https://, unix://), "
                        "or none for DD_TRACE_AGENT_URL / DD_AGENT_HOST (PPROFKIT_DATADOG, "
                        "DD_PROFILING_ENABLED)")
    r.add_argument("--pyroscope", metavar="URL",
                   default=_env("PPROFKIT_PYROSCOPE", "PYROSCOPE_SERVER_ADDRESS"),
                   help="upload to Pyroscope / Grafana (PPROFKIT_PYROSCOPE, "
                        "PYROSCOPE_SERVER_ADDRESS; credentials from "
                        "PYROSCOPE_BASIC_AUTH_USER and _PASSWORD or PYROSCOPE_AUTH_TOKEN, "
                        "the tenant from PYROSCOPE_TENANT_ID)")
    r.add_argument("--otlp", nargs="?", const=True, metavar="URL",
                   help="upload OTLP profiles (experimental) to an OpenTelemetry collector: "
                        "its base URL (the path /v1development/profiles is added), or none "
                        "for OTEL_EXPORTER_OTLP_ENDPOINT (PPROFKIT_OTLP)")
    r.add_argument("--no-wall", action="store_true", default=None,
                   help="do not record wall time (PPROFKIT_NO_WALL)")
    r.add_argument("--no-cpu", action="store_true", default=None,
                   help="do not record CPU time (PPROFKIT_NO_CPU)")
    r.add_argument("--no-asyncio-tasks", action="store_true", default=None,
                   help="do not sample the asyncio tasks that wait, only what each thread "
                        "runs (PPROFKIT_NO_ASYNCIO_TASKS)")
    r.add_argument("--no-asyncio-task-hook", action="store_true", default=None,
                   help="do not wrap BaseEventLoop.call_soon (and create_task) to learn "
                        "which asyncio tasks "
                        "moved: every tick visits the tasks instead "
                        "(PPROFKIT_NO_ASYNCIO_TASK_HOOK)")
    r.add_argument("--max-tasks-per-tick", type=int,
                   help="asyncio tasks sampled per tick at most; more are sampled in turn "
                        "(PPROFKIT_MAX_TASKS_PER_TICK; default 1000)")
    r.add_argument("--cpu-budget", type=float, metavar="PERCENT",
                   help="percentage of one core that sampling may take; ticks come later "
                        "when needed (PPROFKIT_CPU_BUDGET, DD_PROFILING_MAX_TIME_USAGE_PCT; "
                        "default 1; 0: no limit)")
    r.add_argument("--quiet", "-q", action="store_true", default=None,
                   help="no summary at exit (PPROFKIT_QUIET)")
    r.add_argument("--flame", metavar="OUT.html", default=e("PPROFKIT_FLAME") or None,
                   help="at exit, write a flame graph page of this process's files "
                        "(PPROFKIT_FLAME; needs --out)")
    r.add_argument("--subprocesses", action="store_true", default=None,
                   help="profile the Python processes the program starts too, each into "
                        "files of its own pid (PPROFKIT_SUBPROCESSES)")
    r.add_argument("-m", dest="module", metavar="MODULE",
                   help="run a module, like python -m")
    r.add_argument("args", nargs=argparse.REMAINDER, help="script.py and its arguments")
    for name, what in (("top", "the functions with the most flat value, as go tool pprof "
                               "-top lists them"),
                       ("collapsed", "folded stacks (root;...;leaf value) for flamegraph.pl "
                                     "and speedscope")):
        v = sub.add_parser(name, help=what + ", summed over the files")
        v.add_argument("--sample-type", metavar="T",
                       help="e.g. cpu-time (default: the profile's default, else the last)")
        if name == "top":
            v.add_argument("-n", type=int, default=20, help="rows (0: all; default 20)")
        v.add_argument("files", nargs="+", metavar="FILE", help="pprof files (.pb.gz, ...)")
    d = sub.add_parser("diff", help="the functions whose flat value changed the most "
                                    "between two profiles")
    d.add_argument("--sample-type", metavar="T")
    d.add_argument("-n", type=int, default=20, help="rows (0: all; default 20)")
    d.add_argument("before")
    d.add_argument("after")
    f = sub.add_parser("flame", help="an HTML page with an interactive flame graph of the "
                                     "files summed")
    f.add_argument("--sample-type", metavar="T",
                   help="the type shown first (default: the profile's default, else the "
                        "last); the page offers every type")
    f.add_argument("--title", help="the page's title (default: the file names)")
    f.add_argument("-o", "--output", required=True, metavar="OUT.html")
    f.add_argument("files", nargs="+", metavar="FILE", help="pprof files (.pb.gz, ...)")
    return p


def view(ns):
    from . import view as v

    try:
        if ns.command == "flame":
            from . import flame

            flame.write(ns.files, ns.output, ns.sample_type, ns.title)
            return 0
        if ns.command == "diff":
            rows, unit = v.diff([v.read_profile(ns.before)], [v.read_profile(ns.after)],
                                ns.sample_type)
            print(v.format_diff(rows, unit, ns.n))
            return 0
        profiles = [v.read_profile(f) for f in ns.files]
        if ns.command == "top":
            rows, total, unit = v.top(profiles, ns.sample_type)
            print(v.format_top(rows, total, unit, ns.n))
        else:
            for stack, value in v.collapsed(profiles, ns.sample_type).items():
                print("%s %d" % (stack, value))
    except (OSError, ValueError, MemoryError) as e:
        print("python -m pprofkit %s: %s" % (ns.command, e), file=sys.stderr)
        return 1
    return 0


def summary_line(s, flame=None):
    deg = s["degradations"]
    files = s["files"]
    where = " in %s" % os.path.dirname(files[0]) if files else ""
    up = "".join(", %s: %d sent, %d dropped" % (
        u["kind"], u["sent"], sum(v for k, v in u.items() if k.startswith("dropped_")))
        for u in s["uploads"])
    st = s["sampler"]
    slowed = "; %d of %d ticks later for the CPU budget" % (
        st["ticks_slowed"], st["ticks"]) if st.get("ticks_slowed") else ""
    return "pprofkit: pid %d, %d samples, %d exports, %d files%s%s, %s%s%s" % (
        s["pid"], s["samples"], s["exports"], len(files), where, up,
        "degradations: " + ", ".join("%s %d" % kv for kv in sorted(deg.items()))
        if deg else "no degradations", slowed, "; flame graph: %s" % flame if flame else "")


def _to_stderr(line):
    """Writes one of run's lines to sys.stderr, or to python's own stderr
    (sys.__stderr__) if the program set sys.stderr to None; nowhere if python started
    without one (not to fd 2: that may be any file opened since) or it is closed.
    Never to stdout, the program's (print's file=None)."""
    stream = sys.stderr if sys.stderr is not None else sys.__stderr__
    if stream is not None:
        try:
            print(line, file=stream, flush=True)
        except (OSError, ValueError):  # closed, or a broken pipe
            pass


def _write_flame(path, files):
    """The page of run --flame; returns path, or None (the reason printed) if it could
    not be written."""
    from . import flame

    try:
        flame.write(files, path)
    except (OSError, ValueError) as e:
        _to_stderr("python -m pprofkit run: --flame %s: %s" % (path, e))
        return None
    return path


def _start(ns):
    """Starts the profiler with run's options; at exit, the flame graph page if asked
    (by this process only: a forked child goes on profiling but leaves the page to the
    parent) and the summary unless quiet."""
    _options_from_env(ns)
    if ns.flame and not ns.out:
        sys.exit("python -m pprofkit run: --flame needs profile files; --out is ''")
    if ns.flame:
        ns.flame = os.path.abspath(ns.flame)  # the program may change directory
    pid = os.getpid()
    try:
        p = profiler.start(
            rate=ns.rate, export_period=ns.export_period, out_dir=ns.out or None,
            codec=ns.codec, memory_limit=ns.memory_limit, max_frames=ns.max_frames,
            wall=not ns.no_wall, cpu=not ns.no_cpu, service=ns.service, env=ns.env,
            version=ns.version, tags=ns.tags, datadog=ns.datadog, pyroscope=ns.pyroscope,
            otlp=ns.otlp, asyncio_tasks=not ns.no_asyncio_tasks,
            asyncio_task_hook=not ns.no_asyncio_task_hook,
            max_tasks_per_tick=ns.max_tasks_per_tick, cpu_budget=ns.cpu_budget)
    except (ValueError, TypeError, OverflowError, OSError) as e:  # an option's value
        sys.exit("python -m pprofkit run: %s" % e)

    def on_stop(s):
        page = None
        if ns.flame and os.getpid() == pid:
            page = _write_flame(ns.flame, s["files"])
        if not ns.quiet:
            _to_stderr(summary_line(s, page))

    p.on_stop = on_stop
    profiler._environment = p  # the program's own start() and stop() leave it running
    return p


BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")


def _export_to_children(ns):
    """Makes the Python processes that this one starts profile themselves as it does:
    the options, resolved, as PPROFKIT_* variables (the output directory absolute: a
    child may run elsewhere), and PYTHONPATH beginning with the bootstrap directory
    (its sitecustomize starts the profiler) and the directory this package is in."""
    opt = {"PPROFKIT_RATE": repr(ns.rate), "PPROFKIT_EXPORT_PERIOD": repr(ns.export_period),
           "PPROFKIT_OUT": os.path.abspath(ns.out) if ns.out else "",
           "PPROFKIT_CODEC": ns.codec, "PPROFKIT_MEMORY_LIMIT": ns.memory_limit,
           "PPROFKIT_MAX_FRAMES": ns.max_frames, "PPROFKIT_SERVICE": ns.service,
           "PPROFKIT_ENV": ns.env, "PPROFKIT_VERSION": ns.version, "PPROFKIT_TAGS": ns.tags,
           # Off said so: a child would otherwise take DD_PROFILING_ENABLED.
           "PPROFKIT_DATADOG": "1" if ns.datadog is True else ns.datadog or "0",
           "PPROFKIT_PYROSCOPE": ns.pyroscope,
           "PPROFKIT_OTLP": "1" if ns.otlp is True else ns.otlp or "0",
           "PPROFKIT_NO_WALL": "1" if ns.no_wall else "",
           "PPROFKIT_NO_CPU": "1" if ns.no_cpu else "", "PPROFKIT_QUIET": "1" if ns.quiet else "",
           "PPROFKIT_NO_ASYNCIO_TASKS": "1" if ns.no_asyncio_tasks else "",
           "PPROFKIT_NO_ASYNCIO_TASK_HOOK": "1" if ns.no_asyncio_task_hook else "",
           "PPROFKIT_MAX_TASKS_PER_TICK": str(ns.max_tasks_per_tick),
           "PPROFKIT_CPU_BUDGET": repr(ns.cpu_budget),
           "PPROFKIT_FLAME": None,  # the page is this process's
           "PPROFKIT_SUBPROCESSES": "1"}
    for k, v in opt.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    package_parent = os.path.dirname(os.path.dirname(BOOTSTRAP))
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and p not in (BOOTSTRAP, package_parent)]
    os.environ["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP, package_parent] + rest)


def start_in_subprocess():
    """The bootstrap's sitecustomize: a Python process started under --subprocesses
    profiles itself with the options in its environment, unless it is `python -m
    pprofkit` itself (whose own options then apply) or multiprocessing's resource
    tracker (which runs none of the program's code)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        args = []
    if any(a == b"-m" and b == b"pprofkit" for a, b in zip(args, args[1:])):
        return
    if any(a.startswith(b"from multiprocessing.resource_tracker import") for a in args):
        return
    _start(_parser().parse_args(["run"]))


def _read_script(target):
    """The script's path (absolute, its __file__ as python makes it; "<stdin>" for
    `-`) and bytes, read before the profiler starts; None for a directory or zip file
    (its __main__ module is run: _find_module). A file that cannot be read is one line
    on stderr and exit status 2, as with python."""
    if target == "-":
        return "<stdin>", sys.stdin.buffer.read()
    path = os.path.abspath(target)
    if pkgutil.get_importer(path) is not None:
        return None
    try:
        with io.open_code(path) as f:
            return path, f.read()
    except OSError as e:
        print("%s: can't open file %r: [Errno %d] %s" % (
            sys.orig_argv[0], path, e.errno, e.strerror), file=sys.stderr)
        sys.exit(2)


class _NotRunnable(Exception):
    """A module that python would refuse to run with one line (runpy's message)."""


def _find_module(find, *args):
    """The module python -m NAME or python DIR_OR_ZIP runs, found before the profiler
    starts: (spec, code), with `find` runpy._get_module_details(NAME) or
    runpy._get_main_module_details() (a directory or zip file's __main__), the
    functions python itself calls (its parent packages imported). What python refuses
    in one line is that line (python's, `sys.executable: ...`) and exit status 1; an
    exception raised by a parent package's import is the program's, reported as python
    reports it."""
    try:
        _, spec, code = find(*args, _NotRunnable)
    except _NotRunnable as e:
        print("%s: %s" % (sys.executable, e), file=sys.stderr)
        sys.exit(1)
    except BaseException as e:
        _uncaught(e)
    return spec, code


def _script_code(path, data):
    """The script's code (source or a .pyc) and its module's attributes, as `python
    script.py` gives them: __file__ absolute, __package__ None (`python -`: source,
    __file__ "<stdin>", the built-in importer as loader)."""
    from importlib import machinery, util

    if path == "<stdin>":
        return (compile(data, path, "exec", dont_inherit=True),
                {"__file__": path, "__cached__": None, "__loader__": machinery.BuiltinImporter})
    pyc = data[:4] == util.MAGIC_NUMBER
    loader = machinery.SourcelessFileLoader if pyc else machinery.SourceFileLoader
    code = marshal.loads(data[16:]) if pyc else compile(data, path, "exec",
                                                        dont_inherit=True)
    return code, {"__file__": path, "__cached__": None, "__loader__": loader("__main__", path)}


def _module_attrs(spec):
    """A -m module's attributes, as python -m gives them (from its spec)."""
    attrs = {"__cached__": spec.cached, "__loader__": spec.loader,
             "__package__": spec.parent, "__spec__": spec}
    if spec.has_location:
        attrs["__file__"] = spec.origin
    return attrs


def _run_main(code, attrs):
    """Runs the program's code in a new module that becomes sys.modules["__main__"] and
    stays it, as python does (the program's threads, exit handlers and pickles find it
    there after its code returned)."""
    main = types.ModuleType("__main__")
    vars(main).update(attrs)
    sys.modules["__main__"] = main
    exec(code, vars(main))


def _uncaught(exc):
    """Raises exc, which ended the program, for python to report as it reports an
    exception that ends a script: sys.excepthook (the program's, if it set one) called
    with the traceback from the program's own frames (this module's and runpy's taken
    off), exit status 1, and for KeyboardInterrupt death by SIGINT after the exit
    handlers (the profiler's last window and summary among them). python calls the
    hook with the whole traceback; a hook of this module's gives the program's hook
    the short one, then puts it back."""
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_globals is globals() or
                              tb.tb_frame.f_globals is vars(runpy)):
        tb = tb.tb_next
    hook = sys.excepthook

    def report(t, v, _):
        sys.excepthook = hook
        v.__traceback__ = sys.last_traceback = tb
        if hasattr(sys, "last_exc"):
            sys.last_exc = v
        try:
            hook(t, v, tb)
        except Exception as e:  # as python reports a hook that fails
            print("Error in sys.excepthook:", file=sys.stderr)
            e.__traceback__ = e.__traceback__.tb_next  # from the hook's own frame
            sys.__excepthook__(type(e), e, e.__traceback__)
            print("\nOriginal exception was:", file=sys.stderr)
            sys.__excepthook__(t, v, tb)

    sys.excepthook = report
    raise exc


def run(ns):
    if ns.module:
        target, argv = ns.module, [ns.module] + ns.args
    elif ns.args:
        target, argv = ns.args[0], ns.args
    else:
        sys.exit("python -m pprofkit run: a script or -m MODULE is required")
    script = None if ns.module else _read_script(target)
    if ns.module:
        module = _find_module(runpy._get_module_details, target)
    elif script is None:
        # A directory or zip file: first in sys.path, as python puts it (-P or not),
        # where python -m left the working directory (or nothing, with -P).
        path = os.path.join(os.getcwd(), target)
        if sys.flags.safe_path:
            sys.path.insert(0, path)
        else:
            sys.path[0] = path
        module = _find_module(runpy._get_main_module_details)
    # As typed, as python leaves it; before start: the program's name is the default
    # service name.
    sys.argv = argv
    _start(ns)
    if ns.subprocesses:
        _export_to_children(ns)
    # The profiler stops at exit (pprofkit.profiler's atexit handler): after the
    # program's non-daemon threads have ended and its own atexit handlers have run.
    try:
        if script is not None:
            if not sys.flags.safe_path:  # python -P, -I: none
                # The script's directory, its symbolic links resolved, as python puts it
                # (instead of the working directory that python -m put there); for
                # stdin, "".
                sys.path[0] = "" if target == "-" else os.path.dirname(
                    os.path.realpath(script[0]))
            _run_main(*_script_code(*script))
        else:
            spec, code = module
            if ns.module:
                sys.argv[0] = spec.origin  # as python -m sets it
            _run_main(code, _module_attrs(spec))
    except SystemExit as e:
        return e.code
    except BaseException as e:
        _uncaught(e)
    return 0


def _program_start(run_parser, args):
    """Where the program's own arguments begin in args (what follows `run`): after -m
    MODULE, or at the script (the first argument that is not an option of run, or the
    one after `--`). What follows is the program's even when it looks like an option,
    as with python -m cProfile (argparse alone would read `-m mod --flag` as run's
    --flag)."""
    options = run_parser._option_string_actions
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m":
            return i + 2
        if a.startswith("-m") and not a.startswith("--"):
            return i + 1  # -mMODULE
        if a == "--":
            return i + 1  # the end of run's options (argparse accepts it last)
        if not a.startswith("-") or a == "-":
            return i
        action = options.get(a.split("=", 1)[0])
        if "=" in a or action is None or action.nargs == 0:
            i += 1
        elif action.nargs == "?":  # --datadog [AGENT_URL]: a URL, else the script
            i += 2 if i + 1 < len(args) and _url_like(args[i + 1]) else 1
        else:
            i += 2
    return i


def main(argv=None):
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    program = None
    if argv[:1] == ["run"]:
        # run's own options end where the program begins; the rest is the program's.
        k = 1 + _program_start(parser._subparsers._group_actions[0].choices["run"],
                               argv[1:])
        argv, program = argv[:k], argv[k:]
    ns = parser.parse_args(argv)
    if ns.command == "run":
        ns.args = program
        return run(ns)
    return view(ns)


if __name__ == "__main__":
    sys.exit(main())
