//! Design-document render functions (`_show`, `_list`, `_update`): the compiled functions
//! each thread keeps, CouchDB's ETags for shows, and turning the query-server protocol's
//! answers (`["resp", resp]`, `["up", doc, resp]`, `["start" | "chunks" | "end", …]`) into
//! HTTP responses, as `chttpd_external:send_external_response` and `couch_mrview_show` do.
//! The answers are JSON whoever produced them, so an external query server's answers render
//! the same way as the in-process [`Renderer`]'s; [`doc_answer`] and
//! [`list_answer`] pick one or the other by the design document's `language`.
//!
//! A list runs on two blocking threads: the view (or `_all_docs`) query writes its rows
//! through the usual row writer into a bounded channel, and the list function pulls them one
//! at a time with `getRow()`, its chunks streaming to the client as it sends them.

use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Map, Value};
use settee_js::ListIo;
use std::sync::mpsc;
use tokio::sync::mpsc as tokio_mpsc;

pub use settee_node::render::{
    apply_headers, doc_answer, function_doc, list_answer, require_runner, rewrite_answer,
    show_etag, DesignDoc,
};

/// A function's response object, read as `chttpd_external:parse_external_response` reads
/// it: `code`, `headers`, and a body from `body` (HTML by default), `base64` (binary) or
/// `json`; the default type is JSON. Anything else is an `external_response_error`.
pub struct External {
    pub code: StatusCode,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body came from `json` (sent as `chttpd:send_json` sends it).
    pub json: bool,
}

impl External {
    /// Reads `resp`; `code` is the status unless `resp` names one.
    pub fn parse(resp: &Value, code: u16) -> ApiResult<External> {
        let Value::Object(members) = resp else {
            return Err(external_error(format!("{resp}")));
        };
        let mut code = code;
        let mut content_type = "application/json";
        let mut headers = Vec::new();
        let mut data = Vec::new();
        let mut json = None;
        for (key, value) in members {
            match (key.as_str(), value) {
                ("code", v) => {
                    code = v
                        .as_u64()
                        .and_then(|c| u16::try_from(c).ok())
                        .ok_or_else(|| external_error(format!("{{code,{v}}}")))?;
                }
                ("stop", _) => {}
                ("json", v) => {
                    json = Some(v);
                    content_type = "application/json";
                }
                ("body", v) => {
                    data = text_of(v).ok_or_else(|| external_error(format!("{{body,{v}}}")))?;
                    content_type = "text/html; charset=utf-8";
                }
                ("base64", v) => {
                    let text = v.as_str().unwrap_or_default();
                    data = base64::engine::general_purpose::STANDARD
                        .decode(text.trim())
                        .map_err(|_| external_error(format!("{{base64,{v}}}")))?;
                    content_type = "application/binary";
                }
                ("headers", Value::Object(h)) => {
                    headers = h.iter().map(|(k, v)| (k.clone(), header_text(v))).collect();
                }
                (k, v) => return Err(external_error(format!("{{{k},{v}}}"))),
            }
        }
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            headers.insert(0, ("Content-Type".into(), content_type.into()));
        }
        if let Some(json) = json {
            data = serde_json::to_vec(json).expect("json");
            data.push(b'\n');
        }
        let code =
            StatusCode::from_u16(code).map_err(|_| external_error(format!("{{code,{code}}}")))?;
        Ok(External {
            code,
            headers,
            body: data,
            json: json.is_some(),
        })
    }

    /// The response (`send_external_response`): a JSON body with `Cache-Control`, any
    /// other with the `[csp]` sandbox policy on top of the function's headers.
    pub fn into_response(mut self, state: &AppState) -> ApiResult<Response> {
        if self.json {
            let cached = self
                .headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("cache-control"));
            if !cached {
                self.headers
                    .push(("Cache-Control".into(), "must-revalidate".into()));
            }
        } else if let Some(csp) = showlist_csp(state) {
            self.headers.insert(0, csp);
        }
        let mut resp = Response::new(Body::from(self.body));
        *resp.status_mut() = self.code;
        add_headers(&mut resp, &self.headers)?;
        Ok(resp)
    }
}

/// `chttpd_util:maybe_add_csp_header("showlist", …, "sandbox")`: shows and lists get a
/// `Content-Security-Policy` unless `[csp] showlist_enable` is false.
fn showlist_csp(state: &AppState) -> Option<(String, String)> {
    let value = crate::reply::csp_header(&state.config, "showlist", "sandbox")?;
    let value = value.to_str().ok()?.to_string();
    Some(("Content-Security-Policy".into(), value))
}

