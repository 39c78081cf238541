//! The replication algorithm, as CouchDB's replicator runs it: read the source's changes
//! (every leaf), ask the target which revisions it lacks, fetch those from the source with
//! their history and attachments, write them to the target as they are (`new_edits:
//! false`; documents with large attachments one at a time, content streamed: see
//! [`crate::streamed`]), and record how far it got in a checkpoint on both sides.

use crate::checkpoint::{self, Session, Stats};
use crate::endpoint::{ChangeRow, Doc, Endpoint, Fetch, Filter, Wait, WriteFailure};
use crate::streamed::{self, Copied, Route};
use crate::{Error, Result};
use futures_util::stream::{FuturesOrdered, StreamExt};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How a replication runs (the options of `_replicate` that the algorithm reads).
#[derive(Clone, Debug)]
pub struct Options {
    pub continuous: bool,
    pub filter: Filter,
    /// `since_seq`: start there instead of at the checkpoint.
    pub since_seq: Option<Value>,
    pub use_checkpoints: bool,
    pub checkpoint_interval: Duration,
    /// How long a peer may stay silent in the middle of a request (`connection_timeout`).
    pub connection_timeout: Duration,
    /// Changes read, and documents fetched and written, per batch.
    pub batch_size: usize,
    /// Batches copied at once (`worker_processes`).
    pub workers: usize,
    /// Copy only each document's winning revision.
    pub winning_revs_only: bool,
    pub create_target: bool,
    pub create_target_params: Map<String, Value>,
    /// When the replication was asked for (Unix seconds): every session's history entry
    /// shows it as its `start_time`, as CouchDB's do. `None`: when the session starts.
    pub requested_at: Option<u64>,
    /// Whether checkpoints' history entries record where the target stood
    /// (`target_seq`, its `update_seq` then).
    pub record_target_seq: TargetSeq,
}

/// Which checkpoints record `target_seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetSeq {
    Never,
    /// Every one: the target held at least what was copied up to `recorded_seq` (internal
    /// replication's, so that a feed that read the target up to some place can resume on
    /// the source, as from CouchDB's `mem3_rep` checkpoints).
    Always,
    /// Only those taken with no batch in flight: the target held exactly what was copied
    /// up to `recorded_seq` and what it had before (a split's copies into a half, so that
    /// a feed that read the source up to some place can resume on the half).
    Settled,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            continuous: false,
            filter: Filter::All,
            since_seq: None,
            use_checkpoints: true,
            checkpoint_interval: Duration::from_secs(30),
            connection_timeout: Duration::from_secs(30),
            batch_size: 500,
            workers: 4,
            winning_revs_only: false,
            create_target: false,
            create_target_params: Map::new(),
            requested_at: None,
            record_target_seq: TargetSeq::Never,
        }
    }
}

impl Options {
    /// How long a continuous replication's changes read waits for a change: a third of
    /// `connection_timeout`, at least 1 s, as CouchDB's replicator asks its source; but
    /// at most half of it, so that a quiet feed always answers before the peer counts
    /// as silent.
    pub fn changes_wait_ms(&self) -> u64 {
        let timeout = self.connection_timeout.as_millis() as u64;
        (timeout / 3).max(1000).min(timeout / 2)
    }
}

/// What a running replication shows (`_active_tasks`), updated as it goes.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    pub stats: Stats,
    pub source_seq: Value,
    pub through_seq: Value,
    pub checkpointed_source_seq: Value,
    pub changes_pending: Option<u64>,
}

/// The end of a one-shot replication.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// No change was read since the checkpoint.
    pub no_changes: bool,
    /// What `_replicate` answers after `ok` and `no_changes` (CouchDB's
    /// `checkpoint_history`): the checkpoint this session wrote, without `_id` and `_rev`;
    /// with no changes, the source's checkpoint as found (nothing if there is none);
    /// without checkpoints, `use_checkpoints: false`.
    pub history: Map<String, Value>,
    /// The counters, the history's included.
    pub stats: Stats,
    /// The last seq recorded in a checkpoint (or started from).
    pub checkpointed_seq: Value,
}

