//! The node: every operation a client can ask of one Settee node, as typed calls with typed
//! arguments and results, below HTTP. It is CouchDB's `fabric` over `couch`: `http` reads a
//! request into these types, makes one call and renders the answer; a cluster coordinator
//! offers the same operations by fanning them out to shard copies.
//!
//! [`Node`] owns the long-lived services: the databases and their views, the query servers
//! (inside [`settee_views::Views`]), the live configuration, the uuid generator and the
//! compactions running. Its errors ([`Error`]) name failures as CouchDB names them and
//! carry no HTTP status: `http`'s one error table maps them.
//!
//! Threading: every method that reads or writes storage blocks (RocksDB reads, commits,
//! JavaScript); async callers run them on a blocking thread. `Node` is `Send + Sync` and
//! shared behind an `Arc`.

pub mod access;
pub mod all_docs;
pub mod att_read;
pub mod att_write;
pub mod atts;
pub mod auth_cache;
pub mod changes;
pub mod cluster;
pub mod cluster_setup;
pub mod config;
pub mod copy;
pub mod dbs;
pub mod design_filter;
mod docjson;
mod error;
pub mod fabric;
pub mod find;
pub mod list;
pub mod mango_index;
pub mod moves;
pub mod parsed_docs;
pub mod query_language;
pub mod read;
pub mod render;
pub mod replication;
pub mod replicator_read;
pub mod reshard;
pub mod rewrite;
pub mod settings;
pub mod status;
mod tasks;
pub mod users;
pub mod views;
pub mod write;

pub use config::NodeConfig;
pub use docjson::{
    doc_json, doc_json_with, local_json, other_leaves, parse_json, revs_json, seqs,
    winner_json_with, with_doc, DocOpts,
};
pub use error::{Error, Result};
pub use fabric::Fabric;
pub use tasks::Tasks;

use serde_json::{json, Value};
use settee_db::{Couch, Database};
use settee_views::Views;
use std::sync::{Arc, Mutex, OnceLock};

/// The replicator database CouchDB creates on every node.
pub const REPLICATOR_DB: &str = "_replicator";

/// One Settee node's services.
pub struct Node {
    pub couch: Arc<Couch>,
    pub views: Arc<Views>,
    /// The live configuration (`/_node/_local/_config`).
    pub config: Arc<NodeConfig>,
    /// Database compactions running now (`_active_tasks`).
    pub tasks: Tasks,
    /// Shard copies this member is moving now (`_active_tasks`).
    pub moves: moves::Moves,
    /// Shard copies this member is splitting now (`_active_tasks`).
    pub splits: reshard::Splits,
    /// What authentication keeps about users between requests.
    pub users: users::Users,
    /// The `[uuids]` generator; replaced when the configured algorithm changes.
    uuids: Mutex<Option<settee_core::uuids::Generator>>,
    /// Applies `[log] level` to the process's logger (set by the binary, which owns it).
    log: OnceLock<LogControl>,
    /// The cluster state, when this node is a member of a cluster.
    cluster: OnceLock<Arc<settee_cluster::Cluster>>,
    /// Where shard copies take the design documents validating their writes (a cluster
    /// member's coordinator).
    cluster_designs: OnceLock<Arc<dyn settee_docs::ClusterDesigns>>,
    /// What serves this node's requests when it is not the node alone (a cluster
    /// member's coordinator): background writes to clustered databases go through it.
    fabric: OnceLock<std::sync::Weak<dyn Fabric>>,
}

/// Sets the log level from a `[log] level` value (`None`: the setting was removed).
pub type SetLogLevel = Box<dyn Fn(Option<&str>) + Send + Sync>;

struct LogControl {
    set: SetLogLevel,
    /// The value last applied, so that only a change is applied.
    applied: Mutex<Option<String>>,
}

impl Node {
    /// A node over `couch` and `views`, with the settings of `config` applied.
    pub fn new(couch: Arc<Couch>, views: Arc<Views>, config: Arc<NodeConfig>) -> Node {
        let node = Node {
            couch,
            views,
            config,
            tasks: Tasks::default(),
            moves: Default::default(),
            splits: Default::default(),
            users: Default::default(),
            uuids: Mutex::new(None),
            log: OnceLock::new(),
            cluster: OnceLock::new(),
            cluster_designs: OnceLock::new(),
            fabric: OnceLock::new(),
        };
        node.apply_settings();
        node
    }

    /// Hands `[log] level` changes to `set` from now on (the current value counts as
    /// applied: the binary chose the starting level).
    pub fn set_log_control(&self, set: SetLogLevel) {
        let applied = Mutex::new(self.config.get("log", "level"));
        let _ = self.log.set(LogControl { set, applied });
    }

