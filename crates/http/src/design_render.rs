//! Design functions' answers as HTTP responses, as `chttpd_external:send_external_response`
//! and `couch_mrview_show` send them: a function's response object ([`External`], read by
//! the node), and a list's streamed [`Piece`]s.

use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use settee_node::list::{External, Piece};
use tokio::sync::mpsc;

/// A function's response object as a response: a JSON body with `Cache-Control`, any
/// other with the `[csp]` sandbox policy on top of the function's headers.
pub fn external_response(mut ext: External, state: &AppState) -> ApiResult<Response> {
    if ext.json {
        let cached = ext
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("cache-control"));
        if !cached {
            ext.headers
                .push(("Cache-Control".into(), "must-revalidate".into()));
        }
    } else if let Some(csp) = showlist_csp(state) {
        ext.headers.insert(0, csp);
    }
    let mut resp = Response::new(Body::from(ext.body));
    *resp.status_mut() = status(ext.code)?;
    add_headers(&mut resp, &ext.headers)?;
    Ok(resp)
}

fn status(code: u16) -> ApiResult<StatusCode> {
    StatusCode::from_u16(code)
        .map_err(|_| settee_node::Error::ExternalResponse(format!("{{code,{code}}}")).into())
}

/// `chttpd_util:maybe_add_csp_header("showlist", …, "sandbox")`: shows and lists get a
/// `Content-Security-Policy` unless `[csp] showlist_enable` is false.
pub fn showlist_csp(state: &AppState) -> Option<(String, String)> {
    let value = crate::reply::csp_header(&state.config, "showlist", "sandbox")?;
    let value = value.to_str().ok()?.to_string();
    Some(("Content-Security-Policy".into(), value))
}

fn add_headers(resp: &mut Response, headers: &[(String, String)]) -> ApiResult<()> {
    let bad = |what: String| ApiError::from(settee_node::Error::ExternalResponse(what));
    for (name, value) in headers {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad(format!("header {name:?}")))?;
        let value =
            HeaderValue::from_str(value).map_err(|_| bad(format!("header value {value:?}")))?;
        resp.headers_mut().append(name, value);
    }
    Ok(())
}

/// The list's response once its first piece is known: its head and a streamed body, or
/// the error it failed with before sending anything. A failure after the head is the
/// body's last chunk, `\n{"code","error","reason"}\n` (`chttpd:send_chunked_error`).
pub async fn list_response(mut rx: mpsc::Receiver<Piece>) -> Response {
    let (code, headers) = match rx.recv().await {
        Some(Piece::Head(code, headers)) => (code, headers),
        Some(Piece::Failed(e)) => return ApiError::from(e).into_response(),
        Some(Piece::Data(_)) | None => (200, Vec::new()),
    };
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).filter_map(|piece| async move {
        match piece {
            Piece::Data(b) => Some(Ok::<_, std::io::Error>(b)),
            Piece::Failed(e) => {
                let (status, error, reason) = ApiError::from(e).parts();
                let body = json!({"code": status.as_u16(), "error": error, "reason": reason});
                Some(Ok(Bytes::from(format!("\n{body}\n"))))
            }
            Piece::Head(..) => None,
        }
    });
    let mut resp = Response::new(Body::from_stream(body));
    match status(code) {
        Ok(code) => *resp.status_mut() = code,
        Err(e) => return e.into_response(),
    }
    if let Err(e) = add_headers(&mut resp, &headers) {
        return e.into_response();
    }
    resp
}
