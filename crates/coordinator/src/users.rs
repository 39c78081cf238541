//! A clustered users database (the configured `[chttpd_auth] authentication_db`, or any
//! `…/_users`): a new `password` is hashed here, once, before the documents go to the
//! copies (in every clustered write: single, `multipart/related`, `_bulk_docs`, and so
//! `batch=ok`, update functions and `COPY` too), as CouchDB's `fabric_doc_update` runs
//! `couch_users_db:before_doc_update` at the coordinator
//! ([`settee_docs::prepare_user_doc`], as a node's writes take it). Each copy hashing for
//! itself would salt differently, and the copies' revisions (of the hashed body) would
//! differ. A user who is not an admin may write only their own document here too.

use crate::Coordinator;
use settee_auth::security::SecurityObject;
use settee_auth::users::UserWrite;
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::ParsedDoc;
use settee_node::settings::{auth_db, password_rules};
use settee_node::Result;

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
