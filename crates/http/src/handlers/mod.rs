//! Handlers by resource. Each parses its request, makes one call into the store, renders.

pub mod all_docs;
pub mod attachments;
pub mod bulk;
pub mod changes;
pub mod cluster_moves;
pub mod cluster_setup;
pub mod database;
pub mod design_fns;
pub mod doc;
pub mod mango;
pub mod node;
pub mod partition;
pub mod replicate;
pub mod reshard;
pub mod rewrite;
pub mod scheduler;
pub mod server;
pub mod unavailable;
pub mod utils;
pub mod views;

use crate::error::{ApiError, ApiResult};
use crate::location::doc_location;
use crate::reply::{accepted, write_response};
use crate::{AppState, Req};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_node::fabric::DbRef;
use settee_node::Fabric;

/// `Ok(())` if `method` is one of `allowed`; else CouchDB's 405 with an `Allow` header.
pub fn allow(method: &Method, allowed: &'static str) -> ApiResult<()> {
    let m = method.as_str();
    let head_ok = m == "HEAD" && allowed.split(',').any(|a| a == "GET");
    if head_ok || allowed.split(',').any(|a| a == m) {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed(allowed))
    }
}

/// Runs blocking store work off the async runtime ([`settee_node::blocking`] in the
/// handlers' error type).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    settee_node::blocking(f).await
}

/// The `{"results":[…]}` body of a multi-query request: `run` writes each query's whole
/// response object (its trailing newline is dropped).
pub fn query_results<Q>(
    queries: &[Q],
    mut run: impl FnMut(&Q, &mut dyn FnMut(&[u8]) -> bool) -> ApiResult<()>,
) -> ApiResult<Vec<u8>> {
    let mut out = b"{\"results\":[".to_vec();
    for (i, q) in queries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut one = Vec::new();
        run(q, &mut |b| {
            one.extend_from_slice(b);
            true
        })?;
        while one.last().is_some_and(|b| b.is_ascii_whitespace()) {
            one.pop();
        }
        out.extend_from_slice(&one);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Writes a local document from a request body (`PUT`, or `POST /{db}` with a `_local/`
/// id): 201 with revision `0-N+1` for the `0-N` given (`0-1` without one), whatever is
/// stored; a body with `_deleted: true` removes it (200, `0-0`).
pub async fn put_local(
    state: &AppState,
    db: DbRef,
    id: String,
    body: Value,
    req: &Req,
    batch: bool,
) -> ApiResult<Response> {
    let (mut update, body_rev) = settee_node::write::local_update(&id, body)?;
    update.rev = crate::req::local_rev(req, body_rev.as_ref())?;
    let (deleted, etag_body) = (update.deleted, update.body.clone());
    let Some(n) = Fabric::put_local(&*state.fabric, &db.name, update, batch).await? else {
        return Ok(accepted(&id));
    };
    // Local documents have one copy: a `w` above one is not met (202), as in CouchDB.
    let status = if deleted {
        StatusCode::OK
    } else if settee_node::write::short_of(crate::req::write_quorum(req), 1) {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CREATED
    };
    let location = doc_location(&state.config, req, &db.name, &id);
    Ok(write_response(
        status,
        &id,
        &format!("0-{n}"),
        Some(crate::reply::local_etag(n, &etag_body)),
        location,
    ))
}
