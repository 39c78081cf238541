#!/usr/bin/env python3
"""Many databases on one server (the per-user database pattern; a benchmark, not a test).

Creates --dbs databases (default 10,000), writes one document to each and reads it back,
then reports the server's RSS, open file descriptors and threads; stops the server
(SIGTERM), starts it again on the same data directory and reports the time until `/_up`
answers and until a read from every database has succeeded, and the figures again. With
--checkpoints (default 1000,10000) it reports at each of those counts on the way.

Standard library only; starts its own server (--bin) on a fresh data directory.
"""
import argparse, base64, http.client, json, os, shutil, signal, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from settee_proc import figures, start

AUTH = "Basic " + base64.b64encode(b"admin:admin").decode()


class Client:
    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def req(self, method, path, body=None):
        self.conn.request(method, path, body=body, headers={"Authorization": AUTH, "Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()


def work(port, names, fn):
    """Runs fn(client, name) for every name, on 4 connections."""
    chunks = [names[i::4] for i in range(4)]
    def run(chunk):
        c = Client(port)
        for n in chunk:
            fn(c, n)
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(run, chunks))


def create_and_write(c, name):
    s, b = c.req("PUT", f"/{name}")
    assert s == 201, (name, s, b)
    s, b = c.req("PUT", f"/{name}/profile", json.dumps({"owner": name}))
    assert s == 201, (name, s, b)
    s, b = c.req("GET", f"/{name}/profile")
    assert s == 200 and json.loads(b)["owner"] == name, (name, s, b)


def read_back(c, name):
    s, b = c.req("GET", f"/{name}/profile")
    assert s == 200 and json.loads(b)["owner"] == name, (name, s, b)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dbs", type=int, default=10_000)
    ap.add_argument("--checkpoints", default="1000,10000")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "settee"))
    args = ap.parse_args()
    data_dir = tempfile.mkdtemp(prefix="settee-many-dbs-")
    port = 5996
    proc, _ = start(args.bin, data_dir, port)
    try:
        done = 0
        marks = sorted({int(x) for x in args.checkpoints.split(",") if int(x) <= args.dbs} | {args.dbs})
        print(f"{'dbs':>7} {'create+write+read s':>20} {'RSS MB':>8} {'fds':>6} {'threads':>8}")
        for mark in marks:
            names = [f"userdb-{i:06d}" for i in range(done, mark)]
            t = time.perf_counter()
            work(port, names, create_and_write)
            elapsed = time.perf_counter() - t
            done = mark
            f = figures(proc.pid)
            print(f"{mark:>7} {elapsed:>20.1f} {f['rss_mb']:>8.0f} {f['fds']:>6} {f['threads']:>8}")
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        proc, up = start(args.bin, data_dir, port)
        t = time.perf_counter()
        work(port, [f"userdb-{i:06d}" for i in range(done)], read_back)
        read_all = time.perf_counter() - t
        f = figures(proc.pid)
        print(f"restart: /_up after {up:.2f} s; every database read back in {read_all:.1f} s more; "
              f"RSS {f['rss_mb']:.0f} MB, {f['fds']} fds, {f['threads']} threads")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
