//! Views, `_all_docs` and their query parameters as CouchDB 3.5 answers them (issue 10):
//! every test asserts CouchDB's exact status and body. Sources are cited per test; the
//! behaviours are listed in `/work/notes/views.md`.

use crate::common;
use common::Server;
use serde_json::{json, Value};

fn bulk(s: &Server, db: &str, body: Value) {
    let r = s.post(&format!("/{db}/_bulk_docs"), &body.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
}

fn put_ddoc(s: &Server, db: &str, id: &str, ddoc: Value) {
    let r = s.put(&format!("/{db}/_design/{id}"), &ddoc.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
}

/// `path` with the characters of JSON parameters that URIs may not hold escaped.
fn uri(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '"' => out.push_str("%22"),
            '[' => out.push_str("%5B"),
            ']' => out.push_str("%5D"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ' ' => out.push_str("%20"),
            c => out.push(c),
        }
    }
    out
}

/// Status and JSON body of a GET.
fn get(s: &Server, path: &str) -> (u16, Value) {
    let r = s.get(&uri(path));
    (r.status, r.json())
}

/// Status and JSON body of a POST with a JSON body.
fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = s.post(&uri(path), &body.to_string());
    (r.status, r.json())
}

fn field(v: &Value, name: &str) -> Vec<Value> {
    v["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {v}"))
        .iter()
        .map(|r| r[name].clone())
        .collect()
}

fn parse_error(reason: &str) -> Value {
    json!({"error": "query_parse_error", "reason": reason})
}

fn bad_request(reason: &str) -> Value {
    json!({"error": "bad_request", "reason": reason})
}

/// Docs `a`, `b`, `c` (`key` = id, `value` = 1, 2, 3) and a deleted `d`; `_design/ddoc`
/// with a map view and a `_sum` view over them (chttpd_view_test.erl's fixture).
fn abc(s: &Server) {
    s.create_db("db");
    bulk(
        s,
        "db",
        json!({"docs": [
            {"_id": "a", "key": "a", "value": 1},
            {"_id": "b", "key": "b", "value": 2},
            {"_id": "c", "key": "c", "value": 3},
            {"_id": "d", "key": "d", "_deleted": true}
        ]}),
    );
    put_ddoc(
        s,
        "db",
        "ddoc",
        json!({"views": {
            "map": {"map": "function(doc) { emit(doc.key, doc.value) }"},
            "map_reduce": {"map": "function(doc) { emit(doc.key, doc.value) }", "reduce": "_sum"}
        }}),
    );
}

const MAP: &str = "/db/_design/ddoc/_view/map";
const RED: &str = "/db/_design/ddoc/_view/map_reduce";

fn map_row(id: &str, value: i64) -> Value {
    json!({"id": id, "key": id, "value": value})
}

/// couch_mrview_http.erl `parse_boolean`: booleans in any letter case; other values are
/// `Invalid boolean parameter: "<value>"`. chttpd_db.erl `parse_doc_query` and
/// chttpd_changes.erl `parse_changes_query` match exactly `true` and ignore the rest.
#[test]
fn boolean_parameters_as_couchdb_reads_them() {
    let s = Server::start();
    abc(&s);
    let (st, v) = get(&s, &format!("{MAP}?descending=True&limit=1"));
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"total_rows": 3, "offset": 0, "rows": [map_row("c", 3)]})
    );
    let (_, v) = get(&s, &format!("{MAP}?key=\"a\"&include_docs=TRUE"));
    assert_eq!(v["rows"][0]["doc"]["_id"], "a");
    let (_, v) = get(&s, "/db/_all_docs?descending=TrUe&limit=1");
    assert_eq!(v["rows"][0]["id"], "c");
    for path in [
        format!("{MAP}?descending=yes"),
        "/db/_all_docs?include_docs=1".into(),
        format!("{RED}?group=nope"),
    ] {
        let r = s.get(&uri(&path));
        assert_eq!(r.status, 400, "{path}");
        let bad = path.rsplit('=').next().unwrap();
        assert_eq!(
            r.json(),
            parse_error(&format!("Invalid boolean parameter: \"{bad}\"")),
            "{path}"
        );
    }
    // Documents and _changes: only `true` turns an option on; other values are ignored.
    let (st, v) = get(&s, "/db/a?revs=True&conflicts=yes");
    assert_eq!(st, 200);
    assert!(v.get("_revisions").is_none(), "{v}");
    let (st, v) = get(&s, "/db/a?revs=true");
    assert_eq!(st, 200);
    assert_eq!(v["_revisions"]["start"], 1);
    let (st, v) = get(&s, "/db/_changes?descending=True&include_docs=yes");
    assert_eq!(st, 200);
    assert_eq!(v["results"][0]["id"], "a", "not descending: {v}");
    assert!(v["results"][0].get("doc").is_none());
}

