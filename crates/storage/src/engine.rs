use crate::{Cf, Error, Result};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, IngestExternalFileOptions,
    IteratorMode, Options, ReadOptions, SstFileWriter, WriteBatch, WriteBufferManager,
    WriteOptions, DB,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Entries of one family written to a file of its own ([`Store::sst_writer`]); the file is
/// removed when this is dropped (once ingested, it is the engine's).
pub struct SstWriter<'s> {
    cf: Cf,
    path: PathBuf,
    writer: SstFileWriter<'s>,
    entries: u64,
}

impl SstWriter<'_> {
    /// Adds an entry; keys must ascend.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.entries += 1;
        Ok(self.writer.put(key, value)?)
    }
}

impl Drop for SstWriter<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Tuning knobs; the defaults suit a 2-core, few-GiB machine.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// The block cache; memtables are charged to it too, so this bounds both.
    pub block_cache_bytes: usize,
    /// Largest memtable of one column family.
    pub write_buffer_bytes: usize,
    /// All memtables together (flushed early past this, whatever each family's size).
    pub memtable_budget_bytes: usize,
    pub background_jobs: i32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            block_cache_bytes: 192 << 20,
            write_buffer_bytes: 64 << 20,
            memtable_budget_bytes: 96 << 20,
            background_jobs: 4,
        }
    }
}

impl StoreOptions {
    /// The defaults with a block cache of `bytes` (at least 16 MiB): memtables get at most
    /// half of it (at least 8 MiB), so the cache still bounds both.
    pub fn with_cache(bytes: usize) -> StoreOptions {
        let d = StoreOptions::default();
        let cache = bytes.max(16 << 20);
        let budget = d.memtable_budget_bytes.min(cache / 2).max(8 << 20);
        StoreOptions {
            block_cache_bytes: cache,
            memtable_budget_bytes: budget,
            write_buffer_bytes: d.write_buffer_bytes.min(budget),
            ..d
        }
    }
}

/// What the engine reports about itself ([`Store::engine_stats`]); counters count since
/// the process started.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineStats {
    /// Bytes compaction estimates it must rewrite to bring levels to their targets.
    pub pending_compaction_bytes: u64,
    pub live_sst_bytes: u64,
    pub memtable_bytes: u64,
    pub running_compactions: u64,
    pub running_flushes: u64,
    /// Bytes in the block cache (memtables are charged to it too).
    pub block_cache_usage: u64,
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    /// fsyncs of the write-ahead log.
    pub wal_syncs: u64,
    pub wal_bytes: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
}

pub struct Store {
    db: DB,
    /// The options the database was opened with: they hold its statistics (tickers).
    db_opts: Options,
    cache: Cache,
    /// Writes since the last flush, and when the last one happened (for the idle flusher).
    unflushed_writes: AtomicU64,
    last_write: Mutex<Instant>,
    /// The last write failed: RocksDB holds a background error and refuses writes until it
    /// recovers (from `NoSpace`, once space returns) or the process restarts. Cleared by
    /// the next write that succeeds.
    write_failed: AtomicBool,
    /// Each family's options for files written outside the engine ([`SstWriter`]): laid
    /// out as the family's own, compressed at a lower level ([`bulk_options`]).
    sst_opts: Vec<(Cf, Options)>,
    /// Names the next [`SstWriter`]'s file.
    next_file: AtomicU64,
}

/// Where files to ingest are written: beside the engine's own, emptied at open (a crash
/// can leave files that were never ingested).
const INGEST_DIR: &str = "ingest";

