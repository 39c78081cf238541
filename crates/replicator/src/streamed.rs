//! The streamed path: how a document whose attachments are too large to carry inline in a
//! `_bulk_docs` batch is copied, one at a time, with its attachments' content flowing from
//! the source to the target in chunks and never whole in memory.
//!
//! CouchDB's replicator (`couch_replicator_worker`) reads each missing revision with
//! `atts_since` set to the revisions `_revs_diff` named as possible ancestors, so only
//! attachments newer than what the target holds come with content; documents with small
//! attachments all sent go into the `_bulk_docs` batch, and every other document with
//! attachments is written alone as a `multipart/related` `PUT ?new_edits=false` whose
//! attachment parts stream from the source. This does the same, with the decision made
//! from stubs first ([`route`]), so no content is read before it is known where it goes.
//!
//! Content is stored-as-is: gzip-encoded attachments are read encoded and written with
//! `"encoding": "gzip"`, so the target stores the same bytes under the same digest.

use crate::endpoint::{Endpoint, Fetch, Follows, WriteFailure};
use crate::{Error, Result};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;

/// Attachment content (stored bytes, all of a document's attachments together) a document
/// may carry inline in a `_bulk_docs` batch; with more, or with attachments the target
/// already holds, it is streamed. CouchDB's replicator batches documents whose attachments
/// are each at most 64 KiB (and at most eight); counting the total instead bounds what one
/// document adds to a batch.
pub const INLINE_MAX: u64 = 64 << 10;

/// Inline attachment content fetched and written in one `bulk_get` → `bulk_docs` round:
/// documents with small attachments go in rounds of at most this much (base64 and parsed
/// JSON make a round several times this in memory), not all of a batch at once.
pub const INLINE_ROUND: u64 = 1 << 20;

/// Streamed documents of one batch copied at once (each holds one source read and one
/// target write open; `worker_processes` batches run at once).
pub const AT_ONCE: usize = 2;

/// Revisions read with attachment stubs and encoding details, as JSON: how the streamed
/// path reads a document before its content.
pub const STUBS: Fetch = Fetch {
    inline: false,
    stored: false,
};

/// Chunks buffered between the source's read and the target's write of one attachment.
const BUFFERED_CHUNKS: usize = 4;

/// Attempts at copying one streamed document when the source or target fails in a way a
/// retry may cure: a streamed body cannot be replayed, so the whole document is read
/// again, as CouchDB's replicator does.
const ATTEMPTS: u32 = 3;

/// How a fetched document (with stubs) travels.
#[derive(Debug, PartialEq)]
pub enum Route {
    /// No attachments: it is complete as fetched, for the batch.
    Batch,
    /// Small attachments stored as they are (not gzip-encoded), all to be sent: fetched
    /// again with content inline (this many stored bytes) for the batch.
    Inline(u64),
    /// Written alone, attachment content streamed.
    Streamed,
}

/// One attachment as its stub describes it.
struct Stub<'a> {
    name: &'a str,
    revpos: u64,
    /// Stored bytes: `encoded_length` for gzip-encoded content, else `length`.
    stored: u64,
    gzip: bool,
}

fn stubs(doc: &Value) -> Vec<Stub<'_>> {
    let Some(atts) = doc.get("_attachments").and_then(Value::as_object) else {
        return Vec::new();
    };
    atts.iter()
        .map(|(name, att)| {
            let num = |k: &str| att.get(k).and_then(Value::as_u64);
            let gzip = att.get("encoding").and_then(Value::as_str) == Some("gzip");
            Stub {
                name,
                revpos: num("revpos").unwrap_or(0),
                stored: if gzip {
                    num("encoded_length").or(num("length")).unwrap_or(0)
                } else {
                    num("length").unwrap_or(0)
                },
                gzip,
            }
        })
        .collect()
}

/// The position of the newest revision of the document's history (`_revisions`) that the
/// target holds (one of `possible_ancestors`), as CouchDB's `atts_since` finds it:
/// attachments with a `revpos` up to it are on the target already. 0 when there is none.
pub fn since_pos(doc: &Value, possible_ancestors: &[String]) -> u64 {
    let Some(revs) = doc.get("_revisions") else {
        return 0;
    };
    let start = revs.get("start").and_then(Value::as_u64).unwrap_or(0);
    let ids = revs.get("ids").and_then(Value::as_array);
    for (i, id) in ids.into_iter().flatten().enumerate() {
        let (Some(pos), Some(id)) = (start.checked_sub(i as u64), id.as_str()) else {
            break;
        };
        let rev = format!("{pos}-{id}");
        if possible_ancestors.contains(&rev) {
            return pos;
        }
    }
    0
}

