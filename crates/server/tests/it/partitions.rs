//! Partitioned databases over real HTTP: creation, document id rules, per-partition
//! counts kept at write time (and across a restart), `_partition/{p}/_all_docs`.

use crate::common;
use common::Server;
use serde_json::{json, Value};

fn err(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

fn answer(r: common::Resp) -> (u16, Value) {
    (r.status, r.json())
}

fn create_partitioned(s: &Server, db: &str) {
    let r = s.put(&format!("/{db}?partitioned=true"), "");
    assert_eq!(r.status, 201, "{}", r.text);
}

/// `(doc_count, doc_del_count)` of a partition.
fn counts(s: &Server, db: &str, p: &str) -> (u64, u64) {
    let v = s.get(&format!("/{db}/_partition/{p}")).json();
    (
        v["doc_count"].as_u64().unwrap(),
        v["doc_del_count"].as_u64().unwrap(),
    )
}

#[test]
fn creation_and_props() {
    let s = Server::start();
    create_partitioned(&s, "pdb");
    assert_eq!(s.get("/pdb").json()["props"], json!({"partitioned": true}));
    assert_eq!(s.put("/plain?partitioned=false", "").status, 201);
    assert_eq!(s.get("/plain").json()["props"], json!({}));
    assert_eq!(
        answer(s.put("/bad?partitioned=tru", "")),
        err(400, "bad_request", "Invalid `partitioned` parameter")
    );
    assert_eq!(s.get("/bad").status, 404);
    // `n` and `q` must be positive integers (`chttpd_db:parse_shards_opt`, `n` first);
    // one node holds one copy whatever `n` asks; `q` is kept.
    for (i, n) in ["1", "3"].iter().enumerate() {
        assert_eq!(s.put(&format!("/n{i}?n={n}&q=4"), "").status, 201, "{n}");
        let cluster = &s.get(&format!("/n{i}")).json()["cluster"];
        assert_eq!(cluster["n"], json!(1));
        assert_eq!(cluster["q"], json!(4));
    }
    for (k, v) in [("n", "0"), ("n", "-1"), ("n", "x"), ("q", "0"), ("q", "")] {
        assert_eq!(
            answer(s.put(&format!("/bad?{k}={v}&q=0"), "")),
            err(
                400,
                "bad_request",
                &format!("The `{k}` value should be a positive integer.")
            ),
            "{k}={v}"
        );
    }
    for p in ["", "moon", "a:0", "a:1,b", "a:b:1"] {
        assert_eq!(
            answer(s.put(&format!("/bad?placement={p}"), "")),
            err(
                400,
                "bad_request",
                "The `placement` value should be in a format `zone:n`."
            ),
            "{p}"
        );
    }
    // Parameters are checked before `partitioned`, as CouchDB checks them.
    assert_eq!(
        answer(s.put("/bad?partitioned=maybe&q=x", "")),
        err(
            400,
            "bad_request",
            "The `q` value should be a positive integer."
        )
    );
    assert_eq!(s.get("/bad").status, 404);
    assert_eq!(s.put("/placed?placement=a:1,b:2", "").status, 201);
    for sys in ["_users", "_replicator", "_global_changes", "a%2F_users"] {
        s.delete(&format!("/{sys}"));
        assert_eq!(
            answer(s.put(&format!("/{sys}?partitioned=true"), "")),
            err(400, "bad_request", "Cannot partition a system database"),
            "{sys}"
        );
    }
}

#[test]
fn document_id_rules() {
    let s = Server::start();
    create_partitioned(&s, "pdb");
    let illegal = |reason: &str| err(400, "illegal_docid", reason);
    let form = illegal("Doc id must be of form partition:id");
    assert_eq!(answer(s.put("/pdb/nopart", "{}")), form);
    assert_eq!(
        answer(s.put("/pdb/:x", "{}")),
        err(400, "illegal_partition", "Partition must not be empty")
    );
    assert_eq!(
        answer(s.put("/pdb/p:", "{}")),
        illegal("Document id must not be empty")
    );
    assert_eq!(
        answer(s.put("/pdb/_p:x", "{}")),
        illegal("Only reserved document ids may start with underscore.")
    );
    assert_eq!(answer(s.post("/pdb", r#"{"_id":"nopart"}"#)), form);
    // A POST without `_id` gets a uuid, which names no partition.
    assert_eq!(answer(s.post("/pdb", r#"{"a":1}"#)), form);
    assert_eq!(
        answer(s.post(
            "/pdb/_bulk_docs",
            r#"{"docs":[{"_id":"p:1"},{"_id":"foo1"}]}"#
        )),
        form
    );
    assert_eq!(
        s.get("/pdb/p:1").status,
        404,
        "a refused batch writes nothing"
    );
    assert_eq!(
        answer(s.post(
            "/pdb/_bulk_docs",
            r#"{"new_edits":false,"docs":[{"_id":"x","_rev":"1-abc"}]}"#
        )),
        form
    );
    // Attachments and COPY name documents too.
    let r = s.req_with(
        "PUT",
        "/pdb/nopart/a.txt",
        Some("hi"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(answer(r), form);
    assert_eq!(s.put("/pdb/p:src", "{}").status, 201);
    let r = s.raw("COPY", "/pdb/p:src", &[("Destination", "nopart")]);
    assert_eq!(answer(r), form);
    // Valid ids, design and local documents, and attachments of partitioned documents.
    assert_eq!(s.put("/pdb/p:a:b", "{}").status, 201);
    assert_eq!(s.put("/pdb/_design/d", "{}").status, 201);
    assert_eq!(s.put("/pdb/_local/l", "{}").status, 201);
    let r = s.req_with(
        "PUT",
        "/pdb/p:att/a.txt",
        Some("hello"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/pdb/p:att/a.txt").text, "hello");
    // Ids are checked before validation functions run.
    let vdu = r#"{"validate_doc_update":"function(){throw({forbidden:'no'});}"}"#;
    assert_eq!(s.put("/pdb/_design/v", vdu).status, 201);
    assert_eq!(answer(s.put("/pdb/nopart2", "{}")), form);
    assert_eq!(s.put("/pdb/p:ok", "{}").status, 403);
    // A non-partitioned database takes any id.
    s.create_db("plain");
    assert_eq!(s.put("/plain/nopart", "{}").status, 201);
}

#[test]
fn partition_errors() {
    let s = Server::start();
    create_partitioned(&s, "pdb");
    s.create_db("plain");
    let not_partitioned = err(400, "bad_request", "database is not partitioned");
    assert_eq!(answer(s.get("/plain/_partition/p")), not_partitioned);
    assert_eq!(
        answer(s.get("/plain/_partition/p/_all_docs")),
        not_partitioned
    );
    assert_eq!(
        answer(s.get("/pdb/_partition/_p")),
        err(
            400,
            "illegal_partition",
            "Partition must not start with an underscore"
        )
    );
    assert_eq!(
        answer(s.get("/pdb/_partition/_p/_all_docs")),
        err(
            400,
            "illegal_partition",
            "Partition must not start with an underscore"
        )
    );
    assert_eq!(
        answer(s.post("/pdb/_partition/_p", "{}")),
        err(
            400,
            "illegal_partition",
            "Partition must not start with an underscore"
        )
    );
    assert_eq!(
        answer(s.get("/pdb/_partition")),
        err(400, "bad_request", "invalid_partition_req")
    );
    let r = s.req("DELETE", "/pdb/_partition/p", None);
    assert_eq!(r.status, 405);
    assert_eq!(
        answer(s.get("/pdb/_partition/p/_all_docs?partition=q")),
        err(
            400,
            "bad_request",
            "Conflicting value for `partition` in query string"
        )
    );
    assert_eq!(s.get("/pdb/_partition/p/_all_docs?partition=p").status, 200);
    // `partition_query_limit` (no limit by default) caps partition queries.
    assert_eq!(
        s.get("/pdb/_partition/p/_all_docs?limit=268435456").status,
        200
    );
    s.put(
        "/_node/_local/_config/query_server_config/partition_query_limit",
        "\"2000\"",
    );
    assert_eq!(
        answer(s.get("/pdb/_partition/p/_all_docs?limit=2001")),
        err(
            400,
            "query_parse_error",
            "Limit is too large, must not exceed 2000"
        )
    );
    assert_eq!(s.get("/pdb/_partition/p/_nothing").status, 404);
    // An unknown partition is empty.
    let v = s.get("/pdb/_partition/nobody").json();
    assert_eq!(
        v,
        json!({"db_name": "pdb", "sizes": {"active": 0, "external": 0}, "partition": "nobody", "doc_count": 0, "doc_del_count": 0})
    );
}

#[test]
fn partition_counts_are_exact_and_durable() {
    let mut s = Server::start();
    create_partitioned(&s, "pdb");
    let rev = |r: common::Resp| r.json()["rev"].as_str().unwrap().to_string();
    // Creations.
    let r1 = rev(s.put("/pdb/a:1", r#"{"v":1}"#));
    s.put("/pdb/a:2", r#"{"v":2}"#);
    s.put("/pdb/b:1", r#"{"v":3}"#);
    s.put("/pdb/_design/d", "{}");
    assert_eq!(counts(&s, "pdb", "a"), (2, 0));
    assert_eq!(counts(&s, "pdb", "b"), (1, 0));
    let info = s.get("/pdb/_partition/a").json();
    assert!(info["sizes"]["external"].as_u64().unwrap() > 0);
    assert!(
        info["sizes"]["active"].as_u64().unwrap() > info["sizes"]["external"].as_u64().unwrap()
    );
    // An update changes no count.
    let r1 = rev(s.put(&format!("/pdb/a:1?rev={r1}"), r#"{"v":10}"#));
    assert_eq!(counts(&s, "pdb", "a"), (2, 0));
    // Deletion, then undeletion.
    assert_eq!(s.delete(&format!("/pdb/a:1?rev={r1}")).status, 200);
    assert_eq!(counts(&s, "pdb", "a"), (1, 1));
    let r1 = rev(s.put("/pdb/a:1", r#"{"back":true}"#));
    assert_eq!(counts(&s, "pdb", "a"), (2, 0));
    // `_bulk_docs` spanning partitions, with a deletion.
    let r = s
        .post(
            "/pdb/_bulk_docs",
            &json!({"docs": [
                {"_id": "b:2"}, {"_id": "c:1"}, {"_id": "a:1", "_rev": r1, "_deleted": true}
            ]})
            .to_string(),
        )
        .json();
    assert!(
        r.as_array().unwrap().iter().all(|x| x["ok"] == json!(true)),
        "{r}"
    );
    assert_eq!(counts(&s, "pdb", "a"), (1, 1));
    assert_eq!(counts(&s, "pdb", "b"), (2, 0));
    assert_eq!(counts(&s, "pdb", "c"), (1, 0));
    // Replicated revisions: a new document, a conflict (no count change), a known
    // revision (no-op), a deleted branch.
    let r = s.post(
        "/pdb/_bulk_docs",
        r#"{"new_edits":false,"docs":[
            {"_id":"d:1","_rev":"1-aaaa"},
            {"_id":"b:1","_rev":"1-ffff"},
            {"_id":"d:1","_rev":"1-aaaa"},
            {"_id":"d:2","_rev":"2-bbbb","_deleted":true,"_revisions":{"start":2,"ids":["bbbb","cccc"]}}
        ]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(counts(&s, "pdb", "d"), (1, 1));
    assert_eq!(counts(&s, "pdb", "b"), (2, 0));
    // Purge: all of d:1, and the deleted a:1.
    let a1_rev = s.get("/pdb/_all_docs?keys=[%22a:1%22]").json()["rows"][0]["value"]["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.post(
        "/pdb/_purge",
        &json!({"d:1": ["1-aaaa"], "a:1": [a1_rev]}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(counts(&s, "pdb", "d"), (0, 1));
    assert_eq!(counts(&s, "pdb", "a"), (1, 0));
    // The partitions' counts add up to the database's (design documents aside).
    let db = s.get("/pdb").json();
    let total: u64 = ["a", "b", "c", "d"]
        .iter()
        .map(|p| counts(&s, "pdb", p).0)
        .sum();
    assert_eq!(db["doc_count"].as_u64().unwrap(), total + 1);
    // Compaction changes no partition's counts or sizes.
    let infos = |s: &Server| -> Vec<Value> {
        ["a", "b", "c", "d"]
            .iter()
            .map(|p| s.get(&format!("/pdb/_partition/{p}")).json())
            .collect()
    };
    let before = infos(&s);
    assert_eq!(s.post("/pdb/_compact", "").status, 202);
    while s.get("/pdb").json()["compact_running"] == json!(true) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let compacted = infos(&s);
    assert_eq!(before, compacted);
    // Durable: the same after a restart.
    let dir = s.take_dir();
    s.stop();
    drop(s);
    let s = Server::start_in(dir.path());
    let after = infos(&s);
    assert_eq!(before, after);
    assert_eq!(s.get("/pdb").json()["props"], json!({"partitioned": true}));
    // Still partitioned after the restart.
    assert_eq!(s.put("/pdb/nopart", "{}").status, 400);
    // A re-created database starts with no partition counts.
    s.delete("/pdb");
    create_partitioned(&s, "pdb");
    assert_eq!(counts(&s, "pdb", "b"), (0, 0));
}

/// The global `_all_docs` rows whose ids are in partition `p`, with the same options.
fn filtered(s: &Server, p: &str, query: &str) -> Vec<Value> {
    let all = s.get(&format!("/pdb/_all_docs?{query}")).json();
    all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["id"].as_str().unwrap().starts_with(&format!("{p}:")))
        .cloned()
        .collect()
}

#[test]
fn partition_all_docs() {
    let s = Server::start();
    create_partitioned(&s, "pdb");
    let mut docs = vec![json!({"_id": "_design/x"})];
    for p in ["a", "b", "bb", "c"] {
        for i in 0..7 {
            docs.push(json!({"_id": format!("{p}:{i:02}"), "n": i}));
        }
    }
    s.post("/pdb/_bulk_docs", &json!({"docs": docs}).to_string());
    let rev = s.get("/pdb/b:03").json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    s.delete(&format!("/pdb/b:03?rev={rev}"));

    for opts in [
        "",
        "include_docs=true",
        "descending=true",
        "conflicts=true&include_docs=true",
    ] {
        let v = s.get(&format!("/pdb/_partition/b/_all_docs?{opts}")).json();
        assert_eq!(
            v["rows"].as_array().unwrap(),
            &filtered(&s, "b", opts),
            "{opts}"
        );
        // The whole database's count, as CouchDB reports its shard's (q=1); the offset
        // counts the shard's rows before the range (`_design/x` and `a`'s, or descending
        // `bb`'s and `c`'s), as measured on CouchDB 3.5.2.
        assert_eq!(v["total_rows"], json!(28), "{opts}");
        let before = if opts.contains("descending") { 14 } else { 8 };
        assert_eq!(v["offset"], json!(before), "{opts}");
    }
    let all_b = filtered(&s, "b", "");
    let v = s.get("/pdb/_partition/b/_all_docs?limit=2&skip=1").json();
    assert_eq!(v["rows"].as_array().unwrap(), &all_b[1..3]);
    assert_eq!(v["offset"], json!(9));
    let v = s
        .get("/pdb/_partition/b/_all_docs?descending=true&limit=3&skip=1")
        .json();
    let mut rev_b = all_b.clone();
    rev_b.reverse();
    assert_eq!(v["rows"].as_array().unwrap(), &rev_b[1..4]);
    // Keys within the partition range, keys outside it clamped away.
    let v = s
        .get("/pdb/_partition/b/_all_docs?start_key=%22b:02%22&end_key=%22b:05%22")
        .json();
    let ids: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["b:02", "b:04", "b:05"]);
    assert_eq!(v["offset"], json!(10));
    let v = s
        .get("/pdb/_partition/b/_all_docs?start_key=%22a%22&end_key=%22z%22")
        .json();
    assert_eq!(v["rows"].as_array().unwrap(), &all_b);
    let v = s
        .get("/pdb/_partition/b/_all_docs?start_key=%22c%22")
        .json();
    assert_eq!((&v["rows"], &v["offset"]), (&json!([]), &json!(21)));
    // `keys`, GET and POST: ids of other partitions are not found there.
    let keys = json!(["b:01", "a:01", "b:03", "b:99", "bb:01"]);
    let expect = json!([
        all_b[1].clone(),
        {"key": "a:01", "error": "not_found"},
        {"id": "b:03", "key": "b:03", "value": {"rev": rev_of_deleted(&s, "b:03"), "deleted": true}},
        {"key": "b:99", "error": "not_found"},
        {"key": "bb:01", "error": "not_found"},
    ]);
    let v = s
        .post(
            "/pdb/_partition/b/_all_docs",
            &json!({"keys": keys}).to_string(),
        )
        .json();
    assert_eq!(v["rows"], expect);
    let v = s
        .get(&format!(
            "/pdb/_partition/b/_all_docs?keys={}",
            keys.to_string().replace('"', "%22")
        ))
        .json();
    assert_eq!(v["rows"], expect);
    // `?partition=` on the database's own `_all_docs` is the same query.
    let v = s.get("/pdb/_all_docs?partition=b&limit=3").json();
    assert_eq!(v["rows"].as_array().unwrap(), &all_b[..3]);
    assert_eq!(v["total_rows"], json!(28));
    s.create_db("plain");
    let r = s.get("/plain/_all_docs?partition=b");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        json!("`partition` parameter is not supported on this db")
    );
    // `_all_docs/queries` within the partition.
    let v = s
        .post(
            "/pdb/_partition/b/_all_docs/queries",
            r#"{"queries":[{"limit":1},{"keys":["a:01","b:00"]},{"start_key":"b:05"}]}"#,
        )
        .json();
    let res = v["results"].as_array().unwrap();
    assert_eq!(res[0]["rows"].as_array().unwrap(), &all_b[..1]);
    assert_eq!(
        res[1]["rows"],
        json!([{"key": "a:01", "error": "not_found"}, all_b[0].clone()])
    );
    assert_eq!(res[2]["rows"].as_array().unwrap(), &all_b[4..]);
    // POST with parameters in the body.
    let v = s
        .post(
            "/pdb/_partition/bb/_all_docs",
            r#"{"include_docs":true,"limit":2,"descending":true}"#,
        )
        .json();
    let mut rev_bb = filtered(&s, "bb", "include_docs=true");
    rev_bb.reverse();
    assert_eq!(v["rows"].as_array().unwrap(), &rev_bb[..2]);
    assert_eq!(v["total_rows"], json!(28));
}

fn rev_of_deleted(s: &Server, id: &str) -> String {
    let v = s.get(&format!("/pdb/_all_docs?keys=[%22{id}%22]")).json();
    v["rows"][0]["value"]["rev"].as_str().unwrap().to_string()
}

#[test]
fn concurrent_writers_keep_counts_exact() {
    let s = Server::start();
    create_partitioned(&s, "pdb");
    // Concurrent requests land in shared group commits; every partition's count must still
    // be exact.
    std::thread::scope(|sc| {
        for t in 0..4 {
            let s = &s;
            sc.spawn(move || {
                for i in 0..40 {
                    let id = format!("p{}:{t}-{i}", i % 3);
                    assert_eq!(s.put(&format!("/pdb/{id}"), "{}").status, 201);
                }
            });
        }
    });
    let counts: Vec<u64> = (0..3)
        .map(|p| counts(&s, "pdb", &format!("p{p}")).0)
        .collect();
    // i % 3 over 0..40: 14, 13, 13 per thread.
    assert_eq!(counts, [56, 52, 52]);
    let all = s.get("/pdb/_partition/p1/_all_docs").json();
    assert_eq!(all["rows"].as_array().unwrap().len(), 52);
}