/// couch_mrview_http.erl `parse_body_and_query` (chttpd_view.erl `design_doc_post_view`,
/// chttpd_db.erl `all_docs_view`): the body first, the query string on top. For
/// `/queries` each query object is parsed over the query string (it wins), with `keys`,
/// `group` and `group_level` reset.
#[test]
fn query_string_wins_over_a_post_body_and_query_objects_win_over_it() {
    let s = Server::start();
    abc(&s);
    let (st, v) = post(
        &s,
        &format!("{MAP}?limit=1"),
        json!({"limit": 3, "descending": true}),
    );
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"total_rows": 3, "offset": 0, "rows": [map_row("c", 3)]})
    );
    let (st, v) = post(
        &s,
        &format!("{MAP}?keys=[\"b\",\"a\"]"),
        json!({"keys": ["a", "c"]}),
    );
    assert_eq!(st, 200);
    assert_eq!(field(&v, "id"), vec![json!("b"), json!("a")]);
    // One key in the query string's `keys` is a `key`, beside the body's list: refused.
    let (st, v) = post(
        &s,
        &format!("{MAP}?keys=[\"b\"]"),
        json!({"keys": ["a", "c"]}),
    );
    assert_eq!(st, 400);
    assert_eq!(
        v["reason"],
        "`keys` is incompatible with `key`, `start_key` and `end_key`"
    );
    let (st, v) = post(
        &s,
        "/db/_all_docs?skip=2",
        json!({"skip": 0, "keys": ["a", "b", "c"]}),
    );
    assert_eq!(st, 200);
    assert_eq!(field(&v, "id"), vec![json!("c")]);
    // Any parameter may come in the body (t_view_with_key_non_existent_docs).
    let (st, v) = post(&s, MAP, json!({"key": "not_exist"}));
    assert_eq!(
        (st, v),
        (200, json!({"total_rows": 3, "offset": 3, "rows": []}))
    );
    let (st, v) = post(
        &s,
        &format!("{MAP}/queries?limit=1&keys=[\"a\",\"b\"]"),
        json!({"queries": [{}, {"limit": 3}, {"keys": ["c"]}]}),
    );
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"results": [
            {"total_rows": 3, "offset": 0, "rows": [map_row("a", 1)]},
            {"total_rows": 3, "offset": 0, "rows": [map_row("a", 1), map_row("b", 2), map_row("c", 3)]},
            {"total_rows": 3, "offset": 2, "rows": [map_row("c", 3)]}
        ]})
    );
    let (st, v) = post(
        &s,
        &format!("{RED}/queries?group=true"),
        json!({"queries": [{}, {"group_level": 0}]}),
    );
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"results": [
            {"rows": [{"key": null, "value": 6}]},
            {"rows": [{"key": null, "value": 6}]}
        ]})
    );
    let (st, v) = post(
        &s,
        "/db/_all_docs/queries?limit=1",
        json!({"queries": [{}, {"limit": 2, "skip": 1}]}),
    );
    assert_eq!(st, 200);
    assert_eq!(field(&v["results"][0], "id"), vec![json!("_design/ddoc")]);
    assert_eq!(field(&v["results"][1], "id"), vec![json!("a"), json!("b")]);
}

/// couch_mrview_http.erl `parse_param`: `start_key_doc_id` / `end_key_doc_id` are the
/// aliases of `startkey_docid` / `endkey_docid` (`start_key_docid` is not one).
/// couch_mrview_util.erl `all_docs_key_opts`: `_all_docs` uses the doc-id bound when the
/// key bound is missing or not a string.
#[test]
fn doc_id_aliases_on_views_and_all_docs() {
    let s = Server::start();
    s.create_db("db");
    let docs: Vec<Value> = (1..=5)
        .map(|i| json!({"_id": format!("d{i}"), "k": "same"}))
        .collect();
    bulk(&s, "db", json!({ "docs": docs }));
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {"v": {"map": "function(doc) { emit(doc.k, null); }"}}}),
    );
    let v = "/db/_design/t/_view/v";
    for (q, want) in [
        (
            "key=\"same\"&start_key_doc_id=d2&end_key_doc_id=d4",
            vec!["d2", "d3", "d4"],
        ),
        (
            "key=\"same\"&startkey_docid=d2&endkey_docid=d3",
            vec!["d2", "d3"],
        ),
        (
            "startkey=\"same\"&start_key_doc_id=d4&descending=true",
            vec!["d4", "d3", "d2", "d1"],
        ),
        (
            "key=\"same\"&start_key_docid=d4&end_key_docid=d1",
            vec!["d1", "d2", "d3", "d4", "d5"],
        ),
    ] {
        let (st, body) = get(&s, &format!("{v}?{q}"));
        assert_eq!(st, 200, "{q}: {body}");
        assert_eq!(
            field(&body, "id"),
            want.iter().map(|i| json!(i)).collect::<Vec<_>>(),
            "{q}"
        );
    }
    for (q, want) in [
        ("start_key_doc_id=d4", vec!["d4", "d5"]),
        ("startkey_docid=d2&end_key_doc_id=d3", vec!["d2", "d3"]),
        // The doc id bound goes with a key that bounds nothing (as CouchDB 3.5.2 answers).
        (
            "startkey=[1]&startkey_docid=d5",
            vec!["_design/t", "d1", "d2", "d3", "d4", "d5"],
        ),
        // A key that is not a string ends the range before every id.
        ("endkey=2&end_key_doc_id=d1&inclusive_end=false", vec![]),
    ] {
        let (st, body) = get(&s, &format!("/db/_all_docs?{q}"));
        assert_eq!(st, 200, "{q}: {body}");
        assert_eq!(
            field(&body, "id"),
            want.iter().map(|i| json!(i)).collect::<Vec<Value>>(),
            "{q}"
        );
    }
}

