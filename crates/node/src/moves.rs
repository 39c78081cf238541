//! Moving a shard copy to another member, as CouchDB's documentation moves a shard by hand
//! ("Moving a shard"): the new member is added to the range in the shard map, internal
//! replication fills its copy, then the old member is removed from the map and its copy
//! deleted. Settee-specific as an operation (CouchDB has it only as edits of `_dbs`
//! documents); `POST /_cluster/move` asks for it.
//!
//! Reads and writes go on throughout: coordinators read the map per request, so from the
//! first edit on every write goes to the new copy too, and from the second the old copy is
//! no longer asked. What the old copy held before is carried over by internal replication
//! (`settee_sync`): the move waits until the old copy's push checkpoint towards the new
//! member has reached the old copy's update seq as it stood once every member saw the new
//! copy in the map. Each map edit is conditional on the map as the move read it
//! (`Cluster::set_range_nodes`): a concurrent edit is a 409, never a lost update.
//!
//! A move that fails half-way leaves the range with one copy more (the new one added, the
//! old one kept), which serves as any copy; the same move asked again resumes from there.

use crate::{Error, Node, Result};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use settee_cluster::{Cluster, ShardMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long after the new copy entered the map the old copy's seq is read: every member
/// follows etcd by watch within moments, and writes begun under the old map are answered.
const SETTLE: Duration = Duration::from_secs(1);
/// How often the push's progress is looked at.
const POLL: Duration = Duration::from_millis(250);
/// How long the new copy may stay without progress before the move gives up (the range
/// then keeps both copies).
const STALLED: Duration = Duration::from_secs(120);

/// One copy to move: `db`'s copy of `range` from member `from` to member `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub db: String,
    pub range: String,
    pub from: String,
    pub to: String,
}

impl Move {
    /// `{"db", "range", "from", "to"}`, each a string.
    pub fn parse(body: &Value) -> Result<Move> {
        let field = |k: &str| match body.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(_) => Err(Error::BadRequest(format!(
                "`{k}` must be a non-empty string"
            ))),
            None => Err(Error::BadRequest(format!("`{k}` is required"))),
        };
        if !body.is_object() {
            return Err(Error::BadRequest(
                "the request body must be an object".into(),
            ));
        }
        Ok(Move {
            db: field("db")?,
            range: field("range")?,
            from: field("from")?,
            to: field("to")?,
        })
    }
}

/// The steps of a move, as `_active_tasks` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The new copy's database created on its member.
    Creating,
    /// The new member added to the range.
    Adding,
    /// Internal replication filling the new copy.
    Filling,
    /// The old member removed from the range.
    Removing,
    /// The old copy's database deleted.
    Deleting,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Creating => "creating_copy",
            Phase::Adding => "adding_copy",
            Phase::Filling => "filling_copy",
            Phase::Removing => "removing_copy",
            Phase::Deleting => "deleting_copy",
        }
    }
}

/// The moves this member runs now (`_active_tasks`' `shard_move` entries).
#[derive(Default)]
pub struct Moves(Mutex<Vec<Running>>);

