//! Writes and revision bookkeeping: documents one at a time or in bulk (`_bulk_docs`),
//! local documents, `_bulk_get`, `_revs_diff` and `_purge`. Answers are typed: the caller
//! renders each entry, naming its errors through its own error table, as CouchDB's
//! `chttpd` does for `fabric`'s results.

use crate::atts::{AttOpts, AttRender};
use crate::docjson::{doc_json_with, DocOpts};
use crate::{Error, Node, Result};
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_core::{parse_doc, validate_doc_id, DocKind, ParsedDoc, Rev};
use settee_db::{Database, LocalDoc, LocalUpdate, OpenDoc};
use settee_docs::Followed;
use std::collections::HashMap;
use std::sync::Arc;

/// How documents are written.
#[derive(Clone, Copy, Debug)]
pub struct WriteOpts {
    /// `false` (`new_edits=false`): replicated revisions, stored as given.
    pub new_edits: bool,
    /// `batch=ok`: acknowledged before the commit; failures are only logged.
    pub batch: bool,
    /// `w`: how many copies must hold the revision for a 201 (fewer, but one: 202).
    /// `None`: a majority of the copies.
    pub w: Option<u32>,
    /// Attachments that follow a `multipart/related` body keep the `revpos` it gives:
    /// their contents are not new (see [`settee_docs::Followed::keep_revpos`]).
    pub keep_revpos: bool,
}

/// Whether a write that reached `copies` copies falls short of the `w` asked for (a 202).
pub fn short_of(w: Option<u32>, copies: u32) -> bool {
    w.is_some_and(|w| w > copies)
}

impl Default for WriteOpts {
    fn default() -> Self {
        WriteOpts {
            new_edits: true,
            batch: false,
            w: None,
            keep_revpos: false,
        }
    }
}

/// A `_bulk_docs` request, read and checked: every document has its id.
#[derive(Debug)]
pub struct BulkDocs {
    pub docs: Vec<ParsedDoc>,
    pub new_edits: bool,
    pub all_or_nothing: bool,
    /// `w` of the body (a number), else of the query (see [`WriteOpts::w`]).
    pub w: Option<u32>,
}

impl BulkDocs {
    /// Reads a `_bulk_docs` body with CouchDB's errors, in its order: every document is
    /// parsed and checked before anything is written, so one bad document (not an object,
    /// a bad id, no revision with `new_edits: false`) fails the request; a document
    /// without an id gets one from `uuid`.
    pub fn parse(body: Value, mut uuid: impl FnMut() -> Result<String>) -> Result<BulkDocs> {
        let Value::Object(mut body) = body else {
            return Err(Error::bad_request("Request body must be a JSON object"));
        };
        let raw = match body.remove("docs") {
            None => {
                return Err(Error::bad_request(
                    "POST body must include `docs` parameter.",
                ))
            }
            Some(Value::Array(docs)) => docs,
            Some(_) => return Err(Error::bad_request("`docs` parameter must be an array.")),
        };
        let metrics = settee_metrics::global();
        metrics.bulk_requests.inc();
        metrics.bulk_docs.record(raw.len() as f64);
        let new_edits = body.get("new_edits").cloned().unwrap_or(Value::Bool(true));
        let mut docs = Vec::with_capacity(raw.len());
        for v in raw {
            let mut d = parse_doc(v)?;
            if new_edits == Value::Bool(false) && d.revs.is_none() {
                return Err(needs_revs());
            }
            let id = match d.id.take() {
                Some(id) => id,
                None => uuid()?,
            };
            validate_doc_id(&id)?;
            d.id = Some(id);
            docs.push(d);
        }
        let Value::Bool(new_edits) = new_edits else {
            return Err(Error::bad_request(
                "`new_edits` parameter must be a boolean.",
            ));
        };
        Ok(BulkDocs {
            docs,
            new_edits,
            all_or_nothing: body.get("all_or_nothing") == Some(&Value::Bool(true)),
            w: body.get("w").and_then(Value::as_u64).and_then(quorum_value),
        })
    }
}

