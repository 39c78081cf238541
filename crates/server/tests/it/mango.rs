//! Mango over HTTP: `_find`, `_explain`, `_index` and selector filters, with CouchDB 3.5's
//! exact answers.

use crate::common;
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
        // The scan passes the index's design document too, which CouchDB counts.
        (Some(11), Some(11))
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
        // 11 documents examined (the design document too) for 1 result: past CouchDB's
        // ratio of 10, so its third warning too.
        "_design/ages was not used because it does not contain a valid index for this query.\nNo matching index found, create an index to optimize query time.\nThe number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this."
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

/// A small deterministic generator (the test must not depend on a random seed to pass).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn random_condition(g: &mut Lcg) -> Value {
    let field = *g.pick(&["a", "b", "c"]);
    let value = |g: &mut Lcg| match field {
        "b" => json!(*g.pick(&["x", "y", "z", "X"])),
        _ => json!(g.below(10)),
    };
    let cond = match g.below(8) {
        0 => json!({"$eq": value(g)}),
        1 => json!({"$gt": value(g)}),
        2 => json!({"$gte": value(g)}),
        3 => json!({"$lt": value(g)}),
        4 => json!({"$lte": value(g)}),
        5 => json!({"$in": [value(g), value(g)]}),
        6 => json!({"$ne": value(g)}),
        _ => json!({"$exists": g.below(2) == 0}),
    };
    json!({field: cond})
}

/// Index-backed answers are exactly the full-scan answers, in the index's order, for
/// random selectors, sorts, limits and skips; bookmarks page through them exactly.
#[test]
fn index_answers_equal_full_scans() {
    use settee_mango::Selector;
    let s = Server::start();
    s.create_db("db");
    let mut g = Lcg(42);
    let docs: Vec<Value> = (0..300)
        .map(|i| {
            let mut d = json!({"_id": format!("d{:03}", (i * 7919) % 300)});
            if g.below(10) > 0 {
                d["a"] = json!(g.below(10));
            }
            if g.below(10) > 0 {
                d["b"] = json!(*g.pick(&["x", "y", "z", "X"]));
            }
            d["c"] = json!(g.below(10));
            d
        })
        .collect();
    bulk(&s, "db", Value::Array(docs));
    let r = s.post(
        "/db/_index",
        r#"{"index": {"fields": ["a", "b"]}, "ddoc": "ab", "name": "ab"}"#,
    );
    assert_eq!(r.status, 200);
    let stored: Vec<Value> = s.get("/db/_all_docs?include_docs=true").json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["doc"].clone())
        .filter(|d| !d["_id"].as_str().unwrap().starts_with("_design/"))
        .collect();
    let key = |d: &Value| json!([d["a"], d["b"]]);
    let mut indexed_runs = 0;
    for round in 0..80 {
        let n = 1 + g.below(3);
        let mut conds: Vec<Value> = (0..n).map(|_| random_condition(&mut g)).collect();
        // Most rounds pin both index fields so that the index can answer.
        if round % 4 != 0 {
            conds.push(json!({"a": {"$gte": g.below(5)}}));
            conds.push(json!({"b": {"$exists": true}}));
        }
        let selector = json!({"$and": conds});
        let sort = match g.below(4) {
            0 => json!([]),
            1 => json!([{"a": "asc"}]),
            2 => json!([{"a": "desc"}, {"b": "desc"}]),
            _ => json!(["a", "b"]),
        };
        let (limit, skip) = (1 + g.below(40), g.below(4));
        let body = json!({"selector": selector, "sort": sort, "limit": limit, "skip": skip});
        let explained = s.post("/db/_explain", &body.to_string()).json();
        let r = find(&s, "db", body.clone());
        if explained["index"].is_null() {
            assert_eq!(r.status, 400, "{body}: {}", r.text);
            continue;
        }
        assert_eq!(r.status, 200, "{body}: {}", r.text);
        let sel = Selector::parse(&selector).unwrap();
        let mut want: Vec<&Value> = stored.iter().filter(|d| sel.matches(d)).collect();
        let by_index = explained["index"]["name"] == "ab";
        let descending = explained["mrargs"]["direction"] == "rev";
        if by_index {
            indexed_runs += 1;
            // An index holds only documents with all its fields: with a sort on them (which
            // exempts them from the selector's existence rule), the others drop out, as in
            // CouchDB.
            want.retain(|d| d.get("a").is_some() && d.get("b").is_some());
            want.sort_by(|x, y| {
                settee_core::collate::compare(&key(x), &key(y))
                    .then_with(|| x["_id"].as_str().cmp(&y["_id"].as_str()))
            });
        }
        if descending {
            want.reverse();
        }
        let want: Vec<String> = want
            .iter()
            .skip(skip as usize)
            .take(limit as usize)
            .map(|d| d["_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids(&r), want, "{body} by {}", explained["index"]["name"]);

        // Paging by bookmark (no skip) returns every match once, in order.
        let mut all = Vec::new();
        let mut bookmark = Value::Null;
        loop {
            let page = find(
                &s,
                "db",
                json!({"selector": selector, "sort": sort, "limit": 7, "bookmark": bookmark}),
            );
            let got = ids(&page);
            if got.is_empty() {
                break;
            }
            all.extend(got);
            bookmark = page.json()["bookmark"].clone();
        }
        let every = find(
            &s,
            "db",
            json!({"selector": selector, "sort": sort, "limit": 1000}),
        );
        assert_eq!(all, ids(&every), "paging {body}");
    }
    assert!(
        indexed_runs > 30,
        "the index answered only {indexed_runs} rounds"
    );
}

/// Every operator of CouchDB 3.5, over HTTP.
#[test]
fn every_operator() {
    let s = Server::start();
    people(&s);
    bulk(
        &s,
        "db",
        json!([{"_id": "q", "m": {"k1": 1, "k2": 2}, "s": "Warsaw", "arr": [1, 2, 3], "n": 7, "$odd": true}]),
    );
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({"age": {"$eq": 21}}), vec!["p1"]),
        (json!({"age": {"$ne": 21, "$lt": 23}}), vec!["p0", "p2"]),
        (json!({"age": {"$gt": 27}}), vec!["p8", "p9"]),
        (json!({"age": {"$gte": 28, "$lte": 28}}), vec!["p8"]),
        (json!({"n": {"$exists": true}}), vec!["q"]),
        (
            json!({"n": {"$type": "number"}, "s": {"$type": "string"}}),
            vec!["q"],
        ),
        (json!({"age": {"$in": [20, 29, 99]}}), vec!["p0", "p9"]),
        (
            json!({"team": "red", "age": {"$nin": [20, 22, 24]}}),
            vec!["p6", "p8"],
        ),
        (json!({"arr": {"$size": 3}}), vec!["q"]),
        (json!({"n": {"$mod": [4, 3]}}), vec!["q"]),
        (json!({"s": {"$regex": "^W.rs"}}), vec!["q"]),
        (json!({"arr": {"$all": [3, 1]}}), vec!["q"]),
        (json!({"arr": {"$elemMatch": {"$gt": 2}}}), vec!["q"]),
        (json!({"arr": {"$allMatch": {"$gt": 0}}}), vec!["q"]),
        (json!({"m": {"$keyMapMatch": {"$eq": "k2"}}}), vec!["q"]),
        (json!({"s": {"$beginsWith": "War"}}), vec!["q"]),
        (
            json!({"$and": [{"team": "blue"}, {"age": {"$lt": 24}}]}),
            vec!["p1", "p3"],
        ),
        (
            json!({"$or": [{"age": 20}, {"s": "Warsaw"}]}),
            vec!["p0", "q"],
        ),
        // Negated conditions need the field: q has no team, the people no n.
        (
            json!({"$nor": [{"team": "blue"}, {"age": {"$gt": 22}}]}),
            vec!["p0", "p2"],
        ),
        (json!({"$nor": [{"team": "blue"}, {"n": 7}]}), vec![]),
        (json!({"age": {"$not": {"$gt": 21}}}), vec!["p0", "p1"]),
        (json!({"\\$odd": true}), vec!["q"]),
    ];
    for (selector, want) in cases {
        let r = find(&s, "db", json!({"selector": selector}));
        assert_eq!(ids(&r), want, "{selector}");
    }
    for (op, arg) in [("$where", json!("x")), ("$near", json!(1))] {
        let r = find(&s, "db", json!({"selector": {"a": {op: arg}}}));
        assert_eq!(
            sj(&r),
            err(400, "not_supported", &format!("Unsupported operator: {op}"))
        );
    }
}