/// `_all_docs`, `_design_docs` and `_local_docs` with `key`, `startkey`/`start_key`,
/// `endkey`/`end_key` (couch_db.erl `fold_design_docs` clamps the range to the
/// namespace; fabric_view_all_docs.erl `offset` = documents before the start + skip, at
/// most `total_rows`; chttpd_view_test.erl `t_all_docs_with_key_and_start_key`).
#[test]
fn all_docs_family_key_ranges() {
    let s = Server::start();
    s.create_db("db");
    bulk(
        &s,
        "db",
        json!({"docs": [
            {"_id": "A"}, {"_id": "B"}, {"_id": "_design/x"}, {"_id": "_design/y"},
            {"_id": "_design/z"}, {"_id": "a"}, {"_id": "b"}
        ]}),
    );
    for id in ["l1", "l2", "l3"] {
        assert_eq!(s.put(&format!("/db/_local/{id}"), "{}").status, 201);
    }
    let ids = |q: &str| -> (Value, Value, Vec<Value>) {
        let (st, v) = get(&s, q);
        assert_eq!(st, 200, "{q}: {v}");
        (
            v["total_rows"].clone(),
            v["offset"].clone(),
            field(&v, "id"),
        )
    };
    let d = |xs: &[&str]| -> Vec<Value> { xs.iter().map(|x| json!(x)).collect() };
    assert_eq!(
        ids("/db/_design_docs?key=\"_design/y\""),
        (json!(3), json!(3), d(&["_design/y"]))
    );
    assert_eq!(
        ids("/db/_design_docs?startkey=\"_design/y\""),
        (json!(3), json!(3), d(&["_design/y", "_design/z"]))
    );
    assert_eq!(
        ids("/db/_design_docs?start_key=\"_design/y\"&end_key=\"_design/y\""),
        (json!(3), json!(3), d(&["_design/y"]))
    );
    assert_eq!(
        ids("/db/_design_docs?endkey=\"_design/y\"&inclusive_end=false"),
        (json!(3), json!(2), d(&["_design/x"]))
    );
    // The whole id space counts towards the offset, capped at the design doc count.
    assert_eq!(
        ids("/db/_design_docs?descending=true&startkey=\"_design/y\""),
        (json!(3), json!(3), d(&["_design/y", "_design/x"]))
    );
    assert_eq!(
        ids("/db/_design_docs?key=\"a\""),
        (json!(3), json!(3), d(&[]))
    );
    assert_eq!(
        ids("/db/_local_docs?startkey=\"_local/l2\""),
        (Value::Null, Value::Null, d(&["_local/l2", "_local/l3"]))
    );
    assert_eq!(
        ids("/db/_local_docs?key=\"_local/l1\""),
        (Value::Null, Value::Null, d(&["_local/l1"]))
    );
    assert_eq!(
        ids("/db/_local_docs?end_key=\"_local/l2\"&descending=true"),
        (Value::Null, Value::Null, d(&["_local/l3", "_local/l2"]))
    );
    // A key that is not a string sorts before every id (CouchDB 3.5.2's cluster): as the
    // upper end it leaves no row, as the lower end it bounds nothing.
    assert_eq!(ids("/db/_all_docs?key=5").2.len(), 0);
    assert_eq!(ids("/db/_all_docs?startkey=[1]&limit=1").2, d(&["A"]));
    assert_eq!(
        ids("/db/_all_docs?key=\"a\"&startkey=\"b\""),
        (json!(7), json!(6), d(&[]))
    );
    assert_eq!(
        ids("/db/_all_docs?startkey=\"b\"&key=\"a\""),
        (json!(7), json!(5), d(&["a"]))
    );
    assert_eq!(
        ids("/db/_all_docs?startkey=\"a\"&skip=5"),
        (json!(7), json!(7), d(&[]))
    );
}

/// couch_mrview_updater.erl `insert_results` sorts a document's emits and stores equal
/// keys' values together, and couch_mrview_util.erl `expand_dups` returns them in that
/// (Erlang term) order whatever the direction: numbers < atoms < objects < arrays <
/// strings (view_sandboxing_test.exs, COUCHDB-925: object before array).
#[test]
fn rows_of_one_document_under_one_key_come_by_value() {
    let s = Server::start();
    s.create_db("db");
    bulk(&s, "db", json!({"docs": [{"_id": "a"}, {"_id": "b"}]}));
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {"v": {"map":
            "function(doc) { emit(1, 'z'); emit(1, [1]); emit(1, {x: 1}); emit(1, null); emit(1, 10); emit(1, 2); emit(0, doc._id); }"
        }}}),
    );
    let by_value = vec![
        json!(2),
        json!(10),
        json!(null),
        json!({"x": 1}),
        json!([1]),
        json!("z"),
    ];
    let (st, v) = get(&s, "/db/_design/t/_view/v?key=1");
    assert_eq!(st, 200);
    assert_eq!(
        field(&v, "id"),
        [vec![json!("a"); 6], vec![json!("b"); 6]].concat()
    );
    assert_eq!(
        field(&v, "value"),
        [by_value.clone(), by_value.clone()].concat()
    );
    let (_, v) = get(&s, "/db/_design/t/_view/v?key=1&descending=true");
    assert_eq!(
        field(&v, "id"),
        [vec![json!("b"); 6], vec![json!("a"); 6]].concat()
    );
    assert_eq!(
        field(&v, "value"),
        [by_value.clone(), by_value.clone()].concat()
    );
    // Skipping into the middle of one document's rows, descending.
    let (_, v) = get(
        &s,
        "/db/_design/t/_view/v?key=1&descending=true&skip=2&limit=5",
    );
    assert_eq!(
        v,
        json!({"total_rows": 14, "offset": 2, "rows": [
            {"id": "b", "key": 1, "value": null},
            {"id": "b", "key": 1, "value": {"x": 1}},
            {"id": "b", "key": 1, "value": [1]},
            {"id": "b", "key": 1, "value": "z"},
            {"id": "a", "key": 1, "value": 2}
        ]})
    );
}

