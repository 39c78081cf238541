#!/usr/bin/env python3
"""Render functions: requests/s of a show (with a document) and of an update (which writes a
document per request), from several client processes on keep-alive connections, and the
rows/s a list streams over a view of N rows.

Standard library only. Starts its own server on a fresh data directory.
"""
import argparse, base64, http.client, json, multiprocessing, os, socket, subprocess, tempfile, time

AUTH = "Basic " + base64.b64encode(b"admin:admin").decode()

DDOC = {
    "_id": "_design/b",
    "shows": {"s": "function(doc, req) { return {body: 'Hello ' + doc.name, headers: {'X-N': '' + doc.n}}; }"},
    "updates": {"fresh": "function(doc, req) { return [{_id: req.uuid, n: 1}, 'made']; }", "u": "function(doc, req) { doc = doc || {_id: req.id, n: 0}; doc.n += 1; return [doc, 'n=' + doc.n]; }"},
    "lists": {"l": "function(head, req) { start({headers: {'Content-Type': 'text/plain'}}); var row; while ((row = getRow())) { send(row.key + ' ' + row.value + '\\n'); } }"},
    "views": {"v": {"map": "function(doc) { emit(doc.n, doc.name); }"}},
}


def request(conn, method, path, body=None):
    conn.request(method, path, body=body, headers={"Authorization": AUTH, "Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def read_response(sock, buf):
    """Reads one Content-Length response off `sock`; returns (status, leftover buffer)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return status, rest[length:]


def worker(port, kind, seconds, wid, docs, out):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reqs = []
    for i in range(docs):
        if kind == "show":
            reqs.append(f"GET /db/_design/b/_show/s/d{i} HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\n\r\n".encode())
        elif kind == "fresh":
            reqs.append(f"POST /db/_design/b/_update/fresh HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\nContent-Length: 0\r\n\r\n".encode())
        elif kind == "put":
            reqs.append(None)
        elif kind == "post":
            body = json.dumps({"n": i, "name": f"w{wid}"})
            reqs.append(f"POST /db HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        else:
            reqs.append(f"POST /db/_design/b/_update/u/w{wid}-{i % 1000} HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\nContent-Length: 0\r\n\r\n".encode())
    n, bad, buf = 0, 0, b""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sock.sendall(reqs[n % len(reqs)])
        status, buf = read_response(sock, buf)
        if status not in (200, 201):
            bad += 1
        n += 1
    out.put((n, bad))


SERVER_PID = None


def cpu_seconds():
    """The server's user + system CPU time so far."""
    fields = open(f"/proc/{SERVER_PID}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LOADER = None

# What each kind of load asks, for the native loader ({t}: connection, {i}: request number mod 1000, so each document is updated a few times rather than thousands: revision trees grow with every update and make each next one dearer).
NATIVE = {
    "show": ("GET", "/db/_design/b/_show/s/d{i}", ""),
    "update": ("POST", "/db/_design/b/_update/u/w{t}-{i}", ""),
    "fresh": ("POST", "/db/_design/b/_update/fresh", ""),
    "post": ("POST", "/db", '{"n": 1, "name": "w"}'),
}


def run_load(port, kind, seconds, procs, docs):
    if LOADER:
        cpu0 = cpu_seconds()
        method, path, body = NATIVE[kind]
        out = subprocess.run([LOADER, f"127.0.0.1:{port}", str(seconds), str(procs), method, path, body],
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out)
        n = r["requests"]
        return r["rate"], n, r["other"], (cpu_seconds() - cpu0) / max(n, 1) * 1e6
    cpu0 = cpu_seconds()
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=worker, args=(port, kind, seconds, w, docs, q)) for w in range(procs)]
    t0 = time.perf_counter()
    for p in ps:
        p.start()
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
    elapsed = time.perf_counter() - t0
    n = sum(r[0] for r in results)
    bad = sum(r[1] for r in results)
    return n / seconds, n, bad, (cpu_seconds() - cpu0) / max(n, 1) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "settee"))
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--port", type=int, default=5998)
    ap.add_argument("--baseline", action="store_true", help="also time plain document POSTs")
    ap.add_argument("--no-list", action="store_true")
    ap.add_argument("--loader", help="the native load generator (crates/server/examples/http_load.rs) instead of Python clients")
    args = ap.parse_args()

    data_dir = tempfile.mkdtemp(prefix="settee-bench-render-")
    proc = subprocess.Popen([args.bin, "serve", "--data-dir", data_dir, "--bind", f"127.0.0.1:{args.port}",
                             "--admin", "admin:admin"], stderr=subprocess.DEVNULL, env={**os.environ, "SETTEE_LOG": "warn"})
    global SERVER_PID, LOADER
    SERVER_PID = proc.pid
    LOADER = args.loader
    try:
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", args.port, timeout=1)
                c.request("GET", "/_up")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=600)
        assert request(conn, "PUT", "/db")[0] == 201
        assert request(conn, "PUT", "/db/_design/b", json.dumps(DDOC))[0] == 201
        for k in range(0, args.rows, 5000):
            docs = [{"_id": f"d{i}", "n": i, "name": f"doc{i}"} for i in range(k, min(k + 5000, args.rows))]
            status, body = request(conn, "POST", "/db/_bulk_docs", json.dumps({"docs": docs}))
            assert status == 201, body[:200]

        rate, n, bad, cpu = run_load(args.port, "show", args.seconds, args.procs, 1000)
        print(f"show:   {rate:8.0f} req/s  ({n} requests, {bad} not 200, {args.procs} connections, {args.seconds} s, server CPU {cpu:.0f} us/request)")
        rate, n, bad, cpu = run_load(args.port, "update", args.seconds, args.procs, 1000)
        print(f"update: {rate:8.0f} req/s  ({n} requests, {bad} not 201, {args.procs} connections, {args.seconds} s, server CPU {cpu:.0f} us/request)")
        if args.baseline:
            rate, n, bad, cpu = run_load(args.port, "post", args.seconds, args.procs, 1000)
            print(f"POST /db (baseline): {rate:8.0f} req/s  ({n} requests, {bad} not 201, server CPU {cpu:.0f} us/request)")
            rate, n, bad, cpu = run_load(args.port, "fresh", args.seconds, args.procs, 1000)
            print(f"update creating new docs: {rate:8.0f} req/s  ({n} requests, {bad} not 201, server CPU {cpu:.0f} us/request)")

        if args.no_list:
            return
        t0 = time.perf_counter()
        status, _ = request(conn, "GET", "/db/_design/b/_view/v?limit=1")
        assert status == 200
        print(f"view index build over {args.rows} docs: {time.perf_counter() - t0:.1f} s")
        for attempt in range(3):
            t0 = time.perf_counter()
            conn.request("GET", "/db/_design/b/_list/l/v", headers={"Authorization": AUTH})
            r = conn.getresponse()
            first = None
            total = 0
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                if first is None:
                    first = time.perf_counter() - t0
                total += chunk.count(b"\n")
            elapsed = time.perf_counter() - t0
            assert r.status == 200 and total >= args.rows, (r.status, total)
            print(f"list:   {total / elapsed:8.0f} rows/s  ({total} rows in {elapsed:.2f} s, first bytes after {first * 1000:.1f} ms)")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
