//! Fidelity, second round: CoffeeScript design documents, languages without a query
//! server, OPTIONS on design-function paths, a view's `_info`, Mango's `execution_stats`
//! and `POST /_index` validation — each as CouchDB 3.5.2 answers it (measured; see
//! `/work/notes/data-level.md` §4 and §5).

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

fn put_ddoc(s: &Server, db: &str, id: &str, ddoc: Value) -> common::Resp {
    s.put(&format!("/{db}/_design/{id}"), &ddoc.to_string())
}

/// Docs a(x,1) b(y,5) c(x,3).
fn three_docs(s: &Server, db: &str) {
    s.create_db(db);
    bulk(
        s,
        db,
        json!([
            {"_id": "a", "k": "x", "v": 1},
            {"_id": "b", "k": "y", "v": 5},
            {"_id": "c", "k": "x", "v": 3},
        ]),
    );
}

// ---------------------------------------------------------------------------------------
// 1. CoffeeScript

fn coffee_ddoc() -> Value {
    json!({
        "language": "coffeescript",
        "views": {"v": {
            "map": "(doc) ->\n  emit doc._id, doc.v if doc.k\n",
            "reduce": "(keys, values, rereduce) ->\n  sum values\n"
        }},
        "shows": {"s": "(doc, req) ->\n  'show:' + req.method + ':' + (if doc then doc._id else 'none')\n"},
        "lists": {"l": "(head, req) ->\n  send 'list:' + req.method\n  while row = getRow()\n    send ',' + row.key\n  return\n"},
        "updates": {"u": "(doc, req) ->\n  [null, 'upd:' + req.method]\n"},
        "filters": {"f": "(doc, req) ->\n  doc.k is 'x'\n"},
        "validate_doc_update": "(newDoc, oldDoc, userCtx) ->\n  throw {forbidden: 'no bad'} if newDoc.bad\n"
    })
}

#[test]
fn coffeescript_runs_every_function_kind() {
    let s = Server::start();
    three_docs(&s, "db");
    let r = put_ddoc(&s, "db", "d", coffee_ddoc());
    assert_eq!(r.status, 201, "{}", r.text);

    let r = s.get("/db/_design/d/_view/v");
    assert_eq!(r.json(), json!({"rows": [{"key": null, "value": 9}]}));
    let r = s.get("/db/_design/d/_view/v?reduce=false");
    assert_eq!(
        r.json()["rows"],
        json!([
            {"id": "a", "key": "a", "value": 1},
            {"id": "b", "key": "b", "value": 5},
            {"id": "c", "key": "c", "value": 3},
        ])
    );
    let r = s.get("/db/_design/d/_show/s/a");
    assert_eq!((r.status, r.text.as_str()), (200, "show:GET:a"));
    let r = s.get("/db/_design/d/_list/l/v?reduce=false");
    assert_eq!((r.status, r.text.as_str()), (200, "list:GET,a,b,c"));
    let r = s.post("/db/_design/d/_update/u", "");
    assert_eq!((r.status, r.text.as_str()), (200, "upd:POST"));
    let r = s.get("/db/_changes?filter=d/f");
    let ids: Vec<Value> = r.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(ids, [json!("a"), json!("c")]);
    let r = s.put("/db/bad", r#"{"bad": true}"#);
    assert_eq!(
        (r.status, r.json()),
        (403, json!({"error": "forbidden", "reason": "no bad"}))
    );
    // The language name is case-insensitive.
    let mut upper = coffee_ddoc();
    upper["language"] = json!("CoffeeScript");
    upper["views"]["v"]["map"] = json!("(doc) -> emit doc.v, null");
    assert_eq!(put_ddoc(&s, "db", "upper", upper).status, 201);
    let r = s.get("/db/_design/upper/_view/v?reduce=false");
    assert_eq!(r.json()["total_rows"], 3, "{}", r.text);
}

#[test]
fn coffeescript_compile_errors_read_as_couchdb_reports_them() {
    let s = Server::start();
    three_docs(&s, "db");
    let bad_map = json!({"language": "coffeescript", "views": {"v": {"map": "(doc) -> ]]] emit"}}});
    let r = put_ddoc(&s, "db", "bad", bad_map);
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "compilation_error", "reason": "Compilation of the map function in the 'v' view failed: [stdin]:1:10: error: unmatched ]\n(doc) -> ]]] emit\n         ^ ((doc) -> ]]] emit)"})
    );
    let js = json!({"language": "coffeescript", "views": {"v": {"map": "function(doc){ emit(doc._id, 1); }"}}});
    let r = put_ddoc(&s, "db", "bad", js);
    assert_eq!(
        r.json()["reason"],
        "Compilation of the map function in the 'v' view failed: [stdin]:1:1: error: reserved word 'function'\nfunction(doc){ emit(doc._id, 1); }\n^^^^^^^^ (function(doc){ emit(doc._id, 1); })"
    );
    let bad_reduce = json!({"language": "coffeescript", "views": {"v": {"map": "(doc) -> emit doc._id, 1", "reduce": "(k, v) -> ]]]"}}});
    let r = put_ddoc(&s, "db", "bad", bad_reduce);
    assert_eq!(
        r.json()["reason"],
        "Compilation of the reduce function in the 'v' view failed: [stdin]:1:11: error: unmatched ]\n(k, v) -> ]]]\n          ^ ((k, v) -> ]]])"
    );
    let not_fn = json!({"language": "coffeescript", "views": {"v": {"map": "x = 1"}}});
    let r = put_ddoc(&s, "db", "bad", not_fn);
    assert_eq!(
        r.json()["reason"],
        "Compilation of the map function in the 'v' view failed: Expression does not eval to a function. (x = 1)"
    );
    // Render functions compile when they run.
    let shows = json!({"language": "coffeescript", "shows": {"s": "(doc) -> ]]]"}, "updates": {"u": "(d, r) -> ]]]"}});
    assert_eq!(put_ddoc(&s, "db", "bad2", shows).status, 201);
    let r = s.get("/db/_design/bad2/_show/s");
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json(),
        json!({"error": "compilation_error", "reason": "[stdin]:1:10: error: unmatched ]\n(doc) -> ]]]\n         ^ ((doc) -> ]]])"})
    );
    let r = s.post("/db/_design/bad2/_update/u", "");
    assert_eq!(
        r.json(),
        json!({"error": "compilation_error", "reason": "[stdin]:1:11: error: unmatched ]\n(d, r) -> ]]]\n          ^ ((d, r) -> ]]])"})
    );
}

