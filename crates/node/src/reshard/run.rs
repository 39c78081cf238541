//! Running split jobs: every member looks at the jobs every [`TICK`] and runs those it
//! holds the claim of (`Cluster::claim`, under its lease).
//!
//! A job is run by its own member, which alone can read its copy: each half is a new
//! local database filled from the copy by the replicator's algorithm, in process, through
//! a source that passes on only the documents whose id (a partitioned database's: whose
//! partition) hashes into the half ([`InRange`]). So every revision of every document goes
//! with its history, deletions and attachments included, and each later top-off copies
//! only what the copy took since the last (the replication's checkpoint). Local documents
//! are copied to both halves (internal replication's and the split's own checkpoints
//! excepted).
//!
//! Writes go on throughout: until the map names the halves, coordinators write to the
//! copy, and the top-offs carry those writes over; the last top-off (`topoff3`) runs after
//! the map's edit and a pause ([`SETTLE`]) for writes begun under the old map, and only
//! then is the copy deleted.
//!
//! A member that stops or dies loses its claims with its lease. When it comes back it
//! claims its jobs again and resumes each from where its step restarts
//! ([`job::restart_step`]; the top-offs resume from their checkpoints). While it is not
//! running, another member takes its jobs over: the copy cannot be read, so the member
//! taking over only waits for the other copies' jobs and edits the map; the halves of the
//! absent member are then made and filled by internal replication from the other copies
//! when it is back, and it deletes its old copy itself ([`forget_old_copy`]).

use super::job::{self, JobState, SplitJob};
use super::{now_secs, settings, update_job};
use crate::replication::Replicator;
use crate::{Node, Result};
use serde_json::{Map, Value};
use settee_auth::UserCtx;
use settee_cluster::Cluster;
use settee_replicator::endpoint::{
    Changes, Content, Doc, Endpoint, Fetch, Filter, Follows, Missing, PeerInfo, Wait, WriteFailure,
};
use settee_replicator::job::TargetSeq;
use std::sync::Arc;
use std::time::Duration;

/// How often the jobs are looked at.
pub const TICK: Duration = Duration::from_millis(500);
/// How long after the map's edit the copy is topped off a last time: every member follows
/// etcd by watch within moments, and writes begun under the old map are answered.
const SETTLE: Duration = Duration::from_secs(1);
/// The prefix of the halves' copy checkpoints (`_local/shard-split-…`).
const CHECKPOINT: &str = "shard-split-";

/// Starts this member's part (needs the Tokio runtime; the node joined its cluster).
pub fn start(node: Arc<Node>, replicator: Arc<Replicator>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Some(cluster) = node.cluster() {
                round(&node, &replicator, cluster).await;
            }
        }
    });
}

fn claim_name(id: &str) -> String {
    format!("reshard-{id}")
}

/// Claims and starts the jobs this member should run.
async fn round(node: &Arc<Node>, replicator: &Arc<Replicator>, cluster: &Arc<Cluster>) {
    let me = cluster.config().node.clone();
    let running: Vec<String> = cluster.members().into_iter().map(|m| m.name).collect();
    let switched_on = super::switch(cluster).running;
    for j in super::jobs(cluster) {
        if j.job_state.finished() {
            if j.node == me {
                forget_old_copy(node, cluster, &j);
            }
            continue;
        }
        if !switched_on || j.job_state == JobState::Stopped {
            continue;
        }
        let here = j.node == me;
        if !here && running.contains(&j.node) {
            continue;
        }
        let claim = claim_name(&j.id);
        match cluster.owner(&claim) {
            Some(owner) if owner != me => continue,
            Some(_) => {}
            None => match cluster.claim(&claim).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(job = %j.id, "split job not claimed: {e}");
                    continue;
                }
            },
        }
        if !node.splits.start(&j) {
            continue;
        }
        if !here {
            tracing::info!(job = %j.id, node = %j.node, "split job taken over: its node is down");
        }
        let (node, replicator, cluster) = (node.clone(), replicator.clone(), cluster.clone());
        tokio::spawn(async move {
            let run = Run {
                node: &node,
                replicator: &replicator,
                cluster: &cluster,
                id: &j.id,
                here,
                last_known: Default::default(),
            };
            if let Err(e) = run.run().await {
                tracing::warn!(job = %j.id, "split job: {e}");
            }
            node.splits.finish(&j.id);
            if let Err(e) = cluster.release(&claim_name(&j.id)).await {
                tracing::debug!(job = %j.id, "split job claim kept: {e}");
            }
        });
    }
}

