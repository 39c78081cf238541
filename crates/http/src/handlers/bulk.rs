//! `_bulk_docs`, `_bulk_get`, `_purge`, `_revs_diff` and `_missing_revs`.

use super::attachments::AttRender;
use super::{allow, await_write, blocking};
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, json_bytes};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::{parse_doc, validate_doc_id, DocKind, ParsedDoc, Rev};
use settee_db::{Database, LocalUpdate, OpenDoc};
use settee_node::{doc_json_with, DocOpts};
use std::sync::Arc;

fn error_entry(id: &str, e: ApiError) -> Value {
    let (_, error, reason) = e.parts();
    json!({"id": id, "error": error, "reason": reason})
}

/// A failed replicated write names the revision too (`update_doc_result_to_json/1`).
fn replicated_error_entry(id: &str, rev: Option<Rev>, e: ApiError) -> Value {
    let (_, error, reason) = e.parts();
    let rev = rev.map(|r| r.to_string()).unwrap_or_else(|| "0-".into());
    json!({"id": id, "rev": rev, "error": error, "reason": reason})
}

/// The `docs` member of a `_bulk_docs` body, with CouchDB's errors for other shapes.
fn bulk_docs_member(body: &mut Map<String, Value>) -> ApiResult<Vec<Value>> {
    match body.remove("docs") {
        None => Err(ApiError::bad_request(
            "POST body must include `docs` parameter.",
        )),
        Some(Value::Array(docs)) => Ok(docs),
        Some(_) => Err(ApiError::bad_request("`docs` parameter must be an array.")),
    }
}

/// CouchDB 3 refuses `all_or_nothing` after parsing the documents: 417 with one
/// `not_implemented` entry per document, naming its revision (`0-` for none).
fn all_or_nothing_refused(docs: &[ParsedDoc]) -> Response {
    let entries: Vec<Value> = docs
        .iter()
        .map(|d| {
            let rev = d.rev().map_or_else(|| "0-".to_string(), |r| r.to_string());
            json!({"id": d.id, "rev": rev, "error": "not_implemented",
                   "reason": "all_or_nothing is not supported"})
        })
        .collect();
    json(StatusCode::EXPECTATION_FAILED, &Value::Array(entries))
}

/// A document's position in the request, id and the revision it names.
type Place = (usize, String, Option<Rev>);

pub async fn bulk_docs(state: &AppState, db: Arc<Database>, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let body = req.json().await?;
    let Value::Object(mut body) = body else {
        return Err(ApiError::bad_request("Request body must be a JSON object"));
    };
    let raw = bulk_docs_member(&mut body)?;
    let metrics = settee_metrics::global();
    metrics.bulk_requests.inc();
    metrics.bulk_docs.record(raw.len() as f64);
    let new_edits = body.get("new_edits").cloned().unwrap_or(Value::Bool(true));
    // Every document is parsed and checked before anything is written; one bad document
    // (not an object, a bad id, no revision with `new_edits: false`) fails the request.
    let mut parsed = Vec::with_capacity(raw.len());
    for v in raw {
        let mut d = parse_doc(v)?;
        if new_edits == Value::Bool(false) && d.revs.is_none() {
            return Err(super::doc::needs_revs());
        }
        let id = match d.id.take() {
            Some(id) => id,
            None => state.next_uuid()?,
        };
        validate_doc_id(&id)?;
        d.id = Some(id);
        parsed.push(d);
    }
    let Value::Bool(new_edits) = new_edits else {
        return Err(ApiError::bad_request(
            "`new_edits` parameter must be a boolean.",
        ));
    };
    if new_edits && body.get("all_or_nothing") == Some(&Value::Bool(true)) {
        return Ok(all_or_nothing_refused(&parsed));
    }
    // Local documents are written apart; every entry keeps its document's place.
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
        let settings = state.write_settings();
        settee_docs::write(
            &settings,
            &db,
            &req.user,
            docs,
            new_edits,
            Default::default(),
        )
        .await?
    };
    // A replicated revision written (or already known) has no entry, as in CouchDB.
    let mut entries: Vec<(usize, Value)> = places
        .into_iter()
        .zip(results)
        .filter_map(|((i, id, rev), r)| match r {
            Ok(Some(new)) => Some((i, json!({"ok": true, "id": id, "rev": new.to_string()}))),
            Ok(None) => None,
            Err(e) if new_edits => Some((i, error_entry(&id, e.into()))),
            Err(e) => Some((i, replicated_error_entry(&id, rev, e.into()))),
        })
        .collect();
    for (i, id, d) in locals {
        let entry = match write_local(&db, &id, d).await {
            Ok(rev) => json!({"ok": true, "id": id, "rev": format!("0-{rev}")}),
            Err(e) => error_entry(&id, e),
        };
        if new_edits || entry.get("error").is_some() {
            entries.push((i, entry));
        }
    }
    entries.sort_by_key(|(i, _)| *i);
    let out = entries.into_iter().map(|(_, e)| e).collect();
    Ok(json(StatusCode::CREATED, &Value::Array(out)))
}

