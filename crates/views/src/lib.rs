//! Map/reduce view indexes: the reduce tree ([`tree`]), the on-disk layout ([`layout`]),
//! the parallel indexer ([`updater`]) and queries ([`query`]). Map functions run in
//! QuickJS, natively for the languages registered in [`Config::native`], or in external
//! query-server processes ([`external`]) for the languages of [`Config::query_servers`].
//!
//! Threading contract: [`Views`] is shared by all request threads. Everything is blocking;
//! callers on an async runtime call it from blocking threads. Updates of one index are
//! serialized by a per-index lock: a query that needs the index fresh takes the lock, so
//! concurrent queries wait for the one running update and then find the index current.
//! Reads use a store snapshot and never block on an update.

mod external;
mod group;
pub mod layout;
mod native;
mod native_fns;
mod query;
mod reducer;
mod runs;
mod tasks;
pub mod tree;
mod updater;

pub use group::{Group, ReduceKind};
pub use native::{NativeFactory, NativeLanguages, NativeMap};
pub use query::{Event, Grouping, ViewQuery};
pub use reducer::{js_error_parts, ReduceFailure};
pub use settee_js::{JsError, Limits};
pub use settee_queryserver::{self as queryserver, QueryServers};
pub use tasks::{TaskHandle, Tasks};

