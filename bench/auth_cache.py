#!/usr/bin/env python3
"""What a member that holds no copy of a clustered authentication database pays per request
authenticated as one of its users, with and without the users it keeps.

    SETTEE_BIN=target/release/settee tests/cluster/with_cluster.py -- python3 bench/auth_cache.py [N]

(with_cluster.py sets SETTEE_URLS to the members' URLs; its admin is admin:secret.) Makes
`adb` (q=1, n=1) the authentication database on every member, writes one user, then times
N (default 3000) `GET /_session` with the user's Basic credentials, one connection, one at a
time, on a member without the copy: first with `[chttpd_auth_cache] max_size = 1` (nothing
fits: the user is read from the copy's member every time), then with the default (the user
is kept until its document changes), and on the member holding the copy for comparison
(a local read). Prints p50/p99 in ms and requests/s of each.
"""

import base64
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

ADMIN = os.environ.get("ADMIN", "admin:secret")


def basic(cred):
    return "Basic " + base64.b64encode(cred.encode()).decode()


class Conn:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.c = http.client.HTTPConnection(u.hostname, u.port)

    def req(self, method, path, body=None, auth=ADMIN):
        headers = {"Authorization": basic(auth), "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body)
        self.c.request(method, path, body=data, headers=headers)
        r = self.c.getresponse()
        return r.status, r.read()


def timed(conn, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = conn.req("GET", "/_session", auth="bench:pw")
        times.append(time.perf_counter() - t0)
        assert status == 200, status
    times.sort()
    return times


def show(what, times):
    print("%-44s p50=%.3f ms p99=%.3f ms %6.0f req/s" % (
        what, 1000 * statistics.median(times), 1000 * times[int(0.99 * len(times)) - 1],
        len(times) / sum(times)))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    urls = os.environ["SETTEE_URLS"].split(",")
    conns = [Conn(u) for u in urls]
    for c in conns:
        assert c.req("PUT", "/_node/_local/_config/chttpd_auth/authentication_db", "adb")[0] == 200
    assert conns[0].req("PUT", "/adb?q=1&n=1")[0] in (201, 202)
    status, body = conns[0].req("GET", "/adb/_shards")
    holder_name = json.loads(body)["shards"]["00000000-ffffffff"][0]
    names = [json.loads(c.req("GET", "/_node/_local")[1])["name"] for c in conns]
    holder = conns[names.index(holder_name)]
    far = conns[(names.index(holder_name) + 1) % len(conns)]
    doc = {"name": "bench", "password": "pw", "roles": [], "type": "user"}
    assert conns[0].req("PUT", "/adb/org.couchdb.user:bench", doc)[0] in (201, 202)
    size = "/_node/_local/_config/chttpd_auth_cache/max_size"
    assert far.req("PUT", size, "1")[0] == 200
    timed(far, 200)
    show("member without the copy, nothing kept", timed(far, n))
    assert far.req("DELETE", size)[0] == 200
    time.sleep(6)  # the listener's feed is live within 5 s of the database's creation
    timed(far, 200)
    show("member without the copy, the user kept", timed(far, n))
    timed(holder, 200)
    show("member holding the copy (local read)", timed(holder, n))


if __name__ == "__main__":
    main()
