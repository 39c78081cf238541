//! Update sequences as CouchDB 3 writes them: `N-<opaque>`, where the opaque part is the
//! URL-safe base64 (no padding) of `term_to_binary(SeqList, [compressed, {minor_version,1}])`
//! and `SeqList` names, per shard, the node, the range and where that shard is:
//! `[{Node, [Begin, End], {Seq, UuidPrefix, EpochNode}}]` (or a bare integer). `N` is the sum
//! of the shards' seqs and is ignored when a sequence is read back. Clients decode these
//! strings, so the bytes are CouchDB's own: zlib level 6, and only when that is not larger.
//!
//! Settee keeps one counter per database whatever its `q`: the whole seq sits on the first
//! range and the others stay at 0, so `N` is the seq. Reading a sequence back sums the
//! entries whose uuid prefix is this database's; an entry with another uuid (a deleted and
//! recreated database, another server) counts 0, and ranges this database does not have
//! are dropped, as CouchDB does.

use crate::etf::{self, Term};
use crate::Error;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// How many characters of the database uuid a sequence carries (`[fabric] uuid_prefix_len`).
pub const UUID_PREFIX_LEN: usize = 7;

/// A compressed sequence inflating beyond this is refused: a real one for `q` = 256 ranges
/// is under 40 KiB.
const MAX_INFLATED: usize = 1 << 20;

const MALFORMED: &str = "Malformed sequence supplied in 'since' parameter.";

/// A `since` value as a client may send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeqArg {
    Seq(u64),
    Now,
    /// A sequence as the entries it names, unresolved: a clustered database's, which its
    /// coordinator resolves range by range (see [`SeqCodec::clustered`]).
    Vector(Vec<ShardSeq>),
}

/// Where one shard of a packed sequence is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum At {
    /// A bare integer, taken as is: `purge_seq`'s form, and `_changes`' for a shard that
    /// has emitted nothing yet.
    Bare(u64),
    /// `{Seq, UuidPrefix, EpochNode}`, or the older `{Seq, UuidPrefix}` (no `epoch`).
    Stamped {
        seq: u64,
        uuid: Vec<u8>,
        epoch: Option<String>,
    },
    /// Any other value (a shard split's `{Seq, {split, Uuid}, Node}`): a reader rewinds.
    Other(Term),
}

/// One entry of a packed sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSeq {
    pub node: String,
    pub range: (u32, u32),
    pub at: At,
}

impl At {
    /// The shard's share of the `N-` prefix (CouchDB's `fake_packed_seq`).
    fn prefix_part(&self) -> u64 {
        match self {
            At::Bare(n) | At::Stamped { seq: n, .. } => *n,
            At::Other(_) => 0,
        }
    }

    fn term(&self) -> Term {
        match self {
            At::Bare(n) => Term::Int(i128::from(*n)),
            At::Stamped { seq, uuid, epoch } => {
                let mut items = vec![Term::Int(i128::from(*seq)), Term::Binary(uuid.clone())];
                items.extend(epoch.clone().map(Term::Atom));
                Term::Tuple(items)
            }
            At::Other(t) => t.clone(),
        }
    }

