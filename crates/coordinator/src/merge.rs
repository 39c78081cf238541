//! How the copies' answers combine (CouchDB's `fabric_doc_update`, `fabric_doc_open`,
//! `fabric_db_info`). Pure: the answers in, the client's answer out.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use settee_core::Rev;
use std::cmp::Ordering;
use std::collections::VecDeque;

/// The quorum (`w` and `r`) of a range of `copies` copies: a majority.
pub fn quorum(copies: usize) -> usize {
    copies / 2 + 1
}

/// The quorum a client asked for (`w=`, `r=`), else a majority of `copies`.
pub fn quorum_or(asked: Option<u32>, copies: usize) -> usize {
    asked.map_or_else(|| quorum(copies), |n| n as usize)
}

/// Whether a write's answer is decided with the replies so far (`None`: a copy still
/// working): `w` copies hold it, or every copy has answered.
pub fn write_decided(replies: &[Option<Reply>], w: usize) -> bool {
    let written = (replies.iter().flatten())
        .filter(|r| matches!(r, Reply::Answered { status, .. } if (200..300).contains(status)))
        .count();
    written >= w || replies.iter().all(Option::is_some)
}

/// The first copy's refusal when none did what was asked: the client's to hear.
pub fn first_refusal<'a>(replies: impl IntoIterator<Item = &'a Reply>) -> Option<(u16, &'a Value)> {
    replies.into_iter().find_map(|r| match r {
        Reply::Answered { status, body } => Some((*status, body)),
        Reply::Unreachable(_) | Reply::TimedOut(_) => None,
    })
}

/// One copy's answer to a request: its status and JSON body, or no answer at all (the
/// member is not running, or did not answer), or none within its `[fabric]` timeout.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Answered { status: u16, body: Value },
    Unreachable(String),
    TimedOut(String),
}

/// The combined answer to a document write: `R` is the revision written, parsed for a
/// single write ([`write`]), as the copies render it for each document of a `_bulk_docs`
/// ([`bulk_write`]).
#[derive(Debug, PartialEq)]
pub enum WriteOutcome<R = Rev> {
    /// At least `w` copies hold the revision.
    Ok(R),
    /// At least one copy, fewer than `w`, holds it (CouchDB's 202 `accepted`).
    Accepted(R),
    /// No copy took it: the copies' common answer (or the first, when they differ).
    Refused { status: u16, body: Value },
    /// No copy answered.
    Unanswered(String),
}

/// Combines the copies' answers to a document write, in the order they came, for quorum
/// `w`: `w` copies holding the revision are a success, fewer (but one) an acceptance, as
/// CouchDB's `fabric_doc_update` decides. A copy that took the edit outweighs those that
/// refused it (they catch up by internal replication); with none, the first refusal is
/// the answer.
pub fn write(replies: &[Reply], w: usize) -> WriteOutcome {
    // Copies write revisions as one node renders them: equal revisions are equal text,
    // so only the first is parsed.
    let mut written = (replies.iter()).filter_map(|r| match r {
        Reply::Answered { status, body } if (200..300).contains(status) => body["rev"].as_str(),
        _ => None,
    });
    let first = (written.by_ref()).find_map(|text| Some((text, Rev::parse(text).ok()?)));
    if let Some((text, first)) = first {
        let agreeing = 1 + written.filter(|t| *t == text).count();
        return quorum_outcome(first, agreeing, w);
    }
    not_written(replies.iter())
}

fn quorum_outcome<R>(rev: R, agreeing: usize, w: usize) -> WriteOutcome<R> {
    if agreeing >= w {
        WriteOutcome::Ok(rev)
    } else {
        WriteOutcome::Accepted(rev)
    }
}

/// The outcome of a write no copy took: the first refusal, else why none answered.
fn not_written<'a, R>(replies: impl Iterator<Item = &'a Reply> + Clone) -> WriteOutcome<R> {
    match first_refusal(replies.clone()) {
        Some((status, body)) => WriteOutcome::Refused {
            status,
            body: body.clone(),
        },
        None => WriteOutcome::Unanswered(unreachable_reason(replies)),
    }
}

fn unreachable_reason<'a>(replies: impl IntoIterator<Item = &'a Reply>) -> String {
    let why: Vec<&str> = (replies.into_iter())
        .filter_map(|r| match r {
            Reply::Unreachable(why) | Reply::TimedOut(why) => Some(why.as_str()),
            Reply::Answered { .. } => None,
        })
        .collect();
    format!("no copy answered: {}", why.join("; "))
}

/// One entry of a copy's `_bulk_docs` answer, read from its JSON as typed fields (no
/// JSON object per entry: a range's copies answer thousands of them), or made from the
/// answer of this member's copy.
#[derive(Debug, Default, Deserialize)]
pub struct BulkEntry {
    #[serde(default)]
    pub ok: bool,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub rev: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub reason: Option<Value>,
}

/// One document's reply from one copy to a range's `_bulk_docs`.
#[derive(Clone, Debug, PartialEq)]
pub enum EntryReply {
    /// Written: the revision as the copy renders it.
    Written(String),
    /// A replicated revision (`new_edits=false`) written or held already: CouchDB's
    /// answer has no entry for it.
    Replicated,
    /// Refused (its entry, with the status a single write would have had), or the whole
    /// request failed or went unanswered.
    Other(Reply),
}

impl EntryReply {
    /// Whether the copy holds the document's edit.
    pub fn written(&self) -> bool {
        matches!(self, EntryReply::Written(_) | EntryReply::Replicated)
    }
}