fn cf_options(cf: Cf, cache: &Cache, opts: &StoreOptions) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_format_version(6);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut o = Options::default();
    match cf {
        // Random point lookups by document id: bloom filters pay for themselves.
        Cf::Docs | Cf::Local | Cf::Meta => {
            table.set_bloom_filter(10.0, false);
            table.set_block_size(16 << 10);
            // Most writes are of new ids: a memtable bloom filter answers "absent" without
            // walking the skiplist.
            o.set_memtable_whole_key_filtering(true);
            o.set_memtable_prefix_bloom_ratio(0.05);
        }
        // Append-mostly, read by range or by exact sequential key: big blocks compress best.
        Cf::Seqs | Cf::Bodies => {
            table.set_block_size(32 << 10);
        }
        // Index tree nodes (a few KiB each, read by exact key) and the back index.
        Cf::Views => {
            table.set_bloom_filter(10.0, false);
            table.set_block_size(16 << 10);
        }
        // Attachment chunks (64 KiB each, read in order): compressible types arrive
        // gzip-compressed already and the rest (images, archives) rarely compress.
        Cf::Atts => {
            table.set_block_size(64 << 10);
        }
    }
    // Attachment content streams through: small memtables, flushed often, so a large
    // upload does not sit in memory.
    let write_buffer = match cf {
        Cf::Atts => opts.write_buffer_bytes.min(8 << 20),
        _ => opts.write_buffer_bytes,
    };
    o.set_block_based_table_factory(&table);
    let compression = match cf {
        Cf::Atts => DBCompressionType::None,
        _ => DBCompressionType::Zstd,
    };
    o.set_compression_type(compression);
    o.set_bottommost_compression_type(compression);
    o.set_write_buffer_size(write_buffer);
    o.set_level_compaction_dynamic_level_bytes(true);
    o
}

/// A family's options for the files of a bulk load ([`Store::sst_writer`]): zstd at level
/// 1 rather than the default 3. A fresh 100k-row view index then compresses to 4.9 MB
/// instead of 5.2 MB, in ~20 ms less CPU (the two files' compression was a tenth of the
/// build); the files are ingested into the last level and rarely rewritten.
fn bulk_options(cf: Cf, mut o: Options) -> Options {
    if cf != Cf::Atts {
        o.set_compression_options(-14, 1, 0, 0);
        o.set_bottommost_compression_options(-14, 1, 0, 0, true);
    }
    o
}

impl Store {
    /// The database's directory (where work files that outgrow memory may go too).
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    pub fn open(path: &Path, opts: &StoreOptions) -> Result<Store> {
        let cache = Cache::new_lru_cache(opts.block_cache_bytes);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(opts.background_jobs);
        db_opts.set_bytes_per_sync(1 << 20);
        db_opts.set_keep_log_file_num(5);
        db_opts.set_max_total_wal_size(128 << 20);
        db_opts.set_wal_compression_type(DBCompressionType::Zstd);
        // Tickers only (no histograms or timers): per-core counters, cheap on every read
        // and write; `_prometheus` reports cache hits and WAL syncs from them.
        db_opts.enable_statistics();
        db_opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
        // Six families with 64 MiB memtables could hold ~770 MiB; one budget, charged to the
        // block cache, keeps memtables and cached blocks under one bound.
        let wbm = WriteBufferManager::new_write_buffer_manager_with_cache(
            opts.memtable_budget_bytes,
            false,
            cache.clone(),
        );
        db_opts.set_write_buffer_manager(&wbm);
        // Compactions run at the lowest CPU priority: on a small machine they otherwise take
        // a core from the requests and index builds that queued them (flushes, which
        // writers may wait on, keep normal priority).
        let mut env = rocksdb::Env::new()?;
        env.lower_thread_pool_cpu_priority();
        db_opts.set_env(&env);
        let cf_opts: Vec<(Cf, Options)> = Cf::ALL
            .iter()
            .map(|&cf| (cf, cf_options(cf, &cache, opts)))
            .collect();
        let cfs = (cf_opts.iter()).map(|(cf, o)| ColumnFamilyDescriptor::new(cf.name(), o.clone()));
        let db = DB::open_cf_descriptors(&db_opts, path, cfs)?;
        let ingest = path.join(INGEST_DIR);
        match std::fs::remove_dir_all(&ingest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => std::fs::create_dir(&ingest)?,
        }
        Ok(Store {
            db,
            db_opts,
            cache,
            unflushed_writes: AtomicU64::new(0),
            last_write: Mutex::new(Instant::now()),
            write_failed: AtomicBool::new(false),
            sst_opts: (cf_opts.into_iter())
                .map(|(cf, o)| (cf, bulk_options(cf, o)))
                .collect(),
            next_file: AtomicU64::new(0),
        })
    }

