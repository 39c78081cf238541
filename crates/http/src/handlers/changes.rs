//! `_changes` (normal, longpoll, continuous, eventsource) and `_db_updates`.

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::{delayed, stream, stream_async, JSON};
use crate::req::Params;
use crate::{AppState, Req};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use settee_core::{SeqArg, SeqCodec};
use settee_node::changes::{self, wait_past, ChangesOpts, FeedOut, FilterSpec, Live, ShownSeq};
use settee_node::fabric::DbRef;
use settee_node::Fabric;
use std::time::Duration;
use tokio::sync::mpsc;

/// What comes between two rows of a normal or longpoll feed (CouchDB's `prepend`).
const ROW_SEPARATOR: &[u8] = b",\r\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feed {
    Normal,
    Longpoll,
    Continuous,
    EventSource,
}

impl Feed {
    /// `_changes`'s `feed` (`live` is CouchDB's other name for `continuous`).
    fn for_changes(p: &Params) -> ApiResult<Feed> {
        Ok(match p.get("feed").unwrap_or("normal") {
            "normal" => Feed::Normal,
            "longpoll" => Feed::Longpoll,
            "continuous" | "live" => Feed::Continuous,
            "eventsource" => Feed::EventSource,
            _ => {
                return Err(ApiError::bad_request(
                    "Supported `feed` types: normal, continuous, live, longpoll, eventsource",
                ))
            }
        })
    }

    fn parse(p: &Params) -> ApiResult<Feed> {
        Ok(match p.get("feed").unwrap_or("normal") {
            "normal" => Feed::Normal,
            "longpoll" => Feed::Longpoll,
            "continuous" => Feed::Continuous,
            "eventsource" => Feed::EventSource,
            other => return Err(ApiError::bad_request(format!("Supported `feed` types: normal, continuous, live, longpoll, eventsource (got {other})"))),
        })
    }
}

fn millis(p: &Params, k: &str) -> ApiResult<Option<Duration>> {
    Ok(p.uint(k)?.map(Duration::from_millis))
}

/// `heartbeat` (ms, or `true` for 60 s) and `timeout` (ms, default 60 s) of a feed.
fn feed_timing(p: &Params) -> ApiResult<(Option<Duration>, Duration)> {
    const DEFAULT: Duration = Duration::from_millis(60_000);
    let heartbeat = match p.get("heartbeat") {
        None => None,
        Some("true") => Some(DEFAULT),
        Some(_) => millis(p, "heartbeat")?,
    };
    Ok((heartbeat, millis(p, "timeout")?.unwrap_or(DEFAULT)))
}

/// The end of a `{"results":[…` body (normal and longpoll feeds).
fn results_end(seqs: &SeqCodec, last: &ShownSeq, pending: u64) -> String {
    let last_seq = Value::String(last.render(seqs));
    format!("\n],\n\"last_seq\":{last_seq},\"pending\":{pending}}}\n")
}

