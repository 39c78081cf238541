//! Bringing an index up to date: changes → parallel map → collate → tree writes.
//!
//! One update runs at a time per index (the caller holds the index's lock). Work goes in
//! rounds: a reader thread walks `_changes` from the checkpoint (ids and revision trees
//! only; a fresh index of a database of up to [`FRESH_PAGES`] × [`FRESH_PAGE_DOCS`]
//! documents reads them in pages of seq order instead, each from one pass over the ids)
//! and sends chunks of documents to N map workers (one QuickJS runtime each, or the
//! group's shared [`NativeMap`] when its language is native or has a query server, given a
//! whole chunk per call; N = cores, or what the [`NativeMap`] asks for); each worker reads
//! its chunk's bodies from the reader's snapshot (decompressing them is a large share of
//! the work, so it is spread over the workers), maps, encodes keys in collation order and
//! sends rows back to
//! the collector (the calling thread). At the end of a round the collector applies the
//! rows to each view's tree and writes the new roots and the round's last seq in the same
//! batch as the back index.
//!
//! A round that starts from an empty index bulk-loads: rows are sorted (in memory, and in
//! runs spilled past a bound) and the tree is built bottom-up; its nodes and back-index
//! entries are written to table files ingested before the checkpoint, never through the
//! memtables (nothing refers to them until the checkpoint lands; an interrupted build
//! starts over and wipes them).
//!
//! Index writes skip the write-ahead log: an index is derived data, and logging (with the
//! WAL's compression) was a fifth of a 100k-document build. The `views` family then
//! recovers from a crash to its last flushed memtable, and RocksDB flushes a family's
//! memtables in write order, so every index is at some checkpoint it committed, with
//! every node and back-index entry written before it; the next query resumes from there.
//! The idle flusher and a clean shutdown persist the rest.

use crate::group::Group;
use crate::layout::{self, decode_back, encode_back, encode_payload, tree_key, Meta, RowSizes};
use crate::runs::BulkRows;
use crate::tree::{self, Node, NodeId, NodeRead, NodeSink, Op, Row, RowRef, TreeError};
use crate::{Error, NativeMap, Result, TaskHandle, Views};
use serde_json::{json, Value};
use settee_core::{collate, DocJson, Rev};
use settee_db::{Database, DocLeaves};
use settee_js::{JsError, Limits, ViewRuntime};
use settee_queryserver::Emits;
use settee_storage::{Cf, Read, Snapshot, SstWriter, Store};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;

/// Documents per chunk sent to a map worker.
const CHUNK_DOCS: usize = 256;
/// Above this average body size a worker reads bodies without filling the block cache:
/// a chunk then spans many blocks that no other chunk needs, and caching them only evicts
/// what other readers use (11 KB docs: 36k -> 48k docs/s). Below it, the blocks at a
/// chunk's ends are shared with the neighbouring chunks, and caching them saves
/// decompressing them twice (150-byte docs: ~8% faster).
const UNCACHED_BODY_BYTES: usize = 2048;
/// Most documents whose infos a fresh index reads per pass over the database (~110 bytes
/// each in memory) rather than through the changes feed.
const FRESH_PAGE_DOCS: usize = 500_000;
/// Most passes a fresh index makes: each reads every document's info, so a database of
/// more documents is read through the changes feed.
const FRESH_PAGES: u64 = 8;
/// Rows a round maps before it is written.
const ROUND_ROWS: usize = 1_500_000;
/// Bytes of rows a bulk load holds in memory; past this they are spilled as sorted runs
/// (a 1M-row build held ~110 MB of rows at its end).
const SPILL_BYTES: usize = 32 << 20;
/// Back-index entries a bulk load's collector gathers before handing them to the writer
/// (which gathers them all, so it does its share while the pipeline runs).
const EARLY_BACK_ENTRIES: usize = 8192;

/// A document to map (`doc: None` = deleted or not indexed: only remove its rows).
struct Item {
    id: String,
    doc: Option<ToMap>,
}

/// What a worker needs to build a document's JSON: its winning revision, the id of its
/// stored body, and the members CouchDB adds (`_conflicts`, `_local_seq`).
struct ToMap {
    /// Printed only when the JSON is built (a native map reading only the body never
    /// needs it; printing it was a twentieth of the reader's time).
    rev: Rev,
    body: u64,
    conflicts: Vec<String>,
    deleted_conflicts: Vec<String>,
    local_seq: Option<u64>,
}

impl ToMap {
    /// The document as CouchDB's indexer gives it to map functions: opened with
    /// `conflicts` and `deleted_conflicts` (and `local_seq` when the design document asks),
    /// those members in CouchDB's order after the body, attachment stubs last.
    fn json(&self, id: &str, body: &[u8]) -> Vec<u8> {
        let mut j = DocJson::new(id, Some(&self.rev.to_string()), body);
        if let Some(seq) = self.local_seq {
            j.member("_local_seq", &json!(seq));
        }
        if !self.conflicts.is_empty() {
            j.member("_conflicts", &json!(self.conflicts));
        }
        if !self.deleted_conflicts.is_empty() {
            j.member("_deleted_conflicts", &json!(self.deleted_conflicts));
        }
        j.finish()
    }
}

