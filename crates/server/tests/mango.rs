//! Mango over HTTP: `_find`, `_explain`, `_index` and selector filters, with CouchDB 3.5's
//! exact answers.

mod common;
use common::{Resp, Server};
use serde_json::{json, Value};

fn sj(r: &Resp) -> (u16, Value) {
    (r.status, r.json())
}

fn err(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

fn bulk(s: &Server, db: &str, docs: Value) {
    let r = s.post(
        &format!("/{db}/_bulk_docs"),
        &json!({"docs": docs}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
}

#[test]
fn changes_filtered_by_a_selector() {
    let s = Server::start();
    s.create_db("db");
    bulk(
        &s,
        "db",
        json!([
            {"_id": "a", "type": "user", "age": 30},
            {"_id": "b", "type": "user", "age": 17},
            {"_id": "c", "type": "post"},
        ]),
    );
    let r = s.post(
        "/db/_changes?filter=_selector",
        r#"{"selector": {"type": "user", "age": {"$gte": 18}}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    let ids: Vec<String> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["a"]);
    assert_eq!(
        body["last_seq"].as_str().unwrap().split('-').next(),
        Some("3")
    );

    // A deletion is a document `{"_id", "_rev", "_deleted": true}` to the selector.
    let rev = s.get("/db/b").json()["_rev"].as_str().unwrap().to_string();
    s.delete(&format!("/db/b?rev={rev}"));
    let r = s.post(
        "/db/_changes?filter=_selector",
        r#"{"selector": {"_deleted": true}}"#,
    );
    let rows = r.json()["results"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["id"].as_str(), rows[0]["deleted"].as_bool()),
        (Some("b"), Some(true))
    );

    // style=all_docs lists the leaves that pass; the winner alone otherwise.
    let new_edits = json!({"new_edits": false, "docs": [
        {"_id": "a", "_rev": "1-0000", "type": "user", "age": 5}]});
    assert_eq!(s.post("/db/_bulk_docs", &new_edits.to_string()).status, 201);
    let r = s.post(
        "/db/_changes?filter=_selector&style=all_docs",
        r#"{"selector": {"age": {"$lt": 10}}}"#,
    );
    let rows = r.json()["results"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["changes"], json!([{"rev": "1-0000"}]));
    let r = s.post(
        "/db/_changes?filter=_selector",
        r#"{"selector": {"age": {"$lt": 10}}}"#,
    );
    assert_eq!(
        r.json()["results"],
        json!([]),
        "the winner is the age-30 revision"
    );

    // Bad selectors get Mango's errors; a selector needs a POST.
    assert_eq!(
        sj(&s.post(
            "/db/_changes?filter=_selector",
            r#"{"selector": {"a": {"$in": 1}}}"#
        )),
        err(400, "bad_arg", "Bad argument for operator $in: 1")
    );
    assert_eq!(
        sj(&s.get("/db/_changes?filter=_selector")),
        err(
            400,
            "bad_request",
            "Selector must be specified in POST payload"
        )
    );
}