/// fabric_view_map.erl: `offset` = the shard's offset (rank of its first row) + `skip`,
/// at most `total_rows`; rows of several keys come in the keys' order, from the last key
/// when descending (`merge_row` with the key dictionary). view_multi_key_design_test.exs,
/// chttpd_view_test.erl `t_view_with_queries_limit_skip`.
#[test]
fn several_keys_with_skip_limit_offset_and_descending() {
    let s = Server::start();
    s.create_db("db");
    let docs: Vec<Value> = (0..6)
        .map(|i| json!({"_id": format!("d{i}"), "k": i % 3}))
        .collect();
    bulk(&s, "db", json!({ "docs": docs }));
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {
            "v": {"map": "function(doc) { emit(doc.k, null); }"},
            "r": {"map": "function(doc) { emit(doc.k, 1); }", "reduce": "_count"}
        }}),
    );
    let rows = |q: &str| -> (u16, Value) { get(&s, &format!("/db/_design/t/_view/v?{q}")) };
    let pairs = |v: &Value| -> Vec<(Value, Value)> {
        field(v, "key").into_iter().zip(field(v, "id")).collect()
    };
    let (st, v) = rows("keys=[2,0]");
    assert_eq!(st, 200);
    assert_eq!(v["offset"], 4);
    assert_eq!(
        pairs(&v),
        vec![
            (json!(2), json!("d2")),
            (json!(2), json!("d5")),
            (json!(0), json!("d0")),
            (json!(0), json!("d3"))
        ]
    );
    let (_, v) = rows("keys=[2,0]&skip=1&limit=2");
    assert_eq!(v["offset"], 5);
    assert_eq!(
        pairs(&v),
        vec![(json!(2), json!("d5")), (json!(0), json!("d0"))]
    );
    let (_, v) = rows("keys=[2,0]&descending=true");
    assert_eq!(v["offset"], 4);
    assert_eq!(
        pairs(&v),
        vec![
            (json!(0), json!("d3")),
            (json!(0), json!("d0")),
            (json!(2), json!("d5")),
            (json!(2), json!("d2"))
        ]
    );
    let (_, v) = rows("keys=[7,9]");
    assert_eq!(v, json!({"total_rows": 6, "offset": 6, "rows": []}));
    let (_, v) = rows("keys=[-1,9]&skip=2");
    assert_eq!(v, json!({"total_rows": 6, "offset": 6, "rows": []}));
    let (_, v) = rows("keys=[]");
    assert_eq!(v, json!({"total_rows": 6, "offset": 0, "rows": []}));
    let (_, v) = rows("key=1.5");
    assert_eq!(v, json!({"total_rows": 6, "offset": 4, "rows": []}));
    let (_, v) = rows("skip=100");
    assert_eq!(v, json!({"total_rows": 6, "offset": 6, "rows": []}));
    // Reduce: the keys' order, not reversed; a repeated key once.
    let (st, v) = get(
        &s,
        "/db/_design/t/_view/r?keys=[2,0,2]&group=true&descending=true",
    );
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"rows": [{"key": 2, "value": 2}, {"key": 0, "value": 2}]})
    );
}

