//! The node's users as authentication finds them (CouchDB's `chttpd_auth_cache`): server
//! admins from `[admins]`, other users from the authentication database's documents; a
//! name and password checked (with the lockout, the password cache, and a stored hash
//! upgraded after a login), and session cookies made and verified. Which credentials a
//! request offers, and in which order they are tried, is the caller's.
//!
//! Threading: lookups and logins block (the user document's read, PBKDF2); a hash
//! upgrade runs on a thread of its own.

use crate::config::NodeConfig;
use crate::settings::{auth_db, auth_section, password_rules};
use crate::{Error, Node, Result};
use serde_json::{Map, Value};
use settee_auth::cookie::{self, CookieOptions, CookieStatus};
use settee_auth::lockout::{Lockout, LockoutConfig};
use settee_auth::password::{PasswordHash, Scheme};
use settee_auth::password_cache::{CacheConfig, PasswordCache};
use settee_auth::password_rules::PasswordRules;
use settee_auth::user_cache::{UserCache, UserCacheConfig};
use settee_auth::{users, UserCtx, ADMIN_ROLE};
use settee_core::ParsedDoc;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// A session a cookie names.
#[derive(Debug, Clone)]
pub struct Session {
    pub user: UserCtx,
    /// A renewed cookie (`Set-Cookie` value) to send back, when one is due.
    pub renew: Option<String>,
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

/// A known user: roles and password hash (whose salt also keys their cookies), and the
/// user document they come from, if any.
pub struct Known {
    pub roles: Vec<String>,
    pub hash: PasswordHash,
    pub doc: Option<UserDoc>,
}

/// A user document as read for authentication.
#[derive(Clone)]
pub struct UserDoc {
    id: String,
    rev: settee_core::Rev,
    /// The stored bytes (body and attachment stubs).
    stored: Vec<u8>,
    body: Map<String, Value>,
}

/// What the node keeps about its users between requests.
#[derive(Default)]
pub struct Users {
    /// Passwords verified against a user's stored hash, so that its slow hash runs once
    /// (and again after a password change); `[couch_passwords_cache]`.
    passwords: PasswordCache,
    lockout: Lockout,
    /// Users whose password hash is being upgraded (or was, less than 5 s ago).
    upgrading: Arc<Mutex<HashSet<String>>>,
    /// Users of a clustered authentication database read from another member's copy,
    /// kept while [`crate::auth_cache`] follows the database's changes.
    pub(crate) remote: UserCache<UserDoc>,
}

impl Users {
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
}

impl Node {
    /// Checks a name and password (HTTP Basic, `POST /_session`), with the lockout: the
    /// user and their password salt (which signs their session cookies); `None` for
    /// unknown users and wrong passwords, `Err(403)` while locked out.
    pub fn login(
        &self,
        name: &str,
        password: &str,
        peer: &str,
    ) -> Result<Option<(UserCtx, String)>> {
        let (node, users) = (&*self.config, &self.users);
        let known = self.lookup_user(name)?;
        let lockout = LockoutConfig::from_section(&node.section("chttpd_auth_lockout"));
        // Unknown names count too, under an empty salt, as CouchDB counts them.
        let salt = known
            .as_ref()
            .map_or_else(String::new, |k| k.hash.salt().to_string());
        users.lockout.check(name, &salt, peer, &lockout, now_ms())?;
        if let Some(known) = known {
            check_iterations(&known.hash, node)?;
            if users.verify(name, password, &known.hash, node) {
                if let Some(doc) = known.doc {
                    self.maybe_upgrade(name, password, doc);
                }
                return Ok(Some((UserCtx::named(name, known.roles), salt)));
            }
        }
        users
            .lockout
            .record_failure(name, &salt, peer, &lockout, now_ms());
        Ok(None)
    }

