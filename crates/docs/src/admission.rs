//! Per-document checks before a write reaches the database writer, in CouchDB's order:
//! design documents need a database admin (and a valid design); documents of a users
//! database have their password hashed (and follow its rules where it holds Settee's
//! `_design/_auth`); then every `validate_doc_update` of the database's design documents
//! must accept the document.

use crate::atts::{self, Followed, StoredAtts};
use crate::designs::{DesignEntry, DesignSet, Validating};
use crate::{Error, Result, Settings};
use serde_json::{Map, Value};
use settee_auth::security::SecurityObject;
use settee_auth::users::{self, UserWrite, UsersError};
use settee_auth::UserCtx;
use settee_core::recent::Recent;
use settee_core::{ParsedDoc, Rev};
use settee_db::Database;
use settee_js::{Rejection, ValidateSource, Validator};
use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;

/// The checks of one request's writes to one database.
pub struct Admission {
    user: UserCtx,
    sec: SecurityObject,
    sec_json: Value,
    users_db: bool,
    /// A replicator database (`_replicator`, `…/_replicator`): documents have owners.
    replicator_db: bool,
    settings: Settings,
    /// Attachment contents already stored for the next document's `follows` entries.
    pub followed: Followed,
    /// The database's `validate_doc_update` functions, loaded at the first document that
    /// needs them (`None` = not loaded yet; `Some(None)` = the database has none).
    validator: Option<Loaded>,
    db_name: String,
}

/// A database's compiled validate functions (`None`: it has none), those its query
/// servers run, and the fingerprint of the design documents and limits they were built from.
struct Loaded {
    fingerprint: u64,
    validator: Option<Validator>,
    external: Vec<ExternalValidate>,
    /// A users database holding Settee's own `_design/_auth`, whose rules
    /// (`users::validate`) run natively.
    auth_rules: bool,
}

/// A `validate_doc_update` of a design document in a query server's language.
struct ExternalValidate {
    language: String,
    ddoc_id: String,
    rev: String,
    ddoc: Value,
}

/// Validators cached per (blocking) thread, most recently used last.
const CACHED_VALIDATORS: usize = 4;

thread_local! {
    /// Validators compiled on this thread, by database name: a request reuses them while
    /// the database's design documents and the limits are unchanged (compiling them took
    /// ~0.5 ms a write request). A validator in use is taken out, and put back when its
    /// request's `Admission` is dropped; one whose call failed is not put back.
    static VALIDATORS: RefCell<Recent<String, Loaded>> =
        const { RefCell::new(Recent::new(CACHED_VALIDATORS)) };
}

/// The fingerprint of validators never cached (a write validated by none).
const UNCACHED: u64 = 0;

impl Drop for Admission {
    fn drop(&mut self) {
        let Some(loaded) = self.validator.take().filter(|l| l.fingerprint != UNCACHED) else {
            return;
        };
        let name = std::mem::take(&mut self.db_name);
        VALIDATORS.with_borrow_mut(|cache| cache.put(name, loaded));
    }
}

impl Admission {
    pub fn new(settings: &Settings, db: &Database, user: &UserCtx) -> Admission {
        let sec_json = db.props().security;
        Admission {
            user: user.clone(),
            sec: SecurityObject::from_json(&sec_json),
            sec_json,
            settings: settings.clone(),
            followed: Followed::new(),
            validator: None,
            db_name: db.name.clone(),
            users_db: settings.is_users_db(&db.name),
            replicator_db: db.name == "_replicator" || db.name.ends_with("/_replicator"),
        }
    }

