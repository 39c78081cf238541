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
use serde_json::{Map, Value};
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

/// The end of a one-shot replication (`_replicate`'s answer).
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Nothing to replicate (no change since the checkpoint): the source's checkpoint, if
    /// there is one.
    NoChanges(Option<Value>),
    Done {
        session_id: String,
        source_last_seq: Value,
        /// The source's checkpoint history, this session first.
        history: Vec<Value>,
    },
}

fn refused(f: &WriteFailure) {
    tracing::warn!(
        "replicator: target refused {}: {} ({})",
        f.id,
        f.error,
        f.reason
    );
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
    start: Value,
}

impl Begun {
    /// This run's history entry, ending now at `current`.
    fn entry(&self, current: &Value, stats: &Stats) -> Value {
        let end_time = now_rfc1123();
        Session {
            session_id: &self.session_id,
            start_time: &self.start_time,
            end_time: &end_time,
            start_last_seq: &self.start,
            end_last_seq: current,
            recorded_seq: current,
            stats,
        }
        .entry()
    }
}

/// The checkpoint documents as last read or written, source and target.
struct Logs {
    source: Option<Value>,
    target: Option<Value>,
}

impl<S: Endpoint, T: Endpoint> Job<S, T> {
    /// Runs the replication: to the end of the source's changes (one-shot), or until
    /// stopped (continuous).
    pub async fn run(self) -> Result<Outcome> {
        let (source_info, mut logs) = self.connect().await.map_err(|e| self.failed(e))?;
        let start = match &self.options.since_seq {
            Some(s) => s.clone(),
            None => checkpoint::start_seq(logs.source.as_ref(), logs.target.as_ref()),
        };
        {
            let mut p = self.progress.lock().unwrap();
            p.source_seq = source_info.update_seq.clone();
            p.through_seq = start.clone();
            p.checkpointed_source_seq = start.clone();
        }
        let begun = Begun {
            session_id: hex::encode(rand::random::<[u8; 16]>()),
            start_time: now_rfc1123(),
            start: start.clone(),
        };
        let mut stats = Stats::default();
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
                if batch.rows.is_empty() {
                    if inflight.is_empty() {
                        // Changes a filter dropped still move the feed on.
                        current = batch.last_seq.clone();
                    }
                } else {
                    changed = true;
                    let seq = batch.last_seq.clone();
                    inflight.push_back(async move { (this.copy(&batch.rows).await, seq) });
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
                this.checkpoint(&mut logs, &begun, &current, &stats).await?;
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
            return Ok(Outcome::NoChanges(logs.source));
        }
        if self.options.use_checkpoints && current != recorded {
            self.checkpoint(&mut logs, &begun, &current, &stats).await?;
        }
        let history = logs
            .source
            .as_ref()
            .and_then(|l| l.get("history"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| vec![begun.entry(&current, &stats)]);
        Ok(Outcome::Done {
            session_id: begun.session_id,
            source_last_seq: current,
            history,
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
            }
        } else {
            Logs {
                source: None,
                target: None,
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
        stats.bulk_get_attempts += wanted.len() as u64;
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
        stats.bulk_get_docs += docs.len() as u64;
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

    /// Records `current` in both checkpoint documents, source first.
    async fn checkpoint(
        &self,
        logs: &mut Logs,
        begun: &Begun,
        current: &Value,
        stats: &Stats,
    ) -> Result<()> {
        let log_id = format!("_local/{}", self.base_id);
        let entry = begun.entry(current, stats);
        let doc = |previous: &Option<Value>| {
            checkpoint::document(previous.as_ref(), &begun.session_id, current, entry.clone())
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