/// A local document of `_bulk_docs`: written as CouchDB writes them, without MVCC; its
/// revision must be `0-N`.
async fn write_local(db: &Arc<Database>, id: &str, d: ParsedDoc) -> ApiResult<u64> {
    let rev = match d.revs {
        None => None,
        Some((0, ids)) => Some(
            ids[0]
                .to_string()
                .parse()
                .map_err(|_| ApiError::bad_request("Invalid rev format"))?,
        ),
        Some(_) => return Err(ApiError::bad_request("Invalid rev format")),
    };
    let update = LocalUpdate {
        id: id.to_string(),
        rev,
        deleted: d.deleted,
        body: d.body,
    };
    await_write(db.update_local(update)?).await
}

pub async fn bulk_get(db: Arc<Database>, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let opts = DocOpts {
        revs: req.params.is_true("revs"),
        revs_limit: Some(db.props().revs_limit as usize),
        reader: settee_node::replicator_read::reader(&db, &req.user),
        ..Default::default()
    };
    let latest = req.params.is_true("latest");
    let atts = super::attachments::AttOpts::from_params(&req.params)?;
    let body = req.json().await?;
    let items = body
        .get("docs")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("Missing JSON list of 'docs'."))?;
    let out = blocking(move || {
        let mut out = b"{\"results\":[".to_vec();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&bulk_get_one(&db, item, &opts, atts, latest)?);
        }
        out.extend_from_slice(b"]}");
        Ok(out)
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}

/// The revision `rev` of a document or, when it is no longer a leaf, the newest leaf that
/// descends from it (`latest=true`).
pub(crate) fn open_latest(db: &Database, id: &str, rev: &Rev) -> settee_db::Result<OpenDoc> {
    let d = db.open_doc(id, Some(rev))?;
    let newest = d
        .info
        .tree
        .leaves()
        .into_iter()
        .map(|l| l.rev)
        .filter(|l| {
            l.pos >= rev.pos
                && d.info.tree.ancestry(l).get((l.pos - rev.pos) as usize) == Some(&rev.id)
        })
        .max();
    match newest {
        Some(n) if &n != rev => db.open_doc(id, Some(&n)),
        _ => Ok(d),
    }
}

