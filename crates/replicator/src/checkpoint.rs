//! Replication checkpoints: the `_local/<replication id>` documents both sides keep, how a
//! replication finds where to start from them, and the counters a session carries on from
//! them. Pure; the shapes and rules are CouchDB's (`couch_replicator_scheduler_job`:
//! `compare_replication_logs`, `do_checkpoint`; `couch_replicator_stats`).

use serde_json::{json, Map, Value};

/// How many sessions a checkpoint's `history` keeps.
pub const MAX_HISTORY: usize = 50;

/// The counters of a replication, as `history` entries and `_active_tasks` show them.
/// A session starts from those of the history it continues, so they count across
/// sessions, as CouchDB's do.
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

    /// The counters a `history` entry records (missing ones are 0).
    pub fn of_entry(entry: &Value) -> Stats {
        let n = |k: &str| entry.get(k).and_then(Value::as_u64).unwrap_or(0);
        Stats {
            revisions_checked: n("missing_checked"),
            missing_revisions_found: n("missing_found"),
            docs_read: n("docs_read"),
            docs_written: n("docs_written"),
            doc_write_failures: n("doc_write_failures"),
            bulk_get_docs: n("bulk_get_docs"),
            bulk_get_attempts: n("bulk_get_attempts"),
        }
    }

    /// Each counter's larger value (CouchDB's `max_stats`).
    pub fn max(&self, o: &Stats) -> Stats {
        Stats {
            revisions_checked: self.revisions_checked.max(o.revisions_checked),
            missing_revisions_found: self.missing_revisions_found.max(o.missing_revisions_found),
            docs_read: self.docs_read.max(o.docs_read),
            docs_written: self.docs_written.max(o.docs_written),
            doc_write_failures: self.doc_write_failures.max(o.doc_write_failures),
            bulk_get_docs: self.bulk_get_docs.max(o.bulk_get_docs),
            bulk_get_attempts: self.bulk_get_attempts.max(o.bulk_get_attempts),
        }
    }
}

/// Where a replication starts, from the checkpoints found on both sides.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    /// The seq to read changes after (`0`: from the start).
    pub seq: Value,
    /// The sessions this one continues, newest first: its checkpoints keep them after
    /// its own entry, and its counters start from the first one's.
    pub history: Vec<Value>,
}

impl Start {
    /// The counters this session starts from.
    pub fn stats(&self) -> Stats {
        self.history
            .first()
            .filter(|e| e.as_object().is_some_and(|o| !o.is_empty()))
            .map(Stats::of_entry)
            .unwrap_or_default()
    }
}

fn session(v: &Value) -> Option<&Value> {
    v.get("session_id")
}

