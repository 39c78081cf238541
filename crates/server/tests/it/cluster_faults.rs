//! A Settee cluster under faults (issue 27), each with nothing acknowledged lost: a member
//! killed under concurrent writes, etcd unreachable, one etcd member of three killed, and
//! a member isolated while both sides take conflicting edits. Real `settee` binaries and
//! real etcd members on loopback; waits are bounded, never timed.

use crate::common;

use common::cluster::*;
use common::Server;
use serde_json::{json, Value};
use settee_cluster::testing::Etcd;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How many members `s` sees running.
fn running(s: &Server) -> usize {
    membership(s).0.as_array().unwrap().len()
}

/// Creates clustered database `db` (`query`: its `q`, `n`) through `via` and waits until
/// every member has its map: the names of its copies, `shards/{range}/{db}.{created}`, by
/// range.
fn create_clustered(nodes: &[Server], via: usize, db: &str, query: &str) -> Vec<(String, String)> {
    let t0 = now_secs();
    let r = nodes[via].put(&format!("/{db}?{query}"), "");
    assert_eq!(r.status, 201, "{}", r.text);
    let t1 = now_secs();
    for n in nodes {
        eventually("the map on every member", || {
            n.get(&format!("/{db}")).status == 200
        });
    }
    let shards = nodes[via].get(&format!("/{db}/_shards")).json();
    let holder = |range: &str| {
        let name = shards["shards"][range][0].as_str().unwrap();
        NAMES.iter().position(|n| *n == name).unwrap()
    };
    (shards["shards"].as_object().unwrap().keys())
        .map(|range| {
            let copy = (t0..=t1)
                .map(|t| format!("shards/{range}/{db}.{t}"))
                .find(|c| nodes[holder(range)].get(&copy_path(c)).status == 200)
                .expect("the copy's name");
            (range.clone(), copy)
        })
        .collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A copy's database path (one segment).
fn copy_path(copy: &str) -> String {
    format!("/{}", copy.replace('/', "%2F"))
}

/// A copy's database info, read directly on the member holding it (as a server admin).
fn copy_info(n: &Server, copy: &str) -> Value {
    n.get(&copy_path(copy)).json()
}

/// Id → rev of every row of an `_all_docs` answer.
fn rows(v: &Value) -> BTreeMap<String, String> {
    (v["rows"].as_array().unwrap().iter())
        .map(|r| {
            let rev = r["value"]["rev"].as_str().unwrap_or_default();
            (r["id"].as_str().unwrap().to_string(), rev.to_string())
        })
        .collect()
}

/// SIGSTOP / SIGCONT: the member stops answering anyone (other members, etcd, clients)
/// without losing anything, as behind a network partition; resumed, it finds the cluster
/// as it has become.
fn pause(s: &Server, paused: bool) {
    let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
    // SAFETY: signalling our own child process, which has not been reaped.
    assert_eq!(unsafe { libc::kill(s.pid() as i32, signal) }, 0);
}

/// `kill -9` of a member while two clients write through the other two and a third reads:
/// every write answers 201 or 202, every read answers with what was acknowledged; back,
/// the member's copies catch up (each copy counts its range's documents), and every
/// acknowledged write is on every copy.
#[test]
fn a_member_killed_under_writes_loses_no_acknowledged_write() {
    let etcd = Etcd::start(1);
    let (dirs, mut nodes) = three_members_on(&etcd);
    let copies = create_clustered(&nodes, 0, "kdb", "q=2&n=3");

    let acked: Mutex<Vec<(String, String)>> = Mutex::default();
    let stop = AtomicBool::new(false);
    let reads_after_kill = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..2 {
            let (nodes, acked, stop) = (&nodes, &acked, &stop);
            s.spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let id = format!("w{w}-{i:04}");
                    let r = nodes[w].put(&format!("/kdb/{id}"), &json!({ "i": i }).to_string());
                    assert!(
                        [201, 202].contains(&r.status),
                        "{id}: {} {}",
                        r.status,
                        r.text
                    );
                    let rev = r.json()["rev"].as_str().unwrap().to_string();
                    acked.lock().unwrap().push((id, rev));
                }
            });
        }
        let (nodes, acked, stop) = (&nodes, &acked, &stop);
        let (reads_after_kill, killed) = (&reads_after_kill, &killed);
        s.spawn(move || {
            for i in 0usize.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let after_kill = killed.load(Ordering::SeqCst);
                let known: Vec<(String, String)> = acked.lock().unwrap().clone();
                let Some((id, rev)) = known.get(i * 7 % known.len().max(1)).cloned() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let via = &nodes[i % 2];
                let r = via.get(&format!("/kdb/{id}"));
                assert_eq!(r.status, 200, "{id}: {}", r.text);
                assert_eq!(r.json()["_rev"], json!(rev), "{id}");
                let r = via.get("/kdb/_all_docs");
                assert_eq!(r.status, 200, "{}", r.text);
                let listed = rows(&r.json());
                for (id, rev) in &known {
                    assert_eq!(listed.get(id), Some(rev), "{id} missing from _all_docs");
                }
                if after_kill {
                    reads_after_kill.fetch_add(1, Ordering::SeqCst);
                }
            }
        });

        let count = || acked.lock().unwrap().len();
        eventually_within(Duration::from_secs(60), "writes before the kill", || {
            count() >= 40
        });
        nodes[2].kill9();
        killed.store(true, Ordering::SeqCst);
        let at_kill = count();
        // Writes go on while settee3 is still running for the others (its lease) and after.
        eventually("settee3 no longer running", || {
            running(&nodes[0]) == 2 && running(&nodes[1]) == 2
        });
        eventually_within(Duration::from_secs(60), "writes after the kill", || {
            count() >= at_kill + 80 && reads_after_kill.load(Ordering::SeqCst) >= 5
        });
        stop.store(true, Ordering::SeqCst);
    });

    let acked: BTreeMap<String, String> = acked.into_inner().unwrap().into_iter().collect();
    // Each range's documents, by the map.
    let mut per_range: BTreeMap<String, usize> = BTreeMap::new();
    for id in acked.keys() {
        let range = nodes[0].get(&format!("/kdb/_shards/{id}")).json()["range"].clone();
        *per_range
            .entry(range.as_str().unwrap().to_string())
            .or_default() += 1;
    }

    // Back, settee3's copies catch up by internal replication: every copy of each range
    // counts the range's documents, read on the member holding it.
    nodes[2] = member(&etcd, NAMES[2], dirs[2].path());
    eventually_within(Duration::from_secs(60), "every copy caught up", || {
        (nodes.iter()).all(|n| {
            (copies.iter()).all(|(range, copy)| {
                let info = copy_info(n, copy);
                info["doc_count"] == json!(per_range[range]) && info["doc_del_count"] == 0
            })
        })
    });
    // Every acknowledged write, at its revision, on every copy and through every member.
    for n in &nodes {
        let mut held = BTreeMap::new();
        for (_, copy) in &copies {
            held.extend(rows(
                &n.get(&format!("{}/_all_docs", copy_path(copy))).json(),
            ));
        }
        assert_eq!(held, acked);
        let r = n.get("/kdb/_all_docs");
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(rows(&r.json()), acked);
    }
}