pub(crate) fn bulk_get_one(
    db: &Database,
    item: &Value,
    opts: &DocOpts,
    atts: super::attachments::AttOpts,
    latest: bool,
) -> ApiResult<Vec<u8>> {
    let id = item.get("id").and_then(Value::as_str);
    let rev_str = item.get("rev").and_then(Value::as_str);
    // CouchDB's error entries: `rev, reason, id, error`, with `rev` null for a request it
    // refused before looking (and the text `undefined` for a missing document asked for
    // without a revision).
    let error_entry = |rev: Value, error: &str, reason: &str| json!({"error": {"rev": rev, "reason": reason, "id": id, "error": error}});
    let refused = |rev: Value, error: &str, reason: &str| {
        serde_json::to_vec(&json!({"id": id, "docs": [error_entry(rev, error, reason)]}))
            .expect("json")
    };
    let Some(id) = id else {
        let reason = if item.get("rev").is_some() {
            "document id missed"
        } else {
            "document must be a JSON object"
        };
        return Ok(refused(Value::Null, "bad_request", reason));
    };
    let valid = if db.props().partitioned {
        settee_core::validate_partitioned_doc_id(id)
    } else {
        settee_core::validate_doc_id(id)
    };
    if let Err(e) = valid {
        let (_, error, reason) = ApiError::from(e).parts();
        return Ok(refused(Value::Null, &error, &reason));
    }
    let rev = match rev_str.map(Rev::parse).transpose() {
        Ok(r) => r,
        Err(_) => return Ok(refused(json!(rev_str), "bad_request", "Invalid rev format")),
    };
    // Without a revision, every leaf, deleted ones too (CouchDB's `open_revs` of `all`).
    let found = match &rev {
        Some(r) if latest => open_latest(db, id, r).map(|d| vec![d]),
        Some(r) => db.open_doc(id, Some(r)).map(|d| vec![d]),
        None => db
            .open_revs(id, None)
            .map(|leaves| {
                leaves
                    .into_iter()
                    .filter_map(|(_, d)| d)
                    .collect::<Vec<_>>()
            })
            .and_then(|docs| {
                if docs.is_empty() {
                    Err(settee_db::Error::NotFound("missing"))
                } else {
                    Ok(docs)
                }
            }),
    };
    let doc_part = match found {
        Ok(docs) => {
            let mut v = Vec::new();
            for (i, d) in docs.iter().enumerate() {
                if i > 0 {
                    v.push(b',');
                }
                v.extend_from_slice(b"{\"ok\":");
                v.extend_from_slice(&doc_json_with(d, opts, atts.render(db, &d.body)?));
                v.push(b'}');
            }
            v
        }
        Err(e) => {
            let (_, error, reason) = ApiError::from(e).parts();
            let rev = rev_str.map_or(json!("undefined"), |r| json!(r));
            serde_json::to_vec(&error_entry(rev, &error, &reason)).expect("json")
        }
    };
    let mut out = serde_json::to_vec(&json!({"id": id})).expect("json");
    out.pop();
    out.extend_from_slice(b",\"docs\":[");
    out.extend_from_slice(&doc_part);
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// `{"docid": ["rev", ...]}` → pairs, with CouchDB's errors for other shapes.
fn id_revs(body: &Value) -> ApiResult<Vec<(String, Vec<Rev>)>> {
    let obj: &Map<String, Value> = body
        .as_object()
        .ok_or_else(|| ApiError::bad_request("Request body must be a JSON object"))?;
    obj.iter()
        .map(|(id, revs)| {
            let list = revs
                .as_array()
                .ok_or_else(|| ApiError::bad_request("Invalid list of revisions"))?;
            let revs = list
                .iter()
                .map(|r| {
                    r.as_str()
                        .ok_or_else(|| ApiError::bad_request("Invalid rev format"))
                        .and_then(|s| Ok(Rev::parse(s)?))
                })
                .collect::<ApiResult<Vec<Rev>>>()?;
            Ok((id.clone(), revs))
        })
        .collect()
}

pub async fn revs_diff(
    db: Arc<Database>,
    mut req: Req,
    missing_revs_shape: bool,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let body = req.json().await?;
    let asked = id_revs(&body)?;
    let diff = blocking(move || Ok(db.revs_diff(asked)?)).await?;
    let strs = |revs: &[Rev]| revs.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let mut out = Map::new();
    for (id, missing, ancestors) in diff {
        let v = if missing_revs_shape {
            json!(strs(&missing))
        } else if ancestors.is_empty() {
            json!({"missing": strs(&missing)})
        } else {
            json!({"missing": strs(&missing), "possible_ancestors": strs(&ancestors)})
        };
        out.insert(id, v);
    }
    let body = if missing_revs_shape {
        json!({"missing_revs": out})
    } else {
        Value::Object(out)
    };
    Ok(json(StatusCode::OK, &body))
}

pub async fn purge(state: &AppState, db: Arc<Database>, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    settee_metrics::global().purge_requests.inc();
    let body = req.json().await?;
    let asked = id_revs(&body)?;
    if asked.len() as u64 > state.config.get_u64("purge", "max_document_id_number", 100) {
        return Err(ApiError::bad_request(
            "Exceeded maximum number of documents.",
        ));
    }
    let revs: usize = asked.iter().map(|(_, r)| r.len()).sum();
    if revs as u64 > state.config.get_u64("purge", "max_revisions_number", 1000) {
        return Err(ApiError::bad_request(
            "Exceeded maximum number of revisions.",
        ));
    }
    // A partitioned database finds the shard of each id by its partition, so one without
    // a colon fails the whole request (CouchDB 3.5.2 checks nothing else here).
    if db.props().partitioned
        && asked
            .iter()
            .any(|(id, _)| DocKind::of(id) == DocKind::Normal && !id.contains(':'))
    {
        return Err(
            settee_core::Error::IllegalDocId("Doc id must be of form partition:id".into()).into(),
        );
    }
    // `_local` documents have no revision tree: nothing of them is purged.
    let order: Vec<String> = asked.iter().map(|(id, _)| id.clone()).collect();
    let asked: Vec<_> = asked
        .into_iter()
        .filter(|(id, _)| DocKind::of(id) != DocKind::Local)
        .collect();
    let mut purged: std::collections::HashMap<String, Vec<Rev>> =
        await_write(db.purge(asked)?).await?.into_iter().collect();
    let mut out = Map::new();
    for id in order {
        let revs = purged.remove(&id).unwrap_or_default();
        out.insert(
            id,
            json!(revs.iter().map(|r| r.to_string()).collect::<Vec<_>>()),
        );
    }
    Ok(json(
        StatusCode::CREATED,
        &json!({"purge_seq": null, "purged": out}),
    ))
}