fn add_headers(resp: &mut Response, headers: &[(String, String)]) -> ApiResult<()> {
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| external_error(format!("header {name:?}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| external_error(format!("header value {value:?}")))?;
        resp.headers_mut().append(name, value);
    }
    Ok(())
}

/// A body: a string, or a list of them (an iolist).
fn text_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Array(items) => items.iter().try_fold(Vec::new(), |mut out, item| {
            out.extend(text_of(item)?);
            Some(out)
        }),
        _ => None,
    }
}

/// A header value as `couch_util:to_list` prints it.
fn header_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn external_error(what: String) -> ApiError {
    settee_node::Error::ExternalResponse(what).into()
}

/// The member `i` of a protocol answer, checking its tag.
pub fn answer_part<'a>(answer: &'a Value, tag: &str, i: usize) -> ApiResult<&'a Value> {
    let parts = answer
        .as_array()
        .filter(|a| a.first().and_then(Value::as_str) == Some(tag));
    parts
        .and_then(|a| a.get(i))
        .ok_or_else(|| external_error(format!("answer {answer}")))
}

/// What the row writer's pieces are to a list function.
pub enum Feed {
    /// The view's head: `{total_rows, offset}` (and `update_seq`), `{}` for a reduce.
    Head(Value),
    Rows(Vec<Value>),
    /// The query failed.
    Failed(ApiError),
}

/// Rows go to the list function in batches of this many.
const ROW_BATCH: usize = 64;

/// Turns what the view and `_all_docs` row writers write (one call per head, separator or
/// row) into a list function's [`Feed`], sending batches into `tx`; `false` once the list
/// has stopped reading.
pub struct RowSplitter {
    tx: mpsc::SyncSender<Feed>,
    batch: Vec<Value>,
    head_sent: bool,
}

impl RowSplitter {
    pub fn new(tx: mpsc::SyncSender<Feed>) -> RowSplitter {
        RowSplitter {
            tx,
            batch: Vec::with_capacity(ROW_BATCH),
            head_sent: false,
        }
    }

    pub fn write(&mut self, piece: &[u8]) -> bool {
        let piece = piece.strip_prefix(b",\r\n").unwrap_or(piece);
        if piece.is_empty() || piece == b"\r\n]}\n" {
            return true;
        }
        if !self.head_sent {
            self.head_sent = true;
            return self.tx.send(Feed::Head(head_of(piece))).is_ok();
        }
        match serde_json::from_slice(piece) {
            Ok(row) => self.batch.push(row),
            Err(e) => tracing::warn!(error = %e, "unreadable row for a list function"),
        }
        if self.batch.len() >= ROW_BATCH {
            return self.flush();
        }
        true
    }

    pub fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        let rows = std::mem::replace(&mut self.batch, Vec::with_capacity(ROW_BATCH));
        self.tx.send(Feed::Rows(rows)).is_ok()
    }

    /// Ends the feed: the rows left, or the query's failure.
    pub fn finish(mut self, result: ApiResult<()>) {
        match result {
            Ok(()) => {
                if self.flush() && !self.head_sent {
                    let _ = self.tx.send(Feed::Head(Value::Object(Map::new())));
                }
            }
            Err(e) => {
                self.flush();
                let _ = self.tx.send(Feed::Failed(e));
            }
        }
    }
}

