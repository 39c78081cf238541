//! Replication checkpoints: the `_local/<replication id>` documents both sides keep, and how
//! a replication finds where to start from them. Pure.

use serde_json::{json, Map, Value};

/// How many sessions a checkpoint's `history` keeps.
pub const MAX_HISTORY: usize = 50;

/// The counters of a replication session, as `history` entries and `_active_tasks` show
/// them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub revisions_checked: u64,
    pub missing_revisions_found: u64,
    pub docs_read: u64,
    pub docs_written: u64,
    pub doc_write_failures: u64,
    pub bulk_get_docs: u64,
    pub bulk_get_attempts: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.revisions_checked += o.revisions_checked;
        self.missing_revisions_found += o.missing_revisions_found;
        self.docs_read += o.docs_read;
        self.docs_written += o.docs_written;
        self.doc_write_failures += o.doc_write_failures;
        self.bulk_get_docs += o.bulk_get_docs;
        self.bulk_get_attempts += o.bulk_get_attempts;
    }
}

/// The seq to start from given the checkpoints found on the source and the target: the
/// source's `source_last_seq` when both record the same last session, else the
/// `recorded_seq` of the newest session both histories share, else from the start (`0`).
/// A seq an older Settee recorded (before sequences were CouchDB's) is unusable, as no
/// current source reads it back: the replication starts again from `0`, as CouchDB does
/// for a checkpoint it cannot use.
pub fn start_seq(source: Option<&Value>, target: Option<&Value>) -> Value {
    let seq = shared_seq(source, target);
    match seq.as_str() {
        Some(s) if settee_core::seq::is_legacy_settee_seq(s) => json!(0),
        _ => seq,
    }
}

fn shared_seq(source: Option<&Value>, target: Option<&Value>) -> Value {
    let (Some(s), Some(t)) = (source, target) else {
        return json!(0);
    };
    let session = |v: &Value| {
        v.get("session_id")
            .and_then(Value::as_str)
            .map(String::from)
    };
    if session(s).is_some() && session(s) == session(t) {
        return s.get("source_last_seq").cloned().unwrap_or(json!(0));
    }
    let history = |v: &Value| {
        v.get("history")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let theirs = history(t);
    for entry in history(s) {
        let Some(id) = session(&entry) else { continue };
        if theirs
            .iter()
            .any(|e| session(e).as_deref() == Some(id.as_str()))
        {
            return entry.get("recorded_seq").cloned().unwrap_or(json!(0));
        }
    }
    json!(0)
}

/// One session's `history` entry.
pub struct Session<'a> {
    pub session_id: &'a str,
    pub start_time: &'a str,
    pub end_time: &'a str,
    pub start_last_seq: &'a Value,
    pub end_last_seq: &'a Value,
    pub recorded_seq: &'a Value,
    pub stats: &'a Stats,
}

impl Session<'_> {
    pub fn entry(&self) -> Value {
        let s = self.stats;
        json!({
            "session_id": self.session_id,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "start_last_seq": self.start_last_seq,
            "end_last_seq": self.end_last_seq,
            "recorded_seq": self.recorded_seq,
            "missing_checked": s.revisions_checked,
            "missing_found": s.missing_revisions_found,
            "docs_read": s.docs_read,
            "docs_written": s.docs_written,
            "doc_write_failures": s.doc_write_failures,
            "bulk_get_docs": s.bulk_get_docs,
            "bulk_get_attempts": s.bulk_get_attempts,
        })
    }
}

/// The checkpoint document to write: this session's `entry` first, then the earlier
/// sessions of `previous` (the document being replaced), at most [`MAX_HISTORY`] in all.
pub fn document(
    previous: Option<&Value>,
    session_id: &str,
    recorded_seq: &Value,
    entry: Value,
) -> Map<String, Value> {
    let mut history = vec![entry];
    if let Some(old) = previous
        .and_then(|p| p.get("history"))
        .and_then(Value::as_array)
    {
        history.extend(
            old.iter()
                .filter(|e| e.get("session_id").and_then(Value::as_str) != Some(session_id))
                .take(MAX_HISTORY - 1)
                .cloned(),
        );
    }
    let mut doc = Map::new();
    if let Some(rev) = previous.and_then(|p| p.get("_rev")) {
        doc.insert("_rev".into(), rev.clone());
    }
    doc.insert("session_id".into(), json!(session_id));
    doc.insert("source_last_seq".into(), recorded_seq.clone());
    doc.insert("replication_id_version".into(), json!(crate::id::VERSION));
    doc.insert("history".into(), Value::Array(history));
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_seq_follows_shared_sessions() {
        assert_eq!(start_seq(None, Some(&json!({}))), json!(0));
        let s = json!({"session_id": "b", "source_last_seq": 9,
            "history": [{"session_id": "b", "recorded_seq": 9}, {"session_id": "a", "recorded_seq": 4}]});
        let same = json!({"session_id": "b", "history": []});
        assert_eq!(start_seq(Some(&s), Some(&same)), json!(9));
        let older = json!({"session_id": "a", "history": [{"session_id": "a", "recorded_seq": 4}]});
        assert_eq!(start_seq(Some(&s), Some(&older)), json!(4));
        let none = json!({"session_id": "z", "history": [{"session_id": "z"}]});
        assert_eq!(start_seq(Some(&s), Some(&none)), json!(0));
        // Written by an older Settee: `7-` and the base64 of `settee\0\0` and 7.
        let legacy =
            json!({"session_id": "b", "source_last_seq": "7-g1AAAAc2V0dGVlAAAAAAAAAAAABw"});
        assert_eq!(start_seq(Some(&legacy), Some(&legacy)), json!(0));
    }

    #[test]
    fn history_is_capped_newest_first() {
        let stats = Stats::default();
        let mut prev: Option<Value> = None;
        for i in 0..60 {
            let id = format!("s{i}");
            let seq = json!(i);
            let session = Session {
                session_id: &id,
                start_time: "t",
                end_time: "t",
                start_last_seq: &seq,
                end_last_seq: &seq,
                recorded_seq: &seq,
                stats: &stats,
            };
            prev = Some(Value::Object(document(
                prev.as_ref(),
                &id,
                &seq,
                session.entry(),
            )));
        }
        let doc = prev.unwrap();
        let h = doc["history"].as_array().unwrap();
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h[0]["session_id"], "s59");
        assert_eq!(doc["source_last_seq"], 59);
    }
}
