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
# `pprofkit flame` must write the page of `python -m pprofkit flame` byte for byte (when
# the build has the Python package, PPK_TEST_PYTHON and PPK_TEST_PYTHONPATH: CMakeLists.txt
# sets them; without it, that comparison is skipped and says so), on those profiles and
# on odd.pb (written here: names with "</script>", non-ASCII, invalid UTF-8 and control
# characters, labels of every kind, label keys on both sides of the high-cardinality
# rule); and in every build, its data must hold what view.py reads from the files.
# Then errors: usage (exit 2), unreadable input (exit 1, the message naming the field and
# the byte offset; flame leaves no file behind), an unknown sample type (1); and --help.
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


def percents(p):
    """flat%, sum% and cum% of a row split in six, as numbers ("100%": go's 99.95 to
    100.05)."""
    return tuple(float(p[i].rstrip("%")) for i in (1, 2, 4))


def go_rows(path):
    """[(name, flat, cum, percents)] and the total of a go tool pprof -top listing."""
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
            rows.append((name, go_number(p[0]), go_number(p[3]), percents(p)))
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
        rows.append((p[5], int(p[0]), int(p[3]), percents(p)))
    if len(rows) != int(m.group(1)) or m.group(1) != m.group(2):
        sys.exit("%s: %d rows, header says %s of %s" % (path, len(rows), m.group(1), m.group(2)))
    return rows, int(m.group(3))


def top(mine_path, go_path, what):
    mine, my_total = my_rows(mine_path)
    go, go_total = go_rows(go_path)
    mine = [r for r in mine if r[1] or r[2]]
    go = [r for r in go if r[1] or r[2]]
    # The percentages as go prints them: 2 decimals (or 2 digits below 1%, "100%" for
    # 99.95 to 100.05), so equal within those roundings.
    same = [a[:3] == b[:3] and all(abs(x - y) <= (0.051 if y == 100 else 0.011)
                                   for x, y in zip(a[3], b[3])) for a, b in zip(mine, go)]
    if not all(same) or len(mine) != len(go) or my_total != go_total:
        for a, b, ok in zip(mine + [None] * len(go), go + [None] * len(mine), same + [False] * len(go)):
            if not ok:
                print("  first difference: pprofkit %r, go %r" % (a, b))
                break
        sys.exit("%s: pprofkit top (%d rows, total %d) differs from go tool pprof "
                 "(%d rows, total %d)" % (what, len(mine), my_total, len(go), go_total))
    print("ok   %s: %d functions, total %d, percentages as go tool pprof's"
          % (what, len(mine), my_total))


def collapsed(folded_path, mine_path, what):
    rows, total = my_rows(mine_path)
    by_leaf, s = {}, 0
    for line in open(folded_path):
        stack, value = line.rstrip("\n").rsplit(" ", 1)
        s += int(value)
        leaf = stack.split(";")[-1]
        by_leaf[leaf] = by_leaf.get(leaf, 0) + int(value)
    flat = {name: f for name, f, _, _ in rows if f}
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
    go = {name: flat for name, flat, _, _ in go_rows(go_path)[0] if flat}
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
# compare_top FILE...: every sample type of the files, top and (unless COLLAPSED=no:
# values of both signs, whose total is not their sum) collapsed.
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
        [ "${COLLAPSED:-}" != no ] || continue
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

step "values at the edges"
# Protobuf fields, for the generators below (which import it from their directory).
cat > "$WORK/pbwrite.py" <<'EOF'
"""pbwrite: a protobuf field (a varint, or bytes with their length) and a varint."""
INT64_MAX = (1 << 63) - 1


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    return varint(num << 3 | 2) + varint(len(value)) + value
EOF

