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

fn find(s: &Server, db: &str, q: Value) -> Resp {
    s.post(&format!("/{db}/_find"), &q.to_string())
}

fn ids(r: &Resp) -> Vec<String> {
    r.json()["docs"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r.text))
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_string())
        .collect()
}

/// Ten people and a design document.
fn people(s: &Server) {
    s.create_db("db");
    let docs: Vec<Value> = (0..10)
        .map(|i| {
            json!({"_id": format!("p{i}"), "name": format!("n{}", 9 - i), "age": 20 + i,
                   "team": if i % 2 == 0 { "red" } else { "blue" }, "tags": [format!("t{}", i % 3)]})
        })
        .collect();
    bulk(s, "db", Value::Array(docs));
    assert_eq!(s.put("/db/_design/x", r#"{"views":{}}"#).status, 201);
}

#[test]
fn find_without_an_index_scans_all_docs() {
    let s = Server::start();
    people(&s);
    let r = find(
        &s,
        "db",
        json!({"selector": {"team": "red", "age": {"$gte": 24}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(ids(&r), ["p4", "p6", "p8"]);
    // CouchDB's framing, byte for byte.
    assert!(
        r.text
            .starts_with("{\"docs\":[\r\n{\"_id\":\"p4\",\"_rev\":"),
        "{}",
        r.text
    );
    assert!(r.text.contains("}\r\n],\r\n\"bookmark\": \""), "{}", r.text);
    assert!(r.text.ends_with(
        ",\r\n\"warning\": \"No matching index found, create an index to optimize query time.\"}\r\n"
    ));

    // fields, limit, skip, _id ranges and sorting on _id.
    let r = find(
        &s,
        "db",
        json!({"selector": {"_id": {"$gt": "p2"}}, "fields": ["name", "_id"], "limit": 2, "skip": 1, "sort": [{"_id": "desc"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["docs"],
        json!([{"name": "n1", "_id": "p8"}, {"name": "n2", "_id": "p7"}])
    );
    assert_eq!(
        sj(&find(&s, "db", json!({"selector": {}, "sort": ["_id"]}))),
        err(
            400,
            "no_usable_index",
            "No index exists for this sort, try indexing by the sort fields."
        )
    );

    // Execution statistics count every row read, the design document included.
    let r = find(
        &s,
        "db",
        json!({"selector": {"tags": {"$elemMatch": {"$eq": "t0"}}}, "execution_stats": true}),
    );
    let stats = &r.json()["execution_stats"];
    assert_eq!(ids(&r), ["p0", "p3", "p6", "p9"]);
    assert_eq!(
        (
            stats["total_keys_examined"].as_u64(),
            stats["total_docs_examined"].as_u64()
        ),
        (Some(11), Some(10))
    );
    assert_eq!(stats["results_returned"], 4);
    let keys: Vec<&String> = stats.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "total_keys_examined",
            "total_docs_examined",
            "total_quorum_docs_examined",
            "results_returned",
            "execution_time_ms"
        ]
    );

    // Nothing matches: the bookmark is "nil"; a contradictory _id range reads nothing.
    let r = find(&s, "db", json!({"selector": {"age": 99}}));
    assert_eq!(r.json()["bookmark"], "nil");
    let r = find(
        &s,
        "db",
        json!({"selector": {"_id": {"$gt": "p5", "$lt": "p1"}}}),
    );
    assert_eq!(r.text, "{\"docs\":[\r\n]}\r\n");
}

#[test]
fn bookmarks_page_through_results() {
    let s = Server::start();
    people(&s);
    let mut seen = Vec::new();
    let mut bookmark = Value::Null;
    for _ in 0..5 {
        let r = find(
            &s,
            "db",
            json!({"selector": {"age": {"$gt": 0}}, "limit": 3, "bookmark": bookmark}),
        );
        assert_eq!(r.status, 200, "{}", r.text);
        let page = ids(&r);
        if page.is_empty() {
            break;
        }
        seen.extend(page);
        bookmark = r.json()["bookmark"].clone();
    }
    assert_eq!(seen, (0..10).map(|i| format!("p{i}")).collect::<Vec<_>>());
    assert_eq!(
        sj(&find(&s, "db", json!({"selector": {}, "bookmark": "nil"}))),
        err(400, "invalid_bookmark", "Invalid bookmark value: \"nil\"")
    );
}

#[test]
fn bad_requests_get_mangos_errors() {
    let s = Server::start();
    people(&s);
    let cases = [
        (
            json!({}),
            err(
                400,
                "missing_required_key",
                "Missing required key: selector",
            ),
        ),
        (
            json!({"selector": []}),
            err(
                400,
                "invalid_selector_json",
                "Selector must be a JSON object, not: []",
            ),
        ),
        (
            json!({"selector": {}, "limit": -1}),
            err(
                400,
                "invalid_non_neg_integer",
                "-1 is not an integer greater than or equal to zero",
            ),
        ),
        (
            json!({"selector": {}, "skip": "1"}),
            err(
                400,
                "invalid_non_neg_integer",
                "<<\"1\">> is not an integer greater than or equal to zero",
            ),
        ),
        (
            json!({"selector": {}, "r": 0}),
            err(
                400,
                "invalid_pos_integer",
                "0 is not an integer greater than zero",
            ),
        ),
        (
            json!({"selector": {}, "conflicts": "yes"}),
            err(400, "invalid_boolean", "Invalid boolean value: <<\"yes\">>"),
        ),
        (
            json!({"selector": {}, "use_index": "a/b/c"}),
            err(
                400,
                "invalid_index_name",
                "Invalid index name: <<\"a/b/c\">>",
            ),
        ),
        (
            json!({"selector": {}, "foo": 1}),
            err(400, "invalid_key", "Invalid key foo for this request."),
        ),
        (
            json!({"selector": {}, "sort": {"a": "asc"}}),
            err(
                400,
                "invalid_sort_json",
                "Sort must be an array of sort specs, not: {[{<<\"a\">>,<<\"asc\">>}]}",
            ),
        ),
        (
            json!({"selector": {}, "sort": [{"a": "up"}]}),
            err(
                400,
                "invalid_sort_field",
                "Invalid sort field: {[{<<\"a\">>,<<\"up\">>}]}",
            ),
        ),
        (
            json!({"selector": {}, "sort": ["a", {"b": "desc"}]}),
            err(
                400,
                "unsupported_mixed_sort",
                "Sorts currently only support a single direction for all fields.",
            ),
        ),
        (
            json!({"selector": {}, "fields": "a"}),
            err(
                400,
                "invalid_fields",
                "Fields must be an array of strings, not: <<\"a\">>",
            ),
        ),
        (
            json!({"selector": {"a": {"$in": 1}}}),
            err(400, "bad_arg", "Bad argument for operator $in: 1"),
        ),
        (
            json!({"selector": {"$gt": 1}}),
            err(
                400,
                "invalid_selector",
                "One or more conditions is missing a field name.",
            ),
        ),
    ];
    for (q, want) in cases {
        assert_eq!(sj(&find(&s, "db", q.clone())), want, "{q}");
    }
    let r = s.req_with(
        "POST",
        "/db/_find",
        Some("{}"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(
        sj(&r),
        err(
            415,
            "bad_content_type",
            "Content-Type must be application/json"
        )
    );
    assert_eq!(
        sj(&s.post("/db/_find", "[]")),
        err(400, "bad_request", "Request body must be a JSON object")
    );
    let r = s.get("/db/_find");
    assert_eq!(sj(&r), err(405, "method_not_allowed", "Only POST allowed"));
    assert_eq!(r.header("allow"), Some("POST"));
    assert_eq!(
        sj(&s.put("/db/_index", "{}")),
        err(405, "method_not_allowed", "Only GET,POST allowed")
    );
    assert_eq!(
        sj(&s.get("/db/_index/foo")),
        err(404, "not_found", "missing")
    );
    assert_eq!(sj(&s.post("/nodb/_find", r#"{"selector":{}}"#)).0, 404);
}

#[test]
fn json_indexes_are_created_listed_used_and_deleted() {
    let s = Server::start();
    people(&s);
    let r = s.post(
        "/db/_index",
        r#"{"index": {"fields": ["age"]}, "name": "by-age", "ddoc": "ages"}"#,
    );
    assert_eq!(
        sj(&r),
        (
            200,
            json!({"result": "created", "id": "_design/ages", "name": "by-age"})
        )
    );
    let r = s.post(
        "/db/_index",
        r#"{"index": {"fields": ["age"]}, "name": "by-age", "ddoc": "ages"}"#,
    );
    assert_eq!(r.json()["result"], "exists");
    // Stored as CouchDB stores it: a design document in the query language.
    let d = s.get("/db/_design/ages").json();
    assert_eq!(d["language"], "query");
    assert_eq!(
        d["views"]["by-age"],
        json!({"map": {"fields": {"age": "asc"}, "partial_filter_selector": {}}, "reduce": "_count", "options": {"def": {"fields": ["age"]}}})
    );
    let auto = s
        .post(
            "/db/_index",
            r#"{"index": {"fields": [{"team": "desc"}, {"age": "desc"}]}}"#,
        )
        .json();
    assert_eq!(auto["result"], "created");
    assert_eq!(
        auto["id"].as_str().unwrap(),
        format!("_design/{}", auto["name"].as_str().unwrap())
    );

    let list = s.get("/db/_index").json();
    assert_eq!(list["total_rows"], 3);
    assert_eq!(list["indexes"][0]["name"], "_all_docs");
    assert_eq!(
        list["indexes"][2],
        json!({"ddoc": "_design/ages", "name": "by-age", "type": "json", "partitioned": false, "def": {"fields": [{"age": "asc"}]}})
    );
    assert_eq!(
        s.get("/db/_index?limit=1&skip=1").json()["indexes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        sj(&s.get("/db/_index?limit=0")),
        err(
            500,
            "invalid_list_index_params",
            "Index parameter ranges: limit > 1, skip > 0"
        )
    );

    // The age index answers a range and a sort; no warning.
    let r = find(
        &s,
        "db",
        json!({"selector": {"age": {"$gte": 27}}, "sort": [{"age": "desc"}], "fields": ["_id", "age"], "execution_stats": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["docs"],
        json!([{"_id": "p9", "age": 29}, {"_id": "p8", "age": 28}, {"_id": "p7", "age": 27}])
    );
    assert!(r.json().get("warning").is_none(), "{}", r.text);
    assert_eq!(r.json()["execution_stats"]["total_keys_examined"], 3);
    // The two-field index can sort by team then age when team is pinned.
    let r = find(
        &s,
        "db",
        json!({"selector": {"team": "blue", "age": {"$gt": 22}}, "sort": [{"team": "desc"}, {"age": "desc"}]}),
    );
    assert_eq!(ids(&r), ["p9", "p7", "p5", "p3"]);
    let ex = s
        .post(
            "/db/_explain",
            r#"{"selector": {"age": {"$gt": 25}}, "fields": ["age", "name"]}"#,
        )
        .json();
    assert_eq!(ex["index"]["name"], "by-age");
    assert_eq!(ex["covering"], false, "{ex}");
    assert_eq!(ex["mrargs"]["include_docs"], true);
    assert_eq!(ex["mrargs"]["start_key"], json!([25]));
    assert_eq!(ex["mrargs"]["end_key"], json!(["<MAX>"]));
    let keys: Vec<&String> = ex.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "dbname",
            "index",
            "partitioned",
            "selector",
            "opts",
            "limit",
            "skip",
            "fields",
            "index_candidates",
            "selector_hints",
            "mrargs",
            "covering"
        ]
    );
    // Covering: only indexed fields and _id are asked for.
    let r = find(
        &s,
        "db",
        json!({"selector": {"age": {"$gt": 27}}, "fields": ["_id", "age"], "execution_stats": true}),
    );
    assert_eq!(
        r.json()["docs"],
        json!([{"_id": "p8", "age": 28}, {"_id": "p9", "age": 29}])
    );
    assert_eq!(r.json()["execution_stats"]["total_docs_examined"], 0);

    // use_index naming an index that cannot answer: a warning, and _all_docs.
    let r = find(
        &s,
        "db",
        json!({"selector": {"name": "n0"}, "use_index": "ages"}),
    );
    assert_eq!(ids(&r), ["p9"]);
    assert_eq!(
        r.json()["warning"],
        "_design/ages was not used because it does not contain a valid index for this query.\nNo matching index found, create an index to optimize query time."
    );

    // Deleting.
    assert_eq!(
        sj(&s.delete("/db/_index/ages/json/nope")),
        err(404, "not_found", "missing")
    );
    assert_eq!(
        sj(&s.delete("/db/_index/_design/ages/json/by-age")),
        (200, json!({"ok": true}))
    );
    assert_eq!(s.get("/db/_design/ages").status, 404);
    let name = auto["name"].as_str().unwrap();
    let r = s.post(
        "/db/_index/_bulk_delete",
        &json!({"docids": [name, "nope"]}).to_string(),
    );
    assert_eq!(
        sj(&r),
        (
            200,
            json!({"success": [{"id": format!("_design/{name}"), "ok": true}], "fail": [{"id": "_design/nope", "error": "not_found"}]})
        )
    );
    assert_eq!(s.get("/db/_index").json()["total_rows"], 1);

    // Bad index definitions.
    let cases = [
        (
            r#"{}"#,
            err(400, "missing_required_key", "Missing required key: index"),
        ),
        (
            r#"{"index": {"fields": ["a"]}, "type": "geo"}"#,
            err(400, "invalid_index", "Invalid type for index: geo"),
        ),
        (
            r#"{"index": {"fields": ["a"]}, "type": "text"}"#,
            err(503, "required index service unavailable", "text"),
        ),
        (
            r#"{"index": []}"#,
            err(
                400,
                "invalid_index",
                "JSON indexes must be an object, not: []",
            ),
        ),
        (
            r#"{"index": {"fields": ["a"]}, "name": 1}"#,
            err(400, "invalid_string", "Invalid string: 1"),
        ),
        (
            r#"{"index": {"fields": ["a"], "x": 1}}"#,
            err(400, "invalid_key", "Invalid key x for this request."),
        ),
    ];
    for (body, want) in cases {
        assert_eq!(sj(&s.post("/db/_index", body)), want, "{body}");
    }
    // A JavaScript design document is not Mango's.
    assert_eq!(
        sj(&s.post("/db/_index", r#"{"index": {"fields": ["a"]}, "ddoc": "x"}"#)),
        err(
            400,
            "invalid_ddoc_lang",
            "Existing design doc has an invalid language: false"
        )
    );
}

#[test]
fn partial_indexes_are_used_only_when_named() {
    let s = Server::start();
    people(&s);
    let r = s.post(
        "/db/_index",
        r#"{"index": {"fields": ["age"], "partial_filter_selector": {"team": "red"}}, "ddoc": "reds", "name": "reds"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let r = find(&s, "db", json!({"selector": {"age": {"$gt": 0}}}));
    assert_eq!(ids(&r).len(), 10, "not used unless named");
    let r = find(
        &s,
        "db",
        json!({"selector": {"age": {"$gt": 0}}, "use_index": "reds"}),
    );
    assert_eq!(ids(&r), ["p0", "p2", "p4", "p6", "p8"]);
    assert!(r.json().get("warning").is_none());
}
