//! Password hashes in CouchDB's stored formats: server admins in the config as
//! `-pbkdf2:sha256-<derived key hex>,<salt>,<iterations>` (or the older SHA-1 form
//! `-pbkdf2-…`), and `_users` documents' `password_scheme: "pbkdf2"` fields
//! (`derived_key`, `salt`, `iterations`, `pbkdf2_prf`).

use hmac::Hmac;
use rand::RngCore;
use serde_json::{json, Map, Value};
use sha2::Sha256;

/// CouchDB 3.4+'s default work factor for `pbkdf2:sha256` (`[chttpd_auth] iterations`).
pub const DEFAULT_ITERATIONS: u32 = 600_000;

/// The pseudo-random function under PBKDF2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prf {
    Sha1,
    Sha256,
}

impl Prf {
    fn key_len(self) -> usize {
        match self {
            Prf::Sha1 => 20,
            Prf::Sha256 => 32,
        }
    }

    /// The `pbkdf2_prf` field of a user document.
    pub fn name(self) -> &'static str {
        match self {
            Prf::Sha1 => "sha",
            Prf::Sha256 => "sha256",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordHash {
    prf: Prf,
    derived_hex: String,
    salt: String,
    iterations: u32,
}

impl PasswordHash {
    /// Parses a config-file hash; `None` for anything else (such as a plaintext password).
    pub fn parse(stored: &str) -> Option<PasswordHash> {
        let (prf, rest) = if let Some(r) = stored.strip_prefix("-pbkdf2:sha256-") {
            (Prf::Sha256, r)
        } else {
            (Prf::Sha1, stored.strip_prefix("-pbkdf2-")?)
        };
        let mut parts = rest.split(',');
        let (derived_hex, salt, iterations) =
            (parts.next()?, parts.next()?, parts.next()?.parse().ok()?);
        if parts.next().is_some() {
            return None;
        }
        PasswordHash::checked(prf, derived_hex, salt, iterations)
    }

    /// The hash stored in a `_users` document, if it has a PBKDF2 one.
    pub fn from_user_doc(doc: &Map<String, Value>) -> Option<PasswordHash> {
        if doc.get("password_scheme")?.as_str()? != "pbkdf2" {
            return None;
        }
        let prf = match doc.get("pbkdf2_prf").and_then(Value::as_str) {
            None | Some("sha") => Prf::Sha1,
            Some("sha256") => Prf::Sha256,
            Some(_) => return None,
        };
        let iterations = u32::try_from(doc.get("iterations")?.as_u64()?).ok()?;
        PasswordHash::checked(
            prf,
            doc.get("derived_key")?.as_str()?,
            doc.get("salt")?.as_str()?,
            iterations,
        )
    }

    fn checked(prf: Prf, derived_hex: &str, salt: &str, iterations: u32) -> Option<PasswordHash> {
        let ok = hex::decode(derived_hex).is_ok_and(|d| d.len() == prf.key_len());
        (ok && iterations > 0).then(|| PasswordHash {
            prf,
            derived_hex: derived_hex.to_ascii_lowercase(),
            salt: salt.to_string(),
            iterations,
        })
    }

    /// A fresh PBKDF2-SHA256 hash with a random 128-bit salt.
    pub fn new(password: &str, iterations: u32) -> PasswordHash {
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        let salt = hex::encode(salt);
        PasswordHash {
            prf: Prf::Sha256,
            derived_hex: derive(Prf::Sha256, password, &salt, iterations),
            salt,
            iterations,
        }
    }

    pub fn verify(&self, password: &str) -> bool {
        let got = derive(self.prf, password, &self.salt, self.iterations);
        constant_time_eq(got.as_bytes(), self.derived_hex.as_bytes())
    }

    /// The salt, which session cookies mix into their signature so that a password change
    /// invalidates them.
    pub fn salt(&self) -> &str {
        &self.salt
    }

    /// The config-file form.
    pub fn stored(&self) -> String {
        match self.prf {
            Prf::Sha256 => format!(
                "-pbkdf2:sha256-{},{},{}",
                self.derived_hex, self.salt, self.iterations
            ),
            Prf::Sha1 => format!(
                "-pbkdf2-{},{},{}",
                self.derived_hex, self.salt, self.iterations
            ),
        }
    }

    /// The fields a `_users` document stores, in CouchDB's order.
    pub fn user_doc_fields(&self) -> Map<String, Value> {
        let v = json!({
            "password_scheme": "pbkdf2",
            "pbkdf2_prf": self.prf.name(),
            "iterations": self.iterations,
            "derived_key": self.derived_hex,
            "salt": self.salt,
        });
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }
}

fn derive(prf: Prf, password: &str, salt: &str, iterations: u32) -> String {
    let (p, s) = (password.as_bytes(), salt.as_bytes());
    match prf {
        Prf::Sha256 => {
            let mut out = [0u8; 32];
            pbkdf2::pbkdf2::<Hmac<Sha256>>(p, s, iterations, &mut out).expect("any key length");
            hex::encode(out)
        }
        Prf::Sha1 => {
            let mut out = [0u8; 20];
            pbkdf2::pbkdf2::<Hmac<sha1::Sha1>>(p, s, iterations, &mut out).expect("any key length");
            hex::encode(out)
        }
    }
}

/// Compares without an early exit, so timing reveals nothing about where inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
        let fields = h.user_doc_fields();
        assert!(PasswordHash::from_user_doc(&fields)
            .unwrap()
            .verify("secret"));
    }

    #[test]
    fn matches_couchdb_format() {
        // pbkdf2_hmac("sha256", b"pw", b"salt", 10), computed independently with Python's hashlib
        let stored = "-pbkdf2:sha256-72aecd14244887c316e24019c7e020b58888f029861490804d36e20b42d9321a,salt,10";
        assert!(PasswordHash::parse(stored).unwrap().verify("pw"));
    }

    #[test]
    fn legacy_sha1() {
        // pbkdf2_hmac("sha1", b"pw", b"salt", 10).hex(), from Python's hashlib
        let stored = "-pbkdf2-21666cdc0723a960de8307513199d3f1071c7f22,salt,10";
        let h = PasswordHash::parse(stored).unwrap();
        assert!(h.verify("pw"));
        assert!(!h.verify("pW"));
    }
}
