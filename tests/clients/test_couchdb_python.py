"""Real-client compatibility tests: couchdb-python (PyPI ``CouchDB``, module
``couchdb``) against a Settee server started by a pytest fixture.

Run:  pytest tests/clients/test_couchdb_python.py
Env:  SETTEE_BIN  path to the settee binary
                  (default: the workspace's target/release/settee)
      SETTEE_URL  if set (e.g. http://127.0.0.1:5984), use that already
                  running server instead of spawning one; it must accept
                  admin:secret.
      SETTEE_CLUSTER=1  SETTEE_URL is a cluster member (tests/cluster/with_cluster.py):
                  a clustered _changes keeps no order across ranges (as CouchDB's),
                  so the feed's rows are compared as sets there.

Python 3.11 notes on couchdb-python 1.2 (last release, 2018):
  * It imports and works on 3.11 for everything used here; no monkeypatching
    is needed. Its doctest-era API (Server/Database/ViewResults) is used as is.
  * Its HTTP layer caches GET responses per URL by ETag and revalidates with
    If-None-Match, so every repeated GET here also exercises the server's
    ETag / 304 handling.
  * ``Database.changes(feed='continuous')`` parses the chunked transfer
    encoding itself (``ResponseBody.iterchunks``), so the continuous feed must
    be sent with ``Transfer-Encoding: chunked``, as CouchDB does.
  * On an error status it only decodes a JSON body that was buffered, i.e.
    one sent with a Content-Length below 8 KiB (CouchDB always sends one);
    a chunked error body would surface as AttributeError, not as the
    couchdb.http exception the tests expect.
"""

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import pytest

import couchdb
from couchdb import http as couchhttp

ADMIN_USER, ADMIN_PASS = "admin", "secret"
CLUSTER = os.environ.get("SETTEE_CLUSTER") == "1"
SETTEE_BIN = os.environ.get(
    "SETTEE_BIN",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "release", "settee"),
)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(base, proc, log_path, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                "settee exited early with code %s:\n%s" % (proc.returncode, _read(log_path))
            )
        try:
            with urllib.request.urlopen(base + "/_up", timeout=2) as resp:
                if resp.status == 200:
                    return
                last = resp.status
        except (urllib.error.URLError, OSError) as e:  # not up yet
            last = e
        time.sleep(0.1)
    raise RuntimeError("settee did not come up at %s: %r\n%s" % (base, last, _read(log_path)))


def _read(path):
    if not path:
        return ""
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()[-20000:]
    except OSError:
        return ""


