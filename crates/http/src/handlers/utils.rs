//! `/_utils/…` and `/favicon.ico`: Fauxton, CouchDB's dashboard, served from `[chttpd]
//! docroot` as `chttpd_misc:handle_utils_dir_req` serves it — `/_utils` redirects to
//! `/_utils/`, files carry `Cache-Control: private, must-revalidate` and the `[csp]`
//! `utils` policy. Content types, `Last-Modified`/`If-Modified-Since`, ranges and gzip
//! come from tower-http's `ServeDir` and compression layer.
//!
//! Settee's repository does not hold Fauxton's files: `scripts/fauxton` installs a pinned
//! release into `ui/fauxton`, the default document root. Without it `/_utils/` answers
//! with a page saying how to install it.

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::{AppState, Req};
use axum::body::Body;
use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use std::path::PathBuf;
use tower::ServiceExt;
use tower_http::compression::Compression;
use tower_http::services::ServeDir;

/// CouchDB 3.5's default `[csp] utils_header_value`.
const UTILS_CSP: &str = "child-src 'self' data: blob:; default-src 'self'; img-src 'self' data:; \
                         font-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline';";

/// Where Fauxton is: `[chttpd] docroot`, else `ui/fauxton` under the working directory,
/// else under the source tree Settee was built from (`cargo run` from anywhere); `None`
/// when that directory holds no `index.html`.
fn docroot(state: &AppState) -> Option<PathBuf> {
    let candidates = match state.config.get("chttpd", "docroot") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => vec![
            PathBuf::from("ui/fauxton"),
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ui/fauxton"),
        ],
    };
    candidates
        .into_iter()
        .find(|d| d.join("index.html").is_file())
}

/// `/_utils` (`file` false: redirected to `/_utils/`) and `/_utils/{path}`.
pub async fn utils(state: &AppState, req: Req, file: bool) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    if !file {
        let host = req.header("host").unwrap_or("localhost");
        let location = format!("http://{host}{}/", req.uri.path());
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
        if let Ok(v) = HeaderValue::from_str(&location) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        return Ok(resp);
    }
    let rest = req.uri.path().trim_start_matches("/_utils");
    let mut resp = match docroot(state) {
        Some(root) => serve(&root, rest, &req).await?,
        None if matches!(rest, "/" | "/index.html") => not_installed(),
        None => not_found(),
    };
    // On every answer, found or not, as mochiweb's `serve_file` adds them.
    let h = resp.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, must-revalidate"),
    );
    if let Some(csp) = crate::reply::csp_header(&state.config, "utils", UTILS_CSP) {
        h.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    Ok(resp)
}

/// `/favicon.ico`, from the document root, cached for a year as CouchDB caches it.
pub async fn favicon(state: &AppState, req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let mut resp = match docroot(state) {
        Some(root) => serve(&root, "/favicon.ico", &req).await?,
        None => not_found(),
    };
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000"),
    );
    Ok(resp)
}

/// One file below `root` (`path` starting with `/`; `/` is `index.html`), gzipped when
/// the client accepts it.
async fn serve(root: &std::path::Path, path: &str, req: &Req) -> ApiResult<Response> {
    let mut inner = Request::builder()
        .method(req.method.clone())
        .uri(if path.is_empty() { "/" } else { path })
        .body(Body::empty())
        .map_err(|_| ApiError::bad_request("Invalid path."))?;
    *inner.headers_mut() = req.headers.clone();
    let service = Compression::new(ServeDir::new(root).append_index_html_on_directories(true));
    let resp = match service.oneshot(inner).await {
        Ok(r) => r,
        Err(e) => match e {},
    };
    if resp.status() == StatusCode::NOT_FOUND {
        return Ok(not_found());
    }
    Ok(resp.map(Body::new).into_response())
}

/// What mochiweb's `serve_file` answers for a file the document root lacks.
fn not_found() -> Response {
    let mut resp = Response::new(Body::from("Not found."));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// `/_utils/` without Fauxton: how to install it.
fn not_installed() -> Response {
    let page = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Settee: Fauxton is not installed</title></head>\n\
<body><h1>Fauxton is not installed</h1>\n\
<p>Settee serves Apache CouchDB's dashboard, Fauxton, from <code>[chttpd] docroot</code>\n\
(by default <code>ui/fauxton</code> in Settee's source tree). To install the pinned release there, run</p>\n\
<pre>./scripts/fauxton</pre>\n\
<p>from the source tree (it needs <code>npm</code>), or unpack the <code>dist/release</code> directory of the\n\
<code>fauxton</code> npm package anywhere and set <code>[chttpd] docroot</code> to it.</p>\n</body></html>\n";
    let mut resp = Response::new(Body::from(page));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}
