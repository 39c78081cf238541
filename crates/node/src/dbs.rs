//! Databases as a whole: creating one (its shards' `q`, `partitioned`, the default
//! security object, the authentication database's `_design/_auth`), deleting one, and
//! the properties a database admin sets (`_security`, `_revs_limit`,
//! `_purged_infos_limit`).

use crate::{Error, Node, NodeConfig, Result};
use serde_json::{Map, Value};
use settee_auth::users;
use settee_db::{Couch, Database};

/// How a database is created (`PUT /{db}?q=…&partitioned=…`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateDb {
    /// Shard ranges; `None`: `[cluster] q`, else 1.
    pub q: Option<u32>,
    pub partitioned: bool,
}

/// A database property a database admin sets.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Revs,
    PurgedInfos,
}

impl Node {
    /// Creates database `name` (CouchDB's 412 `file_exists` if it exists).
    pub fn create_db(&self, name: &str, opts: CreateDb) -> Result<()> {
        if opts.partitioned {
            refuse_partitioned_system_db(&self.config, name)?;
        }
        let q = opts.q.unwrap_or_else(|| {
            self.config
                .get("cluster", "q")
                .and_then(|q| q.trim().parse::<u32>().ok().filter(|n| *n > 0))
                .unwrap_or(1)
        });
        let props = settee_db::Props {
            security: settee_auth::security::default_for(
                self.config.get("couchdb", "default_security").as_deref(),
            ),
            partitioned: opts.partitioned,
            q,
            ..Default::default()
        };
        self.couch.create_with(name, props)?;
        if name == crate::settings::auth_db(&self.config) {
            // Born with `_design/_auth`, as CouchDB's auth cache gives it.
            if let Err(e) = ensure_auth_ddoc(&self.couch, &self.config) {
                tracing::warn!(error = %e, "writing _design/_auth");
            }
        }
        Ok(())
    }

    /// Deletes database `name`.
    pub fn delete_db(&self, name: &str) -> Result<()> {
        Ok(self.couch.delete(name)?)
    }

    /// Sets `db`'s security object. The authentication database's is not editable unless
    /// `[couchdb] users_db_security_editable` is (exactly) `true`.
    pub fn set_security(&self, db: &Database, security: Value) -> Result<()> {
        // Only the exact value `false` (the default) protects it, as CouchDB compares the
        // setting's text.
        if db.name == crate::settings::auth_db(&self.config)
            && self
                .config
                .get_or("couchdb", "users_db_security_editable", "false")
                == "false"
        {
            return Err(Error::Forbidden(
                "You can't edit the security object of the user database.".into(),
            ));
        }
        settee_auth::security::validate(&security).map_err(Error::InvalidSecurity)?;
        Ok(db.set_props(|p| p.security = security)?)
    }

    /// Sets `db`'s `revs_limit` or `purged_infos_limit` (a positive number).
    pub fn set_limit(&self, db: &Database, which: Limit, n: u64) -> Result<()> {
        Ok(db.set_props(|p| match which {
            Limit::Revs => p.revs_limit = n,
            Limit::PurgedInfos => p.purged_infos_limit = n,
        })?)
    }
}

/// System databases cannot be partitioned (`couch_partition:validate_dbname`): CouchDB's
/// own databases by name, and any database whose last path segment names `_users`,
/// `_replicator` or the configured users database suffix.
fn refuse_partitioned_system_db(config: &NodeConfig, name: &str) -> Result<()> {
    const SYSTEM: &[&str] = &[
        "_dbs",
        "_global_changes",
        "_metadata",
        "_nodes",
        "_replicator",
        "_users",
    ];
    let suffix = name.rsplit('/').next().unwrap_or(name);
    let users_suffix = config.get("couchdb", "users_db_suffix");
    let system = SYSTEM.contains(&name)
        || ["_replicator", "_users"].contains(&suffix)
        || users_suffix.as_deref() == Some(suffix)
        || name == crate::settings::auth_db(config);
    if system {
        return Err(Error::bad_request("Cannot partition a system database"));
    }
    Ok(())
}

/// Gives the authentication database (`[chttpd_auth] authentication_db`), if it exists,
/// its `_design/_auth` (created, or its validate function restored), as CouchDB's auth
/// cache does when it starts watching the database. A concurrent write wins.
pub fn ensure_auth_ddoc(couch: &Couch, node: &NodeConfig) -> Result<(), String> {
    let Ok(db) = couch.get(&crate::settings::auth_db(node)) else {
        return Ok(());
    };
    let (revs, mut body, stubs) = match db.open_doc(users::AUTH_DDOC_ID, None) {
        Ok(d) => {
            let (json, stubs) = settee_core::split_stored(&d.body);
            let body: Map<String, Value> =
                serde_json::from_slice(json).map_err(|e| e.to_string())?;
            let current = body.get("validate_doc_update").and_then(Value::as_str);
            if current == Some(users::AUTH_VALIDATE_JS) {
                return Ok(());
            }
            let stubs = stubs.map(<[u8]>::to_vec);
            (Some((d.rev.pos, vec![d.rev.id])), body, stubs)
        }
        Err(settee_db::Error::NotFound(_)) => (None, Map::new(), None),
        Err(e) => return Err(e.to_string()),
    };
    if body.is_empty() {
        if let Value::Object(fresh) = users::auth_ddoc_body() {
            body = fresh;
        }
    } else {
        body.insert(
            "validate_doc_update".into(),
            Value::String(users::AUTH_VALIDATE_JS.into()),
        );
    }
    let json = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    let doc = settee_core::ParsedDoc {
        id: Some(users::AUTH_DDOC_ID.to_string()),
        revs,
        deleted: false,
        body: settee_core::join_stored(&json, stubs.as_deref()),
        atts: None,
        body_term: None,
    };
    let rx = db.update_docs(vec![doc], true).map_err(|e| e.to_string())?;
    match rx.blocking_recv() {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}