    /// Checks one document (with its id set); may rewrite its body (`_users` passwords).
    /// Runs on a blocking thread: it reads the replaced revision.
    pub fn admit(&mut self, db: &Database, doc: &mut ParsedDoc, new_edits: bool) -> Result<()> {
        let id = doc.id.clone().unwrap_or_default();
        if id.starts_with("_local/") {
            return Ok(());
        }
        // A replicated revision the tree already holds is a no-op, checked by nothing
        // (`couch_db:prep_and_validate_replicated_updates`).
        if !new_edits {
            if let (Some(rev), Some(info)) = (doc.rev(), db.doc_info(&id)?) {
                if info.tree.contains(&rev) {
                    return Ok(());
                }
            }
        }
        let design = id.starts_with("_design/");
        if design {
            self.sec.check_admin(&self.user)?;
        } else if self.validator.is_none() {
            self.validator = Some(self.load(db)?);
        }
        let has_vdu = matches!(&self.validator,
            Some(l) if l.validator.is_some() || !l.external.is_empty());
        let owned = self.replicator_db && !self.sec.is_admin(&self.user);
        let checks = !design && (self.users_db || has_vdu || owned);
        // The common case (no attachments, no rules) pays no read of the replaced revision.
        let old = if checks || doc.atts.is_some() {
            replaced(db, &id, doc, new_edits)?
        } else {
            None
        };
        let mut target = atts::Target {
            db,
            limit: self.settings.att_limit,
            compression: &self.settings.compression,
            followed: &mut self.followed,
        };
        atts::resolve(
            &mut target,
            &id,
            doc,
            old.as_ref().map(|o| &o.atts),
            new_edits,
        )?;
        if design {
            return crate::design::validate_design(
                &id,
                doc,
                &self.settings.query_servers,
                db.props().partitioned,
            );
        }
        if !checks {
            return Ok(());
        }
        if self.users_db {
            self.users_rules(&id, doc, old.as_ref().map(|o| &o.body))?;
        }
        if owned {
            self.owner_rules(doc, old.as_ref().map(|o| &o.body))?;
        }
        self.validate(db, &id, doc, old)
    }

    /// The validation functions of this request's writes: the database's own, or a
    /// clustered database's for one of its copies (none for a member's own writes to a
    /// copy); this thread's compiled ones while they are unchanged.
    fn load(&self, db: &Database) -> Result<Loaded> {
        let validating = match &self.settings.cluster_designs {
            Some(designs) => designs.validating(&db.name, &self.user)?,
            None => Validating::Own,
        };
        match validating {
            Validating::Own => load_validator(db, &self.settings, self.users_db),
            Validating::Clustered(set) => load_clustered(db, &self.settings, &set),
            Validating::Skipped => Ok(Loaded {
                fingerprint: UNCACHED,
                validator: None,
                external: Vec::new(),
                auth_rules: false,
            }),
        }
    }

    /// Runs every `validate_doc_update` (design documents in id order) over the document.
    fn validate(
        &mut self,
        db: &Database,
        id: &str,
        doc: &ParsedDoc,
        old: Option<Replaced>,
    ) -> Result<()> {
        let Some(loaded) = self.validator.as_mut() else {
            return Ok(());
        };
        if loaded.validator.is_none() && loaded.external.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let result = self.run_validators(db, id, doc, old);
        let m = settee_metrics::global();
        m.vdu_process_time
            .record(started.elapsed().as_secs_f64() * 1000.0);
        if matches!(result, Err(Error::Forbidden(_) | Error::Unauthorized(_))) {
            m.vdu_rejects.inc();
        }
        result
    }

    /// The validation functions of [`Admission::validate`], in order.
    fn run_validators(
        &mut self,
        db: &Database,
        id: &str,
        doc: &ParsedDoc,
        old: Option<Replaced>,
    ) -> Result<()> {
        let Some(loaded) = self.validator.as_mut() else {
            return Ok(());
        };
        let new_doc = new_doc_json(id, doc)?;
        let old_doc = old.map(|o| {
            let stubs = (!o.atts.stubs.is_empty()).then_some(o.atts.stubs);
            with_meta(id, Some(&o.rev), o.body, stubs)
        });
        // A copy's functions see the clustered database's name (`couch_util:json_user_ctx`).
        let db_name = settee_core::shard_db(&db.name).unwrap_or(&db.name);
        let user_ctx = self.user.to_json(Some(db_name));
        for v in &loaded.external {
            let d = settee_views::queryserver::DdocRef {
                id: &v.ddoc_id,
                rev: &v.rev,
                body: &v.ddoc,
            };
            let answer = self.settings.query_servers.validate(
                &v.language,
                &d,
                new_doc.clone(),
                old_doc.clone().unwrap_or(Value::Null),
                user_ctx.clone(),
                self.sec_json.clone(),
            );
            external_verdict(answer)?;
        }
        let Some(validator) = loaded.validator.as_mut() else {
            return Ok(());
        };
        let user_ctx = user_ctx.to_string();
        let result = validator.validate(
            &new_doc.to_string(),
            old_doc.map(|d| d.to_string()).as_deref(),
            &user_ctx,
            &self.sec_json.to_string(),
        );
        result.map_err(|r| {
            if matches!(r, Rejection::Failed(_)) {
                // A timed-out or broken runtime is not reused.
                self.validator = None;
            }
            rejection_error(r)
        })
    }

