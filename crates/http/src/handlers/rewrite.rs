//! `ANY /{db}/_design/{ddoc}/_rewrite/{path…}`: the design document's `rewrites` turn the
//! request into another one of this server (CouchDB 3.5's `chttpd_rewrite`, deprecated
//! there but served). What the rules or the rewrite function make of the request is the
//! node's ([`settee_node::rewrite`]); a function's own response is sent from here.
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
use settee_node::fabric::DbRef;
use settee_node::render::{DesignDoc, FnDb};
use settee_node::rewrite::{Failure, Rewrite, Rewrites};
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
    db: DbRef,
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
    // A clustered database's design document is read through its coordinator.
    let local = db.engine("_rewrite").ok().cloned();
    let rewrites = {
        let (node, fabric, local) = (state.node.clone(), state.fabric.clone(), local.clone());
        let (name, ddoc, user) = (db.name.clone(), ddoc.clone(), req.user.clone());
        super::blocking(move || {
            Ok(match &local {
                Some(local) => node.rewrites(local, &ddoc)?,
                None => Rewrites::of(DesignDoc::open_via(&*fabric, &name, &user, &ddoc)?)?,
            })
        })
        .await?
    };
    let query: Vec<(String, String)> = (req.params.pairs())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (design, body) = match rewrites {
        Rewrites::Rules(rules) => {
            let (db, method) = (&db.name, req.method.as_str());
            let location =
                (state.node).rewrite_by_rules((db, &ddoc), &rules, method, &path, &query)?;
            let (method, headers) = (req.method.clone(), std::mem::take(&mut req.headers));
            return forward(method, &location, headers, req.take_body());
        }
        Rewrites::Function { design, body } => (design, body),
    };
    let bytes = req.bytes().await?;
    let info = crate::req_info::for_render(&req, &bytes, None);
    let rewrite = {
        let (node, fabric, name) = (state.node.clone(), state.fabric.clone(), db.name.clone());
        super::blocking(move || {
            let db = match &local {
                Some(local) => FnDb::local(&node, local),
                None => FnDb::via(fabric, &name)?,
            };
            let obj = info.render_json_for(&node, &db)?;
            Ok(node.rewrite_by_function_in(&db, &ddoc, (&design, &body), obj, &query)?)
        })
        .await?
    };
    let bad =
        |what: &str| ApiError::from(settee_node::Error::Rewrite(Failure::BadAnswer(what.into())));
    let body_or = |body: Option<String>| body.map_or(bytes.clone(), Bytes::from);
    match rewrite {
        Rewrite::Respond {
            code,
            headers,
            body,
        } => {
            let mut resp = Response::new(Body::from(body_or(body)));
            *resp.status_mut() = StatusCode::from_u16(code).map_err(|_| bad("bad code"))?;
            for (n, v) in headers.iter().filter_map(|(n, v)| header(n, v)) {
                resp.headers_mut().insert(n, v);
            }
            Ok(resp)
        }
        Rewrite::Route {
            method,
            location,
            headers,
            body,
        } => {
            let method = match method {
                Some(m) => Method::from_bytes(m.as_bytes()).map_err(|_| bad("bad method"))?,
                None => req.method.clone(),
            };
            let mut all = std::mem::take(&mut req.headers);
            for (n, v) in headers.iter().filter_map(|(n, v)| header(n, v)) {
                all.insert(n, v);
            }
            forward(method, &location, all, Body::from(body_or(body)))
        }
    }
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
