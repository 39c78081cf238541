//! CouchDB's HTTP API over axum. [`app`] builds the service; `router.rs` lists every route;
//! handlers live by resource under `handlers/`, stay thin (parse → one store call → render),
//! and return [`ApiError`], which `error.rs` maps to CouchDB's status and body in one place.

mod auth;
mod error;
mod handlers;
pub mod node_config;
mod render;
mod reply;
mod req;
mod router;

pub use error::{ApiError, ApiResult};
pub use node_config::NodeConfig;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::Response;
use axum::Router;
use settee_db::Couch;
use settee_views::Views;
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
            max_http_request_size: 256 << 20,
            max_uuid_count: 1000,
            server_uuid: String::new(),
        }
    }
}

pub struct Inner {
    pub couch: Arc<Couch>,
    pub views: Arc<Views>,
    pub auth: auth::Authenticator,
    /// The live configuration (`/_node/_local/_config`).
    pub node: Arc<NodeConfig>,
    pub config: HttpConfig,
    uuids: Mutex<handlers::server::UuidGen>,
    tasks: handlers::database::Tasks,
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
    pub fn new(
        couch: Arc<Couch>,
        views: Arc<Views>,
        node: Arc<NodeConfig>,
        config: HttpConfig,
    ) -> AppState {
        AppState(Arc::new(Inner {
            couch,
            views,
            auth: auth::Authenticator::default(),
            node,
            config,
            uuids: Mutex::new(handlers::server::UuidGen::new()),
            tasks: Default::default(),
        }))
    }

    pub fn next_uuid(&self) -> String {
        self.uuids.lock().unwrap().next()
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
    /// In a mutex only so that `&Req` is `Send` across awaits.
    body: Mutex<Option<Body>>,
    limit: usize,
}

impl Req {
    pub async fn bytes(&mut self) -> ApiResult<bytes::Bytes> {
        let body = self.body.get_mut().unwrap().take().unwrap_or_default();
        req::body_bytes(body, self.limit).await
    }

    /// The body parsed as JSON (`bad_request` / `invalid UTF-8 JSON` otherwise).
    pub async fn json(&mut self) -> ApiResult<serde_json::Value> {
        let b = self.bytes().await?;
        req::parse_json(&b)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        req::header_str(&self.headers, name)
    }
}

pub const SERVER_HEADER: &str = concat!("CouchDB/3.5.2 (Settee/", env!("CARGO_PKG_VERSION"), ")");

pub fn app(state: AppState) -> Router {
    Router::new().fallback(handle).with_state(state)
}

async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let mut resp = match route(state, parts, body).await {
        Ok(r) => r,
        Err(e) => reply::err_to_response(e),
    };
    let h = resp.headers_mut();
    h.insert("server", HeaderValue::from_static(SERVER_HEADER));
    let id = format!("{:010x}", rand::random::<u64>() & 0xff_ffff_ffff);
    h.insert(
        "x-couch-request-id",
        HeaderValue::from_str(&id).expect("hex"),
    );
    resp
}

async fn route(
    state: AppState,
    parts: axum::http::request::Parts,
    body: Body,
) -> ApiResult<Response> {
    let endpoint = router::parse(parts.uri.path())?;
    let user = state.auth.authenticate(&parts.headers, &state.node)?;
    if !user.is_server_admin() && !endpoint.is_public() {
        let reason = if endpoint.is_db_scoped() {
            "You are not authorized to access this db."
        } else {
            "You are not a server admin."
        };
        return Err(ApiError::Unauthorized(reason));
    }
    let req = Req {
        method: parts.method,
        params: req::Params::parse(parts.uri.query()),
        uri: parts.uri,
        headers: parts.headers,
        user,
        body: Mutex::new(Some(body)),
        limit: state.config.max_http_request_size,
    };
    router::dispatch(state, endpoint, req).await
}
