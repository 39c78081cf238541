//! The replication scheduler's jobs, as CouchDB's `couch_replicator_scheduler` keeps them:
//! every replication of this server, from `POST /_replicate` or from a `_replicator`
//! document, waiting, running or crashed, with its history of events. The decisions
//! (what starts when, what is rotated out, how long a crashed job waits) are the pure
//! functions of `settee_replicator::schedule`; this module applies them under one lock —
//! it starts a job's task, stops it, records the events — and hands a finished job's
//! result to the callers waiting for it.
//!
//! Threading contract: every change to the table happens with its lock held and never
//! waits (tasks are spawned, stops are signalled); a job's task reports its end through
//! [`Replications::exited`], which ignores the end of a run the scheduler had already
//! stopped.

use super::{run_pair, Origin, Prepared, Replicator};
use serde_json::{json, Value};
use settee_replicator::job::{Outcome, Progress};
use settee_replicator::schedule::{self, Event, EventKind, JobView, Limits, Micros};
use settee_replicator::Error as RepError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{oneshot, watch};

/// How a replication ended, for the callers waiting for it (shared: several callers may
/// wait for one job).
pub(crate) type Finished = Result<Outcome, Arc<RepError>>;

/// A replication to schedule.
pub(crate) struct NewJob {
    pub prepared: Prepared,
    /// The user it runs for (`user` in `_scheduler/jobs`).
    pub user: Option<String>,
    pub origin: Option<Origin>,
}

/// A job in the table.
struct Job {
    prepared: Prepared,
    user: Option<String>,
    origin: Option<Origin>,
    /// When the replication was requested (`start_time`), in seconds.
    start_time: u64,
    /// Newest first, at most `max_history` events.
    history: Vec<Event>,
    run: Option<Run>,
    /// The last run's progress (`info`): kept while the job waits between runs.
    progress: Option<Arc<Mutex<Progress>>>,
    /// Callers of `POST /_replicate` waiting for a one-shot job's end.
    waiters: Vec<oneshot::Sender<Finished>>,
}

/// A job's task while it runs.
struct Run {
    pid: u64,
    stop: watch::Sender<bool>,
    started_on: u64,
    /// Set when the task has ended.
    done: watch::Receiver<bool>,
}

/// A stopped run still finishing (its last checkpoint): the next run of the same
/// replication waits for it, and callers of a job removed while it ran get its result.
struct Draining {
    done: watch::Receiver<bool>,
    waiters: Vec<oneshot::Sender<Finished>>,
}

/// The scheduler's table of jobs, by full replication id.
#[derive(Default)]
pub struct Replications {
    jobs: Mutex<Table>,
    next_pid: AtomicU64,
}

#[derive(Default)]
struct Table {
    jobs: HashMap<String, Job>,
    /// Stopped runs by pid.
    draining: HashMap<u64, (String, Draining)>,
}

/// A scheduled job's row in `_scheduler/docs` (CouchDB's `job_summary`).
pub(crate) struct Summary {
    pub source: String,
    pub target: String,
    pub state: &'static str,
    pub info: Value,
    pub error_count: u32,
    pub last_updated: String,
    pub start_time: String,
}

fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn iso(micros: Micros) -> String {
    settee_core::dates::iso8601(micros / 1_000_000)
}

/// The scheduler's settings, read live from `[replicator]` (CouchDB's names and defaults;
/// `retry_base`, the first crash's backoff in seconds, is Settee's: CouchDB fixes it at
/// 30 s).
pub(crate) fn limits(state: &Arc<Replicator>) -> Limits {
    let get = |k: &str, d: u64| state.config.get_u64("replicator", k, d);
    Limits {
        max_jobs: get("max_jobs", 500) as usize,
        max_churn: get("max_churn", 20).max(1) as usize,
        health_threshold: Duration::from_secs(get("health_threshold", 120)),
        backoff_base: Duration::from_secs(get("retry_base", 30)),
    }
}

fn max_history(state: &Arc<Replicator>) -> usize {
    state.config.get_u64("replicator", "max_history", 20).max(1) as usize
}

/// `[replicator] interval`: the time between reschedulings.
pub(crate) fn interval(state: &Arc<Replicator>) -> Duration {
    Duration::from_millis(
        state
            .config
            .get_u64("replicator", "interval", 60_000)
            .max(1),
    )
}

