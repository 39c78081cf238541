//! Passwords already verified, as CouchDB 3.5's `couch_passwords_cache`: stored hashes are
//! slow to check on purpose (600000 PBKDF2 rounds), against offline attacks, and that cost
//! should not fall on every request of a logged-in client.
//!
//! After a password has been verified against a stored hash the slow way, the cache keeps
//! a fast hash of it (PBKDF2-SHA256, 5 rounds, salted with the user's salt). The next
//! attempt for the same user and stored hash is checked against that alone, whether the
//! password is right or wrong: a wrong password for a cached user costs a fast hash, as in
//! CouchDB (measured on 3.5.2: about 2 ms, against 400 ms for a user not cached). Failures
//! still count towards the lockout (the caller's job), which is what limits guessing.
//!
//! Entries live `[couch_passwords_cache] max_idle` milliseconds since last used (default
//! 600000), at most `max_objects` of them (default 10000; the least recently used goes);
//! `enable = false` turns the cache off.
//!
//! Deliberate difference: CouchDB keys an entry by user name and salt only, so a stored
//! hash rewritten with the same salt (an admin writing `derived_key` directly) keeps
//! accepting the old password, and refusing the new one, until the entry idles out. Here
//! the key is the user name and the whole stored hash, so any change of a user's hash
//! fields takes effect at the next request.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::Hmac;
use sha2::{Digest, Sha256};

use crate::ini::{self, Section};
use crate::password::{constant_time_eq, PasswordHash};

/// CouchDB's `?FAST_ITERATIONS`.
const FAST_ITERATIONS: u32 = 5;

/// The `[couch_passwords_cache]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    pub enable: bool,
    pub max_objects: usize,
    pub max_idle_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig::from_section(&Section::new())
    }
}

impl CacheConfig {
    pub fn from_section(section: &Section) -> CacheConfig {
        CacheConfig {
            enable: ini::get_bool(section, "enable", true),
            max_objects: ini::get_int(section, "max_objects", 10_000).max(0) as usize,
            max_idle_ms: ini::get_int(section, "max_idle", 600_000).max(0) as u64,
        }
    }
}

/// How a password was checked, for the `password_hashing_fast`/`_slow` statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Fast hashes computed (a cache lookup or insertion).
    pub fast: u64,
    /// Slow hashes computed (the stored hash's own scheme).
    pub slow: u64,
}

/// The outcome of [`PasswordCache::verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub ok: bool,
    pub cost: Cost,
}

struct Entry {
    fast: [u8; 32],
    used_ms: u64,
}

/// The cache; shared by all requests.
#[derive(Default)]
pub struct PasswordCache {
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

impl PasswordCache {
    /// Checks `password` for the user `name` whose stored hash is `hash`: against the
    /// cached fast hash when there is one, else the slow way, remembering a success.
    pub fn verify(
        &self,
        name: &str,
        password: &str,
        hash: &PasswordHash,
        cfg: &CacheConfig,
        now_ms: u64,
    ) -> Checked {
        let mut cost = Cost::default();
        if !cfg.enable || cfg.max_objects == 0 {
            cost.slow = 1;
            return Checked {
                ok: hash.verify(password),
                cost,
            };
        }
        let key = key(name, hash);
        let cached = self.lookup(&key, cfg, now_ms);
        if let Some(expected) = cached {
            cost.fast = 1;
            let ok = constant_time_eq(&fast_hash(password, hash.salt()), &expected);
            return Checked { ok, cost };
        }
        cost.slow = 1;
        if !hash.verify(password) {
            return Checked { ok: false, cost };
        }
        cost.fast = 1;
        self.insert(key, fast_hash(password, hash.salt()), cfg, now_ms);
        Checked { ok: true, cost }
    }

    /// The fast hash of a live entry, which is marked used; an idle one is dropped.
    fn lookup(&self, key: &[u8; 32], cfg: &CacheConfig, now_ms: u64) -> Option<[u8; 32]> {
        let mut entries = self.entries.lock().unwrap();
        let entry = entries.get_mut(key)?;
        if now_ms.saturating_sub(entry.used_ms) > cfg.max_idle_ms {
            entries.remove(key);
            return None;
        }
        entry.used_ms = now_ms;
        Some(entry.fast)
    }

