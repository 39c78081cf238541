//! Design documents on clustered databases: every copy validates writes with the whole
//! database's `validate_doc_update` functions (a design document written through any
//! member takes effect for the next write through any member); show, list, update and
//! rewrite functions run at the coordinator over the cluster's reads, writes and view
//! merge; filter functions and `_view` filters run on every copy, given the design
//! document; view arguments fail as on a node. Each is checked against a single Settee
//! holding the same documents.

use crate::common;

use common::cluster::*;
use common::Server;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const USER: (&str, &str) = ("vic", "pw");

fn status(r: &common::Resp, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.text);
}

#[test]
fn design_documents_on_a_cluster() {
    let (_etcd, _dirs, nodes) = three_members();
    let single = Server::start();
    validation(&nodes);
    let pairs = [(&nodes[0], &single), (&nodes[1], &single)];
    same_data(&nodes[2], &single, "fns");
    render_functions(&nodes, &single);
    filters(&nodes, &single);
    view_arguments(&pairs);
}

/// A view query reads each range's index from one copy; then every other copy builds
/// its own, in the background (as CouchDB's `ken`): once the members that answered are
/// gone, the copies left answer a query that must not build (`update=false`) with every
/// row. The design's `_info` (the read copies') shows nothing pending after the query.
#[test]
fn every_copy_of_a_range_builds_its_index_after_a_query() {
    let (_etcd, _dirs, nodes) = three_members();
    status(&nodes[0].put("/kdb", ""), 201, "create");
    let docs: Vec<Value> = (0..40)
        .map(|i| json!({"_id": format!("d{i:02}"), "i": i}))
        .collect();
    let r = nodes[0].post("/kdb/_bulk_docs", &json!({ "docs": docs }).to_string());
    status(&r, 201, "bulk");
    let ddoc =
        json!({"views": {"v": {"map": "function(doc) { emit(doc.i, 1); }", "reduce": "_count"}}});
    status(
        &nodes[1].put("/kdb/_design/k", &ddoc.to_string()),
        201,
        "design",
    );
    let info = |n: &Server| nodes_info(n)["view_index"]["updates_pending"].clone();
    fn nodes_info(n: &Server) -> Value {
        let r = n.get("/kdb/_design/k/_info");
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()
    }
    // Nothing built yet: every copy has every one of its documents to index.
    assert!(info(&nodes[0])["minimum"].as_u64().unwrap() > 0);

    let r = nodes[2].get("/kdb/_design/k/_view/v");
    status(&r, 200, "query");
    assert_eq!(r.json()["rows"], json!([{"key": null, "value": 40}]));
    // Design `_info` reads the copies that answered: built by the query itself.
    eventually("the answering copies' index built", || {
        info(&nodes[0]) == json!({"minimum": 0, "preferred": 0, "total": 0})
    });

    // Each range's copies on the two members that are not nodes[2], all stopped: nodes[2]'s
    // copies answer alone, and a query that does not build comes to return every row, from
    // the index nodes[2] built without a client asking (nothing else builds it now).
    nodes[0].kill9();
    nodes[1].kill9();
    eventually("nodes[2]'s copies built", || {
        let r = nodes[2].get("/kdb/_design/k/_view/v?update=false&reduce=false");
        status(&r, 200, "a query that does not build");
        r.json()["rows"].as_array().map(Vec::len) == Some(40)
    });
}