impl Replications {
    /// Schedules a replication, or joins the same one if it is already scheduled (a
    /// second identical `POST /_replicate` waits for the first's job). A job with the same
    /// id but other settings is stopped and replaced; its waiters wait for the new one.
    /// The new job starts at once if the jobs, it included, number fewer than
    /// `max_jobs`; otherwise it waits for a rescheduling.
    pub(crate) fn add(
        &self,
        state: &Arc<Replicator>,
        new: NewJob,
        waiter: Option<oneshot::Sender<Finished>>,
    ) {
        let id = new.prepared.full.clone();
        let now = now_micros();
        let mut table = self.jobs.lock().unwrap();
        let mut waiters: Vec<_> = waiter.into_iter().collect();
        if let Some(existing) = table.jobs.get_mut(&id) {
            if existing.prepared.fingerprint == new.prepared.fingerprint
                && existing.origin == new.origin
            {
                settee_metrics::global()
                    .replicator_jobs_duplicate_adds
                    .inc();
                existing.waiters.append(&mut waiters);
                return;
            }
            let mut old = table.jobs.remove(&id).expect("present");
            waiters.append(&mut old.waiters);
            self.stop_run(&mut table, &id, &mut old, now, max_history(state));
        }
        settee_metrics::global().replicator_jobs_adds.inc();
        table.jobs.insert(
            id.clone(),
            Job {
                prepared: new.prepared,
                user: new.user,
                origin: new.origin,
                start_time: now / 1_000_000,
                history: vec![Event {
                    kind: EventKind::Added,
                    at: now,
                }],
                run: None,
                progress: None,
                waiters,
            },
        );
        let running = table.jobs.values().filter(|j| j.run.is_some()).count();
        if schedule::starts_when_added(table.jobs.len(), running, limits(state).max_jobs) {
            self.start(state, &mut table, &id, now);
        }
    }

    /// Removes a job (cancelled, or its document deleted or changed), stopping it if it
    /// runs. Its waiters get the stopped run's result (or, if it did not run,
    /// [`RepError::Cancelled`]). `false` if there was no such job.
    pub(crate) fn remove(&self, state: &Arc<Replicator>, id: &str) -> bool {
        let mut table = self.jobs.lock().unwrap();
        let Some(mut job) = table.jobs.remove(id) else {
            return false;
        };
        settee_metrics::global().replicator_jobs_removes.inc();
        let pid = job.run.as_ref().map(|r| r.pid);
        self.stop_run(&mut table, id, &mut job, now_micros(), max_history(state));
        match pid.and_then(|p| table.draining.get_mut(&p)) {
            Some((_, drain)) => drain.waiters.append(&mut job.waiters),
            None => {
                for w in job.waiters.drain(..) {
                    let _ = w.send(Err(Arc::new(RepError::Cancelled)));
                }
            }
        }
        true
    }

    /// The user a job runs for, if it exists (`cancel` and `_replicate` check it).
    pub(crate) fn owner(&self, id: &str) -> Option<Option<String>> {
        let table = self.jobs.lock().unwrap();
        table.jobs.get(id).map(|j| j.user.clone())
    }

    /// Whether a job with this id comes from `POST /_replicate`.
    pub(crate) fn is_transient(&self, id: &str) -> bool {
        let table = self.jobs.lock().unwrap();
        table.jobs.get(id).is_some_and(|j| j.origin.is_none())
    }

    /// One rescheduling (every `[replicator] interval`).
    pub(crate) fn reschedule(&self, state: &Arc<Replicator>) {
        let now = now_micros();
        let limits = limits(state);
        let history = max_history(state);
        let mut table = self.jobs.lock().unwrap();
        let plan = {
            let views = views(&table);
            schedule::reschedule(&views, &limits, now)
        };
        for id in &plan.stop {
            if let Some(mut job) = table.jobs.remove(id) {
                self.stop_run(&mut table, id, &mut job, now, history);
                table.jobs.insert(id.clone(), job);
            }
        }
        for id in &plan.start {
            self.start(state, &mut table, id, now);
        }
    }

    /// A job's task ended (`pid` names the run). A run the scheduler stopped meanwhile is
    /// over already (only callers of a removed job still wait for its result). A one-shot
    /// job that finished leaves the table, its callers get its result; a job from
    /// `_replicate` that failed leaves it too (CouchDB does not retry those); a job from
    /// a document that failed is crashed: it waits out a backoff before it runs again,
    /// and waiting jobs may take its slot at once.
    pub(crate) fn exited(&self, state: &Arc<Replicator>, id: &str, pid: u64, result: Finished) {
        let now = now_micros();
        let mut table = self.jobs.lock().unwrap();
        if let Some((_, drain)) = table.draining.remove(&pid) {
            for w in drain.waiters {
                let _ = w.send(result.clone());
            }
            return;
        }
        let Some(job) = table
            .jobs
            .get_mut(id)
            .filter(|j| j.run.as_ref().is_some_and(|r| r.pid == pid))
        else {
            return;
        };
        job.run = None;
        match result {
            Err(e) if job.origin.is_some() => {
                settee_metrics::global().replicator_jobs_crashes.inc();
                tracing::warn!(replication = %id, error = %e, "replication crashed");
                schedule::record(
                    &mut job.history,
                    EventKind::Crashed(e.crash_reason()),
                    now,
                    max_history(state),
                );
                let limits = limits(state);
                let start = {
                    let views = views(&table);
                    schedule::start_pending(&views, &limits, now)
                };
                for id in &start {
                    self.start(state, &mut table, id, now);
                }
            }
            result => {
                if let Err(e) = &result {
                    tracing::warn!(replication = %id, error = %e, "replication failed");
                }
                let job = table.jobs.remove(id).expect("present");
                for w in job.waiters {
                    let _ = w.send(result.clone());
                }
            }
        }
    }

