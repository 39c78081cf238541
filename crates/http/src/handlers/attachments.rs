//! Attachments: resolving a written document's `_attachments` (inline base64 data is
//! stored, `stub: true` entries are carried over from the revision being replaced),
//! rendering them inline for `attachments=true`, and `GET`/`HEAD /{db}/{docid}/{attname}`
//! with `Range`, `ETag` and `If-None-Match`. Content lives in the database's attachment
//! store (`settee_db::atts`); a revision's stubs are stored after its body
//! (`settee_core::join_stored`).

use super::blocking;
use crate::error::{ApiError, ApiResult};
use crate::location::url_encode;
use crate::reply::stream;
use crate::{AppState, Req};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};
use settee_core::Rev;
use settee_db::Database;
use settee_docs::atts::{content_type_of, parse_digest, StoredAtts};
use settee_docs::{Followed, Written};
use settee_node::att_write::{edited, written as written_rev, NewAttachment};
use settee_node::write::WriteOpts;
use settee_wire::{boundary_of, byte_ranges};
use std::sync::Arc;

use crate::multipart::ByteRanges;

/// `/{db}/{docid}/{attname}`: `GET`/`HEAD` read, `PUT` uploads (streamed), `DELETE`.
pub async fn attachment(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => get(state, db, id, name, req).await,
        "PUT" => put(state, db, id, name, req).await,
        "DELETE" => delete(state, db, id, name, req).await,
        _ => Err(ApiError::MethodNotAllowed("DELETE,GET,HEAD,PUT")),
    }
}

fn io_error(e: std::io::Error) -> ApiError {
    ApiError::Db(settee_db::Error::Internal(format!(
        "attachment content: {e}"
    )))
}

fn bad(reason: String) -> ApiError {
    ApiError::BadRequest(reason)
}

fn multipart_error(e: multer::Error) -> ApiError {
    bad(format!("Invalid multipart body: {e}"))
}

/// Streams the request body into the attachment store; checks `Content-MD5` against the
/// content as sent.
async fn upload(
    state: &AppState,
    db: &Database,
    req: &mut Req,
    content_type: &str,
    gzipped: bool,
) -> ApiResult<Written> {
    use futures_util::StreamExt;
    let mut upload = state.node.upload(db, content_type, gzipped);
    let mut body = req.take_body().into_data_stream();
    while let Some(frame) = body.next().await {
        let Ok(bytes) = frame else {
            upload.discard();
            return Err(ApiError::bad_request("Incomplete request body"));
        };
        upload.write(&bytes)?;
    }
    Ok(upload.finish(req.header("content-md5"))?)
}

/// CouchDB's answer to an attachment change: `{"ok","id","rev"}`, no `ETag`; a `PUT`
/// (201) also gives the attachment's `Location`: the database name as it is, the
/// document id and attachment name encoded as `couch_util:url_encode` does.
fn changed(
    state: &AppState,
    req: &Req,
    id: &str,
    name: &str,
    rev: &Rev,
    status: StatusCode,
) -> Response {
    let mut resp = crate::reply::json(
        status,
        &json!({"ok": true, "id": id, "rev": rev.to_string()}),
    );
    if status == StatusCode::CREATED {
        let db = req
            .uri
            .path()
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("");
        let db = percent_encoding::percent_decode_str(db).decode_utf8_lossy();
        let path = format!("/{db}/{}/{}", url_encode(id), url_encode(name));
        if let Some(loc) = crate::location::absolute_uri(&state.config, req, &path) {
            resp.headers_mut().insert(header::LOCATION, loc);
        }
    }
    resp
}

fn check_name(name: &str) -> ApiResult<()> {
    if name.starts_with('_') {
        return Err(bad(format!(
            "Attachment name '{name}' starts with prohibited character '_'"
        )));
    }
    Ok(())
}

/// The upload's `Content-Encoding`: `identity` (compressed here if its type is
/// compressible) or `gzip` (stored as sent); CouchDB refuses others.
fn upload_encoding(req: &Req) -> ApiResult<bool> {
    let enc = req
        .header("content-encoding")
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    match enc.as_str() {
        "identity" => Ok(false),
        "gzip" => Ok(true),
        _ => Err(ApiError::BadContentType(
            "Only gzip and identity content-encodings are supported",
        )),
    }
}

