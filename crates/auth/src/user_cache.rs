//! Users read from another member's copy of a clustered authentication database, kept
//! between requests as CouchDB's `chttpd_auth_cache` keeps them (an `ets_lru` emptied of
//! each user its listener sees change in the database's `_changes`).
//!
//! The cache serves only while it follows the database's changes ([`UserCache::follow`]):
//! the caller's listener marks it following once its feed is live and stops it (which
//! empties it) when the feed ends, so no entry outlives the changes that would drop it.
//! CouchDB keeps its entries while its listener restarts (from the last sequence it saw);
//! here they go with the feed, and the next reads fetch them again.
//!
//! A read that races a change (begun before the change was seen, answered after) is not
//! kept: [`UserCache::ticket`] takes the cache's generation before the read, every
//! dropped user moves it, and [`UserCache::insert`] keeps the answer only when it has not
//! moved.
//!
//! Limits, `[chttpd_auth_cache]` as CouchDB reads them (each off when 0): `max_objects`
//! (default 0), `max_size` (bytes of stored documents, default 104857600) and
//! `max_lifetime` (milliseconds since the entry was read, default 600000). Past
//! `max_objects` or `max_size` the least recently used entries go.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::ini::{self, Section};

/// The `[chttpd_auth_cache]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserCacheConfig {
    pub max_objects: usize,
    pub max_size: usize,
    pub max_lifetime_ms: u64,
}

impl Default for UserCacheConfig {
    fn default() -> Self {
        UserCacheConfig::from_section(&Section::new())
    }
}

impl UserCacheConfig {
    pub fn from_section(section: &Section) -> UserCacheConfig {
        UserCacheConfig {
            max_objects: ini::get_int(section, "max_objects", 0).max(0) as usize,
            max_size: ini::get_int(section, "max_size", 104_857_600).max(0) as usize,
            max_lifetime_ms: ini::get_int(section, "max_lifetime", 600_000).max(0) as u64,
        }
    }
}

struct Entry<T> {
    value: T,
    size: usize,
    read_ms: u64,
    used_ms: u64,
}

struct Inner<T> {
    /// The database whose changes drop entries, while they are followed.
    followed: Option<String>,
    /// Moves whenever an entry is dropped.
    generation: u64,
    entries: HashMap<String, Entry<T>>,
    size: usize,
}

/// Permission to keep what a read finds (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    db: String,
    generation: u64,
}

/// The cache, by user name; shared by all requests.
pub struct UserCache<T> {
    inner: Mutex<Inner<T>>,
}

impl<T> Default for UserCache<T> {
    fn default() -> Self {
        UserCache {
            inner: Mutex::new(Inner {
                followed: None,
                generation: 0,
                entries: HashMap::new(),
                size: 0,
            }),
        }
    }
}

impl<T: Clone> UserCache<T> {
    /// Follows the changes of `db` from now on (`None`: of no database). Either way the
    /// cache starts empty.
    pub fn follow(&self, db: Option<&str>) {
        let mut inner = self.inner.lock().unwrap();
        inner.followed = db.map(str::to_owned);
        inner.generation += 1;
        inner.entries.clear();
        inner.size = 0;
    }

    /// Whether the cache follows the changes of `db`.
    pub fn follows(&self, db: &str) -> bool {
        self.inner.lock().unwrap().followed.as_deref() == Some(db)
    }

    /// User `name` of `db`, when kept and not past its lifetime.
    pub fn lookup(&self, db: &str, name: &str, cfg: &UserCacheConfig, now_ms: u64) -> Option<T> {
        let mut inner = self.inner.lock().unwrap();
        if inner.followed.as_deref() != Some(db) {
            return None;
        }
        let entry = inner.entries.get_mut(name)?;
        if cfg.max_lifetime_ms > 0 && now_ms.saturating_sub(entry.read_ms) > cfg.max_lifetime_ms {
            inner.remove(name);
            return None;
        }
        entry.used_ms = now_ms;
        Some(entry.value.clone())
    }

    /// Taken before reading a user of `db` from elsewhere; `None` when the cache does not
    /// follow `db` (what the read finds is then not kept).
    pub fn ticket(&self, db: &str) -> Option<Ticket> {
        let inner = self.inner.lock().unwrap();
        (inner.followed.as_deref() == Some(db)).then(|| Ticket {
            db: db.to_owned(),
            generation: inner.generation,
        })
    }

    /// Keeps user `name` as read under `ticket` (`size`: its stored bytes), unless a
    /// change was seen since the ticket was taken.
    pub fn insert(
        &self,
        ticket: Ticket,
        name: &str,
        value: T,
        size: usize,
        cfg: &UserCacheConfig,
        now_ms: u64,
    ) {
        let mut inner = self.inner.lock().unwrap();
        let current = inner.followed.as_deref() == Some(ticket.db.as_str())
            && inner.generation == ticket.generation;
        if !current || (cfg.max_size > 0 && size > cfg.max_size) {
            return;
        }
        inner.remove(name);
        inner.entries.insert(
            name.to_owned(),
            Entry {
                value,
                size,
                read_ms: now_ms,
                used_ms: now_ms,
            },
        );
        inner.size += size;
        let over = |inner: &Inner<T>| {
            (cfg.max_objects > 0 && inner.entries.len() > cfg.max_objects)
                || (cfg.max_size > 0 && inner.size > cfg.max_size)
        };
        while over(&inner) {
            let oldest = (inner.entries.iter())
                .min_by_key(|(_, e)| e.used_ms)
                .map(|(k, _)| k.clone())
                .expect("an overfull cache has entries");
            inner.remove(&oldest);
        }
    }

