#!/usr/bin/env python3
"""What a clustered database's coordinator adds to a single-document write and read:
N sequential `PUT /{db}/{id}` then N `GET /{db}/{id}` (one client, keep-alive), latency
percentiles per URL. Give a single node's URL and a cluster member's; the database is
created with `?q=Q&n=N` (a single node ignores n) and deleted afterwards.
Usage: coordinator_latency.py [--docs 2000] [--q 2] [--n 3] URL [URL ...]
(URLs with credentials: http://adm:pass@127.0.0.1:5984). Standard library only.
"""
import argparse, base64, http.client, json, time, urllib.parse


def client(url):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    auth = base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    hdrs = {"Authorization": "Basic " + auth, "Content-Type": "application/json"}

    def req(method, path, body=None):
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=hdrs)
        r = conn.getresponse()
        return r.status, r.read()
    return req


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--q", type=int, default=2)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("urls", nargs="+")
    a = ap.parse_args()
    for url in a.urls:
        req = client(url)
        db = "/coordlat"
        req("DELETE", db)
        s, b = req("PUT", f"{db}?q={a.q}&n={a.n}")
        assert s in (201, 202), b
        writes, reads = [], []
        for i in range(a.docs):
            t = time.perf_counter(); s, b = req("PUT", f"{db}/d{i:06}", {"i": i, "v": "x" * 100})
            writes.append(time.perf_counter() - t)
            assert s in (201, 202), b
        for i in range(a.docs):
            t = time.perf_counter(); s, b = req("GET", f"{db}/d{i:06}")
            reads.append(time.perf_counter() - t)
            assert s == 200 and json.loads(b)["i"] == i, b
        req("DELETE", db)
        ms = lambda x: "%.2f" % (x * 1000)
        print(f"{url.split('@')[-1]}  write p50 {ms(pct(writes, 50))} p99 {ms(pct(writes, 99))} ms   "
              f"read p50 {ms(pct(reads, 50))} p99 {ms(pct(reads, 99))} ms   ({a.docs} docs)")


if __name__ == "__main__":
    main()
