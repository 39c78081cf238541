//! The `_replicator` database and the replication scheduler: a replication document starts
//! a replication (again after a restart, from its checkpoint), a deleted or changed one
//! stops it, a one-shot replication that ends marks its document `completed`, and a document
//! that cannot be run is marked `failed`. At most `[replicator] max_jobs` run at once; the
//! rest wait (`pending`). A replication that crashes is retried after a backoff doubling
//! from `[replicator] retry_base` seconds (CouchDB: 30). `_scheduler/jobs` and
//! `_scheduler/docs` show the replications and documents as CouchDB 3 does.

use crate::error::{ApiError, ApiResult};
use crate::handlers::{allow, blocking};
use crate::replication::{launch, prepare, Caller, Origin};
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_db::Database;
use settee_replicator::job::{iso8601, Outcome};
use settee_replicator::spec::Request;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

pub const REPLICATOR_DB: &str = "_replicator";

/// What the scheduler knows of one replication document.
#[derive(Clone, Debug)]
struct DocState {
    /// The full replication id, once computed.
    id: Option<String>,
    state: &'static str,
    info: Value,
    error_count: u64,
    last_updated: String,
    start_time: String,
    source: Option<String>,
    target: Option<String>,
    /// The document revision this state is for.
    rev: String,
    /// When a crashed or waiting replication may be tried again.
    retry_at: Option<Instant>,
}

/// The scheduler's view of `_replicator`, by document id.
#[derive(Default)]
pub struct Docs(Mutex<BTreeMap<String, DocState>>);

fn now_iso() -> String {
    iso8601(SystemTime::now())
}

