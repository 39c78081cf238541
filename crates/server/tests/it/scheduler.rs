//! The replication scheduler with the real binary, as CouchDB 3's: `max_jobs`,
//! `max_churn` and `interval` set live through `/_node/_local/_config` (rotation, waiting
//! jobs starting), `_scheduler/jobs` and `_scheduler/docs` rows, crash backoff, a second
//! identical `POST /_replicate` joining the first, a cancel that ends a retry's wait, and
//! the credentials of `_replicator` documents hidden from other readers.

use crate::common;
use common::replication::{replicate, url, write_docs};
use common::{Server, ADMIN};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn eventually<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sets `[replicator] key` for this run.
fn config(s: &Server, key: &str, value: &str) {
    let r = s.put(
        &format!("/_node/_local/_config/replicator/{key}"),
        &json!(value).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

fn jobs(s: &Server) -> Vec<Value> {
    s.get("/_scheduler/jobs").json()["jobs"]
        .as_array()
        .unwrap()
        .clone()
}

fn doc_row(s: &Server, doc: &str) -> Value {
    s.get(&format!("/_scheduler/docs/_replicator/{doc}")).json()
}

fn event_types(job: &Value) -> Vec<&str> {
    job["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect()
}

/// A peer that answers every request `500` and counts them.
fn failing_peer() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            seen.fetch_add(1, Ordering::SeqCst);
            let body = r#"{"error":"unknown_error","reason":"boom"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, count)
}

#[test]
fn rotation_shares_one_slot_between_continuous_jobs() {
    let s = Server::start();
    for db in ["src1", "dst1", "src2", "dst2"] {
        s.create_db(db);
    }
    config(&s, "max_jobs", "1");
    config(&s, "max_churn", "1");
    config(&s, "interval", "700");
    for (doc, src, dst) in [("r1", "src1", "dst1"), ("r2", "src2", "dst2")] {
        let body = json!({"source": url(&s, src), "target": url(&s, dst), "continuous": true});
        assert_eq!(
            s.put(&format!("/_replicator/{doc}"), &body.to_string())
                .status,
            201
        );
    }
    // With one slot, a job only ever runs alone, and each gets its turn: the one running
    // longest is stopped for the one that waited longest.
    let mut ran = std::collections::BTreeSet::new();
    eventually("both jobs to run in turn", 30, || {
        let jobs = jobs(&s);
        let running: Vec<&Value> = jobs.iter().filter(|j| !j["pid"].is_null()).collect();
        assert!(running.len() <= 1, "{jobs:?}");
        if let Some(j) = running.first() {
            ran.insert(j["doc_id"].as_str().unwrap().to_string());
        }
        (ran.len() == 2 && jobs.len() == 2).then_some(())
    });
    let all = eventually("a job stopped for rotation", 10, || {
        let all = jobs(&s);
        all.iter()
            .any(|j| event_types(j).contains(&"stopped"))
            .then_some(all)
    });
    for j in &all {
        assert_eq!(
            keys(j),
            [
                "database",
                "id",
                "pid",
                "source",
                "target",
                "user",
                "doc_id",
                "info",
                "history",
                "node",
                "start_time"
            ]
        );
        assert_eq!(j["database"], "_replicator");
        assert_eq!(
            j["source"],
            format!("{}/src{}/", s.url, &j["doc_id"].as_str().unwrap()[1..])
        );
        assert_eq!(event_types(j).last(), Some(&"added"));
    }
    // Rotated or not, both replications carry their writes over.
    write_docs(&s, "src1", "a", 3);
    write_docs(&s, "src2", "b", 3);
    eventually("writes carried over in turn", 30, || {
        (s.get("/dst1/a-00002").status == 200 && s.get("/dst2/b-00002").status == 200).then_some(())
    });
    let waiting = eventually("one running, one pending", 10, || {
        let states: Vec<Value> = ["r1", "r2"].iter().map(|d| doc_row(&s, d)).collect();
        let mut names: Vec<&str> = states
            .iter()
            .map(|d| d["state"].as_str().unwrap())
            .collect();
        names.sort();
        (names == ["pending", "running"]).then_some(states)
    });
    for row in &waiting {
        assert_eq!(
            keys(row),
            [
                "database",
                "doc_id",
                "id",
                "node",
                "source",
                "target",
                "state",
                "info",
                "error_count",
                "last_updated",
                "start_time",
                "source_proxy",
                "target_proxy"
            ]
        );
        assert_eq!(row["error_count"], 0);
        // A job that has run shows its last statistics, running or waiting.
        assert!(row["info"].get("docs_written").is_some(), "{row}");
    }
    // More slots: both run, and no rotation stops them.
    config(&s, "max_jobs", "2");
    eventually("both running", 10, || {
        (jobs(&s).iter().all(|j| !j["pid"].is_null())).then_some(())
    });
}

#[test]
fn a_waiting_job_starts_when_a_slot_frees_up() {
    let s = Server::start();
    s.create_db("src");
    write_docs(&s, "src", "d", 5);
    config(&s, "interval", "300");
    config(&s, "max_jobs", "0");
    let body = json!({"source": url(&s, "src"), "target": url(&s, "dst"), "create_target": true});
    assert_eq!(s.put("/_replicator/once", &body.to_string()).status, 201);
    let row = eventually("the document's job", 10, || {
        let r = doc_row(&s, "once");
        (r["state"] == "pending").then_some(r)
    });
    assert_eq!(row["info"], Value::Null, "{row}");
    let job = &jobs(&s)[0];
    assert_eq!(job["pid"], Value::Null);
    assert_eq!(event_types(job), ["added"]);
    assert_eq!(job["info"], Value::Null);
    // Nothing starts while there is no slot.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(doc_row(&s, "once")["state"], "pending");
    config(&s, "max_jobs", "1");
    let done = eventually("the job to run and complete", 20, || {
        let d = s.get("/_replicator/once").json();
        (d["_replication_state"] == "completed").then_some(d)
    });
    assert_eq!(done["_replication_stats"]["docs_written"], 5, "{done}");
    let row = eventually("the completed row", 10, || {
        let r = doc_row(&s, "once");
        (r["state"] == "completed").then_some(r)
    });
    assert_eq!(
        keys(&row),
        [
            "database",
            "doc_id",
            "id",
            "source",
            "target",
            "state",
            "error_count",
            "info",
            "start_time",
            "last_updated"
        ]
    );
    assert_eq!(row["id"], Value::Null);
    assert_eq!(row["info"]["docs_written"], 5);
    assert!(row["info"].get("start_time").is_none(), "{row}");
    assert_eq!(row["start_time"], done["_replication_stats"]["start_time"]);
    assert_eq!(row["last_updated"], done["_replication_state_time"]);
    // The finished job has left the scheduler.
    assert!(jobs(&s).is_empty());
    let listing = s.get("/_scheduler/docs?states=completed,failed").json();
    assert_eq!(listing["docs"].as_array().unwrap().len(), 1, "{listing}");
    assert_eq!(listing["total_rows"], 1);
    let none = s.get("/_scheduler/docs?states=running&skip=1").json();
    assert_eq!(none, json!({"total_rows": 1, "offset": 1, "docs": []}));
}

#[test]
fn scheduler_parameters_and_errors() {
    let s = Server::start();
    let qpe = |r: common::Resp, reason: &str| {
        assert_eq!(
            (r.status, r.json()),
            (400, json!({"error": "query_parse_error", "reason": reason}))
        );
    };
    qpe(
        s.get("/_scheduler/jobs?limit=x"),
        "limit must be an integer",
    );
    qpe(
        s.get("/_scheduler/jobs?skip=-1"),
        "skip not in range of [0,infinity]",
    );
    qpe(
        s.get("/_scheduler/docs?states=running,sleeping"),
        "States must be one or more of [initializing,error,running,pending,crashing,completed,failed]",
    );
    let r = s.get("/_scheduler/docs?states=RUNNING");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        s.get("/_scheduler/jobs?limit=0&skip=5").json(),
        json!({"total_rows": 0, "offset": 0, "jobs": []})
    );
}

#[test]
fn a_crashing_document_backs_off_and_counts_its_errors() {
    let s = Server::start();
    s.create_db("src");
    config(&s, "interval", "300");
    config(&s, "retry_base", "1");
    let (peer, _) = failing_peer();
    let target = format!("http://{peer}/db");
    let body = json!({"source": url(&s, "src"), "target": target, "retries_per_request": 0});
    assert_eq!(s.put("/_replicator/bad", &body.to_string()).status, 201);
    let row = eventually("the job to crash", 10, || {
        let r = doc_row(&s, "bad");
        (r["state"] == "crashing").then_some(r)
    });
    let term = format!(r#"{{http_error_code,500,<<"GET http://{peer}/db/">>}}"#);
    assert_eq!(row["info"], json!({"error": term}), "{row}");
    assert_eq!(row["error_count"], 1);
    // Retried after 1 s, then 2 s: the streak grows.
    let row = eventually("a second crash", 15, || {
        let r = doc_row(&s, "bad");
        (r["error_count"] == 2).then_some(r)
    });
    assert_eq!(row["state"], "crashing");
    let job = &jobs(&s)[0];
    let crashed: Vec<&Value> = job["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "crashed")
        .collect();
    assert!(crashed.len() >= 2, "{job}");
    assert_eq!(keys(crashed[0]), ["timestamp", "type", "reason"], "{job}");
    assert_eq!(crashed[0]["reason"], term);
    // Deleting the document removes its job.
    let rev = s.get("/_replicator/bad").json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.delete(&format!("/_replicator/bad?rev={rev}")).status, 200);
    eventually("the job to go", 10, || jobs(&s).is_empty().then_some(()));
}

#[test]
fn replicate_errors_name_couchdb_reasons() {
    let s = Server::start();
    s.create_db("src");
    let (peer, count) = failing_peer();
    let body =
        json!({"source": "src", "target": format!("http://{peer}/db"), "retries_per_request": 1});
    let (status, r) = replicate(&s, body);
    let term = format!(r#"{{http_error_code,500,<<"GET http://{peer}/db/">>}}"#);
    assert_eq!(
        (status, r),
        (500, json!({"error": "error", "reason": term}))
    );
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // Nobody listens there.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = closed.local_addr().unwrap().to_string();
    drop(closed);
    let body =
        json!({"source": "src", "target": format!("http://{gone}/db"), "retries_per_request": 0});
    let (status, r) = replicate(&s, body);
    let term = format!(
        r#"{{http_request_failed,"GET","http://{gone}/db/",{{error,{{error,{{conn_failed,{{error,econnrefused}}}}}}}}}}"#
    );
    assert_eq!(
        (status, r),
        (500, json!({"error": "error", "reason": term}))
    );
    // A failed `_replicate` job leaves nothing behind.
    assert!(jobs(&s).is_empty());
}

#[test]
fn an_identical_one_shot_request_joins_the_running_job() {
    let s = Server::start();
    s.create_db("src");
    write_docs(&s, "src", "d", 20);
    config(&s, "interval", "300");
    // No slot: the first request's job waits, so the second arrives while it is there.
    config(&s, "max_jobs", "0");
    let body = json!({"source": url(&s, "src"), "target": url(&s, "dst"), "create_target": true});
    let (first, second) = std::thread::scope(|scope| {
        let a = scope.spawn(|| replicate(&s, body.clone()));
        eventually("the first job", 10, || (jobs(&s).len() == 1).then_some(()));
        let b = scope.spawn(|| replicate(&s, body.clone()));
        std::thread::sleep(Duration::from_millis(500));
        // One job, not restarted.
        let all = jobs(&s);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(event_types(&all[0]), ["added"]);
        assert_eq!(all[0]["doc_id"], Value::Null);
        assert_eq!(all[0]["database"], Value::Null);
        assert_eq!(all[0]["user"], ADMIN.0);
        // Another user may not join an admin's job.
        let bob = json!({"name": "bob", "password": "pw", "roles": [], "type": "user"});
        assert_eq!(
            s.put("/_users/org.couchdb.user:bob", &bob.to_string())
                .status,
            201
        );
        let r = s.as_user(
            ("bob", "pw"),
            "POST",
            "/_replicate",
            Some(&body.to_string()),
        );
        assert_eq!(
            (r.status, r.json()),
            (
                401,
                json!({"error": "unauthorized", "reason": "You are not a server admin."})
            )
        );
        config(&s, "max_jobs", "1");
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(first, second);
    assert_eq!(first.1["history"][0]["docs_written"], 20);
    assert!(jobs(&s).is_empty());
}

#[test]
fn a_cancel_ends_a_retry_wait_at_once() {
    let s = Server::start();
    s.create_db("src");
    let (peer, count) = failing_peer();
    let body = json!({"source": "src", "target": format!("http://{peer}/db"),
                      "continuous": true, "retries_per_request": 10});
    let (status, r) = replicate(&s, body.clone());
    assert_eq!(status, 202, "{r}");
    // Retries after 0.25, 0.5, 1 and 2 s: the fifth attempt is followed by a 4 s wait.
    eventually("five attempts", 20, || {
        (count.load(Ordering::SeqCst) >= 5).then_some(())
    });
    let tasks = s.get("/_active_tasks").json();
    assert_eq!(tasks.as_array().unwrap().len(), 1, "{tasks}");
    let mut cancel = body.clone();
    cancel["cancel"] = json!(true);
    let r = s.post("/_replicate", &cancel.to_string());
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = count.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        count.load(Ordering::SeqCst),
        seen,
        "a request after the cancel"
    );
    assert!(jobs(&s).is_empty());
    assert_eq!(s.get("/_active_tasks").json(), json!([]));
    // The same replication can run again at once.
    let (status, _) = replicate(&s, body);
    assert_eq!(status, 202);
    let r = s.post("/_replicate", &cancel.to_string());
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn replication_credentials_are_hidden_from_other_readers() {
    let s = Server::start();
    for user in ["bob", "carol"] {
        s.add_user(user, "pw", &[]);
    }
    let security = json!({"admins": {"names": [], "roles": []},
                          "members": {"names": ["bob", "carol"], "roles": []}});
    assert_eq!(
        s.put("/_replicator/_security", &security.to_string())
            .status,
        200
    );
    // Replications nobody can run (max_jobs = 0): only their documents matter here.
    config(&s, "max_jobs", "0");
    let doc = json!({
        "source": "https://bob:s3cret@remote.example/db",
        "target": {"url": "https://bob:t4rget@other.example/db",
                   "headers": {"Authorization": "Basic Ym9iOnM="},
                   "auth": {"basic": {"username": "bob", "password": "s3cret"}}},
        "continuous": true,
    });
    let r = s.as_user(
        ("bob", "pw"),
        "PUT",
        "/_replicator/bobs",
        Some(&doc.to_string()),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_string();

    let as_ = |user: &str, method: &str, path: &str, body: Option<&Value>| {
        let body = body.map(Value::to_string);
        s.as_user((user, "pw"), method, path, body.as_deref())
    };
    // The owner and an admin see the document as stored.
    let own = as_("bob", "GET", "/_replicator/bobs", None).json();
    assert_eq!(own["_rev"], rev.as_str());
    assert_eq!(own["source"], doc["source"]);
    assert_eq!(own["target"], doc["target"]);
    assert_eq!(own["owner"], "bob");
    let admin = s.get("/_replicator/bobs").json();
    assert_eq!(admin, own);

    // Another member sees no credentials, and a revision made up from what it sees.
    let seen = as_("carol", "GET", "/_replicator/bobs?revs=true", None).json();
    assert_eq!(seen["source"], "https://remote.example/db");
    // An endpoint object loses `headers` and `auth`; CouchDB leaves its `url` alone.
    assert_eq!(
        seen["target"],
        json!({"url": "https://bob:t4rget@other.example/db"})
    );
    assert_eq!(seen["owner"], "bob");
    let shown_rev = seen["_rev"].as_str().unwrap();
    assert_ne!(shown_rev, rev);
    assert!(shown_rev.starts_with("1-"), "{shown_rev}");
    assert_eq!(
        seen["_revisions"],
        json!({"start": 1, "ids": [&shown_rev[2..]]})
    );
    // The same read gives the same revision.
    assert_eq!(
        as_("carol", "GET", "/_replicator/bobs", None).json()["_rev"],
        shown_rev
    );
    let keys_of = |v: &Value| keys(v).into_iter().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        keys_of(&seen),
        [
            "_id",
            "_rev",
            "source",
            "target",
            "continuous",
            "owner",
            "_revisions"
        ]
    );

    // Every read of the database hides them: _bulk_get, _find, open_revs.
    let got = as_(
        "carol",
        "POST",
        "/_replicator/_bulk_get",
        Some(&json!({"docs": [{"id": "bobs"}]})),
    )
    .json();
    let via_bulk = &got["results"][0]["docs"][0]["ok"];
    assert_eq!(via_bulk["source"], "https://remote.example/db", "{got}");
    assert_eq!(via_bulk["_rev"], shown_rev);
    let found = as_(
        "carol",
        "POST",
        "/_replicator/_find",
        Some(&json!({"selector": {"source": {"$regex": "s3cret"}}})),
    )
    .json();
    assert_eq!(
        found["docs"],
        json!([]),
        "the selector sees what carol sees"
    );
    let found = as_(
        "carol",
        "POST",
        "/_replicator/_find",
        Some(&json!({"selector": {"owner": "bob"}, "fields": ["source"]})),
    )
    .json();
    assert_eq!(
        found["docs"],
        json!([{"source": "https://remote.example/db"}])
    );
    let revs = as_("carol", "GET", "/_replicator/bobs?open_revs=all", None);
    assert_eq!(revs.status, 200, "{}", revs.text);
    assert!(!revs.text.contains("s3cret"), "{}", revs.text);
    // Bob sees his own through the same paths.
    let found = as_(
        "bob",
        "POST",
        "/_replicator/_find",
        Some(&json!({"selector": {"source": {"$regex": "s3cret"}}})),
    )
    .json();
    assert_eq!(found["docs"].as_array().unwrap().len(), 1, "{found}");

    // `_all_docs` and `_changes` of `_replicator` are for server admins.
    for path in [
        "/_replicator/_all_docs?include_docs=true",
        "/_replicator/_changes?include_docs=true",
    ] {
        let r = as_("carol", "GET", path, None);
        assert_eq!(
            (r.status, r.json()),
            (
                401,
                json!({"error": "unauthorized", "reason": "You are not a server admin."})
            ),
            "{path}"
        );
    }
    let listed = s
        .get("/_replicator/_all_docs?include_docs=true&key=%22bobs%22")
        .json();
    assert_eq!(listed["rows"][0]["doc"]["source"], doc["source"]);
    // Design documents are shown as stored.
    let ddoc = as_("carol", "GET", "/_replicator/_design/_replicator", None);
    assert_eq!(ddoc.status, 200, "{}", ddoc.text);

    // An admin of the database sees everything too.
    let security = json!({"admins": {"names": ["carol"], "roles": []},
                          "members": {"names": ["bob", "carol"], "roles": []}});
    assert_eq!(
        s.put("/_replicator/_security", &security.to_string())
            .status,
        200
    );
    let seen = as_("carol", "GET", "/_replicator/bobs", None).json();
    assert_eq!(seen["_rev"], rev.as_str());
    assert_eq!(seen["source"], doc["source"]);
}
