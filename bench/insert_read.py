#!/usr/bin/env python3
"""Settee's own benchmark: bulk inserts (1000 docs per _bulk_docs, random ids, durable) with
throughput per segment as the database grows, disk bytes per doc after the load (as the server
reports them and as `du` sees them), a view index build (JS map, `_sum`) and the latency of
reduce, group and range queries on it, then random single-document GETs with wrk.

Standard library only. Starts its own server on a fresh data directory unless --url is given.
"""
import argparse, base64, http.client, json, os, random, shutil, subprocess, sys, tempfile, time, urllib.parse


def request(conn, auth, method, path, body=None):
    headers = {"Authorization": auth, "Content-Type": "application/json"}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--segment", type=int, default=100_000, help="report throughput every N docs")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "settee"))
    ap.add_argument("--url", help="use a running server (http://user:pass@host:port) instead of starting one")
    ap.add_argument("--wrk-seconds", type=int, default=10)
    ap.add_argument("--wrk-connections", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-views", action="store_true", help="skip the view build and queries")
    args = ap.parse_args()

    proc = None
    data_dir = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
    else:
        data_dir = tempfile.mkdtemp(prefix="settee-bench-")
        port = 5999
        proc = subprocess.Popen([args.bin, "serve", "--data-dir", data_dir, "--bind", f"127.0.0.1:{port}",
                                 "--admin", "admin:admin"], stderr=subprocess.DEVNULL, env={**os.environ, "SETTEE_LOG": "warn"})
        u = urllib.parse.urlparse(f"http://admin:admin@127.0.0.1:{port}")
        for _ in range(200):
            try:
                c = http.client.HTTPConnection(u.hostname, u.port, timeout=1)
                c.request("GET", "/_up")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
    auth = "Basic " + base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    db = "/bench-insert"
    request(conn, auth, "DELETE", db)
    assert request(conn, auth, "PUT", db)[0] == 201

    rng = random.Random(args.seed)
    ids = ["%032x" % rng.getrandbits(128) for _ in range(args.docs)]
    bodies = [json.dumps({"docs": [{"_id": i, "foo": "bar"} for i in ids[k:k + 1000]]}).encode()
              for k in range(0, args.docs, 1000)]
    print(f"inserting {args.docs} docs {{_id: <random 32 hex>, foo: 'bar'}}, 1000 per _bulk_docs")
    print(f"{'docs':>9} {'segment docs/s':>15} {'cumulative docs/s':>18}")
    start = seg_start = time.perf_counter()
    done = 0
    segments = []
    for body in bodies:
        status, out = request(conn, auth, "POST", db + "/_bulk_docs", body)
        assert status == 201, out[:200]
        done += 1000
        if done % args.segment == 0 or done == args.docs:
            now = time.perf_counter()
            seg = args.segment / (now - seg_start)
            segments.append(seg)
            print(f"{done:>9} {seg:>15,.0f} {done / (now - start):>18,.0f}", flush=True)
            seg_start = now
    elapsed = time.perf_counter() - start
    info = json.loads(request(conn, auth, "GET", db)[1])
    assert info["doc_count"] == args.docs, info
    print(f"total: {args.docs / elapsed:,.0f} docs/s; last segment / first segment = {segments[-1] / segments[0]:.2f}")
    print(f"sizes.file after load: {info['sizes']['file'] / args.docs:.1f} B/doc; "
          f"active {info['sizes']['active'] / args.docs:.1f}; external {info['sizes']['external'] / args.docs:.1f}")
    if data_dir:
        print(f"du of the data directory after load: {du(data_dir) / args.docs:.1f} B/doc")
        time.sleep(5)
        info = json.loads(request(conn, auth, "GET", db)[1])
        print(f"after 5 s idle: sizes.file {info['sizes']['file'] / args.docs:.1f} B/doc; du {du(data_dir) / args.docs:.1f} B/doc")

    if not args.no_views:
        bench_views(conn, auth, db, args.docs)

    if shutil.which("wrk"):
        sample = random.Random(2).sample(ids, min(len(ids), 100_000))
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write("ids = {" + ",".join('"%s"' % i for i in sample) + "}\n")
            f.write('wrk.headers["Authorization"] = "%s"\n' % auth)
            f.write("math.randomseed(3)\nrequest = function()\n"
                    f'  return wrk.format("GET", "{db}/" .. ids[math.random(#ids)])\nend\n')
            script = f.name
        print(f"wrk: random GET {db}/<id>, {args.wrk_connections} connections, 2 threads, {args.wrk_seconds}s")
        out = subprocess.run(["wrk", "-t2", f"-c{args.wrk_connections}", f"-d{args.wrk_seconds}s", "--latency", "-s", script,
                              f"http://{u.hostname}:{u.port}"], capture_output=True, text=True).stdout
        print(out)
        os.unlink(script)
    else:
        print("wrk not installed (apt-get install wrk): skipping random reads")
    if proc:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def bench_views(conn, auth, db, docs):
    """Times a first index build and then queries that read stored reductions."""
    ddoc = {"views": {"by_prefix": {
        "map": "function(doc) { emit([doc._id.charAt(0), doc._id.charAt(1)], 1); }",
        "reduce": "_sum"}}}
    assert request(conn, auth, "PUT", db + "/_design/bench", json.dumps(ddoc).encode())[0] == 201
    view = db + "/_design/bench/_view/by_prefix"
    start = time.perf_counter()
    status, out = request(conn, auth, "GET", view + "?limit=1")
    assert status == 200, out[:200]
    built = time.perf_counter() - start
    assert json.loads(out)["rows"][0]["value"] == docs
    print(f"view build (JS map emitting [c0, c1], _sum) over {docs} docs: {built:.2f} s, {docs / built:,.0f} docs/s")
    queries = [("full reduce", ""), ("group_level=1", "?group_level=1"),
               ("group=true&limit=16", "?group=true&limit=16"),
               ("range reduce", "?startkey=%5B%223%22%5D&endkey=%5B%227%22,%7B%7D%5D"),
               ("map rows limit=10", "?reduce=false&limit=10&startkey=%5B%228%22%5D")]
    for name, q in queries:
        times = []
        for _ in range(21):
            t = time.perf_counter()
            status, _ = request(conn, auth, "GET", view + q)
            times.append(time.perf_counter() - t)
            assert status == 200
        times.sort()
        print(f"  {name:<22} median {times[10] * 1000:.2f} ms, max {times[-1] * 1000:.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
