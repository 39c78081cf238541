//! Views: `_design/{ddoc}/_view/{view}` (GET/POST, `/queries`), `_design/{ddoc}/_info`,
//! `_compact/{ddoc}`, `_view_cleanup` and `_temp_view`. Rows stream.

use super::{allow, blocking, query_results};
use crate::error::{ApiError, ApiResult};
use crate::mrargs::MrArgs;
use crate::reply::{json, json_bytes, ok_true, stream, JSON};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_db::Database;
use settee_node::render::DesignDoc;
use settee_node::views::{run, ViewArgs};
use settee_node::Fabric;
use std::ops::ControlFlow;
use std::sync::Arc;

/// The method check of a path below `_design/{ddoc}/`: CouchDB opens the design document
/// first, so a missing one is a 404 whatever the method.
pub async fn allow_in_ddoc(
    db: &Arc<Database>,
    ddoc: &str,
    req: &Req,
    methods: &'static str,
) -> ApiResult<()> {
    let refused = allow(&req.method, methods);
    if refused.is_err() {
        let (db, ddoc) = (db.clone(), ddoc.to_string());
        blocking(move || Ok(DesignDoc::open(&db, &ddoc).map(drop)?)).await?;
    }
    refused
}

pub async fn view(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    view: String,
    mut req: Req,
) -> ApiResult<Response> {
    allow_in_ddoc(&db, &ddoc, &req, "GET,POST,HEAD").await?;
    settee_metrics::global().view_reads.inc();
    let args = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = req.bytes().await?;
        crate::req::args_of_body(&req, &body)?
    } else {
        MrArgs::from_query(&req.params)?
    };
    let (node, user) = (state.node.clone(), req.user.clone());
    Ok(stream(JSON, move |sink| {
        let out = &mut |b: &[u8]| sink.write(b);
        Ok(Fabric::query_view(
            &node, &db.name, &user, &ddoc, &view, args, out,
        )?)
    })
    .await)
}

pub async fn view_queries(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    view: String,
    mut req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    settee_metrics::global().view_reads.inc();
    let body = crate::req::body_object(req.json().await?)?;
    let list = crate::req::queries_member(&body)?
        .ok_or_else(|| ApiError::bad_request("POST body must include `queries` parameter."))?;
    let base = MrArgs::from_query(&req.params)?;
    let views = state.views.clone();
    let reader = settee_node::replicator_read::reader(&db, &req.user);
    let out = blocking(move || {
        let (g, n) = state.view_group(&db, &ddoc, &view)?;
        let args = list
            .iter()
            .map(|q| {
                let q = q
                    .as_object()
                    .ok_or_else(|| ApiError::bad_request("Each query must be a JSON object"))?;
                let a = ViewArgs::for_view(base.for_query_object(q)?, &g, n, &state.config)?;
                Ok(ViewArgs {
                    reader: reader.clone(),
                    ..a
                })
            })
            .collect::<ApiResult<Vec<_>>>()?;
        query_results(&args, |a, out| Ok(run(&views, &db, &g, n, a, out)?))
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}

pub async fn design_info(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow_in_ddoc(&db, &ddoc, &req, "GET").await?;
    let body = blocking(move || {
        let g = state.ddoc_group(&db, &ddoc)?;
        let info = state.views.info(&db, &g).map_err(ApiError::from)?;
        let pending = db.update_seq().saturating_sub(info.update_seq);
        // CouchDB's member order (`couch_mrview:get_info` as chttpd renders it).
        Ok(json!({
            "name": ddoc,
            "view_index": {
                "updates_pending": {"minimum": pending, "preferred": pending, "total": pending},
                "waiting_commit": false,
                "waiting_clients": 0,
                "updater_running": info.updater_running,
                "update_seq": info.update_seq,
                "sizes": {
                    "file": info.file_bytes,
                    "external": info.external_bytes,
                    "active": info.active_bytes,
                },
                "signature": info.signature,
                "purge_seq": info.purge_seq,
                "language": info.language,
                "compact_running": info.compact_running,
                "collator_versions": [settee_core::collate::collator_version()],
            }
        }))
    })
    .await?;
    Ok(json(StatusCode::OK, &body))
}

pub async fn compact_design(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let g = {
        let (state, db) = (state.clone(), db.clone());
        blocking(move || Ok(state.ddoc_group(&db, &ddoc)?)).await?
    };
    state.views.compact_later(db, g);
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// Removes indexes no design document uses any more.
pub async fn view_cleanup(state: AppState, db: Arc<Database>, req: Req) -> ApiResult<Response> {
    // chttpd_db's handle_view_cleanup_req checks no content type.
    allow(&req.method, "POST")?;
    blocking(move || {
        let mut keep = Vec::new();
        let mut bad = None;
        db.scan_docs(b"_design/", Some(b"_design0"), false, true, |row| {
            let group = row
                .body
                .as_deref()
                .and_then(|b| {
                    serde_json::from_slice::<Map<String, Value>>(settee_core::split_stored(b).0)
                        .ok()
                })
                .map(|body| state.views.group(&db, &row.id, &body));
            match group {
                Some(Ok(g)) => keep.push(g.sig),
                Some(Err(e)) => bad = Some(e),
                None => {}
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = bad {
            tracing::debug!(error = %e, "design document without valid views during cleanup");
        }
        state.views.cleanup(&db, &keep).map_err(ApiError::from)?;
        Ok(())
    })
    .await?;
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// `/{db}/_temp_view`: CouchDB 3 has no temporary views and answers `410 gone` to any
/// method.
pub async fn temp_view(_req: Req) -> ApiResult<Response> {
    Err(ApiError::Gone(
        "Temporary views are not supported in CouchDB".into(),
    ))
}
