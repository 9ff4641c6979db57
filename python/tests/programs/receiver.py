"""tests/test_upload_receiver.py for uploads of a profiled program, whose totals nobody
knows in advance: every check of the receiver runs, except that the profile's value
totals are printed ("TOTALS [..]" on stdout, one line per profile) instead of being
compared with EXPECT["totals"], and must each be positive. The test compares them with
the totals of the files the same run wrote. Usage: as the receiver's.
"""

import json
import os
import sys

RECEIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                        "tests", "test_upload_receiver.py")

with open(RECEIVER) as f:
    source = f.read()
head, call, tail = source.rpartition("\nmain()")
if not call or tail.strip():
    sys.exit("receiver.py: %s no longer ends with main()" % RECEIVER)
ns = {"__name__": "test_upload_receiver", "__file__": RECEIVER}
exec(compile(head, RECEIVER, "exec"), ns)


def check_profile(data, what):
    import gzip

    if data[:2] != b"\x1f\x8b":
        ns["fail"]("%s: not gzip (first bytes %r)" % (what, data[:4]))
        return None
    try:
        p = ns["decode_profile"](gzip.decompress(data))
    except Exception as e:  # any decoding error is a failure of the upload
        ns["fail"]("%s: cannot decode: %r" % (what, e))
        return None
    ns["check_eq"]([list(x) for x in p["types"]], ns["EXPECT"]["sample_types"],
                   what + " sample types")
    if p["n"] == 0 or min(p["totals"], default=0) <= 0:
        ns["fail"]("%s: %d samples, totals %r" % (what, p["n"], p["totals"]))
    if abs(p["time_nanos"] / 1e9 - ns["time"].time()) > 86400:
        ns["fail"]("%s: time_nanos %d is not today" % (what, p["time_nanos"]))
    print("TOTALS %s" % json.dumps(p["totals"]), flush=True)
    return p


ns["check_profile"] = check_profile
ns["main"]()