    fn insert(&self, key: [u8; 32], fast: [u8; 32], cfg: &CacheConfig, now_ms: u64) {
        let mut entries = self.entries.lock().unwrap();
        if !entries.contains_key(&key) && entries.len() >= cfg.max_objects {
            entries.retain(|_, e| now_ms.saturating_sub(e.used_ms) <= cfg.max_idle_ms);
            while entries.len() >= cfg.max_objects {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, e)| e.used_ms)
                    .map(|(k, _)| *k)
                    .expect("a full cache has entries");
                entries.remove(&oldest);
            }
        }
        entries.insert(
            key,
            Entry {
                fast,
                used_ms: now_ms,
            },
        );
    }

    /// Entries held, for tests.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The user and everything about their stored hash (scheme, rounds, salt, derived key).
fn key(name: &str, hash: &PasswordHash) -> [u8; 32] {
    Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([0])
        .chain_update(hash.stored().as_bytes())
        .finalize()
        .into()
}

/// `crypto:pbkdf2_hmac(sha256, Password, Salt, 5, 32)`.
fn fast_hash(password: &str, salt: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2::<Hmac<Sha256>>(
        password.as_bytes(),
        salt.as_bytes(),
        FAST_ITERATIONS,
        &mut out,
    )
    .expect("any key length");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ini::section;

    fn hash(pw: &str) -> PasswordHash {
        PasswordHash::new(pw, 10)
    }

    #[test]
    fn a_verified_password_is_then_checked_fast_right_or_wrong() {
        let cache = PasswordCache::default();
        let cfg = CacheConfig::default();
        let h = hash("right");
        let slow = |ok| Checked {
            ok,
            cost: Cost { fast: 0, slow: 1 },
        };
        let fast = |ok| Checked {
            ok,
            cost: Cost { fast: 1, slow: 0 },
        };
        assert_eq!(cache.verify("bob", "wrong", &h, &cfg, 0), slow(false));
        assert!(cache.is_empty(), "a failure is not remembered");
        let first = cache.verify("bob", "right", &h, &cfg, 1);
        assert_eq!(
            first,
            Checked {
                ok: true,
                cost: Cost { fast: 1, slow: 1 }
            }
        );
        assert_eq!(cache.verify("bob", "right", &h, &cfg, 2), fast(true));
        assert_eq!(cache.verify("bob", "wrong", &h, &cfg, 3), fast(false));
        assert_eq!(cache.verify("bob", "right", &h, &cfg, 4), fast(true));
    }

    #[test]
    fn another_stored_hash_is_another_entry() {
        let cache = PasswordCache::default();
        let cfg = CacheConfig::default();
        let old = hash("right");
        assert!(cache.verify("bob", "right", &old, &cfg, 0).ok);
        // A new password, even under the same salt, is checked against the new hash.
        let new = PasswordHash::hashed(old.scheme(), "other", Some(old.salt()));
        assert!(!cache.verify("bob", "right", &new, &cfg, 1).ok);
        assert!(cache.verify("bob", "other", &new, &cfg, 2).ok);
        // Another user with the same hash does not share the entry.
        assert_eq!(cache.verify("eve", "right", &old, &cfg, 3).cost.slow, 1);
    }

    #[test]
    fn idle_entries_expire_and_the_least_recently_used_goes() {
        let cache = PasswordCache::default();
        let cfg = CacheConfig::from_section(&section(&[("max_objects", "2"), ("max_idle", "100")]));
        let (a, b, c) = (hash("a"), hash("b"), hash("c"));
        cache.verify("a", "a", &a, &cfg, 0);
        assert_eq!(cache.verify("a", "a", &a, &cfg, 100).cost.slow, 0);
        assert_eq!(cache.verify("a", "a", &a, &cfg, 201).cost.slow, 1, "idle");
        cache.verify("b", "b", &b, &cfg, 210);
        cache.verify("a", "a", &a, &cfg, 220);
        cache.verify("c", "c", &c, &cfg, 230);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.verify("a", "a", &a, &cfg, 240).cost.slow, 0);
        assert_eq!(
            cache.verify("b", "b", &b, &cfg, 250).cost.slow,
            1,
            "evicted"
        );
    }

    #[test]
    fn disabled() {
        let cache = PasswordCache::default();
        let cfg = CacheConfig::from_section(&section(&[("enable", "false")]));
        let h = hash("pw");
        assert!(cache.verify("bob", "pw", &h, &cfg, 0).ok);
        assert_eq!(cache.verify("bob", "pw", &h, &cfg, 1).cost.slow, 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn fast_hash_is_couchdbs() {
        // hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 5).hex()
        assert_eq!(
            hex::encode(fast_hash("pw", "salt")),
            "1ab5844387c637f7d666a1d0ba6e047414a0a9131eb16e2239d3b455fdf90314"
        );
    }
}