/// One document's rows: (view number, tree key, payload), and its back-index entry (the
/// rows' keys; empty without rows), encoded by the worker rather than the collector.
struct Mapped {
    id: String,
    rows: Vec<(u32, Vec<u8>, Vec<u8>)>,
    back: Vec<u8>,
}

pub(crate) fn load_meta(store: &dyn Read, g: &Group) -> Result<Meta> {
    let fresh = || Meta::empty(g.def.views.len(), g.collation());
    Ok(match store.get(Cf::Views, &g.prefix.meta())? {
        None => fresh(),
        Some(b) => match Meta::decode(&b) {
            Some(m) if m.collation == g.collation() && m.roots.len() == g.def.views.len() => m,
            _ => fresh(),
        },
    })
}

/// Brings `g`'s index up to the database's current seq.
pub(crate) fn update(views: &Views, db: &Database, g: &Group) -> Result<()> {
    let store = db.store().as_ref();
    let mut meta = load_meta(store, g)?;
    let target = db.update_seq();
    if meta.seq >= target {
        return Ok(());
    }
    let total = if meta.seq == 0 {
        // One change per document: no need to count them.
        let stats = db.stats();
        stats.doc_count + stats.doc_del_count
    } else {
        db.count_changes_after(meta.seq)?
    };
    let task = views.tasks.start(&db.name, &g.ddoc_id, total);
    // An empty index may still hold what an interrupted build wrote; only then is its range
    // deleted. A needless tombstone over it costs the build: RocksDB flushes the memtable
    // before ingesting a file that overlaps it, and puts the file in level 0, from where
    // a compaction moves it during later builds.
    if meta.seq == 0 && meta.roots.iter().all(Option::is_none) && holds_any(store, g)? {
        wipe(store, g)?;
    }
    loop {
        let done = round(views, db, g, &mut meta, &task)?;
        if done {
            return Ok(());
        }
    }
}

/// Whether anything is stored under the index's prefix.
fn holds_any(store: &Store, g: &Group) -> Result<bool> {
    let (lo, hi) = g.prefix.range();
    Ok(store
        .range(Cf::Views, &lo, &hi, false)
        .next()
        .transpose()?
        .is_some())
}

/// Removes everything stored under the index's prefix.
pub(crate) fn wipe(store: &Store, g: &Group) -> Result<()> {
    let (lo, hi) = g.prefix.range();
    let mut b = store.batch();
    b.delete_range(Cf::Views, &lo, &hi);
    store.write(b, false)?;
    Ok(())
}

/// One round; `true` when the index caught up with the changes feed.
fn round(
    views: &Views,
    db: &Database,
    g: &Group,
    meta: &mut Meta,
    task: &TaskHandle,
) -> Result<bool> {
    let store = db.store().as_ref();
    let snap = store.snapshot();
    // Purged documents leave no change behind: their ids come from the purge records,
    // read from the same snapshot as the changes. If some were forgotten (more purges than
    // `_purged_infos_limit` since the last update), the index starts over.
    let (purge_seq, purged) = db.purged_in(&snap, meta.purge_seq)?;
    let purged = match purged {
        Some(ids) => ids,
        None => {
            tracing::info!(ddoc = %g.ddoc_id, "purges since the index's checkpoint were forgotten; rebuilding it");
            wipe(store, g)?;
            *meta = Meta::empty(g.def.views.len(), g.collation());
            Vec::new()
        }
    };
    let fresh = meta.roots.iter().all(Option::is_none);
    if meta.sizes.is_none() {
        let nodes = SnapNodes { read: &snap, g };
        meta.sizes = Some(measure(&nodes, &meta.roots)?);
    }
    let mut collector = Collector::new(g, store, fresh);
    let started = std::time::Instant::now();
    let mut sink = StoreSink::new(store, g, meta.next_node, fresh)?;
    let mut js = views.reducers(g);
    // Phase timings for the debug log.
    let (mut mapped, mut trees, mut back_done) = Default::default();
    // A bulk load's back-index entries are gathered and written by a thread of their own,
    // beside the pipeline and then beside the tree build (nothing refers to them before
    // the checkpoint): on the build's critical path they were a fifth of the time after
    // mapping.
    let (work, written) = std::thread::scope(|s| {
        let (back_tx, back_rx) = sync_channel::<BackEntries>(1);
        let back_writer = std::thread::Builder::new()
            .name("view-back-index".into())
            .spawn_scoped(s, move || write_back(store, g, back_rx))
            .expect("spawn the back-index writer");
        let work = (|| -> Result<_> {
            let (last_seq, done) = pipeline(
                views,
                db,
                g,
                &snap,
                meta.seq,
                purged,
                &mut collector,
                &back_tx,
                task,
            )?;
            mapped = started.elapsed();
            // Back-index puts (`Some`) and deletes (`None`) that commit with the checkpoint.
            let back_index: Vec<(String, Option<Vec<u8>>)> = match collector.state {
                State::Fresh { rows, back } => {
                    send_back(&back_tx, back)?;
                    drop(back_tx);
                    for (i, mut rows) in rows.into_iter().enumerate() {
                        let failed = Cell::new(None);
                        meta.roots[i] = g.with_reducer(i, &mut js, |red| {
                            tree::build(&mut sink, red, rows.sorted(&failed))
                        });
                        failed.take().map_or(Ok(()), |e| Err(Error::Spill(e)))?;
                    }
                    Vec::new()
                }
                State::Incremental { ops, back } => {
                    drop(back_tx);
                    for (i, ops) in ops.into_iter().enumerate() {
                        let ops: Vec<Op> = ops.into_iter().collect();
                        let root = meta.roots[i].take();
                        meta.roots[i] = g.with_reducer(i, &mut js, |red| {
                            tree::modify(&mut sink, red, root.as_ref(), &ops)
                        })?;
                    }
                    back
                }
            };
            trees = started.elapsed();
            Ok((last_seq, done, back_index))
        })();
        let written = back_writer.join().expect("back-index writer panicked");
        back_done = started.elapsed();
        (work, written)
    });
    // The writer's failure first: the pipeline then only saw it stop.
    let back_file = written?;
    let (last_seq, done, mut back_index) = work?;
    back_index.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // A feed read to its end covers the snapshot's update_seq, even when its last seqs
    // belonged to documents purged since (they have no change left).
    meta.seq = if done {
        last_seq.max(db.stats_in(&snap)?.update_seq)
    } else {
        last_seq
    };
    meta.purge_seq = purge_seq;
    meta.next_node = sink.next;
    meta.sizes = Some(sink.sizes_after(meta.sizes.unwrap_or_default()));
    let mut batch = store.batch();
    let nodes_file = sink.finish(&mut batch)?;
    // A bulk load's files first: the checkpoint that refers to them comes after.
    store.ingest([nodes_file, back_file].into_iter().flatten().collect())?;
    for (id, value) in back_index {
        match value {
            Some(v) => batch.put(Cf::Views, &g.prefix.back(&id), &v),
            None => batch.delete(Cf::Views, &g.prefix.back(&id)),
        }
    }
    batch.put(Cf::Views, &g.prefix.meta(), &meta.encode());
    let built = started.elapsed();
    store.write_unlogged(batch)?;
    tracing::debug!(ddoc = %g.ddoc_id, seq = last_seq, fresh, ?mapped, ?trees, ?back_done, ?built,
        committed = ?started.elapsed(), "view update round");
    Ok(done)
}

