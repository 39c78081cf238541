#!/usr/bin/env python3
"""Scale-out: insert throughput and a view build on a three-member cluster against one
node, each Settee held to the same CPU share by a cgroup (v1 `cpu.cfs_quota_us`, or v2
`cpu.max`), so that one machine stands in for three.

Starts its own etcd (client port 23791) and four Settee processes from BIN (default the
release build): members on 6101-6103 (`--cluster`), a single node on 6110, data in a
temporary directory, each in cgroup `settee_scale_<port>` with QUOTA (default 0.5) of a
CPU. Then, on the cluster (`scale?q=Q&n=N`, default q=3, n=1) and on the single node:

- inserts DOCS documents (default 100000, seedbench-like bodies of ~120 bytes) in
  `_bulk_docs` of 1000 from CLIENTS threads (default 6), each request to the next member
  in turn (the bodies are encoded before the clock starts);
- builds a view (JavaScript map `emit(doc.group, doc.n)`, `_sum`): the first query's time,
  checked against the sum inserted.

Each phase starts once the four processes are idle (`settle`: the previous phase's
flushes and compactions done). Prints docs/s and build seconds for each, and the
cluster/single ratios. Needs root (cgroups)
and the `etcd` binary. Standard library only.

    python3 bench/cluster_scale.py            # DOCS=100000 QUOTA=0.5 Q=3 N=1
    N=3 python3 bench/cluster_scale.py        # every document on every member
"""
import base64
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

BIN = os.environ.get("BIN", os.path.expanduser("~/.cache/settee-target/release/settee"))
DOCS = int(os.environ.get("DOCS", "100000"))
QUOTA = float(os.environ.get("QUOTA", "0.5"))
Q = int(os.environ.get("Q", "3"))
N = int(os.environ.get("N", "1"))
CLIENTS = int(os.environ.get("CLIENTS", "6"))
BATCH = 1000
AUTH = "Basic " + base64.b64encode(b"adm:pass").decode()
MEMBERS = [6101, 6102, 6103]
SINGLE = 6110
ETCD = "http://127.0.0.1:23791"


def cgroup_dir(port):
    v1 = "/sys/fs/cgroup/cpu"
    if os.path.isdir(v1):
        return os.path.join(v1, f"settee_scale_{port}"), True
    return os.path.join("/sys/fs/cgroup", f"settee_scale_{port}"), False


def make_cgroup(port):
    path, v1 = cgroup_dir(port)
    os.makedirs(path, exist_ok=True)
    period = 100_000
    if v1:
        with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
            f.write(str(period))
        with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(int(QUOTA * period)))
    else:
        with open(os.path.join(path, "cpu.max"), "w") as f:
            f.write(f"{int(QUOTA * period)} {period}")
    return path


def remove_cgroup(port):
    path, _ = cgroup_dir(port)
    try:
        os.rmdir(path)
    except OSError:
        pass


def start_settee(port, data, extra, log):
    group = make_cgroup(port)
    cmd = (f"echo $$ > {group}/cgroup.procs; exec {BIN} serve --data-dir {data} "
           f"--bind 127.0.0.1:{port} --admin adm:pass {extra}")
    env = dict(os.environ, SETTEE_CLUSTER_SECRET="scale-secret")
    return subprocess.Popen(["sh", "-c", cmd], env=env, stdout=log, stderr=log)


class Conn:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def req(self, method, path, body=None):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        headers = {"Authorization": AUTH, "Content-Type": "application/json"}
        self.c.request(method, path, body=data, headers=headers)
        r = self.c.getresponse()
        return r.status, json.loads(r.read() or b"null")


def wait_up(port):
    for _ in range(600):
        try:
            if Conn(port).req("GET", "/_up")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"settee on {port} did not start")


def batches():
    out = []
    for k in range(0, DOCS, BATCH):
        docs = [{"_id": "d%08d" % i, "group": "g%03d" % (i % 100), "n": i % 7,
                 "text": "lorem ipsum dolor sit amet " * 3}
                for i in range(k, min(k + BATCH, DOCS))]
        out.append(json.dumps({"docs": docs}).encode())
    return out


