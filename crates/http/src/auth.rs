//! Authentication of requests: turns credentials into a [`UserCtx`].

use crate::error::ApiError;
use crate::node_config::NodeConfig;
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use settee_auth::password::PasswordHash;
use settee_auth::{UserCtx, ADMIN_ROLE};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Mutex;

#[derive(Default)]
pub struct Authenticator {
    /// Digests of `name:password:hash` triples already verified, so PBKDF2 runs once each.
    verified: Mutex<HashSet<[u8; 32]>>,
}

impl Authenticator {
    /// The anonymous context for a request without credentials; bad credentials are an
    /// error whatever the endpoint.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        node: &NodeConfig,
    ) -> Result<UserCtx, ApiError> {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(UserCtx::anonymous());
        };
        let bad = || ApiError::Unauthorized("Name or password is incorrect.");
        let Some(encoded) = value
            .strip_prefix("Basic ")
            .or_else(|| value.strip_prefix("basic "))
        else {
            return Err(bad());
        };
        let decoded = STANDARD.decode(encoded.trim()).map_err(|_| bad())?;
        let pair = String::from_utf8(decoded).map_err(|_| bad())?;
        let (name, password) = pair.split_once(':').ok_or_else(bad)?;
        let stored = node.get("admins", name).ok_or_else(bad)?;
        let hash = PasswordHash::parse(&stored).ok_or_else(bad)?;
        let digest: [u8; 32] = Sha256::new()
            .chain_update(pair.as_bytes())
            .chain_update([0])
            .chain_update(stored.as_bytes())
            .finalize()
            .into();
        let known = self.verified.lock().unwrap().contains(&digest);
        if known || hash.verify(password) {
            self.verified.lock().unwrap().insert(digest);
            return Ok(UserCtx::named(name, vec![ADMIN_ROLE.to_string()]));
        }
        Err(bad())
    }
}