/// A whole normal response body.
fn normal_body(
    state: &AppState,
    db: &str,
    o: &ChangesOpts,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> ApiResult<()> {
    out(b"{\"results\":[\n");
    let mut first = true;
    let end = Fabric::changes(&*state.fabric, db, o, &mut |_, row| {
        let ok = out(if first { b"" } else { ROW_SEPARATOR }) && out(row);
        first = false;
        ok
    })?;
    out(results_end(&o.seqs, &end.last_seq, end.pending).as_bytes());
    Ok(())
}

pub async fn changes(state: AppState, db: DbRef, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,POST,HEAD")?;
    let post = req.method == "POST";
    let mut body = if post {
        crate::req::require_json(&req.headers)?;
        let b = req.bytes().await?;
        if b.is_empty() {
            None
        } else {
            match crate::req::parse_json(&b)? {
                v @ Value::Object(_) => Some(v),
                _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
            }
        }
    } else {
        None
    };
    let changes_timeout =
        Duration::from_millis(state.config.get_u64("chttpd", "changes_timeout", 60_000));
    let (all, params) = changes::fold_params(&req.params);
    let mut o = ChangesOpts::parse(&all, &params, changes_timeout, db.seqs())?;
    // An EventSource reconnecting says where it stopped.
    if params.get("feed") == Some("eventsource") {
        if let Some(id) = req.header("last-event-id") {
            o.since = o.seqs.since(id)?;
        }
    }
    let given = given_filter(&db, &mut body)?;
    // `doc_ids` and `view` are read as sent (CouchDB's `configure_filter`); `filter` folded.
    let spec = FilterSpec::parse(params.get("filter"), &req.params, post, body.as_ref())?;
    let o = match given {
        Some((design, given_req)) => {
            let engine = db.engine("_changes")?;
            let (node, user) = (&state.node, &req.user);
            node.given_changes_filter(engine, user, spec, design, given_req, o)
                .await?
        }
        None => {
            let req_info = Box::new(|| crate::req_info::of_request(&req, body.as_ref()));
            Fabric::changes_filter(&*state.fabric, &db.name, &req.user, spec, o, req_info).await?
        }
    };
    match Feed::for_changes(&params)? {
        Feed::Normal => {
            // chttpd_db: the ETag is the database's info, whatever the query, and a match is
            // a 304.
            let (fabric, name) = (state.fabric.clone(), db.name.clone());
            let info = super::blocking(move || Ok(Fabric::db_info(&*fabric, &name)?)).await?;
            let etag = settee_node::render::make_etag(info.to_string().as_bytes());
            let tag = HeaderValue::from_str(&etag).expect("etags are ASCII");
            if crate::req::etag_matches(&req.headers, &etag) {
                return Ok(crate::reply::not_modified(tag));
            }
            let state = state.clone();
            let mut resp = stream(JSON, move |sink| {
                normal_body(&state, &db.name, &o, &mut |b| sink.write(b))
            })
            .await;
            resp.headers_mut().insert(header::ETAG, tag);
            Ok(resp)
        }
        feed => {
            let max_duration = state
                .config
                .get("fabric", "changes_duration")
                .and_then(|v| v.trim().parse().ok())
                .map(Duration::from_millis);
            let live = Live {
                longpoll: feed == Feed::Longpoll,
                max_duration,
            };
            Ok(live_feed(state.clone(), db.name.clone(), o, feed, live).await)
        }
    }
}

/// A design document given to a shard copy for its filter, and a function's request
/// object.
type GivenFilter = (serde_json::Map<String, Value>, Option<Value>);

/// The design document (and a filter function's request object) a shard copy's
/// coordinator gives in the body (see `Node::given_changes_filter`), taken out of it; any
/// other database ignores those members, as it ignores every unknown one.
fn given_filter(db: &DbRef, body: &mut Option<Value>) -> ApiResult<Option<GivenFilter>> {
    let Some(Value::Object(members)) = body.as_mut() else {
        return Ok(None);
    };
    if !settee_core::is_shard_name(&db.name) {
        return Ok(None);
    }
    let given_req = members.shift_remove(changes::GIVEN_REQ);
    match members.shift_remove(changes::GIVEN_DESIGN) {
        None => Ok(None),
        Some(Value::Object(design)) => Ok(Some((design, given_req))),
        Some(_) => Err(ApiError::bad_request("A given design must be an object.")),
    }
}

/// The output of a longpoll, continuous or eventsource feed, as CouchDB's `changes_callback`
/// writes it: rows are buffered and go out when the feed waits or ends; nothing at all (not
/// even the status) is sent before the first chunk.
struct LiveOut {
    feed: Feed,
    /// Writes an eventsource row's `id:`.
    seqs: SeqCodec,
    tx: mpsc::Sender<ApiResult<Bytes>>,
    buf: Vec<u8>,
    /// Rows are in `buf` (a longpoll's `buf` also starts with its opening).
    rows_buffered: bool,
    /// A row has been written (the next longpoll row needs a separator).
    any_row: bool,
    /// CouchDB's `chunks_sent`: rows buffered plus chunks sent.
    chunks: u64,
    open: bool,
}

impl LiveOut {
    fn new(feed: Feed, seqs: SeqCodec, tx: mpsc::Sender<ApiResult<Bytes>>) -> LiveOut {
        let buf = if feed == Feed::Longpoll {
            b"{\"results\":[\n".to_vec()
        } else {
            Vec::new()
        };
        LiveOut {
            feed,
            seqs,
            tx,
            buf,
            rows_buffered: false,
            any_row: false,
            chunks: 0,
            open: true,
        }
    }

    async fn send(&mut self, extra: &[u8]) {
        let mut chunk = std::mem::take(&mut self.buf);
        chunk.extend_from_slice(extra);
        self.rows_buffered = false;
        if self.open && !chunk.is_empty() {
            self.open = self.tx.send(Ok(Bytes::from(chunk))).await.is_ok();
        }
    }
}

impl FeedOut for LiveOut {
    /// Adds a row (from a blocking thread), sending the buffer once it is large.
    fn row(&mut self, seq_shown: Option<ShownSeq>, row: &[u8]) -> bool {
        match self.feed {
            Feed::Longpoll => {
                if self.any_row {
                    self.buf.extend_from_slice(ROW_SEPARATOR);
                }
                self.buf.extend_from_slice(row);
            }
            Feed::EventSource => {
                // `id:` is the row's seq as JSON (quoted, or `null`), as CouchDB's.
                let id = seq_shown.map_or(Value::Null, |s| Value::String(s.render(&self.seqs)));
                self.buf.extend_from_slice(b"data: ");
                self.buf.extend_from_slice(row);
                self.buf
                    .extend_from_slice(format!("\nid: {id}\n\n").as_bytes());
            }
            Feed::Continuous | Feed::Normal => {
                self.buf.extend_from_slice(row);
                self.buf.push(b'\n');
            }
        }
        self.rows_buffered = true;
        self.any_row = true;
        self.chunks += 1;
        if self.buf.len() >= 32 << 10 && self.open {
            let chunk = Bytes::from(std::mem::take(&mut self.buf));
            self.open = self.tx.blocking_send(Ok(chunk)).is_ok();
        }
        self.open
    }

    fn is_open(&self) -> bool {
        self.open
    }

    /// Before waiting: the buffered rows go out; a feed that has sent nothing yet sends a
    /// newline, so the client has the status and headers while it waits.
    fn waiting(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.rows_buffered {
                self.send(b"").await;
            } else if self.chunks == 0 {
                self.chunks = 1;
                self.send(b"\n").await;
            }
        })
    }

    /// A heartbeat, also sent when an update wakes the feed.
    fn beat(&mut self) -> BoxFuture<'_, ()> {
        self.chunks += 1;
        let beat: &[u8] = if self.feed == Feed::EventSource {
            b"event: heartbeat\ndata: \n\n"
        } else {
            b"\n"
        };
        Box::pin(self.send(beat))
    }

    fn gone(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tx.closed())
    }

    fn end(self: Box<Self>, end: settee_node::Result<(ShownSeq, u64)>) -> BoxFuture<'static, ()> {
        Box::pin(self.finish(end))
    }
}