// ---------------------------------------------------------------------------------------
// 2. Languages without a query server

#[test]
fn unknown_languages_are_saved_unchecked_and_fail_queries_with_a_ref() {
    let s = Server::start();
    three_docs(&s, "db");
    // Not even the built-in reduce names are checked.
    let erl = json!({
        "language": "erlang",
        "views": {"v": {"map": "fun({Doc}) -> Emit(1, null) end.", "reduce": "_foo"}},
        "shows": {"s": "x"}, "lists": {"l": "x"}, "updates": {"u": "x"},
        "rewrites": [{"from": "x", "to": "_show/s"}]
    });
    assert_eq!(put_ddoc(&s, "db", "e", erl).status, 201);
    for (id, language) in [("f", "foo"), ("g", "")] {
        let ddoc = json!({"language": language, "views": {"v": {"map": "function(doc){emit(1,1)}", "reduce": "_count"}}});
        assert_eq!(put_ddoc(&s, "db", id, ddoc).status, 201);
        let r = s.get(&format!("/db/_design/{id}/_view/v"));
        assert_eq!(r.status, 500);
        let body = r.json();
        let hash = r.header("x-couch-stack-hash").expect("stack hash");
        assert_eq!(body["ref"].to_string(), hash);
        assert_eq!(
            body,
            json!({"error": "unknown_query_language", "reason": language, "ref": body["ref"]})
        );
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["error", "reason", "ref"]);
        // A query that does not update the index reads it (empty).
        let r = s.get(&format!("/db/_design/{id}/_view/v?update=false"));
        assert_eq!((r.status, r.json()), (200, json!({"rows": []})));
        let r = s.get(&format!("/db/_design/{id}/_info"));
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["view_index"]["language"], language);
        assert_eq!(r.json()["view_index"]["update_seq"], 0);
    }
    let r = s.get("/db/_design/f/_view/nope");
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "not_found", "reason": "missing_named_view"})
        )
    );
    // Design functions: 500 without a ref.
    let plain = json!({"error": "unknown_query_language", "reason": "erlang"});
    for path in ["_show/s", "_show/s/a", "_list/l/v", "_rewrite/x"] {
        let r = s.get(&format!("/db/_design/e/{path}"));
        assert_eq!((r.status, r.json()), (500, plain.clone()), "{path}");
        assert_eq!(r.header("x-couch-stack-hash"), None);
    }
    let r = s.post("/db/_design/e/_update/u", "");
    assert_eq!((r.status, r.json()), (500, plain.clone()));
    // A validate function nothing can run fails every write.
    s.create_db("vdu");
    let ddoc = json!({"language": "erlang", "validate_doc_update": "x"});
    assert_eq!(put_ddoc(&s, "vdu", "e", ddoc).status, 201);
    let r = s.put("/vdu/doc1", r#"{"a":1}"#);
    assert_eq!((r.status, r.json()), (500, plain));
    let r = s.post("/vdu/_bulk_docs", r#"{"docs":[{"_id":"x"}]}"#);
    assert_eq!(
        r.json(),
        json!([{"id": "x", "error": "unknown_query_language", "reason": "erlang"}])
    );
}

#[test]
fn language_names_are_case_insensitive_and_must_be_strings() {
    let s = Server::start();
    three_docs(&s, "db");
    for (id, language, key) in [("h", "JavaScript", 1), ("i", "javascript_quickjs", 2)] {
        let map = format!("function(doc){{emit({key},1)}}");
        let ddoc = json!({"language": language, "views": {"v": {"map": map}}});
        assert_eq!(put_ddoc(&s, "db", id, ddoc).status, 201);
        let r = s.get(&format!("/db/_design/{id}/_view/v"));
        assert_eq!(r.json()["total_rows"], 3, "{}", r.text);
        assert_eq!(r.json()["rows"][0]["key"], key);
        assert_eq!(
            s.get(&format!("/db/_design/{id}/_info")).json()["view_index"]["language"],
            language
        );
    }
    // JavaScript in any case is compiled on save.
    let bad = json!({"language": "JavaScript", "views": {"v": {"map": "function(doc){emit(1,1)"}}});
    let r = put_ddoc(&s, "db", "h2", bad);
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (400, json!("compilation_error"))
    );
    let wrong =
        json!({"error": "invalid_design_doc", "reason": "`language` field must have string type"});
    for language in [json!(5), json!(null)] {
        let ddoc = json!({"language": language, "views": {"v": {"map": "function(doc){}"}}});
        let r = put_ddoc(&s, "db", "j", ddoc);
        assert_eq!((r.status, r.json()), (400, wrong.clone()));
    }
    let r = put_ddoc(
        &s,
        "db",
        "k3",
        json!({"language": "foo", "views": {"v": {"reduce": "_count"}}}),
    );
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "invalid_design_doc", "reason": "View `v` must contain map function"})
        )
    );
    let r = put_ddoc(
        &s,
        "db",
        "k4",
        json!({"language": "foo", "views": {"v": {"map": 5}}}),
    );
    assert_eq!(
        r.json(),
        json!({"error": "invalid_design_doc", "reason": "`views.v.map` field must have string type"})
    );
}

