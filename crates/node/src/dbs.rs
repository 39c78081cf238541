//! Databases as a whole: listing them (`_all_dbs`, `_dbs_info`), creating one (its
//! shards' `q`, `partitioned`, the default security object, the authentication
//! database's `_design/_auth`), deleting one, and the properties a database admin sets
//! (`_security`, `_revs_limit`, `_purged_infos_limit`).

use crate::{Error, Node, NodeConfig, Result};
use serde_json::{json, Map, Value};
use settee_auth::users;
use settee_db::{Couch, Database};
use std::cmp::Ordering;

/// How a database is created (`PUT /{db}?q=…&partitioned=…`).
#[derive(Clone, Debug, Default)]
pub struct CreateDb {
    /// Shard ranges; `None`: `[cluster] q`, else 1.
    pub q: Option<u32>,
    /// Copies of each range; `None`: `[cluster] n`, else 3 (one node holds one).
    pub n: Option<u32>,
    /// CouchDB's `placement` (`zone:n,…`), checked well-formed (one node has one zone).
    pub placement: Option<String>,
    pub partitioned: bool,
}

/// A database property a database admin sets.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Revs,
    PurgedInfos,
}

/// A `startkey`/`endkey` bound for database names. CouchDB lists the shards database's
/// `_all_docs`, whose keys compare as Erlang terms: every non-string JSON value sorts
/// before every name, and names compare by bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameKey {
    NonString,
    Name(String),
}

impl NameKey {
    pub fn of(v: Value) -> NameKey {
        match v {
            Value::String(s) => NameKey::Name(s),
            _ => NameKey::NonString,
        }
    }

    fn cmp_name(&self, name: &str) -> Ordering {
        match self {
            NameKey::NonString => Ordering::Less,
            NameKey::Name(k) => k.as_str().cmp(name),
        }
    }
}

/// Which database names `_all_dbs` and `_dbs_info` list, as CouchDB's `_all_docs` over
/// the shards database selects them (`key=K` is `start = end = K`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRange {
    pub start: Option<NameKey>,
    pub end: Option<NameKey>,
    pub descending: bool,
    pub inclusive_end: bool,
    pub skip: usize,
    pub limit: usize,
}

impl Default for NameRange {
    fn default() -> Self {
        NameRange {
            start: None,
            end: None,
            descending: false,
            inclusive_end: true,
            skip: 0,
            limit: usize::MAX,
        }
    }
}

impl NameRange {
    /// The names of `sorted` (ascending) in the range, in its direction.
    pub fn select(&self, mut sorted: Vec<String>) -> Vec<String> {
        if self.descending {
            sorted.reverse();
        }
        // Ordering of the bound relative to a name, in scan direction.
        let dir = |o: Ordering| if self.descending { o.reverse() } else { o };
        let after_start = |n: &String| {
            (self.start.as_ref()).is_none_or(|s| dir(s.cmp_name(n)) != Ordering::Greater)
        };
        let before_end = |n: &String| {
            self.end.as_ref().is_none_or(|e| match dir(e.cmp_name(n)) {
                Ordering::Less => false,
                Ordering::Equal => self.inclusive_end,
                Ordering::Greater => true,
            })
        };
        sorted
            .into_iter()
            .skip_while(|n| !after_start(n))
            .take_while(before_end)
            .skip(self.skip)
            .take(self.limit)
            .collect()
    }
}

impl Node {
    /// `_all_dbs`: the names of this node's databases in `range`.
    pub fn all_dbs(&self, range: &NameRange) -> Vec<String> {
        range.select(self.couch.names())
    }

    /// `_dbs_info`: per key asked for, in order, its database's information or
    /// `not_found`.
    pub fn dbs_info(&self, keys: Vec<Value>) -> Vec<Value> {
        keys.into_iter()
            .map(|key| {
                let db = key.as_str().and_then(|name| self.couch.get(name).ok());
                match db {
                    Some(db) => json!({"key": key, "info": self.db_info(&db)}),
                    None => json!({"key": key, "error": "not_found"}),
                }
            })
            .collect()
    }

