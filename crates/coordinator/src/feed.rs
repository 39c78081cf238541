//! A clustered database's `_changes` arithmetic, as CouchDB's `fabric_view_changes` does
//! it. Pure: the client's `since`, the map and the copies' answers in; where to ask, the
//! rows and the sequences they show out.
//!
//! A clustered feed's sequence is a vector: per range, in ring order, the copy read and
//! where it stands in that copy (`{Node, [Begin, End], {Seq, UuidPrefix, EpochNode}}`,
//! or a bare `0` before the range has shown anything), packed as CouchDB packs it
//! ([`settee_core::seq::pack`]). Every row shows the vector as it stands after that row,
//! so a client resumes from any row on any member. A `since` naming a copy that is gone
//! (its member down, its range moved) resumes that range on another copy where that
//! copy's internal replication checkpoints vouch for it ([`resume_on`], as CouchDB's
//! `mem3_rep:find_source_seq`), else from 0: rows may be seen twice, never missed. A
//! recreated copy (another uuid) rewinds to 0 itself. A `since` naming a copy that was
//! split resumes each half on the same member where the split's copies into it vouch
//! ([`resume_split`], as CouchDB's `mem3_rep:find_split_target_seq`), else from 0.

use serde_json::Value;
use settee_core::seq::{self, At, ShardSeq};
use settee_core::SeqArg;

/// Where a feed stands on one range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangePos {
    pub bounds: (u32, u32),
    /// The member whose copy the feed reads.
    pub node: String,
    pub at: At,
}

/// How a range's feed starts: its copies in the order to try them, and what the first
/// is asked from (the others are asked from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub order: Vec<String>,
    pub first: From,
    /// The member and place the vector gave for this range when that copy is not read
    /// any more (its member not running, or the range moved off it): where the first
    /// copy may resume instead of 0 ([`resume_on`]).
    pub lost: Option<(String, At)>,
    /// The place the vector gave in the copy this range was split from, on the member
    /// read first (which held that copy): where this half may resume instead of 0
    /// ([`resume_split`]).
    pub split: Option<At>,
}

/// What a copy is asked from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum From {
    Zero,
    Now,
    /// A place in that copy, as a vector gave it.
    At(At),
}

/// A copy's `_changes` answer, as it was asked.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyFeed {
    pub node: String,
    pub results: Vec<Value>,
    pub last_seq: String,
    pub pending: u64,
}

/// The bounds of a range named as CouchDB names them (`00000000-7fffffff`).
pub fn bounds(range: &str) -> Option<(u32, u32)> {
    let (b, e) = range.split_once('-')?;
    Some((
        u32::from_str_radix(b, 16).ok()?,
        u32::from_str_radix(e, 16).ok()?,
    ))
}

/// Where each range (`(bounds, its copies' members)`, ring order) starts for `since`:
/// `me`'s copy first (no network hop), unless the vector names another running copy.
/// `running` tells whether a member runs now.
pub fn starts(
    ranges: &[((u32, u32), Vec<String>)],
    since: &SeqArg,
    me: &str,
    running: impl Fn(&str) -> bool,
) -> Vec<Start> {
    ranges
        .iter()
        .map(|(range, nodes)| {
            let mut order: Vec<String> = (nodes.iter().filter(|n| *n == me))
                .chain(nodes.iter().filter(|n| *n != me))
                .cloned()
                .collect();
            let mut lost = None;
            let mut split = None;
            let first = match since {
                SeqArg::Now => From::Now,
                SeqArg::Seq(_) => From::Zero,
                SeqArg::Vector(entries) => {
                    let of_range = || entries.iter().filter(|e| e.range == *range);
                    let named = of_range()
                        .filter(|e| nodes.contains(&e.node) && running(&e.node))
                        .max_by_key(|e| seq_of(&e.at));
                    match named {
                        Some(e) => {
                            order.retain(|n| *n != e.node);
                            order.insert(0, e.node.clone());
                            From::At(e.at.clone())
                        }
                        None if of_range().next().is_none() => {
                            // A range split since: its half on the member whose copy
                            // the vector read.
                            let whole = (entries.iter()).find(|e| {
                                e.range.0 <= range.0
                                    && range.1 <= e.range.1
                                    && nodes.contains(&e.node)
                                    && running(&e.node)
                            });
                            if let Some(e) = whole {
                                order.retain(|n| *n != e.node);
                                order.insert(0, e.node.clone());
                                split = Some(e.at.clone());
                            }
                            From::Zero
                        }
                        None => {
                            lost = (of_range().max_by_key(|e| seq_of(&e.at)))
                                .map(|e| (e.node.clone(), e.at.clone()));
                            From::Zero
                        }
                    }
                }
            };
            Start {
                order,
                first,
                lost,
                split,
            }
        })
        .collect()
}

