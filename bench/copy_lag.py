#!/usr/bin/env python3
"""Copy-to-copy lag of a clustered database: writes at a steady rate through one member,
while a `_changes` longpoll follows every copy of every range on its own member; a write's
lag on a copy is the time from its acknowledgement (201/202) to the copy's feed showing it
(negative: the copy had it before the client heard back). Prints p50/p99/max per copy and
over all, and checks every write reached every copy.
Usage: copy_lag.py [--rate 500] [--seconds 10] [--q 2] [--n 3] URL URL URL
(the members' URLs with a server admin's credentials, the first takes the writes; the
database `copylag` is created and deleted). Standard library only.
"""
import argparse, json, threading, time, urllib.parse
from coordinator_latency import client, pct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--q", type=int, default=2)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("urls", nargs="+")
    a = ap.parse_args()
    db = "copylag"
    first = client(a.urls[0])
    first("DELETE", "/" + db)
    t0 = int(time.time())
    s, b = first("PUT", f"/{db}?q={a.q}&n={a.n}")
    assert s in (201, 202), b
    t1 = int(time.time())
    shards = json.loads(first("GET", f"/{db}/_shards")[1])["shards"]
    # Each member's name: the one whose `_node/_local` answers as itself.
    member_url = {}
    for url in a.urls:
        s, b = client(url)("GET", "/_node/_local")
        member_url[json.loads(b)["name"]] = url
    copies = []  # (range, member name, url, copy name)
    for rng, nodes in shards.items():
        for node in nodes:
            url = member_url[node]
            req = client(url)
            for t in range(t0, t1 + 1):
                name = f"shards/{rng}/{db}.{t}"
                if req("GET", "/" + urllib.parse.quote(name, safe=""))[0] == 200:
                    copies.append((rng, node, url, name))
                    break
            else:
                raise SystemExit(f"no copy of {rng} found on {node}")

    seen = {}  # (copy index, doc id) -> time first shown
    lock = threading.Lock()
    stop = threading.Event()

    def follow(i, url, name):
        req = client(url)
        since = "0"
        path = "/" + urllib.parse.quote(name, safe="")
        while not stop.is_set():
            s, b = req("GET", f"{path}/_changes?feed=longpoll&timeout=500&since={urllib.parse.quote(since)}")
            now = time.perf_counter()
            assert s == 200, b
            v = json.loads(b)
            with lock:
                for row in v["results"]:
                    seen.setdefault((i, row["id"]), now)
            since = str(v["last_seq"])

    followers = [threading.Thread(target=follow, args=(i, url, name), daemon=True)
                 for i, (_, _, url, name) in enumerate(copies)]
    for t in followers:
        t.start()
    time.sleep(1)

    acked = {}  # doc id -> ack time
    writers = 2

    def write(w):
        req = client(a.urls[0])
        per = a.rate / writers
        start = time.perf_counter()
        k = 0
        while True:
            due = start + k / per
            if due - start > a.seconds:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            doc_id = f"w{w}-{k:07}"
            s, b = req("PUT", f"/{db}/{doc_id}", {"k": k, "v": "x" * 100})
            assert s in (201, 202), b
            with lock:
                acked[doc_id] = time.perf_counter()
            k += 1

    ws = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    began = time.perf_counter()
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    took = time.perf_counter() - began
    # Every write on every copy of its range, then stop following.
    range_of = {}
    for doc_id in acked:
        s, b = first("GET", f"/{db}/_shards/{doc_id}")
        range_of[doc_id] = json.loads(b)["range"]
    deadline = time.perf_counter() + 30
    want = [(i, d) for d in acked for i, c in enumerate(copies) if c[0] == range_of[d]]
    while True:
        with lock:
            missing = [k for k in want if k not in seen]
        if not missing or time.perf_counter() > deadline:
            break
        time.sleep(0.2)
    stop.set()
    assert not missing, f"{len(missing)} writes never reached their copies, e.g. {missing[:3]}"
    ms = lambda x: "%.2f" % (x * 1000)
    print(f"{len(acked)} writes in {took:.1f} s ({len(acked) / took:.0f}/s) through {a.urls[0].split('@')[-1]}, "
          f"q={a.q} n={a.n}, {len(copies)} copies followed")
    all_lags = []
    for i, (rng, node, _, _) in enumerate(copies):
        lags = [seen[(i, d)] - acked[d] for d in acked if range_of[d] == rng]
        all_lags += lags
        before = sum(1 for x in lags if x <= 0) / len(lags)
        print(f"  {rng} on {node}: p50 {ms(pct(lags, 50))} p99 {ms(pct(lags, 99))} max {ms(max(lags))} ms "
              f"({before:.0%} shown before the ack)")
    print(f"  all copies: p50 {ms(pct(all_lags, 50))} p99 {ms(pct(all_lags, 99))} max {ms(max(all_lags))} ms")
    first("DELETE", "/" + db)


main()