    /// CouchDB 3.4+'s `upgrade_hash_on_auth` (default on): after a successful login with
    /// a user document hashed otherwise than the settings say, the document is rewritten
    /// with the password hashed anew under them, keeping the salt; in the background, at
    /// most once per user every 5 s, as `couch_password_hasher` does.
    fn maybe_upgrade(&self, name: &str, password: &str, doc: UserDoc) {
        let (node, couch) = (&*self.config, &self.couch);
        if !node.get_bool("chttpd_auth", "upgrade_hash_on_auth", true) {
            return;
        }
        let rules = password_rules(node);
        if !rules.needs_upgrade(&doc.body) {
            return;
        }
        // Where the document is written: through the cluster when the database is
        // clustered (as `user_doc` reads it), else this node's database.
        let auth = auth_db(node);
        let write: Box<dyn FnOnce(ParsedDoc) -> std::result::Result<(), String> + Send> =
            match self.cluster().and_then(|c| c.db(&auth)) {
                Some(_) => {
                    let (Some(fabric), Ok(runtime)) =
                        (self.fabric(), tokio::runtime::Handle::try_current())
                    else {
                        return;
                    };
                    Box::new(move |doc| {
                        let (admin, opts) = (UserCtx::server_admin(), Default::default());
                        let written = fabric.update_doc(&auth, &admin, doc, opts);
                        runtime
                            .block_on(written)
                            .map(drop)
                            .map_err(|e| e.to_string())
                    })
                }
                None => {
                    let Ok(db) = couch.get(&auth) else {
                        return;
                    };
                    Box::new(move |doc| write_local(&db, doc))
                }
            };
        if !self
            .users
            .upgrading
            .lock()
            .unwrap()
            .insert(name.to_string())
        {
            return;
        }
        let (name, password) = (name.to_string(), password.to_string());
        let upgrading = self.users.upgrading.clone();
        std::thread::spawn(move || {
            match rehashed(doc, &password, &rules).and_then(write) {
                Ok(()) => tracing::info!(user = %name, "upgraded the stored password hash"),
                Err(e) => tracing::warn!(user = %name, error = %e, "upgrading a password hash"),
            }
            std::thread::sleep(std::time::Duration::from_secs(5));
            upgrading.lock().unwrap().remove(&name);
        });
    }

    /// The user an `AuthSession` cookie's value names, when it is signed by them and
    /// current, with a renewed cookie (`Set-Cookie` value) when it is due; `None`
    /// otherwise (the request stays anonymous); malformed, CouchDB's 400.
    pub fn session(&self, value: &str) -> Result<Option<Session>> {
        let c = cookie::parse(value).ok_or_else(|| Error::bad_request(cookie::MALFORMED_REASON))?;
        let opts = CookieOptions::from_section(&auth_section(&self.config));
        let Some(secret) = &opts.secret else {
            return Ok(None);
        };
        let Some(known) = self.lookup_user(&c.name)? else {
            return Ok(None);
        };
        let salt = known.hash.salt().as_bytes();
        if !c.verify(secret.as_bytes(), salt, &opts.hash_algorithms) {
            return Ok(None);
        }
        let now = now_secs();
        let renew = match c.status(now, opts.timeout) {
            CookieStatus::Expired => return Ok(None),
            CookieStatus::Valid => None,
            CookieStatus::Renew => Some(cookie_header(&opts, &c.name, secret, salt, now)),
        };
        let user = UserCtx::named(&c.name, known.roles);
        Ok(Some(Session { user, renew }))
    }

    /// A `Set-Cookie` value opening a session of `name` (whose password salt is `salt`);
    /// the session secret (`[chttpd_auth] secret`) is made, and kept, on first use, as
    /// CouchDB makes it.
    pub fn session_cookie(&self, name: &str, salt: &str) -> Result<String> {
        let section = auth_section(&self.config);
        let opts = CookieOptions::from_section(&section);
        let secret = match section.get("secret").filter(|s| !s.is_empty()) {
            Some(s) => s.clone(),
            None => {
                let secret = hex::encode(rand::random::<[u8; 16]>());
                self.config.set("chttpd_auth", "secret", &secret)?;
                secret
            }
        };
        Ok(cookie_header(
            &opts,
            name,
            &secret,
            salt.as_bytes(),
            now_secs(),
        ))
    }

    /// A `Set-Cookie` value ending the session.
    pub fn cleared_session_cookie(&self) -> String {
        let opts = CookieOptions::from_section(&auth_section(&self.config));
        opts.clear_cookie(now_secs(), false)
    }

