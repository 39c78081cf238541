//! Building responses: JSON bodies, and streamed bodies produced on a blocking thread.

use crate::error::{ApiError, ApiResult};
use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};
use settee_node::NodeConfig;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub use crate::response::{json_bytes, with_type, JSON};

pub fn json(status: StatusCode, v: &Value) -> Response {
    json_bytes(status, serde_json::to_vec(v).expect("json"))
}

pub fn ok_true(status: StatusCode) -> Response {
    json_bytes(status, br#"{"ok":true}"#.to_vec())
}

/// A sink for a streamed body, used from a blocking thread. Bytes are sent in chunks;
/// `write` reports `false` once the client has gone away.
pub struct Chunks {
    tx: mpsc::Sender<ApiResult<Bytes>>,
    buf: Vec<u8>,
    open: bool,
}

const CHUNK: usize = 32 << 10;

impl Chunks {
    pub fn write(&mut self, b: &[u8]) -> bool {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.flush();
        }
        self.open
    }

    /// Sends what is buffered now (for feeds, where latency matters).
    pub fn flush(&mut self) -> bool {
        if !self.buf.is_empty() && self.open {
            let chunk = Bytes::from(std::mem::take(&mut self.buf));
            self.open = self.tx.blocking_send(Ok(chunk)).is_ok();
        }
        self.open
    }
}

/// Runs `produce` on a blocking thread and streams what it writes. If it fails before the
/// first chunk has been sent, the client gets a proper error response instead.
pub async fn stream(
    content_type: &'static str,
    produce: impl FnOnce(&mut Chunks) -> ApiResult<()> + Send + 'static,
) -> Response {
    let (tx, rx) = mpsc::channel::<ApiResult<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let mut sink = Chunks {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
            open: true,
        };
        match produce(&mut sink) {
            Ok(()) => {
                sink.flush();
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
            }
        }
    });
    delayed(content_type, rx).await
}

/// A response whose status and headers wait for the producer's first chunk, as CouchDB's
/// delayed responses do: an error before it becomes a proper error response; one after it
/// ends the stream.
pub async fn delayed(
    content_type: &'static str,
    mut rx: mpsc::Receiver<ApiResult<Bytes>>,
) -> Response {
    let first = match rx.recv().await {
        Some(Ok(b)) => b,
        Some(Err(e)) => return axum::response::IntoResponse::into_response(e),
        None => Bytes::new(),
    };
    let rest = ReceiverStream::new(rx).map(|item| match item {
        Ok(b) => Ok(b),
        Err(e) => {
            tracing::warn!(error = ?e, "error after the response started; closing the stream");
            Err(std::io::Error::other("stream aborted"))
        }
    });
    let body =
        futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(rest);
    with_type(StatusCode::OK, content_type, Body::from_stream(body))
}

/// Streams from an async producer (feeds that wait for changes).
pub fn stream_async(content_type: &'static str, rx: mpsc::Receiver<Bytes>) -> Response {
    let body = ReceiverStream::new(rx).map(Ok::<_, std::io::Error>);
    with_type(StatusCode::OK, content_type, Body::from_stream(body))
}

/// Marks an answer CouchDB gives from its node-local HTTP layer (`couch_httpd`:
/// `_session`, `_membership`, `_uuids`, `_shards`, `_reshard`), which sets neither
/// `X-Couch-Request-ID` nor `X-CouchDB-Body-Time`.
#[derive(Clone, Copy, Debug)]
pub struct NodeLocal;

pub fn err_to_response(e: ApiError) -> Response {
    axum::response::IntoResponse::into_response(e)
}

/// The quoted revision, a document's `ETag`.
pub fn rev_etag(rev: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{rev}\"")).expect("revs are ASCII")
}

/// CouchDB's 304 (`etag_respond`): the ETag and no body (nor content type, nor
/// `Cache-Control`, which couch_httpd adds to JSON bodies only).
pub fn not_modified(tag: HeaderValue) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NOT_MODIFIED;
    resp.headers_mut().insert(header::ETAG, tag);
    resp
}

/// `{"ok":true,"id","rev"}` with an `ETag` (the quoted revision, or `etag` as given when
/// it is `Some`) and a `Location`, as CouchDB answers a write; `None`s leave them out.
pub fn write_response(
    status: StatusCode,
    id: &str,
    rev: &str,
    etag_value: Option<HeaderValue>,
    location: Option<HeaderValue>,
) -> Response {
    let mut resp = json(status, &json!({"ok": true, "id": id, "rev": rev}));
    if let Some(tag) = etag_value {
        resp.headers_mut().insert(header::ETAG, tag);
    }
    if let Some(loc) = location {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    resp
}

/// A document write's status: `ok` (201, or 200 for a deletion), or 202 when fewer copies
/// than the write quorum hold it (`Written::accepted`).
pub fn written_status(written: &settee_node::fabric::Written, ok: StatusCode) -> StatusCode {
    if written.accepted {
        StatusCode::ACCEPTED
    } else {
        ok
    }
}

/// 202 `{"ok":true,"id"}`: a `batch=ok` write acknowledged before its commit.
pub fn accepted(id: &str) -> Response {
    json(StatusCode::ACCEPTED, &json!({"ok": true, "id": id}))
}

/// `Content-Security-Policy` for a kind of user content (`[csp] <kind>_enable`, on by
/// default, with `<kind>_header_value`), as CouchDB 3.2+ sends with attachments.
pub fn csp_header(config: &NodeConfig, kind: &str, default: &str) -> Option<HeaderValue> {
    if !config.get_bool("csp", &format!("{kind}_enable"), true) {
        return None;
    }
    let value = config.get_or("csp", &format!("{kind}_header_value"), default);
    HeaderValue::from_str(&value).ok()
}

/// A local document's `ETag`. CouchDB hashes the Erlang term of its revision and body
/// (`couch_httpd:doc_etag`), so the value is opaque but changes with either; this is the
/// same shape (a quoted base-36 MD5) over the revision and stored body.
pub fn local_etag(rev: u64, body: &[u8]) -> HeaderValue {
    let tag = settee_node::render::make_etag(&[&rev.to_be_bytes()[..], body].concat());
    HeaderValue::from_str(&tag).expect("etags are ASCII")
}