/// A member that hangs (SIGSTOP: it holds its connections and answers nothing) while
/// writes are made: they answer once its lease has run out, as if it had not been running
/// (not after the 60 s a request to a member may take), and it catches up once it answers
/// again.
#[test]
fn a_member_that_hangs_holds_writes_up_no_longer_than_its_lease() {
    let etcd = Etcd::start(1);
    let (_dirs, nodes) = three_members_on(&etcd);
    let copies = create_clustered(&nodes, 0, "hdb", "q=1&n=3");
    assert_eq!(nodes[0].put("/hdb/before", "{}").status, 201);

    pause(&nodes[2], true);
    let answered = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..5 {
                let r = nodes[i % 2].put(&format!("/hdb/h{i}"), "{}");
                answered.lock().unwrap().push(r.status);
            }
        });
        eventually("the writes answered", || {
            answered.lock().unwrap().len() == 5
        });
    });
    assert_eq!(answered.into_inner().unwrap(), [201; 5]);
    pause(&nodes[2], false);
    eventually("settee3's copy caught up", || {
        copy_info(&nodes[2], &copies[0].1)["doc_count"] == 6
    });
}

/// CouchDB's `[fabric]` timeouts bound what a member waits for another: with
/// `request_timeout` below the members' leases, a purge whose only copy's member hangs
/// is that id's `timeout` (not `internal_server_error`, which a member down gives); with a
/// tiny `view_timeout`, a view query whose copies take longer is the request's 500
/// `timeout` (and `_changes`, bounded by `request_timeout` alone, still answers); by
/// default a view query waits for its index however long it takes.
#[test]
fn fabric_timeouts_bound_what_a_member_waits_for() {
    let etcd = Etcd::start(1);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // Leases far longer than the timeouts: a hanging member stays running meanwhile.
    let nodes: Vec<Server> = (0..3)
        .map(|i| member_with_lease(&etcd, NAMES[i], dirs[i].path(), 60))
        .collect();
    for n in &nodes {
        eventually("three members running and listed", || {
            membership(n) == (json!(NAMES), json!(NAMES))
        });
    }
    let set = |n: &Server, key: &str, value: &str| {
        let r = n.put(
            &format!("/_node/_local/_config/fabric/{key}"),
            &json!(value).to_string(),
        );
        assert_eq!(r.status, 200, "{}", r.text);
    };

    // One copy, on a member other than the coordinator.
    let copies = create_clustered(&nodes, 0, "tdb", "q=1&n=1");
    let holder = shards(&nodes[0], "tdb")[&copies[0].0][0]
        .as_str()
        .unwrap()
        .to_string();
    let h = NAMES.iter().position(|n| *n == holder).unwrap();
    let via = &nodes[(h + 1) % 3];
    let r = via.put("/tdb/x", "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let ddoc = json!({"views": {"v": {"map": "function(doc) { emit(doc._id, null); }"}}});
    assert_eq!(via.put("/tdb/_design/d", &ddoc.to_string()).status, 201);
    let r = via.get("/tdb/_design/d/_view/v");
    assert_eq!(r.json()["total_rows"], 1, "{}", r.text);

    // 1 ms: less than indexing a thousand new documents takes.
    let docs: Vec<Value> = (0..1000).map(|i| json!({"_id": format!("n{i}")})).collect();
    let r = via.post("/tdb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    set(via, "view_timeout", "1");
    let r = via.get("/tdb/_design/d/_view/v");
    assert_eq!(
        (r.status, r.json()),
        (
            500,
            json!({"error": "timeout", "reason": "The request could not be processed in a reasonable amount of time."})
        )
    );
    // `_changes` is not a view: only `request_timeout` bounds its start, and a longpoll
    // waits its own `timeout` beyond it.
    let r = via.get("/tdb/_changes?limit=5");
    assert_eq!(
        (r.status, r.json()["results"].as_array().map(Vec::len)),
        (200, Some(5))
    );
    let r = via.get("/tdb/_changes?feed=longpoll&since=now&timeout=1500");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["results"], json!([]), "{}", r.text);
    set(via, "view_timeout", "infinity");
    let r = via.get("/tdb/_design/d/_view/v?limit=0");
    assert_eq!(r.json()["total_rows"], 1001, "{}", r.text);

    set(via, "request_timeout", "300");
    pause(&nodes[h], true);
    let r = via.post("/tdb/_purge", &json!({ "x": [rev] }).to_string());
    let changes = via.get("/tdb/_changes?limit=5");
    pause(&nodes[h], false);
    assert_eq!(
        (changes.status, &changes.json()["error"]),
        (500, &json!("timeout")),
        "{}",
        changes.text
    );
    assert_eq!(
        (r.status, r.json()),
        (
            500,
            json!({"purge_seq": null, "purged": {"x": {"error": "error", "reason": "timeout"}}})
        )
    );
    // Back, the member answers as before (the purge it took while paused may have been
    // done once it resumed).
    let r = via.get("/tdb");
    assert_eq!(r.status, 200, "{}", r.text);
}

/// etcd unreachable (its only member killed) for longer than the members' leases: the
/// existing clustered database keeps taking documents and answering reads through every
/// member; what needs etcd (creating or deleting a database) is a 503 that changes
/// nothing; once etcd is back, creation works again and nothing written meanwhile is lost.
#[test]
fn without_etcd_clustered_databases_work_and_creation_is_refused_until_it_returns() {
    let mut etcd = Etcd::start(1);
    let (_dirs, nodes) = three_members_on(&etcd);
    create_clustered(&nodes, 0, "edb", "q=2&n=3");
    let docs: Vec<Value> = (0..10).map(|i| json!({"_id": format!("e{i}")})).collect();
    let r = nodes[0].post("/edb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let mut written: BTreeSet<String> = (0..10).map(|i| format!("e{i}")).collect();

    etcd.kill(0);
    let unavailable = |r: &common::Resp| {
        assert_eq!(r.status, 503, "{}", r.text);
        assert_eq!(r.json()["error"], "service unavailable", "{}", r.text);
    };
    for round in 0..2 {
        for (i, n) in nodes.iter().enumerate() {
            let id = format!("r{round}-{i}");
            let r = n.put(&format!("/edb/{id}"), r#"{"a": 1}"#);
            assert_eq!(r.status, 201, "{}", r.text);
            let rev = r.json()["rev"].as_str().unwrap().to_string();
            let r = n.put(
                &format!("/edb/{id}"),
                &json!({"_rev": rev, "a": 2}).to_string(),
            );
            assert_eq!(r.status, 201, "{}", r.text);
            assert_eq!(n.get(&format!("/edb/{id}")).json()["a"], 2);
            let bulk = json!({"docs": [{"_id": format!("{id}-b1")}, {"_id": format!("{id}-b2")}]});
            let r = n.post("/edb/_bulk_docs", &bulk.to_string());
            assert_eq!(r.status, 201, "{}", r.text);
            written.extend([id.clone(), format!("{id}-b1"), format!("{id}-b2")]);
            let r = n.get("/edb/_all_docs");
            assert_eq!(r.status, 200, "{}", r.text);
            let listed: BTreeSet<String> = rows(&r.json()).into_keys().collect();
            assert_eq!(listed, written);
            let info = n.get("/edb");
            assert_eq!(info.status, 200, "{}", info.text);
            assert_eq!(info.json()["doc_count"], json!(written.len()));
            // What needs the cluster state is refused (each refusal after etcd's 5 s
            // deadline, so not through every member), and changes nothing.
            if (round, i) == (0, 0) || (round, i) == (1, 2) {
                unavailable(&n.put(&format!("/new{i}"), ""));
                assert_eq!(n.get(&format!("/new{i}")).status, 404);
            }
            if (round, i) == (0, 1) || (round, i) == (1, 2) {
                unavailable(&n.delete("/edb"));
            }
            assert_eq!(
                n.get("/_all_dbs").json(),
                json!(["_replicator", "_users", "edb"])
            );
        }
        // The members cannot renew their leases meanwhile: the next round comes after
        // they would have run out.
        if round == 0 {
            std::thread::sleep(Duration::from_secs(LEASE_TTL + 1));
        }
    }

    etcd.restart(0);
    eventually_within(Duration::from_secs(60), "a database created again", || {
        let r = nodes[1].put("/back?q=2&n=3", "");
        match r.status {
            503 => false,
            201 => true,
            _ => panic!("{} {}", r.status, r.text),
        }
    });
    for n in &nodes {
        eventually("all running again", || running(n) == 3);
        eventually("the new map everywhere", || n.get("/back").status == 200);
    }
    assert_eq!(nodes[2].put("/back/d", "{}").status, 201);
    assert_eq!(nodes[0].get("/back/d").status, 200);
    for n in &nodes {
        let listed: BTreeSet<String> = rows(&n.get("/edb/_all_docs").json()).into_keys().collect();
        assert_eq!(listed, written);
    }
}

/// One of three etcd members killed (the leader, the hardest case): nothing changes for
/// the cluster. Databases are created and deleted, membership edited, documents written
/// and read, and no member stops running (their leases are kept alive through the members
/// left, for longer than the lease); the etcd member back, all goes on.
#[test]
fn one_etcd_member_down_changes_nothing() {
    let mut etcd = Etcd::start(3);
    let (_dirs, nodes) = three_members_on(&etcd);
    create_clustered(&nodes, 0, "qdb", "q=2&n=3");
    assert_eq!(nodes[0].put("/qdb/before", "{}").status, 201);

    let leader = etcd.leader().expect("an etcd leader");
    etcd.kill(leader);
    let r = nodes[1].put("/qdb2?q=2&n=3", "");
    assert_eq!(r.status, 201, "{}", r.text);
    for n in &nodes {
        eventually("qdb2 everywhere", || n.get("/qdb2").status == 200);
    }
    assert_eq!(nodes[1].put("/qdb2", "").status, 412);
    for (i, n) in nodes.iter().enumerate() {
        let r = n.put(&format!("/qdb2/d{i}"), "{}");
        assert_eq!(r.status, 201, "{}", r.text);
        let r = n.put(&format!("/qdb/d{i}"), "{}");
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let r = nodes[2].put("/_node/_local/_nodes/extra@127.0.0.1", "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let r = nodes[0].delete(&format!("/_node/_local/_nodes/extra@127.0.0.1?rev={rev}"));
    assert_eq!(r.status, 200, "{}", r.text);
    // Longer than a lease: every member still running, as seen by every member.
    std::thread::sleep(Duration::from_secs(3 * LEASE_TTL));
    for n in &nodes {
        assert_eq!(membership(n), (json!(NAMES), json!(NAMES)));
        let r = n.get("/qdb/_all_docs");
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json()["total_rows"], 4, "{}", r.text);
        assert_eq!(n.get("/qdb2").json()["doc_count"], 3);
    }
    let r = nodes[2].delete("/qdb2");
    assert_eq!(r.status, 200, "{}", r.text);

    etcd.restart(leader);
    let r = nodes[0].put("/qdb3?q=1&n=3", "");
    assert_eq!(r.status, 201, "{}", r.text);
    for n in &nodes {
        eventually("qdb3 everywhere, qdb2 gone", || {
            n.get("/_all_dbs").json() == json!(["_replicator", "_users", "qdb", "qdb3"])
        });
    }
}

/// A member isolated, then the others, each side taking edits of the same documents
/// without seeing the other's: once all are together again, internal replication brings
/// every edit to every copy, as CouchDB's conflicts (`_conflicts`, `_deleted_conflicts`),
/// none lost.
///
/// Isolation is SIGSTOP: the member answers nobody (members, etcd, clients) and keeps
/// everything, as behind a partition; its lease runs out, so the others stop asking it.
/// The two sides take their edits one after the other (settee3 while settee1 and settee2
/// are stopped), which is a partition's outcome on the documents: neither side saw the
/// other's edit.
#[test]
fn a_member_isolated_and_rejoining_keeps_both_sides_edits_as_conflicts() {
    let etcd = Etcd::start(1);
    let (_dirs, nodes) = three_members_on(&etcd);
    let copies = create_clustered(&nodes, 0, "pdb", "q=2&n=3");
    let mut rev1 = BTreeMap::new();
    for id in ["c", "del"] {
        let r = nodes[0].put(&format!("/pdb/{id}"), r#"{"v": 1}"#);
        assert_eq!(r.status, 201, "{}", r.text);
        rev1.insert(id, r.json()["rev"].as_str().unwrap().to_string());
    }

    // settee3 cut off: the others edit `c`, delete `del`, add a document.
    pause(&nodes[2], true);
    for n in &nodes[..2] {
        eventually("settee3 no longer running", || running(n) == 2);
    }
    let body = json!({"_rev": rev1["c"], "side": "majority"}).to_string();
    let r = nodes[0].put("/pdb/c", &body);
    assert_eq!(r.status, 201, "{}", r.text);
    let majority_rev = r.json()["rev"].as_str().unwrap().to_string();
    let r = nodes[1].delete(&format!("/pdb/del?rev={}", rev1["del"]));
    assert_eq!(r.status, 200, "{}", r.text);
    let deletion_rev = r.json()["rev"].as_str().unwrap().to_string();
    assert_eq!(nodes[1].put("/pdb/majority-only", "{}").status, 201);

    // Now settee1 and settee2 cut off, settee3 back alone: it still has the first
    // revisions, and edits them (accepted: one copy of three).
    pause(&nodes[0], true);
    pause(&nodes[1], true);
    pause(&nodes[2], false);
    eventually("settee3 running alone", || {
        membership(&nodes[2]).0 == json!([NAMES[2]])
    });
    let r = nodes[2].get("/pdb/c");
    assert_eq!(r.json()["_rev"], json!(rev1["c"]), "{}", r.text);
    let body = json!({"_rev": rev1["c"], "side": "isolated"}).to_string();
    let r = nodes[2].put("/pdb/c", &body);
    assert_eq!(r.status, 202, "{}", r.text);
    let isolated_rev = r.json()["rev"].as_str().unwrap().to_string();
    let body = json!({"_rev": rev1["del"], "side": "isolated"}).to_string();
    let r = nodes[2].put("/pdb/del", &body);
    assert_eq!(r.status, 202, "{}", r.text);
    let edit_rev = r.json()["rev"].as_str().unwrap().to_string();
    assert_eq!(nodes[2].put("/pdb/isolated-only", "{}").status, 202);

    // Together again.
    pause(&nodes[0], false);
    pause(&nodes[1], false);
    for n in &nodes {
        eventually("all three running", || running(n) == 3);
    }
    // CouchDB's winner: of two leaves at the same position, the greater revision id; a
    // live leaf over a deleted one.
    let (winner, loser) = if majority_rev > isolated_rev {
        (&majority_rev, &isolated_rev)
    } else {
        (&isolated_rev, &majority_rev)
    };
    // Every copy gets every edit by internal replication (read on each member directly,
    // no coordinator read repairing anything).
    let copy_of = |id: &str| {
        let range = nodes[0].get(&format!("/pdb/_shards/{id}")).json()["range"].clone();
        (copies.iter())
            .find(|(r, _)| *r == range)
            .map(|(_, c)| copy_path(c))
            .unwrap()
    };
    for n in &nodes {
        let path = format!("{}/c?conflicts=true", copy_of("c"));
        eventually_within(
            Duration::from_secs(60),
            "c's conflict on every copy",
            || {
                let doc = n.get(&path).json();
                doc["_rev"] == json!(winner) && doc["_conflicts"] == json!([loser])
            },
        );
        let path = format!("{}/del?deleted_conflicts=true", copy_of("del"));
        eventually_within(Duration::from_secs(60), "del's edit on every copy", || {
            let doc = n.get(&path).json();
            doc["_rev"] == json!(edit_rev) && doc["_deleted_conflicts"] == json!([deletion_rev])
        });
        for id in ["majority-only", "isolated-only"] {
            let path = format!("{}/{id}", copy_of(id));
            eventually_within(Duration::from_secs(60), "both sides' documents", || {
                n.get(&path).status == 200
            });
        }
    }
    // And so through every member: the winner with its conflict, each side's edit readable.
    for n in &nodes {
        let doc = n.get("/pdb/c?conflicts=true").json();
        assert_eq!(doc["_rev"], json!(winner));
        assert_eq!(doc["_conflicts"], json!([loser]));
        for (rev, side) in [(&majority_rev, "majority"), (&isolated_rev, "isolated")] {
            let doc = n.get(&format!("/pdb/c?rev={rev}")).json();
            assert_eq!(doc["side"], side, "{doc}");
        }
        let doc = n.get("/pdb/del?deleted_conflicts=true").json();
        assert_eq!(doc["side"], "isolated");
        assert_eq!(doc["_deleted_conflicts"], json!([deletion_rev]));
        let listed: Vec<String> = rows(&n.get("/pdb/_all_docs").json()).into_keys().collect();
        assert_eq!(listed, ["c", "del", "isolated-only", "majority-only"]);
    }
}

/// A member down when a database is created gets no copy then; back, internal replication
/// creates its copy and fills it, as CouchDB's creates a missing target shard.
#[test]
fn a_member_down_at_a_creation_gets_its_copy_when_back() {
    let etcd = Etcd::start(1);
    let (dirs, mut nodes) = three_members_on(&etcd);
    nodes[2].kill9();
    eventually("the third member gone", || running(&nodes[0]) == 2);
    let t0 = now_secs();
    let r = nodes[0].put("/late?q=1&n=3", "");
    assert_eq!(r.status, 202, "two copies of three: {}", r.text);
    let t1 = now_secs();
    let r = nodes[1].post(
        "/late/_bulk_docs",
        r#"{"docs": [{"_id": "a"}, {"_id": "b"}, {"_id": "c"}]}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let copy = (t0..=t1)
        .map(|t| format!("shards/00000000-ffffffff/late.{t}"))
        .find(|c| nodes[0].get(&copy_path(c)).status == 200)
        .expect("the copy's name");
    assert_eq!(
        nodes[0].get("/late/_shards").json()["shards"]["00000000-ffffffff"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    nodes[2] = member(&etcd, NAMES[2], dirs[2].path());
    eventually("the late member's copy created and filled", || {
        copy_info(&nodes[2], &copy)["doc_count"] == 3
    });
}
