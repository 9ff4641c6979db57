#!/usr/bin/env bash
# The demo: install packages, build, run taskstorm for 5 seconds (4 threads sampling
# Python-like stacks, every sample naming a new asyncio task, recorded concurrently and
# exported every second into .pb.gz profiles under demo-out/), then show the top
# functions of the last profile.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-demo-out}

bash tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target taskstorm

rm -rf "$out"
./build/taskstorm --threads 4 --seconds 5 --export-ms 1000 --out "$out"

# The last full window: of the two newest profiles (by name, numbers in order), the
# larger, since the very last one, written at stop, holds only the final moments.
last=$(find "$out" -maxdepth 1 -name '*.pb.gz' -printf '%f\n' | sort -V | tail -n 2 |
    while read -r f; do printf '%s %s\n' "$(stat -c %s "$out/$f")" "$out/$f"; done |
    sort -k1,1n | tail -n 1 | cut -d' ' -f2-)
if [[ -z "$last" ]]; then
    echo "demo.sh: taskstorm wrote no profile into $out/" >&2
    exit 1
fi
count=$(find "$out" -maxdepth 1 -name '*.pb.gz' | wc -l)
echo
echo "== $count profile(s) in $out/; the last one: $last"
echo "== go tool pprof -top $last | head -n 25"
report=$(go tool pprof -top "$last")
head -n 25 <<<"$report"
