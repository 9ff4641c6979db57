#!/usr/bin/env python3
"""test_upload_receiver.py - a local profiling backend for test_upload.c (stdlib only).

It listens on 127.0.0.1 (an ephemeral port) or on a Unix socket, prints "PORT n" (or
"READY") on stdout, then one line "GOT i" per request it has read, and checks every
request against the expectations given as JSON. It never reads anything the library
computed except the bytes on the wire: multipart parsing, gzip and the protobuf decoding
of the profile are written here from the specifications (RFC 7578, profile.proto). The
otlp mode decodes with check_otlp.py, which needs Debian's python3-protobuf: run that
mode with /usr/bin/python3 (the other modes need only the standard library).

Usage: test_upload_receiver.py MODE EXPECT_JSON [UNIX_SOCKET_PATH]
Modes:
  datadog    check a Datadog upload (agent or agentless), answer 200
  pyroscope  check a Pyroscope /ingest upload, answer 200
  otlp       check an OTLP profiles export (check_otlp.py), answer 200 with an
             ExportProfilesServiceResponse
  status     answer every request with EXPECT["status"] (and a Retry-After header of
             EXPECT["retry_after"], a string, when given); no checks
  hang       read the request, never answer
  slowread   read the request 64 bytes at a time, one read per 100 ms, then answer 200
EXPECT["runtime_id"] (optional, datadog): the runtime-id tag's exact value, not a UUID.
EXPECT["container_id"] (optional, datadog): Datadog-Container-ID, with Datadog-Entity-ID
"ci-" + it; null: neither header.
EXPECT["until"] (optional, pyroscope): the `until` query parameter, as a string.
pyroscope also refuses what Grafana Pyroscope refuses (see check_pyroscope_name and
check_pyroscope_profile), and checks, when given, EXPECT["labels"] (the string labels as
[key, value] pairs), EXPECT["num_labels"] (the numeric labels' keys) and
EXPECT["period_type"]. EXPECT["totals"] may be left out (a profiler's own samples).
otlp: EXPECT["path"] (default /v1development/profiles); EXPECT["gzip"] true: the body is
gzip with Content-Encoding: gzip, else neither; EXPECT["headers"]: exact header values;
the keys check_otlp.request_failures compares (service_name, sdk_language, pid,
host_name, service_version, environment, attributes); EXPECT["save_dir"]: each body,
decompressed, is written to save_dir/req-<n>.bin; EXPECT["partial"] {"rejected": N,
"message": "..."}: the answer's partial_success.
EXPECT["count"] valid requests end the run (after a short grace period, so that an extra
request is caught). The run also ends after EXPECT["limit"] seconds (default 20) or on
SIGTERM. Exit status 0 when exactly `count` requests came and every check passed.
"""

import base64
import gzip
import json
import os
import re
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[1]
EXPECT = json.loads(sys.argv[2])
UNIX_PATH = sys.argv[3] if len(sys.argv) > 3 else None

lock = threading.Lock()
failures = []
valid = 0
seen = 0
pids = set()
done = threading.Event()


def fail(msg):
    with lock:
        failures.append(msg)
    print("FAIL: " + msg[:1500], file=sys.stderr, flush=True)


def check_eq(actual, expected, what):
    if actual != expected:
        fail("%s: got %r, expected %r" % (what, actual, expected))
        return False
    return True


# ---- protobuf (profile.proto), just what the checks need ---------------------------------

def varint(b, i):
    x = shift = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, i
        shift += 7


