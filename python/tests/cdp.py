"""cdp.py - a headless Chromium driven over the DevTools protocol, stdlib only.

Chromium started with --remote-debugging-pipe reads protocol messages (JSON, each ended
by a NUL byte) from its fd 3 and writes its answers and events to its fd 4. Browser
starts it with two pipes in those places, in a process group of its own (so that
close() can kill it and every process it started), with a temporary profile directory.
Every wait has a deadline: a browser that hangs or dies raises (TimeoutError,
ConnectionError) instead of stalling the caller. Page is one tab, attached in flat mode
(its commands carry the target's sessionId).

decode_png() reads the screenshots Chromium makes (8-bit RGB or RGBA, not interlaced),
with zlib and the five PNG row filters, so that a test can look at their pixels.

Used by test_flame.py, tools/flame_screenshot.py and bench/flame_open.py.
"""

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zlib

NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium():
    """The browser to run: $PPK_CHROMIUM, else the first of NAMES on PATH; None if none."""
    exe = os.environ.get("PPK_CHROMIUM")
    if exe:
        return exe
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(Exception):
    """An error answer of the protocol."""


class Browser:
    """A headless Chromium. timeout: seconds any one wait may take."""

    def __init__(self, exe=None, timeout=20.0, width=1200, height=800, args=()):
        self.exe = exe or find_chromium()
        if not self.exe:
            raise FileNotFoundError("no chromium on PATH (tools/deps.sh installs it)")
        self.timeout = timeout
        self.dir = tempfile.mkdtemp(prefix="ppk-chromium-")
        self.next_id = 0
        self.events = []
        self.buf = b""
        self.proc = None
        to_r, self.to_w = os.pipe()      # we write, chromium reads (its fd 3)
        self.from_r, from_w = os.pipe()  # chromium writes (its fd 4), we read

        def fds_3_and_4():  # in the child, before exec: only system calls
            a = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.close(a)
            os.close(b)

        cmd = [self.exe, "--headless=new", "--no-sandbox", "--disable-gpu",
               "--remote-debugging-pipe", "--user-data-dir=" + self.dir,
               "--no-first-run", "--no-default-browser-check", "--disable-extensions",
               "--disable-background-networking", "--disable-sync", "--disable-dev-shm-usage",
               "--disable-component-update", "--mute-audio", "--hide-scrollbars",
               "--window-size=%d,%d" % (width, height)] + list(args) + ["about:blank"]
        self.log = open(os.path.join(self.dir, "stderr.log"), "w+b")
        # The browser is not the code under test: no sanitizer runtime or allocator
        # setting of a sanitizer run reaches it.
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "PYTHONMALLOC") and not k.endswith("SAN_OPTIONS")}
        try:
            # close_fds=False: the pipes' other ends are not inheritable (os.pipe), so
            # only what fds_3_and_4 made reaches the browser (with stdin/out/err).
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self.log,
                                         preexec_fn=fds_3_and_4, close_fds=False,
                                         start_new_session=True, env=env)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(to_r)
            os.close(from_w)

    # -- the pipe --------------------------------------------------------------------

    def stderr_tail(self, n=2000):
        try:
            self.log.seek(0)
            return self.log.read()[-n:].decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def _read_message(self, deadline):
        while True:
            i = self.buf.find(b"\0")
            if i >= 0:
                msg, self.buf = self.buf[:i], self.buf[i + 1:]
                return json.loads(msg)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time; stderr:\n"
                                   + self.stderr_tail())
            ready, _, _ = select.select([self.from_r], [], [], left)
            if ready:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise ConnectionError("chromium closed the pipe (exit status %s); "
                                          "stderr:\n%s" % (self.proc.poll(),
                                                           self.stderr_tail()))
                self.buf += chunk

    def send(self, method, params=None, session=None, timeout=None):
        """Sends a command and returns its result (a dict); CDPError if it failed.
        Events read meanwhile are kept for wait_event()."""
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        deadline = time.monotonic() + (timeout or self.timeout)
        while data:
            _, ready, _ = select.select([], [self.to_w], [], max(0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("chromium does not read its pipe")
            data = data[os.write(self.to_w, data):]
        while True:
            m = self._read_message(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    raise CDPError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, session=None, timeout=None):
        """The params of the first event `method` (of session, if given) not yet seen."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for k, m in enumerate(self.events):
                if m.get("method") == method and (session is None or
                                                  m.get("sessionId") == session):
                    del self.events[k]
                    return m.get("params", {})
            self.events.append(self._read_message(deadline))

    # -- pages -------------------------------------------------------------------------

    def page(self, width=1200, height=800):
        """A Page: the browser's first tab, attached, with a viewport of width x height
        CSS pixels at a device scale factor of 1."""
        targets = self.send("Target.getTargets")["targetInfos"]
        pages = [t for t in targets if t["type"] == "page"]
        tid = pages[0]["targetId"] if pages else self.send(
            "Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": tid, "flatten": True})["sessionId"]
        p = Page(self, session)
        p.call("Page.enable")
        p.call("Emulation.setDeviceMetricsOverride",
               width=width, height=height, deviceScaleFactor=1, mobile=False)
        return p

    def close(self):
        """Ends the browser and every process it started; removes its profile. Safe to
        call twice."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=2)
            except (OSError, TimeoutError, ConnectionError, CDPError, ValueError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its helpers too
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for fd in ("to_w", "from_r"):
            if getattr(self, fd, None) is not None:
                os.close(getattr(self, fd))
                setattr(self, fd, None)
        if getattr(self, "log", None) is not None:
            self.log.close()
            self.log = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    """A tab of a Browser."""

    def __init__(self, browser, session):
        self.browser = browser
        self.session = session

    def call(self, method, timeout=None, **params):
        return self.browser.send(method, params, self.session, timeout)

    def navigate(self, url, timeout=None):
        """Loads url and waits for its load event."""
        self.browser.events = [e for e in self.browser.events
                               if e.get("method") != "Page.loadEventFired"]
        r = self.call("Page.navigate", url=url, timeout=timeout)
        if r.get("errorText"):
            raise CDPError("navigate %s: %s" % (url, r["errorText"]))
        self.browser.wait_event("Page.loadEventFired", self.session, timeout)

    def evaluate(self, expression, timeout=None):
        """The value of a JavaScript expression (JSON-like values; promises awaited)."""
        r = self.call("Runtime.evaluate", timeout=timeout, expression=expression,
                      returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CDPError("%s: %s" % (expression[:200], d.get("exception", {}).get(
                "description") or d.get("text")))
        return r["result"].get("value")

    def wait_for(self, expression, timeout=None):
        """Polls a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout or self.browser.timeout)
        while True:
            v = self.evaluate(expression)
            if v:
                return v
            if time.monotonic() > deadline:
                raise TimeoutError("%s stayed false" % expression)
            time.sleep(0.02)

    def mouse(self, kind, x, y, **kw):
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **kw)

    def move(self, x, y):
        """Moves the mouse to (x, y), CSS pixels in the viewport."""
        self.mouse("mouseMoved", x, y)

    def click(self, x, y):
        """A left click at (x, y), as a user makes one: move, press, release."""
        self.move(x, y)
        self.mouse("mousePressed", x, y, button="left", buttons=1, clickCount=1)
        self.mouse("mouseReleased", x, y, button="left", buttons=0, clickCount=1)

    def type_text(self, text):
        """Types text into the focused element."""
        self.call("Input.insertText", text=text)

    def screenshot(self, clip=None):
        """The viewport (or clip: x, y, width, height in CSS pixels) as PNG bytes."""
        params = {"format": "png"}
        if clip:
            params["clip"] = dict(clip, scale=1)
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])


def decode_png(data):
    """(width, height, bytes per pixel, rows): rows a list of bytes, one per line,
    unfiltered. 8-bit greyscale, RGB, grey+alpha or RGBA, not interlaced; ValueError
    for anything else."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, head = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if head is None:
        raise ValueError("PNG without IHDR")
    width, height, bits, ctype, _, _, interlace = head
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if bits != 8 or bpp is None or interlace:
        raise ValueError("PNG of depth %d, colour type %d, interlace %d" % (bits, ctype,
                                                                            interlace))
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        raise ValueError("PNG data of %d bytes for %dx%d" % (len(raw), width, height))
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif f != 0:
            raise ValueError("PNG row %d: filter %d" % (y, f))
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colours(png):
    """{pixel: count} of a PNG (pixels as bytes of bpp)."""
    _, _, bpp, rows = decode_png(png)
    out = {}
    for row in rows:
        for i in range(0, len(row), bpp):
            px = row[i:i + bpp]
            out[px] = out.get(px, 0) + 1
    return out