fn seq_of(at: &At) -> u64 {
    match at {
        At::Bare(n) | At::Stamped { seq: n, .. } => *n,
        At::Other(_) => 0,
    }
}

/// Where a copy may resume a feed that read another copy of its range (the lost one) up
/// to `lost`, from `history`: the history of its own pushes to that copy (its internal
/// replication checkpoint's, each entry with `recorded_seq`, its own place, and
/// `target_seq`, where the lost copy stood once the push was in it). Every document the
/// copy held at an entry's `recorded_seq` was in the lost copy at or before its
/// `target_seq`; so at the newest entry whose `target_seq` is not past `lost` (on the
/// same instance: the same uuid prefix when both carry one), the feed has seen all of
/// them, and resumes there. `None`: no entry vouches (the feed starts from 0).
pub fn resume_on(history: &[Value], lost: &At) -> Option<At> {
    vouched(history, lost, "target_seq", "recorded_seq")
}

/// Where a half may resume a feed that read the copy it was split from up to `whole`,
/// from `history`: that of the split's copies into the half (its checkpoint's, each entry
/// with `recorded_seq`, the copy's place, and `target_seq`, where the half stood once the
/// copy up to there was in it, and nothing past it was: recorded only at checkpoints
/// with no batch in flight, and not once the map named the halves, as the half took
/// writes of its own by then). At the newest entry whose `recorded_seq`
/// is not past `whole` (on the same instance), every document the half held came from
/// the copy's changes the feed has seen, so the half resumes at its `target_seq`.
/// `None`: no entry vouches (the half starts from 0).
pub fn resume_split(history: &[Value], whole: &At) -> Option<At> {
    vouched(history, whole, "recorded_seq", "target_seq")
}

/// Of `history`'s entries whose place `known` (a field: `recorded_seq`, `target_seq`) is
/// not past `at`, on the same instance (the same uuid prefix when both carry one), the
/// furthest place `resume` (the other field); `None` when none is, or it is 0.
fn vouched(history: &[Value], at: &At, known: &str, resume: &str) -> Option<At> {
    let instance = match at {
        At::Stamped { uuid, .. } => Some(uuid),
        _ => None,
    };
    (history.iter())
        .filter_map(|entry| {
            let seen = copy_place(entry.get(known)?, true);
            let same = match (&seen, instance) {
                (At::Stamped { uuid, .. }, Some(at)) => uuid == at,
                _ => true,
            };
            let there = copy_place(entry.get(resume)?, true);
            (same && seq_of(&seen) <= seq_of(at)).then_some(there)
        })
        .max_by_key(seq_of)
        .filter(|place| seq_of(place) > 0)
}

/// The `since` a copy on `node` is asked from. A copy is a database of one range whose
/// counter sits on the whole ring, so a place is given on `[0, 2^32-1]`; the copy counts
/// it only when the uuid prefix is its own.
pub fn copy_since(node: &str, from: &From) -> String {
    match from {
        From::Zero | From::At(At::Bare(0)) => "0".into(),
        From::Now => "now".into(),
        From::At(at) => seq::pack(&[ShardSeq {
            node: node.to_owned(),
            range: (0, u32::MAX),
            at: at.clone(),
        }]),
    }
}

