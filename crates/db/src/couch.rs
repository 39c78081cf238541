//! The registry of databases in one data directory.

use crate::database::{Database, Props};
use crate::docinfo::Stats;
use crate::meta;
use crate::{Error, Result};
use settee_core::validate_db_name;
use settee_storage::{db_range, Cf, Read, Store, StoreOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

/// Settings of the document store (CouchDB's `[couchdb]` section).
#[derive(Clone, Debug)]
pub struct Config {
    /// Shared by every database; [`Couch::set_max_document_size`] changes it at runtime.
    pub max_document_size: Arc<std::sync::atomic::AtomicUsize>,
    /// Largest number of documents one commit gathers from waiting requests.
    pub max_batch_docs: usize,
    /// `[couchdb] max_partition_size` in bytes (0: no limit); [`Couch::set_max_partition_size`]
    /// changes it at runtime.
    pub max_partition_size: Arc<std::sync::atomic::AtomicU64>,
    /// How long a database's writer thread waits for work before it ends (the next write
    /// starts another).
    pub writer_idle: std::time::Duration,
    /// `[disk_monitor]`: its settings and the data file system's last measured use.
    pub disk: Arc<crate::disk::DiskMonitor>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_document_size: Arc::new(settee_core::MAX_DOCUMENT_SIZE.into()),
            max_batch_docs: 10_000,
            max_partition_size: Arc::new(settee_core::MAX_PARTITION_SIZE.into()),
            writer_idle: std::time::Duration::from_secs(1),
            disk: Arc::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbEventKind {
    Created,
    Updated,
    Deleted,
}

impl DbEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DbEventKind::Created => "created",
            DbEventKind::Updated => "updated",
            DbEventKind::Deleted => "deleted",
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'c' => Some(DbEventKind::Created),
            b'u' => Some(DbEventKind::Updated),
            b'd' => Some(DbEventKind::Deleted),
            _ => None,
        }
    }

    fn byte(self) -> u8 {
        self.as_str().as_bytes()[0]
    }
}

/// One entry of `_db_updates`: the latest event of a database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbEvent {
    pub seq: u64,
    pub db: String,
    pub kind: DbEventKind,
}

/// Server-wide event log for `_db_updates`: the newest event per database, persisted in
/// the same batch as the change that caused it.
pub(crate) struct Events {
    /// The event stream's identity, as CouchDB's `_global_changes` shard uuid: the uuid
    /// `_db_updates` sequences carry. Made on first start, then kept.
    uuid: String,
    state: Mutex<EventState>,
    notify: tokio::sync::watch::Sender<u64>,
}

struct EventState {
    seq: u64,
    latest: BTreeMap<String, u64>,
}

impl Events {
    fn load(store: &Store) -> Result<Events> {
        let mut latest = BTreeMap::new();
        let mut seq = 0;
        for item in store.range(Cf::Meta, meta::EVENT_PREFIX, meta::EVENT_END, false) {
            let (k, v) = item?;
            let s = u64::from_be_bytes(k[1..9].try_into().map_err(|_| corrupt("event key"))?);
            let name = String::from_utf8(v[1..].to_vec()).map_err(|_| corrupt("event"))?;
            seq = seq.max(s);
            latest.insert(name, s);
        }
        let uuid = match store.get(Cf::Meta, meta::EVENTS_UUID)? {
            Some(v) => String::from_utf8(v).map_err(|_| corrupt("events uuid"))?,
            None => {
                let uuid = Props::new_uuid();
                let mut batch = store.batch();
                batch.put(Cf::Meta, meta::EVENTS_UUID, uuid.as_bytes());
                store.write(batch, true)?;
                uuid
            }
        };
        Ok(Events {
            uuid,
            state: Mutex::new(EventState { seq, latest }),
            notify: tokio::sync::watch::channel(seq).0,
        })
    }

    /// Adds the event to `batch`; call [`Events::published`] after the batch commits.
    pub(crate) fn record(
        &self,
        batch: &mut settee_storage::Batch<'_>,
        db: &str,
        kind: DbEventKind,
    ) -> u64 {
        let mut st = self.state.lock().unwrap();
        st.seq += 1;
        let seq = st.seq;
        // `latest` moves only once the batch is written ([`Events::published`]): a batch
        // that fails to commit must leave the previous event as the database's latest.
        if let Some(&old) = st.latest.get(db) {
            batch.delete(Cf::Meta, &meta::event_key(old));
        }
        let mut v = vec![kind.byte()];
        v.extend_from_slice(db.as_bytes());
        batch.put(Cf::Meta, &meta::event_key(seq), &v);
        seq
    }