/// chttpd_view_test.erl (3.x): a single key in `keys` is queried as `key`; parameters
/// apply in order.
#[test]
fn a_single_key_in_keys_is_a_key_and_parameters_apply_in_order() {
    let s = Server::start();
    abc(&s);
    let no_rows = parse_error(
        "No rows can match your key range, reverse your start_key and end_key or set descending=true",
    );
    let keys_and_range =
        parse_error("`keys` is incompatible with `key`, `start_key` and `end_key`");
    for (path, status, body) in [
        (
            format!("{MAP}?key=\"a\"&startkey=\"b\""),
            400,
            no_rows.clone(),
        ),
        (
            format!("{MAP}?startkey=\"b\"&key=\"a\""),
            200,
            json!({"total_rows": 3, "offset": 0, "rows": [map_row("a", 1)]}),
        ),
        (
            format!("{MAP}?key=\"a\"&endkey=\"b\""),
            200,
            json!({"total_rows": 3, "offset": 0, "rows": [map_row("a", 1), map_row("b", 2)]}),
        ),
        (format!("{MAP}?keys=[\"a\"]&startkey=\"b\""), 400, no_rows),
        (
            format!("{MAP}?keys=[\"a\",\"b\"]&start_key=\"b\""),
            400,
            keys_and_range.clone(),
        ),
        (
            "/db/_all_docs?keys=[\"a\"]&startkey=\"b\"".into(),
            400,
            keys_and_range,
        ),
        (
            format!("{MAP}?keys=[\"d\"]"),
            200,
            json!({"total_rows": 3, "offset": 3, "rows": []}),
        ),
        (
            format!("{RED}?keys=[\"a\"]"),
            200,
            json!({"rows": [{"key": null, "value": 1}]}),
        ),
        (
            format!("{RED}?keys=[\"a\"]&group=true"),
            200,
            json!({"rows": [{"key": "a", "value": 1}]}),
        ),
        (
            format!("{RED}?keys=[\"a\",\"b\"]"),
            400,
            parse_error("Multi-key fetches for reduce views must use `group=true`"),
        ),
        (
            format!("{RED}?keys=[\"a\",\"b\"]&group=true"),
            200,
            json!({"rows": [{"key": "a", "value": 1}, {"key": "b", "value": 2}]}),
        ),
        (
            "/db/_all_docs?keys=[\"not_exist\",\"d\"]".into(),
            200,
            json!({"total_rows": 4, "offset": null, "rows": [
                {"key": "not_exist", "error": "not_found"},
                {"id": "d", "key": "d", "value": {"rev": "1-x", "deleted": true}}
            ]}),
        ),
    ] {
        let (st, mut v) = get(&s, &path);
        if let Some(rev) = v.pointer_mut("/rows/1/value/rev") {
            assert!(rev.as_str().unwrap().starts_with("1-"), "{path}: {rev}");
            *rev = json!("1-x");
        }
        assert_eq!((st, &v), (status, &body), "{path}");
    }
}

/// couch_mrview_util.erl `maybe_load_doc`/`docid_rev` and fabric_view.erl
/// `possibly_embed_doc`: `{"_id"}` values link another document (fetched without the
/// query's options), `{"_rev"}` alone picks the row's own revision, deleted documents
/// are `null`; own documents get `_conflicts` and inline attachments when asked.
/// view_include_docs_test.exs.
#[test]
fn include_docs_links_revisions_conflicts_and_attachments() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put(
        "/db/target",
        &json!({"n": 1, "_attachments": {"a.txt": {"content_type": "text/plain", "data": "aGVsbG8="}}})
            .to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let rev1 = r.json()["rev"].as_str().unwrap().to_owned();
    let r = s.put(
        "/db/target",
        &json!({"_rev": rev1, "n": 2, "_attachments": {"a.txt": {"stub": true}}}).to_string(),
    );
    let rev2 = r.json()["rev"].as_str().unwrap().to_owned();
    bulk(
        &s,
        "db",
        json!({"new_edits": false, "docs": [{"_id": "target", "_rev": "2-0000", "n": 0}]}),
    );
    bulk(
        &s,
        "db",
        json!({"docs": [
            {"_id": "l1", "link": {"_id": "target"}},
            {"_id": "l2", "link": {"_id": "target", "_rev": rev1}},
            {"_id": "l3", "link": {"_rev": "1-nope"}},
            {"_id": "l4", "link": {"_id": null}},
            {"_id": "l5", "link": {"_id": "gone"}},
            {"_id": "gone"}
        ]}),
    );
    let gone = s.get("/db/gone").json()["_rev"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(s.delete(&format!("/db/gone?rev={gone}")).status, 200);
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {
            "links": {"map": "function(doc) { if (doc.link) emit(doc._id, doc.link); }"},
            "own": {"map": "function(doc) { if (doc._id === 'target') { emit(1, null); emit(2, {_rev: doc._rev}); emit(3, {_rev: '1-nope'}); } }"}
        }}),
    );
    let digest = s.get("/db/target").json()["_attachments"]["a.txt"]["digest"].clone();
    let stub = json!({"a.txt": {"content_type": "text/plain", "revpos": 1, "digest": digest, "length": 5, "stub": true}});
    let inline = json!({"a.txt": {"content_type": "text/plain", "revpos": 1, "digest": digest, "data": "aGVsbG8="}});
    let (st, v) = get(
        &s,
        "/db/_design/t/_view/links?include_docs=true&conflicts=true&attachments=true",
    );
    assert_eq!(st, 200, "{v}");
    let docs = field(&v, "doc");
    assert_eq!(
        docs[0],
        json!({"_id": "target", "_rev": rev2, "n": 2, "_attachments": stub}),
        "linked documents get no options"
    );
    assert_eq!(
        docs[1],
        json!({"_id": "target", "_rev": rev1, "n": 1, "_attachments": stub})
    );
    assert_eq!(
        docs[2],
        Value::Null,
        "l3's own revision 1-nope does not exist"
    );
    assert_eq!(docs[3], Value::Null);
    assert_eq!(docs[4], Value::Null, "a deleted document");
    let (st, v) = get(
        &s,
        "/db/_design/t/_view/own?include_docs=true&conflicts=true&attachments=true",
    );
    assert_eq!(st, 200, "{v}");
    // A value that names no document: the row's own, with its conflicts.
    assert_eq!(
        v["rows"][0],
        json!({"id": "target", "key": 1, "value": null, "doc":
            {"_id": "target", "_rev": rev2, "n": 2, "_conflicts": ["2-0000"], "_attachments": inline}})
    );
    // {_rev} picks the row's own document at that revision, without conflicts.
    assert_eq!(
        v["rows"][1]["doc"],
        json!({"_id": "target", "_rev": rev2, "n": 2, "_attachments": inline})
    );
    assert_eq!(v["rows"][2]["doc"], Value::Null);
}