/// The packed vector.
pub fn pack(vector: &[RangePos]) -> String {
    let entries: Vec<ShardSeq> = vector
        .iter()
        .map(|p| ShardSeq {
            node: p.node.clone(),
            range: p.bounds,
            at: p.at.clone(),
        })
        .collect();
    seq::pack(&entries)
}

/// A copy's place as its own feed shows it: `N-…` where `N` is its counter, stamped with
/// the uuid prefix and epoch its sequences carry.
fn place(copy_seq: &str, stamp: &Option<(Vec<u8>, Option<String>)>) -> At {
    let n = copy_seq
        .trim_matches('"')
        .split('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match stamp {
        Some((uuid, epoch)) => At::Stamped {
            seq: n,
            uuid: uuid.clone(),
            epoch: epoch.clone(),
        },
        None => At::Bare(n),
    }
}

/// A copy's place as one of its own sequences (`N-…`, or a number) shows it: stamped with
/// the uuid prefix and epoch the sequence carries, or bare.
pub fn copy_place(copy_seq: &Value, stamped: bool) -> At {
    match copy_seq {
        Value::String(s) if stamped => place(s, &stamp_of(s)),
        Value::String(s) => place(s, &None),
        Value::Number(n) => At::Bare(n.as_u64().unwrap_or(0)),
        _ => At::Bare(0),
    }
}

/// The uuid prefix and epoch a copy's sequences carry.
fn stamp_of(copy_seq: &str) -> Option<(Vec<u8>, Option<String>)> {
    seq::unpack(copy_seq)
        .ok()?
        .into_iter()
        .find_map(|e| match e.at {
            At::Stamped { uuid, epoch, .. } => Some((uuid, epoch)),
            _ => None,
        })
}

/// What a round of a feed sends.
#[derive(Debug, Default, PartialEq)]
pub struct Round {
    /// Each row with the sequence it shows (`None`: `null`, by `seq_interval`).
    pub rows: Vec<(Option<String>, Value)>,
    /// Rows the copies hold past the vector.
    pub pending: u64,
}