/// Rewrites every view's tree with full nodes, as CouchDB's view compaction does (trees
/// that incremental updates left with underfull nodes get dense again), and range-deletes
/// the old nodes: they all have ids below the first new one. The caller holds the index's
/// lock; readers keep their snapshots of the old trees. Rows, reductions and the
/// checkpoint are unchanged. A crash before the final batch leaves the old trees in place,
/// plus unreferenced new nodes above the checkpoint's next node id, which later writes
/// overwrite and a later rebuild's range delete removes.
pub(crate) fn rebuild(views: &Views, db: &Database, g: &Group) -> Result<()> {
    let store = db.store().as_ref();
    let snap = store.snapshot();
    let mut meta = load_meta(&snap, g)?;
    let first_new = meta.next_node;
    let mut sink = StoreSink::new(store, g, first_new, true)?;
    let mut js = views.reducers(g);
    let nodes = SnapNodes { read: &snap, g };
    let rows: u64 = meta.roots.iter().flatten().map(|r| r.count).sum();
    let task = views.tasks.start_compaction(&db.name, &g.ddoc_id, rows);
    for i in 0..meta.roots.len() {
        task.view(i);
        let old = meta.roots[i].take();
        meta.roots[i] = std::thread::scope(|s| -> Result<Option<tree::Entry>> {
            let (tx, rx) = sync_channel::<Vec<Row>>(4);
            let reader = s.spawn(|| stream_rows(&nodes, old.as_ref(), tx));
            let built = g.with_reducer(i, &mut js, |red| {
                let rows = rx.into_iter().inspect(|b| task.advance(b.len() as u64));
                tree::build(&mut sink, red, rows.flatten())
            });
            // A tree read short must not replace the whole one.
            reader.join().expect("row reader panicked")?;
            Ok(built)
        })?;
    }
    meta.next_node = sink.next;
    // Every row was written anew.
    meta.sizes = Some(sink.added);
    let mut batch = store.batch();
    let nodes_file = sink.finish(&mut batch)?;
    store.ingest(nodes_file.into_iter().collect())?;
    batch.delete_range(Cf::Views, &g.prefix.node(0), &g.prefix.node(first_new));
    batch.put(Cf::Views, &g.prefix.meta(), &meta.encode());
    store.write_unlogged(batch)?;
    tracing::debug!(ddoc = %g.ddoc_id, old_nodes_below = first_new,
        new_nodes = meta.next_node - first_new, "view index rebuilt");
    Ok(())
}

/// Sends every row of a tree, in order, in batches.
fn stream_rows(
    nodes: &dyn NodeRead,
    root: Option<&tree::Entry>,
    tx: SyncSender<Vec<Row>>,
) -> Result<()> {
    let mut batch = Vec::with_capacity(1024);
    let all = tree::Range {
        lo: std::ops::Bound::Unbounded,
        hi: std::ops::Bound::Unbounded,
    };
    // A break means the builder is gone (it panicked); its caller reports that.
    let _ = tree::fold(nodes, root, &all, false, &mut |row| {
        batch.push(row.clone());
        if batch.len() < 1024 {
            return ControlFlow::Continue(());
        }
        match tx.send(std::mem::replace(&mut batch, Vec::with_capacity(1024))) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    })?;
    let _ = tx.send(batch);
    Ok(())
}

