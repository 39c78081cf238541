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
use settee_core::split_stored;
use settee_db::Database;
use settee_mango::index::{self, Index};
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_node::{find, Fabric};
use std::sync::Arc;

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
    db: Arc<Database>,
    mut req: Req,
    explain: bool,
    partition: Option<String>,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    let body = object_body(&mut req).await?;
    let default_limit = state.config.get_u64("mango", "default_limit", 25);
    let mut opts = FindOpts::parse(&body, default_limit)?;
    if let Some(p) = partition {
        opts.partition = p;
    }
    if explain {
        let (node, d) = (state.node.clone(), db.clone());
        let explained = blocking(move || {
            let plan = node.plan_find(&d, &opts, true)?;
            Ok(find::explain(&d, &opts, &plan))
        })
        .await?;
        return Ok(json(StatusCode::OK, &explained));
    }
    let (node, user) = (state.node.clone(), req.user.clone());
    Ok(stream(JSON, move |sink| {
        let out = &mut |b: &[u8]| sink.write(b);
        Ok(Fabric::find(&node, &db.name, &user, &opts, out)?)
    })
    .await)
}

/// `/{db}/_index[/…]`; `rest` is the path after `_index`.
pub async fn index(
    state: AppState,
    db: Arc<Database>,
    rest: Vec<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match rest.as_slice() {
        [] => match req.method.as_str() {
            "GET" | "HEAD" => list(db, &req).await,
            "POST" => create(&state, db, &mut req).await,
            _ => Err(ApiError::MethodNotAllowed("GET,POST")),
        },
        ["_bulk_delete"] => {
            allow(&req.method, "POST")?;
            let body = object_body(&mut req).await?;
            let ids = settee_mango::opts::bulk_delete_ids(&body)?;
            let (mut success, mut fail) = (Vec::new(), Vec::new());
            for id in ids {
                let ddoc = index::ddoc_id(&id);
                if delete_indexes(&state, &db, &req, &ddoc, None).await? {
                    success.push(json!({"id": ddoc, "ok": true}));
                } else {
                    fail.push(json!({"id": ddoc, "error": "not_found"}));
                }
            }
            success.reverse();
            fail.reverse();
            Ok(json(
                StatusCode::OK,
                &json!({"success": success, "fail": fail}),
            ))
        }
        ["_design", ddoc, kind, name] | [ddoc, kind, name] => {
            allow(&req.method, "DELETE")?;
            let ddoc = index::ddoc_id(ddoc);
            let (kind, name) = (kind.to_string(), name.to_string());
            if kind == "json" && delete_indexes(&state, &db, &req, &ddoc, Some(&name)).await? {
                Ok(crate::reply::ok_true(StatusCode::OK))
            } else {
                Err(ApiError::NotFound("missing".into()))
            }
        }
        _ => Err(ApiError::NotFound("missing".into())),
    }
}

/// `GET /{db}/_index`.
async fn list(db: Arc<Database>, req: &Req) -> ApiResult<Response> {
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
    let all = blocking(move || Ok(find::indexes(&db)?)).await?;
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

/// The body of design document `id` (without `_id`/`_rev`) and its revision, if it exists.
fn ddoc_body(db: &Database, id: &str) -> ApiResult<Option<(Map<String, Value>, String)>> {
    match db.open_doc(id, None) {
        Ok(d) if !d.deleted => {
            let body = serde_json::from_slice(split_stored(&d.body).0)
                .map_err(|_| ApiError::Db(settee_db::Error::Internal("stored body".into())))?;
            Ok(Some((body, d.rev.to_string())))
        }
        Ok(_) | Err(settee_db::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes a design document through the normal write path (so only database admins can,
/// and validation functions run); CouchDB words a failed save its own way.
async fn save_ddoc(
    state: &AppState,
    db: &Arc<Database>,
    req: &Req,
    id: &str,
    rev: Option<&str>,
    body: Option<Map<String, Value>>,
) -> ApiResult<()> {
    let mut doc = body.unwrap_or_default();
    let deleted = doc.is_empty();
    doc.insert("_id".into(), json!(id));
    if let Some(rev) = rev {
        doc.insert("_rev".into(), json!(rev));
    }
    if deleted {
        doc = [
            ("_id".into(), json!(id)),
            ("_rev".into(), json!(rev)),
            ("_deleted".into(), json!(true)),
        ]
        .into_iter()
        .collect();
    }
    let parsed = settee_core::parse_doc(Value::Object(doc))?;
    match Fabric::update_doc(&state.node, &db.name, &req.user, parsed, Default::default()).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = ApiError::from(e);
            let (status, error, _) = e.parts();
            match (status.as_u16(), error.as_ref()) {
                (401 | 403, _) => Err(e),
                (409, _) => Err(ApiError::Named(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error_saving_ddoc".into(),
                    "Encountered a conflict while saving the design document.".into(),
                )),
                (_, error) => Err(ApiError::Named(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error_saving_ddoc".into(),
                    format!("Unknown error while saving the design document: {error}"),
                )),
            }
        }
    }
}

/// `POST /{db}/_index`.
async fn create(state: &AppState, db: Arc<Database>, req: &mut Req) -> ApiResult<Response> {
    let body = object_body(req).await?;
    let opts = IndexOpts::parse(&body)?;
    let d = db.clone();
    let (creation, rev) = blocking(move || {
        let mut rev = None;
        let mut failure = None;
        let creation = index::create(&opts, |id| match ddoc_body(&d, id) {
            Ok(found) => found.map(|(b, r)| {
                rev = Some(r);
                b
            }),
            Err(e) => {
                failure = Some(e);
                None
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let creation = creation?;
        // CouchDB checks the design document's id once the index is valid (`_design/`).
        settee_core::validate_doc_id(&creation.ddoc_id)?;
        Ok((creation, rev))
    })
    .await?;
    let result = match creation.body {
        None => "exists",
        Some(body) => {
            save_ddoc(
                state,
                &db,
                req,
                &creation.ddoc_id,
                rev.as_deref(),
                Some(body),
            )
            .await?;
            "created"
        }
    };
    Ok(json(
        StatusCode::OK,
        &json!({"result": result, "id": creation.ddoc_id, "name": creation.name}),
    ))
}

/// Deletes json index `name` (every json index when `None`) of design document `ddoc`;
/// `false` when it has none such.
async fn delete_indexes(
    state: &AppState,
    db: &Arc<Database>,
    req: &Req,
    ddoc: &str,
    name: Option<&str>,
) -> ApiResult<bool> {
    let (d, id) = (db.clone(), ddoc.to_string());
    let Some((body, rev)) = blocking(move || ddoc_body(&d, &id)).await? else {
        return Ok(false);
    };
    let names = match name {
        Some(n) => vec![n.to_string()],
        None => index::json_names(&body),
    };
    let mut current = Some(body);
    for n in &names {
        let Some(b) = &current else { break };
        match index::remove(b, "json", n) {
            None => return Ok(false),
            Some(next) => current = next,
        }
    }
    if names.is_empty() {
        return Ok(false);
    }
    // CouchDB answers `ok` even when the write fails (but not when it is refused).
    match save_ddoc(state, db, req, ddoc, Some(&rev), current).await {
        Err(e) if matches!(e.parts().0.as_u16(), 401 | 403) => Err(e),
        _ => Ok(true),
    }
}
