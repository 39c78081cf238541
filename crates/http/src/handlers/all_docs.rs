//! `_all_docs`, `_design_docs`, `_local_docs` and `_all_docs/queries`. Rows stream.

use super::{allow, blocking, query_results};
use crate::error::{ApiError, ApiResult};
use crate::mrargs::MrArgs;
use crate::reply::{json_bytes, stream, JSON};
use crate::req::{decode_param_json, require_json};
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
pub use settee_node::all_docs::Namespace;
use settee_node::all_docs::Query;
use settee_node::fabric::DbRef;
use settee_node::Fabric;

pub async fn all_docs(state: &AppState, db: DbRef, req: Req, ns: Namespace) -> ApiResult<Response> {
    all_docs_in(state, db, req, ns, None).await
}

/// `/{db}/_partition/{partition}/_all_docs`: `_all_docs` over one partition's ids.
pub async fn partition_all_docs(
    state: &AppState,
    db: DbRef,
    req: Req,
    partition: &str,
) -> ApiResult<Response> {
    all_docs_in(state, db, req, Namespace::All, Some(partition)).await
}

async fn all_docs_in(
    state: &AppState,
    db: DbRef,
    mut req: Req,
    ns: Namespace,
    partition: Option<&str>,
) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let args = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = match req.json().await? {
            Value::Object(m) => m,
            _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
        };
        if body.get("keys").is_some_and(|k| !k.is_array()) {
            return Err(ApiError::bad_request(
                "`keys` body member must be an array.",
            ));
        }
        MrArgs::from_body_and_query(&body, &req.params, false)?
    } else {
        let keys = match req.params.get("keys").map(decode_param_json).transpose()? {
            Some(keys @ Value::Array(_)) => Some(keys),
            Some(_) => return Err(ApiError::bad_request("`keys` parameter must be an array.")),
            None => None,
        };
        MrArgs::from_query_with_keys(keys, &req.params)?
    };
    // `?partition=` on a partitioned database's `_all_docs` is the partition's `_all_docs`
    // (`couch_mrview_util:validate_all_docs_args`); elsewhere `from_args` refuses it.
    let partition = match (partition, &args.partition) {
        (None, Some(p)) if ns == Namespace::All && db.partitioned => {
            if p.is_empty() {
                return Err(ApiError::QueryParse(
                    "Invalid value for `partition`.".into(),
                ));
            }
            Some(p.clone())
        }
        (p, _) => p.map(str::to_string),
    };
    let q = match &partition {
        Some(p) => Query::for_partition(args, p, partition_query_limit(state))?,
        None => Query::from_args(args)?,
    };
    let (node, user) = (state.fabric.clone(), req.user.clone());
    Ok(stream(JSON, move |sink| {
        let out = &mut |b: &[u8]| sink.write(b);
        Ok(Fabric::all_docs(&*node, &db.name, &user, q, ns, out)?)
    })
    .await)
}

fn partition_query_limit(state: &AppState) -> u64 {
    state.config.get_u64(
        "query_server_config",
        "partition_query_limit",
        settee_node::views::MAX_VIEW_LIMIT,
    )
}

/// `POST /{db}/_all_docs/queries` (CouchDB does not check this request's content type).
/// `POST /{db}/_all_docs/queries` (and `_design_docs/queries`, `_local_docs/queries`):
/// each query object over the namespace, as CouchDB's `multi_all_docs_view`.
pub async fn queries(state: &AppState, db: DbRef, req: Req, ns: Namespace) -> ApiResult<Response> {
    queries_in(state, db, req, ns, None).await
}

/// `POST /{db}/_partition/{partition}/_all_docs/queries`.
pub async fn partition_queries(
    state: &AppState,
    db: DbRef,
    req: Req,
    partition: &str,
) -> ApiResult<Response> {
    queries_in(state, db, req, Namespace::All, Some(partition)).await
}

async fn queries_in(
    state: &AppState,
    db: DbRef,
    mut req: Req,
    ns: Namespace,
    partition: Option<&str>,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    let body = req.json().await?;
    let body = body
        .as_object()
        .ok_or_else(|| ApiError::bad_request("Request body must be a JSON object"))?;
    let list = match body.get("queries") {
        None => {
            return Err(ApiError::bad_request(
                "POST body must include `queries` parameter.",
            ))
        }
        Some(Value::Array(l)) => l,
        Some(_) => return Err(ApiError::bad_request("`queries` member must be an array.")),
    };
    let base = MrArgs::from_query(&req.params)?;
    let qs = list
        .iter()
        .map(|b| {
            let b = b
                .as_object()
                .ok_or_else(|| ApiError::bad_request("Each query must be a JSON object"))?;
            let args = base.for_query_object(b)?;
            let q = match partition {
                Some(p) => Query::for_partition(args, p, partition_query_limit(state)),
                None => Query::from_args(args),
            }?;
            Ok(q)
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let (fabric, user) = (state.fabric.clone(), req.user.clone());
    let out = blocking(move || {
        query_results(&qs, |q, out| {
            Ok(Fabric::all_docs(
                &*fabric,
                &db.name,
                &user,
                q.clone(),
                ns,
                out,
            )?)
        })
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}
