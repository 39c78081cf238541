//! The cluster state against a real etcd (Debian's `etcd`, started here on loopback ports):
//! membership and liveness, shard maps, job ownership, and what happens when etcd or one
//! of its members goes away.

use serde_json::json;
use settee_cluster::testing::Etcd;
use settee_cluster::{Cluster, Config, Error};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Node `node` of the cluster whose keys start at `/test/{prefix}` (each test its own).
async fn start_at(endpoints: Vec<String>, node: &str, prefix: &str) -> Arc<Cluster> {
    let mut config = Config::new(node, &format!("http://{node}"), endpoints, "secret");
    config.prefix = format!("/test/{prefix}");
    config.lease_ttl = Duration::from_secs(2);
    config.timeout = Duration::from_secs(2);
    let c = Cluster::start(config).await.unwrap();
    assert!(c.wait_loaded(Duration::from_secs(10)).await);
    let me = node.to_string();
    eventually("the node alive and listed", || {
        let (alive, listed) = names(&c);
        alive.contains(&me) && listed.contains(&me)
    })
    .await;
    c
}

async fn start(etcd: &Etcd, node: &str, prefix: &str) -> Arc<Cluster> {
    start_at(etcd.endpoints(), node, prefix).await
}

/// Waits up to 15 s for `cond`.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(c: &Cluster) -> (Vec<String>, Vec<String>) {
    (
        c.members().into_iter().map(|m| m.name).collect(),
        c.nodes().into_iter().map(|d| d.name).collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn members_list_themselves_and_leave_when_they_stop_or_die() {
    let etcd = Etcd::start(1);
    let a = start(&etcd, "a@h", "members").await;
    let b = start(&etcd, "b@h", "members").await;
    let both = || {
        (
            vec!["a@h".to_string(), "b@h".into()],
            vec!["a@h".to_string(), "b@h".into()],
        )
    };
    eventually("both alive and listed", || {
        names(&a) == both() && names(&b) == both()
    })
    .await;
    assert_eq!(a.members()[1].url, "http://b@h");

    // A stopped node is no longer alive at once; it stays in the membership list.
    b.stop().await;
    eventually("b gone", || a.members().len() == 1).await;
    assert_eq!(names(&a).1, ["a@h", "b@h"]);

    // A crashed node is alive until its lease runs out.
    let endpoints = etcd.endpoints();
    let (rt, _c) = tokio::task::spawn_blocking(move || crashable(endpoints, "c@h", "members"))
        .await
        .unwrap();
    eventually("c alive", || a.members().iter().any(|m| m.name == "c@h")).await;
    let crashed = Instant::now();
    std::thread::spawn(move || drop(rt)).join().unwrap();
    eventually("c's lease expired", || {
        !a.members().iter().any(|m| m.name == "c@h")
    })
    .await;
    assert!(
        crashed.elapsed() >= Duration::from_secs(1),
        "{:?}",
        crashed.elapsed()
    );
    assert_eq!(names(&a).1, ["a@h", "b@h", "c@h"]);
}

/// A node is listed before it is running (whoever sees it running has seen it listed, so a
/// database created then places copies on it), and a stop revokes its lease however soon
/// after joining it comes: even with a long lease, it is gone at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_runs_once_listed_and_a_stop_right_after_joining_leaves_at_once() {
    let etcd = Etcd::start(1);
    let a = start(&etcd, "a@h", "joining").await;
    for round in 0..5 {
        let name = format!("b{round}@h");
        let mut config = Config::new(&name, "http://b", etcd.endpoints(), "secret");
        config.prefix = "/test/joining".into();
        config.lease_ttl = Duration::from_secs(300);
        let b = Cluster::start(config).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while !a.members().iter().any(|m| m.name == name) {
            assert!(Instant::now() < deadline, "timed out waiting for {name}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(
            a.nodes().iter().any(|d| d.name == name),
            "{name} running before it is listed"
        );
        b.stop().await;
        eventually("b gone", || !a.members().iter().any(|m| m.name == name)).await;
    }
}

/// A node in a runtime of its own (made on a blocking thread), so that dropping the
/// runtime stops it as a crash would: its lease is not revoked, it runs out.
fn crashable(
    endpoints: Vec<String>,
    node: &str,
    prefix: &str,
) -> (tokio::runtime::Runtime, Arc<Cluster>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(start_at(endpoints, node, prefix));
    (rt, cluster)
}

#[tokio::test(flavor = "multi_thread")]
async fn node_documents_follow_couchdbs_revision_rules() {
    let etcd = Etcd::start(1);
    let a = start(&etcd, "a@h", "docs").await;
    let rev = a.put_node("x@h", json!({}), None).await.unwrap();
    assert_eq!(rev.to_string(), "1-967a00dff5e02add41819138abb3284d");
    // Read your writes: the cache shows the write once the call returns.
    assert_eq!(a.node_doc("x@h").unwrap().rev, rev);
    assert!(matches!(
        a.put_node("x@h", json!({}), None).await,
        Err(Error::Conflict)
    ));
    let rev2 = a
        .put_node("x@h", json!({"_rev": rev.to_string(), "zone": "z"}), None)
        .await
        .unwrap();
    assert_eq!(a.node_doc("x@h").unwrap().zone(), Some("z"));
    assert!(matches!(
        a.delete_node("x@h", Some(&rev.to_string())).await,
        Err(Error::Conflict)
    ));
    a.delete_node("x@h", Some(&rev2.to_string())).await.unwrap();
    // A tombstone stays, out of the list.
    assert!(a.node_doc("x@h").unwrap().deleted);
    assert!(a.nodes().iter().all(|d| d.name != "x@h"));
    assert!(matches!(
        a.delete_node("x@h", None).await,
        Err(Error::NotFound("deleted"))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_map_is_created_once_and_seen_everywhere() {
    let etcd = Etcd::start(1);
    let a = start(&etcd, "a@h", "dbs").await;
    let b = start(&etcd, "b@h", "dbs").await;
    let c = start(&etcd, "c@h", "dbs").await;
    eventually("three listed", || {
        a.nodes().len() == 3 && b.nodes().len() == 3
    })
    .await;

    // Two nodes create the same database at once: one wins, the other is told it exists.
    let (x, y) = tokio::join!(
        a.create_db("db", 2, 3, None, false),
        b.create_db("db", 2, 3, None, false)
    );
    assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
    let winner = x.or(y).unwrap();
    assert!(matches!(
        c.create_db("db", 2, 3, None, false).await,
        Err(Error::Exists)
    ));
    eventually("the map everywhere", || {
        [&a, &b, &c]
            .iter()
            .all(|n| n.db("db").as_deref() == Some(&*winner))
    })
    .await;
    assert_eq!(winner.by_range.len(), 2);
    for copies in &winner.by_range {
        let mut nodes = copies.nodes.clone();
        nodes.sort();
        assert_eq!(nodes, ["a@h", "b@h", "c@h"]);
    }
    assert_eq!(c.dbs(), ["db"]);

    // A decommissioned node gets no copies; n is capped by the nodes left.
    let rev = c.node_doc("c@h").unwrap().rev.to_string();
    c.put_node("c@h", json!({"_rev": rev, "decom": true}), None)
        .await
        .unwrap();
    let other = c.create_db("other", 4, 3, None, false).await.unwrap();
    assert_eq!(other.n, 2);
    assert!(!other.holds("c@h"));

    b.delete_db("db").await.unwrap();
    eventually("deleted everywhere", || {
        a.db("db").is_none() && c.db("db").is_none()
    })
    .await;
    assert!(matches!(b.delete_db("db").await, Err(Error::NotFound(_))));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_range_is_edited_in_one_guarded_transaction_and_seen_everywhere() {
    let etcd = Etcd::start(1);
    let a = start(&etcd, "a@h", "edit").await;
    let b = start(&etcd, "b@h", "edit").await;
    let c = start(&etcd, "c@h", "edit").await;
    eventually("three listed", || a.nodes().len() == 3).await;
    let map = a.create_db("db", 2, 2, None, false).await.unwrap();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let range = map.by_range[0].range.clone();
    let before = map.by_range[0].nodes.clone();
    let spare = ["a@h", "b@h", "c@h"]
        .into_iter()
        .find(|n| !before.iter().any(|b| b == n))
        .unwrap();

    // A copy added: one range changes, everything else stays; every node follows.
    let mut grown = before.clone();
    grown.push(spare.to_string());
    let edited = (b.set_range_nodes("db", &map.uuid, &range, &before, grown.clone()))
        .await
        .unwrap();
    assert_eq!(edited.by_range[0].nodes, grown);
    assert_eq!(
        (&edited.by_range[1], edited.n, edited.created),
        (&map.by_range[1], 2, map.created)
    );
    assert_eq!(b.db("db").as_deref(), Some(&*edited), "read your write");
    eventually("the edit everywhere", || {
        [&a, &c]
            .iter()
            .all(|n| n.db("db").as_deref() == Some(&*edited))
    })
    .await;

    // An edit from what was there before is a conflict, not a lost update.
    let stale = a
        .set_range_nodes("db", &map.uuid, &range, &before, s(&[spare]))
        .await;
    assert!(matches!(stale, Err(Error::Conflict)), "{stale:?}");
    // Two edits from the same map at once: one wins, the other conflicts.
    let (x, y) = tokio::join!(
        a.set_range_nodes("db", &map.uuid, &range, &grown, grown[1..].to_vec()),
        c.set_range_nodes("db", &map.uuid, &range, &grown, grown[..2].to_vec())
    );
    assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
    assert!(matches!(
        x.as_ref().err().or(y.as_ref().err()),
        Some(Error::Conflict)
    ));
    let won = x.or(y).unwrap();
    eventually("the winner everywhere", || {
        [&a, &b, &c]
            .iter()
            .all(|n| n.db("db").as_deref() == Some(&*won))
    })
    .await;
    assert_eq!(won.by_range[0].nodes.len(), 2);

    // Refusals: another creation of the name, an unknown range, no node or one twice, no
    // such database; none changes the map.
    let now = won.by_range[0].nodes.clone();
    let other = a
        .set_range_nodes("db", "other-uuid", &range, &now, s(&[spare]))
        .await;
    assert!(matches!(other, Err(Error::Conflict)), "{other:?}");
    let unknown = a.set_range_nodes("db", &map.uuid, "00000000-ffffffff", &now, s(&[spare]));
    assert!(matches!(unknown.await, Err(Error::Plan(_))));
    let empty = a
        .set_range_nodes("db", &map.uuid, &range, &now, vec![])
        .await;
    assert!(matches!(empty, Err(Error::Plan(_))), "{empty:?}");
    let twice = a.set_range_nodes("db", &map.uuid, &range, &now, s(&[spare, spare]));
    assert!(matches!(twice.await, Err(Error::Plan(_))));
    let missing = a
        .set_range_nodes("nodb", &map.uuid, &range, &now, s(&[spare]))
        .await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    assert_eq!(a.db("db").as_deref(), Some(&*won));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_has_one_owner_and_moves_when_its_owner_dies() {
    let etcd = Etcd::start(1);
    let b = start(&etcd, "b@h", "jobs").await;
    let endpoints = etcd.endpoints();
    let rt = tokio::task::spawn_blocking(move || {
        let (rt, a) = crashable(endpoints, "a@h", "jobs");
        assert!(rt.block_on(claim(&a, "_replicator/r1")));
        rt
    })
    .await
    .unwrap();
    eventually("a owns r1", || {
        b.owner("_replicator/r1").as_deref() == Some("a@h")
    })
    .await;
    assert!(!claim(&b, "_replicator/r1").await);
    // a dies: its claim runs out with its lease, and b can take the job.
    std::thread::spawn(move || drop(rt)).join().unwrap();
    eventually("r1 free", || b.owner("_replicator/r1").is_none()).await;
    assert!(claim(&b, "_replicator/r1").await);
    assert!(
        claim(&b, "_replicator/r1").await,
        "claiming one's own job again"
    );
    eventually("b owns r1", || {
        b.owner("_replicator/r1").as_deref() == Some("b@h")
    })
    .await;
    b.release("_replicator/r1").await.unwrap();
    eventually("released", || b.owner("_replicator/r1").is_none()).await;
}

/// Claims `job`, waiting for the node's lease (held once the node has joined).
async fn claim(c: &Cluster, job: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.claim(job).await {
            Ok(held) => return held,
            Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_etcd_reads_go_on_and_writes_are_refused_until_it_returns() {
    let mut etcd = Etcd::start(1);
    let a = start(&etcd, "a@h", "down").await;
    a.put_node("b@h", json!({}), None).await.unwrap();
    a.create_db("db", 1, 1, None, false).await.unwrap();
    etcd.kill(0);
    let t = Instant::now();
    assert!(matches!(
        a.create_db("db2", 1, 1, None, false).await,
        Err(Error::Unavailable(_))
    ));
    assert!(matches!(
        a.put_node("c@h", json!({}), None).await,
        Err(Error::Unavailable(_))
    ));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let map = a.db("db").unwrap();
    let (range, nodes) = (&map.by_range[0].range, &map.by_range[0].nodes);
    let edit = a.set_range_nodes("db", &map.uuid, range, nodes, vec!["b@h".into()]);
    assert!(matches!(edit.await, Err(Error::Unavailable(_))));
    // What was read before answers still.
    assert!(a.db("db").is_some());
    assert_eq!(names(&a).1, ["a@h", "b@h"]);
    etcd.restart(0);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match a.create_db("db2", 1, 1, None, false).await {
            Ok(_) => break,
            Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    eventually("a alive again", || names(&a).0 == ["a@h"]).await;
    assert_eq!(a.dbs(), ["db", "db2"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_etcd_member_down_changes_nothing() {
    let mut etcd = Etcd::start(3);
    let a = start(&etcd, "a@h", "quorum").await;
    let b = start(&etcd, "b@h", "quorum").await;
    eventually("both alive", || a.members().len() == 2).await;
    // The leader: requests a follower forwarded to it are never answered.
    etcd.kill(etcd.leader().expect("a leader"));
    for i in 0..20 {
        a.put_node(&format!("t{i}@h"), json!({}), None)
            .await
            .unwrap();
    }
    a.create_db("db", 2, 2, None, false).await.unwrap();
    eventually("b sees it", || b.db("db").is_some()).await;
    eventually("a sees b's writes", || a.node_doc("t19@h").is_some()).await;
    // Leases are kept alive through the members left: nobody leaves.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(names(&a).0, ["a@h", "b@h"]);
}
