//! The membership list's documents (CouchDB's `_nodes` database): one per node, `_id` the
//! node's name, edited with CouchDB's single-revision rules. Pure: an edit is a function of
//! the current document and the request; `state.rs` stores the result in one transaction.

use crate::{Error, Result};
use serde_json::{Map, Value};
use settee_core::{new_rev_id, Rev};

/// One node's document as stored: its name, revision and body (`zone`, …).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeDoc {
    pub name: String,
    pub rev: Rev,
    pub body: Map<String, Value>,
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
        let rev = body
            .shift_remove("_rev")
            .and_then(|r| r.as_str().and_then(|r| Rev::parse(r).ok()))
            .ok_or_else(|| corrupt("no _rev".into()))?;
        Ok(NodeDoc {
            name: name.to_owned(),
            rev,
            body,
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
    })
}

/// The revision a `DELETE` of `current` at `rev` gives the removed document.
pub(crate) fn delete(current: Option<&NodeDoc>, rev: Option<&str>) -> Result<Rev> {
    let current = current.ok_or(Error::NotFound("missing"))?;
    let asked = rev.map(Rev::parse).transpose()?;
    let parent = edited(Some(current), asked.as_ref())?.expect("current exists");
    let id = new_rev_id(Some(&parent), true, b"{}");
    Ok(Rev::new(parent.pos + 1, id))
}

/// The parent of an edit of `current` that names `asked`: CouchDB's conflict rules for a
/// document without branches.
fn edited(current: Option<&NodeDoc>, asked: Option<&Rev>) -> Result<Option<Rev>> {
    match (current, asked) {
        (None, None) => Ok(None),
        (Some(c), Some(a)) if c.rev == *a => Ok(Some(c.rev.clone())),
        _ => Err(Error::Conflict),
    }
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
        assert_eq!(
            delete(Some(&first), Some("1-967a00dff5e02add41819138abb3284d"))
                .unwrap()
                .to_string(),
            "2-eec205a9d413992850a6e32678485900"
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
        let stored = serde_json::to_vec(&second.to_json()).unwrap();
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
