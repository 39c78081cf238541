//! The per-database writer. One thread per database drains its queue, applies every
//! waiting request against an in-memory overlay (so two requests touching one document in
//! one commit see each other), writes one batch with the WAL fsynced, then acknowledges
//! all of them. Derived data (the `seqs` entry, counts, sizes, the `_db_updates` event)
//! is written in the same batch; watchers are notified only after the commit.

use crate::couch::DbEventKind;
use crate::database::{Database, IdRevs, LocalDoc};
use crate::docinfo::{DocInfo, PartitionStats, Stats};
use crate::{Error, Result};
use settee_core::{new_rev_id_with, varint, ParsedDoc, Rev};
use settee_storage::{key_in_db, seq_key, Cf, Read};
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Weak};
use tokio::sync::oneshot;

/// Queue depth per database; a full queue makes submitters wait (backpressure).
const QUEUE_DEPTH: usize = 256;

pub(crate) enum Job {
    Docs {
        docs: Vec<ParsedDoc>,
        new_edits: bool,
        reply: oneshot::Sender<Result<Vec<UpdateResult>>>,
    },
    Local {
        update: LocalUpdate,
        reply: oneshot::Sender<Result<u64>>,
    },
    Purge {
        revs: IdRevs,
        reply: oneshot::Sender<Result<IdRevs>>,
    },
    /// Purge records taken from another database (the copy a split copy was cut from),
    /// recorded as purges of this one, its documents untouched.
    RecordPurges {
        infos: IdRevs,
        reply: oneshot::Sender<Result<IdRevs>>,
    },
    /// Compaction step: stem to `_revs_limit` and drop bodies of non-leaf revisions for up
    /// to `limit` documents starting at id `from`; replies with where to continue (`None`
    /// when done).
    Prune {
        from: Vec<u8>,
        limit: usize,
        reply: oneshot::Sender<Result<Option<Vec<u8>>>>,
    },
}

impl Job {
    fn weight(&self) -> usize {
        match self {
            Job::Docs { docs, .. } => docs.len(),
            Job::Local { .. } => 1,
            Job::Purge { revs, .. } => revs.len(),
            Job::RecordPurges { infos, .. } => infos.len(),
            Job::Prune { limit, .. } => *limit,
        }
    }
}

/// Outcome of one document in an update request. With `new_edits=false` a success has no
/// `rev` (CouchDB reports only failures then).
#[derive(Debug)]
pub enum UpdateResult {
    Ok { id: String, rev: Option<Rev> },
    Err { id: String, error: Error },
}

/// A write to a local document. `rev` is the `N` of the `0-N` the client sent.
#[derive(Clone, Debug)]
pub struct LocalUpdate {
    pub id: String,
    pub rev: Option<u64>,
    pub deleted: bool,
    pub body: Vec<u8>,
}

/// A database's running writer: its queue and its thread. Submitters clone `tx` only
/// under the database's writer lock, so a writer holding that lock and seeing one
/// reference knows no job can still arrive.
pub(crate) struct Handle {
    pub(crate) tx: Arc<SyncSender<Job>>,
    thread: std::thread::JoinHandle<()>,
}

impl Handle {
    /// Closes the queue and waits for the thread to commit what was queued and end (not
    /// from the writer's own thread, which would wait for itself).
    pub(crate) fn stop(self) {
        drop(self.tx);
        if self.thread.thread().id() != std::thread::current().id() {
            let _ = self.thread.join();
        }
    }
}

/// Starts the database's writer. The thread holds the database weakly: the database holds
/// the sender, so a strong reference would keep both alive for ever, and with them the
/// store, which RocksDB needs closed before the process exits. When the last user drops
/// the database (or [`Handle::stop`] closes the queue), `recv` fails and the thread ends.
pub(crate) fn spawn(db: &Arc<Database>) -> Handle {
    let (tx, rx) = sync_channel(QUEUE_DEPTH);
    let weak = Arc::downgrade(db);
    let thread = std::thread::Builder::new()
        .name(format!("writer-{}", db.id))
        .spawn(move || run(weak, rx))
        .expect("spawn writer thread");
    Handle {
        tx: Arc::new(tx),
        thread,
    }
}

