"""support.py - what the Python tests share: independent readers of pprof output.

Profiles are read with protoc (the protobuf reference implementation, against Debian's
profile.proto) and `go tool pprof`, never with anything of pprofkit's: `decode()` turns
protoc's text output into plain Python data, `go_top()` runs `go tool pprof -top`.
"""

import gzip
import os
import re
import shutil
import subprocess
import tempfile

PROTO = os.environ.get(
    "PPK_PROFILE_PROTO",
    "/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto",
)


def raw(data):
    """The uncompressed protobuf of an export (gzip, zstd or none)."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return subprocess.run(["zstd", "-dc"], input=data, stdout=subprocess.PIPE,
                              check=True).stdout
    return data


def protoc_text(data):
    """protoc --decode=perftools.profiles.Profile of an export, as text."""
    proto_dir, proto_name = os.path.split(PROTO)
    out = subprocess.run(
        ["protoc", "--decode=perftools.profiles.Profile", "-I", proto_dir, proto_name],
        input=raw(data), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    return out.stdout.decode("utf-8")


_TOKEN = re.compile(r'\s*(?:(\})|([A-Za-z_][A-Za-z0-9_]*)\s*(?:(\{)|:\s*("(?:[^"\\]|\\.)*"|\S+)))')


def _unquote(s):
    if not s.startswith('"'):
        return int(s)
    # protoc escapes bytes as C does (octal for non-ASCII bytes); decode to bytes, then
    # UTF-8 (pprof strings must be valid UTF-8, so a strict decode is a check too).
    body = s[1:-1].encode("latin-1").decode("unicode_escape").encode("latin-1")
    return body.decode("utf-8")


def parse_text(text):
    """protoc's text format as nested dicts: each field maps to a list of values."""
    stack = [{}]
    pos = 0
    while True:
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip():
                raise ValueError("cannot parse protoc output at %r" % text[pos:pos + 60])
            break
        pos = m.end()
        close, name, opened, value = m.groups()
        if close:
            stack.pop()
        elif opened:
            child = {}
            stack[-1].setdefault(name, []).append(child)
            stack.append(child)
        else:
            stack[-1].setdefault(name, []).append(_unquote(value))
    return stack[0]


class Profile:
    """A decoded profile: sample types, and each sample's stack, labels and values."""

    def __init__(self, msg):
        st = msg.get("string_table", [])
        self.strings = st
        s = lambda i: st[i] if i < len(st) else None  # noqa: E731
        one = lambda m, k, d=0: m.get(k, [d])[0]  # noqa: E731
        self.sample_types = [(s(one(t, "type")), s(one(t, "unit")))
                             for t in msg.get("sample_type", [])]
        self.period = one(msg, "period")
        self.time_nanos = one(msg, "time_nanos")
        self.duration_nanos = one(msg, "duration_nanos")
        self.comments = [s(i) for i in msg.get("comment", [])]
        funcs = {one(f, "id"): (s(one(f, "name")), s(one(f, "filename")))
                 for f in msg.get("function", [])}
        self.locations = {}
        for loc in msg.get("location", []):
            lines = loc.get("line", [])
            # One line per location here (no inlining): (function name, file, line).
            frames = [funcs[one(ln, "function_id")] + (one(ln, "line"),) for ln in lines]
            self.locations[one(loc, "id")] = frames[0] if frames else (None, None, 0)
        self.samples = []
        for smp in msg.get("sample", []):
            labels = {}
            for lb in smp.get("label", []):
                key = s(one(lb, "key"))
                labels[key] = s(one(lb, "str")) if "str" in lb else one(lb, "num")
            stack = [self.locations[i] for i in smp.get("location_id", [])]
            self.samples.append((stack, labels, smp.get("value", [])))

    def index(self, type_name):
        return [t for t, _ in self.sample_types].index(type_name)

    def total(self, type_name):
        i = self.index(type_name)
        return sum(v[i] for _, _, v in self.samples)

    def by(self, type_name, key):
        """Sums of a value type grouped by key(stack, labels)."""
        i = self.index(type_name)
        out = {}
        for stack, labels, values in self.samples:
            k = key(stack, labels)
            out[k] = out.get(k, 0) + values[i]
        return out


def decode(data):
    """An export's bytes, decoded by protoc into a Profile."""
    return Profile(parse_text(protoc_text(data)))


def go_available():
    return shutil.which("go") is not None


def go_env():
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOCACHE", os.path.join(tempfile.gettempdir(), "ppk-go-cache"))
    env.pop("LD_PRELOAD", None)  # an ASan runtime preloaded for the tests is not Go's
    return env


def go_top(data_or_path, sample_index=None):
    """`go tool pprof -top` of an export (bytes) or a file: {function name: flat value}
    and the raw text. Values are parsed as integers of the sample type's unit."""
    path = data_or_path
    tmp = None
    if isinstance(data_or_path, (bytes, bytearray)):
        tmp = tempfile.NamedTemporaryFile(suffix=".pb.gz", delete=False)
        tmp.write(data_or_path)
        tmp.close()
        path = tmp.name
    try:
        cmd = ["go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0",
               "-unit=minimum"]
        if sample_index:
            cmd.append("-sample_index=" + sample_index)
        out = subprocess.run(cmd + [path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=go_env(), check=True).stdout.decode()
    finally:
        if tmp:
            os.unlink(tmp.name)
    flat = {}
    rows = False
    for line in out.splitlines():
        if line.strip().startswith("flat"):
            rows = True
            continue
        if rows and line.strip():
            parts = line.split(None, 5)
            flat[parts[5]] = _go_number(parts[0])
    return flat, out


def _go_number(s):
    m = re.match(r"^(-?[0-9.]+)([a-zA-Z]*)$", s)
    if not m:
        raise ValueError("not a go tool pprof number: %r" % s)
    num, unit = float(m.group(1)), m.group(2)
    scale = {"": 1, "ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, "B": 1}
    return round(num * scale[unit])


def decode_many(datas):
    """Several exports decoded by one protoc run (a message holding each as a repeated
    Profile field), into a list of Profiles in the same order."""
    datas = list(datas)
    if not datas:
        return []
    proto_dir, proto_name = os.path.split(PROTO)
    body = bytearray()
    for d in datas:
        r = raw(d)
        body.append(0x0A)  # field 1, length-delimited
        n = len(r)
        while n >= 0x80:
            body.append((n & 0x7F) | 0x80)
            n >>= 7
        body.append(n)
        body += r
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "ppk_batch.proto"), "w") as f:
            f.write('syntax = "proto3";\nimport "%s";\n'
                    "message Batch { repeated perftools.profiles.Profile profile = 1; }\n"
                    % proto_name)
        out = subprocess.run(
            ["protoc", "--decode=Batch", "-I", proto_dir, "-I", tmp, "ppk_batch.proto"],
            input=bytes(body), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    msgs = parse_text(out.stdout.decode("utf-8")).get("profile", [])
    if len(msgs) != len(datas):
        raise ValueError("protoc decoded %d profiles of %d" % (len(msgs), len(datas)))
    return [Profile(m) for m in msgs]
