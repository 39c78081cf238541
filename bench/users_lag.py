#!/usr/bin/env python3
"""How long a user written on one cluster member takes to log in on another: `_users` is kept
whole on every member and pushed by internal replication when it changes.

    SETTEE_BIN=target/release/settee tests/cluster/with_cluster.py -- python3 bench/users_lag.py [N]

(with_cluster.py sets SETTEE_URLS to the members' URLs; its admin is admin:secret.) For each of
N users (default 30): PUT the user on the first member, then poll `GET /_session` with the
user's password on the second until it answers 200; a random pause (0-1 s) between users, so
that writes fall anywhere in the one-second round. Prints p50, p90 and max of the time from
the PUT to the first 200 (the PUT's own time included), and how many users logged in at the
first try after the PUT was answered.
"""

import base64
import json
import os
import random
import statistics
import sys
import time
import urllib.error
import urllib.request

ADMIN = os.environ.get("ADMIN", "admin:secret")


def status(method, url, body=None, auth=ADMIN):
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    urls = os.environ["SETTEE_URLS"].split(",")
    writer, reader = urls[0], urls[1]
    lags = []
    first_try = 0
    for i in range(n):
        name = "lag%d_%d" % (i, time.time_ns())
        doc = {"name": name, "password": "pw", "roles": [], "type": "user"}
        t0 = time.monotonic()
        assert status("PUT", "%s/_users/org.couchdb.user:%s" % (writer, name), doc) in (201, 202)
        tries = 1
        while status("GET", reader + "/_session", auth=name + ":pw") != 200:
            tries += 1
            time.sleep(0.005)
        first_try += tries == 1
        lags.append(time.monotonic() - t0)
        time.sleep(random.random())
    lags.sort()
    print("users=%d p50=%.0f ms p90=%.0f ms max=%.0f ms first_try=%d/%d" % (
        n, 1000 * statistics.median(lags), 1000 * lags[int(0.9 * n) - 1], 1000 * lags[-1],
        first_try, n))


if __name__ == "__main__":
    main()
