//! Mango on clustered databases: indexes are design documents written through the
//! coordinator, `_find` is given them on one copy of every range and the rows merged in
//! the index's order, so that every member answers what a single Settee answers for the
//! same data (documents, order, bookmarks), and bookmarks page through every match once.

use crate::common;

use common::cluster::*;
use common::Server;
use serde_json::{json, Value};

fn ok_json(r: common::Resp, what: &str) -> Value {
    assert_eq!(r.status, 200, "{what}: {}", r.text);
    r.json()
}

fn find(s: &Server, db: &str, q: &Value) -> Value {
    ok_json(
        s.post(&format!("/{db}/_find"), &q.to_string()),
        &q.to_string(),
    )
}

fn ids(r: &Value) -> Vec<String> {
    (r["docs"].as_array().unwrap().iter())
        .map(|d| d["_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Pages through `q` with its bookmark, a page from each server in turn, until a page
/// comes back empty: the ids seen, in order.
fn walk(servers: &[&Server], db: &str, q: &Value) -> Vec<String> {
    let mut seen = Vec::new();
    let mut q = q.clone();
    for page in 0.. {
        assert!(page < 100, "bookmarks do not end");
        let r = find(servers[page % servers.len()], db, &q);
        let got = ids(&r);
        if got.is_empty() {
            return seen;
        }
        seen.extend(got);
        q["bookmark"] = r["bookmark"].clone();
    }
    unreachable!()
}

#[test]
fn clustered_mango_answers_as_a_single_node() {
    let (_etcd, _dirs, nodes) = three_members();
    let single = Server::start();
    assert_eq!(nodes[0].put("/mdb?q=2&n=2", "").status, 201);
    assert_eq!(single.put("/mdb", "").status, 201);
    // Ties on `n` (three documents each) order by id.
    let docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("m{:02}", (i * 7) % 30), "n": i % 10, "group": i % 3, "name": format!("doc {i}")}))
        .collect();
    let body = json!({ "docs": docs }).to_string();
    assert_eq!(nodes[1].post("/mdb/_bulk_docs", &body).status, 201);
    assert_eq!(single.post("/mdb/_bulk_docs", &body).status, 201);

    // An index is a design document written through the cluster: once, then it exists.
    let index = json!({"index": {"fields": ["n"]}, "name": "by-n", "ddoc": "idx", "type": "json"});
    for (s, result) in [
        (&nodes[2], "created"),
        (&nodes[0], "exists"),
        (&single, "created"),
    ] {
        let r = ok_json(s.post("/mdb/_index", &index.to_string()), "_index");
        assert_eq!(
            r,
            json!({"result": result, "id": "_design/idx", "name": "by-n"})
        );
    }
    let listed = ok_json(single.get("/mdb/_index"), "single _index");
    for n in &nodes {
        assert_eq!(ok_json(n.get("/mdb/_index"), "_index"), listed);
        let design = ok_json(n.get("/mdb/_design/idx"), "the index's design document");
        assert_eq!(design["language"], "query");
    }
    assert_eq!(listed["total_rows"], 2, "{listed}");
    assert_eq!(listed["indexes"][1]["name"], "by-n");

    // Every member answers what the single node answers: documents, order and bookmark.
    let queries = [
        json!({"selector": {"n": {"$gte": 2}}, "sort": [{"n": "asc"}], "limit": 7, "skip": 3,
               "fields": ["_id", "n"]}),
        json!({"selector": {"n": {"$gte": 2}}, "sort": [{"n": "desc"}], "limit": 8, "skip": 1}),
        json!({"selector": {"n": {"$gt": 5}}, "sort": ["n"], "use_index": "idx",
               "fields": ["name", "n"]}),
        json!({"selector": {"group": 1}, "limit": 5, "skip": 2}),
        json!({"selector": {"_id": {"$gt": "m10"}}, "fields": ["_id"], "limit": 4}),
        json!({"selector": {"n": 3}, "execution_stats": true}),
        json!({"selector": {"n": {"$gt": 100}}, "sort": ["n"]}),
    ];
    for q in &queries {
        let want = find(&single, "mdb", q);
        assert!(!ids(&want).is_empty() || q["selector"]["n"]["$gt"] == 100);
        for n in &nodes {
            let got = find(n, "mdb", q);
            assert_eq!(got["docs"], want["docs"], "{q}");
            assert_eq!(got["bookmark"], want["bookmark"], "{q}");
        }
    }
    let bad = json!({"selector": {"n": 3}, "bookmark": "not a bookmark"});
    let want = single.post("/mdb/_find", &bad.to_string());
    let got = nodes[2].post("/mdb/_find", &bad.to_string());
    assert_eq!((got.status, got.json()), (want.status, want.json()));
    let r = find(&nodes[1], "mdb", &queries[5]);
    assert_eq!(r["execution_stats"]["results_returned"], 3, "{r}");
    assert!(
        r["execution_stats"]["total_keys_examined"]
            .as_u64()
            .unwrap()
            >= 3
    );
    let r = find(&nodes[1], "mdb", &json!({"selector": {"group": 2}}));
    assert_eq!(r["execution_stats"], Value::Null);
    assert!(
        r["warning"]
            .as_str()
            .unwrap()
            .contains("No matching index found"),
        "{r}"
    );

    // Bookmarks page through every match once, whichever member answers each page.
    let members: Vec<&Server> = nodes.iter().collect();
    let mut by_n: Vec<(u64, String)> = (0..30)
        .map(|i| (i % 10, format!("m{:02}", (i * 7) % 30)))
        .collect();
    by_n.sort();
    let sorted: Vec<String> = by_n.into_iter().map(|(_, id)| id).collect();
    let q = json!({"selector": {"n": {"$gte": 0}}, "sort": ["n"], "limit": 4});
    assert_eq!(walk(&members, "mdb", &q), sorted);
    assert_eq!(walk(&[&single], "mdb", &q), sorted);
    let q = json!({"selector": {"_id": {"$gt": null}}, "limit": 7});
    let mut all: Vec<String> = (0..30).map(|i| format!("m{i:02}")).collect();
    assert_eq!(walk(&members, "mdb", &q), all);
    let q = json!({"selector": {"n": {"$gte": 0}}, "sort": [{"n": "desc"}], "limit": 5,
                   "skip": 1});
    let want = walk(&[&single], "mdb", &q);
    assert_eq!(walk(&members, "mdb", &q), want);
    all.sort();

    // `_explain` names the index, as the single node does (of the clustered database).
    let q = json!({"selector": {"n": {"$gt": 1}}, "sort": ["n"], "fields": ["n"]});
    let want = ok_json(single.post("/mdb/_explain", &q.to_string()), "_explain");
    for n in &nodes {
        let got = ok_json(n.post("/mdb/_explain", &q.to_string()), "_explain");
        assert_eq!(got["index"]["name"], "by-n", "{got}");
        assert_eq!(got, want);
    }

    // A database member queries as on a single node; index writes are an admin's.
    let members = json!({"members": {"names": ["bob"]}}).to_string();
    let bob = ("bob", "pw");
    add_user_everywhere(&nodes.iter().collect::<Vec<_>>(), "bob", "pw");
    single.add_user("bob", "pw", &[]);
    assert_eq!(nodes[0].put("/mdb/_security", &members).status, 200);
    assert_eq!(single.put("/mdb/_security", &members).status, 200);
    let q = queries[0].to_string();
    let want = single.as_user(bob, "POST", "/mdb/_find", Some(&q));
    assert_eq!(want.status, 200, "{}", want.text);
    let bobs = json!({"index": {"fields": ["name"]}, "ddoc": "bobs"}).to_string();
    let refused = single.as_user(bob, "POST", "/mdb/_index", Some(&bobs));
    assert!(refused.status >= 400, "{}", refused.text);
    for n in &nodes {
        eventually("bob a member", || {
            n.as_user(bob, "POST", "/mdb/_find", Some(&q)).status == 200
        });
        let got = n.as_user(bob, "POST", "/mdb/_find", Some(&q));
        assert_eq!(got.json()["docs"], want.json()["docs"]);
        let r = n.as_user(bob, "POST", "/mdb/_index", Some(&bobs));
        assert_eq!((r.status, r.json()), (refused.status, refused.json()));
        // An index there already is no write: anyone reading may be told it exists.
        let r = n.as_user(bob, "POST", "/mdb/_index", Some(&index.to_string()));
        assert_eq!(r.json()["result"], "exists", "{}", r.text);
        let r = n.as_user(bob, "GET", "/mdb/_index", None);
        assert_eq!(r.json(), listed);
    }
    let r = single.anon("POST", "/mdb/_find", Some(&q), &[]);
    let anon = nodes[1].anon("POST", "/mdb/_find", Some(&q), &[]);
    assert_eq!((anon.status, anon.json()), (r.status, r.json()));

    // Deleting the index rewrites its design document through the cluster.
    let other = json!({"index": {"fields": ["group"]}, "ddoc": "other"});
    ok_json(nodes[0].post("/mdb/_index", &other.to_string()), "_index");
    assert_eq!(
        ok_json(nodes[2].get("/mdb/_index"), "_index")["total_rows"],
        3
    );
    let r = nodes[1].delete("/mdb/_index/_design/idx/json/by-n");
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"ok": true})),
        "{}",
        r.text
    );
    let r = nodes[2].delete("/mdb/_index/_design/idx/json/by-n");
    assert_eq!(r.status, 404, "{}", r.text);
    let r = nodes[0].post(
        "/mdb/_index/_bulk_delete",
        &json!({"docids": ["other", "_design/nothing"]}).to_string(),
    );
    let r = ok_json(r, "_bulk_delete");
    assert_eq!(
        r,
        json!({"success": [{"id": "_design/other", "ok": true}],
               "fail": [{"id": "_design/nothing", "error": "not_found"}]})
    );
    for n in &nodes {
        let r = ok_json(n.get("/mdb/_index"), "_index");
        assert_eq!(r["total_rows"], 1, "{r}");
        assert_eq!(n.get("/mdb/_design/idx").status, 404);
    }
    let r = nodes[0].post("/mdb/_find", &queries[2].to_string());
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (400, json!("no_usable_index"))
    );
    let q = json!({"selector": {"n": {"$gt": 5}}, "use_index": "idx"});
    let r = find(&nodes[0], "mdb", &q);
    assert!(r["warning"].as_str().unwrap().contains("idx"), "{r}");
    assert_eq!(ids(&r).len(), 12, "{r}");

    // A partition's `_find` asks its range, with the partition's indexes.
    assert_eq!(
        nodes[0].put("/pdb?q=2&n=2&partitioned=true", "").status,
        201
    );
    assert_eq!(single.put("/pdb?partitioned=true", "").status, 201);
    let docs: Vec<Value> = (0..12)
        .map(|i| json!({"_id": format!("{}:d{i:02}", ["a", "b", "c"][i % 3]), "n": 12 - i}))
        .collect();
    let body = json!({ "docs": docs }).to_string();
    let index = json!({"index": {"fields": ["n"]}, "ddoc": "pn"}).to_string();
    for s in [&nodes[1], &single] {
        assert_eq!(s.post("/pdb/_bulk_docs", &body).status, 201);
        ok_json(s.post("/pdb/_index", &index), "partitioned _index");
    }
    let q = json!({"selector": {"n": {"$gt": 2}}, "sort": ["n"], "limit": 2, "skip": 1});
    let want = ok_json(
        single.post("/pdb/_partition/b/_find", &q.to_string()),
        "single",
    );
    assert_eq!(ids(&want), ["b:d04", "b:d01"]);
    for n in &nodes {
        let got = ok_json(n.post("/pdb/_partition/b/_find", &q.to_string()), "_find");
        assert_eq!(got["docs"], want["docs"]);
        assert_eq!(got["bookmark"], want["bookmark"]);
    }
    let q = json!({"selector": {"n": {"$gt": 2}}, "sort": ["n"]});
    let want = single.post("/pdb/_find", &q.to_string());
    let got = nodes[2].post("/pdb/_find", &q.to_string());
    assert_eq!((got.status, got.json()), (want.status, want.json()));

    // With a member down, each range is read from its other copy.
    nodes[2].kill9();
    for n in &nodes[..2] {
        for q in [&queries[3], &queries[4], &queries[5]] {
            let want = find(&single, "mdb", q);
            let got = find(n, "mdb", q);
            assert_eq!(got["docs"], want["docs"], "{q}");
        }
        // A json index read on a copy that had not built it yet.
        let q = json!({"selector": {"n": {"$gt": 0}}, "sort": [{"n": "desc"}]}).to_string();
        let want = single.post("/pdb/_partition/a/_find", &q).json();
        let got = ok_json(n.post("/pdb/_partition/a/_find", &q), "_find");
        assert_eq!(got["docs"], want["docs"]);
    }
}