    /// The batch holding event `seq` of `db` is written.
    pub(crate) fn published(&self, db: &str, seq: u64) {
        self.state
            .lock()
            .unwrap()
            .latest
            .insert(db.to_string(), seq);
        self.notify.send_if_modified(|cur| {
            let newer = seq > *cur;
            *cur = (*cur).max(seq);
            newer
        });
    }
}

fn corrupt(what: &str) -> Error {
    Error::Storage(settee_storage::Error::Corrupted(what.into()))
}

pub struct Couch {
    store: Arc<Store>,
    config: Config,
    dbs: RwLock<BTreeMap<String, Arc<Database>>>,
    /// Serializes creation and deletion of databases.
    lifecycle: Mutex<()>,
    events: Arc<Events>,
}

impl Drop for Couch {
    /// Stops every writer first, so that the store closes here when the last reference
    /// goes rather than on a writer thread racing the process's exit.
    fn drop(&mut self) {
        let dbs = self.dbs.get_mut().unwrap_or_else(|e| e.into_inner());
        for db in dbs.values() {
            db.stop_writer();
        }
    }
}

impl Couch {
    pub fn open(dir: &Path, config: Config, store_opts: &StoreOptions) -> Result<Arc<Couch>> {
        let store = Arc::new(Store::open(dir, store_opts)?);
        store.spawn_idle_flusher(std::time::Duration::from_secs(2));
        let events = Arc::new(Events::load(&store)?);
        let mut dbs = BTreeMap::new();
        for item in store.range(Cf::Meta, meta::NAME_PREFIX, meta::NAME_END, false) {
            let (k, v) = item?;
            let name = String::from_utf8(k[1..].to_vec()).map_err(|_| corrupt("database name"))?;
            let id = meta::decode_db_record(&v).ok_or_else(|| corrupt("database record"))?;
            let stats = match store.get(Cf::Meta, &meta::stats_key(id))? {
                Some(v) => Stats::decode(&v)?,
                None => Stats::default(),
            };
            let props = Props::load(&store, id, &name)?;
            let db = Database::new(
                name.clone(),
                id,
                store.clone(),
                stats,
                props,
                config.clone(),
                events.clone(),
            );
            dbs.insert(name, db);
        }
        Ok(Arc::new(Couch {
            store,
            config,
            dbs: RwLock::new(dbs),
            lifecycle: Mutex::new(()),
            events,
        }))
    }