cat > "$WORK/gen_values.py" <<'EOF'
"""gen_values.py DIR: small pprof files (protobuf, uncompressed), each a list of samples
(function names, the leaf first; a value of type "samples", "count"):
empty.pb, no samples; big.pb, two roots of 2^63 - 1 each (their sum needs 64 bits
unsigned); neg.pb, values of both signs; base.pb and new.pb, for a diff profile;
names.pb, names with control characters and ';'."""
import os
import sys

from pbwrite import INT64_MAX, field, varint


def profile(samples, names=()):
    strings = [b"", b"samples", b"count"]
    out = field(1, field(1, 1) + field(2, 2))
    ids = {}
    for stack, _ in samples:
        for name in stack:
            ids.setdefault(name, len(ids) + 1)
    for name in names:
        ids.setdefault(name, len(ids) + 1)
    for name, i in ids.items():
        strings.append(name.encode())
        out += field(5, field(1, i) + field(2, len(strings) - 1))
        out += field(4, field(1, i) + field(4, field(1, i)))
    for stack, value in samples:
        out += field(2, field(1, b"".join(varint(ids[n]) for n in stack)) +
                     field(2, varint(value)))
    return b"".join(field(6, x) for x in strings) + out


PROFILES = {
    "empty.pb": profile([], names=["main"]),
    "big.pb": profile([(["a"], INT64_MAX), (["b"], INT64_MAX)]),
    "neg.pb": profile([(["f", "main"], 500), (["g", "main"], 500), (["h", "main"], -400),
                       (["h", "g", "main"], -100), (["k", "f", "main"], 7)]),
    "base.pb": profile([(["f", "main"], 100), (["g", "main"], 300), (["k", "main"], 3)]),
    "new.pb": profile([(["f", "main"], 250), (["g", "main"], 50), (["h", "main"], 20),
                       (["k", "main"], 3)]),
    "names.pb": profile([(["evil\nfake;stack 999999", "x;y z", "main"], 5),
                         (["\x1b]0;pwned\x07\x1b[31mred", "main"], 1),
                         (["nul\x00byte", "del\x7f", "main"], 2)]),
}
for name, data in PROFILES.items():
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(data)
EOF
V="$WORK/values"
mkdir -p "$V"
python3 "$WORK/gen_values.py" "$V"
# No samples: nothing to list (nor to sort).
"$PK" top "$V/empty.pb" > "$WORK/empty.top" || fail "pprofkit top, no samples"
[ "$(head -n 1 "$WORK/empty.top")" = "Showing 0 of 0 functions; total 0 (count)" ] ||
    fail "pprofkit top, no samples: $(cat "$WORK/empty.top")"
"$PK" diff "$V/empty.pb" "$V/empty.pb" | head -n 1 | grep -qx "0 functions changed; showing 0" ||
    fail "pprofkit diff, no samples"
# Flat values whose sum is past an int64's: sum% still ends at 100%.
"$PK" top "$V/big.pb" > "$WORK/big.top" || fail "pprofkit top big.pb"
[ "$(awk 'NR > 2 {printf "%s %s ", $2, $3}' "$WORK/big.top")" = "50.00% 50.00% 50.00% 100.00% " ] ||
    fail "pprofkit top big.pb: $(cat "$WORK/big.top")"
echo "ok   no samples; flat values past an int64's sum"
# Negative values: the total is the sum of the absolute values, and so is a diff
# profile's (go's own, with its base's samples labelled pprof::base) but of its base's
# alone; percentages are of |value|.
go tool pprof -proto -diff_base="$V/base.pb" "$V/new.pb" > "$V/diff.pb.gz" 2>/dev/null ||
    fail "go tool pprof -proto -diff_base"
COLLAPSED=no compare_top "$V/neg.pb"
COLLAPSED=no compare_top "$V/diff.pb.gz"
"$PK" top "$V/diff.pb.gz" | grep -q "^ *150  37.22%  24.81%  *150  37.22%  f$" || # of 403
    fail "pprofkit top diff.pb.gz: $("$PK" top "$V/diff.pb.gz")"