/// couch_mrview_util.erl `validate_args` and couch_mrview_http.erl `parse_param`, with
/// their texts; invalid JSON parameters are `bad_request` (view_errors_test.exs).
#[test]
fn invalid_parameters_get_couchdb_errors() {
    let s = Server::start();
    abc(&s);
    for (q, status, body) in [
        (format!("{MAP}?group_level=1"), 400, parse_error("Invalid use of grouping on a map view.")),
        (format!("{MAP}?group=true"), 400, parse_error("Invalid use of grouping on a map view.")),
        (format!("{RED}?group=true&reduce=false"), 400, parse_error("Invalid use of grouping on a map view.")),
        (format!("{MAP}?reduce=true"), 400, parse_error("Reduce is invalid for map-only views.")),
        (format!("{MAP}?keys=[1,2]&key=1"), 400, parse_error("`keys` is incompatible with `key`, `start_key` and `end_key`")),
        (format!("{MAP}?keys=5"), 400, parse_error("`keys` must be an array of strings.")),
        (format!("{RED}?include_docs=true"), 400, parse_error("`include_docs` is invalid for reduce")),
        (format!("{RED}?conflicts=false"), 400, parse_error("`conflicts` is invalid for reduce views.")),
        (format!("{RED}?group=false&group_level=2"), 400, parse_error("Can't specify group=false and group_level>0 at the same time")),
        (format!("{MAP}?update=maybe"), 400, parse_error("Invalid value for `update`.")),
        (format!("{MAP}?stale=false"), 400, parse_error("Invalid value for `stale`.")),
        (format!("{MAP}?stable=yes"), 400, parse_error("Invalid value for `stable`.")),
        (format!("{MAP}?limit=-1"), 400, parse_error("Invalid value for positive integer: \"-1\"")),
        (format!("{MAP}?skip=x"), 400, parse_error("Invalid value for integer: \"x\"")),
        (format!("{RED}?group_level=1.5"), 400, parse_error("Invalid value for integer: \"1.5\"")),
        (format!("{MAP}?startkey=\"c\"&endkey=\"a\""), 400, parse_error("No rows can match your key range, reverse your start_key and end_key or set descending=true")),
        (format!("{MAP}?startkey=\"a\"&endkey=\"c\"&descending=true"), 400, parse_error("No rows can match your key range, reverse your start_key and end_key or set descending=false")),
        (format!("{MAP}?key=\"a\"&startkey_docid=z&endkey_docid=a"), 200, json!({"total_rows": 3, "offset": 1, "rows": []})),
        (format!("{MAP}?startkey=foo"), 400, bad_request("invalid UTF-8 JSON")),
        (format!("{MAP}?partition=p"), 400, parse_error("`partition` parameter is not supported in this design doc")),
        ("/db/_all_docs?reduce=true".into(), 400, parse_error("Reduce is invalid for map-only views.")),
        ("/db/_all_docs?group=true".into(), 400, parse_error("Invalid use of grouping on a map view.")),
        ("/db/_all_docs?startkey=foo".into(), 400, bad_request("invalid UTF-8 JSON")),
        ("/db/_all_docs?keys=5".into(), 400, bad_request("`keys` parameter must be an array.")),
        ("/db/_design/ddoc/_view/nope".into(), 404, json!({"error": "not_found", "reason": "missing_named_view"})),
    ] {
        let (st, v) = get(&s, &q);
        assert_eq!((st, &v), (status, &body), "{q}");
    }
}

/// chttpd_view.erl / chttpd_db.erl / couch_mrview_util.erl `get_view_keys`: POST bodies.
#[test]
fn invalid_post_bodies_get_couchdb_errors() {
    let s = Server::start();
    abc(&s);
    for (path, body, want) in [
        (
            MAP.to_string(),
            "[]",
            bad_request("Request body must be a JSON object"),
        ),
        (
            MAP.into(),
            r#"{"keys": 1}"#,
            bad_request("`keys` member must be an array."),
        ),
        (
            MAP.into(),
            r#"{"queries": [{}]}"#,
            bad_request("The `queries` parameter is no longer supported at this endpoint"),
        ),
        (
            format!("{MAP}/queries"),
            "{}",
            bad_request("POST body must include `queries` parameter."),
        ),
        (
            format!("{MAP}/queries"),
            r#"{"queries": 1}"#,
            bad_request("`queries` member must be an array."),
        ),
        (
            "/db/_all_docs".into(),
            r#"{"keys": "a"}"#,
            bad_request("`keys` body member must be an array."),
        ),
        (
            "/db/_all_docs".into(),
            "[]",
            bad_request("Request body must be a JSON object"),
        ),
        (
            "/db/_all_docs/queries".into(),
            "{}",
            bad_request("POST body must include `queries` parameter."),
        ),
        (
            MAP.into(),
            r#"{"keys": ["a"], "descending": "maybe"}"#,
            parse_error("Invalid boolean parameter: \"maybe\""),
        ),
        (
            MAP.into(),
            r#"{"limit": "5"}"#,
            parse_error("Invalid value for integer: <<\"5\">>"),
        ),
    ] {
        let r = s.post(&uri(&path), body);
        assert_eq!((r.status, r.json()), (400, want), "{path} {body}");
    }
}