/// Runs reader → workers → collector for one round; returns the last seq read and
/// whether the feed was exhausted.
#[allow(clippy::too_many_arguments)]
fn pipeline(
    views: &Views,
    db: &Database,
    g: &Group,
    snap: &Snapshot<'_>,
    since: u64,
    purged: Vec<String>,
    collector: &mut Collector<'_>,
    back_tx: &SyncSender<BackEntries>,
    task: &TaskHandle,
) -> Result<(u64, bool)> {
    let native = views.native_map(&g.def)?;
    // A group whose functions run natively needs no more workers than cores, whatever
    // its engine would.
    let workers = match &native {
        Some(n) if g.native_fns.is_none() => n.workers(views.workers),
        _ => views.workers,
    }
    .max(1);
    // `abort`: a failure, queued work is dropped; `enough`: the round is full, the reader
    // stops and queued work is still mapped.
    let abort = AtomicBool::new(false);
    let enough = AtomicBool::new(false);
    let (work_tx, work_rx) = sync_channel::<Vec<Item>>(workers * 2);
    let work_rx = Mutex::new(work_rx);
    std::thread::scope(|s| {
        let (res_tx, res_rx) = sync_channel::<Result<Vec<Mapped>>>(workers * 2);
        let stop = [&abort, &enough];
        // Named threads: `top -H` and profilers tell the pipeline's stages apart.
        let reader = std::thread::Builder::new()
            .name("view-reader".into())
            .spawn_scoped(s, move || {
                read_changes(Source { db, snap, g }, since, purged, work_tx, stop)
            })
            .expect("spawn the view reader");
        for _ in 0..workers {
            let res_tx = res_tx.clone();
            let (work_rx, abort) = (&work_rx, &abort);
            let (native, limits) = (native.as_deref(), views.limits());
            std::thread::Builder::new()
                .name("view-mapper".into())
                .spawn_scoped(s, move || {
                    let source = Source { db, snap, g };
                    // QuickJS runtimes stay on the thread that made them.
                    let mapper = match native {
                        Some(n) => Mapper::Native(n),
                        None => Mapper::Js { limits, rt: None },
                    };
                    map_worker(source, mapper, work_rx, res_tx, abort)
                })
                .expect("spawn a view mapper");
        }
        drop(res_tx);
        let mut failure = None;
        for msg in res_rx {
            if failure.is_some() {
                continue; // drain so workers never block
            }
            let n = match msg.and_then(|docs| collector.accept(docs, back_tx)) {
                Ok(n) => n,
                Err(e) => {
                    abort.store(true, Ordering::Relaxed);
                    failure = Some(e);
                    continue;
                }
            };
            task.advance(n as u64);
            settee_metrics::global().indexer_changes.inc_by(n as u64);
            if collector.rows >= ROUND_ROWS {
                enough.store(true, Ordering::Relaxed);
            }
        }
        let read = reader.join().expect("reader thread panicked");
        failure.map_or(read, Err)
    })
}

/// Reads changes after `since` into chunks until the feed ends or `stop` is set;
/// returns the seq of the last change sent and whether the feed ended.
fn read_changes(
    source: Source<'_>,
    since: u64,
    purged: Vec<String>,
    tx: SyncSender<Vec<Item>>,
    stop: [&AtomicBool; 2],
) -> Result<(u64, bool)> {
    let Source { db, snap, g } = source;
    let mut last = since;
    let mut chunk = Vec::with_capacity(CHUNK_DOCS);
    let mut done = true;
    // Purged documents first, as they are now: gone (their rows are removed) or, when
    // only some revisions went, re-mapped — unless the feed below brings them anyway.
    let purged: std::collections::BTreeSet<String> = purged.into_iter().collect();
    for id in purged {
        match db.doc_info_in(snap, &id)? {
            Some(info) if info.seq > since => {}
            Some(info) => {
                let doc = DocLeaves {
                    seq: info.seq,
                    id,
                    leaves: info.tree.leaves(),
                };
                chunk.push(item(g, doc, &mut 0));
            }
            None => chunk.push(Item { id, doc: None }),
        }
    }
    let mut on_doc = |d: DocLeaves| {
        if stop.iter().any(|f| f.load(Ordering::Relaxed)) {
            done = false;
            return ControlFlow::Break(());
        }
        chunk.push(item(g, d, &mut last));
        if chunk.len() >= CHUNK_DOCS {
            if tx.send(std::mem::take(&mut chunk)).is_err() {
                done = false;
                return ControlFlow::Break(());
            }
            chunk.reserve(CHUNK_DOCS);
        }
        ControlFlow::Continue(())
    };
    if let Some(pages) = fresh_pages(source, since)? {
        db.pages_by_seq_in(snap, pages, FRESH_PAGE_DOCS, |page| {
            (page.into_iter())
                .filter(|d| d.leaves.first().is_some_and(|w| !w.deleted) && g.indexes(&d.id))
                .try_for_each(&mut on_doc)
        })?
    } else {
        db.changes_in(snap, since, false, false, |c| {
            on_doc(DocLeaves {
                id: c.id,
                seq: c.seq,
                leaves: c.info.tree.leaves(),
            })
        })?
    }
    if !chunk.is_empty() && tx.send(chunk).is_err() {
        done = false;
    }
    Ok((last, done))
}

