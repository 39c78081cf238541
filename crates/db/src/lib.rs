//! The document store: the set of databases, one writer per database that coalesces
//! concurrent updates into one fsynced batch (group commit), and consistent reads
//! (documents, `_all_docs`, `_changes`, `_revs_diff`, local documents).
//!
//! Everything here is blocking: callers on an async runtime run reads on a blocking thread
//! and await writes through the oneshot reply each write carries.

mod atts;
mod couch;
mod database;
pub mod disk;
mod docinfo;
mod error;
mod meta;
mod writer;

pub use atts::{AttChunks, AttData, AttWriter, CHUNK as ATT_CHUNK};
pub use couch::{Config, Couch, DbEvent, DbEventKind};
pub use database::{
    AllDocsRow, Change, CompactPhase, CompactProgress, Database, DbInfo, DocLeaves, IdRevs,
    LiveDoc, LocalDoc, OpenDoc, Props, RevsDiff,
};
pub use docinfo::{DocInfo, PartitionStats, Stats};
pub use error::{Error, Result};
pub use writer::{LocalUpdate, UpdateResult};
