//! Document bodies as clients send them (`PUT /db/doc`, `_bulk_docs`): any bytes through the
//! JSON parser and `settee_core::parse_doc`. An accepted document, written back out as JSON
//! with its special members, parses to the same document; its stored body is a JSON object
//! with no special member but the ones CouchDB keeps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use settee_core::{join_stored, parse_doc, split_stored, DocJson};

const KEPT: &[&str] = &[
    "_replication_state",
    "_replication_state_time",
    "_replication_state_reason",
    "_replication_id",
    "_replication_stats",
];

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(doc) = parse_doc(value) else {
        return;
    };
    let body: Map<String, Value> =
        serde_json::from_slice(&doc.body).expect("the stored body is a JSON object");
    for k in body.keys() {
        assert!(
            !k.starts_with('_') || KEPT.contains(&k.as_str()),
            "special member {k} kept in the body"
        );
    }
    // Written back out as a client would send it again.
    let mut again = body.clone();
    if let Some(id) = &doc.id {
        again.insert("_id".into(), json!(id));
    }
    // One revision as `_rev` (which, as CouchDB's, takes position 0), a path as `_revisions`.
    match &doc.revs {
        Some((pos, ids)) if ids.len() == 1 => {
            again.insert("_rev".into(), json!(format!("{pos}-{}", ids[0])));
        }
        Some((pos, ids)) => {
            let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            again.insert("_revisions".into(), json!({"start": pos, "ids": ids}));
        }
        None => {}
    }
    if doc.deleted {
        again.insert("_deleted".into(), json!(true));
    }
    if let Some(atts) = &doc.atts {
        again.insert("_attachments".into(), Value::Object(atts.clone()));
    }
    let reparsed = parse_doc(Value::Object(again)).expect("a parsed document parses again");
    assert_eq!(reparsed.id, doc.id);
    assert_eq!(reparsed.revs, doc.revs, "revision path");
    assert_eq!(reparsed.deleted, doc.deleted);
    assert_eq!(reparsed.atts, doc.atts);
    assert_eq!(reparsed.body, doc.body);
    // Stored as the database stores it, and read back as JSON.
    let stored = join_stored(&doc.body, Some(b"{}"));
    assert_eq!(split_stored(&stored), (&doc.body[..], Some(&b"{}"[..])));
    let id = doc.id.as_deref().unwrap_or("x");
    let rev = doc.rev().map(|r| r.to_string());
    let out = DocJson::new(id, rev.as_deref(), &doc.body).finish();
    let out: Value = serde_json::from_slice(&out).expect("a read document is JSON");
    assert_eq!(out["_id"], json!(id));
});
