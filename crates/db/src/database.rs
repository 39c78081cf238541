//! One database: its reads, its info, and the handle to its writer.

use crate::couch::{Config, Events};
use crate::disk;
use crate::docinfo::{DocInfo, PartitionStats, Stats};
use crate::meta;
use crate::writer::{self, Job, LocalUpdate, UpdateResult};
use crate::{Error, Result};
use serde_json::{json, Value};
use settee_core::{Leaf, ParsedDoc, Rev, SeqCodec};
use settee_storage::{key_in_db, seq_key, Cf, DbId, Pinned, Read, Snapshot, Store};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{oneshot, watch};

/// Per-database properties CouchDB lets clients set.
#[derive(Clone, Debug, PartialEq)]
pub struct Props {
    pub revs_limit: u64,
    pub purged_infos_limit: u64,
    pub security: Value,
    /// Set at creation (`PUT /{db}?partitioned=true`), never changed: every document id
    /// but design and local ones is `partition:id`, and per-partition counts are kept.
    pub partitioned: bool,
    /// The shard count asked for at creation (`?q=`, default 1). Settee keeps one store
    /// per database whatever it is; `_shards` and the database info report the ring CouchDB
    /// would have cut.
    pub q: u32,
    /// The database's identity, 32 hex digits (CouchDB's shard file uuid): set at creation,
    /// never changed, so a database deleted and created again under the same name has
    /// another. Update sequences carry its first 7 digits; a sequence with another prefix
    /// reads as 0. Empty in a `Props` not yet created ([`crate::Couch::create_with`] fills it).
    pub uuid: String,
}

impl Default for Props {
    fn default() -> Self {
        Props {
            revs_limit: 1000,
            purged_infos_limit: 1000,
            security: json!({}),
            partitioned: false,
            q: 1,
            uuid: String::new(),
        }
    }
}

impl Props {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = json!({"v": 3, "revs_limit": self.revs_limit, "purged_infos_limit": self.purged_infos_limit, "security": self.security, "uuid": self.uuid});
        if self.partitioned {
            v["partitioned"] = json!(true);
        }
        if self.q != 1 {
            v["q"] = json!(self.q);
        }
        serde_json::to_vec(&v).expect("props serialize")
    }

    /// A fresh uuid for a database being created.
    pub(crate) fn new_uuid() -> String {
        hex::encode(rand::random::<[u8; 16]>())
    }

    /// The uuid given to a database created before uuids were kept (props `v` < 3): a
    /// function of its id, which is never reused, and its name, so it is the same on every
    /// start even before it is persisted.
    fn derived_uuid(id: DbId, name: &str) -> String {
        use md5::{Digest, Md5};
        hex::encode(Md5::digest(format!("settee-db-uuid/{id}/{name}")))
    }

    /// The stored properties; a database without a uuid gets its derived one, persisted.
    pub(crate) fn load(store: &Store, id: DbId, name: &str) -> Result<Props> {
        let mut props = Props::parse(store, id)?;
        if props.uuid.is_empty() {
            props.uuid = Props::derived_uuid(id, name);
            let mut batch = store.batch();
            batch.put(Cf::Meta, &meta::props_key(id), &props.encode());
            store.write(batch, true)?;
        }
        Ok(props)
    }

    fn parse(store: &Store, id: DbId) -> Result<Props> {
        let Some(raw) = store.get(Cf::Meta, &meta::props_key(id))? else {
            return Ok(Props::default());
        };
        let v: Value = serde_json::from_slice(&raw).map_err(|_| {
            Error::Storage(settee_storage::Error::Corrupted(
                "database properties".into(),
            ))
        })?;
        let d = Props::default();
        Ok(Props {
            revs_limit: v["revs_limit"].as_u64().unwrap_or(d.revs_limit),
            purged_infos_limit: v["purged_infos_limit"]
                .as_u64()
                .unwrap_or(d.purged_infos_limit),
            security: match v["v"].as_u64() {
                // Databases written before access control existed were reachable by
                // server admins only; keep them so rather than make them public.
                Some(1) => {
                    json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
                }
                _ => v.get("security").cloned().unwrap_or(d.security),
            },
            partitioned: v["partitioned"].as_bool().unwrap_or(false),
            q: v["q"]
                .as_u64()
                .and_then(|q| u32::try_from(q).ok())
                .unwrap_or(d.q),
            uuid: v["uuid"].as_str().unwrap_or_default().to_string(),
        })
    }
}

/// Changes whose infos (and bodies) `changes` fetches with one MultiGet.
const CHANGES_BATCH: usize = 128;

/// Revisions per document id, as `_purge` and `_revs_diff` take them.
pub type IdRevs = Vec<(String, Vec<Rev>)>;

/// `_revs_diff`'s answer: per id, the missing revisions and their possible ancestors.
pub type RevsDiff = Vec<(String, Vec<Rev>, Vec<Rev>)>;

/// A document revision read from the store.
#[derive(Clone, Debug)]
pub struct OpenDoc {
    pub id: String,
    pub rev: Rev,
    pub deleted: bool,
    pub body: Vec<u8>,
    pub info: DocInfo,
}

/// A row of `_all_docs`: the id and, if the document exists, its info and (when asked)
/// its winning body.
#[derive(Clone, Debug)]
pub struct AllDocsRow {
    pub id: String,
    pub info: Option<DocInfo>,
    pub body: Option<Vec<u8>>,
}

