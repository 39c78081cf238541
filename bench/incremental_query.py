#!/usr/bin/env python3
"""One document changed, then its view queried (update=true), N times, on a server that kept
seedbench's indexing-002 database; also times the built index's group=true and
rows queries. Usage: incremental_query.py PORT N (admin adm:pass). Prints median/p90 ms.
Standard library only.
"""
import json, sys, time, statistics as st
from seed002 import MAP, connect
port, n = int(sys.argv[1]), int(sys.argv[2])
req = connect(port)
db = "/seedbench-002-indexing"
s, b = req("PUT", db + "/_design/incr", {"views": {"s": {"map": MAP, "reduce": "_sum"}}})
s, b = req("GET", db + "/_design/incr/_view/s?group=true"); assert s == 200, b
s, b = req("GET", db + "/_all_docs?limit=1"); doc_id = json.loads(b)["rows"][0]["id"]
upd, q, q_built = [], [], []
for i in range(n):
    s, b = req("GET", db + "/" + doc_id); d = json.loads(b); d["score"] = i
    s, b = req("PUT", db + "/" + doc_id, d); assert s == 201, b
    t = time.time(); s, b = req("GET", db + "/_design/incr/_view/s?group=true"); q.append((time.time() - t) * 1000); assert s == 200
    t = time.time(); s, b = req("GET", db + "/_design/incr/_view/s?group=true"); q_built.append((time.time() - t) * 1000)
    t = time.time(); s, b = req("GET", db + "/_design/incr/_view/s?reduce=false&limit=10&startkey=%5B%222016%22%5D"); upd.append((time.time() - t) * 1000)
def p(v): v = sorted(v); return "median %.2f p90 %.2f" % (st.median(v), v[int(len(v) * 0.9)])
print("after one change, group=true:", p(q)); print("built, group=true:", p(q_built)); print("built, rows limit=10:", p(upd))
