//! `GET /{db}/_partition/{partition}`: a partition's info (the router sends the paths
//! below it to the handlers of `_all_docs`, views, lists and Mango queries, as
//! `chttpd_db:handle_partition_req`).

use super::blocking;
use crate::error::ApiResult;
use crate::reply::json;
use crate::AppState;
use axum::http::StatusCode;
use axum::response::Response;
use settee_node::fabric::DbRef;
use settee_node::Fabric;

/// `GET /{db}/_partition/{partition}` (`fabric_db_partition_info`).
pub async fn info(state: &AppState, db: DbRef, partition: String) -> ApiResult<Response> {
    let fabric = state.fabric.clone();
    let v = blocking(move || Ok(Fabric::partition_info(&*fabric, &db.name, &partition)?)).await?;
    Ok(json(StatusCode::OK, &v))
}
