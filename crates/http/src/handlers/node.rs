//! `/_node/{node-name}/…`: the node's name and its live configuration (`_config`), as
//! CouchDB's `chttpd_node` serves them. Settee is one node; `{node-name}` is `_local` or
//! [`NODE_NAME`].

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, ok_true};
use crate::router::NodeOp;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use settee_auth::password::{PasswordHash, DEFAULT_ITERATIONS};

/// What `/_node/_local` and `/_membership` call this node (CouchDB's name for a node
/// without Erlang distribution).
pub const NODE_NAME: &str = "nonode@nohost";

/// Sections CouchDB refuses to change over HTTP (they name programs to run).
const BLACKLISTED_SECTIONS: &[&str] = &[
    "daemons",
    "external",
    "httpd_design_handlers",
    "httpd_db_handlers",
    "httpd_global_handlers",
    "native_query_servers",
    "os_daemons",
    "query_servers",
    "feature_flags",
];

pub async fn node(state: &AppState, node: &str, op: NodeOp, req: Req) -> ApiResult<Response> {
    match op {
        NodeOp::Incomplete => Err(ApiError::bad_request("Incomplete path to _node request")),
        // CouchDB answers `/_node/_local` whatever the method.
        NodeOp::Info => {
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!({ "name": NODE_NAME })))
        }
        NodeOp::Config => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!(state.node.all())))
        }
        NodeOp::Reload => {
            allow(&req.method, "POST")?;
            check_node(node)?;
            state.node.reload()?;
            state.apply_settings();
            Ok(ok_true(StatusCode::OK))
        }
        NodeOp::Section(section) => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!(state.node.section(&section))))
        }
        NodeOp::Key(section, key) => config_key(state, node, &section, &key, req).await,
        NodeOp::Missing => Err(ApiError::NotFound("missing".into())),
        NodeOp::Unimplemented(what, method) => {
            allow(&req.method, method)?;
            check_node(node)?;
            Err(ApiError::NotImplemented(format!(
                "{what} is not supported by this Settee version"
            )))
        }
    }
}

/// `_local` or this node's name; CouchDB's 404 for any other.
fn check_node(node: &str) -> ApiResult<()> {
    if node == "_local" || node == NODE_NAME {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("no such node: {node}")))
    }
}

fn unknown_value() -> ApiError {
    ApiError::NotFound("unknown_config_value".into())
}

fn check_writable(section: &str) -> ApiResult<()> {
    if BLACKLISTED_SECTIONS.contains(&section) {
        return Err(ApiError::Forbidden(
            "Config section blacklisted for modification over HTTP API.".into(),
        ));
    }
    Ok(())
}

/// `X-Couch-Persist: false` keeps a change in memory only.
fn persist(req: &Req) -> bool {
    req.header("x-couch-persist") != Some("false")
}

async fn config_key(
    state: &AppState,
    node: &str,
    section: &str,
    key: &str,
    mut req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "GET,PUT,DELETE")?;
    check_node(node)?;
    let cfg = &state.node;
    let old = match req.method.as_str() {
        "PUT" => {
            check_writable(section)?;
            let value = match req.json().await? {
                Value::String(s) => s.trim().to_string(),
                _ => return Err(ApiError::bad_request("a JSON string expected")),
            };
            let value = if section == "admins" {
                hash_admin_password(state, &value)
            } else {
                value
            };
            if persist(&req) {
                cfg.set(section, key, &value)?
            } else {
                cfg.set_unpersisted(section, key, &value)?
            }
            .unwrap_or_default()
        }
        "DELETE" => {
            check_writable(section)?;
            if cfg.get(section, key).is_none() {
                return Err(unknown_value());
            }
            let old = if persist(&req) {
                cfg.delete(section, key)?
            } else {
                cfg.delete_unpersisted(section, key)
            };
            old.ok_or_else(unknown_value)?
        }
        _ => cfg.get(section, key).ok_or_else(unknown_value)?,
    };
    state.apply_settings();
    Ok(json(StatusCode::OK, &Value::String(old)))
}

/// CouchDB stores admin passwords hashed: a plaintext value becomes a PBKDF2 hash with
/// `[chttpd_auth] iterations`; a value that already is a hash is kept.
fn hash_admin_password(state: &AppState, value: &str) -> String {
    if value.is_empty() || PasswordHash::parse(value).is_some() {
        return value.to_string();
    }
    let iterations = state
        .node
        .get_u64("chttpd_auth", "iterations", DEFAULT_ITERATIONS.into())
        .clamp(1, u32::MAX.into()) as u32;
    PasswordHash::new(value, iterations).stored()
}

/// `GET /_membership`: this one node.
pub fn membership(req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET")?;
    Ok(json(
        StatusCode::OK,
        &json!({"all_nodes": [NODE_NAME], "cluster_nodes": [NODE_NAME]}),
    ))
}