go tool pprof -proto -diff_base="$WORK/go1/cpu.pb.gz" "$WORK/go2/cpu.pb.gz" > "$WORK/go.diff.pb.gz" \
    2>/dev/null || fail "go tool pprof -proto -diff_base cpu.pb.gz"
COLLAPSED=no compare_top "$WORK/go.diff.pb.gz"
# Names are text: control characters as \xNN; in collapsed, ';' too (one line a stack,
# one frame between two ';').
"$PK" collapsed "$V/names.pb" > "$WORK/names.folded" || fail "pprofkit collapsed names.pb"
printf '%s\n' 'main;x\x3by z;evil\x0afake\x3bstack 999999 5' 'main;\x1b]0\x3bpwned\x07\x1b[31mred 1' \
    'main;del\x7f;nul\x00byte 2' > "$WORK/names.want"
cmp "$WORK/names.folded" "$WORK/names.want" ||
    fail "pprofkit collapsed names.pb: $(cat -A "$WORK/names.folded")"
"$PK" top "$V/names.pb" > "$WORK/names.top" || fail "pprofkit top names.pb"
sed -n '3,$s/^.*%  //p' "$WORK/names.top" > "$WORK/names.top.names"
printf '%s\n' 'evil\x0afake;stack 999999' 'nul\x00byte' '\x1b]0;pwned\x07\x1b[31mred' 'del\x7f' \
    main 'x;y z' > "$WORK/names.want"
cmp "$WORK/names.top.names" "$WORK/names.want" && [ "$(wc -l < "$WORK/names.top")" = 8 ] ||
    fail "pprofkit top names.pb: $(cat -A "$WORK/names.top")"
"$PK" diff "$V/empty.pb" "$V/names.pb" | tr -d '\n' | LC_ALL=C grep -q '[[:cntrl:]]' &&
    fail "pprofkit diff names.pb: control characters in the output"
echo "ok   names: control characters as \\xNN, and ';' in collapsed"

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

step "flame: the page of python -m pprofkit flame, the data of view.py"
cat > "$WORK/gen_odd.py" <<'EOF'
"""gen_odd.py OUT: a pprof file (protobuf, uncompressed) written byte by byte, with what
the flame page must get right: names with "</script>", the page's markers, non-ASCII,
invalid UTF-8 (two names that decode alike), control characters, an empty name; an
inlined frame, an unsymbolized location and a line without a function (both named as
go tool pprof names them: "[file]" of the mapping, or "<unknown>");
negative values, sums above 2^64; labels: string and numeric (the same text "5"), a
string label of "" (a str index that is not 0), a key twice (the later counts), keys
that decode alike; and keys around the high-cardinality rule (more than 1000 values and
more than half as many as samples), for 2N samples in the file: "span" (a value per
sample) and "edge" (N + 1 values) are left out of the file alone but not of it summed
twice; "half" (N values) and "req" (1000 values) are never left out."""
import sys

from pbwrite import INT64_MAX, field, varint


strings, index = [b""], {b"": 0}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    if b not in index:
        index[b] = len(strings)
        strings.append(b)
    return index[b]


EMPTY_AGAIN = len(strings)  # a second "", for a string label of ""
strings.append(b"")
out = bytearray()
for t, u in (("samples", "count"), ("wall", "nanoseconds")):
    out += field(1, field(1, s(t)) + field(2, s(u)))
functions = [("main", "app.py"), ("</script><img src=x onerror=alert(1)>", "x.py"),
             ("na\u00efve \u2603 \U0001f600", "\u00fc/\u00e9.py"), (b"bad\xe2\x82", "c.py"),
             (b"\xed\xa0\x80 \xf0\x80\x80 \xf4\x90\x80\x80 \xc0\xaf \x80 \xff \xf0\x9f\x98x \xe0\x80"
              b" \xe1\x80 \xf1\x80\x80", "c.py"), (b"dup\xff", "d.py"), (b"dup\xfe", "d.py"),
             ("ctl\x00\x01\x1f\t\n\r\x08\x0c\"\\\x7f\u2028 end", "e.py"), ("main", "other.py"),
             ("", ""), ("/*PPROFKIT-FLAME-DATA*/ <!--PPROFKIT-FLAME-TITLE--> &amp;", "m.py")]
