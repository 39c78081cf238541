//! `POST /_replicate`: the request parsed, one call to the node's replicator, its answer
//! rendered; and the [`Hooks`] the replicator is given by this layer (authenticating an
//! endpoint's credentials as a request's, naming errors through the one error table).

use crate::error::{ApiError, ApiResult};
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_node::replication::{Caller, Hooks, Replicated};
use settee_node::Node;
use settee_replicator::Error as RepError;

/// `POST /_replicate` (see [`settee_node::replication::Replicator::replicate`]).
pub async fn replicate(state: &AppState, mut req: Req) -> ApiResult<Response> {
    // CouchDB reads the body as a JSON object before it looks at the method.
    if !crate::req::has_body(&req) {
        return Err(ApiError::bad_request("Missing request body"));
    }
    let body = match req.json().await? {
        Value::Object(m) => m,
        _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
    };
    super::allow(&req.method, "POST")?;
    crate::req::require_json(&req.headers)?;
    let answer = state.replicator.replicate(&caller(&req), &body).await?;
    Ok(match answer {
        Replicated::Started(id) => {
            json(StatusCode::ACCEPTED, &json!({"ok": true, "_local_id": id}))
        }
        Replicated::Cancelled(id) => json(StatusCode::OK, &json!({"ok": true, "_local_id": id})),
        Replicated::Finished(out) => json(StatusCode::OK, &Value::Object(out)),
    })
}

/// The caller of a request, with the `Authorization` and session cookie CouchDB forwards
/// for bare database names.
fn caller(req: &Req) -> Caller {
    let cookie = req
        .header("cookie")
        .and_then(|c| {
            c.split(';')
                .map(str::trim)
                .find(|p| p.starts_with("AuthSession="))
        })
        .unwrap_or("");
    Caller {
        user: req.user.clone(),
        forwarded: Some((
            req.header("authorization").unwrap_or("").to_string(),
            cookie.to_string(),
        )),
    }
}

/// What the replicator needs of this layer.
pub struct HttpHooks;

impl Hooks for HttpHooks {
    fn authenticate(&self, node: &Node, headers: &[(String, String)]) -> Result<UserCtx, RepError> {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                h.insert(name, value);
            }
        }
        // No request line: cluster credentials among an endpoint's headers are refused.
        let creds = crate::auth::Credentials {
            headers: &h,
            peer: "127.0.0.1",
            method: "",
            target: "",
        };
        crate::auth::authenticate(node, &creds)
            .map(|a| a.user)
            .map_err(|e| {
                let (status, _, reason) = e.parts();
                RepError::Unauthorized {
                    status: status.as_u16(),
                    reason,
                }
            })
    }

    fn describe(&self, e: settee_node::Error) -> (u16, String, String) {
        let (status, error, reason) = ApiError::from(e).parts();
        (status.as_u16(), error.into_owned(), reason)
    }
}