    /// `couch_users_db:before_doc_update` (every users database), then the rules of
    /// `_design/_auth` where the database holds Settee's own.
    fn users_rules(
        &self,
        id: &str,
        doc: &mut ParsedDoc,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let w = UserWrite {
            id,
            deleted: doc.deleted,
            old,
            ctx: &self.user,
            sec: &self.sec,
            rules: &self.settings.passwords,
        };
        let auth_rules = matches!(&self.validator, Some(l) if l.auth_rules);
        prepare_user_doc(doc, &w, auth_rules)
    }
}

/// Users database document `doc` (of id `w.id`) as `couch_users_db:before_doc_update`
/// leaves it — a new `password` replaced by its hash (counted as a slow hashing) — then
/// checked by the rules of `_design/_auth` when `auth_rules`. A node's writes to its
/// users databases take it, and so does a cluster's coordinator, which hashes once before
/// the copies are written.
pub fn prepare_user_doc(doc: &mut ParsedDoc, w: &UserWrite, auth_rules: bool) -> Result<()> {
    let (body, stubs) = settee_core::split_stored(&doc.body);
    let stubs = stubs.map(<[u8]>::to_vec);
    let mut body: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|_| Error::BadRequest("invalid document body".into()))?;
    body.insert("_id".into(), Value::String(w.id.to_string()));
    let hashes =
        matches!(body.get("password"), Some(Value::String(_))) && w.rules.scheme == "pbkdf2";
    let refused = |e| match e {
        UsersError::NotFound => Error::Db(settee_db::Error::NotFound("missing")),
        UsersError::Denied(d) => d.into(),
    };
    users::before_update(w, &mut body).map_err(refused)?;
    if hashes {
        settee_metrics::global().password_hashing_slow.inc();
    }
    if auth_rules {
        users::validate(w, &body).map_err(refused)?;
    }
    body.shift_remove("_id");
    doc.body =
        settee_core::join_stored(&serde_json::to_vec(&body).expect("json"), stubs.as_deref());
    Ok(())
}

impl Admission {
    /// Replication documents belong to the user who wrote them (CouchDB's replicator
    /// `before_doc_update`): a member's document gets `owner` (their name) if it has none,
    /// and nobody but database admins may write one owned by someone else.
    fn owner_rules(&self, doc: &mut ParsedDoc, old: Option<&Map<String, Value>>) -> Result<()> {
        let me = self
            .user
            .name
            .clone()
            .map(Value::String)
            .unwrap_or(Value::Null);
        let foreign =
            || Error::Forbidden("Can't update replication documents from other users.".into());
        if old.and_then(|o| o.get("owner")).is_some_and(|o| *o != me) {
            return Err(foreign());
        }
        let (body, stubs) = settee_core::split_stored(&doc.body);
        let stubs = stubs.map(<[u8]>::to_vec);
        let mut body: Map<String, Value> = serde_json::from_slice(body)
            .map_err(|_| Error::BadRequest("invalid document body".into()))?;
        match body.get("owner") {
            Some(o) if *o != me => return Err(foreign()),
            Some(_) => return Ok(()),
            None if doc.deleted => return Ok(()),
            None => body.insert("owner".into(), me),
        };
        doc.body =
            settee_core::join_stored(&serde_json::to_vec(&body).expect("json"), stubs.as_deref());
        Ok(())
    }
}

/// What a query server's validate function said, as CouchDB's
/// `couch_query_servers:validate_doc_update` reads it: `1` passes, `{"forbidden": m}` and
/// `{"unauthorized": m}` refuse, any other one-member object or a string is an
/// `unknown_error`; a failed call fails the write.
fn external_verdict(answer: settee_views::queryserver::Result<Value>) -> Result<()> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match answer {
        Ok(Value::Number(n)) if n.as_u64() == Some(1) => Ok(()),
        Ok(Value::Object(o)) if o.len() == 1 => {
            let (k, m) = o.iter().next().expect("one member");
            Err(match k.as_str() {
                "forbidden" => Error::Forbidden(text(m)),
                "unauthorized" => Error::Unauthorized(text(m)),
                _ => Error::Rejected {
                    error: "unknown_error".into(),
                    reason: text(m),
                },
            })
        }
        Ok(other) => Err(Error::Rejected {
            error: "unknown_error".into(),
            reason: text(&other),
        }),
        Err(e) => Err(settee_views::Error::QueryServer(e).into()),
    }
}

/// The `validate_doc_update` functions of the database's design documents, compiled, or
/// this thread's cached ones if the design documents and limits are unchanged.
fn load_validator(db: &Database, settings: &Settings, users_db: bool) -> Result<Loaded> {
    let limits = settings.limits;
    let fingerprint = fingerprint(db, limits, users_db)?;
    cached_or(&db.name, fingerprint, || {
        compile_validator(&stored_designs(db)?, settings, users_db)
    })
}

