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
use axum::http::{request, HeaderName, HeaderValue, Method, Request, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;
use settee_core::reduce::reason_text;
use settee_core::rewrite::{self, RewriteError};
use settee_db::Database;
use settee_node::render::{rewrite_answer, DesignDoc};
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

pub async fn rewrite(
    state: &AppState,
    db: Arc<Database>,
    ddoc: String,
    path: Vec<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let limit = state
        .config
        .chttpd("rewrite_limit")
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(100);
    if req.rewrites >= limit {
        return Err(ApiError::bad_request("Exceeded rewrite recursion limit"));
    }
    let (design, body) = {
        let (db, ddoc) = (db.clone(), ddoc.clone());
        super::blocking(move || {
            let design = DesignDoc::open(&db, &ddoc)?;
            let body = design.body()?;
            Ok((design, body))
        })
        .await?
    };
    let target = match body.get("rewrites") {
        Some(Value::Array(rules)) => {
            let secure = state.config.chttpd("secure_rewrites").as_deref() != Some("false");
            let method = req.method.as_str();
            rewrite::apply_rules(rules, method, &path, &query_pairs(&req), secure)
                .map_err(rules_error)?
        }
        Some(Value::String(_)) => return by_function(state, db, &ddoc, design, body, req).await,
        _ => return Err(invalid_path()),
    };
    let location = rewrite::resolve(&encode(&db.name), &encode(&ddoc), &target);
    let method = req.method.clone();
    let headers = std::mem::take(&mut req.headers);
    let body = req.take_body();
    forward(method, &location, headers, body)
}

fn query_pairs(req: &Req) -> Vec<(String, String)> {
    req.params
        .pairs()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A rewrite function: CouchDB's request object without `info`, `form`, `uuid` and `id`
/// goes in; a new request, or a response of the function's own, comes out.
async fn by_function(
    state: &AppState,
    db: Arc<Database>,
    name: &str,
    design: DesignDoc,
    ddoc_body: Value,
    mut req: Req,
) -> ApiResult<Response> {
    let bytes = req.bytes().await?;
    let mut obj = crate::req_info::for_render(&req, &bytes, None).render_json(state, &db)?;
    if let Some(members) = obj.as_object_mut() {
        for key in ["info", "form", "uuid", "id"] {
            members.shift_remove(key);
        }
    }
    let answer = {
        let (state, db) = (state.clone(), db.clone());
        super::blocking(move || Ok(rewrite_answer(&state.node, &db, &design, &ddoc_body, &obj)?))
            .await?
    };
    let rewrite = match answer {
        Value::Array(a) if a.len() == 1 && a[0] == "no_dispatch_rule" => return Err(invalid_path()),
        Value::Array(mut a) if a.len() == 2 && a[0] == "ok" => match a.pop() {
            Some(Value::Object(o)) => o,
            _ => return Err(rewrite_error("bad rewrite")),
        },
        Value::Object(o) if o.len() == 1 && o.contains_key("forbidden") => {
            return Err(ApiError::Forbidden(reason_text(&o["forbidden"])))
        }
        Value::Object(o) if o.len() == 1 && o.contains_key("unauthorized") => {
            return Err(ApiError::Unauthorized(reason_text(&o["unauthorized"])))
        }
        other => {
            return Err(ApiError::Named(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown_error".into(),
                other.to_string(),
            ))
        }
    };
    check_answer(&rewrite)?;
    let text = |k: &str| rewrite.get(k).and_then(Value::as_str);
    let body = match text("body") {
        Some(b) => Bytes::from(b.to_owned()),
        None => bytes,
    };
    let headers = rewrite.get("headers").and_then(Value::as_object);
    if let Some(code) = rewrite.get("code").and_then(Value::as_u64) {
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() =
            StatusCode::from_u16(code as u16).map_err(|_| rewrite_error("bad code"))?;
        for (name, value) in headers.into_iter().flatten() {
            if let Some((n, v)) = header(name, value.as_str().unwrap_or_default()) {
                resp.headers_mut().insert(n, v);
            }
        }
        return Ok(resp);
    }
    let Some(path) = text("path") else {
        return Err(rewrite_error("Rewrite result must produce a new path."));
    };
    let query: Vec<(String, String)> = match rewrite.get("query").and_then(Value::as_object) {
        Some(q) => q
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect(),
        None => query_pairs(&req),
    };
    let qs: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{}={}", rewrite::quote_plus(k), rewrite::quote_plus(v)))
        .collect();
    let target = match qs.is_empty() {
        true => path.to_owned(),
        false => format!("{path}?{}", qs.join("&")),
    };
    let location = rewrite::resolve(&encode(&db.name), &encode(name), &target);
    let method = match text("method") {
        Some(m) => Method::from_bytes(m.as_bytes()).map_err(|_| rewrite_error("bad method"))?,
        None => req.method.clone(),
    };
    let mut all = std::mem::take(&mut req.headers);
    for (name, value) in headers.into_iter().flatten() {
        if let Some((n, v)) = header(name, value.as_str().unwrap_or_default()) {
            all.insert(n, v);
        }
    }
    forward(method, &location, all, Body::from(body))
}

/// CouchDB's checks of a rewrite function's answer (`validate_rewrite_response`).
fn check_answer(rewrite: &serde_json::Map<String, Value>) -> ApiResult<()> {
    for (key, value) in rewrite {
        let ok = match key.as_str() {
            "method" | "path" | "body" => value.is_string(),
            "headers" | "query" => {
                let Some(members) = value.as_object() else {
                    return Err(rewrite_error(&format!("bad {key}")));
                };
                if let Some((k, v)) = members.iter().find(|(_, v)| !v.is_string()) {
                    return Err(rewrite_error(&format!(
                        "object key/value must be strings {k}={v}"
                    )));
                }
                true
            }
            "code" => value.as_u64().is_some_and(|c| (200..600).contains(&c)),
            _ => true,
        };
        if !ok {
            return Err(rewrite_error(&format!("bad {key}")));
        }
    }
    Ok(())
}

fn rewrite_error(reason: &str) -> ApiError {
    ApiError::Named(
        StatusCode::INTERNAL_SERVER_ERROR,
        "rewrite_error".into(),
        reason.into(),
    )
}

fn header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    Some((
        HeaderName::from_bytes(name.as_bytes()).ok()?,
        HeaderValue::from_str(value).ok()?,
    ))
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
