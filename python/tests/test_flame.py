"""Issue 16 (second part): the flame graph page of `python -m pprofkit flame`, in a real
browser.

Two profiles of known content are written with the library (a Recorder), made into a
page by the command, and loaded from file:// into a headless Chromium driven over the
DevTools protocol (cdp.py). What the page shows is checked against what the test
computes itself from view.read_profile(): every frame drawn with its value and its
width, the zoom after a real mouse click, the tooltip under the mouse, the search's
matched share, the sample type selector, a label filter, and the pixels of a
screenshot. `run --flame` is checked on a real program run by the profiler.

Chromium comes from tools/deps.sh (Debian's package); without it these tests fail.
Every wait on the browser has a deadline (cdp.py), so a hang fails the test.
"""

import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import cdp
import pprofkit
from pprofkit import view
from test_profiler import ProfilerTest

MS = 1_000_000
TYPES = [pprofkit.WALL_TIME, pprofkit.CPU_TIME, pprofkit.SAMPLES]
HOSTILE = "</script><img src=x onerror=\"document.title='owned'\">"

# (frames leaf first, [wall, cpu, samples], labels): main's handle calls parse and render
# (render calls encode), main idles, a second root runs a worker; one sample stops in
# main itself.
PROFILE_A = [
    ([("parse", "app.py", 12), ("handle", "app.py", 30), ("main", "app.py", 50)],
     [300 * MS, 240 * MS, 30], {"thread name": "worker-1", "request": 1}),
    ([("render", "app.py", 20), ("handle", "app.py", 30), ("main", "app.py", 50)],
     [100 * MS, 60 * MS, 10], {"thread name": "worker-2", "request": 2}),
    ([("encode", "lib/codec.py", 7), ("render", "app.py", 20), ("handle", "app.py", 30),
      ("main", "app.py", 50)], [50 * MS, 50 * MS, 5], {"thread name": "worker-2"}),
    ([("idle", "app.py", 70), ("main", "app.py", 50)], [400 * MS, 0, 40],
     {"thread name": "worker-1"}),
    ([("main", "app.py", 50)], [50 * MS, 50 * MS, 5], {"thread name": "MainThread"}),
]
PROFILE_B = [
    ([("parse", "app.py", 12), ("handle", "app.py", 30), ("main", "app.py", 50)],
     [100 * MS, 80 * MS, 10], {"thread name": "worker-2"}),
    ([("work", "worker.py", 5), ("bootstrap", "threading.py", 1)], [200 * MS, 150 * MS, 20],
     {"thread name": "worker-3"}),
    ([(HOSTILE, "x.py", 1), ("bootstrap", "threading.py", 1)], [20 * MS, 10 * MS, 1],
     {"thread name": "worker-3"}),
]


def write_profile(path, samples, **options):
    with pprofkit.Recorder(TYPES, period=10 * MS, period_type=pprofkit.WALL_TIME,
                           **options) as rec:
        with pprofkit.Sample(rec) as s:
            for frames, values, labels in samples:
                s.record(frames, values, labels)
        data = rec.export().data
    with open(path, "wb") as f:
        f.write(data)


def tree(profiles, type_name, label=None):
    """{path root first (names): value} and the total, computed from view's samples
    alone; label (key, value) keeps only the samples with that label."""
    i = [t for t, _ in profiles[0].sample_types].index(type_name)
    out, total = {}, 0
    for p in profiles:
        for stack, values, labels in p.samples:
            if label and str(labels.get(label[0])) != label[1]:
                continue
            v = values[i]
            total += v
            names = tuple(name for name, _ in reversed(stack))
            for k in range(1, len(names) + 1):
                out[names[:k]] = out.get(names[:k], 0) + v
    return out, total


def paths_of(frames):
    """{path root first: frame} of the frames the page drew, each frame's parent found
    by geometry (the frame one row up whose span holds it)."""
    by_depth = {}
    for f in frames:
        by_depth.setdefault(f["depth"], []).append(f)
    out = {}
    for f in sorted(frames, key=lambda f: f["depth"]):
        if f["depth"] == 0:
            f["path"] = ()
        else:
            (up,) = [u for u in by_depth[f["depth"] - 1]
                     if u["x"] - 1e-6 <= f["x"] and f["x"] + f["w"] <= u["x"] + u["w"] + 1e-6]
            f["path"] = up["path"] + (f["name"],)
        out[f["path"]] = f
    return out