/// Deletes this member's copy split by a finished job if it is still here and the map no
/// longer names it (the job was finished by another member while this one was down).
fn forget_old_copy(node: &Node, cluster: &Cluster, j: &SplitJob) {
    if j.job_state != JobState::Completed {
        return;
    }
    let source = j.source();
    let Some(map) = cluster.db(&j.db) else {
        return;
    };
    if map.uuid != j.uuid || map.by_range.iter().any(|c| c.range == j.range) {
        return;
    }
    if node.couch.exists(&source) && settings::delete_source(&node.config) {
        match node.delete_db(&source) {
            Ok(()) => tracing::info!(copy = %source, "split copy deleted on return"),
            Err(e) => tracing::warn!(copy = %source, "split copy not deleted: {e}"),
        }
    }
}

/// One job's run on this member.
struct Run<'a> {
    node: &'a Arc<Node>,
    replicator: &'a Arc<Replicator>,
    cluster: &'a Arc<Cluster>,
    id: &'a str,
    /// The job's copy is this member's (else the job is taken over for an absent member).
    here: bool,
    /// The job as last read (a deleted job's halves are known from it).
    last_known: std::sync::Mutex<Option<SplitJob>>,
}

/// Why a run stops before its end.
enum Halt {
    /// The job was stopped, deleted, or the switch turned off: its record says so.
    Stopped,
    Failed(String),
}

impl From<crate::Error> for Halt {
    fn from(e: crate::Error) -> Halt {
        Halt::Failed(e.to_string())
    }
}

