#!/usr/bin/env bash
# test_decode.sh BUILD_DIR SOURCE_DIR - pprofkit's output, read by independent decoders.
#
# ppk-gen-fixture writes profiles of known content (a small one exercising every feature,
# and 20,000 samples of W1). This script then checks them with readers that share no code
# with pprofkit:
#   - protoc --decode (the protobuf reference implementation) on the raw .pb;
#   - gzip -d and zstd -d: the compressed files decompress to the raw .pb, byte for byte;
#   - go tool pprof -raw / -top on the compressed files;
#   - tests/check_pprof.py compares both decodings with expectations it computes itself
#     (W1 regenerated from its specification in Python);
#   - a second run of the generator gives the same bytes (determinism).
set -euo pipefail

BUILD_DIR=$(cd "${1:?usage: test_decode.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE_DIR=$(cd "${2:?usage: test_decode.sh BUILD_DIR SOURCE_DIR}" && pwd)
PROTO=${PPK_PROFILE_PROTO:-/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto}
GEN="$BUILD_DIR/ppk-gen-fixture"
CHECK="$SOURCE_DIR/tests/check_pprof.py"

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

[ -x "$GEN" ] || fail "$GEN not built"
[ -f "$PROTO" ] || fail "profile.proto not found at $PROTO (package golang-github-google-pprof-dev)"
for tool in protoc gzip zstd python3 go; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppk-decode.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# go tool pprof wants a writable home and cache, and must not look for binaries.
export HOME="$WORK/home" GOCACHE="${GOCACHE:-$WORK/gocache}" GOTOOLCHAIN=local
export PPROF_TMPDIR="$WORK/pprof" PPROF_BINARY_PATH="$WORK/nobinaries"
mkdir -p "$HOME" "$GOCACHE" "$PPROF_TMPDIR" "$PPROF_BINARY_PATH"

step "generate (twice)"
mkdir -p "$WORK/a" "$WORK/b"
"$GEN" "$WORK/a"
"$GEN" "$WORK/b" >/dev/null
for f in small.pb small.pb.gz small.pb.zst edge.pb reset.pb w1.pb w1.pb.gz; do
    [ -s "$WORK/a/$f" ] || fail "$f was not written"
    cmp "$WORK/a/$f" "$WORK/b/$f" || fail "$f differs between two runs (not deterministic)"
done
echo "ok   both runs gave identical bytes"

cd "$WORK/a"

step "decompress with the reference tools"
gzip -dc small.pb.gz > small.from-gz
cmp small.pb small.from-gz || fail "gunzip(small.pb.gz) != small.pb"
gzip -t small.pb.gz || fail "small.pb.gz: bad gzip"
gzip -dc w1.pb.gz > w1.from-gz
cmp w1.pb w1.from-gz || fail "gunzip(w1.pb.gz) != w1.pb"
echo "ok   gzip"
zstd -q -d -c small.pb.zst > small.from-zst
cmp small.pb small.from-zst || fail "zstd -d(small.pb.zst) != small.pb"
echo "ok   zstd"

step "protoc --decode"
PROTO_DIR=$(dirname "$PROTO")
for p in small edge reset w1; do
    protoc --decode=perftools.profiles.Profile -I "$PROTO_DIR" "$(basename "$PROTO")" \
        < "$p.pb" > "$p.txt" 2> "$p.protoc.err" || { cat "$p.protoc.err" >&2; fail "protoc rejected $p.pb"; }
    [ ! -s "$p.protoc.err" ] || { cat "$p.protoc.err" >&2; fail "protoc warned on $p.pb"; }
done
echo "ok   protoc decoded small.pb, edge.pb, reset.pb and w1.pb"

step "go tool pprof"
pprof() { go tool pprof -symbolize=none "$@"; }
pprof -raw small.pb.gz > small.raw 2> small.raw.err || { cat small.raw.err >&2; fail "pprof -raw small"; }
pprof -raw w1.pb.gz > w1.raw 2> w1.raw.err || { cat w1.raw.err >&2; fail "pprof -raw w1"; }
# go tool pprof also reads the uncompressed protobuf.
pprof -raw edge.pb > edge.raw 2>/dev/null || fail "pprof -raw edge.pb"
pprof -raw reset.pb > reset.raw 2>/dev/null || fail "pprof -raw reset.pb"
pprof -raw small.pb > small.raw2 2>/dev/null || fail "pprof -raw small.pb"
cmp small.raw small.raw2 || fail "pprof reads small.pb and small.pb.gz differently"
pprof -top -sample_index=cpu-time w1.pb.gz > w1.top 2>/dev/null || fail "pprof -top w1"
grep -q "pkg.*handler_" w1.top || fail "pprof -top w1: no W1 function in the listing"
pprof -traces small.pb.gz > small.traces 2>/dev/null || fail "pprof -traces small"
grep -q "frames omitted>" small.traces || fail "pprof -traces: no omitted-frames frame"
grep -q "GET /users/:id" small.traces || fail "pprof -traces: no trace endpoint label"
pprof -tags w1.pb.gz > w1.tags 2>/dev/null || fail "pprof -tags w1"
grep -q "Thread-7" w1.tags || fail "pprof -tags w1: no thread name tag"
echo "ok   go tool pprof read every file"

step "check_pprof.py"
python3 "$CHECK" small small.txt small.raw
python3 "$CHECK" edge edge.txt edge.raw
python3 "$CHECK" reset reset.txt reset.raw
python3 "$CHECK" w1 w1.txt w1.raw 20000
echo "PASS"
