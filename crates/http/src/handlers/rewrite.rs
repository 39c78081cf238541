//! `ANY /{db}/_design/{ddoc}/_rewrite/{path…}`: the design document's `rewrites` turn the
//! request into another one of this server (CouchDB 3.5's `chttpd_rewrite`, deprecated
//! there but served). An array of rules is matched here by [`settee_core::rewrite`]; a
//! string is a JavaScript rewrite function, given CouchDB's request object without `info`,
//! `form`, `uuid` and `id`, answering a new `path` (with `query`, `method`, `headers`,
//! `body`) or a response of its own (`code`, `headers`, `body`).
//!
//! The new request is not handled here: the answer carries it as a [`Rewritten`]
//! extension, and the request loop routes it again from the start — authentication, access
//! checks, and further rewrites, at most `[chttpd] rewrite_limit` (default 100) of them.

use crate::error::{ApiError, ApiResult};
use crate::{AppState, Req};
use axum::body::Body;
use axum::http::{request, Method, Request, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_core::rewrite::{self, RewriteError};
use settee_db::Database;
use std::sync::{Arc, Mutex};

/// The request a rewrite turned this one into, for the request loop to route.
#[derive(Clone)]
pub struct Rewritten(Arc<Mutex<Option<(request::Parts, Body)>>>);

impl Rewritten {
    /// The new request's head and body (once).
    pub fn take(&self) -> Option<(request::Parts, Body)> {
        self.0.lock().unwrap().take()
    }
}

/// A setting of CouchDB's `[chttpd]` section, or of `[httpd]` where it used to live.
pub(crate) fn httpd_setting(state: &AppState, key: &str) -> Option<String> {
    state
        .node
        .get("chttpd", key)
        .or_else(|| state.node.get("httpd", key))
}

pub async fn rewrite(
    state: &AppState,
    db: Arc<Database>,
    ddoc: String,
    path: Vec<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let limit = httpd_setting(state, "rewrite_limit")
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(100);
    if req.rewrites >= limit {
        return Err(ApiError::bad_request("Exceeded rewrite recursion limit"));
    }
    let body = {
        let (db, ddoc) = (db.clone(), ddoc.clone());
        super::blocking(move || Ok(crate::design_filter::open_design(&db, &ddoc)?.1)).await?
    };
    let target = match body.get("rewrites") {
        Some(Value::Array(rules)) => {
            let secure = httpd_setting(state, "secure_rewrites").as_deref() != Some("false");
            let query: Vec<(String, String)> = req
                .params
                .pairs()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let method = req.method.as_str();
            rewrite::apply_rules(rules, method, &path, &query, secure).map_err(rules_error)?
        }
        Some(Value::String(_)) => {
            return Err(ApiError::NotImplemented(
                "rewrite functions are not supported by this Settee version".into(),
            ))
        }
        _ => return Err(invalid_path()),
    };
    let location = rewrite::resolve(&encode(&db.name), &encode(&ddoc), &target);
    let method = req.method.clone();
    let headers = std::mem::take(&mut req.headers);
    let body = req.take_body();
    forward(method, &location, headers, body)
}

/// An answer carrying the request to route next.
fn forward(
    method: Method,
    location: &str,
    headers: axum::http::HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let next = Request::builder()
        .method(method)
        .uri(location)
        .body(body)
        .map_err(|_| ApiError::bad_request("invalid rewrite target"))?;
    let (mut parts, body) = next.into_parts();
    parts.headers = headers;
    let mut resp = Response::new(Body::empty());
    resp.extensions_mut()
        .insert(Rewritten(Arc::new(Mutex::new(Some((parts, body))))));
    Ok(resp)
}

/// CouchDB's answer when the design document has no usable `rewrites`, or its function
/// matched nothing.
fn invalid_path() -> ApiError {
    ApiError::Named(
        StatusCode::NOT_FOUND,
        "rewrite_error".into(),
        "Invalid path.".into(),
    )
}

fn rules_error(e: RewriteError) -> ApiError {
    let internal = |error: &str, reason: &str| {
        ApiError::Named(
            StatusCode::INTERNAL_SERVER_ERROR,
            error.into(),
            reason.into(),
        )
    };
    match e {
        RewriteError::NoMatch => ApiError::NotFound("missing".into()),
        RewriteError::InvalidTarget => internal("error", "invalid_rewrite_target"),
        RewriteError::Insecure => internal("insecure_rewrite_rule", "too many ../.. segments"),
        RewriteError::BadJson(_) => ApiError::bad_request("invalid UTF-8 JSON"),
    }
}

/// A name as a path segment (`couch_util:url_encode`).
fn encode(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, SEGMENT).to_string()
}

const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
