#!/usr/bin/env bash
# The demo: install packages, build, run ppk-demo (a synthetic workload recorded into
# .pb.gz profiles under demo-out/), then show the top functions of the last profile.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-demo-out}

bash tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target ppk-demo

rm -rf "$out"
./build/ppk-demo --out "$out"

# The newest profile (by time written, then by name with numbers in order).
last=$(find "$out" -maxdepth 1 -name '*.pb.gz' -printf '%T@ %p\n' |
    sort -k1,1n -k2,2V | tail -n 1 | cut -d' ' -f2-)
if [[ -z "$last" ]]; then
    echo "demo.sh: ppk-demo wrote no profile into $out/" >&2
    exit 1
fi
count=$(find "$out" -maxdepth 1 -name '*.pb.gz' | wc -l)
echo
echo "== $count profile(s) in $out/; the last one: $last"
echo "== go tool pprof -top $last | head -n 25"
report=$(go tool pprof -top "$last")
head -n 25 <<<"$report"
