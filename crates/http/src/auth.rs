//! Authentication of requests: turns credentials into a [`UserCtx`]. Server admins come
//! from the config's `[admins]`, other users from `_users` documents. The handlers run in
//! the order `[chttpd] authentication_handlers` lists them (default: cookie, then HTTP
//! Basic; JWT and proxy authentication only when listed), as CouchDB's do: the first that
//! recognises the request wins; Basic and JWT credentials that fail are errors, cookies
//! and proxy headers that fail leave the request anonymous (except a proxy token missing
//! or not hex while a secret is in use: CouchDB's 500 `badarg`). Passwords verified once
//! are then checked against a fast hash (`settee_auth::password_cache`).

use crate::error::ApiError;
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{Map, Value};
use settee_auth::cookie::{self, CookieOptions, CookieStatus, COOKIE_NAME};
use settee_auth::lockout::{Lockout, LockoutConfig};
use settee_auth::password::{PasswordHash, Scheme};
use settee_auth::password_cache::{CacheConfig, PasswordCache};
use settee_auth::password_rules::PasswordRules;
use settee_auth::users;
use settee_auth::{jwt, proxy, UserCtx, ADMIN_ROLE};
use settee_db::Couch;
use settee_node::config::NodeConfig;
pub use settee_node::settings::{auth_section, password_rules};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

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

/// A known user: roles and password hash (whose salt also keys their cookies), and the
/// user document they come from, if any.
pub struct Known {
    pub roles: Vec<String>,
    pub hash: PasswordHash,
    pub doc: Option<UserDoc>,
}

/// A user document as read for authentication.
pub struct UserDoc {
    id: String,
    rev: settee_core::Rev,
    /// The stored bytes (body and attachment stubs).
    stored: Vec<u8>,
    body: Map<String, Value>,
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

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Default)]
pub struct Authenticator {
    /// Passwords verified against a user's stored hash, so that its slow hash runs once
    /// (and again after a password change); `[couch_passwords_cache]`.
    passwords: PasswordCache,
    lockout: Lockout,
    /// Users whose password hash is being upgraded (or was, less than 5 s ago).
    upgrading: Arc<Mutex<HashSet<String>>>,
}

/// What a request offers to authenticate with.
pub struct Credentials<'a> {
    pub headers: &'a HeaderMap,
    /// The client's address, for the lockout.
    pub peer: &'a str,
}

impl Authenticator {
    pub fn authenticate(
        &self,
        creds: &Credentials,
        node: &NodeConfig,
        couch: &Couch,
    ) -> Result<Authenticated, ApiError> {
        for handler in handlers(node) {
            let found = match handler {
                Handler::Cookie => self.by_cookie(creds.headers, node, couch)?,
                Handler::Default => self.by_basic(creds, node, couch)?,
                Handler::Jwt => by_jwt(creds.headers, node)?,
                Handler::Proxy => by_proxy(creds.headers, node)?,
            };
            if let Some(found) = found {
                return Ok(found);
            }
        }
        Ok(Authenticated::anonymous())
    }

    fn by_basic(
        &self,
        creds: &Credentials,
        node: &NodeConfig,
        couch: &Couch,
    ) -> Result<Option<Authenticated>, ApiError> {
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
        let (user, _) = self
            .login(name, password, creds.peer, node, couch)?
            .ok_or_else(bad)?;
        Ok(Some(Authenticated::by(user, Some("default"))))
    }

    /// Checks a name and password (HTTP Basic, `POST /_session`), with the lockout: the
    /// user and their password salt (which signs their session cookies); `None` for
    /// unknown users and wrong passwords, `Err(403)` while locked out.
    pub fn login(
        &self,
        name: &str,
        password: &str,
        peer: &str,
        node: &NodeConfig,
        couch: &Couch,
    ) -> Result<Option<(UserCtx, String)>, ApiError> {
        let known = lookup(name, node, couch)?;
        let lockout = LockoutConfig::from_section(&node.section("chttpd_auth_lockout"));
        // Unknown names count too, under an empty salt, as CouchDB counts them.
        let salt = known
            .as_ref()
            .map_or_else(String::new, |k| k.hash.salt().to_string());
        self.lockout.check(name, &salt, peer, &lockout, now_ms())?;
        if let Some(known) = known {
            check_iterations(&known.hash, node)?;
            if self.verify(name, password, &known.hash, node) {
                if let Some(doc) = known.doc {
                    self.maybe_upgrade(name, password, doc, node, couch);
                }
                return Ok(Some((UserCtx::named(name, known.roles), salt)));
            }
        }
        self.lockout
            .record_failure(name, &salt, peer, &lockout, now_ms());
        Ok(None)
    }

