#!/usr/bin/env python3
"""A sustained mixed workload (a benchmark, not a test): for --seconds (default 180), client
threads read random documents, write new ones and update existing ones, query a view, and
follow `_changes` with longpolls, all at once against one server. Every answer is checked
(status and body); any error is counted and printed. Every 10 s it samples the server's RSS,
open file descriptors and threads from /proc. At the end: per-operation latency percentiles
(a histogram of the whole run), throughput, errors, and the resource samples, so unbounded
growth shows.

Standard library only. Starts its own server (--bin) on a fresh data directory.
"""
import argparse, base64, http.client, json, os, random, shutil, tempfile, threading, time
from settee_proc import figures, start

AUTH = "Basic " + base64.b64encode(b"admin:admin").decode()
PORT = 5995


def sample(pid):
    f = figures(pid)
    return int(f["rss_mb"]), f["fds"], f["threads"]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.lat = {}
        self.errors = []

    def record(self, op, seconds):
        with self.lock:
            self.lat.setdefault(op, []).append(seconds)

    def error(self, op, what):
        with self.lock:
            self.errors.append(f"{op}: {what}")


def client_loop(kind, stats, stop, ids, ids_lock, rng_seed):
    rng = random.Random(rng_seed)
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)

    def call(op, method, path, body=None, want=(200,)):
        t = time.perf_counter()
        try:
            conn.request(method, path, body=body, headers={"Authorization": AUTH, "Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        except OSError as e:
            stats.error(op, repr(e))
            return None
        stats.record(op, time.perf_counter() - t)
        if r.status not in want:
            stats.error(op, f"{r.status} {data[:200]!r}")
            return None
        return json.loads(data)

    since = "now"
    while not stop.is_set():
        if kind == "reader":
            with ids_lock:
                doc_id = rng.choice(ids)
            d = call("read", "GET", f"/load/{doc_id}")
            if d is not None and d.get("_id") != doc_id:
                stats.error("read", f"wrong document {d.get('_id')}")
        elif kind == "writer":
            if rng.random() < 0.5:
                doc_id = f"w{rng_seed}-{rng.getrandbits(48):012x}"
                if call("create", "PUT", f"/load/{doc_id}", json.dumps({"n": rng.randrange(100), "v": 1}), (201,)):
                    with ids_lock:
                        ids.append(doc_id)
            else:
                with ids_lock:
                    doc_id = rng.choice(ids)
                d = call("read-for-update", "GET", f"/load/{doc_id}")
                if d is not None:
                    d["v"] = d.get("v", 0) + 1
                    # Another writer may have updated it meanwhile: 409 is a correct answer.
                    call("update", "PUT", f"/load/{doc_id}", json.dumps(d), (201, 409))
        elif kind == "view":
            k = rng.randrange(100)
            d = call("view", "GET", f"/load/_design/v/_view/by_n?key={k}&reduce=false&limit=20")
            if d is not None and any(row["key"] != k for row in d["rows"]):
                stats.error("view", "a row with another key")
        elif kind == "changes":
            d = call("longpoll", "GET", f"/load/_changes?feed=longpoll&timeout=5000&since={since}")
            if d is not None:
                since = d["last_seq"]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--docs", type=int, default=20_000, help="documents loaded before the run")
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "settee"))
    args = ap.parse_args()
    data_dir = tempfile.mkdtemp(prefix="settee-load-")
    proc, _ = start(args.bin, data_dir, PORT)
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
        def req(method, path, body=None):
            c.request(method, path, body=body, headers={"Authorization": AUTH, "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        assert req("PUT", "/load")[0] == 201
        ids = [f"seed-{i:06d}" for i in range(args.docs)]
        rng = random.Random(1)
        for k in range(0, len(ids), 2000):
            docs = [{"_id": i, "n": rng.randrange(100), "v": 0} for i in ids[k:k + 2000]]
            assert req("POST", "/load/_bulk_docs", json.dumps({"docs": docs}))[0] == 201
        ddoc = {"views": {"by_n": {"map": "function(doc) { if (doc.n !== undefined) emit(doc.n, doc.v); }", "reduce": "_sum"}}}
        assert req("PUT", "/load/_design/v", json.dumps(ddoc))[0] == 201
        assert req("GET", "/load/_design/v/_view/by_n?limit=1")[0] == 200
        stats, stop, ids_lock = Stats(), threading.Event(), threading.Lock()
        kinds = ["reader"] * args.readers + ["writer"] * args.writers + ["view", "changes", "changes"]
        threads = [threading.Thread(target=client_loop, args=(k, stats, stop, ids, ids_lock, i)) for i, k in enumerate(kinds)]
        samples = [(0, *sample(proc.pid))]
        started = time.perf_counter()
        for t in threads:
            t.start()
        while time.perf_counter() - started < args.seconds:
            time.sleep(10)
            samples.append((round(time.perf_counter() - started), *sample(proc.pid)))
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        print(f"{args.seconds} s mixed load: {args.readers} readers, {args.writers} writers, 1 view client, "
              f"2 longpoll followers; {args.docs} docs loaded first, {len(ids)} at the end")
        print(f"{'operation':<16} {'count':>8} {'per s':>8} {'p50 ms':>8} {'p90':>8} {'p99':>8} {'p99.9':>8} {'max':>8}")
        for op, lat in sorted(stats.lat.items()):
            print(f"{op:<16} {len(lat):>8} {len(lat) / elapsed:>8.0f} {pct(lat, .5):>8.2f} {pct(lat, .9):>8.2f} "
                  f"{pct(lat, .99):>8.2f} {pct(lat, .999):>8.2f} {max(lat) * 1e3:>8.2f}")
        print(f"errors: {len(stats.errors)}")
        for e in stats.errors[:20]:
            print("  " + e)
        print("seconds  RSS MB  fds  threads")
        for s in samples:
            print(f"{s[0]:>7} {s[1]:>7} {s[2]:>4} {s[3]:>8}")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