/// A row of `_changes`.
#[derive(Clone, Debug)]
pub struct Change {
    pub seq: u64,
    pub id: String,
    pub info: DocInfo,
    pub body: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
pub struct LocalDoc {
    pub id: String,
    pub rev: u64,
    pub body: Vec<u8>,
}

#[derive(Clone, Debug)]
pub struct DbInfo {
    pub stats: Stats,
    pub file_size: u64,
}

pub struct Database {
    pub name: String,
    pub id: DbId,
    pub(crate) store: Arc<Store>,
    pub(crate) config: Config,
    pub(crate) events: Arc<Events>,
    pub(crate) stats: Mutex<Stats>,
    props: RwLock<Props>,
    pub(crate) seq_tx: watch::Sender<u64>,
    /// `true` while the database exists. The writer holds a read lock across each commit;
    /// deletion takes the write lock, so no commit lands after the range delete.
    pub(crate) alive: RwLock<bool>,
    pub(crate) writer: Mutex<Option<writer::Handle>>,
}

/// A step of [`Database::compact_reporting`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactPhase {
    /// Dropping superseded revisions' bodies, document by document.
    DocumentCopy,
    /// Removing attachment content no kept revision refers to.
    Attachments,
    /// The storage engine rewriting the database's key ranges (one step per family).
    Storage,
}

impl CompactPhase {
    /// The phase's name in `_active_tasks` (CouchDB's for the first).
    pub fn as_str(self) -> &'static str {
        match self {
            CompactPhase::DocumentCopy => "document_copy",
            CompactPhase::Attachments => "attachments",
            CompactPhase::Storage => "storage_compaction",
        }
    }
}

/// Where a compaction is: `done` of `total` steps of `phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactProgress {
    pub phase: CompactPhase,
    pub done: u64,
    pub total: u64,
}

impl Database {
    pub(crate) fn new(
        name: String,
        id: DbId,
        store: Arc<Store>,
        stats: Stats,
        props: Props,
        config: Config,
        events: Arc<Events>,
    ) -> Arc<Database> {
        Arc::new(Database {
            name,
            id,
            store,
            config,
            events,
            seq_tx: watch::channel(stats.update_seq).0,
            stats: Mutex::new(stats),
            props: RwLock::new(props),
            alive: RwLock::new(true),
            writer: Mutex::new(None),
        })
    }