#[test]
fn indexed_answers_follow_edits_and_deletes() {
    let s = Server::start();
    people(&s);
    s.post(
        "/db/_index",
        r#"{"index": {"fields": ["age"]}, "ddoc": "a", "name": "a"}"#,
    );
    let q = json!({"selector": {"age": {"$gte": 28}}, "fields": ["_id", "age"]});
    assert_eq!(ids(&find(&s, "db", q.clone())), ["p8", "p9"]);
    let p1 = s.get("/db/p1").json();
    let mut edited = p1.clone();
    edited["age"] = json!(40);
    assert_eq!(s.put("/db/p1", &edited.to_string()).status, 201);
    let rev9 = s.get("/db/p9").json()["_rev"].as_str().unwrap().to_string();
    assert_eq!(s.delete(&format!("/db/p9?rev={rev9}")).status, 200);
    let r = find(&s, "db", q);
    assert_eq!(
        r.json()["docs"],
        json!([{"_id": "p8", "age": 28}, {"_id": "p1", "age": 40}])
    );
    assert!(r.json().get("warning").is_none());
}

/// `_changes?filter=_view` naming a Mango index: the changes of documents it has rows for.
#[test]
fn changes_filtered_by_a_json_index_view() {
    let s = Server::start();
    people(&s);
    bulk(&s, "db", json!([{"_id": "no-age", "team": "red"}]));
    let r = s.post(
        "/db/_index",
        r#"{"index": {"fields": ["age"], "partial_filter_selector": {"team": "red"}}, "ddoc": "i", "name": "reds"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s.get("/db/_changes?filter=_view&view=i/reds");
    assert_eq!(r.status, 200, "{}", r.text);
    let mut got: Vec<String> = r.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    assert_eq!(got, ["p0", "p2", "p4", "p6", "p8"]);
}