fn history(v: Option<&Value>) -> &[Value] {
    v.and_then(|v| v.get("history"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Where to start given the checkpoints found on the source and the target (a missing one
/// counts as an empty document), as CouchDB's `compare_replication_logs` decides: when both
/// name the same last session (or neither names one), the source's `source_last_seq` and
/// its whole history; else the `recorded_seq` of the newest session the histories share,
/// walked in step, and the history older than it; else `0` and no history.
///
/// A seq an older Settee recorded (before sequences were CouchDB's) is unusable, as no
/// current source reads it back: the replication starts again from `0` with no history, as
/// CouchDB does for a checkpoint it cannot use.
pub fn start(source: Option<&Value>, target: Option<&Value>) -> Start {
    let found = compare_logs(source, target);
    match found.seq.as_str() {
        Some(s) if settee_core::seq::is_legacy_settee_seq(s) => Start {
            seq: json!(0),
            history: Vec::new(),
        },
        _ => found,
    }
}

fn compare_logs(source: Option<&Value>, target: Option<&Value>) -> Start {
    let (s, t) = (
        source.and_then(session).cloned(),
        target.and_then(session).cloned(),
    );
    if s == t {
        return Start {
            seq: source
                .and_then(|l| l.get("source_last_seq"))
                .cloned()
                .unwrap_or(json!(0)),
            history: history(source).to_vec(),
        };
    }
    compare_histories(history(source), history(target))
}

/// CouchDB's `compare_rep_history`: the two histories walked in step, each side's entry
/// looked for in the rest of the other's.
fn compare_histories(mut s: &[Value], mut t: &[Value]) -> Start {
    let has = |id: Option<&Value>, h: &[Value]| id.is_some() && h.iter().any(|e| session(e) == id);
    let recorded = |e: &Value| e.get("recorded_seq").cloned().unwrap_or(json!(0));
    while let (Some((s0, s_rest)), Some((t0, t_rest))) = (s.split_first(), t.split_first()) {
        if has(session(s0), t) {
            return Start {
                seq: recorded(s0),
                history: s_rest.to_vec(),
            };
        }
        if has(session(t0), s_rest) {
            return Start {
                seq: recorded(t0),
                history: t_rest.to_vec(),
            };
        }
        (s, t) = (s_rest, t_rest);
    }
    Start {
        seq: json!(0),
        history: Vec::new(),
    }
}

/// One session's `history` entry.
pub struct Session<'a> {
    pub session_id: &'a str,
    pub start_time: &'a str,
    pub end_time: &'a str,
    pub start_last_seq: &'a Value,
    pub end_last_seq: &'a Value,
    pub recorded_seq: &'a Value,
    /// Where the target stood at the checkpoint (see `Options::record_target_seq`).
    pub target_seq: Option<&'a Value>,
    pub stats: &'a Stats,
}

impl Session<'_> {
    pub fn entry(&self) -> Value {
        let s = self.stats;
        let mut entry = json!({
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
        });
        if let Some(t) = self.target_seq {
            entry["target_seq"] = t.clone();
        }
        entry
    }
}

/// The checkpoint document's body (without `_id` and `_rev`), the same on both sides, in
/// CouchDB's member order: this session's `entry` first in `history`, then `older` (the
/// sessions it continues, [`Start::history`]), at most [`MAX_HISTORY`] in all. A `doc_ids`
/// replication's also repeats the session's times and write counters at the top, as
/// CouchDB 1.0 answered.
pub fn body(entry: &Session, older: &[Value], doc_ids: bool) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("session_id".into(), json!(entry.session_id));
    doc.insert("source_last_seq".into(), entry.recorded_seq.clone());
    doc.insert("replication_id_version".into(), json!(crate::id::VERSION));
    if doc_ids {
        let s = entry.stats;
        doc.insert("start_time".into(), json!(entry.start_time));
        doc.insert("end_time".into(), json!(entry.end_time));
        doc.insert("docs_read".into(), json!(s.docs_read));
        doc.insert("docs_written".into(), json!(s.docs_written));
        doc.insert("doc_write_failures".into(), json!(s.doc_write_failures));
    }
    let mut history = vec![entry.entry()];
    history.extend(older.iter().take(MAX_HISTORY - 1).cloned());
    doc.insert("history".into(), Value::Array(history));
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, seq: u64) -> Value {
        json!({"session_id": id, "recorded_seq": seq, "docs_read": seq})
    }

    #[test]
    fn a_checkpoint_of_an_older_settee_starts_again() {
        // Written by an older Settee: `7-` and the base64 of `settee\0\0` and 7.
        let legacy =
            json!({"session_id": "b", "source_last_seq": "7-g1AAAAc2V0dGVlAAAAAAAAAAAABw"});
        let found = start(Some(&legacy), Some(&legacy));
        assert_eq!((found.seq, found.history.len()), (json!(0), 0));
    }

    #[test]
    fn start_follows_the_last_session_or_a_shared_one() {
        assert_eq!(start(None, None).seq, json!(0));
        let s = json!({"session_id": "c", "source_last_seq": 9,
            "history": [entry("c", 9), entry("b", 7), entry("a", 4)]});
        // A target without a checkpoint: from the start.
        assert_eq!(
            start(Some(&s), None),
            Start {
                seq: json!(0),
                history: vec![]
            }
        );
        let same = json!({"session_id": "c", "history": []});
        let st = start(Some(&s), Some(&same));
        assert_eq!(st.seq, json!(9));
        assert_eq!(st.history.len(), 3);
        assert_eq!(st.stats().docs_read, 9);
        // The newest shared session, and the history older than it.
        let older = json!({"session_id": "b", "history": [entry("b", 7), entry("a", 4)]});
        let st = start(Some(&s), Some(&older));
        assert_eq!(st.seq, json!(7));
        assert_eq!(st.history, vec![entry("a", 4)]);
        assert_eq!(st.stats().docs_read, 4);
        // Found from the target's side: its entry's seq and its older history.
        let newer = json!({"session_id": "d", "history": [entry("d", 11), entry("c", 9)]});
        let s2 = json!({"session_id": "x", "history": [entry("x", 1), entry("d", 11)]});
        let st = start(Some(&s2), Some(&newer));
        assert_eq!(st.seq, json!(11));
        assert_eq!(st.history, vec![entry("c", 9)]);
        let none = json!({"session_id": "z", "history": [entry("z", 3)]});
        assert_eq!(start(Some(&s), Some(&none)).seq, json!(0));
    }

    #[test]
    fn stats_are_the_larger_of_each() {
        let a = Stats {
            docs_read: 5,
            docs_written: 1,
            ..Stats::default()
        };
        let b = Stats {
            docs_read: 2,
            docs_written: 3,
            ..Stats::default()
        };
        let m = a.max(&b);
        assert_eq!((m.docs_read, m.docs_written), (5, 3));
    }

    #[test]
    fn history_is_capped_newest_first() {
        let stats = Stats::default();
        let mut older: Vec<Value> = Vec::new();
        let mut doc = Map::new();
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
                target_seq: None,
                stats: &stats,
            };
            doc = body(&session, &older, false);
            older = doc["history"].as_array().unwrap().clone();
        }
        let h = doc["history"].as_array().unwrap();
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h[0]["session_id"], "s59");
        assert_eq!(doc["source_last_seq"], 59);
        let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "session_id",
                "source_last_seq",
                "replication_id_version",
                "history"
            ]
        );
    }

    #[test]
    fn doc_ids_checkpoints_repeat_times_and_write_counters() {
        let stats = Stats {
            docs_read: 2,
            docs_written: 2,
            ..Stats::default()
        };
        let seq = json!("4-x");
        let session = Session {
            session_id: "s",
            start_time: "a",
            end_time: "b",
            start_last_seq: &json!(0),
            end_last_seq: &seq,
            recorded_seq: &seq,
            target_seq: None,
            stats: &stats,
        };
        let doc = body(&session, &[], true);
        let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "session_id",
                "source_last_seq",
                "replication_id_version",
                "start_time",
                "end_time",
                "docs_read",
                "docs_written",
                "doc_write_failures",
                "history"
            ]
        );
    }
}
