#!/usr/bin/env python3
"""Partition queries as the database grows (a benchmark, not a test): does the cost of
`_partition/{p}/_all_docs` and of a partitioned view query stay the same when the database
holds many more partitions?

Builds two partitioned databases whose partitions hold the same number of documents
(--per-partition, default 100): a small one (--small docs, default 10,000) and a large one
(--large docs, default 1,000,000, i.e. 10,000 partitions). Each gets a design document with
a partitioned view (`emit(doc.n, doc.v)`, `_sum`), built before timing. Then, for each
database, it times --queries requests to random partitions, one at a time on one
connection: `_all_docs` (every row of the partition), a view query (every row), a view
query with `limit=10`, and the partition's `_sum`. Every answer is checked (row count,
partition of every id, sum). Prints p50/p99/mean latency per query and database, and the
ratio large/small.

Standard library only. Starts its own server on a fresh data directory unless --url is given.
"""
import argparse, base64, http.client, json, os, random, shutil, statistics, tempfile, time, urllib.parse
from settee_proc import start


def request(conn, auth, method, path, body=None):
    headers = {"Authorization": auth, "Content-Type": "application/json"}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


def load(conn, auth, db, docs, per_partition):
    request(conn, auth, "DELETE", db)
    status, out = request(conn, auth, "PUT", db + "?partitioned=true")
    assert status == 201, out
    ddoc = {"views": {"v": {"map": "function(doc) { emit(doc.n, doc.v); }", "reduce": "_sum"}}}
    assert request(conn, auth, "PUT", db + "/_design/d", json.dumps(ddoc))[0] == 201
    partitions = docs // per_partition
    started = time.perf_counter()
    batch = []
    for i in range(docs):
        p, n = i % partitions, i // partitions
        batch.append({"_id": f"p{p:06d}:{n:05d}", "n": n, "v": 1})
        if len(batch) == 2000 or i == docs - 1:
            status, out = request(conn, auth, "POST", db + "/_bulk_docs", json.dumps({"docs": batch}))
            assert status == 201, out[:200]
            batch = []
    loaded = time.perf_counter()
    status, out = request(conn, auth, "GET", db + "/_partition/p000000/_design/d/_view/v?limit=1")
    assert status == 200, out[:200]
    built = time.perf_counter()
    print(f"{db}: {docs} docs in {partitions} partitions: load {docs / (loaded - started):,.0f} docs/s, "
          f"view build {docs / (built - loaded):,.0f} docs/s")
    return partitions


def time_queries(conn, auth, db, partitions, per_partition, queries, seed):
    rng = random.Random(seed)
    kinds = {
        "_all_docs": "/_all_docs",
        "view (all rows)": "/_design/d/_view/v?reduce=false",
        "view limit=10": "/_design/d/_view/v?reduce=false&limit=10&start_key=%d" % (per_partition // 2),
        "view _sum": "/_design/d/_view/v",
    }
    out = {}
    for kind, tail in kinds.items():
        times = []
        for _ in range(queries):
            p = f"p{rng.randrange(partitions):06d}"
            t = time.perf_counter()
            status, body = request(conn, auth, "GET", f"{db}/_partition/{p}{tail}")
            times.append(time.perf_counter() - t)
            assert status == 200, body[:200]
            v = json.loads(body)
            if kind == "view _sum":
                assert v["rows"] == [{"key": None, "value": per_partition}], v
                continue
            want = 10 if kind == "view limit=10" else per_partition
            assert len(v["rows"]) == want, (kind, len(v["rows"]))
            assert all(r["id"].startswith(p + ":") for r in v["rows"]), kind
        times.sort()
        out[kind] = (times[len(times) // 2], times[int(len(times) * 0.99)], statistics.mean(times))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--per-partition", type=int, default=100)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "settee"))
    ap.add_argument("--url", help="use a running server (http://user:pass@host:port) instead of starting one")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    proc = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
    else:
        data_dir = tempfile.mkdtemp(prefix="settee-bench-part-")
        proc, _ = start(args.bin, data_dir, 5997)
        u = urllib.parse.urlparse("http://admin:admin@127.0.0.1:5997")
    auth = "Basic " + base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    try:
        results = {}
        for name, docs in [("/bench-part-small", args.small), ("/bench-part-large", args.large)]:
            partitions = load(conn, auth, name, docs, args.per_partition)
            results[name] = time_queries(conn, auth, name, partitions, args.per_partition, args.queries, args.seed)
        small, large = results["/bench-part-small"], results["/bench-part-large"]
        print(f"\n{args.queries} queries each, random partitions of {args.per_partition} docs, one connection")
        print(f"{'query':<18} {'small p50 ms':>12} {'p99':>8} {'large p50 ms':>13} {'p99':>8} {'mean large/small':>17}")
        for kind in small:
            s, l = small[kind], large[kind]
            print(f"{kind:<18} {s[0] * 1e3:>12.3f} {s[1] * 1e3:>8.3f} {l[0] * 1e3:>13.3f} {l[1] * 1e3:>8.3f} {l[2] / s[2]:>17.2f}")
    finally:
        if proc:
            proc.terminate()
            proc.wait()
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
