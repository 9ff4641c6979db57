#!/usr/bin/env bash
# test_pprofkit_cmd.sh BUILD_DIR SOURCE_DIR - the pprofkit command, number for number
# against go tool pprof.
#
# Profiles from two producers:
#   - pprofkit's own (ppk-gen-fixture: the "small" profile with an unsymbolized frame in a
#     mapping, a cut stack, labels; W1's 20,000 samples; a window after a reset), and
#   - Go's runtime/pprof (tests/pprof_producer.go, built here with Debian's go: a CPU
#     profile with inlined frames, a heap profile with four sample types), run twice.
# For each set of files and each sample type, `pprofkit top --exact -n 0` must list the
# same functions, in the same order, with the same flat and cum values and the same total
# as `go tool pprof -top` (-unit=ns or -unit=B: exact numbers; inline labels ignored).
# `pprofkit collapsed` must sum to top's total and, by leaf, to each function's flat;
# `pprofkit diff` must give each function's change as go tool pprof -diff_base does.
# Then errors: usage (exit 2), unreadable input (exit 1, the message naming the field and
# the byte offset), an unknown sample type (1); and --help.
set -euo pipefail

BUILD_DIR=$(cd "${1:?usage: test_pprofkit_cmd.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE_DIR=$(cd "${2:?usage: test_pprofkit_cmd.sh BUILD_DIR SOURCE_DIR}" && pwd)
PK="$BUILD_DIR/pprofkit"
GEN="$BUILD_DIR/ppk-gen-fixture"

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

[ -x "$PK" ] || fail "$PK not built"
[ -x "$GEN" ] || fail "$GEN not built"
for tool in go python3; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppk-cmd.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# go wants a writable home and cache, no network, no binaries to symbolize with; an ASan
# runtime preloaded for the tests is not for Go.
export HOME="$WORK/home" GOCACHE="${GOCACHE:-$WORK/gocache}" GOTOOLCHAIN=local
export GOFLAGS= GOPROXY=off GO111MODULE=off
export PPROF_TMPDIR="$WORK/pprof" PPROF_BINARY_PATH="$WORK/nobinaries"
unset LD_PRELOAD
mkdir -p "$HOME" "$GOCACHE" "$PPROF_TMPDIR" "$PPROF_BINARY_PATH"

step "profiles: pprofkit's and Go's"
mkdir -p "$WORK/ppk" "$WORK/go1" "$WORK/go2"
"$GEN" "$WORK/ppk" >/dev/null
go build -o "$WORK/producer" "$SOURCE_DIR/tests/pprof_producer.go" || fail "go build"
"$WORK/producer" "$WORK/go1"
"$WORK/producer" "$WORK/go2"
echo "ok   $(ls "$WORK/ppk" "$WORK/go1" | grep -c pb) files"

cat > "$WORK/compare.py" <<'EOF'
"""compare.py top|collapsed|diff ... : pprofkit's output against go tool pprof's."""
import re
import sys


def go_number(s):
    m = re.match(r"^(-?[0-9]+)(ns|B)?$", s)
    if not m:
        sys.exit("not an exact go tool pprof number: %r" % s)
    return int(m.group(1))


def go_rows(path):
    """[(name, flat, cum)] and the total of a go tool pprof -top listing."""
    rows, total, header = [], None, False
    for line in open(path):
        m = re.match(r"Showing nodes accounting for .*, .* of (\S+) total", line)
        if m:
            total = go_number(m.group(1))
        elif line.split()[:1] == ["flat"]:
            header = True
        elif header and line.strip():
            p = line.split(None, 5)
            name = re.sub(r" \((partial-)?inline\)$", "", p[5].rstrip("\n"))
            rows.append((name, go_number(p[0]), go_number(p[3])))
    if total is None:
        sys.exit("%s: no total in go tool pprof's listing" % path)
    return rows, total


def my_rows(path):
    lines = open(path).read().splitlines()
    m = re.match(r"Showing (\d+) of (\d+) functions; total (-?\d+) \(.*\)$", lines[0])
    if not m or lines[1].split() != ["flat", "flat%", "sum%", "cum", "cum%", "name"]:
        sys.exit("%s: not pprofkit top's header: %r" % (path, lines[:2]))
    rows = []
    for line in lines[2:]:
        p = line.split(None, 5)
        rows.append((p[5], int(p[0]), int(p[3])))
    if len(rows) != int(m.group(1)) or m.group(1) != m.group(2):
        sys.exit("%s: %d rows, header says %s of %s" % (path, len(rows), m.group(1), m.group(2)))
    return rows, int(m.group(3))


def top(mine_path, go_path, what):
    mine, my_total = my_rows(mine_path)
    go, go_total = go_rows(go_path)
    mine = [r for r in mine if r[1] or r[2]]
    go = [r for r in go if r[1] or r[2]]
    if mine != go or my_total != go_total:
        for a, b in zip(mine + [None] * len(go), go + [None] * len(mine)):
            if a != b:
                print("  first difference: pprofkit %r, go %r" % (a, b))
                break
        sys.exit("%s: pprofkit top (%d rows, total %d) differs from go tool pprof "
                 "(%d rows, total %d)" % (what, len(mine), my_total, len(go), go_total))
    print("ok   %s: %d functions, total %d, as go tool pprof" % (what, len(mine), my_total))


def collapsed(folded_path, mine_path, what):
    rows, total = my_rows(mine_path)
    by_leaf, s = {}, 0
    for line in open(folded_path):
        stack, value = line.rstrip("\n").rsplit(" ", 1)
        s += int(value)
        leaf = stack.split(";")[-1]
        by_leaf[leaf] = by_leaf.get(leaf, 0) + int(value)
    flat = {name: f for name, f, _ in rows if f}
    by_leaf = {k: v for k, v in by_leaf.items() if v}
    if s != total or by_leaf != flat:
        sys.exit("%s: collapsed sums to %d (top's total %d); by leaf equal to flat: %s"
                 % (what, s, total, by_leaf == flat))
    print("ok   %s: collapsed sums to the total, and by leaf to each flat" % what)


def diff(mine_path, go_path, what):
    lines = open(mine_path).read().splitlines()
    m = re.match(r"(\d+) functions changed; showing (\d+)$", lines[0])
    if not m or m.group(1) != m.group(2):
        sys.exit("%s: not pprofkit diff's header: %r" % (what, lines[0]))
    mine = {}
    for line in lines[2:]:
        before, after, change, name = line.split(None, 3)
        if int(after) - int(before) != int(change):
            sys.exit("%s: %s: change %s is not %s - %s" % (what, name, change, after, before))
        mine[name] = int(change)
    go = {name: flat for name, flat, _ in go_rows(go_path)[0] if flat}
    if mine != go:
        sys.exit("%s: pprofkit diff %r, go -diff_base %r" % (what, mine, go))
    print("ok   %s: %d functions changed, as go tool pprof -diff_base" % (what, len(mine)))


globals()[sys.argv[1]](*sys.argv[2:])
EOF

# sample_types FILE: the file's sample types, from pprofkit's own error message.
sample_types() {
    { "$PK" top --sample-type '?' "$1" 2>&1 >/dev/null || true; } |
        sed -n 's/.*(there are: \(.*\))$/\1/p' | tr -d ','
}

n=0
# compare_top FILE...: every sample type of the files, top and collapsed.
compare_top() {
    local types t unit_flag
    types=$(sample_types "$1")
    [ -n "$types" ] || fail "no sample types found in $1"
    for t in $types; do
        n=$((n + 1))
        "$PK" top --exact -n 0 --sample-type "$t" "$@" > "$WORK/mine.$n" || fail "pprofkit top $t $*"
        unit=$(sed -n '1s/.*(\(.*\))$/\1/p' "$WORK/mine.$n")
        case "$unit" in
        nanoseconds) unit_flag=(-unit=ns) ;;
        bytes) unit_flag=(-unit=B) ;;
        *) unit_flag=() ;;
        esac
        go tool pprof -symbolize=none -top -nodecount=1000000 -nodefraction=0 \
            -edgefraction=0 -sample_index="$t" "${unit_flag[@]}" "$@" > "$WORK/go.$n" \
            2> "$WORK/go.$n.err" || { cat "$WORK/go.$n.err" >&2; fail "go tool pprof $t $*"; }
        python3 "$WORK/compare.py" top "$WORK/mine.$n" "$WORK/go.$n" \
            "top $t of $(cd "$WORK" && ls $(printf '%s\n' "$@" | sed "s|$WORK/||") | tr '\n' ' ')"
        "$PK" collapsed --sample-type "$t" "$@" > "$WORK/folded.$n" || fail "pprofkit collapsed"
        python3 "$WORK/compare.py" collapsed "$WORK/folded.$n" "$WORK/mine.$n" "collapsed $t"
    done
}

