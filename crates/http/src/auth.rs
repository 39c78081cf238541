//! Authentication of requests: which credentials a request offers, tried in the order
//! `[chttpd] authentication_handlers` lists them (default: cookie, then HTTP Basic; JWT
//! and proxy authentication only when listed), as CouchDB's handlers are: the first that
//! recognises the request wins; Basic and JWT credentials that fail are errors, cookies
//! and proxy headers that fail leave the request anonymous (except a proxy token missing
//! or not hex while a secret is in use: CouchDB's 500 `badarg`). Who a name, password or
//! session cookie is, is the node's ([`settee_node::users`]).

use crate::error::ApiError;
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use settee_auth::cookie::COOKIE_NAME;
use settee_auth::{jwt, proxy, UserCtx};
use settee_node::config::NodeConfig;
pub use settee_node::settings::auth_section;
use settee_node::users::now_secs;
use settee_node::Node;

/// The outcome of authentication.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub user: UserCtx,
    /// CouchDB's name of the handler that authenticated the request (`default`, `cookie`,
    /// `jwt`, `proxy`), if any did.
    pub handler: Option<&'static str>,
    /// A renewed session cookie to send back (`Set-Cookie` value).
    pub set_cookie: Option<String>,
}

impl Authenticated {
    fn anonymous() -> Authenticated {
        Authenticated::by(UserCtx::anonymous(), None)
    }

    fn by(user: UserCtx, handler: Option<&'static str>) -> Authenticated {
        Authenticated {
            user,
            handler,
            set_cookie: None,
        }
    }
}

/// The authentication handlers CouchDB ships, by their short names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handler {
    Cookie,
    Default,
    Jwt,
    Proxy,
}

/// The handlers `[chttpd] authentication_handlers` lists, in order.
fn handlers(node: &NodeConfig) -> Vec<Handler> {
    let Some(list) = node.get("chttpd", "authentication_handlers") else {
        return vec![Handler::Cookie, Handler::Default];
    };
    let mut found: Vec<(usize, Handler)> = [
        ("cookie_authentication_handler", Handler::Cookie),
        ("default_authentication_handler", Handler::Default),
        ("jwt_authentication_handler", Handler::Jwt),
        ("proxy_authentication_handler", Handler::Proxy),
    ]
    .into_iter()
    .filter_map(|(name, h)| list.find(name).map(|at| (at, h)))
    .collect();
    found.sort_by_key(|(at, _)| *at);
    found.into_iter().map(|(_, h)| h).collect()
}

/// The names `GET /_session` reports in `info.authentication_handlers`.
pub fn handler_names(node: &NodeConfig) -> Vec<&'static str> {
    handlers(node)
        .into_iter()
        .map(|h| match h {
            Handler::Cookie => "cookie",
            Handler::Default => "default",
            Handler::Jwt => "jwt",
            Handler::Proxy => "proxy",
        })
        .collect()
}

/// What a request offers to authenticate with.
pub struct Credentials<'a> {
    pub headers: &'a HeaderMap,
    /// The client's address, for the lockout.
    pub peer: &'a str,
    /// The request line's method and target (path and query): what another cluster
    /// member signs.
    pub method: &'a str,
    pub target: &'a str,
}

/// Who the request is.
pub fn authenticate(node: &Node, creds: &Credentials) -> Result<Authenticated, ApiError> {
    if let Some(value) = header_str(creds.headers, settee_cluster::peer::HEADER) {
        return by_member(node, value, creds);
    }
    for handler in handlers(&node.config) {
        let found = match handler {
            Handler::Cookie => by_cookie(node, creds.headers)?,
            Handler::Default => by_basic(node, creds)?,
            Handler::Jwt => by_jwt(creds.headers, &node.config)?,
            Handler::Proxy => by_proxy(creds.headers, &node.config)?,
        };
        if let Some(found) = found {
            return Ok(found);
        }
    }
    Ok(Authenticated::anonymous())
}

