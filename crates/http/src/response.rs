//! The shape every response shares: its status, content type and CouchDB's
//! `Cache-Control`. Below both the error table and the reply helpers, which build on it.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;

pub const JSON: &str = "application/json";

/// A JSON answer. As CouchDB's `send_json`, the body ends with a newline.
pub fn json_bytes(status: StatusCode, mut body: Vec<u8>) -> Response {
    if body.last() != Some(&b'\n') {
        body.push(b'\n');
    }
    with_type(status, JSON, Body::from(body))
}

pub fn with_type(status: StatusCode, content_type: &str, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).expect("valid content type"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate"),
    );
    resp
}
