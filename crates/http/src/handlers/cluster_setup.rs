//! `/_cluster_setup`: CouchDB's set-up wizard (`settee_node::cluster_setup` does the work).
//! Server admins only (checked before the handler, as CouchDB's `verify_is_server_admin`);
//! a POST body is read as CouchDB's `setup_httpd` reads it: JSON content type, an object,
//! an `action`.

use crate::error::{ApiError, ApiResult};
use crate::reply::{json, ok_true};
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use settee_node::cluster_setup::{db_list, SetupAction};

pub async fn cluster_setup(state: &AppState, mut req: Req) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => {
            let dbs = match req.params.get("ensure_dbs_exist") {
                Some(dbs) => Some(db_list(&crate::req::parse_json(dbs.as_bytes())?)?),
                None => None,
            };
            let setup = state.node.setup_state(&*state.fabric, dbs);
            Ok(json(StatusCode::OK, &json!({"state": setup.as_str()})))
        }
        "POST" => {
            crate::req::require_json(&req.headers)?;
            let body = req.bytes().await?;
            let Ok(Value::Object(setup)) = serde_json::from_slice::<Value>(&body) else {
                return Err(ApiError::bad_request("Missing JSON body'"));
            };
            let action = SetupAction::parse(&setup)?;
            let fabric = state.fabric.clone();
            state.node.cluster_setup(fabric, action).await?;
            Ok(ok_true(StatusCode::CREATED))
        }
        _ => Err(ApiError::MethodNotAllowed("GET,POST")),
    }
}
