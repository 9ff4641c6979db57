"""Reading pprof files without Go: `python -m pprofkit top` and `collapsed`.

read_profile() decodes a profile (profile.proto: gzip, zstd or uncompressed) into plain
Python data; top() gives each function's flat and cumulative value over one or more
profiles, as `go tool pprof -top` does; collapsed() gives Brendan Gregg's folded stacks
(`root;caller;leaf value`), the input of flamegraph.pl and speedscope.

The decoder is strict, as go tool pprof is: a field that runs past the end of its
message, a varint longer than 10 bytes, an index out of the string table, a first string
that is not empty, a location or function id that is 0 or given twice, a line naming a
function that is not in the profile, or a sample whose values are not one per sample
type is an error (ValueError) naming the message (and the byte offset where it has
one); it never reads past the data it was given. A file over MAX_FILE_BYTES, or one that decompresses to
more than MAX_DECODED_BYTES (a "zip bomb"), is an error too, found before its memory is
taken (the library's reader has the same bounds).
"""

import shutil
import subprocess
import threading
import zlib

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
MAX_FILE_BYTES = 1 << 30
MAX_DECODED_BYTES = 256 << 20


class Profile:
    """A decoded profile: sample_types [(type, unit)], samples [(stack, values,
    labels)] with stack the (function name, filename) pairs leaf first, values one per
    sample type, labels {key: str or int}; default_sample_type (str or None)."""

    def __init__(self):
        self.sample_types = []
        self.samples = []
        self.default_sample_type = None
        self.time_nanos = 0
        self.duration_nanos = 0


def _varint(buf, pos, end, what):
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise ValueError("%s: varint at byte %d runs past the end" % (what, start))
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("%s: varint at byte %d is longer than 10 bytes" % (what, start))


def _fields(buf, pos, end, what):
    """(field number, wire type, value or (start, end) of a length-delimited field)."""
    while pos < end:
        at = pos
        key, pos = _varint(buf, pos, end, what)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end, what)
            yield field, wire, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end, what)
            if n > end - pos:
                raise ValueError("%s: field %d at byte %d runs past the end of its message"
                                 % (what, field, at))
            yield field, wire, (pos, pos + n)
            pos += n
        elif wire == 1:
            if end - pos < 8:
                raise ValueError("%s: fixed64 at byte %d runs past the end" % (what, at))
            yield field, wire, int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wire == 5:
            if end - pos < 4:
                raise ValueError("%s: fixed32 at byte %d runs past the end" % (what, at))
            yield field, wire, int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise ValueError("%s: wire type %d at byte %d" % (what, wire, at))


def _scalars(buf, span, what):
    """{field: value} of a message's varint fields (the last one of each)."""
    return {f: x for f, w, x in _fields(buf, span[0], span[1], what) if w == 0}


def _int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _ints(buf, wire, value, what, signed=False):
    """The integers of a repeated field: packed (wire 2) or one (wire 0)."""
    if wire == 0:
        vals = [value]
    elif wire == 2:
        vals = []
        pos, end = value
        while pos < end:
            v, pos = _varint(buf, pos, end, what)
            vals.append(v)
    else:
        raise ValueError("%s: wire type %d for integers" % (what, wire))
    return [_int64(v) for v in vals] if signed else vals


def _too_big(codec):
    return ValueError("%s: the profile decompresses to more than %d bytes"
                      % (codec, MAX_DECODED_BYTES))


def _gunzip(data):
    """The members of a gzip stream, one after the other, at most MAX_DECODED_BYTES."""
    out, size = [], 0
    while data[:2] == GZIP_MAGIC:
        d = zlib.decompressobj(wbits=31)  # one member
        try:
            while not d.eof:
                chunk = d.decompress(data, MAX_DECODED_BYTES + 1 - size)
                size += len(chunk)
                out.append(chunk)
                if size > MAX_DECODED_BYTES:
                    raise _too_big("gzip")
                if not d.eof and not d.unconsumed_tail:
                    raise ValueError("gzip: the stream is cut short")
                data = d.unconsumed_tail
        except zlib.error as e:
            raise ValueError("gzip: %s" % e) from None
        data = d.unused_data
    return b"".join(out)