/// What an idle writer found when it looked at whether to end.
enum Idle {
    /// Nobody is sending and the queue is empty: the handle is removed, the thread ends.
    Retired,
    /// A job arrived meanwhile.
    Job(Job),
    /// A submitter holds the sender, or the writer is being stopped: keep receiving.
    Stay,
}

/// Under the writer lock (where submitters take their sender): if this thread's handle is
/// the only holder of the sender and the queue is empty, removes the handle.
fn retire_if_idle(db: &Database, rx: &Receiver<Job>) -> Idle {
    let mut slot = db.writer.lock().unwrap();
    let mine = slot
        .as_ref()
        .is_some_and(|h| h.thread.thread().id() == std::thread::current().id());
    if !mine || Arc::strong_count(&slot.as_ref().expect("mine").tx) > 1 {
        return Idle::Stay;
    }
    match rx.try_recv() {
        Ok(job) => Idle::Job(job),
        Err(_) => {
            slot.take();
            Idle::Retired
        }
    }
}

/// Commits what arrives. A writer idle for `Config::writer_idle` ends its thread (the next
/// write starts another), so ten thousand databases written now and then cost no threads
/// while idle.
fn run(db: Weak<Database>, rx: Receiver<Job>) {
    let Some(idle) = db.upgrade().map(|d| d.config.writer_idle) else {
        return;
    };
    loop {
        let first = match rx.recv_timeout(idle) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let Some(db) = db.upgrade() else { return };
                match retire_if_idle(&db, &rx) {
                    Idle::Retired => return,
                    Idle::Stay => continue,
                    Idle::Job(job) => job,
                }
            }
        };
        // A job arrived through the database's own sender, so it is still alive.
        let Some(db) = db.upgrade() else { return };
        let mut weight = first.weight();
        let mut jobs = vec![first];
        while weight < db.config.max_batch_docs {
            match rx.try_recv() {
                Ok(job) => {
                    weight += job.weight();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        commit(&db, jobs);
    }
}

/// A reply waiting for the commit.
enum Pending {
    Docs(
        oneshot::Sender<Result<Vec<UpdateResult>>>,
        Vec<UpdateResult>,
    ),
    Local(oneshot::Sender<Result<u64>>, Result<u64>),
    Purge(oneshot::Sender<Result<IdRevs>>, IdRevs),
    Prune(
        oneshot::Sender<Result<Option<Vec<u8>>>>,
        Result<Option<Vec<u8>>>,
    ),
}

impl Pending {
    fn fail(self, e: &Error) {
        // Every waiting request gets the failure; "the database is gone" and "the disk is
        // full" keep their kind (a 404 and a 507), anything else is an internal error.
        let err = || match e {
            Error::DbNotFound => Error::DbNotFound,
            Error::Storage(s) if s.is_no_space() => {
                Error::InsufficientStorage(crate::disk::NO_SPACE.into())
            }
            other => Error::Internal(other.to_string()),
        };
        let _ = match self {
            Pending::Docs(tx, _) => tx.send(Err(err())).map_err(drop),
            Pending::Local(tx, _) => tx.send(Err(err())).map_err(drop),
            Pending::Purge(tx, _) => tx.send(Err(err())).map_err(drop),
            Pending::Prune(tx, _) => tx.send(Err(err())).map_err(drop),
        };
    }

    fn succeed(self) {
        let m = settee_metrics::global();
        match &self {
            Pending::Docs(_, results) => {
                m.database_writes.inc();
                let ok = results
                    .iter()
                    .filter(|r| matches!(r, UpdateResult::Ok { .. }));
                m.document_writes.inc_by(ok.count() as u64);
            }
            Pending::Local(_, Ok(_)) => m.local_document_writes.inc(),
            Pending::Purge(..) => m.database_purges.inc(),
            _ => {}
        }
        let _ = match self {
            Pending::Docs(tx, r) => tx.send(Ok(r)).map_err(drop),
            Pending::Local(tx, r) => tx.send(r).map_err(drop),
            Pending::Purge(tx, r) => tx.send(Ok(r)).map_err(drop),
            Pending::Prune(tx, r) => tx.send(r).map_err(drop),
        };
    }
}

fn commit(db: &Arc<Database>, jobs: Vec<Job>) {
    let alive = db.alive.read().unwrap();
    let mut pending = Vec::with_capacity(jobs.len());
    let mut tx = Txn::new(db);
    let ids: Vec<&str> = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Docs { docs, .. } => Some(docs.iter().filter_map(|d| d.id.as_deref())),
            _ => None,
        })
        .flatten()
        .collect();
    if let Err(e) = tx.prefetch(&ids) {
        tracing::warn!(db = %db.name, error = %e, "prefetch failed; reading one by one");
    }
    for job in jobs {
        pending.push(match job {
            Job::Docs {
                docs,
                new_edits,
                reply,
            } => {
                // As couch_db_updater: a request's documents are applied (and take their
                // sequences) in id order, answered in the request's order.
                let mut order: Vec<usize> = (0..docs.len()).collect();
                order.sort_by(|&a, &b| docs[a].id.cmp(&docs[b].id));
                let mut slots: Vec<Option<ParsedDoc>> = docs.into_iter().map(Some).collect();
                let mut results: Vec<Option<UpdateResult>> =
                    (0..slots.len()).map(|_| None).collect();
                for i in order {
                    let d = slots[i].take().expect("each document once");
                    results[i] = Some(tx.update(d, new_edits));
                }
                let results = results
                    .into_iter()
                    .map(|r| r.expect("every document applied"))
                    .collect();
                Pending::Docs(reply, results)
            }
            Job::Local { update, reply } => Pending::Local(reply, tx.local(update)),
            Job::Purge { revs, reply } => Pending::Purge(reply, tx.purge(revs)),
            Job::RecordPurges { infos, reply } => Pending::Purge(reply, tx.record_purges(infos)),
            Job::Prune { from, limit, reply } => Pending::Prune(reply, tx.prune(&from, limit)),
        });
    }
    let outcome = if *alive {
        tx.write()
    } else {
        Err(Error::DbNotFound)
    };
    match outcome {
        Ok(()) => pending.into_iter().for_each(Pending::succeed),
        Err(e) => {
            tracing::error!(db = %db.name, error = %e, "commit failed");
            pending.into_iter().for_each(|p| p.fail(&e));
        }
    }
}