    /// A file of `cf` entries to write in ascending key order and then hand to
    /// [`Store::ingest`]: a bulk load that bypasses the memtables (nothing to flush later).
    pub fn sst_writer(&self, cf: Cf) -> Result<SstWriter<'_>> {
        let opts = &(self.sst_opts.iter())
            .find(|(c, _)| *c == cf)
            .expect("every family has options")
            .1;
        let n = self.next_file.fetch_add(1, Ordering::Relaxed);
        let path = self.path().join(INGEST_DIR).join(format!("{n}.sst"));
        let writer = SstFileWriter::create(opts);
        writer.open(&path)?;
        Ok(SstWriter {
            cf,
            path,
            writer,
            entries: 0,
        })
    }

    /// Adds the written files to their families, each whole and at once (on stable storage
    /// when this returns; later writes to the same keys win). Files of one family must
    /// not overlap one another.
    ///
    /// Snapshots taken before may see the files' keys: ingest only keys that nothing reads
    /// until a later write refers to them. A file that overlaps no other data then lands in
    /// the last level with sequence number 0, and no compaction rewrites it later (with a
    /// number above a live snapshot's, RocksDB compacts every such file again to zero it).
    pub fn ingest(&self, files: Vec<SstWriter<'_>>) -> Result<()> {
        // RocksDB refuses an empty file. The writers stay alive (their files on disk)
        // until every family took its files.
        let mut files: Vec<SstWriter<'_>> = files.into_iter().filter(|f| f.entries > 0).collect();
        for f in &mut files {
            f.writer.finish()?;
        }
        let mut opts = IngestExternalFileOptions::default();
        opts.set_move_files(true);
        opts.set_snapshot_consistency(false);
        for cf in Cf::ALL {
            let paths: Vec<&PathBuf> = (files.iter().filter(|f| f.cf == cf))
                .map(|f| &f.path)
                .collect();
            if !paths.is_empty() {
                let r = self
                    .db
                    .ingest_external_file_cf_opts(self.handle(cf), &opts, paths);
                self.note(r)?;
            }
        }
        Ok(())
    }

    /// The engine's own figures, for monitoring.
    pub fn engine_stats(&self) -> EngineStats {
        use rocksdb::properties as p;
        use rocksdb::statistics::Ticker;
        let sum = |prop: &rocksdb::properties::PropName| -> u64 {
            Cf::ALL
                .iter()
                .filter_map(|&cf| self.db.property_int_value_cf(self.handle(cf), prop).ok())
                .flatten()
                .sum()
        };
        let db = |prop: &rocksdb::properties::PropName| {
            self.db.property_int_value(prop).ok().flatten().unwrap_or(0)
        };
        let ticker = |t| self.db_opts.get_ticker_count(t);
        EngineStats {
            pending_compaction_bytes: sum(p::ESTIMATE_PENDING_COMPACTION_BYTES),
            live_sst_bytes: sum(p::LIVE_SST_FILES_SIZE),
            memtable_bytes: sum(p::CUR_SIZE_ALL_MEM_TABLES),
            running_compactions: db(p::NUM_RUNNING_COMPACTIONS),
            running_flushes: db(p::NUM_RUNNING_FLUSHES),
            block_cache_usage: self.cache.get_usage() as u64,
            block_cache_hits: ticker(Ticker::BlockCacheHit),
            block_cache_misses: ticker(Ticker::BlockCacheMiss),
            wal_syncs: ticker(Ticker::WalFileSynced),
            wal_bytes: ticker(Ticker::WalFileBytes),
            bytes_written: ticker(Ticker::BytesWritten),
            bytes_read: ticker(Ticker::BytesRead),
        }
    }

    fn handle(&self, cf: Cf) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(cf.name())
            .expect("every column family is created at open")
    }

    pub fn batch(&self) -> Batch<'_> {
        Batch {
            store: self,
            wb: WriteBatch::default(),
        }
    }

    /// Writes a batch atomically; with `sync` the WAL is fsynced before returning.
    pub fn write(&self, batch: Batch<'_>, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.note(self.db.write_opt(batch.wb, &wo))?;
        self.unflushed_writes.fetch_add(1, Ordering::Relaxed);
        *self.last_write.lock().unwrap() = Instant::now();
        Ok(())
    }

    /// Writes a batch without the write-ahead log: a crash loses it unless a flush came first.
    /// For derived data that commits its own checkpoint in the same batch (view indexes):
    /// a column family recovers to the state after some earlier batch, never half of one.
    pub fn write_unlogged(&self, batch: Batch<'_>) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        self.note(self.db.write_opt(batch.wb, &wo))?;
        self.unflushed_writes.fetch_add(1, Ordering::Relaxed);
        *self.last_write.lock().unwrap() = Instant::now();
        Ok(())
    }

    /// Records whether a write failed (see `write_failed`).
    fn note(&self, r: std::result::Result<(), rocksdb::Error>) -> Result<()> {
        self.write_failed.store(r.is_err(), Ordering::Relaxed);
        Ok(r?)
    }

    /// Whether the last write failed (RocksDB is refusing writes until it recovers).
    pub fn writes_failing(&self) -> bool {
        self.write_failed.load(Ordering::Relaxed)
    }

    /// A point read that leaves the block cache alone (for content read once, in order).
    pub fn get_uncached(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        Ok(self
            .db
            .get_pinned_cf_opt(self.handle(cf), key, &ro)?
            .map(|v| v.to_vec()))
    }

    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            store: self,
            snap: self.db.snapshot(),
        }
    }

    /// On-disk bytes (after compression) of keys in `[start, end)` of `cf`.
    pub fn approximate_size(&self, cf: Cf, start: &[u8], end: &[u8]) -> u64 {
        let range = rocksdb::Range::new(start, end);
        self.db.get_approximate_sizes_cf(self.handle(cf), &[range])[0]
    }

    /// Bytes of write-ahead log files on disk (data not yet flushed to tables).
    pub fn wal_bytes(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(self.db.path()) else {
            return 0;
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Flushes one column family's memtables to table files (waits for it). Skipped while
    /// writes are failing: a flush switches to a new WAL, and a failure there is fatal to
    /// RocksDB (it would turn a no-space error it recovers from by itself into one that
    /// needs a restart); the WAL holds the data meanwhile.
    pub fn flush_cf(&self, cf: Cf) -> Result<()> {
        if self.writes_failing() {
            return Ok(());
        }
        self.db.flush_cf(self.handle(cf))?;
        Ok(())
    }

    /// Flushes every memtable to table files (and lets RocksDB drop the WAL they needed);
    /// skipped while writes are failing, as [`Store::flush_cf`].
    pub fn flush(&self) -> Result<()> {
        if self.writes_failing() {
            return Ok(());
        }
        self.unflushed_writes.store(0, Ordering::Relaxed);
        for cf in Cf::ALL {
            self.db.flush_cf(self.handle(cf))?;
        }
        Ok(())
    }

    /// Starts a thread that flushes memtables once writes have paused for `idle`, so a
    /// quiet store keeps its data compressed in tables rather than raw in the WAL (and
    /// restarts replay little). The thread ends when the store is dropped.
    pub fn spawn_idle_flusher(self: &Arc<Self>, idle: Duration) {
        let weak: Weak<Store> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("idle-flush".into())
            .spawn(move || loop {
                std::thread::sleep(idle / 2);
                let Some(store) = weak.upgrade() else { return };
                let quiet = store.last_write.lock().unwrap().elapsed() >= idle;
                if quiet && store.unflushed_writes.load(Ordering::Relaxed) > 0 {
                    if let Err(e) = store.flush() {
                        eprintln!("settee: idle flush failed: {e}");
                    }
                }
            })
            .expect("spawn idle flusher");
    }

    /// Compacts `[start, end)` of `cf`, reclaiming space of deleted keys.
    pub fn compact_range(&self, cf: Cf, start: &[u8], end: &[u8]) {
        self.db
            .compact_range_cf(self.handle(cf), Some(start), Some(end));
    }

    /// Fsyncs the WAL (anything written without `sync` becomes durable).
    pub fn sync_wal(&self) -> Result<()> {
        self.db.flush_wal(true)?;
        Ok(())
    }

    fn read_opts(upper: &[u8]) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(upper.to_vec());
        ro
    }
}