async fn put(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    mut req: Req,
) -> ApiResult<Response> {
    check_name(&name)?;
    let gzipped = upload_encoding(&req)?;
    let rev = crate::req::reconcile_rev(&req, None)?;
    if rev.is_none() {
        settee_core::validate_doc_id(&id)?;
    }
    // Past `[disk_monitor]`'s threshold the edit would be refused: do not store the
    // content first.
    db.config().disk.room_for_edits()?;
    let content_type = req
        .header("content-type")
        .unwrap_or("application/octet-stream")
        .to_string();
    let base = edited(&db, &id, rev).await?;
    let written = upload(state, &db, &mut req, &content_type, gzipped).await?;
    let att = NewAttachment {
        name: name.clone(),
        content_type: &content_type,
        content: &written,
    };
    let rev = (state.node)
        .put_attachment(db, &req.user, &id, base, att)
        .await?;
    Ok(changed(state, &req, &id, &name, &rev, StatusCode::CREATED))
}

async fn delete(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    check_name(&name)?;
    let rev = crate::req::reconcile_rev(&req, None)?;
    let rev = (state.node)
        .delete_attachment(db, &req.user, &id, rev, &name)
        .await?;
    Ok(changed(state, &req, &id, &name, &rev, StatusCode::OK))
}

/// `POST /{db}/{docid}` with a `multipart/form-data` body, as an HTML form uploads files:
/// a `_doc` field (the document's JSON) or a `_rev` field (the revision to edit, kept as
/// it is), and `_attachments` file fields, named by their file names, which replace
/// same-named attachments. CouchDB requires a `Referer` of the same host (a guard against
/// forms posted from other sites) and answers 201 with the new revision as `ETag`.
pub async fn form(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    mut req: Req,
) -> ApiResult<Response> {
    crate::req::check_referer(&req)?;
    settee_core::validate_doc_id(&id)?;
    let ct = req.header("content-type").unwrap_or("").to_string();
    if !ct.to_ascii_lowercase().starts_with("multipart/form-data") {
        return Err(ApiError::BadContentType(
            "Content-Type must be multipart/form-data",
        ));
    }
    let boundary = boundary_of(&ct).ok_or_else(|| bad("Missing multipart boundary".into()))?;
    let mut parts = multer::Multipart::new(req.take_body().into_data_stream(), boundary);
    let (mut doc_field, mut rev_field, mut files) = (None, None, Vec::new());
    while let Some(mut field) = parts.next_field().await.map_err(multipart_error)? {
        match (field.name(), field.file_name()) {
            (Some("_attachments"), Some(file)) => {
                let name = file.to_string();
                check_name(&name)?;
                let content_type = field
                    .content_type()
                    .map_or_else(|| "application/octet-stream".to_string(), |m| m.to_string());
                let mut upload = state.node.upload(&db, &content_type, false);
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    upload.write(&chunk)?;
                }
                files.push((name, content_type, upload.finish(None)?));
            }
            (Some("_doc"), _) => doc_field = Some(field.text().await.map_err(multipart_error)?),
            (Some("_rev"), _) => rev_field = Some(field.text().await.map_err(multipart_error)?),
            _ => {}
        }
    }
    let rev = match doc_field {
        Some(text) => {
            let mut doc = settee_core::parse_doc(crate::req::parse_json(text.as_bytes())?)?;
            doc.id = Some(id.clone());
            if let Some(rev) = crate::req::reconcile_rev(&req, doc.rev())? {
                doc.revs.get_or_insert((rev.pos, vec![rev.id]));
            }
            let mut followed = Followed::new();
            let sent = doc.atts.take().unwrap_or_default();
            let mut atts = Map::new();
            for (name, content_type, written) in files {
                atts.insert(
                    name.clone(),
                    json!({"content_type": content_type, "follows": true}),
                );
                followed.insert(name, written);
            }
            for (name, att) in sent {
                atts.entry(name).or_insert(att);
            }
            doc.atts = (!atts.is_empty()).then_some(atts);
            written_rev(
                (state.node)
                    .update_doc_with(db, &req.user, doc, WriteOpts::default(), followed)
                    .await?,
            )?
        }
        None => {
            let rev = Rev::parse(rev_field.as_deref().unwrap_or(""))?;
            let revpos = rev.pos + 1;
            let base = edited(&db, &id, Some(rev)).await?;
            let mut atts = base.atts();
            for (name, content_type, written) in files.into_iter().rev() {
                atts.put_first(name, &content_type, revpos, &written);
            }
            (state.node)
                .write_atts(db, &req.user, &id, base, &atts)
                .await?
        }
    };
    let rev = rev.to_string();
    let mut resp = crate::reply::json(
        StatusCode::CREATED,
        &json!({"ok": true, "id": id, "rev": rev}),
    );
    let etag = HeaderValue::from_str(&format!("\"{rev}\"")).expect("revs are ASCII");
    resp.headers_mut().insert(header::ETAG, etag);
    Ok(resp)
}

