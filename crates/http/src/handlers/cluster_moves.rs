//! `/_cluster/…`: Settee's own cluster operations, for server admins (checked before the
//! handler). `POST /_cluster/move` moves a shard copy to another member
//! (`settee_node::moves` does the work; CouchDB has no such endpoint, it edits `_dbs`
//! documents).

use crate::error::{ApiError, ApiResult};
use crate::handlers::allow;
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use settee_node::moves::Move;

pub async fn cluster(state: &AppState, segs: &[String], mut req: Req) -> ApiResult<Response> {
    match segs {
        [op] if op == "move" => {
            allow(&req.method, "POST")?;
            crate::req::require_json(&req.headers)?;
            let body = crate::req::parse_json(&req.bytes().await?)?;
            let moved = state.node.move_copy(Move::parse(&body)?).await?;
            Ok(json(StatusCode::OK, &moved))
        }
        _ => Err(ApiError::NotFound("missing".into())),
    }
}