use settee_core::design::{DesignError, ViewGroupDef};
use settee_db::Database;
use settee_storage::{db_range, Cf, Read};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Db(#[from] settee_db::Error),
    #[error(transparent)]
    Store(#[from] settee_storage::Error),
    #[error(transparent)]
    Tree(#[from] tree::TreeError),
    #[error(transparent)]
    Js(JsError),
    #[error(transparent)]
    Design(#[from] DesignError),
    #[error("{}: {}", .0.error, .0.reason)]
    Reduce(ReduceFailure),
    /// A query-server call failed (map during an index update).
    #[error(transparent)]
    QueryServer(settee_queryserver::Error),
    /// Writing or reading back the sorted runs of a bulk load.
    #[error("spilling the rows of an index build: {0}")]
    Spill(std::io::Error),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// When a query brings the index up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Update first (`update=true`, the default).
    Update,
    /// Answer from the index as it is (`update=false`, `stale=ok`).
    Stale,
    /// Answer as it is, then update in the background (`update=lazy`, `stale=update_after`).
    UpdateAfter,
}

/// CouchDB's `[query_server_config] reduce_limit`: whether a JavaScript reduce whose output
/// does not shrink fast enough fails (`On`), is only logged (`Log`), or passes (`Off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceLimit {
    Off,
    On,
    Log,
}

impl ReduceLimit {
    /// The setting as CouchDB reads it: `false` turns it off, `log` only logs, anything
    /// else (CouchDB passes it to the JavaScript server as a truthy atom) turns it on.
    pub fn from_setting(value: &str) -> ReduceLimit {
        match value.trim() {
            "false" => ReduceLimit::Off,
            "log" => ReduceLimit::Log,
            _ => ReduceLimit::On,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub limits: Limits,
    /// CouchDB's `[query_server_config] reduce_limit`.
    pub reduce_limit: ReduceLimit,
    /// Map workers per index update (default: the number of cores).
    pub workers: usize,
    /// Languages whose map functions run natively instead of in QuickJS.
    pub native: NativeLanguages,
    /// External query servers, for languages neither JavaScript nor native.
    pub query_servers: Arc<QueryServers>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            reduce_limit: ReduceLimit::On,
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            native: NativeLanguages::default(),
            query_servers: Arc::new(QueryServers::new(Default::default(), Default::default())),
        }
    }
}

pub struct Views {
    /// JavaScript limits and `reduce_limit`, changeable at runtime (`/_config`); an index
    /// update or query reads them once when it starts.
    settings: std::sync::RwLock<(Limits, ReduceLimit)>,
    pub(crate) workers: usize,
    pub(crate) native: NativeLanguages,
    pub query_servers: Arc<QueryServers>,
    pub tasks: Tasks,
    locks: Mutex<HashMap<layout::IndexPrefix, Arc<Mutex<()>>>>,
    /// Indexes being compacted (`compact_running`).
    compacting: Mutex<std::collections::HashSet<layout::IndexPrefix>>,
}

/// What `GET /{db}/_design/{ddoc}/_info` reports about an index.
#[derive(Clone, Debug)]
pub struct IndexInfo {
    pub signature: String,
    pub language: String,
    pub update_seq: u64,
    /// The database purge sequence the index has applied purges up to.
    pub purge_seq: u64,
    pub updater_running: bool,
    pub compact_running: bool,
    /// The index's bytes on disk, at least `active_bytes`: index writes skip the WAL, so
    /// rows still in memtables are not in RocksDB's estimate of the files.
    pub file_bytes: u64,
    /// Bytes of the live rows as stored (tree keys and payloads, uncompressed).
    pub active_bytes: u64,
    /// Bytes of the live rows' keys and values as JSON text.
    pub external_bytes: u64,
}

impl Views {
    pub fn new(config: Config) -> Arc<Views> {
        Arc::new(Views {
            settings: std::sync::RwLock::new((config.limits, config.reduce_limit)),
            workers: config.workers,
            native: config.native,
            query_servers: config.query_servers,
            tasks: Tasks::default(),
            locks: Mutex::new(HashMap::new()),
            compacting: Mutex::new(Default::default()),
        })
    }

    /// The JavaScript limits every runtime gets.
    pub fn limits(&self) -> Limits {
        self.settings.read().unwrap().0
    }

    /// CouchDB's `[query_server_config] reduce_limit`.
    pub fn reduce_limit(&self) -> ReduceLimit {
        self.settings.read().unwrap().1
    }

    /// Applies new limits to runtimes created from now on.
    pub fn set_limits(&self, limits: Limits, reduce_limit: ReduceLimit) {
        *self.settings.write().unwrap() = (limits, reduce_limit);
    }

    /// Whether design documents of `language` can be indexed: JavaScript or CoffeeScript
    /// (any case), a language registered in [`Config::native`], or one with a query server.
    pub fn knows_language(&self, language: &str) -> bool {
        settee_js::Dialect::of(Some(language)).is_some()
            || self.native.contains(language)
            || self.query_servers.knows(language)
    }

    /// The map of `def` when it does not run in QuickJS: native, or through the
    /// language's query server; `None` for JavaScript (or an unknown language).
    pub fn native_map(&self, def: &ViewGroupDef) -> Result<Option<Arc<dyn NativeMap>>> {
        if let Some(native) = self.native.build(def)? {
            return Ok(Some(native));
        }
        Ok(external::ExternalMap::new(&self.query_servers, def)
            .map(|m| Arc::new(m) as Arc<dyn NativeMap>))
    }

    /// The reduce functions of `g`: JavaScript, or its language's query server.
    pub(crate) fn reducers<'a>(&'a self, g: &'a Group) -> reducer::JsReducers<'a> {
        let js = reducer::JsReducers::new(&g.fns, self.limits(), self.reduce_limit());
        let language = g.def.language.as_str();
        if settee_js::Dialect::of(Some(language)).is_none() && self.query_servers.knows(language) {
            js.external(&self.query_servers, language)
        } else {
            js
        }
    }

    /// The view group of a design document body.
    pub fn group(
        &self,
        db: &Database,
        ddoc_id: &str,
        body: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Group> {
        Ok(Group::in_db(
            db.id,
            db.props().partitioned,
            ddoc_id,
            ViewGroupDef::from_ddoc(body)?,
        ))
    }

    fn lock(&self, g: &Group) -> Arc<Mutex<()>> {
        self.lock_of(&g.prefix)
    }

    fn lock_of(&self, prefix: &layout::IndexPrefix) -> Arc<Mutex<()>> {
        self.locks
            .lock()
            .expect("index locks")
            .entry(prefix.clone())
            .or_default()
            .clone()
    }

    /// Brings the index up to date with the database. A group whose language nothing
    /// here runs cannot be updated (CouchDB's `unknown_query_language`); a query that
    /// does not update its index still reads it.
    pub fn refresh(&self, db: &Database, g: &Group) -> Result<()> {
        if !self.knows_language(&g.def.language) {
            let unknown = queryserver::Error::UnknownLanguage(g.def.language.clone());
            return Err(Error::QueryServer(unknown));
        }
        let lock = self.lock(g);
        let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        updater::update(self, db, g)
    }

    /// Starts a refresh on a background thread (errors are logged).
    /// Not past `[disk_monitor] background_view_indexing_threshold`: the index then stays
    /// as it is until a query updates it.
    pub fn refresh_later(self: &Arc<Self>, db: Arc<Database>, g: Arc<Group>) {
        if db.config().disk.blocks().background_indexing {
            tracing::debug!(db = %db.name, ddoc = %g.ddoc_id, "disk too full for background view update");
            return;
        }
        let views = self.clone();
        std::thread::spawn(move || {
            if let Err(e) = views.refresh(&db, &g) {
                tracing::warn!(db = %db.name, ddoc = %g.ddoc_id, error = %e, "background view update failed");
            }
        });
    }

    /// Runs a query on view number `view`, calling `out` with the head and each row.
    pub fn query(
        self: &Arc<Self>,
        db: &Arc<Database>,
        g: &Arc<Group>,
        view: usize,
        q: &ViewQuery,
        fresh: Freshness,
        out: &mut query::Out<'_>,
    ) -> Result<()> {
        let blocks = db.config().disk.blocks();
        if fresh == Freshness::Update && !blocks.interactive_indexing {
            self.refresh(db, g)?;
        }
        let snap = db.store().snapshot();
        let meta = updater::load_meta(&snap, g)?;
        // Past `interactive_view_indexing_threshold` a query may read an index that is
        // current, or one it asked to read stale; updating it is refused (CouchDB's 507).
        if fresh == Freshness::Update && blocks.interactive_indexing && meta.seq < db.update_seq() {
            return Err(settee_db::Error::InsufficientStorage(
                settee_db::disk::INDEXING_REFUSED.into(),
            )
            .into());
        }
        let nodes = updater::SnapNodes { read: &snap, g };
        let res = query::run(self, g, &meta, &nodes, view, q, out);
        if fresh == Freshness::UpdateAfter {
            self.refresh_later(db.clone(), g.clone());
        }
        res
    }

    pub fn info(&self, db: &Database, g: &Group) -> Result<IndexInfo> {
        let store = db.store();
        let snap = store.snapshot();
        let meta = updater::load_meta(&snap, g)?;
        let sizes = match meta.sizes {
            Some(s) => s,
            None => updater::measure(&updater::SnapNodes { read: &snap, g }, &meta.roots)?,
        };
        let (lo, hi) = g.prefix.range();
        let file_bytes = store
            .approximate_size(Cf::Views, &lo, &hi)
            .max(sizes.active);
        let compact_running = self
            .compacting
            .lock()
            .expect("compacting")
            .contains(&g.prefix);
        let updater_running = !compact_running && self.lock(g).try_lock().is_err();
        Ok(IndexInfo {
            signature: g.signature(),
            language: g.def.language.clone(),
            update_seq: meta.seq,
            purge_seq: meta.purge_seq,
            updater_running,
            compact_running,
            file_bytes,
            active_bytes: sizes.active,
            external_bytes: sizes.external,
        })
    }

    /// Starts [`Views::compact`] on a background thread; `compact_running` is true from
    /// this call until it ends (errors are logged).
    pub fn compact_later(self: &Arc<Self>, db: Arc<Database>, g: Arc<Group>) {
        self.compacting
            .lock()
            .expect("compacting")
            .insert(g.prefix.clone());
        let views = self.clone();
        std::thread::spawn(move || {
            if let Err(e) = views.compact(&db, &g) {
                tracing::warn!(db = %db.name, ddoc = %g.ddoc_id, error = %e, "view compaction failed");
            }
            views
                .compacting
                .lock()
                .expect("compacting")
                .remove(&g.prefix);
        });
    }

    /// Compacts the index: rewrites its trees densely (waiting for a running update), then
    /// has RocksDB compact the index's key range to reclaim the space.
    pub fn compact(&self, db: &Database, g: &Group) -> Result<()> {
        {
            let lock = self.lock(g);
            let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            updater::rebuild(self, db, g)?;
        }
        let (lo, hi) = g.prefix.range();
        db.store().compact_range(Cf::Views, &lo, &hi);
        Ok(())
    }

    /// Deletes every index of `db` whose signature is not in `keep`, but for one being
    /// updated at the moment (a query of a design document's older version still reads it;
    /// the next cleanup takes it). Deleting under a running update let that update commit a
    /// checkpoint whose untouched nodes were gone, which its next query failed to read.
    pub fn cleanup(&self, db: &Database, keep: &[[u8; 16]]) -> Result<usize> {
        let store = db.store();
        let (_, db_end) = db_range(db.id);
        let mut from = settee_storage::key_in_db(db.id, &[]);
        let mut removed = 0;
        loop {
            let next = store
                .range(Cf::Views, &from, &db_end, false)
                .next()
                .transpose()?;
            let Some((k, _)) = next else { break };
            let Some(sig) = k.get(8..24).and_then(|s| <[u8; 16]>::try_from(s).ok()) else {
                break;
            };
            let prefix = layout::IndexPrefix::new(db.id, &sig);
            let (lo, hi) = prefix.range();
            if !keep.contains(&sig) {
                let lock = self.lock_of(&prefix);
                let idle = match lock.try_lock() {
                    Ok(guard) => Some(guard),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                };
                if idle.is_some() {
                    let mut b = store.batch();
                    b.delete_range(Cf::Views, &lo, &hi);
                    store.write(b, false)?;
                    store.compact_range(Cf::Views, &lo, &hi);
                    removed += 1;
                }
            }
            from = hi;
        }
        Ok(removed)
    }
}

/// Stops folding when `out` says so.
pub fn keep_going(open: bool) -> ControlFlow<()> {
    if open {
        ControlFlow::Continue(())
    } else {
        ControlFlow::Break(())
    }
}