    /// CouchDB 3.4+'s `upgrade_hash_on_auth` (default on): after a successful login with
    /// a user document hashed otherwise than the settings say, the document is rewritten
    /// with the password hashed anew under them, keeping the salt; in the background, at
    /// most once per user every 5 s, as `couch_password_hasher` does.
    fn maybe_upgrade(
        &self,
        name: &str,
        password: &str,
        doc: UserDoc,
        node: &NodeConfig,
        couch: &Couch,
    ) {
        if !node.get_bool("chttpd_auth", "upgrade_hash_on_auth", true) {
            return;
        }
        let rules = password_rules(node);
        if !rules.needs_upgrade(&doc.body) {
            return;
        }
        let Ok(db) = couch.get(&settee_node::settings::auth_db(node)) else {
            return;
        };
        if !self.upgrading.lock().unwrap().insert(name.to_string()) {
            return;
        }
        let (name, password) = (name.to_string(), password.to_string());
        let upgrading = self.upgrading.clone();
        std::thread::spawn(move || {
            match rehash(&db, doc, &password, &rules) {
                Ok(()) => tracing::info!(user = %name, "upgraded the stored password hash"),
                Err(e) => tracing::warn!(user = %name, error = %e, "upgrading a password hash"),
            }
            std::thread::sleep(std::time::Duration::from_secs(5));
            upgrading.lock().unwrap().remove(&name);
        });
    }

    /// CouchDB's `couch_passwords_cache`: a user's password verified once the slow way
    /// is then checked against a fast hash, right or wrong.
    fn verify(&self, name: &str, password: &str, hash: &PasswordHash, node: &NodeConfig) -> bool {
        let cfg = CacheConfig::from_section(&node.section("couch_passwords_cache"));
        let checked = self.passwords.verify(name, password, hash, &cfg, now_ms());
        let m = settee_metrics::global();
        m.password_hashing_fast.inc_by(checked.cost.fast);
        m.password_hashing_slow.inc_by(checked.cost.slow);
        checked.ok
    }

    fn by_cookie(
        &self,
        headers: &HeaderMap,
        node: &NodeConfig,
        couch: &Couch,
    ) -> Result<Option<Authenticated>, ApiError> {
        let Some(value) = session_cookie(headers).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let c =
            cookie::parse(&value).ok_or_else(|| ApiError::bad_request(cookie::MALFORMED_REASON))?;
        let opts = CookieOptions::from_section(&auth_section(node));
        let Some(secret) = &opts.secret else {
            return Ok(None);
        };
        let Some(known) = lookup(&c.name, node, couch)? else {
            return Ok(None);
        };
        let salt = known.hash.salt().as_bytes();
        if !c.verify(secret.as_bytes(), salt, &opts.hash_algorithms) {
            return Ok(None);
        }
        let now = now_secs();
        let set_cookie = match c.status(now, opts.timeout) {
            CookieStatus::Expired => return Ok(None),
            CookieStatus::Valid => None,
            CookieStatus::Renew => Some(session_cookie_header(&opts, &c.name, secret, salt, now)),
        };
        let mut found = Authenticated::by(UserCtx::named(&c.name, known.roles), Some("cookie"));
        found.set_cookie = set_cookie;
        Ok(Some(found))
    }
}

