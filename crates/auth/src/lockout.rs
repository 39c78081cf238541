//! Temporary lockout after repeated failed logins, as CouchDB 3.4's `couch_auth_lockout`
//! (called from `couch_httpd_auth:authenticate/5` for Basic auth and `POST /_session`).
//!
//! Failures are counted per (peer address, user name, user's password salt) in an LRU
//! cache bounded by `[chttpd_auth_lockout] max_objects` (default 10000) whose entries live
//! `max_lifetime` milliseconds (default 300000) from the first failure, however often they
//! are bumped. Once a key has `threshold` (default 5) failures, `mode = enforce` (the
//! default) refuses further attempts — even with the right password — with 403
//! [`LOCKOUT_REASON`]; `warn` only logs (the caller's job, see [`Verdict::Warn`]); `off`
//! (or any unknown value) disables counting. A success does not reset the count. Because
//! the salt is part of the key, changing the password ends a lockout.
//!
//! Deliberate difference: eviction at `max_objects` drops the least recently *bumped*
//! entry (ets_lru's access order also counts lookups that this module does not make).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::ini::{self, Section};
use crate::Denied;

/// The 403 reason CouchDB sends to a locked-out user.
pub const LOCKOUT_REASON: &str =
    "Account is temporarily locked due to multiple authentication failures";

/// `[chttpd_auth_lockout] mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    Warn,
    Enforce,
}

/// The `[chttpd_auth_lockout]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockoutConfig {
    pub mode: Mode,
    /// Failures that trigger the lockout (default 5).
    pub threshold: u64,
    /// How long a failure count lives, in milliseconds (default 300000).
    pub max_lifetime_ms: u64,
    /// Most (peer, user) pairs tracked at once (default 10000).
    pub max_objects: usize,
}

impl Default for LockoutConfig {
    fn default() -> Self {
        LockoutConfig::from_section(&Section::new())
    }
}

impl LockoutConfig {
    pub fn from_section(section: &Section) -> LockoutConfig {
        LockoutConfig {
            mode: match ini::get_or(section, "mode", "enforce") {
                "enforce" => Mode::Enforce,
                "warn" => Mode::Warn,
                _ => Mode::Off,
            },
            threshold: non_negative(ini::get_int(section, "threshold", 5)),
            max_lifetime_ms: non_negative(ini::get_int(section, "max_lifetime", 300_000)),
            max_objects: non_negative(ini::get_int(section, "max_objects", 10_000)) as usize,
        }
    }
}

fn non_negative(n: i64) -> u64 {
    n.max(0) as u64
}

/// What a check found, for callers that log `warn`-mode hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Under the threshold, or lockout off.
    Clear,
    /// Threshold reached in `warn` mode: let the attempt through, log a warning.
    Warn,
    /// Threshold reached in `enforce` mode: refuse with 403.
    Locked,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    peer: String,
    user: String,
    salt: String,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    failures: u64,
    created_ms: u64,
    touched: u64,
}

#[derive(Default)]
struct Table {
    entries: HashMap<Key, Entry>,
    clock: u64,
}

/// Failure counters, shared by all request handlers (`Send + Sync`; one mutex, held only
/// for a map lookup or update).
#[derive(Default)]
pub struct Lockout {
    table: Mutex<Table>,
}

impl Lockout {
    pub fn new() -> Lockout {
        Lockout::default()
    }

    /// `Err(Forbidden)` when `user` (with password salt `user_salt`) is locked out for
    /// `peer` at `now_ms`.
    pub fn check(
        &self,
        user: &str,
        user_salt: &str,
        peer: &str,
        cfg: &LockoutConfig,
        now_ms: u64,
    ) -> Result<(), Denied> {
        match self.verdict(user, user_salt, peer, cfg, now_ms) {
            Verdict::Locked => Err(Denied::Forbidden(LOCKOUT_REASON.to_string())),
            Verdict::Clear | Verdict::Warn => Ok(()),
        }
    }

    /// Like [`Lockout::check`], telling `warn` hits apart.
    pub fn verdict(
        &self,
        user: &str,
        user_salt: &str,
        peer: &str,
        cfg: &LockoutConfig,
        now_ms: u64,
    ) -> Verdict {
        if cfg.mode == Mode::Off {
            return Verdict::Clear;
        }
        let failures = self.failures(&key(user, user_salt, peer), cfg, now_ms);
        match (failures >= cfg.threshold, cfg.mode) {
            (true, Mode::Enforce) => Verdict::Locked,
            (true, Mode::Warn) => Verdict::Warn,
            _ => Verdict::Clear,
        }
    }

    /// Counts one failed password check.
    pub fn record_failure(
        &self,
        user: &str,
        user_salt: &str,
        peer: &str,
        cfg: &LockoutConfig,
        now_ms: u64,
    ) {
        if cfg.mode == Mode::Off || cfg.max_objects == 0 {
            return;
        }
        let mut table = self.lock();
        table.clock += 1;
        let touched = table.clock;
        let k = key(user, user_salt, peer);
        let fresh = Entry {
            failures: 0,
            created_ms: now_ms,
            touched,
        };
        let entry = table.entries.entry(k).or_insert(fresh);
        if expired(entry, cfg, now_ms) {
            *entry = fresh;
        }
        entry.failures += 1;
        entry.touched = touched;
        evict(&mut table, cfg, now_ms);
    }