/// Folds the copies' answers (one per range, ring order) into `vector` and the rows to
/// send: range after range, at most `left` rows. A range whose rows all went out stands
/// where its copy's feed ended; one cut short at its last row sent. `sent` counts the
/// rows the feed sent before, and `limit` is its limit, for `seq_interval`, whose rows show
/// their sequence only while the rows left to the limit are a multiple of it (as a node's
/// feed counts them). A descending feed's ranges start at their copies' ends.
pub fn fold(
    vector: &mut [RangePos],
    answers: Vec<CopyFeed>,
    left: u64,
    (limit, sent, interval): (u64, u64, Option<u64>),
    descending: bool,
) -> Round {
    let stamps: Vec<_> = answers.iter().map(|a| stamp_of(&a.last_seq)).collect();
    for ((pos, answer), stamp) in vector.iter_mut().zip(&answers).zip(&stamps) {
        if pos.node != answer.node {
            // Another copy than the vector's, read from 0.
            pos.node = answer.node.clone();
            pos.at = At::Bare(0);
        }
        if descending {
            // A descending feed starts each range at its copy's end: its first row.
            let first = answer.results.first().and_then(|r| r["seq"].as_str());
            pos.at = place(first.unwrap_or(&answer.last_seq), stamp);
        }
    }
    let mut round = Round::default();
    for ((i, answer), stamp) in answers.into_iter().enumerate().zip(&stamps) {
        let total = answer.results.len() as u64;
        let mut taken = 0u64;
        for mut row in answer.results {
            if round.rows.len() as u64 >= left {
                break;
            }
            vector[i].at = place(row["seq"].as_str().unwrap_or("0"), stamp);
            let sent_now = sent + round.rows.len() as u64;
            let seq = interval
                .is_none_or(|n| (limit - sent_now).is_multiple_of(n))
                .then(|| pack(vector));
            row["seq"] = seq.clone().map_or(Value::Null, Value::String);
            round.rows.push((seq, row));
            taken += 1;
        }
        if taken == total && left > 0 {
            vector[i].at = place(&answer.last_seq, stamp);
        }
        round.pending += answer.pending + (total - taken);
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LOW: (u32, u32) = (0, 0x7fff_ffff);
    const HIGH: (u32, u32) = (0x8000_0000, u32::MAX);

    fn ranges() -> Vec<((u32, u32), Vec<String>)> {
        let nodes = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        vec![(LOW, nodes.clone()), (HIGH, nodes)]
    }

    fn stamped(seq: u64, uuid: &str, node: &str) -> At {
        At::Stamped {
            seq,
            uuid: uuid.as_bytes().to_vec(),
            epoch: Some(node.into()),
        }
    }

    /// What a copy on `node` (uuid `uuid`) shows for its place `n`.
    fn copy_seq(node: &str, uuid: &str, n: u64) -> String {
        seq::pack(&[ShardSeq {
            node: node.into(),
            range: (0, u32::MAX),
            at: stamped(n, uuid, node),
        }])
    }

    fn copy_feed(node: &str, uuid: &str, ids_seqs: &[(&str, u64)], last: u64) -> CopyFeed {
        CopyFeed {
            node: node.into(),
            results: (ids_seqs.iter())
                .map(|(id, n)| json!({"seq": copy_seq(node, uuid, *n), "id": id, "changes": []}))
                .collect(),
            last_seq: copy_seq(node, uuid, last),
            pending: 0,
        }
    }

    fn start_vector(starts: &[Start]) -> Vec<RangePos> {
        (starts.iter().zip([LOW, HIGH]))
            .map(|(s, bounds)| RangePos {
                bounds,
                node: s.order[0].clone(),
                at: match &s.first {
                    From::At(at) => at.clone(),
                    _ => At::Bare(0),
                },
            })
            .collect()
    }

    #[test]
    fn a_feed_from_zero_reads_this_members_copies_first() {
        let starts = starts(&ranges(), &SeqArg::Seq(0), "b", |_| true);
        assert_eq!(starts[0].order, ["b", "a", "c"]);
        assert_eq!(starts[1].first, From::Zero);
        assert_eq!(copy_since("b", &From::Zero), "0");
        assert_eq!(copy_since("b", &From::Now), "now");
    }

    #[test]
    fn a_vector_names_the_copies_to_resume_on_unless_they_are_down() {
        let since = SeqArg::Vector(vec![
            ShardSeq {
                node: "c".into(),
                range: LOW,
                at: stamped(5, "u1", "c"),
            },
            ShardSeq {
                node: "a".into(),
                range: HIGH,
                at: stamped(7, "u2", "a"),
            },
        ]);
        let starts = starts(&ranges(), &since, "b", |n| n != "a");
        assert_eq!(starts[0].order, ["c", "b", "a"]);
        assert_eq!(starts[0].first, From::At(stamped(5, "u1", "c")));
        // `a` is down: its range starts on this member's copy, from where that copy's
        // checkpoints vouch for `a`'s place (else from 0).
        assert_eq!(starts[1].order, ["b", "a", "c"]);
        assert_eq!(starts[1].first, From::Zero);
        assert_eq!(starts[1].lost, Some(("a".into(), stamped(7, "u2", "a"))));
        assert_eq!(starts[0].lost, None);
        // The copy is asked from its place on its whole ring, and counts it only if the
        // uuid prefix is its own.
        let asked = seq::unpack(&copy_since("c", &starts[0].first)).unwrap();
        assert_eq!(asked[0].range, (0, u32::MAX));
        assert_eq!(asked[0].at, stamped(5, "u1", "c"));
    }

    #[test]
    fn a_lost_copys_place_resumes_where_the_pushes_to_it_vouch() {
        // `b`'s pushes to `a`: b's place 4 was in `a` by a's 6, 9 by 12, 15 by 20.
        let entry = |mine: u64, theirs: u64| {
            json!({"recorded_seq": copy_seq("b", "ub", mine),
                   "target_seq": copy_seq("a", "ua", theirs)})
        };
        let history = [entry(15, 20), entry(9, 12), entry(4, 6)];
        let on_b = |n| Some(stamped(n, "ub", "b"));
        assert_eq!(resume_on(&history, &stamped(12, "ua", "a")), on_b(9));
        assert_eq!(resume_on(&history, &stamped(19, "ua", "a")), on_b(9));
        assert_eq!(resume_on(&history, &stamped(25, "ua", "a")), on_b(15));
        // Before any push vouches, or of another instance of `a`: from 0.
        assert_eq!(resume_on(&history, &stamped(5, "ua", "a")), None);
        assert_eq!(resume_on(&history, &stamped(25, "zz", "a")), None);
        // Entries without a target place (a replication's own) vouch for nothing.
        let plain = [json!({"recorded_seq": copy_seq("b", "ub", 9)})];
        assert_eq!(resume_on(&plain, &stamped(25, "ua", "a")), None);
        // A bare place is taken at its number.
        assert_eq!(resume_on(&history, &At::Bare(13)), on_b(9));
    }

    #[test]
    fn a_split_copys_place_resumes_its_halves_on_the_same_member() {
        // The vector read `c`'s copy of LOW, since split into two quarters.
        const Q1: (u32, u32) = (0, 0x3fff_ffff);
        const Q2: (u32, u32) = (0x4000_0000, 0x7fff_ffff);
        let nodes = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let ranges = vec![(Q1, nodes.clone()), (Q2, nodes.clone()), (HIGH, nodes)];
        let since = SeqArg::Vector(vec![
            ShardSeq {
                node: "c".into(),
                range: LOW,
                at: stamped(30, "uc", "c"),
            },
            ShardSeq {
                node: "a".into(),
                range: HIGH,
                at: stamped(7, "u2", "a"),
            },
        ]);
        let starts = starts(&ranges, &since, "b", |_| true);
        for half in &starts[..2] {
            assert_eq!(half.order, ["c", "b", "a"]);
            assert_eq!(half.first, From::Zero);
            assert_eq!(half.split, Some(stamped(30, "uc", "c")));
            assert_eq!(half.lost, None);
        }
        assert_eq!(starts[2].split, None);
        // `c` down: its halves start over on this member.
        let starts = super::starts(&ranges, &since, "b", |n| n != "c");
        assert_eq!(
            (starts[0].order[0].as_str(), &starts[0].split),
            ("b", &None)
        );

        // The split's copies into a half: the copy's 10 was in it by the half's 4, 25 by
        // 11, and the last top-off (after the map's edit) carries no half place.
        let entry = |copied: u64, half: Option<u64>| {
            let mut e = json!({"recorded_seq": copy_seq("c", "uc", copied)});
            if let Some(h) = half {
                e["target_seq"] = json!(copy_seq("c", "uh", h));
            }
            e
        };
        let history = [entry(40, None), entry(25, Some(11)), entry(10, Some(4))];
        let half = |n| Some(stamped(n, "uh", "c"));
        assert_eq!(resume_split(&history, &stamped(30, "uc", "c")), half(11));
        assert_eq!(resume_split(&history, &stamped(25, "uc", "c")), half(11));
        assert_eq!(resume_split(&history, &stamped(24, "uc", "c")), half(4));
        assert_eq!(resume_split(&history, &stamped(45, "uc", "c")), half(11));
        // Before any copy vouches, or another instance of the copy: from 0.
        assert_eq!(resume_split(&history, &stamped(9, "uc", "c")), None);
        assert_eq!(resume_split(&history, &stamped(30, "zz", "c")), None);
    }

    #[test]
    fn rows_show_the_whole_vector_and_a_limit_leaves_the_rest_pending() {
        let starts = starts(&ranges(), &SeqArg::Seq(0), "a", |_| true);
        let mut vector = start_vector(&starts);
        let answers = vec![
            copy_feed("a", "u1", &[("x", 1), ("y", 3)], 3),
            copy_feed("a", "u2", &[("z", 2)], 2),
        ];
        let round = fold(&mut vector, answers.clone(), 2, (2, 0, None), false);
        assert_eq!(round.rows.len(), 2);
        assert_eq!(round.pending, 1);
        let first = seq::unpack(round.rows[0].0.as_ref().unwrap()).unwrap();
        assert_eq!(first[0].at, stamped(1, "u1", "a"));
        // A range not reached yet is a bare 0, as CouchDB shows it.
        assert_eq!(first[1].at, At::Bare(0));
        assert_eq!(round.rows[1].1["seq"], json!(round.rows[1].0));
        assert!(round.rows[1].0.as_ref().unwrap().starts_with("3-"));
        // The feed stands after `y`; the second range has not moved.
        assert_eq!(vector[0].at, stamped(3, "u1", "a"));
        assert_eq!(vector[1].at, At::Bare(0));

        // Without a limit each range ends where its copy's feed did.
        let mut vector = start_vector(&starts);
        let round = fold(&mut vector, answers, u64::MAX, (u64::MAX, 0, None), false);
        assert_eq!(round.rows.len(), 3);
        assert_eq!(vector[1].at, stamped(2, "u2", "a"));
        assert!(pack(&vector).starts_with("5-"));
    }

    #[test]
    fn seq_interval_shows_every_nth_sequence() {
        let starts = starts(&ranges(), &SeqArg::Seq(0), "a", |_| true);
        let mut vector = start_vector(&starts);
        let answers = vec![
            copy_feed("a", "u1", &[("w", 1), ("x", 2), ("y", 3)], 3),
            copy_feed("a", "u2", &[("z", 1)], 1),
        ];
        let round = fold(&mut vector, answers, 4, (4, 0, Some(2)), false);
        let shown: Vec<bool> = round.rows.iter().map(|(s, _)| s.is_some()).collect();
        assert_eq!(shown, [true, false, true, false]);
        assert_eq!(round.rows[1].1["seq"], Value::Null);
    }

    #[test]
    fn another_copy_than_the_vectors_starts_the_range_over() {
        let since = SeqArg::Vector(vec![ShardSeq {
            node: "c".into(),
            range: LOW,
            at: stamped(9, "u1", "c"),
        }]);
        let starts = starts(&ranges(), &since, "a", |_| true);
        let mut vector = start_vector(&starts);
        assert_eq!(vector[0].node, "c");
        // `c` failed: `a` answered from 0, and the limit cut it before any row.
        let answers = vec![
            copy_feed("a", "u3", &[("x", 1)], 1),
            copy_feed("a", "u2", &[], 0),
        ];
        let round = fold(&mut vector, answers, 0, (0, 0, None), false);
        assert_eq!(round.pending, 1);
        assert_eq!(
            (vector[0].node.as_str(), &vector[0].at),
            ("a", &At::Bare(0))
        );
    }

    #[test]
    fn a_descending_feed_starts_each_range_at_its_end() {
        let starts = starts(&ranges(), &SeqArg::Seq(0), "a", |_| true);
        let mut vector = start_vector(&starts);
        let answers = vec![
            copy_feed("a", "u1", &[("y", 3), ("x", 1)], 1),
            copy_feed("a", "u2", &[("z", 2)], 2),
        ];
        let round = fold(&mut vector, answers, 1, (1, 0, None), true);
        let first = seq::unpack(round.rows[0].0.as_ref().unwrap()).unwrap();
        assert_eq!(first[0].at, stamped(3, "u1", "a"));
        assert_eq!(first[1].at, stamped(2, "u2", "a"));
    }

    #[test]
    fn range_bounds_read_as_couchdb_names_them() {
        assert_eq!(bounds("00000000-7fffffff"), Some(LOW));
        assert_eq!(bounds("80000000-ffffffff"), Some(HIGH));
        assert_eq!(bounds("nope"), None);
    }
}
