//! Value formats stored by the document store (see docs/design.md, "Values").

use settee_core::{varint, Leaf, RevTree};
use settee_storage::Error as StorageError;

const DOCINFO_V1: u8 = 1;
const STATS_V1: u8 = 1;

fn corrupt_info() -> StorageError {
    StorageError::Corrupted("document info".into())
}

/// What the `docs` family holds per document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DocInfo {
    /// The document's latest update sequence (its key in the `seqs` family).
    pub seq: u64,
    /// Bytes of the latest body written (the document's share of CouchDB's "external" size).
    pub body_bytes: u64,
    pub tree: RevTree,
}

impl DocInfo {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + 24 * self.tree.len());
        out.push(DOCINFO_V1);
        varint::put(&mut out, self.seq);
        varint::put(&mut out, self.body_bytes);
        self.tree.encode(&mut out);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StorageError> {
        let corrupt = corrupt_info;
        let (&v, mut rest) = bytes.split_first().ok_or_else(corrupt)?;
        if v != DOCINFO_V1 {
            return Err(corrupt());
        }
        let seq = varint::get(&mut rest).ok_or_else(corrupt)?;
        let body_bytes = varint::get(&mut rest).ok_or_else(corrupt)?;
        let tree = RevTree::decode(&mut rest).ok_or_else(corrupt)?;
        Ok(DocInfo {
            seq,
            body_bytes,
            tree,
        })
    }

    /// The winning leaf of an encoded info, without decoding the whole tree.
    pub fn decode_winner(bytes: &[u8]) -> Result<Option<Leaf>, StorageError> {
        let (_, tree) = Self::split(bytes)?;
        RevTree::decode_winner(tree).ok_or_else(corrupt_info)
    }

    /// The sequence and the leaves (winner first) of an encoded info, without decoding
    /// the whole tree: what a view maps of a document.
    pub fn decode_leaves(bytes: &[u8]) -> Result<(u64, Vec<Leaf>), StorageError> {
        let (seq, tree) = Self::split(bytes)?;
        Ok((seq, RevTree::decode_leaves(tree).ok_or_else(corrupt_info)?))
    }

    /// An encoded info's sequence alone.
    pub fn decode_seq(bytes: &[u8]) -> Result<u64, StorageError> {
        Ok(Self::split(bytes)?.0)
    }

    /// An encoded info's sequence and its encoded tree.
    fn split(bytes: &[u8]) -> Result<(u64, &[u8]), StorageError> {
        let (&v, mut rest) = bytes.split_first().ok_or_else(corrupt_info)?;
        if v != DOCINFO_V1 {
            return Err(corrupt_info());
        }
        let seq = varint::get(&mut rest).ok_or_else(corrupt_info)?;
        varint::get(&mut rest).ok_or_else(corrupt_info)?;
        Ok((seq, rest))
    }

    /// Whether the winning revision is deleted (a document with no live leaf).
    pub fn is_deleted(&self) -> bool {
        self.tree.winner().is_none_or(|w| w.deleted)
    }
}

/// Per-database counters, rewritten in the same batch as every write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub update_seq: u64,
    pub doc_count: u64,
    pub doc_del_count: u64,
    pub purge_seq: u64,
    /// Uncompressed bytes of all leaf bodies.
    pub external: u64,
    /// Uncompressed bytes of every live key and value of the database.
    pub active: u64,
}

impl Stats {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![STATS_V1];
        for v in [
            self.update_seq,
            self.doc_count,
            self.doc_del_count,
            self.purge_seq,
            self.external,
            self.active,
        ] {
            varint::put(&mut out, v);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupted("database stats".into());
        let (&v, mut rest) = bytes.split_first().ok_or_else(corrupt)?;
        if v != STATS_V1 {
            return Err(corrupt());
        }
        let mut next = || varint::get(&mut rest).ok_or_else(corrupt);
        Ok(Stats {
            update_seq: next()?,
            doc_count: next()?,
            doc_del_count: next()?,
            purge_seq: next()?,
            external: next()?,
            active: next()?,
        })
    }
}

/// Counters of one partition of a partitioned database (`meta::partition_key`), kept by
/// the writer in the same batch as the documents they count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionStats {
    pub doc_count: u64,
    pub doc_del_count: u64,
    /// Uncompressed bytes of the partition's current bodies (as `Stats::external`).
    pub external: u64,
    /// Uncompressed bytes of the partition's live keys and values (as `Stats::active`).
    pub active: u64,
}

impl PartitionStats {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![PARTITION_STATS_V1];
        for v in [
            self.doc_count,
            self.doc_del_count,
            self.external,
            self.active,
        ] {
            varint::put(&mut out, v);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupted("partition stats".into());
        let (&v, mut rest) = bytes.split_first().ok_or_else(corrupt)?;
        if v != PARTITION_STATS_V1 {
            return Err(corrupt());
        }
        let mut next = || varint::get(&mut rest).ok_or_else(corrupt);
        Ok(PartitionStats {
            doc_count: next()?,
            doc_del_count: next()?,
            external: next()?,
            active: next()?,
        })
    }

    pub fn is_empty(&self) -> bool {
        *self == PartitionStats::default()
    }
}

const PARTITION_STATS_V1: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use settee_core::RevId;

    #[test]
    fn roundtrips() {
        let mut tree = RevTree::new();
        tree.add_path(1, &[RevId::from_bytes(b"x")], false, Some(3));
        let d = DocInfo {
            seq: 9,
            body_bytes: 12,
            tree,
        };
        assert_eq!(DocInfo::decode(&d.encode()).unwrap(), d);
        let s = Stats {
            update_seq: 1,
            doc_count: 2,
            doc_del_count: 3,
            purge_seq: 4,
            external: 5,
            active: 6,
        };
        assert_eq!(Stats::decode(&s.encode()).unwrap(), s);
        let p = PartitionStats {
            doc_count: 7,
            doc_del_count: 8,
            external: 9,
            active: 300,
        };
        assert_eq!(PartitionStats::decode(&p.encode()).unwrap(), p);
        assert!(DocInfo::decode(&[9]).is_err());
    }
}