/// A `_find` reads each range's json index from one copy; then every other copy builds
/// its own in the background, as views do: with the members that answered gone, the
/// copies left come to answer a query that must not build (`update: false`) with every
/// match.
#[test]
fn every_copy_builds_a_mango_index_after_a_query() {
    let (_etcd, _dirs, nodes) = three_members();
    assert_eq!(nodes[0].put("/mdb", "").status, 201);
    let docs: Vec<Value> = (0..40)
        .map(|i| json!({"_id": format!("d{i:02}"), "n": i}))
        .collect();
    let r = nodes[0].post("/mdb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let index = json!({"index": {"fields": ["n"]}, "ddoc": "by-n", "name": "n"});
    assert_eq!(nodes[1].post("/mdb/_index", &index.to_string()).status, 200);
    let q = json!({"selector": {"n": {"$gte": 0}}, "use_index": "by-n", "limit": 100});
    assert_eq!(ids(&find(&nodes[2], "mdb", &q)).len(), 40);
    // Design `_info` reads the copies that answered: built by the query itself.
    let pending = || {
        ok_json(nodes[0].get("/mdb/_design/by-n/_info"), "_info")["view_index"]["updates_pending"]
            .clone()
    };
    eventually("the answering copies' index built", || {
        pending() == json!({"minimum": 0, "preferred": 0, "total": 0})
    });

    // With the other members gone, nodes[2]'s copies answer alone, and a query that must
    // not build (`update: false`) comes to return every match: nodes[2] built its copies
    // without a client asking them (nothing else builds them now).
    nodes[0].kill9();
    nodes[1].kill9();
    let q =
        json!({"selector": {"n": {"$gte": 0}}, "use_index": "by-n", "limit": 100, "update": false});
    eventually("nodes[2]'s copies built", || {
        ids(&find(&nodes[2], "mdb", &q)).len() == 40
    });
}

#[test]
/// Only shard copies take given indexes (and `Node::find_given` only from a server
/// admin): a client naming the body member on an ordinary database is refused as any
/// unknown option.
fn only_shard_copies_take_given_indexes() {
    let single = Server::start();
    assert_eq!(single.put("/plain", "").status, 201);
    let r = single.post("/plain/_find", r#"{"selector": {}, "settee_indexes": []}"#);
    assert_eq!(r.status, 400, "{}", r.text);
}
