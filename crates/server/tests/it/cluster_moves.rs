//! Moving shard copies between members (`POST /_cluster/move`, `settee cluster move` and
//! `rebalance`), as CouchDB's documentation moves a shard: the new member added to the
//! range, its copy filled by internal replication, the old member removed and its copy
//! deleted, while clients keep reading and writing.

use crate::common;
use common::cli::{admin_url, ok, settee};

use common::cluster::{
    enc, eventually, keep_writing, member, membership, shards, three_members, NAMES,
};
use common::{Resp, Server, ADMIN};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const FOURTH: &str = "settee4@127.0.0.1";

fn move_copy(s: &Server, db: &str, range: &str, from: &str, to: &str) -> Resp {
    let body = json!({"db": db, "range": range, "from": from, "to": to});
    s.post("/_cluster/move", &body.to_string())
}

/// Every id of `ids` is in `_all_docs` of `s` (one copy per range read), and nothing else
/// but them.
fn holds_exactly(s: &Server, db: &str, ids: &BTreeSet<String>) -> bool {
    let r = s.get(&format!("/{db}/_all_docs"));
    if r.status != 200 {
        return false;
    }
    let rows = r.json()["rows"].as_array().cloned().unwrap_or_default();
    let got: BTreeSet<String> = (rows.iter())
        .filter_map(|row| row["id"].as_str().map(str::to_owned))
        .collect();
    got == *ids
}

/// The copies each running member holds, over every database.
fn held(s: &Server, dbs: &[&str]) -> Vec<usize> {
    let (running, _) = membership(s);
    let running: Vec<&str> = (running.as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap())
        .collect();
    let mut counts = vec![0; running.len()];
    for db in dbs {
        for nodes in shards(s, db).as_object().unwrap().values() {
            for n in nodes.as_array().unwrap() {
                if let Some(i) = running.iter().position(|r| *r == n.as_str().unwrap()) {
                    counts[i] += 1;
                }
            }
        }
    }
    counts
}

