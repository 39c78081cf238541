//! Mango over HTTP: `POST /{db}/_find` and `_explain`, `/{db}/_index` (list, create,
//! delete, bulk delete). The meaning of selectors and options and the choice of index are
//! `settee_mango`'s; this module reads the rows the plan names (from `_all_docs` or a json
//! index's view) and renders CouchDB's answers.

use super::{allow, blocking};
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, stream, JSON};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_mango::index::Index;
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_node::fabric::DbRef;
use settee_node::Fabric;

/// The body of a Mango POST: JSON content, a JSON object.
async fn object_body(req: &mut Req) -> ApiResult<Map<String, Value>> {
    require_json(&req.headers)?;
    match req.json().await? {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("Request body must be a JSON object")),
    }
}

/// `POST /{db}/_find` (or `_explain` when `explain`); `partition` is the one of
/// `/{db}/_partition/{p}/_find`, which takes the place of the body's.
pub async fn find(
    state: AppState,
    db: DbRef,
    mut req: Req,
    explain: bool,
    partition: Option<String>,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    let mut body = object_body(&mut req).await?;
    let given = given_indexes(&db, explain, &mut body)?;
    let default_limit = state.config.get_u64("mango", "default_limit", 25);
    let mut opts = FindOpts::parse(&body, default_limit)?;
    if let Some(p) = partition {
        opts.partition = p;
    }
    if let Some(designs) = given {
        let (node, db, user) = (state.node.clone(), db.engine("_find")?.clone(), req.user);
        return Ok(stream(JSON, move |sink| {
            let out = &mut |b: &[u8]| sink.write(b);
            Ok(node.find_given(&db, &user, &opts, &designs, out)?)
        })
        .await);
    }
    if explain {
        let node = state.fabric.clone();
        let explained = blocking(move || Ok(Fabric::explain(&*node, &db.name, &opts)?)).await?;
        return Ok(json(StatusCode::OK, &explained));
    }
    let (node, user) = (state.fabric.clone(), req.user.clone());
    Ok(stream(JSON, move |sink| {
        let out = &mut |b: &[u8]| sink.write(b);
        Ok(Fabric::find(&*node, &db.name, &user, &opts, out)?)
    })
    .await)
}

/// On a shard copy, the index design documents a coordinator gives a `_find` in the
/// body's `settee_indexes` (taken out of the body; see `Node::find_given`). Any other
/// database, and `_explain`, leave that member to the options, which refuse it as any
/// unknown one.
fn given_indexes(
    db: &DbRef,
    explain: bool,
    body: &mut Map<String, Value>,
) -> ApiResult<Option<Vec<Value>>> {
    if explain || !settee_core::is_shard_name(&db.name) {
        return Ok(None);
    }
    match body.shift_remove(settee_node::find::GIVEN_INDEXES) {
        None => Ok(None),
        Some(Value::Array(designs)) => Ok(Some(designs)),
        Some(_) => Err(ApiError::bad_request("Given indexes must be an array.")),
    }
}

/// `/{db}/_index[/…]`; `rest` is the path after `_index`.
pub async fn index(
    state: AppState,
    db: DbRef,
    rest: Vec<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    let node = &*state.fabric;
    match rest.as_slice() {
        [] => match req.method.as_str() {
            "GET" | "HEAD" => list(&state, db, &req).await,
            "POST" => {
                let opts = IndexOpts::parse(&object_body(&mut req).await?)?;
                let c = Fabric::create_index(node, &db.name, &req.user, opts).await?;
                let result = if c.created { "created" } else { "exists" };
                let body = json!({"result": result, "id": c.id, "name": c.name});
                Ok(json(StatusCode::OK, &body))
            }
            _ => Err(ApiError::MethodNotAllowed("GET,POST")),
        },
        ["_bulk_delete"] => {
            allow(&req.method, "POST")?;
            let ids = settee_mango::opts::bulk_delete_ids(&object_body(&mut req).await?)?;
            let done = Fabric::bulk_delete_indexes(node, &db.name, &req.user, ids).await?;
            let success: Vec<Value> = (done.success.iter())
                .map(|id| json!({"id": id, "ok": true}))
                .collect();
            let fail: Vec<Value> = (done.fail.iter())
                .map(|id| json!({"id": id, "error": "not_found"}))
                .collect();
            let body = json!({"success": success, "fail": fail});
            Ok(json(StatusCode::OK, &body))
        }
        ["_design", ddoc, kind, name] | [ddoc, kind, name] => {
            allow(&req.method, "DELETE")?;
            let (user, name) = (&req.user, Some(*name));
            if *kind == "json" && Fabric::delete_index(node, &db.name, user, ddoc, name).await? {
                Ok(crate::reply::ok_true(StatusCode::OK))
            } else {
                Err(ApiError::NotFound("missing".into()))
            }
        }
        _ => Err(ApiError::NotFound("missing".into())),
    }
}

/// `GET /{db}/_index`.
async fn list(state: &AppState, db: DbRef, req: &Req) -> ApiResult<Response> {
    let int = |k: &str| -> ApiResult<Option<i64>> {
        req.params
            .get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| settee_mango::Error::InvalidListIndexParams.into())
            })
            .transpose()
    };
    let (limit, skip) = (int("limit")?, int("skip")?);
    if limit.is_some_and(|l| l < 1) || skip.is_some_and(|s| s < 0) {
        return Err(settee_mango::Error::InvalidListIndexParams.into());
    }
    let node = state.fabric.clone();
    let all = blocking(move || Ok(Fabric::indexes(&*node, &db.name)?)).await?;
    let total = all.len();
    let page: Vec<Value> = all
        .iter()
        .skip(skip.unwrap_or(0) as usize)
        .take(limit.map_or(usize::MAX, |l| l as usize))
        .map(Index::to_json)
        .collect();
    Ok(json(
        StatusCode::OK,
        &json!({"total_rows": total, "indexes": page}),
    ))
}
