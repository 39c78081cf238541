//! Internal replication (CouchDB's `mem3_sync`). A cluster member pushes the changes of each
//! shard copy it holds to the other copies of the copy's range, so a copy that missed
//! writes (its member was down, or a write reached fewer than all copies) catches up
//! without waiting for a read to repair it.
//!
//! A push is a one-shot run of the replicator's algorithm: from the copy on this member,
//! read in process, to the copy on the other member over HTTP, each request signed as this
//! member (`settee_cluster::peer`). Its checkpoint (`_local/shard-sync-{hash}` on both
//! copies, the hash naming the copy and both members) lets a member that comes back resume
//! where the last push stopped, never from zero.
//!
//! Pushes are found by polling: every [`INTERVAL`], each held copy whose update seq moved
//! since its last successful push to a running member is pushed again. Writes through the
//! coordinator already reach every running copy; this only repairs the copies that did not
//! take them, so a second's delay costs no acknowledged write.
//!
//! The system databases every member keeps whole ([`EVERYWHERE`]: `_users`, `_replicator`)
//! are pushed the same way to every other running member, as CouchDB keeps its node-local
//! `_nodes` and `_dbs` on every node: a user or a replication document written on any
//! member reaches every member within a round (conflicting edits become conflicts, as on
//! any replicated database). Which member runs a replication document is decided by a
//! claim in etcd (`settee_node::replication`).

use futures_util::future::select_all;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use settee_auth::UserCtx;
use settee_cluster::{peer, Cluster, EVERYWHERE};
use settee_node::replication::Replicator;
use settee_node::Node;
use settee_replicator::job::{Job, Options};
use settee_replicator::remote::{Remote, RemoteSpec};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// How often the held copies are looked at.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long another member may stay silent in a push before it is left for the next round.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Characters a copy's name keeps unescaped in its URL's path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Starts this member's pushes (needs the Tokio runtime; the node joined its cluster): a
/// round every [`INTERVAL`], and at once when a database of [`EVERYWHERE`] changes (a
/// user written on this member logs in on the others without waiting for the tick).
pub fn start(node: Arc<Node>, replicator: Arc<Replicator>) {
    tokio::spawn(async move {
        let mut pushed = Pushed::default();
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watched: Vec<watch::Receiver<u64>> = (EVERYWHERE.iter())
            .filter_map(|name| node.couch.get(name).ok())
            .map(|db| db.watch_seq())
            .collect();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = changed(&mut watched) => {}
            }
            if let Some(cluster) = node.cluster() {
                round(&node, &replicator, cluster, &mut pushed).await;
            }
        }
    });
}

/// Completes when one of `watched` sees a new update seq (one whose database is gone is
/// dropped); never when none is left.
async fn changed(watched: &mut Vec<watch::Receiver<u64>>) {
    if watched.is_empty() {
        return std::future::pending().await;
    }
    let (seen, i, _) = select_all(watched.iter_mut().map(|rx| Box::pin(rx.changed()))).await;
    if seen.is_err() {
        watched.remove(i);
    }
}

/// The update seq of each (copy, member) pair's last successful push.
type Pushed = HashMap<(String, String), u64>;

