//! `/_scheduler/jobs[/{id}]` and `/_scheduler/docs[/_replicator[/{docid}]]`: the
//! replication jobs and `_replicator` documents of the node's replicator, with CouchDB's
//! rows.

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use settee_node::replication::REPLICATOR_DB;

/// `limit` or `skip` of `_scheduler/jobs` (CouchDB's `parse_int_param`: an integer from 0).
fn int_param(req: &Req, name: &str, default: u64) -> ApiResult<usize> {
    let Some(v) = req.params.get(name) else {
        return Ok(default as usize);
    };
    let n: i64 = v
        .parse()
        .map_err(|_| ApiError::QueryParse(format!("{name} must be an integer")))?;
    usize::try_from(n)
        .map_err(|_| ApiError::QueryParse(format!("{name} not in range of [0,infinity]")))
}

const STATES: &[&str] = &[
    "initializing",
    "error",
    "running",
    "pending",
    "crashing",
    "completed",
    "failed",
];

/// `?states=a,b` (CouchDB's `parse_replication_state_filter`; `None`: every state).
fn states_filter(req: &Req) -> ApiResult<Option<Vec<String>>> {
    let Some(raw) = req.params.get("states") else {
        return Ok(None);
    };
    let states: Vec<String> = raw
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase)
        .collect();
    if states.iter().any(|s| !STATES.contains(&s.as_str())) {
        return Err(ApiError::QueryParse(format!(
            "States must be one or more of [{}]",
            STATES.join(",")
        )));
    }
    Ok(Some(states))
}

/// Every member's rows of `key` in its answer to `target` when a client asks a cluster
/// member (CouchDB gathers every node's jobs); a member asking for the others' answers
/// gets this member's own only.
async fn others(state: &AppState, req: &Req, target: &str, key: &str) -> Vec<Value> {
    if req.authenticated_by == Some("cluster") {
        return Vec::new();
    }
    let answers = state.replicator.other_members(target).await;
    (answers.into_iter())
        .flat_map(|mut a| match a[key].take() {
            Value::Array(rows) => rows,
            Value::Null => Vec::new(),
            one => vec![one],
        })
        .collect()
}

/// Every row at most once (the first of each `field`), in `field` order.
fn by(field: &str, rows: Vec<Value>) -> Vec<Value> {
    let mut seen = std::collections::BTreeMap::new();
    for row in rows {
        let key = row[field].as_str().unwrap_or_default().to_owned();
        seen.entry(key).or_insert(row);
    }
    seen.into_values().collect()
}

/// `/_scheduler/jobs[/{id}]`, `/_scheduler/docs[/_replicator[/{docid}]]`: on a cluster
/// member, the replications every member runs.
pub async fn scheduler(state: &AppState, req: &Req, rest: &[String]) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    const ALL: &str = "limit=1000000000";
    match rest.as_slice() {
        ["jobs"] => {
            let limit = int_param(req, "limit", 100)?;
            let skip = int_param(req, "skip", 0)?;
            let mut jobs = state.replicator.jobs_json();
            jobs.extend(others(state, req, &format!("/_scheduler/jobs?{ALL}"), "jobs").await);
            let jobs = by("id", jobs);
            let total = jobs.len();
            let page: Vec<Value> = jobs.into_iter().skip(skip).take(limit).collect();
            Ok(json(
                StatusCode::OK,
                &json!({"total_rows": total, "offset": skip.min(total), "jobs": page}),
            ))
        }
        ["jobs", id] => {
            let id = id.replace(' ', "+");
            let job = match state.replicator.job_json(&id) {
                Some(job) => Some(job),
                None => first_whole(state, req, &format!("/_scheduler/jobs/{}", enc(&id))).await,
            };
            let job = job.ok_or_else(|| ApiError::NotFound("missing".into()))?;
            Ok(json(StatusCode::OK, &job))
        }
        ["docs"] | ["docs", REPLICATOR_DB] => docs(state, req).await,
        ["docs", REPLICATOR_DB, doc_id] => {
            let row = match state.replicator.doc_row(doc_id) {
                Some(row) => Some(row),
                None => {
                    let target = format!("/_scheduler/docs/{REPLICATOR_DB}/{}", enc(doc_id));
                    first_whole(state, req, &target).await
                }
            };
            row.map(|d| json(StatusCode::OK, &d))
                .ok_or_else(|| ApiError::NotFound("missing".into()))
        }
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

/// The first other member's whole answer to `target` (one job's or document's row), when
/// a client asks.
async fn first_whole(state: &AppState, req: &Req, target: &str) -> Option<Value> {
    if req.authenticated_by == Some("cluster") {
        return None;
    }
    state
        .replicator
        .other_members(target)
        .await
        .into_iter()
        .next()
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `_scheduler/docs`: a row per replication document, in document id order, after the
/// `states` filter, `skip` and `limit` (parsed as `_all_docs` parses them). As in
/// CouchDB, `total_rows` is the database's document count less `_design/_replicator`, and
/// `offset` is `skip` (at most that count).
async fn docs(state: &AppState, req: &Req) -> ApiResult<Response> {
    let args = crate::mrargs::MrArgs::from_query(&req.params)?;
    let states = states_filter(req)?;
    let count = state
        .couch
        .get(REPLICATOR_DB)
        .map_or(0, |db| db.stats().doc_count);
    let mut rows: Vec<Value> = (state.replicator.doc_ids().iter())
        .filter_map(|id| state.replicator.doc_row(id))
        .collect();
    let target = "/_scheduler/docs?limit=1000000000";
    rows.extend(others(state, req, target, "docs").await);
    let rows: Vec<Value> = by("doc_id", rows)
        .into_iter()
        .filter(|d| {
            states.as_ref().is_none_or(|s| {
                d["state"]
                    .as_str()
                    .is_some_and(|x| s.iter().any(|y| y == x))
            })
        })
        .skip(args.skip as usize)
        .take(args.limit.map_or(usize::MAX, |l| l as usize))
        .collect();
    Ok(json(
        StatusCode::OK,
        &json!({
            "total_rows": count.saturating_sub(1),
            "offset": args.skip.min(count),
            "docs": rows,
        }),
    ))
}