// ---------------------------------------------------------------------------------------
// 3. OPTIONS on design-function paths

#[test]
fn options_runs_render_functions_and_is_refused_by_views() {
    let s = Server::start();
    three_docs(&s, "db");
    let ddoc = json!({
        "views": {"v": {"map": "function(doc){ emit(doc._id, 1); }"}},
        "shows": {"s": "function(doc, req){ return 'show:' + req.method; }"},
        "lists": {"l": "function(head, req){ send('list:' + req.method); }"},
        "updates": {"u": "function(doc, req){ return [null, 'upd:' + req.method]; }"},
        "rewrites": [{"from": "x", "to": "_show/s"}]
    });
    assert_eq!(put_ddoc(&s, "db", "d", ddoc).status, 201);
    let r = s.req("OPTIONS", "/db/_design/d/_view/v", None);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET,POST,HEAD"));
    assert_eq!(
        r.json(),
        json!({"error": "method_not_allowed", "reason": "Only GET,POST,HEAD allowed"})
    );
    let r = s.req("OPTIONS", "/db/_design/d/_info", None);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
    for path in ["_show/s", "_show/s/a", "_rewrite/x"] {
        let r = s.req("OPTIONS", &format!("/db/_design/d/{path}"), None);
        assert_eq!((r.status, r.text.as_str()), (200, "show:OPTIONS"), "{path}");
    }
    let r = s.req("OPTIONS", "/db/_design/d/_show/s", None);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.header("etag").is_some());
    let r = s.req("OPTIONS", "/db/_design/d/_list/l/v", None);
    assert_eq!((r.status, r.text.as_str()), (200, "list:OPTIONS"));
    let r = s.req("PUT", "/db/_design/d/_list/l/v", Some("{}"));
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,POST,HEAD")));
    let r = s.req("OPTIONS", "/db/_design/d/_update/u", None);
    assert_eq!((r.status, r.text.as_str()), (200, "upd:OPTIONS"));
    let r = s.req("DELETE", "/db/_design/d/_update/u", None);
    assert_eq!((r.status, r.text.as_str()), (200, "upd:DELETE"));
    let r = s.get("/db/_design/d/_update/u");
    assert_eq!(
        (r.status, r.json()),
        (
            405,
            json!({"error": "method_not_allowed", "reason": "Update functions do not allow GET"})
        )
    );
}

