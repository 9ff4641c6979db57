#!/usr/bin/env bash
# test_taskstorm.sh BUILD_DIR SOURCE_DIR - taskstorm runs briefly; its report and files hold up.
#
# Runs taskstorm (2 threads on 2 shards, 2 s, an export every 200 ms, a new task name per
# sample: each file holds both shards' windows), then checks, without trusting its own checks:
#   - the last line of stdout is JSON with samples_flushed == samples_exported > 0,
#     windows > 1, one file per export, no degradation, ok true; one "export" line per
#     export;
#   - tests/check_conservation.py (its own protobuf decoder, cross-checked with protoc)
#     decodes every file: the "samples" values sum to samples_flushed, and every task name
#     is in exactly one sample of one file;
#   - go tool pprof reads the last file and shows W1's functions;
# then a steady-tasks run (every sample in the files, at most 100 task names), a run
# pushing frames by function id (conserved, the same checks of the files, the dictionary
# within W1's 2,000 functions), a run as fast as possible with zstd (conserved, one valid
# file per export), a run uploading to tests/test_upload_receiver.py's otlp mode (its one
# export's request compared with its file by check_otlp.py), and bad arguments.
set -euo pipefail

BUILD_DIR=$(cd "${1:?usage: test_taskstorm.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE_DIR=$(cd "${2:?usage: test_taskstorm.sh BUILD_DIR SOURCE_DIR}" && pwd)
TS="$BUILD_DIR/taskstorm"
CHECK="$SOURCE_DIR/tests/check_conservation.py"

fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$TS" ] || fail "$TS not built"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppk-taskstorm.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export HOME="$WORK/home" GOCACHE="${GOCACHE:-$WORK/gocache}" GOTOOLCHAIN=local
export PPROF_TMPDIR="$WORK/pprof" PPROF_BINARY_PATH="$WORK/nobinaries"
mkdir -p "$HOME" "$GOCACHE" "$PPROF_TMPDIR" "$PPROF_BINARY_PATH"

# json FILE EXPR: evaluates a Python expression over the JSON object `j` on FILE's last line.
json() { python3 -c 'import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(eval(sys.argv[2]))' "$1" "$2"; }

echo "== unique tasks: 2 threads, 2 shards, 2 s, export every 200 ms"
"$TS" --threads 2 --shards 2 --seconds 2 --export-ms 200 --out "$WORK/out" > "$WORK/log" ||
    { cat "$WORK/log"; fail "taskstorm exited with $?"; }
tail -n 4 "$WORK/log"
[ "$(json "$WORK/log" 'j["ok"]')" = True ] || fail "ok is not true"
flushed=$(json "$WORK/log" 'j["samples_flushed"]')
[ "$flushed" -gt 0 ] || fail "no sample flushed"
[ "$(json "$WORK/log" 'j["samples_exported"]')" = "$flushed" ] || fail "samples_exported != samples_flushed"
windows=$(json "$WORK/log" 'j["windows"]')
[ "$windows" -gt 1 ] || fail "windows = $windows, expected more than 1"
exports=$(json "$WORK/log" 'j["exports_to_sinks"]')
[ "$(json "$WORK/log" 'j["files"]')" = "$exports" ] || fail "files != exports"
[ "$(json "$WORK/log" 'sum(j["degraded"].values())')" = 0 ] || fail "degradations: $(json "$WORK/log" 'j["degraded"]')"
for key in window_bytes_max rss_kb_start rss_kb_end; do
    [ "$(json "$WORK/log" "j['$key'] > 0")" = True ] || fail "$key is not positive"
done
[ "$(grep -c '^export ' "$WORK/log")" = "$exports" ] || fail "not one line per export"

mapfile -t files < <(ls "$WORK"/out/taskstorm.*.pb.gz | sort -V)
[ "${#files[@]}" = "$exports" ] || fail "${#files[@]} files in $WORK/out, $exports exports"
[ "$(ls -A "$WORK/out" | wc -l)" = "$exports" ] || fail "other files left in $WORK/out: $(ls -A "$WORK/out")"
python3 "$CHECK" --tally --unique-label "task name" --expect-samples "$flushed" "${files[@]}" \
    > "$WORK/tally" || fail "check_conservation.py --tally"
cat "$WORK/tally"
json "$WORK/tally" 'j["distinct"] == j["samples"] == '"$flushed"' and j["duplicates"] == 0' |
    grep -qx True || fail "task names are not each in exactly one sample"

last=${files[-1]}
for f in "${files[0]}" "$last"; do
    go tool pprof -symbolize=none -raw "$f" > "$WORK/raw" 2>/dev/null || fail "go tool pprof -raw $f"
done
go tool pprof -symbolize=none -top "${files[1]}" > "$WORK/top" 2>/dev/null || fail "go tool pprof -top"
grep -q "pkg.*handler_" "$WORK/top" || fail "go tool pprof -top: no W1 function"
echo "ok   go tool pprof reads the files"

echo "== steady tasks, 2 threads at 3000 samples/s, 1 s"
"$TS" --threads 2 --seconds 1 --rate 3000 --steady-tasks --export-ms 300 \
    --out "$WORK/steady" > "$WORK/steady.log" || { cat "$WORK/steady.log"; fail "steady run"; }
tail -n 1 "$WORK/steady.log"
flushed=$(json "$WORK/steady.log" 'j["samples_flushed"]')
[ "$(json "$WORK/steady.log" 'j["samples_exported"]')" = "$flushed" ] || fail "steady: not conserved"
python3 "$CHECK" --tally --count-label "task name" --expect-samples "$flushed" \
    "$WORK"/steady/taskstorm.*.pb.gz > "$WORK/st" || fail "steady: check_conservation.py --tally"
distinct=$(json "$WORK/st" 'j["distinct"]')
[ "$distinct" -ge 1 ] && [ "$distinct" -le 100 ] || fail "steady: $distinct task names, expected 1..100"
echo "ok   $flushed samples, $distinct task names"

echo "== frames by function id, 2 threads on 2 shards, 1.5 s, export every 100 ms"
"$TS" --threads 2 --shards 2 --seconds 1.5 --export-ms 100 --function-ids \
    --out "$WORK/ids" > "$WORK/ids.log" || { cat "$WORK/ids.log"; fail "function-ids run"; }
tail -n 1 "$WORK/ids.log"
flushed=$(json "$WORK/ids.log" 'j["samples_flushed"]')
[ "$(json "$WORK/ids.log" 'j["ok"] and j["function_ids"] and j["samples_exported"] == j["samples_flushed"] > 0')" = True ] ||
    fail "function-ids: not conserved"
[ "$(json "$WORK/ids.log" '0 < j["functions"] <= 2000 and j["interns"] >= j["functions"]')" = True ] ||
    fail "function-ids: the dictionary's figures"
[ "$(json "$WORK/ids.log" 'sum(j["degraded"].values())')" = 0 ] || fail "function-ids: degradations"
mapfile -t files < <(ls "$WORK"/ids/taskstorm.*.pb.gz | sort -V)
python3 "$CHECK" --tally --unique-label "task name" --expect-samples "$flushed" "${files[@]}" \
    > "$WORK/ids.tally" || fail "function-ids: check_conservation.py --tally"
go tool pprof -symbolize=none -top "${files[1]}" > "$WORK/ids.top" 2>/dev/null ||
    fail "function-ids: go tool pprof -top"
grep -q "pkg.*handler_" "$WORK/ids.top" || fail "function-ids: no W1 function in the top"
echo "ok   $flushed samples, $(json "$WORK/ids.log" 'j["interns"]') interns"

echo "== as fast as possible, 0.3 s, zstd"
"$TS" --threads 2 --seconds 0.3 --rate 0 --export-ms 100 --codec zstd --out "$WORK/fast" \
    > "$WORK/fast.log" || { cat "$WORK/fast.log"; fail "fast run"; }
tail -n 1 "$WORK/fast.log"
[ "$(json "$WORK/fast.log" 'j["samples_exported"] == j["samples_flushed"] > 0 and j["ok"]')" = True ] ||
    fail "fast: not conserved"
n=$(ls "$WORK"/fast/taskstorm.*.pb.zst | wc -l)
[ "$n" = "$(json "$WORK/fast.log" 'j["files"]')" ] || fail "fast: $n .pb.zst files"
zstd -q -t "$WORK"/fast/*.pb.zst || fail "fast: a file is not valid zstd (or no zstd command)"

echo "== --otlp-url: one export to an OTLP receiver, the request checked against the file"
# Debian's python3 has python3-protobuf, which the receiver and check_otlp.py decode with.
PYPB=python3
[ -x /usr/bin/python3 ] && PYPB=/usr/bin/python3
mkdir -p "$WORK/otlp"
"$PYPB" "$SOURCE_DIR/tests/test_upload_receiver.py" otlp \
    '{"gzip":true,"service_name":"taskstorm","save_dir":"'"$WORK/otlp"'","count":1,"limit":60}' \
    > "$WORK/rx.log" &
rx=$!
for _ in $(seq 100); do grep -q '^PORT' "$WORK/rx.log" && break; sleep 0.1; done
port=$(awk '/^PORT/ {print $2}' "$WORK/rx.log")
[ -n "$port" ] || fail "otlp: the receiver did not start"
"$TS" --threads 2 --seconds 1 --export-ms 60000 --out "$WORK/otlp/out" \
    --otlp-url "http://127.0.0.1:$port" > "$WORK/otlp.log" 2> "$WORK/otlp.err" ||
    { cat "$WORK/otlp.log" "$WORK/otlp.err"; fail "otlp: taskstorm exited with $?"; }
wait "$rx" || fail "otlp: the receiver found a bad or missing request"
grep -q "otlp uploads: 1 queued, 1 sent" "$WORK/otlp.err" || { cat "$WORK/otlp.err"; fail "otlp: not sent"; }
"$PYPB" "$SOURCE_DIR/tests/check_otlp.py" --pprof "$WORK"/otlp/out/taskstorm.*.pb.gz \
    -- "$WORK/otlp/req-1.bin" || fail "otlp: the request does not hold the export"

echo "== bad arguments fail"
for args in "--threads 0" "--threads x" "--seconds 0" "--rate -1" "--export-ms 0" \
    "--codec lz4" "--bogus" "--out" "--shards 0" "--shards 65"; do
    # shellcheck disable=SC2086
    if "$TS" $args >/dev/null 2>&1; then fail "taskstorm $args succeeded"; fi
done
"$TS" --help | grep -q usage || fail "--help prints no usage"
echo "PASS"
