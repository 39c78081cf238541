#!/usr/bin/env python3
"""Runs a command against a Settee cluster: three etcd members and three Settee members on
loopback, joined as CouchDB's manual procedure has it, then the command with
``SETTEE_URL`` set to the first member, ``SETTEE_URLS`` to every member's URL (comma
separated) and ``SETTEE_CLUSTER=1``, so suites know not to expect a single node's sequence
order. Everything is stopped and removed afterwards;
the command's exit status is this script's.

    tests/cluster/with_cluster.py -- bash tests/clients/run.sh

Databases the command creates get the cluster's defaults, ``q=2`` and ``n=3``: each range
on every member, writes answered at ``w=2``.

Env: SETTEE_BIN  the settee binary (default: the workspace's target/release/settee)
     ADMIN       the server admin, ``user:password`` (default admin:secret, the client
                 suites' admin)
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from base64 import b64encode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTEE_BIN = os.environ.get("SETTEE_BIN", os.path.join(ROOT, "target", "release", "settee"))
ADMIN = os.environ.get("ADMIN", "admin:secret")
SECRET = "with-cluster-secret"
MEMBERS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, url, body=None, timeout=5):
    req = urllib.request.Request(url, method=method, data=body)
    req.add_header("Authorization", "Basic " + b64encode(ADMIN.encode()).decode())
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait(what, cond, procs, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for name, p, _ in procs:
            if p.poll() is not None:
                raise SystemExit("with_cluster: %s exited (%s) while waiting for %s"
                                 % (name, p.returncode, what))
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("with_cluster: timed out waiting for %s" % what)


def tail(path, n=4000):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def warnings(path, most=60):
    """The log's last `most` warnings and errors (a failure's cause is seldom in the tail)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join([l for l in lines if l.startswith(("[warning]", "[error]"))][-most:])


def main():
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        raise SystemExit(__doc__)
    if not os.access(SETTEE_BIN, os.X_OK):
        raise SystemExit("with_cluster: no settee binary at %s (cargo build --release)" % SETTEE_BIN)
    tmp = tempfile.mkdtemp(prefix="settee-cluster-")
    procs = []  # (name, Popen, log path)

    def spawn(name, cmd, env=None):
        log = os.path.join(tmp, name + ".log")
        with open(log, "wb") as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env)
        procs.append((name, p, log))

    status = 1
    try:
        etcd = [(free_port(), free_port()) for _ in range(MEMBERS)]
        initial = ",".join("e%d=http://127.0.0.1:%d" % (i, peer) for i, (_, peer) in enumerate(etcd))
        for i, (client, peer) in enumerate(etcd):
            spawn("etcd%d" % i, [
                "etcd", "--name", "e%d" % i, "--data-dir", os.path.join(tmp, "etcd%d" % i),
                "--listen-client-urls", "http://127.0.0.1:%d" % client,
                "--advertise-client-urls", "http://127.0.0.1:%d" % client,
                "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--logger", "zap", "--log-level", "error"])
        for client, _ in etcd:
            wait("etcd on %d" % client, lambda: b'"health":"true"' in urllib.request.urlopen(
                "http://127.0.0.1:%d/health" % client, timeout=2).read(), procs)
        endpoints = ",".join("http://127.0.0.1:%d" % c for c, _ in etcd)

        names = ["settee%d@127.0.0.1" % (i + 1) for i in range(MEMBERS)]
        urls = []
        env = dict(os.environ, SETTEE_CLUSTER_SECRET=SECRET)
        for i, name in enumerate(names):
            port = free_port()
            data = os.path.join(tmp, "member%d" % (i + 1))
            os.mkdir(data)
            spawn("member%d" % (i + 1), [
                SETTEE_BIN, "serve", "--data-dir", data, "--bind", "127.0.0.1:%d" % port,
                "--admin", ADMIN, "--node-name", name, "--cluster", endpoints], env)
            urls.append("http://127.0.0.1:%d" % port)
        for url in urls:
            wait(url + "/_up", lambda: request("GET", url + "/_up")[0] == 200, procs)
        for name in names:
            st, body = request("PUT", urls[0] + "/_node/_local/_nodes/" + name, b"{}")
            if st not in (201, 202, 409):
                raise SystemExit("with_cluster: adding %s: %s %s" % (name, st, body))

        def everyone_sees_all():
            for url in urls:
                st, body = request("GET", url + "/_membership")
                if st != 200 or sorted(json.loads(body)["all_nodes"]) != names:
                    return False
            return True

        wait("every member to see all three", everyone_sees_all, procs)
        print("with_cluster: %d members (%s), etcd %s" % (MEMBERS, " ".join(urls), endpoints),
              flush=True)
        run_env = dict(os.environ, SETTEE_URL=urls[0], SETTEE_URLS=",".join(urls),
                       SETTEE_CLUSTER="1")
        status = subprocess.call(args, env=run_env)
    finally:
        for _, p, _ in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for name, p, log in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if status != 0 and name.startswith("member"):
                sys.stderr.write("---- %s's warnings and errors ----\n%s\n" % (name, warnings(log)))
                sys.stderr.write("---- %s's log (tail) ----\n%s\n" % (name, tail(log)))
        shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
