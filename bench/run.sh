#!/usr/bin/env bash
# bench/run.sh [BUILD_DIR] - runs the benchmarks that `make bench` runs, from built
# binaries, and writes the results under bench/results/:
#   bench_w1 for steady and storm, frames by strings, by function id one at a time and
#     a stack at a time (--api string, --api id, --api ids), and a stack at a time with
#     the labels prepared (--api ids --labels prepared), one and two threads, each run in its own process (so its peak RSS is
#     its own): a table on stdout and bench/results/w1.json, the list of the JSON
#     objects bench_w1 printed (variant, api, labels, threads, add_ns, add_ns_net,
#     frames_per_sample, ns_per_frame, intern_ns_new/_known, export_ms_encode,
#     export_ms_total, codec, bytes, rss_kb, total_s, checked, and a few more);
#   bench_w3 (W3, deep stacks: 300,000 samples of 64..256 frames over 16,000 functions,
#     an export every 60,000) by strings, by function id and a stack of ids at a time,
#     one and two threads, each in its own process: a table and bench/results/w3.json
#     (the same fields, and ns_per_frame_net, stale_retries); about 35 s for the six runs;
#   bench_otlp (the size of OTLP profiles against pprof for the same windows, W1 and W3,
#     and the time to convert one; totals checked): a table and bench/results/otlp.json;
#   bench_micro (interning, adding a sample), bench_encode (encoding and compressing a
#     window), bench_latency for steady and storm (flush latency under export):
#     their tables on stdout, bench_latency's JSON lines in bench/results/latency.json;
#   bench_python.py (the Python binding's record() and builder paths on W1, 200,000
#     samples, Debian's python3) when the extension is built for it under
#     BUILD_DIR/python/: its table, and its rows merged into bench/results/python.json.
# Everything printed also goes to bench/results/last-run.txt. About 4 minutes on the
# 2-vCPU VM. Not run: bench_soak (minutes; see docs/performance.md, "Benchmarks").
# Not run either: bench/python_overhead.py and the asyncio memory run (minutes each).
# Environment: BENCH_W1_SAMPLES (default 1000000) shortens the W1 runs for a quick look;
# BENCH_PYTHON (default /usr/bin/python3) picks the interpreter of bench_python.py.
# Needs bash and python3 (standard library only); bench_python.py also protoc and zstd
# (it decodes its exports to check them). Nothing is asserted about time; a benchmark
# whose own check fails (bench_w3 decodes every export and checks the samples, values,
# frames and endpoints against what it added; bench_w1 checks the recorder's counts)
# exits 1, which stops this script.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
results=$here/results
samples=${BENCH_W1_SAMPLES:-1000000}
mkdir -p "$results"

for b in bench_w1 bench_w3 bench_otlp bench_micro bench_encode bench_latency; do
    if [[ ! -x $build/$b ]]; then
        echo "run.sh: $build/$b is missing: cmake --build $build --target bench" >&2
        exit 1
    fi
done

exec > >(tee "$results/last-run.txt") 2>&1
echo "bench/run.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, git $(git -C "$here" \
    rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$here" diff --quiet HEAD -- \
    ../src ../include 2>/dev/null || echo ' + uncommitted changes in src/ or include/')"

echo
echo "== bench_w1 (W1, $samples samples, export every 100,000, zstd-1)"
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for variant in steady storm; do
    for api in string id ids ids/prepared; do
        for threads in 1 2; do
            "$build/bench_w1" "--$variant" --api "${api%/*}" --threads "$threads" \
                --samples "$samples" --labels "$([[ $api == */prepared ]] && echo prepared ||
                                                 echo strings)" | tee -a "$lines"
        done
    done
done

python3 - "$lines" "$results/w1.json" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
with open(sys.argv[2], "w") as f:
    json.dump(runs, f, indent=1)
    f.write("\n")
print()
print(f"{'variant':8} {'api':>6} {'labels':>8} {'threads':>7} {'add ns':>8} {'net ns':>8} "
      f"{'ns/frame':>8} {'encode ms':>10} {'export ms':>10} {'codec':>7} {'MB/export':>10} "
      f"{'peak RSS MB':>12} {'total s':>8} {'checked':>7}")
