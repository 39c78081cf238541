//! Incoming document JSON → (id, revision path, deleted flag, body without special members),
//! and the reverse: stored body bytes → the JSON CouchDB returns, without re-encoding the
//! body. Field order is the client's own (serde_json with `preserve_order`).

use crate::rev::{Rev, RevId};
use crate::Error;
use serde_json::{Map, Value};

/// CouchDB's default `[couchdb] max_document_size`.
pub const MAX_DOCUMENT_SIZE: usize = 8_000_000;

#[derive(Debug, Clone, PartialEq)]
pub struct ParsedDoc {
    pub id: Option<String>,
    /// `(pos, ids newest first)`, from `_revisions` or else `_rev`.
    pub revs: Option<(u64, Vec<RevId>)>,
    pub deleted: bool,
    /// The body as a compact JSON object, special members removed (once attachments are
    /// resolved, followed by their stubs: see [`join_stored`]).
    pub body: Vec<u8>,
    /// `_attachments` as the client sent it (stubs, inline data), not yet resolved.
    pub atts: Option<Map<String, Value>>,
    /// The Erlang term of the body's JSON ([`crate::body_term`]), once the body is final,
    /// so that the database writer only hashes it. `None`: the writer computes it.
    pub body_term: Option<Vec<u8>>,
}

impl ParsedDoc {
    /// The revision the client says it edits (`_rev`, or the head of `_revisions`).
    pub fn rev(&self) -> Option<Rev> {
        self.revs
            .as_ref()
            .map(|(pos, ids)| Rev::new(*pos, ids[0].clone()))
    }
}

/// Members CouchDB accepts on write and drops (they are computed on read).
const IGNORED: &[&str] = &[
    "_revs_info",
    "_local_seq",
    "_conflicts",
    "_deleted_conflicts",
];
/// Members CouchDB keeps in the body although they start with `_`.
const KEPT: &[&str] = &[
    "_replication_state",
    "_replication_state_time",
    "_replication_state_reason",
    "_replication_id",
    "_replication_stats",
];

pub fn parse_doc(value: Value) -> Result<ParsedDoc, Error> {
    let Value::Object(map) = value else {
        return Err(Error::bad_request("Document must be a JSON object"));
    };
    let mut doc = ParsedDoc {
        id: None,
        revs: None,
        deleted: false,
        body: Vec::new(),
        atts: None,
        body_term: None,
    };
    let mut body = Map::new();
    let mut rev_field = None;
    for (k, v) in map {
        match k.as_str() {
            "_id" => match v {
                Value::String(s) => doc.id = Some(s),
                _ => return Err(Error::IllegalDocId("Document id must be a string".into())),
            },
            "_rev" => rev_field = Some(v),
            "_revisions" => doc.revs = Some(parse_revisions(&v)?),
            "_deleted" if v.is_boolean() => doc.deleted = v == Value::Bool(true),
            "_attachments" => match v {
                Value::Object(m) if m.is_empty() => {}
                Value::Object(m) => doc.atts = Some(m),
                Value::Null => {}
                _ => return Err(Error::bad_request("_attachments must be a JSON object")),
            },
            k if IGNORED.contains(&k) => {}
            k if KEPT.contains(&k) || !k.starts_with('_') => {
                body.insert(k.to_string(), v);
            }
            k => {
                return Err(Error::DocValidation(format!(
                    "Bad special document member: {k}"
                )));
            }
        }
    }
    if doc.revs.is_none() {
        if let Some(v) = rev_field {
            let s = v
                .as_str()
                .ok_or_else(|| Error::bad_request("Invalid rev format"))?;
            let rev = Rev::parse(s)?;
            doc.revs = Some((rev.pos, vec![rev.id]));
        }
    }
    doc.body = serde_json::to_vec(&Value::Object(body)).expect("a Value always serializes");
    Ok(doc)
}