/// A document as it was before this commit, and as it is now.
struct Touched {
    before: Option<(DocInfo, usize)>,
    now: Option<DocInfo>,
}

/// One commit in the making.
struct Txn<'a> {
    db: &'a Database,
    batch: settee_storage::Batch<'a>,
    stats: Stats,
    revs_limit: usize,
    docs: HashMap<String, Touched>,
    dirty: bool,
    /// Partitions' external sizes as the last commit left them (read once per commit).
    partition_sizes: HashMap<String, u64>,
}

fn stored_bytes(id: &str, info: &DocInfo, encoded_len: usize) -> u64 {
    let id = id.len() as u64;
    (8 + id + encoded_len as u64) + (16 + id) + (16 + info.body_bytes)
}

impl<'a> Txn<'a> {
    fn new(db: &'a Database) -> Self {
        Txn {
            db,
            batch: db.store.batch(),
            stats: db.stats(),
            revs_limit: db.props().revs_limit as usize,
            docs: HashMap::new(),
            dirty: false,
            partition_sizes: HashMap::new(),
        }
    }

    /// Reads the documents a commit will touch with one batched lookup.
    fn prefetch(&mut self, ids: &[&str]) -> Result<()> {
        let keys: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| key_in_db(self.db.id, id.as_bytes()))
            .collect();
        let values = self.db.store.multi_get(Cf::Docs, &keys)?;
        for (id, raw) in ids.iter().zip(values) {
            if self.docs.contains_key(*id) {
                continue;
            }
            let before = raw
                .map(|v| DocInfo::decode(&v).map(|i| (i, v.len())))
                .transpose()?;
            let now = before.as_ref().map(|(i, _)| i.clone());
            self.docs.insert(id.to_string(), Touched { before, now });
        }
        Ok(())
    }

    fn load(&mut self, id: &str) -> Result<Option<DocInfo>> {
        if let Some(t) = self.docs.get(id) {
            return Ok(t.now.clone());
        }
        let raw = self
            .db
            .store
            .get(Cf::Docs, &key_in_db(self.db.id, id.as_bytes()))?;
        let before = raw
            .map(|v| DocInfo::decode(&v).map(|i| (i, v.len())))
            .transpose()?;
        let now = before.as_ref().map(|(i, _)| i.clone());
        self.docs.insert(
            id.to_string(),
            Touched {
                before,
                now: now.clone(),
            },
        );
        Ok(now)
    }

    fn next_seq(&mut self) -> u64 {
        self.stats.update_seq += 1;
        self.dirty = true;
        self.stats.update_seq
    }

    fn store_body(&mut self, seq: u64, body: &[u8]) {
        self.batch.put(Cf::Bodies, &seq_key(self.db.id, seq), body);
    }

    fn free_bodies(&mut self, freed: Vec<u64>) {
        for b in freed {
            self.batch.delete(Cf::Bodies, &seq_key(self.db.id, b));
        }
    }

    fn update(&mut self, doc: ParsedDoc, new_edits: bool) -> UpdateResult {
        let id = doc.id.clone().unwrap_or_default();
        let result = if new_edits {
            self.edit(&id, doc).map(Some)
        } else {
            self.replicate(&id, doc).map(|_| None)
        };
        match result {
            Ok(rev) => UpdateResult::Ok { id, rev },
            Err(error) => UpdateResult::Err { id, error },
        }
    }

    /// An interactive edit, with CouchDB's rules: `_rev` must name a leaf; a document
    /// without `_rev` must be new or deleted. A document whose leaves are all deleted is
    /// only recreated, by a live edit without `_rev`, which extends the deleted winner
    /// (`couch_db_updater:merge_rev_tree`); its tombstone's rev, or deleting it again, is a
    /// conflict.
    fn edit(&mut self, id: &str, doc: ParsedDoc) -> Result<Rev> {
        let mut info = self.load(id)?.unwrap_or_default();
        if !doc.deleted {
            self.check_partition_size(id, &info, &doc.body)?;
        }
        let winner = info.tree.winner();
        let parent = match (doc.rev(), winner) {
            (Some(_), Some(w)) if w.deleted => return Err(Error::Conflict),
            (Some(r), Some(_)) if info.tree.leaf(&r).is_some() => Some(r),
            (Some(_), _) => return Err(Error::Conflict),
            (None, Some(w)) if w.deleted && !doc.deleted => Some(w.rev),
            (None, Some(_)) => return Err(Error::Conflict),
            (None, None) => None,
        };
        let rev = Rev::new(
            parent.as_ref().map_or(1, |p| p.pos + 1),
            new_rev_id_with(
                parent.as_ref(),
                doc.deleted,
                &doc.body,
                doc.body_term.as_deref(),
            ),
        );
        let mut path = vec![rev.id.clone()];
        path.extend(parent.map(|p| p.id));
        let seq = self.next_seq();
        info.tree.add_path(rev.pos, &path, doc.deleted, Some(seq));
        self.finish_doc(id, info, seq, &doc.body);
        Ok(rev)
    }

    /// `[couchdb] max_partition_size`: an edit that makes a document bigger fails once its
    /// partition's external size, as the last commit left it, has reached the maximum
    /// (`couch_db_updater`'s check; deletions, shrinking edits and replicated revisions
    /// always pass).
    fn check_partition_size(&mut self, id: &str, info: &DocInfo, body: &[u8]) -> Result<()> {
        let max = self
            .db
            .config
            .max_partition_size
            .load(std::sync::atomic::Ordering::Relaxed);
        let partition = match settee_core::partition_of(id) {
            Some(p) if max > 0 && self.db.props().partitioned => p,
            _ => return Ok(()),
        };
        let size = body.len() as u64 + settee_core::attachment_bytes(body);
        let was = match info.tree.winner() {
            Some(w) if !w.deleted => info.body_bytes,
            _ => 0,
        };
        if size <= was {
            return Ok(());
        }
        let external = match self.partition_sizes.get(partition) {
            Some(&e) => e,
            None => {
                let e = self.db.partition_stats(partition)?.external;
                self.partition_sizes.insert(partition.to_owned(), e);
                e
            }
        };
        if external >= max {
            return Err(Error::PartitionOverflow(id.to_owned()));
        }
        Ok(())
    }

    /// A replicated revision (`new_edits=false`): merged as given; known revisions are no-ops.
    fn replicate(&mut self, id: &str, doc: ParsedDoc) -> Result<()> {
        let (pos, ids) = doc
            .revs
            .clone()
            .ok_or_else(|| Error::bad_request("Document is missing _rev or _revisions"))?;
        // A path cannot reach below position 1 (`0-x` parses, as in CouchDB, but no
        // revision lives there).
        if (pos as usize) < ids.len() {
            return Err(Error::bad_request("Invalid rev format"));
        }
        let mut info = self.load(id)?.unwrap_or_default();
        if info.tree.contains(&Rev::new(pos, ids[0].clone())) {
            return Ok(());
        }
        let seq = self.next_seq();
        info.tree.add_path(pos, &ids, doc.deleted, Some(seq));
        self.finish_doc(id, info, seq, &doc.body);
        Ok(())
    }

    /// Bodies of superseded revisions stay readable (`?rev=`) until compaction, as in
    /// CouchDB; only stemming drops them at once.
    fn finish_doc(&mut self, id: &str, mut info: DocInfo, seq: u64, body: &[u8]) {
        self.store_body(seq, body);
        let freed = info.tree.stem(self.revs_limit);
        self.free_bodies(freed);
        info.seq = seq;
        // Attachment content counts towards the database's sizes, as in CouchDB.
        info.body_bytes = body.len() as u64 + settee_core::attachment_bytes(body);
        self.docs.get_mut(id).expect("loaded before change").now = Some(info);
    }

    fn purge(&mut self, revs: IdRevs) -> IdRevs {
        let mut out = Vec::new();
        for (id, revs) in revs {
            let Ok(Some(mut info)) = self.load(&id) else {
                out.push((id, Vec::new()));
                continue;
            };
            let (gone, freed) = info.tree.purge(&revs);
            self.free_bodies(freed);
            if !gone.is_empty() {
                self.stats.purge_seq += 1;
                self.log_purge(&id, &gone);
                let seq = self.next_seq();
                info.seq = seq;
                self.docs.get_mut(&id).expect("loaded").now =
                    (!info.tree.is_empty()).then_some(info);
            }
            out.push((id, gone));
        }
        out
    }

    /// Records each of `infos` under a new `purge_seq`, as a purge would, touching no
    /// document.
    fn record_purges(&mut self, infos: IdRevs) -> IdRevs {
        for (id, revs) in &infos {
            self.stats.purge_seq += 1;
            self.log_purge(id, revs);
        }
        self.dirty = true;
        infos
    }

    /// Records a purge under the new `purge_seq` and forgets those beyond
    /// `_purged_infos_limit` (view indexes that fall further behind are rebuilt).
    fn log_purge(&mut self, id: &str, revs: &[Rev]) {
        let dbid = self.db.id;
        let n = self.stats.purge_seq;
        let revs: Vec<String> = revs.iter().map(Rev::to_string).collect();
        let mut v = vec![PURGE_V1];
        v.extend(serde_json::to_vec(&serde_json::json!({"id": id, "revs": revs})).expect("json"));
        self.batch
            .put(Cf::Meta, &crate::meta::purge_key(dbid, n), &v);
        let keep = self.db.props().purged_infos_limit.max(1);
        if n > keep {
            let (lo, hi) = (
                crate::meta::purge_key(dbid, 0),
                crate::meta::purge_key(dbid, n - keep + 1),
            );
            self.batch.delete_range(Cf::Meta, &lo, &hi);
        }
    }

    fn prune(&mut self, from: &[u8], limit: usize) -> Result<Option<Vec<u8>>> {
        let dbid = self.db.id;
        let lo = key_in_db(dbid, from);
        let hi = (dbid + 1).to_be_bytes();
        let mut ids = Vec::with_capacity(limit);
        let mut next = None;
        for item in self.db.store.range(Cf::Docs, &lo, &hi, false) {
            let (k, _) = item?;
            if ids.len() == limit {
                next = Some(k[8..].to_vec());
                break;
            }
            ids.push(String::from_utf8_lossy(&k[8..]).into_owned());
        }
        for id in ids {
            let Some(mut info) = self.load(&id)? else {
                continue;
            };
            // Compaction also applies the current `_revs_limit` to every tree, as CouchDB's
            // compactor stems documents not updated since the limit was lowered.
            let before = info.tree.len();
            let mut freed = info.tree.stem(self.revs_limit);
            freed.extend(info.tree.prune_bodies());
            if !freed.is_empty() || info.tree.len() != before {
                self.free_bodies(freed);
                self.docs.get_mut(&id).expect("loaded").now = Some(info);
            }
        }
        Ok(next)
    }

    /// Local documents have no MVCC in CouchDB (`couch_db_updater:update_local_doc_revs`):
    /// the new revision is the one given plus one (1 without one), whatever is stored;
    /// a deletion always succeeds with revision 0.
    fn local(&mut self, u: LocalUpdate) -> Result<u64> {
        let key = key_in_db(self.db.id, u.id.as_bytes());
        if u.deleted {
            self.batch.delete(Cf::Local, &key);
            return Ok(0);
        }
        let rev = u.rev.unwrap_or(0).saturating_add(1);
        let mut v = vec![LOCAL_V1];
        varint::put(&mut v, rev);
        v.extend_from_slice(&u.body);
        self.batch.put(Cf::Local, &key, &v);
        Ok(rev)
    }

    fn write(mut self) -> Result<()> {
        if self.batch.is_empty() && !self.dirty {
            return Ok(());
        }
        let dbid = self.db.id;
        let mut stats = self.stats;
        let partitioned = self.db.props().partitioned;
        let mut parts = PartitionDeltas::default();
        let mut inserted = 0;
        for (id, t) in &self.docs {
            let before = t.before.as_ref();
            if before.map(|(b, _)| b) == t.now.as_ref() {
                continue;
            }
            if before.is_none() {
                inserted += 1;
            }
            let partition = partitioned.then(|| settee_core::partition_of(id)).flatten();
            if let Some((b, len)) = before {
                remove_counts(&mut stats, id, b, *len);
                if let Some(p) = partition {
                    parts.add(p, id, b, *len, -1);
                }
                if t.now.as_ref().map(|n| n.seq) != Some(b.seq) {
                    self.batch.delete(Cf::Seqs, &seq_key(dbid, b.seq));
                }
            }
            let key = key_in_db(dbid, id.as_bytes());
            let Some(now) = &t.now else {
                self.batch.delete(Cf::Docs, &key);
                continue;
            };
            let encoded = now.encode();
            if now.is_deleted() {
                stats.doc_del_count += 1;
            } else {
                stats.doc_count += 1;
            }
            stats.external += now.body_bytes;
            stats.active += stored_bytes(id, now, encoded.len());
            if let Some(p) = partition {
                parts.add(p, id, now, encoded.len(), 1);
            }
            self.batch.put(Cf::Docs, &key, &encoded);
            self.batch
                .put(Cf::Seqs, &seq_key(dbid, now.seq), id.as_bytes());
        }
        self.batch
            .put(Cf::Meta, &crate::meta::stats_key(dbid), &stats.encode());
        parts.write(self.db, &mut self.batch)?;
        let event = self.dirty.then(|| {
            self.db
                .events
                .record(&mut self.batch, &self.db.name, DbEventKind::Updated)
        });
        self.db.store.write(self.batch, true)?;
        let m = settee_metrics::global();
        m.commits.inc();
        m.document_inserts.inc_by(inserted);
        *self.db.stats.lock().unwrap() = stats;
        self.db.seq_tx.send_replace(stats.update_seq);
        if let Some(seq) = event {
            self.db.events.published(&self.db.name, seq);
        }
        Ok(())
    }
}

