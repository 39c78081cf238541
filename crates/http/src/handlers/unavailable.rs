//! Server routes CouchDB 3.5 serves whose features Settee does not have (resharding, full-text search), and paths
//! CouchDB takes for database names (`/_config`, `/_stats`, … removed in 2.0/3.0).
//!
//! Each route keeps CouchDB's grammar — its methods (405 with `Allow`), content-type and
//! parameter checks, and its answers for unknown sub-paths — and then answers the way
//! CouchDB does when that feature is unavailable where such an answer exists (Nouveau
//! disabled: 404 `missing`), else `501 not_implemented`.

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::ok_true;
use crate::Req;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

fn absent(what: &str) -> ApiError {
    ApiError::NotImplemented(format!("{what} is not supported by this Settee version"))
}

/// `POST /_replicate`. CouchDB reads the body of `/_replicate` as a JSON object before
/// anything else (its "possibly_hack" of local endpoints), so a request without one fails
/// that way whatever its method.
pub async fn replicate(mut req: Req, extra: bool) -> ApiResult<Response> {
    if !extra {
        if !crate::req::has_body(&req) {
            return Err(ApiError::bad_request("Missing request body"));
        }
        if !req.json().await?.is_object() {
            return Err(ApiError::bad_request("Request body must be a JSON object"));
        }
    }
    allow(&req.method, "POST")?;
    crate::req::require_json(&req.headers)?;
    Err(absent("replication"))
}

/// `/_reshard`, `/_reshard/state`, `/_reshard/jobs[/{id}[/state]]`.
pub fn reshard(req: &Req, rest: &[String]) -> ApiResult<Response> {
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    super::reshard::check_route(req, &rest)?;
    Err(absent("resharding"))
}

/// `/_search_analyze` (Clouseau full-text search): parameters checked as CouchDB does.
pub async fn search_analyze(mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,POST")?;
    let (analyzer, text) = if req.method == "POST" {
        crate::req::require_json(&req.headers)?;
        let Value::Object(mut body) = req.json().await? else {
            return Err(ApiError::bad_request("Request body must be a JSON object"));
        };
        (body.remove("analyzer"), body.remove("text"))
    } else {
        let p = |k| req.params.get(k).map(|v| Value::String(v.to_string()));
        (p("analyzer"), p("text"))
    };
    match analyzer {
        None => return Err(ApiError::bad_request("analyzer parameter is mandatory")),
        Some(Value::String(_)) => {}
        Some(Value::Object(o)) if !o.is_empty() => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "analyzer parameter must be a string or an object",
            ))
        }
    }
    match text {
        None => Err(ApiError::bad_request("text parameter is mandatory")),
        // CouchDB 3.5.2 without its search service (Clouseau), as Settee is.
        Some(Value::String(_)) => Err(ApiError::Named(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "service unavailable".into(),
            "Search is not available".into(),
        )),
        Some(_) => Err(ApiError::bad_request("text parameter must be a string")),
    }
}

/// `/_nouveau_analyze`: CouchDB answers 404 while Nouveau is disabled, as it is here.
pub fn nouveau_analyze(req: &Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    Err(ApiError::NotFound("missing".into()))
}

/// `POST /_reload_query_servers`: CouchDB restarts its query-server processes. External
/// ones stop (idle ones now, busy ones when their call ends) and start afresh on next use;
/// Settee's JavaScript sandboxes hold no state between design-document versions.
pub fn reload_query_servers(state: &crate::AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    crate::req::require_json(&req.headers)?;
    state.reload_query_servers();
    Ok(ok_true(StatusCode::OK))
}

/// Any other `/_…` path is a database name to CouchDB, and never an existing one.
pub fn unknown(req: &Req, segs: &[String]) -> ApiResult<Response> {
    if let [name] = segs {
        match req.method.as_str() {
            "PUT" => settee_core::validate_db_name(name)?,
            "DELETE" if req.params.get("rev").is_some() => {
                return Err(ApiError::bad_request(
                    "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?",
                ))
            }
            _ => {}
        }
    }
    Err(ApiError::Db(settee_db::Error::DbNotFound))
}
