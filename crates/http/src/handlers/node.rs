//! `/_node/{node-name}/…`: the node's name, its live configuration (`_config`), its
//! statistics (`_stats`, `_system`, `_prometheus`) and `_versions`, as CouchDB's
//! `chttpd_node` serves them. Settee is one node; `{node-name}` is `_local` or its name
//! ([`settee_core::node::name`]).

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, ok_true};
use crate::router::NodeOp;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

pub async fn node(state: &AppState, node: &str, op: NodeOp, req: Req) -> ApiResult<Response> {
    match op {
        NodeOp::Incomplete => Err(ApiError::bad_request("Incomplete path to _node request")),
        // CouchDB answers `/_node/_local` whatever the method.
        NodeOp::Info if node == "_local" => Ok(json(
            StatusCode::OK,
            &json!({ "name": settee_core::node::name() }),
        )),
        // Under its own name CouchDB answers from its node-local interface: that
        // interface's welcome.
        NodeOp::Info => {
            check_node(node)?;
            allow(&req.method, "GET,HEAD")?;
            Ok(json(StatusCode::OK, &node_local_welcome(state)))
        }
        NodeOp::Config => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!(state.config.all())))
        }
        NodeOp::Reload => {
            allow(&req.method, "POST")?;
            check_node(node)?;
            state.reload_config()?;
            Ok(ok_true(StatusCode::OK))
        }
        NodeOp::Section(section) => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!(state.config.section(&section))))
        }
        NodeOp::Key(section, key) => config_key(state, node, &section, &key, req).await,
        NodeOp::Stats(path) => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let stats = state.stats(state.replicator.counts(), &path);
            Ok(json(StatusCode::OK, &stats))
        }
        NodeOp::System => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &state.system()))
        }
        NodeOp::Prometheus => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            let text = state.prometheus(state.replicator.counts());
            Ok(crate::reply::with_type(
                StatusCode::OK,
                "text/plain; version=2.0",
                text.into(),
            ))
        }
        NodeOp::Versions => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &settee_node::status::versions()))
        }
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
    if node == "_local" || node == settee_core::node::name() {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("no such node: {node}")))
    }
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
    let old = match req.method.as_str() {
        "PUT" => {
            settee_node::settings::check_writable(section)?;
            let Value::String(value) = req.json().await? else {
                return Err(ApiError::bad_request("a JSON string expected"));
            };
            state.set_config(section, key, &value, persist(&req))?
        }
        "DELETE" => state.delete_config(section, key, persist(&req))?,
        _ => state.config_value(section, key)?,
    };
    Ok(json(StatusCode::OK, &Value::String(old)))
}

/// `GET /_membership`: this one node.
pub fn membership(req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET")?;
    let name = settee_core::node::name();
    Ok(json(
        StatusCode::OK,
        &json!({"all_nodes": [name], "cluster_nodes": [name]}),
    ))
}

/// The welcome of CouchDB's node-local interface (`/_node/{its name}`): the root's
/// without `git_sha` and `features`, `vendor` last.
fn node_local_welcome(state: &AppState) -> Value {
    let mut body = json!({
        "couchdb": "Welcome",
        "uuid": state.config.get_or("couchdb", "uuid", &state.http.server_uuid),
        "version": "3.5.2",
    });
    state.add_vendor(&mut body);
    body
}