    /// Finds a user as CouchDB's `chttpd_auth_cache:get_user_creds/2` does: a server admin
    /// of `[admins]` (whose roles gain those of a user document of the same name), else the
    /// user document in the authentication database (`[chttpd_auth] authentication_db`). A
    /// user document with conflicts is refused (401) unless `[chttpd_auth]
    /// allow_conflicted_user_docs` is true.
    pub fn lookup_user(&self, name: &str) -> Result<Option<Known>> {
        let node = &*self.config;
        let admin = node
            .get("admins", name)
            .and_then(|s| PasswordHash::parse(&s));
        let doc = self.user_doc(name)?;
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
}

fn cookie_header(opts: &CookieOptions, name: &str, secret: &str, salt: &[u8], now: u64) -> String {
    let value = cookie::make(name, secret.as_bytes(), salt, now, opts.signing_alg());
    opts.set_cookie(&value, now, false)
}

impl Node {
    /// The user's document in the authentication database, if it exists and is not
    /// deleted. A clustered authentication database is read from a copy of the range
    /// holding the document: this member's when it holds one, else another member's, kept
    /// between requests while its changes are followed ([`crate::auth_cache`]).
    fn user_doc(&self, name: &str) -> Result<Option<UserDoc>> {
        let config = &*self.config;
        let auth = auth_db(config);
        let id = format!("{}{name}", users::PREFIX);
        let Some(map) = self.cluster().and_then(|c| c.db(&auth)) else {
            return match self.couch.get(&auth) {
                Ok(db) => user_doc_in(&db, id, config),
                Err(_) => Ok(None),
            };
        };
        let copies = map.copies_of(&id);
        let copy = map.copy_name(&auth, &copies.range);
        if copies.nodes.iter().any(|n| n == settee_core::node::name()) {
            if let Ok(db) = self.couch.get(&copy) {
                return user_doc_in(&db, id, config);
            }
        }
        let (cache, metrics) = (&self.users.remote, settee_metrics::global());
        let cfg = UserCacheConfig::from_section(&config.section("chttpd_auth_cache"));
        if let Some(doc) = cache.lookup(&auth, name, &cfg, now_ms()) {
            metrics.auth_cache_hits.inc();
            return Ok(Some(doc));
        }
        metrics.auth_cache_misses.inc();
        let ticket = cache.ticket(&auth);
        let enc = crate::cluster_setup::enc;
        let target = format!("/{}/{}?conflicts=true", enc(&copy), enc(&id));
        for member in &copies.nodes {
            let asked = self.peer_json(member, "GET", &target, None, None);
            let answer =
                tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(asked));
            match answer {
                Ok(Some(a)) if a.status == 200 => {
                    let doc = remote_user_doc(&a.body, id, config)?;
                    if let (Some(ticket), Some(doc)) = (ticket, &doc) {
                        let size = doc.stored.len();
                        cache.insert(ticket, name, doc.clone(), size, &cfg, now_ms());
                    }
                    return Ok(doc);
                }
                Ok(Some(a)) if a.status == 404 => return Ok(None),
                other => tracing::warn!(%member, answer = ?other.map(|a| a.map(|a| a.status)),
                    "reading a user from the authentication database's copy"),
            }
        }
        Ok(None)
    }
}

/// A user's document as another member's copy answered it (with `_conflicts`).
fn remote_user_doc(answer: &[u8], id: String, node: &NodeConfig) -> Result<Option<UserDoc>> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(answer) else {
        return Ok(None);
    };
    let conflicted = body
        .shift_remove("_conflicts")
        .and_then(|c| c.as_array().map(|c| !c.is_empty()))
        .unwrap_or(false);
    if conflicted && !node.get_bool("chttpd_auth", "allow_conflicted_user_docs", false) {
        return Err(conflicts_refused());
    }
    body.shift_remove("_id");
    let rev = (body.shift_remove("_rev"))
        .and_then(|r| r.as_str().and_then(|r| settee_core::Rev::parse(r).ok()));
    let Some(rev) = rev else {
        return Ok(None);
    };
    Ok(Some(UserDoc {
        id,
        rev,
        stored: serde_json::to_vec(&body).expect("json"),
        body,
    }))
}

/// CouchDB's refusal of a user document with conflicts.
fn conflicts_refused() -> Error {
    Error::Unauthorized(
        "User document conflicts must be resolved before the document is used for \
         authentication purposes."
            .into(),
    )
}

/// The user's document `id` in authentication database `db`, if it exists and is not
/// deleted.
fn user_doc_in(db: &settee_db::Database, id: String, node: &NodeConfig) -> Result<Option<UserDoc>> {
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
        return Err(conflicts_refused());
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

/// The user document with the password hashed under `rules` (same salt) in place of its
/// hash fields, as an admin would write it, on the revision it was read at.
fn rehashed(
    doc: UserDoc,
    password: &str,
    rules: &PasswordRules,
) -> std::result::Result<ParsedDoc, String> {
    let salt = doc.body.get("salt").and_then(Value::as_str);
    let hash = rules
        .hash_with_salt(password, salt)
        .map_err(|e| e.to_string())?;
    let mut body = doc.body;
    users::set_hash(&mut body, &hash);
    let json = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    let stubs = settee_core::split_stored(&doc.stored).1;
    Ok(ParsedDoc {
        id: Some(doc.id),
        revs: Some((doc.rev.pos, vec![doc.rev.id])),
        deleted: false,
        body: settee_core::join_stored(&json, stubs),
        atts: None,
        body_term: None,
    })
}

/// Writes `doc` to this node's database `db`.
fn write_local(db: &Arc<settee_db::Database>, doc: ParsedDoc) -> std::result::Result<(), String> {
    let rx = db.update_docs(vec![doc], true).map_err(|e| e.to_string())?;
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
fn check_iterations(hash: &PasswordHash, node: &NodeConfig) -> Result<()> {
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
        return Err(Error::Forbidden(
            "Iteration count is too low for this server".into(),
        ));
    }
    if u64::from(iterations) > bound("max_iterations", 1_000_000_000) {
        return Err(Error::Forbidden(
            "Iteration count is too high for this server".into(),
        ));
    }
    Ok(())
}
