//! Attachments: resolving a written document's `_attachments` (inline base64 data is
//! stored, `stub: true` entries are carried over from the revision being replaced),
//! rendering them inline for `attachments=true`, and `GET`/`HEAD /{db}/{docid}/{attname}`
//! with `Range`, `ETag` and `If-None-Match`. Content lives in the database's attachment
//! store (`settee_db::atts`); a revision's stubs are stored after its body
//! (`settee_core::join_stored`).

use super::blocking;
use crate::error::{ApiError, ApiResult};
use crate::reply::stream;
use crate::{AppState, Req};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};
use settee_core::{join_stored, split_stored, ParsedDoc, Rev};
use settee_db::Database;
use std::sync::Arc;

/// `[couchdb] max_attachment_size` (bytes; `infinity` or unset: no limit).
pub fn max_size(state: &AppState) -> u64 {
    state
        .node
        .get("couchdb", "max_attachment_size")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

fn bad(reason: String) -> ApiError {
    ApiError::BadRequest(reason)
}

fn digest_text(d: &[u8; 16]) -> String {
    format!("md5-{}", STANDARD.encode(d))
}

fn parse_digest(v: Option<&Value>) -> Option<[u8; 16]> {
    let b64 = v?.as_str()?.strip_prefix("md5-")?;
    STANDARD.decode(b64).ok()?.try_into().ok()
}

/// Replaces `doc.atts` (as the client sent them) by stored stubs appended to the body.
/// `old` are the stubs of the revision the write replaces.
pub fn resolve(
    db: &Database,
    id: &str,
    doc: &mut ParsedDoc,
    old: Option<&Map<String, Value>>,
    new_edits: bool,
    limit: u64,
) -> ApiResult<()> {
    let Some(atts) = doc.atts.take() else {
        return Ok(());
    };
    let new_pos = match &doc.revs {
        Some((pos, _)) if new_edits => pos + 1,
        Some((pos, _)) => *pos,
        None => 1,
    };
    let mut out = Map::new();
    for (name, att) in atts {
        if name.starts_with('_') {
            return Err(bad(format!(
                "Attachment name '{name}' starts with prohibited character '_'"
            )));
        }
        let Value::Object(att) = att else {
            return Err(bad(format!("Invalid attachment data for {name}")));
        };
        let stub = if att.get("stub") == Some(&Value::Bool(true)) {
            old.and_then(|o| o.get(&name)).cloned().ok_or_else(|| {
                ApiError::Named(
                    StatusCode::PRECONDITION_FAILED,
                    "missing_stub".into(),
                    format!("Invalid attachment stub in {id} for {name}"),
                )
            })?
        } else if let Some(data) = att.get("data") {
            let bytes = data
                .as_str()
                .and_then(|s| STANDARD.decode(s).ok())
                .ok_or_else(|| bad(format!("Invalid attachment data for {name}")))?;
            let mut w = db.attachment_writer(limit);
            w.write(&bytes)?;
            let stored = w.finish()?;
            let revpos = match att.get("revpos").and_then(Value::as_u64) {
                Some(p) if !new_edits => p,
                _ => new_pos,
            };
            let content_type = att
                .get("content_type")
                .and_then(Value::as_str)
                .unwrap_or("application/octet-stream");
            json!({
                "content_type": content_type,
                "revpos": revpos,
                "digest": digest_text(&stored.digest),
                "length": stored.length,
                "stub": true,
            })
        } else if att.get("follows") == Some(&Value::Bool(true)) {
            return Err(ApiError::NotImplemented(
                "multipart document uploads (attachments that follow) are not supported by this Settee version".into(),
            ));
        } else {
            return Err(bad(format!("Invalid attachment data for {name}")));
        };
        out.insert(name, stub);
    }
    if !out.is_empty() {
        let atts = serde_json::to_vec(&out).expect("json");
        doc.body = join_stored(&doc.body, Some(&atts));
    }
    Ok(())
}

/// The stubs stored after a revision's body.
pub fn stored_stubs(stored: &[u8]) -> Option<Map<String, Value>> {
    split_stored(stored)
        .1
        .and_then(|a| serde_json::from_slice(a).ok())
}

/// How a read renders attachments: stubs (default), or content inline for every attachment
/// (`attachments=true`) or for those newer than the revisions of `atts_since`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttOpts {
    pub inline: bool,
    /// Only attachments with a `revpos` above this are inlined.
    pub since_pos: u64,
}

