//! Design functions' answers as the query-server protocol gives them, and running a
//! list function: `["resp", resp]`, `["up", doc, resp]` and a function's response object
//! (`chttpd_external:parse_external_response`), read whoever produced them (the
//! in-process renderer or an external query server).
//!
//! A list runs on two blocking threads: the view (or `_all_docs`) query writes its rows
//! through the usual row writer into a bounded channel ([`RowSplitter`]), and the list
//! function pulls them one at a time with `getRow()` ([`ListPump`]), its chunks leaving
//! as [`Piece`]s as it sends them.

use crate::design_filter::ReqInfo;
use crate::render::{list_answer, DesignDoc, FnDb};
use crate::{blocking, Error, Node, Result};
use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value};
use settee_auth::UserCtx;
use settee_js::ListIo;
use settee_wire::mrargs::MrArgs;
use std::sync::{mpsc, Arc};
use tokio::sync::mpsc as tokio_mpsc;

/// A function's response object, read as `chttpd_external:parse_external_response` reads
/// it: `code`, `headers`, and a body from `body` (HTML by default), `base64` (binary) or
/// `json`; the default type is JSON. Anything else is an `external_response_error`.
#[derive(Debug)]
pub struct External {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body came from `json` (sent as `chttpd:send_json` sends it).
    pub json: bool,
}

impl External {
    /// Reads `resp`; `code` is the status unless `resp` names one.
    pub fn parse(resp: &Value, code: u16) -> Result<External> {
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
        if !(100..1000).contains(&code) {
            return Err(external_error(format!("{{code,{code}}}")));
        }
        Ok(External {
            code,
            headers,
            body: data,
            json: json.is_some(),
        })
    }
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

fn external_error(what: String) -> Error {
    Error::ExternalResponse(what)
}

/// The member `i` of a protocol answer, checking its tag.
pub fn answer_part<'a>(answer: &'a Value, tag: &str, i: usize) -> Result<&'a Value> {
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
    Failed(Error),
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
    pub fn finish(mut self, result: Result<()>) {
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

/// What the list's response is made of, in order: its head (status and headers) or,
/// before it, the failure that is the whole response; then data, and a failure after the
/// head is the response's last chunk (`chttpd:send_chunked_error`).
#[derive(Debug)]
pub enum Piece {
    Head(u16, Vec<(String, String)>),
    Data(Bytes),
    Failed(Error),
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
    bad_head: Option<Error>,
    /// The query's failure, reported once the function has ended.
    pub failed: Option<Error>,
    csp: Option<(String, String)>,
}

impl ListPump {
    /// `csp`: the `Content-Security-Policy` header a list's response gets, if any.
    pub fn new(
        csp: Option<(String, String)>,
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
            csp,
        }
    }

    /// The head the feed starts with (`Err` when the query failed first).
    pub fn head(&mut self) -> Result<Value> {
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
                    self.code = ext.code;
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
            let head = Piece::Head(self.code, std::mem::take(&mut self.headers));
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
    pub fn fail(&mut self, e: Error) {
        if self.started {
            self.flush();
        }
        self.started = true;
        let _ = self.http.blocking_send(Piece::Failed(e));
    }

    /// Ends the response (CouchDB answers an empty 200 if the list never sent a chunk).
    pub fn finish(mut self) {
        if !self.started {
            self.started = true;
            let _ = self.http.blocking_send(Piece::Head(200, Vec::new()));
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

/// A `_list` call: list function `name` of design document `ddoc` over view `view` of
/// `view_ddoc` (`ddoc` when `None`), or over `_all_docs` (`view` `_all_docs`), queried
/// with `args`.
pub struct ListCall {
    pub ddoc: String,
    pub name: String,
    pub view_ddoc: Option<String>,
    pub view: String,
    pub args: MrArgs,
    /// The request object the function is given.
    pub req: ReqInfo,
    /// The `Content-Security-Policy` header its response gets.
    pub csp: Option<(String, String)>,
}

/// Where a list's rows come from: a query writing the view's (or `_all_docs`')
/// response.
pub type RowQuery = Box<dyn FnOnce(&mut dyn FnMut(&[u8]) -> bool) -> Result<()> + Send>;

impl Node {
    /// Runs `call` for `user`: its view (or `_all_docs`) is found and the function checked
    /// before the list starts; then the response's pieces arrive on the receiver as the
    /// function sends them. No ETag: 3.5.2's clustered list path sends none (nor a 304).
    pub async fn list(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        call: ListCall,
    ) -> Result<tokio_mpsc::Receiver<Piece>> {
        let db = self.couch.get(db)?;
        let all_docs = if call.view == "_all_docs" {
            let q = crate::all_docs::Query::from_args(call.args.clone())?;
            Some(q.for_reader(&self.config, &db, user))
        } else {
            None
        };
        let reader = crate::replicator_read::reader(&db, user);
        let (node, d) = (self.clone(), db.clone());
        let (ddoc, name, args) = (call.ddoc, call.name.clone(), call.args);
        let (view_ddoc, view) = (call.view_ddoc, call.view);
        let (list_ddoc, query) = blocking::<_, Error>(move || {
            let list_ddoc = DesignDoc::open(&d, &ddoc)?;
            list_ddoc.require_function("lists", &name)?;
            crate::render::require_runner(&node, &list_ddoc)?;
            let query: RowQuery = match all_docs {
                Some(q) => Box::new(move |out| {
                    crate::all_docs::run(&d, &q, crate::all_docs::Namespace::All, out)
                }),
                None => {
                    let vname = view_ddoc.unwrap_or(ddoc);
                    let (g, n) = node.view_group(&d, &vname, &view)?;
                    let mut args = crate::views::ViewArgs::for_view(args, &g, n, &node.config)?;
                    args.reader = reader;
                    let views = node.views.clone();
                    Box::new(move |out| crate::views::run(&views, &d, &g, n, &args, out))
                }
            };
            Ok((list_ddoc, query))
        })
        .await?;
        let fn_db = FnDb::local(self, &db);
        Ok(self.run_list(fn_db, list_ddoc, call.name, query, call.req, call.csp))
    }

    /// Runs list function `name` of `ddoc` over `query`'s rows (`req`: the request object
    /// the function is given; `csp`: the header its response gets). The response's
    /// pieces arrive on the receiver as the function sends them.
    pub fn run_list(
        self: &Arc<Self>,
        db: FnDb,
        ddoc: DesignDoc,
        name: String,
        query: RowQuery,
        req: ReqInfo,
        csp: Option<(String, String)>,
    ) -> tokio_mpsc::Receiver<Piece> {
        let (feed_tx, feed_rx) = mpsc::sync_channel(16);
        let (http_tx, http_rx) = tokio_mpsc::channel(8);
        tokio::task::spawn_blocking(move || {
            let mut split = RowSplitter::new(feed_tx);
            let result = query(&mut |piece| split.write(piece));
            split.finish(result);
        });
        let node = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut pump = ListPump::new(csp, feed_rx, http_tx);
            let ran = pump.head().and_then(|head| {
                let req = req.render_json_for(&node, &db)?;
                list_answer(&node, &db, &ddoc, &name, &head, &req, &mut pump)
            });
            match ran {
                Ok(end) => {
                    pump.answer(&end);
                    if let Some(e) = pump.failed.take() {
                        pump.fail(e);
                    }
                }
                Err(e) => pump.fail(e),
            }
            pump.finish();
        });
        http_rx
    }
}