/// `{"total_rows":3,"offset":0,"rows":[\r\n` → `{"total_rows":3,"offset":0}`.
fn head_of(piece: &[u8]) -> Value {
    let text = String::from_utf8_lossy(piece);
    let text = text.trim_end();
    let text = text.strip_suffix("\"rows\":[").unwrap_or(text);
    let text = text.strip_suffix(',').unwrap_or(text);
    serde_json::from_str(&format!("{text}}}")).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// What the list's response is made of, in order.
pub enum Piece {
    Head(StatusCode, Vec<(String, String)>),
    Data(Bytes),
    Failed(ApiError),
}

/// Bytes of chunks gathered before they are sent, unless the list waits for rows.
const OUT_BUFFER: usize = 16 << 10;

/// A running list: rows from the query's feed, answers to the client.
pub struct ListPump {
    feed: mpsc::Receiver<Feed>,
    rows: std::collections::VecDeque<Value>,
    http: tokio_mpsc::Sender<Piece>,
    out: Vec<u8>,
    started: bool,
    /// The client went away, or the feed ended.
    done: bool,
    code: u16,
    headers: Vec<(String, String)>,
    /// Headers the function gave that could not be read.
    bad_head: Option<ApiError>,
    /// The query's failure, reported once the function has ended.
    pub failed: Option<ApiError>,
    csp: Option<(String, String)>,
}

impl ListPump {
    pub fn new(
        state: &AppState,
        feed: mpsc::Receiver<Feed>,
        http: tokio_mpsc::Sender<Piece>,
    ) -> ListPump {
        ListPump {
            feed,
            rows: Default::default(),
            http,
            out: Vec::new(),
            started: false,
            done: false,
            code: 200,
            headers: Vec::new(),
            bad_head: None,
            failed: None,
            csp: showlist_csp(state),
        }
    }

    /// The head the feed starts with (`Err` when the query failed first).
    pub fn head(&mut self) -> ApiResult<Value> {
        match self.feed.recv() {
            Ok(Feed::Head(head)) => Ok(head),
            Ok(Feed::Failed(e)) => Err(e),
            Ok(Feed::Rows(_)) | Err(_) => Ok(Value::Object(Map::new())),
        }
    }

    /// Handles one of the list's answers: its response head (`fixup_headers`), then its
    /// chunks, which start the response if they are the first.
    pub fn answer(&mut self, message: &Value) {
        let Some(parts) = message.as_array() else {
            return;
        };
        if let Some(resp) = parts.get(2) {
            match External::parse(resp, 200) {
                Ok(ext) => {
                    self.code = ext.code.as_u16();
                    self.headers = ext.headers;
                    if let Some(csp) = &self.csp {
                        self.headers.insert(0, csp.clone());
                    }
                }
                Err(e) => self.bad_head = Some(e),
            }
        }
        let Some(Value::Array(chunks)) = parts.get(1) else {
            return;
        };
        if chunks.is_empty() {
            return;
        }
        if !self.started {
            if let Some(e) = self.bad_head.take() {
                self.fail(e);
                return;
            }
            self.started = true;
            let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::OK);
            let head = Piece::Head(code, std::mem::take(&mut self.headers));
            if self.http.blocking_send(head).is_err() {
                self.done = true;
            }
        }
        for chunk in chunks {
            match chunk {
                Value::String(s) => self.out.extend_from_slice(s.as_bytes()),
                other => self.out.extend_from_slice(other.to_string().as_bytes()),
            }
        }
        if self.out.len() >= OUT_BUFFER {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.out.is_empty() || !self.started {
            return;
        }
        let data = Bytes::from(std::mem::take(&mut self.out));
        if self.http.blocking_send(Piece::Data(data)).is_err() {
            self.done = true;
        }
    }

    /// Fails the list: a proper error response if nothing was sent yet, else the error as
    /// a last chunk (`chttpd:send_chunked_error`).
    pub fn fail(&mut self, e: ApiError) {
        if !self.started {
            self.started = true;
            let _ = self.http.blocking_send(Piece::Failed(e));
            return;
        }
        let (_, error, reason) = e.parts();
        let body = serde_json::json!({"error": error, "reason": reason});
        self.out.extend_from_slice(body.to_string().as_bytes());
        self.out.push(b'\n');
        self.flush();
    }

    /// Ends the response (CouchDB answers an empty 200 if the list never sent a chunk).
    pub fn finish(mut self) {
        if !self.started {
            self.started = true;
            let _ = self
                .http
                .blocking_send(Piece::Head(StatusCode::OK, Vec::new()));
        }
        self.flush();
    }
}

impl ListIo for ListPump {
    fn next_row(&mut self) -> Option<Value> {
        loop {
            if let Some(row) = self.rows.pop_front() {
                return Some(row);
            }
            if self.done {
                return None;
            }
            let next = match self.feed.try_recv() {
                Ok(feed) => Ok(feed),
                Err(mpsc::TryRecvError::Empty) => {
                    // Waiting for rows: what the function sent so far goes out now.
                    self.flush();
                    self.feed.recv().map_err(|_| ())
                }
                Err(mpsc::TryRecvError::Disconnected) => Err(()),
            };
            match next {
                Ok(Feed::Rows(rows)) => self.rows.extend(rows),
                Ok(Feed::Head(_)) => {}
                Ok(Feed::Failed(e)) => {
                    self.failed = Some(e);
                    self.done = true;
                }
                Err(()) => self.done = true,
            }
        }
    }

    fn send(&mut self, message: Value) {
        self.answer(&message);
    }
}

/// The list's response once its first piece is known: its head and a streamed body, or
/// the error it failed with before sending anything.
pub async fn list_response(mut rx: tokio_mpsc::Receiver<Piece>) -> Response {
    let (code, headers) = match rx.recv().await {
        Some(Piece::Head(code, headers)) => (code, headers),
        Some(Piece::Failed(e)) => return axum::response::IntoResponse::into_response(e),
        Some(Piece::Data(_)) | None => (StatusCode::OK, Vec::new()),
    };
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).filter_map(|piece| async move {
        match piece {
            Piece::Data(b) => Some(Ok::<_, std::io::Error>(b)),
            Piece::Head(..) | Piece::Failed(_) => None,
        }
    });
    let mut resp = Response::new(Body::from_stream(body));
    *resp.status_mut() = code;
    if let Err(e) = add_headers(&mut resp, &headers) {
        return axum::response::IntoResponse::into_response(e);
    }
    resp
}