/// How many pages of seq order a fresh index reads the documents it maps in, each from
/// one pass over the documents that decodes only their leaves (a point lookup per change
/// was half of a 100k-doc build's reader time, and decoding whole revision trees a third of
/// the rest); `None` when the index is not fresh or the database is too large for few
/// passes (the changes feed is read then). Deleted and unindexed documents are left out of
/// the pages: a fresh index has no rows of theirs to remove.
fn fresh_pages(Source { db, snap, .. }: Source<'_>, since: u64) -> Result<Option<u64>> {
    let stats = db.stats_in(snap)?;
    let pages = (stats.doc_count + stats.doc_del_count).div_ceil(FRESH_PAGE_DOCS as u64);
    Ok((since == 0 && pages <= FRESH_PAGES).then_some(pages.max(1)))
}

fn item(g: &Group, d: DocLeaves, last: &mut u64) -> Item {
    *last = d.seq;
    let indexed = g.indexes(&d.id);
    let mut leaves = d.leaves;
    let doc = match leaves.first() {
        Some(w) if !w.deleted && indexed => w.body.map(|body| {
            // The winner comes first: skipping it spares comparing its revision with
            // itself, a read of scattered memory per document.
            let others = |deleted: bool| -> Vec<String> {
                (leaves.iter().skip(1))
                    .filter(|l| l.deleted == deleted && l.rev != w.rev)
                    .map(|l| l.rev.to_string())
                    .collect()
            };
            (body, others(false), others(true))
        }),
        _ => None,
    };
    // The winner's revision is moved out of the leaves, not cloned: a fresh index reads
    // documents in seq order, their revisions lie scattered in memory, and the clone's
    // copy was 2% of a build's samples.
    let doc = doc.map(|(body, conflicts, deleted_conflicts)| ToMap {
        rev: leaves.swap_remove(0).rev,
        body,
        conflicts,
        deleted_conflicts,
        local_seq: g.def.local_seq.then_some(d.seq),
    });
    Item { id: d.id, doc }
}

/// Where a map worker reads documents: the reader's snapshot of the database.
#[derive(Clone, Copy)]
struct Source<'a> {
    db: &'a Database,
    snap: &'a Snapshot<'a>,
    g: &'a Group,
}

/// What maps documents in one worker.
enum Mapper<'a> {
    /// A QuickJS runtime of the group's functions, started at the first document.
    Js {
        limits: Limits,
        rt: Option<ViewRuntime>,
    },
    /// The group's native map, shared by every worker.
    Native(&'a dyn NativeMap),
}

impl Mapper<'_> {
    /// Each view's emits for one document (`doc` with its stored bytes). A view whose
    /// JavaScript throws on the document emits nothing for it, as in CouchDB.
    fn map(
        &mut self,
        g: &Group,
        id: &str,
        doc: &ToMap,
        stored: &[u8],
    ) -> Result<Vec<Vec<(Value, Value)>>> {
        let json = || doc.json(id, stored);
        match self {
            Mapper::Js { limits, rt } => {
                if let Some(rows) = g.native_fns.as_ref().and_then(|n| n.map(stored, json)) {
                    return Ok(rows);
                }
                if rt.is_none() {
                    *rt = Some(ViewRuntime::new(&g.fns, *limits).map_err(Error::Js)?);
                }
                let json = json();
                // SIMD validation: at 11 KB a document, `std::str::from_utf8` was 3% of a
                // build.
                let text = simdutf8::basic::from_utf8(&json)
                    .map_err(|_| Error::Internal("doc not UTF-8".into()))?;
                let per_view = rt
                    .as_mut()
                    .expect("started above")
                    .map_doc(text)
                    .map_err(|e| js_failure(e, id))?;
                Ok(per_view
                    .into_iter()
                    .map(|r| r.unwrap_or_default())
                    .collect())
            }
            Mapper::Native(native) => {
                let mut out = native.map_docs(&[&json()])?;
                Ok(out.pop().unwrap_or_default())
            }
        }
    }

    /// Each document's emits per view, in order, in one call of the native map for the
    /// whole chunk (a query server pipelines it); `None` for QuickJS, which maps each
    /// document as its JSON is built (the chunk's JSON is never all in memory at once).
    fn map_all(&mut self, docs: &[Vec<u8>]) -> Option<Result<Vec<Vec<Emits>>>> {
        let Mapper::Native(native) = self else {
            return None;
        };
        let refs: Vec<&[u8]> = docs.iter().map(Vec::as_slice).collect();
        Some(native.map_docs(&refs).and_then(|out| {
            if out.len() == docs.len() {
                Ok(out)
            } else {
                Err(Error::Internal("a native map lost documents".into()))
            }
        }))
    }

    /// Drops state a failure may have left behind.
    fn reset(&mut self) {
        if let Mapper::Js { rt, .. } = self {
            *rt = None;
        }
    }
}