impl BulkDocs {
    /// CouchDB 3's refusal of `all_or_nothing` (417: its fabric's `validate_atomic_update`,
    /// which a single node runs too): each document's id and the revision it names (`0-`
    /// for none). `None` when it does not apply: replicated writes (`new_edits: false`)
    /// ignore the option, and no documents answer `[]` before it is looked at.
    pub fn all_or_nothing_refusal(&self) -> Option<Vec<(Option<String>, String)>> {
        if !(self.new_edits && self.all_or_nothing) || self.docs.is_empty() {
            return None;
        }
        let refused = (self.docs.iter())
            .map(|d| {
                let rev = d.rev().map_or_else(|| "0-".to_string(), |r| r.to_string());
                (d.id.clone(), rev)
            })
            .collect();
        Some(refused)
    }
}

/// A `w` (or `r`) as CouchDB takes it: a positive count; anything else means the default.
pub fn quorum_value(n: u64) -> Option<u32> {
    u32::try_from(n).ok().filter(|n| *n > 0)
}

/// CouchDB's answer to a replicated write (`new_edits=false`) without a revision.
pub fn needs_revs() -> Error {
    Error::bad_request(
        "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
    )
}

/// One document's entry in a `_bulk_docs` answer.
#[derive(Debug)]
pub enum BulkEntry {
    Written {
        id: String,
        rev: String,
    },
    /// Written to fewer copies than the write quorum, though to one (CouchDB's
    /// `"accepted": true` entry, and a 202 for the request).
    Accepted {
        id: String,
        rev: String,
    },
    /// A refused document; `rev` is the revision a replicated write named (`0-` for
    /// none), which CouchDB shows (`update_doc_result_to_json/1`).
    Failed {
        id: String,
        rev: Option<String>,
        error: Error,
    },
}

/// A `_bulk_docs` answer.
#[derive(Debug)]
pub enum BulkAnswer {
    /// One entry per document in request order; a replicated revision written (or known
    /// already) has none, as in CouchDB.
    Entries(Vec<BulkEntry>),
    /// CouchDB 3 refuses `all_or_nothing` (417) after parsing the documents: each
    /// document's id and the revision it names (`0-` for none).
    AllOrNothingRefused(Vec<(Option<String>, String)>),
}

/// A document's position in the request, id and the revision it names.
type Place = (usize, String, Option<Rev>);

/// Waits for a database writer's answer.
pub async fn await_write<T>(rx: tokio::sync::oneshot::Receiver<settee_db::Result<T>>) -> Result<T> {
    Ok(rx
        .await
        .map_err(|_| Error::internal("writer dropped the request"))??)
}

impl Node {
    /// Writes one document; `Ok(None)` when acknowledged early (`batch`) or when a
    /// replicated revision needs no new rev. `followed`: the document's `follows`
    /// attachments, stored already (the parts of a `multipart/related` upload).
    pub async fn update_doc_with(
        &self,
        db: Arc<Database>,
        user: &UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
        mut followed: Followed,
    ) -> Result<Option<Rev>> {
        let settings = self.write_settings();
        followed.keep_revpos = opts.keep_revpos;
        if opts.batch {
            // As CouchDB's `batch=ok`: answered at once; the checks (validation functions
            // included) and the write happen afterwards, and their failures are only
            // logged.
            let user = user.clone();
            tokio::spawn(async move {
                let written =
                    settee_docs::write(&settings, &db, &user, vec![doc], opts.new_edits, followed)
                        .await;
                match written.map(|mut r| r.pop()) {
                    Err(e) => tracing::warn!(error = %e, "batch=ok write failed"),
                    Ok(Some(Err(e))) => tracing::warn!(error = %e, "batch=ok write failed"),
                    Ok(_) => {}
                }
            });
            return Ok(None);
        }
        let given = doc.rev();
        let written = settee_docs::write(&settings, &db, user, vec![doc], opts.new_edits, followed)
            .await?
            .pop()
            .expect("one result per document")?;
        Ok(written.or(given))
    }