fn refused(f: &WriteFailure) {
    tracing::warn!(
        "replicator: target refused {}: {} ({})",
        f.id,
        f.error,
        f.reason
    );
}

fn is_design(id: &str) -> bool {
    id.starts_with("_design/")
}

/// Whether CouchDB's replicator would have taken this revision from `_bulk_get`: not a
/// design document, no attachments.
fn bulk_gotten(doc: &Doc) -> bool {
    match doc {
        Doc::Stored(d) => !d.id.as_deref().is_some_and(is_design),
        Doc::Json(v) => {
            !v.get("_id").and_then(Value::as_str).is_some_and(is_design)
                && v.get("_attachments")
                    .and_then(Value::as_object)
                    .is_none_or(Map::is_empty)
        }
    }
}

/// A replication between two endpoints.
pub struct Job<S, T> {
    pub source: S,
    pub target: T,
    /// The replication id without its `+continuous`… extensions: the checkpoint's name.
    pub base_id: String,
    pub options: Options,
    pub progress: Arc<Mutex<Progress>>,
    /// Set to stop the replication (cancel, server shutdown).
    pub stop: watch::Receiver<bool>,
}

/// Names the workers of failed copies, as CouchDB's `worker_died` reasons name a process.
static WORKERS: AtomicU64 = AtomicU64::new(1000);

/// Revisions read with attachment content inline, as JSON.
const INLINE: Fetch = Fetch {
    inline: true,
    stored: false,
};