/// The validation functions of a clustered database's design documents `set`, for
/// writes to its copy `db`: compiled, or this thread's cached ones for the same set.
fn load_clustered(db: &Database, settings: &Settings, set: &DesignSet) -> Result<Loaded> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    settings.limits.hash(&mut h);
    set.fingerprint.hash(&mut h);
    // Never [`UNCACHED`], nor the fingerprint of the copy's own design documents.
    let fingerprint = h.finish() | 1;
    cached_or(&db.name, fingerprint, || {
        compile_validator(&set.docs, settings, false)
    })
}

/// This thread's validators of database `name` built from `fingerprint`, else `compile`'s.
fn cached_or(
    name: &str,
    fingerprint: u64,
    compile: impl FnOnce() -> Result<(Option<Validator>, Vec<ExternalValidate>, bool)>,
) -> Result<Loaded> {
    let cached = VALIDATORS.with_borrow_mut(|cache| {
        cache.take_where(|n, l| n == name && l.fingerprint == fingerprint)
    });
    if let Some(loaded) = cached {
        return Ok(loaded);
    }
    let (validator, external, auth_rules) = compile()?;
    Ok(Loaded {
        fingerprint,
        validator,
        external,
        auth_rules,
    })
}

/// A hash of the design documents' ids and winning revisions and of the limits.
fn fingerprint(db: &Database, limits: settee_js::Limits, users_db: bool) -> Result<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    limits.hash(&mut h);
    users_db.hash(&mut h);
    db.scan_docs(b"_design/", Some(b"_design0"), false, false, |row| {
        row.id.hash(&mut h);
        if let Some(w) = row.info.as_ref().and_then(|i| i.tree.winner()) {
            w.rev.to_string().hash(&mut h);
        }
        ControlFlow::Continue(())
    })?;
    // Even: never a clustered set's (see `load_clustered`) nor [`UNCACHED`].
    Ok((h.finish() & !1).max(2))
}

/// The database's design documents, in id order.
fn stored_designs(db: &Database) -> Result<Vec<DesignEntry>> {
    let mut docs = Vec::new();
    let mut failed = None;
    db.scan_docs(b"_design/", Some(b"_design0"), false, true, |row| {
        let Some(body) = row.body else {
            return ControlFlow::Continue(());
        };
        match serde_json::from_slice::<Value>(settee_core::split_stored(&body).0) {
            Ok(body) => docs.push(DesignEntry {
                rev: (row.info.as_ref())
                    .and_then(|i| i.tree.winner())
                    .map(|w| w.rev.to_string())
                    .unwrap_or_default(),
                id: row.id,
                body,
            }),
            Err(e) => failed = Some(e.to_string()),
        }
        ControlFlow::Continue(())
    })?;
    match failed {
        Some(e) => Err(Error::Db(settee_db::Error::Internal(e))),
        None => Ok(docs),
    }
}

/// Compiles the `validate_doc_update` functions of design documents `ddocs` (in id
/// order), and says whether a users database holds `_design/_auth` with Settee's own
/// validate function: that one is not run, `users_rules` applies the same rules
/// natively. Design documents of other languages are validated by their query server
/// (an unknown language fails writes with `unknown_query_language`, as CouchDB's fail).
fn compile_validator(
    ddocs: &[DesignEntry],
    settings: &Settings,
    users_db: bool,
) -> Result<(Option<Validator>, Vec<ExternalValidate>, bool)> {
    let mut auth_rules = false;
    let mut sources = Vec::new();
    let mut external = Vec::new();
    let mut failed_language = None;
    for d in ddocs {
        let ddoc = &d.body;
        let source = ddoc.get("validate_doc_update").and_then(Value::as_str);
        let native = users_db
            && d.id == settee_auth::users::AUTH_DDOC_ID
            && source == Some(settee_auth::users::AUTH_VALIDATE_JS);
        auth_rules |= native;
        let language = match ddoc.get("language") {
            Some(Value::String(l)) => Some(l.as_str()),
            _ => None,
        };
        let served_by = language.filter(|l| settee_js::Dialect::of(Some(l)).is_none());
        if let (Some(_), Some(language)) = (source, served_by) {
            if !settings.query_servers.knows(language) {
                failed_language = Some(language.to_owned());
            }
            let mut ddoc = ddoc.clone();
            ddoc["_id"] = Value::String(d.id.clone());
            external.push(ExternalValidate {
                language: language.to_owned(),
                ddoc_id: d.id.clone(),
                rev: d.rev.clone(),
                ddoc,
            });
        } else if let Some(source) = source.filter(|_| !native) {
            sources.push(ValidateSource {
                ddoc_id: d.id.clone(),
                source: source.to_string(),
                ddoc: ddoc.clone(),
            });
        }
    }
    if let Some(language) = failed_language {
        let unknown = settee_views::queryserver::Error::UnknownLanguage(language);
        return Err(settee_views::Error::QueryServer(unknown).into());
    }
    if sources.is_empty() {
        return Ok((None, external, auth_rules));
    }
    let validator = Validator::new(&sources, settings.limits).map_err(|e| match e {
        // The query server's `compilation_error` for the function, its source quoted.
        settee_js::JsError::Compile { reason, .. } => Error::Failed {
            error: "compilation_error".into(),
            reason,
        },
        e => Error::from(settee_views::Error::Js(e)),
    })?;
    Ok((Some(validator), external, auth_rules))
}