@pytest.fixture(scope="session")
def base_url():
    """Start settee on a fresh data dir and a free port; yield its base URL."""
    if os.environ.get("SETTEE_URL"):
        base = os.environ["SETTEE_URL"].rstrip("/")
        _wait_up(base, None, None, timeout=10)
        yield base
        return
    if not os.path.exists(SETTEE_BIN):
        pytest.fail("settee binary not found at %s (set SETTEE_BIN)" % SETTEE_BIN)
    tmp = tempfile.mkdtemp(prefix="settee-couchdb-python-")
    data_dir = os.path.join(tmp, "data")
    os.mkdir(data_dir)
    log_path = os.path.join(tmp, "server.log")
    port = _free_port()
    base = "http://127.0.0.1:%d" % port
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [SETTEE_BIN, "serve", "--data-dir", data_dir, "--bind", "127.0.0.1:%d" % port,
         "--admin", "%s:%s" % (ADMIN_USER, ADMIN_PASS)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    try:
        _wait_up(base, proc, log_path)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def admin_url(base_url):
    scheme, rest = base_url.split("://", 1)
    return "%s://%s:%s@%s/" % (scheme, ADMIN_USER, ADMIN_PASS, rest)


@pytest.fixture()
def server(admin_url):
    return couchdb.Server(admin_url)


@pytest.fixture()
def db(server):
    name = "py-" + uuid.uuid4().hex[:12]
    database = server.create(name)
    yield database
    try:
        server.delete(name)
    except couchhttp.ResourceNotFound:
        pass


def hex32(c):
    return c * 32


# ---------------------------------------------------------------------------


def test_server_info_and_auth(base_url, server):
    anon = couchdb.Server(base_url + "/")
    # GET / is open to anonymous users
    assert isinstance(anon.version(), str)
    assert server.version() == anon.version()
    # everything else needs the admin
    with pytest.raises(couchhttp.Unauthorized):
        anon.create("py-anon-" + uuid.uuid4().hex[:8])
    with pytest.raises(couchhttp.Unauthorized):
        list(anon)  # GET /_all_dbs
    bad = couchdb.Server(base_url.replace("://", "://admin:wrong@") + "/")
    with pytest.raises(couchhttp.Unauthorized):
        bad.create("py-bad-" + uuid.uuid4().hex[:8])
    uuids = anon.uuids(3)
    assert len(uuids) == 3 and len(set(uuids)) == 3


def test_create_and_delete_database(server):
    name = "py-db-" + uuid.uuid4().hex[:12]
    assert name not in server
    db = server.create(name)
    assert db.name == name
    assert name in server
    assert name in list(server)  # _all_dbs
    info = db.info()
    assert info["db_name"] == name
    assert info["doc_count"] == 0
    assert len(db) == 0
    with pytest.raises(couchhttp.PreconditionFailed):
        server.create(name)
    assert server[name].name == name
    server.delete(name)
    assert name not in server
    with pytest.raises(couchhttp.ResourceNotFound):
        server[name]
    with pytest.raises(couchhttp.ResourceNotFound):
        server.delete(name)
    # invalid names are rejected with 400 (ServerError in couchdb-python)
    with pytest.raises(couchhttp.ServerError) as exc:
        server.create("Bad_Name")
    assert exc.value.args[0][0] == 400


def test_save_get_update_delete_docs(db):
    doc = {"_id": "alice", "type": "person", "age": 30, "tags": ["a", "b"], "x": {"y": None}}
    doc_id, rev1 = db.save(doc)
    assert doc_id == "alice"
    assert rev1.startswith("1-")
    assert doc["_rev"] == rev1

    got = db.get("alice")
    assert got.id == "alice" and got.rev == rev1
    assert dict(got) == {"_id": "alice", "_rev": rev1, "type": "person", "age": 30,
                         "tags": ["a", "b"], "x": {"y": None}}
    assert db["alice"]["age"] == 30
    assert "alice" in db  # HEAD
    assert "bob" not in db
    assert db.get("bob") is None
    with pytest.raises(couchhttp.ResourceNotFound):
        db["bob"]

    # update
    got["age"] = 31
    _, rev2 = db.save(got)
    assert rev2.startswith("2-")
    assert db["alice"]["age"] == 31  # cached URL: revalidated via ETag

    # conflict with a stale document
    with pytest.raises(couchhttp.ResourceConflict):
        db.save({"_id": "alice", "_rev": rev1, "age": 99})
    with pytest.raises(couchhttp.ResourceConflict):
        db.delete({"_id": "alice", "_rev": rev1})

    # server-generated id
    new_id, new_rev = db.save({"type": "anon"})
    assert new_id and new_rev.startswith("1-")
    assert db[new_id]["type"] == "anon"

    # __setitem__
    db["carol"] = {"type": "person"}
    assert db["carol"]["type"] == "person"

    # COPY
    copy_rev = db.copy("alice", "alice-copy")
    assert copy_rev.startswith("1-")
    assert db["alice-copy"]["age"] == 31
    assert db["alice-copy"]["_id"] == "alice-copy"

    assert len(db) == 4

    # delete by document, and by id (HEAD for the ETag, then DELETE ?rev=)
    db.delete(db["alice"])
    assert db.get("alice") is None
    assert "alice" not in db
    del db["carol"]
    assert db.get("carol") is None
    assert len(db) == 2
    info = db.info()
    assert info["doc_del_count"] == 2

    # tombstones: in the changes feed as deleted, and readable by rev
    deleted = {r["id"]: r for r in db.changes()["results"] if r.get("deleted")}
    assert sorted(deleted) == ["alice", "carol"]
    tomb_rev = deleted["alice"]["changes"][0]["rev"]
    assert tomb_rev.startswith("3-")
    tomb = db.get("alice", rev=tomb_rev)
    assert tomb["_deleted"] is True


def test_old_revisions_readable_until_compaction(db):
    # CouchDB keeps non-leaf revision bodies until compaction, so
    # GET ?rev=<old> works and Database.revisions() can walk the history.
    doc = {"_id": "hist", "v": 1}
    _, rev1 = db.save(doc)
    doc["v"] = 2
    _, rev2 = db.save(doc)
    assert db.get("hist", rev=rev1)["v"] == 1
    assert [(d.rev, d["v"]) for d in db.revisions("hist")] == [(rev2, 2), (rev1, 1)]


def test_bulk_update_and_all_docs(db):
    docs = [{"_id": "doc-%02d" % i, "n": i} for i in range(9, -1, -1)]
    results = db.update(docs)
    assert len(results) == 10
    for (ok, doc_id, rev), doc in zip(results, docs):
        assert ok is True
        assert doc_id == doc["_id"]
        assert rev.startswith("1-")
        assert doc["_rev"] == rev  # couchdb-python writes the rev back

    rows = db.view("_all_docs")
    assert rows.total_rows == 10
    assert rows.offset == 0
    assert [r.id for r in rows] == ["doc-%02d" % i for i in range(10)]
    by_id = {d["_id"]: d for d in docs}
    for r in rows:
        assert r.key == r.id
        assert r.value == {"rev": by_id[r.id]["_rev"]}
    assert list(db) == ["doc-%02d" % i for i in range(10)]  # __iter__ uses _all_docs

    with_docs = db.view("_all_docs", include_docs=True)
    assert [r.doc["n"] for r in with_docs] == list(range(10))

    sliced = db.view("_all_docs", startkey="doc-02", endkey="doc-05")
    assert [r.id for r in sliced] == ["doc-02", "doc-03", "doc-04", "doc-05"]
    assert sliced.offset == 2
    assert [r.id for r in db.view("_all_docs")["doc-07":"doc-08"]] == ["doc-07", "doc-08"]
    assert [r.id for r in db.view("_all_docs", limit=2, skip=3)] == ["doc-03", "doc-04"]
    assert [r.id for r in db.view("_all_docs", descending=True, limit=3)] == \
        ["doc-09", "doc-08", "doc-07"]
    assert [r.id for r in db.view("_all_docs", key="doc-04")] == ["doc-04"]

    # keys -> POST _all_docs
    keyed = db.view("_all_docs", keys=["doc-05", "nope", "doc-01"], include_docs=True)
    keyed_rows = list(keyed)
    assert keyed_rows[0].id == "doc-05" and keyed_rows[0].doc["n"] == 5
    assert keyed_rows[1].key == "nope" and keyed_rows[1].error == "not_found"
    assert keyed_rows[2].id == "doc-01"

    # bulk update, delete and a conflict in one request
    d3 = db["doc-03"]
    d4 = db["doc-04"]
    d3["n"] = 33
    d4["_deleted"] = True
    stale = {"_id": "doc-05", "_rev": "1-" + hex32("0"), "n": 55}
    res = db.update([d3, d4, stale, {"_id": "brand-new"}])
    assert res[0][0] is True and res[0][2].startswith("2-")
    assert res[1][0] is True and res[1][2].startswith("2-")
    assert res[2][0] is False and res[2][1] == "doc-05"
    assert isinstance(res[2][2], couchhttp.ResourceConflict)
    assert res[3][0] is True
    assert db["doc-03"]["n"] == 33
    assert db.get("doc-04") is None
    assert db["doc-05"]["n"] == 5
    assert len(db) == 10

    deleted_row = list(db.view("_all_docs", keys=["doc-04"]))[0]
    assert deleted_row.value["deleted"] is True


def _ids(rows):
    """The ids of a feed's rows: in feed order on one node, as a set on a cluster (no order
    across ranges there)."""
    ids = [r["id"] for r in rows if "id" in r]
    return sorted(ids) if CLUSTER else ids


def _expect(ids):
    return sorted(ids) if CLUSTER else ids


def test_changes(db):
    db.update([{"_id": "a"}, {"_id": "b"}, {"_id": "c"}])
    ch = db.changes()
    assert _ids(ch["results"]) == _expect(["a", "b", "c"])
    assert "last_seq" in ch
    first = ch["results"][0]
    first_seq = first["seq"]
    last_seq = ch["last_seq"]

    since = db.changes(since=first_seq)
    assert _ids(since["results"]) == _expect(sorted({"a", "b", "c"} - {first["id"]}))
    assert db.changes(since=last_seq)["results"] == []

    a = db["a"]
    a["v"] = 2
    db.save(a)
    db.delete(db["b"])
    ch2 = db.changes(since=last_seq, include_docs=True)
    assert _ids(ch2["results"]) == ["a", "b"]
    rows = {r["id"]: r for r in ch2["results"]}
    assert rows["a"]["doc"]["v"] == 2
    assert rows["b"]["deleted"] is True
    assert rows["b"]["doc"]["_deleted"] is True

    limited = _ids(db.changes(limit=1)["results"])
    assert len(limited) == 1 if CLUSTER else limited == ["c"]
    assert _ids(db.changes(filter="_doc_ids", doc_ids='["c","a"]')["results"]) == \
        _expect(["c", "a"])

    # longpoll with nothing new: returns after the timeout with no results
    t0 = time.monotonic()
    lp = db.changes(feed="longpoll", since=ch2["last_seq"], timeout=300)
    assert lp["results"] == []
    assert time.monotonic() - t0 < 10
    # longpoll with something new: returns immediately
    lp2 = db.changes(feed="longpoll", since=last_seq)
    assert _ids(lp2["results"]) == ["a", "b"]

    # continuous (chunked, one JSON object per line), ended by timeout
    lines = list(itertools.islice(
        db.changes(feed="continuous", since=0, timeout=300), 10))
    assert _ids(lines) == _expect(["c", "a", "b"])
    assert "last_seq" in lines[-1]


def test_conflicts_via_new_edits_false(db):
    root = hex32("1")
    rev_a = "2-" + hex32("a")
    rev_b = "2-" + hex32("b")
    res = db.update([{"_id": "conf", "_rev": rev_a, "side": "a",
                      "_revisions": {"start": 2, "ids": [hex32("a"), root]}}],
                    new_edits=False)
    assert res == []  # CouchDB answers [] when new_edits=false succeeds
    db.update([{"_id": "conf", "_rev": rev_b, "side": "b",
                "_revisions": {"start": 2, "ids": [hex32("b"), root]}}],
              new_edits=False)

    doc = db.get("conf", conflicts=True)
    assert doc.rev == rev_b  # equal depth: the higher rev id wins
    assert doc["side"] == "b"
    assert doc["_conflicts"] == [rev_a]

    leaves = db.get("conf", open_revs="all")
    assert isinstance(leaves, list)
    assert sorted(l["ok"]["_rev"] for l in leaves) == [rev_a, rev_b]
    some = db.get("conf", open_revs='["%s", "3-%s"]' % (rev_a, hex32("c")))
    assert {"missing": "3-" + hex32("c")} in some
    assert [s["ok"]["side"] for s in some if "ok" in s] == ["a"]

    assert db.get("conf", rev=rev_a)["side"] == "a"

    # a revision with no history given makes a new root; deeper still wins
    db.update([{"_id": "conf", "_rev": "1-" + hex32("f"), "side": "root-f"}], new_edits=False)
    assert len(db.get("conf", open_revs="all")) == 3
    # Same URL as above: couchdb-python revalidates its cached copy with
    # If-None-Match. CouchDB sends no ETag for a doc whose body carries
    # _conflicts (Doc#doc.meta non-empty), so the fresh list must come back.
    doc = db.get("conf", conflicts=True)
    assert doc.rev == rev_b
    assert sorted(doc["_conflicts"]) == sorted([rev_a, "1-" + hex32("f")])

    # all_docs / changes report the winner, style=all_docs every leaf
    row = list(db.view("_all_docs", keys=["conf"]))[0]
    assert row.value["rev"] == rev_b
    ch = db.changes(style="all_docs")
    revs = sorted(c["rev"] for c in ch["results"][0]["changes"])
    assert revs == sorted([rev_a, rev_b, "1-" + hex32("f")])

    # resolve: delete the losers in one bulk request
    res = db.update([{"_id": "conf", "_rev": rev_a, "_deleted": True},
                     {"_id": "conf", "_rev": "1-" + hex32("f"), "_deleted": True}])
    assert all(ok for ok, _, _ in res), res
    doc = db.get("conf", conflicts=True)
    assert doc.rev == rev_b
    assert "_conflicts" not in doc

    # normal edits now extend the winner
    doc["side"] = "merged"
    _, new_rev = db.save(doc)
    assert new_rev.startswith("3-")


def test_local_docs(db):
    db["_local/cp"] = {"last": 1}
    got = db["_local/cp"]
    assert got["_id"] == "_local/cp"
    assert got["_rev"] == "0-1"
    assert got["last"] == 1
    got["last"] = 2
    db.save(got)
    assert got["_rev"] == "0-2"
    assert db["_local/cp"]["last"] == 2
    assert len(db) == 0
    assert list(db) == []
    db.delete(db["_local/cp"])
    assert db.get("_local/cp") is None


def test_views_query_reduce_and_no_temp_views(db):
    db.update([{"_id": "v%02d" % i, "n": i, "kind": "odd" if i % 2 else "even"}
               for i in range(12)])
    db["_design/py"] = {"views": {
        "by_n": {"map": "function(doc) { emit(doc.n, doc.kind); }"},
        "by_kind": {"map": "function(doc) { emit(doc.kind, doc.n); }", "reduce": "_sum"},
    }}
    rows = db.view("py/by_n")
    assert rows.total_rows == 12
    assert [r.key for r in rows] == list(range(12))
    assert [r.id for r in db.view("py/by_n", startkey=3, endkey=5)] == ["v03", "v04", "v05"]
    assert [r.key for r in db.view("py/by_n")[8:9]] == [8, 9]
    assert [r.id for r in db.view("py/by_n", keys=[4, 1])] == ["v04", "v01"]
    docs = db.view("py/by_n", include_docs=True, limit=1)
    assert [r.doc["kind"] for r in docs] == ["even"]
    assert [(r.key, r.value) for r in db.view("py/by_kind", group=True)] == \
        [("even", 30), ("odd", 36)]
    assert [r.value for r in db.view("py/by_kind")] == [66]
    # CouchDB 3 has no temporary views: couchdb-python's Database.query gets 410 gone
    with pytest.raises(couchhttp.ServerError) as gone:
        list(db.query("function(doc) { if (doc.n > 9) emit(doc.n, null); }"))
    assert gone.value.args[0] == (410, ("gone", "Temporary views are not supported in CouchDB"))
    info = db.info("py")
    assert info["name"] == "py"
    assert info["view_index"]["update_seq"] == 13


def test_users_sessions_security_and_validation(base_url, server):
    name = "py-user-" + uuid.uuid4().hex[:8]
    server.add_user(name, "pw-1")
    # the stored user document holds a hash, not the password
    user_doc = server["_users"]["org.couchdb.user:" + name]
    assert "password" not in user_doc and user_doc["password_scheme"] == "pbkdf2"

    token = server.login(name, "pw-1")
    assert token and server.verify_token(token)
    with pytest.raises(couchhttp.Unauthorized):
        server.login(name, "wrong")

    db_name = "py-sec-" + uuid.uuid4().hex[:8]
    db = server.create(db_name)
    scheme, rest = base_url.split("://", 1)
    as_user = couchdb.Server("%s://%s:%s@%s/" % (scheme, name, "pw-1", rest))
    # new databases are admin-only until their security object says otherwise
    with pytest.raises(couchhttp.Forbidden):
        as_user[db_name].info()
    db.security = {"members": {"names": [name], "roles": []}, "admins": {}}
    assert db.security["members"]["names"] == [name]
    udb = as_user[db_name]
    udb.save({"_id": "mine", "type": "note"})
    with pytest.raises(couchhttp.Forbidden):
        udb.save({"_id": "_design/x", "views": {}})

    db.save({
        "_id": "_design/rules",
        "validate_doc_update": "function(n, o, u) { if (!n.type) throw({forbidden: 'type required for ' + u.name}); }",
    })
    with pytest.raises(couchhttp.Forbidden) as err:
        udb.save({"_id": "untyped"})
    assert "type required for " + name in str(err.value)
    results = udb.update([{"_id": "a", "type": "t"}, {"_id": "b"}])
    assert results[0][0] is True
    assert results[1][0] is False

    assert server.logout(token)
    server.delete(db_name)