step "top and collapsed: pprofkit's profiles"
compare_top "$WORK/ppk/small.pb.gz"
compare_top "$WORK/ppk/w1.pb.gz"
compare_top "$WORK/ppk/reset.pb"
compare_top "$WORK/ppk/small.pb" "$WORK/ppk/small.pb.gz" # two files, summed

step "top and collapsed: Go's profiles"
compare_top "$WORK/go1/cpu.pb.gz"
compare_top "$WORK/go1/heap.pb.gz"
compare_top "$WORK/go1/cpu.pb.gz" "$WORK/go2/cpu.pb.gz"

step "zstd: the same as gzip"
"$PK" top --exact -n 0 "$WORK/ppk/small.pb.zst" > "$WORK/zst.top"
"$PK" top --exact -n 0 "$WORK/ppk/small.pb.gz" > "$WORK/gz.top"
cmp "$WORK/zst.top" "$WORK/gz.top" || fail "small.pb.zst and small.pb.gz list differently"
echo "ok   small.pb.zst"

step "diff against go tool pprof -diff_base"
for t in cpu:cpu.pb.gz alloc_space:heap.pb.gz inuse_objects:heap.pb.gz; do
    type=${t%%:*} file=${t#*:}
    unit_flag=()
    [ "$type" = cpu ] && unit_flag=(-unit=ns)
    [ "$type" = alloc_space ] && unit_flag=(-unit=B)
    "$PK" diff --exact -n 0 --sample-type "$type" "$WORK/go1/$file" "$WORK/go2/$file" \
        > "$WORK/diff.$type" || fail "pprofkit diff $type"
    go tool pprof -symbolize=none -top -nodecount=1000000 -nodefraction=0 -edgefraction=0 \
        -sample_index="$type" "${unit_flag[@]}" -diff_base="$WORK/go1/$file" "$WORK/go2/$file" \
        > "$WORK/godiff.$type" 2>/dev/null || fail "go tool pprof -diff_base $type"
    python3 "$WORK/compare.py" diff "$WORK/diff.$type" "$WORK/godiff.$type" "diff $type"
done
"$PK" diff "$WORK/go1/cpu.pb.gz" "$WORK/go1/cpu.pb.gz" | head -n 1 | grep -qx "0 functions changed; showing 0" ||
    fail "a profile against itself changed"
echo "ok   a profile against itself: nothing changed"

step "errors and usage"
expect() { # expect CODE PATTERN COMMAND...: exit status and a line of stderr
    local code=$1 pattern=$2 rc=0
    shift 2
    "$@" > "$WORK/out" 2> "$WORK/err" || rc=$?
    [ "$rc" = "$code" ] || fail "$*: exit $rc, expected $code ($(cat "$WORK/err"))"
    grep -q -- "$pattern" "$WORK/err" || fail "$*: stderr lacks '$pattern': $(cat "$WORK/err")"
}
printf '\x0a\x05ab' > "$WORK/cut.pb"
expect 1 "cut.pb: Profile.sample_type at byte 0: length 5 runs past the end of the Profile" \
    "$PK" top "$WORK/cut.pb"
head -c 100 "$WORK/ppk/w1.pb.gz" > "$WORK/cut.pb.gz"
expect 1 "cut.pb.gz: gzip: the input ends inside the stream" "$PK" collapsed "$WORK/cut.pb.gz"
expect 1 "no-such-file: No such file or directory" "$PK" top "$WORK/no-such-file"
expect 1 "no sample type 'nope' (there are: cpu-time, wall-time)" \
    "$PK" top --sample-type nope "$WORK/ppk/w1.pb.gz"
expect 1 "sample types differ" "$PK" top "$WORK/ppk/w1.pb.gz" "$WORK/go1/cpu.pb.gz"
expect 1 "w1.pb.gz: no sample type 'samples'" \
    "$PK" diff --sample-type samples "$WORK/go1/cpu.pb.gz" "$WORK/ppk/w1.pb.gz"
expect 2 "usage:" "$PK"
expect 2 "unknown command 'flat'" "$PK" flat "$WORK/ppk/w1.pb.gz"
expect 2 "diff takes two files" "$PK" diff "$WORK/ppk/w1.pb.gz"
expect 2 "no FILE given" "$PK" top -n 3
expect 2 "-n wants a count, not 'x'" "$PK" top -n x "$WORK/ppk/w1.pb.gz"
expect 2 "unknown option '--exact'" "$PK" collapsed --exact "$WORK/ppk/w1.pb.gz"
"$PK" --help | grep -q "^SYNOPSIS" || fail "--help has no SYNOPSIS"
"$PK" top --help | grep -q "^EXIT STATUS" || fail "top --help"
"$PK" --version | grep -q "^pprofkit [0-9]" || fail "--version"
"$PK" top -n 3 - < "$WORK/ppk/w1.pb.gz" | head -n 1 | grep -q "^Showing 3 of 2000 functions" ||
    fail "reading standard input"
echo "ok   exit codes and messages"
echo "PASS"
