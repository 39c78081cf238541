//! Cluster state in etcd: CouchDB's `mem3` without its `_nodes` and `_dbs` databases.
//!
//! What lives here is what a cluster needs one authority for, and nothing else (never
//! documents): the membership list (CouchDB's `_nodes` documents), which members are alive
//! (a key per running node, held by its lease), the shard maps of clustered databases
//! (created and deleted in one transaction each), and which node owns each background job
//! (a key held by the owner's lease, so another node can take over when the owner dies).
//!
//! [`Cluster`] keeps a copy of all of it, loaded once and followed by a watch, so reads never
//! wait for etcd and keep answering while etcd is unreachable; writes go to etcd and fail
//! with [`Error::Unavailable`] when it cannot be reached. The key layout and the value
//! formats are in `docs/design.md` ("Cluster state in etcd"); [`map`] is the pure planning
//! of shard maps.
//!
//! Threading: [`Cluster`] is `Send + Sync`, shared behind an `Arc`; its background tasks
//! (the session keeping this node's lease, the watch) run on the Tokio runtime it was
//! started on, and its async methods must be called on that runtime.

pub mod map;
mod nodes;
pub mod peer;
mod state;
pub mod testing;

pub use map::{Candidate, Copies, PlanError, ShardMap};
pub use nodes::{ListStats, NodeDoc};
pub use state::{Cluster, Created, Finished, Member};

use std::time::Duration;

/// The system databases every member keeps whole, as CouchDB keeps its node-local `_nodes`
/// and `_dbs` on every node: each member pushes its own to the others (`settee_sync`), and
/// a member's requests on them are taken from the others like those on shard copies.
pub const EVERYWHERE: [&str; 2] = ["_users", "_replicator"];

/// How a node takes part in a cluster.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's name, `name@host` (CouchDB's Erlang node name).
    pub node: String,
    /// The URL other nodes reach this node's HTTP API at.
    pub url: String,
    /// etcd's client URLs (`http://10.0.0.5:2379`, …).
    pub endpoints: Vec<String>,
    /// Where this cluster's keys start (several clusters may share one etcd).
    pub prefix: String,
    /// How long this node is seen alive after its last word to etcd.
    pub lease_ttl: Duration,
    /// How long one etcd request may take before it counts as unreachable.
    pub timeout: Duration,
    /// What members prove themselves to each other with ([`peer`]).
    pub secret: String,
}

impl Config {
    /// The defaults: prefix `/settee`, a 10 s lease, 5 s requests.
    pub fn new(node: &str, url: &str, endpoints: Vec<String>, secret: &str) -> Config {
        Config {
            node: node.to_owned(),
            url: url.to_owned(),
            endpoints,
            prefix: "/settee".to_owned(),
            lease_ttl: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            secret: secret.to_owned(),
        }
    }
}

/// A failed cluster operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd cannot be reached (or answered an error): what needs it cannot be done now.
    #[error("the cluster state (etcd) is unreachable: {0}")]
    Unavailable(String),
    /// A write that names a revision other than the current one (CouchDB's 409).
    #[error("Document update conflict.")]
    Conflict,
    /// The document or database does not exist.
    #[error("{0}")]
    NotFound(&'static str),
    /// The database exists already (CouchDB's 412 `file_exists`).
    #[error("The database could not be created, the file already exists.")]
    Exists,
    /// A document body CouchDB would refuse too.
    #[error(transparent)]
    Doc(#[from] settee_core::Error),
    /// A shard map that cannot be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A stored value this version cannot read.
    #[error("cluster state at {key} is unreadable: {why}")]
    Corrupt { key: String, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        Error::Unavailable(e.to_string())
    }
}