fn map_worker(
    source: Source<'_>,
    mut mapper: Mapper<'_>,
    rx: &Mutex<Receiver<Vec<Item>>>,
    tx: SyncSender<Result<Vec<Mapped>>>,
    abort: &AtomicBool,
) {
    let mut body_bytes = 0;
    loop {
        let chunk = match rx.lock().expect("work queue").recv() {
            Ok(c) => c,
            Err(_) => return,
        };
        if abort.load(Ordering::Relaxed) {
            continue;
        }
        let fill_cache = body_bytes <= UNCACHED_BODY_BYTES;
        let res = map_chunk(source, &mut mapper, chunk, fill_cache, &mut body_bytes);
        if res.is_err() {
            abort.store(true, Ordering::Relaxed);
            mapper.reset();
        }
        if tx.send(res).is_err() {
            abort.store(true, Ordering::Relaxed);
        }
    }
}

/// Maps one chunk; `body_bytes` becomes the average size of its bodies.
fn map_chunk(
    source: Source<'_>,
    mapper: &mut Mapper<'_>,
    chunk: Vec<Item>,
    fill_cache: bool,
    body_bytes: &mut usize,
) -> Result<Vec<Mapped>> {
    let g = source.g;
    let body_ids: Vec<u64> = chunk
        .iter()
        .filter_map(|i| Some(i.doc.as_ref()?.body))
        .collect();
    let bodies = source.db.bodies_in(source.snap, &body_ids, fill_cache)?;
    if !bodies.is_empty() {
        *body_bytes = bodies.iter().map(|b| b.len()).sum::<usize>() / bodies.len();
    }
    let mut bodies = bodies.into_iter();
    let mut batch = match mapper {
        Mapper::Native(_) => {
            // The group's native functions answer what they can; the rest goes to the
            // native map in one call.
            let mut answers: Vec<Option<Vec<Emits>>> = Vec::with_capacity(chunk.len());
            let mut docs: Vec<Vec<u8>> = Vec::new();
            for item in &chunk {
                let Some(doc) = &item.doc else { continue };
                let body = bodies.next().expect("one body per document");
                let json = || doc.json(&item.id, &body);
                let answer = g.native_fns.as_ref().and_then(|n| n.map(&body, json));
                if answer.is_none() {
                    docs.push(json());
                }
                answers.push(answer);
            }
            let mut mapped = match docs.is_empty() {
                true => Vec::new(),
                false => mapper.map_all(&docs).transpose()?.unwrap_or_default(),
            }
            .into_iter();
            for a in answers.iter_mut().filter(|a| a.is_none()) {
                *a = mapped.next();
            }
            let answers: Option<Vec<Vec<Emits>>> = answers.into_iter().collect();
            let answers =
                answers.ok_or_else(|| Error::Internal("a native map lost documents".into()))?;
            Some(answers.into_iter())
        }
        Mapper::Js { .. } => None,
    };
    let mut out = Vec::with_capacity(chunk.len());
    for item in chunk {
        let mut rows = Vec::new();
        if let Some(doc) = &item.doc {
            let per_view = match &mut batch {
                Some(mapped) => mapped.next().expect("one answer per document"),
                None => {
                    let body = bodies.next().expect("one body per document");
                    mapper.map(g, &item.id, doc, &body)?
                }
            };
            // A native map answering for more views than the group has is ignored past them.
            for (view, pairs) in per_view.into_iter().enumerate().take(g.def.views.len()) {
                push_rows(
                    &mut rows,
                    view as u32,
                    &item.id,
                    pairs,
                    g.def.raw(view),
                    g.partitioned,
                );
            }
        }
        let back = if rows.is_empty() {
            Vec::new()
        } else {
            let keys: Vec<(u32, &[u8])> = rows.iter().map(|(v, k, _)| (*v, k.as_slice())).collect();
            encode_back(&keys)
        };
        out.push(Mapped {
            id: item.id,
            rows,
            back,
        });
    }
    Ok(out)
}

fn js_failure(e: JsError, doc_id: &str) -> Error {
    tracing::error!(doc = doc_id, error = %e, "map function failed; index update stopped");
    Error::Js(e)
}

/// Encodes one view's emits of one document as rows. Rows of equal keys are ordered by
/// value in Erlang term order ([`collate::compare_raw`]), emit order breaking ties, as
/// CouchDB sorts a document's emits before storing equal keys' values together.
fn push_rows(
    rows: &mut Vec<(u32, Vec<u8>, Vec<u8>)>,
    view: u32,
    id: &str,
    pairs: Vec<(Value, Value)>,
    raw: bool,
    partitioned: bool,
) {
    // A partitioned view's keys start with the document's partition. (Only then is the id
    // searched for its colon: searching every id was 3% of a build.)
    let prefix = match partitioned.then(|| id.split_once(':')).flatten() {
        Some((p, _)) => layout::partition_prefix(p),
        None => Vec::new(),
    };
    let mut encoded: Vec<(Vec<u8>, Value, Value)> = pairs
        .into_iter()
        .map(|(k, v)| {
            let mut enc = Vec::with_capacity(32);
            enc.extend_from_slice(&prefix);
            if raw {
                collate::encode_key_raw(&k, &mut enc);
            } else {
                collate::encode_key(&k, &mut enc);
            }
            (enc, k, v)
        })
        .collect();
    if encoded.len() > 1 {
        encoded.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| collate::compare_raw(&a.2, &b.2)));
    }
    let mut dup = 0;
    for i in 0..encoded.len() {
        dup = if i > 0 && encoded[i].0 == encoded[i - 1].0 {
            dup + 1
        } else {
            0
        };
        let (enc, k, v) = &encoded[i];
        let key = tree_key(enc, id, dup);
        let key_json = serde_json::to_vec(k).expect("json");
        let value_json = serde_json::to_vec(v).expect("json");
        rows.push((view, key, encode_payload(id, &key_json, &value_json)));
    }
}