/// Starts the scheduler: creates `_replicator` if needed, then follows its changes.
pub fn start(state: &AppState) {
    let state = state.clone();
    tokio::spawn(async move {
        if let Err(e) = run(state).await {
            tracing::error!(error = ?e, "replication scheduler stopped");
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

fn replicator_db(state: &AppState) -> ApiResult<Arc<Database>> {
    ensure_replicator_db(&state.couch, &state.node)
}

/// Opens `_replicator`, creating it (with `_design/_replicator`) if it does not exist.
pub fn ensure_replicator_db(
    couch: &settee_db::Couch,
    node: &crate::NodeConfig,
) -> ApiResult<Arc<Database>> {
    if let Ok(db) = couch.get(REPLICATOR_DB) {
        return Ok(db);
    }
    let security =
        settee_auth::security::default_for(node.get("couchdb", "default_security").as_deref());
    let db = couch.create(REPLICATOR_DB, security)?;
    let ddoc = json!({"_id": "_design/_replicator", "language": "javascript", "validate_doc_update": VALIDATE_JS});
    let rx = db.update_docs(vec![settee_core::parse_doc(ddoc)?], true)?;
    rx.blocking_recv()
        .map_err(|e| ApiError::Db(settee_db::Error::Internal(e.to_string())))??;
    Ok(db)
}

async fn run(state: AppState) -> ApiResult<()> {
    let st = state.clone();
    let db = blocking(move || replicator_db(&st)).await?;
    let mut seen = db.watch_seq();
    let mut since = 0;
    loop {
        let d = db.clone();
        let (docs, last) = blocking(move || {
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
                    let text = crate::render::winner_json_with(
                        &c.id,
                        &c.info,
                        b,
                        &Default::default(),
                        None,
                    );
                    serde_json::from_slice::<Map<String, Value>>(&text).ok()
                }
                _ => None,
            };
            handle(&state, &db, &c.id, &rev, body).await;
        }
        retry_due(&state, &db).await;
        tokio::select! {
            _ = seen.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Stops the replication a document started, if it runs.
fn stop_job(state: &AppState, full: &str) {
    state.replications.stop(full);
}

/// Reacts to a new revision (or the deletion, `body: None`) of a replication document.
async fn handle(
    state: &AppState,
    db: &Arc<Database>,
    doc_id: &str,
    rev: &str,
    body: Option<Map<String, Value>>,
) {
    if doc_id.starts_with("_design/") {
        return;
    }
    let previous = state.scheduler_docs.0.lock().unwrap().get(doc_id).cloned();
    if previous.as_ref().is_some_and(|p| p.rev == rev) {
        return;
    }
    let Some(body) = body else {
        if let Some(id) = previous.and_then(|p| p.id) {
            stop_job(state, &id);
        }
        state.scheduler_docs.0.lock().unwrap().remove(doc_id);
        return;
    };
    let now = now_iso();
    let terminal = body.get("_replication_state").and_then(Value::as_str);
    if let Some(t @ ("completed" | "failed")) = terminal {
        if let Some(id) = previous.as_ref().and_then(|p| p.id.clone()) {
            if t == "failed" {
                stop_job(state, &id);
            }
        }
        let info = match t {
            "completed" => body
                .get("_replication_stats")
                .cloned()
                .unwrap_or(Value::Null),
            _ => json!({"error": body.get("_replication_state_reason")}),
        };
        let time = body
            .get("_replication_state_time")
            .cloned()
            .unwrap_or(json!(now));
        set(
            state,
            doc_id,
            DocState {
                id: None,
                state: if t == "completed" {
                    "completed"
                } else {
                    "failed"
                },
                info,
                error_count: u64::from(t == "failed"),
                last_updated: time.as_str().unwrap_or(&now).to_string(),
                start_time: time.as_str().unwrap_or(&now).to_string(),
                source: body.get("source").map(shown_endpoint),
                target: body.get("target").map(shown_endpoint),
                rev: rev.to_string(),
                retry_at: None,
            },
        );
        return;
    }
    let base = DocState {
        id: None,
        state: "initializing",
        info: Value::Null,
        error_count: 0,
        last_updated: now.clone(),
        start_time: now.clone(),
        source: body.get("source").map(shown_endpoint),
        target: body.get("target").map(shown_endpoint),
        rev: rev.to_string(),
        retry_at: None,
    };
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
            let (_, error, reason) = e.parts();
            let reason = format!("{error}: {reason}");
            if error == "error" || error == "bad_request" {
                return fail(state, db, doc_id, base, &reason).await;
            }
            return crashed(state, doc_id, base, &reason);
        }
    };
    let full = prepared.full.clone();
    let running = |base: DocState| DocState {
        id: Some(full.clone()),
        state: "running",
        ..base
    };
    if let Some(old) = previous.as_ref().and_then(|p| p.id.clone()) {
        if old == full && state.replications.is_running(&full) {
            return set(state, doc_id, running(base));
        }
        stop_job(state, &old);
    }
    let owner = state
        .scheduler_docs
        .0
        .lock()
        .unwrap()
        .iter()
        .find(|(d, s)| {
            d.as_str() != doc_id
                && s.id.as_deref() == Some(full.as_str())
                && matches!(s.state, "running" | "pending" | "crashing")
        })
        .map(|(d, _)| d.clone());
    if let Some(other) = owner {
        let reason = format!(
            "Replication `{full}` specified by document `{doc_id}` already started, triggered by document `{other}` from db `{REPLICATOR_DB}`"
        );
        return fail(state, db, doc_id, base, &reason).await;
    }
    let max_jobs = state.node.get_u64("replicator", "max_jobs", 500) as usize;
    if state.replications.count() >= max_jobs {
        set(
            state,
            doc_id,
            DocState {
                id: Some(full),
                state: "pending",
                retry_at: Some(Instant::now() + Duration::from_secs(1)),
                ..base
            },
        );
        return;
    }
    let origin = Origin {
        database: REPLICATOR_DB.into(),
        doc_id: doc_id.to_string(),
    };
    let continuous = prepared.options.continuous;
    // Not launched when a replication with this id already runs (started by `_replicate`).
    let Some(job) = launch(state, prepared, user, Some(origin)) else {
        return set(state, doc_id, running(base));
    };
    set(state, doc_id, running(base));
    let (st, db, doc_id) = (state.clone(), db.clone(), doc_id.to_string());
    tokio::spawn(async move {
        let result = job.await;
        let current = st.scheduler_docs.0.lock().unwrap().get(&doc_id).cloned();
        // A document changed or deleted meanwhile has moved on.
        let Some(current) = current.filter(|c| c.id.as_deref() == Some(full.as_str())) else {
            return;
        };
        match result {
            Ok(outcome) if !continuous => completed(&st, &db, &doc_id, current, outcome).await,
            Ok(_) => {}
            Err(e) => {
                let (_, error, reason) = e.parts();
                crashed(&st, &doc_id, current, &format!("{error}: {reason}"));
            }
        }
    });
}

fn set(state: &AppState, doc_id: &str, s: DocState) {
    state
        .scheduler_docs
        .0
        .lock()
        .unwrap()
        .insert(doc_id.to_string(), s);
}

/// A replication that stopped with an error: `crashing`, tried again after a backoff.
fn crashed(state: &AppState, doc_id: &str, s: DocState, reason: &str) {
    let error_count = s.error_count + 1;
    let base = state.node.get_u64("replicator", "retry_base", 30);
    let wait = base.saturating_mul(1 << (error_count - 1).min(10));
    set(
        state,
        doc_id,
        DocState {
            state: "crashing",
            info: json!({"error": reason}),
            error_count,
            last_updated: now_iso(),
            retry_at: Some(Instant::now() + Duration::from_secs(wait)),
            ..s
        },
    );
}

/// Documents whose replication may be tried again now (crashed, or waiting for a slot).
async fn retry_due(state: &AppState, db: &Arc<Database>) {
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
        let d = db.clone();
        let id = doc_id.clone();
        let Ok(doc) = blocking(move || Ok(d.open_doc(&id, None)?)).await else {
            continue;
        };
        let body = serde_json::from_slice::<Map<String, Value>>(&crate::render::doc_json(
            &doc,
            &Default::default(),
        ))
        .ok();
        // Forget the processed revision so that `handle` looks at the document again.
        let mut keep = None;
        if let Some(s) = state.scheduler_docs.0.lock().unwrap().get_mut(&doc_id) {
            s.rev.clear();
            keep = Some((s.error_count, s.state));
        }
        handle(state, db, &doc_id, &doc.rev.to_string(), body).await;
        if let Some((count, "crashing")) = keep {
            if let Some(s) = state.scheduler_docs.0.lock().unwrap().get_mut(&doc_id) {
                s.error_count = s.error_count.max(count);
            }
        }
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
    let Ok(doc) = blocking(move || Ok(d.open_doc(&id, None)?)).await else {
        return;
    };
    let Ok(mut body) = serde_json::from_slice::<Map<String, Value>>(&crate::render::doc_json(
        &doc,
        &Default::default(),
    )) else {
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

async fn fail(state: &AppState, db: &Arc<Database>, doc_id: &str, s: DocState, reason: &str) {
    let now = now_iso();
    set(
        state,
        doc_id,
        DocState {
            state: "failed",
            info: json!({"error": reason}),
            error_count: 1,
            last_updated: now.clone(),
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

async fn completed(
    state: &AppState,
    db: &Arc<Database>,
    doc_id: &str,
    s: DocState,
    outcome: Outcome,
) {
    let now = now_iso();
    let mut stats = match &outcome {
        Outcome::Done { history, .. } => history.first().map(stats_of).unwrap_or_default(),
        Outcome::NoChanges(_) => stats_of(&Value::Null),
    };
    stats.insert("start_time".into(), json!(s.start_time));
    set(
        state,
        doc_id,
        DocState {
            state: "completed",
            info: Value::Object(stats.clone()),
            last_updated: now.clone(),
            ..s
        },
    );
    write_state(
        db,
        doc_id,
        vec![
            ("_replication_state", json!("completed")),
            ("_replication_state_time", json!(now)),
            ("_replication_stats", Value::Object(stats)),
        ],
        &["_replication_state_reason"],
    )
    .await;
}

/// `_replication_stats` from a checkpoint history entry.
fn stats_of(entry: &Value) -> Map<String, Value> {
    let n = |k: &str| entry.get(k).cloned().unwrap_or(json!(0));
    let mut m = Map::new();
    m.insert("revisions_checked".into(), n("missing_checked"));
    m.insert("missing_revisions_found".into(), n("missing_found"));
    m.insert("docs_read".into(), n("docs_read"));
    m.insert("docs_written".into(), n("docs_written"));
    m.insert("changes_pending".into(), Value::Null);
    m.insert("doc_write_failures".into(), n("doc_write_failures"));
    m.insert("bulk_get_docs".into(), n("bulk_get_docs"));
    m.insert("bulk_get_attempts".into(), n("bulk_get_attempts"));
    m.insert(
        "checkpointed_source_seq".into(),
        entry.get("recorded_seq").cloned().unwrap_or(json!(0)),
    );
    m
}

/// An endpoint of a document as the scheduler shows it: its URL, password hidden.
fn shown_endpoint(v: &Value) -> String {
    let url = match v {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("url").and_then(Value::as_str).unwrap_or(""),
        _ => "",
    };
    let mut shown = settee_replicator::remote::redact(url);
    if (shown.starts_with("http://") || shown.starts_with("https://")) && !shown.ends_with('/') {
        shown.push('/');
    }
    shown
}

fn paging(req: &Req) -> ApiResult<(usize, usize)> {
    let get =
        |k: &str, d: u64| -> ApiResult<usize> { Ok(req.params.uint(k)?.unwrap_or(d) as usize) };
    Ok((get("limit", 100)?, get("skip", 0)?))
}

/// `/_scheduler/jobs[/{id}]`, `/_scheduler/docs[/_replicator[/{docid}]]`.
pub fn scheduler(state: &AppState, req: &Req, rest: &[String]) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match rest.as_slice() {
        ["jobs"] => {
            let (limit, skip) = paging(req)?;
            let jobs = state.replications.jobs_json();
            let total = jobs.len();
            let page: Vec<Value> = jobs.into_iter().skip(skip).take(limit).collect();
            Ok(json(
                StatusCode::OK,
                &json!({"total_rows": total, "offset": skip.min(total), "jobs": page}),
            ))
        }
        ["jobs", id] => {
            let id = id.replace(' ', "+");
            let job = state
                .replications
                .jobs_json()
                .into_iter()
                .find(|j| j["id"] == id.as_str())
                .ok_or_else(|| ApiError::NotFound("missing".into()))?;
            Ok(json(StatusCode::OK, &job))
        }
        ["docs"] | ["docs", REPLICATOR_DB] => {
            let (limit, skip) = paging(req)?;
            let states: Option<Vec<String>> = req
                .params
                .get("states")
                .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
            const STATES: &[&str] = &[
                "initializing",
                "error",
                "running",
                "pending",
                "crashing",
                "completed",
                "failed",
            ];
            if let Some(bad) = states
                .iter()
                .flatten()
                .find(|s| !STATES.contains(&s.as_str()))
            {
                return Err(ApiError::bad_request(format!(
                    "Unknown replication state: {bad}"
                )));
            }
            let docs: Vec<Value> = doc_states(state)
                .into_iter()
                .filter(|d| {
                    states
                        .as_ref()
                        .is_none_or(|s| s.iter().any(|x| d["state"] == x.as_str()))
                })
                .collect();
            let total = docs.len();
            let page: Vec<Value> = docs.into_iter().skip(skip).take(limit).collect();
            Ok(json(
                StatusCode::OK,
                &json!({"total_rows": total, "offset": skip.min(total), "docs": page}),
            ))
        }
        ["docs", REPLICATOR_DB, doc_id] => doc_states(state)
            .into_iter()
            .find(|d| d["doc_id"] == *doc_id)
            .map(|d| json(StatusCode::OK, &d))
            .ok_or_else(|| ApiError::NotFound("missing".into())),
        ["docs", path @ ..] => {
            // Other replicator databases (`a/_replicator`, unencoded slashes allowed) have
            // no documents here; other paths are malformed.
            let at = path.iter().position(|p| p.ends_with("_replicator"));
            if !matches!(at, Some(i) if path.len() - i <= 2) {
                return Err(ApiError::BadRequest(String::new()));
            }
            if path.len() - at.unwrap_or(0) == 1 {
                return Ok(json(
                    StatusCode::OK,
                    &json!({"total_rows": 0, "offset": 0, "docs": []}),
                ));
            }
            Err(ApiError::NotFound("missing".into()))
        }
        _ => Ok(json(StatusCode::NOT_FOUND, &json!({"error": "not found"}))),
    }
}

/// Every replication document as `_scheduler/docs` shows it.
fn doc_states(state: &AppState) -> Vec<Value> {
    let docs = state.scheduler_docs.0.lock().unwrap().clone();
    docs.into_iter()
        .map(|(doc_id, s)| {
            let running = s.id.as_deref().and_then(|id| state.replications.info(id));
            let (st, info) = match (s.state, running) {
                ("running", Some(info)) => ("running", info),
                ("running", None) => ("pending", Value::Null),
                (other, _) => (other, s.info.clone()),
            };
            json!({
                "doc_id": doc_id,
                "database": REPLICATOR_DB,
                "id": s.id,
                "node": "nonode@nohost",
                "source": s.source,
                "target": s.target,
                "state": st,
                "info": info,
                "error_count": s.error_count,
                "last_updated": s.last_updated,
                "start_time": s.start_time,
            })
        })
        .collect()
}
