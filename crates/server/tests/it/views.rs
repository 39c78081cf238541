//! Map/reduce views over real HTTP: query parameters, reduce and grouping, incremental
//! updates, design document edits, sandbox limits.

use crate::common;
use common::Server;
use serde_json::{json, Value};

fn bulk(s: &Server, db: &str, docs: Value) {
    let r = s.post(
        &format!("/{db}/_bulk_docs"),
        &json!({ "docs": docs }).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
}

fn keys(v: &Value) -> Vec<Value> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].clone())
        .collect()
}

fn ids(v: &Value) -> Vec<String> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Ten docs `d0..d9` with `n = i`, `tag = even|odd`, `pair = [i % 3, i]`.
fn setup(s: &Server) {
    s.create_db("db");
    let docs: Vec<Value> = (0..10)
        .map(|i| {
            json!({"_id": format!("d{i}"), "n": i, "tag": if i % 2 == 0 {"even"} else {"odd"},
                   "pair": [i % 3, i]})
        })
        .collect();
    bulk(s, "db", json!(docs));
    let ddoc = json!({
        "views": {
            "by_n": {"map": "function(doc) { if (doc.n !== undefined) emit(doc.n, doc.tag); }"},
            "sum_n": {"map": "function(doc) { emit(doc.tag, doc.n); }", "reduce": "_sum"},
            "pairs": {"map": "function(doc) { emit(doc.pair, 1); }", "reduce": "_count"},
            "stats": {"map": "function(doc) { emit(null, doc.n); }", "reduce": "_stats"},
            "js_sum": {"map": "function(doc) { emit(doc.tag, doc.n); }",
                       "reduce": "function(keys, values, rereduce) { return sum(values); }"}
        }
    });
    assert_eq!(s.put("/db/_design/v", &ddoc.to_string()).status, 201);
}