enum State {
    /// An empty index: rows per view, back-index entries not yet written.
    Fresh {
        rows: Vec<BulkRows>,
        back: BackEntries,
    },
    /// Changes to existing trees: ops per view (sorted), back-index puts and deletes.
    Incremental {
        ops: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
        back: Vec<(String, Option<Vec<u8>>)>,
    },
}

struct Collector<'a> {
    g: &'a Group,
    store: &'a Store,
    state: State,
    rows: usize,
}

impl<'a> Collector<'a> {
    fn new(g: &'a Group, store: &'a Store, fresh: bool) -> Collector<'a> {
        let n = g.def.views.len();
        let state = if fresh {
            State::Fresh {
                rows: (0..n).map(|_| BulkRows::default()).collect(),
                back: Vec::new(),
            }
        } else {
            State::Incremental {
                ops: vec![BTreeMap::new(); n],
                back: Vec::new(),
            }
        };
        Collector {
            g,
            store,
            state,
            rows: 0,
        }
    }

    /// Takes one chunk's rows; returns the number of documents in it. A bulk load hands
    /// its back-index entries to `early` when they are many.
    fn accept(&mut self, docs: Vec<Mapped>, early: &SyncSender<BackEntries>) -> Result<usize> {
        let n = docs.len();
        match &mut self.state {
            State::Fresh { rows, back } => {
                for d in docs {
                    if d.rows.is_empty() {
                        continue;
                    }
                    back.push((d.id.into_bytes(), d.back));
                    self.rows += d.rows.len();
                    for (v, key, value) in d.rows {
                        rows[v as usize].push(&key, &value);
                    }
                }
                if back.len() >= EARLY_BACK_ENTRIES {
                    send_back(early, std::mem::take(back))?;
                }
                let bytes: usize = rows.iter().map(BulkRows::bytes).sum();
                if bytes >= SPILL_BYTES {
                    tracing::debug!(ddoc = %self.g.ddoc_id, bytes, "view build spills its rows");
                    let dir = self.store.path();
                    (rows.iter_mut().try_for_each(|r| r.spill(dir))).map_err(Error::Spill)?;
                }
            }
            State::Incremental { ops, back } => {
                let keys: Vec<Vec<u8>> = docs.iter().map(|d| self.g.prefix.back(&d.id)).collect();
                let old = self.store.multi_get(Cf::Views, &keys)?;
                for (d, old) in docs.into_iter().zip(old) {
                    for (v, key) in old.as_deref().and_then(decode_back).unwrap_or_default() {
                        if let Some(view_ops) = ops.get_mut(v as usize) {
                            view_ops.insert(key, None);
                        }
                    }
                    self.rows += d.rows.len();
                    let has_rows = !d.rows.is_empty();
                    for (v, key, value) in d.rows {
                        ops[v as usize].insert(key, Some(value));
                    }
                    match (has_rows, old.is_some()) {
                        (true, _) => back.push((d.id, Some(d.back))),
                        (false, true) => back.push((d.id, None)),
                        (false, false) => {}
                    }
                }
            }
        }
        Ok(n)
    }
}

/// Back-index entries of a bulk load: (doc id, entry). The writer adds the key's prefix,
/// so neither the collector nor the sort handles it.
type BackEntries = Vec<(Vec<u8>, Vec<u8>)>;

fn send_back(writer: &SyncSender<BackEntries>, entries: BackEntries) -> Result<()> {
    writer
        .send(entries)
        .map_err(|_| Error::Internal("the back-index writer stopped".into()))
}

/// Gathers a bulk load's back-index entries (spilling sorted runs past [`SPILL_BYTES`])
/// and writes them, in key order, to a file to ingest: unreferenced until the checkpoint.
fn write_back<'s>(
    store: &'s Store,
    g: &Group,
    entries: Receiver<BackEntries>,
) -> Result<Option<SstWriter<'s>>> {
    let mut all = BulkRows::default();
    let mut any = false;
    for batch in entries {
        any |= !batch.is_empty();
        for (id, value) in batch {
            all.push(&id, &value);
        }
        if all.bytes() >= SPILL_BYTES {
            all.spill(store.path()).map_err(Error::Spill)?;
        }
    }
    if !any {
        return Ok(None);
    }
    let mut file = store.sst_writer(Cf::Views)?;
    let failed = Cell::new(None);
    // Keys sort as their doc ids: they share the prefix.
    let mut key = g.prefix.back("");
    let prefix = key.len();
    for (id, value) in all.sorted(&failed) {
        key.truncate(prefix);
        key.extend_from_slice(&id);
        file.put(&key, &value)?;
    }
    failed
        .take()
        .map_or(Ok(Some(file)), |e| Err(Error::Spill(e)))
}