for i, (name, filename) in enumerate(functions, 1):
    out += field(5, field(1, i) + field(2, s(name)) + field(4, s(filename)))
# Location id: its lines' function ids (0: none), the inlined function first.
locations = {1: [1], 2: [2, 3], 3: [], 4: [0], 5: [4], 6: [5], 7: [6], 8: [7], 9: [8],
             10: [9], 11: [10], 12: [11]}
for loc, fns in locations.items():
    out += field(4, field(1, loc) + b"".join(field(4, field(1, f) + field(2, 7))
                                             for f in fns))


def label(key, value, unit=None):
    if isinstance(value, int):
        body = field(1, s(key)) + field(3, value)
    elif value is None:  # str index given, pointing to the second ""
        body = field(1, s(key)) + field(2, EMPTY_AGAIN)
    else:
        body = field(1, s(key)) + field(2, s(value))
    if unit:
        body += field(4, s(unit))
    return field(3, body)


samples = [
    ([2, 1], [1, 100], [("k", "a"), ("n", 5)]),
    ([2, 1], [2, 200], [("n", 5), ("k", "a")]),  # the same labels: summed with the above
    ([3, 4, 1], [3, -50], []),
    ([5, 1], [1, INT64_MAX], [("n", -7, "bytes")]),
    ([5, 1], [1, INT64_MAX], [("n", -7)]),
    ([5, 1], [1, INT64_MAX], [("n", -7)]),
    ([6, 1], [1, 1], []), ([7, 1], [1, 1], []), ([8, 1], [-1, 1], []),
    ([9, 10], [1, 2], [("k", "x"), ("k", "y")]),
    ([11], [1, 3], [("e", None)]), ([11], [1, 3], [("e", 0)]),
    ([12, 1], [1, 4], [(b"key\xff", "first"), (b"key\xfe", "second")]),
    ([], [4, 4], [("n", "5")]),
]
high = 2101
n = len(samples) + high
if n % 2:
    samples.append(([1], [1, 1], []))
    n += 1
