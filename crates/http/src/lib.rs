//! CouchDB's HTTP API over axum. [`app`] builds the service; `router.rs` lists every route;
//! handlers live by resource under `handlers/`, stay thin (parse → one store call → render),
//! and return [`ApiError`], which `error.rs` maps to CouchDB's status and body in one place.

mod auth;
mod cors;
mod design_render;
mod error;
mod handlers;
mod jsonp;
mod location;
mod multipart;
mod req_info;
use settee_wire::mrargs;
mod reply;
mod req;
mod response;
mod router;

pub use error::{ApiError, ApiResult};
pub use settee_node::dbs::ensure_auth_ddoc;
pub use settee_node::query_language::register_query_language;
pub use settee_node::replication::ensure_replicator_db;
pub use settee_node::{config as node_config, NodeConfig, SetLogLevel};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::Response;
use axum::Router;
use settee_node::replication::Replicator;
use settee_node::Node;
use std::sync::{Arc, Mutex};

/// Settings of the HTTP layer (CouchDB's `[chttpd]`/`[couchdb]` sections).
#[derive(Clone, Debug)]
pub struct HttpConfig {
    pub max_http_request_size: usize,
    pub max_uuid_count: usize,
    pub server_uuid: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_http_request_size: settee_node::config::MAX_HTTP_REQUEST_SIZE,
            max_uuid_count: 1000,
            server_uuid: String::new(),
        }
    }
}

/// What handlers share: the node they ask, and what HTTP keeps of its own.
pub struct Inner {
    pub node: Arc<Node>,
    /// What every database operation goes through: the node itself, or a coordinator
    /// that fans operations out to shard copies (`settee_node::fabric`).
    pub fabric: Arc<dyn settee_node::Fabric>,
    pub http: HttpConfig,
    /// The node's replication manager: jobs, `_replicator` documents, local endpoints.
    pub replicator: Arc<Replicator>,
}

/// The node's services (`state.couch`, `state.views`, `state.config`) read through.
impl std::ops::Deref for Inner {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(node: Arc<Node>, http: HttpConfig) -> AppState {
        AppState::with_fabric(node.clone(), Arc::new(node), http)
    }

    /// A state whose database operations go through `fabric` (a cluster's coordinator).
    pub fn with_fabric(
        node: Arc<Node>,
        fabric: Arc<dyn settee_node::Fabric>,
        http: HttpConfig,
    ) -> AppState {
        let hooks = Arc::new(handlers::replicate::HttpHooks);
        let replicator = Replicator::new(node.clone(), hooks, http.server_uuid.clone());
        AppState(Arc::new(Inner {
            fabric,
            node,
            http,
            replicator,
        }))
    }

    /// The node's replication manager.
    pub fn replicator(&self) -> Arc<Replicator> {
        self.replicator.clone()
    }

    /// Starts the replication scheduler (`_replicator`); needs the Tokio runtime.
    pub fn start_scheduler(&self) {
        self.replicator.start();
    }

    /// Records the address the server listens on.
    pub fn set_local_addr(&self, addr: std::net::SocketAddr) {
        self.replicator.set_local_addr(addr);
    }

    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.replicator.local_addr()
    }

    /// `[chttpd] max_http_request_size`, read live (the startup value is the default).
    pub fn max_http_request_size(&self) -> usize {
        let default = self.http.max_http_request_size as u64;
        self.config
            .get_u64("chttpd", "max_http_request_size", default)
            .try_into()
            .unwrap_or(usize::MAX)
    }
}

/// One request as handlers see it.
pub struct Req {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub params: req::Params,
    /// Who is asking.
    pub user: settee_auth::UserCtx,
    /// The authentication handler that recognised the user (`default`, `cookie`, …).
    pub authenticated_by: Option<&'static str>,
    /// The client's IP address.
    pub peer: String,
    /// `[chttpd] decode_plus_to_space`: a `+` in a path (and a `COPY` destination) is a
    /// space.
    pub decode_plus_to_space: bool,
    /// How many `_rewrite`s led to this request (0 for a client's own).
    pub rewrites: u32,
    /// In a mutex only so that `&Req` is `Send` across awaits.
    body: Mutex<Option<Body>>,
    limit: usize,
    /// Milliseconds spent receiving the body (CouchDB's `X-CouchDB-Body-Time`).
    body_time: Arc<std::sync::atomic::AtomicU64>,
}