#[test]
fn a_copy_moves_under_writes_and_a_new_member_gets_its_share() {
    let (etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];
    assert_eq!(n1.put("/moved?q=2&n=2", "").status, 201);
    let docs: Vec<Value> = (0..40)
        .map(|i| json!({"_id": format!("d{i:03}"), "v": i}))
        .collect();
    let r = n1.post("/moved/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let mut acked: BTreeSet<String> = (0..40).map(|i| format!("d{i:03}")).collect();

    // The first range moves from its first node to the member without it.
    let before = shards(n1, "moved");
    let (range, holders) = before.as_object().unwrap().iter().next().unwrap();
    let range = range.clone();
    let holders: Vec<String> = serde_json::from_value(holders.clone()).unwrap();
    let from = holders[0].clone();
    let to = NAMES
        .iter()
        .find(|n| !holders.contains(&n.to_string()))
        .unwrap()
        .to_string();
    let kept = holders[1].clone();
    let on = |name: &str| &nodes[NAMES.iter().position(|n| *n == name).unwrap()];

    // Refusals first: nothing changes.
    let refused = |r: Resp, status: u16, error: &str| {
        assert_eq!(
            (r.status, r.json()["error"].as_str()),
            (status, Some(error)),
            "{}",
            r.text
        );
    };
    refused(
        move_copy(n1, "moved", "00000000-ffffffff", &from, &to),
        400,
        "bad_request",
    );
    refused(
        move_copy(n1, "moved", &range, &from, "nobody@h"),
        400,
        "bad_request",
    );
    refused(
        move_copy(n1, "moved", &range, &to, &from),
        400,
        "bad_request",
    );
    refused(
        move_copy(n1, "moved", &range, &from, &from),
        400,
        "bad_request",
    );
    refused(move_copy(n1, "nodb", &range, &from, &to), 404, "not_found");
    refused(
        n1.post("/_cluster/move", r#"{"db": "moved"}"#),
        400,
        "bad_request",
    );
    refused(n1.get("/_cluster/move"), 405, "method_not_allowed");
    refused(n1.get("/_cluster/other"), 404, "not_found");
    let anon = n1.anon("POST", "/_cluster/move", Some("{}"), &[]);
    assert_eq!(anon.status, 401, "{}", anon.text);
    assert_eq!(shards(n1, "moved"), before);

    // A writer on every member and a reader keep going while the copy moves.
    let stop = AtomicBool::new(false);
    let written = Mutex::new(Vec::<String>::new());
    let moved = std::thread::scope(|scope| {
        let writer = scope.spawn(|| keep_writing(&nodes, "moved", 3000, &stop, &written));
        let reader = scope.spawn(|| {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = nodes[i % 3].get(&format!("/moved/d{:03}", i % 40));
                assert_eq!(r.status, 200, "read during the move: {}", r.text);
                i += 1;
            }
        });
        // The move shows in the member's `_active_tasks`; a second move of the same range
        // on the same member meanwhile is a conflict.
        let second = scope.spawn(|| {
            eventually("the move among the active tasks", || {
                let tasks = n1.get("/_active_tasks").json();
                (tasks.as_array().unwrap().iter()).any(|t| {
                    t["type"] == "shard_move" && t["database"] == "moved" && t["range"] == *range
                })
            });
            move_copy(n1, "moved", &range, &from, &to)
        });
        let r = move_copy(n1, "moved", &range, &from, &to);
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        reader.join().unwrap();
        refused(second.join().unwrap(), 409, "conflict");
        r
    });
    assert_eq!(moved.status, 200, "{}", moved.text);
    let moved = moved.json();
    assert_eq!(moved["shards"][&range], json!([kept, to]));
    let copy = moved["copy"].as_str().unwrap().to_owned();
    let during = written.into_inner().unwrap();
    assert!(!during.is_empty());
    acked.extend(during);

    // Every member shows the new placement; the other range did not move.
    for n in &nodes {
        eventually("the new placement everywhere", || {
            shards(n, "moved")[&range] == json!([kept, to])
        });
        let other = before.as_object().unwrap().iter().nth(1).unwrap();
        assert_eq!(&shards(n, "moved")[other.0], other.1);
    }
    // The old copy is gone from its member, the new one is on its own.
    let copy_path = format!("/{}", enc(&copy));
    assert_eq!(on(&from).get(&copy_path).status, 404);
    assert_eq!(on(&to).get(&copy_path).status, 200);
    // Nothing acknowledged was lost: each member reads every document, and the ranges'
    // copies hold them all (`_all_docs` reads one copy per range, this member's first).
    for n in &nodes {
        eventually("every acknowledged write on every member", || {
            holds_exactly(n, "moved", &acked)
        });
    }
    for (i, id) in acked.iter().enumerate().step_by(7) {
        let r = nodes[i % 3].get(&format!("/moved/{id}"));
        assert_eq!(r.status, 200, "{id}: {}", r.text);
    }
    let info = on(&to).get(&copy_path).json();
    let on_new: usize = info["doc_count"].as_u64().unwrap() as usize;
    let in_range = (acked.iter())
        .filter(|id| n1.get(&format!("/moved/_shards/{id}")).json()["range"] == range.as_str())
        .count();
    assert_eq!(on_new, in_range, "the new copy holds its range's documents");

    // The CLI refuses what the endpoint refuses.
    let out = settee(&[
        "cluster",
        "move",
        "--url",
        &admin_url(n1),
        "moved",
        "00000000-ffffffff",
        &from,
        &to,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad_request"));

    // A fourth member joins; the plan moves copies to it until all hold about as many.
    let r = n1.put(&format!("/_node/_local/_nodes/{FOURTH}"), "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    let dir = tempfile::tempdir().unwrap();
    let n4 = member(&etcd, FOURTH, dir.path());
    eventually("four running", || {
        membership(n1).0.as_array().unwrap().len() == 4
    });
    assert_eq!(held(n1, &["moved"]).iter().sum::<usize>(), 4);
    let url = admin_url(n1);
    let plan = ok(&["cluster", "rebalance", "--url", &url, "--dry-run"]);
    assert!(plan.contains(&format!("-> {FOURTH}")), "{plan}");
    assert_eq!(
        shards(n1, "moved")[&range],
        json!([kept, to]),
        "a dry run moves nothing"
    );
    let out = ok(&["cluster", "rebalance", "--url", &url]);
    assert!(out.contains("moved "), "{out}");
    let counts = held(n1, &["moved"]);
    assert!(counts.iter().all(|c| *c == 1), "{counts:?}\n{out}");
    assert!(ok(&["cluster", "rebalance", "--url", &url]).contains("balanced"));
    for n in nodes.iter().chain([&n4]) {
        eventually("every document on every member after the rebalance", || {
            holds_exactly(n, "moved", &acked)
        });
    }

    // A client that hangs up right after asking does not leave the range half moved: the
    // move runs to its end on the member.
    let now = shards(n1, "moved");
    let (r1, h1) = now.as_object().unwrap().iter().next().unwrap();
    let h1: Vec<String> = serde_json::from_value(h1.clone()).unwrap();
    let spare = (NAMES.iter().chain([&FOURTH]))
        .find(|n| !h1.contains(&n.to_string()))
        .unwrap()
        .to_string();
    let body = json!({"db": "moved", "range": r1, "from": h1[0], "to": spare}).to_string();
    let mut socket = std::net::TcpStream::connect(n1.addr()).unwrap();
    write!(
        socket,
        "POST /_cluster/move HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        n1.addr(),
        common::basic(ADMIN.0, ADMIN.1),
        body.len()
    )
    .unwrap();
    eventually("the move among the active tasks", || {
        n1.get("/_active_tasks").text.contains("shard_move")
    });
    drop(socket);
    let mut expected = h1[1..].to_vec();
    expected.push(spare.clone());
    eventually("the abandoned move done", || {
        shards(n1, "moved")[r1] == json!(expected)
            && !n1.get("/_active_tasks").text.contains("shard_move")
    });
    for n in nodes.iter().chain([&n4]) {
        eventually("every document on every member after it", || {
            holds_exactly(n, "moved", &acked)
        });
    }

    // Without etcd a move cannot change the map: 503, and the map stays.
    let mut etcd = etcd;
    let now = shards(n1, "moved");
    let (r2, h2) = now.as_object().unwrap().iter().next().unwrap();
    let h2: Vec<String> = serde_json::from_value(h2.clone()).unwrap();
    let spare = (NAMES.iter().chain([&FOURTH]))
        .find(|n| !h2.contains(&n.to_string()))
        .unwrap()
        .to_string();
    etcd.kill(0);
    refused(
        move_copy(n1, "moved", r2, &h2[0], &spare),
        503,
        "service unavailable",
    );
    assert_eq!(shards(n1, "moved"), now);
}

#[test]
fn a_copy_moves_off_a_member_that_is_down() {
    let (_etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];
    assert_eq!(n1.put("/gone?q=1&n=2", "").status, 201);
    let docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("d{i:02}"), "v": i}))
        .collect();
    let r = n1.post("/gone/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let before = shards(n1, "gone");
    let (range, holders) = before.as_object().unwrap().iter().next().unwrap();
    let holders: Vec<String> = serde_json::from_value(holders.clone()).unwrap();
    // The copy moves off a holder other than the member asked (which stays up).
    let from = (holders.iter()).find(|n| *n != NAMES[0]).unwrap().clone();
    let kept = (holders.iter()).find(|n| **n != from).unwrap().clone();
    let to = (NAMES.iter()).find(|n| !holders.contains(&n.to_string()));
    let to = to.unwrap().to_string();
    let down = &nodes[NAMES.iter().position(|n| *n == from).unwrap()];
    down.kill9();
    eventually("the member down for the others", || {
        !membership(n1).0.as_array().unwrap().contains(&json!(from))
    });

    // Moving to the member that is down is refused; moving off it fills the new copy
    // from the copy that runs.
    let r = move_copy(n1, "gone", range, &kept, &from);
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (503, Some("nodedown")),
        "{}",
        r.text
    );
    let r = move_copy(n1, "gone", range, &from, &to);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["shards"][range], json!([kept, to]));
    let copy = r.json()["copy"].as_str().unwrap().to_owned();
    let on_new =
        nodes[NAMES.iter().position(|n| *n == to).unwrap()].get(&format!("/{}", enc(&copy)));
    assert_eq!(on_new.status, 200, "{}", on_new.text);
    assert_eq!(on_new.json()["doc_count"], 30);
    // Reads and writes go on with the range's two running copies.
    let r = n1.put("/gone/after", r#"{"a": 1}"#);
    assert_eq!(r.status, 201, "{}", r.text);
    let ids: BTreeSet<String> = (0..30)
        .map(|i| format!("d{i:02}"))
        .chain(["after".to_string()])
        .collect();
    assert!(holds_exactly(n1, "gone", &ids));
}
