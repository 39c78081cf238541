//! Queries within one partition over real HTTP: partitioned views (`options.partitioned`,
//! `_partition/{p}/_design/…/_view/…`, `?partition=`), lists, Mango `_find`/`_explain` in a
//! partition, `[couchdb] max_partition_size`, `_shards` and `_sync_shards`; and a property
//! test that a partition query returns exactly the global query's rows of that partition.

use crate::common;
use common::Server;
use proptest::prelude::*;
use serde_json::{json, Value};

fn err(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

fn answer(r: common::Resp) -> (u16, Value) {
    (r.status, r.json())
}

const MAP: &str = "function(doc) { if (doc.k !== undefined) emit(doc.k, doc.v); }";

/// A partitioned database `pdb` with documents `{p}:{i}` in partitions a, b, c (b has
/// more), `_design/part` (partitioned by default) and `_design/glob` (the same views,
/// `options.partitioned: false`).
fn setup(s: &Server) {
    assert_eq!(s.put("/pdb?partitioned=true", "").status, 201);
    let views = json!({
        "by_k": {"map": MAP, "reduce": "_sum"},
        "by_k_count": {"map": MAP, "reduce": "_count"},
        "pairs": {"map": "function(doc) { if (doc.k !== undefined) emit([doc.g, doc.k], 1); }", "reduce": "_count"},
    });
    let mut docs = vec![
        json!({"_id": "_design/part", "views": views}),
        json!({"_id": "_design/glob", "views": views, "options": {"partitioned": false}}),
    ];
    for (p, n) in [("a", 5), ("b", 12), ("c", 4)] {
        for i in 0..n {
            docs.push(json!({"_id": format!("{p}:{i:02}"), "k": (i * 7) % 5, "v": i, "g": i % 3}));
        }
    }
    let r = s.post("/pdb/_bulk_docs", &json!({"docs": docs}).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
}

fn rows(v: &Value) -> Vec<Value> {
    v["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .clone()
}

/// The global view's rows whose document is in partition `p`.
fn global_rows_of(s: &Server, p: &str, view: &str, query: &str) -> Vec<Value> {
    let v = s
        .get(&format!("/pdb/_design/glob/_view/{view}?{query}"))
        .json();
    rows(&v)
        .into_iter()
        .filter(|r| r["id"].as_str().unwrap().starts_with(&format!("{p}:")))
        .collect()
}

#[test]
fn partitioned_views() {
    let s = Server::start();
    setup(&s);
    let part = |p: &str, view: &str, q: &str| {
        s.get(&format!(
            "/pdb/_partition/{p}/_design/part/_view/{view}?{q}"
        ))
    };
    // Map rows: the partition's rows, in key order; the head reports the whole index.
    for q in [
        "reduce=false",
        "reduce=false&descending=true",
        "reduce=false&include_docs=true",
        "reduce=false&start_key=1&end_key=3",
        "reduce=false&start_key=3&end_key=1&descending=true",
        "reduce=false&key=2",
        "reduce=false&keys=[4,0,2]",
        "reduce=false&start_key=2&inclusive_end=false&end_key=4",
    ] {
        let v = part("b", "by_k", q).json();
        let expect = global_rows_of(&s, "b", "by_k", q);
        assert_eq!(rows(&v), expect, "{q}");
        assert_eq!(v["total_rows"], json!(21), "{q}");
    }
    let v = part("b", "by_k", "reduce=false&limit=3&skip=2").json();
    assert_eq!(
        rows(&v),
        global_rows_of(&s, "b", "by_k", "reduce=false")[2..5].to_vec()
    );
    // `offset` counts the index's rows before the first one returned, as CouchDB's shard
    // does: partitions hold their rows together, c's after a's 5 and b's 12.
    let v = part("c", "by_k", "reduce=false&skip=1&limit=1").json();
    assert_eq!(v["offset"], json!(18));
    let v = part("a", "by_k", "reduce=false&descending=true").json();
    assert_eq!(v["offset"], json!(16));

    // Reductions within the partition; keys carry no partition.
    let sum_b: i64 = global_rows_of(&s, "b", "by_k", "reduce=false")
        .iter()
        .map(|r| r["value"].as_i64().unwrap())
        .sum();
    assert_eq!(
        part("b", "by_k", "").json(),
        json!({"rows": [{"key": null, "value": sum_b}]})
    );
    let grouped = part("b", "by_k_count", "group=true").json();
    let mut counts = std::collections::BTreeMap::new();
    for r in global_rows_of(&s, "b", "by_k", "reduce=false") {
        *counts.entry(r["key"].as_i64().unwrap()).or_insert(0) += 1;
    }
    let expect: Vec<Value> = counts
        .iter()
        .map(|(k, n)| json!({"key": k, "value": n}))
        .collect();
    assert_eq!(rows(&grouped), expect);
    let level1 = part("b", "pairs", "group_level=1").json();
    assert_eq!(
        rows(&level1),
        vec![
            json!({"key": [0], "value": 4}),
            json!({"key": [1], "value": 4}),
            json!({"key": [2], "value": 4}),
        ]
    );
    let keyed = part("a", "by_k_count", "group=true&keys=[4,1]").json();
    assert_eq!(
        rows(&keyed),
        vec![json!({"key": 4, "value": 1}), json!({"key": 1, "value": 1})]
    );
    // POST with keys, and `?partition=` on the view's own path.
    let v = s
        .post(
            "/pdb/_partition/a/_design/part/_view/by_k",
            r#"{"keys":[3,1],"reduce":false}"#,
        )
        .json();
    assert_eq!(
        rows(&v),
        global_rows_of(&s, "a", "by_k", "reduce=false&keys=[3,1]")
    );
    let v = s
        .get("/pdb/_design/part/_view/by_k?reduce=false&partition=a")
        .json();
    assert_eq!(rows(&v), global_rows_of(&s, "a", "by_k", "reduce=false"));
    // An unknown partition has no rows.
    let v = part("zz", "by_k", "reduce=false").json();
    assert_eq!(rows(&v), Vec::<Value>::new());

    // Errors, in CouchDB's words.
    let mandatory = err(
        400,
        "query_parse_error",
        "`partition` parameter is mandatory for queries to this view.",
    );
    assert_eq!(answer(s.get("/pdb/_design/part/_view/by_k")), mandatory);
    let unsupported = err(
        400,
        "query_parse_error",
        "`partition` parameter is not supported in this design doc",
    );
    assert_eq!(
        answer(s.get("/pdb/_partition/a/_design/glob/_view/by_k")),
        unsupported
    );
    assert_eq!(
        answer(s.get("/pdb/_design/glob/_view/by_k?partition=a")),
        unsupported
    );
    assert_eq!(
        answer(s.get("/pdb/_design/part/_view/by_k?partition=")),
        err(400, "query_parse_error", "Invalid value for `partition`.")
    );
    assert_eq!(
        answer(s.get("/pdb/_design/part/_view/by_k?partition=_x")),
        err(
            400,
            "illegal_partition",
            "Partition must not start with an underscore"
        )
    );
    assert_eq!(
        answer(s.get("/pdb/_partition/a/_design/part/_view/by_k?partition=b")),
        err(
            400,
            "bad_request",
            "Conflicting value for `partition` in query string"
        )
    );
    // The global design document still answers global queries.
    assert_eq!(
        s.get("/pdb/_design/glob/_view/by_k").json()["rows"][0]["value"],
        json!((0..5).sum::<i64>() + (0..12).sum::<i64>() + (0..4).sum::<i64>())
    );
    // `partition_query_limit` caps partitioned views only; `query_limit` global ones.
    s.put(
        "/_node/_local/_config/query_server_config/partition_query_limit",
        "\"3\"",
    );
    assert_eq!(
        answer(part("b", "by_k", "reduce=false&limit=4")),
        err(
            400,
            "query_parse_error",
            "Limit is too large, must not exceed 3"
        )
    );
    assert_eq!(rows(&part("b", "by_k", "reduce=false").json()).len(), 3);
    assert_eq!(
        rows(
            &s.get("/pdb/_design/glob/_view/by_k?reduce=false&limit=5")
                .json()
        )
        .len(),
        5
    );
    s.put(
        "/_node/_local/_config/query_server_config/query_limit",
        "\"4\"",
    );
    assert_eq!(
        s.get("/pdb/_design/glob/_view/by_k?reduce=false&limit=5")
            .json()["reason"],
        json!("Limit is too large, must not exceed 4")
    );

    // What else `_partition/{p}/_design/{ddoc}/…` answers.
    assert_eq!(
        s.get("/pdb/_partition/a/_design/part/_info").json()["name"],
        json!("part")
    );
    assert_eq!(s.get("/pdb/_partition/a/_design/part").status, 404);
    assert_eq!(s.get("/pdb/_partition/a/_design_docs").status, 404);
    assert_eq!(s.get("/pdb/_partition/a/a:01").status, 404);
}

#[test]
fn partitioned_option_in_design_documents() {
    let s = Server::start();
    s.create_db("plain");
    let ddoc = |opts: Value| json!({"views": {"v": {"map": MAP}}, "options": opts}).to_string();
    assert_eq!(
        answer(s.put("/plain/_design/d", &ddoc(json!({"partitioned": true})))),
        err(
            400,
            "invalid_design_doc",
            "partitioned option cannot be true in a non-partitioned database."
        )
    );
    assert_eq!(
        answer(s.put("/plain/_design/d", &ddoc(json!({"partitioned": "yes"})))),
        err(
            400,
            "invalid_design_doc",
            "`options.partitioned` field must have boolean type"
        )
    );
    assert_eq!(
        s.put("/plain/_design/d", &ddoc(json!({"partitioned": false})))
            .status,
        201
    );
    s.put("/plain/x", r#"{"k":1}"#);
    assert_eq!(rows(&s.get("/plain/_design/d/_view/v").json()).len(), 1);
    assert_eq!(
        answer(s.get("/plain/_design/d/_view/v?partition=a")),
        err(
            400,
            "query_parse_error",
            "`partition` parameter is not supported in this design doc"
        )
    );
    assert_eq!(
        answer(s.get("/plain/_partition/a/_design/d/_view/v")),
        err(400, "bad_request", "database is not partitioned")
    );
}

#[test]
fn lists_shows_and_updates_under_a_partition() {
    let s = Server::start();
    setup(&s);
    let ddoc = json!({
        "_id": "_design/r",
        "views": {"v": {"map": MAP}},
        "lists": {"ids": "function(head, req) { var row, out = []; while ((row = getRow())) out.push(row.id); return JSON.stringify(out); }"},
        "shows": {"hi": "function(doc, req) { return doc ? doc._id : 'none'; }"},
    });
    assert_eq!(s.post("/pdb", &ddoc.to_string()).status, 201);
    let ids: Value =
        serde_json::from_str(&s.get("/pdb/_partition/c/_design/r/_list/ids/v").text).unwrap();
    let expect: Vec<Value> = global_rows_of(&s, "c", "by_k", "reduce=false")
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    let mut got: Vec<Value> = ids.as_array().unwrap().clone();
    let mut want = expect.clone();
    got.sort_by_key(|v| v.to_string());
    want.sort_by_key(|v| v.to_string());
    assert_eq!(got, want);
    assert_eq!(s.get("/pdb/_design/r/_list/ids/v").status, 400);
    assert_eq!(
        s.get("/pdb/_partition/c/_design/r/_show/hi/c:01").text,
        "c:01"
    );
}

#[test]
fn mango_within_a_partition() {
    let s = Server::start();
    setup(&s);
    let find = |path: &str, body: Value| s.post(path, &body.to_string());
    let ids = |v: &Value| -> Vec<String> {
        v["docs"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|d| d["_id"].as_str().unwrap().to_string())
            .collect()
    };
    // Without an index: `_all_docs` over the partition's ids.
    let v = find(
        "/pdb/_partition/b/_find",
        json!({"selector": {"k": {"$gte": 3}}, "limit": 100}),
    )
    .json();
    let want: Vec<String> = (0..12)
        .filter(|i| (i * 7) % 5 >= 3)
        .map(|i| format!("b:{i:02}"))
        .collect();
    assert_eq!(ids(&v), want);
    // A partitioned json index (the database's default), used by partition queries.
    let r = find(
        "/pdb/_index",
        json!({"index": {"fields": ["k"]}, "ddoc": "byk", "name": "byk"}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let listed = s.get("/pdb/_index").json();
    let idx = listed["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "byk")
        .unwrap()
        .clone();
    assert_eq!(idx["partitioned"], json!(true));
    let q =
        json!({"selector": {"k": {"$gt": 1}}, "sort": ["k"], "fields": ["_id", "k"], "limit": 100});
    let v = find("/pdb/_partition/b/_find", q.clone()).json();
    let mut want: Vec<(i64, String)> = (0..12)
        .filter(|i| (i * 7) % 5 > 1)
        .map(|i| ((i * 7) % 5, format!("b:{i:02}")))
        .collect();
    want.sort();
    assert_eq!(
        ids(&v),
        want.iter().map(|(_, id)| id.clone()).collect::<Vec<_>>()
    );
    let e = find("/pdb/_partition/b/_explain", q.clone()).json();
    assert_eq!(e["index"]["name"], json!("byk"));
    assert_eq!(e["partitioned"], json!(true));
    assert_eq!(e["mrargs"]["partition"], json!("b"));
    // The body's `partition` works on the database's `_find` too.
    let mut with_partition = q.clone();
    with_partition["partition"] = json!("b");
    assert_eq!(ids(&find("/pdb/_find", with_partition).json()), ids(&v));
    // A global query cannot use the partitioned index to sort.
    assert_eq!(
        answer(find("/pdb/_find", q.clone())),
        err(
            400,
            "no_usable_index",
            "No global index exists for this sort, try indexing by the sort fields."
        )
    );
    // ...nor a partition query a global one.
    let r = find(
        "/pdb/_index",
        json!({"index": {"fields": ["v"]}, "ddoc": "byv", "name": "byv", "partitioned": false}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let by_v = json!({"selector": {"v": {"$gt": 9}}, "sort": ["v"], "limit": 100});
    assert_eq!(
        answer(find("/pdb/_partition/b/_find", by_v.clone())),
        err(
            400,
            "no_usable_index",
            "No partitioned index exists for this sort, try indexing by the sort fields."
        )
    );
    assert_eq!(ids(&find("/pdb/_find", by_v).json()), ["b:10", "b:11"]);
    // Global queries read every partition.
    let v = find("/pdb/_find", json!({"selector": {"v": 3}})).json();
    assert_eq!(ids(&v), ["a:03", "b:03", "c:03"]);
    let v = find("/pdb/_find", json!({"selector": {"g": 2, "v": {"$lt": 6}}})).json();
    assert_eq!(ids(&v), ["a:02", "b:02", "c:02", "b:05"]);
    // Paging with bookmarks stays inside the partition.
    let mut seen = Vec::new();
    let mut bookmark: Option<String> = None;
    loop {
        let mut q = json!({"selector": {"k": {"$gte": 0}}, "sort": ["k"], "limit": 5});
        if let Some(b) = &bookmark {
            q["bookmark"] = json!(b);
        }
        let v = find("/pdb/_partition/b/_find", q).json();
        let page = ids(&v);
        if page.is_empty() {
            break;
        }
        seen.extend(page);
        bookmark = v["bookmark"].as_str().map(str::to_string);
    }
    seen.sort();
    let all_b: Vec<String> = (0..12).map(|i| format!("b:{i:02}")).collect();
    assert_eq!(seen, all_b);
    // Errors.
    s.create_db("plain");
    assert_eq!(
        answer(find("/plain/_partition/b/_find", json!({"selector": {}}))),
        err(400, "bad_request", "database is not partitioned")
    );
    assert_eq!(
        answer(find(
            "/plain/_find",
            json!({"selector": {}, "partition": "b"})
        )),
        err(
            400,
            "bad_request",
            "`partition` parameter is not supported in this db."
        )
    );
    assert_eq!(
        s.get("/pdb/_partition/_find").json()["error"],
        json!("illegal_partition")
    );
}

#[test]
fn max_partition_size() {
    let s = Server::start();
    assert_eq!(s.put("/pdb?partitioned=true", "").status, 201);
    s.put(
        "/_node/_local/_config/couchdb/max_partition_size",
        "\"300\"",
    );
    let body = |n: usize| json!({"pad": "x".repeat(n)}).to_string();
    // The write that crosses the limit is accepted; the next growing one is not.
    assert_eq!(s.put("/pdb/a:1", &body(200)).status, 201);
    assert_eq!(s.put("/pdb/a:2", &body(200)).status, 201);
    let overflow = err(
        403,
        "partition_overflow",
        "Partition limit exceeded due to update on 'a:3'",
    );
    assert_eq!(answer(s.put("/pdb/a:3", &body(10))), overflow);
    // Other partitions and design documents are not held back.
    assert_eq!(s.put("/pdb/b:1", &body(200)).status, 201);
    assert_eq!(s.put("/pdb/_design/d", "{}").status, 201);
    // Growing an existing document fails; shrinking it or deleting it does not.
    let rev = s.get("/pdb/a:1").json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        answer(s.put(&format!("/pdb/a:1?rev={rev}"), &body(250))),
        err(
            403,
            "partition_overflow",
            "Partition limit exceeded due to update on 'a:1'"
        )
    );
    // `_bulk_docs` answers per document.
    let r = s.post(
        "/pdb/_bulk_docs",
        &json!({"docs": [{"_id": "a:4", "pad": "yy"}, {"_id": "c:1"}]}).to_string(),
    );
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json()[0],
        json!({"id": "a:4", "error": "partition_overflow", "reason": "Partition limit exceeded due to update on 'a:4'"})
    );
    assert_eq!(r.json()[1]["ok"], json!(true));
    let r = s.put(&format!("/pdb/a:1?rev={rev}"), &body(50));
    assert_eq!(r.status, 201);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    // Replicated revisions are not refused.
    let r = s.post(
        "/pdb/_bulk_docs",
        r#"{"new_edits":false,"docs":[{"_id":"a:5","_rev":"1-abc","pad":"zzzzzzzz"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/pdb/a:5").status, 200);
    assert_eq!(s.delete(&format!("/pdb/a:1?rev={rev}")).status, 200);
    // Raising the limit (or 0: none) lets writes through at once.
    s.put("/_node/_local/_config/couchdb/max_partition_size", "\"0\"");
    assert_eq!(s.put("/pdb/a:3", &body(10)).status, 201);
}

#[test]
fn shards_and_sync_shards() {
    let s = Server::start();
    s.create_db("one");
    assert_eq!(
        s.get("/one/_shards").json(),
        json!({"shards": {"00000000-ffffffff": ["nonode@nohost"]}})
    );
    assert_eq!(s.put("/four?q=4", "").status, 201);
    assert_eq!(
        s.get("/four/_shards").json(),
        json!({"shards": {
            "00000000-3fffffff": ["nonode@nohost"],
            "40000000-7fffffff": ["nonode@nohost"],
            "80000000-bfffffff": ["nonode@nohost"],
            "c0000000-ffffffff": ["nonode@nohost"],
        }})
    );
    // CRC-32 of "foo" is 8c736521; of "bar" 76ff8caa.
    assert_eq!(
        s.get("/four/_shards/foo").json(),
        json!({"range": "80000000-bfffffff", "nodes": ["nonode@nohost"]})
    );
    assert_eq!(
        s.get("/four/_shards/bar").json()["range"],
        json!("40000000-7fffffff")
    );
    // In a partitioned database documents go where their partition hashes.
    assert_eq!(s.put("/pdb?partitioned=true&q=4", "").status, 201);
    assert_eq!(
        s.get("/pdb/_shards/foo:x").json()["range"],
        json!("80000000-bfffffff")
    );
    assert_eq!(
        s.get("/pdb/_shards/nopartition").json()["error"],
        json!("illegal_docid")
    );
    assert_eq!(
        answer(s.post("/four/_sync_shards", "")),
        (202, json!({"ok": true}))
    );
    assert_eq!(s.post("/four/_shards", "{}").status, 405);
    assert_eq!(s.get("/four/_sync_shards").status, 405);
    assert_eq!(s.get("/missing/_shards").status, 404);
}

/// A partition query gives exactly the rows of the same query over a global view of the
/// same map, filtered to the partition, for any documents and query parameters.
#[test]
fn partition_queries_match_the_filtered_global_query() {
    let s = Server::start();
    assert_eq!(s.put("/pdb?partitioned=true", "").status, 201);
    let views = json!({"v": {"map": "function(doc) { emit(doc.k, doc.i); if (doc.twice) emit(doc.k, -doc.i); }"}});
    s.post(
        "/pdb/_bulk_docs",
        &json!({"docs": [
            {"_id": "_design/part", "views": views},
            {"_id": "_design/glob", "views": views, "options": {"partitioned": false}},
        ]})
        .to_string(),
    );
    let keys = prop_oneof![
        (0i64..6).prop_map(|n| json!(n)),
        "[a-c]{0,2}".prop_map(|s| json!(s)),
        Just(json!(null)),
        (0i64..3, 0i64..3).prop_map(|(a, b)| json!([a, b])),
    ];
    let doc = (0usize..4, 0u32..40, keys.clone(), any::<bool>());
    let query = (
        any::<bool>(),
        proptest::option::of(keys.clone()),
        proptest::option::of(keys),
        0u64..4,
        proptest::option::of(0u64..6),
        any::<bool>(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 40,
        ..ProptestConfig::default()
    });
    let round = std::cell::Cell::new(0u32);
    let compared = std::cell::Cell::new(0usize);
    runner
        .run(
            &(proptest::collection::vec(doc, 0..25), query),
            |(docs, (desc, start, end, skip, limit, incl))| {
                round.set(round.get() + 1);
                let round = round.get();
                let partitions = ["p", "q", "pp", "r"];
                let batch: Vec<Value> = docs
                    .iter()
                    .map(|(p, i, k, twice)| {
                        json!({"_id": format!("{}:{round}-{i}", partitions[*p]), "k": k, "i": i, "twice": twice})
                    })
                    .collect();
                let r = s.post("/pdb/_bulk_docs", &json!({"docs": batch}).to_string());
                prop_assert!(r.status == 201 || r.status == 400, "{}", r.text);
                let enc = |v: &Value| {
                    v.to_string()
                        .replace('%', "%25")
                        .replace('"', "%22")
                        .replace(' ', "%20")
                        .replace('[', "%5B")
                        .replace(']', "%5D")
                };
                let mut q = format!("descending={desc}&skip=0&inclusive_end={incl}");
                if let Some(k) = &start {
                    q.push_str(&format!("&start_key={}", enc(k)));
                }
                if let Some(k) = &end {
                    q.push_str(&format!("&end_key={}", enc(k)));
                }
                let global = s.get(&format!("/pdb/_design/glob/_view/v?{q}"));
                if global.status != 200 {
                    // A reversed range: the partition query refuses it the same way.
                    let part = s.get(&format!("/pdb/_partition/p/_design/part/_view/v?{q}"));
                    prop_assert_eq!(part.status, global.status);
                    prop_assert_eq!(part.json(), global.json());
                    return Ok(());
                }
                for p in partitions {
                    let want: Vec<Value> = rows(&global.json())
                        .into_iter()
                        .filter(|r| r["id"].as_str().unwrap().starts_with(&format!("{p}:")))
                        .skip(skip as usize)
                        .take(limit.map_or(usize::MAX, |l| l as usize))
                        .collect();
                    let mut pq = q.replace("skip=0", &format!("skip={skip}"));
                    if let Some(l) = limit {
                        pq.push_str(&format!("&limit={l}"));
                    }
                    let got = s
                        .get(&format!("/pdb/_partition/{p}/_design/part/_view/v?{pq}"))
                        .json();
                    compared.set(compared.get() + want.len());
                    prop_assert_eq!(rows(&got), want, "partition {} query {}", p, pq);
                }
                Ok(())
            },
        )
        .unwrap();
    // The generated cases did compare rows, not only empty answers.
    assert!(compared.get() > 100, "{}", compared.get());
}
