"""Issue 16 (first part): `python -m pprofkit top` and `collapsed`, checked against
`go tool pprof -top` number for number on the profiler's own files, one and several at a
time, for each sample type; the decoder refuses malformed input with a ValueError."""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest
import zlib

import support
from pprofkit import view
from test_profiler import ProfilerTest


def go_top(paths, sample_type, unit, *options):
    """{name: (flat, cum)} from go tool pprof -top, in order, exact: nanoseconds printed
    as such (-unit=ns; the default rounds), counts as they are."""
    cmd = ["go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0",
           "-sample_index=" + sample_type] + (["-unit=ns"] if unit == "nanoseconds" else [])
    cmd += list(options)
    cmd += list(paths)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=support.go_env(), check=True).stdout.decode()
    rows, seen_header = {}, False
    for line in out.splitlines():
        if line.strip().startswith("flat"):
            seen_header = True
        elif seen_header and line.strip():
            parts = line.split(None, 5)
            rows[parts[5]] = (support._go_number(parts[0]), support._go_number(parts[3]))
    return rows


# A profile written field by field (profile.proto's numbers).
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


def num(field, v):
    return varint(field << 3) + varint(v)


def msg(field, body):
    return varint(field << 3 | 2) + varint(len(body)) + body


class TestView(ProfilerTest):
    @classmethod
    def setUpClass(cls):
        # Runs for the whole class: three busy threads and a sleeping one, a file every
        # 0.4 s; and a recursion 6 deep (a function several times on one stack counts
        # once in its cum).
        cls.dir = tempfile.mkdtemp(prefix="ppk-view-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        run = cls().cli(["--export-period", "0.4", "threads.py", "1.0"], out_dir=cls.dir)
        deep = cls().cli(["work.py", "--seconds", "0.4", "--depth", "6"])
        cls.files = sorted(run.files) + deep.files

    def test_top_agrees_with_go(self):
        self.assertGreaterEqual(len(self.files), 2, self.files)
        profiles = {f: view.read_profile(f) for f in self.files}
        types = [t for t, _ in profiles[self.files[0]].sample_types]
        self.assertEqual(types, ["wall-time", "cpu-time", "samples"])
        for paths in [self.files[:1], self.files[-1:], self.files]:
            for t in types:
                rows, total, unit = view.top([profiles[p] for p in paths], t)
                mine = {name: (flat, cum) for name, flat, cum in rows if flat or cum}
                go = go_top(paths, t, unit)
                self.assertEqual(mine, go, (paths, t))
                # The rows in go's order: by flat, then by name.
                self.assertEqual([n for n, f, c in rows if f or c], list(go), (paths, t))
                self.assertEqual(total, sum(flat for _, flat, _ in rows))

    def test_collapsed(self):
        profiles = [view.read_profile(f) for f in self.files]
        folded = view.collapsed(profiles, "cpu-time")
        rows, total, _ = view.top(profiles, "cpu-time")
        self.assertEqual(sum(folded.values()), total)
        by_leaf = {}
        for stack, v in folded.items():
            leaf = stack.split(";")[-1]
            by_leaf[leaf] = by_leaf.get(leaf, 0) + v
        self.assertEqual(by_leaf, {name: flat for name, flat, _ in rows if flat})
        # Root first: every stack of a worker thread starts where threading starts it.
        self.assertTrue(any(s.endswith(";alpha_hot") for s in folded), list(folded)[:5])

    def test_diff(self):
        # Two windows of the same run: each function's change is its flat value in the
        # second minus the first (top's numbers); against itself, nothing changed.
        a, b = (view.read_profile(f) for f in self.files[:2])
        rows, unit = view.diff([a], [b], "cpu-time")
        self.assertEqual(unit, "nanoseconds")
        fa = {n: f for n, f, _ in view.top([a], "cpu-time")[0]}
        fb = {n: f for n, f, _ in view.top([b], "cpu-time")[0]}
        self.assertEqual({n: (x, y) for n, x, y in rows},
                         {n: (fa.get(n, 0), fb.get(n, 0)) for n in set(fa) | set(fb)
                          if fa.get(n, 0) != fb.get(n, 0)})
        changes = [abs(y - x) for _, x, y in rows]
        self.assertEqual(changes, sorted(changes, reverse=True))
        self.assertEqual(view.diff([a], [a], "cpu-time")[0], [])
        out = subprocess.run([sys.executable, "-m", "pprofkit", "diff", "-n", "2"] +
                             self.files[:2], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.decode().startswith("%d functions changed"
                                                       % len(view.diff([a], [b])[0])))

    def test_cli(self):
        env = dict(os.environ)
        out = subprocess.run([sys.executable, "-m", "pprofkit", "top", "-n", "3",
                              "--sample-type", "cpu-time"] + self.files,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.decode().splitlines()
        self.assertEqual(len(lines), 5, lines)  # the header, the columns, three rows
        self.assertTrue(lines[0].startswith("Showing 3 of "), lines)
        bad = os.path.join(self.dir, "bad.pb")
        with open(bad, "wb") as f:
            f.write(b"\x0a\x05ab")  # a field longer than the data
        out = subprocess.run([sys.executable, "-m", "pprofkit", "top", bad],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"runs past the end", out.stderr)
        out = subprocess.run([sys.executable, "-m", "pprofkit", "top", "--sample-type",
                              "alloc-space", self.files[0]],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"no sample type 'alloc-space'", out.stderr)

    def test_unsymbolized_frames_named_as_go(self):
        """Frames without a function name (a native address, a function with an empty
        name) are named after their mapping's file, "[libfoo.so]", or "<unknown>", as
        go tool pprof names them. The profile is written here, field by field."""
        strings = ["", "samples", "count", "/nonexistent/lib/libfoo.so", "main", "main.go"]
        pb = msg(1, num(1, 1) + num(2, 2))  # sample_type samples/count
        for locs, value in [([1, 3], 5), ([2, 3], 3), ([4, 3], 7), ([3], 2)]:
            pb += msg(2, msg(1, b"".join(varint(i) for i in locs)) + msg(2, varint(value)))
        pb += msg(3, num(1, 1) + num(2, 0x1000) + num(3, 0x9000) + num(5, 3))  # mapping 1
        pb += msg(4, num(1, 1) + num(2, 1) + num(3, 0x1234))  # in libfoo.so, no line
        pb += msg(4, num(1, 2) + num(3, 0x5678))  # no mapping, no line
        pb += msg(4, num(1, 3) + num(2, 1) + num(3, 0x2000) + msg(4, num(1, 1)))  # main
        pb += msg(4, num(1, 4) + num(3, 0x6000) + msg(4, num(1, 2)))  # a nameless function
        pb += msg(5, num(1, 1) + num(2, 4) + num(4, 5)) + msg(5, num(1, 2) + num(4, 5))
        pb += b"".join(msg(6, s.encode()) for s in strings)
        path = os.path.join(self.tmpdir(), "native.pb")
        with open(path, "wb") as f:
            f.write(pb)
        rows, total, unit = view.top([view.read_profile(path)], "samples")
        mine = {name: (flat, cum) for name, flat, cum in rows}
        self.assertEqual(mine, {"[libfoo.so]": (5, 5), "<unknown>": (10, 10),
                                "main": (2, 17)})
        self.assertEqual(total, 17)
        if support.go_available():
            self.assertEqual(mine, go_top([path], "samples", unit, "-symbolize=none"))

    def test_total_of_negative_values_as_go(self):
        """Negative values (a difference profile): the total is the sum of the values'
        magnitudes, or of the base's samples' (labelled pprof::base=true) when there
        are any, and the percentages are magnitudes, as go tool pprof -top has them."""
        strings = ["", "samples", "count", "a", "b", "c", "pprof::base", "true"]
        base = msg(3, num(1, 6) + num(2, 7))  # label pprof::base=true
        for with_base, total in ((False, 14), (True, 6)):
            pb = msg(1, num(1, 1) + num(2, 2))
            for loc, value, labels in [(1, 5, b""), (2, -3, b""), (3, 6, base)]:
                pb += msg(2, msg(1, varint(loc)) + msg(2, varint(value & (2**64 - 1))) +
                          (labels if with_base else b""))
            for i in (1, 2, 3):
                pb += msg(4, num(1, i) + msg(4, num(1, i))) + msg(5, num(1, i) + num(2, 2 + i))
            pb += b"".join(msg(6, s.encode()) for s in strings)
            path = os.path.join(self.tmpdir(), "diff.pb")
            with open(path, "wb") as f:
                f.write(pb)
            rows, got, unit = view.top([view.read_profile(path)], "samples")
            self.assertEqual(got, total, with_base)
            self.assertEqual(rows, [("c", 6, 6), ("a", 5, 5), ("b", -3, -3)])
            text = view.format_top(rows, got, unit)
            self.assertIn("%6.2f%%" % (300 / total), text.splitlines()[-1])  # b: |-3| / total
            if support.go_available():
                out = subprocess.run(["go", "tool", "pprof", "-top", path],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=support.go_env(), check=True).stdout.decode()
                self.assertIn("of %d total" % total, out)

    def test_names_written_as_one_line(self):
        """A name's control characters are written as \\xNN (and in collapsed its ';'):
        a name cannot add a line or a frame to collapsed, nor send a terminal escape."""
        strings = ["", "samples", "count", "main", "evil\nfake;stack 999", "\x1b[31mred"]
        pb = msg(1, num(1, 1) + num(2, 2))
        for leaf, value in ((2, 5), (3, 1)):
            pb += msg(2, msg(1, varint(leaf) + varint(1)) + msg(2, varint(value)))
        for i in (1, 2, 3):
            pb += msg(4, num(1, i) + msg(4, num(1, i))) + msg(5, num(1, i) + num(2, 2 + i))
        pb += b"".join(msg(6, s.encode()) for s in strings)
        prof = view.read_profile(pb)
        self.assertEqual(view.collapsed([prof]), {"main;evil\\x0afake\\x3bstack 999": 5,
                                                  "main;\\x1b[31mred": 1})
        lines = view.format_top(*view.top([prof])).splitlines()
        self.assertEqual([line.split("  ")[-1] for line in lines[2:]],
                         ["evil\\x0afake;stack 999", "\\x1b[31mred", "main"])

    def test_decompression_is_bounded(self):
        """A file that decompresses to more than MAX_DECODED_BYTES (a gzip stream of one
        or several members, a zstd frame) or is over MAX_FILE_BYTES is an error, found
        before it takes that memory; a profile in several gzip members reads whole."""
        with open(self.files[0], "rb") as f:
            data = f.read()
        raw = zlib.decompress(data, 31)
        half = len(raw) // 2

        def gz(b):
            c = zlib.compressobj(wbits=31)
            return c.compress(b) + c.flush()

        two = view.read_profile(gz(raw[:half]) + gz(raw[half:]))
        self.assertEqual(two.samples, view.read_profile(data).samples)
        limit = 1 << 20
        zeros = bytes(2 * limit)
        saved = view.MAX_DECODED_BYTES, view.MAX_FILE_BYTES
        self.addCleanup(setattr, view, "MAX_DECODED_BYTES", saved[0])
        self.addCleanup(setattr, view, "MAX_FILE_BYTES", saved[1])
        view.MAX_DECODED_BYTES = limit
        for bomb in (gz(zeros), gz(zeros[:limit // 2]) * 3):
            with self.assertRaisesRegex(ValueError, "gzip: the profile decompresses to more "
                                        "than %d bytes" % limit):
                view.read_profile(bomb)
        if shutil.which("zstd"):
            zst = subprocess.run(["zstd", "-c"], input=zeros, stdout=subprocess.PIPE,
                                 check=True).stdout
            with self.assertRaisesRegex(ValueError, "zstd: the profile decompresses"):
                view.read_profile(zst)
        view.MAX_FILE_BYTES = len(data) - 1
        with self.assertRaisesRegex(ValueError, "larger than"):
            view.read_profile(self.files[0])

    def test_malformed_input_is_an_error(self):
        with open(self.files[0], "rb") as f:
            raw = zlib.decompress(f.read(), 31)
        # Cut inside its last field (the encoder writes the string table last): the
        # error names the byte offset.
        with self.assertRaisesRegex(ValueError, "at byte [0-9]+ runs past the end"):
            view.read_profile(raw[:-1])
        with self.assertRaisesRegex(ValueError, "gzip"):
            view.read_profile(b"\x1f\x8b" + b"\x00" * 20)
        # What go tool pprof refuses too (a valid one first: samples/count, a sample of
        # location 1 with value 5, location 1 in function 1 named "f").
        types = msg(1, num(1, 1) + num(2, 2))
        sample = msg(2, msg(1, varint(1)) + msg(2, varint(5)))
        loc, fn = msg(4, num(1, 1) + msg(4, num(1, 1))), msg(5, num(1, 1) + num(2, 3))
        strs = b"".join(msg(6, s.encode()) for s in ("", "samples", "count", "f"))
        self.assertEqual(view.read_profile(types + sample + loc + fn + strs).samples,
                         [([("f", "")], [5], {})])
        for bad, error in (
                (types + sample + loc + loc + fn + strs, "Location: id 1 given twice"),
                (types + sample + loc + fn + fn + strs, "Function: id 1 given twice"),
                (types + msg(4, msg(4, num(1, 1))) + fn + strs, "Location: id 0"),
                (types + sample + loc + strs, "Line: function 1 is not in the profile"),
                (types + sample + loc + fn + msg(6, b"x") + strs[2:], "the first string"),
                (msg(1, num(1, 1)) + types + sample + loc + fn + strs,
                 "1 values for 2 sample types")):
            with self.assertRaisesRegex(ValueError, error):
                view.read_profile(bad)
        # Random corruption: a Profile or a ValueError, never anything else.
        rng = random.Random(7)
        for _ in range(300):
            b = bytearray(raw)
            for _ in range(rng.randrange(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            try:
                view.read_profile(bytes(b))
            except ValueError:
                pass


if __name__ == "__main__":
    unittest.main()