    /// Makes writes to shard copies validate with the design documents `designs` gives
    /// (once, when a cluster member's coordinator starts).
    pub fn set_cluster_designs(&self, designs: Arc<dyn settee_docs::ClusterDesigns>) {
        let _ = self.cluster_designs.set(designs);
    }

    /// Hands background writes to clustered databases to `fabric` from now on (a cluster
    /// member's coordinator, which holds this node: hence not owned here).
    pub fn set_fabric(&self, fabric: std::sync::Weak<dyn Fabric>) {
        let _ = self.fabric.set(fabric);
    }

    /// What [`Self::set_fabric`] set, while it lives.
    pub fn fabric(&self) -> Option<Arc<dyn Fabric>> {
        self.fabric.get().and_then(std::sync::Weak::upgrade)
    }

    /// Design documents of clustered database `db` changed (another member wrote one):
    /// the writes to this node's copies validate with them from now on.
    pub fn cluster_designs_changed(&self, db: &str) {
        if let Some(designs) = self.cluster_designs.get() {
            designs.changed(db);
        }
    }

    /// Every design document of clustered database `db`, read through the cluster
    /// (`None` when `db` is not clustered, or this node coordinates nothing). Blocking.
    pub fn clustered_designs(&self, db: &str) -> Result<Option<Arc<settee_docs::DesignSet>>> {
        match self.cluster_designs.get() {
            Some(designs) => Ok(designs.designs(db)?),
            None => Ok(None),
        }
    }

    /// As CouchDB's welcomes: the `[vendor]` section, when it has any keys, last.
    pub fn add_vendor(&self, body: &mut Value) {
        let vendor = self.config.section("vendor");
        if !vendor.is_empty() {
            body["vendor"] = serde_json::json!(vendor);
        }
    }

    /// `n` ids from `[uuids] algorithm` (`utc_id` takes `utc_id_suffix`). As CouchDB's
    /// generator, it starts afresh when the setting changes.
    pub fn uuids(&self, n: usize) -> Result<Vec<String>> {
        use settee_core::uuids::{Algorithm, Generator};
        let name = self.config.get_or("uuids", "algorithm", "random");
        let suffix = self.config.get_or("uuids", "utc_id_suffix", "");
        let algorithm = Algorithm::parse(&name, &suffix).map_err(Error::UnknownUuidAlgorithm)?;
        let mut slot = self.uuids.lock().unwrap();
        if slot.as_ref().map(Generator::algorithm) != Some(&algorithm) {
            *slot = Some(Generator::new(algorithm));
        }
        let generator = slot.as_mut().expect("set above");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut entropy = |buf: &mut [u8]| rand::RngCore::fill_bytes(&mut rand::thread_rng(), buf);
        Ok((0..n).map(|_| generator.next(&mut entropy, now)).collect())
    }

    /// One id for a new document. An unknown `[uuids] algorithm` fails the write with the
    /// error `/_uuids` gives (CouchDB's uuid server has no id to hand out then either).
    pub fn next_uuid(&self) -> Result<String> {
        Ok(self.uuids(1)?.pop().expect("one id"))
    }

    /// The database's info (`GET /{db}`), members in CouchDB's order.
    pub fn db_info(&self, db: &Database) -> Value {
        let info = db.info();
        let s = info.stats;
        let codec = seqs(db);
        let props = if db.props().partitioned {
            json!({"partitioned": true})
        } else {
            json!({})
        };
        json!({
            "instance_start_time": "0",
            "db_name": db.name,
            "purge_seq": codec.bare_seq(s.purge_seq),
            "update_seq": codec.update_seq(s.update_seq),
            "sizes": {"file": info.file_size, "external": s.external, "active": s.active.min(info.file_size.max(s.external))},
            "props": props,
            "doc_del_count": s.doc_del_count,
            "doc_count": s.doc_count,
            "disk_format_version": 8,
            "compact_running": self.tasks.compacting(&db.name),
            "cluster": {"q": db.props().q, "n": 1, "w": 1, "r": 1},
        })
    }

    /// Starts compacting `db` on a thread of its own, unless it is being compacted.
    pub fn compact(self: &Arc<Self>, db: Arc<Database>) {
        if self.tasks.start(&db.name) {
            let node = self.clone();
            std::thread::spawn(move || {
                let tasks = &node.tasks;
                if let Err(e) = db.compact_reporting(&mut |p| tasks.update(&db.name, p)) {
                    tracing::error!(db = %db.name, error = %e, "compaction failed");
                }
                tasks.finish(&db.name);
            });
        }
    }

