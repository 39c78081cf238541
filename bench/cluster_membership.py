#!/usr/bin/env python3
"""Membership in a Settee cluster on one machine: a single-member etcd on loopback and two
`settee` members (`--cluster`, 2 s leases). Measures
  * the latency of `PUT /_node/_local/_nodes/{name}` on one member (an etcd transaction,
    answered once the member's watch shows it),
  * how long until the other member shows the new document (its watch),
  * how long after `kill -9` of a member the other stops listing it in `all_nodes`.
Usage: cluster_membership.py [N] (default 200 edits). Needs `etcd` on PATH and the release
binary ($SETTEE_BIN, default $CARGO_TARGET_DIR/release/settee). Standard library only.
"""
import base64, json, os, socket, statistics, subprocess, sys, tempfile, time, urllib.request

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
BIN = os.environ.get("SETTEE_BIN") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "target"), "release", "settee")
AUTH = "Basic " + base64.b64encode(b"adm:pass").decode()


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def req(port, method, path, body=None):
    r = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                               data=None if body is None else json.dumps(body).encode(),
                               headers={"Authorization": AUTH, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait(what, cond, limit=30):
    t = time.time()
    while not cond():
        if time.time() - t > limit:
            sys.exit("timed out: " + what)
        time.sleep(0.001)


tmp = tempfile.mkdtemp()
cport, pport = free_port(), free_port()
etcd = subprocess.Popen(
    ["etcd", "--name", "e0", "--data-dir", tmp + "/etcd",
     "--listen-client-urls", "http://127.0.0.1:%d" % cport,
     "--advertise-client-urls", "http://127.0.0.1:%d" % cport,
     "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
     "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
     "--initial-cluster", "e0=http://127.0.0.1:%d" % pport,
     "--logger", "zap", "--log-level", "error"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ini = tmp + "/cluster.ini"
open(ini, "w").write("[cluster]\nlease_ttl = 2\n")
nodes = []
for i in (1, 2):
    port = free_port()
    env = dict(os.environ, SETTEE_CLUSTER_SECRET="bench", SETTEE_LOG="warn")
    p = subprocess.Popen(
        [BIN, "serve", "--data-dir", "%s/n%d" % (tmp, i), "--bind", "127.0.0.1:%d" % port,
         "--admin", "adm:pass", "--node-name", "settee%d@127.0.0.1" % i,
         "--cluster", "http://127.0.0.1:%d" % cport, "--config", ini],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nodes.append((p, port))
(p1, n1), (p2, n2) = nodes
try:
    def members(port):
        s, b = req(port, "GET", "/_membership") if port else (0, None)
        return b if s == 200 else {}
    time.sleep(1)
    wait("both members", lambda: len(members(n1).get("all_nodes", [])) == 2)
    put, seen = [], []
    for i in range(N):
        name = "/_node/_local/_nodes/x%d@h" % i
        t = time.perf_counter()
        s, b = req(n2, "PUT", name, {})
        t1 = time.perf_counter()
        assert s == 201, b
        wait("seen on n1", lambda: req(n1, "GET", name)[0] == 200)
        seen.append(time.perf_counter() - t1)
        put.append(t1 - t)
    ms = lambda xs, q: 1000 * sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]
    print("PUT on n2 (etcd txn + own watch)   p50 %.2f ms  p99 %.2f ms" % (ms(put, .5), ms(put, .99)))
    print("then visible on n1 (GET polled)     p50 %.2f ms  p99 %.2f ms" % (ms(seen, .5), ms(seen, .99)))
    p2.kill(); p2.wait()
    t = time.time()
    wait("n2 gone", lambda: members(n1).get("all_nodes") == ["settee1@127.0.0.1"])
    print("kill -9 of n2 -> gone from n1's all_nodes after %.2f s (lease_ttl 2 s)" % (time.time() - t))
finally:
    for p, _ in nodes:
        p.kill()
    etcd.kill()
