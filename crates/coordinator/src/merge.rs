//! How the copies' answers combine (CouchDB's `fabric_doc_update`, `fabric_doc_open`,
//! `fabric_db_info`). Pure: the answers in, the client's answer out.

use base64::Engine;
use serde_json::{json, Map, Value};
use settee_core::Rev;

/// The quorum (`w` and `r`) of a range of `copies` copies: a majority.
pub fn quorum(copies: usize) -> usize {
    copies / 2 + 1
}

/// One copy's answer to a request: its status and JSON body, or no answer at all (the
/// member is not running, or did not answer).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Answered { status: u16, body: Value },
    Unreachable(String),
}

/// The combined answer to a single-document write.
#[derive(Debug, PartialEq)]
pub enum WriteOutcome {
    /// At least `w` copies hold the revision.
    Ok(Rev),
    /// At least one copy, fewer than `w`, holds it (CouchDB's 202 `accepted`).
    Accepted(Rev),
    /// No copy took it: the copies' common answer (or the first, when they differ).
    Refused { status: u16, body: Value },
    /// No copy answered.
    Unanswered(String),
}

/// Combines the copies' answers to a document write, in the order they came, for quorum
/// `w`: `w` copies holding the revision are a success, fewer (but one) an acceptance, as
/// CouchDB's `fabric_doc_update` decides. A copy that took the edit outweighs those that
/// refused it (they become conflicts internal replication resolves).
pub fn write(replies: &[Reply], w: usize) -> WriteOutcome {
    let written: Vec<Rev> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::Answered { status, body } if (200..300).contains(status) => {
                body["rev"].as_str().and_then(|r| Rev::parse(r).ok())
            }
            _ => None,
        })
        .collect();
    if let Some(first) = written.first() {
        let agreeing = written.iter().filter(|r| *r == first).count();
        return if agreeing >= w {
            WriteOutcome::Ok(first.clone())
        } else {
            WriteOutcome::Accepted(first.clone())
        };
    }
    let refused = replies.iter().find_map(|r| match r {
        Reply::Answered { status, body } => Some((*status, body.clone())),
        Reply::Unreachable(_) => None,
    });
    match refused {
        Some((status, body)) => WriteOutcome::Refused { status, body },
        None => WriteOutcome::Unanswered(unreachable_reason(replies)),
    }
}

fn unreachable_reason(replies: &[Reply]) -> String {
    let why: Vec<&str> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::Unreachable(why) => Some(why.as_str()),
            Reply::Answered { .. } => None,
        })
        .collect();
    format!("no copy answered: {}", why.join("; "))
}

/// One document's part of a copy's `_bulk_docs` answer (`k`: its place among the
/// documents sent to that copy), as a single write's reply: its entry with the status a
/// single write would have had. A replicated write (`new_edits=false`) that succeeded has
/// no entry: a 201 without a body then.
pub fn bulk_entry(reply: &Reply, k: usize, id: &str, new_edits: bool) -> Reply {
    let Reply::Answered { status, body } = reply else {
        return reply.clone();
    };
    if !(200..300).contains(status) {
        return reply.clone();
    }
    let entries = body.as_array().map(Vec::as_slice).unwrap_or_default();
    let entry = if new_edits {
        entries.get(k).cloned()
    } else {
        entries.iter().find(|e| e["id"] == id).cloned()
    };
    match entry {
        None if !new_edits => Reply::Answered {
            status: 201,
            body: Value::Null,
        },
        None => Reply::Unreachable("a copy's _bulk_docs answer is short".into()),
        Some(e) if e["ok"] == true => Reply::Answered {
            status: 201,
            body: e,
        },
        Some(e) => {
            let status = match e["error"].as_str().unwrap_or_default() {
                "conflict" => 409,
                "forbidden" => 403,
                "unauthorized" => 401,
                "not_found" => 404,
                _ => 400,
            };
            Reply::Answered { status, body: e }
        }
    }
}