/// Point and range reads, from the latest state ([`Store`]) or a fixed point ([`Snapshot`]).
pub trait Read {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>>;
    /// Entries with `lower <= key < upper`, ascending, or descending when `reverse`
    /// (starting from the last key below `upper`).
    fn range(&self, cf: Cf, lower: &[u8], upper: &[u8], reverse: bool) -> RangeIter<'_>;
}

pub type RangeIter<'a> = Box<dyn Iterator<Item = Result<(Box<[u8]>, Box<[u8]>)>> + 'a>;

fn collect_multi(
    results: Vec<std::result::Result<Option<Vec<u8>>, rocksdb::Error>>,
) -> Result<Vec<Option<Vec<u8>>>> {
    results
        .into_iter()
        .map(|r| r.map_err(Error::from))
        .collect()
}

fn bounded<'a>(
    iter: rocksdb::DBIteratorWithThreadMode<'a, DB>,
    lower: &[u8],
    reverse: bool,
) -> RangeIter<'a> {
    let lower = lower.to_vec();
    Box::new(iter.map(|r| r.map_err(Error::from)).take_while(move |r| {
        !reverse
            || r.as_ref()
                .map_or(true, |(k, _)| k.as_ref() >= lower.as_slice())
    }))
}

fn mode<'a>(lower: &'a [u8], reverse: bool) -> IteratorMode<'a> {
    if reverse {
        IteratorMode::End
    } else {
        IteratorMode::From(lower, rocksdb::Direction::Forward)
    }
}