    /// The store this database lives in (for derived indexes kept beside it).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn props(&self) -> Props {
        self.props.read().unwrap().clone()
    }

    /// How this database's update sequences are written and read, on node `node`.
    pub fn seq_codec(&self, node: &str) -> SeqCodec {
        let props = self.props.read().unwrap();
        SeqCodec::new(node, props.q, &props.uuid)
    }

    /// Changes properties and persists them durably.
    pub fn set_props(&self, f: impl FnOnce(&mut Props)) -> Result<()> {
        let mut props = self.props.write().unwrap();
        let mut next = props.clone();
        f(&mut next);
        let mut batch = self.store.batch();
        batch.put(Cf::Meta, &meta::props_key(self.id), &next.encode());
        self.store.write(batch, true)?;
        *props = next;
        Ok(())
    }

    /// The counters of one partition (zero for a partition without documents).
    pub fn partition_stats(&self, partition: &str) -> Result<PartitionStats> {
        self.partition_stats_in(self.store.as_ref(), partition)
    }

    /// A partition's counters as `read` (the store, or a snapshot) holds them.
    pub fn partition_stats_in(&self, read: &dyn Read, partition: &str) -> Result<PartitionStats> {
        match read.get(Cf::Meta, &meta::partition_key(self.id, partition))? {
            Some(v) => Ok(PartitionStats::decode(&v)?),
            None => Ok(PartitionStats::default()),
        }
    }

    pub fn stats(&self) -> Stats {
        *self.stats.lock().unwrap()
    }

    pub fn update_seq(&self) -> u64 {
        self.stats().update_seq
    }

    /// A receiver whose value is the committed update_seq; it changes after each commit.
    pub fn watch_seq(&self) -> watch::Receiver<u64> {
        self.seq_tx.subscribe()
    }

    pub fn info(&self) -> DbInfo {
        let (lo, hi) = settee_storage::db_range(self.id);
        let on_disk: u64 = [Cf::Docs, Cf::Seqs, Cf::Bodies, Cf::Local, Cf::Atts]
            .iter()
            .map(|&cf| self.store.approximate_size(cf, &lo, &hi))
            .sum();
        let stats = self.stats();
        // Data not yet flushed from memtables is on disk only in the WAL, which
        // `approximate_size` does not see: count the WAL files, bounded by this database's
        // own live bytes (the WAL is shared by all databases).
        let unflushed = self.store.wal_bytes().min(stats.active);
        DbInfo {
            stats,
            file_size: on_disk + unflushed,
        }
    }

    /// Compaction: drops the bodies of superseded revisions (through the writer, a slice
    /// at a time), then compacts the database's key ranges to reclaim the space.
    pub fn compact(self: &Arc<Self>) -> Result<()> {
        self.compact_reporting(&mut |_| {})
    }

    /// [`Database::compact`], telling `progress` where it is after every step.
    pub fn compact_reporting(
        self: &Arc<Self>,
        progress: &mut dyn FnMut(CompactProgress),
    ) -> Result<()> {
        const SLICE: usize = 1000;
        let stats = self.stats();
        let total = stats.doc_count + stats.doc_del_count;
        let mut done = 0;
        let mut report = |phase, done, total| {
            progress(CompactProgress { phase, done, total });
        };
        report(CompactPhase::DocumentCopy, 0, total);
        let mut from = Vec::new();
        loop {
            let (reply, rx) = oneshot::channel();
            self.submit(Job::Prune {
                from,
                limit: SLICE,
                reply,
            })?;
            match rx
                .blocking_recv()
                .map_err(|_| Error::Internal("writer dropped compaction".into()))??
            {
                Some(next) => {
                    // Every slice but the last holds exactly `SLICE` documents.
                    done = (done + SLICE as u64).min(total);
                    report(CompactPhase::DocumentCopy, done, total);
                    from = next
                }
                None => break,
            }
        }
        report(CompactPhase::DocumentCopy, total, total);
        report(CompactPhase::Attachments, 0, 1);
        let live = self.live_attachments()?;
        self.reclaim_attachments(&live)?;
        report(CompactPhase::Attachments, 1, 1);
        // Flush every family (not only this database's) so no WAL file stays alive holding
        // data that compaction has already written to tables.
        self.store.flush()?;
        let (lo, hi) = settee_storage::db_range(self.id);
        let families = [Cf::Docs, Cf::Seqs, Cf::Bodies, Cf::Local, Cf::Atts];
        let n = families.len() as u64;
        for (i, cf) in families.into_iter().enumerate() {
            report(CompactPhase::Storage, i as u64, n);
            self.store.compact_range(cf, &lo, &hi);
        }
        report(CompactPhase::Storage, n, n);
        Ok(())
    }

    // ---- writes -------------------------------------------------------------------------

    /// Hands a job to the writer, starting it on first use. No lock is held while sending,
    /// so a full queue (backpressure) never blocks deletion or the writer itself.
    fn submit(self: &Arc<Self>, job: Job) -> Result<()> {
        if !*self.alive.read().unwrap() {
            return Err(Error::DbNotFound);
        }
        let tx = self
            .writer
            .lock()
            .unwrap()
            .get_or_insert_with(|| writer::spawn(self))
            .tx
            .clone();
        tx.send(job)
            .map_err(|_| Error::Internal("database writer stopped".into()))
    }

    /// Queues document updates; the reply arrives after the batch holding them is fsynced.
    pub fn update_docs(
        self: &Arc<Self>,
        docs: Vec<ParsedDoc>,
        new_edits: bool,
    ) -> Result<oneshot::Receiver<Result<Vec<UpdateResult>>>> {
        let partitioned = self.props().partitioned;
        for d in &docs {
            if partitioned {
                settee_core::validate_partitioned_doc_id(d.id.as_deref().unwrap_or(""))?;
            }
            if d.body.len()
                > self
                    .config
                    .max_document_size
                    .load(std::sync::atomic::Ordering::Relaxed)
            {
                return Err(Error::DocTooLarge(d.id.clone().unwrap_or_default()));
            }
        }
        let (reply, rx) = oneshot::channel();
        // As `couch_db:update_docs` for interactive edits: every document fails, none is
        // written; replicated writes (`new_edits=false`) still go through.
        if new_edits && self.config.disk.room_for_edits().is_err() {
            let refused = docs
                .into_iter()
                .map(|d| UpdateResult::Err {
                    id: d.id.unwrap_or_default(),
                    error: disk::edits_refused(),
                })
                .collect();
            let _ = reply.send(Ok(refused));
            return Ok(rx);
        }
        self.submit(Job::Docs {
            docs,
            new_edits,
            reply,
        })?;
        Ok(rx)
    }

    pub fn update_local(
        self: &Arc<Self>,
        update: LocalUpdate,
    ) -> Result<oneshot::Receiver<Result<u64>>> {
        // Local documents are interactive edits too.
        self.config.disk.room_for_edits()?;
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Local { update, reply })?;
        Ok(rx)
    }

    /// Removes revisions entirely (`_purge`); replies with the purged revisions per id.
    pub fn purge(self: &Arc<Self>, revs: IdRevs) -> Result<oneshot::Receiver<Result<IdRevs>>> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Purge { revs, reply })?;
        Ok(rx)
    }

    /// Records purges taken from another database (a split's halves take their copy's),
    /// each under a new `purge_seq`, documents untouched; replies with them.
    pub fn record_purges(
        self: &Arc<Self>,
        infos: IdRevs,
    ) -> Result<oneshot::Receiver<Result<IdRevs>>> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::RecordPurges { infos, reply })?;
        Ok(rx)
    }

    /// The purge records kept (up to `_purged_infos_limit`), oldest first: each purged
    /// document's id and revisions.
    pub fn purge_infos(&self) -> Result<IdRevs> {
        let snap = self.store.snapshot();
        let corrupt = || Error::Storage(settee_storage::Error::Corrupted("purge record".into()));
        let lo = meta::purge_key(self.id, 0);
        let hi = meta::purge_key(self.id + 1, 0);
        let mut out = Vec::new();
        for item in snap.range(Cf::Meta, &lo, &hi, false) {
            let (_, v) = item?;
            let record: Value = match v.split_first() {
                Some((&writer::PURGE_V1, json)) => {
                    serde_json::from_slice(json).map_err(|_| corrupt())?
                }
                _ => return Err(corrupt()),
            };
            let id = record["id"].as_str().ok_or_else(corrupt)?.to_string();
            let revs = (record["revs"].as_array().ok_or_else(corrupt)?.iter())
                .map(|r| {
                    r.as_str()
                        .and_then(|r| Rev::parse(r).ok())
                        .ok_or_else(corrupt)
                })
                .collect::<Result<Vec<Rev>>>()?;
            out.push((id, revs));
        }
        Ok(out)
    }

    /// Whether the database's writer thread is running (it ends when idle).
    pub fn writer_running(&self) -> bool {
        self.writer.lock().unwrap().is_some()
    }

    /// Runs `delete` while no commit is in flight, then stops accepting work. Commits queued
    /// behind it find the database gone and fail with `not_found`.
    pub(crate) fn retire(&self, delete: impl FnOnce() -> Result<()>) -> Result<()> {
        {
            let mut alive = self.alive.write().unwrap();
            delete()?;
            *alive = false;
        }
        self.writer.lock().unwrap().take();
        Ok(())
    }

    /// Stops the writer and waits for its thread to end: what it had queued is committed
    /// first. After this the writer holds no reference to the database, so dropping the
    /// last one closes the store on the dropping thread, not on a thread the process may
    /// outlive (RocksDB aborts on a close racing the exit).
    pub(crate) fn stop_writer(&self) {
        let handle = self.writer.lock().unwrap().take();
        if let Some(handle) = handle {
            handle.stop();
        }
    }

    // ---- reads --------------------------------------------------------------------------

    fn doc_key(&self, id: &str) -> Vec<u8> {
        key_in_db(self.id, id.as_bytes())
    }

    pub(crate) fn read_info(&self, r: &impl Read, id: &str) -> Result<Option<DocInfo>> {
        match r.get(Cf::Docs, &self.doc_key(id))? {
            Some(v) => Ok(Some(DocInfo::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// The stored bodies with these ids (a revision's `body`), as of `snap`, in order, read
    /// in place; their blocks go into the block cache only with `fill_cache`. Ids in any
    /// order are read in ascending order (documents by id have their bodies all over the
    /// table), so that most of a range is read by one scan.
    pub fn bodies_in<'s>(
        &self,
        snap: &Snapshot<'s>,
        body_ids: &[u64],
        fill_cache: bool,
    ) -> Result<Vec<Pinned<'s>>> {
        if body_ids.windows(2).all(|w| w[0] <= w[1]) {
            return self.sorted_bodies_in(snap, body_ids, fill_cache);
        }
        let mut order: Vec<usize> = (0..body_ids.len()).collect();
        order.sort_unstable_by_key(|&i| body_ids[i]);
        let sorted: Vec<u64> = order.iter().map(|&i| body_ids[i]).collect();
        let mut out: Vec<Option<Pinned<'s>>> = (0..body_ids.len()).map(|_| None).collect();
        for (value, &i) in self
            .sorted_bodies_in(snap, &sorted, fill_cache)?
            .into_iter()
            .zip(&order)
        {
            out[i] = Some(value);
        }
        Ok(out
            .into_iter()
            .map(|v| v.expect("every position filled"))
            .collect())
    }

    fn sorted_bodies_in<'s>(
        &self,
        snap: &Snapshot<'s>,
        body_ids: &[u64],
        fill_cache: bool,
    ) -> Result<Vec<Pinned<'s>>> {
        let keys = self.body_keys(body_ids);
        let values = if Self::dense(body_ids) {
            snap.scan_values(Cf::Bodies, &keys, fill_cache)?
        } else {
            snap.multi_get_pinned(Cf::Bodies, &keys, fill_cache)?
        };
        values
            .into_iter()
            .zip(body_ids)
            .map(|(v, b)| v.ok_or_else(|| missing_body(*b)))
            .collect()
    }

    /// Calls `f` with the position and stored body of each of `body_ids` (ascending), as of
    /// `snap`, in order, read in place (no copies where a scan reads them): the cheapest
    /// way through many bodies.
    pub fn each_body_in(
        &self,
        snap: &Snapshot<'_>,
        body_ids: &[u64],
        fill_cache: bool,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        assert!(body_ids.is_sorted(), "body ids in order");
        if !Self::dense(body_ids) {
            for (i, body) in self
                .sorted_bodies_in(snap, body_ids, fill_cache)?
                .iter()
                .enumerate()
            {
                f(i, body);
            }
            return Ok(());
        }
        let mut missing = None;
        snap.scan_each(
            Cf::Bodies,
            &self.body_keys(body_ids),
            fill_cache,
            |i, v| match v {
                Some(v) => f(i, v),
                None => missing = missing.or(Some(body_ids[i])),
            },
        )?;
        missing.map_or(Ok(()), |b| Err(missing_body(b)))
    }

    fn body_keys(&self, body_ids: &[u64]) -> Vec<Vec<u8>> {
        body_ids
            .iter()
            .map(|&b| seq_key(self.id, b).to_vec())
            .collect()
    }

    /// Whether ascending body ids are close enough together to be read by one scan rather
    /// than a lookup each (a build of a freshly loaded database, a long scan): stepping over
    /// a body costs a small part of a lookup, so a scan wins while at least one body in
    /// eight is wanted.
    fn dense(body_ids: &[u64]) -> bool {
        let ascending = body_ids.windows(2).all(|w| w[0] < w[1]);
        let span = match (body_ids.first(), body_ids.last()) {
            (Some(&a), Some(&b)) => b.saturating_sub(a),
            _ => 0,
        };
        ascending && span < 8 * body_ids.len() as u64
    }

    fn read_body(&self, r: &impl Read, body_id: u64) -> Result<Vec<u8>> {
        r.get(Cf::Bodies, &seq_key(self.id, body_id))?
            .ok_or_else(|| missing_body(body_id))
    }

    fn winner_body(&self, r: &impl Read, info: &DocInfo) -> Result<Option<Vec<u8>>> {
        match info.tree.winner().and_then(|w| w.body) {
            Some(b) => {
                settee_metrics::global().database_reads.inc();
                Ok(Some(self.read_body(r, b)?))
            }
            None => Ok(None),
        }
    }

    /// The database's counters as of `snap`.
    pub fn stats_in(&self, snap: &Snapshot<'_>) -> Result<Stats> {
        match snap.get(Cf::Meta, &meta::stats_key(self.id))? {
            Some(v) => Ok(Stats::decode(&v)?),
            None => Ok(Stats::default()),
        }
    }

    /// A document's info as of `snap`.
    pub fn doc_info_in(&self, snap: &Snapshot<'_>, id: &str) -> Result<Option<DocInfo>> {
        self.read_info(snap, id)
    }

    /// The documents (deleted ones too) with sequences in `after+1..=upto` as of `snap`,
    /// in sequence order, at most `max` of them (the lowest): their ids, sequences and
    /// leaves (winner first). One pass over the documents, read from both ends at once as
    /// [`Database::winners_in`] reads, that decodes only the leaves of documents it may
    /// keep and holds at most about `max` of them per walker; far cheaper per document than
    /// [`Database::changes_in`]'s lookups by id when a caller wants most of them. Each call
    /// costs a pass over every document, so a caller pages through a large database in
    /// few, large pages.
    pub fn leaves_by_seq_in(
        &self,
        snap: &Snapshot<'_>,
        after: u64,
        upto: u64,
        max: usize,
    ) -> Result<Vec<DocLeaves>> {
        let max = max.max(1);
        let [mut docs, down] = self.both_ends_fold(
            snap,
            b"",
            None,
            || LowestSeqs::new(max, upto),
            |low, k, v| low.offer(k, v, after),
        )?;
        docs.docs.extend(down.docs);
        let mut docs = docs.docs;
        docs.sort_unstable_by_key(|d| d.seq);
        // The walkers may both have met a few documents where they crossed.
        docs.dedup_by_key(|d| d.seq);
        docs.truncate(max);
        Ok(docs)
    }

    /// Every document (deleted ones too) as of `snap`, in sequence order, in `pages`
    /// calls of `f` (more when a page's share of the seqs holds more than `max`
    /// documents: it is cut short there and the next page starts after it), until `f`
    /// breaks. Each page is one [`Database::leaves_by_seq_in`] over an even share of the
    /// seqs: a pass over every document, so the fewer pages the better.
    pub fn pages_by_seq_in(
        &self,
        snap: &Snapshot<'_>,
        pages: u64,
        max: usize,
        mut f: impl FnMut(Vec<DocLeaves>) -> ControlFlow<()>,
    ) -> Result<()> {
        let max = max.max(1);
        let update_seq = self.stats_in(snap)?.update_seq;
        let span = update_seq.div_ceil(pages.max(1)).max(1);
        let mut after = 0;
        while after < update_seq {
            let upto = after.saturating_add(span);
            let page = self.leaves_by_seq_in(snap, after, upto, max)?;
            after = match page.last() {
                Some(d) if page.len() == max => d.seq,
                _ => upto,
            };
            if f(page).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// The database's `purge_seq` as of `snap`, and the ids of the documents purged after
    /// purge `since` (in purge order); `None` when some of those purges are no longer
    /// recorded (only the last `_purged_infos_limit` are kept).
    pub fn purged_in(&self, snap: &Snapshot<'_>, since: u64) -> Result<(u64, Option<Vec<String>>)> {
        let now = self.stats_in(snap)?.purge_seq;
        if now <= since {
            return Ok((now, Some(Vec::new())));
        }
        let corrupt = || Error::Storage(settee_storage::Error::Corrupted("purge record".into()));
        let lo = meta::purge_key(self.id, since + 1);
        let hi = meta::purge_key(self.id + 1, 0);
        let mut ids = Vec::new();
        let mut expected = since + 1;
        for item in snap.range(Cf::Meta, &lo, &hi, false) {
            let (k, v) = item?;
            let n = k
                .get(9..17)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(corrupt)?;
            if n != expected {
                return Ok((now, None));
            }
            expected += 1;
            let record: Value = match v.split_first() {
                Some((&writer::PURGE_V1, json)) => {
                    serde_json::from_slice(json).map_err(|_| corrupt())?
                }
                _ => return Err(corrupt()),
            };
            ids.push(record["id"].as_str().ok_or_else(corrupt)?.to_string());
        }
        Ok((now, (expected == now + 1).then_some(ids)))
    }

    pub fn doc_info(&self, id: &str) -> Result<Option<DocInfo>> {
        self.read_info(self.store.as_ref(), id)
    }

    /// Opens the winning revision, or `rev` when given. CouchDB's errors: `missing` for an
    /// unknown doc or revision, `deleted` for a deleted winner.
    pub fn open_doc(&self, id: &str, rev: Option<&Rev>) -> Result<OpenDoc> {
        let snap = self.store.snapshot();
        let info = self
            .read_info(&snap, id)?
            .ok_or(Error::NotFound("missing"))?;
        self.open_rev(&snap, id, info, rev)
    }

    fn open_rev(
        &self,
        r: &impl Read,
        id: &str,
        info: DocInfo,
        rev: Option<&Rev>,
    ) -> Result<OpenDoc> {
        let (rev, body_id, deleted) = match rev {
            Some(rev) => {
                let (b, deleted) = info.tree.body(rev).ok_or(Error::NotFound("missing"))?;
                (rev.clone(), b, deleted)
            }
            None => {
                let w = info.tree.winner().ok_or(Error::NotFound("missing"))?;
                if w.deleted {
                    return Err(Error::NotFound("deleted"));
                }
                (w.rev, w.body.ok_or(Error::NotFound("missing"))?, false)
            }
        };
        let body = self.read_body(r, body_id)?;
        settee_metrics::global().database_reads.inc();
        Ok(OpenDoc {
            id: id.to_string(),
            rev,
            deleted,
            body,
            info,
        })
    }

    /// Opens several revisions of one document from one snapshot; `None` = all leaves,
    /// in the order of CouchDB's `couch_key_tree:get_all_leafs`
    /// ([`settee_core::RevTree::leaves_in_tree_order`]). Each entry is the revision asked
    /// for and what was found.
    pub fn open_revs(&self, id: &str, revs: Option<&[Rev]>) -> Result<Vec<(Rev, Option<OpenDoc>)>> {
        let snap = self.store.snapshot();
        let info = self.read_info(&snap, id)?;
        let wanted: Vec<Rev> = match (revs, &info) {
            (Some(r), _) => r.to_vec(),
            (None, Some(info)) => (info.tree.leaves_in_tree_order().into_iter())
                .map(|l| l.rev)
                .collect(),
            (None, None) => return Err(Error::NotFound("missing")),
        };
        wanted
            .into_iter()
            .map(|rev| {
                let found = match &info {
                    Some(info) if info.tree.body(&rev).is_some() => {
                        Some(self.open_rev(&snap, id, info.clone(), Some(&rev))?)
                    }
                    _ => None,
                };
                Ok((rev, found))
            })
            .collect()
    }

    /// Bodies of several revisions (for `_bulk_get`), read from one snapshot.
    pub fn body_of(&self, info: &DocInfo, rev: &Rev) -> Result<Option<Vec<u8>>> {
        match info.tree.body(rev) {
            Some((b, _)) => {
                settee_metrics::global().database_reads.inc();
                Ok(Some(self.read_body(self.store.as_ref(), b)?))
            }
            None => Ok(None),
        }
    }

    /// Keys of this database for ids in `[lower, upper)`; no `upper` = to the end.
    fn id_bounds(&self, lower: &[u8], upper: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
        let hi = match upper {
            Some(u) => key_in_db(self.id, u),
            None => (self.id + 1).to_be_bytes().to_vec(),
        };
        (key_in_db(self.id, lower), hi)
    }

    /// Walks the live documents with `lower <= id < upper` (byte order) as of `snap`,
    /// ascending or descending, without their bodies (read them with
    /// [`Database::bodies_in`], in batches).
    pub fn scan_winners_in(
        &self,
        snap: &Snapshot<'_>,
        lower: &[u8],
        upper: Option<&[u8]>,
        descending: bool,
        f: impl FnMut(LiveDoc) -> ControlFlow<()>,
    ) -> Result<()> {
        self.scan_in(snap, lower, upper, descending, LiveDoc::decode, f)
    }

    /// Calls `f` with what `decode` makes of each entry of the `docs` family with
    /// `lower <= id < upper` (read in place; `None` is skipped), ascending or descending,
    /// until it breaks.
    fn scan_in<T>(
        &self,
        snap: &Snapshot<'_>,
        lower: &[u8],
        upper: Option<&[u8]>,
        descending: bool,
        decode: impl Fn(&[u8], &[u8]) -> Result<Option<T>>,
        mut f: impl FnMut(T) -> ControlFlow<()>,
    ) -> Result<()> {
        let (lo, hi) = self.id_bounds(lower, upper);
        let mut failure = None;
        snap.each(Cf::Docs, &lo, &hi, descending, |k, v| match decode(k, v) {
            Ok(Some(t)) => f(t),
            Ok(None) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        })?;
        failure.map_or(Ok(()), Err)
    }

    /// Every live document with `lower <= id < upper`, ascending, as of `snap`: read by
    /// two threads, one from each end, which stop where they meet.
    pub fn winners_in(
        &self,
        snap: &Snapshot<'_>,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<Vec<LiveDoc>> {
        self.both_ends_in(snap, lower, upper, LiveDoc::decode, |d| &d.id)
    }

    /// What `decode` makes of every entry with `lower <= id < upper`, ascending, as of
    /// `snap` (`id` gives each one's document id): read by two threads, one from each end,
    /// which stop where they meet.
    fn both_ends_in<T: Send>(
        &self,
        snap: &Snapshot<'_>,
        lower: &[u8],
        upper: Option<&[u8]>,
        decode: impl Fn(&[u8], &[u8]) -> Result<Option<T>> + Sync,
        id: impl Fn(&T) -> &str + Sync,
    ) -> Result<Vec<T>> {
        let [mut up, down] = self.both_ends_fold(snap, lower, upper, Vec::new, |out, k, v| {
            out.extend(decode(k, v)?);
            Ok(())
        })?;
        let last = up.last().map(|d| id(d).to_string());
        up.extend(
            down.into_iter()
                .rev()
                .filter(|d| last.as_deref().is_none_or(|l| id(d) > l)),
        );
        Ok(up)
    }

    /// Folds every entry with `lower <= id < upper` as of `snap` into one accumulator per
    /// walker: `[ascending, descending]`, two threads, one from each end, which stop where
    /// they meet. Between them they see every entry; a few near the meeting point reach
    /// both.
    fn both_ends_fold<A: Send>(
        &self,
        snap: &Snapshot<'_>,
        lower: &[u8],
        upper: Option<&[u8]>,
        init: impl Fn() -> A + Sync,
        step: impl Fn(&mut A, &[u8], &[u8]) -> Result<()> + Sync,
    ) -> Result<[A; 2]> {
        // The last key each walker has passed (published every `STEP` entries); a walker
        // stops once it reaches the other's: between them they have covered the range.
        const STEP: usize = 512;
        let (lo, hi) = self.id_bounds(lower, upper);
        let reached: Mutex<[Option<Vec<u8>>; 2]> = Mutex::new([None, None]);
        let walk = |descending: bool| -> Result<A> {
            let (me, other) = if descending { (1, 0) } else { (0, 1) };
            let mut acc = init();
            let (mut seen, mut failure) = (0usize, None);
            snap.each(Cf::Docs, &lo, &hi, descending, |k, v| {
                if let Err(e) = step(&mut acc, k, v) {
                    failure = Some(e);
                    return ControlFlow::Break(());
                }
                seen += 1;
                if seen % STEP != 1 {
                    return ControlFlow::Continue(());
                }
                let mut r = reached.lock().unwrap();
                r[me] = Some(k.to_vec());
                let crossed =
                    r[other]
                        .as_deref()
                        .is_some_and(|o| if descending { k <= o } else { k >= o });
                if crossed {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            failure.map_or(Ok(acc), Err)
        };
        let (up, down) = std::thread::scope(|s| {
            let down = s.spawn(|| walk(true));
            let up = walk(false);
            (up, down.join().expect("walker thread"))
        });
        Ok([up?, down?])
    }

    /// Walks documents with `lower <= id < upper` (byte order), ascending or descending.
    pub fn scan_docs(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        descending: bool,
        include_docs: bool,
        mut f: impl FnMut(AllDocsRow) -> ControlFlow<()>,
    ) -> Result<()> {
        let snap = self.store.snapshot();
        let (lo, hi) = self.id_bounds(lower, upper);
        for item in snap.range(Cf::Docs, &lo, &hi, descending) {
            let (k, v) = item?;
            let id = decode_id(&k[8..])?;
            let info = DocInfo::decode(&v)?;
            if info.is_deleted() {
                continue;
            }
            let body = if include_docs {
                self.winner_body(&snap, &info)?
            } else {
                None
            };
            if f(AllDocsRow {
                id,
                info: Some(info),
                body,
            })
            .is_break()
            {
                break;
            }
        }
        Ok(())
    }

    /// Looks documents up by id from one snapshot (`_all_docs?keys=`).
    pub fn lookup_docs(&self, ids: &[String], include_docs: bool) -> Result<Vec<AllDocsRow>> {
        let snap = self.store.snapshot();
        let keys: Vec<Vec<u8>> = ids.iter().map(|id| self.doc_key(id)).collect();
        let values = snap.multi_get(Cf::Docs, &keys)?;
        ids.iter()
            .zip(values)
            .map(|(id, v)| {
                let info = v.map(|v| DocInfo::decode(&v)).transpose()?;
                let body = match (&info, include_docs) {
                    (Some(i), true) if !i.is_deleted() => self.winner_body(&snap, i)?,
                    _ => None,
                };
                Ok(AllDocsRow {
                    id: id.clone(),
                    info,
                    body,
                })
            })
            .collect()
    }

    /// Walks changes after `since` (or before the end, descending) in sequence order.
    pub fn changes(
        &self,
        since: u64,
        descending: bool,
        include_docs: bool,
        f: impl FnMut(Change) -> ControlFlow<()>,
    ) -> Result<()> {
        self.changes_in(&self.store.snapshot(), since, descending, include_docs, f)
    }

    /// [`Database::changes`] as of `snap` (from `self.store().snapshot()`), so that their
    /// bodies can be read later, on other threads, with [`Database::bodies_in`].
    pub fn changes_in(
        &self,
        snap: &Snapshot<'_>,
        since: u64,
        descending: bool,
        include_docs: bool,
        mut f: impl FnMut(Change) -> ControlFlow<()>,
    ) -> Result<()> {
        let (lo, hi) = if descending {
            (
                seq_key(self.id, 0).to_vec(),
                seq_key(self.id, since.saturating_add(1)).to_vec(),
            )
        } else {
            (
                seq_key(self.id, since.saturating_add(1)).to_vec(),
                (self.id + 1).to_be_bytes().to_vec(),
            )
        };
        // Ids are read in batches and their infos and bodies fetched with one MultiGet
        // each: far cheaper than two point reads per change.
        let mut batch: Vec<(u64, String)> = Vec::with_capacity(CHANGES_BATCH);
        for item in snap.range(Cf::Seqs, &lo, &hi, descending) {
            let (k, v) = item?;
            let seq = u64::from_be_bytes(k[8..16].try_into().expect("seq keys are 16 bytes"));
            batch.push((seq, decode_id(&v)?));
            if batch.len() == CHANGES_BATCH
                && self
                    .emit_changes(snap, &mut batch, include_docs, &mut f)?
                    .is_break()
            {
                return Ok(());
            }
        }
        // The last, partial batch; whether `f` stopped early no longer matters.
        let _ = self.emit_changes(snap, &mut batch, include_docs, &mut f)?;
        Ok(())
    }

    /// The changes of these documents (missing ones skipped), in sequence order: after
    /// `since`, or descending at or below it. CouchDB's `send_lookup_changes`: each id is
    /// looked up instead of the whole sequence index scanned.
    pub fn changes_of_ids<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a String>,
        since: u64,
        descending: bool,
        include_docs: bool,
        mut f: impl FnMut(Change) -> ControlFlow<()>,
    ) -> Result<()> {
        let snap = self.store.snapshot();
        let ids: Vec<&String> = ids.into_iter().collect();
        let keys: Vec<Vec<u8>> = ids.iter().map(|id| self.doc_key(id)).collect();
        let mut found: Vec<(u64, String)> = Vec::new();
        for (id, v) in ids.into_iter().zip(snap.multi_get(Cf::Docs, &keys)?) {
            let Some(v) = v else { continue };
            let seq = DocInfo::decode(&v)?.seq;
            if (descending && seq <= since) || (!descending && seq > since) {
                found.push((seq, id.clone()));
            }
        }
        found.sort_unstable();
        if descending {
            found.reverse();
        }
        for chunk in found.chunks(CHANGES_BATCH) {
            let mut batch = chunk.to_vec();
            if self
                .emit_changes(&snap, &mut batch, include_docs, &mut f)?
                .is_break()
            {
                break;
            }
        }
        Ok(())
    }

    /// Looks up one batch of changes (draining it) and hands them to `f` in order.
    fn emit_changes(
        &self,
        snap: &impl Read,
        batch: &mut Vec<(u64, String)>,
        include_docs: bool,
        f: &mut impl FnMut(Change) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>> {
        let keys: Vec<Vec<u8>> = batch.iter().map(|(_, id)| self.doc_key(id)).collect();
        let infos = snap
            .multi_get(Cf::Docs, &keys)?
            .into_iter()
            .map(|v| v.map(|v| DocInfo::decode(&v)).transpose())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut bodies: Vec<Option<Vec<u8>>> = vec![None; infos.len()];
        if include_docs {
            let wanted: Vec<(usize, u64)> = infos
                .iter()
                .enumerate()
                .filter_map(|(i, info)| Some((i, info.as_ref()?.tree.winner()?.body?)))
                .collect();
            let body_keys: Vec<Vec<u8>> = wanted
                .iter()
                .map(|(_, b)| seq_key(self.id, *b).to_vec())
                .collect();
            for ((i, b), v) in wanted
                .into_iter()
                .zip(snap.multi_get(Cf::Bodies, &body_keys)?)
            {
                bodies[i] = Some(v.ok_or_else(|| missing_body(b))?);
            }
        }
        for (((seq, id), info), body) in batch.drain(..).zip(infos).zip(bodies) {
            let Some(info) = info else { continue };
            if f(Change {
                seq,
                id,
                info,
                body,
            })
            .is_break()
            {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Number of changes with a sequence above `seq`.
    /// Every change in the sequence index: one per document, deleted ones included.
    pub fn count_changes(&self) -> u64 {
        let s = self.stats();
        s.doc_count + s.doc_del_count
    }

    pub fn count_changes_after(&self, seq: u64) -> Result<u64> {
        let lo = seq_key(self.id, seq.saturating_add(1));
        let hi = (self.id + 1).to_be_bytes();
        let mut n = 0;
        for item in self.store.range(Cf::Seqs, &lo, &hi, false) {
            item?;
            n += 1;
        }
        Ok(n)
    }

    // ---- local documents --------------------------------------------------------------

    pub fn local_doc(&self, id: &str) -> Result<Option<LocalDoc>> {
        match self.store.get(Cf::Local, &self.doc_key(id))? {
            Some(v) => Ok(Some(writer::decode_local(id, &v)?)),
            None => Ok(None),
        }
    }

    pub fn scan_local(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        descending: bool,
        mut f: impl FnMut(LocalDoc) -> ControlFlow<()>,
    ) -> Result<()> {
        let snap = self.store.snapshot();
        let (lo, hi) = self.id_bounds(lower, upper);
        for item in snap.range(Cf::Local, &lo, &hi, descending) {
            let (k, v) = item?;
            let id = decode_id(&k[8..])?;
            if f(writer::decode_local(&id, &v)?).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// `_revs_diff`: for each id, the revisions the database lacks and the leaves that could
    /// be their ancestors.
    pub fn revs_diff(&self, asked: IdRevs) -> Result<RevsDiff> {
        let snap = self.store.snapshot();
        let mut out = Vec::new();
        for (id, revs) in asked {
            let info = self.read_info(&snap, &id)?;
            let (missing, ancestors) = match info {
                None => (revs, Vec::new()),
                Some(info) => {
                    let missing = info.tree.missing(&revs);
                    let anc = info
                        .tree
                        .leaves()
                        .into_iter()
                        .map(|l| l.rev)
                        .filter(|l| missing.iter().any(|m| l.pos < m.pos))
                        .collect();
                    (missing, anc)
                }
            };
            if !missing.is_empty() {
                out.push((id, missing, ancestors));
            }
        }
        Ok(out)
    }
}

/// A live document met by a scan: its id, stored info (decode it with [`DocInfo::decode`]
/// when needed) and winning leaf.
pub struct LiveDoc {
    pub id: String,
    pub info: Box<[u8]>,
    pub winner: Leaf,
}

impl LiveDoc {
    /// The document an entry of the `docs` family holds (`None` if deleted).
    fn decode(key: &[u8], info: &[u8]) -> Result<Option<LiveDoc>> {
        let winner = match DocInfo::decode_winner(info)? {
            Some(w) if !w.deleted => w,
            _ => return Ok(None),
        };
        let id = std::str::from_utf8(&key[8..]).map_err(|_| corrupt_id())?;
        Ok(Some(LiveDoc {
            id: id.to_string(),
            info: info.into(),
            winner,
        }))
    }
}

/// The documents with the lowest sequences up to a bound that a walker has met: at most
/// `max` of them once trimmed, trimmed whenever they reach a quarter more.
struct LowestSeqs {
    docs: Vec<DocLeaves>,
    max: usize,
    /// The highest sequence that may still be kept: the bound, then the highest kept at
    /// the last trim.
    cutoff: u64,
}

impl LowestSeqs {
    fn new(max: usize, upto: u64) -> LowestSeqs {
        LowestSeqs {
            docs: Vec::new(),
            max,
            cutoff: upto,
        }
    }

    /// Keeps the entry if its sequence is above `after` and may be among the lowest.
    fn offer(&mut self, key: &[u8], info: &[u8], after: u64) -> Result<()> {
        let seq = DocInfo::decode_seq(info)?;
        if seq <= after || seq > self.cutoff {
            return Ok(());
        }
        self.docs.extend(DocLeaves::decode(key, info)?);
        if self.docs.len() > self.max.saturating_add(self.max / 4) {
            let last = self.max - 1;
            self.docs.select_nth_unstable_by_key(last, |d| d.seq);
            self.docs.truncate(self.max);
            self.cutoff = self.docs[last].seq;
        }
        Ok(())
    }
}

/// A document's id, latest sequence and leaves (winner first), deleted or not.
pub struct DocLeaves {
    pub id: String,
    pub seq: u64,
    pub leaves: Vec<Leaf>,
}

impl DocLeaves {
    fn decode(key: &[u8], info: &[u8]) -> Result<Option<DocLeaves>> {
        let (seq, leaves) = DocInfo::decode_leaves(info)?;
        let id = decode_id(&key[8..])?;
        Ok(Some(DocLeaves { id, seq, leaves }))
    }
}

fn decode_id(raw: &[u8]) -> Result<String> {
    String::from_utf8(raw.to_vec()).map_err(|_| corrupt_id())
}

fn corrupt_id() -> Error {
    Error::Storage(settee_storage::Error::Corrupted("doc id".into()))
}

fn missing_body(body_id: u64) -> Error {
    Error::Storage(settee_storage::Error::Corrupted(format!(
        "missing body {body_id}"
    )))
}
