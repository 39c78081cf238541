//! Settee nodes joined to a cluster through a real etcd (`--cluster`): membership as
//! CouchDB's `_membership` and `_nodes` show it, liveness by lease, what still works
//! while etcd is away, and clustered databases (the coordinator's first operations).

use crate::common;

use common::cluster::*;
use common::Server;
use serde_json::{json, Value};
use settee_cluster::testing::Etcd;
use std::time::Duration;

#[test]
fn members_join_list_each_other_and_leave_when_they_die() {
    let etcd = Etcd::start(1);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let n1 = member(&etcd, "settee1@127.0.0.1", d1.path());
    let n2 = member(&etcd, "settee2@127.0.0.1", d2.path());
    let both = json!(["settee1@127.0.0.1", "settee2@127.0.0.1"]);
    eventually("both members", || {
        membership(&n1) == (both.clone(), both.clone())
            && membership(&n2) == (both.clone(), both.clone())
    });

    // CouchDB's manual procedure: a node is added to the list on any member.
    let r = n2.put("/_node/_local/_nodes/settee3@127.0.0.1", "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "settee3@127.0.0.1", "rev": "1-967a00dff5e02add41819138abb3284d"})
    );
    assert_eq!(
        r.header("etag"),
        Some("\"1-967a00dff5e02add41819138abb3284d\"")
    );
    // Listed at once on the other member too, alive nowhere yet.
    eventually("n3 listed on n1", || {
        membership(&n1).1.as_array().unwrap().len() == 3
    });
    assert_eq!(membership(&n1).0, both);
    let r = n1.get("/_node/_local/_nodes/_all_docs");
    assert_eq!(r.status, 200);
    let ids: Vec<Value> = r.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [
            "settee1@127.0.0.1",
            "settee2@127.0.0.1",
            "settee3@127.0.0.1"
        ]
    );
    assert_eq!(r.json()["total_rows"], 3);
    // As CouchDB's node-local interface answers: a row per line, no request id.
    assert!(
        r.text
            .starts_with("{\"total_rows\":3,\"offset\":0,\"rows\":[\r\n{"),
        "{}",
        r.text
    );
    assert!(r.text.ends_with("}\r\n]}\n"), "{}", r.text);
    assert_eq!(r.header("x-couch-request-id"), None);

    // CouchDB's revision rules: another PUT conflicts, a zone is an edit of the revision.
    let r = n1.put("/_node/_local/_nodes/settee3@127.0.0.1", "{}");
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json(),
        json!({"error": "conflict", "reason": "Document update conflict."})
    );
    let r = n1.put(
        "/_node/_local/_nodes/settee3@127.0.0.1",
        r#"{"_rev": "1-967a00dff5e02add41819138abb3284d", "zone": "z1"}"#,
    );
    assert_eq!(r.status, 201);
    let rev2 = r.json()["rev"].as_str().unwrap().to_string();
    assert!(rev2.starts_with("2-"), "{rev2}");
    // Read where written: another member sees it once its watch does.
    let doc = n1.get("/_node/_local/_nodes/settee3@127.0.0.1").json();
    assert_eq!(
        doc,
        json!({"_id": "settee3@127.0.0.1", "_rev": rev2, "zone": "z1"})
    );
    let r = n1.put(
        "/_node/_local/_nodes/settee3@127.0.0.1",
        &format!(r#"{{"_rev": "{rev2}", "zone": "z1", "b": 1}}"#),
    );
    assert_eq!(r.status, 201);
    let rev3 = r.json()["rev"].as_str().unwrap().to_string();
    // The members keep their order.
    assert_eq!(
        n1.get("/_node/_local/_nodes/settee3@127.0.0.1").text,
        format!("{{\"_id\":\"settee3@127.0.0.1\",\"_rev\":\"{rev3}\",\"zone\":\"z1\",\"b\":1}}\n")
    );
    assert_eq!(n2.get("/_node/_local/_nodes/nobody@h").status, 404);
    let r =
        n2.delete("/_node/_local/_nodes/settee3@127.0.0.1?rev=1-967a00dff5e02add41819138abb3284d");
    assert_eq!(r.status, 409);
    let r = n2.delete(&format!(
        "/_node/_local/_nodes/settee3@127.0.0.1?rev={rev3}"
    ));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["ok"], true);
    eventually("n3 gone from n1's list", || membership(&n1).1 == both);
    let rev4 = r.json()["rev"].as_str().unwrap().to_string();
    // CouchDB 3.5.2 gives the same edits of its `_nodes` these revisions.
    assert_eq!(rev4, "4-a13644523773ea735cbf854c02cc02fe");

    // The removed node's document stays as a deletion, as in CouchDB's `_nodes`: reads say
    // so, another DELETE finds it gone, and adding the node again without a revision
    // extends it (naming the deletion's revision conflicts).
    let node3 = "/_node/_local/_nodes/settee3@127.0.0.1";
    let gone = json!({"error": "not_found", "reason": "deleted"});
    assert_eq!(n1.get(node3).json(), gone);
    assert_eq!(n1.delete(&format!("{node3}?rev={rev4}")).json(), gone);
    assert_eq!(
        n1.put(node3, &format!(r#"{{"_rev": "{rev4}"}}"#)).status,
        409
    );
    // The list as a database: what CouchDB 3.5.2 counts of its `_nodes`.
    let info = n1.get("/_node/_local/_nodes").json();
    assert_eq!(
        (
            &info["db_name"],
            &info["doc_count"],
            &info["doc_del_count"],
            &info["update_seq"]
        ),
        (&json!("_nodes"), &json!(2), &json!(1), &json!(6))
    );
    assert_eq!(n1.get("/_node/_local/_nodes/").json(), info);
    let r = n1.put(node3, "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["rev"], "5-ea0be06d1ddb1cf26a73df3b01a19ff1");
    let r = n1.delete(&format!("{node3}?rev=5-ea0be06d1ddb1cf26a73df3b01a19ff1"));
    assert_eq!(r.status, 200, "{}", r.text);
    eventually("n3 gone again", || membership(&n1).1 == both);

    // Two members adding the same node at once: one adds it, the other conflicts, as two
    // writers of one CouchDB document would.
    let answers = std::thread::scope(|s| {
        let a = s.spawn(|| n1.put("/_node/_local/_nodes/twin@h", "{}").status);
        let b = s.spawn(|| n2.put("/_node/_local/_nodes/twin@h", "{}").status);
        let mut both = [a.join().unwrap(), b.join().unwrap()];
        both.sort();
        both
    });
    assert_eq!(answers, [201, 409]);
    let r = n1.delete("/_node/_local/_nodes/twin@h?rev=1-967a00dff5e02add41819138abb3284d");
    assert_eq!(r.status, 200, "{}", r.text);
    eventually("twin gone", || membership(&n1).1 == both);

    // couch_httpd's words for what it refuses on these documents.
    let r = n1.put("/_node/_local/_nodes/x@h", "{bad");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "invalid_json"})
        )
    );
    let r = n1.post("/_node/_local/_nodes/x@h", "{}");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "Referer header required."})
        )
    );

    // Only admins see the list, as CouchDB's node-local databases.
    assert_eq!(
        n1.anon("GET", "/_node/_local/_nodes/_all_docs", None, &[])
            .status,
        401
    );

    // `/_node/{member}/…` is that member's own answer, asked on its behalf.
    let r = n1.get("/_node/settee2@127.0.0.1");
    assert_eq!(r.json(), json!({"name": "settee2@127.0.0.1"}));
    assert_eq!(
        n1.get("/_node/settee2@127.0.0.1/_config/cluster/lease_ttl")
            .json(),
        "2"
    );
    let r = n1.put(
        "/_node/settee2%40127.0.0.1/_config/uuids/algorithm",
        r#""utc_random""#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        n2.get("/_node/_local/_config/uuids/algorithm").json(),
        "utc_random"
    );
    assert_eq!(
        n1.get("/_node/_local/_config/uuids/algorithm").json(),
        "sequential",
        "the default, unchanged"
    );
    let r = n1.get("/_node/settee2@127.0.0.1/_stats/couchdb/request_time");
    assert_eq!(r.status, 200);
    assert!(r.json()["value"].is_object(), "{}", r.text);
    let r = n1.get("/_node/nobody@h/_stats");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"error": "not_found", "reason": "no such node: nobody@h"})
    );
    // Only for admins, as on the member itself.
    assert_eq!(
        n1.anon("GET", "/_node/settee2@127.0.0.1/_config", None, &[])
            .status,
        401
    );

    // The cluster's credentials: forged ones are refused, and real ones open no database.
    let header = settee_cluster::peer::HEADER;
    let forged = n2.anon(
        "GET",
        "/_node/_local/_config",
        None,
        &[(header, "settee1@127.0.0.1 0 00")],
    );
    assert_eq!(forged.status, 401);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(n2.put("/secret", "").status, 201);
    let signed = settee_cluster::peer::sign(SECRET.1, "settee1@127.0.0.1", "GET", "/secret", now);
    let r = n2.anon("GET", "/secret", None, &[(header, &signed)]);
    assert_eq!(r.status, 401, "{}", r.text);
    let signed = settee_cluster::peer::sign(
        SECRET.1,
        "settee1@127.0.0.1",
        "GET",
        "/_node/_local/_config/cluster/lease_ttl",
        now,
    );
    let r = n2.anon(
        "GET",
        "/_node/_local/_config/cluster/lease_ttl",
        None,
        &[(header, &signed)],
    );
    assert_eq!(r.status, 200, "{}", r.text);

    // A crashed member is alive until its lease runs out; it stays listed.
    n2.kill9();
    eventually("n2 no longer alive", || {
        membership(&n1) == (json!(["settee1@127.0.0.1"]), both.clone())
    });
    assert_eq!(n1.get("/_node/settee2@127.0.0.1/_stats").status, 404);
}