    fn from_term(t: Term) -> At {
        let seq = |t: &Term| match t {
            Term::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        match &t {
            Term::Int(_) => seq(&t).map_or(At::Other(t), At::Bare),
            Term::Tuple(items) => match items.as_slice() {
                [s, Term::Binary(uuid)] if seq(s).is_some() => At::Stamped {
                    seq: seq(s).unwrap_or(0),
                    uuid: uuid.clone(),
                    epoch: None,
                },
                [s, Term::Binary(uuid), Term::Atom(node)] if seq(s).is_some() => At::Stamped {
                    seq: seq(s).unwrap_or(0),
                    uuid: uuid.clone(),
                    epoch: Some(node.clone()),
                },
                _ => At::Other(t),
            },
            _ => At::Other(t),
        }
    }
}

/// `N-<opaque>` for these entries, byte for byte as CouchDB's `pack_seqs` writes them.
pub fn pack(entries: &[ShardSeq]) -> String {
    let sum: u64 = entries
        .iter()
        .fold(0, |acc, e| acc.saturating_add(e.at.prefix_part()));
    let list = Term::List(
        entries
            .iter()
            .map(|e| {
                Term::Tuple(vec![
                    Term::Atom(e.node.clone()),
                    Term::List(vec![
                        Term::Int(i128::from(e.range.0)),
                        Term::Int(i128::from(e.range.1)),
                    ]),
                    e.at.term(),
                ])
            })
            .collect(),
    );
    let mut body = Vec::new();
    etf::term(&list, &mut body);
    format!(
        "{sum}-{}",
        URL_SAFE_NO_PAD.encode(etf::to_binary_compressed(&body))
    )
}

/// The entries of a packed sequence. Accepts what CouchDB's `unpack_seqs` reads: optional
/// surrounding `"`, an optional `N-` prefix (ignored), compressed or plain terms.
pub fn unpack(text: &str) -> Result<Vec<ShardSeq>, Error> {
    let malformed = || Error::bad_request(MALFORMED);
    let bytes = URL_SAFE_NO_PAD
        .decode(opaque_part(text))
        .map_err(|_| malformed())?;
    let Some(Term::List(items)) = binary_to_term(&bytes) else {
        return Err(malformed());
    };
    items
        .into_iter()
        .map(|item| {
            let Term::Tuple(parts) = item else {
                return Err(malformed());
            };
            let [Term::Atom(node), Term::List(range), at] =
                <[Term; 3]>::try_from(parts).map_err(|_| malformed())?
            else {
                return Err(malformed());
            };
            let bound = |t: &Term| match t {
                Term::Int(n) => u32::try_from(*n).ok(),
                _ => None,
            };
            let range = match range.as_slice() {
                [a, b] => (
                    bound(a).ok_or_else(malformed)?,
                    bound(b).ok_or_else(malformed)?,
                ),
                _ => return Err(malformed()),
            };
            Ok(ShardSeq {
                node,
                range,
                at: At::from_term(at),
            })
        })
        .collect()
}

/// The opaque part: CouchDB's `^"?([0-9]+-)?(?<opaque>.*?)"?$`.
fn opaque_part(text: &str) -> &str {
    let s = text.strip_prefix('"').unwrap_or(text);
    let s = s.strip_suffix('"').unwrap_or(s);
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    match s[digits..].strip_prefix('-') {
        Some(rest) if digits > 0 => rest,
        _ => s,
    }
}

/// `binary_to_term`, for the terms [`etf::decode`] knows, compressed or not.
fn binary_to_term(bytes: &[u8]) -> Option<Term> {
    etf::decode(&etf::from_binary(bytes, MAX_INFLATED)?)
}

/// How one database writes and reads its sequences: this node's name, the database's ring
/// of `q` ranges, and its uuid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqCodec {
    node: String,
    ranges: Vec<(u32, u32)>,
    uuid: String,
}

impl SeqCodec {
    pub fn new(node: &str, q: u32, uuid: &str) -> SeqCodec {
        SeqCodec {
            node: node.to_string(),
            ranges: crate::shards::ranges(q),
            uuid: uuid.to_string(),
        }
    }

    fn prefix(&self) -> Vec<u8> {
        self.uuid.bytes().take(UUID_PREFIX_LEN).collect()
    }

    /// The whole `seq` on the first range, 0 on the others.
    fn entries(&self, seq: u64, at: impl Fn(u64) -> At) -> Vec<ShardSeq> {
        self.ranges
            .iter()
            .enumerate()
            .map(|(i, &range)| ShardSeq {
                node: self.node.clone(),
                range,
                at: at(if i == 0 { seq } else { 0 }),
            })
            .collect()
    }

    fn stamped(&self, seq: u64) -> At {
        At::Stamped {
            seq,
            uuid: self.prefix(),
            epoch: Some(self.node.clone()),
        }
    }

    /// A `_changes` sequence (row `seq`, `last_seq`): the ranges in ring order.
    pub fn changes_seq(&self, seq: u64) -> String {
        pack(&self.entries(seq, |s| self.stamped(s)))
    }

    /// The database's `update_seq` as its info (`GET /{db}`, `_dbs_info`) shows it: the
    /// same entries, last range first, as CouchDB's `fabric_db_info` lists them.
    pub fn update_seq(&self, seq: u64) -> String {
        let mut entries = self.entries(seq, |s| self.stamped(s));
        entries.reverse();
        pack(&entries)
    }

    /// The bare form, bare integers without uuids, in the info's order: the database's
    /// `purge_seq`, and the `update_seq` of `_all_docs` and views (`?update_seq=true`).
    pub fn bare_seq(&self, seq: u64) -> String {
        let mut entries = self.entries(seq, At::Bare);
        entries.reverse();
        pack(&entries)
    }

    /// A clustered database's, at its coordinator: no ring of its own, so [`Self::since`]
    /// gives a packed sequence's entries unresolved ([`SeqArg::Vector`]); the coordinator
    /// packs the sequences it shows itself, and this codec writes none.
    pub fn clustered() -> SeqCodec {
        SeqCodec {
            node: String::new(),
            ranges: Vec::new(),
            uuid: String::new(),
        }
    }