#[test]
fn map_rows_ranges_and_paging() {
    let s = Server::start();
    setup(&s);
    let all = s.get("/db/_design/v/_view/by_n").json();
    assert_eq!(all["total_rows"], 10);
    assert_eq!(all["offset"], 0);
    assert_eq!(keys(&all), (0..10).map(|i| json!(i)).collect::<Vec<_>>());
    assert_eq!(
        all["rows"][3],
        json!({"id": "d3", "key": 3, "value": "odd"})
    );

    let r = s.get("/db/_design/v/_view/by_n?startkey=3&endkey=6").json();
    assert_eq!(keys(&r), vec![json!(3), json!(4), json!(5), json!(6)]);
    assert_eq!(r["offset"], 3);
    let r = s
        .get("/db/_design/v/_view/by_n?startkey=3&endkey=6&inclusive_end=false")
        .json();
    assert_eq!(keys(&r).len(), 3);
    let r = s
        .get("/db/_design/v/_view/by_n?descending=true&startkey=6&endkey=3")
        .json();
    assert_eq!(keys(&r), vec![json!(6), json!(5), json!(4), json!(3)]);
    assert_eq!(r["offset"], 3, "rows after 6 in descending order");
    let r = s.get("/db/_design/v/_view/by_n?key=7").json();
    assert_eq!(ids(&r), vec!["d7"]);
    let r = s.get("/db/_design/v/_view/by_n?keys=[9,1,42]").json();
    assert_eq!(ids(&r), vec!["d9", "d1"]);
    let r = s
        .post("/db/_design/v/_view/by_n", r#"{"keys":[2,3]}"#)
        .json();
    assert_eq!(ids(&r), vec!["d2", "d3"]);
    let r = s.get("/db/_design/v/_view/by_n?skip=2&limit=3").json();
    assert_eq!(keys(&r), vec![json!(2), json!(3), json!(4)]);
    assert_eq!(r["offset"], 2);
    let r = s.get("/db/_design/v/_view/by_n?startkey=100").json();
    assert_eq!(r, json!({"total_rows": 10, "offset": 10, "rows": []}));
    let r = s
        .get("/db/_design/v/_view/by_n?limit=1&include_docs=true")
        .json();
    assert_eq!(r["rows"][0]["doc"]["_id"], "d0");
    assert_eq!(r["rows"][0]["doc"]["pair"], json!([0, 0]));
    let r = s
        .get("/db/_design/v/_view/by_n?limit=1&update_seq=true")
        .json();
    assert!(r["update_seq"].as_str().unwrap().starts_with("11-"));
    let r = s
        .post(
            "/db/_design/v/_view/by_n/queries",
            r#"{"queries":[{"limit":1},{"keys":[4]},{"startkey":8,"skip":1}]}"#,
        )
        .json();
    let results = r["results"].as_array().unwrap();
    assert_eq!(ids(&results[0]), vec!["d0"]);
    assert_eq!(ids(&results[1]), vec!["d4"]);
    assert_eq!(ids(&results[2]), vec!["d9"]);
    assert_eq!(results[2]["offset"], 9);
    // Raw response framing as CouchDB streams it.
    let t = s.get("/db/_design/v/_view/by_n?limit=2").text;
    assert_eq!(
        t,
        "{\"total_rows\":10,\"offset\":0,\"rows\":[\r\n{\"id\":\"d0\",\"key\":0,\"value\":\"even\"},\r\n{\"id\":\"d1\",\"key\":1,\"value\":\"odd\"}\r\n]}\n"
    );
}

#[test]
fn doc_id_ranges_within_equal_keys() {
    let s = Server::start();
    setup(&s);
    let r = s
        .get("/db/_design/v/_view/sum_n?reduce=false&key=%22even%22&startkey_docid=d4&limit=2")
        .json();
    assert_eq!(ids(&r), vec!["d4", "d6"]);
    let r = s
        .get("/db/_design/v/_view/sum_n?reduce=false&startkey=%22even%22&endkey=%22even%22&endkey_docid=d4")
        .json();
    assert_eq!(ids(&r), vec!["d0", "d2", "d4"]);
}

#[test]
fn reduce_group_and_group_level() {
    let s = Server::start();
    setup(&s);
    let r = s.get("/db/_design/v/_view/sum_n").json();
    assert_eq!(r, json!({"rows": [{"key": null, "value": 45}]}));
    let r = s.get("/db/_design/v/_view/sum_n?group=true").json();
    assert_eq!(
        r["rows"],
        json!([{"key": "even", "value": 20}, {"key": "odd", "value": 25}])
    );
    let r = s.get("/db/_design/v/_view/sum_n?key=%22odd%22").json();
    assert_eq!(r["rows"], json!([{"key": null, "value": 25}]));
    let r = s
        .get("/db/_design/v/_view/js_sum?group=true&descending=true")
        .json();
    assert_eq!(
        r["rows"],
        json!([{"key": "odd", "value": 25}, {"key": "even", "value": 20}])
    );
    let r = s.get("/db/_design/v/_view/pairs?group_level=1").json();
    assert_eq!(
        r["rows"],
        json!([{"key": [0], "value": 4}, {"key": [1], "value": 3}, {"key": [2], "value": 3}])
    );
    let r = s
        .get("/db/_design/v/_view/pairs?group_level=1&startkey=[1]&limit=1")
        .json();
    assert_eq!(r["rows"], json!([{"key": [1], "value": 3}]));
    let r = s.get("/db/_design/v/_view/pairs?group=true&limit=2").json();
    assert_eq!(
        r["rows"],
        json!([{"key": [0, 0], "value": 1}, {"key": [0, 3], "value": 1}])
    );
    let r = s.get("/db/_design/v/_view/stats").json();
    assert_eq!(r["rows"][0]["value"]["sum"], 45);
    assert_eq!(r["rows"][0]["value"]["count"], 10);
    assert_eq!(r["rows"][0]["value"]["max"], 9);
    let r = s
        .post(
            "/db/_design/v/_view/sum_n",
            r#"{"keys":["odd","even"],"group":true}"#,
        )
        .json();
    assert_eq!(
        r["rows"],
        json!([{"key": "odd", "value": 25}, {"key": "even", "value": 20}])
    );
}

#[test]
fn invalid_combinations_give_couchdb_errors() {
    let s = Server::start();
    setup(&s);
    let cases = [
        ("by_n?reduce=true", "Reduce is invalid for map-only views."),
        ("by_n?group=true", "Invalid use of grouping on a map view."),
        ("sum_n?include_docs=true", "`include_docs` is invalid for reduce"),
        ("sum_n?keys=[1,2]", "Multi-key fetches for reduce views must use `group=true`"),
        ("by_n?keys=[1,2]&key=1", "`keys` is incompatible with `key`, `start_key` and `end_key`"),
        ("by_n?startkey=5&endkey=1", "No rows can match your key range, reverse your start_key and end_key or set descending=true"),
        ("sum_n?group=false&group_level=1", "Can't specify group=false and group_level>0 at the same time"),
        ("by_n?stale=bogus", "Invalid value for `stale`."),
    ];
    for (q, reason) in cases {
        let r = s.get(&format!("/db/_design/v/_view/{q}"));
        assert_eq!(r.status, 400, "{q}: {}", r.text);
        assert_eq!(
            r.json(),
            json!({"error": "query_parse_error", "reason": reason}),
            "{q}"
        );
    }
    let r = s.get("/db/_design/v/_view/nope");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"error": "not_found", "reason": "missing_named_view"})
    );
    let r = s.get("/db/_design/nope/_view/x");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "not_found");
    let r = s.get("/db/_design/v/_view/by_n?limit=-1");
    assert_eq!(r.status, 400);
}

