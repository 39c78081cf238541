//! The storage seam: the only crate that names RocksDB.
//!
//! One RocksDB instance per data directory holds every database. Each logical table is a
//! column family ([`Cf`]); every key in the per-database families starts with the
//! database's numeric id (8 bytes, big-endian), so deleting a database is one range delete
//! per family and re-creating a name (which gets a new id) starts empty.
//!
//! Threading contract: [`Store`] is `Send + Sync`; any number of threads may read and write
//! concurrently. Atomicity is per [`Batch`]; a batch written with `sync = true` is on stable
//! storage (WAL fsynced) when `write` returns. Iterators and [`Snapshot`] reads see one
//! consistent point in time.

mod engine;
mod keys;

pub use engine::{Batch, EngineStats, Pinned, Read, Snapshot, SstWriter, Store, StoreOptions};
pub use keys::{db_prefix, db_range, key_in_db, seq_key, DbId};

/// The column families. Their key and value layouts are given in `docs/design.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cf {
    /// Server-level records: database names → ids, per-database stats and properties.
    Meta,
    /// `db | docid` → document info (revision tree, seq).
    Docs,
    /// `db | seq` → docid: the changes index; one entry per document, at its latest seq.
    Seqs,
    /// `db | body-id` → raw JSON body of a leaf revision.
    Bodies,
    /// `db | docid` → local (non-replicated) document.
    Local,
    /// `db | signature | …` → view indexes: tree nodes, the doc id → rows back index and
    /// the checkpoint (layout in `docs/design.md`).
    Views,
    /// `db | 'C' | attachment-id | chunk` → attachment bytes; `db | 'D' | md5` → the
    /// attachment id holding that content (one copy per database).
    Atts,
}

impl Cf {
    pub const ALL: [Cf; 7] = [
        Cf::Meta,
        Cf::Docs,
        Cf::Seqs,
        Cf::Bodies,
        Cf::Local,
        Cf::Views,
        Cf::Atts,
    ];
    /// The families whose keys start with a database id.
    pub const PER_DB: [Cf; 6] = [
        Cf::Docs,
        Cf::Seqs,
        Cf::Bodies,
        Cf::Local,
        Cf::Views,
        Cf::Atts,
    ];

    fn name(self) -> &'static str {
        match self {
            Cf::Meta => "meta",
            Cf::Docs => "docs",
            Cf::Seqs => "seqs",
            Cf::Bodies => "bodies",
            Cf::Local => "local",
            Cf::Views => "views",
            Cf::Atts => "atts",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("storage engine: {0}")]
    Engine(#[from] rocksdb::Error),
    #[error("corrupted data: {0}")]
    Corrupted(String),
    #[error("file for ingestion: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The file system is full (`ENOSPC`): RocksDB's `NoSpace` I/O error, from the write
    /// that hit it or, while RocksDB waits for space to return, from every later write.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Engine(e) => {
                e.kind() == rocksdb::ErrorKind::IOError
                    && e.as_ref().contains("No space left on device")
            }
            Error::Io(e) => e.kind() == std::io::ErrorKind::StorageFull,
            Error::Corrupted(_) => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
