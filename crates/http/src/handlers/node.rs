//! `/_node/{node-name}/…`: the node's name, its live configuration (`_config`), its
//! statistics (`_stats`, `_system`, `_prometheus`) and `_versions`, as CouchDB's
//! `chttpd_node` serves them, and the membership list (`_nodes`). `{node-name}` is `_local`
//! or this node's name ([`settee_core::node::name`]), or another running member of its
//! cluster, which the request is forwarded to.

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, ok_true, rev_etag, write_response};
use crate::router::NodeOp;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

pub async fn node(state: &AppState, node: &str, op: NodeOp, req: Req) -> ApiResult<Response> {
    // Another running member answers for itself; any other name is refused below, after
    // the method, as CouchDB orders its checks.
    if node != "_local" && node != settee_core::node::name() && state.is_member(node) {
        return forward(state, node, req).await;
    }
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
        NodeOp::NodesInfo => {
            allow(&req.method, "GET,HEAD")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &state.nodes_info()))
        }
        NodeOp::NodeDocs => {
            allow(&req.method, "GET,HEAD")?;
            check_node(node)?;
            let rows: Vec<String> = state
                .node_docs()
                .into_iter()
                .map(|(id, rev)| json!({"id": id, "key": id, "value": {"rev": rev}}).to_string())
                .collect();
            // Laid out as every `_all_docs` answer is: a row per line.
            let body = format!(
                "{{\"total_rows\":{},\"offset\":0,\"rows\":[\r\n{}\r\n]}}\n",
                rows.len(),
                rows.join(",\r\n")
            );
            Ok(crate::reply::json_bytes(StatusCode::OK, body.into_bytes()))
        }
        NodeOp::NodeDoc(name) => node_doc(state, node, &name, req).await,
        NodeOp::DesignsChanged(db) => {
            allow(&req.method, "POST")?;
            check_node(node)?;
            state.node.cluster_designs_changed(&db);
            Ok(ok_true(StatusCode::OK))
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

/// `/_node/{member}/…` for another running member of the cluster: the same request made of
/// that member's `/_node/_local/…`, signed as this node, its answer passed back.
async fn forward(state: &AppState, node: &str, mut req: Req) -> ApiResult<Response> {
    // The path after `/_node/{name}`, as the client encoded it.
    let path = req.uri.path();
    let rest = path.splitn(4, '/').nth(3).unwrap_or("");
    let mut target = format!("/_node/_local/{rest}");
    if rest.is_empty() {
        target.pop();
    }
    if let Some(q) = req.uri.query() {
        target = format!("{target}?{q}");
    }
    let content_type = req.header("content-type").map(str::to_owned);
    let method = req.method.to_string();
    let body = req.bytes().await?;
    let Some(answer) = state
        .forward(node, &method, &target, content_type.as_deref(), body)
        .await?
    else {
        // It stopped meanwhile.
        return Err(ApiError::NotFound(format!("no such node: {node}")));
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let ct = answer.content_type.as_deref().unwrap_or("application/json");
    Ok(crate::reply::with_type(status, ct, answer.body.into()))
}

/// A document of the membership list (CouchDB's `_nodes` database): reading it, adding a
/// node (`PUT {}`), editing it (`zone`, `decom`) or removing it.
async fn node_doc(state: &AppState, node: &str, name: &str, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,PUT,DELETE,POST")?;
    check_node(node)?;
    match req.method.as_str() {
        // couch_httpd takes a POST to a document as a form upload of attachments; the
        // membership list's documents hold none, so only its refusals are answered.
        "POST" => Err(form_refusal(&req)),
        "PUT" => {
            // couch_httpd's word for a body that is not JSON (chttpd says `invalid UTF-8
            // JSON`).
            let body = req.bytes().await?;
            let body = settee_wire::parse_json(&body)
                .map_err(|_| ApiError::bad_request("invalid_json"))?;
            let query = crate::req::parse_rev_param(&req)?.map(|r| r.to_string());
            let rev = state.put_node_doc(name, body, query.as_deref()).await?;
            // As CouchDB's: the node-local `_nodes` database's path.
            let location = crate::location::doc_location(&state.config, &req, "_nodes", name);
            Ok(write_response(
                StatusCode::CREATED,
                name,
                &rev,
                Some(rev_etag(&rev)),
                location,
            ))
        }
        "DELETE" => {
            let rev = crate::req::reconcile_rev(&req, None)?.map(|r| r.to_string());
            let rev = state.delete_node_doc(name, rev.as_deref()).await?;
            Ok(write_response(
                StatusCode::OK,
                name,
                &rev,
                Some(rev_etag(&rev)),
                None,
            ))
        }
        _ => {
            let doc = state.node_doc(name)?;
            let mut resp = json(StatusCode::OK, &doc);
            if let Some(rev) = doc["_rev"].as_str() {
                resp.headers_mut()
                    .insert(axum::http::header::ETAG, rev_etag(rev));
            }
            Ok(resp)
        }
    }
}

/// Why couch_httpd refuses a form upload (`POST /{db}/{docid}`) to a membership list
/// document: the checks of any form upload (`Referer`, `Content-Type`), then the form
/// itself, as the list's documents hold no attachments.
fn form_refusal(req: &Req) -> ApiError {
    let checked = crate::req::check_referer(req)
        .and_then(|()| super::attachments::form_content_type(req).map(drop));
    match checked {
        Err(e) => e,
        Ok(()) => ApiError::bad_request("The membership list's documents take no attachments."),
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

/// `GET /_membership`: the members running now and the membership list.
pub fn membership(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET")?;
    let m = state.membership();
    Ok(json(
        StatusCode::OK,
        &json!({"all_nodes": m.all_nodes, "cluster_nodes": m.cluster_nodes}),
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