    /// Starts a waiting job's task.
    fn start(&self, state: &Arc<Replicator>, table: &mut Table, id: &str, now: Micros) {
        // A stopped run of the same replication may still be writing its last
        // checkpoint: the new one starts after it.
        let previous: Vec<watch::Receiver<bool>> = table
            .draining
            .values()
            .filter(|(d, _)| d == id)
            .map(|(_, drain)| drain.done.clone())
            .collect();
        let Some(job) = table.jobs.get_mut(id) else {
            return;
        };
        if job.run.is_some() {
            return;
        }
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed) + 1;
        let (stop, stop_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        let progress: Arc<Mutex<Progress>> = Default::default();
        job.progress = Some(progress.clone());
        job.run = Some(Run {
            pid,
            stop,
            started_on: now / 1_000_000,
            done,
        });
        settee_metrics::global().replicator_jobs_starts.inc();
        schedule::record(
            &mut job.history,
            EventKind::Started,
            now,
            max_history(state),
        );
        let mut prepared = job.prepared.clone();
        prepared.options.requested_at = Some(job.start_time);
        let origin = job.origin.clone();
        let start_time = job.start_time;
        let (st, id) = (state.clone(), id.to_string());
        tokio::spawn(async move {
            for mut p in previous {
                let _ = p.wait_for(|d| *d).await;
            }
            let continuous = prepared.options.continuous;
            let result = run_pair(prepared, progress, stop_rx.clone()).await;
            let stopped = *stop_rx.borrow();
            if let (Ok(outcome), Some(origin), false, false) =
                (&result, &origin, continuous, stopped)
            {
                super::docs::completed(&st, origin, outcome, start_time).await;
            }
            st.replications
                .exited(&st, &id, pid, result.map_err(Arc::new));
            let _ = done_tx.send(true);
        });
    }

    /// Stops a job's run, if it runs, and records `stopped`.
    fn stop_run(&self, table: &mut Table, id: &str, job: &mut Job, now: Micros, history: usize) {
        let Some(run) = job.run.take() else {
            return;
        };
        settee_metrics::global().replicator_jobs_stops.inc();
        let _ = run.stop.send(true);
        table.draining.insert(
            run.pid,
            (
                id.to_string(),
                Draining {
                    done: run.done,
                    waiters: Vec::new(),
                },
            ),
        );
        schedule::record(&mut job.history, EventKind::Stopped, now, history);
    }

    /// A scheduled job's row for `_scheduler/docs` (`None` if it is gone: a one-shot job
    /// that just finished).
    pub(crate) fn summary(&self, state: &Arc<Replicator>, id: &str) -> Option<Summary> {
        let threshold = limits(state).health_threshold;
        let table = self.jobs.lock().unwrap();
        let job = table.jobs.get(id)?;
        let (st, errors) = schedule::job_state(job.run.is_some(), &job.history, threshold);
        let (state, info) = match st {
            schedule::JobState::Running => ("running", job.info()),
            schedule::JobState::Pending => ("pending", job.info()),
            schedule::JobState::Crashing(reason) => ("crashing", json!({"error": reason})),
        };
        Some(Summary {
            source: job.prepared.source(),
            target: job.prepared.target(),
            state,
            info,
            error_count: errors,
            last_updated: job.history.first().map_or_else(String::new, |e| iso(e.at)),
            start_time: settee_core::dates::iso8601(job.start_time),
        })
    }

    /// The jobs by state, for the statistics (`crashed`: crashing, waiting out a backoff).
    pub(crate) fn counts(&self, state: &Arc<Replicator>) -> settee_metrics::ReplicatorJobs {
        let threshold = limits(state).health_threshold;
        let table = self.jobs.lock().unwrap();
        let mut c = settee_metrics::ReplicatorJobs {
            total: table.jobs.len() as u64,
            ..Default::default()
        };
        for job in table.jobs.values() {
            match schedule::job_state(job.run.is_some(), &job.history, threshold).0 {
                schedule::JobState::Running => c.running += 1,
                schedule::JobState::Pending => c.pending += 1,
                schedule::JobState::Crashing(_) => c.crashed += 1,
            }
        }
        c
    }

