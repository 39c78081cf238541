//! A database of an HTTP peer (Apache CouchDB, another Settee, anything that speaks the
//! protocol), reached with `reqwest` over HTTP or HTTPS (rustls).
//!
//! Requests that fail in a way a retry may cure (a connection error, a timeout, a 5xx, a
//! 429, a 408) are retried `retries` times, waiting 250 ms and doubling up to 5 minutes, as
//! CouchDB's replicator does; a 401 or 403 fails at once. A replication that is stopped
//! while a request waits to be retried ends that wait at once ([`Remote::watching`]). A
//! streamed document write (`multipart/related` `PUT`) is sent once: its body cannot be
//! replayed, so the algorithm copies the whole document again instead
//! ([`crate::streamed`]).

use crate::endpoint::{
    ChangeRow, Changes, Content, Doc, Endpoint, Fetch, Filter, Follows, Missing, PeerInfo, Wait,
    WriteFailure,
};
use crate::error::{Cause, RequestFailed};
use crate::{Error, Result};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING,
    CONTENT_LENGTH, CONTENT_TYPE,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};
use std::time::Duration;
use tokio::sync::watch;

pub use reqwest::Url;

/// Characters a document id keeps unescaped in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// How to reach a peer's database.
#[derive(Clone, Debug)]
pub struct RemoteSpec {
    /// The database's URL, possibly with `user:password@`.
    pub url: String,
    /// Extra request headers (`headers` of the replication document).
    pub headers: Map<String, Value>,
    /// `auth: {"basic": {"username", "password"}}`.
    pub basic: Option<(String, String)>,
    /// How long the peer may stay silent (connecting, or mid-request) before the request
    /// fails and is retried.
    pub timeout: Duration,
    pub retries: u32,
    /// Connections kept open to the peer (`http_connections`).
    pub connections: usize,
}