impl Run<'_> {
    async fn run(&self) -> Result<()> {
        // The step to start from, recorded.
        let now = now_secs();
        let Some(j) = update_job(self.cluster, self.id, self.max_history(), |j| {
            let runnable = matches!(j.job_state, JobState::New | JobState::Running);
            if runnable {
                j.resume(now);
                if !self.here {
                    j.taken_over_by = Some(self.cluster.config().node.clone());
                }
            }
            runnable
        })
        .await?
        else {
            return Ok(());
        };
        let mut step = j.split_state.clone();
        while step != "completed" {
            let mut retries = 0;
            loop {
                match self.step(&step).await {
                    Ok(()) => break,
                    Err(Halt::Stopped) => return self.halted(&step).await,
                    Err(Halt::Failed(why)) => {
                        let config = &self.node.config;
                        tracing::warn!(job = %self.id, step, retries, "split step failed: {why}");
                        // CouchDB's count: a step is tried again while the retries made
                        // so far are at most `max_retries`.
                        if retries > settings::max_retries(config) {
                            let now = now_secs();
                            update_job(self.cluster, self.id, self.max_history(), |j| {
                                j.fail(now, &why);
                                true
                            })
                            .await?;
                            return Ok(());
                        }
                        retries += 1;
                        update_job(self.cluster, self.id, self.max_history(), |j| {
                            j.retrying(&why);
                            true
                        })
                        .await?;
                        tokio::time::sleep(settings::retry_interval(config)).await;
                    }
                }
            }
            let next = job::next_step(&step);
            let now = now_secs();
            let moved = update_job(self.cluster, self.id, self.max_history(), |j| {
                let go = j.job_state == JobState::Running && j.split_state == step;
                if go {
                    j.run_step(next, now);
                }
                go
            })
            .await?;
            match moved {
                Some(j) if j.split_state == next => step = next.to_owned(),
                _ => return self.halted(&step).await,
            }
        }
        Ok(())
    }

    /// `[reshard] max_history` of this member, now.
    fn max_history(&self) -> usize {
        settings::max_history(&self.node.config)
    }

    /// Whether the job may go on: still there, running, and the switch on.
    fn may_go_on(&self) -> Option<SplitJob> {
        let (j, _) = super::job(self.cluster, self.id)?;
        (j.job_state == JobState::Running && super::switch(self.cluster).running).then_some(j)
    }

    /// The run stopped at `step`: a deleted job's halves go if the map does not name them.
    async fn halted(&self, step: &str) -> Result<()> {
        let gone = super::job(self.cluster, self.id).is_none();
        if gone && self.here && job::step_index(step) < job::step_index("update_shardmap") {
            if let Some(j) = self.last_known.lock().unwrap().clone() {
                for half in j.targets() {
                    if self.node.couch.exists(&half) {
                        let _ = self.node.delete_db(&half);
                    }
                }
            }
        }
        Ok(())
    }

    async fn step(&self, step: &str) -> std::result::Result<(), Halt> {
        let j = self.may_go_on().ok_or(Halt::Stopped)?;
        *self.last_known.lock().unwrap() = Some(j.clone());
        self.node.splits.update(self.id, step, 0, 0);
        let map = (self.cluster.db(&j.db))
            .filter(|m| m.uuid == j.uuid)
            .ok_or_else(|| Halt::Failed("the database was deleted".into()))?;
        match step {
            "initial_copy" if self.here => {
                for half in j.targets() {
                    if self.node.couch.exists(&half) {
                        self.node.delete_db(&half)?;
                    }
                    let props = self
                        .node
                        .couch
                        .get(&j.source())
                        .map_err(crate::Error::from)?
                        .props();
                    let props = settee_db::Props {
                        uuid: String::new(),
                        q: 1,
                        ..props
                    };
                    self.node
                        .couch
                        .create_copy(&half, props)
                        .map_err(crate::Error::from)?;
                }
                self.copy(&j, map.partitioned).await
            }
            "topoff1" | "topoff2" if self.here => self.copy(&j, map.partitioned).await,
            "topoff3" if self.here => {
                self.copy(&j, map.partitioned).await?;
                self.copy_purges(&j, map.partitioned).await
            }
            "copy_local_docs" if self.here => {
                self.copy_local_docs(&j).await?;
                self.copy_purges(&j, map.partitioned).await
            }
            "update_shardmap" => self.update_shardmap(&j).await,
            "wait_source_close" => {
                tokio::time::sleep(SETTLE).await;
                Ok(())
            }
            "source_delete" if self.here => {
                // The halves keep their checkpoints (as CouchDB's keep internal
                // replication's): feeds that read the copy resume from them.
                let delete = settings::delete_source(&self.node.config);
                if delete && self.node.couch.exists(&j.source()) {
                    self.node.delete_db(&j.source())?;
                }
                Ok(())
            }
            "build_indices" if self.here => self.build_indices(&j).await,
            // The copy steps of a job taken over for an absent member: its halves are made
            // by internal replication once it is back.
            _ => Ok(()),
        }
    }

    /// Builds, on both halves, the index of every design document of the database that
    /// has views (Mango's json indexes among them), as CouchDB's `build_indices`: the
    /// halves answer their first queries without a build from nothing. A failing build is
    /// tried again `[reshard] index_max_retries` times, `index_retry_interval_sec` apart;
    /// then the step fails.
    async fn build_indices(&self, j: &SplitJob) -> std::result::Result<(), Halt> {
        let config = &self.node.config;
        let mut tries = settings::index_max_retries(config);
        loop {
            let (node, db, halves) = (self.node.clone(), j.db.clone(), j.targets());
            let built = crate::blocking::<_, crate::Error>(move || {
                let Some(set) = node.clustered_designs(&db)? else {
                    return Ok(());
                };
                let with_views = (set.docs.iter())
                    .filter(|d| d.body["views"].as_object().is_some_and(|v| !v.is_empty()));
                for d in with_views {
                    let Some(design) = d.body.as_object() else {
                        continue;
                    };
                    for half in &halves {
                        let half = node.couch.get(half)?;
                        let group = node.views.group(&half, &d.id, design)?;
                        node.views.refresh(&half, &group)?;
                    }
                }
                Ok(())
            })
            .await;
            match built {
                Ok(()) => return Ok(()),
                Err(e) if tries == 0 => {
                    return Err(Halt::Failed(format!("error building the indexes: {e}")))
                }
                Err(e) => {
                    tracing::warn!(job = %self.id, "building the halves' indexes, retrying: {e}");
                    tries -= 1;
                    tokio::time::sleep(settings::index_retry_interval(config)).await;
                    if self.may_go_on().is_none() {
                        return Err(Halt::Stopped);
                    }
                }
            }
        }
    }

    /// Fills both halves with what the copy holds that they lack.
    async fn copy(&self, j: &SplitJob, partitioned: bool) -> std::result::Result<(), Halt> {
        let source = j.source();
        let total = self
            .node
            .couch
            .get(&source)
            .map_err(crate::Error::from)?
            .update_seq();
        let me = self.cluster.config().node.clone();
        let ranges = j
            .target_ranges()
            .ok_or_else(|| Halt::Failed("range too small".into()))?;
        for (range, half) in ranges.iter().zip(j.targets()) {
            let bounds = settee_core::shards::parse_range(range).expect("a range");
            let user = UserCtx::named(&me, vec!["_admin".into()]);
            let source = InRange {
                inner: self
                    .replicator
                    .local_db(&source, user.clone(), format!("{source}/")),
                bounds,
                partitioned,
            };
            let target = self.replicator.local_db(&half, user, format!("{half}/"));
            let (_stop, stop) = tokio::sync::watch::channel(false);
            let progress: Arc<std::sync::Mutex<settee_replicator::job::Progress>> =
                Default::default();
            let copy = settee_replicator::job::Job {
                source,
                target,
                base_id: checkpoint_id(&half),
                // Where the half stood at each checkpoint with no batch in flight, for
                // feeds that read the copy (`coordinator::feed::resume_split`): not once
                // the map names the halves (`topoff3`), when they take writes of their
                // own that the copy never had.
                options: settee_replicator::job::Options {
                    record_target_seq: match j.split_state.as_str() {
                        "topoff3" => TargetSeq::Never,
                        _ => TargetSeq::Settled,
                    },
                    ..Default::default()
                },
                progress: progress.clone(),
                stop,
            };
            let run = copy.run();
            tokio::pin!(run);
            let mut every = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    done = &mut run => {
                        let done = done
                            .map_err(|e| Halt::Failed(format!("copying into {half}: {e}")))?;
                        // A revision the half refused would be lost with the copy.
                        let refused = done.stats.doc_write_failures;
                        if refused > 0 {
                            return Err(Halt::Failed(format!(
                                "{refused} revisions could not be written into {half}"
                            )));
                        }
                        break;
                    }
                    _ = every.tick() => {
                        let through = seq_number(&progress.lock().unwrap().through_seq);
                        let step = j.split_state.clone();
                        self.node.splits.update(self.id, &step, through.min(total), total);
                    }
                }
            }
        }
        self.node
            .splits
            .update(self.id, &j.split_state, total, total);
        Ok(())
    }

    /// Copies the copy's local documents to both halves, at their revisions.
    async fn copy_local_docs(&self, j: &SplitJob) -> std::result::Result<(), Halt> {
        let source = self
            .node
            .couch
            .get(&j.source())
            .map_err(crate::Error::from)?;
        let mut docs = Vec::new();
        source
            .scan_local(b"", None, false, |d| {
                docs.push(d);
                std::ops::ControlFlow::Continue(())
            })
            .map_err(crate::Error::from)?;
        docs.retain(|d| {
            let name = d.id.strip_prefix("_local/").unwrap_or(&d.id);
            !name.starts_with("shard-sync-") && !name.starts_with(CHECKPOINT)
        });
        for half in j.targets() {
            let db = self.node.couch.get(&half).map_err(crate::Error::from)?;
            for d in &docs {
                let update = settee_db::LocalUpdate {
                    id: d.id.clone(),
                    rev: d.rev.checked_sub(1).filter(|r| *r > 0),
                    deleted: false,
                    body: d.body.clone(),
                };
                db.update_local(update)
                    .map_err(crate::Error::from)?
                    .await
                    .map_err(|_| Halt::Failed("the writer stopped".into()))?
                    .map_err(crate::Error::from)?;
            }
        }
        Ok(())
    }

    /// Gives each half the copy's purge records of its documents that it lacks: the
    /// revisions a half still holds (the copy took the purge after the half took the
    /// document) are purged from it, the others only recorded.
    async fn copy_purges(&self, j: &SplitJob, partitioned: bool) -> std::result::Result<(), Halt> {
        let source = self
            .node
            .couch
            .get(&j.source())
            .map_err(crate::Error::from)?;
        let infos = source.purge_infos().map_err(crate::Error::from)?;
        if infos.is_empty() {
            return Ok(());
        }
        let named = |(id, revs): &(String, Vec<settee_core::Rev>)| {
            (
                id.clone(),
                revs.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            )
        };
        let ranges = j
            .target_ranges()
            .ok_or_else(|| Halt::Failed("range too small".into()))?;
        for (range, half) in ranges.iter().zip(j.targets()) {
            let (lo, hi) = settee_core::shards::parse_range(range).expect("a range");
            let db = self.node.couch.get(&half).map_err(crate::Error::from)?;
            let have: std::collections::HashSet<(String, Vec<String>)> =
                (db.purge_infos().map_err(crate::Error::from)?.iter())
                    .map(named)
                    .collect();
            let wanted: settee_db::IdRevs = (infos.iter())
                .filter(|(id, _)| (lo..=hi).contains(&settee_core::shards::hash(id, partitioned)))
                .filter(|i| !have.contains(&named(i)))
                .cloned()
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let stopped = || Halt::Failed("the writer stopped".into());
            let purged = (db.purge(wanted.clone()).map_err(crate::Error::from)?.await)
                .map_err(|_| stopped())?
                .map_err(crate::Error::from)?;
            let only_recorded: settee_db::IdRevs = (wanted.into_iter().zip(purged))
                .filter(|(_, (_, gone))| gone.is_empty())
                .map(|(w, _)| w)
                .collect();
            if !only_recorded.is_empty() {
                (db.record_purges(only_recorded)
                    .map_err(crate::Error::from)?
                    .await)
                    .map_err(|_| stopped())?
                    .map_err(crate::Error::from)?;
            }
        }
        Ok(())
    }

    /// Waits until every copy of the range has its halves (each member holding the range
    /// has a job for it that got this far: jobs made one member at a time, `node` by
    /// `node`, wait here for the others'), then replaces the range by its halves in the
    /// map (once: the edit is conditional, and a map split already is fine).
    async fn update_shardmap(&self, j: &SplitJob) -> std::result::Result<(), Halt> {
        let ready = |s: &SplitJob| {
            s.job_state == JobState::Completed
                || job::step_index(&s.split_state) >= job::step_index("update_shardmap")
        };
        loop {
            let siblings: Vec<SplitJob> = (super::jobs(self.cluster).into_iter())
                .filter(|s| s.db == j.db && s.uuid == j.uuid && s.range == j.range)
                .collect();
            // The members holding the range now (none: the map names the halves already,
            // or the database is gone, which the edit below tells apart).
            let holders: Vec<String> = (self.cluster.db(&j.db))
                .filter(|map| map.uuid == j.uuid)
                .and_then(|map| {
                    let copies = map.by_range.iter().find(|c| c.range == j.range)?;
                    Some(copies.nodes.clone())
                })
                .unwrap_or_default();
            let mut waiting_for: Vec<String> = (holders.into_iter())
                .filter(|n| !siblings.iter().any(|s| &s.node == n && ready(s)))
                .collect();
            waiting_for.sort();
            if waiting_for.is_empty() && siblings.iter().all(ready) {
                break;
            }
            let shown = self.may_go_on().ok_or(Halt::Stopped)?;
            if shown.reason != job::waiting_reason(&waiting_for) {
                update_job(self.cluster, self.id, self.max_history(), |j| {
                    let current = j.split_state == "update_shardmap";
                    if current {
                        j.waiting_for(&waiting_for);
                    }
                    current
                })
                .await?;
            }
            tokio::time::sleep(TICK).await;
        }
        // A lost race with another edit of the map (another range's split) is tried again
        // at once, not after `retry_interval_sec`.
        let mut tries = 0;
        loop {
            match self.cluster.split_range(&j.db, &j.uuid, &j.range).await {
                Ok(_) => return Ok(()),
                Err(settee_cluster::Error::Conflict) if tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(Halt::Failed(format!("editing the map: {e}"))),
            }
        }
    }
}