    /// Creates database `name` (CouchDB's 412 `file_exists` if it exists).
    pub fn create_db(&self, name: &str, opts: CreateDb) -> Result<()> {
        if opts.partitioned {
            refuse_partitioned_system_db(&self.config, name)?;
        }
        self.couch.create_with(name, self.new_props(&opts))?;
        if name == crate::settings::auth_db(&self.config) {
            // Born with `_design/_auth`, as CouchDB's auth cache gives it.
            if let Err(e) = ensure_auth_ddoc(&self.couch, &self.config) {
                tracing::warn!(error = %e, "writing _design/_auth");
            }
        }
        Ok(())
    }

    /// Creates the database of a shard copy held here (`shards/{range}/{db}.{suffix}`).
    pub fn create_copy(&self, name: &str, opts: CreateDb) -> Result<()> {
        self.couch.create_copy(name, self.new_props(&opts))?;
        // A copy is made once its database's map is in etcd. Its creation is answered once
        // this member's cache shows the map too, so that a database whose creation was
        // answered is served by every member holding a copy, whose view of the cluster is
        // then at least as recent as the map (a member's cache lags etcd by its watch).
        let runtime = tokio::runtime::Handle::try_current();
        if let (Some(cluster), Ok(runtime)) = (self.cluster(), runtime) {
            let limit = cluster.config().timeout;
            if !runtime.block_on(cluster.wait_for_copy(name, limit)) {
                tracing::warn!(copy = name, "created before its map reached this member");
            }
        }
        Ok(())
    }

    fn new_props(&self, opts: &CreateDb) -> settee_db::Props {
        let q = (opts.q).unwrap_or_else(|| self.config.get_positive("cluster", "q", 1));
        settee_db::Props {
            security: settee_auth::security::default_for(
                self.config.get("couchdb", "default_security").as_deref(),
            ),
            partitioned: opts.partitioned,
            q,
            ..Default::default()
        }
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
        settee_auth::security::validate(&security).map_err(Error::Bare)?;
        Ok(db.set_props(|p| p.security = security)?)
    }

    /// Sets `db`'s `revs_limit` or `purged_infos_limit` (a positive number).
    /// A database property a database admin sets (`GET /{db}/_revs_limit`, …).
    pub fn get_limit(&self, db: &Database, which: Limit) -> u64 {
        let p = db.props();
        match which {
            Limit::Revs => p.revs_limit,
            Limit::PurgedInfos => p.purged_infos_limit,
        }
    }

    /// `GET /{db}/_shards` (`mem3_httpd`): this node holds every range of the ring the
    /// database's `q` cuts; with `id`, the range that document is in.
    pub fn shards(&self, db: &Database, id: Option<&str>) -> Result<Value> {
        use settee_core::shards::{range_name, range_of, ranges};
        let props = db.props();
        let me = settee_core::node::name();
        Ok(match id {
            None => {
                let shards: Map<String, Value> = (ranges(props.q).into_iter())
                    .map(|r| (range_name(r), json!([me])))
                    .collect();
                json!({ "shards": shards })
            }
            Some(id) => {
                if props.partitioned {
                    settee_core::validate_partitioned_doc_id(id)?;
                }
                let range = range_of(props.q, id, props.partitioned);
                json!({"range": range_name(range), "nodes": [me]})
            }
        })
    }

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
    let (revs, body, stubs) = match db.open_doc(users::AUTH_DDOC_ID, None) {
        Ok(d) => {
            let (json, stubs) = settee_core::split_stored(&d.body);
            let body: Map<String, Value> =
                serde_json::from_slice(json).map_err(|e| e.to_string())?;
            let stubs = stubs.map(<[u8]>::to_vec);
            (Some((d.rev.pos, vec![d.rev.id])), Some(body), stubs)
        }
        Err(settee_db::Error::NotFound(_)) => (None, None, None),
        Err(e) => return Err(e.to_string()),
    };
    let Some(body) = users::auth_ddoc_update(body) else {
        return Ok(());
    };
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