/// Pushes every held copy (and every database of [`EVERYWHERE`]) that changed since its
/// last push to each other running copy.
async fn round(
    node: &Arc<Node>,
    replicator: &Arc<Replicator>,
    cluster: &Arc<Cluster>,
    pushed: &mut Pushed,
) {
    let me = cluster.config().node.clone();
    let running: HashMap<String, String> = (cluster.members().into_iter())
        .map(|m| (m.name, m.url))
        .collect();
    // (database, its update seq before the push, the member to push it to, and for a
    // shard copy the query creating it): changes made during a push are pushed next round.
    let mut targets: Vec<(String, u64, String, Option<&str>)> = Vec::new();
    for name in cluster.dbs() {
        let Some(map) = cluster.db(&name) else {
            continue;
        };
        for copies in map.by_range.iter().filter(|c| c.nodes.contains(&me)) {
            let copy = map.copy_name(&name, &copies.range);
            let Ok(db) = node.couch.get(&copy) else {
                continue;
            };
            let seq = db.update_seq();
            let create = if map.partitioned {
                "?q=1&partitioned=true"
            } else {
                "?q=1"
            };
            for other in copies.nodes.iter().filter(|n| **n != me) {
                targets.push((copy.clone(), seq, other.clone(), Some(create)));
            }
        }
    }
    for name in EVERYWHERE {
        let Ok(db) = node.couch.get(name) else {
            continue;
        };
        let seq = db.update_seq();
        for other in running.keys().filter(|n| **n != me) {
            targets.push((name.to_owned(), seq, other.clone(), None));
        }
    }
    let mut held = HashSet::new();
    for (db, seq, other, create) in targets {
        let key = (db, other);
        held.insert(key.clone());
        let Some(url) = running.get(&key.1) else {
            continue;
        };
        let first = !pushed.contains_key(&key);
        if pushed.get(&key) == Some(&seq) {
            continue;
        }
        // The map may have changed since the round began: a copy moved off a member
        // (`settee_node::moves`) is neither created there again nor pushed to.
        if create.is_some() && !placed(cluster, &key.0, &key.1) {
            continue;
        }
        // A copy the other member may lack (its member was down when the database was
        // created): created before the first push, as CouchDB's internal replication
        // creates a missing target shard.
        if let (true, Some(query)) = (first, create) {
            if let Err(e) = ensure_copy(node, &key.0, &key.1, query).await {
                tracing::warn!(copy = %key.0, on = %key.1, "internal replication: {e}");
                continue;
            }
        }
        match push(replicator, cluster, &key.0, &key.1, url).await {
            Ok(()) => {
                pushed.insert(key, seq);
            }
            Err(e) => tracing::warn!(db = %key.0, to = %key.1, "internal replication: {e}"),
        }
    }
    pushed.retain(|k, _| held.contains(k));
}

/// Whether the map of shard copy `copy` (`shards/{range}/{db}.{created}`) still places
/// its range on member `other`.
fn placed(cluster: &Cluster, copy: &str, other: &str) -> bool {
    let Some((range, rest)) = copy.strip_prefix("shards/").and_then(|c| c.split_once('/')) else {
        return false;
    };
    let Some((db, _)) = rest.rsplit_once('.') else {
        return false;
    };
    cluster.db(db).is_some_and(|map| {
        (map.by_range.iter()).any(|c| c.range == range && c.nodes.iter().any(|n| n == other))
    })
}

/// Creates `copy` on member `other` (`query`: its creation's) unless it has it.
async fn ensure_copy(node: &Node, copy: &str, other: &str, query: &str) -> Result<(), String> {
    let target = format!("/{}{query}", utf8_percent_encode(copy, SEGMENT));
    match node.peer_json(other, "PUT", &target, None, None).await {
        // Created now, or there already.
        Ok(Some(answer)) if matches!(answer.status, 201 | 202 | 412) => Ok(()),
        Ok(Some(answer)) => Err(format!(
            "creating the copy answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        )),
        Ok(None) => Err("the member is not running".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// One push of `copy` (a shard copy, or one of [`EVERYWHERE`]) to member `other` (at
/// `url`).
async fn push(
    replicator: &Arc<Replicator>,
    cluster: &Cluster,
    copy: &str,
    other: &str,
    url: &str,
) -> Result<(), String> {
    let config = cluster.config();
    let me = config.node.clone();
    let secret = config.secret.clone();
    let target = Remote::new(&RemoteSpec {
        url: format!(
            "{}/{}/",
            url.trim_end_matches('/'),
            utf8_percent_encode(copy, SEGMENT)
        ),
        headers: Default::default(),
        basic: None,
        timeout: PEER_TIMEOUT,
        retries: 1,
        connections: 2,
    })
    .map_err(|e| e.to_string())?
    .signed(Arc::new(move |method: &str, target: &str| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        (peer::HEADER, peer::sign(&secret, &me, method, target, now))
    }));
    let member = UserCtx::named(&config.node, vec!["_admin".into()]);
    let source = replicator.local_db(copy, member, format!("{copy}/"));
    let (_stop, stop) = tokio::sync::watch::channel(false);
    let job = Job {
        source,
        target,
        base_id: checkpoint_id(copy, &config.node, other),
        options: Options {
            connection_timeout: PEER_TIMEOUT,
            record_target_seq: settee_replicator::job::TargetSeq::Always,
            ..Options::default()
        },
        progress: Default::default(),
        stop,
    };
    job.run().await.map(|_| ()).map_err(|e| e.to_string())
}

/// The name of the checkpoint of `copy`'s pushes from one member to another (a move waits
/// on it: `settee_node::moves`).
pub use settee_node::moves::checkpoint_id;