    /// A `since` as a client sends it: `0`, `now`, or a packed sequence (a bare integer
    /// other than 0 is refused, as CouchDB cannot unpack it either).
    pub fn since(&self, text: &str) -> Result<SeqArg, Error> {
        match text {
            "now" => Ok(SeqArg::Now),
            "0" => Ok(SeqArg::Seq(0)),
            _ if self.ranges.is_empty() => unpack(text).map(SeqArg::Vector),
            _ => unpack(text).map(|entries| SeqArg::Seq(self.resolve(&entries))),
        }
    }

    /// Where a packed sequence stands in this database: per range of its ring, the
    /// largest of the entries for that range (a uuid other than this database's counts 0,
    /// as does a range being split); ranges it does not have are dropped. Settee's one
    /// counter is the sum.
    pub fn resolve(&self, entries: &[ShardSeq]) -> u64 {
        let mut per_range = vec![0u64; self.ranges.len()];
        for e in entries {
            let Some(i) = self.ranges.iter().position(|&r| r == e.range) else {
                continue;
            };
            let seq = match &e.at {
                At::Bare(n) => *n,
                At::Stamped { seq, uuid, .. } if self.uuid.as_bytes().starts_with(uuid) => *seq,
                At::Stamped { .. } | At::Other(_) => 0,
            };
            per_range[i] = per_range[i].max(seq);
        }
        per_range.iter().fold(0, |acc, &s| acc.saturating_add(s))
    }
}

