//! Server-admin authentication over HTTP Basic, with CouchDB's stored password format
//! `-pbkdf2:sha256-<derived key hex>,<salt>,<iterations>`. Until the security work lands
//! this is the only way in (no admin party).

use crate::error::ApiError;
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// CouchDB 3.4+'s default work factor for `pbkdf2:sha256`.
pub const DEFAULT_ITERATIONS: u32 = 600_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordHash {
    derived_hex: String,
    salt: String,
    iterations: u32,
}

impl PasswordHash {
    pub fn parse(stored: &str) -> Option<PasswordHash> {
        let rest = stored.strip_prefix("-pbkdf2:sha256-")?;
        let mut parts = rest.split(',');
        let (derived_hex, salt, iterations) =
            (parts.next()?, parts.next()?, parts.next()?.parse().ok()?);
        if parts.next().is_some() || hex::decode(derived_hex).map_or(true, |d| d.len() != 32) {
            return None;
        }
        Some(PasswordHash {
            derived_hex: derived_hex.to_ascii_lowercase(),
            salt: salt.to_string(),
            iterations,
        })
    }

    pub fn new(password: &str, iterations: u32) -> PasswordHash {
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        let salt = hex::encode(salt);
        PasswordHash {
            derived_hex: derive(password, &salt, iterations),
            salt,
            iterations,
        }
    }

    pub fn verify(&self, password: &str) -> bool {
        let got = derive(password, &self.salt, self.iterations);
        // constant-time comparison
        got.len() == self.derived_hex.len()
            && got
                .bytes()
                .zip(self.derived_hex.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    pub fn stored(&self) -> String {
        format!(
            "-pbkdf2:sha256-{},{},{}",
            self.derived_hex, self.salt, self.iterations
        )
    }
}

fn derive(password: &str, salt: &str, iterations: u32) -> String {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt.as_bytes(), iterations, &mut out);
    hex::encode(out)
}

pub struct Auth {
    admins: HashMap<String, PasswordHash>,
    /// Digests of `name:password` pairs already verified, so PBKDF2 runs once per pair.
    verified: Mutex<HashSet<[u8; 32]>>,
}

impl Auth {
    pub fn new(admins: HashMap<String, PasswordHash>) -> Auth {
        Auth {
            admins,
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// `Ok(None)` for an anonymous request, `Ok(Some(name))` for an admin; bad credentials
    /// are an error whatever the endpoint.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(None);
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
        let digest: [u8; 32] = Sha256::digest(pair.as_bytes()).into();
        if self.verified.lock().unwrap().contains(&digest) {
            return Ok(Some(name.to_string()));
        }
        match self.admins.get(name) {
            Some(hash) if hash.verify(password) => {
                self.verified.lock().unwrap().insert(digest);
                Ok(Some(name.to_string()))
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_roundtrip_and_verify() {
        let h = PasswordHash::new("secret", 10);
        let parsed = PasswordHash::parse(&h.stored()).unwrap();
        assert!(parsed.verify("secret"));
        assert!(!parsed.verify("Secret"));
        assert!(PasswordHash::parse("plaintext").is_none());
    }

    #[test]
    fn matches_couchdb_format() {
        // pbkdf2_hmac("sha256", b"pw", b"salt", 10), computed independently with Python's hashlib
        let stored = "-pbkdf2:sha256-72aecd14244887c316e24019c7e020b58888f029861490804d36e20b42d9321a,salt,10";
        assert!(PasswordHash::parse(stored).unwrap().verify("pw"));
    }
}