def cpu_seconds(procs):
    """Each process's user + system CPU time so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = []
    for p in procs:
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out.append((int(fields[11]) + int(fields[12])) / tick)
    return out


def settle(procs, idle=0.05, quiet=3, most=120):
    """Waits until the processes together use less than `idle` CPU seconds in each of
    `quiet` seconds in a row (at most `most` seconds): each measured phase starts without
    the previous one's background work (RocksDB flushes and compactions) on the machine's
    two cores. `quiet` outlasts the 2 s after its last write at which a Settee flushes its
    memtables (`spawn_idle_flusher`), and the compactions that flush starts."""
    deadline = time.time() + most
    last = sum(cpu_seconds(procs))
    calm = 0
    while time.time() < deadline:
        time.sleep(1)
        now = sum(cpu_seconds(procs))
        calm = calm + 1 if now - last < idle else 0
        if calm >= quiet:
            return
        last = now


def insert(ports, db, bodies):
    work = list(enumerate(bodies))
    lock = threading.Lock()
    failures = []

    def client(t):
        conns = {p: Conn(p) for p in ports}
        while True:
            with lock:
                if not work:
                    return
                i, body = work.pop()
            status, answer = conns[ports[i % len(ports)]].req("POST", f"/{db}/_bulk_docs", body)
            if status not in (201, 202) or any("error" in e for e in answer):
                failures.append((status, str(answer)[:200]))

    threads = [threading.Thread(target=client, args=(t,)) for t in range(CLIENTS)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.time() - t0
    assert not failures, failures[:3]
    return took


def build(port, db):
    ddoc = {"views": {"v": {"map": "function(doc) { emit(doc.group, doc.n); }",
                            "reduce": "_sum"}}}
    c = Conn(port)
    status, answer = c.req("PUT", f"/{db}/_design/b", ddoc)
    assert status in (201, 202), answer
    t0 = time.time()
    status, answer = c.req("GET", f"/{db}/_design/b/_view/v")
    took = time.time() - t0
    expected = sum(i % 7 for i in range(DOCS))
    assert status == 200 and answer["rows"][0]["value"] == expected, (status, str(answer)[:300])
    return took


def main():
    tmp = tempfile.mkdtemp(prefix="settee-scale-")
    log = open(os.path.join(tmp, "log"), "w")
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["etcd", "--data-dir", f"{tmp}/etcd", "--listen-client-urls", ETCD,
             "--advertise-client-urls", ETCD, "--listen-peer-urls", "http://127.0.0.1:23801"],
            stdout=log, stderr=log))
        time.sleep(2)
        for i, port in enumerate(MEMBERS):
            procs.append(start_settee(port, f"{tmp}/m{i}", f"--node-name scale{i}@127.0.0.1 "
                                      f"--cluster {ETCD}", log))
        procs.append(start_settee(SINGLE, f"{tmp}/single", "", log))
        for port in MEMBERS + [SINGLE]:
            wait_up(port)
        c = Conn(MEMBERS[0])
        for i in range(3):
            c.req("PUT", f"/_node/_local/_nodes/scale{i}@127.0.0.1", {})
        while len(c.req("GET", "/_membership")[1]["all_nodes"]) < 3:
            time.sleep(0.2)
        status, answer = c.req("PUT", f"/scale?q={Q}&n={N}")
        assert status == 201, answer
        status, answer = Conn(SINGLE).req("PUT", "/scale")
        assert status == 201, answer
        bodies = batches()

        settees = procs[1:]
        settle(settees)
        before = cpu_seconds(settees)
        single_ins = insert([SINGLE], "scale", bodies)
        after = cpu_seconds(settees)
        single_cpu = after[3] - before[3]
        settle(settees)
        before = cpu_seconds(settees)
        cluster_ins = insert(MEMBERS, "scale", bodies)
        after = cpu_seconds(settees)
        member_cpu = [after[i] - before[i] for i in range(3)]
        for port in (SINGLE, MEMBERS[0]):
            count = Conn(port).req("GET", "/scale")[1]["doc_count"]
            assert count == DOCS, (port, count)
        settle(settees)
        single_build = build(SINGLE, "scale")
        settle(settees)
        cluster_build = build(MEMBERS[0], "scale")

        print(f"{DOCS} docs, each Settee held to {QUOTA} CPU, cluster q={Q} n={N}, "
              f"{CLIENTS} clients")
        print(f"insert  single {DOCS / single_ins:9.0f} docs/s   cluster "
              f"{DOCS / cluster_ins:9.0f} docs/s   ratio {single_ins / cluster_ins:.2f}x")
        print(f"insert CPU seconds: single {single_cpu:.2f}; members "
              + ", ".join(f"{c:.2f}" for c in member_cpu))
        print(f"build   single {single_build:9.2f} s        cluster {cluster_build:9.2f} s"
              f"        ratio {single_build / cluster_build:.2f}x")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        time.sleep(0.5)
        for port in MEMBERS + [SINGLE]:
            remove_cgroup(port)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