    /// `_scheduler/jobs` rows, by id: CouchDB's fields in its order (`database` first).
    pub(crate) fn jobs_json(&self) -> Vec<Value> {
        let table = self.jobs.lock().unwrap();
        let mut ids: Vec<&String> = table.jobs.keys().collect();
        ids.sort();
        ids.into_iter().map(|id| table.jobs[id].row(id)).collect()
    }

    /// One `_scheduler/jobs` row.
    pub(crate) fn job_json(&self, id: &str) -> Option<Value> {
        let table = self.jobs.lock().unwrap();
        table.jobs.get(id).map(|j| j.row(id))
    }

    /// `_active_tasks` entries of the running jobs: CouchDB's fields, in its
    /// (alphabetical) order.
    pub fn tasks(&self) -> Vec<Value> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let table = self.jobs.lock().unwrap();
        let mut out: Vec<(&String, Value)> = table
            .jobs
            .iter()
            .filter_map(|(id, job)| {
                let run = job.run.as_ref()?;
                let p = job.progress.as_ref()?.lock().unwrap().clone();
                let s = &p.stats;
                let o = &job.prepared.options;
                Some((
                    id,
                    json!({
                        "node": settee_core::node::name(),
                        "pid": format!("<0.{}.0>", run.pid),
                        "bulk_get_attempts": s.bulk_get_attempts,
                        "bulk_get_docs": s.bulk_get_docs,
                        "changes_pending": p.changes_pending,
                        "checkpoint_interval": o.checkpoint_interval.as_millis() as u64,
                        "checkpointed_source_seq": p.checkpointed_source_seq,
                        "continuous": o.continuous,
                        "database": job.origin.as_ref().map(|o| o.database.clone()),
                        "doc_id": job.origin.as_ref().map(|o| o.doc_id.clone()),
                        "doc_write_failures": s.doc_write_failures,
                        "docs_read": s.docs_read,
                        "docs_written": s.docs_written,
                        "missing_revisions_found": s.missing_revisions_found,
                        "replication_id": id,
                        "revisions_checked": s.revisions_checked,
                        "source": job.prepared.source(),
                        "source_seq": p.source_seq,
                        "started_on": run.started_on,
                        "target": job.prepared.target(),
                        "through_seq": p.through_seq,
                        "type": "replication",
                        "updated_on": now,
                        "user": job.user,
                    }),
                ))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        out.into_iter().map(|(_, t)| t).collect()
    }
}

/// What the scheduling functions see of the table.
fn views(table: &Table) -> Vec<JobView<'_>> {
    table
        .jobs
        .iter()
        .map(|(id, j)| JobView {
            id,
            continuous: j.prepared.options.continuous,
            running: j.run.is_some(),
            history: &j.history,
        })
        .collect()
}

impl Job {
    /// The last run's statistics (`info`), `null` before the job first ran.
    fn info(&self) -> Value {
        let Some(p) = &self.progress else {
            return Value::Null;
        };
        let p = p.lock().unwrap();
        let s = &p.stats;
        json!({
            "revisions_checked": s.revisions_checked,
            "missing_revisions_found": s.missing_revisions_found,
            "docs_read": s.docs_read,
            "docs_written": s.docs_written,
            "changes_pending": p.changes_pending,
            "doc_write_failures": s.doc_write_failures,
            "bulk_get_docs": s.bulk_get_docs,
            "bulk_get_attempts": s.bulk_get_attempts,
            "checkpointed_source_seq": p.checkpointed_source_seq,
            "source_seq": p.source_seq,
            "through_seq": p.through_seq,
        })
    }

    fn row(&self, id: &str) -> Value {
        let history: Vec<Value> = self
            .history
            .iter()
            .map(|e| match &e.kind {
                EventKind::Crashed(reason) => {
                    json!({"timestamp": iso(e.at), "type": "crashed", "reason": reason})
                }
                kind => json!({"timestamp": iso(e.at), "type": kind.name()}),
            })
            .collect();
        json!({
            "database": self.origin.as_ref().map(|o| o.database.clone()),
            "id": id,
            "pid": self.run.as_ref().map(|r| format!("<0.{}.0>", r.pid)),
            "source": self.prepared.source(),
            "target": self.prepared.target(),
            "user": self.user,
            "doc_id": self.origin.as_ref().map(|o| o.doc_id.clone()),
            "info": self.info(),
            "history": history,
            "node": settee_core::node::name(),
            "start_time": settee_core::dates::iso8601(self.start_time),
        })
    }
}