#[test]
fn incremental_updates_edits_deletes_and_conflicts() {
    let s = Server::start();
    setup(&s);
    assert_eq!(
        s.get("/db/_design/v/_view/sum_n").json()["rows"][0]["value"],
        45
    );
    // Edit d3: n 3 → 100; delete d4; add d10.
    let rev3 = s.get("/db/d3").json()["_rev"].as_str().unwrap().to_owned();
    let r = s.put(
        "/db/d3",
        &json!({"_rev": rev3, "n": 100, "tag": "odd", "pair": [9, 9]}).to_string(),
    );
    assert_eq!(r.status, 201);
    let rev4 = s.get("/db/d4").json()["_rev"].as_str().unwrap().to_owned();
    assert_eq!(s.delete(&format!("/db/d4?rev={rev4}")).status, 200);
    s.put("/db/d10", r#"{"n": 10, "tag": "even", "pair": [1, 10]}"#);
    let r = s.get("/db/_design/v/_view/sum_n?group=true").json();
    assert_eq!(
        r["rows"],
        json!([{"key": "even", "value": 26}, {"key": "odd", "value": 122}])
    );
    let r = s.get("/db/_design/v/_view/by_n").json();
    assert_eq!(r["total_rows"], 10);
    assert_eq!(ids(&r).last().unwrap(), "d3");
    assert!(!ids(&r).contains(&"d4".to_owned()));
    // A conflicting revision that wins replaces the rows of the old winner.
    let winner = "9-ffffffffffffffffffffffffffffffff";
    let r = s.post(
        "/db/_bulk_docs",
        &json!({"new_edits": false, "docs": [{"_id": "d5", "_rev": winner, "n": 55, "tag": "odd"}]}).to_string(),
    );
    assert_eq!(r.status, 201);
    let r = s.get("/db/_design/v/_view/by_n?key=55").json();
    assert_eq!(ids(&r), vec!["d5"]);
    assert_eq!(
        s.get("/db/_design/v/_view/by_n?key=5").json()["rows"],
        json!([])
    );
    // Stale queries answer from the index as it is.
    s.put("/db/d11", r#"{"n": 11, "tag": "odd"}"#);
    let r = s.get("/db/_design/v/_view/by_n?key=11&update=false").json();
    assert_eq!(r["rows"], json!([]));
    let r = s.get("/db/_design/v/_view/by_n?key=11").json();
    assert_eq!(ids(&r), vec!["d11"]);
}

#[test]
fn design_doc_edits_start_a_new_index_and_cleanup_removes_old() {
    let s = Server::start();
    setup(&s);
    assert_eq!(
        s.get("/db/_design/v/_view/by_n?limit=1").json()["total_rows"],
        10
    );
    let info1 = s.get("/db/_design/v/_info").json();
    assert_eq!(info1["name"], "v");
    assert_eq!(info1["view_index"]["update_seq"], 11);
    let sig1 = info1["view_index"]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ddoc = s.get("/db/_design/v").json();
    ddoc["views"]["by_n"]["map"] = json!("function(doc) { if (doc.n > 4) emit(doc.n, null); }");
    assert_eq!(s.put("/db/_design/v", &ddoc.to_string()).status, 201);
    let r = s.get("/db/_design/v/_view/by_n").json();
    assert_eq!(r["total_rows"], 5);
    assert_eq!(r["rows"][0]["value"], Value::Null);
    let sig2 = s.get("/db/_design/v/_info").json()["view_index"]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(sig1, sig2);
    // An identical design doc shares the index.
    let mut copy = ddoc.clone();
    copy.as_object_mut().unwrap().remove("_rev");
    assert_eq!(s.put("/db/_design/w", &copy.to_string()).status, 201);
    let w = s.get("/db/_design/w/_info").json();
    assert_eq!(w["view_index"]["signature"].as_str().unwrap(), sig2);
    assert_eq!(
        w["view_index"]["update_seq"], 12,
        "built once, by the query on v"
    );
    let r = s.post("/db/_view_cleanup", "{}");
    assert_eq!(r.status, 202);
    assert_eq!(s.post("/db/_compact/v", "{}").status, 202);
    assert_eq!(s.get("/db/_design/w/_view/by_n").json()["total_rows"], 5);
}

#[test]
fn throwing_and_endless_map_functions() {
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("extra.ini");
    std::fs::write(&ini, "[couchdb]\nos_process_timeout = 500\n").unwrap();
    let s = Server::start_with(dir.path(), &["--config", ini.to_str().unwrap()]);
    s.create_db("db");
    bulk(
        &s,
        "db",
        json!([{"_id": "a", "n": 1}, {"_id": "b"}, {"_id": "c", "n": 3}]),
    );
    let ddoc = json!({"views": {
        "throws": {"map": "function(doc) { if (!doc.n) throw new Error('no n'); emit(doc.n, null); }"},
        "fine": {"map": "function(doc) { emit(doc._id, null); }"}
    }});
    s.put("/db/_design/t", &ddoc.to_string());
    let r = s.get("/db/_design/t/_view/throws").json();
    assert_eq!(
        ids(&r),
        vec!["a", "c"],
        "the throwing doc is skipped for that view"
    );
    assert_eq!(s.get("/db/_design/t/_view/fine").json()["total_rows"], 3);
    let endless = json!({"views": {"v": {"map": "function(doc) { while (true) {} }"}}});
    s.put("/db/_design/endless", &endless.to_string());
    let r = s.get("/db/_design/endless/_view/v");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "os_process_error");
    let hog = json!({"views": {"v": {"map": "function(doc) { var a = []; while (true) a.push('xxxxxxxxxxxxxxxxxxxx' + a.length); }"}}});
    s.put("/db/_design/hog", &hog.to_string());
    let r = s.get("/db/_design/hog/_view/v");
    assert_eq!(r.status, 500, "{}", r.text);
    // The server stays healthy.
    assert_eq!(s.get("/db/_design/t/_view/fine").json()["total_rows"], 3);
    // Design documents are checked on save, as CouchDB does.
    let bad = json!({"views": {"v": {"map": "function(doc) { emit(doc._id"}}});
    let r = s.put("/db/_design/bad", &bad.to_string());
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"], "compilation_error");
    let r = s.put(
        "/db/_design/nomap",
        r#"{"views": {"v": {"reduce": "_sum"}}}"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "invalid_design_doc");
    let r = s.post(
        "/db/_bulk_docs",
        &json!({"docs": [{"_id": "ok1"}, {"_id": "_design/bad2", "views": {"v": {"map": "nonsense("}}}, {"_id": "ok2"}]})
            .to_string(),
    );
    let results = r.json();
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[1]["error"], "compilation_error");
    assert_eq!(results[2]["ok"], true);
    let mango = r#"{"language": "query", "views": {"i": {"map": {"fields": {"a": "asc"}}, "reduce": "_count"}}}"#;
    assert_eq!(
        s.put("/db/_design/mango", mango).status,
        201,
        "other languages are stored as is"
    );
}

#[test]
fn changes_view_filter() {
    let s = Server::start();
    setup(&s);
    let r = s.get("/db/_changes?filter=_view&view=v/by_n").json();
    assert_eq!(
        r["results"].as_array().unwrap().len(),
        10,
        "the design doc emits nothing"
    );
}

#[test]
fn index_survives_restarts_and_crashes_and_reports_active_tasks_shape() {
    let s = Server::start();
    setup(&s);
    assert_eq!(
        s.get("/db/_design/v/_view/sum_n").json()["rows"][0]["value"],
        45
    );
    // A clean stop persists the index: it answers at once after a restart.
    let mut s = s;
    let dir = s.take_dir();
    s.stop();
    let s2 = Server::start_in(dir.path());
    let info = s2.get("/db/_design/v/_info").json();
    assert_eq!(info["view_index"]["update_seq"], 11);
    assert_eq!(
        s2.get("/db/_design/v/_view/sum_n?update=false").json()["rows"][0]["value"],
        45
    );
    assert_eq!(s2.get("/_active_tasks").json(), json!([]));
    // Index writes skip the WAL: after a kill -9 the index is at some checkpoint it
    // committed (possibly none) and the next query brings it up to date.
    s2.put("/db/late", r#"{"n": 100}"#);
    assert_eq!(
        s2.get("/db/_design/v/_view/sum_n").json()["rows"][0]["value"],
        145
    );
    s2.kill9();
    let s3 = Server::start_in(dir.path());
    let seq = s3.get("/db/_design/v/_info").json()["view_index"]["update_seq"]
        .as_u64()
        .unwrap();
    assert!(seq <= 12, "{seq}");
    assert_eq!(
        s3.get("/db/_design/v/_view/sum_n").json()["rows"][0]["value"],
        145
    );
    assert_eq!(
        s3.get("/db/_design/v/_info").json()["view_index"]["update_seq"],
        12
    );
}

#[test]
fn sum_of_non_numbers_is_an_error_value_as_couchdb_shows_it() {
    let s = Server::start();
    s.create_db("db");
    bulk(
        &s,
        "db",
        json!([{"_id": "a", "v": 1}, {"_id": "b", "v": "x"}]),
    );
    s.put(
        "/db/_design/e",
        &json!({"views": {"s": {"map": "function(doc) { emit(doc._id, doc.v); }", "reduce": "_sum"}}})
            .to_string(),
    );
    let r = s.get("/db/_design/e/_view/s");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["rows"][0]["value"]["error"],
        "builtin_reduce_error"
    );
    let r = s.get("/db/_design/e/_view/s?reduce=false");
    assert_eq!(r.json()["total_rows"], 2, "map rows are unaffected");
}

#[test]
fn design_options_lib_and_raw_collation() {
    let s = Server::start();
    s.create_db("db");
    bulk(
        &s,
        "db",
        json!([{"_id": "a", "s": "b"}, {"_id": "b", "s": "B"}, {"_id": "c", "s": "a"}]),
    );
    let ddoc = json!({
        "options": {"include_design": true, "local_seq": true},
        "views": {
            "ids": {"map": "function(doc) { emit(doc._id, doc._local_seq); }"},
            "libbed": {"map": "function(doc) { var m = require('views/lib/util'); emit(m.up(doc._id), null); }"},
            "lib": {"util": "exports.up = function(s) { return s.toUpperCase(); };"}
        }
    });
    assert_eq!(s.put("/db/_design/o", &ddoc.to_string()).status, 201);
    let r = s.get("/db/_design/o/_view/ids").json();
    assert_eq!(
        ids(&r),
        vec!["_design/o", "a", "b", "c"],
        "include_design maps the ddoc too"
    );
    assert_eq!(
        r["rows"][1]["value"], 1,
        "local_seq is visible to map functions"
    );
    let r = s.get("/db/_design/o/_view/libbed?key=%22A%22").json();
    assert_eq!(ids(&r), vec!["a"]);
    let icu = json!({"views": {"v": {"map": "function(doc) { if (doc.s) emit(doc.s, null); }"}}});
    s.put("/db/_design/icu", &icu.to_string());
    let raw = json!({"options": {"collation": "raw"},
                     "views": {"v": {"map": "function(doc) { if (doc.s) emit(doc.s, null); }"}}});
    s.put("/db/_design/raw", &raw.to_string());
    let k = keys(&s.get("/db/_design/icu/_view/v").json());
    assert_eq!(
        k,
        vec![json!("a"), json!("b"), json!("B")],
        "ICU: a < b < B"
    );
    let k = keys(&s.get("/db/_design/raw/_view/v").json());
    assert_eq!(
        k,
        vec![json!("B"), json!("a"), json!("b")],
        "raw: code points"
    );
    // CouchDB reads `collation` from each view's own options; raw keys sort as Erlang terms
    // (numbers < false < null < true < objects < arrays < strings).
    let mixed = "function(doc) { if (doc._id === 'a') [\"x\", [1], {\"k\": 1}, true, null, false, 2, [], \"X\"].forEach(function(k) { emit(k, null); }); }";
    let per_view = json!({"views": {
        "raw": {"map": mixed, "options": {"collation": "raw"}},
        "icu": {"map": mixed}
    }});
    s.put("/db/_design/per_view", &per_view.to_string());
    let k = keys(&s.get("/db/_design/per_view/_view/raw").json());
    assert_eq!(
        k,
        vec![
            json!(2),
            json!(false),
            json!(null),
            json!(true),
            json!({"k": 1}),
            json!([]),
            json!([1]),
            json!("X"),
            json!("x")
        ]
    );
    let k = keys(&s.get("/db/_design/per_view/_view/icu").json());
    assert_eq!(
        k,
        vec![
            json!(null),
            json!(false),
            json!(true),
            json!(2),
            json!("x"),
            json!("X"),
            json!([]),
            json!([1]),
            json!({"k": 1})
        ]
    );
    let r = s.get("/db/_design/per_view/_view/raw?startkey=true&endkey=%5B%5D");
    assert_eq!(
        keys(&r.json()),
        vec![json!(true), json!({"k": 1}), json!([])]
    );
    let r = s.get("/db/_design/per_view/_view/raw?startkey=%22a%22&endkey=1");
    assert_eq!(r.status, 400, "raw order decides which ranges are reversed");
}

/// `_compact/{ddoc}` rewrites the trees that incremental updates left behind: every query
/// answers the same before and after, the index keeps updating, and it survives a restart.
#[test]
fn view_compaction_rewrites_trees_without_changing_answers() {
    let s = Server::start();
    s.create_db("db");
    let docs: Vec<Value> = (0..3000)
        .map(|i| json!({"_id": format!("d{i:05}"), "n": i}))
        .collect();
    bulk(&s, "db", json!(docs));
    let ddoc = json!({"views": {
        "by_n": {"map": "function(doc) { emit(doc.n, 1); }", "reduce": "_sum"},
        "by_mod": {"map": "function(doc) { emit([doc.n % 7, doc.n], doc.n); }", "reduce": "_count"},
        "js": {"map": "function(doc) { emit(doc._id, doc.n); }", "reduce": "function(k, v, r) { return sum(v); }"}
    }});
    assert_eq!(s.put("/db/_design/v", &ddoc.to_string()).status, 201);
    let answers = |s: &Server| -> Vec<Value> {
        [
            "/db/_design/v/_view/by_n?reduce=false",
            "/db/_design/v/_view/by_n",
            "/db/_design/v/_view/by_mod?group_level=1",
            "/db/_design/v/_view/by_mod?reduce=false&startkey=[3,100]&endkey=[3,2000]&skip=5&limit=50",
            "/db/_design/v/_view/js",
            "/db/_design/v/_view/js?group=true&startkey=%22d00100%22&limit=20",
        ]
        .iter()
        .map(|q| {
            let r = s.get(q);
            assert_eq!(r.status, 200, "{q}: {}", r.text);
            r.json()
        })
        .collect()
    };
    answers(&s);
    // Churn in many small rounds: updates and deletes rewrite leaves one by one.
    for round in 0..10 {
        let current = s.get("/db/_all_docs?include_docs=true").json();
        let changed: Vec<Value> = current["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["id"].as_str().unwrap().starts_with('d'))
            .enumerate()
            .filter(|(i, _)| i % 10 == round)
            .map(|(i, r)| {
                let mut d = r["doc"].clone();
                if i % 3 == 0 {
                    d["_deleted"] = json!(true);
                } else {
                    d["n"] = json!(d["n"].as_i64().unwrap() + 10_000);
                }
                d
            })
            .collect();
        bulk(&s, "db", json!(changed));
        answers(&s);
    }
    let before = answers(&s);
    assert_eq!(s.post("/db/_compact/v", "{}").status, 202);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.get("/db/_design/v/_info").json()["view_index"]["compact_running"] == true {
        assert!(
            std::time::Instant::now() < deadline,
            "compaction never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(answers(&s), before);
    bulk(&s, "db", json!([{"_id": "late", "n": 7}]));
    let after = answers(&s);
    assert_eq!(
        after[0]["total_rows"],
        before[0]["total_rows"].as_u64().unwrap() + 1
    );
    let mut s = s;
    let dir = s.take_dir();
    s.kill9();
    let s2 = Server::start_in(dir.path());
    assert_eq!(answers(&s2), after);
}

/// A fresh build whose rows outgrow the indexer's memory bound (~46 MB of rows here) writes
/// them as sorted runs and merges them back: every row, in collation order, reduced right.
#[test]
fn a_fresh_build_larger_than_memory_merges_its_spilled_runs() {
    let s = Server::start();
    s.create_db("db");
    for part in 0..4 {
        let docs: Vec<Value> = (part * 250..(part + 1) * 250)
            .map(|i| json!({"_id": format!("d{i:04}"), "n": i}))
            .collect();
        bulk(&s, "db", json!(docs));
    }
    let ddoc = json!({"views": {
        "wide": {"map": "function(doc) { var pad = Array(81).join('x'); \
                 for (var j = 0; j < 200; j++) emit([j, doc.n, pad], doc.n); }",
                 "reduce": "_sum"},
        "ids": {"map": "function(doc) { emit(doc._id, null); }", "reduce": "_count"}
    }});
    assert_eq!(s.put("/db/_design/v", &ddoc.to_string()).status, 201);
    let pad = "x".repeat(80);
    let r = s.get("/db/_design/v/_view/wide?reduce=false&skip=123456&limit=3");
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["total_rows"], 200_000);
    let expected: Vec<Value> = [(123, 456), (123, 457), (123, 458)]
        .iter()
        .map(|&(j, n)| json!({"id": format!("d{n:04}"), "key": [j, n, pad], "value": n}))
        .collect();
    assert_eq!(v["rows"], json!(expected));
    let groups = s.get("/db/_design/v/_view/wide?group_level=1").json();
    let groups = groups["rows"].as_array().unwrap();
    assert_eq!(groups.len(), 200);
    for (j, g) in groups.iter().enumerate() {
        assert_eq!(g, &json!({"key": [j], "value": 499_500}));
    }
    let ids = s
        .get("/db/_design/v/_view/ids?reduce=false&skip=998")
        .json();
    assert_eq!(keys(&ids), vec![json!("d0998"), json!("d0999")]);
    assert_eq!(
        s.get("/db/_design/v/_view/ids").json()["rows"][0]["value"],
        1000
    );
}
