//! `/{db}/_partition/{partition}[/…]` of partitioned databases: the partition's info and
//! its `_all_docs`, views, lists and Mango queries (`chttpd_db:handle_partition_req`).

use super::{all_docs, blocking, design_fns, mango, views};
use crate::error::{ApiError, ApiResult};
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use settee_core::validate_partition;
use settee_db::Database;
use std::sync::Arc;

fn not_partitioned() -> ApiError {
    ApiError::bad_request("database is not partitioned")
}

pub async fn partition(
    state: &AppState,
    db: Arc<Database>,
    segs: Vec<String>,
    req: Req,
) -> ApiResult<Response> {
    let partitioned = db.props().partitioned;
    match segs.as_slice() {
        [] => Err(ApiError::bad_request("invalid_partition_req")),
        [p] if matches!(req.method.as_str(), "GET" | "HEAD") => {
            validate_partition(p)?;
            if !partitioned {
                return Err(not_partitioned());
            }
            info(db, p.clone()).await
        }
        [p] if req.method == "POST" && p.starts_with('_') => {
            Err(settee_core::Error::IllegalPartition(
                "Partition must not start with an underscore".into(),
            )
            .into())
        }
        [_] => Err(ApiError::MethodNotAllowed("GET")),
        [p, rest @ ..] => {
            if !partitioned {
                return Err(not_partitioned());
            }
            validate_partition(p)?;
            if req.params.get("partition").is_some_and(|q| q != p) {
                return Err(ApiError::bad_request(
                    "Conflicting value for `partition` in query string",
                ));
            }
            match rest {
                [op] if op == "_all_docs" => {
                    settee_metrics::global().partition_all_docs_requests.inc();
                    all_docs::partition_all_docs(state, db, req, p).await
                }
                [op, q] if op == "_all_docs" && q == "queries" => {
                    all_docs::partition_queries(state, db, req, p).await
                }
                [op] if op == "_find" || op == "_explain" => {
                    let explain = op == "_explain";
                    mango::find(state.clone(), db, req, explain, Some(p.clone())).await
                }
                [op, index @ ..] if op == "_index" => {
                    mango::index(state.clone(), db, index.to_vec(), req).await
                }
                [d, ddoc, f, fun @ ..] if d == "_design" => {
                    design(state, db, p, ddoc.clone(), f, fun, req).await
                }
                _ => Err(ApiError::NotFound("missing".into())),
            }
        }
    }
}

/// `_partition/{p}/_design/{ddoc}/…`: views and lists read the partition; shows, updates
/// and `_info` are the design document's own (`chttpd_db:handle_partition_req` passes the
/// partition only to view queries).
async fn design(
    state: &AppState,
    db: Arc<Database>,
    partition: &str,
    ddoc: String,
    f: &str,
    fun: &[String],
    mut req: Req,
) -> ApiResult<Response> {
    let fun_path: Vec<&str> = fun.iter().map(String::as_str).collect();
    match (f, fun_path.as_slice()) {
        ("_view", [view]) => {
            req.params.set("partition", partition);
            views::view(state.clone(), db, ddoc, view.to_string(), req).await
        }
        ("_list", _) => {
            req.params.set("partition", partition);
            let f = crate::router::design_fn(f, &fun_path);
            design_fns::design_fn(state.clone(), db, ddoc, f, req).await
        }
        ("_show" | "_update", _) => {
            let f = crate::router::design_fn(f, &fun_path);
            design_fns::design_fn(state.clone(), db, ddoc, f, req).await
        }
        ("_info", []) => views::design_info(state.clone(), db, ddoc, req).await,
        _ => Err(ApiError::NotFound("missing".into())),
    }
}

/// `GET /{db}/_partition/{partition}` (`fabric_db_partition_info`). Sizes are those
/// Settee keeps per database, restricted to the partition: `external` the bytes of
/// current bodies, `active` those of live keys and values, uncompressed.
async fn info(db: Arc<Database>, partition: String) -> ApiResult<Response> {
    let v = blocking(move || {
        let s = db.partition_stats(&partition)?;
        Ok(json!({
            "db_name": db.name,
            "sizes": {"active": s.active, "external": s.external},
            "partition": partition,
            "doc_count": s.doc_count,
            "doc_del_count": s.doc_del_count,
        }))
    })
    .await?;
    Ok(json(StatusCode::OK, &v))
}
