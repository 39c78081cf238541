//! Pure CouchDB domain logic, with no I/O: revision ids, revision trees (merge, stem,
//! winner), document parsing rules, database-name and document-id rules, and CouchDB's
//! update-sequence encoding. Everything here is a function over values so it can be property-tested.

pub mod collate;
pub mod dates;
pub mod design;
mod doc;
mod error;
pub mod etf;
pub mod json_raw;
pub mod json_scan;
mod names;
pub mod node;
pub mod recent;
pub mod reduce;
mod rev;
mod revtree;
pub mod rewrite;
pub mod seq;
pub mod shards;
pub mod uuids;
pub mod varint;

pub use doc::{
    attachment_bytes, join_stored, parse_doc, split_encodings, split_stored, DocJson, ParsedDoc,
    MAX_DOCUMENT_SIZE,
};
pub use error::Error;
pub use names::{
    is_shard_name, partition_id_range, partition_of, shard_db, shard_name, validate_db_name,
    validate_doc_id, validate_partition, validate_partitioned_doc_id, DocKind, MAX_PARTITION_SIZE,
};
pub use rev::{body_term, new_rev_id, new_rev_id_with, Rev, RevId};
pub use revtree::{Leaf, NodeStatus, RevTree};
pub use seq::{SeqArg, SeqCodec};