impl LiveOut {
    async fn finish(mut self: Box<Self>, end: settee_node::Result<(ShownSeq, u64)>) {
        match end {
            Ok((last, pending)) => {
                let tail = match self.feed {
                    Feed::Longpoll => results_end(&self.seqs, &last, pending),
                    Feed::Continuous | Feed::Normal => {
                        let last_seq = Value::String(last.render(&self.seqs));
                        format!("{{\"last_seq\":{last_seq},\"pending\":{pending}}}\n")
                    }
                    Feed::EventSource => String::new(),
                };
                self.send(tail.as_bytes()).await
            }
            Err(e) => {
                let _ = self.tx.send(Err(e.into())).await;
            }
        }
    }
}

/// One client of a live feed, counted in `couchdb.httpd.clients_requesting_changes` for
/// as long as the feed runs.
struct LiveClient;

impl LiveClient {
    fn new() -> LiveClient {
        settee_metrics::global().clients_requesting_changes.inc();
        LiveClient
    }
}

impl Drop for LiveClient {
    fn drop(&mut self) {
        settee_metrics::global().clients_requesting_changes.dec();
    }
}

/// A longpoll, continuous or eventsource feed: the node runs it ([`Fabric::live_changes`])
/// into a [`LiveOut`], counted as a client for as long as it runs.
async fn live_feed(
    state: AppState,
    db: String,
    o: ChangesOpts,
    feed: Feed,
    live: Live,
) -> Response {
    let (tx, rx) = mpsc::channel::<ApiResult<Bytes>>(16);
    let content_type = if feed == Feed::EventSource {
        "text/event-stream"
    } else {
        JSON
    };
    let out = Box::new(LiveOut::new(feed, o.seqs.clone(), tx));
    tokio::spawn(async move {
        let _client = LiveClient::new();
        Fabric::live_changes(&*state.fabric, &db, o, live, out).await
    });
    let mut resp = delayed(content_type, rx).await;
    if content_type != JSON {
        resp.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-cache"),
        );
    }
    resp
}