/// A request another member of the cluster sends on behalf of a server admin it has
/// authenticated (`/_node/{name}/…` for this node), or as a database's coordinator (a shard
/// copy's database): a server admin, named after that member, for this node's node-local
/// paths, shard copies, the system databases every member keeps whole
/// (`settee_cluster::EVERYWHERE`, which members push to each other) and the scheduler's
/// `/_scheduler/…` (its replications) only, so that the cluster's secret never opens a
/// database a client names.
fn by_member(node: &Node, value: &str, creds: &Credentials) -> Result<Authenticated, ApiError> {
    let refused = |why: &str| Err(ApiError::Unauthorized(why.into()));
    let Some(cluster) = node.cluster() else {
        return refused("Cluster credentials were sent to a node in no cluster.");
    };
    // A shard copy's database (`shards/…`, `/` encoded in its path segment) is node-local
    // too: the coordinator on another member reads and writes it.
    let shard_copy = creds
        .target
        .get(..10)
        .is_some_and(|p| p.eq_ignore_ascii_case("/shards%2f"));
    let node_local = creds.target == "/_node/_local" || creds.target.starts_with("/_node/_local/");
    // The system databases every member keeps whole: the others push theirs in.
    let everywhere = settee_cluster::EVERYWHERE.iter().any(|db| {
        (creds.target.strip_prefix('/'))
            .and_then(|t| t.strip_prefix(db))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?']))
    });
    // Another member's scheduler, gathering every member's replications.
    let scheduler = creds.target.starts_with("/_scheduler/");
    if !(node_local || shard_copy || everywhere || scheduler) {
        return refused("Cluster credentials are taken for node-local requests only.");
    }
    let secret = &cluster.config().secret;
    let now = now_secs();
    let Some(signed) = settee_cluster::peer::verify(secret, value, creds.method, creds.target, now)
    else {
        return refused("Invalid cluster credentials.");
    };
    let user = match signed.user {
        // The client a coordinator acts for, with that client's rights.
        Some(user) => {
            let v: serde_json::Value = serde_json::from_str(&user)
                .map_err(|_| ApiError::Unauthorized("Invalid cluster credentials.".into()))?;
            UserCtx {
                name: v["name"].as_str().map(str::to_owned),
                roles: (v["roles"].as_array().into_iter().flatten())
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect(),
            }
        }
        None => UserCtx::named(&signed.from, vec!["_admin".into()]),
    };
    Ok(Authenticated::by(user, Some("cluster")))
}

fn by_basic(node: &Node, creds: &Credentials) -> Result<Option<Authenticated>, ApiError> {
    let Some(value) = header_str(creds.headers, header::AUTHORIZATION.as_str()) else {
        return Ok(None);
    };
    // CouchDB's `basic_name_pw`: another scheme is a malformed header (400), and so
    // is undecodable base64; decoded credentials without a colon are none at all.
    let encoded = match value.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("basic") => rest,
        _ => return Err(ApiError::bad_request("Authorization header is invalid")),
    };
    let decoded = STANDARD
        .decode(encoded.trim())
        .map_err(|_| ApiError::bad_request("Authorization header has invalid base64 value"))?;
    let bad = || ApiError::unauthorized("Name or password is incorrect.");
    let pair = String::from_utf8(decoded).map_err(|_| bad())?;
    let Some((name, password)) = pair.split_once(':') else {
        return Ok(None);
    };
    if (name, password) == ("_", "_") {
        // CouchDB's way for a browser to drop its Basic credentials: anonymous.
        return Ok(None);
    }
    let (user, _) = node.login(name, password, creds.peer)?.ok_or_else(bad)?;
    Ok(Some(Authenticated::by(user, Some("default"))))
}

fn by_cookie(node: &Node, headers: &HeaderMap) -> Result<Option<Authenticated>, ApiError> {
    let Some(value) = session_cookie(headers).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    Ok(node.session(&value)?.map(|s| {
        let mut found = Authenticated::by(s.user, Some("cookie"));
        found.set_cookie = s.renew;
        found
    }))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The `AuthSession` cookie's value, if the request carries one.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE_NAME)
        .map(|(_, v)| v.trim_matches('"').to_string())
}

fn by_jwt(headers: &HeaderMap, node: &NodeConfig) -> Result<Option<Authenticated>, ApiError> {
    let Some(token) =
        header_str(headers, header::AUTHORIZATION.as_str()).and_then(jwt::bearer_token)
    else {
        return Ok(None);
    };
    let config =
        jwt::JwtConfig::from_sections(&node.section("jwt_auth"), &node.section("jwt_keys"))
            .map_err(|reason| {
                ApiError::Named(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "jwt_auth_error".into(),
                    reason,
                )
            })?;
    let user = config.authenticate(token, now_secs())?;
    Ok(Some(Authenticated::by(user, Some("jwt"))))
}

fn by_proxy(headers: &HeaderMap, node: &NodeConfig) -> Result<Option<Authenticated>, ApiError> {
    let config = proxy::ProxyConfig::from_section(&auth_section(node));
    let user = config.authenticate(|name| header_str(headers, name).map(str::to_string))?;
    Ok(user.map(|u| Authenticated::by(u, Some("proxy"))))
}

/// The `WWW-Authenticate` value for a 401, where CouchDB sends one: the request's
/// `X-CouchDB-WWW-Authenticate`, else `[chttpd] WWW-Authenticate`, else `Basic
/// realm="server"` when `require_valid_user` is on; browsers then prompt for a password.
pub fn challenge(headers: &HeaderMap, node: &NodeConfig) -> Option<axum::http::HeaderValue> {
    let value = header_str(headers, "x-couchdb-www-authenticate")
        .map(str::to_string)
        .or_else(|| node.get("chttpd", "WWW-Authenticate"))
        .or_else(|| {
            node.get_bool("chttpd", "require_valid_user", false)
                .then(|| "Basic realm=\"server\"".to_string())
        })?;
    axum::http::HeaderValue::from_str(&value).ok()
}
