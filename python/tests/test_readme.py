"""The Python example of README.md runs, and go tool pprof reads what it writes.

The first ```python block of the README is extracted and run as it is, in a temporary
directory, by the interpreter under test.
"""

import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest

import support

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def readme_example():
    with open(README, encoding="utf-8") as f:
        m = re.search(r"^```python\n(.*?)^```", f.read(), re.M | re.S)
    if not m:
        raise AssertionError("README.md has no ```python block")
    return m.group(1)


class ReadmeTest(unittest.TestCase):
    def test_example(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "example.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(readme_example())
            out = subprocess.run([sys.executable, script], cwd=tmp, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr.decode())
            self.assertEqual(out.stdout.decode().strip(), "2000 samples")
            files = glob.glob(os.path.join(tmp, "readme.*.1.pb.gz"))
            self.assertEqual(len(files), 1, os.listdir(tmp))
            flat, text = support.go_top(files[0], "wall-time")
            self.assertEqual(flat, {"parse": 2000 * 10_000_000, "handle": 0}, text)
            with open(files[0], "rb") as f:
                p = support.decode(f.read())
            self.assertEqual(p.total("samples"), 2000)
            by_thread = p.by("samples", lambda stack, labels: labels["thread name"])
            self.assertEqual(by_thread, {"worker-0": 1000, "worker-1": 1000})
            by_request = p.by("samples", lambda stack, labels: labels["request"])
            self.assertEqual(by_request, {0: 2 * 334, 1: 2 * 333, 2: 2 * 333})
            self.assertEqual({tuple(f[0] for f in s) for s, _, _ in p.samples},
                             {("parse", "handle")})


if __name__ == "__main__":
    unittest.main()