def fields(b):
    """Yields (field number, wire type, value) of a message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            v = b[i:i + n]
            i += n
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def signed(x):
    return x - (1 << 64) if x >= 1 << 63 else x


def decode_profile(raw):
    """Returns a dict: "types" (sample types as (type, unit) strings), "totals" (of each
    value), "n" (samples), "time_nanos", "period_type" ((type, unit) or None), "labels"
    (each label of each sample as (key, str value or None, num)) and "strings"."""
    strings, types, samples, labels = [], [], [], []
    time_nanos, period_type = 0, None
    for num, wt, v in fields(raw):
        if num == 6:
            strings.append(v.decode("utf-8"))
        elif num == 1:
            t = dict((n, x) for n, _, x in fields(v))
            types.append((t.get(1, 0), t.get(2, 0)))
        elif num == 11:
            t = dict((n, x) for n, _, x in fields(v))
            period_type = (t.get(1, 0), t.get(2, 0))
        elif num == 2:
            vals = []
            for n, w, x in fields(v):
                if n == 2 and w == 2:
                    j = 0
                    while j < len(x):
                        y, j = varint(x, j)
                        vals.append(signed(y))
                elif n == 2:
                    vals.append(signed(x))
                elif n == 3:
                    labels.append(dict((a, b) for a, _, b in fields(x)))
            samples.append(vals)
        elif num == 9:
            time_nanos = v
    names = [(strings[a], strings[b]) for a, b in types]
    return {"types": names,
            "totals": [sum(s[k] for s in samples) for k in range(len(names))],
            "n": len(samples), "time_nanos": time_nanos, "strings": strings,
            "period_type": period_type and (strings[period_type[0]], strings[period_type[1]]),
            "labels": [(strings[lb.get(1, 0)], strings[lb[2]] if lb.get(2) else None,
                        signed(lb.get(3, 0))) for lb in labels]}


def check_profile(data, what):
    """Checks the profile against EXPECT; returns the decoded profile (None on failure)."""
    if data[:2] != b"\x1f\x8b":
        fail("%s: not gzip (first bytes %r)" % (what, data[:4]))
        return None
    try:
        raw = gzip.decompress(data)
        p = decode_profile(raw)
    except Exception as e:  # any decoding error is a failure of the upload
        fail("%s: cannot decode: %r" % (what, e))
        return None
    check_eq([list(x) for x in p["types"]], EXPECT["sample_types"], what + " sample types")
    if "totals" in EXPECT:
        check_eq(p["totals"], EXPECT["totals"], what + " value totals")
    if abs(p["time_nanos"] / 1e9 - time.time()) > 86400:
        fail("%s: time_nanos %d is not today" % (what, p["time_nanos"]))
    return p


# ---- multipart/form-data (RFC 7578) ------------------------------------------------------

def parse_multipart(ctype, body):
    m = re.fullmatch(r'multipart/form-data; boundary=([A-Za-z0-9\'()+_,./:=?-]{1,70})', ctype)
    if not m:
        fail("Content-Type %r is not multipart/form-data with a boundary" % ctype)
        return None
    delim = b"--" + m.group(1).encode()
    if not body.startswith(delim + b"\r\n"):
        fail("body does not start with the boundary")
        return None
    if not body.endswith(b"\r\n" + delim + b"--\r\n"):
        fail("body does not end with the closing boundary")
        return None
    inner = body[len(delim) + 2:-(len(delim) + 6)]
    parts = []
    for chunk in inner.split(b"\r\n" + delim + b"\r\n"):
        head, sep, content = chunk.partition(b"\r\n\r\n")
        if not sep:
            fail("a part has no header/body separator")
            return None
        hdrs = {}
        for line in head.split(b"\r\n"):
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        cd = hdrs.get("content-disposition", "")
        dm = re.fullmatch(r'form-data; name="([^"]*)"; filename="([^"]*)"', cd)
        if not dm:
            fail("part Content-Disposition %r" % cd)
            return None
        parts.append((dm.group(1), dm.group(2), hdrs.get("content-type"), content))
    return parts


RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def rfc3339_ns(s):
    t = time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")
    import calendar
    return calendar.timegm(t) * 10**9 + int(s[20:29])


def check_datadog(h, path, body):
    check_eq(path, EXPECT["path"], "path")
    check_eq(h.headers.get("DD-EVP-ORIGIN"), EXPECT["origin"], "DD-EVP-ORIGIN")
    check_eq(h.headers.get("DD-EVP-ORIGIN-VERSION"), EXPECT["origin_version"],
             "DD-EVP-ORIGIN-VERSION")
    ua = h.headers.get("User-Agent") or ""
    if not ua.startswith("pprofkit/"):
        fail("User-Agent %r" % ua)
    check_eq(h.headers.get("DD-API-KEY"), EXPECT.get("api_key"), "DD-API-KEY")
    if "container_id" in EXPECT:  # null: neither header
        cid = EXPECT["container_id"]
        check_eq(h.headers.get("Datadog-Container-ID"), cid, "Datadog-Container-ID")
        check_eq(h.headers.get("Datadog-Entity-ID"), cid and "ci-" + cid, "Datadog-Entity-ID")
    parts = parse_multipart(h.headers.get("Content-Type", ""), body)
    if parts is None:
        return
    check_eq([(p[0], p[1], p[2]) for p in parts],
             [("event", "event.json", "application/json"),
              ("profile.pprof", "profile.pprof", "application/octet-stream")], "parts")
    if len(parts) != 2:
        return
    try:
        ev = json.loads(parts[0][3])
    except ValueError as e:
        fail("event.json is not JSON: %r" % e)
        return
    check_eq(sorted(ev), sorted(["attachments", "tags_profiler", "start", "end", "family",
                                 "version", "endpoint_counts", "internal", "info"]),
             "event.json keys")
    check_eq(ev.get("attachments"), ["profile.pprof"], "attachments")
    check_eq(ev.get("version"), "4", "version")
    check_eq(ev.get("family"), EXPECT["family"], "family")
    check_eq(ev.get("endpoint_counts"), EXPECT["endpoint_counts"], "endpoint_counts")
    if not isinstance(ev.get("internal"), dict) or not isinstance(ev.get("info"), dict):
        fail("internal and info must be objects: %r %r" % (ev.get("internal"), ev.get("info")))
    for k in ("start", "end"):
        if not RFC3339.fullmatch(str(ev.get(k))):
            fail("%s %r is not RFC 3339 UTC with nanoseconds" % (k, ev.get(k)))
            return
    s, e = rfc3339_ns(ev["start"]), rfc3339_ns(ev["end"])
    if not (s <= e and abs(s / 1e9 - time.time()) < 86400):
        fail("start %s end %s" % (ev["start"], ev["end"]))
    tags = {}
    for t in ev.get("tags_profiler", "").split(","):
        k, sep, v = t.partition(":")
        if not k:
            fail("tags_profiler has an empty item or key: %r" % ev.get("tags_profiler"))
        tags.setdefault(k, []).append(v if sep else None)
    for k, v in EXPECT["tags"].items():
        check_eq(tags.get(k), [v] if not isinstance(v, list) else v, "tag " + k)
    for k in ("service", "host", "runtime-id", "language", "profiler_version", "process_id"):
        if k not in tags:
            fail("tag %s missing from %r" % (k, ev.get("tags_profiler")))
    if "runtime_id" in EXPECT:
        check_eq(tags.get("runtime-id"), [EXPECT["runtime_id"]], "tag runtime-id")
    elif "runtime-id" in tags and not UUID.fullmatch(tags["runtime-id"][0] or ""):
        fail("runtime-id %r" % tags["runtime-id"])
    for k in EXPECT.get("absent_tags", []):
        if k in tags:
            fail("tag %s should be absent" % k)
    with lock:
        pids.add((tags.get("process_id", [None])[0], tags.get("runtime-id", [None])[0]))
    check_profile(parts[1][3], "profile.pprof")


# What Grafana Pyroscope refuses, each rejecting the whole upload (grafana/pyroscope): the
# series name is parsed by pkg/og/storage/segment/key.go (ParseKey) with the runes of
# pkg/og/flameql/flameql.go (application name [A-Za-z0-9_.-], tag keys [A-Za-z0-9_.]);
# every label name, the tags' and the string-valued pprof labels' alike (the distributor
# makes each of those a series label: pkg/model/pprofsplit), must then be a Prometheus
# label name once '.' is made '_' (pkg/validation/validate.go, ValidateLabels) and their
# values at most 2048 bytes long (pkg/validation/limits.go, the default
# max_label_value_length), and no sample type may contain '-' (ValidateProfile: "sample
# type contains -").
APP_RUNES = re.compile(r"[A-Za-z0-9_.-]+")
TAG_KEY_RUNES = re.compile(r"[A-Za-z0-9_.]+")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_pyroscope_name(name):
    app, brace, rest = name.partition("{")
    if not APP_RUNES.fullmatch(app.strip()):
        fail("name: the application name %r has a character Pyroscope refuses" % app)
    if not brace:
        return
    if not rest.endswith("}"):
        fail("name %r: no closing brace" % name)
        return
    for item in filter(None, rest[:-1].split(",")):
        k, eq, v = item.partition("=")
        k = k.strip()
        if not eq or not TAG_KEY_RUNES.fullmatch(k) or \
                not LABEL_NAME.fullmatch(k.replace(".", "_")):
            fail("name %r: tag %r is refused by Pyroscope" % (name, item))


def check_pyroscope_profile(p):
    for t, _ in p["types"]:
        if "-" in t:
            fail("sample type %r contains '-': Pyroscope refuses the profile" % t)
    for k, v, _ in p["labels"]:
        if v is not None and not LABEL_NAME.fullmatch(k.replace(".", "_")):
            fail("label key %r (a string value) is not a label name: Pyroscope refuses "
                 "the profile" % k)
        if v is not None and len(v.encode()) > 2048:
            fail("label %r: a value of %d bytes: Pyroscope refuses the profile"
                 % (k, len(v.encode())))
    if "labels" in EXPECT:  # the string labels, each (key, value) once, sorted
        check_eq(sorted(set((k, v) for k, v, _ in p["labels"] if v is not None)),
                 sorted(tuple(x) for x in EXPECT["labels"]), "string labels")
    if "num_labels" in EXPECT:  # the numeric labels' keys, sorted
        check_eq(sorted(set(k for k, v, _ in p["labels"] if v is None)),
                 sorted(EXPECT["num_labels"]), "numeric label keys")
    if "period_type" in EXPECT:
        check_eq(list(p["period_type"] or ()), EXPECT["period_type"], "period type")


def check_pyroscope(h, path, query, body):
    check_eq(path, "/ingest", "path")
    q = urllib.parse.parse_qs(query, keep_blank_values=True)
    one = {k: v[0] for k, v in q.items() if len(v) == 1}
    check_eq(sorted(q), sorted(["name", "from", "until", "format", "sampleRate", "spyName"]),
             "query keys")
    check_eq(one.get("name"), EXPECT["name"], "name")
    check_pyroscope_name(one.get("name") or "")
    check_eq(one.get("format"), "pprof", "format")
    check_eq(one.get("sampleRate"), EXPECT["sample_rate"], "sampleRate")
    check_eq(one.get("spyName"), EXPECT["spy_name"], "spyName")
    try:
        f, u = int(one.get("from")), int(one.get("until"))
        if not (f < u and abs(f - time.time()) < 86400):
            fail("from %d until %d" % (f, u))
    except (TypeError, ValueError):
        fail("from/until not integers: %r" % q)
    if "until" in EXPECT:
        check_eq(one.get("until"), EXPECT["until"], "until")
    auth = EXPECT.get("basic_auth")
    expected_auth = "Basic " + base64.b64encode(auth.encode()).decode() if auth else None
    if "bearer" in EXPECT:
        expected_auth = "Bearer " + EXPECT["bearer"]
    check_eq(h.headers.get("Authorization"), expected_auth, "Authorization")
    check_eq(h.headers.get("X-Scope-OrgID"), EXPECT.get("tenant"), "X-Scope-OrgID")
    check_eq(h.headers.get("Content-Type"), "application/octet-stream", "Content-Type")
    p = check_profile(body, "body")
    if p is not None:
        check_pyroscope_profile(p)


check_otlp = None  # the module, imported by main() in the otlp mode


def check_otlp_request(h, path, n, body):
    """Returns the answer's body: an ExportProfilesServiceResponse."""
    check_eq(path, EXPECT.get("path", "/v1development/profiles"), "path")
    check_eq(h.headers.get("Content-Type"), "application/x-protobuf", "Content-Type")
    gz = bool(EXPECT.get("gzip"))
    check_eq(h.headers.get("Content-Encoding"), "gzip" if gz else None, "Content-Encoding")
    for k, v in EXPECT.get("headers", {}).items():
        check_eq(h.headers.get(k), v, "header " + k)
    ua = h.headers.get("User-Agent") or ""
    if not ua.startswith("pprofkit/"):
        fail("User-Agent %r" % ua)
    if check_eq(body[:2] == b"\x1f\x8b", gz, "body is gzip"):
        try:
            raw = gzip.decompress(body) if gz else body
            if "save_dir" in EXPECT:
                with open(os.path.join(EXPECT["save_dir"], "req-%d.bin" % n), "wb") as f:
                    f.write(raw)
            req = check_otlp.decode_request(raw)
        except Exception as e:  # gzip, protobuf and protoc errors alike
            fail("request %d: %s" % (n, e))
        else:
            for m in check_otlp.request_failures(req, EXPECT):
                fail("request %d: %s" % (n, m))
    resp = check_otlp.otlp_pb2.ExportProfilesServiceResponse()
    if "partial" in EXPECT:
        resp.partial_success.rejected_profiles = EXPECT["partial"]["rejected"]
        resp.partial_success.error_message = EXPECT["partial"]["message"]
    return resp.SerializeToString()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def address_string(self):
        return "local"

    def read_body(self, slow=False):
        n = int(self.headers.get("Content-Length", "0"))
        if slow:
            out = b""
            while len(out) < n:
                out += self.rfile.read(min(64, n - len(out)))
                time.sleep(0.1)
            return out
        return self.rfile.read(n)

    def answer(self, code, body=b"{}", ctype="application/json", headers=()):
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass

    def do_POST(self):
        global seen, valid
        body = self.read_body(MODE == "slowread")
        with lock:
            seen += 1
            n = seen
            # One write under the lock: print() writes the text and the newline apart,
            # so concurrent handlers could interleave them ("GOT 2GOT 3").
            sys.stdout.write("GOT %d\n" % n)
            sys.stdout.flush()
        if MODE == "hang":
            time.sleep(3600)
            return
        if MODE == "status":
            retry = EXPECT.get("retry_after")
            self.answer(EXPECT["status"], headers=[("Retry-After", retry)] if retry else ())
            return
        if MODE == "slowread":
            self.answer(200)
            return
        delay = EXPECT.get("delay_first", 0)
        before = len(failures)
        url = urllib.parse.urlsplit(self.path)
        if self.command != "POST":
            fail("method %s" % self.command)
        reply = None
        if MODE == "datadog":
            check_datadog(self, url.path, body)
        elif MODE == "otlp":
            reply = check_otlp_request(self, url.path, n, body)
        else:
            check_pyroscope(self, url.path, url.query, body)
        ok = len(failures) == before
        with lock:
            valid += 1
            if valid >= EXPECT.get("count", 1):
                done.set()
        if n == 1 and delay:
            time.sleep(delay)
        if ok and reply is not None:
            self.answer(200, reply, "application/x-protobuf")
        else:
            self.answer(200 if ok else 400)

    def do_GET(self):
        fail("GET %s" % self.path)
        self.answer(405)

    def do_PUT(self):
        self.do_GET()


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        s, _ = self.socket.accept()
        return s, ("local", 0)


def main():
    global check_otlp
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    if MODE == "otlp":
        try:
            import check_otlp
        except ImportError as e:
            print("FAIL: the otlp mode needs google.protobuf (python3-protobuf, in "
                  "/usr/bin/python3): %r" % e, file=sys.stderr, flush=True)
            os._exit(1)
    if UNIX_PATH:
        srv = UnixServer(UNIX_PATH, Handler)
        print("READY", flush=True)
    else:
        ThreadingHTTPServer.daemon_threads = True
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        print("PORT %d" % srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    done.wait(EXPECT.get("limit", 20))
    time.sleep(EXPECT.get("grace", 0.3))
    if MODE in ("datadog", "pyroscope", "otlp"):
        check_eq(valid, EXPECT.get("count", 1), "valid requests")
        if "distinct_pids" in EXPECT:
            check_eq(len(pids), EXPECT["distinct_pids"], "distinct (process_id, runtime-id)")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if failures else 0)


main()