struct Running {
    what: Move,
    pid: u64,
    started_on: u64,
    updated_on: u64,
    phase: Phase,
    /// The old copy's seq pushed to the new one so far, and the seq to reach.
    done: u64,
    total: u64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Moves {
    /// Registers `what`; a 409 while a move of the same range of the same database runs
    /// here.
    fn start(&self, what: &Move) -> Result<()> {
        static PIDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut moves = self.0.lock().unwrap();
        if (moves.iter()).any(|m| m.what.db == what.db && m.what.range == what.range) {
            return Err(settee_cluster::Error::Conflict.into());
        }
        let now = now_secs();
        moves.push(Running {
            what: what.clone(),
            pid: PIDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            started_on: now,
            updated_on: now,
            phase: Phase::Creating,
            done: 0,
            total: 0,
        });
        Ok(())
    }

    fn update(&self, what: &Move, phase: Phase, done: u64, total: u64) {
        let mut moves = self.0.lock().unwrap();
        if let Some(m) = moves.iter_mut().find(|m| m.what == *what) {
            (m.phase, m.done, m.total, m.updated_on) = (phase, done, total, now_secs());
        }
    }

    fn finish(&self, what: &Move) {
        self.0.lock().unwrap().retain(|m| m.what != *what);
    }

    /// `_active_tasks` entries: `progress` is the percentage of the old copy's seq pushed
    /// to the new one (100 once it is filled).
    pub fn list(&self) -> Vec<Value> {
        let moves = self.0.lock().unwrap();
        (moves.iter())
            .map(|m| {
                let progress = match (m.phase, m.total) {
                    (Phase::Creating | Phase::Adding, _) => 0,
                    (Phase::Filling, 0) => 0,
                    (Phase::Filling, total) => (m.done * 100 / total).min(99),
                    _ => 100,
                };
                json!({
                    "type": "shard_move",
                    "node": settee_core::node::name(),
                    "pid": format!("<0.{}.2>", m.pid),
                    "database": m.what.db,
                    "range": m.what.range,
                    "source": m.what.from,
                    "target": m.what.to,
                    "phase": m.phase.as_str(),
                    "changes_done": m.done,
                    "total_changes": m.total,
                    "progress": progress,
                    "process_status": "running",
                    "started_on": m.started_on,
                    "updated_on": m.updated_on,
                })
            })
            .collect()
    }
}

/// The checkpoint of internal replication's pushes of `copy` from member `from` to member
/// `to` (`_local/{this}` on both copies): the same name `settee_sync` gives it.
pub fn checkpoint_id(copy: &str, from: &str, to: &str) -> String {
    use md5::Digest;
    let digest = md5::Md5::digest(format!("{copy}\n{from}\n{to}").as_bytes());
    format!("shard-sync-{}", hex::encode(digest))
}

/// The counter of an update seq as a copy shows it (`"12-g1AAA…"`, or a number).
fn seq_number(seq: &Value) -> Option<u64> {
    match seq {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.split('-').next()?.parse().ok(),
        _ => None,
    }
}

impl Node {
    /// Moves a copy (see the module's documentation): the database's map once moved. The
    /// move runs on a task of its own, to its end even if the caller stops waiting (a
    /// client that hangs up does not leave a range half moved).
    pub async fn move_copy(self: &Arc<Self>, what: Move) -> Result<Value> {
        let cluster = self.cluster().ok_or(Error::NotClustered)?.clone();
        let map = cluster
            .db(&what.db)
            .ok_or_else(|| Error::NotFound("Database does not exist.".into()))?;
        check(&cluster, &map, &what)?;
        self.moves.start(&what)?;
        let (node, running) = (self.clone(), what.clone());
        let task = tokio::spawn(async move {
            let moved = node.run_move(&cluster, &map, &running).await;
            node.moves.finish(&running);
            moved
        });
        let map = task
            .await
            .map_err(|e| Error::internal(format!("the move's task: {e}")))??;
        tracing::info!(db = %what.db, range = %what.range, from = %what.from, to = %what.to,
            "shard copy moved");
        let shards: serde_json::Map<String, Value> = (map.by_range.iter())
            .map(|c| (c.range.clone(), json!(c.nodes)))
            .collect();
        Ok(json!({
            "ok": true,
            "db": what.db,
            "copy": map.copy_name(&what.db, &what.range),
            "range": what.range,
            "from": what.from,
            "to": what.to,
            "shards": shards,
        }))
    }

