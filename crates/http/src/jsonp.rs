//! JSONP (`?callback=name`), as CouchDB 3.5's chttpd still offers it behind
//! `[chttpd] allow_jsonp` (or `[httpd]`; off by default): every JSON answer — documents, views, errors,
//! streamed or not — becomes `/* CouchDB */name(<json>);` followed by a newline, typed
//! `application/javascript`. A callback of other characters than letters, digits, `.`, `_`,
//! `[` and `]` is CouchDB's `400 bad_request` `invalid_callback`, given (as CouchDB gives
//! it) when the answer is about to be sent: the request has been carried out. With the
//! setting off, or `callback=` empty, the parameter is ignored.
//!
//! Applied to the finished response, so no handler knows about it: CouchDB's JSON bodies
//! end with a newline that goes after the `);`, and a streamed body's last newline is held
//! back until the stream ends so the wrapper can go before it.

use crate::error::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use settee_node::config::NodeConfig;

/// What to do with the answer to a request whose query string is `query`.
pub enum Jsonp {
    /// Wrap JSON answers in a call to this function.
    Wrap(String),
    /// The callback is not a JavaScript name: answer 400 instead.
    Invalid,
}

impl Jsonp {
    /// `None` unless `[httpd] allow_jsonp` is `true` and the query has a non-empty
    /// `callback` (the first one, as mochiweb reads a parameter).
    pub fn of_request(node: &NodeConfig, method: &Method, query: Option<&str>) -> Option<Jsonp> {
        if method == Method::HEAD {
            return None;
        }
        let callback = form_urlencoded::parse(query?.as_bytes())
            .find(|(k, _)| k == "callback")
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.is_empty())?;
        if node.chttpd("allow_jsonp").as_deref() != Some("true") {
            return None;
        }
        let valid = callback
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'[' | b']'));
        Some(if valid {
            Jsonp::Wrap(callback)
        } else {
            Jsonp::Invalid
        })
    }

    /// The response as CouchDB sends it under this callback.
    pub fn apply(self, resp: Response) -> Response {
        let is_json = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with(crate::reply::JSON));
        if !is_json || resp.status() == StatusCode::NOT_MODIFIED {
            return resp;
        }
        let callback = match self {
            Jsonp::Wrap(callback) => callback,
            Jsonp::Invalid => {
                return crate::reply::err_to_response(ApiError::bad_request("invalid_callback"))
            }
        };
        let (mut parts, body) = resp.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/javascript"),
        );
        Response::from_parts(parts, wrap(callback, body))
    }
}

/// `/* CouchDB */callback(` + the body without its final newline + `);\n`.
fn wrap(callback: String, body: Body) -> Body {
    let head = Bytes::from(format!("/* CouchDB */{callback}("));
    // Whether the previous chunk's newline was held back.
    let mut held = false;
    let middle = body.into_data_stream().map(move |chunk| {
        chunk.map(|mut bytes| {
            let mut out = Vec::with_capacity(bytes.len() + 1);
            if std::mem::take(&mut held) {
                out.push(b'\n');
            }
            if bytes.last() == Some(&b'\n') {
                bytes.truncate(bytes.len() - 1);
                held = true;
            }
            out.extend_from_slice(&bytes);
            Bytes::from(out)
        })
    });
    let stream = futures_util::stream::once(async move { Ok(head) })
        .chain(middle)
        .chain(futures_util::stream::once(async {
            Ok(Bytes::from_static(b");\n"))
        }));
    Body::from_stream(stream)
}