for i in range(high):
    samples.append(([1, 5] if i % 2 else [1], [1, 10],
                    [("span", i), ("edge", "e%d" % (i % (n // 2 + 1))),
                     ("half", "h%d" % (i % (n // 2))), ("req", i % 1000), ("tid", i % 3)]))
for locs, values, labels in samples:
    body = field(1, b"".join(varint(l) for l in locs)) if locs else b""
    body += field(2, b"".join(varint(v) for v in values))
    body += b"".join(label(*l) for l in labels)
    out += field(2, body)
out += field(14, s("samples"))
with open(sys.argv[1], "wb") as f:
    f.write(b"".join(field(6, x) for x in strings) + out)
EOF
cat > "$WORK/check_flame.py" <<'EOF'
"""check_flame.py SOURCE_DIR PAGE OMITTED TYPE FILE...: the page's data against what
python/pprofkit/view.py reads from the files (view.py loaded alone: it needs no
extension): the names, types and default type (TYPE, or "-" for the default), the
omitted keys (OMITTED, comma-separated), and each (stack, label set)'s summed values,
negative ones as 0; the data must sit whole in its <script> element."""
import html.parser
import importlib.util
import json
import os
import sys

source, page, omitted, want_type, files = sys.argv[1], sys.argv[2], sys.argv[3], \
    sys.argv[4], sys.argv[5:]
spec = importlib.util.spec_from_file_location(
    "view", os.path.join(source, "python", "pprofkit", "view.py"))
view = importlib.util.module_from_spec(spec)
spec.loader.exec_module(view)


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.where, self.data, self.title = None, [], []

    def handle_starttag(self, tag, attrs):
        self.where = "data" if tag == "script" and ("id", "flame-data") in attrs else tag

    def handle_endtag(self, tag):
        self.where = None

    def handle_data(self, text):
        if self.where == "data":
            self.data.append(text)
        elif self.where == "title":
            self.title.append(text)


p = Page()
with open(page, encoding="utf-8") as f:
    p.feed(f.read())
if len(p.data) != 1:
    sys.exit("%s: the data is not one piece of one <script>: %d" % (page, len(p.data)))
d = json.loads(p.data[0])
profiles = [view.read_profile(f) for f in files]
names = [os.path.basename(f) for f in files]
types = profiles[0].sample_types
want_default = view._type_index(profiles, None if want_type == "-" else want_type)
omit = set(omitted.split(",")) - {""}
got = (d["names"], d["types"], d["default"], d["nvalues"], d["omitted"],
       "".join(p.title))
want = (names, [list(t) for t in types], want_default, len(types), sorted(omit),
        "pprofkit flame graph: " + ", ".join(names))
if got != want:
    sys.exit("%s: %r, expected %r" % (page, got, want))

expected = {}
for prof in profiles:
    for stack, values, labels in prof.samples:
        key = (tuple(reversed(stack)),
               frozenset((k, str(v)) for k, v in labels.items() if k not in omit))
        acc = expected.setdefault(key, [0] * len(types))
        for i, v in enumerate(values):
            acc[i] += max(v, 0)
strs, fr = d["strings"], d["frames"]
stride = 2 + d["nvalues"]
actual = {}
for k in range(0, len(d["samples"]), stride):
    st, ls = d["samples"][k], d["samples"][k + 1]
    stack = tuple((strs[fr[2 * f]], strs[fr[2 * f + 1]]) for f in d["stacks"][st])
    lab = d["labelsets"][ls]
    labels = frozenset((strs[lab[i]], strs[lab[i + 1]]) for i in range(0, len(lab), 2))
    if (stack, labels) in actual:
        sys.exit("%s: %r twice in samples" % (page, (stack, labels)))
    actual[(stack, labels)] = d["samples"][k + 2:k + stride]
if actual != expected:
    missing = [k for k in expected if actual.get(k) != expected[k]][:3]
    sys.exit("%s: %d groups, expected %d; first differing: %r" % (
        page, len(actual), len(expected),
        [(k, actual.get(k), expected[k]) for k in missing]))
print("ok   flame %s: %d groups, %d frames, omitted %s, as view.py reads the files" % (
    " + ".join(names), len(actual), len(fr) // 2, sorted(omit) or "none"))
EOF
python3 "$WORK/gen_odd.py" "$WORK/odd.pb"

if [ -n "${PPK_TEST_PYTHON:-}" ]; then
    echo "     comparing with python -m pprofkit flame ($PPK_TEST_PYTHON)"
else
    echo "skip the comparison with python -m pprofkit flame: this build has no Python package"
    echo "     (PPK_PYTHON=OFF, or a sanitizer build); the data is still checked"
fi
f=0
# flame_same OMITTED [--sample-type T] FILE...: pprofkit flame's page, checked against
# view.py and, with the Python package, byte for byte against python -m pprofkit flame's.
flame_same() {
    local omitted=$1 type=- args
    shift
    args=("$@")
    [ "$1" = --sample-type ] && { type=$2; shift 2; }
    f=$((f + 1))
    "$PK" flame -o "$WORK/flame.$f.html" "${args[@]}" || fail "pprofkit flame ${args[*]}"
    python3 "$WORK/check_flame.py" "$SOURCE_DIR" "$WORK/flame.$f.html" "$omitted" "$type" "$@"
    if [ -n "${PPK_TEST_PYTHON:-}" ]; then
        PYTHONPATH="$PPK_TEST_PYTHONPATH" "$PPK_TEST_PYTHON" -m pprofkit flame \
            -o "$WORK/flame.$f.py.html" "${args[@]}" || fail "python -m pprofkit flame ${args[*]}"
        cmp "$WORK/flame.$f.html" "$WORK/flame.$f.py.html" ||
            fail "pprofkit flame ${args[*]}: not python -m pprofkit flame's page"
        echo "ok   the same bytes as python -m pprofkit flame"
    fi
}
flame_same "" "$WORK/ppk/small.pb.gz"
flame_same "" "$WORK/ppk/small.pb" "$WORK/ppk/small.pb.zst" # summed
flame_same "" "$WORK/ppk/w1.pb.gz"
flame_same "" --sample-type wall-time "$WORK/ppk/w1.pb.gz"
flame_same "" "$WORK/ppk/reset.pb"
flame_same "" "$WORK/ppk/edge.pb"
flame_same "" "$WORK/go1/cpu.pb.gz" "$WORK/go2/cpu.pb.gz"
flame_same "" --sample-type alloc_space "$WORK/go1/heap.pb.gz"
flame_same edge,span "$WORK/odd.pb"
flame_same "" --sample-type wall "$WORK/odd.pb" "$WORK/odd.pb"
# The title is text: escaped, its markers not substituted.
title='a & b <i>"x"</i> /*PPROFKIT-FLAME-DATA*/ <!--PPROFKIT-FLAME-TITLE-->'
"$PK" flame --title "$title" -o "$WORK/title.html" "$WORK/odd.pb" || fail "flame --title"
escaped='a &amp; b &lt;i&gt;&quot;x&quot;&lt;/i&gt; /*PPROFKIT-FLAME-DATA*/'
escaped+=' &lt;!--PPROFKIT-FLAME-TITLE--&gt;'
[ "$(grep -cF "<title>$escaped</title>" "$WORK/title.html")" = 1 ] &&
    [ "$(grep -cF "<h1 id=\"title\">$escaped</h1>" "$WORK/title.html")" = 1 ] ||
    fail "flame --title: the title is not escaped text"
if [ -n "${PPK_TEST_PYTHON:-}" ]; then
    PYTHONPATH="$PPK_TEST_PYTHONPATH" "$PPK_TEST_PYTHON" -m pprofkit flame --title "$title" \
        -o "$WORK/title.py.html" "$WORK/odd.pb" || fail "python -m pprofkit flame --title"
    cmp "$WORK/title.html" "$WORK/title.py.html" || fail "flame --title: not Python's page"
fi
echo "ok   --title: escaped text, markers and all${PPK_TEST_PYTHON:+, the same bytes as python -m pprofkit flame}"

step "otlp: each profile as an OTLP request, checked against it (check_otlp.py)"
# Debian's python3 has python3-protobuf, which check_otlp.py decodes with.
PYPB=python3
[ -x /usr/bin/python3 ] && PYPB=/usr/bin/python3
otlp_expect='{"service_name":"cmd","pid":null,"host_name":null,"attributes":{"team":"a,b"}}'
for f in ppk/small.pb.gz ppk/small.pb ppk/edge.pb ppk/reset.pb ppk/w1.pb.gz \
         go1/cpu.pb.gz go1/heap.pb.gz; do
    OTEL_SERVICE_NAME=cmd OTEL_RESOURCE_ATTRIBUTES=team=a%2Cb "$PK" otlp -o "$WORK/req.bin" \
        "$WORK/$f" || fail "pprofkit otlp $f"
    "$PYPB" "$SOURCE_DIR/tests/check_otlp.py" --expect "$otlp_expect" --pprof "$WORK/$f" \
        -- "$WORK/req.bin" > "$WORK/otlp.out" || fail "pprofkit otlp $f: the request is wrong"
    echo "ok   otlp $f: $(cat "$WORK/otlp.out")"
done
# odd.pb's strings are not all UTF-8 (protobuf's decoders refuse it as pprof): the
# request's are repaired, so it decodes; its structure is checked.
"$PK" otlp "$WORK/odd.pb" > "$WORK/odd.req" || fail "pprofkit otlp odd.pb"
"$PYPB" "$SOURCE_DIR/tests/check_otlp.py" --expect '{"pid":null,"host_name":null}' \
    "$WORK/odd.req" > /dev/null || fail "pprofkit otlp odd.pb: the request is wrong"
echo "ok   otlp odd.pb: repaired strings, a valid request"
# Labels OTLP has no place for, samples that sum to zero, the resource's precedence.
cat > "$WORK/otlp_edges.py" <<'EOF'
import subprocess, sys
sys.path.insert(0, sys.argv[1])
import check_otlp
pb, pk, work = check_otlp.profile_pb2, sys.argv[2], sys.argv[3]
strings = ["", "n", "end_timestamp_ns", "k", "v", "w", "x", "f", "ns"]
p = pb.Profile(string_table=strings)
p.sample_type.add(type=8, unit=8)
p.function.add(id=1, name=7)
p.location.add(id=1, line=[pb.Line(function_id=1, line=3)])
ts = [pb.Label(key=2, num=5), pb.Label(key=2, num=7)]  # a second timestamp
odd = [pb.Label(key=0, str=6), pb.Label(key=3, str=4), pb.Label(key=3, str=5)]  # "", k twice
p.sample.add(location_id=[1], value=[3], label=ts + odd)
p.sample.add(location_id=[1], value=[5], label=[pb.Label(key=3, str=4)])
p.sample.add(location_id=[1], value=[-5], label=[pb.Label(key=3, str=4)])  # sums to 0
with open(work + "/edges.pb", "wb") as f:
    f.write(p.SerializeToString())


def request(env):
    out = subprocess.run([pk, "otlp", work + "/edges.pb"], capture_output=True, check=True,
                         env=env).stdout
    return check_otlp.decode_request(out)


def resource(req):
    return {kv.key: check_otlp.value_of(kv.value)
            for kv in req.resource_profiles[0].resource.attributes}


req = request({"OTEL_RESOURCE_ATTRIBUTES": "service.name=attr,service.version=2,a=1"})
d = req.dictionary
(prof,) = req.resource_profiles[0].scope_profiles[0].profiles
assert len(prof.samples) == 1, prof  # the zero sum left out
(smp,) = prof.samples
assert list(smp.timestamps_unix_nano) == [5] and list(smp.values) == [3], smp
keys = [d.string_table[d.attribute_table[a].key_strindex] for a in smp.attribute_indices]
assert keys == ["k"], keys  # "", the second k and the second timestamp dropped
assert prof.dropped_attributes_count == 3, prof.dropped_attributes_count
res = resource(req)
assert (res["service.name"], res["service.version"], res["a"]) == ("attr", "2", "1"), res
res = resource(request({"OTEL_SERVICE_NAME": "env", "OTEL_RESOURCE_ATTRIBUTES": "service.name=a"}))
assert res["service.name"] == "env", res  # OTEL_SERVICE_NAME wins
assert resource(request({}))["service.name"] == "unknown_service"
print("ok   otlp edges: labels dropped and counted, zero sums left out, resource precedence")
EOF
"$PYPB" "$WORK/otlp_edges.py" "$SOURCE_DIR/tests" "$PK" "$WORK" || fail "otlp edge cases"

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
# flame: nothing written, nor left behind, when a file cannot be read; an existing page
# stays as it was.
mkdir "$WORK/pages"
echo "before" > "$WORK/pages/old.html"
expect 1 "cut.pb: Profile.sample_type at byte 0" \
    "$PK" flame -o "$WORK/pages/new.html" "$WORK/ppk/small.pb" "$WORK/cut.pb"
expect 1 "cut.pb.gz: gzip: the input ends inside the stream" \
    "$PK" flame -o "$WORK/pages/old.html" "$WORK/cut.pb.gz"
expect 1 "no sample type 'nope'" \
    "$PK" flame --sample-type nope -o "$WORK/pages/new.html" "$WORK/ppk/w1.pb.gz"
expect 1 "sample types differ" \
    "$PK" flame -o "$WORK/pages/new.html" "$WORK/ppk/w1.pb.gz" "$WORK/go1/cpu.pb.gz"
expect 1 "no-such-dir/p.html: No such file or directory" \
    "$PK" flame -o "$WORK/no-such-dir/p.html" "$WORK/ppk/w1.pb.gz"
[ "$(ls "$WORK/pages")" = old.html ] && [ "$(cat "$WORK/pages/old.html")" = before ] ||
    fail "flame left files behind or changed the existing page: $(ls "$WORK/pages")"
"$PK" flame -o "$WORK/pages/old.html" "$WORK/ppk/small.pb" || fail "flame over a page"
[ "$(ls "$WORK/pages")" = old.html ] && grep -q "^<!DOCTYPE html>" "$WORK/pages/old.html" ||
    fail "flame did not replace the page whole: $(ls "$WORK/pages")"
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
expect 2 "-o OUT.html is required" "$PK" flame "$WORK/ppk/w1.pb.gz"
expect 2 "-o needs a value" "$PK" flame "$WORK/ppk/w1.pb.gz" -o
expect 2 "no FILE given" "$PK" flame -o "$WORK/p.html"
expect 2 "unknown option '-n'" "$PK" flame -n 3 -o "$WORK/p.html" "$WORK/ppk/w1.pb.gz"
expect 2 "unknown option '--title'" "$PK" top --title x "$WORK/ppk/w1.pb.gz"
expect 2 "otlp takes one FILE" "$PK" otlp "$WORK/ppk/w1.pb.gz" "$WORK/ppk/small.pb"
expect 2 "unknown option '--sample-type'" "$PK" otlp --sample-type x "$WORK/ppk/w1.pb.gz"
expect 1 "cut.pb: Profile.sample_type at byte 0" "$PK" otlp -o "$WORK/r.bin" "$WORK/cut.pb"
OTEL_RESOURCE_ATTRIBUTES=novalue expect 1 "OTEL_RESOURCE_ATTRIBUTES: item 1 is not key=value" \
    "$PK" otlp -o "$WORK/r.bin" "$WORK/ppk/w1.pb.gz"
expect 1 "no-such-dir/r.bin" "$PK" otlp -o "$WORK/no-such-dir/r.bin" "$WORK/ppk/w1.pb.gz"
[ ! -e "$WORK/p.html" ] || fail "a usage error wrote a page"
# The help goes to a file: it is more than one write (stdio's 4096 bytes), and grep -q,
# which stops reading at its match, would leave the second write a SIGPIPE.
"$PK" --help > "$WORK/help" && "$PK" top --help > "$WORK/top.help" || fail "--help"
grep -q "^SYNOPSIS" "$WORK/help" || fail "--help has no SYNOPSIS"
grep -q "^EXIT STATUS" "$WORK/top.help" || fail "top --help"
grep -q "^    pprofkit flame \[--sample-type T\] \[--title TEXT\] -o OUT.html FILE" "$WORK/help" ||
    fail "--help does not show flame"
"$PK" --version | grep -q "^pprofkit [0-9]" || fail "--version"
"$PK" top -n 3 - < "$WORK/ppk/w1.pb.gz" | head -n 1 | grep -q "^Showing 3 of 2000 functions" ||
    fail "reading standard input"
echo "ok   exit codes and messages"
echo "PASS"