#[test]
fn missing_function_members_are_missing_json_keys() {
    let s = Server::start();
    three_docs(&s, "db");
    let ddoc = json!({
        "views": {"v": {"map": "function(doc){ emit(doc._id, 1); }"}},
        "shows": {"s": "function(doc, req){ return 's'; }"},
        "lists": {"l": "function(head, req){ send('l'); }"},
        "updates": {"u": "function(doc, req){ return [null, 'u']; }"}
    });
    assert_eq!(put_ddoc(&s, "db", "d", ddoc).status, 201);
    assert_eq!(
        put_ddoc(&s, "db", "empty", json!({"language": "javascript"})).status,
        201
    );
    let nf = |reason: &str| json!({"error": "not_found", "reason": reason});
    for method in ["GET", "POST", "OPTIONS"] {
        for (path, reason) in [
            ("d/_show/nope", "missing json key: nope"),
            ("d/_show/nope/a", "missing json key: nope"),
            ("d/_update/nope", "missing json key: nope"),
            ("empty/_show/s", "missing json key: shows"),
            ("empty/_show/s/a", "missing json key: shows"),
            ("empty/_update/u", "missing json key: updates"),
            ("empty/_update/u/a", "missing json key: updates"),
        ] {
            let r = s.req(method, &format!("/db/_design/{path}"), Some("{}"));
            assert_eq!((r.status, r.json()), (404, nf(reason)), "{method} {path}");
        }
    }
    for (path, reason) in [
        ("d/_list/nope/v", "missing json key: nope"),
        ("d/_list/l/nope", "missing_named_view"),
        ("empty/_list/l/v", "missing json key: lists"),
    ] {
        let r = s.get(&format!("/db/_design/{path}"));
        assert_eq!((r.status, r.json()), (404, nf(reason)), "{path}");
    }
    let r = s.get("/db/_design/empty/_rewrite/x");
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "rewrite_error", "reason": "Invalid path."})
        )
    );
}

// ---------------------------------------------------------------------------------------
// 4. A view's `_info`