/// Whether `text` is a sequence an older Settee wrote (`N-g1AAAA` then the base64 of
/// `settee\0\0` and `N`): such values may sit in replication checkpoints; no current reader
/// accepts them.
pub fn is_legacy_settee_seq(text: &str) -> bool {
    let Some((n, rest)) = text.split_once('-') else {
        return false;
    };
    let (Ok(n), Some(tail)) = (n.parse::<u64>(), rest.strip_prefix("g1AAAA")) else {
        return false;
    };
    let mut raw = b"settee\0\0".to_vec();
    raw.extend_from_slice(&n.to_be_bytes());
    URL_SAFE_NO_PAD.decode(tail).is_ok_and(|b| b == raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NODE: &str = "couchdb-5985@127.0.0.1";

    /// Captured from CouchDB 3.5.2 (`fidb_seq1`, q=1, shard uuid 2a5c1a16…).
    const Q1_UUID: &str = "2a5c1a16e272d27a2e02316442fcb489";
    const Q1_SEQ3: &str = "3-g1AAAABZeJzLYWBgYMxgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHKA8UyJDHgvDfyDIymBOZM4FCrEbJZomGyYa4tSXBQDiSRa5";
    const Q1_SEQ1: &str = "1-g1AAAABZeJzLYWBgYMxgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHKA8UyJDHgvDfyDIymBOZMwFCrEbJZomGyYa4tSXBQDh-xa3";
    const Q1_SEQ303: &str = "303-g1AAAABceJzLYWBgYMxgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHKA8UyJDHgvDfyDIymBOAqrXzwWKshslmiYbJhri1JoFABIwFuc";
    const Q1_PURGE0: &str =
        "0-g2wAAAABaANkABZjb3VjaGRiLTU5ODVAMTI3LjAuMC4xbAAAAAJhAG4EAP____9qYQBq";
    /// An empty database (`fidb_seq0`, uuid 8076a2b1…).
    const EMPTY_UUID: &str = "8076a2b19beaddd542c69e2ac83b9ab3";
    const EMPTY_SEQ: &str = "0-g1AAAABZeJzLYWBgYMxgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHKA8UyJDHgvDfyDIymBOZMgFCrFbGJibJRol4dSXBQDc6RaS";
    /// q=2 (`fidb_seq2`): shards fe98373… (00000000-7fffffff) and e01f475… (80000000-…).
    const Q2_INFO_SEQ3: &str = "3-g1AAAACveJzLYWBgYMpgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHJB8HguQZGgAUv-BICuDOZExFyjAnmpgmGZibopTMyFzExmS6qEGMoENTEu1tDA2N8apKwsA5bgsYg";
    const Q2_CHANGES_SEQ1: &str = "1-g1AAAACIeJzLYWBgYMpgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHJB8IkNS_f___7MymBMZc4EC7GmplhbG5sY4dREyMI8FSDI0AKn_IHMTGbIAFP4jZg";
    /// `GET /fidb_seq1/_all_docs?update_seq=true` (and a view's) at 304.
    const Q1_VIEW_SEQ304: &str =
        "304-g2wAAAABaANkABZjb3VjaGRiLTU5ODVAMTI3LjAuMC4xbAAAAAJhAG4EAP____9qYgAAATBq";
    const Q2_PURGE0: &str = "0-g1AAAABheJzLYWBgYMpgTmEQS84vTc5ISdI1tbQwdTA0MtczAELDHJB8HguQZGgAUv-BICuRgZCGRIakeojKLACMiBpe";

    fn stamped(seq: u64, uuid: &str) -> At {
        At::Stamped {
            seq,
            uuid: uuid.as_bytes().to_vec(),
            epoch: Some(NODE.into()),
        }
    }

    fn entry(range: (u32, u32), at: At) -> ShardSeq {
        ShardSeq {
            node: NODE.into(),
            range,
            at,
        }
    }

    const WHOLE: (u32, u32) = (0, u32::MAX);
    const LOW: (u32, u32) = (0, 0x7fff_ffff);
    const HIGH: (u32, u32) = (0x8000_0000, u32::MAX);

    #[test]
    fn decodes_couchdb_sequences() {
        assert_eq!(
            unpack(Q1_SEQ3),
            Ok(vec![entry(WHOLE, stamped(3, "2a5c1a1"))])
        );
        assert_eq!(
            unpack(Q1_SEQ303),
            Ok(vec![entry(WHOLE, stamped(303, "2a5c1a1"))])
        );
        assert_eq!(unpack(Q1_PURGE0), Ok(vec![entry(WHOLE, At::Bare(0))]));
        assert_eq!(
            unpack(Q2_INFO_SEQ3),
            Ok(vec![
                entry(HIGH, stamped(1, "e01f475")),
                entry(LOW, stamped(2, "fe98373")),
            ])
        );
        assert_eq!(
            unpack(Q2_CHANGES_SEQ1),
            Ok(vec![
                entry(LOW, stamped(1, "fe98373")),
                entry(HIGH, At::Bare(0))
            ])
        );
        assert_eq!(
            unpack(Q2_PURGE0),
            Ok(vec![entry(HIGH, At::Bare(0)), entry(LOW, At::Bare(0))])
        );
    }

    #[test]
    fn encodes_couchdb_sequences_byte_for_byte() {
        let q1 = SeqCodec::new(NODE, 1, Q1_UUID);
        assert_eq!(q1.update_seq(3), Q1_SEQ3);
        assert_eq!(q1.changes_seq(3), Q1_SEQ3);
        assert_eq!(q1.changes_seq(1), Q1_SEQ1);
        assert_eq!(q1.update_seq(303), Q1_SEQ303);
        assert_eq!(q1.bare_seq(0), Q1_PURGE0);
        assert_eq!(q1.bare_seq(304), Q1_VIEW_SEQ304);
        assert_eq!(SeqCodec::new(NODE, 1, EMPTY_UUID).update_seq(0), EMPTY_SEQ);
        // Settee's q=2 places the whole seq on the first range; CouchDB's shards each
        // have their own uuid, so reproduce its entries through `pack`.
        for s in [Q2_INFO_SEQ3, Q2_CHANGES_SEQ1, Q2_PURGE0] {
            assert_eq!(pack(&unpack(s).unwrap()), s);
        }
        assert_eq!(SeqCodec::new(NODE, 2, "x").bare_seq(0), Q2_PURGE0);
    }

    #[test]
    fn since_as_couchdb_reads_it() {
        let db = SeqCodec::new(NODE, 1, Q1_UUID);
        let seq = |s: &str| db.since(s);
        assert_eq!(seq("0"), Ok(SeqArg::Seq(0)));
        assert_eq!(seq("now"), Ok(SeqArg::Now));
        assert_eq!(seq(Q1_SEQ3), Ok(SeqArg::Seq(3)));
        assert_eq!(seq(&format!("\"{Q1_SEQ3}\"")), Ok(SeqArg::Seq(3)));
        assert_eq!(seq(&Q1_SEQ3.replacen("3-", "999-", 1)), Ok(SeqArg::Seq(3)));
        assert_eq!(seq(&Q1_SEQ3[2..]), Ok(SeqArg::Seq(3)));
        assert_eq!(seq(Q1_PURGE0), Ok(SeqArg::Seq(0)));
        // Another database's uuid rewinds; another ring's ranges are dropped.
        assert_eq!(
            seq(EMPTY_SEQ.replacen("0-", "5-", 1).as_str()),
            Ok(SeqArg::Seq(0))
        );
        let other = SeqCodec::new(NODE, 1, EMPTY_UUID);
        assert_eq!(other.since(Q1_SEQ303), Ok(SeqArg::Seq(0)));
        assert_eq!(
            SeqCodec::new(NODE, 2, "fe98373").since(Q2_INFO_SEQ3),
            Ok(SeqArg::Seq(2))
        );
        assert_eq!(
            SeqCodec::new(NODE, 4, "fe98373").since(Q2_INFO_SEQ3),
            Ok(SeqArg::Seq(0))
        );
        // A bare integer is accepted in a range: CouchDB trusts it.
        let bare = pack(&[entry(WHOLE, At::Bare(2))]);
        assert_eq!(seq(&bare), Ok(SeqArg::Seq(2)));
        for bad in ["2", "-1", "abc", "1-xyz", "", "\"now\"", "g2QAA2Zvbw", "00"] {
            assert_eq!(
                seq(bad),
                Err(Error::bad_request(MALFORMED)),
                "{bad:?} is refused"
            );
        }
    }

    #[test]
    fn older_settee_sequences() {
        for n in [0, 7, u64::MAX] {
            let mut raw = b"settee\0\0".to_vec();
            raw.extend_from_slice(&n.to_be_bytes());
            let old = format!("{n}-g1AAAA{}", URL_SAFE_NO_PAD.encode(raw));
            assert!(is_legacy_settee_seq(&old));
            assert!(SeqCodec::new(NODE, 1, Q1_UUID).since(&old).is_err());
        }
        assert!(!is_legacy_settee_seq(Q1_SEQ3));
        assert!(!is_legacy_settee_seq("7"));
    }

    fn any_at() -> impl Strategy<Value = At> {
        prop_oneof![
            any::<u64>().prop_map(At::Bare),
            (
                any::<u64>(),
                "[0-9a-f]{0,32}",
                proptest::option::of("[a-z0-9_@.-]{1,40}")
            )
                .prop_map(|(seq, uuid, epoch)| At::Stamped {
                    seq,
                    uuid: uuid.into_bytes(),
                    epoch
                }),
            (any::<u32>(), "[0-9a-f]{7}").prop_map(|(seq, u)| At::Other(Term::Tuple(vec![
                Term::Int(i128::from(seq)),
                Term::Tuple(vec![
                    Term::Atom("split".into()),
                    Term::Binary(u.into_bytes())
                ]),
                Term::Atom(NODE.into()),
            ]))),
        ]
    }

    proptest! {
        #[test]
        fn pack_unpack_round_trip(
            entries in proptest::collection::vec(
                ("[a-z0-9_@.-]{1,40}", any::<u32>(), any::<u32>(), any_at())
                    .prop_map(|(node, a, b, at)| ShardSeq { node, range: (a, b), at }),
                0..20,
            )
        ) {
            let packed = pack(&entries);
            prop_assert_eq!(unpack(&packed), Ok(entries.clone()));
            let sum = entries.iter().fold(0u64, |acc, e| acc.saturating_add(e.at.prefix_part()));
            let prefix = format!("{sum}-");
            prop_assert!(packed.starts_with(&prefix));
        }

        #[test]
        fn a_database_reads_back_its_own_sequences(
            q in 1u32..=16, seq in any::<u64>(), uuid in "[0-9a-f]{32}", node in "[a-z]{1,10}@[a-z0-9.]{1,15}"
        ) {
            let db = SeqCodec::new(&node, q, &uuid);
            let prefix = format!("{seq}-");
            for packed in [db.changes_seq(seq), db.update_seq(seq)] {
                prop_assert!(packed.starts_with(&prefix));
                prop_assert_eq!(db.since(&packed), Ok(SeqArg::Seq(seq)));
                prop_assert_eq!(unpack(&packed).map(|e| e.len()), Ok(q as usize));
            }
            prop_assert_eq!(db.since(&db.bare_seq(seq)), Ok(SeqArg::Seq(seq)));
            let recreated = SeqCodec::new(&node, q, "ffffffffffffffffffffffffffffffff");
            if !uuid.starts_with("fffffff") {
                prop_assert_eq!(recreated.since(&db.changes_seq(seq)), Ok(SeqArg::Seq(0)));
            }
        }

        #[test]
        fn garbage_never_panics(text in "\\PC{0,200}", bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = unpack(&text);
            let mut framed = vec![etf::VERSION];
            framed.extend_from_slice(&bytes);
            let _ = unpack(&URL_SAFE_NO_PAD.encode(&framed));
            let mut zipped = vec![etf::VERSION, etf::COMPRESSED, 0, 0, 0, 100];
            zipped.extend_from_slice(&bytes);
            let _ = unpack(&URL_SAFE_NO_PAD.encode(&zipped));
        }
    }
}