/// Signs each request to a peer: the header (name and value) for a request of this method
/// on this target (path and query, as sent).
pub type Signer = std::sync::Arc<dyn Fn(&str, &str) -> (&'static str, String) + Send + Sync>;

/// A database of an HTTP peer.
#[derive(Clone)]
pub struct Remote {
    client: reqwest::Client,
    /// The database URL without credentials, ending in `/`.
    base: String,
    headers: HeaderMap,
    signer: Option<Signer>,
    retries: u32,
    /// Set when the replication stops: a retry's wait ends at once.
    stop: Option<watch::Receiver<bool>>,
}

impl Remote {
    pub fn new(spec: &RemoteSpec) -> Result<Remote> {
        let bad = |why: &str| {
            Error::BadRequest(format!(
                "Invalid URL `{}`: {why}",
                without_credentials(&spec.url)
            ))
        };
        let mut url = reqwest::Url::parse(&spec.url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("not http or https"));
        }
        let mut headers = HeaderMap::new();
        let userinfo = (!url.username().is_empty()).then(|| {
            let user = percent_encoding::percent_decode_str(url.username())
                .decode_utf8_lossy()
                .into_owned();
            let pass = url
                .password()
                .map(|p| {
                    percent_encoding::percent_decode_str(p)
                        .decode_utf8_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            (user, pass)
        });
        let _ = url.set_username("");
        let _ = url.set_password(None);
        // `auth.basic` wins over credentials in the URL, as in CouchDB 3.
        if let Some((user, pass)) = spec.basic.clone().or(userinfo) {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            headers.insert(
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {token}")).map_err(|_| bad("credentials"))?,
            );
        }
        for (name, value) in &spec.headers {
            let (Ok(name), Some(Ok(value))) = (
                HeaderName::from_bytes(name.as_bytes()),
                value.as_str().map(HeaderValue::from_str),
            ) else {
                return Err(Error::BadRequest(format!("Invalid header `{name}`")));
            };
            headers.insert(name, value);
        }
        let mut base = url.to_string();
        if !base.ends_with('/') {
            base.push('/');
        }
        // `timeout` bounds silence, not a whole exchange (CouchDB's inactivity timeout): a
        // large batch may take longer to transfer, and a changes read waits for changes.
        let client = reqwest::Client::builder()
            .read_timeout(spec.timeout)
            .connect_timeout(spec.timeout)
            .pool_max_idle_per_host(spec.connections)
            .user_agent(concat!("Settee/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        Ok(Remote {
            client,
            base,
            headers,
            signer: None,
            retries: spec.retries,
            stop: None,
        })
    }

    /// This peer with every request signed by `signer` (a cluster member's requests to
    /// another member).
    pub fn signed(self, signer: Signer) -> Remote {
        Remote {
            signer: Some(signer),
            ..self
        }
    }

    /// A request to `url` with the peer's headers (and signature).
    fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let mut req = (self.client.request(method.clone(), url)).headers(self.headers.clone());
        if let (Some(sign), Ok(u)) = (&self.signer, reqwest::Url::parse(url)) {
            let target = match u.query() {
                Some(q) => format!("{}?{q}", u.path()),
                None => u.path().to_owned(),
            };
            let (name, value) = sign(method.as_str(), &target);
            req = req.header(name, value);
        }
        req
    }

    /// This peer for one run of a replication: waits between retries end when `stop` is
    /// set, and the request fails with [`Error::Cancelled`].
    pub fn watching(&self, stop: watch::Receiver<bool>) -> Remote {
        Remote {
            stop: Some(stop),
            ..self.clone()
        }
    }

    /// Waits `wait` before a retry; `false` if the replication stopped meanwhile.
    async fn pause(&self, wait: Duration) -> bool {
        let Some(mut stop) = self.stop.clone() else {
            tokio::time::sleep(wait).await;
            return true;
        };
        if *stop.borrow() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = stop.wait_for(|s| *s) => false,
        }
    }

    /// Sends a request (retrying what may be cured by retrying); the status and JSON body.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value)> {
        let url = format!("{}{path}", self.base);
        let mut wait = Duration::from_millis(250);
        let mut attempt = 0;
        loop {
            let mut req = (self.request(method.clone(), &url)).header("Accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            let cause = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    if retried(status) {
                        Cause::Status(status.as_u16())
                    } else {
                        match resp.bytes().await {
                            Ok(b) => {
                                let v = serde_json::from_slice(&b).unwrap_or(Value::Null);
                                if status == StatusCode::UNAUTHORIZED
                                    || status == StatusCode::FORBIDDEN
                                {
                                    tracing::warn!("replicator: {url} answered {status}: {v}");
                                    return Err(self.refused(status));
                                }
                                return Ok((status, v));
                            }
                            Err(e) => cause_of(&e),
                        }
                    }
                }
                Err(e) => cause_of(&e),
            };
            let failure = RequestFailed {
                method: method.as_str().to_string(),
                url: url.clone(),
                cause,
            };
            self.backoff(&mut attempt, &mut wait, failure).await?;
        }
    }

    /// After a failure a retry may cure: waits before the next attempt (250 ms, doubling up
    /// to 5 minutes), or gives up once the retries are spent; a stopped replication ends
    /// the wait at once.
    async fn backoff(
        &self,
        attempt: &mut u32,
        wait: &mut Duration,
        failure: RequestFailed,
    ) -> Result<()> {
        *attempt += 1;
        if *attempt > self.retries {
            return Err(Error::RequestFailed(failure));
        }
        tracing::warn!("replicator: retrying in {wait:?}: {failure}");
        if !self.pause(*wait).await {
            return Err(Error::Cancelled);
        }
        *wait = (*wait * 2).min(Duration::from_secs(300));
        Ok(())
    }

    /// A `GET` whose body is read as it comes (attachment content), retried as
    /// [`Remote::call`] retries until the peer answers; `gzip` accepts gzip-encoded
    /// content.
    async fn open(&self, path: &str, gzip: bool) -> Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        let (mut attempt, mut wait) = (0, Duration::from_millis(250));
        loop {
            let req = (self.request(Method::GET, &url))
                .header(ACCEPT_ENCODING, if gzip { "gzip" } else { "identity" });
            let cause = match req.send().await {
                Ok(resp) if retried(resp.status()) => Cause::Status(resp.status().as_u16()),
                Ok(resp) => return Ok(resp),
                Err(e) => cause_of(&e),
            };
            let failure = RequestFailed {
                method: "GET".into(),
                url: url.clone(),
                cause,
            };
            self.backoff(&mut attempt, &mut wait, failure).await?;
        }
    }

    /// A 401 or 403 as CouchDB reports it: `unauthorized` naming the database, or
    /// `forbidden` with the database's URL alone (the peer's own reason is only logged).
    fn refused(&self, status: StatusCode) -> Error {
        let reason = if status == StatusCode::FORBIDDEN {
            self.base.clone()
        } else {
            format!("unauthorized to access or create database {}", self.base)
        };
        Error::Unauthorized {
            status: status.as_u16(),
            reason,
        }
    }

    /// A successful answer's body, or the peer's error as a protocol failure.
    async fn ok(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let (status, v) = self.call(method, path, body).await?;
        if status.is_success() {
            Ok(v)
        } else if path.is_empty() {
            // CouchDB opens a peer's database with a GET: any answer but a success (or
            // 401/403) means it is not there.
            Err(Error::DbNotFound(format!("could not open {}", self.base)))
        } else {
            Err(Error::Protocol(format!(
                "{}{path} answered {status}: {v}",
                self.base
            )))
        }
    }

    /// A document (the latest revision), if it exists.
    pub async fn get_doc(&self, id: &str) -> Result<Option<Value>> {
        let (status, v) = self.call(Method::GET, &doc_path(id), None).await?;
        Ok(status.is_success().then_some(v))
    }

    /// Documents at these revisions, with their history and the latest leaf after each
    /// (`_bulk_get?revs=true&latest=true` plus `atts`: `attachments=true` or
    /// `att_encoding_info=true`); a peer without `_bulk_get` is read with one `open_revs`
    /// `GET` a document.
    async fn fetch(&self, wanted: Vec<(String, String)>, atts: &str) -> Result<Vec<Value>> {
        let docs: Vec<Value> = wanted
            .iter()
            .map(|(id, rev)| json!({"id": id, "rev": rev}))
            .collect();
        let (status, v) = self
            .call(
                Method::POST,
                &format!("_bulk_get?revs=true&latest=true&{atts}=true"),
                Some(&json!({"docs": docs})),
            )
            .await?;
        if status == StatusCode::NOT_FOUND
            || status == StatusCode::METHOD_NOT_ALLOWED
            || status == StatusCode::BAD_REQUEST
        {
            let mut out = Vec::new();
            for (id, rev) in wanted {
                let path = format!(
                    "{}?{}",
                    utf8_percent_encode(&id, SEGMENT),
                    query(&[
                        ("revs", "true".into()),
                        ("latest", "true".into()),
                        (atts, "true".into()),
                        ("open_revs", json!([rev]).to_string()),
                    ])
                );
                let v = self.ok(Method::GET, &path, None).await?;
                out.extend(
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r.get("ok").cloned()),
                );
            }
            return Ok(out);
        }
        if !status.is_success() {
            return Err(Error::Protocol(format!(
                "{}_bulk_get answered {status}: {v}",
                self.base
            )));
        }
        Ok(v.get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|r| {
                r.get("docs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .filter_map(|d| d.get("ok").cloned())
            .collect())
    }

    fn local_path(id: &str) -> String {
        let rest = id.strip_prefix("_local/").unwrap_or(id);
        format!("_local/{}", utf8_percent_encode(rest, SEGMENT))
    }
}

