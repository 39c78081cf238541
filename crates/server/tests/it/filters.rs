//! Filter functions over real HTTP: `_changes?filter=ddoc/name` in every feed, the request
//! object filters get, deleted documents and conflicts, CouchDB's errors, and filtered
//! replication (between databases of one server, and pushed and pulled between two).

use crate::common;
use common::replication::{bulk, replicate, url};
use common::{Resp, Server};
use serde_json::{json, Value};
use std::time::Duration;

/// CouchDB's own test filters (changes_test.exs), and some of ours.
fn filters_ddoc() -> Value {
    json!({
        "_id": "_design/changes_filter",
        "filters": {
            "bop": "function(doc, req) { return (doc.bop); }",
            "dynamic": "function(doc, req) { var field = req.query.field; return doc[field]; }",
            "mine": "function(doc, req) { return doc.owner === req.userCtx.name; }",
            "deleted": "function(doc, req) { return doc._deleted === true; }",
            "conflicted": "function(doc, req) { return (doc._conflicts); }",
            "odd": "function(doc, req) { return doc.n % 2 === 1; }",
            "req": "function(doc, req) { if (doc._id === 'probe') throw ['error', 'req', JSON.stringify(req)]; return false; }",
            "seen": "function(doc, req) { if (doc._id === 'probe') throw ['error', 'doc', JSON.stringify(doc)]; return false; }"
        }
    })
}

fn setup(s: &Server) {
    s.create_db("db");
    let r = s.put("/db/_design/changes_filter", &filters_ddoc().to_string());
    assert_eq!(r.status, 201, "{}", r.text);
}

