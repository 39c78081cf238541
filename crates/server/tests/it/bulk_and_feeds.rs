//! `_bulk_docs`, `_bulk_get`, `_all_docs`, `_changes`, `_revs_diff`, `_purge` over HTTP.

use crate::common;
use common::Server;
use serde_json::{json, Value};
use std::time::Duration;

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_string())
        .collect()
}

fn setup(s: &Server) {
    s.create_db("db");
    let docs: Vec<Value> = ["c", "a", "e", "b", "d"]
        .iter()
        .map(|i| json!({"_id": i, "n": i}))
        .collect();
    let r = s.post("/db/_bulk_docs", &json!({"docs": docs}).to_string());
    assert_eq!(r.status, 201);
}

#[test]
fn bulk_docs_reports_each_doc_in_order() {
    let s = Server::start();
    setup(&s);
    let r = s
        .post(
            "/db/_bulk_docs",
            r#"{"docs":[{"_id":"a"},{"_id":"new"},{"_id":"new"}]}"#,
        )
        .json();
    assert_eq!(
        r[0],
        json!({"id": "a", "error": "conflict", "reason": "Document update conflict."})
    );
    assert_eq!(r[1]["ok"], true);
    assert_eq!(
        r[2]["error"], "conflict",
        "second write of a new id in one request conflicts"
    );
    assert_eq!(s.post("/db/_bulk_docs", r#"{"nodocs":[]}"#).status, 400);
    assert_eq!(
        s.post("/db/_bulk_docs", r#"{"docs":[{"_id":"_x"}]}"#)
            .status,
        400
    );
    let info = s.get("/db").json();
    assert_eq!(info["doc_count"], 6);
}

#[test]
fn all_docs_query_parameters() {
    let s = Server::start();
    setup(&s);
    let all = s.get("/db/_all_docs").json();
    assert_eq!(all["total_rows"], 5);
    assert_eq!(all["offset"], 0);
    assert_eq!(ids(&all["rows"]), ["a", "b", "c", "d", "e"]);
    assert!(all["rows"][0]["value"]["rev"]
        .as_str()
        .unwrap()
        .starts_with("1-"));
    let q = |p: &str| s.get(&format!("/db/_all_docs?{p}")).json();
    assert_eq!(
        ids(&q("startkey=%22b%22&endkey=%22d%22")["rows"]),
        ["b", "c", "d"]
    );
    assert_eq!(
        ids(&q("start_key=%22b%22&end_key=%22d%22&inclusive_end=false")["rows"]),
        ["b", "c"]
    );
    assert_eq!(q("startkey=%22b%22")["offset"], 1);
    assert_eq!(ids(&q("descending=true&limit=2")["rows"]), ["e", "d"]);
    assert_eq!(
        ids(&q("descending=true&startkey=%22d%22&endkey=%22b%22")["rows"]),
        ["d", "c", "b"]
    );
    assert_eq!(ids(&q("skip=1&limit=2")["rows"]), ["b", "c"]);
    assert_eq!(ids(&q("key=%22c%22")["rows"]), ["c"]);
    let inc = q("include_docs=true&limit=1");
    assert_eq!(inc["rows"][0]["doc"]["n"], "a");
    let upd = q("update_seq=true&limit=0");
    assert!(upd["update_seq"].as_str().unwrap().starts_with("5-"));
    // keys, with a deleted and a missing doc
    let rev = s.get("/db/b").json()["_rev"].as_str().unwrap().to_string();
    s.delete(&format!("/db/b?rev={rev}"));
    let k = s
        .post(
            "/db/_all_docs?include_docs=true",
            r#"{"keys":["c","b","zz"]}"#,
        )
        .json();
    assert_eq!(k["rows"][0]["id"], "c");
    assert_eq!(k["rows"][1]["value"]["deleted"], true);
    assert_eq!(k["rows"][1]["doc"], Value::Null);
    assert_eq!(k["rows"][2], json!({"key": "zz", "error": "not_found"}));
    assert_eq!(ids(&q("keys=%5B%22a%22%5D")["rows"]), ["a"]);
    assert_eq!(s.get("/db/_all_docs?keys=1").status, 400);
    assert_eq!(s.get("/db/_all_docs?reduce=true").status, 400);
    // design docs
    s.put("/db/_design/z", "{}");
    assert_eq!(
        ids(&s.get("/db/_design_docs").json()["rows"]),
        ["_design/z"]
    );
    assert_eq!(s.get("/db/_all_docs").json()["rows"][0]["id"], "_design/z");
    // queries
    let qs = s
        .post(
            "/db/_all_docs/queries",
            r#"{"queries":[{"limit":1},{"keys":["d"]}]}"#,
        )
        .json();
    assert_eq!(qs["results"].as_array().unwrap().len(), 2);
    assert_eq!(ids(&qs["results"][1]["rows"]), ["d"]);
}

#[test]
fn bulk_get_and_revs_diff() {
    let s = Server::start();
    setup(&s);
    let rev = s.get("/db/a").json()["_rev"].as_str().unwrap().to_string();
    let body = json!({"docs": [{"id": "a", "rev": rev}, {"id": "zz"}, {"id": "c"}]});
    let r = s.post("/db/_bulk_get?revs=true", &body.to_string()).json();
    let res = r["results"].as_array().unwrap();
    assert_eq!(res[0]["docs"][0]["ok"]["n"], "a");
    assert_eq!(res[0]["docs"][0]["ok"]["_revisions"]["start"], 1);
    assert_eq!(res[1]["docs"][0]["error"]["error"], "not_found");
    assert_eq!(res[2]["docs"][0]["ok"]["_id"], "c");
    let diff = json!({"a": [rev, "2-ffffffffffffffffffffffffffffffff"], "new": ["1-abababababababababababababababab"]});
    let d = s.post("/db/_revs_diff", &diff.to_string()).json();
    assert_eq!(
        d["a"]["missing"],
        json!(["2-ffffffffffffffffffffffffffffffff"])
    );
    assert_eq!(d["a"]["possible_ancestors"], json!([rev]));
    assert_eq!(
        d["new"],
        json!({"missing": ["1-abababababababababababababababab"]})
    );
    let m = s.post("/db/_missing_revs", &diff.to_string()).json();
    assert_eq!(
        m["missing_revs"]["new"],
        json!(["1-abababababababababababababababab"])
    );
}

#[test]
fn purge_removes_revisions() {
    let s = Server::start();
    setup(&s);
    let rev = s.get("/db/a").json()["_rev"].as_str().unwrap().to_string();
    let r = s.post(
        "/db/_purge",
        &json!({"a": [rev], "zz": ["1-x"]}).to_string(),
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["purged"]["a"], json!([rev]));
    assert_eq!(s.get("/db/a").status, 404);
    let info = s.get("/db").json();
    assert_eq!(info["doc_count"], 4);
    assert!(info["purge_seq"].as_str().unwrap().starts_with("1-"));
    assert!(!ids(&s.get("/db/_changes").json()["results"]).contains(&"a".to_string()));
}

#[test]
fn changes_feed_normal() {
    let s = Server::start();
    setup(&s);
    let c = s.get("/db/_changes").json();
    let res = c["results"].as_array().unwrap();
    // As couch_db_updater: one request's documents take their sequences in id order.
    assert_eq!(
        ids(&c["results"]),
        ["a", "b", "c", "d", "e"],
        "sequence order"
    );
    assert!(res[0]["seq"].as_str().unwrap().starts_with("1-"));
    assert_eq!(c["pending"], 0);
    let since = res[2]["seq"].as_str().unwrap().to_string();
    let later = s.get(&format!("/db/_changes?since={since}")).json();
    assert_eq!(ids(&later["results"]), ["d", "e"]);
    let lim = s.get("/db/_changes?limit=2").json();
    assert_eq!(ids(&lim["results"]), ["a", "b"]);
    assert_eq!(lim["pending"], 3);
    assert_eq!(lim["last_seq"], res[1]["seq"]);
    assert_eq!(
        ids(&s.get("/db/_changes?descending=true&limit=2").json()["results"]),
        ["e", "d"]
    );
    // an update moves the doc to the end
    let rev = s.get("/db/c").json()["_rev"].as_str().unwrap().to_string();
    s.delete(&format!("/db/c?rev={rev}"));
    let c = s.get("/db/_changes?include_docs=true").json();
    let last = c["results"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["id"], "c");
    assert_eq!(last["deleted"], true);
    assert_eq!(last["doc"]["_deleted"], true);
    assert_eq!(c["results"].as_array().unwrap().len(), 5);
    // filters
    let f = s
        .get("/db/_changes?filter=_doc_ids&doc_ids=%5B%22a%22,%22d%22%5D")
        .json();
    assert_eq!(ids(&f["results"]), ["a", "d"]);
    let f = s
        .post("/db/_changes?filter=_doc_ids", r#"{"doc_ids":["e"]}"#)
        .json();
    assert_eq!(ids(&f["results"]), ["e"]);
    s.put("/db/_design/x", "{}");
    assert_eq!(
        ids(&s.get("/db/_changes?filter=_design").json()["results"]),
        ["_design/x"]
    );
    assert_eq!(
        s.get("/db/_changes?filter=ddoc/f").status,
        404,
        "a filter of a missing design document is refused, not ignored"
    );
    let now = s.get("/db/_changes?since=now").json();
    assert_eq!(now["results"], json!([]));
    // seq_interval counts down CouchDB's default limit (10^15): rows 0, 2, … show theirs
    let sa = s.get("/db/_changes?style=all_docs&seq_interval=2").json();
    assert!(sa["results"][0]["seq"].is_string());
    assert_eq!(sa["results"][1]["seq"], Value::Null);
}

/// A normal feed's ETag is the database's info (chttpd_db), whatever the query: a match is a
/// 304 with no body, and any write changes it. Live feeds send none.
#[test]
fn normal_changes_feeds_carry_the_databases_etag() {
    let s = Server::start();
    setup(&s);
    let r = s.get("/db/_changes");
    let etag = r.header("etag").expect("an ETag").to_string();
    assert_eq!(
        s.get("/db/_changes?limit=1").header("etag"),
        Some(etag.as_str())
    );
    let inm = [("if-none-match", etag.as_str())];
    let r = s.req_with("GET", "/db/_changes?since=now", None, &inm, true);
    assert_eq!((r.status, r.text.as_str()), (304, ""));
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    s.put("/db/f", "{}");
    let r = s.req_with("GET", "/db/_changes", None, &inm, true);
    assert_eq!(r.status, 200);
    assert_ne!(r.header("etag"), Some(etag.as_str()));
    let r = s.get("/db/_changes?feed=longpoll&since=0");
    assert_eq!(r.header("etag"), None);
}

/// `pending` as fabric_rpc counts it: the changes ahead of the start (all of them when
/// descending) less those visited; a `_doc_ids` feed visits only what it sends.
#[test]
fn changes_pending_counts_as_couchdb() {
    let s = Server::start();
    setup(&s); // a..e at sequences 1..5
    let d = s.get("/db/_changes?descending=true&limit=2").json();
    assert_eq!(ids(&d["results"]), ["e", "d"]);
    assert_eq!(d["pending"], 3);
    let ids_of = |q: &str| {
        s.get(&format!("/db/_changes?filter=_doc_ids&doc_ids={q}"))
            .json()
    };
    let f = ids_of("%5B%22b%22%5D");
    assert_eq!((f["pending"].clone(), seq_n(&f["last_seq"])), (json!(4), 5));
    let f = ids_of("%5B%22b%22,%22d%22%5D&descending=true");
    assert_eq!(ids(&f["results"]), ["d", "b"]);
    assert_eq!((f["pending"].clone(), seq_n(&f["last_seq"])), (json!(3), 2));
    let f = ids_of("%5B%22zz%22%5D&descending=true");
    assert_eq!((f["pending"].clone(), seq_n(&f["last_seq"])), (json!(5), 5));
    let since = s.get("/db/_changes?limit=2").json()["last_seq"].clone();
    let f = ids_of(&format!("%5B%22a%22%5D&since={}", since.as_str().unwrap()));
    assert_eq!(f["results"], json!([]));
    assert_eq!(f["pending"], 3);
    let f = s
        .get("/db/_changes?feed=longpoll&filter=_doc_ids&doc_ids=%5B%22c%22%5D")
        .json();
    assert_eq!(f["pending"], 4);
    // More ids than `changes_doc_ids_optimization_threshold`: the sequences are scanned, and
    // counted as for any feed.
    let r = s.put(
        "/_node/_local/_config/couchdb/changes_doc_ids_optimization_threshold",
        "\"1\"",
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let f = ids_of("%5B%22b%22,%22d%22%5D");
    assert_eq!(ids(&f["results"]), ["b", "d"]);
    assert_eq!((f["pending"].clone(), seq_n(&f["last_seq"])), (json!(0), 5));
}

fn seq_n(seq: &Value) -> u64 {
    let s = seq.as_str().expect("a string sequence");
    s[..s.find('-').unwrap()].parse().unwrap()
}

#[test]
fn changes_feed_longpoll_and_continuous() {
    let s = Server::start();
    setup(&s);
    let seq = s.get("/db").json()["update_seq"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/db/_changes?feed=longpoll&since={seq}&timeout=10000");
    std::thread::scope(|scope| {
        let h = scope.spawn(|| s.get(&path).json());
        std::thread::sleep(Duration::from_millis(300));
        s.put("/db/late", "{}");
        let got = h.join().unwrap();
        assert_eq!(ids(&got["results"]), ["late"]);
    });
    // a longpoll with nothing new times out with no rows
    let t = s
        .get("/db/_changes?feed=longpoll&since=now&timeout=200")
        .json();
    assert_eq!(t["results"], json!([]));
    // continuous: rows then the closing last_seq line after the timeout
    let text = s
        .get("/db/_changes?feed=continuous&timeout=300&since=0&limit=3")
        .text;
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[3]["last_seq"].is_string());
    let es = s
        .get("/db/_changes?feed=eventsource&timeout=300&limit=1")
        .text;
    assert!(es.starts_with("data: {"), "{es}");
    assert!(es.contains("\nid: "));
}

/// `_bulk_get` without a revision answers every leaf, deleted ones too (CouchDB's
/// `open_revs` of `all`): a deleted document is `ok` with `_deleted`, a conflicted one
/// gives both branches.
#[test]
fn bulk_get_without_rev_answers_every_leaf() {
    let s = Server::start();
    s.create_db("db");
    let rev = s.put("/db/gone", r#"{"x":1}"#).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let del = s.delete(&format!("/db/gone?rev={rev}")).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    s.put("/db/twice", r#"{"side":"a"}"#);
    s.post(
        "/db/_bulk_docs",
        r#"{"new_edits":false,"docs":[{"_id":"twice","_rev":"1-ffffffffffffffffffffffffffffffff","side":"b"}]}"#,
    );
    let body = json!({"docs": [{"id": "gone"}, {"id": "twice"}, {"id": "never"}]});
    let r = s.post("/db/_bulk_get", &body.to_string()).json();
    let res = r["results"].as_array().unwrap();
    assert_eq!(
        res[0]["docs"],
        json!([{"ok": {"_id": "gone", "_rev": del, "_deleted": true}}])
    );
    let sides: Vec<&str> = res[1]["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["ok"]["side"].as_str().unwrap())
        .collect();
    assert_eq!(sides.len(), 2);
    assert!(sides.contains(&"a") && sides.contains(&"b"));
    assert_eq!(res[2]["docs"][0]["error"]["error"], json!("not_found"));
}

/// Request bodies sent with `Content-Encoding: gzip` are inflated first, as chttpd's
/// `maybe_decompress` does (the Cloudant SDK, and so couchbackup, sends them so).
#[test]
fn gzipped_request_bodies() {
    use std::io::Write;
    let s = Server::start();
    s.create_db("db");
    let gz = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let json_gzip = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    let docs = gz(br#"{"docs":[{"_id":"a","n":1},{"_id":"b","n":2}]}"#);
    let r = s.req_bytes("POST", "/db/_bulk_docs", docs, &json_gzip);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(s.get("/db/b").json()["n"], json!(2));
    let r = s.req_bytes("PUT", "/db/c", gz(br#"{"n":3}"#), &json_gzip);
    assert_eq!(r.status, 201);
    let r = s.req_bytes("POST", "/db/_bulk_docs", b"not gzip".to_vec(), &json_gzip);
    assert_eq!(r.status, 400);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        v,
        json!({"error": "bad_request", "reason": "Request body is not properly gzipped."})
    );
    let r = s.req_bytes(
        "PUT",
        "/db/d",
        b"{}".to_vec(),
        &[
            ("content-type", "application/json"),
            ("content-encoding", "br"),
        ],
    );
    assert_eq!(r.status, 415);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        v,
        json!({"error": "bad_content_type", "reason": "br is not a supported content encoding."})
    );
}