    /// How many keys are tracked (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn failures(&self, k: &Key, cfg: &LockoutConfig, now_ms: u64) -> u64 {
        match self.lock().entries.get(k) {
            Some(e) if !expired(e, cfg, now_ms) => e.failures,
            _ => 0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(user: &str, salt: &str, peer: &str) -> Key {
    Key {
        peer: peer.to_string(),
        user: user.to_string(),
        salt: salt.to_string(),
    }
}

fn expired(e: &Entry, cfg: &LockoutConfig, now_ms: u64) -> bool {
    now_ms.saturating_sub(e.created_ms) >= cfg.max_lifetime_ms
}

/// Drops expired entries, then least recently bumped ones, until within `max_objects`.
fn evict(table: &mut Table, cfg: &LockoutConfig, now_ms: u64) {
    if table.entries.len() <= cfg.max_objects {
        return;
    }
    table.entries.retain(|_, e| !expired(e, cfg, now_ms));
    while table.entries.len() > cfg.max_objects {
        let oldest = table
            .entries
            .iter()
            .min_by_key(|(_, e)| e.touched)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => table.entries.remove(&k),
            None => break,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> LockoutConfig {
        let section: Section = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LockoutConfig::from_section(&section)
    }

    fn fail(l: &Lockout, c: &LockoutConfig, n: usize, now: u64) {
        for _ in 0..n {
            l.record_failure("bob", "salt", "10.0.0.1", c, now);
        }
    }

    #[test]
    fn defaults_follow_couchdb() {
        let c = LockoutConfig::default();
        assert_eq!(c.mode, Mode::Enforce);
        assert_eq!(c.threshold, 5);
        assert_eq!(c.max_lifetime_ms, 300_000);
        assert_eq!(c.max_objects, 10_000);
        assert_eq!(cfg(&[("mode", "bogus")]).mode, Mode::Off);
        assert_eq!(cfg(&[("mode", " warn ")]).mode, Mode::Warn);
    }

    #[test]
    fn locks_after_threshold_failures() {
        let (l, c) = (Lockout::new(), LockoutConfig::default());
        fail(&l, &c, 4, 0);
        assert_eq!(l.check("bob", "salt", "10.0.0.1", &c, 1), Ok(()));
        fail(&l, &c, 1, 2);
        assert_eq!(
            l.check("bob", "salt", "10.0.0.1", &c, 3),
            Err(Denied::Forbidden(LOCKOUT_REASON.into()))
        );
    }

    #[test]
    fn other_peers_users_and_salts_are_unaffected() {
        let (l, c) = (Lockout::new(), LockoutConfig::default());
        fail(&l, &c, 5, 0);
        assert_eq!(l.check("bob", "salt", "10.0.0.2", &c, 1), Ok(()));
        assert_eq!(l.check("alice", "salt", "10.0.0.1", &c, 1), Ok(()));
        assert_eq!(l.check("bob", "new salt", "10.0.0.1", &c, 1), Ok(()));
    }

    #[test]
    fn lockout_ends_max_lifetime_after_first_failure() {
        let (l, c) = (Lockout::new(), LockoutConfig::default());
        fail(&l, &c, 4, 0);
        fail(&l, &c, 1, 299_000);
        assert!(l.check("bob", "salt", "10.0.0.1", &c, 299_999).is_err());
        assert_eq!(l.check("bob", "salt", "10.0.0.1", &c, 300_000), Ok(()));
        // A failure after expiry starts a new count.
        fail(&l, &c, 1, 300_001);
        assert_eq!(l.check("bob", "salt", "10.0.0.1", &c, 300_002), Ok(()));
    }

    #[test]
    fn warn_mode_lets_attempts_through() {
        let (l, c) = (Lockout::new(), cfg(&[("mode", "warn"), ("threshold", "2")]));
        fail(&l, &c, 2, 0);
        assert_eq!(l.verdict("bob", "salt", "10.0.0.1", &c, 1), Verdict::Warn);
        assert_eq!(l.check("bob", "salt", "10.0.0.1", &c, 1), Ok(()));
    }

    #[test]
    fn off_mode_counts_nothing() {
        let (l, c) = (Lockout::new(), cfg(&[("mode", "off")]));
        fail(&l, &c, 10, 0);
        assert!(l.is_empty());
        assert_eq!(l.verdict("bob", "salt", "10.0.0.1", &c, 1), Verdict::Clear);
    }

    #[test]
    fn memory_is_bounded_by_max_objects() {
        let (l, c) = (Lockout::new(), cfg(&[("max_objects", "3")]));
        for i in 0..10 {
            l.record_failure(&format!("user{i}"), "", "p", &c, i);
        }
        assert_eq!(l.len(), 3);
        // The most recently bumped survive.
        for _ in 0..5 {
            l.record_failure("user9", "", "p", &c, 20);
        }
        assert!(l.check("user9", "", "p", &c, 21).is_err());
    }

    #[test]
    fn lockout_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Lockout>();
    }
}
