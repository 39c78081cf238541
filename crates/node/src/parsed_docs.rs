//! The documents of a clustered `_bulk_docs` as the coordinator sends them to a range's
//! copy on another member: as it parsed them, each body as the compact JSON text the
//! node stores, so that the copy checks and stores them without parsing them again
//! (CouchDB's coordinator, `fabric_doc_update`, likewise passes parsed documents to its
//! copies' `fabric_rpc`). Taken only from cluster members ([`MEDIA_TYPE`]).

use crate::write::BulkDocs;
use crate::{Error, Result};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use settee_core::{ParsedDoc, RevId};

/// The media type of such a `_bulk_docs` body. A member's HTTP layer reads it from
/// another member only; anyone else's request with it is refused as any body that is not
/// JSON.
pub const MEDIA_TYPE: &str = "application/x-settee-parsed-docs";

#[derive(Deserialize)]
struct Bulk<'a> {
    #[serde(borrow)]
    docs: Vec<Doc<'a>>,
    new_edits: bool,
}

#[derive(Deserialize)]
struct Doc<'a> {
    id: String,
    #[serde(default)]
    revs: Option<(u64, Vec<String>)>,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    atts: Option<Map<String, Value>>,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// `docs` (each with its id) as [`read`] takes them back.
pub fn write<'a>(docs: impl Iterator<Item = &'a ParsedDoc>, new_edits: bool) -> Vec<u8> {
    let mut out = b"{\"docs\":[".to_vec();
    for (k, d) in docs.enumerate() {
        if k > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        serde_json::to_writer(&mut out, d.id.as_deref().unwrap_or_default()).expect("json");
        if let Some((pos, ids)) = &d.revs {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            out.extend_from_slice(b",\"revs\":");
            serde_json::to_writer(&mut out, &(pos, ids)).expect("json");
        }
        if d.deleted {
            out.extend_from_slice(b",\"deleted\":true");
        }
        if let Some(atts) = &d.atts {
            out.extend_from_slice(b",\"atts\":");
            serde_json::to_writer(&mut out, atts).expect("json");
        }
        out.extend_from_slice(b",\"body\":");
        match settee_core::split_stored(&d.body).0 {
            [] => out.extend_from_slice(b"{}"),
            body => out.extend_from_slice(body),
        }
        out.push(b'}');
    }
    out.extend_from_slice(format!("],\"new_edits\":{new_edits}}}").as_bytes());
    out
}

/// The documents [`write`] wrote, as the coordinator had parsed and checked them.
pub fn read(bytes: &[u8]) -> Result<BulkDocs> {
    let bad = |why: String| Error::bad_request(format!("Invalid parsed documents: {why}"));
    let bulk: Bulk = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let docs = (bulk.docs.into_iter())
        .map(|d| {
            let revs = match d.revs {
                None => None,
                Some((pos, ids)) => {
                    let ids: Option<Vec<RevId>> = ids.iter().map(|i| RevId::parse(i)).collect();
                    Some((
                        pos,
                        ids.ok_or_else(|| bad(format!("a revision of {}", d.id)))?,
                    ))
                }
            };
            Ok(ParsedDoc {
                id: Some(d.id),
                revs,
                deleted: d.deleted,
                body: d.body.get().as_bytes().to_vec(),
                atts: d.atts,
                body_term: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(BulkDocs {
        docs,
        new_edits: bulk.new_edits,
        all_or_nothing: false,
        w: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_come_back_as_parsed() {
        let docs: Vec<ParsedDoc> = [
            json!({"_id": "a", "x": [1, 2.5, "é\n"], "y": {"z": null}}),
            json!({"_id": "b", "_revisions": {"start": 3, "ids": ["aa", "bb"]}, "_deleted": true}),
            json!({"_id": "c\"q", "_rev": "1-cc",
                   "_attachments": {"t.txt": {"data": "aGk=", "content_type": "text/plain"}}}),
        ]
        .into_iter()
        .map(|v| settee_core::parse_doc(v).unwrap())
        .collect();
        for new_edits in [true, false] {
            let back = read(&write(docs.iter(), new_edits)).unwrap();
            assert_eq!(back.new_edits, new_edits);
            assert_eq!(back.docs, docs);
        }
        assert!(read(b"{\"docs\":[{\"id\":\"a\"}],\"new_edits\":true}").is_err());
        let bad_rev = format!(
            r#"{{"docs":[{{"id":"a","revs":[1,["{}"]],"body":{{}}}}],"new_edits":true}}"#,
            "z".repeat(32)
        );
        assert!(read(bad_rev.as_bytes()).is_err());
    }
}