/// A copy's `_bulk_docs` answer to documents `ids` (in the order sent): its entries, or
/// the reply that failed the whole request. Each document's reply, in the order of
/// `ids`; a replicated write (`new_edits=false`) has entries for failures only, found by
/// id (the first for an id).
pub fn bulk_replies(
    answer: Result<Vec<BulkEntry>, Reply>,
    ids: &[&str],
    new_edits: bool,
) -> Vec<EntryReply> {
    let entries = match answer {
        Ok(entries) => entries,
        Err(failed) => return vec![EntryReply::Other(failed); ids.len()],
    };
    if new_edits {
        let mut entries = entries.into_iter();
        return (ids.iter())
            .map(|_| match entries.next() {
                Some(e) => entry_reply(e),
                None => EntryReply::Other(Reply::Unreachable(
                    "a copy's _bulk_docs answer is short".into(),
                )),
            })
            .collect();
    }
    let mut by_id = std::collections::HashMap::new();
    for e in entries {
        if let Some(id) = e.id.clone() {
            by_id.entry(id).or_insert(e);
        }
    }
    (ids.iter())
        .map(|id| match by_id.remove(*id) {
            Some(e) => entry_reply(e),
            None => EntryReply::Replicated,
        })
        .collect()
}

/// One entry of a `_bulk_docs` answer as a single write's reply: a refusal is its entry
/// with the status a single write would have had.
fn entry_reply(e: BulkEntry) -> EntryReply {
    if e.ok {
        return match e.rev {
            Some(rev) => EntryReply::Written(rev),
            None => EntryReply::Other(Reply::Unreachable(
                "a copy's _bulk_docs entry names no revision".into(),
            )),
        };
    }
    let error = e.error.unwrap_or_default();
    let status = match error.as_str() {
        "conflict" => 409,
        "forbidden" => 403,
        "unauthorized" => 401,
        "not_found" => 404,
        _ => 400,
    };
    let mut body = Map::new();
    body.insert("id".into(), e.id.map_or(Value::Null, Value::String));
    if let Some(rev) = e.rev {
        body.insert("rev".into(), Value::String(rev));
    }
    body.insert("error".into(), Value::String(error));
    body.insert("reason".into(), e.reason.unwrap_or(Value::Null));
    EntryReply::Other(Reply::Answered {
        status,
        body: Value::Object(body),
    })
}

/// Combines the copies' replies for one document of a `_bulk_docs` as [`write`] combines
/// a single write's; the revision stays as the copies render it.
pub fn bulk_write(replies: &[EntryReply], w: usize) -> WriteOutcome<&str> {
    let mut written = (replies.iter()).filter_map(|r| match r {
        EntryReply::Written(rev) => Some(rev.as_str()),
        _ => None,
    });
    if let Some(first) = written.next() {
        let agreeing = 1 + written.filter(|t| *t == first).count();
        return quorum_outcome(first, agreeing, w);
    }
    not_written(replies.iter().filter_map(|r| match r {
        EntryReply::Other(reply) => Some(reply),
        _ => None,
    }))
}

/// A document read's combined answer: the newest revision any copy has (higher position,
/// then higher id), and which copies lack it (to be repaired).
#[derive(Debug, PartialEq)]
pub enum ReadOutcome {
    Found {
        doc: Value,
        rev: Rev,
        /// Indexes of the copies that answered with another revision or none.
        stale: Vec<usize>,
    },
    /// No copy has the document: `deleted` when one says so, else `missing`.
    NotFound(&'static str),
    /// Another answer than a document or `not_found` (the first such).
    Failed {
        status: u16,
        body: Value,
    },
    Unanswered(String),
}

pub fn read(replies: &[Reply]) -> ReadOutcome {
    let found: Vec<(usize, Rev, &Value)> = replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Reply::Answered { status: 200, body } => body["_rev"]
                .as_str()
                .and_then(|r| Rev::parse(r).ok())
                .map(|rev| (i, rev, body)),
            _ => None,
        })
        .collect();
    let newest = found
        .iter()
        .max_by(|a, b| (a.1.pos, a.1.id.to_string()).cmp(&(b.1.pos, b.1.id.to_string())));
    if let Some((_, rev, doc)) = newest {
        let stale = (0..replies.len())
            .filter(|i| !found.iter().any(|(j, r, _)| j == i && r == rev))
            .filter(|i| matches!(replies[*i], Reply::Answered { .. }))
            .collect();
        return ReadOutcome::Found {
            doc: (*doc).clone(),
            rev: rev.clone(),
            stale,
        };
    }
    let mut not_found = None;
    for r in replies {
        match r {
            Reply::Answered { status: 404, body } => {
                if body["reason"] == "deleted" || not_found.is_none() {
                    not_found = Some(if body["reason"] == "deleted" {
                        "deleted"
                    } else {
                        "missing"
                    });
                }
            }
            Reply::Answered { status, body } => {
                return ReadOutcome::Failed {
                    status: *status,
                    body: body.clone(),
                }
            }
            Reply::Unreachable(_) | Reply::TimedOut(_) => {}
        }
    }
    match not_found {
        Some(reason) => ReadOutcome::NotFound(reason),
        None => ReadOutcome::Unanswered(unreachable_reason(replies)),
    }
}

/// Whether the deletion `deleted` (a document with its `_revisions`) descends from `rev`:
/// a copy whose newest revision is `rev` then only missed the deletion.
pub fn deletion_supersedes(deleted: &Value, rev: &Rev) -> bool {
    let history = &deleted["_revisions"];
    let (Some(start), Some(ids)) = (history["start"].as_u64(), history["ids"].as_array()) else {
        return false;
    };
    let Some(back) = start.checked_sub(rev.pos) else {
        return false;
    };
    ids.get(back as usize)
        .and_then(Value::as_str)
        .is_some_and(|id| id == rev.id.to_string())
}

/// The deleted leaves in a copy's `open_revs=all&revs=true` answer.
pub fn deleted_leaves(reply: &Reply) -> Vec<Value> {
    let Reply::Answered { status: 200, body } = reply else {
        return Vec::new();
    };
    (body.as_array().into_iter().flatten())
        .filter_map(|leaf| leaf.get("ok"))
        .filter(|doc| doc["_deleted"] == true)
        .cloned()
        .collect()
}

