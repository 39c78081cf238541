//! A clustered users database (the configured `[chttpd_auth] authentication_db`, or any
//! `…/_users`): a new `password` is hashed here, once, before the documents go to the
//! copies (in every clustered write: single, `multipart/related`, `_bulk_docs`, and so
//! `batch=ok`, update functions and `COPY` too), as CouchDB's `fabric_doc_update` runs
//! `couch_users_db:before_doc_update` at the coordinator. Each copy hashing for itself would salt differently, and the copies'
//! revisions (of the hashed body) would differ. A user who is not an admin may write only
//! their own document here too.

use crate::Coordinator;
use serde_json::{Map, Value};
use settee_auth::security::SecurityObject;
use settee_auth::users::{self, UserWrite, UsersError};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::ParsedDoc;
use settee_node::settings::{auth_db, password_rules};
use settee_node::{Error, Result};

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
            let (json, stubs) = settee_core::split_stored(&doc.body);
            let stubs = stubs.map(<[u8]>::to_vec);
            let mut body: Map<String, Value> = serde_json::from_slice(json)
                .map_err(|_| Error::bad_request("invalid document body"))?;
            let w = UserWrite {
                id: &id,
                deleted: doc.deleted,
                old: None,
                ctx: user,
                sec: &sec,
                rules: &rules,
            };
            users::before_update(&w, &mut body).map_err(|e| match e {
                UsersError::NotFound => Error::Db(settee_db::Error::NotFound("missing")),
                UsersError::Denied(d) => Error::from(d),
            })?;
            let json = serde_json::to_vec(&body).expect("json");
            doc.body = settee_core::join_stored(&json, stubs.as_deref());
            doc.body_term = None;
        }
        Ok(())
    }
}
