//! `_bulk_docs`, `_bulk_get`, `_purge`, `_revs_diff` and `_missing_revs`.

use super::{allow, blocking};
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, json_bytes};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::Rev;
use settee_node::atts::AttOpts;
use settee_node::fabric::DbRef;
use settee_node::parsed_docs;
use settee_node::write::{id_revs, BulkAnswer, BulkDocs, BulkEntry, BulkGetItem, BulkGetOpts};
use settee_node::Fabric;

/// A failed document's entry; a replicated write's names the revision too
/// (`update_doc_result_to_json/1`).
fn failed_entry(id: &str, rev: Option<String>, e: ApiError) -> Value {
    let (_, error, reason) = e.parts();
    match rev {
        Some(rev) => json!({"id": id, "rev": rev, "error": error, "reason": reason}),
        None => json!({"id": id, "error": error, "reason": reason}),
    }
}

pub async fn bulk_docs(state: &AppState, db: DbRef, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    // A coordinator on another member writing its documents to this member's copy.
    let from_member = req.authenticated_by == Some("cluster")
        && (req.header("content-type")).is_some_and(|t| t == parsed_docs::MEDIA_TYPE);
    let mut body = if from_member {
        parsed_docs::read(&req.bytes().await?)?
    } else {
        require_json(&req.headers)?;
        BulkDocs::parse(req.json().await?, || state.next_uuid())?
    };
    body.w = body.w.or(crate::req::write_quorum(&req));
    let answer = Fabric::bulk_docs(&*state.fabric, &db.name, &req.user, body).await?;
    let (status, body) = bulk_answer_json(Ok(answer));
    Ok(json(status, &body))
}

/// A `_bulk_docs` answer (or its failure as a whole) as its status and JSON body.
fn bulk_answer_json(answer: settee_node::Result<BulkAnswer>) -> (StatusCode, Value) {
    let entries = match answer {
        Err(e) => return ApiError::from(e).status_and_body(),
        Ok(BulkAnswer::AllOrNothingRefused(docs)) => {
            let entries = docs
                .into_iter()
                .map(|(id, rev)| {
                    json!({"id": id, "rev": rev, "error": "not_implemented",
                           "reason": "all_or_nothing is not supported"})
                })
                .collect();
            return (StatusCode::EXPECTATION_FAILED, Value::Array(entries));
        }
        Ok(BulkAnswer::Entries(entries)) => entries,
    };
    // Some document written below the quorum: CouchDB's 202.
    let status = if entries
        .iter()
        .any(|e| matches!(e, BulkEntry::Accepted { .. }))
    {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CREATED
    };
    let entries: Vec<Value> = (entries.into_iter())
        .map(|e| match e {
            BulkEntry::Written { id, rev } => json!({"ok": true, "id": id, "rev": rev}),
            BulkEntry::Accepted { id, rev } => {
                json!({"ok": true, "id": id, "rev": rev, "accepted": true})
            }
            BulkEntry::Failed { id, rev, error } => failed_entry(&id, rev, error.into()),
        })
        .collect();
    (status, Value::Array(entries))
}

pub async fn bulk_get(state: &AppState, db: DbRef, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let body = req.json().await?;
    let items = body
        .get("docs")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("Missing JSON list of 'docs'."))?;
    // What each item says for itself (its revision, its `atts_since`) or what only
    // writes take is refused in the query string, as CouchDB's `bulk_get_parse_doc_query`.
    if let Some((key, _)) = (req.params.pairs())
        .find(|(k, _)| ["open_revs", "new_edits", "w", "rev", "atts_since"].contains(k))
    {
        return Err(ApiError::bad_request(format!(
            "\"{key}\" query parameter is not acceptable"
        )));
    }
    let opts = BulkGetOpts {
        revs: req.params.is_true("revs"),
        latest: req.params.is_true("latest"),
        atts: AttOpts::from_params(&req.params)?,
    };
    let (node, user) = (state.fabric.clone(), req.user.clone());
    let out = blocking(move || {
        let mut out = b"{\"results\":[".to_vec();
        let mut first = true;
        node.bulk_get(&db.name, &user, &items, opts, &mut |item| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            bulk_get_item(&mut out, item);
            true
        })?;
        out.extend_from_slice(b"]}");
        Ok(out)
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}

/// One `_bulk_get` result: `{"id","docs":[…]}`, each revision as `{"ok":doc}` or
/// CouchDB's error entry (`rev, reason, id, error`).
fn bulk_get_item(out: &mut Vec<u8>, item: BulkGetItem) {
    let id = json!(item.id);
    out.extend_from_slice(b"{\"id\":");
    out.extend_from_slice(&serde_json::to_vec(&id).expect("json"));
    out.extend_from_slice(b",\"docs\":[");
    match item.docs {
        Ok(docs) => {
            for (i, d) in docs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"ok\":");
                out.extend_from_slice(d);
                out.push(b'}');
            }
        }
        Err((rev, e)) => {
            let (_, error, reason) = ApiError::from(e).parts();
            let entry = json!({"error": {"rev": rev, "reason": reason, "id": id, "error": error}});
            out.extend_from_slice(&serde_json::to_vec(&entry).expect("json"));
        }
    }
    out.extend_from_slice(b"]}");
}

pub async fn revs_diff(
    state: &AppState,
    db: DbRef,
    mut req: Req,
    missing_revs_shape: bool,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let asked = id_revs(&req.json().await?)?;
    let node = state.fabric.clone();
    let diff = blocking(move || Ok(node.revs_diff(&db.name, asked)?)).await?;
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

pub async fn purge(state: &AppState, db: DbRef, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let asked = id_revs(&req.json().await?)?;
    let w = crate::req::write_quorum(&req);
    let purged = Fabric::purge(&*state.fabric, &db.name, asked, w).await?;
    let mut out = Map::new();
    for (i, (id, revs)) in purged.ids.into_iter().enumerate() {
        let entry = match purged.failed.get(&i) {
            Some((error, reason)) => json!({"error": error, "reason": reason}),
            None => json!(revs.iter().map(|r| r.to_string()).collect::<Vec<_>>()),
        };
        out.insert(id, entry);
    }
    // chttpd's `purge_results_to_json`: the greatest of the entries' statuses.
    let status = if !purged.failed.is_empty() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else if purged.accepted {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CREATED
    };
    Ok(json(status, &json!({"purge_seq": null, "purged": out})))
}
