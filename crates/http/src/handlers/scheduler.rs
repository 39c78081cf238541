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

/// `/_scheduler/jobs[/{id}]`, `/_scheduler/docs[/_replicator[/{docid}]]`.
pub fn scheduler(state: &AppState, req: &Req, rest: &[String]) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match rest.as_slice() {
        ["jobs"] => {
            let limit = int_param(req, "limit", 100)?;
            let skip = int_param(req, "skip", 0)?;
            let jobs = state.replicator.jobs_json();
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
                .replicator
                .job_json(&id)
                .ok_or_else(|| ApiError::NotFound("missing".into()))?;
            Ok(json(StatusCode::OK, &job))
        }
        ["docs"] | ["docs", REPLICATOR_DB] => docs(state, req),
        ["docs", REPLICATOR_DB, doc_id] => state
            .replicator
            .doc_row(doc_id)
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

/// `_scheduler/docs`: a row per replication document, in document id order, after the
/// `states` filter, `skip` and `limit` (parsed as `_all_docs` parses them). As in
/// CouchDB, `total_rows` is the database's document count less `_design/_replicator`, and
/// `offset` is `skip` (at most that count).
fn docs(state: &AppState, req: &Req) -> ApiResult<Response> {
    let args = crate::mrargs::MrArgs::from_query(&req.params)?;
    let states = states_filter(req)?;
    let count = state
        .couch
        .get(REPLICATOR_DB)
        .map_or(0, |db| db.stats().doc_count);
    let rows: Vec<Value> = state
        .replicator
        .doc_ids()
        .iter()
        .filter_map(|id| state.replicator.doc_row(id))
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