#[test]
fn a_member_that_stops_leaves_at_once() {
    let etcd = Etcd::start(1);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Leases far longer than the wait below: only a revoked lease ends it in time.
    let n1 = member_with_lease(&etcd, "settee1@127.0.0.1", d1.path(), 300);
    let n2 = member_with_lease(&etcd, "settee2@127.0.0.1", d2.path(), 300);
    eventually("both alive", || {
        membership(&n1).0.as_array().unwrap().len() == 2
    });
    n2.stop();
    eventually("n2 gone", || {
        membership(&n1).0 == json!(["settee1@127.0.0.1"])
    });
}

#[test]
fn without_etcd_membership_edits_are_refused_and_documents_work() {
    let mut etcd = Etcd::start(1);
    let d1 = tempfile::tempdir().unwrap();
    let n1 = member(&etcd, "settee1@127.0.0.1", d1.path());
    // Alive, and listed by itself (which follows joining).
    eventually("n1 alive and listed", || {
        let me = json!(["settee1@127.0.0.1"]);
        membership(&n1) == (me.clone(), me)
    });
    assert_eq!(n1.put("/db", "").status, 201);
    etcd.kill(0);
    let r = n1.put("/_node/_local/_nodes/settee9@127.0.0.1", "{}");
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.json()["error"], "service unavailable");
    // Creating a database needs the cluster state ...
    let r = n1.put("/db2", "");
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.json()["error"], "service unavailable");
    // ... what does not goes on: the existing database's documents, from its copy.
    assert_eq!(membership(&n1).1, json!(["settee1@127.0.0.1"]));
    assert_eq!(n1.put("/db/doc", r#"{"a": 1}"#).status, 201);
    assert_eq!(n1.get("/db/doc").json()["a"], 1);
    etcd.restart(0);
    eventually("edits accepted again", || {
        n1.put("/_node/_local/_nodes/settee9@127.0.0.1", "{}")
            .status
            == 201
    });
}

#[test]
fn a_single_node_lists_itself_and_refuses_list_edits() {
    let s = Server::start();
    let me = s.get("/_node/_local").json()["name"].clone();
    let r = s.get("/_node/_local/_nodes/_all_docs");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"total_rows": 1, "offset": 0, "rows": [
            {"id": me, "key": me, "value": {"rev": "1-967a00dff5e02add41819138abb3284d"}}
        ]})
    );
    // As a fresh CouchDB node's `_nodes`: one document, one edit.
    let info = s.get("/_node/_local/_nodes").json();
    assert_eq!(
        (
            &info["doc_count"],
            &info["doc_del_count"],
            &info["update_seq"]
        ),
        (&json!(1), &json!(0), &json!(1))
    );
    let r = s.put("/_node/_local/_nodes/other@h", "{}");
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"], "service unavailable");
}

#[test]
fn a_member_needs_a_name_and_the_secret() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_settee"))
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--admin",
                "a:b",
                "--data-dir",
            ])
            .arg(dir.path())
            .args(args)
            .env_remove(SECRET.0)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cluster = ["--cluster", "http://127.0.0.1:9"];
    let no_secret = run(&[&cluster[..], &["--node-name", "a@h"]].concat(), &[]);
    assert!(no_secret.contains("SETTEE_CLUSTER_SECRET"), "{no_secret}");
    let no_name = run(&cluster, &[SECRET]);
    assert!(no_name.contains("--node-name"), "{no_name}");
}

