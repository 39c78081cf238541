//! Helpers the replication test files share.

use super::{Server, ADMIN};
use serde_json::{json, Value};

pub fn bulk(s: &Server, db: &str, docs: Value, new_edits: bool) {
    let r = s.post(
        &format!("/{db}/_bulk_docs"),
        &json!({"docs": docs, "new_edits": new_edits}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
}

/// `n` small documents `<prefix>-00000`…, written 500 at a time.
pub fn write_docs(s: &Server, db: &str, prefix: &str, n: usize) {
    for start in (0..n).step_by(500) {
        let docs: Vec<Value> = (start..n.min(start + 500))
            .map(|i| json!({"_id": format!("{prefix}-{i:05}"), "i": i}))
            .collect();
        bulk(s, db, json!(docs), true);
    }
}

/// A database with a conflict (on `a`), a deletion (`c`), an attachment (`b`), a design
/// document and `n` plain documents.
pub fn seed(s: &Server, db: &str, n: usize) {
    s.create_db(db);
    bulk(
        s,
        db,
        json!([
            {"_id": "a", "n": 1},
            {"_id": "b", "n": 2, "_attachments": {"bin.dat": {"content_type": "application/octet-stream", "data": "AAEC/f7/"}}},
            {"_id": "c", "n": 3},
            {"_id": "_design/d", "views": {"v": {"map": "function(d){emit(d.n)}"}}},
        ]),
        true,
    );
    bulk(
        s,
        db,
        json!([{"_id": "a", "_rev": "1-00000000000000000000000000000001", "n": "other"}]),
        false,
    );
    let c = s.get(&format!("/{db}/c")).json();
    let r = s.delete(&format!("/{db}/c?rev={}", c["_rev"].as_str().unwrap()));
    assert_eq!(r.status, 200, "{}", r.text);
    write_docs(s, db, "doc", n);
}

pub fn replicate(s: &Server, body: Value) -> (u16, Value) {
    let r = s.post("/_replicate", &body.to_string());
    (r.status, r.json())
}

/// The admin URL of a database of `s`.
pub fn url(s: &Server, db: &str) -> String {
    format!("http://{}:{}@{}/{db}", ADMIN.0, ADMIN.1, s.addr())
}
