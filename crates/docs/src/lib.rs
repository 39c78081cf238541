//! The write path every writer of documents shares — the HTTP handlers (`PUT`, `POST`,
//! `_bulk_docs`, attachment and form uploads) and the replicator's local endpoint — so
//! that a document is admitted the same way whoever writes it: a design document needs a
//! database admin and must be valid, `_users` documents follow their rules (passwords
//! hashed), `_replicator` documents belong to their writers, every `validate_doc_update`
//! must accept the document, and its attachments are stored and resolved into stubs.
//! Then the database's writer commits it (group commit, fsync before the answer).
//!
//! Nothing here knows HTTP: callers pass the user, the [`Settings`] they read from the
//! node's configuration, and map [`Error`] to their own answers.

mod admission;
pub mod atts;
mod design;
mod designs;
mod error;

pub use admission::{prepare_user_doc, Admission};
pub use atts::{Compression, Followed, StoredAtts, Written};
pub use design::validate_design;
pub use designs::{ClusterDesigns, DesignEntry, DesignSet, Validating};
pub use error::{Error, Result};

use settee_auth::password_rules::PasswordRules;
use settee_auth::UserCtx;
use settee_core::{ParsedDoc, Rev};
use settee_db::{Database, UpdateResult};
use std::sync::Arc;

/// What the write checks read from the node's configuration, taken once per request.
#[derive(Clone)]
pub struct Settings {
    /// Limits of the validation functions' JavaScript runtimes.
    pub limits: settee_js::Limits,
    /// `[couchdb] max_attachment_size` (bytes).
    pub att_limit: u64,
    /// `[attachments] compressible_types` and `compression_level`.
    pub compression: Arc<Compression>,
    /// How `_users` passwords are hashed and which ones are allowed.
    pub passwords: PasswordRules,
    /// The authentication database (`[chttpd_auth] authentication_db`), besides `_users`
    /// and every `…/_users`.
    pub auth_db: String,
    /// The query servers that run validate functions of design documents in languages
    /// other than JavaScript.
    pub query_servers: Arc<settee_views::QueryServers>,
    /// Where a cluster member's shard copies take the design documents validating their
    /// writes (`None`: every database validates with its own).
    pub cluster_designs: Option<Arc<dyn ClusterDesigns>>,
}

impl Settings {
    /// Whether `name` is a users database, whose documents follow `_users`' rules.
    pub fn is_users_db(&self, name: &str) -> bool {
        is_users_db(name, &self.auth_db)
    }
}

/// Whether writes to the database follow the rules of user documents: `_users`, any
/// `…/_users`, and the configured authentication database `auth_db`.
pub fn is_users_db(name: &str, auth_db: &str) -> bool {
    name == "_users" || name.ends_with("/_users") || name == auth_db
}

/// Checks documents for a write by `user` to `db`, in order; each is admitted (its body
/// possibly rewritten, its attachments stored) or refused. `followed` holds contents
/// stored beforehand for `follows` attachments. Blocking: it reads replaced revisions
/// and runs validation functions.
pub fn admit(
    settings: &Settings,
    db: &Database,
    user: &UserCtx,
    docs: Vec<ParsedDoc>,
    new_edits: bool,
    followed: Followed,
) -> Vec<Result<ParsedDoc>> {
    let mut admission = Admission::new(settings, db, user);
    admission.followed = followed;
    docs.into_iter()
        .map(|mut d| {
            admission.admit(db, &mut d, new_edits)?;
            // The body is final: its term for the revision id is made here, in parallel
            // with other requests, rather than on the database's writer.
            if new_edits {
                d.body_term = Some(settee_core::body_term(&d.body));
            }
            Ok(d)
        })
        .collect()
}

/// Admits documents (on a blocking thread) and commits those admitted in one request to
/// the database's writer. One result per document, in order: the new revision (`None` for
/// a replicated revision the database already had), or why it was refused or failed.
/// The outer error is a failure of the whole request (the writer stopped, a body over
/// `max_document_size`).
pub async fn write(
    settings: &Settings,
    db: &Arc<Database>,
    user: &UserCtx,
    docs: Vec<ParsedDoc>,
    new_edits: bool,
    followed: Followed,
) -> Result<Vec<Result<Option<Rev>>>> {
    let (settings, db, user) = (settings.clone(), db.clone(), user.clone());
    let pending =
        blocking(move || submit(&settings, &db, &user, docs, new_edits, followed)).await?;
    pending.wait().await
}

/// [`write`]'s first half, for callers already on a blocking thread: admits the documents
/// and hands those admitted to the database's writer; [`Pending::wait`] gives the results.
pub fn submit(
    settings: &Settings,
    db: &Arc<Database>,
    user: &UserCtx,
    docs: Vec<ParsedDoc>,
    new_edits: bool,
    followed: Followed,
) -> Result<Pending> {
    // Ids come first, for the whole request, as CouchDB checks them when it reads the
    // body: before validation functions, and before any attachment is stored.
    if db.props().partitioned {
        for d in &docs {
            settee_core::validate_partitioned_doc_id(d.id.as_deref().unwrap_or(""))?;
        }
    }
    // Past `[disk_monitor]`'s threshold every interactive edit fails before validation
    // and before its attachments are stored, as `couch_db:update_docs` checks first.
    if new_edits && db.config().disk.room_for_edits().is_err() {
        let refused = || Some(Err(Error::Db(settee_db::disk::edits_refused())));
        let out = docs.iter().map(|_| refused()).collect();
        return Ok(Pending { out, rx: None });
    }
    let admitted = admit(settings, db, user, docs, new_edits, followed);
    let mut out: Vec<Option<Result<Option<Rev>>>> = Vec::with_capacity(admitted.len());
    let mut ok = Vec::with_capacity(admitted.len());
    for a in admitted {
        match a {
            Ok(d) => {
                ok.push(d);
                out.push(None);
            }
            Err(e) => out.push(Some(Err(e))),
        }
    }
    let rx = if ok.is_empty() {
        None
    } else {
        Some(db.update_docs(ok, new_edits)?)
    };
    Ok(Pending { out, rx })
}

/// Documents handed to a database's writer by [`submit`], and those refused before.
pub struct Pending {
    out: Vec<Option<Result<Option<Rev>>>>,
    rx: Option<tokio::sync::oneshot::Receiver<settee_db::Result<Vec<UpdateResult>>>>,
}

impl Pending {
    /// Waits for the commit: one result per document, in order (see [`write`]).
    pub async fn wait(self) -> Result<Vec<Result<Option<Rev>>>> {
        let Pending { mut out, rx } = self;
        if let Some(rx) = rx {
            let results = rx
                .await
                .map_err(|_| settee_db::Error::Internal("writer dropped the request".into()))??;
            let mut results = results.into_iter();
            for slot in out.iter_mut().filter(|s| s.is_none()) {
                *slot = Some(match results.next() {
                    Some(UpdateResult::Ok { rev, .. }) => Ok(rev),
                    Some(UpdateResult::Err { error, .. }) => Err(error.into()),
                    None => Err(settee_db::Error::Internal("no result for write".into()).into()),
                });
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.expect("every slot filled"))
            .collect())
    }
}

/// Runs blocking store work off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Error::Db(settee_db::Error::Internal(format!(
            "blocking task failed: {e}"
        )))
    })?
}
