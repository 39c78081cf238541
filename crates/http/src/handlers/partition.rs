//! `/{db}/_partition/{partition}[/…]` of partitioned databases: the partition's info and
//! its `_all_docs` (`chttpd_db:handle_partition_req`). Views and Mango within a partition
//! are later work.

use super::{all_docs, blocking};
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
                [op, ..] if op == "_find" || op == "_explain" || op == "_design" => Err(
                    ApiError::NotImplemented(
                        "Partitioned views and Mango queries are not supported by this Settee version"
                            .into(),
                    ),
                ),
                _ => Err(ApiError::NotFound("missing".into())),
            }
        }
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