impl AttOpts {
    pub fn from_params(p: &crate::req::Params) -> ApiResult<AttOpts> {
        // Nothing is stored encoded, so `att_encoding_info` has nothing to add.
        p.bool("att_encoding_info")?;
        let mut opts = AttOpts {
            inline: p.flag("attachments")?,
            since_pos: 0,
        };
        if let Some(raw) = p.get("atts_since") {
            let revs: Vec<String> = serde_json::from_str(raw)
                .map_err(|_| bad("atts_since must be a JSON array of revisions".into()))?;
            let positions = revs
                .iter()
                .map(|r| Rev::parse(r).map(|r| r.pos))
                .collect::<Result<Vec<u64>, _>>()?;
            opts.inline = true;
            opts.since_pos = positions.into_iter().max().unwrap_or(0);
        }
        Ok(opts)
    }

    /// The `_attachments` to render instead of the stored stubs (`None`: the stubs).
    pub fn render(&self, db: &Database, stored: &[u8]) -> ApiResult<Option<Vec<u8>>> {
        if !self.inline {
            return Ok(None);
        }
        match stored_stubs(stored) {
            Some(stubs) => inline(db, &stubs, self.since_pos).map(Some),
            None => Ok(None),
        }
    }
}

/// `_attachments` with the content inline (for attachments with `revpos > since_pos`), as
/// CouchDB renders it: `content_type`, `revpos`, `digest`, `data`; older ones stay stubs.
fn inline(db: &Database, stubs: &Map<String, Value>, since_pos: u64) -> ApiResult<Vec<u8>> {
    let mut out = Map::new();
    for (name, stub) in stubs {
        if stub.get("revpos").and_then(Value::as_u64).unwrap_or(0) <= since_pos {
            out.insert(name.clone(), stub.clone());
            continue;
        }
        let digest = parse_digest(stub.get("digest"))
            .ok_or_else(|| ApiError::Db(settee_db::Error::Internal("attachment stub".into())))?;
        let content = read_all(db, &digest)?;
        out.insert(
            name.clone(),
            json!({
                "content_type": stub["content_type"],
                "revpos": stub["revpos"],
                "digest": stub["digest"],
                "data": STANDARD.encode(content),
            }),
        );
    }
    Ok(serde_json::to_vec(&out).expect("json"))
}

fn read_all(db: &Database, digest: &[u8; 16]) -> ApiResult<Vec<u8>> {
    let chunks = db
        .attachment_chunks(digest, 0..u64::MAX)?
        .ok_or_else(|| ApiError::Db(settee_db::Error::Internal("attachment content".into())))?;
    let mut all = Vec::new();
    for c in chunks {
        all.extend_from_slice(&c?);
    }
    Ok(all)
}

/// A parsed `Range: bytes=…` header: one range, CouchDB serves single ranges.
fn byte_range(value: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let range = match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
        (Some(a), Some(b)) if a <= b => (a, b.min(len.saturating_sub(1))),
        (Some(a), None) if b.is_empty() => (a, len.saturating_sub(1)),
        (None, Some(n)) if a.is_empty() && n > 0 => (len.saturating_sub(n), len.saturating_sub(1)),
        _ => return None,
    };
    Some(if len == 0 || range.0 >= len {
        Err(())
    } else {
        Ok(range)
    })
}

