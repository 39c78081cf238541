//! The `_replicator` database and its documents, as CouchDB 3's replicator document
//! processor follows them: a replication document becomes a job of the scheduler
//! (`jobs.rs`) — again after a restart, resuming from its checkpoint —; a deleted or
//! changed one removes its job; a one-shot job that ends marks its document `completed`,
//! and a document that cannot become a job is marked `failed`. A rescheduling runs every
//! `[replicator] interval` (read live). `_scheduler/jobs` and `_scheduler/docs` show the
//! jobs and documents with CouchDB's rows.

use super::jobs::NewJob;
use super::{prepare, Caller, Origin, Replicator};
use crate::{blocking, Error, Result};
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_db::Database;
use settee_replicator::checkpoint::Stats;
use settee_replicator::job::{iso8601, Outcome};
use settee_replicator::spec::Request;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

pub const REPLICATOR_DB: &str = "_replicator";

/// Where a document stands (CouchDB's document processor states).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Seen, not yet a job.
    Initializing,
    /// Could not become a job for now (a filter that cannot be fetched, the same
    /// replication started by `_replicate`); tried again later.
    Error,
    /// Its job is in the scheduler, which gives its state.
    Scheduled,
    /// `_replication_state` in the document: the job will not run again.
    Completed,
    Failed,
}

/// What the scheduler knows of one replication document.
#[derive(Clone, Debug)]
struct DocState {
    /// The document revision this state is for.
    rev: String,
    phase: Phase,
    /// The full replication id, once computed.
    id: Option<String>,
    info: Value,
    error_count: u64,
    last_updated: String,
    start_time: Value,
    source: Option<String>,
    target: Option<String>,
    /// When a document in `error` is tried again.
    retry_at: Option<Instant>,
}

/// The scheduler's view of `_replicator`, by document id.
#[derive(Default)]
pub struct Docs(Mutex<BTreeMap<String, DocState>>);

impl Docs {
    pub(super) fn ids(&self) -> Vec<String> {
        self.0.lock().unwrap().keys().cloned().collect()
    }
}

fn now_iso() -> String {
    iso8601(SystemTime::now())
}

/// Starts the document processor (following `_replicator`'s changes) and the
/// rescheduling timer.
pub fn start(state: &Arc<Replicator>) {
    let st = state.clone();
    tokio::spawn(async move {
        if let Err(e) = run(st).await {
            tracing::error!(error = ?e, "replication scheduler stopped");
        }
    });
    let st = state.clone();
    tokio::spawn(async move {
        // The interval is read at every tick, so a change applies from the last
        // rescheduling on.
        let mut last = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if last.elapsed() >= super::jobs::interval(&st) {
                st.replications.reschedule(&st);
                last = Instant::now();
            }
        }
    });
}

/// The checks CouchDB's `_design/_replicator` makes of replication documents (CouchDB's
/// messages, this project's code); the replicator's own writes bypass them.
const VALIDATE_JS: &str = r#"function (newDoc, oldDoc, userCtx) {
  function refuse(msg) { throw({forbidden: msg}); }
  function isObject(v) { return v !== null && typeof v === 'object' && !isArray(v); }
  if (userCtx.roles.indexOf('_replicator') >= 0) return;
  if (newDoc._deleted === true || newDoc._replication_state === 'failed') return;
  ['source', 'target'].forEach(function (f) {
    var ep = newDoc[f];
    if (typeof ep === 'string') return;
    if (!isObject(ep)) refuse('The `' + f + "' property must exist and be either a string or an object.");
    if (typeof ep.url !== 'string' || ep.url === '') refuse('The url property must exist in the `' + f + "' field and must be a non-empty string.");
    if (ep.auth !== undefined && !isObject(ep.auth)) refuse('`' + f + ".auth' must be a non-null object.");
    if (ep.headers !== undefined && !isObject(ep.headers)) refuse('`' + f + ".headers' must be a non-null object.");
  });
  ['create_target', 'continuous'].forEach(function (f) {
    if (newDoc[f] !== undefined && typeof newDoc[f] !== 'boolean') refuse('The `' + f + "' field must be a boolean.");
  });
  var ids = newDoc.doc_ids, sel = newDoc.selector, filter = newDoc.filter;
  if (ids !== undefined && (!isArray(ids) || ids.some(function (i) { return typeof i !== 'string'; })))
    refuse("The `doc_ids' field must be an array of strings.");
  if (sel !== undefined && !isObject(sel)) refuse("The `selector' field must be an object.");
  if (filter !== undefined && (typeof filter !== 'string' || filter === '')) refuse("The `filter' field must be a non-empty string.");
  if (ids !== undefined && sel !== undefined) refuse("`doc_ids' field is incompatible with `selector'.");
  if (filter !== undefined && (sel !== undefined || ids !== undefined)) refuse("`filter' field is incompatible with `selector' and `doc_ids'.");
  if (newDoc.query_params !== undefined && !isObject(newDoc.query_params)) refuse("The `query_params' field must be an object.");
}"#;

