//! The membership list's documents (CouchDB's `_nodes` database): one per node, `_id` the
//! node's name, edited with CouchDB's single-revision rules. A removed node's document stays
//! as a deletion (a tombstone, as in any CouchDB database): it is not listed, reads say
//! `deleted`, and adding the node again extends it. Pure: an edit is a function of the
//! current document and the request; `state.rs` stores the result in one transaction.

use crate::{Error, Result};
use serde_json::{Map, Value};
use settee_core::{new_rev_id, Rev};

/// The member of a stored document naming the write that stored it, so that a write which
/// finds the document as it would have left it can tell its own retried write (done) from
/// another writer's identical one (a conflict, as in CouchDB). Never shown.
const WRITE: &str = "_settee_write";

/// One node's document as stored: its name, revision and body (`zone`, …).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeDoc {
    pub name: String,
    pub rev: Rev,
    pub body: Map<String, Value>,
    /// Removed from the list: only its revision is kept.
    pub deleted: bool,
}

impl NodeDoc {
    /// The document as CouchDB shows it: `_id`, `_rev`, then the body.
    pub fn to_json(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("_id".into(), Value::String(self.name.clone()));
        doc.insert("_rev".into(), Value::String(self.rev.to_string()));
        doc.extend(self.body.clone());
        Value::Object(doc)
    }

    /// The stored form: the document, `_deleted` on a tombstone, and the write's token.
    pub(crate) fn stored(&self, write: &str) -> Vec<u8> {
        let Value::Object(mut doc) = self.to_json() else {
            unreachable!("an object")
        };
        if self.deleted {
            doc.insert("_deleted".into(), Value::Bool(true));
        }
        doc.insert(WRITE.into(), Value::String(write.to_owned()));
        serde_json::to_vec(&doc).expect("json")
    }

    /// Reads a stored document.
    pub(crate) fn from_json(name: &str, v: &[u8]) -> Result<NodeDoc> {
        let corrupt = |why: String| Error::Corrupt {
            key: name.to_owned(),
            why,
        };
        let Value::Object(mut body) =
            serde_json::from_slice(v).map_err(|e| corrupt(e.to_string()))?
        else {
            return Err(corrupt("not an object".into()));
        };
        // `shift_remove`: the body keeps its members' order (a plain `remove` swaps the
        // last member into the hole).
        body.shift_remove("_id");
        body.shift_remove(WRITE);
        let deleted = body.shift_remove("_deleted") == Some(Value::Bool(true));
        let rev = body
            .shift_remove("_rev")
            .and_then(|r| r.as_str().and_then(|r| Rev::parse(r).ok()))
            .ok_or_else(|| corrupt("no _rev".into()))?;
        Ok(NodeDoc {
            name: name.to_owned(),
            rev,
            body,
            deleted,
        })
    }

    /// The zone `placement` reads.
    pub fn zone(&self) -> Option<&str> {
        self.body.get("zone").and_then(Value::as_str)
    }
}

/// The document after a `PUT` of `body` (its `_rev`, or `rev` from the query) onto
/// `current`: the edited revision must be the current one, as CouchDB requires.
pub(crate) fn put(
    current: Option<&NodeDoc>,
    name: &str,
    body: Value,
    rev: Option<&str>,
) -> Result<NodeDoc> {
    settee_core::validate_doc_id(name)?;
    let parsed = settee_core::parse_doc(body)?;
    let asked = match (parsed.rev(), rev) {
        (Some(r), _) => Some(r),
        (None, Some(r)) => Some(Rev::parse(r)?),
        (None, None) => None,
    };
    let parent = edited(current, asked.as_ref())?;
    if parsed.deleted {
        return Err(Error::Doc(settee_core::Error::bad_request(
            "a node's document is removed with DELETE",
        )));
    }
    let id = new_rev_id(parent.as_ref(), false, &parsed.body);
    let Value::Object(body) =
        serde_json::from_slice(&parsed.body).expect("parse_doc keeps an object")
    else {
        unreachable!("parse_doc keeps an object")
    };
    Ok(NodeDoc {
        name: name.to_owned(),
        rev: Rev::new(parent.map_or(1, |p| p.pos + 1), id),
        body,
        deleted: false,
    })
}

/// The tombstone a `DELETE` of `current` at `rev` leaves.
pub(crate) fn delete(current: Option<&NodeDoc>, rev: Option<&str>) -> Result<NodeDoc> {
    let current = match current {
        None => return Err(Error::NotFound("missing")),
        Some(c) if c.deleted => return Err(Error::NotFound("deleted")),
        Some(c) => c,
    };
    let asked = rev.map(Rev::parse).transpose()?;
    let parent = edited(Some(current), asked.as_ref())?.expect("current exists");
    let id = new_rev_id(Some(&parent), true, b"{}");
    Ok(NodeDoc {
        name: current.name.clone(),
        rev: Rev::new(parent.pos + 1, id),
        body: Map::new(),
        deleted: true,
    })
}