/// Which way a document fetched with stubs goes, given the position of the newest
/// ancestor the target holds. Gzip-encoded content is always streamed: inline JSON
/// carries attachments decoded, and the target would store them by its own rules;
/// streamed, they arrive still encoded (`Content-Encoding: gzip` parts, as CouchDB's
/// replicator sends them) and keep their `encoding` and `encoded_length`.
pub fn route(doc: &Value, since: u64) -> Route {
    let stubs = stubs(doc);
    if stubs.is_empty() {
        return Route::Batch;
    }
    let total: u64 = stubs.iter().map(|s| s.stored).sum();
    let streamed = |s: &Stub| s.revpos <= since || s.gzip;
    if total > INLINE_MAX || stubs.iter().any(streamed) {
        Route::Streamed
    } else {
        Route::Inline(total)
    }
}

/// An attachment whose content follows a streamed document.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub name: String,
    pub length: u64,
    pub gzip: bool,
}

/// The document as it is written on the streamed path: attachments newer than `since`
/// marked `follows` (their stub's `content_type`, `revpos`, `digest`, `length` and
/// encoding kept), older ones left as stubs; and the parts that follow, in order.
pub fn with_follows(doc: &Value, since: u64) -> (Value, Vec<Part>) {
    let parts: Vec<Part> = stubs(doc)
        .into_iter()
        .filter(|s| s.revpos > since)
        .map(|s| Part {
            name: s.name.to_string(),
            length: s.stored,
            gzip: s.gzip,
        })
        .collect();
    let mut out = doc.clone();
    if let Some(Value::Object(atts)) = out.get_mut("_attachments") {
        for (name, att) in atts.iter_mut() {
            let Value::Object(att) = att else { continue };
            if parts.iter().any(|p| p.name == *name) {
                att.shift_remove("stub");
                att.insert("follows".into(), Value::Bool(true));
            } else {
                att.insert("stub".into(), Value::Bool(true));
            }
        }
    }
    (out, parts)
}

/// Splits documents (with their inline content's size) into rounds of at most `max`
/// bytes of content, in order; a document larger than `max` has a round of its own.
pub fn rounds<T>(items: Vec<(T, u64)>, max: u64) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    let mut size = 0;
    for (item, bytes) in items {
        match out.last_mut() {
            Some(round) if size + bytes <= max => round.push(item),
            _ => {
                out.push(vec![item]);
                size = 0;
            }
        }
        size += bytes;
    }
    out
}

/// The end of one streamed document's copy.
#[derive(Debug)]
pub enum Copied {
    Written,
    Refused(WriteFailure),
    /// The source no longer has the revision (nor a later one): nothing to copy.
    Gone,
}

fn str_of<'a>(doc: &'a Value, key: &str) -> &'a str {
    doc.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Copies one document fetched with stubs ([`STUBS`]) on the streamed path, reading
/// it again on a failure a retry may cure, and sending every attachment when the target
/// lacks a stub's content (`missing_stub`), as CouchDB's replicator does.
pub async fn copy<S: Endpoint, T: Endpoint>(
    source: &S,
    target: &T,
    mut doc: Value,
    possible_ancestors: &[String],
) -> Result<Copied> {
    let mut since = since_pos(&doc, possible_ancestors);
    let mut attempt = 1;
    loop {
        let (id, rev) = (str_of(&doc, "_id").to_string(), str_of(&doc, "_rev"));
        let failure = match write(source, target, &doc, since).await {
            Ok(None) => return Ok(Copied::Written),
            Ok(Some(f)) if f.error == "missing_stub" && since > 0 && attempt < ATTEMPTS => {
                tracing::warn!(
                    "replicator: {id} {rev}: the target lacks an attachment stub's content; \
                     sending every attachment"
                );
                since = 0;
                attempt += 1;
                continue;
            }
            Ok(Some(f)) => return Ok(Copied::Refused(f)),
            Err(e @ (Error::RequestFailed(_) | Error::Protocol(_))) if attempt < ATTEMPTS => e,
            Err(e) => return Err(e),
        };
        tracing::warn!("replicator: copying {id} {rev} again: {failure}");
        tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
        let wanted = vec![(id, rev.to_string())];
        let Some(again) = source.bulk_get(wanted, STUBS).await?.into_iter().next() else {
            return Ok(Copied::Gone);
        };
        let again = again.into_json();
        since = since.min(since_pos(&again, possible_ancestors));
        doc = again;
        attempt += 1;
    }
}

/// One attempt: the target's write runs with a pump that feeds it each attachment's
/// content from the source, in order, through a small bounded channel.
async fn write<S: Endpoint, T: Endpoint>(
    source: &S,
    target: &T,
    doc: &Value,
    since: u64,
) -> Result<Option<WriteFailure>> {
    let (doc, parts) = with_follows(doc, since);
    let (id, rev) = (
        str_of(&doc, "_id").to_string(),
        str_of(&doc, "_rev").to_string(),
    );
    let mut follows = Vec::with_capacity(parts.len());
    let mut senders = Vec::with_capacity(parts.len());
    for p in &parts {
        let (tx, rx) = mpsc::channel(BUFFERED_CHUNKS);
        follows.push(Follows {
            name: p.name.clone(),
            length: p.length,
            content: Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)),
        });
        senders.push(tx);
    }
    let put = target.put_streamed(doc, follows);
    let pump = pump(source, &id, &rev, &parts, senders);
    tokio::pin!(put, pump);
    let mut pumped = None;
    loop {
        tokio::select! {
            written = &mut put => {
                // A source failure ends the write too; it is the one to report.
                return match pumped {
                    Some(Err(e)) => Err(e),
                    _ => written,
                };
            }
            p = &mut pump, if pumped.is_none() => pumped = Some(p),
        }
    }
}

