#!/usr/bin/env bash
# Runs CPython's own regression tests for what a profiler could disturb (threads,
# signals, asyncio, subprocesses, fork, frames, the GC) under `python -m pprofkit run`,
# for every interpreter tools/pythons.sh lists whose test package is installed (Debian's
# 3.11: apt-get install libpython3.11-testsuite; pyenv's builds have theirs). Needs the
# extension built in BUILD (default build/). Not part of the test suite: it takes ~5
# minutes a version. Exit status 1 if a version's tests fail.
#
#   bash tools/stdlib_tests.sh [BUILD] [test names...]
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
shift || true
tests=("$@")
if [[ ${#tests[@]} -eq 0 ]]; then
    tests=(test_threading test_thread test_threadsignals test_signal test_asyncio
           test_subprocess test_os test_faulthandler test_sys test_ctypes test_gc
           test_weakref test_generators test_coroutines test_queue test_contextlib_async
           test_concurrent_futures)
fi

status=0
while read -r py; do
    ver=$("$py" -c 'import platform; print(platform.python_version())')
    ext="$build/python/py$ver"
    if [[ ! -d "$ext" ]]; then
        echo "== $py ($ver): no extension in $ext, skipped"
        continue
    fi
    if ! "$py" -c 'import test.libregrtest' 2>/dev/null; then
        echo "== $py ($ver): no test package, skipped"
        continue
    fi
    have=()
    for t in "${tests[@]}"; do
        "$py" -c "import importlib.util as u, sys; sys.exit(not u.find_spec('test.$t'))" \
            2>/dev/null && have+=("$t")
    done
    out=$(mktemp -d)
    echo "== $py ($ver): ${#have[@]} test files under the profiler"
    if ! PYTHONPATH="$ext" "$py" -m pprofkit run --quiet --out "$out" -m test "${have[@]}" \
        > "$out/log" 2>&1; then
        status=1
        tail -n 30 "$out/log"
    else
        grep -E "^(Total tests|Total test files|Result|Tests result):|^All [0-9]+ tests OK" "$out/log"
    fi
    rm -rf "$out"
done < <(bash "$here/tools/pythons.sh")
exit $status
