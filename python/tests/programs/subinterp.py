"""Imports pprofkit in a sub-interpreter of the kind each version allows (3.11's, and
the legacy kind of 3.12 and 3.13, which share the main interpreter's GIL) and starts
the profiler there if the import works; prints what happened, then destroys it."""
import sys

try:
    import _interpreters as si  # 3.13

    interp = si.create("legacy")
    run = si.exec
except ImportError:
    import _xxsubinterpreters as si  # 3.11, 3.12

    interp = si.create(isolated=False) if sys.version_info >= (3, 12) else si.create()
    run = si.run_string

CODE = """
import sys
try:
    import pprofkit
except ImportError as e:
    print("refused:", e)
else:
    pprofkit.start(out_dir=sys.argv[1] if len(sys.argv) > 1 else None)
    print("started")
"""

run(interp, CODE)
sys.stdout.flush()
si.destroy(interp)
print("destroyed")