for r in runs:
    print(f"{r['variant']:8} {r['api']:>6} {r['labels']:>8} {r['threads']:>7} {r['add_ns']:>8.0f} "
          f"{r['add_ns_net']:>8.0f} {r['ns_per_frame']:>8.1f} {r['export_ms_encode']:>10.1f} "
          f"{r['export_ms_total']:>10.1f} {r['codec']:>7} {r['bytes'] / 1e6:>10.2f} "
          f"{r['rss_kb'] / 1024:>12.1f} {r['total_s']:>8.2f} {str(r['checked']):>7}")
one = {(r["variant"], r["api"], r["labels"]): r for r in runs if r["threads"] == 1}
for r in runs:
    o = one.get((r["variant"], r["api"], r["labels"]))
    if r["threads"] == 2 and o:
        print(f"{r['variant']} by {r['api']}, labels {r['labels']}: two threads take "
              f"{r['total_s'] / o['total_s']:.2f}x the one-thread time")
for r in runs:
    o = one.get((r["variant"], "string", "strings"))
    if r["api"] == "id" and r["threads"] == 1 and o:
        print(f"{r['variant']}: by id, add_ns is {r['add_ns'] / o['add_ns']:.2f}x the "
              f"string API's (net {r['add_ns_net'] / o['add_ns_net']:.2f}x)")
print(f"written: {sys.argv[2]}")
EOF

echo
echo "== bench_w3 (W3: 300,000 samples of 64..256 frames, export every 60,000, zstd-1)"
: > "$lines"
for api in string id ids; do
    for threads in 1 2; do
        "$build/bench_w3" --api "$api" --threads "$threads" | tee -a "$lines"
    done
done
python3 - "$lines" "$results/w3.json" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
with open(sys.argv[2], "w") as f:
    json.dump(runs, f, indent=1)
    f.write("\n")
print()
print(f"{'api':>6} {'threads':>7} {'add ns':>8} {'net ns':>8} {'ns/frame':>8} {'net/frame':>9} "
      f"{'intern new':>10} {'known':>6} {'stale':>5} {'export ms':>10} {'MB/export':>10} "
      f"{'peak RSS MB':>12} {'total s':>8} {'checked':>7}")
for r in runs:
    print(f"{r['api']:>6} {r['threads']:>7} {r['add_ns']:>8.0f} {r['add_ns_net']:>8.0f} "
          f"{r['ns_per_frame']:>8.1f} {r['ns_per_frame_net']:>9.1f} {r['intern_ns_new']:>10.0f} "
          f"{r['intern_ns_known']:>6.0f} {r['stale_retries']:>5} {r['export_ms_total']:>10.1f} "
          f"{r['bytes'] / 1e6:>10.2f} {r['rss_kb'] / 1024:>12.1f} {r['total_s']:>8.2f} "
          f"{str(r['checked']):>7}")
one = {r["api"]: r for r in runs if r["threads"] == 1}
if "string" in one and "id" in one:
    s, i = one["string"], one["id"]
    print(f"one thread: by id, add_ns is {i['add_ns'] / s['add_ns']:.2f}x the string API's "
          f"(net {i['add_ns_net'] / s['add_ns_net']:.2f}x)")
print(f"written: {sys.argv[2]}")
EOF

echo
echo "== bench_otlp (OTLP vs pprof for the same windows: W1 steady and storm, W3)"
"$build/bench_otlp" | tee "$lines"
grep '^{' "$lines" > "$results/otlp.json"
echo "written: $results/otlp.json (one JSON object a line)"

echo
echo "== bench_micro"
"$build/bench_micro"
echo
echo "== bench_encode"
"$build/bench_encode"
echo
echo "== bench_latency"
: > "$lines"
for variant in steady storm; do
    "$build/bench_latency" "--$variant" | tee -a "$lines"
    echo
done
grep '^{' "$lines" > "$results/latency.json"
echo "written: $results/latency.json (one JSON object a line)"

py=${BENCH_PYTHON:-/usr/bin/python3}
pyver=$("$py" -c 'import platform; print(platform.python_version())' 2>/dev/null || true)
if [[ -n $pyver && -d $build/python/py$pyver/pprofkit ]]; then
    echo
    echo "== bench_python.py (Python $pyver)"
    PYTHONPATH="$build/python/py$pyver" "$py" "$here/bench_python.py" --samples 200000
else
    echo
    echo "== bench_python.py skipped: no extension for ${py} under $build/python/"
fi
