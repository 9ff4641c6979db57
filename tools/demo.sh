#!/usr/bin/env bash
# The demo: install packages, build the Python package, then profile a real program:
# examples/asyncio_tasks.py (an asyncio service that names every task uniquely, with
# CPU-heavy, waiting and thread-pool work) runs for 12 seconds under
# `python -m pprofkit run`, which writes a .pb.gz profile into demo-out/ every 4 seconds
# and at exit; then `go tool pprof` shows the top functions by CPU time and the task
# names of the last full profile.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-demo-out}
py=/usr/bin/python3 # Debian's, whose headers tools/deps.sh installs

bash tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DPPK_PYTHONS=$(bash tools/pythons.sh | paste -sd ';')" >/dev/null
cmake --build build -j2 --target python

rm -rf "$out"
tag=py$("$py" -c 'import platform; print(platform.python_version())')
PYTHONPATH="build/python/$tag" "$py" -m pprofkit run --out "$out" --export-period 4 \
    examples/asyncio_tasks.py --seconds 12 --report 4

# The last full window: of the two newest profiles (by name, numbers in order), the
# larger, since the very last one, written at exit, holds only the final moments.
last=$(find "$out" -maxdepth 1 -name '*.pb.gz' -printf '%f\n' | sort -V | tail -n 2 |
    while read -r f; do printf '%s %s\n' "$(stat -c %s "$out/$f")" "$out/$f"; done |
    sort -k1,1n | tail -n 1 | cut -d' ' -f2-)
if [[ -z "$last" ]]; then
    echo "demo.sh: the profiler wrote no profile into $out/" >&2
    exit 1
fi
count=$(find "$out" -maxdepth 1 -name '*.pb.gz' | wc -l)
export GOTOOLCHAIN=local
echo
echo "== $count profile(s) in $out/; the last full one: $last"
echo "== go tool pprof -top -sample_index=cpu-time $last | head -n 22"
report=$(go tool pprof -top -sample_index=cpu-time "$last" 2>/dev/null)
head -n 22 <<<"$report"
echo
echo "== go tool pprof -tags $last: the first task names (samples per task)"
tags=$(go tool pprof -tags "$last" 2>/dev/null)
awk '/^ *task name:/ {on = 1; n = 0} on && n < 8 {print; n++} /^$/ {on = 0}' <<<"$tags"
