//! Which design documents validate a write: a database's own, or — for a shard copy of a
//! clustered database, which holds only its own range's — those of the whole clustered
//! database (CouchDB's `load_validation_funs` of a shard: `ddoc_cache` over
//! `fabric:design_docs(mem3:dbname(Shard))`). Where those come from is the cluster's
//! ([`ClusterDesigns`], installed by the coordinator); this crate only runs them.

use crate::Result;
use serde_json::Value;
use settee_auth::UserCtx;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The design documents of a clustered database, as its copies' writes are validated
/// with them.
#[derive(Debug, Default)]
pub struct DesignSet {
    /// A hash of the documents' ids and revisions: a compiled set is reused while it
    /// is unchanged.
    pub fingerprint: u64,
    /// In id order.
    pub docs: Vec<DesignEntry>,
}

/// One design document of a [`DesignSet`].
#[derive(Debug, Clone)]
pub struct DesignEntry {
    pub id: String,
    pub rev: String,
    /// The document's JSON (its members; `_id` and `_rev` may be among them).
    pub body: Value,
}

impl DesignSet {
    /// The set of `docs`, sorted by id, fingerprinted.
    pub fn new(mut docs: Vec<DesignEntry>) -> DesignSet {
        docs.sort_by(|a, b| a.id.cmp(&b.id));
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for d in &docs {
            d.id.hash(&mut h);
            d.rev.hash(&mut h);
        }
        DesignSet {
            fingerprint: h.finish(),
            docs,
        }
    }
}

/// How a write is validated.
#[derive(Debug, Clone)]
pub enum Validating {
    /// By the database's own design documents (it is no shard copy).
    Own,
    /// By the clustered database's design documents (the database is one of its copies).
    Clustered(Arc<DesignSet>),
    /// By none: a cluster member's own write to a copy (internal replication, read
    /// repair), of revisions validated where they were first written — CouchDB runs no
    /// validation function for internal replication either.
    Skipped,
}

/// The design documents validating writes to shard copies, from the cluster (the
/// coordinator implements it; see `docs/design.md`, "validate_doc_update on a cluster").
///
/// Threading: called on a blocking thread (it may wait for other members).
pub trait ClusterDesigns: Send + Sync {
    /// How a write by `user` to database `db` (a shard copy or not) is validated.
    fn validating(&self, db: &str, user: &UserCtx) -> Result<Validating>;

    /// Design documents of clustered database `db` changed: what was read of them is
    /// read again.
    fn changed(&self, db: &str);

    /// Every design document of clustered database `db` (`None`: `db` is not clustered),
    /// as its copies' indexes are built of them.
    fn designs(&self, db: &str) -> Result<Option<Arc<DesignSet>>>;
}