/// `validate_doc_update` of `_design/rules` (one range) and `_design/more` (maybe
/// another) refuse writes of every range, through every member, replicated ones too;
/// an edit or a deletion of them counts for the very next write.
fn validation(nodes: &[Server]) {
    let n0 = &nodes[0];
    status(&n0.put("/vdu?q=4&n=2", ""), 201, "create");
    // `_users` is each member's own: the user exists on the first.
    n0.add_user(USER.0, USER.1, &[]);
    let sec = json!({"members": {"names": [USER.0]}, "admins": {}});
    status(&n0.put("/vdu/_security", &sec.to_string()), 200, "security");

    let rules = json!({"validate_doc_update": "function(n, o, u, s) {
        if (n.ctx) throw({forbidden: [u.db, u.name, JSON.stringify(s.members)].join('|')});
        if (!n._deleted && !n.type) throw({forbidden: 'type required'});
    }"});
    let r = nodes[1].put("/vdu/_design/rules", &rules.to_string());
    status(&r, 201, "rules");
    let rules_rev = r.json()["rev"].as_str().unwrap().to_owned();

    // Ids of every range (the rules live in one of them).
    let ids: Vec<String> = (0..12).map(|i| format!("doc{i}")).collect();
    let ranges: BTreeSet<String> = (ids.iter())
        .map(|id| n0.get(&format!("/vdu/_shards/{id}")).json()["range"].to_string())
        .collect();
    assert_eq!(ranges.len(), 4, "the ids cover every range");
    for id in &ids {
        let r = n0.as_user(USER, "PUT", &format!("/vdu/{id}"), Some("{}"));
        status(&r, 403, id);
        assert_eq!(
            r.json(),
            json!({"error": "forbidden", "reason": "type required"})
        );
    }
    for (i, n) in nodes.iter().enumerate() {
        let r = n.put(&format!("/vdu/admin{i}"), "{}");
        assert_eq!(
            r.json()["reason"],
            "type required",
            "as admin through member {i}"
        );
        status(
            &n.put(&format!("/vdu/typed{i}"), r#"{"type": 1}"#),
            201,
            "typed",
        );
    }
    let r = n0.as_user(USER, "PUT", "/vdu/doc0", Some(r#"{"type": "t"}"#));
    status(&r, 201, "a typed document");
    // The functions see the clustered database's name and security object.
    let r = n0.as_user(USER, "PUT", "/vdu/ctx", Some(r#"{"ctx": 1}"#));
    assert_eq!(r.json()["reason"], r#"vdu|vic|{"names":["vic"]}"#);

    // Replicated writes are validated too.
    let docs = json!({"new_edits": false, "docs": [
        {"_id": "doc5", "_rev": "1-aaaa"}, {"_id": "doc6", "_rev": "1-bbbb", "type": "t"}]});
    let r = nodes[2].post("/vdu/_bulk_docs", &docs.to_string());
    status(&r, 201, "replicated");
    assert_eq!(
        r.json(),
        json!([{"id": "doc5", "rev": "1-aaaa", "error": "forbidden", "reason": "type required"}])
    );
    status(
        &nodes[1].get("/vdu/doc6"),
        200,
        "the accepted replicated write",
    );
    let r = nodes[1].put("/vdu/doc7?new_edits=false", r#"{"_rev": "1-cccc"}"#);
    status(&r, 403, "a replicated single write");

    // An edit through one member counts for the next write through another.
    let kind = json!({"_rev": rules_rev, "validate_doc_update":
        "function(n) { if (!n._deleted && !n.kind) throw({forbidden: 'kind required'}); }"});
    let r = nodes[2].put("/vdu/_design/rules", &kind.to_string());
    status(&r, 201, "rules edited");
    let rules_rev = r.json()["rev"].as_str().unwrap().to_owned();
    for (i, n) in nodes.iter().enumerate() {
        for id in &ids[..4] {
            let r = n.put(&format!("/vdu/{id}-{i}"), r#"{"type": 1}"#);
            assert_eq!(
                r.json()["reason"],
                "kind required",
                "{id} through member {i}"
            );
        }
    }
    // A second design document adds its function at once.
    let more = json!({"validate_doc_update":
        "function(n) { if (n.kind === 'no') throw({unauthorized: 'not that kind'}); }"});
    status(
        &nodes[0].put("/vdu/_design/more", &more.to_string()),
        201,
        "more",
    );
    for (i, n) in nodes.iter().enumerate() {
        let r = n.put(&format!("/vdu/no{i}"), r#"{"kind": "no"}"#);
        status(&r, 401, "not that kind");
        assert_eq!(r.json()["error"], "unauthorized");
    }
    // Deleted, they validate nothing any more.
    let r = nodes[1].delete(&format!("/vdu/_design/rules?rev={rules_rev}"));
    status(&r, 200, "rules deleted");
    let r = nodes[1].post(
        "/vdu/_bulk_docs",
        &json!({"docs": [{"_id": "_design/more", "_rev": nodes[0].get("/vdu/_design/more").json()["_rev"], "_deleted": true}]}).to_string(),
    );
    status(&r, 201, "more deleted");
    for (i, n) in nodes.iter().enumerate() {
        for id in &ids[..4] {
            let r = n.put(&format!("/vdu/{id}-free{i}"), r#"{"kind": "no"}"#);
            status(&r, 201, "no rules left");
        }
    }
}

/// The same documents and design document `_design/d` in database `db` of the cluster
/// (through `cluster`) and of `single`.
fn same_data(cluster: &Server, single: &Server, db: &str) {
    status(
        &cluster.put(&format!("/{db}?q=3&n=2"), ""),
        201,
        "cluster db",
    );
    status(&single.put(&format!("/{db}"), ""), 201, "single db");
    let docs: Vec<Value> = (0..12)
        .map(|i| json!({"_id": format!("k{i:02}"), "n": i, "kind": if i % 2 == 1 { "odd" } else { "even" }}))
        .collect();
    let ddoc = json!({
        "_id": "_design/d",
        "shows": {
            "s": "function(doc, req) { return {body: (doc ? doc._id + ':' + doc.n + ':' + doc._revisions.start : 'none') + '|' + req.info.db_name + '|' + req.userCtx.db + '|' + JSON.stringify(req.secObj) + '|' + req.id + '|' + req.query.x, headers: {'X-Show': 'yes'}}; }",
            "j": "function(doc, req) { return {json: {doc: doc, q: req.query}}; }"
        },
        "lists": {
            "l": "function(head, req) { start({headers: {'Content-Type': 'text/plain'}}); var r; send('total=' + head.total_rows + ' offset=' + head.offset + ';'); while (r = getRow()) { send(r.id + '=' + JSON.stringify(r.key) + (r.doc ? '+' : '') + ';'); } return 'end ' + req.userCtx.db; }",
            "rows": "function(head, req) { var r, out = []; while (r = getRow()) { out.push(r.key); } return JSON.stringify(out); }"
        },
        "updates": {
            "u": "function(doc, req) { if (!doc) { return req.id ? [{_id: req.id, n: -1, made: req.query.tag}, 'made ' + req.id] : [null, 'nothing']; } doc.n += 100; return [doc, {json: {bumped: doc.n}}]; }"
        },
        "filters": {
            "kind": "function(doc, req) { return doc.kind == (req.query.kind || 'odd') && req.userCtx.db == 'fns'; }",
            "boom": "function(doc, req) { throw({forbidden: 'no filter'}); }"
        },
        "views": {
            "by_n": {"map": "function(doc) { if (typeof doc.n == 'number') emit(doc.n, doc.kind); }"},
            "by_kind": {"map": "function(doc) { if (doc.kind) emit(doc.kind, 1); }", "reduce": "_count"}
        },
        "rewrites": [
            {"from": "/show/:id", "to": "_show/s/:id"},
            {"from": "/list", "to": "_list/l/by_n"},
            {"from": "/all", "to": "_view/by_n"}
        ]
    });
    let rewriter = json!({"_id": "_design/rw",
        "rewrites": "function(req) { return {path: '_show/s/' + req.query.id, query: {x: 'fn'}}; }"});
    for (s, what) in [(cluster, "cluster"), (single, "single")] {
        let body = json!({"docs": docs}).to_string();
        status(&s.post(&format!("/{db}/_bulk_docs"), &body), 201, what);
        status(
            &s.put(&format!("/{db}/_design/d"), &ddoc.to_string()),
            201,
            what,
        );
        status(
            &s.put(&format!("/{db}/_design/rw"), &rewriter.to_string()),
            201,
            what,
        );
    }
}

/// What a request answers on a member and on the single node: status, content type and
/// body, equal.
fn same_answer(member: &Server, single: &Server, method: &str, path: &str, body: Option<&str>) {
    let (a, b) = (
        member.req(method, path, body),
        single.req(method, path, body),
    );
    assert_eq!(
        (a.status, a.header("content-type"), &a.text),
        (b.status, b.header("content-type"), &b.text),
        "{method} {path}"
    );
}

fn render_functions(nodes: &[Server], single: &Server) {
    for n in nodes {
        for path in [
            "/fns/_design/d/_show/s/k03?x=1",
            "/fns/_design/d/_show/s/nothere",
            "/fns/_design/d/_show/s",
            "/fns/_design/d/_show/j/k04?a=b",
            "/fns/_design/d/_show/nope/k01",
            "/fns/_design/nope/_show/s/k01",
            "/fns/_design/d/_list/l/by_n?descending=true&limit=4&skip=1",
            "/fns/_design/d/_list/l/by_n?startkey=3&endkey=6&include_docs=true",
            "/fns/_design/d/_list/l/by_kind?group=true",
            "/fns/_design/d/_list/l/by_n?group=true",
            "/fns/_design/d/_list/l/nope",
            "/fns/_design/d/_list/nope/by_n",
            "/fns/_design/d/_list/l/d/by_n?key=7",
            "/fns/_design/d/_list/l/_all_docs?limit=5",
            "/fns/_design/d/_rewrite/show/k05?x=2",
            "/fns/_design/d/_rewrite/list?limit=3",
            "/fns/_design/d/_rewrite/all?skip=10",
            "/fns/_design/rw/_rewrite/?id=k06",
            "/fns/_design/d/_update/u/k01",
            "/fns/_design/d/_nope",
        ] {
            same_answer(n, single, "GET", path, None);
        }
        let keys = Some(r#"{"keys": [5, 2]}"#);
        same_answer(n, single, "POST", "/fns/_design/d/_list/rows/by_n", keys);
    }
    // A show's ETag: the same as the node's, and a match is a 304.
    let a = nodes[1].get("/fns/_design/d/_show/s/k03");
    let b = single.get("/fns/_design/d/_show/s/k03");
    assert_eq!(a.header("etag"), b.header("etag"));
    assert_eq!(a.header("x-show"), Some("yes"));
    let etag = a.header("etag").unwrap().to_owned();
    let r = nodes[2].req_with(
        "GET",
        "/fns/_design/d/_show/s/k03",
        None,
        &[("if-none-match", &etag)],
        true,
    );
    status(&r, 304, "If-None-Match");

    // Updates write through the cluster: a new document, an edit, nothing.
    for (path, tag) in [
        ("/fns/_design/d/_update/u/new1?tag=t1", "made new1"),
        ("/fns/_design/d/_update/u/k02", "{\"bumped\":102}\n"),
        ("/fns/_design/d/_update/u", "nothing"),
    ] {
        let (a, b) = (nodes[0].post(path, ""), single.post(path, ""));
        assert_eq!((a.status, &a.text), (b.status, &b.text), "{path}");
        assert_eq!(a.text, tag);
        for h in ["x-couch-update-newrev", "x-couch-id"] {
            assert_eq!(a.header(h), b.header(h), "{path}: {h}");
        }
    }
    for n in nodes {
        same_answer(n, single, "GET", "/fns/new1", None);
        same_answer(n, single, "GET", "/fns/k02", None);
    }
}

/// The ids of a normal feed's rows.
fn feed_ids(r: &common::Resp) -> BTreeSet<String> {
    assert_eq!(r.status, 200, "{}", r.text);
    (r.json()["results"].as_array().unwrap().iter())
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect()
}

fn filters(nodes: &[Server], single: &Server) {
    for n in nodes {
        for path in [
            "/fns/_changes?filter=d/kind",
            "/fns/_changes?filter=d/kind&kind=even&include_docs=true",
            "/fns/_changes?filter=_view&view=d/by_n",
            "/fns/_changes?filter=_view&view=d/by_kind&style=all_docs",
        ] {
            let (a, b) = (n.get(path), single.get(path));
            assert_eq!(feed_ids(&a), feed_ids(&b), "{path}");
            assert!(!feed_ids(&a).is_empty(), "{path}");
        }
        for path in [
            "/fns/_changes?filter=d/nope",
            "/fns/_changes?filter=nope/kind",
            "/fns/_changes?filter=_view&view=d/nope",
            "/fns/_changes?filter=_view&view=nope/by_n",
        ] {
            let (a, b) = (n.get(path), single.get(path));
            assert_eq!((a.status, a.json()), (b.status, b.json()), "{path}");
        }
        // A function that throws fails every copy: the feed fails as a node's.
        let path = "/fns/_changes?filter=d/boom";
        assert_eq!(n.get(path).status, single.get(path).status, "{path}");
        // A POSTed feed too.
        let (a, b) = (
            n.post("/fns/_changes?filter=d/kind", "{}"),
            single.post("/fns/_changes?filter=d/kind", "{}"),
        );
        assert_eq!(feed_ids(&a), feed_ids(&b));
    }
    // Longpoll and continuous feeds wake for what passes the filter only.
    let now = nodes[0].get("/fns/_changes?since=now").json()["last_seq"].clone();
    let since = now.as_str().unwrap().to_owned();
    std::thread::scope(|scope| {
        let longpoll = scope.spawn(|| {
            let path =
                format!("/fns/_changes?feed=longpoll&filter=d/kind&since={since}&timeout=20000");
            nodes[1].get(&path)
        });
        let continuous = scope.spawn(|| {
            let path = format!(
                "/fns/_changes?feed=continuous&filter=_view&view=d/by_n&since={since}&timeout=3000"
            );
            nodes[2].get(&path)
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        status(
            &nodes[0].put("/fns/even-late", r#"{"kind": "even"}"#),
            201,
            "even",
        );
        status(
            &nodes[0].put("/fns/plain-late", r#"{"x": 1}"#),
            201,
            "plain",
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        status(
            &nodes[2].put("/fns/odd-late", r#"{"kind": "odd", "n": 99}"#),
            201,
            "odd",
        );
        let r = longpoll.join().unwrap();
        assert_eq!(feed_ids(&r), BTreeSet::from(["odd-late".to_owned()]));
        let r = continuous.join().unwrap();
        status(&r, 200, "continuous");
        let ids: Vec<String> = (r.text.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|row| row["id"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(ids, ["odd-late"]);
    });
    // The single node gets them too, for the comparisons after this.
    for (id, body) in [
        ("even-late", r#"{"kind": "even"}"#),
        ("plain-late", r#"{"x": 1}"#),
        ("odd-late", r#"{"kind": "odd", "n": 99}"#),
    ] {
        status(&single.put(&format!("/fns/{id}"), body), 201, id);
    }
}

/// View arguments a node refuses are refused with the node's error before any copy is
/// asked (PouchDB's `query()` expects `query_parse_error`, not a copy's `bad_request`).
fn view_arguments(pairs: &[(&Server, &Server)]) {
    for (member, single) in pairs {
        for q in [
            "by_n?group=true",
            "by_n?group_level=1",
            "by_n?reduce=true",
            "by_kind?include_docs=true",
            "by_kind?conflicts=true",
            "by_n?startkey=9&endkey=1",
            "by_n?partition=p",
            "by_n?keys=1",
            "by_kind?group=true&limit=1",
            "nope",
        ] {
            same_answer(
                member,
                single,
                "GET",
                &format!("/fns/_design/d/_view/{q}"),
                None,
            );
        }
        for body in [r#"{"keys": [1], "group": true}"#, r#"{"group": true}"#] {
            same_answer(
                member,
                single,
                "POST",
                "/fns/_design/d/_view/by_n",
                Some(body),
            );
        }
        let queries = r#"{"queries": [{}, {"reduce": true}]}"#;
        same_answer(
            member,
            single,
            "POST",
            "/fns/_design/d/_view/by_n/queries",
            Some(queries),
        );
    }
}

/// A view's `offset` with `keys` sums what each range's copy reports (each copy's offset
/// at its first row, or at its end), plus `skip`, as CouchDB's `fabric_view_map` does:
/// the figures are Apache CouchDB 3.5.2's for the same documents in a database of
/// `q=2` on one node (the copies hold the same documents, placed by the same hash).
#[test]
fn view_keys_offsets_are_couchdbs_sums_over_ranges() {
    let (_etcd, _dirs, nodes) = three_members();
    status(&nodes[0].put("/offs?q=2", ""), 201, "create");
    let docs: Vec<Value> = ("abcdefg".chars().zip(1..))
        .map(|(id, k)| json!({"_id": id.to_string(), "k": k}))
        .collect();
    let r = nodes[0].post("/offs/_bulk_docs", &json!({ "docs": docs }).to_string());
    status(&r, 201, "bulk");
    let ddoc = json!({"views": {"v": {"map": "function(doc) { emit(doc.k, null); }"}}});
    status(
        &nodes[0].put("/offs/_design/d", &ddoc.to_string()),
        201,
        "design",
    );
    for (query, offset) in [
        ("keys=[4,2]", 1),
        ("keys=[4,2]&skip=1", 2),
        ("keys=[2,4]", 1),
        ("keys=[9]", 7),
        ("keys=[6,1,3]&limit=1", 2),
        ("keys=[4,2]&descending=true", 4),
        ("keys=[9,4]", 3),
    ] {
        let r = nodes[1].get(&format!("/offs/_design/d/_view/v?{query}"));
        status(&r, 200, query);
        assert_eq!(r.json()["offset"], offset, "{query}: {}", r.text);
    }
}
