//! The on-disk layout of a view index in the `views` column family (format version 1; see
//! `docs/design.md`):
//!
//! * `db | sig | 'M'` → the checkpoint ([`Meta`]): indexed seq, next node id, the collation
//!   the keys were encoded with, and one root [`Entry`] per view;
//! * `db | sig | 'N' | node id` → a tree node ([`crate::tree::Node`]);
//! * `db | sig | 'B' | doc id` → the back index: the tree keys the document's rows have in
//!   each view, so an update or deletion can remove them.
//!
//! `db` is the database's 8-byte id and `sig` the 16-byte signature of the view group.
//! A tree key is the collated key ([`settee_core::collate`]), the doc id (escaped, with a
//! terminator, so ids order bytewise as CouchDB orders them) and, for the second and later
//! emits of an equal key by one document, a 4-byte ordinal.

use crate::tree::Entry;
use settee_core::{collate, varint};
use settee_storage::{key_in_db, DbId};

const META_V1: u8 = 1;
const BACK_V1: u8 = 1;

/// The byte prefix of one index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexPrefix(Vec<u8>);

impl IndexPrefix {
    pub fn new(db: DbId, sig: &[u8; 16]) -> IndexPrefix {
        IndexPrefix(key_in_db(db, sig))
    }

    fn with(&self, tag: u8, rest: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.0.len() + 1 + rest.len());
        k.extend_from_slice(&self.0);
        k.push(tag);
        k.extend_from_slice(rest);
        k
    }

    pub fn meta(&self) -> Vec<u8> {
        self.with(b'M', &[])
    }

    pub fn node(&self, id: u64) -> Vec<u8> {
        self.with(b'N', &id.to_be_bytes())
    }

    pub fn back(&self, doc_id: &str) -> Vec<u8> {
        self.with(b'B', doc_id.as_bytes())
    }

    /// `[start, end)` covering every key of this index.
    pub fn range(&self) -> (Vec<u8>, Vec<u8>) {
        let mut end = self.0.clone();
        increment(&mut end);
        (self.0.clone(), end)
    }
}

/// The smallest byte string above every string that starts with `b`'s old value.
fn increment(b: &mut Vec<u8>) {
    while let Some(last) = b.last_mut() {
        if *last == 0xFF {
            b.pop();
        } else {
            *last += 1;
            return;
        }
    }
}

/// The order of one document's rows under one key: `v2` = by value (Erlang term order);
/// indexes written before (emit order) are rebuilt.
const DUP_ORDER: &str = "dups-v2";

/// The collations an index's key encodings depend on, given whether each view sorts raw,
/// and the order of equal-key rows; an index written with other ones is rebuilt.
pub fn collation_tag(raw: impl IntoIterator<Item = bool>) -> String {
    let (mut icu, mut raws) = (false, false);
    for r in raw {
        (icu, raws) = (icu || !r, raws || r);
    }
    let mut parts = Vec::new();
    if icu || !raws {
        parts.push(format!(
            "icu-{}/k{}",
            collate::collator_version(),
            collate::KEY_FORMAT_VERSION
        ));
    }
    if raws {
        parts.push(format!(
            "raw/k{}.{}",
            collate::KEY_FORMAT_VERSION,
            collate::RAW_KEY_FORMAT_VERSION
        ));
    }
    parts.push(DUP_ORDER.to_owned());
    parts.join("+")
}

/// The checkpoint of an index: everything below `seq` is in the trees under `roots`, and
/// the rows of documents purged up to `purge_seq` are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub seq: u64,
    pub next_node: u64,
    pub collation: String,
    pub roots: Vec<Option<Entry>>,
    pub purge_seq: u64,
    /// The live rows' sizes; `None` in checkpoints written before they were kept.
    pub sizes: Option<RowSizes>,
}

/// Bytes of every live row of an index (all views): `active`, as stored (tree key and
/// payload); `external`, the key's and value's JSON text (CouchDB's `sizes.external`
/// counts keys and values, uncompressed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowSizes {
    pub active: u64,
    pub external: u64,
}

impl RowSizes {
    /// The sizes of one stored row (tree key, payload).
    pub fn of_row(key: &[u8], payload: &[u8]) -> RowSizes {
        let external =
            decode_payload(payload).map_or(payload.len(), |p| p.key.len() + p.value.len());
        RowSizes {
            active: (key.len() + payload.len()) as u64,
            external: external as u64,
        }
    }
}

