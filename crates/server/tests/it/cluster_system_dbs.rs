//! The system databases on a cluster: `_users` and `_replicator` kept whole on every member
//! (each pushes them to the others), so a user written on one member logs in on every
//! member, and a replication document written on any member is run by exactly one member,
//! the one holding its claim in etcd, another taking it over when that member dies.

use crate::common;

use common::cluster::{eventually, eventually_within, shards, three_members, NAMES};
use common::{basic, Server, ADMIN};
use serde_json::{json, Value};
use std::time::Duration;

/// The members running `_replicator` jobs as `s` shows them (`_scheduler/jobs` gathers
/// every member's), one per job.
fn runners(s: &Server) -> Vec<String> {
    let r = s.get("/_scheduler/jobs");
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(v["total_rows"], jobs.len());
    (jobs.iter())
        .map(|j| j["node"].as_str().unwrap().to_owned())
        .collect()
}

/// `r1`'s `_scheduler/docs` row as `s` shows it.
fn doc_row(s: &Server) -> Value {
    s.get("/_scheduler/docs/_replicator/r1").json()
}

fn doc_count(s: &Server, db: &str) -> u64 {
    s.get(&format!("/{db}")).json()["doc_count"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn users_and_replication_documents_reach_every_member_and_run_once() {
    let (_etcd, _dirs, nodes) = three_members();

    // A user written on one member logs in on every member at once (the write is
    // answered once every running member holds it), and so does a new password.
    let r = nodes[0].put(
        "/_users/org.couchdb.user:carol",
        r#"{"name": "carol", "password": "pw", "roles": ["ops"], "type": "user"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_owned();
    let session = |n: &Server, password: &str| {
        let auth = basic("carol", password);
        let r = n.anon("GET", "/_session", None, &[("Authorization", &auth)]);
        (r.status, r.json()["userCtx"]["name"].clone())
    };
    for n in &nodes {
        assert_eq!(session(n, "pw"), (200, json!("carol")));
    }
    let edit =
        json!({"_rev": rev, "name": "carol", "password": "pw2", "roles": ["ops"], "type": "user"});
    let r = nodes[1].put("/_users/org.couchdb.user:carol", &edit.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    for n in &nodes {
        assert_eq!(session(n, "pw2"), (200, json!("carol")));
        assert_eq!(session(n, "pw").0, 401);
    }
    // Her stored document is the hashed one everywhere, never the password.
    let stored = nodes[2].get("/_users/org.couchdb.user:carol").json();
    assert!(stored.get("password").is_none(), "{stored}");
    assert_eq!(stored["password_scheme"], "pbkdf2");

    // A continuous replication, its document written on the second member: one member
    // runs it. Its endpoints are on a node outside the cluster, which outlives any member.
    let peer = Server::start();
    for db in ["src", "tgt"] {
        assert_eq!(peer.put(&format!("/{db}"), "").status, 201);
    }
    let r = peer.post(
        "/src/_bulk_docs",
        r#"{"docs": [{"_id": "a"}, {"_id": "b"}, {"_id": "c"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let auth = json!({"basic": {"username": ADMIN.0, "password": ADMIN.1}});
    let rep = json!({
        "source": {"url": format!("{}/src", peer.url), "auth": auth},
        "target": {"url": format!("{}/tgt", peer.url), "auth": auth},
        "continuous": true
    });
    let r = nodes[1].put("/_replicator/r1", &rep.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    eventually("the documents replicated", || doc_count(&peer, "tgt") == 3);
    eventually("one member runs the job, every member shows it", || {
        let seen: Vec<Vec<String>> = nodes.iter().map(runners).collect();
        seen[0].len() == 1 && seen.iter().all(|s| *s == seen[0])
    });
    std::thread::sleep(Duration::from_secs(2));
    let owner = runners(&nodes[0]);
    assert_eq!(owner.len(), 1, "still only one: {owner:?}");
    let owner = NAMES.iter().position(|n| *n == owner[0]).unwrap();
    for n in &nodes {
        let row = doc_row(n);
        assert_eq!(
            (&row["state"], &row["node"]),
            (&json!("running"), &json!(NAMES[owner]))
        );
    }

    // The member running it dies: another takes it over once its lease has run out, and
    // the replication goes on.
    nodes[owner].kill9();
    let alive: Vec<usize> = (0..3).filter(|i| *i != owner).collect();
    eventually_within(
        Duration::from_secs(30),
        "another member runs the job",
        || {
            let seen = runners(&nodes[alive[0]]);
            seen.len() == 1 && seen[0] != NAMES[owner] && runners(&nodes[alive[1]]) == seen
        },
    );
    assert_eq!(peer.put("/src/d", "{}").status, 201);
    eventually("the new document replicated", || {
        doc_count(&peer, "tgt") == 4
    });

    // Deleting the document (on any member) stops the job everywhere.
    let doc: Value = nodes[alive[1]].get("/_replicator/r1").json();
    let rev = doc["_rev"].as_str().unwrap().to_owned();
    let r = nodes[alive[1]].delete(&format!("/_replicator/r1?rev={rev}"));
    assert_eq!(r.status, 200, "{}", r.text);
    eventually("no member runs it", || {
        alive.iter().all(|i| runners(&nodes[*i]).is_empty())
    });
}

/// A clustered database as `[chttpd_auth] authentication_db`: a new password is hashed
/// once, at the coordinator (every copy holds the same hash and revision), a user who is
/// not an admin may write only their own document, and a login reads the user from a copy
/// of its range, this member's or another's.
#[test]
fn a_clustered_authentication_db() {
    let (_etcd, _dirs, nodes) = three_members();
    assert_eq!(nodes[0].put("/adb?q=1&n=1", "").status, 201);
    for n in &nodes {
        let r = n.put(
            "/_node/_local/_config/chttpd_auth/authentication_db",
            r#""adb""#,
        );
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = nodes[1].put(
        "/adb/org.couchdb.user:dan",
        r#"{"name": "dan", "password": "pw", "roles": [], "type": "user"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let stored = nodes[2].get("/adb/org.couchdb.user:dan").json();
    assert!(stored.get("password").is_none(), "{stored}");
    assert_eq!(stored["password_scheme"], "pbkdf2");
    // A `batch=ok` write goes through the same clustered write: hashed too.
    let r = nodes[0].put(
        "/adb/org.couchdb.user:fay?batch=ok",
        r#"{"name": "fay", "password": "pw", "roles": [], "type": "user"}"#,
    );
    assert_eq!(r.status, 202, "{}", r.text);
    eventually("fay written", || {
        nodes[1].get("/adb/org.couchdb.user:fay").status == 200
    });
    let stored = nodes[1].get("/adb/org.couchdb.user:fay").json();
    assert!(stored.get("password").is_none(), "{stored}");
    assert_eq!(stored["password_scheme"], "pbkdf2");
    // Every member logs dan in: the one holding the copy reads its own, the others ask it.
    let holder = shards(&nodes[0], "adb")["00000000-ffffffff"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let mut asked_another = false;
    for (n, name) in nodes.iter().zip(NAMES) {
        asked_another |= name != holder;
        let auth = basic("dan", "pw");
        let r = n.anon("GET", "/_session", None, &[("Authorization", &auth)]);
        assert_eq!(
            (r.status, &r.json()["userCtx"]["name"]),
            (200, &json!("dan")),
            "{}",
            r.text
        );
    }
    assert!(asked_another);
    // Open to every user, dan may still not write another user's document (CouchDB's
    // not_found).
    let r = nodes[0].put("/adb/_security", "{}");
    assert_eq!(r.status, 200, "{}", r.text);
    let r = nodes[0].anon(
        "PUT",
        "/adb/org.couchdb.user:erin",
        Some(r#"{"name": "erin", "password": "x", "roles": [], "type": "user"}"#),
        &[
            ("Authorization", &basic("dan", "pw")),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (404, json!("not_found")),
        "{}",
        r.text
    );
}

/// A clustered authentication database holds `_design/_auth` as a node's does (given it
/// when it is created, its function given back when a member starts), its rules apply to
/// the clustered writes, and a login upgrades a user's hash through the cluster.
#[test]
fn a_clustered_authentication_db_keeps_its_design_and_upgrades_hashes() {
    let (etcd, dirs, mut nodes) = three_members();
    let config = |nodes: &[Server], key: &str, value: &str| {
        for n in nodes {
            let r = n.put(&format!("/_node/_local/_config/chttpd_auth/{key}"), value);
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    config(&nodes, "authentication_db", r#""adb""#);
    config(&nodes, "iterations", r#""10""#);
    assert_eq!(nodes[0].put("/adb?q=2&n=2", "").status, 201);
    let validate = |n: &Server| {
        let r = n.get("/adb/_design/_auth");
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["validate_doc_update"].as_str().unwrap().to_owned()
    };
    let original = validate(&nodes[0]);
    assert!(original.contains("doc.type must be user"), "{original}");
    for n in &nodes[1..] {
        assert_eq!(validate(n), original);
    }
    // Its rules hold for every writer, admins too.
    let r = nodes[1].put(
        "/adb/org.couchdb.user:bot",
        r#"{"name": "bot", "password": "pw", "roles": [], "type": "robot"}"#,
    );
    assert_eq!(
        (r.status, &r.json()["reason"]),
        (403, &json!("doc.type must be user")),
        "{}",
        r.text
    );

    // Written under 10 iterations; a login once the setting says 20 rewrites the hash
    // (same salt) through the cluster, and the password still logs in everywhere.
    let r = nodes[1].put(
        "/adb/org.couchdb.user:gil",
        r#"{"name": "gil", "password": "pw", "roles": [], "type": "user"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let stored = nodes[2].get("/adb/org.couchdb.user:gil").json();
    assert_eq!(stored["iterations"], 10, "{stored}");
    config(&nodes, "iterations", r#""20""#);
    let login = |n: &Server| {
        let auth = basic("gil", "pw");
        n.anon("GET", "/_session", None, &[("Authorization", &auth)])
    };
    assert_eq!(login(&nodes[0]).json()["userCtx"]["name"], "gil");
    eventually("gil's hash upgraded", || {
        nodes[2].get("/adb/org.couchdb.user:gil").json()["iterations"] == 20
    });
    let upgraded = nodes[1].get("/adb/org.couchdb.user:gil").json();
    assert_eq!(upgraded["salt"], stored["salt"]);
    assert_ne!(upgraded["derived_key"], stored["derived_key"]);
    assert!(
        upgraded["_rev"].as_str().unwrap().starts_with("2-"),
        "{upgraded}"
    );
    for n in &nodes {
        assert_eq!(login(n).status, 200);
    }

    // Edited, it keeps the edit until a member starts.
    let ddoc = nodes[0].get("/adb/_design/_auth").json();
    let edited = json!({"_rev": ddoc["_rev"], "language": "javascript",
                        "validate_doc_update": "function (newDoc) {}"});
    let r = nodes[0].put("/adb/_design/_auth", &edited.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(validate(&nodes[2]), "function (newDoc) {}");
    nodes[1].kill9();
    nodes[1] = common::cluster::member(&etcd, NAMES[1], dirs[1].path());
    eventually("_design/_auth given its function back", || {
        validate(&nodes[2]) == original
    });
}

/// A member that holds no copy of a clustered authentication database keeps the users it
/// reads from another member's copy, as CouchDB's `chttpd_auth_cache` keeps them: later
/// requests find them without asking (`auth_cache_hits`), until the database's changes
/// show the user's document changed: a new password then logs in, the old one no longer
/// does, and a deleted user is gone.
#[test]
fn users_read_from_another_member_are_kept_until_their_document_changes() {
    let (_etcd, _dirs, nodes) = three_members();
    for n in &nodes {
        let r = n.put(
            "/_node/_local/_config/chttpd_auth/authentication_db",
            r#""udb""#,
        );
        assert_eq!(r.status, 200, "{}", r.text);
        // The polling below tries stale passwords on purpose.
        let r = n.put("/_node/_local/_config/chttpd_auth_lockout/mode", r#""off""#);
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(nodes[0].put("/udb?q=1&n=1", "").status, 201);
    let holder = shards(&nodes[0], "udb")["00000000-ffffffff"][0].clone();
    let far: Vec<&Server> = (nodes.iter().zip(NAMES))
        .filter(|(_, name)| holder != *name)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(far.len(), 2, "{holder}");
    let (b, writer) = (far[0], far[1]);

    let r = writer.put(
        "/udb/org.couchdb.user:dan",
        r#"{"name": "dan", "password": "one", "roles": [], "type": "user"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_owned();
    let login = |password: &str| {
        let auth = basic("dan", password);
        b.anon("GET", "/_session", None, &[("Authorization", &auth)])
            .status
    };
    let stat = |which: &str| {
        let r = b.get(&format!("/_node/_local/_stats/couchdb/{which}"));
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["value"].as_u64().unwrap()
    };
    let hits = stat("auth_cache_hits");
    eventually("dan found in b's cache", || {
        assert_eq!(login("one"), 200);
        stat("auth_cache_hits") > hits
    });
    assert!(stat("auth_cache_misses") > 0);

    // A new password, written through another member: b drops its dan once its feed
    // shows the change (entries otherwise live 10 minutes).
    let edit = json!({"_rev": rev, "name": "dan", "password": "two", "roles": [],
                      "type": "user"});
    let r = writer.put("/udb/org.couchdb.user:dan", &edit.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_owned();
    eventually("the new password taken on b", || login("two") == 200);
    assert_eq!(login("one"), 401);
    let hits = stat("auth_cache_hits");
    assert_eq!(login("two"), 200);
    assert!(stat("auth_cache_hits") > hits);

    let r = writer.delete(&format!("/udb/org.couchdb.user:dan?rev={rev}"));
    assert_eq!(r.status, 200, "{}", r.text);
    eventually("a deleted user gone from b", || login("two") == 401);
}
