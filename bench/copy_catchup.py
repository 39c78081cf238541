#!/usr/bin/env python3
"""How long a member that was down takes to catch up by internal replication: creates
`catchup?q=2&n=3` on a three-member cluster laid out as BENCHMARKS.md shows (members on
ports 6001-6003, data in /tmp/cl/d1..d3, etcd on 23790), kills member 3 (`kill -9`),
writes N documents (env N, default 20000) through member 1 in `_bulk_docs` of 1000, starts
member 3 again and times from its first `/_up` answer until its two copies hold all N.
Standard library only."""
import json, subprocess, time, urllib.request, base64, os, signal
A = "Basic " + base64.b64encode(b"adm:pass").decode()
def req(port, method, path, body=None):
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=None if body is None else json.dumps(body).encode(), headers={"Authorization": A, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=30) as f: return f.status, json.load(f)
    except urllib.error.HTTPError as e: return e.code, json.load(e)
t0 = int(time.time()); s, b = req(6001, "PUT", "/catchup?q=2&n=3"); assert s in (201, 202), b; t1 = int(time.time())
copies = []
for rng in ("00000000-7fffffff", "80000000-ffffffff"):
    for t in range(t0, t1 + 1):
        name = "shards%2F" + rng + "%2Fcatchup." + str(t)
        if req(6003, "GET", "/" + name)[0] == 200: copies.append(name)
assert len(copies) == 2, copies
subprocess.run("pkill -9 -f 'd3 --bind'", shell=True)
while len(req(6001, "GET", "/_membership")[1]["all_nodes"]) != 2: time.sleep(0.2)
N = int(os.environ.get("N", "20000"))
for k in range(0, N, 1000):
    s, b = req(6001, "POST", "/catchup/_bulk_docs", {"docs": [{"_id": "c%07d" % i, "v": "x" * 100} for i in range(k, k + 1000)]})
    assert s in (201, 202), b
subprocess.Popen("SETTEE_CLUSTER_SECRET=s setsid $HOME/.cache/settee-target/release/settee serve --data-dir /tmp/cl/d3 --bind 127.0.0.1:6003 --admin adm:pass --node-name settee3@127.0.0.1 --cluster http://127.0.0.1:23790 >> /tmp/cl/n3.log 2>&1", shell=True)
while True:
    try:
        if req(6003, "GET", "/_up")[0] == 200: break
    except Exception: pass
    time.sleep(0.05)
up = time.time()
while sum(req(6003, "GET", "/" + c)[1]["doc_count"] for c in copies) < N: time.sleep(0.05)
print(f"{N} documents written while settee3 was down: its two copies caught up {time.time() - up:.2f} s after it answered /_up")
