//! Database endpoints: create, info, delete, `POST /db`, `_compact`, `_revs_limit`,
//! `_purged_infos_limit`, `_security`, `_ensure_full_commit`, `_view_cleanup`.

use super::{allow, blocking};
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, ok_true};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use settee_node::dbs::CreateDb;
use settee_node::fabric::DbRef;
use settee_node::write::WriteOpts;
use settee_node::Fabric;

/// `GET /{db}/_shards` and `/{db}/_shards/{docid}` (`mem3_httpd`).
pub fn shards(state: &AppState, db: &DbRef, id: Option<&str>, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET")?;
    Ok(json(
        StatusCode::OK,
        &Fabric::shards(&*state.fabric, &db.name, id)?,
    ))
}

/// `POST /{db}/_sync_shards`: CouchDB starts internal replication between a range's
/// copies; one node holds one copy, so there is nothing to do but accept.
pub fn sync_shards(req: &Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// `?n=`, `?q=` and `?placement=` on creation, checked in CouchDB's order
/// (`chttpd_db:parse_shards_opt`); the `q` and `n` to keep. One node holds one copy in one zone, so
/// `n` and a well-formed `placement` change nothing on a single node, as on a single
/// CouchDB node; a cluster's coordinator plans the copies by them.
fn shards_params(req: &Req) -> ApiResult<(Option<u32>, Option<u32>)> {
    let positive = |v: &str| v.parse::<u32>().ok().filter(|n| *n > 0);
    for k in ["n", "q"] {
        if let Some(v) = req.params.get(k) {
            if positive(v).is_none() {
                return Err(ApiError::bad_request(format!(
                    "The `{k}` value should be a positive integer."
                )));
            }
        }
    }
    if let Some(p) = req.params.get("placement") {
        let well_formed = !p.is_empty()
            && p.split(',').filter(|r| !r.is_empty()).all(|rule| {
                let parts: Vec<&str> = rule.split(':').filter(|s| !s.is_empty()).collect();
                matches!(parts.as_slice(), [_, n] if positive(n).is_some())
            });
        if !well_formed {
            return Err(ApiError::bad_request(
                "The `placement` value should be in a format `zone:n`.",
            ));
        }
    }
    let param = |k| req.params.get(k).and_then(positive);
    Ok((param("q"), param("n")))
}

/// `?partitioned=` on creation (`chttpd_db:parse_partitioned_opt`).
fn partitioned_param(req: &Req) -> ApiResult<bool> {
    match req.params.get("partitioned") {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::bad_request("Invalid `partitioned` parameter")),
    }
}