/// A fresh `Set-Cookie` value for a session of `name`.
pub fn session_cookie_header(
    opts: &CookieOptions,
    name: &str,
    secret: &str,
    user_salt: &[u8],
    now: u64,
) -> String {
    let value = cookie::make(name, secret.as_bytes(), user_salt, now, opts.signing_alg());
    opts.set_cookie(&value, now, false)
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

/// Finds a user as CouchDB's `chttpd_auth_cache:get_user_creds/2` does: a server admin
/// of `[admins]` (whose roles gain those of a user document of the same name), else the
/// user document in the authentication database (`[chttpd_auth] authentication_db`). A
/// user document with conflicts is refused (401) unless `[chttpd_auth]
/// allow_conflicted_user_docs` is true.
pub fn lookup(name: &str, node: &NodeConfig, couch: &Couch) -> Result<Option<Known>, ApiError> {
    let admin = node
        .get("admins", name)
        .and_then(|s| PasswordHash::parse(&s));
    let doc = user_doc(name, node, couch)?;
    if let Some(hash) = admin {
        let mut roles = vec![ADMIN_ROLE.to_string()];
        if let Some(doc) = &doc {
            roles.extend(users::roles(&doc.body));
        }
        return Ok(Some(Known {
            roles,
            hash,
            doc: None,
        }));
    }
    let Some(doc) = doc else {
        return Ok(None);
    };
    Ok(users::credentials(&doc.body).map(|(roles, hash)| Known {
        roles,
        hash,
        doc: Some(doc),
    }))
}

/// The user's document in the authentication database, if it exists and is not deleted.
fn user_doc(name: &str, node: &NodeConfig, couch: &Couch) -> Result<Option<UserDoc>, ApiError> {
    let Ok(db) = couch.get(&settee_node::settings::auth_db(node)) else {
        return Ok(None);
    };
    let id = format!("{}{name}", users::PREFIX);
    let doc = match db.open_doc(&id, None) {
        Ok(d) => d,
        Err(settee_db::Error::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let live_leaves = doc
        .info
        .tree
        .leaves()
        .into_iter()
        .filter(|l| !l.deleted)
        .count();
    if live_leaves > 1 && !node.get_bool("chttpd_auth", "allow_conflicted_user_docs", false) {
        return Err(ApiError::unauthorized(
            "User document conflicts must be resolved before the document is used for \
             authentication purposes.",
        ));
    }
    let Ok(body) = serde_json::from_slice(settee_core::split_stored(&doc.body).0) else {
        return Ok(None);
    };
    Ok(Some(UserDoc {
        id,
        rev: doc.rev,
        stored: doc.body,
        body,
    }))
}

/// Writes the user document with the password hashed under `rules` (same salt) in place
/// of its hash fields, as an admin would, on the revision it was read at.
fn rehash(
    db: &Arc<settee_db::Database>,
    doc: UserDoc,
    password: &str,
    rules: &PasswordRules,
) -> Result<(), String> {
    let salt = doc.body.get("salt").and_then(Value::as_str);
    let hash = rules
        .hash_with_salt(password, salt)
        .map_err(|e| e.to_string())?;
    let mut body = doc.body;
    users::set_hash(&mut body, &hash);
    let json = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    let stubs = settee_core::split_stored(&doc.stored).1;
    let parsed = settee_core::ParsedDoc {
        id: Some(doc.id),
        revs: Some((doc.rev.pos, vec![doc.rev.id])),
        deleted: false,
        body: settee_core::join_stored(&json, stubs),
        atts: None,
        body_term: None,
    };
    let rx = db
        .update_docs(vec![parsed], true)
        .map_err(|e| e.to_string())?;
    match rx.blocking_recv() {
        Ok(Ok(results)) => match results.into_iter().next() {
            Some(settee_db::UpdateResult::Err { error, .. }) => Err(error.to_string()),
            _ => Ok(()),
        },
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// `[chttpd_auth] min_iterations` and `max_iterations`: a user document hashed with fewer
/// or more PBKDF2 iterations cannot log in (403), as CouchDB's `verify_iterations`.
fn check_iterations(hash: &PasswordHash, node: &NodeConfig) -> Result<(), ApiError> {
    let Scheme::Pbkdf2 { iterations, .. } = hash.scheme() else {
        return Ok(());
    };
    let section = auth_section(node);
    let bound = |k: &str, default: u64| {
        section
            .get(k)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(default)
    };
    if u64::from(iterations) < bound("min_iterations", 1) {
        return Err(ApiError::Forbidden(
            "Iteration count is too low for this server".into(),
        ));
    }
    if u64::from(iterations) > bound("max_iterations", 1_000_000_000) {
        return Err(ApiError::Forbidden(
            "Iteration count is too high for this server".into(),
        ));
    }
    Ok(())
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