/// `/{db}/{docid}/{attname}`: `GET`/`HEAD` read, `PUT` uploads (streamed), `DELETE`.
pub async fn attachment(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => get(db, id, name, req).await,
        "PUT" => put(state, db, id, name, req).await,
        "DELETE" => delete(state, db, id, name, req).await,
        _ => Err(ApiError::MethodNotAllowed("GET,HEAD,PUT,DELETE")),
    }
}

/// Streams the request body into the attachment store; checks `Content-MD5`.
async fn upload(state: &AppState, db: &Database, req: &mut Req) -> ApiResult<settee_db::AttData> {
    use futures_util::StreamExt;
    let mut w = db.attachment_writer(max_size(state));
    let mut body = req.take_body().into_data_stream();
    while let Some(frame) = body.next().await {
        let Ok(bytes) = frame else {
            // An interrupted upload leaves no revision; its chunks are removed now.
            w.discard()?;
            return Err(ApiError::bad_request("Incomplete request body"));
        };
        w.write(&bytes)?;
    }
    let stored = w.finish()?;
    if let Some(sent) = req.header("content-md5") {
        if STANDARD.decode(sent.trim()).ok().as_deref() != Some(&stored.digest[..]) {
            return Err(ApiError::Named(
                StatusCode::BAD_REQUEST,
                "content_md5_mismatch".into(),
                "Possible message corruption.".into(),
            ));
        }
    }
    Ok(stored)
}

/// The stored bytes of the revision an attachment change edits: `rev`'s, or `{}` for a
/// document that does not exist yet (which then needs no `rev`).
async fn edited(db: &Arc<Database>, id: &str, rev: Option<Rev>) -> ApiResult<Vec<u8>> {
    let (db, id) = (db.clone(), id.to_string());
    blocking(move || match (&rev, db.open_doc(&id, rev.as_ref())) {
        (Some(_), Ok(d)) if !d.deleted => Ok(d.body),
        (None, Err(settee_db::Error::NotFound(_))) => Ok(b"{}".to_vec()),
        _ => Err(ApiError::Db(settee_db::Error::Conflict)),
    })
    .await
}

/// Writes `edit` (the edited revision, if any, and the new body with `stubs`) and answers
/// as CouchDB does.
async fn write_stubs(
    state: &AppState,
    db: Arc<Database>,
    req: &Req,
    id: &str,
    edit: (Option<Rev>, &[u8]),
    stubs: Map<String, Value>,
    status: StatusCode,
) -> ApiResult<Response> {
    let (rev, body) = edit;
    let stubs = (!stubs.is_empty()).then(|| serde_json::to_vec(&stubs).expect("json"));
    let doc = ParsedDoc {
        id: Some(id.to_string()),
        revs: rev.map(|r| (r.pos, vec![r.id])),
        deleted: false,
        body: join_stored(body, stubs.as_deref()),
        atts: None,
    };
    let rev = super::doc::write_one(state, db, req, doc, true, false).await?;
    let mut resp = super::doc::created(req, id, rev.as_ref(), false);
    *resp.status_mut() = status;
    Ok(resp)
}

async fn put(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    mut req: Req,
) -> ApiResult<Response> {
    settee_core::validate_doc_id(&id)?;
    if name.starts_with('_') {
        return Err(bad(format!(
            "Attachment name '{name}' starts with prohibited character '_'"
        )));
    }
    let rev = super::doc::reconcile_rev(&req, None)?;
    let content_type = req
        .header("content-type")
        .unwrap_or("application/octet-stream")
        .to_string();
    let base = edited(&db, &id, rev.clone()).await?;
    let stored = upload(state, &db, &mut req).await?;
    let (body, _) = split_stored(&base);
    let mut stubs = stored_stubs(&base).unwrap_or_default();
    stubs.insert(
        name,
        json!({
            "content_type": content_type,
            "revpos": rev.as_ref().map_or(1, |r| r.pos + 1),
            "digest": digest_text(&stored.digest),
            "length": stored.length,
            "stub": true,
        }),
    );
    let body = body.to_vec();
    write_stubs(
        state,
        db,
        &req,
        &id,
        (rev, &body),
        stubs,
        StatusCode::CREATED,
    )
    .await
}