/// The parent of an edit of `current` that names `asked`: CouchDB's conflict rules for a
/// document without branches. A document written over a deletion without a revision
/// extends it; naming the deletion's revision is a conflict (as CouchDB 3.5.2 answers).
fn edited(current: Option<&NodeDoc>, asked: Option<&Rev>) -> Result<Option<Rev>> {
    match (current, asked) {
        (None, None) => Ok(None),
        (Some(c), None) if c.deleted => Ok(Some(c.rev.clone())),
        (Some(c), Some(a)) if !c.deleted && c.rev == *a => Ok(Some(c.rev.clone())),
        _ => Err(Error::Conflict),
    }
}

/// What CouchDB's `GET /_node/_local/_nodes` counts of the list: documents, deletions,
/// edits (each revision is one, so the sum of the revisions' numbers) and the bodies'
/// JSON bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListStats {
    pub doc_count: u64,
    pub doc_del_count: u64,
    pub update_seq: u64,
    pub external: u64,
}

pub(crate) fn stats<'a>(docs: impl IntoIterator<Item = &'a NodeDoc>) -> ListStats {
    docs.into_iter().fold(ListStats::default(), |mut s, d| {
        if d.deleted {
            s.doc_del_count += 1;
        } else {
            s.doc_count += 1;
        }
        s.update_seq += d.rev.pos;
        s.external += serde_json::to_vec(&d.body).map_or(0, |b| b.len() as u64);
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn revisions_are_couchdbs() {
        // What CouchDB 3.5.2 answers for `PUT /_node/_local/_nodes/x {}`, a later edit
        // adding a zone, and a DELETE of the first revision.
        let first = put(None, "x@h", json!({}), None).unwrap();
        assert_eq!(first.rev.to_string(), "1-967a00dff5e02add41819138abb3284d");
        let deleted = delete(Some(&first), Some("1-967a00dff5e02add41819138abb3284d")).unwrap();
        assert_eq!(
            deleted.rev.to_string(),
            "2-eec205a9d413992850a6e32678485900"
        );
        // Added again without a revision: the deletion is extended.
        let again = put(Some(&deleted), "x@h", json!({}), None).unwrap();
        assert_eq!(again.rev.to_string(), "3-5570e8bbb34412db757c2df4bfa1099b");
        assert!(matches!(
            put(
                Some(&deleted),
                "x@h",
                json!({}),
                Some("2-eec205a9d413992850a6e32678485900")
            ),
            Err(Error::Conflict)
        ));
        assert!(matches!(
            delete(Some(&deleted), None),
            Err(Error::NotFound("deleted"))
        ));
        let stored = deleted.stored("w1");
        assert_eq!(NodeDoc::from_json("x@h", &stored).unwrap(), deleted);
        assert_eq!(
            stats([&first, &deleted, &again]),
            ListStats {
                doc_count: 2,
                doc_del_count: 1,
                update_seq: 6,
                external: 6
            }
        );
        let second = put(
            Some(&first),
            "x@h",
            json!({"_rev": "1-967a00dff5e02add41819138abb3284d", "zone": "a"}),
            None,
        )
        .unwrap();
        assert_eq!(second.rev.to_string(), "2-de2d6d09ce3a434cc999e5317a6468a6");
        assert_eq!(second.zone(), Some("a"));
        assert_eq!(
            second.to_json(),
            json!({"_id": "x@h", "_rev": second.rev.to_string(), "zone": "a"})
        );
        let stored = second.stored("w2");
        assert_eq!(NodeDoc::from_json("x@h", &stored).unwrap(), second);
    }

    #[test]
    fn a_stored_document_keeps_its_members_order() {
        let doc = put(None, "w@h", json!({"zone": "a", "b": 1}), None).unwrap();
        let stored = serde_json::to_vec(&doc.to_json()).unwrap();
        assert_eq!(
            serde_json::to_string(&NodeDoc::from_json("w@h", &stored).unwrap().to_json()).unwrap(),
            // As CouchDB 3.5.2 shows it.
            r#"{"_id":"w@h","_rev":"1-89f6f4f00b3efd7f2e94116d0e42589b","zone":"a","b":1}"#
        );
    }

    #[test]
    fn edits_of_another_revision_conflict() {
        let first = put(None, "x@h", json!({}), None).unwrap();
        assert!(matches!(
            put(Some(&first), "x@h", json!({}), None),
            Err(Error::Conflict)
        ));
        assert!(matches!(
            put(
                None,
                "x@h",
                json!({}),
                Some("1-967a00dff5e02add41819138abb3284d")
            ),
            Err(Error::Conflict)
        ));
        assert!(matches!(
            delete(Some(&first), Some("1-abc")),
            Err(Error::Conflict)
        ));
        assert!(matches!(delete(None, None), Err(Error::NotFound(_))));
        assert!(matches!(
            put(None, "x@h", json!([]), None),
            Err(Error::Doc(_))
        ));
        assert!(matches!(
            put(None, "_x", json!({}), None),
            Err(Error::Doc(_))
        ));
    }
}