/// Tree nodes written by one round, readable before they are committed. A bulk load
/// (a fresh index, or a rebuild's new trees) writes its nodes, in ascending id order, to a
/// file ingested before the checkpoint instead.
struct StoreSink<'a> {
    store: &'a Store,
    g: &'a Group,
    pending: HashMap<NodeId, Option<Vec<u8>>>,
    next: u64,
    /// A bulk load's file, and the first error writing it.
    file: Option<SstWriter<'a>>,
    failed: Option<settee_storage::Error>,
    /// Sizes of the rows written into leaves, and of the rows of leaves rewritten.
    added: RowSizes,
    removed: RowSizes,
}

impl<'a> StoreSink<'a> {
    fn new(store: &'a Store, g: &'a Group, next: u64, bulk: bool) -> Result<StoreSink<'a>> {
        Ok(StoreSink {
            store,
            g,
            pending: HashMap::new(),
            next,
            file: bulk.then(|| store.sst_writer(Cf::Views)).transpose()?,
            failed: None,
            added: RowSizes::default(),
            removed: RowSizes::default(),
        })
    }

    /// `before` with this change's rows applied.
    fn sizes_after(&self, before: RowSizes) -> RowSizes {
        RowSizes {
            active: (before.active + self.added.active).saturating_sub(self.removed.active),
            external: (before.external + self.added.external).saturating_sub(self.removed.external),
        }
    }

    /// Adds the pending writes to `batch` (in ascending node order: cheap memtable
    /// inserts); a bulk load's file is returned, to ingest before `batch` is written.
    fn finish(self, batch: &mut settee_storage::Batch<'_>) -> Result<Option<SstWriter<'a>>> {
        if let Some(e) = self.failed {
            return Err(e.into());
        }
        let mut pending: Vec<_> = self.pending.into_iter().collect();
        pending.sort_unstable_by_key(|(id, _)| *id);
        for (id, v) in pending {
            let key = self.g.prefix.node(id);
            match v {
                Some(bytes) => batch.put(Cf::Views, &key, &bytes),
                None => batch.delete(Cf::Views, &key),
            }
        }
        Ok(self.file)
    }
}

impl NodeRead for StoreSink<'_> {
    fn node(&self, id: NodeId) -> tree::Result<Node> {
        let bytes = match self.pending.get(&id) {
            Some(Some(b)) => b.clone(),
            Some(None) => return Err(TreeError::Corrupted(id)),
            None => self
                .store
                .get(Cf::Views, &self.g.prefix.node(id))?
                .ok_or(TreeError::Corrupted(id))?,
        };
        Node::decode(&bytes).ok_or(TreeError::Corrupted(id))
    }
}

impl NodeSink for StoreSink<'_> {
    fn put(&mut self, id: NodeId, bytes: Vec<u8>) {
        match &mut self.file {
            // Ids are handed out in ascending order and a bulk load writes each node once.
            Some(file) if self.failed.is_none() => {
                if let Err(e) = file.put(&self.g.prefix.node(id), &bytes) {
                    self.failed = Some(e);
                }
            }
            Some(_) => {}
            None => {
                self.pending.insert(id, Some(bytes));
            }
        }
    }

    fn delete(&mut self, id: NodeId) {
        self.pending.insert(id, None);
    }

    fn next_id(&mut self) -> NodeId {
        let id = self.next;
        self.next += 1;
        id
    }

    fn leaf_rows(&mut self, rows: &[RowRef<'_>], added: bool) {
        let total = if added {
            &mut self.added
        } else {
            &mut self.removed
        };
        for r in rows {
            let s = RowSizes::of_row(r.key, r.value);
            total.active += s.active;
            total.external += s.external;
        }
    }
}

/// The sizes of every row under `roots`, read from the trees (for a checkpoint written
/// before they were kept).
pub(crate) fn measure(nodes: &dyn NodeRead, roots: &[Option<tree::Entry>]) -> Result<RowSizes> {
    let mut sizes = RowSizes::default();
    for root in roots {
        let _ = tree::fold(
            nodes,
            root.as_ref(),
            &tree::Range::all(),
            false,
            &mut |row| {
                let s = RowSizes::of_row(&row.key, &row.value);
                sizes.active += s.active;
                sizes.external += s.external;
                ControlFlow::Continue(())
            },
        )?;
    }
    Ok(sizes)
}

/// Reads nodes of a committed index from a snapshot.
pub(crate) struct SnapNodes<'s, R: Read> {
    pub read: &'s R,
    pub g: &'s Group,
}

impl<R: Read> NodeRead for SnapNodes<'_, R> {
    fn node(&self, id: NodeId) -> tree::Result<Node> {
        let bytes = self
            .read
            .get(Cf::Views, &self.g.prefix.node(id))?
            .ok_or(TreeError::Corrupted(id))?;
        Node::decode(&bytes).ok_or(TreeError::Corrupted(id))
    }
}