#[test]
fn clustered_databases_keep_documents_on_their_copies() {
    let (etcd, dirs, mut nodes) = three_members();

    let r = nodes[0].put("/cdb?q=2&n=2", "");
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(nodes[1].put("/cdb", "").status, 412);
    for n in &nodes {
        eventually("cdb listed everywhere", || {
            n.get("/_all_dbs").json() == json!(["_replicator", "_users", "cdb"])
        });
    }
    let shards = nodes[2].get("/cdb/_shards").json();
    let ranges = shards["shards"].as_object().unwrap();
    assert_eq!(
        ranges.keys().collect::<Vec<_>>(),
        ["00000000-7fffffff", "80000000-ffffffff"]
    );
    assert!(ranges.values().all(|n| n.as_array().unwrap().len() == 2));
    let info = nodes[1].get("/cdb").json();
    assert_eq!(info["db_name"], "cdb");
    assert_eq!(info["doc_count"], 0);
    assert_eq!(info["cluster"], json!({"q": 2, "n": 2, "w": 2, "r": 2}));

    // Written on one member, read on the others; CouchDB's revision rules on every copy.
    let r = nodes[0].put("/cdb/d1", r#"{"a": 1}"#);
    assert_eq!(r.status, 201, "{}", r.text);
    let rev1 = r.json()["rev"].as_str().unwrap().to_string();
    for n in &nodes {
        assert_eq!(
            n.get("/cdb/d1").json(),
            json!({"_id": "d1", "_rev": rev1, "a": 1})
        );
    }
    assert_eq!(nodes[2].put("/cdb/d1", r#"{"a": 2}"#).status, 409);
    let r = nodes[1].post("/cdb", r#"{"_id": "d2", "b": 1}"#);
    assert_eq!(r.status, 201, "{}", r.text);
    let r = nodes[2].delete(&format!("/cdb/d1?rev={rev1}"));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        nodes[0].get("/cdb/d1").json(),
        json!({"error": "not_found", "reason": "deleted"})
    );
    for i in 0..20 {
        let r = nodes[i % 3].put(&format!("/cdb/k{i}"), "{}");
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // `w`: two copies hold it, so asking for three is accepted but not met; one is met.
    assert_eq!(nodes[0].put("/cdb/w3?w=3", "{}").status, 202);
    assert_eq!(nodes[0].put("/cdb/w1?w=1", "{}").status, 201);
    let r = nodes[1].post("/cdb/_bulk_docs?w=3", r#"{"docs": [{"_id": "wb"}]}"#);
    assert_eq!(
        (r.status, &r.json()[0]["accepted"]),
        (202, &json!(true)),
        "{}",
        r.text
    );
    assert_eq!(nodes[2].get("/cdb/w3?r=2").json()["_id"], "w3");
    // Local documents (replication checkpoints) on every copy of their range.
    let r = nodes[0].put("/cdb/_local/cp", r#"{"x": 1}"#);
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "_local/cp", "rev": "0-1"})
    );
    assert_eq!(
        nodes[2].get("/cdb/_local/cp").json(),
        json!({"_id": "_local/cp", "_rev": "0-1", "x": 1})
    );
    let r = nodes[1].put("/cdb/_local/cp", r#"{"_rev": "0-1", "x": 2}"#);
    assert_eq!(r.json()["rev"], "0-2", "{}", r.text);
    assert_eq!(nodes[0].get("/cdb/_local/cp").json()["x"], 2);
    // As CouchDB: a local document's new revision is the one named plus one, never a
    // conflict.
    let r = nodes[1].put("/cdb/_local/cp", r#"{"_rev": "0-1", "x": 3}"#);
    assert_eq!(
        (r.status, &r.json()["rev"]),
        (201, &json!("0-2")),
        "{}",
        r.text
    );
    let r = nodes[2].delete("/cdb/_local/cp?rev=0-2");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "_local/cp", "rev": "0-0"})
    );
    assert_eq!(nodes[0].get("/cdb/_local/cp").status, 404);
    for id in ["w3", "w1", "wb"] {
        let rev = nodes[0].get(&format!("/cdb/{id}")).json()["_rev"].clone();
        let r = nodes[0].delete(&format!("/cdb/{id}?rev={}", rev.as_str().unwrap()));
        assert_eq!(r.status, 200, "{}", r.text);
    }
    // `_bulk_docs`: each range's documents to its copies, one answer per document in
    // request order; a conflict is that document's entry.
    let mut body: Vec<Value> = (0..10)
        .map(|i| json!({"_id": format!("b{i}"), "i": i}))
        .collect();
    body.push(json!({"_id": "d2", "b": 2}));
    let r = nodes[1].post("/cdb/_bulk_docs", &json!({ "docs": body }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let entries = r.json();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 11);
    for (i, e) in entries[..10].iter().enumerate() {
        assert_eq!(
            (&e["ok"], &e["id"]),
            (&json!(true), &json!(format!("b{i}"))),
            "{e}"
        );
        let doc = nodes[2].get(&format!("/cdb/b{i}")).json();
        assert_eq!((&doc["_rev"], &doc["i"]), (&e["rev"], &json!(i)));
    }
    assert_eq!(
        entries[10],
        json!({"id": "d2", "error": "conflict", "reason": "Document update conflict."})
    );
    let info = nodes[2].get("/cdb").json();
    assert_eq!(
        (&info["doc_count"], &info["doc_del_count"]),
        (&json!(31), &json!(4))
    );
    // Only admins, as the copies' default security has it; a design document no copy
    // has is CouchDB's 404, not an answer about a database this member holds no whole
    // copy of.
    assert_eq!(nodes[0].anon("GET", "/cdb/d2", None, &[]).status, 401);
    let r = nodes[0].get("/cdb/_design/d/_info");
    assert_eq!(
        (r.status, r.json()),
        (404, json!({"error": "not_found", "reason": "missing"}))
    );

    // A member down: a write to its range reaches one copy of two (202), reads still
    // answer, and once it is back a read repairs its copy.
    let id = (0..)
        .map(|i| format!("x{i}"))
        .find(|id| {
            let s = nodes[0].get(&format!("/cdb/_shards/{id}")).json();
            s["nodes"].as_array().unwrap().iter().any(|n| n == NAMES[2])
        })
        .unwrap();
    // A second document of that range, deleted while settee3 is down.
    let gone = (0..)
        .map(|i| format!("y{i}"))
        .find(|g| {
            let s = nodes[0].get(&format!("/cdb/_shards/{g}")).json();
            s["range"] == nodes[0].get(&format!("/cdb/_shards/{id}")).json()["range"]
        })
        .unwrap();
    let r = nodes[0].put(&format!("/cdb/{gone}"), "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    let gone_rev = r.json()["rev"].as_str().unwrap().to_string();
    let holders = nodes[0].get(&format!("/cdb/_shards/{id}")).json()["nodes"].clone();
    let other = (0..2)
        .find(|i| holders.as_array().unwrap().iter().any(|n| n == NAMES[*i]))
        .expect("the range's other copy");
    let reader = 1 - other;
    nodes[2].kill9();
    eventually("settee3 down", || {
        membership(&nodes[0]).0.as_array().unwrap().len() == 2
    });
    let r = nodes[reader].put(&format!("/cdb/{id}"), r#"{"late": true}"#);
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["ok"], true);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    assert_eq!(nodes[other].get(&format!("/cdb/{id}")).json()["_rev"], rev);
    let r = nodes[reader].delete(&format!("/cdb/{gone}?rev={gone_rev}"));
    assert_eq!(r.status, 202, "{}", r.text);
    // In `_bulk_docs`, the document of settee3's range is accepted, and the request 202.
    let body = json!({"docs": [{"_id": format!("{id}-bulk")}, {"_id": id, "_rev": rev, "x": 1}]});
    let r = nodes[reader].post("/cdb/_bulk_docs", &body.to_string());
    assert_eq!(r.status, 202, "{}", r.text);
    let second = &r.json()[1];
    assert_eq!(
        (&second["id"], &second["accepted"]),
        (&json!(id), &json!(true)),
        "{}",
        r.text
    );
    let rev = second["rev"].as_str().unwrap().to_string();
    // A database whose copies cannot all be made (settee3 is listed, not running) is
    // accepted, as CouchDB answers; so is its deletion.
    let r = nodes[reader].put("/part?q=1&n=3", "");
    assert_eq!(
        (r.status, r.json()),
        (202, json!({"ok": true})),
        "{}",
        r.text
    );
    assert!(r.header("location").is_some_and(|l| l.ends_with("/part")));
    let r = nodes[reader].delete("/part");
    assert_eq!(
        (r.status, r.json()),
        (202, json!({"ok": true})),
        "{}",
        r.text
    );
    nodes[2] = member(&etcd, NAMES[2], dirs[2].path());
    eventually("settee3 back", || {
        membership(&nodes[0]).0.as_array().unwrap().len() == 3
    });
    // One copy of two had it: the read repairs settee3's before answering. With the other
    // copy's member gone, settee3's copy alone answers, repaired.
    assert_eq!(nodes[reader].get(&format!("/cdb/{id}")).json()["_rev"], rev);
    // settee3's copy still has the live revision; the deletion on the other copy wins,
    // and is repaired onto settee3's.
    let deleted = json!({"error": "not_found", "reason": "deleted"});
    assert_eq!(nodes[reader].get(&format!("/cdb/{gone}")).json(), deleted);
    nodes[other].kill9();
    eventually("the other copy down", || {
        membership(&nodes[2]).0.as_array().unwrap().len() == 2
    });
    let r = nodes[reader].get(&format!("/cdb/{id}"));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"_id": id, "_rev": rev, "x": 1}));
    assert_eq!(nodes[reader].get(&format!("/cdb/{gone}")).json(), deleted);
    nodes[other] = member(&etcd, NAMES[other], dirs[other].path());
    eventually("all back", || {
        membership(&nodes[2]).0.as_array().unwrap().len() == 3
    });

    let r = nodes[1].delete("/cdb");
    assert_eq!(r.status, 200, "{}", r.text);
    for n in &nodes {
        eventually("cdb gone everywhere", || {
            n.get("/_all_dbs").json() == json!(["_replicator", "_users"])
        });
        assert_eq!(n.get("/cdb").status, 404);
    }
}

/// The rows' ids of an `_all_docs` answer.
fn row_ids(v: &Value) -> Vec<String> {
    (v["rows"].as_array().unwrap().iter())
        .map(|r| r["id"].as_str().unwrap_or("-").to_string())
        .collect()
}

/// Reads of a clustered database across its ranges (`_all_docs`, `_design_docs`,
/// `_bulk_get`, `_revs_diff`, `_missing_revs`) and its security object, kept on every copy
/// and used to authorize; with a member down, the other copies of its ranges answer.
#[test]
fn clustered_databases_list_and_guard_documents_across_ranges() {
    let (_etcd, _dirs, nodes) = three_members();
    let r = nodes[0].put("/ldb?q=2&n=2", "");
    assert_eq!(r.status, 201, "{}", r.text);

    // Ids on both ranges, a design document, a deletion.
    let mut ids: Vec<String> = (0..12).map(|i| format!("d{i:02}")).collect();
    ids.extend(["A".to_string(), "_design/v".to_string(), "é".to_string()]);
    let docs: Vec<Value> = ids.iter().map(|id| json!({"_id": id, "n": id})).collect();
    let r = nodes[1].post("/ldb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let revs: Vec<String> = (r.json().as_array().unwrap().iter())
        .map(|e| e["rev"].as_str().unwrap().to_string())
        .collect();
    let rev_of = |id: &str| revs[ids.iter().position(|i| i == id).unwrap()].clone();
    let r = nodes[2].delete(&format!("/ldb/d03?rev={}", rev_of("d03")));
    assert_eq!(r.status, 200, "{}", r.text);
    let mut live: Vec<String> = ids.iter().filter(|i| *i != "d03").cloned().collect();
    live.sort();
    let ranges: Vec<Value> = (ids.iter())
        .map(|id| nodes[0].get(&format!("/ldb/_shards/{id}")).json()["range"].clone())
        .collect();
    assert!(
        ranges.iter().any(|r| *r != ranges[0]),
        "both ranges hold ids"
    );

    // `_all_docs`: every range's rows in id order (raw bytes), counted across ranges, in
    // CouchDB's framing.
    let check_listing = |via: &Server| {
        let r = via.get("/ldb/_all_docs");
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(
            r.text
                .starts_with("{\"total_rows\":14,\"offset\":0,\"rows\":[\r\n{\"id\":\"A\""),
            "{}",
            r.text
        );
        assert!(r.text.ends_with("}\r\n]}\n"), "{}", r.text);
        assert_eq!(row_ids(&r.json()), live);
        assert_eq!(
            r.json()["rows"][0],
            json!({"id": "A", "key": "A", "value": {"rev": rev_of("A")}})
        );
        // skip and limit over the merged rows; offset as CouchDB's coordinator counts it.
        let v = via.get("/ldb/_all_docs?skip=2&limit=3").json();
        assert_eq!((&v["total_rows"], &v["offset"]), (&json!(14), &json!(2)));
        assert_eq!(row_ids(&v), live[2..5]);
        let v = via
            .get("/ldb/_all_docs?start_key=%22d05%22&end_key=%22d09%22&inclusive_end=false&skip=1")
            .json();
        assert_eq!(row_ids(&v), ["d06", "d07", "d08"]);
        let before = live.iter().filter(|i| i.as_str() < "d05").count();
        assert_eq!(v["offset"], json!(before + 1));
        let v = via
            .get("/ldb/_all_docs?descending=true&start_key=%22d05%22&limit=2&skip=1")
            .json();
        assert_eq!(row_ids(&v), ["d04", "d02"]);
        let after = live.iter().filter(|i| i.as_str() > "d05").count();
        assert_eq!(v["offset"], json!(after + 1));
        // A non-string end key: no id sorts below it.
        let v = via.get("/ldb/_all_docs?end_key=1").json();
        assert_eq!((row_ids(&v).len(), &v["total_rows"]), (0, &json!(14)));
        let v = via
            .get("/ldb/_all_docs?include_docs=true&conflicts=true&update_seq=true&start_key=%22d10%22&limit=1")
            .json();
        assert_eq!(
            v["rows"][0]["doc"],
            json!({"_id": "d10", "_rev": rev_of("d10"), "n": "d10"})
        );
        let seq = v["update_seq"].as_str().unwrap();
        assert!(
            seq.split_once('-').unwrap().0.parse::<u64>().unwrap() >= 16,
            "{seq}"
        );
        // The offset counts every id before `_design/` ("A"), as CouchDB's does.
        let v = via.get("/ldb/_design_docs?include_docs=true").json();
        assert_eq!((&v["total_rows"], &v["offset"]), (&json!(1), &json!(1)));
        assert_eq!(row_ids(&v), ["_design/v"]);

        // With keys: each key's row from its range, in the keys' order, as CouchDB's
        // (a deletion shows as such, a missing id as an error row).
        let keys = json!({"keys": ["d07", "d03", "zz", "A", "d07"]});
        let r = via.post(
            "/ldb/_all_docs?include_docs=true&update_seq=true",
            &keys.to_string(),
        );
        assert_eq!(r.status, 200, "{}", r.text);
        let v = r.json();
        assert_eq!(
            (&v["total_rows"], &v["offset"], &v["update_seq"]),
            (&json!(14), &Value::Null, &Value::Null)
        );
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0]["doc"]["n"], "d07");
        assert_eq!(rows[4], rows[0]);
        assert_eq!(rows[1]["value"]["deleted"], true);
        assert_eq!(rows[1]["doc"], Value::Null);
        assert_eq!(rows[2], json!({"key": "zz", "error": "not_found"}));
        assert_eq!(rows[3]["id"], "A");
        let v = via
            .post(
                "/ldb/_all_docs?descending=true&skip=1&limit=2",
                &keys.to_string(),
            )
            .json();
        assert_eq!(row_ids(&v), ["A", "-"]);
        let v = via
            .get("/ldb/_all_docs?keys=%5B%22d11%22%2C%22d00%22%5D")
            .json();
        assert_eq!(row_ids(&v), ["d11", "d00"]);
    };
    check_listing(&nodes[0]);

    // `_revs_diff` and `_missing_revs`: each id's answer from its range, in request order.
    let asked = json!({"d01": [rev_of("d01"), "2-x"], "nope": ["1-y"], "d02": [rev_of("d02")],
                       "A": ["5-z"]});
    let check_revs = |via: &Server| {
        let r = via.post("/ldb/_revs_diff", &asked.to_string());
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.text.trim_end(),
            json!({"d01": {"missing": ["2-x"], "possible_ancestors": [rev_of("d01")]},
                   "nope": {"missing": ["1-y"]},
                   "A": {"missing": ["5-z"], "possible_ancestors": [rev_of("A")]}})
            .to_string()
        );
        let r = via.post("/ldb/_missing_revs", &asked.to_string());
        assert_eq!(
            r.json(),
            json!({"missing_revs": {"d01": ["2-x"], "nope": ["1-y"], "A": ["5-z"]}})
        );
        // `_bulk_get`: every item answered in order, found revisions or CouchDB's errors.
        let items = json!({"docs": [{"id": "d04"}, {"id": "A", "rev": rev_of("A")},
            {"id": "nope"}, {"id": "d04", "rev": "9-z"}, {"id": "d03"}, {"rev": "1-a"}]});
        let r = via.post("/ldb/_bulk_get", &items.to_string());
        assert_eq!(r.status, 200, "{}", r.text);
        let v = r.json();
        let results = v["results"].as_array().unwrap();
        assert_eq!(
            results[0],
            json!({"id": "d04", "docs": [{"ok": {"_id": "d04", "_rev": rev_of("d04"), "n": "d04"}}]})
        );
        assert_eq!(results[1]["docs"][0]["ok"]["_rev"], json!(rev_of("A")));
        assert_eq!(
            results[2],
            json!({"id": "nope", "docs": [{"error": {"rev": "undefined", "reason": "missing",
                "id": "nope", "error": "not_found"}}]})
        );
        assert_eq!(
            results[3],
            json!({"id": "d04", "docs": [{"error": {"rev": "9-z", "reason": "missing",
                "id": "d04", "error": "not_found"}}]})
        );
        assert_eq!(results[4]["docs"][0]["ok"]["_deleted"], true);
        assert_eq!(
            results[5],
            json!({"id": null, "docs": [{"error": {"rev": null, "reason": "document id missed",
                "id": null, "error": "bad_request"}}]})
        );
        let r = via.post("/ldb/_bulk_get?revs=true", r#"{"docs": [{"id": "d05"}]}"#);
        let doc = &r.json()["results"][0]["docs"][0]["ok"];
        assert_eq!(doc["_revisions"]["start"], 1, "{}", r.text);
    };
    check_revs(&nodes[1]);

    // The security object lives on every copy: set through one member, read and enforced
    // through the others.
    let admin_only = json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}});
    assert_eq!(nodes[2].get("/ldb/_security").json(), admin_only);
    add_user_everywhere(&nodes.iter().collect::<Vec<_>>(), "bob", "pw");
    let bob = ("bob", "pw");
    assert_eq!(nodes[0].as_user(bob, "GET", "/ldb/d01", None).status, 403);
    let members = json!({"members": {"names": ["bob"]}});
    let r = nodes[1].put("/ldb/_security", &members.to_string());
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"ok": true})),
        "{}",
        r.text
    );
    for n in &nodes {
        assert_eq!(n.get("/ldb/_security").json(), members);
    }
    eventually("bob a member through settee1", || {
        nodes[0].as_user(bob, "GET", "/ldb/d01", None).status == 200
    });
    let r = nodes[0].as_user(bob, "GET", "/ldb/_all_docs?limit=1", None);
    assert_eq!(r.status, 200, "{}", r.text);
    // A member is no admin: the security object is not bob's to change.
    let r = nodes[2].as_user(bob, "PUT", "/ldb/_security", Some("{}"));
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        nodes[2].anon("GET", "/ldb/_all_docs", None, &[]).status,
        401
    );

    // A member down: the other copy of each of its ranges answers. It is the first copy
    // of some range, asked through a member holding no copy of that range, so that the
    // coordinator has to pass over it.
    let shards = nodes[0].get("/ldb/_shards").json();
    let (down, via) = (shards["shards"].as_object().unwrap().values())
        .find_map(|copies| {
            let copies: Vec<&str> = copies
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            let first = NAMES.iter().position(|n| *n == copies[0])?;
            let via = NAMES.iter().position(|n| !copies.contains(n))?;
            Some((first, via))
        })
        .unwrap();
    nodes[down].kill9();
    eventually("a member down", || {
        membership(&nodes[via]).0.as_array().unwrap().len() == 2
    });
    check_listing(&nodes[via]);
    check_revs(&nodes[via]);
    assert_eq!(nodes[via].get("/ldb/_security").json(), members);
    assert_eq!(
        nodes[via]
            .as_user(bob, "GET", "/ldb/_all_docs", None)
            .status,
        200
    );
    // Its copies missing, the write is done only if a majority of the copies took it.
    let held = (shards["shards"].as_object().unwrap().values())
        .filter(|c| c.as_array().unwrap().iter().any(|n| n == NAMES[down]))
        .count();
    let r = nodes[via].put("/ldb/_security", &admin_only.to_string());
    if held == 1 {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(nodes[via].get("/ldb/_security").json(), admin_only);
    } else {
        assert_eq!(
            (r.status, r.json()),
            (500, json!({"error": "error", "reason": "no_majority"}))
        );
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A copy's database info as its member holds it (a server admin reads a copy directly).
fn copy_info(n: &Server, copy: &str) -> Value {
    n.get(&format!("/{}", copy.replace('/', "%2F"))).json()
}

/// A feed read on one member's copy, resumed once that member is gone: the range
/// resumes on another copy where that copy's pushes to the lost one vouch for the
/// place (its internal replication checkpoint records where the lost copy stood), as
/// CouchDB's `mem3_rep:find_source_seq` — not from 0.
#[test]
fn a_feed_resumes_on_another_copy_where_internal_replication_vouches() {
    let (_etcd, _dirs, nodes) = three_members();
    let t0 = now_secs();
    let r = nodes[0].put("/fdb?q=1&n=3", "");
    assert_eq!(r.status, 201, "{}", r.text);
    let copy = (t0..=now_secs())
        .map(|t| format!("shards/00000000-ffffffff/fdb.{t}"))
        .find(|c| copy_info(&nodes[1], c)["doc_count"] == 0)
        .expect("settee2's copy");
    let docs: Vec<Value> = (0..30).map(|i| json!({"_id": format!("f{i}")})).collect();
    let r = nodes[0].post("/fdb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    // settee1 reads its own copy.
    let r = nodes[0].get("/fdb/_changes").json();
    assert_eq!(r["results"].as_array().unwrap().len(), 30);
    let since = r["last_seq"].as_str().unwrap().to_string();
    // Every push between settee2's copy and the others checkpointed past the writes.
    let path = |id: &str| format!("/{}/{id}", copy.replace('/', "%2F"));
    eventually(
        "settee2's pushes checkpointed with their targets' places",
        || {
            let locals = nodes[1].get(&path("_local_docs?include_docs=true")).json();
            let syncs: Vec<&Value> = (locals["rows"].as_array().unwrap().iter())
                .filter(|r| r["id"].as_str().unwrap().starts_with("_local/shard-sync-"))
                .collect();
            syncs.len() == 4
                && syncs.iter().all(|r| {
                    let t = &r["doc"]["history"][0]["target_seq"];
                    t.as_str().is_some_and(|t| t.starts_with("30-"))
                })
        },
    );

    nodes[0].kill9();
    eventually("settee1 down", || {
        membership(&nodes[1]).0.as_array().unwrap().len() == 2
    });
    assert_eq!(nodes[1].put("/fdb/late", "{}").status, 201);
    assert_eq!(changes_ids_since(&nodes[1], "fdb", &since), ["late"]);
}

#[test]
fn a_copy_that_missed_writes_catches_up_by_internal_replication() {
    let (etcd, dirs, mut nodes) = three_members();
    // One range, a copy on every member.
    let t0 = now_secs();
    let r = nodes[0].put("/idb?q=1&n=3", "");
    assert_eq!(r.status, 201, "{}", r.text);
    let copy = (t0..=now_secs())
        .map(|t| format!("shards/00000000-ffffffff/idb.{t}"))
        .find(|c| copy_info(&nodes[2], c)["doc_count"] == 0)
        .expect("settee3's copy");

    nodes[2].kill9();
    eventually("settee3 down", || {
        membership(&nodes[0]).0.as_array().unwrap().len() == 2
    });
    let docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("m{i}"), "i": i}))
        .collect();
    let r = nodes[0].post("/idb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rev0 = r.json()[0]["rev"].as_str().unwrap().to_string();
    let r = nodes[1].delete(&format!("/idb/m0?rev={rev0}"));
    assert_eq!(r.status, 200, "{}", r.text);

    // Back, settee3's copy catches up by itself: no read goes through a coordinator.
    nodes[2] = member(&etcd, NAMES[2], dirs[2].path());
    eventually("settee3's copy caught up", || {
        let info = copy_info(&nodes[2], &copy);
        info["doc_count"] == 29 && info["doc_del_count"] == 1
    });
    // The members that pushed to it leave a checkpoint there (written after the batch it
    // checkpoints, so it may come a moment after the documents).
    let checkpoints = |s: &Server| -> Vec<Value> {
        let locals = s
            .get(&format!("/{}/_local_docs", copy.replace('/', "%2F")))
            .json();
        (locals["rows"].as_array().unwrap().iter())
            .filter(|r| r["id"].as_str().unwrap().starts_with("_local/shard-sync-"))
            .cloned()
            .collect()
    };
    eventually("a checkpoint on settee3's copy", || {
        !checkpoints(&nodes[2]).is_empty()
    });
    let syncs = checkpoints(&nodes[2]);

    // Down again and back: the pushes resume from their checkpoints, not from zero.
    nodes[2].kill9();
    eventually("settee3 down again", || {
        membership(&nodes[0]).0.as_array().unwrap().len() == 2
    });
    for i in 30..35 {
        assert_eq!(nodes[0].put(&format!("/idb/m{i}"), "{}").status, 201);
    }
    nodes[2] = member(&etcd, NAMES[2], dirs[2].path());
    eventually("settee3's copy caught up again", || {
        copy_info(&nodes[2], &copy)["doc_count"] == 34
    });
    // A push of the second round started from the first one's checkpoint.
    eventually("a push resumed from its checkpoint", || {
        syncs.iter().any(|row| {
            let id = row["id"].as_str().unwrap();
            let log = nodes[2]
                .get(&format!("/{}/{id}", copy.replace('/', "%2F")))
                .json();
            let history = log["history"].as_array().unwrap();
            history.len() >= 2 && history[0]["start_last_seq"] != json!(0)
        })
    });

    // A clustered database as a replication target: the replicator's checkpoints are
    // local documents on its copies, so a second run finds nothing to do.
    let single = Server::start();
    single.create_db("src");
    for i in 0..20 {
        assert_eq!(single.put(&format!("/src/s{i}"), "{}").status, 201);
    }
    let (user, pass) = common::ADMIN;
    let target = format!("http://{user}:{pass}@{}/idb", nodes[0].addr());
    let body = json!({"source": "src", "target": target}).to_string();
    let r = single.post("/_replicate", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["history"][0]["docs_written"], 20, "{}", r.text);
    let r = single.post("/_replicate", &body);
    assert_eq!(r.json()["no_changes"], true, "{}", r.text);
    assert_eq!(nodes[1].get("/idb/s7").status, 200);
}