async fn get(
    state: &AppState,
    db: Arc<Database>,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    let rev = req.params.get("rev").map(Rev::parse).transpose()?;
    let db2 = db.clone();
    let doc = blocking(move || Ok(db2.open_doc(&id, rev.as_ref())?)).await?;
    let mut atts = StoredAtts::of(&doc.body);
    let gzip = atts.gzip(&name);
    let stub = atts
        .remove(&name)
        .ok_or(ApiError::Db(settee_db::Error::NotFound(
            "Document is missing attachment",
        )))?;
    let digest = parse_digest(stub.get("digest"))
        .ok_or_else(|| ApiError::Db(settee_db::Error::Internal("attachment stub".into())))?;
    let len = stub.get("length").and_then(Value::as_u64).unwrap_or(0);
    let content_type = content_type_of(stub.get("content_type")).to_string();
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
    let ranges = match req.header("range").and_then(|r| byte_ranges(r, len)) {
        None => Vec::new(),
        // CouchDB serves ranges of identity-encoded attachments only: of content stored
        // gzip-compressed a valid range gets the whole of it.
        Some(Ok(_)) if gzip => Vec::new(),
        Some(Ok(r)) => r,
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
    if ranges.len() > 1 {
        return Ok(multiple_ranges(db, digest, &ranges, &content_type, &etag, len, &req).await);
    }
    let range = ranges.first().copied();
    // Compressed content goes out as stored to clients that accept gzip, decompressed on
    // the fly to the others.
    let send_gzip = gzip && accepts_gzip(&req);
    let stored_len = if gzip {
        db.attachment_length(&digest)?.unwrap_or(0)
    } else {
        len
    };
    // Content uploaded gzip-encoded has no known identity length (its `length` is the
    // encoded one; CouchDB tells them apart by the two lengths being equal): decoded, it
    // goes out without a Content-Length.
    let unknown_len = gzip && !send_gzip && len == stored_len;
    let (from, to) = range.unwrap_or((0, len.saturating_sub(1)));
    let body_len = match (send_gzip, len) {
        (true, _) => stored_len,
        _ if unknown_len => u64::MAX,
        (false, 0) => 0,
        (false, _) => to - from + 1,
    };
    let head = req.method == "HEAD";
    let mut resp = if head || body_len == 0 {
        Response::new(axum::body::Body::empty())
    } else {
        let decode = gzip && !send_gzip;
        stream("application/octet-stream", move |out| {
            let (start, end) = if decode || send_gzip {
                (0, stored_len)
            } else {
                (from, to + 1)
            };
            let chunks = db.attachment_chunks(&digest, start..end)?.ok_or_else(|| {
                ApiError::Db(settee_db::Error::Internal("attachment content".into()))
            })?;
            if !decode {
                for c in chunks {
                    if !out.write(&c?) {
                        break;
                    }
                }
                return Ok(());
            }
            send_decoded(chunks, from, body_len, out)
        })
        .await
    };
    let content_type = HeaderValue::from_str(&content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let h = content_headers(&mut resp, content_type, &etag, body_len);
    if unknown_len {
        h.remove(header::CONTENT_LENGTH);
    }
    if gzip {
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("none"));
    }
    if send_gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Some(csp) = crate::reply::csp_header(&state.config, "attachments", "sandbox") {
        h.insert("content-security-policy", csp);
    }
    if range.is_some() {
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {from}-{to}/{len}")).expect("ascii"),
        );
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    // CouchDB 3.5.2 sends no Content-MD5 (the digest is in the ETag).
    Ok(resp)
}

/// Whether `Accept-Encoding` admits gzip (a `q=0` refuses it; `*` admits it).
fn accepts_gzip(req: &Req) -> bool {
    let Some(accept) = req.header("accept-encoding") else {
        return false;
    };
    accept.split(',').any(|item| {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        (coding == "gzip" || coding == "*") && q > 0.0
    })
}

/// 206 with a `multipart/byteranges` body: per range a part with its `Content-Type` and
/// `Content-Range`, as CouchDB's `send_ranges_multipart` frames them.
async fn multiple_ranges(
    db: Arc<Database>,
    digest: [u8; 16],
    ranges: &[(u64, u64)],
    content_type: &str,
    etag: &str,
    len: u64,
    req: &Req,
) -> Response {
    let framing = ByteRanges::new(ranges, content_type, len);
    let (body_len, multipart_type) = (framing.len, framing.content_type());
    let mut resp = if req.method == "HEAD" {
        Response::new(axum::body::Body::empty())
    } else {
        let ranges = ranges.to_vec();
        stream("application/octet-stream", move |out| {
            let marker = format!("\r\n--{}", framing.boundary);
            out.write(&marker.as_bytes()[2..]);
            for ((from, to), head) in ranges.iter().zip(&framing.heads) {
                out.write(head.as_bytes());
                let chunks = db
                    .attachment_chunks(&digest, *from..to + 1)?
                    .ok_or_else(|| {
                        ApiError::Db(settee_db::Error::Internal("attachment content".into()))
                    })?;
                for c in chunks {
                    if !out.write(&c?) {
                        return Ok(());
                    }
                }
                out.write(marker.as_bytes());
            }
            out.write(b"--");
            Ok(())
        })
        .await
    };
    *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    let multipart_type = HeaderValue::from_str(&multipart_type).expect("ascii");
    content_headers(&mut resp, multipart_type, etag, body_len);
    resp
}

/// The headers every attachment read sends: type, `ETag`, `Accept-Ranges`,
/// `Cache-Control` and `Content-Length`.
fn content_headers<'r>(
    resp: &'r mut Response,
    content_type: HeaderValue,
    etag: &str,
    len: u64,
) -> &'r mut axum::http::HeaderMap {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(header::ETAG, HeaderValue::from_str(etag).expect("ascii"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h
}