fn parse_revisions(v: &Value) -> Result<(u64, Vec<RevId>), Error> {
    let invalid = |r: &str| Error::DocValidation(r.to_string());
    let start = v.get("start").and_then(Value::as_u64);
    let ids = v.get("ids").and_then(Value::as_array);
    let start = start.ok_or_else(|| invalid("_revisions.start isn't an integer."))?;
    let ids = ids.ok_or_else(|| invalid("_revisions.ids isn't a array."))?;
    let ids = ids
        .iter()
        .map(|id| {
            let s = id.as_str().ok_or_else(|| invalid("RevId isn't a string"))?;
            RevId::parse(s).ok_or_else(|| invalid("RevId isn't a valid hexadecimal"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() || start == 0 || (start as usize) < ids.len() {
        return Err(Error::bad_request("Invalid rev format"));
    }
    Ok((start, ids))
}

/// Separates a stored body from its attachment stubs. JSON text never holds a raw NUL
/// byte, so none can be mistaken for it.
const ATTS_SEPARATOR: u8 = 0;

/// A revision's stored bytes: the body's JSON, then (if it has attachments) a NUL byte and
/// the `_attachments` stubs' JSON object — optionally followed by another NUL byte and the
/// stubs' encoding details (see [`split_encodings`]), which renderers leave out.
pub fn join_stored(body: &[u8], atts: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + atts.map_or(0, |a| a.len() + 1));
    out.extend_from_slice(body);
    if let Some(a) = atts {
        out.push(ATTS_SEPARATOR);
        out.extend_from_slice(a);
    }
    out
}

/// The body's JSON and the attachment section of a revision's stored bytes.
pub fn split_stored(stored: &[u8]) -> (&[u8], Option<&[u8]>) {
    // Every rendered document passes through here: scan with memchr, not byte by byte.
    match memchr::memchr(ATTS_SEPARATOR, stored) {
        Some(at) => (&stored[..at], Some(&stored[at + 1..])),
        None => (stored, None),
    }
}

/// The content bytes (each stub's `length`) of the attachments in a revision's stored bytes:
/// what database sizes count for them besides the stubs themselves.
pub fn attachment_bytes(stored: &[u8]) -> u64 {
    let Some(section) = split_stored(stored).1 else {
        return 0;
    };
    let stubs: Map<String, Value> =
        serde_json::from_slice(split_encodings(section).0).unwrap_or_default();
    stubs
        .values()
        .filter_map(|s| s.get("length").and_then(Value::as_u64))
        .sum()
}

/// The stubs' JSON and the encoding details' JSON (`{name: {"encoding", "encoded_length"}}`,
/// only for attachments stored compressed) of an attachment section.
pub fn split_encodings(section: &[u8]) -> (&[u8], Option<&[u8]>) {
    split_stored(section)
}

/// Builds a document's JSON text: `_id`, `_rev`, the stored body's members in their stored
/// order, then any extra members in the order they are added, then `_attachments` (last,
/// as CouchDB renders it). The body is copied as stored, never re-encoded. `rev` is text
/// because local documents have `0-N` revisions.
pub struct DocJson {
    out: Vec<u8>,
    atts: Option<Vec<u8>>,
}

impl DocJson {
    pub fn new(id: &str, rev: Option<&str>, stored: &[u8]) -> Self {
        let (body, atts) = split_stored(stored);
        let mut out = Vec::with_capacity(body.len() + id.len() + 64);
        out.extend_from_slice(b"{\"_id\":");
        serde_json::to_writer(&mut out, id).expect("string serializes");
        if let Some(rev) = rev {
            out.extend_from_slice(b",\"_rev\":");
            serde_json::to_writer(&mut out, rev).expect("string serializes");
        }
        let inner = body
            .strip_prefix(b"{")
            .and_then(|b| b.strip_suffix(b"}"))
            .unwrap_or(b"");
        if !inner.is_empty() {
            out.push(b',');
            out.extend_from_slice(inner);
        }
        DocJson {
            out,
            atts: atts.map(|a| split_encodings(a).0.to_vec()),
        }
    }

    /// Replaces the `_attachments` member rendered at the end (`None`: none).
    pub fn set_attachments(&mut self, atts: Option<Vec<u8>>) -> &mut Self {
        self.atts = atts;
        self
    }

    pub fn member(&mut self, key: &str, value: &Value) -> &mut Self {
        self.out.push(b',');
        serde_json::to_writer(&mut self.out, key).expect("string serializes");
        self.out.push(b':');
        serde_json::to_writer(&mut self.out, value).expect("value serializes");
        self
    }

    pub fn finish(mut self) -> Vec<u8> {
        if let Some(atts) = self.atts.take() {
            self.out.extend_from_slice(b",\"_attachments\":");
            self.out.extend_from_slice(&atts);
        }
        self.out.push(b'}');
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_special_members_and_keeps_order() {
        let v = serde_json::from_str(
            r#"{"z":1,"_id":"x","a":[1.50,2],"_rev":"1-abc","_conflicts":[]}"#,
        )
        .unwrap();
        let d = parse_doc(v).unwrap();
        assert_eq!(d.id.as_deref(), Some("x"));
        assert_eq!(d.rev().unwrap().to_string(), "1-abc");
        assert_eq!(
            String::from_utf8(d.body).unwrap(),
            r#"{"z":1,"a":[1.50,2]}"#
        );
    }

    #[test]
    fn revisions_win_over_rev() {
        let d =
            parse_doc(json!({"_rev": "1-x", "_revisions": {"start": 3, "ids": ["c", "b", "a"]}}))
                .unwrap();
        assert_eq!(d.rev().unwrap().to_string(), "3-c");
        assert_eq!(d.revs.unwrap().1.len(), 3);
    }

    #[test]
    fn rejects_bad_members() {
        assert!(matches!(parse_doc(json!([])), Err(Error::BadRequest(_))));
        assert!(matches!(
            parse_doc(json!({"_foo": 1})),
            Err(Error::DocValidation(_))
        ));
        assert!(matches!(
            parse_doc(json!({"_deleted": "yes"})),
            Err(Error::DocValidation(_))
        ));
        assert!(matches!(
            parse_doc(json!({"_id": 5})),
            Err(Error::IllegalDocId(_))
        ));
        assert!(matches!(
            parse_doc(json!({"_rev": "nope"})),
            Err(Error::BadRequest(_))
        ));
    }

    #[test]
    fn renders_without_reencoding() {
        let mut j = DocJson::new("x", Some("1-abc"), br#"{"n":1.0e3}"#);
        j.member("_deleted", &json!(true));
        assert_eq!(
            String::from_utf8(j.finish()).unwrap(),
            r#"{"_id":"x","_rev":"1-abc","n":1.0e3,"_deleted":true}"#
        );
        assert_eq!(DocJson::new("y", None, b"{}").finish(), br#"{"_id":"y"}"#);
    }
}