/// A feed's rows: (id, seq).
fn feed_rows(v: &Value) -> Vec<(String, String)> {
    let rows = v["results"].as_array().unwrap_or_else(|| panic!("{v}"));
    rows.iter()
        .map(|r| {
            let seq = r["seq"].as_str().unwrap_or_else(|| panic!("{r}"));
            (r["id"].as_str().unwrap().to_string(), seq.to_string())
        })
        .collect()
}

fn ids_of(rows: &[(String, String)]) -> Vec<String> {
    rows.iter().map(|(id, _)| id.clone()).collect()
}

#[test]
fn clustered_changes_resume_on_any_member_and_feed_replication() {
    let (_etcd, _dirs, nodes) = three_members();
    assert_eq!(nodes[0].put("/feed?q=2&n=3", "").status, 201);
    let docs: Vec<Value> = (0..12)
        .map(|i| json!({"_id": format!("c{i:02}")}))
        .collect();
    let r = nodes[0].post("/feed/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()[3]["rev"].as_str().unwrap().to_string();
    assert_eq!(nodes[0].delete(&format!("/feed/c03?rev={rev}")).status, 200);

    // Every document once, each row's sequence a vector whose `N-` (the sum of its
    // ranges' places) grows row by row, to the 13 updates made.
    let all = nodes[1].get("/feed/_changes").json();
    let rows = feed_rows(&all);
    let mut ids = ids_of(&rows);
    ids.sort();
    let expected: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    assert_eq!(ids, expected, "{all}");
    let sums: Vec<u64> = (rows.iter())
        .map(|(_, seq)| seq.split('-').next().unwrap().parse().unwrap())
        .collect();
    assert!(sums.windows(2).all(|w| w[0] < w[1]), "{sums:?}");
    assert_eq!(all["pending"], 0);
    assert!(
        all["last_seq"].as_str().unwrap().starts_with("13-"),
        "{all}"
    );
    let deleted = &all["results"].as_array().unwrap()
        [ids_of(&rows).iter().position(|id| id == "c03").unwrap()];
    assert_eq!(deleted["deleted"], true, "{deleted}");

    // Resumed from any row on another member: exactly the rows after it.
    let r = nodes[2]
        .get(&format!("/feed/_changes?since={}", rows[4].1))
        .json();
    assert_eq!(ids_of(&feed_rows(&r)), ids_of(&rows[5..]), "{r}");
    assert_eq!(r["last_seq"], all["last_seq"]);

    // A limit leaves the rest pending, and its last_seq resumes there.
    let page = nodes[0].get("/feed/_changes?limit=5").json();
    assert_eq!(feed_rows(&page).len(), 5, "{page}");
    assert_eq!(page["pending"], 7, "{page}");
    let rest = nodes[1]
        .get(&format!(
            "/feed/_changes?since={}",
            page["last_seq"].as_str().unwrap()
        ))
        .json();
    let mut both = ids_of(&feed_rows(&page));
    both.extend(ids_of(&feed_rows(&rest)));
    both.sort();
    assert_eq!(both, expected);

    // `since=now`, then one write: a feed from there has that write alone.
    let now = nodes[2].get("/feed/_changes?since=now").json();
    assert_eq!(feed_rows(&now), vec![], "{now}");
    let now_seq = now["last_seq"].as_str().unwrap().to_string();
    assert_eq!(nodes[2].put("/feed/late", "{}").status, 201);
    let r = nodes[0]
        .get(&format!("/feed/_changes?since={now_seq}"))
        .json();
    assert_eq!(ids_of(&feed_rows(&r)), vec!["late"], "{r}");

    // A longpoll waits for the next write on any range.
    let since = r["last_seq"].as_str().unwrap().to_string();
    let path = format!("/feed/_changes?feed=longpoll&timeout=20000&since={since}");
    let r = std::thread::scope(|scope| {
        let poll = scope.spawn(|| nodes[1].get(&path).json());
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(nodes[0].put("/feed/woke", "{}").status, 201);
        poll.join().unwrap()
    });
    assert_eq!(ids_of(&feed_rows(&r)), vec!["woke"], "{r}");

    // Built-in filters go to the copies; filter functions' design documents are read
    // first (see cluster_design.rs).
    let r = nodes[2].post(
        "/feed/_changes?filter=_doc_ids&include_docs=true",
        r#"{"doc_ids": ["c01", "c09", "none"]}"#,
    );
    let mut ids = ids_of(&feed_rows(&r.json()));
    ids.sort();
    assert_eq!(ids, vec!["c01", "c09"], "{}", r.text);
    assert_eq!(
        r.json()["results"][0]["doc"]["_id"],
        r.json()["results"][0]["id"]
    );
    let r = nodes[2].get("/feed/_changes?filter=d/f");
    assert_eq!((r.status, &r.json()["reason"]), (404, &json!("missing")));

    // A clustered database as a replication source (and target): a second run resumes
    // from its checkpoint and finds nothing to do.
    let (user, pass) = common::ADMIN;
    let source = format!("http://{user}:{pass}@{}/feed", nodes[0].addr());
    let target = format!("http://{user}:{pass}@{}/feed2", nodes[1].addr());
    let body = json!({"source": source, "target": target, "create_target": true}).to_string();
    let r = nodes[0].post("/_replicate", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["history"][0]["docs_written"], 14, "{}", r.text);
    let info = nodes[2].get("/feed2").json();
    assert_eq!(
        (info["doc_count"].clone(), info["doc_del_count"].clone()),
        (json!(13), json!(1))
    );
    let r = nodes[0].post("/_replicate", &body);
    assert_eq!(r.json()["no_changes"], true, "{}", r.text);
    // Its checkpoint is a local document of the copies, listed once as CouchDB lists them.
    let r = nodes[2].get("/feed2/_local_docs").json();
    assert_eq!(
        (r["total_rows"].clone(), r["offset"].clone()),
        (Value::Null, Value::Null)
    );
    let checkpoints: Vec<&Value> = (r["rows"].as_array().unwrap().iter())
        .filter(|row| {
            !row["id"]
                .as_str()
                .unwrap()
                .starts_with("_local/shard-sync-")
        })
        .collect();
    assert_eq!(checkpoints.len(), 1, "{r}");

    // A document with an attachment, read by `open_revs` from every copy, and replicated
    // out of the cluster with its attachment.
    let att =
        json!({"_attachments": {"a.txt": {"content_type": "text/plain", "data": "aGVsbG8="}}});
    let r = nodes[0].put("/feed/with_att", &att.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].clone();
    let r = nodes[2]
        .get("/feed/with_att?open_revs=all&attachments=true")
        .json();
    assert_eq!(r[0]["ok"]["_rev"], rev, "{r}");
    assert_eq!(
        r[0]["ok"]["_attachments"]["a.txt"]["data"], "aGVsbG8=",
        "{r}"
    );
    let r = nodes[2]
        .get(&format!(
            "/feed/with_att?open_revs=%5B%22{}%22,%229-x%22%5D",
            rev.as_str().unwrap()
        ))
        .json();
    assert_eq!(
        (r[0]["ok"]["_rev"].clone(), r[1].clone()),
        (rev, json!({"missing": "9-x"}))
    );
    let single = Server::start();
    let out = format!("http://{user}:{pass}@{}/out", single.addr());
    let body = json!({"source": source, "target": out, "create_target": true}).to_string();
    let r = single.post("/_replicate", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(single.get("/out").json()["doc_count"], 14, "{}", r.text);
    let r = single.req_bytes("GET", "/out/with_att/a.txt", Vec::new(), &[]);
    assert_eq!(r.body, b"hello");
    // Read through the cluster as a node serves its own: whole, a range, gzip as stored.
    let r = nodes[1].raw("GET", "/feed/with_att/a.txt", &[]);
    assert_eq!((r.status, r.text.as_str()), (200, "hello"));
    let mine = single.raw("GET", "/out/with_att/a.txt", &[]);
    assert_eq!(r.header("etag"), mine.header("etag"));
    // Content stored compressed: a range gets the whole of it, as from a node's own.
    let range = [("Range", "bytes=1-3")];
    let r = nodes[2].raw("GET", "/feed/with_att/a.txt", &range);
    let mine = single.raw("GET", "/out/with_att/a.txt", &range);
    assert_eq!((r.status, &r.text), (mine.status, &mine.text));
    let r = nodes[0].raw(
        "GET",
        "/feed/with_att/a.txt",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(nodes[0].get("/feed/with_att/none.txt").status, 404);

    // With the member whose copies a sequence names down, a feed from it reads other
    // copies from their start: rows may come again, none is missed.
    nodes[1].kill9();
    eventually("settee2 down", || {
        membership(&nodes[0]).0.as_array().unwrap().len() == 2
    });
    let r = nodes[2]
        .get(&format!("/feed/_changes?since={}", rows[4].1))
        .json();
    let seen = ids_of(&feed_rows(&r));
    for id in ids_of(&rows[5..])
        .iter()
        .chain([&"late".into(), &"woke".into()])
    {
        assert!(seen.contains(id), "{id} missing: {r}");
    }
}

#[test]
fn clustered_views_merge_rows_and_reduce_again() {
    let (_etcd, _dirs, nodes) = three_members();
    assert_eq!(nodes[0].put("/vdb?q=2&n=2", "").status, 201);
    let docs: Vec<Value> = (0..20)
        .map(|i| json!({"_id": format!("v{i:02}"), "n": i, "odd": i % 2 == 1}))
        .collect();
    let r = nodes[0].post("/vdb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let ddoc = json!({"views": {
        "by_n": {"map": "function(d) { if (d.n !== undefined) emit(d.n, d._id); }"},
        "sum": {"map": "function(d) { emit(d.odd, d.n); }", "reduce": "_sum"},
        "stats": {"map": "function(d) { emit([d.odd, d.n], d.n); }", "reduce": "_stats"},
        "js": {"map": "function(d) { emit(d.odd, d.n); }",
               "reduce": "function(k, v, re) { return sum(v); }"},
        "distinct": {"map": "function(d) { emit(d.n, 1); }", "reduce": "_approx_count_distinct"}
    }});
    assert_eq!(
        nodes[1].put("/vdb/_design/d", &ddoc.to_string()).status,
        201
    );

    // Map rows from both ranges in key order, on every member, paged here.
    for node in &nodes {
        let r = node.get("/vdb/_design/d/_view/by_n?skip=3&limit=4").json();
        let keys: Vec<&Value> = r["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["key"])
            .collect();
        assert_eq!(keys, [&json!(3), &json!(4), &json!(5), &json!(6)], "{r}");
        assert_eq!(
            (r["total_rows"].clone(), r["offset"].clone()),
            (json!(20), json!(3))
        );
    }
    let r = nodes[2]
        .get("/vdb/_design/d/_view/by_n?descending=true&limit=2&include_docs=true")
        .json();
    assert_eq!(r["rows"][0]["key"], 19, "{r}");
    assert_eq!(r["rows"][1]["doc"]["_id"], "v18", "{r}");
    let r = nodes[0]
        .post("/vdb/_design/d/_view/by_n", r#"{"keys": [7, 100, 2]}"#)
        .json();
    let ids: Vec<&Value> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(ids, [&json!("v07"), &json!("v02")], "{r}");
    let r = nodes[0]
        .get("/vdb/_design/d/_view/by_n?start_key=17&update_seq=true")
        .json();
    assert_eq!(r["rows"].as_array().unwrap().len(), 3, "{r}");
    assert!(r["update_seq"].as_str().unwrap().starts_with("21-"), "{r}");

    // Reductions of both ranges reduced again, whole or by group.
    let r = nodes[1].get("/vdb/_design/d/_view/sum").json();
    assert_eq!(r, json!({"rows": [{"key": null, "value": 190}]}));
    let r = nodes[2].get("/vdb/_design/d/_view/sum?group=true").json();
    assert_eq!(
        r["rows"],
        json!([{"key": false, "value": 90}, {"key": true, "value": 100}])
    );
    let r = nodes[0]
        .get("/vdb/_design/d/_view/js?group=true&skip=1")
        .json();
    assert_eq!(r["rows"], json!([{"key": true, "value": 100}]), "{r}");
    let r = nodes[0]
        .get("/vdb/_design/d/_view/stats?group_level=1")
        .json();
    assert_eq!(
        r["rows"][1],
        json!({"key": [true], "value": {"sum": 100, "count": 10, "min": 1, "max": 19, "sumsqr": 1330}}),
        "{r}"
    );
    let r = nodes[0]
        .get("/vdb/_design/d/_view/sum?reduce=false&limit=1")
        .json();
    assert_eq!(r["rows"][0]["key"], false, "{r}");
    // `_approx_count_distinct` merges the ranges' registers (more in cluster_reduce).
    let r = nodes[0].get("/vdb/_design/d/_view/distinct").json();
    assert_eq!(r["rows"], json!([{"key": null, "value": 20}]), "{r}");

    // Several queries at once, each as alone, of views and of `_all_docs`.
    let r = nodes[1].post(
        "/vdb/_all_docs/queries",
        r#"{"queries": [{"limit": 2, "skip": 1}, {"keys": ["v03", "nope"]}]}"#,
    );
    let results = r.json()["results"].clone();
    // The design document is the first row.
    assert_eq!(row_ids(&results[0]), ["v00", "v01"], "{}", r.text);
    assert_eq!(results[1]["rows"][0]["id"], "v03", "{}", r.text);
    assert_eq!(results[1]["rows"][1]["error"], "not_found", "{}", r.text);
    let r = nodes[2].post(
        "/vdb/_design/d/_view/sum/queries",
        r#"{"queries": [{}, {"group": true, "limit": 1}, {"reduce": false, "skip": 19}]}"#,
    );
    let results = r.json()["results"].clone();
    assert_eq!(
        results[0]["rows"],
        json!([{"key": null, "value": 190}]),
        "{}",
        r.text
    );
    assert_eq!(
        results[1]["rows"],
        json!([{"key": false, "value": 90}]),
        "{}",
        r.text
    );
    assert_eq!(
        results[2]["rows"].as_array().unwrap().len(),
        1,
        "{}",
        r.text
    );

    // CouchDB's errors for what is not there.
    let r = nodes[1].get("/vdb/_design/d/_view/nope");
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (404, json!("missing_named_view"))
    );
    assert_eq!(nodes[1].get("/vdb/_design/none/_view/v").status, 404);
    assert_eq!(nodes[1].delete("/vdb/_design/d/_view/by_n").status, 405);

    // A change shows in the next query: each copy updates its index.
    assert_eq!(
        nodes[2]
            .put("/vdb/late", r#"{"n": 100, "odd": false}"#)
            .status,
        201
    );
    let r = nodes[1].get("/vdb/_design/d/_view/sum?group=true").json();
    assert_eq!(r["rows"][0], json!({"key": false, "value": 190}), "{r}");
}