impl Req {
    /// The whole body, gunzipped when it came with `Content-Encoding: gzip` (as
    /// chttpd's `maybe_decompress`; the limit applies to the decompressed bytes too).
    pub async fn bytes(&mut self) -> ApiResult<bytes::Bytes> {
        let body = self.body.get_mut().unwrap().take().unwrap_or_default();
        let started = std::time::Instant::now();
        let read = req::body_bytes(body, self.limit).await;
        self.body_time.store(
            started.elapsed().as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        req::decompress(self.header("content-encoding"), read?, self.limit)
    }

    /// The body parsed as JSON (`bad_request` / `invalid UTF-8 JSON` otherwise).
    pub async fn json(&mut self) -> ApiResult<serde_json::Value> {
        let b = self.bytes().await?;
        req::parse_json(&b)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        req::header_str(&self.headers, name)
    }

    /// The body, to stream it (nothing is buffered or limited here).
    pub fn take_body(&mut self) -> Body {
        self.body.get_mut().unwrap().take().unwrap_or_default()
    }
}

pub const SERVER_HEADER: &str = concat!("CouchDB/3.5.2 (Settee/", env!("CARGO_PKG_VERSION"), ")");

pub fn app(state: AppState) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// The target of the access log's events (one per request, at CouchDB's `notice` level).
pub const ACCESS_LOG_TARGET: &str = "couchdb::access";

async fn handle(State(state): State<AppState>, request: Request) -> Response {
    use tracing::Instrument;
    let started = std::time::Instant::now();
    // As CouchDB's chttpd: the client's X-Couch-Request-ID when it is a usable one, else a
    // fresh 5-byte nonce; log lines written for the request carry it.
    let nonce = request_id(request.headers());
    let method = request.method().clone();
    // What the access line needs of the request (shared buffers, not copies: the line
    // is formatted only if the level, read when the response is ready, wants it).
    let uri = request.uri().clone();
    let host = request.headers().get(axum::http::header::HOST).cloned();
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let span = tracing::error_span!("request", nonce = %nonce);
    let mut user = None;
    let mut resp = respond(state, request, &peer, &mut user)
        .instrument(span.clone())
        .await;
    let status = resp.status().as_u16();
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    settee_metrics::global().request(method.as_str(), status, millis);
    span.in_scope(|| {
        tracing::info!(
            target: ACCESS_LOG_TARGET,
            "{host} {peer} {user} {method} {raw_path} {status} ok {ms}",
            host = host.as_ref().and_then(|h| h.to_str().ok()).unwrap_or("undefined"),
            user = user.as_deref().unwrap_or("undefined"),
            raw_path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str()),
            ms = millis.round() as u64,
        )
    });
    if resp.extensions().get::<reply::NodeLocal>().is_some() {
        resp.headers_mut().remove("x-couchdb-body-time");
    } else {
        resp.headers_mut().insert(
            "x-couch-request-id",
            HeaderValue::from_str(&nonce).expect("checked characters"),
        );
    }
    resp
}

/// The request's id (chttpd's `nonce/1`): the client's `X-Couch-Request-ID` of at most 36
/// characters from `[0-9A-Za-z_-]`, or a fresh random one.
fn request_id(headers: &HeaderMap) -> String {
    match headers.get("x-couch-request-id").map(HeaderValue::as_bytes) {
        Some(v)
            if v.len() <= 36
                && v.iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            String::from_utf8_lossy(v).into_owned()
        }
        _ => hex::encode(rand::random::<[u8; 5]>()),
    }
}

/// Answers one request from `peer`; `user` learns who made it (for the access log).
async fn respond(
    state: AppState,
    request: Request,
    peer: &str,
    user: &mut Option<String>,
) -> Response {
    let (parts, body) = request.into_parts();
    let has_body = parts
        .headers
        .contains_key(axum::http::header::TRANSFER_ENCODING)
        || parts
            .headers
            .get(axum::http::header::CONTENT_LENGTH)
            .is_some_and(|v| v != "0");
    // Set once the handler has read the body to its end.
    let body_read = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = {
        let done = body_read.clone();
        let end = futures_util::stream::poll_fn(move |_| {
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            std::task::Poll::Ready(None::<Result<bytes::Bytes, axum::Error>>)
        });
        Body::from_stream(futures_util::StreamExt::chain(body.into_data_stream(), end))
    };
    let challenge = auth::challenge(&parts.headers, &state.config);
    let mut set_cookie = None;
    let body_time = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // CORS: settings are read per request; a preflight is answered before authentication.
    let cors = cors::ForRequest::new(&state.config, &parts.headers);
    let preflight = cors
        .as_ref()
        .and_then(|c| c.preflight(&parts.method, &parts.headers));
    let jsonp = jsonp::Jsonp::of_request(&state.config, &parts.method, parts.uri.query());
    let mut resp = match preflight {
        Some(resp) => resp,
        None => {
            let routed = route(state, parts, body, peer, &mut set_cookie, &body_time, user).await;
            let mut resp = routed.unwrap_or_else(reply::err_to_response);
            // As mochiweb's `should_close`: a body left unread makes the connection unfit
            // for another request, so the answer says it closes; a body read keeps it.
            if has_body && !body_read.load(std::sync::atomic::Ordering::Relaxed) {
                resp.headers_mut()
                    .insert("connection", HeaderValue::from_static("close"));
            }
            if let Some(jsonp) = jsonp {
                resp = jsonp.apply(resp);
            }
            if let Some(c) = &cors {
                c.decorate(&mut resp);
            }
            resp
        }
    };
    let status = resp.status();
    let h = resp.headers_mut();
    if let Some(v) = challenge.filter(|_| status == axum::http::StatusCode::UNAUTHORIZED) {
        h.insert(axum::http::header::WWW_AUTHENTICATE, v);
    }
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.append(axum::http::header::SET_COOKIE, c);
    }
    h.insert("server", HeaderValue::from_static(SERVER_HEADER));
    // The body's receive time, as CouchDB's chttpd sends it.
    let ms = body_time.load(std::sync::atomic::Ordering::Relaxed);
    h.insert("x-couchdb-body-time", HeaderValue::from(ms));
    // mochiweb frames every 304 with `Content-Length: 0`. hyper writes a length header of
    // a 304 only for a body of unknown length (an empty one it sends bare), so the body
    // becomes an empty stream.
    if status == axum::http::StatusCode::NOT_MODIFIED {
        resp.headers_mut().insert(
            axum::http::header::CONTENT_LENGTH,
            HeaderValue::from_static("0"),
        );
        *resp.body_mut() = Body::from_stream(futures_util::stream::empty::<
            Result<bytes::Bytes, std::io::Error>,
        >());
    }
    resp
}