/// chttpd_view.erl `handle_temp_view_req` (view_errors_test.exs).
#[test]
fn temp_views_are_gone() {
    let s = Server::start();
    s.create_db("db");
    let gone = json!({"error": "gone", "reason": "Temporary views are not supported in CouchDB"});
    let r = s.post(
        "/db/_temp_view",
        r#"{"map": "function(doc) { emit(doc.integer) }"}"#,
    );
    assert_eq!((r.status, r.json()), (410, gone.clone()));
    let r = s.get("/db/_temp_view");
    assert_eq!((r.status, r.json()), (410, gone));
}

/// share/server/views.js `runReduce`: a throwing reduce gives `null`; output that does not
/// shrink is `reduce_overflow_error`, which fabric_view.erl `transform_row` shows as an
/// error row (view_errors_test.exs "reduce overflow error"); `reduce_limit = log` only
/// logs it, `false` turns the check off.
#[test]
fn reduce_errors_and_reduce_limit() {
    let s = Server::start();
    s.create_db("db");
    bulk(&s, "db", json!({"docs": [{"integer": 1}, {"integer": 2}]}));
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {
            "big": {"map": "function(doc) { emit(doc.integer, doc.integer); }",
                    "reduce": "function(k, v) { var c = []; for (var i = 0; i < 1000; i++) { c.push('wazzap'); } return c; }"},
            "throws": {"map": "function(doc) { emit(doc.integer, doc.integer); }",
                       "reduce": "function(k, v, re) { if (!re) throw new Error('boom'); return v; }"},
            "fatal": {"map": "function(doc) { emit(doc.integer, 1); }",
                      "reduce": "function(k, v) { throw 'fatal_error'; }"}
        }}),
    );
    let (st, v) = get(&s, "/db/_design/t/_view/big");
    assert_eq!(st, 200);
    let reason = v["rows"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.starts_with("Reduce output must shrink more rapidly: input size: ")
            && reason.ends_with(" output size: 9003"),
        "{v}"
    );
    assert_eq!(
        v,
        json!({"rows": [{"key": null, "error": "reduce_overflow_error", "reason": reason}]})
    );
    let (_, v) = get(&s, "/db/_design/t/_view/big?group=true");
    assert_eq!(v["rows"][1]["error"], "reduce_overflow_error");
    assert_eq!(v["rows"][1]["key"], Value::Null);
    let (st, v) = get(&s, "/db/_design/t/_view/throws?group=true");
    assert_eq!(
        (st, v),
        (
            200,
            json!({"rows": [{"key": 1, "value": null}, {"key": 2, "value": null}]})
        )
    );
    let (st, v) = get(&s, "/db/_design/t/_view/fatal");
    assert_eq!(
        (st, v),
        (
            500,
            json!({"error": "map_runtime_error", "reason": "function raised 'fatal_error'"})
        )
    );
    for (setting, overflow) in [("log", false), ("false", false), ("true", true)] {
        let r = s.put(
            "/_node/_local/_config/query_server_config/reduce_limit",
            &json!(setting).to_string(),
        );
        assert_eq!(r.status, 200, "{}", r.text);
        // A new index (the map differs), so the reductions are computed again.
        let name = format!("t_{setting}");
        put_ddoc(
            &s,
            "db",
            &name,
            json!({"views": {"big": {"map": format!("function(doc) {{ emit(doc.integer, '{setting}'); }}"),
                "reduce": "function(k, v) { var c = []; for (var i = 0; i < 1000; i++) { c.push('wazzap'); } return c; }"}}}),
        );
        let (st, v) = get(&s, &format!("/db/_design/{name}/_view/big"));
        assert_eq!(st, 200);
        if overflow {
            assert_eq!(v["rows"][0]["error"], "reduce_overflow_error", "{setting}");
        } else {
            assert_eq!(
                v["rows"][0]["value"].as_array().map(Vec::len),
                Some(1000),
                "{setting}"
            );
        }
    }
}

