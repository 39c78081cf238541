//! Who is asking, and what they may do — pure functions over values, no I/O and no HTTP.
//!
//! - [`password`]: CouchDB's PBKDF2 password hashes (config `[admins]` and `_users` docs).
//! - [`password_rules`]: how new `_users` passwords are checked and hashed.
//! - [`cookie`]: `AuthSession` cookies (HMAC-signed, time-limited, renewed).
//! - [`jwt`]: `Authorization: Bearer` JSON Web Tokens checked against `[jwt_keys]`.
//! - [`proxy`]: proxy authentication headers and their HMAC token.
//! - [`password_cache`]: passwords already verified against a stored hash, so that the
//!   slow hash runs once per password (and a wrong one is refused after a fast hash).
//! - [`user_cache`]: users read from another cluster member, kept until their document
//!   changes (CouchDB's `chttpd_auth_cache`).
//! - [`lockout`]: temporary lockout after repeated failed logins of a user from a peer.
//! - [`security`]: database security objects (`admins`/`members`) and who they admit.
//! - [`users`]: the rules of the `_users` database (validation, password hashing on write,
//!   who may read which user document).
//!
//! The HTTP layer extracts credentials, looks up users and config, calls in here, and turns
//! the outcome into CouchDB's 401/403 responses.

pub mod cookie;
mod ini;
pub mod jwt;
pub mod lockout;
pub mod password;
pub mod password_cache;
pub mod password_rules;
pub mod proxy;
pub mod security;
pub mod user_cache;
pub mod users;

use serde_json::{json, Value};

/// The authenticated identity of a request (CouchDB's `userCtx`); anonymous requests have
/// no name and no roles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserCtx {
    pub name: Option<String>,
    pub roles: Vec<String>,
}

/// The role of server admins.
pub const ADMIN_ROLE: &str = "_admin";

impl UserCtx {
    pub fn anonymous() -> UserCtx {
        UserCtx::default()
    }

    pub fn named(name: &str, roles: Vec<String>) -> UserCtx {
        UserCtx {
            name: Some(name.to_string()),
            roles,
        }
    }

    /// The server's own admin (CouchDB's `?ADMIN_CTX`): background work the server does
    /// itself, with no client behind it.
    pub fn server_admin() -> UserCtx {
        UserCtx::named("", vec![ADMIN_ROLE.into()])
    }

    pub fn is_server_admin(&self) -> bool {
        self.roles.iter().any(|r| r == ADMIN_ROLE)
    }

    /// `{"db": …, "name": …, "roles": […]}` as `validate_doc_update` functions see it.
    pub fn to_json(&self, db: Option<&str>) -> Value {
        json!({"db": db, "name": self.name, "roles": self.roles})
    }
}

/// Why a request is refused: 400 `bad_request` (malformed credentials, such as an
/// undecodable `AuthSession` cookie or JWT), 401 `unauthorized`, 403 `forbidden` or 404
/// `not_found`, with the reason CouchDB sends; or CouchDB's 500 `unknown_error` where it
/// crashes on bad input (the reason is the Erlang error, such as `badarg`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("bad_request: {0}")]
    BadRequest(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("not_found: {0}")]
    NotFound(String),
    #[error("unknown_error: {0}")]
    Crash(String),
}

/// The reason of CouchDB's 500 when an Erlang built-in is given a value it cannot take.
pub const BADARG: &str = "badarg";
