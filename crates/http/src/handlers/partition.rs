//! `GET /{db}/_partition/{partition}`: a partition's info (the router sends the paths
//! below it to the handlers of `_all_docs`, views, lists and Mango queries, as
//! `chttpd_db:handle_partition_req`).

use super::blocking;
use crate::error::ApiResult;
use crate::reply::json;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use settee_node::fabric::DbRef;

/// `GET /{db}/_partition/{partition}` (`fabric_db_partition_info`). Sizes are those
/// Settee keeps per database, restricted to the partition: `external` the bytes of
/// current bodies, `active` those of live keys and values, uncompressed.
pub async fn info(db: DbRef, partition: String) -> ApiResult<Response> {
    let db = db.engine("partition info")?.clone();
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