/// A replicated write's success in a [`bulk_entry`] reply.
pub fn replicated_ok(reply: &Reply) -> bool {
    matches!(
        reply,
        Reply::Answered {
            status: 201,
            body: Value::Null
        }
    )
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
            .filter(|i| !matches!(replies[*i], Reply::Unreachable(_)))
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
            Reply::Unreachable(_) => {}
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

/// The leading number of a copy's sequence (`"12-…"` or `12`).
fn seq_number(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or(0),
        Value::String(s) => s
            .split('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// A clustered sequence: the sum of the ranges' sequences, then the vector of (range,
/// node, sequence) it was read from, base64url (CouchDB's are opaque too: `{sum}-{…}`).
pub fn clustered_seq(parts: &[(&str, &str, u64)]) -> String {
    let sum: u64 = parts.iter().map(|p| p.2).sum();
    let vector = json!(parts
        .iter()
        .map(|(r, n, s)| json!([r, n, s]))
        .collect::<Vec<_>>());
    let packed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vector.to_string());
    format!("{sum}-{packed}")
}

/// A clustered database's information from one copy of each range, members in the order
/// a Settee node shows its own (`Node::db_info`): counts and sizes summed, sequences
/// combined ([`clustered_seq`]), `cluster` from the shard map.
pub fn db_info(name: &str, ranges: &[RangeInfo<'_>], q: u32, n: u32) -> Value {
    let sum = |f: &dyn Fn(&Value) -> &Value| -> u64 {
        ranges.iter().map(|r| f(r.info).as_u64().unwrap_or(0)).sum()
    };
    let seqs = |member: &str| -> String {
        let parts: Vec<(&str, &str, u64)> = ranges
            .iter()
            .map(|r| (r.range, r.node, seq_number(&r.info[member])))
            .collect();
        clustered_seq(&parts)
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
        "purge_seq": seqs("purge_seq"),
        "update_seq": seqs("update_seq"),
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
/// write), `_deleted`, then the body and `_attachments` as the client sent them.
pub fn doc_json(doc: &settee_core::ParsedDoc, replicated: bool) -> Value {
    let mut out = Map::new();
    if let Some(id) = &doc.id {
        out.insert("_id".into(), json!(id));
    }
    if let Some((pos, ids)) = &doc.revs {
        if let Some(first) = ids.first() {
            out.insert("_rev".into(), json!(format!("{pos}-{first}")));
        }
        if replicated {
            let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            out.insert("_revisions".into(), json!({"start": pos, "ids": ids}));
        }
    }
    if doc.deleted {
        out.insert("_deleted".into(), json!(true));
    }
    let body = settee_core::split_stored(&doc.body).0;
    if let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) {
        out.extend(body);
    }
    if let Some(atts) = &doc.atts {
        out.insert("_attachments".into(), Value::Object(atts.clone()));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let answer = Reply::Answered {
            status: 201,
            body: json!([{"ok": true, "id": "a", "rev": "1-x"},
                         {"id": "b", "error": "conflict", "reason": "Document update conflict."}]),
        };
        assert_eq!(
            bulk_entry(&answer, 0, "a", true),
            Reply::Answered {
                status: 201,
                body: json!({"ok": true, "id": "a", "rev": "1-x"})
            }
        );
        assert!(matches!(
            bulk_entry(&answer, 1, "b", true),
            Reply::Answered { status: 409, .. }
        ));
        // Replicated writes: only failures have entries.
        let replicated = Reply::Answered {
            status: 201,
            body: json!([{"id": "b", "error": "forbidden", "reason": "no"}]),
        };
        assert!(replicated_ok(&bulk_entry(&replicated, 0, "a", false)));
        assert!(matches!(
            bulk_entry(&replicated, 1, "b", false),
            Reply::Answered { status: 403, .. }
        ));
        assert_eq!(bulk_entry(&down(), 0, "a", true), down());
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
}
