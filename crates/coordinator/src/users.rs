//! A clustered users database (the configured `[chttpd_auth] authentication_db`, or any
//! `…/_users`): a new `password` is hashed here, once, before the documents go to the
//! copies (in every clustered write: single, `multipart/related`, `_bulk_docs`, and so
//! `batch=ok`, update functions and `COPY` too), as CouchDB's `fabric_doc_update` runs
//! `couch_users_db:before_doc_update` at the coordinator
//! ([`settee_docs::prepare_user_doc`], as a node's writes take it). Each copy hashing for
//! itself would salt differently, and the copies' revisions (of the hashed body) would
//! differ. A user who is not an admin may write only their own document here too.
//!
//! The clustered authentication database holds `_design/_auth` as a node's does: the
//! member creating it gives it the design document, and each member looks every few
//! seconds whether the database it was started with is clustered and lacks it
//! ([`keep_auth_ddoc`]), as CouchDB's auth cache ensures it on the clustered database
//! whenever its listener (re)starts, every 5 s while the database does not exist.

use crate::Coordinator;
use serde_json::{Map, Value};
use settee_auth::security::SecurityObject;
use settee_auth::users::{self, UserWrite};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::ParsedDoc;
use settee_node::read::{Read, ReadOpts, Rendered};
use settee_node::settings::{auth_db, password_rules};
use settee_node::write::WriteOpts;
use settee_node::{Error, Fabric, Result};
use std::time::Duration;

/// How often a member looks whether the authentication database needs `_design/_auth`
/// (CouchDB's auth cache retries its listener every 5 s).
const AUTH_DDOC_EVERY: Duration = Duration::from_secs(5);

impl Coordinator {
    /// Hashes the new passwords of `docs` (to `db`, for `user`) when `db` is a users
    /// database (see the module's documentation); other databases' are left as they are.
    pub(crate) async fn users_before_update(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        docs: &mut [ParsedDoc],
    ) -> Result<()> {
        let config = &self.node.config;
        if !settee_docs::is_users_db(db, &auth_db(config)) {
            return Ok(());
        }
        let sec = SecurityObject::from_json(&self.read_security(db, map).await?);
        let rules = password_rules(config);
        for doc in docs.iter_mut() {
            let Some(id) = doc.id.clone() else {
                continue;
            };
            if id.starts_with("_design/") || id.starts_with("_local/") {
                continue;
            }
            let w = UserWrite {
                id: &id,
                deleted: doc.deleted,
                old: None,
                ctx: user,
                sec: &sec,
                rules: &rules,
            };
            settee_docs::prepare_user_doc(doc, &w, false)?;
            doc.body_term = None;
        }
        Ok(())
    }
}

impl Coordinator {
    /// Gives clustered database `db` the authentication database's `_design/_auth`
    /// ([`users::auth_ddoc_update`]), written as an admin through the cluster; a
    /// concurrent write of it wins (its conflict is not an error), as CouchDB's
    /// `update_doc_ignoring_conflict`. Blocks: called from a blocking thread.
    pub(crate) fn ensure_auth_ddoc(&self, db: &str) -> Result<()> {
        let admin = UserCtx::server_admin();
        let read = Fabric::open_doc(self, db, &admin, users::AUTH_DDOC_ID, &ReadOpts::default());
        let existing = match read {
            Ok(Read {
                body: Rendered::Json(json),
                ..
            }) => Some(
                serde_json::from_slice::<Map<String, Value>>(&json).map_err(|e| {
                    Error::Db(settee_db::Error::Internal(format!(
                        "{}: {e}",
                        users::AUTH_DDOC_ID
                    )))
                })?,
            ),
            Ok(Read { .. }) => return Err(Error::bad_request("_design/_auth read as parts")),
            Err(Error::Db(settee_db::Error::NotFound(_))) => None,
            Err(e) => return Err(e),
        };
        let Some(mut body) = users::auth_ddoc_update(existing) else {
            return Ok(());
        };
        body.insert("_id".into(), users::AUTH_DDOC_ID.into());
        let doc = settee_core::parse_doc(Value::Object(body))?;
        let opts = WriteOpts::default();
        let written = crate::block_on(Fabric::update_doc(self, db, &admin, doc, opts));
        match written {
            Ok(_) | Err(Error::Db(settee_db::Error::Conflict)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Gives the authentication database configured when this member starts
/// `_design/_auth` whenever it is clustered and lacks it, looking every
/// [`AUTH_DDOC_EVERY`] while `coordinator` lives (see the module's documentation). A
/// database (by its map's uuid: a new one of the same name is given it again) is given
/// it once per run of this member; one edited afterwards gets its function back at the
/// next start, and one configured later gets it at the next start too, as on a node and
/// as CouchDB's listener keeps the database it started on.
pub fn keep_auth_ddoc(coordinator: std::sync::Weak<Coordinator>) {
    let Some(db) = coordinator.upgrade().map(|c| auth_db(&c.node.config)) else {
        return;
    };
    tokio::spawn(async move {
        let mut given: Option<String> = None;
        loop {
            tokio::time::sleep(AUTH_DDOC_EVERY).await;
            let Some(coordinator) = coordinator.upgrade() else {
                return;
            };
            let Some((_, map)) = coordinator.clustered(&db) else {
                continue;
            };
            if given.as_deref() == Some(map.uuid.as_str()) {
                continue;
            }
            let (c, name) = (coordinator.clone(), db.clone());
            let task = tokio::task::spawn_blocking(move || c.ensure_auth_ddoc(&name));
            match task.await {
                Ok(Ok(())) => given = Some(map.uuid.clone()),
                Ok(Err(e)) => tracing::warn!(error = %e, "writing the clustered _design/_auth"),
                Err(e) => tracing::warn!(error = %e, "writing the clustered _design/_auth"),
            }
        }
    });
}