/// Reads each part's content from the source into its channel. A failure is passed on
/// to the target as an `Err` item (so it stores nothing unfinished) and returned; a target
/// that stopped reading (it refused the document) ends the pump quietly.
async fn pump<S: Endpoint>(
    source: &S,
    id: &str,
    rev: &str,
    parts: &[Part],
    senders: Vec<mpsc::Sender<Result<Bytes>>>,
) -> Result<()> {
    for (part, tx) in parts.iter().zip(senders) {
        let relay = |e: &Error| {
            Error::Protocol(format!(
                "reading attachment {} of {id} from the source: {e}",
                part.name
            ))
        };
        let mut content = match source.attachment(id, rev, &part.name, part.gzip).await {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Err(relay(&e))).await;
                return Err(e);
            }
        };
        let mut sent = 0u64;
        while let Some(chunk) = content.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(relay(&e))).await;
                    return Err(e);
                }
            };
            sent += chunk.len() as u64;
            if sent > part.length {
                break;
            }
            if tx.send(Ok(chunk)).await.is_err() {
                return Ok(());
            }
        }
        if sent != part.length {
            let e = Error::Protocol(format!(
                "attachment {} of {id} {rev}: the source sent {sent} bytes or more, its stub \
                 says {}",
                part.name, part.length
            ));
            let _ = tx.send(Err(relay(&e))).await;
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(atts: Value) -> Value {
        json!({
            "_id": "d",
            "_rev": "3-c",
            "_revisions": {"start": 3, "ids": ["c", "b", "a"]},
            "_attachments": atts,
        })
    }

    #[test]
    fn since_is_the_newest_ancestor_on_the_documents_path() {
        let d = doc(json!({}));
        let pas = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(since_pos(&d, &pas(&[])), 0);
        assert_eq!(since_pos(&d, &pas(&["1-a"])), 1);
        assert_eq!(since_pos(&d, &pas(&["1-a", "2-b"])), 2);
        // A leaf of another branch is no ancestor of this revision.
        assert_eq!(since_pos(&d, &pas(&["2-x"])), 0);
        assert_eq!(since_pos(&json!({"_id": "d"}), &pas(&["1-a"])), 0);
    }

    #[test]
    fn routes_by_size_and_by_what_the_target_holds() {
        assert_eq!(route(&json!({"_id": "d"}), 0), Route::Batch);
        let small = doc(json!({"a": {"revpos": 3, "length": 10, "stub": true}}));
        assert_eq!(route(&small, 2), Route::Inline(10));
        // The target holds it (revpos ≤ since): a stub, so streamed.
        assert_eq!(route(&small, 3), Route::Streamed);
        let big = doc(json!({
            "a": {"revpos": 3, "length": INLINE_MAX, "stub": true},
            "b": {"revpos": 3, "length": 1, "stub": true},
        }));
        assert_eq!(route(&big, 0), Route::Streamed);
        // Gzip-encoded content, however small, travels encoded.
        let gz = doc(json!({"a": {
            "revpos": 1, "length": 100, "encoding": "gzip", "encoded_length": 40,
        }}));
        assert_eq!(route(&gz, 0), Route::Streamed);
    }

    #[test]
    fn follows_marks_newer_attachments_and_keeps_older_stubs() {
        let d = doc(json!({
            "old": {"content_type": "text/plain", "revpos": 1, "digest": "md5-x", "length": 5, "stub": true},
            "new": {"content_type": "text/plain", "revpos": 3, "digest": "md5-y", "length": 50,
                    "encoding": "gzip", "encoded_length": 20, "stub": true},
        }));
        let (out, parts) = with_follows(&d, 2);
        assert_eq!(
            parts,
            vec![Part {
                name: "new".into(),
                length: 20,
                gzip: true
            }]
        );
        assert_eq!(out["_attachments"]["old"]["stub"], true);
        assert_eq!(out["_attachments"]["new"]["follows"], true);
        assert!(out["_attachments"]["new"].get("stub").is_none());
        assert_eq!(out["_attachments"]["new"]["encoding"], "gzip");
        let (_, all) = with_follows(&d, 0);
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn rounds_bound_inline_content() {
        let r = rounds(
            vec![("a", 600), ("b", 500), ("c", 100), ("d", 2000), ("e", 1)],
            1000,
        );
        assert_eq!(r, vec![vec!["a"], vec!["b", "c"], vec!["d"], vec!["e"]]);
        assert!(rounds(Vec::<(u8, u64)>::new(), 10).is_empty());
    }
}