#[test]
fn view_info_sizes_and_member_order() {
    let s = Server::start();
    s.create_db("db");
    let docs: Vec<Value> = (0..50)
        .map(|i| json!({"_id": format!("d{i:02}"), "v": i, "txt": format!("text number {i}")}))
        .collect();
    bulk(&s, "db", json!(docs));
    let ddoc = json!({"views": {"v": {"map": "function(doc){ emit(doc.v, doc.txt); }"}}});
    assert_eq!(put_ddoc(&s, "db", "d2", ddoc).status, 201);
    let before = s.get("/db/_design/d2/_info").json();
    let vi = &before["view_index"];
    let keys: Vec<&String> = vi.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "updates_pending",
            "waiting_commit",
            "waiting_clients",
            "updater_running",
            "update_seq",
            "sizes",
            "signature",
            "purge_seq",
            "language",
            "compact_running",
            "collator_versions"
        ]
    );
    let size_keys: Vec<&String> = vi["sizes"].as_object().unwrap().keys().collect();
    assert_eq!(size_keys, ["file", "external", "active"]);
    let pending: Vec<&String> = vi["updates_pending"].as_object().unwrap().keys().collect();
    assert_eq!(pending, ["minimum", "preferred", "total"]);
    assert_eq!(vi["updates_pending"]["total"], 51);
    assert_eq!(
        (
            vi["sizes"]["active"].clone(),
            vi["sizes"]["external"].clone()
        ),
        (json!(0), json!(0))
    );

    // Built: external is the rows' keys and values as JSON text.
    let rows = s.get("/db/_design/d2/_view/v").json()["rows"].clone();
    let external = |rows: &Value| -> u64 {
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| (r["key"].to_string().len() + r["value"].to_string().len()) as u64)
            .sum()
    };
    let info = s.get("/db/_design/d2/_info").json();
    let sizes = &info["view_index"]["sizes"];
    let (file, ext, active) = (
        sizes["file"].as_u64().unwrap(),
        sizes["external"].as_u64().unwrap(),
        sizes["active"].as_u64().unwrap(),
    );
    assert_eq!(ext, external(&rows));
    assert!(active > ext && active <= file, "{sizes}");
    assert_eq!(info["view_index"]["updates_pending"]["total"], 0);
    assert_eq!(info["view_index"]["update_seq"], 51);

    // Updates and deletions move the sizes with the rows.
    let d0 = s.get("/db/d00").json();
    let r = s.put(
        "/db/d00",
        &json!({"_rev": d0["_rev"], "v": 0, "txt": "a much longer text than before"}).to_string(),
    );
    assert_eq!(r.status, 201);
    let d1 = s.get("/db/d01").json();
    assert_eq!(
        s.delete(&format!("/db/d01?rev={}", d1["_rev"].as_str().unwrap()))
            .status,
        200
    );
    let rows = s.get("/db/_design/d2/_view/v").json()["rows"].clone();
    let sizes = s.get("/db/_design/d2/_info").json()["view_index"]["sizes"].clone();
    assert_eq!(sizes["external"].as_u64().unwrap(), external(&rows));
    assert!(
        sizes["active"].as_u64() <= sizes["file"].as_u64(),
        "{sizes}"
    );

    // Compaction rewrites the trees; the live rows are the same.
    let r = s.post("/db/_compact/d2", "{}");
    assert_eq!(r.status, 202);
    for _ in 0..100 {
        let vi = s.get("/db/_design/d2/_info").json()["view_index"].clone();
        if vi["compact_running"] == json!(false) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let after = s.get("/db/_design/d2/_info").json()["view_index"]["sizes"].clone();
    assert_eq!(after["external"], sizes["external"]);
    assert_eq!(after["active"], sizes["active"]);
}

// ---------------------------------------------------------------------------------------
// 5. Mango

fn mango_db(s: &Server) {
    s.create_db("m");
    let docs: Vec<Value> = (0..20)
        .map(|i| json!({"_id": format!("d{i:02}"), "n": i, "type": if i % 2 == 0 { "a" } else { "b" }}))
        .collect();
    bulk(s, "m", json!(docs));
    let r = s.post(
        "/m/_index",
        r#"{"index":{"fields":["n"]},"name":"n-idx","ddoc":"nidx"}"#,
    );
    assert_eq!(
        r.json(),
        json!({"result": "created", "id": "_design/nidx", "name": "n-idx"})
    );
}