async fn delete(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    let rev =
        super::doc::reconcile_rev(&req, None)?.ok_or(ApiError::Db(settee_db::Error::Conflict))?;
    let base = edited(&db, &id, Some(rev.clone())).await?;
    let mut stubs = stored_stubs(&base).unwrap_or_default();
    if stubs.remove(&name).is_none() {
        return Err(ApiError::Db(settee_db::Error::NotFound(
            "Document is missing attachment",
        )));
    }
    let body = split_stored(&base).0.to_vec();
    write_stubs(
        state,
        db,
        &req,
        &id,
        (Some(rev), &body),
        stubs,
        StatusCode::OK,
    )
    .await
}

async fn get(db: Arc<Database>, id: String, name: String, req: Req) -> ApiResult<Response> {
    let rev = req.params.get("rev").map(Rev::parse).transpose()?;
    let db2 = db.clone();
    let doc = blocking(move || Ok(db2.open_doc(&id, rev.as_ref())?)).await?;
    let stub = stored_stubs(&doc.body)
        .and_then(|mut s| s.remove(&name))
        .ok_or(ApiError::Db(settee_db::Error::NotFound(
            "Document is missing attachment",
        )))?;
    let digest = parse_digest(stub.get("digest"))
        .ok_or_else(|| ApiError::Db(settee_db::Error::Internal("attachment stub".into())))?;
    let len = stub.get("length").and_then(Value::as_u64).unwrap_or(0);
    let content_type = stub
        .get("content_type")
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream")
        .to_string();
    let etag = format!("\"{}\"", STANDARD.encode(digest));
    if crate::req::etag_value(&req.headers, header::IF_NONE_MATCH).as_deref()
        == Some(etag.trim_matches('"'))
    {
        let mut resp = Response::new(axum::body::Body::empty());
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resp.headers_mut()
            .insert(header::ETAG, HeaderValue::from_str(&etag).expect("ascii"));
        return Ok(resp);
    }
    let range = match req.header("range").and_then(|r| byte_range(r, len)) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(())) => {
            let mut resp = crate::reply::json(
                StatusCode::RANGE_NOT_SATISFIABLE,
                &json!({"error": "requested_range_not_satisfiable", "reason": "Requested range not satisfiable"}),
            );
            resp.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"),
            );
            return Ok(resp);
        }
    };
    let (from, to) = range.unwrap_or((0, len.saturating_sub(1)));
    let body_len = if len == 0 { 0 } else { to - from + 1 };
    let head = req.method == "HEAD";
    let mut resp = if head || body_len == 0 {
        Response::new(axum::body::Body::empty())
    } else {
        stream("application/octet-stream", move |out| {
            let chunks = db
                .attachment_chunks(&digest, from..to + 1)?
                .ok_or_else(|| {
                    ApiError::Db(settee_db::Error::Internal("attachment content".into()))
                })?;
            for c in chunks {
                if !out.write(&c?) {
                    break;
                }
            }
            Ok(())
        })
        .await
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(header::ETAG, HeaderValue::from_str(&etag).expect("ascii"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    if range.is_some() {
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {from}-{to}/{len}")).expect("ascii"),
        );
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(byte_range("bytes=0-4", 10), Some(Ok((0, 4))));
        assert_eq!(byte_range("bytes=5-", 10), Some(Ok((5, 9))));
        assert_eq!(byte_range("bytes=-3", 10), Some(Ok((7, 9))));
        assert_eq!(byte_range("bytes=8-100", 10), Some(Ok((8, 9))));
        assert_eq!(byte_range("bytes=10-12", 10), Some(Err(())));
        assert_eq!(byte_range("bytes=0-1,3-4", 10), None);
        assert_eq!(byte_range("items=0-1", 10), None);
    }
}
