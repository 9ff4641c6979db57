"""The flame graph page: `python -m pprofkit flame FILE... -o out.html`.

page() turns profiles read by view.read_profile() into one self-contained HTML document:
the template flame.html (next to this file; its script and style are inline, so the page
needs no network) with the profiles' data embedded as JSON. The browser builds the
graph from that data for the sample type and the label filter chosen on the page.

The data is summed over the profiles and kept compact:
- strings: one table; every other field refers to its entries by index.
- frames: [name, file, name, file, ...], a frame being a (function name, filename)
  pair; frames are numbered in the order of their names (then files).
- stacks: the distinct stacks, root first, as lists of frame numbers, sorted
  lexicographically. The page builds its tree from them in one pass (each stack shares
  its longest common prefix with the previous one), which numbers the tree's nodes in
  depth-first order and lays siblings out in the order of their names.
- labelsets: the distinct label sets, [key, value, key, value, ...] (values as strings,
  numbers written in decimal); set 0 is the empty one.
- samples: [stack, label set, value of each sample type, ...] flat, one group per
  distinct (stack, label set), the values summed.

A label key whose values are nearly all distinct (more than MAX_LABEL_VALUES values and
more than half as many values as samples: span ids, request ids) groups nothing and
would make almost every sample's label set its own; it is left out of the data, and the
page lists it as such. Samples with a negative value (a difference of profiles) count
zero for that sample type: a frame's width cannot be negative.

The pprofkit command's `flame` (tools/pprofkit/flame.c) writes the same page from the same
template, with the same data byte for byte; tests/test_pprofkit_cmd.sh compares them.
"""

import json
import os

from . import view

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flame.html")
DATA_MARK = "/*PPROFKIT-FLAME-DATA*/"
TITLE_MARK = "<!--PPROFKIT-FLAME-TITLE-->"
MAX_LABEL_VALUES = 1000


def data(profiles, sample_type=None, names=()):
    """The page's data (a dict, see above) of the profiles summed. sample_type: the type
    shown first (default: the profile's default, else the last, as `top` chooses).
    names: what the profiles are called on the page (file names). ValueError if the
    profiles have different sample types or no sample type is named sample_type."""
    first = view._type_index(profiles, sample_type)
    types = profiles[0].sample_types
    nvalues = len(types)

    # Label keys that group something (see the opening comment).
    distinct, nsamples = {}, 0
    for p in profiles:
        nsamples += len(p.samples)
        for _, _, labels in p.samples:
            for k, v in labels.items():
                distinct.setdefault(k, set()).add(v)
    omitted = sorted(k for k, vs in distinct.items()
                     if len(vs) > MAX_LABEL_VALUES and 2 * len(vs) > nsamples)
    omit = set(omitted)

    # Aggregate by (stack, label set), in the order first seen.
    agg = {}
    for p in profiles:
        for stack, values, labels in p.samples:
            key = (tuple(reversed(stack)),
                   tuple(sorted((k, str(v)) for k, v in labels.items() if k not in omit)))
            acc = agg.get(key)
            if acc is None:
                agg[key] = [max(v, 0) for v in values]
            else:
                for i, v in enumerate(values):
                    if v > 0:
                        acc[i] += v

    # Each distinct stack numbered once (many samples share a stack).
    distinct_stacks = dict.fromkeys(stack for stack, _ in agg)
    frames = sorted({f for stack in distinct_stacks for f in stack})
    frame_id = {f: i for i, f in enumerate(frames)}
    as_ids = {stack: tuple(frame_id[f] for f in stack) for stack in distinct_stacks}
    stacks = sorted(as_ids.values())
    order = {s: i for i, s in enumerate(stacks)}
    stack_id = {stack: order[ids] for stack, ids in as_ids.items()}

    strings, string_id = [""], {"": 0}

    def sid(s):
        i = string_id.get(s)
        if i is None:
            i = string_id[s] = len(strings)
            strings.append(s)
        return i

    flat_frames = []
    for name, filename in frames:
        flat_frames += [sid(name), sid(filename)]
    labelsets, labelset_id = [[]], {(): 0}
    samples = []
    for (stack, labels), values in agg.items():
        ls = labelset_id.get(labels)
        if ls is None:
            ls = labelset_id[labels] = len(labelsets)
            labelsets.append([sid(x) for kv in labels for x in kv])
        samples.append(stack_id[stack])
        samples.append(ls)
        samples += values
    return {
        "names": list(names),
        "types": [[t, u] for t, u in types],
        "default": first,
        "strings": strings,
        "frames": flat_frames,
        "stacks": [list(s) for s in stacks],
        "labelsets": labelsets,
        "samples": samples,
        "nvalues": nvalues,
        "omitted": omitted,
    }


def _html_escape(text):
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def page(profiles, sample_type=None, names=(), title=None):
    """The HTML document (str) of the profiles' flame graph; see data()."""
    d = data(profiles, sample_type, names)
    # JSON inside <script>: "<" only occurs in strings, where \u003c means the same and
    # cannot end the element.
    text = json.dumps(d, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    title = title or "pprofkit flame graph: " + ", ".join(names or ["profile"])
    # The data first, then the title: neither can then bring in a marker of the other (the
    # data has no "<" and the title, escaped, none either, so neither holds TITLE_MARK; a
    # DATA_MARK in the title stays text), as `pprofkit flame` (tools/pprofkit/flame.c)
    # substitutes them in one pass.
    return template.replace(DATA_MARK, text).replace(TITLE_MARK, _html_escape(title))


def write(paths, out, sample_type=None, title=None):
    """Reads the pprof files at paths and writes their flame graph page to out (replaced
    whole: written beside it, then renamed). Returns the page's size in bytes. OSError,
    ValueError (a malformed profile, no files)."""
    if not paths:
        raise ValueError("no profiles to show")
    profiles = [view.read_profile(p) for p in paths]
    # A file name or title that is not UTF-8 (bytes the command line gave as lone
    # surrogates) shows U+FFFD for its bad bytes, as the C tool's page does.
    utf8 = (lambda s: os.fsencode(s).decode("utf-8", "replace"))  # noqa: E731
    html = page(profiles, sample_type, [utf8(os.path.basename(p)) for p in paths],
                utf8(title) if title else title)
    raw = html.encode("utf-8")
    tmp = "%s.%d.tmp" % (out, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return len(raw)