fn replicator_db(state: &Replicator) -> Result<Arc<Database>> {
    ensure_replicator_db(&state.couch, &state.config)
}

/// Opens `_replicator`, creating it (with `_design/_replicator`) if it does not exist.
pub fn ensure_replicator_db(
    couch: &settee_db::Couch,
    node: &crate::NodeConfig,
) -> Result<Arc<Database>> {
    if let Ok(db) = couch.get(REPLICATOR_DB) {
        return Ok(db);
    }
    let security =
        settee_auth::security::default_for(node.get("couchdb", "default_security").as_deref());
    let db = couch.create(REPLICATOR_DB, security)?;
    let ddoc = json!({"_id": "_design/_replicator", "language": "javascript", "validate_doc_update": VALIDATE_JS});
    let rx = db.update_docs(vec![settee_core::parse_doc(ddoc)?], true)?;
    rx.blocking_recv()
        .map_err(|e| Error::internal(e.to_string()))??;
    Ok(db)
}

async fn run(state: Arc<Replicator>) -> Result<()> {
    let st = state.clone();
    let db = blocking::<_, Error>(move || replicator_db(&st)).await?;
    let mut seen = db.watch_seq();
    let mut since = 0;
    loop {
        let d = db.clone();
        let (docs, last) = blocking::<_, Error>(move || {
            let mut docs = Vec::new();
            let mut last = since;
            d.changes(since, false, true, |c| {
                last = c.seq;
                docs.push(c);
                ControlFlow::Continue(())
            })?;
            Ok((docs, last))
        })
        .await?;
        since = last;
        for c in docs {
            let winner = c.info.tree.winner().expect("stored docs have a winner");
            let rev = winner.rev.to_string();
            let body = match (&c.body, winner.deleted) {
                (Some(b), false) => {
                    let text =
                        crate::winner_json_with(&c.id, &c.info, b, &Default::default(), None);
                    serde_json::from_slice::<Map<String, Value>>(&text).ok()
                }
                _ => None,
            };
            handle(&state, &db, &c.id, &rev, body).await;
        }
        retry_due(&state, &db).await;
        take_over(&state, &db).await;
        tokio::select! {
            _ = seen.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

fn previous(state: &Arc<Replicator>, doc_id: &str) -> Option<DocState> {
    state.scheduler_docs.0.lock().unwrap().get(doc_id).cloned()
}

/// Reacts to a new revision (or the deletion, `body: None`) of a replication document.
async fn handle(
    state: &Arc<Replicator>,
    db: &Arc<Database>,
    doc_id: &str,
    rev: &str,
    body: Option<Map<String, Value>>,
) {
    if doc_id.starts_with("_design/") {
        return;
    }
    let previous = previous(state, doc_id);
    if previous.as_ref().is_some_and(|p| p.rev == rev) {
        return;
    }
    let old_job = previous
        .as_ref()
        .filter(|p| p.phase == Phase::Scheduled)
        .and_then(|p| p.id.clone());
    let Some(body) = body else {
        if let Some(id) = old_job {
            state.replications.remove(state, &id);
        }
        state.scheduler_docs.0.lock().unwrap().remove(doc_id);
        state.elsewhere.lock().unwrap().remove(doc_id);
        release(state, doc_id).await;
        return;
    };
    let now = now_iso();
    let base = DocState {
        rev: rev.to_string(),
        phase: Phase::Initializing,
        id: None,
        info: Value::Null,
        // Errors in a row while it could not become a job.
        error_count: previous
            .as_ref()
            .filter(|p| p.phase == Phase::Error)
            .map_or(0, |p| p.error_count),
        last_updated: now.clone(),
        start_time: json!(now),
        source: body.get("source").map(shown_endpoint),
        target: body.get("target").map(shown_endpoint),
        retry_at: None,
    };
    if let Some(t @ ("completed" | "failed")) =
        body.get("_replication_state").and_then(Value::as_str)
    {
        if let Some(id) = old_job {
            state.replications.remove(state, &id);
        }
        state.elsewhere.lock().unwrap().remove(doc_id);
        release(state, doc_id).await;
        return set(state, doc_id, from_document(base, t, &body));
    }
    if !runs_here(state, doc_id).await {
        if let Some(id) = old_job {
            state.replications.remove(state, &id);
        }
        state.scheduler_docs.0.lock().unwrap().remove(doc_id);
        state.elsewhere.lock().unwrap().insert(doc_id.to_string());
        return;
    }
    state.elsewhere.lock().unwrap().remove(doc_id);
    set(state, doc_id, base.clone());
    let request = match Request::parse(&body) {
        Ok(r) => r,
        Err(e) => return fail(state, db, doc_id, base, &e.to_string()).await,
    };
    let user = body
        .get("owner")
        .or_else(|| body.get("user_ctx").and_then(|u| u.get("name")))
        .and_then(Value::as_str)
        .map(String::from);
    let caller = Caller {
        user: user
            .as_deref()
            .map_or_else(UserCtx::anonymous, |n| UserCtx::named(n, Vec::new())),
        forwarded: None,
    };
    let prepared = match prepare(state, &caller, &request).await {
        Ok(p) => p,
        Err(e) => {
            let (_, error, reason) = state.hooks.describe(e);
            if error == "error" || error == "bad_request" {
                return fail(state, db, doc_id, base, &reason).await;
            }
            return errored(state, doc_id, base, &format!("{error}: {reason}"));
        }
    };
    let full = prepared.full.clone();
    if let Some(old) = old_job.filter(|old| *old != full) {
        state.replications.remove(state, &old);
    }
    let other = state
        .scheduler_docs
        .0
        .lock()
        .unwrap()
        .iter()
        .find(|(d, s)| {
            d.as_str() != doc_id
                && s.phase == Phase::Scheduled
                && s.id.as_deref() == Some(full.as_str())
        })
        .map(|(d, _)| d.clone());
    if let Some(other) = other {
        let reason = format!(
            "Replication `{full}` specified by document `{doc_id}` already started, triggered by document `{other}` from db `{REPLICATOR_DB}`"
        );
        return fail(state, db, doc_id, base, &reason).await;
    }
    if state.replications.is_transient(&full) {
        let reason = format!(
            "Replication `{full}` specified by document `{doc_id}` already running as a transient replication, started via `_replicate` API endpoint"
        );
        return errored(
            state,
            doc_id,
            DocState {
                id: Some(full),
                ..base
            },
            &reason,
        );
    }
    let origin = Origin {
        database: REPLICATOR_DB.into(),
        doc_id: doc_id.to_string(),
    };
    let job = NewJob {
        prepared,
        user,
        origin: Some(origin),
    };
    // A change that leaves the replication as it was keeps its job as it is.
    state.replications.add(state, job, None);
    set(
        state,
        doc_id,
        DocState {
            phase: Phase::Scheduled,
            id: Some(full),
            ..base
        },
    );
}

/// A document in a terminal state, as CouchDB's `info_from_doc` shows it.
fn from_document(base: DocState, state: &str, body: &Map<String, Value>) -> DocState {
    let time = body
        .get("_replication_state_time")
        .cloned()
        .unwrap_or(Value::Null);
    let shown_time = time.as_str().map(String::from).unwrap_or_default();
    match state {
        "completed" => {
            let mut stats = body
                .get("_replication_stats")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let start = stats.shift_remove("start_time").unwrap_or(Value::Null);
            DocState {
                phase: Phase::Completed,
                info: Value::Object(stats),
                error_count: 0,
                last_updated: shown_time,
                start_time: start,
                ..base
            }
        }
        _ => DocState {
            phase: Phase::Failed,
            info: json!({"error": body.get("_replication_state_reason")}),
            error_count: 1,
            last_updated: shown_time,
            start_time: time,
            ..base
        },
    }
}

fn set(state: &Arc<Replicator>, doc_id: &str, s: DocState) {
    state
        .scheduler_docs
        .0
        .lock()
        .unwrap()
        .insert(doc_id.to_string(), s);
}

/// A document that cannot become a job for now: `error`, tried again after a backoff
/// doubling from `[replicator] retry_base` seconds.
fn errored(state: &Arc<Replicator>, doc_id: &str, s: DocState, reason: &str) {
    let error_count = s.error_count + 1;
    let base = super::jobs::limits(state).backoff_base;
    let wait = settee_replicator::schedule::backoff(error_count as u32, base);
    set(
        state,
        doc_id,
        DocState {
            phase: Phase::Error,
            info: json!({"error": reason}),
            error_count,
            last_updated: now_iso(),
            retry_at: Some(Instant::now() + wait),
            ..s
        },
    );
}

/// Documents in `error` whose wait is over: processed again.
async fn retry_due(state: &Arc<Replicator>, db: &Arc<Database>) {
    let due: Vec<String> = state
        .scheduler_docs
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, s)| s.retry_at.is_some_and(|t| t <= Instant::now()))
        .map(|(d, _)| d.clone())
        .collect();
    for doc_id in due {
        // Forget the processed revision so that `handle` looks at the document again.
        if let Some(s) = state.scheduler_docs.0.lock().unwrap().get_mut(&doc_id) {
            s.rev.clear();
            s.retry_at = None;
        }
        look_again(state, db, doc_id).await;
    }
}

/// `doc_id`'s current revision handled again (a deleted one is left to its change).
async fn look_again(state: &Arc<Replicator>, db: &Arc<Database>, doc_id: String) {
    let d = db.clone();
    let id = doc_id.clone();
    let Ok(doc) = blocking::<_, Error>(move || Ok(d.open_doc(&id, None)?)).await else {
        return;
    };
    let body =
        serde_json::from_slice::<Map<String, Value>>(&crate::doc_json(&doc, &Default::default()))
            .ok();
    handle(state, db, &doc_id, &doc.rev.to_string(), body).await;
}

/// The etcd job a cluster member claims to run `doc_id`'s replication.
fn job_name(doc_id: &str) -> String {
    format!("{REPLICATOR_DB}/{doc_id}")
}

/// Whether this node runs `doc_id`'s replication. A single node runs every one. In a
/// cluster, where every member holds the whole `_replicator` (`settee_cluster::EVERYWHERE`),
/// the member holding the document's claim in etcd runs it, and a member that finds it
/// free takes it: exactly one member runs each, and the claim lasts while its member's
/// lease does, so another takes the document over once that member dies.
async fn runs_here(state: &Replicator, doc_id: &str) -> bool {
    let Some(cluster) = state.node.cluster() else {
        return true;
    };
    let job = job_name(doc_id);
    match cluster.owner(&job) {
        Some(owner) => owner == cluster.config().node,
        None => cluster.claim(&job).await.unwrap_or_else(|e| {
            tracing::warn!(doc = %doc_id, "replication document not claimed: {e}");
            false
        }),
    }
}

/// Gives up this member's claim on `doc_id` (deleted, or in a final state).
async fn release(state: &Replicator, doc_id: &str) {
    if let Some(cluster) = state.node.cluster() {
        if let Err(e) = cluster.release(&job_name(doc_id)).await {
            tracing::warn!(doc = %doc_id, "replication document claim kept: {e}");
        }
    }
}

/// In a cluster: documents another member ran whose claim is gone (that member died) are
/// taken over, and documents this member ran whose claim another holds now (this member's
/// lease ran out while it was cut off) are given up.
async fn take_over(state: &Arc<Replicator>, db: &Arc<Database>) {
    let Some(cluster) = state.node.cluster() else {
        return;
    };
    let me = &cluster.config().node;
    let free: Vec<String> = (state.elsewhere.lock().unwrap().iter())
        .filter(|d| cluster.owner(&job_name(d)).is_none())
        .cloned()
        .collect();
    for doc_id in free {
        look_again(state, db, doc_id).await;
    }
    let lost: Vec<(String, Option<String>)> = (state.scheduler_docs.0.lock().unwrap().iter())
        .filter(|(d, s)| {
            s.phase != Phase::Completed
                && s.phase != Phase::Failed
                && cluster.owner(&job_name(d)).is_some_and(|o| o != *me)
        })
        .map(|(d, s)| {
            (
                d.clone(),
                s.id.clone().filter(|_| s.phase == Phase::Scheduled),
            )
        })
        .collect();
    for (doc_id, job) in lost {
        if let Some(id) = job {
            state.replications.remove(state, &id);
        }
        state.scheduler_docs.0.lock().unwrap().remove(&doc_id);
        state.elsewhere.lock().unwrap().insert(doc_id);
    }
}

/// Writes the replication's state into its document, as the replicator does: fields
/// appended to the body, as a new revision.
async fn write_state(
    db: &Arc<Database>,
    doc_id: &str,
    fields: Vec<(&str, Value)>,
    remove: &[&str],
) {
    let d = db.clone();
    let id = doc_id.to_string();
    let Ok(doc) = blocking::<_, Error>(move || Ok(d.open_doc(&id, None)?)).await else {
        return;
    };
    let Ok(mut body) =
        serde_json::from_slice::<Map<String, Value>>(&crate::doc_json(&doc, &Default::default()))
    else {
        return;
    };
    for r in remove {
        body.shift_remove(*r);
    }
    for (k, v) in fields {
        body.insert(k.to_string(), v);
    }
    let Ok(parsed) = settee_core::parse_doc(Value::Object(body)) else {
        return;
    };
    if let Ok(rx) = db.update_docs(vec![parsed], true) {
        let _ = rx.await;
    }
}

/// A document that cannot be run: `failed`, written into it.
async fn fail(
    state: &Arc<Replicator>,
    db: &Arc<Database>,
    doc_id: &str,
    s: DocState,
    reason: &str,
) {
    let now = now_iso();
    set(
        state,
        doc_id,
        DocState {
            phase: Phase::Failed,
            info: json!({"error": reason}),
            error_count: 1,
            last_updated: now.clone(),
            start_time: json!(now),
            ..s
        },
    );
    write_state(
        db,
        doc_id,
        vec![
            ("_replication_state", json!("failed")),
            ("_replication_state_time", json!(now)),
            ("_replication_state_reason", json!(reason)),
        ],
        &["_replication_stats"],
    )
    .await;
}

/// A document's one-shot job finished: `completed`, with its statistics and start time,
/// written into the document (before the job leaves the scheduler).
pub(crate) async fn completed(
    state: &Arc<Replicator>,
    origin: &Origin,
    outcome: &Outcome,
    start_time: u64,
) {
    let Ok(db) = state.couch.get(&origin.database) else {
        return;
    };
    let mut stats = stats_of(&outcome.stats, &outcome.checkpointed_seq);
    stats.insert(
        "start_time".into(),
        json!(settee_core::dates::iso8601(start_time)),
    );
    write_state(
        &db,
        &origin.doc_id,
        vec![
            ("_replication_state", json!("completed")),
            ("_replication_state_time", json!(now_iso())),
            ("_replication_stats", Value::Object(stats)),
        ],
        &["_replication_state_reason"],
    )
    .await;
}

/// `_replication_stats`: the counters (the checkpoint history's included) and the last
/// seq recorded, as CouchDB's `rep_stats` shows them.
fn stats_of(s: &Stats, checkpointed: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("revisions_checked".into(), json!(s.revisions_checked));
    m.insert(
        "missing_revisions_found".into(),
        json!(s.missing_revisions_found),
    );
    m.insert("docs_read".into(), json!(s.docs_read));
    m.insert("docs_written".into(), json!(s.docs_written));
    m.insert("changes_pending".into(), Value::Null);
    m.insert("doc_write_failures".into(), json!(s.doc_write_failures));
    m.insert("bulk_get_docs".into(), json!(s.bulk_get_docs));
    m.insert("bulk_get_attempts".into(), json!(s.bulk_get_attempts));
    m.insert("checkpointed_source_seq".into(), checkpointed.clone());
    m
}

/// An endpoint of a document as CouchDB shows it: its URL without credentials, ending in
/// `/` (a bare name as it is).
fn shown_endpoint(v: &Value) -> String {
    let url = match v {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("url").and_then(Value::as_str).unwrap_or(""),
        _ => "",
    };
    let mut shown = settee_replicator::remote::without_credentials(url);
    if (shown.starts_with("http://") || shown.starts_with("https://"))
        && !shown.ends_with('/')
        && !shown.contains('?')
    {
        shown.push('/');
    }
    shown
}

/// A document's `_scheduler/docs` row, with CouchDB's fields in its order for each kind
/// of document (`database` first). `None` for an unknown document, or one whose job just
/// ended.
pub(super) fn doc_row(state: &Arc<Replicator>, doc_id: &str) -> Option<Value> {
    let s = previous(state, doc_id)?;
    let row = match s.phase {
        Phase::Scheduled => {
            let id = s.id.as_deref()?;
            let j = state.replications.summary(state, id)?;
            json!({
                "database": REPLICATOR_DB,
                "doc_id": doc_id,
                "id": id,
                "node": settee_core::node::name(),
                "source": j.source,
                "target": j.target,
                "state": j.state,
                "info": j.info,
                "error_count": j.error_count,
                "last_updated": j.last_updated,
                "start_time": j.start_time,
                "source_proxy": null,
                "target_proxy": null,
            })
        }
        Phase::Initializing | Phase::Error => json!({
            "database": REPLICATOR_DB,
            "doc_id": doc_id,
            "id": s.id,
            "state": if s.phase == Phase::Error { "error" } else { "initializing" },
            "info": s.info,
            "error_count": s.error_count,
            "node": settee_core::node::name(),
            "last_updated": s.last_updated,
            "start_time": s.start_time,
        }),
        Phase::Completed | Phase::Failed => json!({
            "database": REPLICATOR_DB,
            "doc_id": doc_id,
            "id": null,
            "source": s.source,
            "target": s.target,
            "state": if s.phase == Phase::Failed { "failed" } else { "completed" },
            "error_count": s.error_count,
            "info": s.info,
            "start_time": s.start_time,
            "last_updated": s.last_updated,
        }),
    };
    Some(row)
}
