#!/usr/bin/env python3
"""Fresh builds of seedbench indexing-002's map (a new `_sum` design document each, so a new
signature) on a server that kept seedbench's database (`seedbench.py indexing-002 --keep`);
each build is timed by its first `group=true&limit=11` query, whose answer is checked, and
its design document is deleted and cleaned up afterwards.
Usage: seed002_builds.py PORT TAG N [REDUCE [python]] (admin adm:pass; REDUCE defaults to
_sum; `python` uses seedbench's Python map instead). Standard library only.
"""
import json, sys, time
from seed002 import MAP, MAP_PY, connect
port, tag, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
red = sys.argv[4] if len(sys.argv) > 4 else "_sum"
python = len(sys.argv) > 5 and sys.argv[5] == "python"
req = connect(port)
ts = []
for i in range(n):
    d = "/seedbench-002-indexing/_design/%s%d" % (tag, i)
    if python:
        ddoc = {"language": "python",
                "views": {"s": {"map": MAP_PY + "# %s%d\n" % (tag, i), "reduce": red}}}
    else:
        ddoc = {"views": {"s": {"map": MAP + " // %s%d" % (tag, i), "reduce": red}}}
    s, b = req("PUT", d, ddoc)
    assert s == 201, b
    t = time.time(); s, b = req("GET", d + "/_view/s?group=true&limit=11"); dt = time.time() - t
    assert s == 200 and b"2016" in b, b[:200]
    ts.append(dt)
    # Drop the index again, so every build meets the same store (not a growing views family
    # that RocksDB compacts during later builds).
    s, b = req("GET", d); rev = json.loads(b)["_rev"]
    s, b = req("DELETE", d + "?rev=" + rev); assert s == 200, b
    s, b = req("POST", "/seedbench-002-indexing/_view_cleanup", {}); assert s == 202, b
    time.sleep(1)
print(" ".join("%.3f" % x for x in ts), "median %.3f" % sorted(ts)[len(ts)//2])