/// Changes to partition counters in one commit: doc count, deleted count, external
/// bytes, active bytes.
#[derive(Default)]
struct PartitionDeltas(HashMap<String, [i64; 4]>);

impl PartitionDeltas {
    /// Counts (`sign` 1) or uncounts (`sign` -1) one stored document info.
    fn add(&mut self, partition: &str, id: &str, info: &DocInfo, encoded_len: usize, sign: i64) {
        let d = self.0.entry(partition.to_string()).or_default();
        d[if info.is_deleted() { 1 } else { 0 }] += sign;
        d[2] += sign * info.body_bytes as i64;
        d[3] += sign * stored_bytes(id, info, encoded_len) as i64;
    }

    /// Adds the new counters to `batch`. Only the writer changes them, so the stored
    /// value is the one the previous commit left; a partition left empty loses its key.
    fn write(self, db: &Database, batch: &mut settee_storage::Batch<'_>) -> Result<()> {
        let apply = |v: u64, d: i64| v.saturating_add_signed(d);
        let changed: Vec<(Vec<u8>, [i64; 4])> = self
            .0
            .into_iter()
            .filter(|(_, d)| *d != [0; 4])
            .map(|(p, d)| (crate::meta::partition_key(db.id, &p), d))
            .collect();
        let keys: Vec<Vec<u8>> = changed.iter().map(|(k, _)| k.clone()).collect();
        let stored = db.store.multi_get(Cf::Meta, &keys)?;
        for ((key, d), raw) in changed.into_iter().zip(stored) {
            let cur = match raw {
                Some(v) => PartitionStats::decode(&v)?,
                None => PartitionStats::default(),
            };
            let next = PartitionStats {
                doc_count: apply(cur.doc_count, d[0]),
                doc_del_count: apply(cur.doc_del_count, d[1]),
                external: apply(cur.external, d[2]),
                active: apply(cur.active, d[3]),
            };
            if next.doc_count == 0 && next.doc_del_count == 0 {
                batch.delete(Cf::Meta, &key);
            } else {
                batch.put(Cf::Meta, &key, &next.encode());
            }
        }
        Ok(())
    }
}

fn remove_counts(stats: &mut Stats, id: &str, before: &DocInfo, encoded_len: usize) {
    if before.is_deleted() {
        stats.doc_del_count -= 1;
    } else {
        stats.doc_count -= 1;
    }
    stats.external = stats.external.saturating_sub(before.body_bytes);
    stats.active = stats
        .active
        .saturating_sub(stored_bytes(id, before, encoded_len));
}

const LOCAL_V1: u8 = 1;
/// Format of a purge record (`meta::purge_key`): this byte, then JSON `{"id","revs"}`.
pub(crate) const PURGE_V1: u8 = 1;

pub(crate) fn decode_local(id: &str, v: &[u8]) -> Result<LocalDoc> {
    let corrupt = || Error::Storage(settee_storage::Error::Corrupted("local document".into()));
    let (&ver, mut rest) = v.split_first().ok_or_else(corrupt)?;
    if ver != LOCAL_V1 {
        return Err(corrupt());
    }
    let rev = varint::get(&mut rest).ok_or_else(corrupt)?;
    Ok(LocalDoc {
        id: id.to_string(),
        rev,
        body: rest.to_vec(),
    })
}