/// The checkpoint of the split's copies into `half` (its id under `_local/`), kept in the
/// half: its history maps the split copy's places to the half's (`target_seq`), for
/// feeds that read the copy.
pub fn checkpoint_id(half: &str) -> String {
    use md5::Digest;
    format!(
        "{CHECKPOINT}{}",
        hex::encode(md5::Md5::digest(half.as_bytes()))
    )
}

/// The counter of an update seq (`"12-g1AAA…"`, or a number).
fn seq_number(seq: &Value) -> u64 {
    match seq {
        Value::Number(n) => n.as_u64().unwrap_or(0),
        Value::String(s) => s
            .split('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// A source passing on only the changes of documents whose hash falls in `bounds`: the
/// documents of one half of the copy it reads.
struct InRange<E> {
    inner: E,
    bounds: (u32, u32),
    partitioned: bool,
}

impl<E: Endpoint> InRange<E> {
    fn holds(&self, id: &str) -> bool {
        let h = settee_core::shards::hash(id, self.partitioned);
        (self.bounds.0..=self.bounds.1).contains(&h)
    }
}

impl<E: Endpoint> Endpoint for InRange<E> {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn info(&self) -> settee_replicator::Result<PeerInfo> {
        self.inner.info().await
    }

    async fn create(&self, params: &Map<String, Value>) -> settee_replicator::Result<()> {
        self.inner.create(params).await
    }

    async fn get_local(&self, id: &str) -> settee_replicator::Result<Option<Value>> {
        self.inner.get_local(id).await
    }

    async fn put_local(&self, id: &str, doc: Value) -> settee_replicator::Result<String> {
        self.inner.put_local(id, doc).await
    }

    /// The inner feed's rows in the range, read on until `limit` of them or the feed's
    /// end (a short batch tells the replicator the feed ended).
    async fn changes(
        &self,
        since: &Value,
        limit: usize,
        filter: &Filter,
        wait: Wait,
    ) -> settee_replicator::Result<Changes> {
        let mut rows = Vec::new();
        let mut since = since.clone();
        loop {
            let batch = self.inner.changes(&since, limit, filter, wait).await?;
            let full = batch.rows.len() >= limit;
            for row in batch.rows {
                if self.holds(&row.id) {
                    rows.push(row);
                    if rows.len() >= limit {
                        let last_seq = rows.last().expect("a row").seq.clone();
                        return Ok(Changes { rows, last_seq });
                    }
                }
            }
            if !full {
                return Ok(Changes {
                    rows,
                    last_seq: batch.last_seq,
                });
            }
            since = batch.last_seq;
        }
    }

    async fn revs_diff(
        &self,
        revs: Vec<(String, Vec<String>)>,
    ) -> settee_replicator::Result<Vec<Missing>> {
        self.inner.revs_diff(revs).await
    }

    async fn bulk_get(
        &self,
        wanted: Vec<(String, String)>,
        fetch: Fetch,
    ) -> settee_replicator::Result<Vec<Doc>> {
        self.inner.bulk_get(wanted, fetch).await
    }

    fn takes_stored(&self) -> bool {
        self.inner.takes_stored()
    }

    async fn bulk_docs(&self, docs: Vec<Doc>) -> settee_replicator::Result<Vec<WriteFailure>> {
        self.inner.bulk_docs(docs).await
    }

    async fn attachment(
        &self,
        id: &str,
        rev: &str,
        name: &str,
        gzip: bool,
    ) -> settee_replicator::Result<Content> {
        self.inner.attachment(id, rev, name, gzip).await
    }

    async fn put_streamed(
        &self,
        doc: Value,
        atts: Vec<Follows>,
    ) -> settee_replicator::Result<Option<WriteFailure>> {
        self.inner.put_streamed(doc, atts).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checkpoints_name_the_half() {
        let a = checkpoint_id("shards/00000000-7fffffff/db.1");
        assert!(a.starts_with(CHECKPOINT) && a.len() == CHECKPOINT.len() + 32);
        assert_ne!(a, checkpoint_id("shards/80000000-ffffffff/db.1"));
        assert_eq!(seq_number(&json!("12-g1AAAA")), 12);
    }
}
