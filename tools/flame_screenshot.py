"""flame_screenshot.py - makes docs/flame.png, the README's picture of the flame graph page.

Runs the demo's program (examples/asyncio_tasks.py, --seconds S) under `python -m
pprofkit run --flame`, loads the page it writes in headless Chromium (the tests' driver,
python/tests/cdp.py) at 1200 x 720, shows CPU time, types --search into the search box,
moves the mouse over the widest frame of the function --hover for its tooltip, and saves
a screenshot of the viewport.

Usage (from the repository, with the package built):
  PYTHONPATH=build/python/py3.11.2 /usr/bin/python3 tools/flame_screenshot.py
      [--seconds 8] [--type cpu-time] [--search json] [--hover parse_payload]
      [-o docs/flame.png]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

import cdp  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--type", default="cpu-time", help="the sample type shown")
    ap.add_argument("--search", default="json")
    ap.add_argument("--hover", default="parse_payload", help="a function name")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "docs", "flame.png"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="ppk-flame-shot-")
    try:
        page = os.path.join(work, "page.html")
        subprocess.run([sys.executable, "-m", "pprofkit", "run", "--out", work, "--flame", page,
                        "--export-period", "60", os.path.join("examples", "asyncio_tasks.py"),
                        "--seconds", str(args.seconds), "--report", str(args.seconds)],
                       check=True, stdout=subprocess.DEVNULL, timeout=args.seconds + 120,
                       cwd=ROOT)  # file names relative to the repository
        with cdp.Browser(timeout=60) as b:
            p = b.page(1200, 720)
            p.navigate("file://" + page)
            p.wait_for("window.flame && window.flame.ready")
            types = [t for t, _ in p.evaluate("flame.types")]
            p.evaluate("(() => { const s = document.getElementById('type'); s.value = %s;"
                       " s.dispatchEvent(new Event('change')); })()"
                       % json.dumps(str(types.index(args.type))))
            if args.search:
                p.evaluate("document.getElementById('search').focus()")
                p.type_text(args.search)
                p.wait_for("flame.matched() !== null")
            frames = [f for f in p.evaluate("flame.frames()") if f["name"] == args.hover]
            if frames:
                f = max(frames, key=lambda f: f["w"])
                left, top = p.evaluate(
                    "(() => { const r = document.getElementById('flame')"
                    ".getBoundingClientRect(); return [r.left, r.top]; })()")
                p.move(left + f["x"] + f["w"] / 2, top + f["y"] + f["h"] / 2)
                p.wait_for("!document.getElementById('tip').hidden")
            png = p.screenshot()
        with open(args.output, "wb") as fh:
            fh.write(png)
        print("%s: %d bytes" % (args.output, len(png)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