/// couch_index_updater.erl opens documents for map functions with `conflicts` and
/// `deleted_conflicts`; couch_doc.erl renders meta members after the body and attachment
/// stubs last.
#[test]
fn map_functions_see_attachment_stubs_and_conflicts() {
    let s = Server::start();
    s.create_db("db");
    bulk(
        &s,
        "db",
        json!({"new_edits": false, "docs": [
            {"_id": "x", "_rev": "1-b", "v": "winner",
             "_attachments": {"a.txt": {"content_type": "text/plain", "data": "aGVsbG8="}}},
            {"_id": "x", "_rev": "1-a", "v": "loser"},
            {"_id": "x", "_rev": "1-c", "_deleted": true}
        ]}),
    );
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {"v": {"map":
            "function(doc) { emit(Object.keys(doc), [doc._attachments, doc._conflicts, doc._deleted_conflicts]); }"
        }}}),
    );
    let (st, v) = get(&s, "/db/_design/t/_view/v");
    assert_eq!(st, 200);
    let digest = s.get("/db/x").json()["_attachments"]["a.txt"]["digest"].clone();
    assert_eq!(
        v["rows"][0],
        json!({"id": "x",
        "key": ["_id", "_rev", "v", "_conflicts", "_deleted_conflicts", "_attachments"],
        "value": [
            // A replicated write's attachment sent without `revpos` keeps 0, as
            // CouchDB 3.5.2 stores it.
            {"a.txt": {"content_type": "text/plain", "revpos": 0,
                       "digest": digest, "length": 5, "stub": true}},
            ["1-a"],
            ["1-c"]
        ]})
    );
}

/// couchjs refuses runtime code evaluation unless started with `-e`
/// (view_sandboxing_test.exs "runtime code evaluation can be prevented").
#[test]
fn runtime_code_evaluation_is_refused() {
    let s = Server::start();
    s.create_db("db");
    bulk(&s, "db", json!({"docs": [{"_id": "1", "integer": 1}]}));
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {
            "ctor": {"map": "function(doc) { var glob = emit.constructor('return this')(); emit(doc._id, null); }"},
            "eval": {"map": "function(doc) { emit(eval('1 + 1'), null); }"},
            "caught": {"map": "function(doc) { try { new Function('return 1'); } catch (e) { emit(e.name, e.message); } }"}
        }}),
    );
    for view in ["ctor", "eval"] {
        let (st, v) = get(&s, &format!("/db/_design/t/_view/{view}"));
        assert_eq!(
            (st, v),
            (200, json!({"total_rows": 0, "offset": 0, "rows": []})),
            "{view}"
        );
    }
    let (_, v) = get(&s, "/db/_design/t/_view/caught");
    assert_eq!(
        v["rows"],
        json!([{"id": "1", "key": "EvalError", "value": "call to Function() blocked by CSP"}])
    );
}

/// share/server/util.js: `module.id` is the path from the design document root; a
/// circular require gets the module's empty placeholder; failures are CouchDB's error
/// arrays (design_docs_test.exs, "module id values are as expected" and "circular
/// commonjs dependencies", here from `views.lib`).
#[test]
fn commonjs_ids_circular_requires_and_errors() {
    let s = Server::start();
    s.create_db("db");
    bulk(&s, "db", json!({"docs": [{"_id": "1"}]}));
    let lib = json!({
        "idtest1": {"a": {"b": {"d": "module.exports = require('../c/e').id;"}, "c": {"e": "exports.id = module.id;"}}},
        "idtest2": {"a": {"b": {"d": "module.exports = require('../../a/c/e').id;"}, "c": {"e": "exports.id = module.id;"}}},
        "idtest3": {"a": {"b": "module.exports = require('./c/d').id;", "c": {"d": "module.exports = require('./e');", "e": "exports.id = module.id;"}}},
        "idtest5": {"a": "module.exports = require('views/lib/idtest5/b').id;", "b": "exports.id = module.id;"},
        "circular_one": "var two = require('./circular_two'); exports.name = 'One'; exports.seen = two.seen;",
        "circular_two": "var one = require('./circular_one'); exports.name = 'Two'; exports.seen = JSON.stringify(one);",
        "broken": "exports.x = ;",
        "number": 5
    });
    let map = "function(doc) {
        var out = [];
        ['idtest1/a/b/d', 'idtest2/a/b/d', 'idtest3/a/b', 'idtest5/a'].forEach(function (p) {
            out.push(require('views/lib/' + p));
        });
        var c = require('views/lib/circular_one');
        out.push([c.name, c.seen]);
        ['views/lib/nope', 'views/lib/number', 'views/lib/broken', 'views/lib/broken'].forEach(function (p) {
            try { out.push(require(p)); } catch (e) { out.push([e[0], e[1], String(e[2]).split(' raised error ')[0]]); }
        });
        emit(null, out);
    }";
    put_ddoc(
        &s,
        "db",
        "t",
        json!({"views": {"lib": lib, "v": {"map": map}}}),
    );
    let (st, v) = get(&s, "/db/_design/t/_view/v");
    assert_eq!(st, 200, "{v}");
    let lib_json = v["rows"][0]["value"].clone();
    assert_eq!(
        lib_json,
        json!([
            "views/lib/idtest1/a/c/e",
            "views/lib/idtest2/a/c/e",
            "views/lib/idtest3/a/c/e",
            "views/lib/idtest5/b",
            ["One", "{}"],
            [
                "error",
                "invalid_require_path",
                format!("Object has no property \"nope\". {}", lib_text(&s))
            ],
            [
                "error",
                "invalid_require_path",
                "Must require a JavaScript string, not: number"
            ],
            [
                "error",
                "compilation_error",
                "Module require('views/lib/broken')"
            ],
            {}
        ])
    );
}

/// `views.lib` as JavaScript's `JSON.stringify` shows it (member order as stored).
fn lib_text(s: &Server) -> String {
    let ddoc = s.get("/db/_design/t").json();
    serde_json::to_string(&ddoc["views"]["lib"]).unwrap()
}
