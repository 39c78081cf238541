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

/// The pseudo-random function under PBKDF2 (`pbkdf2_prf`, Erlang hash names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prf {
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl Prf {
    fn key_len(self) -> usize {
        match self {
            Prf::Sha1 => 20,
            Prf::Sha224 => 28,
            Prf::Sha256 => 32,
            Prf::Sha384 => 48,
            Prf::Sha512 => 64,
        }
    }

    /// The `pbkdf2_prf` field of a user document (and `[chttpd_auth] pbkdf2_prf`).
    pub fn name(self) -> &'static str {
        match self {
            Prf::Sha1 => "sha",
            Prf::Sha224 => "sha224",
            Prf::Sha256 => "sha256",
            Prf::Sha384 => "sha384",
            Prf::Sha512 => "sha512",
        }
    }

    pub fn parse(name: &str) -> Option<Prf> {
        [
            Prf::Sha1,
            Prf::Sha224,
            Prf::Sha256,
            Prf::Sha384,
            Prf::Sha512,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// How a password is hashed: PBKDF2, or CouchDB 1.x's `simple` scheme (hex SHA-1 of the
/// password followed by the salt), still accepted for documents that carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Pbkdf2 { prf: Prf, iterations: u32 },
    Simple,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordHash {
    scheme: Scheme,
    derived_hex: String,
    salt: String,
}

impl PasswordHash {
    /// Parses a config-file hash (`-pbkdf2:<prf>-…`, `-pbkdf2-…`, or the legacy
    /// `-hashed-<sha1 hex>,<salt>`); `None` for anything else (such as a plaintext
    /// password).
    pub fn parse(stored: &str) -> Option<PasswordHash> {
        if let Some(rest) = stored.strip_prefix("-hashed-") {
            let (sha, salt) = rest.split_once(',')?;
            return PasswordHash::checked(Scheme::Simple, sha, salt);
        }
        let (prf, rest) = match stored.strip_prefix("-pbkdf2:") {
            Some(r) => {
                let (name, rest) = r.split_once('-')?;
                (Prf::parse(name)?, rest)
            }
            None => (Prf::Sha1, stored.strip_prefix("-pbkdf2-")?),
        };
        let mut parts = rest.split(',');
        let (derived_hex, salt, iterations) =
            (parts.next()?, parts.next()?, parts.next()?.parse().ok()?);
        if parts.next().is_some() {
            return None;
        }
        PasswordHash::checked(Scheme::Pbkdf2 { prf, iterations }, derived_hex, salt)
    }

    /// The hash a user document carries, read as CouchDB's `authenticate` reads it: the
    /// scheme defaults to `simple`, `pbkdf2_prf` to SHA-1 and `iterations` to 10000, the
    /// salt to empty; `None` when the document has no usable hash (nobody can log in).
    pub fn from_user_doc(doc: &Map<String, Value>) -> Option<PasswordHash> {
        let text = |k: &str| doc.get(k).and_then(Value::as_str);
        let salt = text("salt").unwrap_or("");
        match text("password_scheme") {
            None if doc.contains_key("password_scheme") => None,
            None | Some("simple") => {
                PasswordHash::checked(Scheme::Simple, text("password_sha")?, salt)
            }
            Some("pbkdf2") => {
                let prf = match doc.get("pbkdf2_prf") {
                    None => Prf::Sha1,
                    Some(v) => Prf::parse(v.as_str()?)?,
                };
                let iterations = match doc.get("iterations") {
                    None => 10_000,
                    Some(v) => u32::try_from(v.as_u64()?).ok()?,
                };
                let scheme = Scheme::Pbkdf2 { prf, iterations };
                PasswordHash::checked(scheme, text("derived_key")?, salt)
            }
            Some(_) => None,
        }
    }

    fn checked(scheme: Scheme, derived_hex: &str, salt: &str) -> Option<PasswordHash> {
        let (key_len, ok) = match scheme {
            Scheme::Pbkdf2 { prf, iterations } => (prf.key_len(), iterations > 0),
            Scheme::Simple => (20, true),
        };
        let ok = ok && hex::decode(derived_hex).is_ok_and(|d| d.len() == key_len);
        ok.then(|| PasswordHash {
            scheme,
            derived_hex: derived_hex.to_ascii_lowercase(),
            salt: salt.to_string(),
        })
    }

    /// A fresh PBKDF2-SHA256 hash with a random 128-bit salt.
    pub fn new(password: &str, iterations: u32) -> PasswordHash {
        PasswordHash::with_prf(password, Prf::Sha256, iterations)
    }

    /// A fresh PBKDF2 hash under `prf`, with a random 128-bit salt (32 hex digits, as
    /// `couch_uuids:random()`).
    pub fn with_prf(password: &str, prf: Prf, iterations: u32) -> PasswordHash {
        PasswordHash::hashed(Scheme::Pbkdf2 { prf, iterations }, password, None)
    }

    /// A fresh `simple` hash (`[chttpd_auth] password_scheme = simple`).
    pub fn simple(password: &str) -> PasswordHash {
        PasswordHash::hashed(Scheme::Simple, password, None)
    }

    /// The password hashed under `scheme` with `salt`, or a new random salt.
    pub fn hashed(scheme: Scheme, password: &str, salt: Option<&str>) -> PasswordHash {
        let salt = salt.map_or_else(random_salt, str::to_string);
        PasswordHash {
            derived_hex: derive(scheme, password, &salt),
            scheme,
            salt,
        }
    }

    pub fn verify(&self, password: &str) -> bool {
        let got = derive(self.scheme, password, &self.salt);
        constant_time_eq(got.as_bytes(), self.derived_hex.as_bytes())
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The salt, which session cookies mix into their signature so that a password change
    /// invalidates them.
    pub fn salt(&self) -> &str {
        &self.salt
    }

    /// The config-file form.
    pub fn stored(&self) -> String {
        let (d, s) = (&self.derived_hex, &self.salt);
        match self.scheme {
            Scheme::Pbkdf2 {
                prf: Prf::Sha1,
                iterations,
            } => format!("-pbkdf2-{d},{s},{iterations}"),
            Scheme::Pbkdf2 { prf, iterations } => {
                format!("-pbkdf2:{}-{d},{s},{iterations}", prf.name())
            }
            Scheme::Simple => format!("-hashed-{d},{s}"),
        }
    }

    /// The fields a `_users` document stores, in CouchDB's order.
    pub fn user_doc_fields(&self) -> Map<String, Value> {
        let v = match self.scheme {
            Scheme::Pbkdf2 { prf, iterations } => json!({
                "password_scheme": "pbkdf2",
                "pbkdf2_prf": prf.name(),
                "salt": self.salt,
                "iterations": iterations,
                "derived_key": self.derived_hex,
            }),
            Scheme::Simple => json!({
                "password_scheme": "simple",
                "salt": self.salt,
                "password_sha": self.derived_hex,
            }),
        };
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }
}

fn random_salt() -> String {
    let mut salt = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut salt);
    hex::encode(salt)
}

fn derive(scheme: Scheme, password: &str, salt: &str) -> String {
    let (p, s) = (password.as_bytes(), salt.as_bytes());
    let Scheme::Pbkdf2 { prf, iterations } = scheme else {
        use sha1::Digest;
        return hex::encode(sha1::Sha1::new().chain_update(p).chain_update(s).finalize());
    };
    let mut out = vec![0u8; prf.key_len()];
    let n = iterations;
    match prf {
        Prf::Sha1 => pbkdf2::pbkdf2::<Hmac<sha1::Sha1>>(p, s, n, &mut out),
        Prf::Sha224 => pbkdf2::pbkdf2::<Hmac<sha2::Sha224>>(p, s, n, &mut out),
        Prf::Sha256 => pbkdf2::pbkdf2::<Hmac<Sha256>>(p, s, n, &mut out),
        Prf::Sha384 => pbkdf2::pbkdf2::<Hmac<sha2::Sha384>>(p, s, n, &mut out),
        Prf::Sha512 => pbkdf2::pbkdf2::<Hmac<sha2::Sha512>>(p, s, n, &mut out),
    }
    .expect("any key length");
    hex::encode(out)
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
    fn simple_scheme() {
        // hashlib.sha1(b"pw" + b"salt").hexdigest(), from Python
        let sha = "2bfa821dd4f3af5adfb5734457839bed7b324819";
        let doc = json!({"password_sha": sha, "salt": "salt"});
        let h = PasswordHash::from_user_doc(doc.as_object().unwrap()).unwrap();
        assert_eq!(h.scheme(), Scheme::Simple);
        assert!(h.verify("pw"));
        assert!(!h.verify("px"));
        let h = PasswordHash::parse(&format!("-hashed-{sha},salt")).unwrap();
        assert!(h.verify("pw"));
        let fresh = PasswordHash::simple("pw");
        assert!(PasswordHash::from_user_doc(&fresh.user_doc_fields())
            .unwrap()
            .verify("pw"));
    }

    #[test]
    fn user_doc_defaults() {
        // pbkdf2_hmac("sha1", b"pw", b"salt", 10000).hex(), from Python's hashlib
        let key = "a36d0eb613e73e0cd75ba13cbafd6ef3e9a230db";
        let doc = json!({"password_scheme": "pbkdf2", "derived_key": key, "salt": "salt"});
        let h = PasswordHash::from_user_doc(doc.as_object().unwrap()).unwrap();
        assert!(h.verify("pw"));
        let other = json!({"password_scheme": "bcrypt", "derived_key": key, "salt": "salt"});
        assert!(PasswordHash::from_user_doc(other.as_object().unwrap()).is_none());
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
