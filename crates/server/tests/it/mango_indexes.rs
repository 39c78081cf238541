//! Mango json indexes (`"language": "query"` design documents) as view indexes over real
//! HTTP: the rows CouchDB's native query server emits (mango_native_proc), `_count`,
//! incremental updates, and JavaScript and unknown languages beside them.

use crate::common;
use common::Server;
use serde_json::{json, Value};

fn bulk(s: &Server, db: &str, docs: Value) -> Value {
    let r = s.post(
        &format!("/{db}/_bulk_docs"),
        &json!({ "docs": docs }).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()
}

/// (id, key) of every row; values must all be null.
fn rows(v: &Value) -> Vec<(String, Value)> {
    v["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows in {v}"))
        .iter()
        .map(|r| {
            assert_eq!(r["value"], Value::Null, "{r}");
            (r["id"].as_str().unwrap().to_owned(), r["key"].clone())
        })
        .collect()
}

fn row(id: &str, key: Value) -> (String, Value) {
    (id.to_owned(), key)
}

/// A Mango index design document as CouchDB's `_index` writes one.
fn index_ddoc() -> Value {
    json!({
        "_id": "_design/a5f4711fc9448864a13c81dc71e660b524d7410c",
        "language": "query",
        "views": {
            "foo-json-index": {
                "map": {
                    "fields": {"foo": "asc", "bar.baz": "asc"},
                    "partial_filter_selector": {"year": {"$gt": 2000}}
                },
                "reduce": "_count",
                "options": {"def": {"fields": ["foo", "bar.baz"]}}
            },
            "by-year": {
                "map": {"fields": {"year": "desc"}, "partial_filter_selector": {}},
                "reduce": "_count",
                "options": {"def": {"fields": [{"year": "desc"}]}}
            }
        }
    })
}

const VIEW: &str = "/db/_design/a5f4711fc9448864a13c81dc71e660b524d7410c/_view";

fn setup(s: &Server) {
    s.create_db("db");
    bulk(
        s,
        "db",
        json!([
            {"_id": "a", "foo": "x", "bar": {"baz": 2}, "year": 2010},
            {"_id": "b", "foo": "x", "bar": {"baz": 1}, "year": 2020},
            {"_id": "c", "foo": 1, "bar": {"baz": null}, "year": 2001},
            {"_id": "d", "foo": "y", "bar": {"baz": 3}, "year": 1999},
            {"_id": "e", "foo": "z", "year": 2015},
            {"_id": "f", "foo": "z", "bar": "scalar", "year": 2015},
            {"_id": "g", "bar": {"baz": [1, 2]}, "year": 2015},
            {"_id": "h", "foo": {"k": 1}, "bar": {"baz": [1, 2]}, "year": 2005},
            {"_id": "i", "foo": "w", "bar": {"baz": 0}}
        ]),
    );
    let r = s.put(
        &format!("/db/{}", index_ddoc()["_id"].as_str().unwrap()),
        &index_ddoc().to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
}

#[test]
fn json_index_rows_are_the_fields_values_of_matching_docs_with_every_field() {
    let s = Server::start();
    setup(&s);
    let r = s.get(&format!("{VIEW}/foo-json-index?reduce=false"));
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["total_rows"], 4);
    assert_eq!(body["offset"], 0);
    // view collation: numbers < strings < objects; null is a present value; d is
    // filtered out (1999), e lacks bar.baz, f's path goes through a scalar, g lacks foo,
    // i lacks year (so fails the partial filter)
    assert_eq!(
        rows(&body),
        [
            row("c", json!([1, null])),
            row("b", json!(["x", 1])),
            row("a", json!(["x", 2])),
            row("h", json!([{"k": 1}, [1, 2]])),
        ]
    );
    // key ranges over the array keys
    let r = s.get(&format!(
        "{VIEW}/foo-json-index?reduce=false&startkey=%5B%22x%22%5D&endkey=%5B%22x%22%2C%7B%7D%5D"
    ));
    assert_eq!(
        rows(&r.json()),
        [row("b", json!(["x", 1])), row("a", json!(["x", 2]))]
    );
    // the empty partial filter indexes every document with the field
    let r = s.get(&format!("{VIEW}/by-year?reduce=false&descending=true"));
    let years: Vec<String> = rows(&r.json()).into_iter().map(|(id, _)| id).collect();
    assert_eq!(years, ["b", "g", "f", "e", "a", "h", "c", "d"]);
}

#[test]
fn count_reduce_and_info() {
    let s = Server::start();
    setup(&s);
    let r = s.get(&format!("{VIEW}/foo-json-index?reduce=true"));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"rows": [{"key": null, "value": 4}]}));
    let r = s.get(&format!("{VIEW}/foo-json-index?group_level=1"));
    assert_eq!(
        r.json()["rows"],
        json!([
            {"key": [1], "value": 1},
            {"key": ["x"], "value": 2},
            {"key": [{"k": 1}], "value": 1}
        ])
    );
    let info = s
        .get("/db/_design/a5f4711fc9448864a13c81dc71e660b524d7410c/_info")
        .json();
    assert_eq!(info["view_index"]["language"], "query");
}