/// Decompresses stored gzip chunks as they are read and sends `count` bytes from `skip`.
fn send_decoded(
    chunks: settee_db::AttChunks,
    mut skip: u64,
    mut count: u64,
    out: &mut crate::reply::Chunks,
) -> ApiResult<()> {
    use std::io::Read;
    let reader = ChunkReader {
        chunks,
        buf: Vec::new(),
        at: 0,
    };
    let mut gz = flate2::read::GzDecoder::new(reader);
    let mut buf = vec![0u8; 64 << 10];
    while count > 0 {
        let n = gz.read(&mut buf).map_err(io_error)?;
        if n == 0 {
            break;
        }
        let mut piece = &buf[..n];
        let drop = skip.min(piece.len() as u64) as usize;
        piece = &piece[drop..];
        skip -= drop as u64;
        let take = count.min(piece.len() as u64) as usize;
        if take > 0 && !out.write(&piece[..take]) {
            break;
        }
        count -= take as u64;
    }
    Ok(())
}

/// Stored chunks as a byte reader.
struct ChunkReader {
    chunks: settee_db::AttChunks,
    buf: Vec<u8>,
    at: usize,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.buf.len() {
            match self.chunks.next() {
                Some(Ok(c)) => {
                    self.buf = c;
                    self.at = 0;
                }
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