class PageData(html.parser.HTMLParser):
    """The JSON of a page's <script id="flame-data">."""

    def __init__(self, text):
        super().__init__()
        self.inside, self.text = False, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.inside = tag == "script" and ("id", "flame-data") in attrs

    def handle_data(self, data):
        if self.inside:
            self.text = data
            self.inside = False


class TestFlamePage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ppk-flame-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.files = [os.path.join(cls.dir, n) for n in ("a.pb.gz", "b.pb.gz")]
        write_profile(cls.files[0], PROFILE_A)
        write_profile(cls.files[1], PROFILE_B)
        cls.profiles = [view.read_profile(f) for f in cls.files]
        cls.page_path = os.path.join(cls.dir, "flame.html")
        out = subprocess.run([sys.executable, "-m", "pprofkit", "flame", "-o", cls.page_path]
                             + cls.files, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        cls.browser = cdp.Browser(timeout=20)
        cls.addClassCleanup(cls.browser.close)
        cls.page = cls.browser.page(1000, 700)

    def setUp(self):
        # Each test on the page as loaded.
        self.page.navigate("file://" + self.page_path)
        self.page.wait_for("window.flame && window.flame.ready")

    # -- helpers -------------------------------------------------------------------

    def frames(self):
        return paths_of(self.page.evaluate("flame.frames()"))

    def screen(self, frame):
        """The centre of a drawn frame in viewport coordinates."""
        left, top = self.page.evaluate(
            "(() => { const r = document.getElementById('flame').getBoundingClientRect();"
            " return [r.left, r.top]; })()")
        return left + frame["x"] + frame["w"] / 2, top + frame["y"] + frame["h"] / 2

    def select(self, element_id, value):
        """Chooses an option of a <select> as a user's choice does: a change event."""
        self.page.evaluate(
            "(() => { const s = document.getElementById(%s); s.value = %s;"
            " s.dispatchEvent(new Event('change')); })()"
            % (json.dumps(element_id), json.dumps(value)))

    def option_value(self, element_id, text):
        """The value of the option of a <select> whose text starts with text."""
        return self.page.evaluate(
            "[...document.getElementById(%s).options].find(o => o.text.startsWith(%s)).value"
            % (json.dumps(element_id), json.dumps(text)))

    def assert_drawn(self, type_name, label=None, zoom=()):
        """The frames drawn are the tree's (under zoom: its ancestors at full width, its
        subtree scaled to the width), with the tree's values."""
        expected, total = tree(self.profiles, type_name, label)
        width = self.page.evaluate("flame.width()")
        self.assertEqual(self.page.evaluate("flame.total()"), total)
        drawn = self.frames()
        want = {p: v for p, v in expected.items() if v > 0 and (
            p[:len(zoom)] == zoom or zoom[:len(p)] == p)}
        want[()] = total
        self.assertEqual({p: f["value"] for p, f in drawn.items()}, want)
        base = expected[zoom] if zoom else total
        for p, f in drawn.items():
            if len(p) <= len(zoom):
                self.assertEqual((f["x"], f["w"]), (0, width), p)
            else:
                self.assertAlmostEqual(f["w"], width * expected[p] / base, places=6, msg=p)
        return drawn, total

    # -- tests ---------------------------------------------------------------------

    def test_a_page_as_loaded(self):
        p = self.page
        self.assertEqual(p.evaluate("flame.types"), [list(t) for t in TYPES])
        # No default_sample_type in these profiles: the last type, as `top` chooses.
        self.assertEqual(p.evaluate("flame.state.type"), 2)
        self.assertEqual(p.evaluate("document.getElementById('type').value"), "2")
        self.assertEqual(p.evaluate("flame.keys()"), ["request", "thread name"])
        drawn, total = self.assert_drawn("samples")
        self.assertEqual(total, 121)
        # Every frame of both profiles, the second root included; the hostile name is
        # text, not markup.
        self.assertIn(("bootstrap", HOSTILE), drawn)
        self.assertEqual(drawn[("main", "handle", "render", "encode")]["file"], "lib/codec.py")
        self.assertNotEqual(p.evaluate("document.title"), "owned")
        self.assertEqual(p.evaluate("document.images.length"), 0)
        # Siblings in the order of their names.
        kids = sorted((f["x"], path[-1]) for path, f in drawn.items()
                      if path[:-1] == ("main",))
        self.assertEqual([n for _, n in kids], ["handle", "idle"])

    def test_b_type_zoom_tooltip(self):
        p = self.page
        self.select("type", "0")  # wall-time
        self.assertEqual(p.evaluate("flame.state.type"), 0)
        drawn, total = self.assert_drawn("wall-time")
        self.assertEqual(total, 1220 * MS)

        # A real click on "handle": it spans the width, main stays, idle is gone.
        p.click(*self.screen(drawn[("main", "handle")]))
        p.wait_for("flame.state.zoom !== 0")
        zoomed, _ = self.assert_drawn("wall-time", zoom=("main", "handle"))
        self.assertNotIn(("main", "idle"), zoomed)
        self.assertNotIn(("bootstrap",), zoomed)
        self.assertIn(("main",), zoomed)

        # The tooltip of "parse", under the mouse.
        expected, _ = tree(self.profiles, "wall-time")
        p.move(*self.screen(zoomed[("main", "handle", "parse")]))
        p.wait_for("!document.getElementById('tip').hidden")
        name, file, value, share = p.evaluate(
            "[...document.getElementById('tip').children].map(e => e.textContent)")
        v = expected[("main", "handle", "parse")]
        self.assertEqual(v, 400 * MS)
        self.assertEqual((name, file), ("parse", "app.py"))
        self.assertEqual(value, "wall-time: %.2f ms (self %.2f ms)" % (v / MS, v / MS))
        self.assertEqual(share, "%.2f%% of the total" % (100.0 * v / total))
        # ... and of "handle", above it (self: nothing stops in handle itself).
        p.move(*self.screen(zoomed[("main", "handle")]))
        p.wait_for("document.querySelector('#tip .name').textContent === 'handle'")
        v = expected[("main", "handle")]
        self.assertEqual(p.evaluate("document.querySelector('#tip .value').textContent"),
                         "wall-time: %.2f ms (self 0.00 ms)" % (v / MS))
        self.assertEqual(p.evaluate("document.querySelector('#tip .share').textContent"),
                         "%.2f%% of the total" % (100.0 * v / total))

        # A click on the root unzooms.
        p.click(*self.screen(zoomed[()]))
        p.wait_for("flame.state.zoom === 0")
        self.assert_drawn("wall-time")
        p.move(0, 0)

    def test_c_search(self):
        p = self.page
        self.select("type", "0")
        before = cdp.colours(p.screenshot(self.clip()))
        p.evaluate("document.getElementById('search').focus()")
        p.type_text("REN")  # case does not matter
        p.wait_for("flame.matched() !== null")
        drawn, total = self.assert_drawn("wall-time")
        self.assertEqual({path for path, f in drawn.items() if f["matched"]},
                         {("main", "handle", "render")})
        # The samples with a matching frame, from view's data.
        want = sum(values[0] for prof in self.profiles for stack, values, _ in prof.samples
                   if any("ren" in name.lower() for name, _ in stack))
        self.assertEqual(p.evaluate("flame.matched()"), want)
        self.assertEqual(p.evaluate("document.getElementById('matched').textContent"),
                         "Matched \u201cREN\u201d: %.2f ms, %.2f%% of the total"
                         % (want / MS, 100.0 * want / total))
        # The match is drawn in its colour, which nothing had before.
        after = cdp.colours(p.screenshot(self.clip()))
        magenta = bytes([230, 0, 230])
        self.assertFalse(any(px[:3] == magenta for px in before))
        self.assertTrue(any(px[:3] == magenta for px in after))
        p.evaluate("(() => { const s = document.getElementById('search'); s.value = '';"
                   " s.dispatchEvent(new Event('input')); })()")
        self.assertIsNone(p.evaluate("flame.matched()"))

    def test_d_label_filter(self):
        p = self.page
        self.select("type", "1")  # cpu-time
        self.select("key", self.option_value("key", "thread name"))
        # With the key alone: the samples that have it (all of them here).
        self.assert_drawn("cpu-time")
        self.select("value", self.option_value("value", "worker-2"))
        drawn, total = self.assert_drawn("cpu-time", ("thread name", "worker-2"))
        self.assertEqual(total, (60 + 50 + 80) * MS)
        self.assertNotIn(("main", "idle"), drawn)
        self.assertIn("thread name = worker-2", p.evaluate(
            "document.getElementById('total').textContent"))
        # A numeric label, and another type under the same filter.
        self.select("key", self.option_value("key", "request"))
        self.select("value", self.option_value("value", "1 "))
        self.select("type", "2")
        _, total = self.assert_drawn("samples", ("request", "1"))
        self.assertEqual(total, 30)
        self.select("key", "")
        self.assert_drawn("samples")

    def test_e_screenshot(self):
        png = self.page.screenshot()
        width, height, _, _ = cdp.decode_png(png)
        self.assertEqual((width, height), (1000, 700))
        counts = cdp.colours(png)
        # Many colours (frames, text, anti-aliasing), none covering everything.
        self.assertGreater(len(counts), 50)
        self.assertLess(max(counts.values()), 0.95 * width * height)

    def clip(self):
        """The canvas's area, for a screenshot."""
        r = self.page.evaluate(
            "(() => { const r = document.getElementById('flame').getBoundingClientRect();"
            " return [r.left, r.top, r.width, r.height]; })()")
        return {"x": r[0], "y": r[1], "width": r[2], "height": r[3]}


class TestDeepPage(unittest.TestCase):
    """A stack deeper than a canvas can be tall (32767 device px: 1820 rows of 18 px):
    the rows that fit are drawn, at a device pixel ratio of 1 and of 2, and zooming into
    the deepest row drawn draws from there, down to the leaf."""

    DEPTH = 4000

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ppk-flame-deep-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        prof = os.path.join(cls.dir, "deep.pb.gz")
        stack = [("f%d" % k, "deep.py", k) for k in range(cls.DEPTH, 0, -1)]  # fK at depth K
        write_profile(prof, [(stack, [MS, MS, 1], {})], max_frames=cls.DEPTH)
        cls.page_path = os.path.join(cls.dir, "deep.html")
        out = subprocess.run([sys.executable, "-m", "pprofkit", "flame", "-o", cls.page_path,
                              prof], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        cls.browser = cdp.Browser(timeout=60)
        cls.addClassCleanup(cls.browser.close)

    def load(self, ratio):
        p = self.browser.page(1000, 700)
        p.call("Emulation.setDeviceMetricsOverride", width=1000, height=700,
               deviceScaleFactor=ratio, mobile=False)
        p.navigate("file://" + self.page_path)
        p.wait_for("window.flame && window.flame.ready", timeout=60)
        return p

    def pixel(self, p, y):
        """The canvas's pixel at (10, y) in px of the page, as RGBA."""
        return p.evaluate(
            "(() => { const c = document.getElementById('flame'), s = c.height / c.clientHeight;"
            " return Array.from(c.getContext('2d').getImageData(10, Math.floor(%d * s), 1, 1)"
            ".data); })()" % y)

    def drawn(self, p, first):
        """The rows drawn from first: all that fit, every one a frame with pixels."""
        height = p.evaluate("document.getElementById('flame').height")
        self.assertLessEqual(height, 32767)
        self.assertGreaterEqual(height, 1820 * 18)
        rows = p.evaluate("flame.rows()")
        total = self.DEPTH + 1
        self.assertEqual(rows, {"first": first, "shown": 1820, "total": total})
        frames = sorted(p.evaluate("flame.frames()"), key=lambda f: f["depth"])
        self.assertEqual([f["depth"] for f in frames], list(range(first, first + 1820)))
        for f in (frames[0], frames[len(frames) // 2], frames[-1]):
            self.assertGreater(self.pixel(p, f["y"] + 9)[3], 0, f)  # not blank
        self.assertEqual(p.evaluate("document.getElementById('clipped').textContent"),
                         "Rows %d to %d of %d drawn (a canvas's height limit): click a frame"
                         " to draw from it" % (first + 1, first + 1820, total))
        return frames

    def click(self, p, f):
        p.evaluate("window.scrollTo(0, document.getElementById('flame').offsetTop + %d - 300)"
                   % f["y"])
        left, top = p.evaluate(
            "(() => { const r = document.getElementById('flame').getBoundingClientRect();"
            " return [r.left, r.top]; })()")
        p.click(left + f["x"] + f["w"] / 2, top + f["y"] + f["h"] / 2)
        p.wait_for("flame.state.zoom === %d" % f["node"])

    def test_deep_stack(self):
        for ratio in (1, 2):
            with self.subTest(ratio=ratio):
                p = self.load(ratio)
                frames = self.drawn(p, 0)
                self.click(p, frames[-1])  # depth 1819: drawn from there
                frames = self.drawn(p, 1819)
                self.click(p, frames[-1])  # deeper: the last rows, down to the leaf
                frames = self.drawn(p, self.DEPTH + 1 - 1820)
                self.assertEqual(frames[-1]["name"], "f%d" % self.DEPTH)  # the leaf


class TestFlameCommand(ProfilerTest):
    """The page's data (no browser) from the command line and from run --flame."""

    def page_data(self, path):
        with open(path, encoding="utf-8") as f:
            return json.loads(PageData(f.read()).text)

    def test_run_flame(self):
        d = self.tmpdir()
        page = os.path.join(d, "page.html")
        run = self.cli(["--flame", page, "--export-period", "0.5", "work.py", "--seconds",
                        "1.2"])
        self.check_summary(run)  # the summary line keeps its form
        (line,) = run.summary_lines()
        self.assertTrue(line.endswith("; flame graph: %s" % page), line)
        self.assertGreaterEqual(len(run.files), 2, run.files)
        data = self.page_data(page)
        self.assertEqual(data["names"], [os.path.basename(f) for f in run.files])
        profiles = [view.read_profile(f) for f in run.files]
        stride = 2 + data["nvalues"]
        for i, (t, _) in enumerate(profiles[0].sample_types):
            self.assertEqual(sum(data["samples"][k + 2 + i]
                                 for k in range(0, len(data["samples"]), stride)),
                             tree(profiles, t)[1], t)

    def test_run_flame_forked_children_leave_it_to_the_parent(self):
        page = os.path.join(self.tmpdir(), "page.html")
        run = self.cli(["--flame", page, "forks.py"])
        parent = [d for d in run.json() if d.get("role") == "parent"][0]
        pids = {parent["pid"], parent["fork_pid"], parent["mp_pid"]}
        self.check_summary(run, pids)
        with_page = [l for l in run.summary_lines() if l.endswith("; flame graph: " + page)]
        self.assertEqual(len(with_page), 1, run.err)
        self.assertTrue(with_page[0].startswith("pprofkit: pid %d," % parent["pid"]))
        self.assertEqual(self.page_data(page)["names"],
                         [os.path.basename(f) for f in run.pid_files(parent["pid"])])

    def test_run_flame_from_the_environment_without_files(self):
        run = self.run_python(["-m", "pprofkit", "run", "--out", "", "work.py", "--seconds",
                               "0.1"], env={"PPROFKIT_FLAME": os.path.join(
                                   self.tmpdir(), "page.html")}, expect_rc=1)
        self.assertIn("--flame needs profile files; --out is ''", run.err)

    def test_errors(self):
        d = self.tmpdir()
        bad = os.path.join(d, "bad.pb")
        with open(bad, "wb") as f:
            f.write(b"\x0a\x05ab")
        out = subprocess.run([sys.executable, "-m", "pprofkit", "flame", "-o",
                              os.path.join(d, "x.html"), bad], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env(), timeout=60)
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"runs past the end", out.stderr)
        self.assertEqual(os.listdir(d), ["bad.pb"])  # no page, no temporary file

    def test_names_not_utf8(self):
        # A file name and a title that are not UTF-8 (from the command line): the page
        # is written, their bad bytes U+FFFD, as the C tool writes them.
        d = os.fsencode(self.tmpdir())
        path = os.path.join(d, b"x\xff.pb.gz")
        write_profile(os.fsdecode(path), PROFILE_A)
        page = os.path.join(d, b"p.html")
        out = subprocess.run([os.fsencode(sys.executable), b"-m", b"pprofkit", b"flame",
                              b"-o", page, b"--title", b"T\xff", path], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env(), timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        data = self.page_data(os.fsdecode(page))
        self.assertEqual(data["names"], ["x\ufffd.pb.gz"])
        with open(page, encoding="utf-8") as f:
            self.assertIn("<title>T\ufffd</title>", f.read())

    def test_high_cardinality_labels_left_out(self):
        d = self.tmpdir()
        path = os.path.join(d, "spans.pb.gz")
        samples = [([("f%d" % (k % 3), "a.py", 1)], [MS, MS, 1],
                    {"span id": k, "thread name": "t%d" % (k % 4)}) for k in range(1500)]
        write_profile(path, samples)
        page = os.path.join(d, "p.html")
        out = subprocess.run([sys.executable, "-m", "pprofkit", "flame", "-o", page, path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(),
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        data = self.page_data(page)
        self.assertEqual(data["omitted"], ["span id"])
        # Without it, the samples group by stack and thread: 3 x 4 (k % 3, k % 4).
        self.assertEqual(len(data["samples"]) // (2 + data["nvalues"]), 12)
        self.assertEqual(sum(data["samples"][2::5]), 1500 * MS)
        keys = {data["strings"][ls[i]] for ls in data["labelsets"] for i in range(0, len(ls), 2)}
        self.assertEqual(keys, {"thread name"})
        with open(page, encoding="utf-8") as f:
            self.assertIn("<title>pprofkit flame graph: spans.pb.gz</title>", f.read())


if __name__ == "__main__":
    unittest.main()