    /// `_bulk_docs`: local documents are written apart, without MVCC; every entry keeps
    /// its document's place.
    pub async fn write_bulk(
        &self,
        db: &Arc<Database>,
        user: &UserCtx,
        req: BulkDocs,
    ) -> Result<BulkAnswer> {
        if let Some(refused) = req.all_or_nothing_refusal() {
            return Ok(BulkAnswer::AllOrNothingRefused(refused));
        }
        let BulkDocs {
            docs: parsed,
            new_edits,
            ..
        } = req;
        let mut docs = Vec::with_capacity(parsed.len());
        let mut locals = Vec::new();
        for (i, d) in parsed.into_iter().enumerate() {
            let id = d.id.clone().unwrap_or_default();
            if DocKind::of(&id) == DocKind::Local {
                locals.push((i, id, d));
            } else {
                docs.push(((i, id, d.rev()), d));
            }
        }
        let (places, docs): (Vec<Place>, Vec<ParsedDoc>) = docs.into_iter().unzip();
        let results = if docs.is_empty() {
            Vec::new()
        } else {
            let settings = self.write_settings();
            settee_docs::write(&settings, db, user, docs, new_edits, Followed::new()).await?
        };
        let mut entries: Vec<(usize, BulkEntry)> = places
            .into_iter()
            .zip(results)
            .filter_map(|((i, id, rev), r)| {
                let entry = match r {
                    Ok(Some(new)) => BulkEntry::Written {
                        id,
                        rev: new.to_string(),
                    },
                    Ok(None) => return None,
                    Err(e) => BulkEntry::Failed {
                        id,
                        rev: (!new_edits)
                            .then(|| rev.map_or_else(|| "0-".into(), |r| r.to_string())),
                        error: e.into(),
                    },
                };
                Some((i, entry))
            })
            .collect();
        for (i, id, d) in locals {
            match bulk_local(db, &id, d).await {
                Ok(rev) if new_edits => entries.push((
                    i,
                    BulkEntry::Written {
                        id,
                        rev: format!("0-{rev}"),
                    },
                )),
                Ok(_) => {}
                Err(error) => entries.push((
                    i,
                    BulkEntry::Failed {
                        id,
                        rev: None,
                        error,
                    },
                )),
            }
        }
        entries.sort_by_key(|(i, _)| *i);
        Ok(BulkAnswer::Entries(
            entries.into_iter().map(|(_, e)| e).collect(),
        ))
    }

    /// `_purge` of `asked` (ids and revisions, in request order), with `[purge]`'s
    /// limits: each id with the revisions purged (`_local` documents have no revision
    /// tree, so nothing of them).
    pub async fn purge_revs(
        &self,
        db: &Arc<Database>,
        asked: Vec<(String, Vec<Rev>)>,
    ) -> Result<Vec<(String, Vec<Rev>)>> {
        settee_metrics::global().purge_requests.inc();
        if asked.len() as u64 > self.config.get_u64("purge", "max_document_id_number", 100) {
            return Err(Error::bad_request("Exceeded maximum number of documents."));
        }
        let revs: usize = asked.iter().map(|(_, r)| r.len()).sum();
        if revs as u64 > self.config.get_u64("purge", "max_revisions_number", 1000) {
            return Err(Error::bad_request("Exceeded maximum number of revisions."));
        }
        // A partitioned database finds the shard of each id by its partition, so one
        // without a colon fails the whole request (CouchDB 3.5.2 checks nothing else).
        if db.props().partitioned
            && asked
                .iter()
                .any(|(id, _)| DocKind::of(id) == DocKind::Normal && !id.contains(':'))
        {
            return Err(settee_core::Error::IllegalDocId(
                "Doc id must be of form partition:id".into(),
            )
            .into());
        }
        let order: Vec<String> = asked.iter().map(|(id, _)| id.clone()).collect();
        let asked: Vec<_> = asked
            .into_iter()
            .filter(|(id, _)| DocKind::of(id) != DocKind::Local)
            .collect();
        let mut purged: HashMap<String, Vec<Rev>> =
            await_write(db.purge(asked)?).await?.into_iter().collect();
        Ok(order
            .into_iter()
            .map(|id| {
                let revs = purged.remove(&id).unwrap_or_default();
                (id, revs)
            })
            .collect())
    }
}

/// A local document of `_bulk_docs`, whose revision must be `0-N`.
async fn bulk_local(db: &Arc<Database>, id: &str, d: ParsedDoc) -> Result<u64> {
    let rev = match d.revs {
        None => None,
        Some((0, ids)) => Some(
            ids[0]
                .to_string()
                .parse()
                .map_err(|_| Error::bad_request("Invalid rev format"))?,
        ),
        Some(_) => return Err(Error::bad_request("Invalid rev format")),
    };
    let update = LocalUpdate {
        id: id.to_string(),
        rev,
        deleted: d.deleted,
        body: d.body,
    };
    await_write(db.update_local(update)?).await
}