#[test]
fn incremental_updates_follow_edits_and_deletes() {
    let s = Server::start();
    setup(&s);
    let view = format!("{VIEW}/foo-json-index?reduce=false");
    assert_eq!(rows(&s.get(&view).json()).len(), 4);
    let rev = |id: &str| s.get(&format!("/db/{id}")).json()["_rev"].clone();
    let a = rev("a");
    let c = rev("c");
    let d = rev("d");
    let e = rev("e");
    bulk(
        &s,
        "db",
        json!([
            // a leaves the partial filter, d enters it, e gains its missing field
            {"_id": "a", "_rev": a, "foo": "x", "bar": {"baz": 2}, "year": 1990},
            {"_id": "d", "_rev": d, "foo": "y", "bar": {"baz": 3}, "year": 2022},
            {"_id": "e", "_rev": e, "foo": "z", "bar": {"baz": "q"}, "year": 2015},
            {"_id": "c", "_rev": c, "_deleted": true},
            {"_id": "n", "foo": "a", "bar": {"baz": true}, "year": 2024}
        ]),
    );
    assert_eq!(
        rows(&s.get(&view).json()),
        [
            row("n", json!(["a", true])),
            row("b", json!(["x", 1])),
            row("d", json!(["y", 3])),
            row("e", json!(["z", "q"])),
            row("h", json!([{"k": 1}, [1, 2]])),
        ]
    );
    let count = s.get(&format!("{VIEW}/foo-json-index")).json();
    assert_eq!(count["rows"][0]["value"], 5);
    // a document losing an indexed field loses its row
    let b = rev("b");
    bulk(
        &s,
        "db",
        json!([{"_id": "b", "_rev": b, "foo": "x", "year": 2020}]),
    );
    assert_eq!(
        rows(&s.get(&view).json())
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>(),
        ["n", "d", "e", "h"]
    );
}

#[test]
fn design_documents_are_not_indexed_even_with_include_design() {
    let s = Server::start();
    s.create_db("db");
    let ddoc = json!({
        "language": "query",
        "options": {"include_design": true},
        "views": {"ids": {"map": {"fields": {"_id": "asc", "views": "asc"}}, "reduce": "_count"}}
    });
    assert_eq!(s.put("/db/_design/m", &ddoc.to_string()).status, 201);
    bulk(&s, "db", json!([{"_id": "x", "views": 1}, {"_id": "y"}]));
    let r = s.get("/db/_design/m/_view/ids?reduce=false");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(rows(&r.json()), [row("x", json!(["x", 1]))]);
}

#[test]
fn javascript_beside_mango_and_unknown_languages_unchanged() {
    let s = Server::start();
    setup(&s);
    let js =
        json!({"views": {"foo": {"map": "function(doc) { if (doc.foo) emit(doc.foo, null); }"}}});
    assert_eq!(s.put("/db/_design/js", &js.to_string()).status, 201);
    let r = s.get("/db/_design/js/_view/foo").json();
    assert_eq!(r["total_rows"], 8);
    assert_eq!(r["rows"][0], json!({"id": "c", "key": 1, "value": null}));
    let erl = r#"{"language": "erlang", "views": {"v": {"map": "fun({Doc}) -> ok end."}}}"#;
    assert_eq!(s.put("/db/_design/erl", erl).status, 201);
    let r = s.get("/db/_design/erl/_view/v");
    assert_eq!(r.status, 500, "{}", r.text);
    let body = r.json();
    assert_eq!(
        body,
        json!({"error": "unknown_query_language", "reason": "erlang", "ref": body["ref"]})
    );
}

#[test]
fn unusable_index_definitions_fail_the_query_not_the_save() {
    let s = Server::start();
    s.create_db("db");
    bulk(&s, "db", json!([{"_id": "x", "a": 1}]));
    // CouchDB stores any object map of a `query` design document; its native query
    // server then crashes on the first document (a 500 of Erlang terms), where Settee
    // names the design document's fault
    let ddoc = json!({"language": "query", "views": {"i": {"map": {"fields": ["a"]}}}});
    assert_eq!(s.put("/db/_design/m", &ddoc.to_string()).status, 201);
    let r = s.get("/db/_design/m/_view/i");
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"], "invalid_design_doc");
    // and the map must be an object
    let ddoc = json!({"language": "query", "views": {"i": {"map": "function(doc){}"}}});
    let r = s.put("/db/_design/m2", &ddoc.to_string());
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"error": "invalid_design_doc", "reason": "`views.i.map` field must have object type"})
    );
}