    /// `_active_tasks` of this node but the replicator's: compactions and index builds.
    pub fn active_tasks(&self) -> Vec<Value> {
        let mut tasks = self.tasks.list();
        tasks.extend(self.views.tasks.list());
        tasks.extend(self.moves.list());
        tasks.extend(self.splits.list());
        tasks
    }

    /// `POST /_reload_query_servers`: external query servers stop (idle ones now, busy
    /// ones when their call ends) and start afresh on next use.
    pub fn reload_query_servers(&self) {
        self.views.query_servers.reload();
    }

    /// `POST /{db}/_ensure_full_commit`: everything written is on disk.
    pub fn ensure_full_commit(&self) -> Result<()> {
        Ok(self.couch.sync()?)
    }

    /// The view group of `_design/{ddoc}` and the index of its view `view` (404
    /// `missing_named_view` when it has none of that name).
    pub fn view_group(
        &self,
        db: &Database,
        ddoc: &str,
        view: &str,
    ) -> Result<(Arc<settee_views::Group>, usize)> {
        let g = self.ddoc_group(db, ddoc)?;
        let n = g
            .def
            .view(view)
            .map(|(i, _)| i)
            .ok_or_else(|| Error::NotFound("missing_named_view".into()))?;
        Ok((g, n))
    }

    /// The view group of `_design/{ddoc}`.
    pub fn ddoc_group(&self, db: &Database, ddoc: &str) -> Result<Arc<settee_views::Group>> {
        let id = format!("_design/{ddoc}");
        let doc = db.open_doc(&id, None)?;
        let body: serde_json::Map<String, Value> =
            serde_json::from_slice(settee_core::split_stored(&doc.body).0)
                .map_err(|_| Error::internal("stored body"))?;
        Ok(Arc::new(self.views.group(db, &id, &body)?))
    }

    /// A view query on view `n` of group `g`.
    pub(crate) fn run_view(
        &self,
        db: &Arc<Database>,
        user: &settee_auth::UserCtx,
        g: Arc<settee_views::Group>,
        n: usize,
        args: settee_wire::mrargs::MrArgs,
        out: fabric::Out<'_>,
    ) -> Result<()> {
        let args = views::ViewArgs::for_view(args, &g, n, &self.config)?;
        self.run_view_args(db, user, g, n, args, out)
    }

    fn run_view_args(
        &self,
        db: &Arc<Database>,
        user: &settee_auth::UserCtx,
        g: Arc<settee_views::Group>,
        n: usize,
        mut args: views::ViewArgs,
        out: fabric::Out<'_>,
    ) -> Result<()> {
        args.reader = replicator_read::reader(db, user);
        views::run(&self.views, db, &g, n, &args, out)
    }

    /// A view of shard copy `db` from the design document `design` (the body of
    /// `_design/{ddoc}`) its caller gives: how a cluster's coordinator queries a copy,
    /// which holds only its own range's design documents (CouchDB's shard workers take
    /// the design document from their coordinator the same way). The index is the copy's
    /// own, by the design's signature. Only a shard copy, only for a server admin (a
    /// member, for its coordinator). With `partials`, reductions are given as partial
    /// results, which the coordinator reduces again with other ranges' ones and finalizes
    /// (see [`views::GIVEN_PARTIALS`]).
    #[allow(clippy::too_many_arguments)]
    pub fn query_given_view(
        &self,
        db: &Arc<Database>,
        user: &settee_auth::UserCtx,
        ddoc: &str,
        design: &serde_json::Map<String, Value>,
        view: &str,
        args: settee_wire::mrargs::MrArgs,
        partials: bool,
        out: fabric::Out<'_>,
    ) -> Result<()> {
        if !settee_core::is_shard_name(&db.name) || !user.is_server_admin() {
            return Err(Error::Forbidden(
                "A design document is given only to a shard copy, by a member.".into(),
            ));
        }
        let g = self.views.group(db, &format!("_design/{ddoc}"), design)?;
        let n = (g.def.view(view).map(|(i, _)| i))
            .ok_or_else(|| Error::NotFound("missing_named_view".into()))?;
        let mut args = views::ViewArgs::for_view(args, &g, n, &self.config)?;
        args.query.partials = partials;
        self.run_view_args(db, user, Arc::new(g), n, args, out)
    }
}

/// Runs blocking store work off the async runtime, in the caller's error type (a task that
/// panicked is an internal error).
pub async fn blocking<T: Send + 'static, E: From<Error> + Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, E> + Send + 'static,
) -> std::result::Result<T, E> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("blocking task failed: {e}")))?
}