/// A local document's write from a request body, its revision still to be given: the
/// body's `_rev` is returned apart, and attachments given inline are dropped (a local
/// document keeps its body only).
pub fn local_update(id: &str, mut body: Value) -> Result<(LocalUpdate, Option<Value>)> {
    validate_doc_id(id)?;
    let body_rev = body.as_object_mut().and_then(|o| o.shift_remove("_rev"));
    if let Some(o) = body.as_object_mut() {
        o.shift_remove("_attachments");
    }
    let doc = parse_doc(body)?;
    let update = LocalUpdate {
        id: id.to_string(),
        rev: None,
        deleted: doc.deleted,
        body: doc.body,
    };
    Ok((update, body_rev))
}

/// The `N` of a local document's revision `0-N`; any other shape is CouchDB's
/// `Invalid rev format`.
pub fn local_rev_number(s: &str) -> Result<u64> {
    s.strip_prefix("0-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Error::bad_request("Invalid rev format"))
}

/// Writes a local document: its new revision `N` (`0` once deleted), or `None` when
/// acknowledged early (`batch`).
pub async fn put_local(
    db: &Arc<Database>,
    update: LocalUpdate,
    batch: bool,
) -> Result<Option<u64>> {
    let rx = db.update_local(update)?;
    if batch {
        tokio::spawn(async move {
            if let Ok(Err(e)) = rx.await {
                tracing::warn!(error = %e, "batch=ok write failed");
            }
        });
        return Ok(None);
    }
    await_write(rx).await.map(Some)
}

/// A local document, or CouchDB's 404 `missing`.
pub fn open_local(db: &Database, id: &str) -> Result<LocalDoc> {
    db.local_doc(id)?
        .ok_or_else(|| Error::NotFound("missing".into()))
}

/// The revision `rev` of a document or, when it is no longer a leaf, the newest leaf that
/// descends from it (`latest=true`).
pub fn open_latest(db: &Database, id: &str, rev: &Rev) -> settee_db::Result<OpenDoc> {
    let d = db.open_doc(id, Some(rev))?;
    match crate::read::latest_leaves(&d.info, rev).into_iter().max() {
        Some(n) if &n != rev => db.open_doc(id, Some(&n)),
        _ => Ok(d),
    }
}

/// How `_bulk_get` reads.
#[derive(Clone, Debug, Default)]
pub struct BulkGetOpts {
    /// `revs=true`: each revision's `_revisions`.
    pub revs: bool,
    /// `attachments`, `att_encoding_info`; an item's own `atts_since` adds to them
    /// (`since` here is each item's default, empty from HTTP, where CouchDB refuses it).
    pub atts: AttOpts,
    /// `latest=true`: a revision no longer a leaf reads as its newest descendant leaf.
    pub latest: bool,
}

/// How `user` reads revisions of `db` by id and revision (`_bulk_get`, a replication's
/// source): `_revisions` as long as the database's `revs_limit` when `revs`, and
/// `_replicator` credentials hidden from those who may not see them.
pub fn revision_reader(db: &Database, user: &UserCtx, revs: bool) -> DocOpts {
    DocOpts {
        revs,
        revs_limit: Some(db.props().revs_limit as usize),
        reader: crate::replicator_read::reader(db, user),
        ..Default::default()
    }
}

/// One `_bulk_get` item's answer: the id asked for (`None` when the item named none) and
/// each revision's JSON, or the error with the `rev` CouchDB's error entry shows (`null`
/// for an item refused before looking, the text `undefined` for a missing document asked
/// for without a revision).
#[derive(Debug)]
pub struct BulkGetItem {
    pub id: Option<String>,
    pub docs: std::result::Result<Vec<Vec<u8>>, (Value, Error)>,
}

/// One `_bulk_get` item (`{"id","rev"}`); without a revision, every leaf, deleted ones
/// too (CouchDB's `open_revs` of `all`).
pub fn bulk_get_one(
    db: &Database,
    item: &Value,
    doc: &DocOpts,
    opts: &BulkGetOpts,
) -> Result<BulkGetItem> {
    let id = item.get("id").and_then(Value::as_str);
    let rev_str = item.get("rev").and_then(Value::as_str);
    let refused = |rev: Value, error: Error| BulkGetItem {
        id: id.map(str::to_string),
        docs: Err((rev, error)),
    };
    let Some(id) = id else {
        let reason = if item.get("rev").is_some() {
            "document id missed"
        } else {
            "document must be a JSON object"
        };
        return Ok(refused(Value::Null, Error::bad_request(reason)));
    };
    let valid = if db.props().partitioned {
        settee_core::validate_partitioned_doc_id(id)
    } else {
        settee_core::validate_doc_id(id)
    };
    if let Err(e) = valid {
        return Ok(refused(Value::Null, e.into()));
    }
    let rev = match rev_str.map(Rev::parse).transpose() {
        Ok(r) => r,
        Err(_) => {
            return Ok(refused(
                json!(rev_str),
                Error::bad_request("Invalid rev format"),
            ))
        }
    };
    let atts = match item_atts_since(item.get("atts_since")) {
        Ok(None) => opts.atts.clone(),
        Ok(Some(since)) => AttOpts {
            inline: true,
            since,
            ..opts.atts.clone()
        },
        Err((value, reason)) => return Ok(refused(value, Error::bad_request(reason))),
    };
    let found = match &rev {
        Some(r) if opts.latest => open_latest(db, id, r).map(|d| vec![d]),
        Some(r) => db.open_doc(id, Some(r)).map(|d| vec![d]),
        None => db.open_revs(id, None).and_then(|leaves| {
            let docs: Vec<_> = leaves.into_iter().filter_map(|(_, d)| d).collect();
            if docs.is_empty() {
                Err(settee_db::Error::NotFound("missing"))
            } else {
                Ok(docs)
            }
        }),
    };
    let docs = match found {
        Ok(docs) => {
            let mut out = Vec::with_capacity(docs.len());
            for d in &docs {
                let since = crate::read::since_pos(&atts, d);
                out.push(doc_json_with(d, doc, atts.render(db, &d.body, since)?));
            }
            Ok(out)
        }
        Err(e) => Err((rev_str.map_or(json!("undefined"), |r| json!(r)), e.into())),
    };
    Ok(BulkGetItem {
        id: Some(id.to_string()),
        docs,
    })
}

/// A `_bulk_get` item's own `atts_since` (CouchDB's `bulk_get_parse_atts_since`): `None`
/// when absent or empty (attachments as the query asks), else the revisions, whose
/// attachments newer in each revision's history are inlined. A value that is not a list
/// of revisions is the item's error: the value refused and the reason.
fn item_atts_since(
    v: Option<&Value>,
) -> std::result::Result<Option<Vec<Rev>>, (Value, &'static str)> {
    let list = match v {
        None => return Ok(None),
        Some(Value::Array(list)) => list,
        Some(other) => return Err((other.clone(), "att_since value must be array of revs.")),
    };
    let revs = (list.iter())
        .map(|r| {
            (r.as_str().and_then(|s| Rev::parse(s).ok())).ok_or((r.clone(), "Invalid rev format"))
        })
        .collect::<std::result::Result<Vec<Rev>, _>>()?;
    Ok((!revs.is_empty()).then_some(revs))
}

/// `{"docid": ["rev", ...]}` (`_revs_diff`, `_missing_revs`, `_purge`) → pairs, with
/// CouchDB's errors for other shapes.
pub fn id_revs(body: &Value) -> Result<Vec<(String, Vec<Rev>)>> {
    let obj: &Map<String, Value> = body
        .as_object()
        .ok_or_else(|| Error::bad_request("Request body must be a JSON object"))?;
    obj.iter()
        .map(|(id, revs)| {
            let list = revs
                .as_array()
                .ok_or_else(|| Error::bad_request("Invalid list of revisions"))?;
            let revs = list
                .iter()
                .map(|r| {
                    r.as_str()
                        .ok_or_else(|| Error::bad_request("Invalid rev format"))
                        .and_then(|s| Ok(Rev::parse(s)?))
                })
                .collect::<Result<Vec<Rev>>>()?;
            Ok((id.clone(), revs))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_atts_since_as_couchdb_parses_it() {
        assert_eq!(item_atts_since(None), Ok(None));
        assert_eq!(item_atts_since(Some(&json!([]))), Ok(None));
        assert_eq!(
            item_atts_since(Some(&json!(["1-a", "2-b"]))),
            Ok(Some(vec![
                Rev::parse("1-a").unwrap(),
                Rev::parse("2-b").unwrap()
            ]))
        );
        let not_a_list = "att_since value must be array of revs.";
        assert_eq!(
            item_atts_since(Some(&json!("1-a"))),
            Err((json!("1-a"), not_a_list))
        );
        assert_eq!(
            item_atts_since(Some(&Value::Null)),
            Err((Value::Null, not_a_list))
        );
        assert_eq!(
            item_atts_since(Some(&json!(["1-a", "x", 3]))),
            Err((json!("x"), "Invalid rev format"))
        );
    }
}