impl Read for Store {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .db
            .get_pinned_cf(self.handle(cf), key)?
            .map(|v| v.to_vec()))
    }

    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let h = self.handle(cf);
        collect_multi(self.db.multi_get_cf(keys.iter().map(|k| (h, k))))
    }

    fn range(&self, cf: Cf, lower: &[u8], upper: &[u8], reverse: bool) -> RangeIter<'_> {
        let mut ro = Store::read_opts(upper);
        ro.set_iterate_lower_bound(lower.to_vec());
        bounded(
            self.db
                .iterator_cf_opt(self.handle(cf), ro, mode(lower, reverse)),
            lower,
            reverse,
        )
    }
}

pub struct Snapshot<'a> {
    store: &'a Store,
    snap: rocksdb::SnapshotWithThreadMode<'a, DB>,
}

impl<'a> Snapshot<'a> {
    /// Like `multi_get`, without copying the values out of RocksDB's blocks; the blocks
    /// read are added to the block cache only with `fill_cache`.
    pub fn multi_get_pinned(
        &self,
        cf: Cf,
        keys: &[Vec<u8>],
        fill_cache: bool,
    ) -> Result<Vec<Option<Pinned<'a>>>> {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.snap);
        ro.fill_cache(fill_cache);
        self.store
            .db
            .batched_multi_get_cf_opt(self.store.handle(cf), keys, keys.is_sorted(), &ro)
            .into_iter()
            .map(|r| Ok(r?.map(Pinned::Slice)))
            .collect()
    }

    /// Calls `f` with each entry with `lower <= key < upper`, ascending or descending, read
    /// in place (no copy per entry, unlike [`Read::range`]), until it breaks.
    pub fn each(
        &self,
        cf: Cf,
        lower: &[u8],
        upper: &[u8],
        reverse: bool,
        mut f: impl FnMut(&[u8], &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<()> {
        let mut ro = Store::read_opts(upper);
        ro.set_iterate_lower_bound(lower.to_vec());
        ro.set_snapshot(&self.snap);
        let mut it = self.store.db.raw_iterator_cf_opt(self.store.handle(cf), ro);
        if reverse {
            it.seek_to_last();
        } else {
            it.seek(lower);
        }
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if f(k, v).is_break() {
                break;
            }
            if reverse {
                it.prev();
            } else {
                it.next();
            }
        }
        it.status()?;
        Ok(())
    }

    /// The values of `keys` (ascending), read by one forward scan from the first key to the
    /// last: far cheaper than a lookup per key when the keys are most of that range (a
    /// view build reading bodies in seq order), wasteful when they are sparse in it.
    pub fn scan_values(
        &self,
        cf: Cf,
        keys: &[Vec<u8>],
        fill_cache: bool,
    ) -> Result<Vec<Option<Pinned<'a>>>> {
        let mut out = Vec::with_capacity(keys.len());
        self.scan_each(cf, keys, fill_cache, |_, v| {
            out.push(v.map(|v| Pinned::Owned(v.to_vec())))
        })?;
        Ok(out)
    }

    /// [`Snapshot::scan_values`] without the copies: `f` sees each key's position and
    /// value, read in place, in order.
    pub fn scan_each(
        &self,
        cf: Cf,
        keys: &[Vec<u8>],
        fill_cache: bool,
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
            return Ok(());
        };
        let mut upper = last.clone();
        upper.push(0);
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.snap);
        ro.fill_cache(fill_cache);
        ro.set_iterate_upper_bound(upper);
        let mut it = self.store.db.raw_iterator_cf_opt(self.store.handle(cf), ro);
        it.seek(first);
        for (i, key) in keys.iter().enumerate() {
            while it.key().is_some_and(|k| k < key.as_slice()) {
                it.next();
            }
            match (it.key(), it.value()) {
                (Some(k), Some(v)) if k == key.as_slice() => {
                    f(i, Some(v));
                    it.next();
                }
                _ => f(i, None),
            }
        }
        it.status()?;
        Ok(())
    }
}

