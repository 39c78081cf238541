#!/usr/bin/env python3
"""Reading `_changes`, side by side on several CouchDB-compatible servers (Settee and the
reference CouchDB, say): loads the same documents into a fresh database on each, then times
the ways clients read the feed, every answer checked (row count, ids, last_seq's number).

  - the whole normal feed in one response (rows/s);
  - the feed in pages of --page rows (`since` = the previous page's last_seq, as a
    replicator or PouchDB reads it);
  - pages with `include_docs=true`;
  - a `_doc_ids` filtered feed of --ids ids;
  - a revalidation: the whole feed asked again with the ETag of the first answer.

Usage: changes_feed.py --url http://adm:pass@127.0.0.1:5984 --url http://adm:pass@127.0.0.1:5985
       [--docs 100000] [--page 1000]. Standard library only; one connection per server.
"""
import argparse, base64, http.client, json, random, time, urllib.parse


class Server:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.name = f"{u.hostname}:{u.port}"
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        cred = f"{urllib.parse.unquote(u.username or '')}:{urllib.parse.unquote(u.password or '')}"
        self.auth = "Basic " + base64.b64encode(cred.encode()).decode()

    def request(self, method, path, body=None, headers=()):
        h = {"Authorization": self.auth, "Accept": "application/json", **dict(headers)}
        if body is not None:
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        self.conn.request(method, path, body, h)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def seq_number(seq):
    return int(str(seq).split("-", 1)[0])


def load(s, db, docs):
    s.request("DELETE", f"/{db}")
    status, _, body = s.request("PUT", f"/{db}")
    assert status in (201, 202), body
    rnd = random.Random(7)
    for start in range(0, docs, 1000):
        batch = [{"_id": f"d{i:08d}", "n": i, "text": "x" * rnd.randint(10, 200)}
                 for i in range(start, min(start + 1000, docs))]
        status, _, body = s.request("POST", f"/{db}/_bulk_docs", {"docs": batch})
        assert status == 201, body


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def run(s, db, docs, page, ids):
    results = {}
    # The whole feed.
    dt, (status, headers, body) = timed(lambda: s.request("GET", f"/{db}/_changes"))
    feed = json.loads(body)
    assert status == 200 and len(feed["results"]) == docs, (status, len(feed["results"]))
    assert seq_number(feed["last_seq"]) == docs
    results["whole feed"] = docs / dt
    # Pages.
    for label, extra in (("pages", ""), ("pages, include_docs", "&include_docs=true")):
        since, seen = 0, 0
        t = time.perf_counter()
        while True:
            status, _, body = s.request("GET", f"/{db}/_changes?limit={page}&since={since}{extra}")
            rows = json.loads(body)
            assert status == 200
            if not rows["results"]:
                break
            if extra:
                assert all(r["doc"]["_id"] == r["id"] for r in rows["results"])
            seen += len(rows["results"])
            since = urllib.parse.quote(str(rows["last_seq"]), safe="")
        dt = time.perf_counter() - t
        assert seen == docs, (label, seen)
        results[label] = docs / dt
    # A `_doc_ids` feed.
    want = sorted(f"d{i:08d}" for i in random.Random(3).sample(range(docs), ids))
    dt, (status, _, body) = timed(lambda: s.request("POST", f"/{db}/_changes?filter=_doc_ids",
                                                     {"doc_ids": want}))
    got = sorted(r["id"] for r in json.loads(body)["results"])
    assert status == 200 and got == want
    results[f"_doc_ids ({ids} ids), ms"] = dt * 1000
    # Revalidation, with the ETag of a fresh answer: the database's info (and so the ETag)
    # changes while the storage engine settles after the load (file sizes).
    status, headers, _ = s.request("GET", f"/{db}/_changes?limit=0")
    etag = headers.get("etag")
    if etag:
        dt, (status, _, body) = timed(lambda: s.request("GET", f"/{db}/_changes",
                                                         headers=[("If-None-Match", etag)]))
        assert status == 304 and body == b"", status
        results["304 revalidation, ms"] = dt * 1000
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", action="append", required=True)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--page", type=int, default=1000)
    ap.add_argument("--ids", type=int, default=100)
    ap.add_argument("--db", default="changes_bench")
    args = ap.parse_args()
    servers = [Server(u) for u in args.url]
    for s in servers:
        load(s, args.db, args.docs)
    table = {}
    for s in servers:
        table[s.name] = run(s, args.db, args.docs, args.page, args.ids)
        s.request("DELETE", f"/{args.db}")
    labels = list(next(iter(table.values())).keys())
    print(f"{args.docs} docs, pages of {args.page}; rows/s unless noted")
    print("| | " + " | ".join(table) + " |")
    print("|---|" + "---|" * len(table))
    for label in labels:
        cells = [f"{t.get(label, float('nan')):,.1f}" if "ms" in label else f"{t.get(label, 0):,.0f}"
                 for t in table.values()]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
