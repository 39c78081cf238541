#!/usr/bin/env python3
"""Alternating fresh builds of seedbench indexing-002's JS map (REDUCE, default _sum) on two
running servers that each kept seedbench's 100k database (`seedbench.py indexing-002 --keep`,
the data directory copied for the second server). Each build is a new design document, timed
by its first `group=true&limit=11` query (answer checked), with the server process's CPU time
(/proc/PID/stat) read around it; the document is then deleted and cleaned up, and the next
build waits 1 s. The order alternates every round.
Usage: seed002_ab.py PORT_A PID_A PORT_B PID_B ROUNDS [REDUCE] (admin adm:pass).
Standard library only.
"""
import json, os, statistics, sys, time
from seed002 import MAP, connect

port_a, pid_a, port_b, pid_b, rounds = map(int, sys.argv[1:6])
red = sys.argv[6] if len(sys.argv) > 6 else "_sum"
servers = {"A": (port_a, pid_a), "B": (port_b, pid_b)}
tick = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


reqs = {k: connect(p) for k, (p, _) in servers.items()}
res = {k: ([], []) for k in servers}
for i in range(rounds):
    for k in ("A", "B") if i % 2 == 0 else ("B", "A"):
        req, pid = reqs[k], servers[k][1]
        d = "/seedbench-002-indexing/_design/ab%d_%d" % (i, int(time.time() * 1000) % 100000)
        s, b = req("PUT", d, {"views": {"s": {"map": MAP + " // " + d, "reduce": red}}})
        assert s == 201, b
        c0, t = cpu(pid), time.time()
        s, b = req("GET", d + "/_view/s?group=true&limit=11")
        dt, c1 = time.time() - t, cpu(pid)
        assert s == 200 and b"2016" in b, b[:200]
        res[k][0].append(dt)
        res[k][1].append(c1 - c0)
        s, b = req("GET", d)
        s, b = req("DELETE", d + "?rev=" + json.loads(b)["_rev"])
        assert s == 200, b
        s, b = req("POST", "/seedbench-002-indexing/_view_cleanup", {})
        assert s == 202, b
        time.sleep(1.0)
for k, (wall, cpus) in res.items():
    print("%s wall %s median %.3f | cpu %s median %.2f" % (
        k, " ".join("%.3f" % x for x in wall), statistics.median(wall),
        " ".join("%.2f" % x for x in cpus), statistics.median(cpus)))