/// A value read in place (see [`Snapshot::multi_get_pinned`]), or copied out of a scan.
pub enum Pinned<'a> {
    Slice(rocksdb::DBPinnableSlice<'a>),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Pinned<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Pinned::Slice(s) => s,
            Pinned::Owned(v) => v,
        }
    }
}

impl Read for Snapshot<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .snap
            .get_pinned_cf(self.store.handle(cf), key)?
            .map(|v| v.to_vec()))
    }

    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let h = self.store.handle(cf);
        collect_multi(self.snap.multi_get_cf(keys.iter().map(|k| (h, k))))
    }

    fn range(&self, cf: Cf, lower: &[u8], upper: &[u8], reverse: bool) -> RangeIter<'_> {
        let mut ro = Store::read_opts(upper);
        ro.set_iterate_lower_bound(lower.to_vec());
        bounded(
            self.snap
                .iterator_cf_opt(self.store.handle(cf), ro, mode(lower, reverse)),
            lower,
            reverse,
        )
    }
}

/// An atomic group of writes.
pub struct Batch<'a> {
    store: &'a Store,
    wb: WriteBatch,
}

impl Batch<'_> {
    pub fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]) {
        self.wb.put_cf(self.store.handle(cf), key, value);
    }

    pub fn delete(&mut self, cf: Cf, key: &[u8]) {
        self.wb.delete_cf(self.store.handle(cf), key);
    }

    pub fn delete_range(&mut self, cf: Cf, start: &[u8], end: &[u8]) {
        self.wb.delete_range_cf(self.store.handle(cf), start, end);
    }

    pub fn len(&self) -> usize {
        self.wb.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wb.is_empty()
    }
}
