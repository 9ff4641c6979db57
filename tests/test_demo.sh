#!/usr/bin/env bash
# test_demo.sh BUILD_DIR SOURCE_DIR - ppk-demo's exports, read back by independent decoders.
#
# Runs ppk-demo on 25,000 W1 storm samples with a window of 10,000 (exports of 10,000,
# 10,000 and 5,000 samples, gzip) and 12,000 steady samples in one zstd window, then
# checks: one file per export and no temporary file left; each file decompresses (gzip -t,
# zstd -t) and is read by protoc and go tool pprof; each holds exactly the W1 samples of
# its window, aggregated, as tests/check_pprof.py regenerates them in Python (so every
# sample is in exactly one export and the per-thread totals add up); bad arguments fail.
set -euo pipefail

BUILD_DIR=$(cd "${1:?usage: test_demo.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE_DIR=$(cd "${2:?usage: test_demo.sh BUILD_DIR SOURCE_DIR}" && pwd)
PROTO=${PPK_PROFILE_PROTO:-/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto}
DEMO="$BUILD_DIR/ppk-demo"
CHECK="$SOURCE_DIR/tests/check_pprof.py"

fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$DEMO" ] || fail "$DEMO not built"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppk-demo-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export HOME="$WORK/home" GOCACHE="${GOCACHE:-$WORK/gocache}" GOTOOLCHAIN=local
export PPROF_TMPDIR="$WORK/pprof" PPROF_BINARY_PATH="$WORK/nobinaries"
mkdir -p "$HOME" "$GOCACHE" "$PPROF_TMPDIR" "$PPROF_BINARY_PATH"
PROTO_DIR=$(dirname "$PROTO")

decode() { # FILE PREFIX: PREFIX.txt (protoc) and PREFIX.raw (go tool pprof -raw)
    case "$1" in
    *.gz) gzip -t "$1" && gzip -dc "$1" > "$2.pb" ;;
    *.zst) zstd -q -t "$1" && zstd -q -dc "$1" > "$2.pb" ;;
    esac || fail "$1 does not decompress"
    protoc --decode=perftools.profiles.Profile -I "$PROTO_DIR" "$(basename "$PROTO")" \
        < "$2.pb" > "$2.txt" || fail "protoc rejected $1"
    # go tool pprof reads gzip but not zstd: give it the decompressed protobuf then.
    local in=$1
    [[ "$1" == *.zst ]] && in="$2.pb"
    go tool pprof -symbolize=none -raw "$in" > "$2.raw" 2>/dev/null || fail "pprof -raw $in"
}

echo "== storm, 25000 samples, windows of 10000, gzip"
"$DEMO" --storm --samples 25000 --window 10000 --out "$WORK/out" > "$WORK/storm.log"
cat "$WORK/storm.log"
grep -q "^summary: 25000 samples in 3 exports" "$WORK/storm.log" || fail "no summary"
mapfile -t files < <(cd "$WORK/out" && ls -A)
[ "${#files[@]}" = 3 ] || fail "expected 3 files in the output directory, got: ${files[*]}"
start=0
for seq in 1 2 3; do
    f=$(ls "$WORK"/out/demo.*."$seq".pb.gz) || fail "export $seq missing"
    n=$((seq == 3 ? 5000 : 10000))
    decode "$f" "$WORK/storm$seq"
    python3 "$CHECK" w1 "$WORK/storm$seq.txt" "$WORK/storm$seq.raw" "$n" "$start" storm
    start=$((start + n))
done

command -v zstd >/dev/null || fail "the zstd command is not installed (package zstd)"
echo "== steady, 12000 samples, one window, zstd"
"$DEMO" --steady --samples 12000 --window 100000 --codec zstd --out "$WORK/z" \
    > "$WORK/zstd.log"
f=$(ls "$WORK"/z/demo.*.1.pb.zst) || fail "zstd export missing"
[ "$(ls -A "$WORK/z" | wc -l)" = 1 ] || fail "extra files in $WORK/z"
decode "$f" "$WORK/zstd1"
python3 "$CHECK" w1 "$WORK/zstd1.txt" "$WORK/zstd1.raw" 12000 0 steady

echo "== bad arguments fail"
for args in "--samples 0" "--samples x" "--window" "--codec lz4" "--bogus"; do
    # shellcheck disable=SC2086
    if "$DEMO" $args --out "$WORK/bad" >/dev/null 2>&1; then fail "ppk-demo $args succeeded"; fi
done
"$DEMO" --help | grep -q usage || fail "--help prints no usage"
echo "PASS"