def _unzstd(data):
    """The zstd command's output, at most MAX_DECODED_BYTES (it is stopped past that)."""
    exe = shutil.which("zstd")
    if not exe:
        raise ValueError("zstd-compressed profile and no zstd command to read it")
    with subprocess.Popen([exe, "-dc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as p:

        def feed():
            try:
                p.stdin.write(data)
                p.stdin.close()
            except OSError:  # it stopped reading (an error, or stopped here)
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        out = p.stdout.read(MAX_DECODED_BYTES + 1)
        if len(out) > MAX_DECODED_BYTES:
            p.kill()
        err = p.stderr.read()
        p.wait()
        writer.join()
    if len(out) > MAX_DECODED_BYTES:
        raise _too_big("zstd")
    if p.returncode:
        raise ValueError("zstd: %s" % err.decode(errors="replace").strip())
    return out


def _decompress(data):
    if data[:2] == GZIP_MAGIC:
        return _gunzip(data)
    if data[:4] == ZSTD_MAGIC:
        return _unzstd(data)
    if len(data) > MAX_DECODED_BYTES:
        raise ValueError("the profile has %d bytes, over %d" % (len(data), MAX_DECODED_BYTES))
    return data


def _new_id(table, i, what):
    if i == 0 or i in table:
        raise ValueError("%s: id %d %s" % (what, i, "given twice" if i else "(0 is none)"))


def read_profile(data):
    """A Profile from the bytes of a pprof file (or a path). ValueError if malformed."""
    if isinstance(data, str):
        with open(data, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ValueError("the file is larger than %d bytes" % MAX_FILE_BYTES)
    buf = _decompress(bytes(data))
    end = len(buf)
    strings, types, raw_samples, locations, functions = [], [], [], {}, {}
    mappings = {}  # id -> filename's string index
    default_type = 0
    prof = Profile()
    for field, wire, v in _fields(buf, 0, end, "Profile"):
        if field == 6 and wire == 2:
            strings.append(bytes(buf[v[0]:v[1]]).decode("utf-8", "replace"))
        elif field == 1 and wire == 2:
            t = _scalars(buf, v, "ValueType")
            types.append((t.get(1, 0), t.get(2, 0)))
        elif field == 2 and wire == 2:
            raw_samples.append(v)
        elif field == 3 and wire == 2:
            m = _scalars(buf, v, "Mapping")
            mappings[m.get(1, 0)] = m.get(5, 0)
        elif field == 4 and wire == 2:
            loc_id, mapping, lines = 0, 0, []
            for f, w, x in _fields(buf, v[0], v[1], "Location"):
                if f == 1 and w == 0:
                    loc_id = x
                elif f == 2 and w == 0:
                    mapping = x
                elif f == 4 and w == 2:
                    lines.append(_scalars(buf, x, "Line").get(1, 0))
            _new_id(locations, loc_id, "Location")
            locations[loc_id] = (mapping, lines)
        elif field == 5 and wire == 2:
            fn = _scalars(buf, v, "Function")
            _new_id(functions, fn.get(1, 0), "Function")
            functions[fn.get(1, 0)] = (fn.get(2, 0), fn.get(4, 0))
        elif field == 9 and wire == 0:
            prof.time_nanos = v
        elif field == 10 and wire == 0:
            prof.duration_nanos = v
        elif field == 14 and wire == 0:
            default_type = v

    def s(i, what):
        if i >= len(strings):
            raise ValueError("%s: string index %d past the table (%d strings)"
                             % (what, i, len(strings)))
        return strings[i]

    if strings and strings[0]:
        raise ValueError("Profile: the first string is %r, not the empty string" % strings[0])
    for _, lines in locations.values():
        for fid in lines:
            if fid and fid not in functions:
                raise ValueError("Line: function %d is not in the profile" % fid)
    prof.sample_types = [(s(t, "ValueType"), s(u, "ValueType")) for t, u in types]
    if default_type:
        prof.default_sample_type = s(default_type, "Profile.default_sample_type")
    names = {fid: (s(n, "Function"), s(f, "Function")) for fid, (n, f) in functions.items()}

    def unsymbolized(mapping):
        """A frame without a function name, named as go tool pprof names it: after its
        mapping's file ("[libc.so.6]"), else "<unknown>"."""
        path = s(mappings.get(mapping, 0), "Mapping").rstrip("/")
        return ("[%s]" % path.rsplit("/", 1)[-1] if path else "<unknown>", "")
    for start, stop in raw_samples:
        stack, values, labels = [], [], {}
        for f, w, x in _fields(buf, start, stop, "Sample"):
            if f == 1:
                for loc in _ints(buf, w, x, "Sample.location_id"):
                    if loc not in locations:
                        raise ValueError("Sample: location %d is not in the profile" % loc)
                    mapping, lines = locations[loc]
                    for fid in lines or [0]:  # inlined first, the caller last
                        name = names.get(fid)
                        stack.append(name if name and name[0] else unsymbolized(mapping))
            elif f == 2:
                values.extend(_ints(buf, w, x, "Sample.value", signed=True))
            elif f == 3 and w == 2:
                lab = _scalars(buf, x, "Label")
                key = s(lab.get(1, 0), "Label")
                labels[key] = s(lab[2], "Label") if lab.get(2) else _int64(lab.get(3, 0))
        if len(values) != len(prof.sample_types):
            raise ValueError("Sample at byte %d: %d values for %d sample types"
                             % (start, len(values), len(prof.sample_types)))
        prof.samples.append((stack, values, labels))
    return prof


def _type_index(profiles, sample_type):
    types = profiles[0].sample_types
    if not types:
        raise ValueError("the profile has no sample types")
    for p in profiles[1:]:
        if p.sample_types != types:
            raise ValueError("the profiles have different sample types")
    if sample_type is None:
        sample_type = profiles[0].default_sample_type or types[-1][0]
    for i, (t, _) in enumerate(types):
        if t == sample_type:
            return i
    raise ValueError("no sample type %r (there are: %s)"
                     % (sample_type, ", ".join(t for t, _ in types)))


def top(profiles, sample_type=None):
    """(rows, total, unit): rows [(name, flat, cum)] sorted by flat, then name, as
    `go tool pprof -top` lists them (functions of the same name in different files
    are one row, as there); a function's cum counts each sample once however often the
    function is on its stack. The total is go tool pprof's: the sum of the values'
    magnitudes, only the base's in a difference profile (samples labelled
    pprof::base=true, as `-diff_base` makes them)."""
    i = _type_index(profiles, sample_type)
    unit = profiles[0].sample_types[i][1]
    flat, cum = {}, {}
    total = base = 0
    for p in profiles:
        for stack, values, labels in p.samples:
            v = values[i]
            if not v:
                continue
            total += abs(v)
            if labels.get("pprof::base") == "true":
                base += abs(v)
            if stack:
                flat[stack[0][0]] = flat.get(stack[0][0], 0) + v
            for name in {name for name, _ in stack}:
                cum[name] = cum.get(name, 0) + v
    rows = [(name, flat.get(name, 0), c) for name, c in cum.items()]
    rows.sort(key=lambda r: (-abs(r[1]), r[0]))
    return rows, base or total, unit


def diff(before, after, sample_type=None):
    """(rows, unit): the functions whose flat value changed, [(name, flat before, flat
    after)] sorted by the size of the change (then name); each side summed over its
    profiles."""
    rows_b, _, unit = top(before, sample_type)
    rows_a, _, unit_a = top(after, sample_type)
    if unit != unit_a:
        raise ValueError("the profiles' units differ (%s, %s)" % (unit, unit_a))
    fb = {name: flat for name, flat, _ in rows_b}
    fa = {name: flat for name, flat, _ in rows_a}
    rows = [(name, fb.get(name, 0), fa.get(name, 0)) for name in set(fb) | set(fa)
            if fb.get(name, 0) != fa.get(name, 0)]
    rows.sort(key=lambda r: (-abs(r[2] - r[1]), r[0]))
    return rows, unit


_CONTROL = {c: "\\x%02x" % c for c in list(range(0x20)) + [0x7f]}
_CONTROL_AND_SEMICOLON = {**_CONTROL, ord(";"): "\\x3b"}


def text(name, semicolon=False):
    """A name as one line of text, as the C tool writes it: its control characters
    (U+0000-U+001F, U+007F) as \\xNN, and with semicolon its ';' (collapsed's frame
    separator) too: a name cannot add a line, a frame or a terminal escape."""
    return name.translate(_CONTROL_AND_SEMICOLON if semicolon else _CONTROL)


def collapsed(profiles, sample_type=None):
    """{"root;caller;leaf": value} over the profiles (samples with a zero value left
    out), names as text(name, semicolon=True)."""
    i = _type_index(profiles, sample_type)
    out = {}
    for p in profiles:
        for stack, values, _ in p.samples:
            if values[i] and stack:
                key = ";".join(text(name, True) for name, _ in reversed(stack))
                out[key] = out.get(key, 0) + values[i]
    return out


def _human(v, unit):
    """A value the way go tool pprof shows one: nanoseconds and bytes scaled."""
    if unit == "nanoseconds":
        for div, name in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
            if abs(v) >= div:
                return "%.2f%s" % (v / div, name)
        return "%dns" % v
    if unit == "bytes":
        for div, name in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")):
            if abs(v) >= div:
                return "%.2f%s" % (v / div, name)
        return "%dB" % v
    return "%d" % v


def format_diff(rows, unit, n=20):
    shown = rows[:n] if n else rows
    lines = ["%d functions changed; showing %d" % (len(rows), len(shown)),
             "%10s %10s %10s  %s" % ("before", "after", "change", "name")]
    for name, b, a in shown:
        sign = "+" if a >= b else "-"
        lines.append("%10s %10s %10s  %s" % (_human(b, unit), _human(a, unit),
                                             sign + _human(abs(a - b), unit), text(name)))
    return "\n".join(lines)


def format_top(rows, total, unit, n=20):
    lines = []
    shown = rows[:n] if n else rows
    lines.append("Showing %d of %d functions; total %s (%s)"
                 % (len(shown), len(rows), _human(total, unit), text(unit)))
    lines.append("%10s %7s %7s %10s %7s  %s" % ("flat", "flat%", "sum%", "cum", "cum%", "name"))
    acc = 0
    for name, f, c in shown:
        acc += f
        pct = (lambda x: abs(100.0 * x / total) if total else 0.0)  # as go tool pprof
        lines.append("%10s %6.2f%% %6.2f%% %10s %6.2f%%  %s" % (
            _human(f, unit), pct(f), pct(acc), _human(c, unit), pct(c), text(name)))
    return "\n".join(lines)