    async fn run_move(&self, cluster: &Cluster, map: &ShardMap, what: &Move) -> Result<ShardMap> {
        let copy = map.copy_name(&what.db, &what.range);
        let path = format!("/{}", utf8_percent_encode(&copy, NON_ALPHANUMERIC));
        let nodes = &(map.by_range.iter())
            .find(|c| c.range == what.range)
            .expect("checked")
            .nodes;
        // A move asked again after it failed half-way finds the new copy in the map already.
        let mut map = map.clone();
        if !nodes.contains(&what.to) {
            self.moves.update(what, Phase::Creating, 0, 0);
            let query = if map.partitioned {
                "?q=1&partitioned=true"
            } else {
                "?q=1"
            };
            let created = self
                .ask_member(&what.to, "PUT", &format!("{path}{query}"))
                .await?;
            if !matches!(created.0, 201 | 202 | 412) {
                return Err(refused(&what.to, "creating the new copy", created));
            }
            self.moves.update(what, Phase::Adding, 0, 0);
            let mut grown = nodes.clone();
            grown.push(what.to.clone());
            let added =
                (cluster.set_range_nodes(&what.db, &map.uuid, &what.range, nodes, grown)).await;
            map = match added {
                Ok(edited) => (*edited).clone(),
                Err(e) => {
                    // A copy made for nothing goes again (one there before stays).
                    if created.0 == 201 {
                        let _ = self.ask_member(&what.to, "DELETE", &path).await;
                    }
                    return Err(e.into());
                }
            };
        }
        let from = source(cluster, nodes, what)?;
        self.fill(what, &from, &path, &copy).await?;
        self.moves.update(what, Phase::Removing, 0, 0);
        let nodes = &(map.by_range.iter())
            .find(|c| c.range == what.range)
            .expect("checked")
            .nodes;
        let shrunk: Vec<String> = (nodes.iter())
            .filter(|n| **n != what.from)
            .cloned()
            .collect();
        let map = (*cluster
            .set_range_nodes(&what.db, &map.uuid, &what.range, nodes, shrunk)
            .await?)
            .clone();
        // Writes begun under the previous map are answered before the old copy goes.
        tokio::time::sleep(SETTLE).await;
        if from != what.from {
            tracing::warn!(copy, node = %what.from, "moved off a member that is down: the old copy kept");
            return Ok(map);
        }
        self.moves.update(what, Phase::Deleting, 0, 0);
        match self.ask_member(&what.from, "DELETE", &path).await {
            Ok((200 | 202 | 404, _)) => {}
            Ok(answer) => {
                let e = refused(&what.from, "deleting the old copy", answer);
                tracing::warn!(copy, node = %what.from, "moved, the old copy kept: {e}");
            }
            Err(e) => tracing::warn!(copy, node = %what.from, "moved, the old copy kept: {e}"),
        }
        Ok(map)
    }

    /// Waits until the new copy holds what the source copy `from` (the old one, or another
    /// if the old one's member is down) held once every member saw the new copy in the map:
    /// the push checkpoint the new copy keeps (written there only by a push into this very
    /// copy, unlike the source's, which may be left from an earlier copy of the same name
    /// on that member) has reached that seq. Writes from then on reach the new copy
    /// directly.
    async fn fill(&self, what: &Move, from: &str, path: &str, copy: &str) -> Result<()> {
        self.moves.update(what, Phase::Filling, 0, 0);
        tokio::time::sleep(SETTLE).await;
        let info = self.member_json(from, path).await?;
        let total = info.get("update_seq").and_then(seq_number).unwrap_or(0);
        let checkpoint = format!("{path}/_local/{}", checkpoint_id(copy, from, &what.to));
        let (mut done, mut moved_at) = (0, Instant::now());
        while done < total {
            self.moves.update(what, Phase::Filling, done, total);
            tokio::time::sleep(POLL).await;
            let reached = match self.ask_member(&what.to, "GET", &checkpoint).await? {
                (200, body) => body
                    .get("source_last_seq")
                    .and_then(seq_number)
                    .unwrap_or(0),
                (404, _) => 0,
                answer => return Err(refused(&what.to, "reading the push checkpoint", answer)),
            };
            if reached > done {
                (done, moved_at) = (reached, Instant::now());
            } else if moved_at.elapsed() > STALLED {
                return Err(Error::Relayed {
                    status: 503,
                    error: "timeout".into(),
                    reason: format!(
                        "the new copy on {} stopped catching up (at {done} of {total}); the \
                         range keeps both copies, and the same move asked again resumes",
                        what.to
                    ),
                });
            }
        }
        self.moves.update(what, Phase::Filling, total, total);
        Ok(())
    }

    /// A request of member `name` (signed as this node): status and JSON body.
    async fn ask_member(&self, name: &str, method: &str, target: &str) -> Result<(u16, Value)> {
        match self.peer_json(name, method, target, None, None).await? {
            Some(answer) => {
                let body = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
                Ok((answer.status, body))
            }
            None => Err(node_down(name)),
        }
    }

