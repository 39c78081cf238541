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
use settee_node::fabric::DbRef;
use settee_node::render::DesignDoc;
use settee_node::Fabric;

/// The method check of a path below `_design/{ddoc}/`: CouchDB opens the design document
/// first, so a missing one is a 404 whatever the method.
pub async fn allow_in_ddoc(
    db: &DbRef,
    ddoc: &str,
    req: &Req,
    methods: &'static str,
) -> ApiResult<()> {
    let db = db.engine("views")?.clone();
    let refused = allow(&req.method, methods);
    if refused.is_err() {
        let (db, ddoc) = (db.clone(), ddoc.to_string());
        blocking(move || Ok(DesignDoc::open(&db, &ddoc).map(drop)?)).await?;
    }
    refused
}

pub async fn view(
    state: AppState,
    db: DbRef,
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
    let (node, user) = (state.fabric.clone(), req.user.clone());
    Ok(stream(JSON, move |sink| {
        let out = &mut |b: &[u8]| sink.write(b);
        Ok(Fabric::query_view(
            &*node, &db.name, &user, &ddoc, &view, args, out,
        )?)
    })
    .await)
}

pub async fn view_queries(
    state: AppState,
    db: DbRef,
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
    let out = blocking(move || {
        let mut bodies = vec![Vec::new(); list.len()];
        let (node, user) = (&*state.fabric, &req.user);
        Fabric::view_queries(
            node,
            &db.name,
            user,
            &ddoc,
            &view,
            base,
            &list,
            &mut |i, b| {
                bodies[i].extend_from_slice(b);
                true
            },
        )?;
        query_results(&bodies, |body, out| {
            out(body);
            Ok(())
        })
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}

pub async fn design_info(
    state: AppState,
    db: DbRef,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow_in_ddoc(&db, &ddoc, &req, "GET").await?;
    let body = blocking(move || Ok(Fabric::design_info(&*state.fabric, &db.name, &ddoc)?)).await?;
    Ok(json(StatusCode::OK, &body))
}

pub async fn compact_design(
    state: AppState,
    db: DbRef,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    blocking(move || Ok(Fabric::compact_design(&*state.fabric, &db.name, &ddoc)?)).await?;
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// Removes indexes no design document uses any more.
pub async fn view_cleanup(state: AppState, db: DbRef, req: Req) -> ApiResult<Response> {
    // chttpd_db's handle_view_cleanup_req checks no content type.
    allow(&req.method, "POST")?;
    blocking(move || Ok(Fabric::view_cleanup(&*state.fabric, &db.name)?)).await?;
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// `/{db}/_temp_view`: CouchDB 3 has no temporary views and answers `410 gone` to any
/// method.
pub async fn temp_view(_req: Req) -> ApiResult<Response> {
    Err(ApiError::Gone(
        "Temporary views are not supported in CouchDB".into(),
    ))
}