/// The document as a validation function sees it: `_id`, `_rev`, the body, `_revisions`
/// and `_deleted`.
fn new_doc_json(id: &str, doc: &ParsedDoc) -> Result<Value> {
    let body: Map<String, Value> =
        serde_json::from_slice(settee_core::split_stored(&doc.body).0)
            .map_err(|_| Error::BadRequest("invalid document body".into()))?;
    let stubs = atts::stored_stubs(&doc.body);
    let mut v = with_meta(id, doc.rev().as_ref(), body, stubs);
    if let Some((start, ids)) = &doc.revs {
        let ids: Vec<Value> = ids.iter().map(|r| Value::String(r.to_string())).collect();
        v["_revisions"] = serde_json::json!({"start": start, "ids": ids});
    }
    if doc.deleted {
        v["_deleted"] = Value::Bool(true);
    }
    Ok(v)
}

fn with_meta(
    id: &str,
    rev: Option<&Rev>,
    body: Map<String, Value>,
    stubs: Option<Map<String, Value>>,
) -> Value {
    let mut m = Map::with_capacity(body.len() + 2);
    m.insert("_id".into(), Value::String(id.to_string()));
    if let Some(rev) = rev {
        m.insert("_rev".into(), Value::String(rev.to_string()));
    }
    m.extend(body);
    if let Some(stubs) = stubs {
        m.insert("_attachments".into(), Value::Object(stubs));
    }
    Value::Object(m)
}

/// A rejected write as CouchDB names it (`chttpd:error_info`): a thrown object without
/// a reason is an `unknown_error` whose reason is the thrown error.
fn rejection_error(r: Rejection) -> Error {
    let text = |v: Value| match v {
        Value::String(s) => s,
        other => other.to_string(),
    };
    match r {
        Rejection::Forbidden(m) => Error::Forbidden(text(m)),
        Rejection::Unauthorized(m) => Error::Unauthorized(text(m)),
        Rejection::Error { error, reason } if reason.is_null() => Error::Rejected {
            error: "unknown_error".into(),
            reason: error,
        },
        Rejection::Error { error, reason } => Error::Rejected {
            error,
            reason: text(reason),
        },
        Rejection::Failed(e) => settee_views::Error::Js(e).into(),
    }
}

/// The revision a write replaces: its body and attachment stubs.
struct Replaced {
    rev: Rev,
    body: Map<String, Value>,
    atts: StoredAtts,
}

/// The body of the revision a write replaces: the leaf it names, or for a replicated
/// revision its nearest stored ancestor; `None` for new documents and deleted leaves.
fn replaced(db: &Database, id: &str, doc: &ParsedDoc, new_edits: bool) -> Result<Option<Replaced>> {
    let Some((pos, ids)) = &doc.revs else {
        return Ok(None);
    };
    let Some(info) = db.doc_info(id)? else {
        return Ok(None);
    };
    let skip = usize::from(!new_edits);
    for (i, rev_id) in ids.iter().enumerate().skip(skip) {
        let Some(p) = pos.checked_sub(i as u64) else {
            break;
        };
        let rev = Rev::new(p, rev_id.clone());
        match info.tree.body(&rev) {
            Some((_, true)) => return Ok(None),
            Some(_) => {
                let stored = db.body_of(&info, &rev)?.unwrap_or_default();
                let body = serde_json::from_slice(settee_core::split_stored(&stored).0).ok();
                return Ok(body.map(|body| Replaced {
                    rev,
                    body,
                    atts: StoredAtts::of(&stored),
                }));
            }
            None => {}
        }
        if new_edits {
            break;
        }
    }
    Ok(None)
}