    async fn member_json(&self, name: &str, target: &str) -> Result<Value> {
        match self.ask_member(name, "GET", target).await? {
            (200, body) => Ok(body),
            answer => Err(refused(name, "reading the old copy", answer)),
        }
    }
}

/// Whether `what` can be asked of `map`: the range exists, `from` holds it, `to` is
/// another listed node, and both run.
fn check(cluster: &Cluster, map: &ShardMap, what: &Move) -> Result<()> {
    let bad = |why: String| Err(Error::BadRequest(why));
    let Some(copies) = map.by_range.iter().find(|c| c.range == what.range) else {
        return bad(format!("{} has no range {}", what.db, what.range));
    };
    if what.from == what.to {
        return bad("`from` and `to` are the same node".into());
    }
    if !copies.nodes.contains(&what.from) {
        return bad(format!(
            "{} holds no copy of range {} of {}",
            what.from, what.range, what.db
        ));
    }
    if !cluster.nodes().iter().any(|d| d.name == what.to) {
        return bad(format!("{} is not a node of the cluster", what.to));
    }
    if !cluster.members().iter().any(|m| m.name == what.to) {
        return Err(node_down(&what.to));
    }
    source(cluster, &copies.nodes, what).map(|_| ())
}

/// The copy the new one is filled from: the old one while its member runs, else another
/// running copy of the range. A copy can thus move off a member that is down; writes that
/// reached only the old copy (none, for a write answered 201 under the default `w`) stay
/// in it, on its member, which is never asked to delete it while down.
fn source(cluster: &Cluster, holders: &[String], what: &Move) -> Result<String> {
    let running = cluster.members();
    let runs = |node: &String| running.iter().any(|m| m.name == *node);
    if runs(&what.from) {
        return Ok(what.from.clone());
    }
    (holders.iter())
        .find(|n| **n != what.from && **n != what.to && runs(n))
        .cloned()
        .ok_or_else(|| node_down(&what.from))
}

/// A member the move needs is not running: 503 `nodedown` (CouchDB's name for an
/// unreachable node), not the 503 of an unreachable etcd.
fn node_down(node: &str) -> Error {
    Error::Relayed {
        status: 503,
        error: "nodedown".into(),
        reason: format!("node {node} is not running"),
    }
}

/// A member's refusal of a step of the move, passed on as it gave it.
fn refused(node: &str, step: &str, (status, body): (u16, Value)) -> Error {
    let text = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    Error::Relayed {
        status: if status >= 400 { status } else { 500 },
        error: match text("error") {
            e if e.is_empty() => "error".into(),
            e => e,
        },
        reason: format!("{step} on {node}: {} {}", status, text("reason")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_is_four_strings() {
        let m = Move::parse(&json!({"db": "d", "range": "r", "from": "a@h", "to": "b@h"}));
        assert_eq!(m.unwrap().to, "b@h");
        for bad in [
            json!([]),
            json!({"db": "d", "range": "r", "from": "a@h"}),
            json!({"db": "d", "range": "r", "from": "a@h", "to": 1}),
            json!({"db": "", "range": "r", "from": "a@h", "to": "b@h"}),
        ] {
            assert!(
                matches!(Move::parse(&bad), Err(Error::BadRequest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn seqs_count_as_their_number() {
        assert_eq!(seq_number(&json!("12-g1AAAA")), Some(12));
        assert_eq!(seq_number(&json!(7)), Some(7));
        assert_eq!(seq_number(&json!("0")), Some(0));
        assert_eq!(seq_number(&json!(null)), None);
    }

    #[test]
    fn the_checkpoint_names_the_copy_and_both_members() {
        let a = checkpoint_id("shards/00000000-7fffffff/db.1", "n1@h", "n2@h");
        assert!(a.starts_with("shard-sync-") && a.len() == "shard-sync-".len() + 32);
        assert_ne!(
            a,
            checkpoint_id("shards/00000000-7fffffff/db.1", "n2@h", "n1@h")
        );
    }
}