fn ids(results: &Value) -> Vec<String> {
    results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

fn sj(r: &Resp) -> (u16, Value) {
    (r.status, r.json())
}

fn err(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

/// The non-empty lines of a continuous feed, as JSON.
fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn function_filtered_changes() {
    // changes_test.exs, "function filtered changes".
    let s = Server::start();
    setup(&s);
    let r = s.get("/db/_changes?filter=changes_filter/bop").json();
    assert_eq!(r["results"], json!([]), "the design document has no bop");
    let foom = s.post("/db", r#"{"bop": "foom"}"#).json();
    s.post("/db", r#"{"bop": false}"#);
    let r = s.get("/db/_changes?filter=changes_filter/bop").json();
    assert_eq!(ids(&r["results"]), [foom["id"].as_str().unwrap()]);
    assert_eq!(r["results"][0]["changes"], json!([{"rev": foom["rev"]}]));
    // An update moves the document, with its new revision.
    let id = foom["id"].as_str().unwrap();
    let mut doc = s.get(&format!("/db/{id}")).json();
    doc["newattr"] = json!("a");
    let rev = s.put(&format!("/db/{id}"), &doc.to_string()).json()["rev"].clone();
    let r = s.get("/db/_changes?filter=changes_filter/bop").json();
    assert_eq!(r["results"].as_array().unwrap().len(), 1);
    assert_eq!(r["results"][0]["changes"][0]["rev"], rev);
    // Extra query parameters reach the function.
    let r = s
        .get("/db/_changes?filter=changes_filter/dynamic&field=woox")
        .json();
    assert_eq!(r["results"], json!([]));
    let r = s
        .get("/db/_changes?filter=changes_filter/dynamic&field=bop")
        .json();
    assert_eq!(ids(&r["results"]), [id]);
    assert_eq!(r["results"][0]["changes"][0]["rev"], rev);
    // POST takes the filter from the query string too.
    let r = s
        .post("/db/_changes?filter=changes_filter/dynamic&field=bop", "{}")
        .json();
    assert_eq!(ids(&r["results"]), [id]);
    // `last_seq` is the last change read, not the last one passed.
    let all = s.get("/db/_changes").json();
    assert_eq!(r["last_seq"], all["last_seq"]);
}

#[test]
fn limit_counts_the_rows_the_filter_passes() {
    // changes_test.exs, COUCHDB-1037.
    let s = Server::start();
    setup(&s);
    s.put("/db/_design/foobar", r#"{"foo": "bar"}"#);
    let docs: Vec<Value> = (0..5)
        .map(|n| json!({"_id": format!("{n}"), "n": n}))
        .collect();
    bulk(&s, "db", json!(docs), true);
    let r = s
        .get("/db/_changes?limit=1&filter=changes_filter/odd")
        .json();
    assert_eq!(ids(&r["results"]), ["1"]);
    let r = s
        .get("/db/_changes?limit=2&filter=changes_filter/odd")
        .json();
    assert_eq!(ids(&r["results"]), ["1", "3"]);
    assert_eq!(r["pending"], 1, "the change after the last row sent");
    // include_docs and descending work with a filter as without.
    let r = s
        .get("/db/_changes?filter=changes_filter/odd&include_docs=true&descending=true")
        .json();
    assert_eq!(ids(&r["results"]), ["3", "1"]);
    assert_eq!(r["results"][0]["doc"]["n"], 3);
}

#[test]
fn the_request_object() {
    let s = Server::start();
    setup(&s);
    s.put("/db/probe", "{}");
    let uuids = s.get("/_uuids").json();
    assert!(uuids["uuids"].is_array());
    let path = "/db/_changes?filter=changes_filter/req&x=1&descending=false&key=%5B1%5D&x=2";
    let r = s.req_with(
        "GET",
        path,
        None,
        &[("cookie", "a=b; c=\"d e\""), ("x-thing", "1")],
        true,
    );
    assert_eq!(r.status, 500, "{}", r.text);
    let e = r.json();
    assert_eq!(e["error"], "req");
    let req: Value = serde_json::from_str(e["reason"].as_str().unwrap()).unwrap();
    let keys: Vec<&str> = req
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, common::REQ_OBJ_FIELDS);
    assert_eq!(req["info"]["db_name"], "db");
    assert_eq!(req["info"]["doc_count"], 2);
    assert_eq!(req["id"], Value::Null);
    assert_eq!(req["uuid"].as_str().unwrap().len(), 32);
    assert_eq!(req["method"], "GET");
    assert_eq!(req["requested_path"], json!(["db", "_changes"]));
    assert_eq!(req["path"], json!(["db", "_changes"]));
    assert_eq!(req["raw_path"], path);
    // `key`, `startkey`, `endkey` and `descending` are JSON; a repeated name, the last.
    assert_eq!(
        req["query"],
        json!({"filter": "changes_filter/req", "x": "2", "descending": false, "key": [1]})
    );
    assert_eq!(req["headers"]["X-Thing"], "1");
    assert!(req["headers"]["Host"].is_string(), "{}", req["headers"]);
    // This client sends `Content-Length: 0`: an empty body; without one, `undefined`.
    assert_eq!(req["body"], "");
    let raw = s.send_raw("GET", path, &[], None, true);
    let e: Value = serde_json::from_slice(&raw.body).unwrap();
    let raw_req: Value = serde_json::from_str(e["reason"].as_str().unwrap()).unwrap();
    assert_eq!(raw_req["body"], "undefined");
    assert_eq!(req["peer"], "127.0.0.1");
    assert_eq!(req["form"], json!({}));
    assert_eq!(req["cookie"], json!({"a": "b", "c": "d e"}));
    assert_eq!(
        req["userCtx"],
        json!({"db": "db", "name": "admin", "roles": ["_admin"]})
    );
    assert_eq!(req["secObj"], s.get("/db/_security").json());
    // A POST's JSON body is the body, as an object.
    let r = s.post(
        "/db/_changes?filter=changes_filter/req",
        r#"{"since": 0, "extra": [1]}"#,
    );
    let req: Value = serde_json::from_str(r.json()["reason"].as_str().unwrap()).unwrap();
    assert_eq!(req["method"], "POST");
    assert_eq!(req["body"], json!({"since": 0, "extra": [1]}));
}

#[test]
fn the_documents_a_filter_sees() {
    let s = Server::start();
    setup(&s);
    bulk(&s, "db", json!([{"_id": "probe", "v": 1}]), true);
    let first = s.get("/db/probe").json()["_rev"].clone();
    bulk(
        &s,
        "db",
        json!([{"_id": "probe", "_rev": "1-0000000000000000000000000000000f", "v": 2}]),
        false,
    );
    let seen = |q: &str| -> Value {
        let r = s.get(&format!("/db/_changes?filter=changes_filter/seen{q}"));
        assert_eq!(r.status, 500, "{}", r.text);
        serde_json::from_str(r.json()["reason"].as_str().unwrap()).unwrap()
    };
    // The winner, with its own revision id in `_revisions` and the live conflicts.
    let doc = seen("");
    let rev = doc["_rev"].as_str().unwrap().to_string();
    let (pos, id) = rev.split_once('-').unwrap();
    assert_eq!(doc["_id"], "probe");
    assert_eq!(
        doc["_revisions"],
        json!({"start": pos.parse::<u64>().unwrap(), "ids": [id]})
    );
    let other = if rev == first {
        "1-0000000000000000000000000000000f".into()
    } else {
        first.clone()
    };
    assert_eq!(doc["_conflicts"], json!([other]));
    // With all_docs, the first leaf the change lists, without `_conflicts`.
    let leaf = seen("&style=all_docs");
    assert_eq!(leaf["_conflicts"], Value::Null);
}

#[test]
fn deleted_documents_are_passed_too() {
    let s = Server::start();
    setup(&s);
    s.put("/db/keep", r#"{"n": 1}"#);
    let gone = s.put("/db/gone", r#"{"n": 2}"#).json();
    let del = s
        .delete(&format!("/db/gone?rev={}", gone["rev"].as_str().unwrap()))
        .json();
    let r = s.get("/db/_changes?filter=changes_filter/deleted").json();
    assert_eq!(ids(&r["results"]), ["gone"]);
    assert_eq!(r["results"][0]["deleted"], true);
    assert_eq!(r["results"][0]["changes"], json!([{"rev": del["rev"]}]));
}

#[test]
fn all_docs_style_filters_each_leaf() {
    let s = Server::start();
    setup(&s);
    // `c` has two live leaves (n 1 and n 2) and a deleted one (n 3).
    bulk(&s, "db", json!([{"_id": "c", "n": 1}]), true);
    bulk(
        &s,
        "db",
        json!([
            {"_id": "c", "_rev": "1-00000000000000000000000000000002", "n": 2},
            {"_id": "c", "_rev": "1-00000000000000000000000000000003", "n": 3, "_deleted": true}
        ]),
        false,
    );
    let all = s.get("/db/_changes?style=all_docs").json();
    let row = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "c")
        .unwrap()
        .clone();
    assert_eq!(row["changes"].as_array().unwrap().len(), 3);
    let winner = s.get("/db/c").json();
    let odd_revs = |r: &Value| -> Vec<String> {
        r["results"][0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["rev"].as_str().unwrap().to_string())
            .collect()
    };
    // main_only: the winner alone decides.
    let main = s.get("/db/_changes?filter=changes_filter/odd").json();
    if winner["n"].as_i64().unwrap() % 2 == 1 {
        assert_eq!(odd_revs(&main), [winner["_rev"].as_str().unwrap()]);
    } else {
        assert_eq!(main["results"], json!([]));
    }
    // all_docs: each leaf, deleted ones too; the passing ones listed in the change's order.
    let r = s
        .get("/db/_changes?filter=changes_filter/odd&style=all_docs")
        .json();
    let expected: Vec<String> = row["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rev"].as_str().unwrap().to_string())
        .filter(|rev| {
            let n = s.get(&format!("/db/c?rev={rev}")).json()["n"]
                .as_i64()
                .unwrap();
            n % 2 == 1
        })
        .collect();
    assert_eq!(expected.len(), 2);
    assert_eq!(odd_revs(&r), expected);
    // Conflicts are seen by the winner only (`_conflicts`); the filter of CouchDB's tests.
    let r = s
        .get("/db/_changes?filter=changes_filter/conflicted")
        .json();
    assert_eq!(ids(&r["results"]), ["c"]);
    let r = s
        .get("/db/_changes?filter=changes_filter/conflicted&style=all_docs")
        .json();
    assert_eq!(r["results"], json!([]));
}

#[test]
fn user_ctx_is_the_requesting_user() {
    let s = Server::start_with_ini("[chttpd_auth]\niterations = 1000\n");
    setup(&s);
    let user = json!({"name": "bob", "password": "bobpw", "roles": ["r"], "type": "user"});
    let r = s.put("/_users/org.couchdb.user:bob", &user.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    s.put(
        "/db/_security",
        r#"{"members": {"names": ["bob"], "roles": []}}"#,
    );
    s.put("/db/a", r#"{"owner": "bob"}"#);
    s.put("/db/b", r#"{"owner": "admin"}"#);
    let as_bob = s.as_user(
        ("bob", "bobpw"),
        "GET",
        "/db/_changes?filter=changes_filter/mine",
        None,
    );
    assert_eq!(as_bob.status, 200, "{}", as_bob.text);
    assert_eq!(ids(&as_bob.json()["results"]), ["a"]);
    let as_admin = s.get("/db/_changes?filter=changes_filter/mine").json();
    assert_eq!(ids(&as_admin["results"]), ["b"]);
}

#[test]
fn every_feed_runs_the_filter() {
    let s = Server::start();
    setup(&s);
    let docs: Vec<Value> = (0..6)
        .map(|n| json!({"_id": format!("d{n}"), "n": n}))
        .collect();
    bulk(&s, "db", json!(docs), true);
    let f = "filter=changes_filter/odd";
    // continuous: `limit` counts passed rows; then the closing line.
    let text = s
        .get(&format!(
            "/db/_changes?feed=continuous&{f}&timeout=300&limit=2"
        ))
        .text;
    let got = lines(&text);
    assert_eq!(got.len(), 3, "{text}");
    assert_eq!(
        (got[0]["id"].as_str(), got[1]["id"].as_str()),
        (Some("d1"), Some("d3"))
    );
    assert!(got[2]["last_seq"].is_string());
    // continuous without a limit: every passing change, then the timeout ends it.
    let got = lines(
        &s.get(&format!("/db/_changes?feed=continuous&{f}&timeout=300"))
            .text,
    );
    assert_eq!(ids(&json!(got[..3])), ["d1", "d3", "d5"]);
    // eventsource
    let es = s
        .get(&format!(
            "/db/_changes?feed=eventsource&{f}&timeout=300&limit=1"
        ))
        .text;
    assert!(es.starts_with("data: {"), "{es}");
    assert!(es.contains("\"id\":\"d1\""), "{es}");
    // longpoll: a change the filter refuses does not end the wait; one it passes does.
    let path = format!("/db/_changes?feed=longpoll&since=now&{f}&timeout=10000");
    std::thread::scope(|scope| {
        let h = scope.spawn(|| s.get(&path).json());
        std::thread::sleep(Duration::from_millis(300));
        s.put("/db/even", r#"{"n": 10}"#);
        std::thread::sleep(Duration::from_millis(300));
        s.put("/db/odd", r#"{"n": 11}"#);
        let got = h.join().unwrap();
        assert_eq!(ids(&got["results"]), ["odd"]);
    });
    // A continuous feed follows new writes through the filter.
    let path = format!("/db/_changes?feed=continuous&since=now&{f}&timeout=10000&limit=1");
    std::thread::scope(|scope| {
        let h = scope.spawn(|| s.get(&path).text);
        std::thread::sleep(Duration::from_millis(300));
        s.put("/db/even2", r#"{"n": 12}"#);
        s.put("/db/odd2", r#"{"n": 13}"#);
        let got = lines(&h.join().unwrap());
        assert_eq!(got[0]["id"], "odd2");
    });
}

#[test]
fn errors_are_couchdbs() {
    let s = Server::start();
    setup(&s);
    let get = |q: &str| sj(&s.get(&format!("/db/_changes?{q}")));
    let nf = |reason: &str| err(404, "not_found", reason);
    // changes_test.exs: a missing design document or function is a 404.
    assert_eq!(get("filter=nothingtosee/bop"), nf("missing"));
    assert_eq!(
        get("filter=changes_filter/movealong"),
        nf("missing json key: movealong")
    );
    assert_eq!(get("filter=nothingtosee/movealong"), nf("missing"));
    let form = err(
        400,
        "bad_request",
        "`filter` must be of the form `designname/filtername`",
    );
    assert_eq!(get("filter=bop"), form);
    assert_eq!(get("filter=a/b/c"), form);

    // Compiled at the first change it filters: a design document alone in a database
    // whose only change is itself fails; one read past it does not.
    let bad = json!({"filters": {
        "syntax": "function(doc) { return ",
        "notfun": "42",
        "empty": "",
        "throws": "function(doc) { if (doc.boom) throw new Error('boom'); return true; }",
        "typeerr": "function(doc) { return doc.a.b; }",
        "shaped": "function(doc) { if (doc.boom) throw {error: 'not_found', reason: 'gone'}; return true; }",
        "denied": "function(doc) { if (doc.boom) throw ['error', 'forbidden', 'nope']; return true; }",
        "string": "function(doc) { if (doc.boom) throw 'boom'; return true; }"
    }});
    s.create_db("e");
    assert_eq!(s.put("/e/_design/bad", &bad.to_string()).status, 201);
    let since = s.get("/e").json()["update_seq"]
        .as_str()
        .unwrap()
        .to_string();
    let e = |q: &str| sj(&s.get(&format!("/e/_changes?{q}")));
    let (status, body) = e("filter=bad/syntax");
    assert_eq!(
        (status, body["error"].as_str()),
        (500, Some("compilation_error")),
        "{body}"
    );
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.ends_with("(function(doc) { return )"), "{reason}");
    let (status, body) = e(&format!("filter=bad/syntax&since={since}"));
    assert_eq!(
        (status, body["results"].clone()),
        (200, json!([])),
        "{body}"
    );
    assert_eq!(
        e("filter=bad/notfun"),
        err(
            500,
            "compilation_error",
            "Expression does not eval to a function. (42)"
        )
    );
    assert_eq!(
        e("filter=bad/empty"),
        nf("missing filters function empty on design doc _design/bad")
    );

    // What a function throws, as CouchDB's query server and HTTP layer report it.
    s.put("/e/boom", r#"{"boom": true}"#);
    assert_eq!(e("filter=bad/throws"), err(500, "Error", "{[]}"));
    assert_eq!(e("filter=bad/typeerr"), err(500, "TypeError", "{[]}"));
    assert_eq!(e("filter=bad/shaped"), nf("gone"));
    assert_eq!(e("filter=bad/denied"), err(403, "forbidden", "nope"));
    assert_eq!(
        e("filter=bad/string"),
        err(500, "unknown_error", "unnamed_error")
    );
    // Live feeds answer the error too while nothing has been sent.
    assert_eq!(
        e("filter=bad/throws&feed=continuous&timeout=300"),
        err(500, "Error", "{[]}")
    );
    assert_eq!(
        e("filter=bad/throws&feed=longpoll&timeout=300"),
        err(500, "Error", "{[]}")
    );
    // A deleted design document is gone for filtering.
    let rev = s.get("/db/_design/changes_filter").json()["_rev"].clone();
    s.delete(&format!(
        "/db/_design/changes_filter?rev={}",
        rev.as_str().unwrap()
    ));
    assert_eq!(get("filter=changes_filter/bop"), nf("deleted"));
}

/// A source database with typed documents and a filter on `type`, with `query_params`.
fn typed_source(s: &Server) {
    s.create_db("src");
    let ddoc = json!({
        "filters": {
            "by_type": "function(doc, req) { return doc.type === req.query.type && req.query.n === '2' && req.userCtx.roles.indexOf('_admin') >= 0; }"
        },
        "views": {"b_only": {"map": "function(doc) { if (doc.type === 'b') emit(doc._id); }"}}
    });
    assert_eq!(s.put("/src/_design/f", &ddoc.to_string()).status, 201);
    bulk(
        s,
        "src",
        json!([
            {"_id": "a1", "type": "a"},
            {"_id": "a2", "type": "a"},
            {"_id": "b1", "type": "b"}
        ]),
        true,
    );
}

fn all_ids(s: &Server, db: &str) -> Vec<String> {
    s.get(&format!("/{db}/_all_docs")).json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn filtered_replication_between_local_databases() {
    let s = Server::start();
    typed_source(&s);
    let body = json!({
        "source": "src", "target": "dst", "create_target": true,
        "filter": "f/by_type", "query_params": {"type": "a", "n": 2}
    });
    let (status, r) = replicate(&s, body.clone());
    assert_eq!(status, 200, "{r}");
    assert_eq!(all_ids(&s, "dst"), ["a1", "a2"]);
    assert_eq!(r["history"][0]["docs_written"], 2, "{r}");
    // Run again: resumed from its checkpoint.
    bulk(
        &s,
        "src",
        json!([{"_id": "a3", "type": "a"}, {"_id": "b2", "type": "b"}]),
        true,
    );
    let (status, again) = replicate(&s, body.clone());
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["history"][0]["start_last_seq"], r["source_last_seq"]);
    assert_eq!(all_ids(&s, "dst"), ["a1", "a2", "a3"]);
    // The replication id hashes the filter's code: new code, a new replication from 0.
    let mut ddoc = s.get("/src/_design/f").json();
    ddoc["filters"]["by_type"] =
        json!("function(doc, req) { return doc.type === req.query.type; }");
    assert_eq!(s.put("/src/_design/f", &ddoc.to_string()).status, 201);
    let (status, fresh) = replicate(&s, body);
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(fresh["history"].as_array().unwrap().len(), 1, "{fresh}");
    assert_ne!(fresh["session_id"], again["session_id"]);
    // Other query params: another replication, filtering otherwise.
    let (status, r) = replicate(
        &s,
        json!({"source": "src", "target": "dst_b", "create_target": true,
               "filter": "f/by_type", "query_params": {"type": "b"}}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(all_ids(&s, "dst_b"), ["b1", "b2"]);
    // Built-in filters take their parameters from `query_params` the same way.
    let (status, r) = replicate(
        &s,
        json!({"source": "src", "target": "dst_view", "create_target": true,
               "filter": "_view", "query_params": {"view": "f/b_only"}}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(all_ids(&s, "dst_view"), ["b1", "b2"]);
    // A filter that fails fails the replication.
    let (status, r) = replicate(
        &s,
        json!({"source": "src", "target": "dst_c", "create_target": true, "filter": "f/nope"}),
    );
    assert_ne!(status, 200, "{r}");
}

#[test]
fn filtered_replication_pushed_and_pulled_between_servers() {
    let a = Server::start();
    let b = Server::start();
    typed_source(&a);
    let params = json!({"type": "a", "n": "2"});
    // a pushes its own database through the filter.
    let (status, push) = replicate(
        &a,
        json!({"source": "src", "target": url(&b, "pushed"), "create_target": true,
               "filter": "f/by_type", "query_params": params}),
    );
    assert_eq!(status, 200, "{push}");
    assert_eq!(all_ids(&b, "pushed"), ["a1", "a2"]);
    // b pulls from a: the filter runs in a's `_changes`, with the params in the query string.
    let (status, pull) = replicate(
        &b,
        json!({"source": url(&a, "src"), "target": "pulled", "create_target": true,
               "filter": "f/by_type", "query_params": params}),
    );
    assert_eq!(status, 200, "{pull}");
    assert_eq!(all_ids(&b, "pulled"), ["a1", "a2"]);
}
