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
use settee_node::Fabric;

/// The method check of a path below `_design/{ddoc}/`: CouchDB opens the design document
/// first, so a missing one is a 404 whatever the method.
pub async fn allow_in_ddoc(
    state: &AppState,
    db: &DbRef,
    ddoc: &str,
    req: &Req,
    methods: &'static str,
) -> ApiResult<()> {
    let refused = allow(&req.method, methods);
    if refused.is_err() {
        let (fabric, db, user) = (state.fabric.clone(), db.name.clone(), req.user.clone());
        let id = format!("_design/{ddoc}");
        blocking(move || {
            let opts = settee_node::read::ReadOpts::default();
            Ok(Fabric::open_doc(&*fabric, &db, &user, &id, &opts).map(drop)?)
        })
        .await?;
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
    allow_in_ddoc(&state, &db, &ddoc, &req, "GET,POST,HEAD").await?;
    settee_metrics::global().view_reads.inc();
    let mut given = None;
    let args = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = req.bytes().await?;
        let (args, design) = given_design(&db, &req, &body)?;
        given = design;
        args
    } else {
        MrArgs::from_query(&req.params)?
    };
    let user = req.user.clone();
    if let Some(Given { design, partials }) = given {
        let (node, db) = (state.node.clone(), db.engine("views")?.clone());
        return Ok(stream(JSON, move |sink| {
            let out = &mut |b: &[u8]| sink.write(b);
            Ok(node.query_given_view(&db, &user, &ddoc, &design, &view, args, partials, out)?)
        })
        .await);
    }
    let node = state.fabric.clone();
    Ok(stream(JSON, move |sink| {
        let out = &mut |b: &[u8]| sink.write(b);
        Ok(Fabric::query_view(
            &*node, &db.name, &user, &ddoc, &view, args, out,
        )?)
    })
    .await)
}

/// What a coordinator gives a shard copy with a view query (see `Node::query_given_view`).
struct Given {
    design: serde_json::Map<String, serde_json::Value>,
    /// Reductions as partial results (`settee_partials`).
    partials: bool,
}

/// A view POST's arguments and, on a shard copy, the design document its coordinator
/// gives in the body's `settee_design` (see `Node::query_given_view`), with whether it
/// asks for partial reductions (`settee_partials`); any other database ignores those
/// members, as it ignores every unknown one.
fn given_design(db: &DbRef, req: &Req, body: &[u8]) -> ApiResult<(MrArgs, Option<Given>)> {
    use settee_node::views::{GIVEN_DESIGN, GIVEN_PARTIALS};
    if !settee_core::is_shard_name(&db.name) {
        return Ok((crate::req::args_of_body(req, body)?, None));
    }
    let mut object = crate::req::body_object(crate::req::parse_json(body)?)?;
    let partials = match object.shift_remove(GIVEN_PARTIALS) {
        None => false,
        Some(serde_json::Value::Bool(on)) => on,
        Some(_) => return Err(ApiError::bad_request("settee_partials must be a boolean.")),
    };
    let given = match object.shift_remove(GIVEN_DESIGN) {
        None if partials => {
            return Err(ApiError::bad_request(
                "settee_partials is given only with settee_design.",
            ))
        }
        None => None,
        Some(serde_json::Value::Object(design)) => Some(Given { design, partials }),
        Some(_) => return Err(ApiError::bad_request("A given design must be an object.")),
    };
    let rest = serde_json::Value::Object(object).to_string();
    Ok((crate::req::args_of_body(req, rest.as_bytes())?, given))
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
    mut req: Req,
) -> ApiResult<Response> {
    // A shard copy is given the design document by its coordinator (POST).
    if req.method == "POST" && settee_core::is_shard_name(&db.name) {
        let body = crate::req::body_object(req.json().await?)?;
        let Some(serde_json::Value::Object(design)) = body.get(settee_node::views::GIVEN_DESIGN)
        else {
            return Err(ApiError::bad_request("A given design must be an object."));
        };
        let (node, engine, design) = (
            state.node.clone(),
            db.engine("views")?.clone(),
            design.clone(),
        );
        let body = blocking(move || Ok(node.design_info_given(&engine, &ddoc, &design)?)).await?;
        return Ok(json(StatusCode::OK, &body));
    }
    allow_in_ddoc(&state, &db, &ddoc, &req, "GET").await?;
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
