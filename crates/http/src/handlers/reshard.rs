//! `/_reshard`, `/_reshard/state`, `/_reshard/jobs[/{id}[/state]]` (CouchDB 3's
//! resharding API) on a cluster member: `settee_node::reshard` does the work. A single
//! node has no shards to split and answers as before (`unavailable::reshard`).

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;

/// The API's grammar, on a cluster or not: its paths (others 404), each path's methods
/// (405 with `Allow`), and a JSON content type for `PUT` and `POST`, whose body follows
/// (`true`).
pub(super) fn check_route(req: &Req, rest: &[&str]) -> ApiResult<bool> {
    let methods = match rest {
        [] => "GET,HEAD",
        ["state"] | ["jobs", _, "state"] => "GET,HEAD,PUT",
        ["jobs"] => "GET,HEAD,POST",
        ["jobs", _] => "GET,HEAD,DELETE",
        _ => return Err(ApiError::NotFound("missing".into())),
    };
    allow(&req.method, methods)?;
    let sends_body = matches!(req.method.as_str(), "PUT" | "POST");
    if sends_body {
        crate::req::require_json(&req.headers)?;
    }
    Ok(sends_body)
}

pub async fn reshard(state: &AppState, mut req: Req, rest: &[String]) -> ApiResult<Response> {
    if state.node.cluster().is_none() {
        return super::unavailable::reshard(&req, rest);
    }
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    let sends_body = check_route(&req, &rest)?;
    let body = if sends_body {
        crate::req::parse_json(&req.bytes().await?)?
    } else {
        serde_json::Value::Null
    };
    let node = &state.node;
    let ok = |v| Ok(json(StatusCode::OK, &v));
    match (req.method.as_str(), rest.as_slice()) {
        ("PUT", ["state"]) => ok(node.set_reshard_state(&body).await?),
        (_, ["state"]) => ok(node.reshard_state()?),
        ("POST", ["jobs"]) => {
            let (status, answer) = node.create_reshard_jobs(&body).await?;
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Ok(json(status, &answer))
        }
        (_, ["jobs"]) => ok(node.reshard_jobs()?),
        ("DELETE", ["jobs", id]) => ok(node.delete_reshard_job(id).await?),
        (_, ["jobs", id]) => ok(node.reshard_job(id)?),
        ("PUT", ["jobs", id, "state"]) => ok(node.set_reshard_job_state(id, &body).await?),
        (_, ["jobs", id, "state"]) => ok(node.reshard_job_state(id)?),
        _ => ok(node.reshard_summary()?),
    }
}
