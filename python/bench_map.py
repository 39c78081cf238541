#!/usr/bin/env python3
"""Pipes N map_doc lines through a query server and prints docs/s.

    python3 bench_map.py                      # settee-query-server, codec auto
    python3 bench_map.py --json stdlib        # force the stdlib codec
    python3 bench_map.py --style emit         # map function using emit()
    python3 bench_map.py --cmd couchpy        # any other server command

A writer thread feeds all lines (pipelined, as Settee does) while the main
thread reads the answers; the time runs from the first map_doc written to
the last answer read. Documents are ~300 bytes of JSON.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

MAP_YIELD = """def map(doc):
    if 'metadata' in doc and 'createdAt' in doc['metadata']:
        year, month, _ = doc['metadata']['createdAt'].split('-')
        yield [year, month], doc['score']
"""

MAP_EMIT = """def map(doc):
    if 'metadata' in doc and 'createdAt' in doc['metadata']:
        year, month, _ = doc['metadata']['createdAt'].split('-')
        emit([year, month], doc['score'])
"""


def make_doc(i, rng):
    return {
        "_id": "doc-%08d" % i,
        "_rev": "1-%032x" % rng.getrandbits(128),
        "type": "post",
        "title": "Post number %d about things" % i,
        "score": rng.randint(0, 1000),
        "tags": ["alpha", "beta", "gamma"][: rng.randint(1, 3)],
        "metadata": {
            "createdAt": "%04d-%02d-%02d" % (rng.randint(2015, 2025), rng.randint(1, 12),
                                            rng.randint(1, 28)),
            "author": "user%d" % rng.randint(1, 500),
            "views": rng.randint(0, 100000),
        },
        "body": "lorem ipsum dolor sit amet " * 3,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200000, help="documents (default 200000)")
    p.add_argument("--json", choices=["auto", "orjson", "stdlib"], default="auto")
    p.add_argument("--style", choices=["yield", "emit"], default="yield")
    p.add_argument("--cmd", default=None,
                   help="server command line (default: this checkout's server)")
    args = p.parse_args()

    rng = random.Random(42)
    lines = [json.dumps(["map_doc", make_doc(i, rng)], separators=(",", ":")).encode() + b"\n"
             for i in range(args.n)]
    avg = sum(map(len, lines)) / len(lines)

    env = dict(os.environ, SETTEE_QS_JSON=args.json)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    cmd = args.cmd.split() if args.cmd else [sys.executable, "-m", "settee_query_server"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    source = MAP_YIELD if args.style == "yield" else MAP_EMIT
    for setup in (["reset", {"reduce_limit": True}], ["add_fun", source]):
        proc.stdin.write(json.dumps(setup).encode() + b"\n")
        proc.stdin.flush()
        answer = proc.stdout.readline()
        assert answer.strip() == b"true", answer

    def feed():
        w = proc.stdin
        for i in range(0, len(lines), 512):
            w.write(b"".join(lines[i:i + 512]))
        w.flush()

    start = time.perf_counter()
    writer = threading.Thread(target=feed)
    writer.start()
    read = proc.stdout.readline
    emitted = 0
    for _ in range(args.n):
        answer = read()
        if not answer.startswith(b"[["):
            sys.exit("unexpected answer: %r" % answer[:200])
        emitted += answer != b"[[]]\n"
    elapsed = time.perf_counter() - start
    writer.join()
    proc.stdin.close()
    # wait4 gives the server's own CPU time: docs per CPU-second is the figure
    # that holds up on a busy machine, where wall-clock rates are noisy.
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    cpu = usage.ru_utime + usage.ru_stime
    print("%s codec=%s style=%s: %d docs (avg %.0f bytes) in %.3f s = %.0f docs/s wall; "
          "server CPU %.3f s (incl. startup) = %.0f docs/CPU-s (%d emitting)"
          % (" ".join(cmd[-2:]) if args.cmd is None else args.cmd, args.json, args.style,
             args.n, avg, elapsed, args.n / elapsed, cpu, args.n / cpu, emitted))


if __name__ == "__main__":
    main()