    /// `[couchdb] max_document_size`, for writes from now on.
    pub fn set_max_document_size(&self, bytes: usize) {
        self.config
            .max_document_size
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// `[disk_monitor]`: the settings and the measurement every database reads.
    pub fn disk(&self) -> &Arc<crate::disk::DiskMonitor> {
        &self.config.disk
    }

    /// `[couchdb] max_partition_size` (0: none), for writes from now on.
    pub fn set_max_partition_size(&self, bytes: u64) {
        self.config
            .max_partition_size
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Writes every memtable to tables, for a clean stop: view indexes are written
    /// without the WAL and would otherwise resume from older checkpoints.
    pub fn flush(&self) -> Result<()> {
        Ok(self.store.flush()?)
    }

    /// How many databases are open: every database is, from startup (or creation) on.
    pub fn open_databases(&self) -> usize {
        self.dbs.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The storage engine's figures (cache, compaction debt, WAL syncs).
    pub fn engine_stats(&self) -> settee_storage::EngineStats {
        self.store.engine_stats()
    }

    pub fn get(&self, name: &str) -> Result<Arc<Database>> {
        self.dbs
            .read()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or(Error::DbNotFound)
    }

    pub fn exists(&self, name: &str) -> bool {
        self.dbs.read().unwrap().contains_key(name)
    }

    /// All database names in order.
    pub fn names(&self) -> Vec<String> {
        self.dbs.read().unwrap().keys().cloned().collect()
    }

    /// Creates a database with the given security object.
    pub fn create(&self, name: &str, security: serde_json::Value) -> Result<Arc<Database>> {
        self.create_with(
            name,
            Props {
                security,
                ..Props::default()
            },
        )
    }

    /// Creates a database with the given properties (security object, partitioning, q).
    pub fn create_with(&self, name: &str, props: Props) -> Result<Arc<Database>> {
        validate_db_name(name)?;
        self.create_named(name, props)
    }

    /// Creates the database of a shard copy (`shards/{range}/{db}.{suffix}`, a name
    /// clients cannot create: a cluster's coordinator creates them).
    pub fn create_copy(&self, name: &str, props: Props) -> Result<Arc<Database>> {
        if !settee_core::is_shard_name(name) {
            validate_db_name(name)?;
        }
        self.create_named(name, props)
    }

    fn create_named(&self, name: &str, mut props: Props) -> Result<Arc<Database>> {
        if props.uuid.is_empty() {
            props.uuid = Props::new_uuid();
        }
        let _guard = self.lifecycle.lock().unwrap();
        if self.exists(name) {
            return Err(Error::DbExists);
        }
        let next = match self.store.get(Cf::Meta, meta::NEXT_DB_ID)? {
            Some(v) => {
                u64::from_be_bytes(v.as_slice().try_into().map_err(|_| corrupt("next db id"))?)
            }
            None => 0,
        };
        let id = next + 1;
        let stats = Stats::default();
        let mut batch = self.store.batch();
        batch.put(Cf::Meta, meta::NEXT_DB_ID, &id.to_be_bytes());
        batch.put(
            Cf::Meta,
            &meta::db_name_key(name),
            &meta::encode_db_record(id),
        );
        batch.put(Cf::Meta, &meta::stats_key(id), &stats.encode());
        batch.put(Cf::Meta, &meta::props_key(id), &props.encode());
        let seq = self.events.record(&mut batch, name, DbEventKind::Created);
        self.store.write(batch, true)?;
        self.events.published(name, seq);
        let db = Database::new(
            name.to_string(),
            id,
            self.store.clone(),
            stats,
            props,
            self.config.clone(),
            self.events.clone(),
        );
        self.dbs
            .write()
            .unwrap()
            .insert(name.to_string(), db.clone());
        Ok(db)
    }

    pub fn delete(&self, name: &str) -> Result<()> {
        let _guard = self.lifecycle.lock().unwrap();
        let db = self.get(name)?;
        let id = db.id;
        db.retire(|| {
            let mut batch = self.store.batch();
            batch.delete(Cf::Meta, &meta::db_name_key(name));
            batch.delete(Cf::Meta, &meta::stats_key(id));
            batch.delete(Cf::Meta, &meta::props_key(id));
            batch.delete_range(
                Cf::Meta,
                &meta::purge_key(id, 0),
                &meta::purge_key(id + 1, 0),
            );
            let (lo, hi) = meta::partition_range(id);
            batch.delete_range(Cf::Meta, &lo, &hi);
            let (lo, hi) = db_range(id);
            for cf in Cf::PER_DB {
                batch.delete_range(cf, &lo, &hi);
            }
            let seq = self.events.record(&mut batch, name, DbEventKind::Deleted);
            self.store.write(batch, true)?;
            self.events.published(name, seq);
            Ok(())
        })?;
        self.dbs.write().unwrap().remove(name);
        // Reclaim the space in the background; the data is already invisible.
        let store = self.store.clone();
        std::thread::spawn(move || {
            let (lo, hi) = db_range(id);
            for cf in Cf::PER_DB {
                store.compact_range(cf, &lo, &hi);
            }
        });
        Ok(())
    }

    /// Events with `seq > since`, oldest first.
    pub fn db_events_since(&self, since: u64) -> Result<Vec<DbEvent>> {
        let mut out = Vec::new();
        for item in self.store.range(
            Cf::Meta,
            &meta::event_key(since + 1),
            meta::EVENT_END,
            false,
        ) {
            let (k, v) = item?;
            let seq = u64::from_be_bytes(k[1..9].try_into().map_err(|_| corrupt("event key"))?);
            let kind = DbEventKind::from_byte(v[0]).ok_or_else(|| corrupt("event"))?;
            let db = String::from_utf8(v[1..].to_vec()).map_err(|_| corrupt("event"))?;
            out.push(DbEvent { seq, db, kind });
        }
        Ok(out)
    }

    /// The uuid `_db_updates` sequences carry.
    pub fn db_events_uuid(&self) -> &str {
        &self.events.uuid
    }

    pub fn db_events_seq(&self) -> u64 {
        *self.events.notify.borrow()
    }

    /// A receiver that changes whenever a database event is published.
    pub fn watch_db_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.events.notify.subscribe()
    }

    /// Makes everything acknowledged so far durable (all writes are already fsynced; this
    /// exists for `_ensure_full_commit`).
    pub fn sync(&self) -> Result<()> {
        self.store.sync_wal()?;
        Ok(())
    }
}