#[test]
fn execution_stats_count_as_couchdb_does() {
    let s = Server::start();
    mango_db(&s);
    // (query, ids returned, keys, docs)
    let cases: &[(Value, &[&str], u64, u64)] = &[
        (
            json!({"selector": {"n": {"$gte": 0}}, "limit": 5}),
            &["d00", "d01", "d02", "d03", "d04"],
            6,
            6,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}}, "limit": 5, "skip": 3}),
            &["d03", "d04", "d05", "d06", "d07"],
            9,
            9,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}, "type": "a"}, "limit": 5}),
            &["d00", "d02", "d04", "d06", "d08"],
            11,
            11,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}, "type": "a"}, "limit": 5, "skip": 3}),
            &["d06", "d08", "d10", "d12", "d14"],
            17,
            17,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}}, "limit": 0}),
            &[],
            1,
            1,
        ),
        (
            json!({"selector": {"n": {"$gte": 15}}, "limit": 10}),
            &["d15", "d16", "d17", "d18", "d19"],
            5,
            5,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}, "type": "zz"}}),
            &[],
            20,
            20,
        ),
        (
            json!({"selector": {"type": "a"}, "limit": 5}),
            &["d00", "d02", "d04", "d06", "d08"],
            12,
            12,
        ),
        (
            json!({"selector": {"type": "a"}, "limit": 5, "skip": 3}),
            &["d06", "d08", "d10", "d12", "d14"],
            18,
            18,
        ),
        (
            json!({"selector": {"type": "b"}, "limit": 5}),
            &["d01", "d03", "d05", "d07", "d09"],
            13,
            13,
        ),
        (
            json!({"selector": {"type": "a"}, "limit": 1}),
            &["d00"],
            4,
            4,
        ),
        (json!({"selector": {"type": "a"}, "limit": 0}), &[], 2, 2),
        (
            json!({"selector": {"_id": {"$gt": null}}, "limit": 5}),
            &["d00", "d01", "d02", "d03", "d04"],
            6,
            6,
        ),
        (
            json!({"selector": {"_id": {"$gt": null}}, "limit": 2, "skip": 1}),
            &["d01", "d02"],
            4,
            4,
        ),
        (
            json!({"selector": {"_id": {"$gt": "d05"}}, "limit": 5}),
            &["d06", "d07", "d08", "d09", "d10"],
            7,
            7,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}}, "limit": 2, "fields": ["_id"]}),
            &["d00", "d01"],
            3,
            0,
        ),
        (
            json!({"selector": {"n": {"$gte": 0}}, "limit": 2, "fields": ["_id", "n"]}),
            &["d00", "d01"],
            3,
            0,
        ),
    ];
    for (query, ids, keys, docs) in cases {
        let mut q = query.clone();
        q["execution_stats"] = json!(true);
        let r = s.post("/m/_find", &q.to_string());
        assert_eq!(r.status, 200, "{q}: {}", r.text);
        let body = r.json();
        let got: Vec<String> = body["docs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(got, *ids, "{q}");
        let st = &body["execution_stats"];
        assert_eq!(
            (
                st["total_keys_examined"].as_u64(),
                st["total_docs_examined"].as_u64()
            ),
            (Some(*keys), Some(*docs)),
            "{q}"
        );
        assert_eq!(st["total_quorum_docs_examined"], 0);
        assert_eq!(st["results_returned"], ids.len());
    }
    // Without a limit (25): every row, the design document of an `_all_docs` scan too.
    let all = |sel: Value| {
        let q = json!({"selector": sel, "execution_stats": true});
        s.post("/m/_find", &q.to_string()).json()["execution_stats"].clone()
    };
    assert_eq!(all(json!({"n": {"$gte": 0}}))["total_keys_examined"], 20);
    assert_eq!(all(json!({"type": "a"}))["total_keys_examined"], 21);
    assert_eq!(all(json!({"type": "a"}))["total_docs_examined"], 21);
    // The design document matches `_id > null` and is dropped with what it counted.
    assert_eq!(
        all(json!({"_id": {"$gt": null}}))["total_keys_examined"],
        20
    );
    let r = s.post(
        "/m/_find",
        r#"{"selector":{"type":"a"},"limit":0,"execution_stats":true}"#,
    );
    assert_eq!(r.json()["bookmark"], "nil");
}