fn unix_secs(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `Wed, 25 Nov 2026 03:05:00 GMT`, as checkpoints record times.
fn now_rfc1123() -> String {
    settee_core::dates::rfc1123(unix_secs(std::time::SystemTime::now()))
}

/// `2026-11-25T03:05:00Z`, as the scheduler shows times.
pub fn iso8601(t: std::time::SystemTime) -> String {
    settee_core::dates::iso8601(unix_secs(t))
}

/// Where and when this run began, as its checkpoints record it.
struct Begun {
    session_id: String,
    start_time: String,
    start: checkpoint::Start,
    /// The seq this run reads changes after.
    since: Value,
    /// A `doc_ids` replication's checkpoints carry extra members.
    doc_ids: bool,
}

impl Begun {
    /// The checkpoint body recording this run up to `current` (the target then at
    /// `target_seq`, when recorded), ending now.
    fn body(
        &self,
        current: &Value,
        target_seq: Option<&Value>,
        stats: &Stats,
    ) -> Map<String, Value> {
        let end_time = now_rfc1123();
        let session = Session {
            session_id: &self.session_id,
            start_time: &self.start_time,
            end_time: &end_time,
            start_last_seq: &self.since,
            end_last_seq: current,
            recorded_seq: current,
            target_seq,
            stats,
        };
        checkpoint::body(&session, &self.start.history, self.doc_ids)
    }
}

/// The checkpoint documents as last read or written, source and target.
struct Logs {
    source: Option<Value>,
    target: Option<Value>,
    /// The body this run last wrote to both.
    written: Option<Map<String, Value>>,
}

impl<S: Endpoint, T: Endpoint> Job<S, T> {
    /// Runs the replication: to the end of the source's changes (one-shot), or until
    /// stopped (continuous).
    pub async fn run(self) -> Result<Outcome> {
        let (source_info, mut logs) = self.connect().await.map_err(|e| self.failed(e))?;
        let found = checkpoint::start(logs.source.as_ref(), logs.target.as_ref());
        // `since_seq` (part of the replication id) only starts a replication that has no
        // checkpoint yet, as in CouchDB.
        let start = match &self.options.since_seq {
            Some(s) if found.seq == json!(0) => s.clone(),
            _ => found.seq.clone(),
        };
        // The counters go on from the history's (CouchDB's `max_stats` of the job's and
        // the history's, the job's being none here).
        let mut stats = found.stats();
        {
            let mut p = self.progress.lock().unwrap();
            p.source_seq = source_info.update_seq.clone();
            p.through_seq = start.clone();
            p.checkpointed_source_seq = start.clone();
            p.stats = stats.clone();
        }
        let begun = Begun {
            session_id: hex::encode(rand::random::<[u8; 16]>()),
            start_time: match self.options.requested_at {
                Some(t) => settee_core::dates::rfc1123(t),
                None => now_rfc1123(),
            },
            start: found,
            since: start.clone(),
            doc_ids: matches!(self.options.filter, Filter::DocIds(_)),
        };
        // `current`: every change up to it is copied (checkpoints record it); `read`: where
        // the next changes read starts. Up to `workers` batches are copied at once, and
        // finish in the order they were read.
        let mut current = start.clone();
        let mut read = start.clone();
        let mut recorded = start.clone();
        let mut last_checkpoint = Instant::now();
        let mut changed = false;
        let mut exhausted = false;
        let mut stop = self.stop.clone();
        let this = &self;
        let mut inflight = FuturesOrdered::new();
        'run: loop {
            while !exhausted && !*stop.borrow() && inflight.len() < this.options.workers.max(1) {
                let wait = if this.options.continuous && inflight.is_empty() {
                    Wait::UpTo(this.options.changes_wait_ms())
                } else {
                    Wait::No
                };
                let batch = tokio::select! {
                    b = this.source.changes(&read, this.options.batch_size, &this.options.filter, wait) => {
                        b.map_err(|e| this.failed(Error::ChangesReader(Box::new(e))))?
                    }
                    _ = stop.changed() => break 'run,
                };
                let full = batch.rows.len() >= this.options.batch_size;
                // How far a copied batch takes the replication: a one-shot one records
                // the seq of the last change it copied, as CouchDB's does (with a filter,
                // not the feed's `last_seq`, which may lie past changes it dropped); a
                // continuous one the feed's `last_seq`.
                let reached = match batch.rows.last() {
                    Some(_) if this.options.continuous => Some(batch.last_seq.clone()),
                    Some(last) => Some(last.seq.clone()),
                    None => None,
                };
                match reached {
                    Some(seq) => {
                        changed = true;
                        inflight.push_back(async move { (this.copy(&batch.rows).await, seq) });
                    }
                    // Changes a filter dropped still move a continuous feed on.
                    None if this.options.continuous && inflight.is_empty() => {
                        current = batch.last_seq.clone();
                    }
                    None => {}
                }
                read = batch.last_seq;
                if !full {
                    exhausted = !this.options.continuous;
                    break;
                }
            }
            let Some((copied, seq)) = inflight.next().await else {
                if exhausted || *stop.borrow() {
                    break;
                }
                continue;
            };
            stats.add(&copied.map_err(|e| this.worker_failed(e))?);
            current = seq;
            {
                let mut p = this.progress.lock().unwrap();
                p.stats = stats.clone();
                p.through_seq = current.clone();
            }
            let due = last_checkpoint.elapsed() >= this.options.checkpoint_interval;
            if this.options.use_checkpoints && due && current != recorded {
                let settled = inflight.is_empty();
                this.checkpoint(&mut logs, &begun, &current, &stats, settled)
                    .await?;
                recorded = current.clone();
                last_checkpoint = Instant::now();
            }
        }
        // Stopped: what is in flight still finishes, so that the checkpoint covers it.
        while let Some((copied, seq)) = inflight.next().await {
            stats.add(&copied.map_err(|e| this.worker_failed(e))?);
            current = seq;
        }
        if !changed {
            let mut history = Map::new();
            if let Some(Value::Object(log)) = logs.source {
                history.extend(log.into_iter().filter(|(k, _)| k != "_id" && k != "_rev"));
            }
            return Ok(Outcome {
                no_changes: true,
                history,
                stats,
                checkpointed_seq: start,
            });
        }
        if !self.options.use_checkpoints {
            let mut history = Map::new();
            history.insert("use_checkpoints".into(), Value::Bool(false));
            return Ok(Outcome {
                no_changes: false,
                history,
                stats,
                checkpointed_seq: start,
            });
        }
        if current != recorded {
            self.checkpoint(&mut logs, &begun, &current, &stats, true)
                .await?;
        }
        Ok(Outcome {
            no_changes: false,
            history: logs
                .written
                .unwrap_or_else(|| begun.body(&current, None, &stats)),
            stats,
            checkpointed_seq: current,
        })
    }

    /// Opens both databases (creating the target if asked) and reads both checkpoints:
    /// what CouchDB does when a replication starts, whose errors it reports as start
    /// errors.
    async fn connect(&self) -> Result<(crate::PeerInfo, Logs)> {
        let source_info = self.source.info().await?;
        if self.options.create_target {
            self.target
                .create(&self.options.create_target_params)
                .await?;
        }
        self.target.info().await?;
        let log_id = format!("_local/{}", self.base_id);
        let logs = if self.options.use_checkpoints {
            Logs {
                source: self.source.get_local(&log_id).await?,
                target: self.target.get_local(&log_id).await?,
                written: None,
            }
        } else {
            Logs {
                source: None,
                target: None,
                written: None,
            }
        };
        Ok((source_info, logs))
    }

    /// An error that ends the run, or [`Error::Cancelled`] if the run was stopped (an
    /// error met while stopping is the stop's doing).
    fn failed(&self, e: Error) -> Error {
        if matches!(e, Error::Cancelled) || *self.stop.borrow() {
            Error::Cancelled
        } else {
            e
        }
    }

    /// A copy's failure, as CouchDB's worker dies of it.
    fn worker_failed(&self, e: Error) -> Error {
        let pid = WORKERS.fetch_add(1, Ordering::Relaxed);
        self.failed(Error::Worker {
            pid,
            error: Box::new(e),
        })
    }

    /// Copies the revisions of `rows` the target lacks; what it counted. The documents are
    /// read with attachment stubs first (as stored, from and to databases of this server);
    /// those without attachments are written in one `bulk_docs`, those with small attachments all to be sent are read again with the
    /// content inline and written in rounds of bounded size, and the rest go one at a time
    /// on the streamed path ([`streamed`]).
    async fn copy(&self, rows: &[ChangeRow]) -> Result<Stats> {
        let mut stats = Stats::default();
        let asked: Vec<(String, Vec<String>)> = rows
            .iter()
            .map(|r| {
                let revs = if self.options.winning_revs_only {
                    r.revs.iter().take(1).cloned().collect()
                } else {
                    r.revs.clone()
                };
                (r.id.clone(), revs)
            })
            .collect();
        stats.revisions_checked += asked.iter().map(|(_, r)| r.len() as u64).sum::<u64>();
        let missing = self.target.revs_diff(asked).await?;
        let mut ancestors = HashMap::new();
        let mut wanted = Vec::new();
        for m in missing {
            wanted.extend(m.revs.into_iter().map(|r| (m.id.clone(), r)));
            ancestors.insert(m.id, m.possible_ancestors);
        }
        stats.missing_revisions_found += wanted.len() as u64;
        if wanted.is_empty() {
            return Ok(stats);
        }
        // CouchDB's worker fetches design documents one at a time, never through
        // `_bulk_get`, and takes from `_bulk_get` only documents without attachments (it
        // fetches the others again, alone): the counters say so, whichever way the
        // revisions travel here.
        stats.bulk_get_attempts += wanted.iter().filter(|(id, _)| !is_design(id)).count() as u64;
        let stored = self.target.takes_stored();
        let docs = self
            .source
            .bulk_get(
                wanted,
                Fetch {
                    inline: false,
                    stored,
                },
            )
            .await?;
        stats.bulk_get_docs += docs.iter().filter(|d| bulk_gotten(d)).count() as u64;
        stats.docs_read += docs.len() as u64;
        let (mut batch, mut inline, mut alone) = (Vec::new(), Vec::new(), Vec::new());
        for doc in docs {
            let doc = match doc {
                stored @ Doc::Stored(_) => {
                    batch.push(stored);
                    continue;
                }
                Doc::Json(v) => v,
            };
            let id = doc.get("_id").and_then(Value::as_str).unwrap_or("");
            let pas: &[String] = ancestors.get(id).map_or(&[], Vec::as_slice);
            match streamed::route(&doc, streamed::since_pos(&doc, pas)) {
                Route::Batch => batch.push(Doc::Json(doc)),
                Route::Inline(bytes) => {
                    let rev = doc.get("_rev").and_then(Value::as_str).unwrap_or("");
                    inline.push(((id.to_string(), rev.to_string()), bytes));
                }
                Route::Streamed => alone.push(doc),
            }
        }
        self.write_batch(batch, &mut stats).await?;
        for round in streamed::rounds(inline, streamed::INLINE_ROUND) {
            let docs = self.source.bulk_get(round, INLINE).await?;
            self.write_batch(docs, &mut stats).await?;
        }
        let ancestors = &ancestors;
        let mut copies = futures_util::stream::iter(alone)
            .map(|doc| async move {
                let id = doc.get("_id").and_then(Value::as_str).unwrap_or("");
                let pas = ancestors.get(id).map_or(&[][..], Vec::as_slice);
                streamed::copy(&self.source, &self.target, doc, pas).await
            })
            .buffer_unordered(streamed::AT_ONCE);
        while let Some(copied) = copies.next().await {
            match copied? {
                Copied::Written => stats.docs_written += 1,
                Copied::Refused(f) => {
                    refused(&f);
                    stats.doc_write_failures += 1;
                }
                // Read, then gone from the source before its content was: nothing to write.
                Copied::Gone => {}
            }
        }
        Ok(stats)
    }

    /// Writes complete documents in one `bulk_docs`, counting them.
    async fn write_batch(&self, docs: Vec<Doc>, stats: &mut Stats) -> Result<()> {
        if docs.is_empty() {
            return Ok(());
        }
        let n = docs.len() as u64;
        let failures = self.target.bulk_docs(docs).await?;
        failures.iter().for_each(refused);
        stats.doc_write_failures += failures.len() as u64;
        stats.docs_written += n - failures.len() as u64;
        Ok(())
    }

    /// Records `current` in both checkpoint documents, source first; `settled`: no batch
    /// past `current` is in flight.
    async fn checkpoint(
        &self,
        logs: &mut Logs,
        begun: &Begun,
        current: &Value,
        stats: &Stats,
        settled: bool,
    ) -> Result<()> {
        let log_id = format!("_local/{}", self.base_id);
        let record = match self.options.record_target_seq {
            TargetSeq::Never => false,
            TargetSeq::Always => true,
            TargetSeq::Settled => settled,
        };
        let target_seq = match record {
            true => Some(
                self.target
                    .info()
                    .await
                    .map_err(|e| self.failed(e))?
                    .update_seq,
            ),
            false => None,
        };
        let body = begun.body(current, target_seq.as_ref(), stats);
        // Each side's document replaces the one it holds (its `_rev`), with the same body.
        let doc = |previous: &Option<Value>| {
            let mut doc = Map::new();
            if let Some(rev) = previous.as_ref().and_then(|p| p.get("_rev")) {
                doc.insert("_rev".into(), rev.clone());
            }
            doc.extend(body.clone());
            doc
        };
        let failed = |side, e| {
            self.failed(Error::Checkpoint {
                side,
                error: Box::new(e),
            })
        };
        let mut source = doc(&logs.source);
        let rev = self
            .source
            .put_local(&log_id, Value::Object(source.clone()))
            .await
            .map_err(|e| failed("source", e))?;
        source.insert("_rev".into(), Value::String(rev));
        logs.source = Some(Value::Object(source));
        let mut target = doc(&logs.target);
        let rev = self
            .target
            .put_local(&log_id, Value::Object(target.clone()))
            .await
            .map_err(|e| failed("target", e))?;
        target.insert("_rev".into(), Value::String(rev));
        logs.target = Some(Value::Object(target));
        logs.written = Some(body);
        self.progress.lock().unwrap().checkpointed_source_seq = current.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_wait_stays_inside_the_connection_timeout() {
        let wait = |ms| {
            Options {
                connection_timeout: Duration::from_millis(ms),
                ..Options::default()
            }
            .changes_wait_ms()
        };
        assert_eq!(wait(30_000), 10_000);
        assert_eq!(wait(6_000), 2_000);
        assert_eq!(wait(1_500), 750);
    }
}