pub async fn db(state: &AppState, name: &str, mut req: Req) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => {
            let (node, name) = (state.fabric.clone(), name.to_string());
            let started = std::time::Instant::now();
            let v = blocking(move || Ok(Fabric::db_info(&*node, &name)?)).await?;
            settee_metrics::global()
                .dbinfo
                .record(started.elapsed().as_secs_f64() * 1000.0);
            Ok(json(StatusCode::OK, &v))
        }
        "PUT" => {
            let (q, n) = shards_params(&req)?;
            let opts = CreateDb {
                q,
                n,
                placement: req.params.get("placement").map(str::to_owned),
                partitioned: partitioned_param(&req)?,
            };
            let (node, name2) = (state.fabric.clone(), name.to_string());
            let reached = blocking(move || Ok(Fabric::create_db(&*node, &name2, opts)?)).await?;
            let mut resp = ok_true(reached_status(reached, StatusCode::CREATED));
            let path = format!("/{}", crate::location::url_encode(name));
            if let Some(loc) = crate::location::absolute_uri(&state.config, &req, &path) {
                resp.headers_mut().insert("location", loc);
            }
            Ok(resp)
        }
        "DELETE" => {
            if req.params.get("rev").is_some() {
                return Err(ApiError::bad_request(
                    "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?",
                ));
            }
            let (node, name2) = (state.fabric.clone(), name.to_string());
            let reached = blocking(move || Ok(Fabric::delete_db(&*node, &name2)?)).await?;
            Ok(ok_true(reached_status(reached, StatusCode::OK)))
        }
        "POST" => {
            let db = state.fabric.open_db(name)?;
            require_json(&req.headers)?;
            let body = req.json().await?;
            let batch = crate::req::batch_ok(&req)?;
            if let Some(local) = body
                .get("_id")
                .and_then(Value::as_str)
                .filter(|i| i.starts_with("_local/"))
            {
                let local = local.to_string();
                return super::put_local(state, db, local, body, &req, batch).await;
            }
            let mut parsed = settee_core::parse_doc(body)?;
            let id = match parsed.id.take() {
                Some(id) => id,
                // A new id makes a new document: CouchDB drops any `_rev` sent with it.
                None => {
                    parsed.revs = None;
                    state.next_uuid()?
                }
            };
            settee_core::validate_doc_id(&id)?;
            parsed.id = Some(id.clone());
            let opts = WriteOpts {
                batch,
                w: crate::req::write_quorum(&req),
                ..WriteOpts::default()
            };
            let written = Fabric::update_doc(&*state.fabric, name, &req.user, parsed, opts).await?;
            if batch {
                return Ok(crate::reply::accepted(&id));
            }
            let rev = written
                .rev
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_default();
            // CouchDB's answer to a POST has a Location but no ETag.
            let location = crate::location::doc_location(&state.config, &req, name, &id);
            Ok(crate::reply::write_response(
                crate::reply::written_status(&written, StatusCode::CREATED),
                &id,
                &rev,
                None,
                location,
            ))
        }
        // CouchDB opens the database first: a missing one is a 404 whatever the method.
        _ => {
            state.fabric.open_db(name)?;
            Err(ApiError::MethodNotAllowed("DELETE,GET,HEAD,POST"))
        }
    }
}

pub fn compact(state: &AppState, db: DbRef, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    Fabric::compact_db(&*state.fabric, &db.name)?;
    Ok(ok_true(StatusCode::ACCEPTED))
}

pub fn ensure_full_commit(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    state.ensure_full_commit()?;
    Ok(json(
        StatusCode::CREATED,
        &json!({"ok": true, "instance_start_time": "0"}),
    ))
}

pub use settee_node::dbs::Limit;

pub async fn revs_limit(
    state: &AppState,
    db: DbRef,
    mut req: Req,
    which: Limit,
) -> ApiResult<Response> {
    allow(&req.method, "PUT,GET")?;
    if req.method == "PUT" {
        let v = req.json().await?;
        // CouchDB checks `purged_infos_limit`; a revs limit that is not a positive
        // integer crashes its `fabric:set_revs_limit` guard (a 500 `function_clause`).
        let n = v.as_u64().filter(|n| *n > 0).ok_or_else(|| match which {
            Limit::Revs => ApiError::Crash {
                error: "unknown_error".into(),
                reason: "function_clause".into(),
                stack_hash: 1_466_242_573,
            },
            Limit::PurgedInfos => {
                ApiError::bad_request("`purged_infos_limit` must be positive integer")
            }
        })?;
        let node = state.fabric.clone();
        blocking(move || Ok(Fabric::set_limit(&*node, &db.name, which, n)?)).await?;
        return Ok(ok_true(StatusCode::OK));
    }
    let limit = Fabric::get_limit(&*state.fabric, &db.name, which)?;
    Ok(json(StatusCode::OK, &json!(limit)))
}

pub async fn security(state: &AppState, db: DbRef, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "PUT,GET")?;
    if req.method == "PUT" {
        let v = req.json().await?;
        let (node, name) = (state.fabric.clone(), db.name.clone());
        blocking(move || Ok(Fabric::set_security(&*node, &name, v)?)).await?;
        return Ok(ok_true(StatusCode::OK));
    }
    let node = state.fabric.clone();
    let security = blocking(move || Ok(node.get_security(&db.name)?)).await?;
    Ok(json(StatusCode::OK, &security))
}

/// `done` when a database change reached every copy, else CouchDB's 202.
fn reached_status(reached: settee_node::fabric::Reached, done: StatusCode) -> StatusCode {
    match reached {
        settee_node::fabric::Reached::All => done,
        settee_node::fabric::Reached::Some => StatusCode::ACCEPTED,
    }
}