#[test]
fn index_creation_refusals_and_acceptances() {
    let s = Server::start();
    s.create_db("ix");
    let post = |body: Value| {
        let r = s.post("/ix/_index", &body.to_string());
        (r.status, r.json())
    };
    let err = |e: &str, reason: &str| json!({"error": e, "reason": reason});
    let idx = || json!({"fields": ["a"]});
    let cases = [
        (
            json!({"index": idx(), "name": 5}),
            400,
            err("invalid_string", "Invalid string: 5"),
        ),
        (
            json!({"index": idx(), "name": null}),
            400,
            err("invalid_string", "Invalid string: null"),
        ),
        (
            json!({"index": idx(), "name": ""}),
            400,
            err(
                "invalid_empty_string",
                "Index name or ddoc cannot be empty string",
            ),
        ),
        (
            json!({"index": idx(), "ddoc": 5}),
            400,
            err("invalid_string", "Invalid string: 5"),
        ),
        (
            json!({"index": idx(), "ddoc": null}),
            400,
            err("invalid_string", "Invalid string: null"),
        ),
        (
            json!({"index": idx(), "ddoc": ""}),
            400,
            err(
                "invalid_empty_string",
                "Index name or ddoc cannot be empty string",
            ),
        ),
        (
            json!({"index": idx(), "ddoc": "_design/"}),
            400,
            err("illegal_docid", "Illegal document id `_design/`"),
        ),
        (
            json!({"index": idx(), "type": "foo"}),
            400,
            err("invalid_index", "Invalid type for index: foo"),
        ),
        (
            json!({"index": idx(), "type": ""}),
            400,
            err("invalid_index", "Invalid type for index: "),
        ),
        (
            json!({"index": idx(), "type": "special"}),
            400,
            err("invalid_index", "Invalid type for index: special"),
        ),
        (
            json!({"index": idx(), "type": 5}),
            400,
            err("invalid_string", "Invalid string: 5"),
        ),
        (
            json!({"index": idx(), "type": "text"}),
            503,
            err("required index service unavailable", "text"),
        ),
        (
            json!({"index": idx(), "type": "nouveau"}),
            503,
            err("required index service unavailable", "nouveau"),
        ),
        (
            json!({"index": {}}),
            400,
            err("missing_required_key", "Missing required key: fields"),
        ),
        (
            json!({"index": {"fields": "a"}}),
            400,
            err(
                "invalid_sort_json",
                "Sort must be an array of sort specs, not: <<\"a\">>",
            ),
        ),
        (
            json!({"index": {"fields": [{"a": "up"}]}}),
            400,
            err(
                "invalid_sort_field",
                "Invalid sort field: {[{<<\"a\">>,<<\"up\">>}]}",
            ),
        ),
        (
            json!({"name": "x"}),
            400,
            err("missing_required_key", "Missing required key: index"),
        ),
        (
            json!({"index": idx(), "extra": 1}),
            400,
            err("invalid_key", "Invalid key extra for this request."),
        ),
        (
            json!([]),
            400,
            err("bad_request", "Request body must be a JSON object"),
        ),
    ];
    for (body, status, answer) in cases {
        assert_eq!(post(body.clone()), (status, answer), "{body}");
    }
    let (status, r) = post(json!({"index": idx(), "name": "_foo"}));
    assert_eq!(
        (status, &r["result"], &r["name"]),
        (200, &json!("created"), &json!("_foo"))
    );
    let (_, r) = post(json!({"index": idx(), "name": "with space/slash", "ddoc": "sp"}));
    assert_eq!(r["result"], "created");
    let (_, with_prefix) = post(json!({"index": idx(), "ddoc": "_design/x"}));
    let (_, without) = post(json!({"index": idx(), "ddoc": "x"}));
    assert_eq!(
        (&with_prefix["id"], &without["id"]),
        (&json!("_design/x"), &json!("_design/x"))
    );
    assert_ne!(with_prefix["name"], without["name"]);
    for (ddoc, id) in [("_foo", "_design/_foo"), ("_local/y", "_design/_local/y")] {
        let (status, r) = post(json!({"index": idx(), "ddoc": ddoc}));
        assert_eq!((status, &r["id"]), (200, &json!(id)), "{ddoc}");
    }
    let (status, r) = post(json!({"index": {"fields": []}}));
    assert_eq!((status, &r["result"]), (200, &json!("created")), "{r}");
    assert_eq!(
        r["id"].as_str().unwrap().trim_start_matches("_design/"),
        r["name"].as_str().unwrap()
    );
    let body = json!({"index": {"fields": ["b"]}, "name": "same", "ddoc": "same"});
    assert_eq!(post(body.clone()).1["result"], "created");
    assert_eq!(post(body).1["result"], "exists");
}