// ---- _db_updates ------------------------------------------------------------------------

pub async fn db_updates(state: &AppState, req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let p = &req.params;
    let feed = Feed::parse(p)?;
    let couch = state.couch.clone();
    // `_db_updates` sequences are those of CouchDB's `_global_changes` database: q=1.
    let codec = SeqCodec::new(settee_core::node::name(), 1, couch.db_events_uuid());
    let mut since = match p.get("since") {
        Some(s) => match codec.since(s)? {
            SeqArg::Now => couch.db_events_seq(),
            SeqArg::Seq(n) => n,
            // Only a clustered database's codec leaves a vector unresolved.
            SeqArg::Vector(_) => 0,
        },
        None => 0,
    };
    let (heartbeat, timeout) = feed_timing(p)?;
    let seq = |n: u64| Value::String(codec.changes_seq(n));
    let row = |e: &settee_db::DbEvent| json!({"db_name": e.db, "type": e.kind.as_str(), "seq": seq(e.seq)});
    let mut rx = couch.watch_db_events();
    if matches!(feed, Feed::Normal | Feed::Longpoll) {
        let mut events = couch.db_events_since(since)?;
        if events.is_empty() && feed == Feed::Longpoll && wait_past(&mut rx, since, timeout).await {
            events = couch.db_events_since(since)?;
        }
        let last = events.last().map_or(since, |e| e.seq);
        let results: Vec<Value> = events.iter().map(row).collect();
        return Ok(crate::reply::json(
            StatusCode::OK,
            &json!({"results": results, "last_seq": seq(last)}),
        ));
    }
    let eventsource = feed == Feed::EventSource;
    let (tx, out) = mpsc::channel::<Bytes>(16);
    let codec = codec.clone();
    tokio::spawn(async move {
        let seq = |n: u64| Value::String(codec.changes_seq(n));
        let row = |e: &settee_db::DbEvent| json!({"db_name": e.db, "type": e.kind.as_str(), "seq": seq(e.seq)});
        while let Ok(events) = couch.db_events_since(since) {
            for e in &events {
                since = e.seq;
                let line = serde_json::to_string(&row(e)).expect("json");
                let chunk = if eventsource {
                    format!("data: {line}\nid: {}\n\n", seq(e.seq))
                } else {
                    format!("{line}\n")
                };
                if tx.send(Bytes::from(chunk)).await.is_err() {
                    return;
                }
            }
            if !wait_past(&mut rx, since, heartbeat.unwrap_or(timeout)).await {
                if heartbeat.is_none() {
                    break;
                }
                if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
            }
        }
        let _ = tx
            .send(Bytes::from(format!("{{\"last_seq\":{}}}\n", seq(since))))
            .await;
    });
    Ok(stream_async(
        if eventsource {
            "text/event-stream"
        } else {
            JSON
        },
        out,
    ))
}