/// One range's part of a database's information: the range, the copy that answered and
/// its `GET /{copy}` body.
pub struct RangeInfo<'a> {
    pub range: &'a str,
    pub node: &'a str,
    pub info: &'a Value,
}

/// A clustered database's sequence as its information and its indexes show it
/// (`update_seq`, `purge_seq`): CouchDB's packed vector of each range's copy and its place
/// there, last range first as `fabric_db_info` lists them; `stamped` with the copies' uuid
/// prefixes and epochs (an `update_seq`, which `_changes` takes as a `since`), else bare
/// numbers. `parts` are (range, member, the copy's own sequence), in ring order.
pub fn clustered_seq(parts: &[(&str, &str, &Value)], stamped: bool) -> String {
    let vector: Vec<crate::feed::RangePos> = (parts.iter().rev())
        .map(|(range, node, seq)| crate::feed::RangePos {
            bounds: crate::feed::bounds(range).unwrap_or((0, u32::MAX)),
            node: node.to_string(),
            at: crate::feed::copy_place(seq, stamped),
        })
        .collect();
    crate::feed::pack(&vector)
}

/// A clustered database's information from one copy of each range, members in the order
/// a Settee node shows its own (`Node::db_info`): counts and sizes summed, sequences
/// combined ([`clustered_seq`]), `cluster` from the shard map.
pub fn db_info(name: &str, ranges: &[RangeInfo<'_>], q: u32, n: u32) -> Value {
    let sum = |f: &dyn Fn(&Value) -> &Value| -> u64 {
        ranges.iter().map(|r| f(r.info).as_u64().unwrap_or(0)).sum()
    };
    let seqs = |member: &str, stamped: bool| -> String {
        let parts: Vec<(&str, &str, &Value)> = ranges
            .iter()
            .map(|r| (r.range, r.node, &r.info[member]))
            .collect();
        clustered_seq(&parts, stamped)
    };
    let partitioned = ranges
        .iter()
        .any(|r| r.info["props"]["partitioned"] == true);
    let props = if partitioned {
        json!({"partitioned": true})
    } else {
        json!({})
    };
    let quorum = quorum(n as usize);
    json!({
        "instance_start_time": "0",
        "db_name": name,
        "purge_seq": seqs("purge_seq", false),
        "update_seq": seqs("update_seq", true),
        "sizes": {
            "file": sum(&|i| &i["sizes"]["file"]),
            "external": sum(&|i| &i["sizes"]["external"]),
            "active": sum(&|i| &i["sizes"]["active"]),
        },
        "props": props,
        "doc_del_count": sum(&|i| &i["doc_del_count"]),
        "doc_count": sum(&|i| &i["doc_count"]),
        "disk_format_version": 8,
        "compact_running": ranges.iter().any(|r| r.info["compact_running"] == true),
        "cluster": {"q": q, "n": n, "w": quorum, "r": quorum},
    })
}

/// A document as a write's JSON body: `_id`, `_rev` (and `_revisions` for a replicated
/// write), `_deleted`, then the body's members as the client sent them (its stored bytes,
/// not parsed again) and `_attachments`.
pub fn write_doc(doc: &settee_core::ParsedDoc, replicated: bool, out: &mut Vec<u8>) {
    let mut special = Map::new();
    if let Some(id) = &doc.id {
        special.insert("_id".into(), json!(id));
    }
    if let Some((pos, ids)) = &doc.revs {
        if let Some(first) = ids.first() {
            special.insert("_rev".into(), json!(format!("{pos}-{first}")));
        }
        if replicated {
            let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            special.insert("_revisions".into(), json!({"start": pos, "ids": ids}));
        }
    }
    if doc.deleted {
        special.insert("_deleted".into(), json!(true));
    }
    if let Some(atts) = &doc.atts {
        special.insert("_attachments".into(), Value::Object(atts.clone()));
    }
    let special = serde_json::to_vec(&Value::Object(special)).expect("json");
    // Both are compact objects: `{…}`; their members joined in one.
    let body = settee_core::split_stored(&doc.body).0;
    let inner = |o: &[u8]| -> std::ops::Range<usize> {
        let t = o.trim_ascii();
        match (t.first(), t.last()) {
            (Some(b'{'), Some(b'}')) => {
                let start = o.len() - o.trim_ascii_start().len() + 1;
                start..start + t.len() - 2
            }
            _ => 0..0,
        }
    };
    let (a, b) = (&special[inner(&special)], &body[inner(body)]);
    out.push(b'{');
    out.extend_from_slice(a);
    if !a.trim_ascii().is_empty() && !b.trim_ascii().is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(b);
    out.push(b'}');
}

/// The rows of every range's `_all_docs` (each in its copy's order, which is `descending`
/// or not) merged in document id order, CouchDB's raw byte order of ids as a copy scans
/// them, `skip` rows dropped and at most `limit` kept (`fabric_view_all_docs`: the copies
/// were asked for `skip + limit` rows from the start).
pub fn all_docs_rows(
    ranges: Vec<Vec<Value>>,
    descending: bool,
    skip: u64,
    limit: Option<u64>,
) -> Vec<Value> {
    let id = |row: &Value| row["id"].as_str().unwrap_or_default().to_owned();
    let order = |a: &Value, b: &Value| {
        let o = id(a).cmp(&id(b));
        if descending {
            o.reverse()
        } else {
            o
        }
    };
    merge_sorted(ranges, order, skip, limit)
}

/// Lists each sorted by `order` merged into one, `skip` rows dropped and at most `limit`
/// kept.
pub fn merge_sorted(
    ranges: Vec<Vec<Value>>,
    order: impl Fn(&Value, &Value) -> Ordering,
    skip: u64,
    limit: Option<u64>,
) -> Vec<Value> {
    let mut heads: Vec<VecDeque<Value>> = ranges.into_iter().map(VecDeque::from).collect();
    let mut out = Vec::new();
    let mut skip = skip;
    let limit = limit.unwrap_or(u64::MAX);
    while (out.len() as u64) < limit {
        let mut next: Option<usize> = None;
        for (i, rows) in heads.iter().enumerate() {
            let Some(row) = rows.front() else { continue };
            if next.is_none_or(|j| order(row, &heads[j][0]) == Ordering::Less) {
                next = Some(i);
            }
        }
        let Some(i) = next else { break };
        let row = heads[i].pop_front().expect("a front row");
        if skip > 0 {
            skip -= 1;
        } else {
            out.push(row);
        }
    }
    out
}

/// The order of a Mango index's rows as the copies give them (`{"key", "id", "doc"}`,
/// see `Node::find_given`): `_all_docs` (`special`) by id, in bytes as a copy scans ids;
/// a json index by key in CouchDB's collation, then id, as its view holds them; reversed
/// when the plan reads the index `descending`. Merging in this order gives a single node's
/// order of the same rows.
pub fn find_order(special: bool, descending: bool) -> impl Fn(&Value, &Value) -> Ordering {
    move |a: &Value, b: &Value| {
        let id = |r: &Value| r["id"].as_str().unwrap_or_default().as_bytes().to_vec();
        let o = if special {
            id(a).cmp(&id(b))
        } else {
            settee_core::collate::compare(&a["key"], &b["key"]).then_with(|| id(a).cmp(&id(b)))
        };
        if descending {
            o.reverse()
        } else {
            o
        }
    }
}

/// A clustered `_find`'s page: the copies' rows (each sorted by `order`, each copy asked
/// for `skip + limit`) merged and the first `skip + limit` taken; the page is those after
/// `skip`, and the last row taken (skipped or returned) is where the next page starts,
/// as a single node's bookmark names the last row it offered.
pub fn find_page(
    ranges: Vec<Vec<Value>>,
    order: impl Fn(&Value, &Value) -> Ordering,
    skip: u64,
    limit: u64,
) -> (Vec<Value>, Option<Value>) {
    let mut taken = merge_sorted(ranges, order, 0, Some(skip.saturating_add(limit)));
    let last = taken.last().cloned();
    let at = usize::try_from(skip).unwrap_or(usize::MAX).min(taken.len());
    (taken.split_off(at), last)
}

/// A map view's rows for a list of `keys` (CouchDB's `fabric_view_map` with keys): key
/// after key in the list's order, each key's rows from every range merged by `order`;
/// each range's rows come in the same key order (`same_key` tells a row of the key).
pub fn rows_in_key_order(
    ranges: Vec<Vec<Value>>,
    keys: &[Value],
    same_key: impl Fn(&Value, &Value) -> Ordering,
    order: impl Fn(&Value, &Value) -> Ordering,
    skip: u64,
    limit: Option<u64>,
) -> Vec<Value> {
    let mut heads: Vec<std::iter::Peekable<std::vec::IntoIter<Value>>> = ranges
        .into_iter()
        .map(|rows| rows.into_iter().peekable())
        .collect();
    let mut all = Vec::new();
    for key in keys {
        let runs: Vec<Vec<Value>> = (heads.iter_mut())
            .map(|h| {
                let mut run = Vec::new();
                while let Some(row) = h.next_if(|r| same_key(&r["key"], key) == Ordering::Equal) {
                    run.push(row);
                }
                run
            })
            .collect();
        all.extend(merge_sorted(runs, &order, 0, None));
    }
    let limit = limit.unwrap_or(u64::MAX);
    all.into_iter()
        .skip(usize::try_from(skip).unwrap_or(usize::MAX))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect()
}

/// A reduce view's rows (`{"key", "value"}`, each range's sorted by `order`) merged: rows
/// of equal keys reduced again by `rereduce` into one (CouchDB's `fabric_view_reduce`),
/// then `skip` rows dropped and at most `limit` kept.
pub fn reduced_rows<E>(
    ranges: Vec<Vec<Value>>,
    order: impl Fn(&Value, &Value) -> Ordering,
    skip: u64,
    limit: Option<u64>,
    mut rereduce: impl FnMut(&[&Value]) -> Result<Value, E>,
) -> Result<Vec<Value>, E> {
    let merged = merge_sorted(ranges, &order, 0, None);
    let mut out = Vec::new();
    let mut i = 0;
    let (mut skip, limit) = (skip, limit.unwrap_or(u64::MAX));
    while i < merged.len() && (out.len() as u64) < limit {
        let mut j = i + 1;
        while j < merged.len() && order(&merged[i], &merged[j]) == Ordering::Equal {
            j += 1;
        }
        if skip > 0 {
            skip -= 1;
        } else {
            let values: Vec<&Value> = merged[i..j].iter().map(|r| &r["value"]).collect();
            let value = rereduce(&values)?;
            out.push(json!({"key": merged[i]["key"], "value": value}));
        }
        i = j;
    }
    Ok(out)
}

/// `_all_docs`' `offset` in a cluster: the rows before the range on every range's copy,
/// plus the `skip` the copies were not given, at most `total_rows` (as
/// `fabric_view_all_docs` computes it).
pub fn all_docs_offset(total: u64, offsets: &[u64], skip: u64) -> u64 {
    offsets.iter().sum::<u64>().saturating_add(skip).min(total)
}

/// `_all_docs` with `keys`: each key's row from the answer of its range's copy, in the
/// order of the keys. `routes[i]` is the range key `i` was sent to (keys went to each
/// range in their order); `answers[r]` the rows range `r`'s copy gave for them. `None`
/// when a copy's answer has fewer rows than it was sent keys.
pub fn rows_by_keys(routes: &[usize], answers: Vec<Vec<Value>>) -> Option<Vec<Value>> {
    let mut answers: Vec<std::vec::IntoIter<Value>> =
        answers.into_iter().map(Vec::into_iter).collect();
    routes
        .iter()
        .map(|r| answers.get_mut(*r).and_then(Iterator::next))
        .collect()
}

/// Whether `doc`'s revision (`_rev`) is an ancestor of `other`'s: one of the older
/// revisions in `other`'s `_revisions`.
fn is_ancestor(doc: &Value, other: &Value) -> bool {
    let Some(rev) = doc["_rev"].as_str().and_then(|r| Rev::parse(r).ok()) else {
        return false;
    };
    let history = &other["_revisions"];
    let (Some(start), Some(ids)) = (history["start"].as_u64(), history["ids"].as_array()) else {
        return false;
    };
    match start.checked_sub(rev.pos) {
        Some(back) if back > 0 => ids
            .get(back as usize)
            .and_then(Value::as_str)
            .is_some_and(|id| id == rev.id.to_string()),
        _ => false,
    }
}

/// One `_bulk_get` item's answer from the copies of its range (each copy's
/// `{"id","docs":[…]}`, asked with `revs=true`): the revisions any copy found, once
/// each, without those another copy's answer shows to be ancestors (CouchDB merges the
/// copies' rev trees and answers their leaves), in the order the copies gave them. When no
/// copy found a revision, the first copy's error entry.
pub fn bulk_get_docs(answers: &[&Value]) -> Vec<Value> {
    let mut found: Vec<Value> = Vec::new();
    for answer in answers {
        for entry in answer["docs"].as_array().into_iter().flatten() {
            let Some(doc) = entry.get("ok") else { continue };
            if !found.iter().any(|d| d["_rev"] == doc["_rev"]) {
                found.push(doc.clone());
            }
        }
    }
    let leaves: Vec<Value> = (found.iter())
        .filter(|d| !found.iter().any(|o| is_ancestor(d, o)))
        .map(|d| json!({ "ok": d }))
        .collect();
    if !leaves.is_empty() {
        return leaves;
    }
    (answers.iter())
        .find_map(|a| a["docs"].as_array().filter(|d| !d.is_empty()).cloned())
        .unwrap_or_default()
}

/// An `open_revs` list's entries from every copy's answer (`{"docs": [...]}` each): each
/// revision a copy found, once, in the order first seen, then `{"missing": rev}` for
/// each revision no copy found.
pub fn open_revs_entries(answers: &[&Value]) -> Vec<Value> {
    let mut found: Vec<Value> = Vec::new();
    let mut missing: Vec<Value> = Vec::new();
    for answer in answers {
        for entry in answer["docs"].as_array().into_iter().flatten() {
            if let Some(doc) = entry.get("ok") {
                if !found.iter().any(|d| d["ok"]["_rev"] == doc["_rev"]) {
                    found.push(json!({ "ok": doc }));
                }
            } else if let Some(rev) = entry.get("missing") {
                if !missing.contains(rev) {
                    missing.push(rev.clone());
                }
            }
        }
    }
    missing.retain(|rev| !found.iter().any(|d| d["ok"]["_rev"] == *rev));
    found.extend(missing.into_iter().map(|rev| json!({ "missing": rev })));
    found
}

/// Merged `open_revs` entries (`{"ok": doc}` or `{"missing": rev}`) in the order CouchDB
/// answers them ([`settee_node::read::couch_order`]): found revisions by revision, then
/// missing ones.
pub fn open_revs_sorted(entries: Vec<Value>) -> Vec<Value> {
    let keyed: Vec<(Rev, Option<Value>)> = (entries.into_iter())
        .filter_map(|e| {
            let (rev, found) = match e.get("ok") {
                Some(doc) => (doc["_rev"].as_str()?.to_owned(), Some(e)),
                None => (e["missing"].as_str()?.to_owned(), None),
            };
            Some((Rev::parse(&rev).ok()?, found))
        })
        .collect();
    (settee_node::read::couch_order(keyed).into_iter())
        .map(|(rev, found)| found.unwrap_or_else(|| json!({ "missing": rev.to_string() })))
        .collect()
}

/// The security object most copies answered with (the first such when as many answered
/// with another); `None` when none answered.
pub fn security(answers: &[Value]) -> Option<Value> {
    let count = |v: &Value| answers.iter().filter(|a| *a == v).count();
    answers
        .iter()
        .fold(None::<(&Value, usize)>, |best, v| {
            let n = count(v);
            match best {
                Some((_, m)) if m >= n => best,
                _ => Some((v, n)),
            }
        })
        .map(|(v, _)| v.clone())
}

/// Whether a security object's write is done: a majority of all copies took it, and
/// every range has one that did (CouchDB's `check_sec_set`). `took[r]` counts range `r`'s
/// copies that took it, of `copies[r]`.
pub fn security_written(took: &[usize], copies: &[usize]) -> bool {
    let all: usize = copies.iter().sum();
    took.iter().sum::<usize>() >= quorum(all) && took.iter().all(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frow(key: Value, id: &str) -> Value {
        json!({"key": key, "id": id, "doc": {"_id": id}})
    }

    fn fids(rows: &[Value]) -> Vec<&str> {
        rows.iter().map(|r| r["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn find_rows_merge_by_key_then_id_in_collation_order() {
        // Numbers before strings, "a" before "B" (ICU), equal keys by id.
        let one = vec![frow(json!([1]), "z"), frow(json!(["a"]), "c")];
        let two = vec![
            frow(json!([1]), "b"),
            frow(json!([2]), "a"),
            frow(json!(["B"]), "d"),
        ];
        let (page, last) = find_page(vec![one, two], find_order(false, false), 1, 3);
        assert_eq!(fids(&page), ["z", "a", "c"]);
        assert_eq!(last.unwrap()["id"], "c");
    }

    #[test]
    fn find_rows_descending_and_by_id_for_all_docs() {
        let one = vec![frow(json!("b"), "b"), frow(json!("a"), "a")];
        let two = vec![frow(json!("c"), "c"), frow(json!("B"), "B")];
        let (page, _) = find_page(vec![one, two], find_order(true, true), 0, 10);
        // Bytes: "B" < "a" < "b" < "c".
        assert_eq!(fids(&page), ["c", "b", "a", "B"]);
        let one = vec![frow(json!([1]), "x"), frow(json!([1]), "a")];
        let two = vec![frow(json!([3]), "m")];
        let two_desc: Vec<Value> = two.into_iter().collect();
        let (page, _) = find_page(vec![two_desc, one], find_order(false, true), 0, 10);
        assert_eq!(fids(&page), ["m", "x", "a"]);
    }

    #[test]
    fn a_find_page_names_the_last_row_taken_even_when_skipped() {
        let rows = vec![vec![frow(json!([1]), "a"), frow(json!([2]), "b")]];
        let (page, last) = find_page(rows.clone(), find_order(false, false), 2, 0);
        assert!(page.is_empty());
        assert_eq!(last.unwrap()["id"], "b");
        let (page, last) = find_page(rows.clone(), find_order(false, false), 5, 5);
        assert!(page.is_empty());
        assert_eq!(last.unwrap()["id"], "b");
        let (page, last) = find_page(vec![vec![], vec![]], find_order(false, false), 0, 5);
        assert!(page.is_empty() && last.is_none());
        let (page, last) = find_page(rows, find_order(false, false), 0, 0);
        assert!(page.is_empty() && last.is_none());
    }

    fn ok(rev: &str) -> Reply {
        Reply::Answered {
            status: 201,
            body: json!({"ok": true, "id": "d", "rev": rev}),
        }
    }

    fn conflict() -> Reply {
        Reply::Answered {
            status: 409,
            body: json!({"error": "conflict", "reason": "Document update conflict."}),
        }
    }

    fn down() -> Reply {
        Reply::Unreachable("down".into())
    }

    #[test]
    fn writes_need_w_copies_and_one_copy_is_an_acceptance() {
        let r = Rev::parse("1-abc").unwrap();
        assert_eq!(
            write(&[ok("1-abc"), ok("1-abc"), down()], 2),
            WriteOutcome::Ok(r.clone())
        );
        assert_eq!(
            write(&[ok("1-abc"), down(), down()], 2),
            WriteOutcome::Accepted(r.clone())
        );
        // Copies that wrote different revisions do not agree.
        assert_eq!(
            write(&[ok("1-abc"), ok("1-abd"), ok("1-abc")], 3),
            WriteOutcome::Accepted(r.clone())
        );
        assert_eq!(
            write(&[ok("1-abc"), ok("1-abd"), ok("1-abc")], 2),
            WriteOutcome::Ok(r.clone())
        );
        // One copy took it, two refused: accepted, as CouchDB (not a conflict).
        assert_eq!(
            write(&[conflict(), ok("1-abc"), conflict()], 2),
            WriteOutcome::Accepted(r)
        );
        assert_eq!(
            write(&[conflict(), conflict(), down()], 2),
            WriteOutcome::Refused {
                status: 409,
                body: json!({"error": "conflict", "reason": "Document update conflict."})
            }
        );
        assert!(matches!(
            write(&[down(), down()], 2),
            WriteOutcome::Unanswered(_)
        ));
    }

    #[test]
    fn reads_take_the_newest_revision_and_name_the_stale_copies() {
        let doc = |rev: &str| Reply::Answered {
            status: 200,
            body: json!({"_id": "d", "_rev": rev}),
        };
        let missing = Reply::Answered {
            status: 404,
            body: json!({"error": "not_found", "reason": "missing"}),
        };
        let deleted = Reply::Answered {
            status: 404,
            body: json!({"error": "not_found", "reason": "deleted"}),
        };
        match read(&[doc("1-a"), doc("2-b"), missing.clone(), down()]) {
            ReadOutcome::Found { rev, stale, .. } => {
                assert_eq!(rev.to_string(), "2-b");
                assert_eq!(stale, vec![0, 2]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            read(&[missing.clone(), deleted]),
            ReadOutcome::NotFound("deleted")
        );
        assert_eq!(read(&[missing, down()]), ReadOutcome::NotFound("missing"));
        assert!(matches!(read(&[down()]), ReadOutcome::Unanswered(_)));
    }

    #[test]
    fn a_deletion_supersedes_the_revisions_it_descends_from() {
        let deleted = json!({"_id": "d", "_rev": "3-c", "_deleted": true,
            "_revisions": {"start": 3, "ids": ["c", "b", "a"]}});
        let rev = |r: &str| Rev::parse(r).unwrap();
        assert!(deletion_supersedes(&deleted, &rev("2-b")));
        assert!(deletion_supersedes(&deleted, &rev("1-a")));
        assert!(
            !deletion_supersedes(&deleted, &rev("2-x")),
            "a conflicting branch"
        );
        assert!(
            !deletion_supersedes(&deleted, &rev("4-d")),
            "a later revision"
        );
        let leaves = Reply::Answered {
            status: 200,
            body: json!([{"ok": deleted.clone()}, {"ok": {"_id": "d", "_rev": "2-x"}}]),
        };
        assert_eq!(deleted_leaves(&leaves), vec![deleted]);
    }

    #[test]
    fn bulk_answers_split_into_single_writes() {
        let entries =
            |v: Value| -> Result<Vec<BulkEntry>, Reply> { Ok(serde_json::from_value(v).unwrap()) };
        let answer = entries(json!([{"ok": true, "id": "a", "rev": "1-x"},
            {"id": "b", "error": "conflict", "reason": "Document update conflict."}]));
        let split = bulk_replies(answer, &["a", "b"], true);
        assert_eq!(split[0], EntryReply::Written("1-x".into()));
        assert_eq!(
            split[1],
            EntryReply::Other(Reply::Answered {
                status: 409,
                body: json!({"id": "b", "error": "conflict",
                             "reason": "Document update conflict."})
            })
        );
        assert_eq!(
            split.iter().map(EntryReply::written).collect::<Vec<_>>(),
            [true, false]
        );
        // Replicated writes: only failures have entries (a refusal names its revision).
        let replicated =
            entries(json!([{"id": "b", "rev": "2-y", "error": "forbidden", "reason": "no"}]));
        let split = bulk_replies(replicated, &["a", "b"], false);
        assert_eq!(split[0], EntryReply::Replicated);
        assert_eq!(
            split[1],
            EntryReply::Other(Reply::Answered {
                status: 403,
                body: json!({"id": "b", "rev": "2-y", "error": "forbidden", "reason": "no"})
            })
        );
        assert_eq!(
            split.iter().map(EntryReply::written).collect::<Vec<_>>(),
            [true, false]
        );
        // A short answer, and none at all.
        let short = entries(json!([{"ok": true, "id": "a", "rev": "1-x"}]));
        assert!(matches!(
            bulk_replies(short, &["a", "b"], true)[1],
            EntryReply::Other(Reply::Unreachable(_))
        ));
        assert_eq!(
            bulk_replies(Err(down()), &["a", "b"], true),
            [EntryReply::Other(down()), EntryReply::Other(down())]
        );
    }

    #[test]
    fn bulk_writes_combine_as_single_writes() {
        let written = |rev: &str| EntryReply::Written(rev.into());
        let refused = EntryReply::Other(Reply::Answered {
            status: 409,
            body: json!({"id": "a", "error": "conflict", "reason": "Document update conflict."}),
        });
        let down = EntryReply::Other(down());
        assert_eq!(
            bulk_write(&[written("1-x"), written("1-x"), down.clone()], 2),
            WriteOutcome::Ok("1-x")
        );
        // Copies that wrote other revisions do not count towards the first one's quorum.
        assert_eq!(
            bulk_write(&[written("1-x"), written("1-y"), refused.clone()], 2),
            WriteOutcome::Accepted("1-x")
        );
        assert!(matches!(
            bulk_write(&[down.clone(), refused.clone()], 2),
            WriteOutcome::Refused { status: 409, .. }
        ));
        assert!(matches!(
            bulk_write(&[down.clone(), down], 2),
            WriteOutcome::Unanswered(why) if why.starts_with("no copy answered")
        ));
    }

    #[test]
    fn info_sums_the_ranges() {
        let a = json!({"doc_count": 2, "doc_del_count": 1, "update_seq": "5-x", "purge_seq": 0,
            "sizes": {"file": 10, "external": 4, "active": 6}, "props": {}});
        let b = json!({"doc_count": 3, "doc_del_count": 0, "update_seq": "7-y", "purge_seq": 1,
            "sizes": {"file": 20, "external": 5, "active": 7}, "props": {}});
        let ranges = [
            RangeInfo {
                range: "00000000-7fffffff",
                node: "n1@h",
                info: &a,
            },
            RangeInfo {
                range: "80000000-ffffffff",
                node: "n2@h",
                info: &b,
            },
        ];
        let info = db_info("db", &ranges, 2, 3);
        assert_eq!(info["doc_count"], 5);
        assert_eq!(info["doc_del_count"], 1);
        assert_eq!(
            info["sizes"],
            json!({"file": 30, "external": 9, "active": 13})
        );
        assert!(info["update_seq"].as_str().unwrap().starts_with("12-"));
        assert!(info["purge_seq"].as_str().unwrap().starts_with("1-"));
        assert_eq!(info["cluster"], json!({"q": 2, "n": 3, "w": 2, "r": 2}));
    }

    fn row(id: &str) -> Value {
        json!({"id": id, "key": id, "value": {"rev": "1-a"}})
    }

    fn ids(rows: &[Value]) -> Vec<&str> {
        rows.iter().map(|r| r["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn all_docs_rows_merge_in_byte_order_then_skip_and_limit() {
        let ranges = || {
            vec![
                vec![row("B"), row("b"), row("c")],
                vec![row("_design/x"), row("a"), row("d"), row("é")],
            ]
        };
        // Raw byte order: uppercase before `_` before lowercase, UTF-8 last.
        assert_eq!(
            ids(&all_docs_rows(ranges(), false, 0, None)),
            ["B", "_design/x", "a", "b", "c", "d", "é"]
        );
        assert_eq!(
            ids(&all_docs_rows(ranges(), false, 2, Some(3))),
            ["a", "b", "c"]
        );
        let desc = ranges()
            .into_iter()
            .map(|mut r| {
                r.reverse();
                r
            })
            .collect();
        assert_eq!(ids(&all_docs_rows(desc, true, 1, Some(2))), ["d", "c"]);
        assert!(all_docs_rows(ranges(), false, 0, Some(0)).is_empty());
        assert!(all_docs_rows(ranges(), false, 10, None).is_empty());
    }

    #[test]
    fn all_docs_offset_adds_skip_up_to_the_total() {
        assert_eq!(all_docs_offset(6, &[1, 1], 1), 3);
        assert_eq!(all_docs_offset(6, &[3, 3], 5), 6);
        assert_eq!(all_docs_offset(0, &[], 0), 0);
    }

    #[test]
    fn rows_by_keys_follow_the_keys() {
        // Keys k0..k4 went to ranges 1, 0, 1, 1, 0 (a duplicate key gets its own row).
        let answers = vec![
            vec![row("k1"), row("k4")],
            vec![row("k0"), row("k2"), row("k0")],
        ];
        let rows = rows_by_keys(&[1, 0, 1, 1, 0], answers.clone()).unwrap();
        assert_eq!(ids(&rows), ["k0", "k1", "k2", "k0", "k4"]);
        assert_eq!(rows_by_keys(&[1, 1, 1, 1], answers), None);
    }

    #[test]
    fn bulk_get_answers_keep_the_leaves_of_every_copy() {
        let doc = |rev: &str, ids: &[&str]| {
            let start: u64 = rev[..1].parse().unwrap();
            json!({"ok": {"_id": "d", "_rev": rev, "_revisions": {"start": start, "ids": ids}}})
        };
        let stale = json!({"id": "d", "docs": [doc("1-a", &["a"])]});
        let fresh = json!({"id": "d", "docs": [doc("2-b", &["b", "a"]), doc("1-x", &["x"])]});
        // The stale copy's leaf is the other's ancestor; a conflict stays.
        assert_eq!(
            bulk_get_docs(&[&stale, &fresh]),
            vec![doc("2-b", &["b", "a"]), doc("1-x", &["x"])]
        );
        let missing = json!({"id": "d", "docs": [{"error": {"id": "d", "rev": "3-c",
            "error": "not_found", "reason": "missing"}}]});
        assert_eq!(bulk_get_docs(&[&missing, &stale]), vec![doc("1-a", &["a"])]);
        assert_eq!(
            bulk_get_docs(&[&missing, &missing]),
            missing["docs"].as_array().unwrap().clone()
        );
    }

    #[test]
    fn security_takes_the_most_common_answer_and_needs_a_majority_to_write() {
        let (a, b) = (json!({"admins": {"names": ["x"]}}), json!({}));
        assert_eq!(
            security(&[b.clone(), a.clone(), a.clone()]),
            Some(a.clone())
        );
        assert_eq!(security(&[b.clone(), a.clone()]), Some(b.clone()));
        assert_eq!(security(&[]), None);
        assert!(!security_written(&[1, 1], &[2, 2]));
        assert!(security_written(&[2, 1], &[2, 2]));
        assert!(!security_written(&[2, 0], &[2, 1]), "a range without it");
        assert!(security_written(&[1], &[1]));
    }

    fn by_key(a: &Value, b: &Value) -> Ordering {
        settee_core::collate::compare(&a["key"], &b["key"]).then_with(|| {
            let id = |r: &Value| r["id"].as_str().unwrap_or_default().to_owned();
            id(a).cmp(&id(b))
        })
    }

    fn kv(k: Value, v: i64) -> Value {
        json!({"key": k, "value": v})
    }

    #[test]
    fn reductions_of_equal_keys_reduce_again_before_skip_and_limit() {
        let ranges = vec![
            vec![kv(json!("a"), 1), kv(json!("c"), 3)],
            vec![kv(json!("a"), 10), kv(json!("b"), 20), kv(json!("c"), 30)],
        ];
        let sum = |v: &[&Value]| -> Result<Value, ()> {
            Ok(json!(v.iter().map(|x| x.as_i64().unwrap()).sum::<i64>()))
        };
        let rows = reduced_rows(ranges.clone(), by_key, 0, None, sum).unwrap();
        assert_eq!(
            rows,
            [kv(json!("a"), 11), kv(json!("b"), 20), kv(json!("c"), 33)]
        );
        let rows = reduced_rows(ranges, by_key, 1, Some(1), sum).unwrap();
        assert_eq!(rows, [kv(json!("b"), 20)]);
    }

    #[test]
    fn rows_for_keys_come_in_the_keys_order_each_key_by_id() {
        let row = |k: i64, id: &str| json!({"id": id, "key": k, "value": null});
        let ranges = vec![
            vec![row(2, "b"), row(1, "x")],
            vec![row(2, "a"), row(1, "y"), row(2, "a")],
        ];
        let same = |a: &Value, b: &Value| settee_core::collate::compare(a, b);
        let keys = [json!(2), json!(1), json!(5), json!(2)];
        let rows = rows_in_key_order(ranges, &keys, same, by_key, 0, None);
        let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
        // The second 2 finds only the range that repeated its rows for it.
        assert_eq!(ids, ["a", "b", "x", "y", "a"]);
    }

    #[test]
    fn sorted_lists_merge_in_order() {
        let ranges = vec![
            vec![kv(json!(1), 0), kv(json!(4), 0)],
            vec![kv(json!(2), 0)],
        ];
        let rows = merge_sorted(ranges, by_key, 1, Some(2));
        assert_eq!(rows, [kv(json!(2), 0), kv(json!(4), 0)]);
    }

    #[test]
    fn a_write_keeps_the_special_members_then_the_body_as_sent() {
        let written = |doc: Value, replicated: bool| -> Value {
            let doc = settee_core::parse_doc(doc).unwrap();
            let mut out = Vec::new();
            write_doc(&doc, replicated, &mut out);
            serde_json::from_slice(&out).unwrap()
        };
        let doc = json!({"_id": "a", "_rev": "1-abc", "x": 1, "y": {"z": [1, "é"]}});
        let out = written(doc.clone(), false);
        assert_eq!(out, doc);
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["_id", "_rev", "x", "y"]);
        assert_eq!(written(json!({"_id": "b"}), false), json!({"_id": "b"}));
        assert_eq!(written(json!({"k": 2}), false), json!({"k": 2}));
        let out = written(json!({"_id": "c", "_rev": "2-def", "_deleted": true}), true);
        assert_eq!(out["_revisions"], json!({"start": 2, "ids": ["def"]}));
        assert_eq!(out["_deleted"], true);
    }

    #[test]
    fn a_write_is_decided_at_its_quorum_or_once_every_copy_answered() {
        let ok = Some(Reply::Answered {
            status: 201,
            body: json!({"rev": "1-a"}),
        });
        let conflict = Some(Reply::Answered {
            status: 409,
            body: json!({"error": "conflict"}),
        });
        assert!(!write_decided(&[ok.clone(), None, None], 2));
        assert!(write_decided(&[ok.clone(), None, ok.clone()], 2));
        assert!(!write_decided(&[ok.clone(), conflict.clone(), None], 2));
        assert!(write_decided(&[ok, conflict.clone(), conflict], 2));
        let down = Some(Reply::Unreachable("down".into()));
        assert!(write_decided(&[down.clone(), down.clone(), down], 2));
    }
}