/// Why a request failed, as CouchDB's HTTP client tells the cases apart.
/// An answer a retry may cure: a 5xx, 429 or 408.
fn retried(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

fn cause_of(e: &reqwest::Error) -> Cause {
    if e.is_timeout() {
        return Cause::Timeout;
    }
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut text = String::new();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Cause::Refused,
                std::io::ErrorKind::TimedOut => return Cause::Timeout,
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::BrokenPipe => return Cause::Closed,
                _ => {}
            }
        }
        text = s.to_string();
        source = s.source();
    }
    let all = format!("{e} {text}").to_ascii_lowercase();
    if all.contains("dns error") || all.contains("failed to lookup address") {
        Cause::Nxdomain
    } else if e.is_body() || e.is_decode() || all.contains("connection closed") {
        Cause::Closed
    } else {
        Cause::Other(text)
    }
}

/// A URL without its credentials, as CouchDB 3 shows endpoints (it moves them out of the
/// URL when it parses a replication).
pub fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

fn seq_param(seq: &Value) -> String {
    match seq {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn query(pairs: &[(&str, String)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// A document's path under the database URL (a design document's `/` kept).
fn doc_path(id: &str) -> String {
    match id.strip_prefix("_design/") {
        Some(rest) => format!("_design/{}", utf8_percent_encode(rest, SEGMENT)),
        None => utf8_percent_encode(id, SEGMENT).to_string(),
    }
}

/// An error with its causes, for the log (reqwest's own text hides them).
/// A request that failed in a way a retry may cure.
fn failed(method: &str, url: &str, cause: Cause) -> Error {
    Error::RequestFailed(RequestFailed {
        method: method.into(),
        url: url.into(),
        cause,
    })
}

fn once(bytes: Vec<u8>) -> Content {
    Box::pin(futures_util::stream::once(std::future::ready(Ok(
        Bytes::from(bytes),
    ))))
}

/// The framing of a streamed document write, as CouchDB's replicator frames it
/// (`couch_doc:doc_to_multi_part_stream`): the JSON part, then per attachment a part with
/// `Content-Disposition` (its name), `Content-Type`, `Content-Length` and, for
/// gzip-encoded content, `Content-Encoding`; each part's bytes are the attachment's stored
/// bytes.
struct Multipart {
    content_type: String,
    /// The opening boundary, the JSON part's header and the JSON.
    head: Vec<u8>,
    /// Before each attachment's bytes: the boundary and the part's headers.
    parts: Vec<Vec<u8>>,
    /// The closing boundary.
    tail: Vec<u8>,
}

impl Multipart {
    fn new(json: &[u8], doc: &Value, atts: &[Follows]) -> Multipart {
        let boundary = hex::encode(rand::random::<[u8; 16]>());
        let mut head =
            format!("--{boundary}\r\nContent-Type: application/json\r\n\r\n").into_bytes();
        head.extend_from_slice(json);
        let entries = doc.get("_attachments").and_then(Value::as_object);
        let parts = atts
            .iter()
            .map(|f| {
                let entry = entries.and_then(|e| e.get(&f.name));
                let field = |k: &str| entry.and_then(|a| a.get(k)).and_then(Value::as_str);
                // Header text a name or type could break is left out: parts are matched
                // in order anyway.
                let plain = |v: &str| !v.chars().any(|c| c.is_control() || c == '"');
                let mut h = format!("\r\n--{boundary}");
                if plain(&f.name) {
                    h.push_str(&format!(
                        "\r\nContent-Disposition: attachment; filename=\"{}\"",
                        f.name
                    ));
                }
                if let Some(ct) = field("content_type").filter(|t| plain(t)) {
                    h.push_str(&format!("\r\nContent-Type: {ct}"));
                }
                h.push_str(&format!("\r\nContent-Length: {}", f.length));
                if field("encoding") == Some("gzip") {
                    h.push_str("\r\nContent-Encoding: gzip");
                }
                h.push_str("\r\n\r\n");
                h.into_bytes()
            })
            .collect();
        Multipart {
            content_type: format!("multipart/related; boundary=\"{boundary}\""),
            head,
            parts,
            tail: format!("\r\n--{boundary}--").into_bytes(),
        }
    }

    /// The body's length: every piece of framing and every attachment's bytes.
    fn length(&self, atts: &[Follows]) -> u64 {
        let framing =
            self.head.len() + self.parts.iter().map(Vec::len).sum::<usize>() + self.tail.len();
        framing as u64 + atts.iter().map(|f| f.length).sum::<u64>()
    }
}

impl Endpoint for Remote {
    fn name(&self) -> String {
        self.base.clone()
    }

    async fn info(&self) -> Result<PeerInfo> {
        let v = self.ok(Method::GET, "", None).await?;
        if v.get("update_seq").is_none() || v.get("instance_start_time").is_none() {
            return Err(Error::DbNotFound(format!("could not open {}", self.base)));
        }
        Ok(PeerInfo {
            update_seq: v.get("update_seq").cloned().unwrap_or(Value::Null),
            instance_start_time: v
                .get("instance_start_time")
                .and_then(Value::as_str)
                .unwrap_or("0")
                .to_string(),
        })
    }

    async fn create(&self, params: &Map<String, Value>) -> Result<()> {
        let pairs: Vec<(&str, String)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), seq_param(v)))
            .collect();
        let path = if pairs.is_empty() {
            String::new()
        } else {
            format!("?{}", query(&pairs))
        };
        let (status, v) = self.call(Method::PUT, &path, None).await?;
        if status.is_success() || status == StatusCode::PRECONDITION_FAILED {
            Ok(())
        } else {
            Err(Error::Protocol(format!(
                "creating {} answered {status}: {v}",
                self.base
            )))
        }
    }

    async fn get_local(&self, id: &str) -> Result<Option<Value>> {
        let (status, v) = self.call(Method::GET, &Self::local_path(id), None).await?;
        match status {
            s if s.is_success() => Ok(Some(v)),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(Error::Protocol(format!(
                "reading {id} from {} answered {s}: {v}",
                self.base
            ))),
        }
    }

    async fn put_local(&self, id: &str, doc: Value) -> Result<String> {
        let v = self
            .ok(Method::PUT, &Self::local_path(id), Some(&doc))
            .await?;
        v.get("rev")
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "{}: a write answered without `rev`: {v}",
                    self.base
                ))
            })
    }

    async fn changes(
        &self,
        since: &Value,
        limit: usize,
        filter: &Filter,
        wait: Wait,
    ) -> Result<Changes> {
        let mut pairs = vec![
            ("style", "all_docs".to_string()),
            ("since", seq_param(since)),
            ("limit", limit.to_string()),
        ];
        match wait {
            Wait::No => pairs.push(("feed", "normal".into())),
            Wait::UpTo(ms) => {
                pairs.push(("feed", "longpoll".into()));
                pairs.push(("timeout", ms.to_string()));
            }
        }
        let body = match filter {
            Filter::All => None,
            Filter::DocIds(ids) => {
                pairs.push(("filter", "_doc_ids".into()));
                Some(json!({"doc_ids": ids}))
            }
            Filter::Selector(s) => {
                pairs.push(("filter", "_selector".into()));
                Some(json!({"selector": s}))
            }
            Filter::Design { name, query_params } => {
                pairs.push(("filter", name.clone()));
                for (k, v) in query_params {
                    pairs.push((k.as_str(), seq_param(v)));
                }
                None
            }
        };
        let path = format!("_changes?{}", query(&pairs));
        let method = if body.is_some() {
            Method::POST
        } else {
            Method::GET
        };
        let v = self.ok(method, &path, body.as_ref()).await?;
        let rows = v
            .get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                Error::Protocol(format!("{}_changes answered without results", self.base))
            })?
            .iter()
            .filter_map(ChangeRow::from_json)
            .collect();
        Ok(Changes {
            rows,
            last_seq: v.get("last_seq").cloned().unwrap_or_else(|| since.clone()),
        })
    }

    async fn revs_diff(&self, revs: Vec<(String, Vec<String>)>) -> Result<Vec<Missing>> {
        let body: Map<String, Value> = revs.into_iter().map(|(id, r)| (id, json!(r))).collect();
        let v = self
            .ok(Method::POST, "_revs_diff", Some(&Value::Object(body)))
            .await?;
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(v.as_object()
            .map(|m| {
                m.iter()
                    .map(|(id, d)| Missing {
                        id: id.clone(),
                        revs: strings(d.get("missing")),
                        possible_ancestors: strings(d.get("possible_ancestors")),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn bulk_get(&self, wanted: Vec<(String, String)>, fetch: Fetch) -> Result<Vec<Doc>> {
        let atts = if fetch.inline {
            "attachments"
        } else {
            "att_encoding_info"
        };
        Ok(self
            .fetch(wanted, atts)
            .await?
            .into_iter()
            .map(Doc::Json)
            .collect())
    }

    async fn bulk_docs(&self, docs: Vec<Doc>) -> Result<Vec<WriteFailure>> {
        let docs: Vec<Value> = docs.into_iter().map(Doc::into_json).collect();
        let v = self
            .ok(
                Method::POST,
                "_bulk_docs",
                Some(&json!({"docs": docs, "new_edits": false})),
            )
            .await?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .filter(|r| r.get("error").is_some())
            .map(|r| WriteFailure {
                id: r
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                error: r
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                reason: r
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            })
            .collect())
    }

    async fn attachment(&self, id: &str, rev: &str, name: &str, gzip: bool) -> Result<Content> {
        let path = format!(
            "{}/{}?{}",
            doc_path(id),
            utf8_percent_encode(name, SEGMENT),
            query(&[("rev", rev.to_string())])
        );
        let resp = self.open(&path, gzip).await?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.refused(status));
        }
        let url = format!("{}{path}", self.base);
        if !status.is_success() {
            return Err(Error::Protocol(format!("{url} answered {status}")));
        }
        let encoding = resp
            .headers()
            .get(CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("identity")
            .trim()
            .to_ascii_lowercase();
        let sent_gzip = encoding == "gzip";
        if sent_gzip != gzip || !(sent_gzip || encoding == "identity") {
            return Err(Error::Protocol(format!(
                "{url} sent the content {encoding}-encoded; its stub says {}",
                if gzip { "gzip" } else { "identity" }
            )));
        }
        let chunks = futures_util::stream::unfold(Some(resp), move |resp| {
            let url = url.clone();
            async move {
                let mut resp = resp?;
                match resp.chunk().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(resp))),
                    Ok(None) => None,
                    Err(e) => Some((Err(failed("GET", &url, cause_of(&e))), None)),
                }
            }
        });
        Ok(Box::pin(chunks))
    }

    async fn put_streamed(&self, doc: Value, atts: Vec<Follows>) -> Result<Option<WriteFailure>> {
        let id = doc
            .get("_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let json = serde_json::to_vec(&doc).expect("json");
        let framing = Multipart::new(&json, &doc, &atts);
        let length = framing.length(&atts);
        let mut segments: Vec<Content> = vec![once(framing.head)];
        for (f, head) in atts.into_iter().zip(framing.parts) {
            segments.push(once(head));
            segments.push(f.content);
        }
        segments.push(once(framing.tail));
        let frames = futures_util::stream::iter(segments)
            .flatten()
            .map(|chunk| chunk.map(http_body::Frame::data));
        let body = reqwest::Body::wrap(http_body_util::StreamBody::new(frames));
        let url = format!("{}{}?new_edits=false", self.base, doc_path(&id));
        let sent = (self.request(Method::PUT, &url))
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, framing.content_type)
            .header(CONTENT_LENGTH, length)
            .body(body)
            .send()
            .await;
        let resp = sent.map_err(|e| failed("PUT", &url, cause_of(&e)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(None);
        }
        let v: Value = match resp.bytes().await {
            Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
            Err(e) => return Err(failed("PUT", &url, cause_of(&e))),
        };
        if retried(status) {
            tracing::warn!("replicator: {url} answered {status}: {v}");
            return Err(failed("PUT", &url, Cause::Status(status.as_u16())));
        }
        // Anything else is this document's refusal (a `validate_doc_update`'s `forbidden`
        // or `unauthorized`, `attachment_too_large`, `missing_stub`…), as CouchDB's
        // replicator counts it.
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        Ok(Some(WriteFailure {
            id,
            error: text("error").unwrap_or_else(|| status.as_u16().to_string()),
            reason: text("reason").unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follows(name: &str, data: &[u8]) -> Follows {
        Follows {
            name: name.into(),
            length: data.len() as u64,
            content: once(data.to_vec()),
        }
    }

    #[test]
    fn multipart_framing_is_couchdbs_and_its_length_exact() {
        let doc = json!({"_id": "d", "_attachments": {
            "a.txt": {"content_type": "text/plain", "follows": true, "encoding": "gzip"},
            "b\"q": {"content_type": "application/octet-stream", "follows": true},
        }});
        let json = serde_json::to_vec(&doc).unwrap();
        let atts = vec![follows("a.txt", b"gzipped"), follows("b\"q", b"raw bytes")];
        let m = Multipart::new(&json, &doc, &atts);
        let mut body = m.head.clone();
        for (head, data) in m.parts.iter().zip([&b"gzipped"[..], b"raw bytes"]) {
            body.extend_from_slice(head);
            body.extend_from_slice(data);
        }
        body.extend_from_slice(&m.tail);
        assert_eq!(m.length(&atts), body.len() as u64);
        let boundary = m.content_type.split("boundary=\"").nth(1).unwrap();
        let boundary = boundary.trim_end_matches('"');
        let text = String::from_utf8(body).unwrap();
        let expected = format!(
            "--{boundary}\r\nContent-Type: application/json\r\n\r\n{}\
             \r\n--{boundary}\r\nContent-Disposition: attachment; filename=\"a.txt\"\
             \r\nContent-Type: text/plain\r\nContent-Length: 7\r\nContent-Encoding: gzip\
             \r\n\r\ngzipped\
             \r\n--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Length: 9\
             \r\n\r\nraw bytes\r\n--{boundary}--",
            String::from_utf8(json).unwrap()
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn document_paths_keep_a_design_documents_slash() {
        assert_eq!(doc_path("_design/a b"), "_design/a%20b");
        assert_eq!(doc_path("a/b"), "a%2Fb");
    }
}
