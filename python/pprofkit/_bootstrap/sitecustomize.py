"""pprofkit's bootstrap for `python -m pprofkit run --subprocesses`: the directory of
this file is first on the PYTHONPATH of the Python processes the profiled program
starts, so that Python imports this module at start-up (site). It runs the
sitecustomize it hides (the next one on sys.path, e.g. Debian's), then starts the
profiler with the options in the environment (PPROFKIT_*). A process that cannot import
pprofkit (another Python version, say) runs unprofiled, with a line on stderr."""

import importlib.machinery
import importlib.util
import os
import sys


def _run_hidden_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # as site.py reports a failing sitecustomize
        sys.modules["sitecustomize"] = ours
        print("Error in sitecustomize (%s); set PYTHONVERBOSE for traceback:\n%s: %s"
              % (spec.origin, type(e).__name__, e), file=sys.stderr)


def _profile():
    if (os.environ.get("PPROFKIT_SUBPROCESSES") or "").lower() not in ("1", "true", "yes", "on"):
        return
    try:
        from pprofkit.__main__ import start_in_subprocess
        start_in_subprocess()
    except Exception as e:
        print("pprofkit: pid %d is not profiled: %s: %s" % (os.getpid(), type(e).__name__, e),
              file=sys.stderr)


_run_hidden_sitecustomize()
_profile()