    /// Drops user `name` (its document changed).
    pub fn invalidate(&self, name: &str) {
        let mut inner = self.inner.lock().unwrap();
        inner.generation += 1;
        inner.remove(name);
    }

    /// Entries held, for tests.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Inner<T> {
    fn remove(&mut self, name: &str) {
        if let Some(e) = self.entries.remove(name) {
            self.size -= e.size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ini::section;

    fn cached(cache: &UserCache<&'static str>, name: &str, now: u64) -> Option<&'static str> {
        cache.lookup("users", name, &UserCacheConfig::default(), now)
    }

    fn keep(cache: &UserCache<&'static str>, name: &str, v: &'static str, cfg: &UserCacheConfig) {
        keep_at(cache, name, v, cfg, 0);
    }

    fn keep_at(
        cache: &UserCache<&'static str>,
        name: &str,
        v: &'static str,
        cfg: &UserCacheConfig,
        now: u64,
    ) {
        let ticket = cache.ticket("users").expect("followed");
        cache.insert(ticket, name, v, v.len(), cfg, now);
    }

    #[test]
    fn only_a_followed_database_is_kept_and_served() {
        let cache = UserCache::default();
        let cfg = UserCacheConfig::default();
        assert_eq!(cache.ticket("users"), None);
        cache.follow(Some("users"));
        assert_eq!(cache.ticket("other"), None);
        keep(&cache, "bob", "v1", &cfg);
        assert_eq!(cached(&cache, "bob", 1), Some("v1"));
        assert_eq!(cache.lookup("other", "bob", &cfg, 1), None);
        // The feed ended: nothing is served, and following again starts empty.
        cache.follow(None);
        assert_eq!(cached(&cache, "bob", 1), None);
        cache.follow(Some("users"));
        assert!(cache.is_empty());
    }

    #[test]
    fn a_change_drops_the_user_and_a_read_begun_before_it_is_not_kept() {
        let cache = UserCache::default();
        let cfg = UserCacheConfig::default();
        cache.follow(Some("users"));
        keep(&cache, "bob", "v1", &cfg);
        keep(&cache, "ann", "a1", &cfg);
        cache.invalidate("bob");
        assert_eq!(cached(&cache, "bob", 1), None);
        assert_eq!(cached(&cache, "ann", 1), Some("a1"));
        // Read, then a change seen, then the answer arrives: the answer may predate it.
        let ticket = cache.ticket("users").unwrap();
        cache.invalidate("bob");
        cache.insert(ticket, "bob", "v1", 2, &cfg, 0);
        assert_eq!(cached(&cache, "bob", 1), None);
        // A following restarted in between drops the answer too.
        let ticket = cache.ticket("users").unwrap();
        cache.follow(Some("users"));
        cache.insert(ticket, "bob", "v1", 2, &cfg, 0);
        assert_eq!(cached(&cache, "bob", 1), None);
    }

    #[test]
    fn entries_expire_and_the_least_recently_used_go_past_the_limits() {
        let cache = UserCache::default();
        cache.follow(Some("users"));
        let cfg = UserCacheConfig::from_section(&section(&[("max_lifetime", "100")]));
        keep(&cache, "bob", "v1", &cfg);
        assert_eq!(cache.lookup("users", "bob", &cfg, 100), Some("v1"));
        assert_eq!(cache.lookup("users", "bob", &cfg, 101), None);
        assert!(cache.is_empty());

        let cfg = UserCacheConfig::from_section(&section(&[("max_objects", "2")]));
        keep(&cache, "a", "1", &cfg);
        keep(&cache, "b", "2", &cfg);
        cache.lookup("users", "a", &cfg, 5);
        keep_at(&cache, "c", "3", &cfg, 6);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.lookup("users", "b", &cfg, 6), None);
        assert_eq!(cache.lookup("users", "a", &cfg, 6), Some("1"));

        cache.follow(Some("users"));
        let cfg = UserCacheConfig::from_section(&section(&[("max_size", "5")]));
        keep(&cache, "a", "123", &cfg);
        keep(&cache, "b", "45", &cfg);
        assert_eq!(cache.len(), 2);
        cache.lookup("users", "a", &cfg, 5);
        keep_at(&cache, "c", "6", &cfg, 6);
        assert_eq!(cache.lookup("users", "b", &cfg, 6), None);
        keep(&cache, "big", "123456", &cfg);
        assert_eq!(cache.lookup("users", "big", &cfg, 6), None);
        assert_eq!(cache.len(), 2);
    }
}