impl Meta {
    pub fn empty(views: usize, collation: String) -> Meta {
        Meta {
            seq: 0,
            next_node: 1,
            collation,
            roots: vec![None; views],
            purge_seq: 0,
            sizes: Some(RowSizes::default()),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![META_V1];
        varint::put(&mut out, self.seq);
        varint::put(&mut out, self.next_node);
        varint::put_bytes(&mut out, self.collation.as_bytes());
        varint::put(&mut out, self.roots.len() as u64);
        for r in &self.roots {
            match r {
                None => out.push(0),
                Some(e) => {
                    out.push(1);
                    e.encode(&mut out);
                }
            }
        }
        // Appended after the roots: checkpoints written before it decode with 0.
        varint::put(&mut out, self.purge_seq);
        // Appended after purge_seq: checkpoints written before them decode as unknown.
        if let Some(s) = self.sizes {
            varint::put(&mut out, s.active);
            varint::put(&mut out, s.external);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Meta> {
        let (&v, mut buf) = bytes.split_first()?;
        if v != META_V1 {
            return None;
        }
        let seq = varint::get(&mut buf)?;
        let next_node = varint::get(&mut buf)?;
        let collation = String::from_utf8(varint::get_bytes(&mut buf)?.to_vec()).ok()?;
        let n = varint::get(&mut buf)? as usize;
        let mut roots = Vec::with_capacity(n);
        for _ in 0..n {
            let (&tag, rest) = buf.split_first()?;
            buf = rest;
            roots.push(match tag {
                0 => None,
                _ => Some(Entry::decode(&mut buf)?),
            });
        }
        let purge_seq = if buf.is_empty() {
            0
        } else {
            varint::get(&mut buf)?
        };
        let sizes = if buf.is_empty() {
            None
        } else {
            Some(RowSizes {
                active: varint::get(&mut buf)?,
                external: varint::get(&mut buf)?,
            })
        };
        Some(Meta {
            seq,
            next_node,
            collation,
            roots,
            purge_seq,
            sizes,
        })
    }
}

/// Appends the doc-id part of a tree key: `0x00` escaped as `0x00 0xFF`, then `0x00 0x01`.
pub fn push_doc_id(out: &mut Vec<u8>, id: &str) {
    let bytes = id.as_bytes();
    // Ids rarely hold a zero byte: copied whole then (a test that vectorizes: no early
    // exit).
    if !bytes.iter().fold(false, |zero, &b| zero | (b == 0)) {
        out.extend_from_slice(bytes);
    } else {
        for &b in bytes {
            out.push(b);
            if b == 0 {
                out.push(0xFF);
            }
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// The tree-key prefix of a partition's rows in a partitioned view: the partition escaped
/// and terminated as doc ids are, so each partition's rows are one contiguous, prefix-free
/// byte range (the order between partitions is never observable).
pub fn partition_prefix(partition: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(partition.len() + 2);
    push_doc_id(&mut out, partition);
    out
}

/// The first byte string after every key that starts with `partition_prefix(..)`.
pub fn partition_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    *end.last_mut().expect("terminated prefix") += 1;
    end
}

/// The tree key of a row: encoded key, doc id, and the ordinal among equal emits.
pub fn tree_key(enc_key: &[u8], doc_id: &str, dup: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(enc_key.len() + doc_id.len() + 6);
    k.extend_from_slice(enc_key);
    push_doc_id(&mut k, doc_id);
    if dup > 0 {
        k.extend_from_slice(&dup.to_be_bytes());
    }
    k
}

/// The length of a tree key without its emit ordinal: the part that rows of one document
/// under one key share.
pub fn row_prefix_len(tree_key: &[u8]) -> Option<usize> {
    let mut i = collate::encoded_len(tree_key)?;
    loop {
        match tree_key.get(i..i + 2)? {
            [0x00, 0x01] => return Some(i + 2),
            [0x00, 0xFF] => i += 2,
            _ => i += 1,
        }
    }
}

/// A row's stored value: the doc id, the key's JSON text and the value's JSON text.
pub fn encode_payload(doc_id: &str, key_json: &[u8], value_json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc_id.len() + key_json.len() + value_json.len() + 6);
    varint::put_bytes(&mut out, doc_id.as_bytes());
    varint::put_bytes(&mut out, key_json);
    out.extend_from_slice(value_json);
    out
}

pub struct Payload<'a> {
    pub doc_id: &'a str,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

pub fn decode_payload(mut buf: &[u8]) -> Option<Payload<'_>> {
    let doc_id = std::str::from_utf8(varint::get_bytes(&mut buf)?).ok()?;
    let key = varint::get_bytes(&mut buf)?;
    Some(Payload {
        doc_id,
        key,
        value: buf,
    })
}

/// The back index value: per row, its view number and tree key.
pub fn encode_back<K: AsRef<[u8]>>(rows: &[(u32, K)]) -> Vec<u8> {
    let mut out = vec![BACK_V1];
    varint::put(&mut out, rows.len() as u64);
    for (view, key) in rows {
        varint::put(&mut out, u64::from(*view));
        varint::put_bytes(&mut out, key.as_ref());
    }
    out
}

pub fn decode_back(bytes: &[u8]) -> Option<Vec<(u32, Vec<u8>)>> {
    let (&v, mut buf) = bytes.split_first()?;
    if v != BACK_V1 {
        return None;
    }
    let n = varint::get(&mut buf)? as usize;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        let view = u32::try_from(varint::get(&mut buf)?).ok()?;
        rows.push((view, varint::get_bytes(&mut buf)?.to_vec()));
    }
    Some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_ids_order_bytewise_after_equal_keys() {
        let ids = ["", "\0", "\0a", "a", "a\0", "a\0\0", "ab", "b"];
        let keys: Vec<Vec<u8>> = ids.iter().map(|id| tree_key(b"\x05", id, 0)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        // Dups follow the first emit of the same key and doc.
        assert!(tree_key(b"\x05", "a", 0) < tree_key(b"\x05", "a", 1));
        assert!(tree_key(b"\x05", "a", 7) < tree_key(b"\x05", "a\0", 0));
        // Zero bytes are escaped, wherever they are.
        assert_eq!(tree_key(b"", "ab", 0), b"ab\0\x01");
        assert_eq!(tree_key(b"", "\0a\0", 0), b"\0\xFFa\0\xFF\0\x01");
    }

    #[test]
    fn row_prefix_drops_only_the_ordinal() {
        let mut enc = Vec::new();
        collate::encode_key(&serde_json::json!(["k", 1]), &mut enc);
        for id in ["a", "a\0b", "\0"] {
            let first = tree_key(&enc, id, 0);
            assert_eq!(row_prefix_len(&first), Some(first.len()));
            let later = tree_key(&enc, id, 3);
            assert_eq!(row_prefix_len(&later), Some(first.len()));
        }
    }

    #[test]
    fn meta_and_back_round_trip() {
        let m = Meta {
            seq: 9,
            next_node: 77,
            collation: collation_tag([false]),
            roots: vec![
                None,
                Some(Entry {
                    last: vec![1, 2],
                    child: 5,
                    count: 3,
                    red: b"\x01[1]".to_vec(),
                }),
            ],
            purge_seq: 4,
            sizes: Some(RowSizes {
                active: 300,
                external: 200,
            }),
        };
        assert_eq!(Meta::decode(&m.encode()), Some(m.clone()));
        // A checkpoint written before the sizes were kept reads as sizes unknown...
        let older = Meta { sizes: None, ..m };
        assert_eq!(Meta::decode(&older.encode()), Some(older.clone()));
        // ... and one written before purge_seq was recorded as purge_seq 0.
        let mut old = older.encode();
        old.pop();
        assert_eq!(Meta::decode(&old).map(|o| o.purge_seq), Some(0));
        let back = vec![(0, vec![1u8, 2]), (3, vec![])];
        assert_eq!(decode_back(&encode_back(&back)), Some(back));
        let p = encode_payload("id", b"[1]", b"{\"a\":2}");
        let d = decode_payload(&p).unwrap();
        assert_eq!(
            (d.doc_id, d.key, d.value),
            ("id", &b"[1]"[..], &b"{\"a\":2}"[..])
        );
    }
}