/// The path to route, as CouchDB reads it: `%` must start a valid escape (in the query
/// string too), and with `decode_plus_to_space` a `+` is a space.
fn request_path(uri: &Uri, decode_plus_to_space: bool) -> ApiResult<String> {
    let raw = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
    router::check_url_encoding(raw)?;
    Ok(if decode_plus_to_space {
        uri.path().replace('+', "%20")
    } else {
        uri.path().to_string()
    })
}

/// `X-HTTP-Method-Override` for clients that can only POST: honoured on POST requests
/// for the methods CouchDB lists, ignored otherwise.
fn method_override(method: Method, headers: &HeaderMap) -> Method {
    const ALLOWED: &[&str] = &[
        "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT", "COPY",
    ];
    let wanted = headers
        .get("x-http-method-override")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim());
    match wanted {
        Some(m) if method == Method::POST && ALLOWED.contains(&m) => {
            Method::from_bytes(m.as_bytes()).unwrap_or(method)
        }
        _ => method,
    }
}

async fn route(
    state: AppState,
    mut parts: axum::http::request::Parts,
    mut body: Body,
    peer: &str,
    set_cookie: &mut Option<String>,
    body_time: &Arc<std::sync::atomic::AtomicU64>,
    user: &mut Option<String>,
) -> ApiResult<Response> {
    // CouchDB 3.5.2's default is `true` (`chttpd:unquote/1`).
    let plus = state
        .config
        .get_bool("chttpd", "decode_plus_to_space", true);
    let mut rewrites = 0;
    loop {
        let endpoint = router::parse(&request_path(&parts.uri, plus)?)?;
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let creds = auth::Credentials {
            headers: &parts.headers,
            peer,
            method: parts.method.as_str(),
            target,
        };
        let authn = auth::authenticate(&state.node, &creds)?;
        *set_cookie = authn.set_cookie;
        user.clone_from(&authn.user.name);
        let req = Req {
            method: method_override(parts.method, &parts.headers),
            params: req::Params::parse(parts.uri.query()),
            uri: parts.uri,
            headers: parts.headers,
            user: authn.user,
            authenticated_by: authn.handler,
            peer: peer.to_string(),
            decode_plus_to_space: plus,
            rewrites,
            body: Mutex::new(Some(body)),
            limit: state.max_http_request_size(),
            body_time: body_time.clone(),
        };
        state
            .fabric
            .authorize(&endpoint, req.method.as_str(), &req.user)?;
        let node_local = router::is_node_local(&endpoint);
        let own_refusals = router::own_refusals(&endpoint);
        let resp = match router::dispatch(state.clone(), endpoint, req).await {
            Ok(resp) => resp,
            Err(e) if own_refusals.is_some_and(|own| own(&e)) => reply::err_to_response(e),
            Err(e) => return Err(e),
        };
        if node_local {
            let mut resp = resp;
            resp.extensions_mut().insert(reply::NodeLocal);
            return Ok(resp);
        }
        // A `_rewrite` answers with the request to route instead, as CouchDB's handler
        // calls its request loop again.
        match resp
            .extensions()
            .get::<handlers::rewrite::Rewritten>()
            .and_then(|next| next.take())
        {
            Some(next) => (parts, body) = next,
            None => return Ok(resp),
        }
        rewrites += 1;
    }
}
