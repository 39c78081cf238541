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
use serde_json::{json, Map};
use settee_core::Rev;
use settee_docs::Followed;
use settee_node::att_read::{AttInfo, Piece};
use settee_node::att_write::{check_name, edited, written as written_rev, AttUpload};
use settee_node::fabric::DbRef;
use settee_node::write::WriteOpts;
use settee_node::Fabric;
use settee_wire::{boundary_of, byte_ranges};

use crate::multipart::ByteRanges;

/// `/{db}/{docid}/{attname}`: `GET`/`HEAD` read, `PUT` uploads (streamed), `DELETE`.
pub async fn attachment(
    state: &AppState,
    db: DbRef,
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

fn bad(reason: String) -> ApiError {
    ApiError::BadRequest(reason)
}

fn multipart_error(e: multer::Error) -> ApiError {
    bad(format!("Invalid multipart body: {e}"))
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
    // A deletion (200) has no Location.
    if status != StatusCode::OK {
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
    db: DbRef,
    id: String,
    name: String,
    mut req: Req,
) -> ApiResult<Response> {
    use futures_util::StreamExt;
    check_name(&name)?;
    let gzipped = upload_encoding(&req)?;
    let rev = crate::req::reconcile_rev(&req, None)?;
    let content_type = req.header("content-type");
    let up = AttUpload {
        name: name.clone(),
        content_type: content_type.unwrap_or("application/octet-stream").into(),
        gzipped,
        rev,
        content_md5: req.header("content-md5").map(String::from),
        w: crate::req::write_quorum(&req),
        body: (req.take_body().into_data_stream())
            .map(|frame| {
                frame.map_err(|_| settee_node::Error::bad_request("Incomplete request body"))
            })
            .boxed(),
    };
    let written = Fabric::upload_attachment(&*state.fabric, &db.name, &req.user, &id, up).await?;
    let status = crate::reply::written_status(&written, StatusCode::CREATED);
    let rev = written_rev(written.rev)?;
    Ok(changed(state, &req, &id, &name, &rev, status))
}

async fn delete(
    state: &AppState,
    db: DbRef,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    check_name(&name)?;
    let rev = crate::req::reconcile_rev(&req, None)?;
    let w = crate::req::write_quorum(&req);
    let deleted =
        Fabric::delete_attachment(&*state.fabric, &db.name, &req.user, &id, &name, rev, w);
    // A deletion answers 200 even below the quorum, as CouchDB.
    let rev = written_rev(deleted.await?.rev)?;
    Ok(changed(state, &req, &id, &name, &rev, StatusCode::OK))
}

/// The `Content-Type` of a form upload: `multipart/form-data`, else CouchDB's 415.
pub fn form_content_type(req: &Req) -> ApiResult<String> {
    let ct = req.header("content-type").unwrap_or("").to_string();
    if !ct.to_ascii_lowercase().starts_with("multipart/form-data") {
        return Err(ApiError::BadContentType(
            "Content-Type must be multipart/form-data",
        ));
    }
    Ok(ct)
}

/// A form upload's fields: `_doc` (the document's JSON) or `_rev` (the revision to edit),
/// and the `_attachments` files (name, content type, what their sink made of them).
struct Form<F> {
    doc: Option<String>,
    rev: Option<String>,
    files: Vec<(String, String, F)>,
}

/// Where a form's file goes while it is read: the database's attachment store on a single
/// node (streamed), memory on a clustered database (sent on to the copies afterwards).
trait FileSink {
    type Done;
    fn write(&mut self, chunk: &[u8]) -> ApiResult<()>;
    fn finish(self) -> ApiResult<Self::Done>;
}

impl FileSink for settee_node::att_write::Upload {
    type Done = settee_docs::Written;
    fn write(&mut self, chunk: &[u8]) -> ApiResult<()> {
        Ok(settee_node::att_write::Upload::write(self, chunk)?)
    }
    fn finish(self) -> ApiResult<Self::Done> {
        Ok(settee_node::att_write::Upload::finish(self, None)?)
    }
}

/// A file held in memory, refused past `max_attachment_size`.
struct InMemory {
    content: Vec<u8>,
    limit: u64,
}

impl FileSink for InMemory {
    type Done = bytes::Bytes;
    fn write(&mut self, chunk: &[u8]) -> ApiResult<()> {
        self.content.extend_from_slice(chunk);
        if self.content.len() as u64 > self.limit {
            return Err(ApiError::Db(settee_db::Error::AttachmentTooLarge));
        }
        Ok(())
    }
    fn finish(self) -> ApiResult<Self::Done> {
        Ok(self.content.into())
    }
}

/// Checks a form upload's request (`Referer`, document id, content type) and reads its
/// fields, each file into the sink `sink(content_type)` gives.
async fn read_form<S: FileSink>(
    req: &mut Req,
    id: &str,
    sink: impl Fn(&str) -> S,
) -> ApiResult<Form<S::Done>> {
    crate::req::check_referer(req)?;
    settee_core::validate_doc_id(id)?;
    let ct = form_content_type(req)?;
    let boundary = boundary_of(&ct).ok_or_else(|| bad("Missing multipart boundary".into()))?;
    let mut parts = multer::Multipart::new(req.take_body().into_data_stream(), boundary);
    let mut form = Form {
        doc: None,
        rev: None,
        files: Vec::new(),
    };
    while let Some(mut field) = parts.next_field().await.map_err(multipart_error)? {
        match (field.name(), field.file_name()) {
            (Some("_attachments"), Some(file)) => {
                let name = file.to_string();
                check_name(&name)?;
                let content_type = field
                    .content_type()
                    .map_or_else(|| "application/octet-stream".to_string(), |m| m.to_string());
                let mut file = sink(&content_type);
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    file.write(&chunk)?;
                }
                form.files.push((name, content_type, file.finish()?));
            }
            (Some("_doc"), _) => form.doc = Some(field.text().await.map_err(multipart_error)?),
            (Some("_rev"), _) => form.rev = Some(field.text().await.map_err(multipart_error)?),
            _ => {}
        }
    }
    Ok(form)
}

/// The `_doc` field's document, as `id`, its revision reconciled with the request's.
fn form_doc(text: &str, id: &str, req: &Req) -> ApiResult<settee_core::ParsedDoc> {
    let mut doc = settee_core::parse_doc(crate::req::parse_json(text.as_bytes())?)?;
    doc.id = Some(id.to_owned());
    if let Some(rev) = crate::req::reconcile_rev(req, doc.rev())? {
        doc.revs.get_or_insert((rev.pos, vec![rev.id]));
    }
    Ok(doc)
}

impl<F> Form<F> {
    /// `doc`'s `_attachments` with the files as `follows` entries first, replacing the
    /// document's own entries of the same names.
    fn follow_files(&self, doc: &mut settee_core::ParsedDoc) {
        let sent = doc.atts.take().unwrap_or_default();
        let mut atts = Map::new();
        for (name, content_type, _) in &self.files {
            atts.insert(
                name.clone(),
                json!({"content_type": content_type, "follows": true}),
            );
        }
        for (name, att) in sent {
            atts.entry(name).or_insert(att);
        }
        doc.atts = (!atts.is_empty()).then_some(atts);
    }
}

/// `POST /{db}/{docid}` with a `multipart/form-data` body, as an HTML form uploads files:
/// a `_doc` field (the document's JSON) or a `_rev` field (the revision to edit, kept as
/// it is), and `_attachments` file fields, named by their file names, which replace
/// same-named attachments. CouchDB requires a `Referer` of the same host (a guard against
/// forms posted from other sites) and answers 201 with the new revision as `ETag`.
pub async fn form(state: &AppState, db: DbRef, id: String, mut req: Req) -> ApiResult<Response> {
    let Ok(db) = db.engine("form uploads").cloned() else {
        return form_clustered(state, db, id, req).await;
    };
    let form = read_form(&mut req, &id, |ct| state.node.upload(&db, ct, false)).await?;
    let rev = match &form.doc {
        Some(text) => {
            let mut doc = form_doc(text, &id, &req)?;
            form.follow_files(&mut doc);
            let mut followed = Followed::new();
            for (name, _, written) in form.files {
                followed.insert(name, written);
            }
            written_rev(
                (state.node)
                    .update_doc_with(db, &req.user, doc, WriteOpts::default(), followed)
                    .await?,
            )?
        }
        None => {
            let rev = Rev::parse(form.rev.as_deref().unwrap_or(""))?;
            let revpos = rev.pos + 1;
            let base = edited(&db, &id, Some(rev)).await?;
            let mut atts = base.atts();
            for (name, content_type, written) in form.files.into_iter().rev() {
                atts.put_first(name, &content_type, revpos, &written);
            }
            (state.node)
                .write_atts(db, &req.user, &id, base, &atts)
                .await?
        }
    };
    Ok(form_written(&id, &rev, StatusCode::CREATED))
}

/// A form upload's answer: `{"ok","id","rev"}` with the revision as `ETag`.
fn form_written(id: &str, rev: &Rev, status: StatusCode) -> Response {
    let rev = rev.to_string();
    let mut resp = crate::reply::json(status, &json!({"ok": true, "id": id, "rev": rev}));
    let etag = HeaderValue::from_str(&format!("\"{rev}\"")).expect("revs are ASCII");
    resp.headers_mut().insert(header::ETAG, etag);
    resp
}

/// [`form`] on a clustered database: the files held in memory (up to
/// `max_attachment_size` each) and the document written to its copies as a
/// `multipart/related` one ([`Fabric::update_doc_related`]); with `_rev`, that revision
/// read through the cluster, its attachments kept as stubs after the files. 202 below
/// the write quorum, as CouchDB's.
async fn form_clustered(
    state: &AppState,
    db: DbRef,
    id: String,
    mut req: Req,
) -> ApiResult<Response> {
    let limit = state.node.write_settings().att_limit;
    let sink = |_: &str| InMemory {
        content: Vec::new(),
        limit,
    };
    let form = read_form(&mut req, &id, sink).await?;
    let mut doc = match &form.doc {
        Some(text) => form_doc(text, &id, &req)?,
        None => {
            let rev = Rev::parse(form.rev.as_deref().unwrap_or(""))?;
            let opts = settee_node::read::ReadOpts {
                rev: Some(rev.clone()),
                ..Default::default()
            };
            let (fabric, name, user, docid) = (
                state.fabric.clone(),
                db.name.clone(),
                req.user.clone(),
                id.clone(),
            );
            let read =
                super::blocking(move || Ok(fabric.open_doc(&name, &user, &docid, &opts)?)).await?;
            let settee_node::read::Rendered::Json(body) = read.body else {
                return Err(ApiError::Db(settee_db::Error::Internal(
                    "a revision read as multipart".into(),
                )));
            };
            let mut body = crate::req::body_object(crate::req::parse_json(&body)?)?;
            for special in ["_id", "_rev", "_revisions"] {
                body.shift_remove(special);
            }
            let mut doc = settee_core::parse_doc(serde_json::Value::Object(body))?;
            doc.id = Some(id.clone());
            doc.revs = Some((rev.pos, vec![rev.id]));
            doc
        }
    };
    form.follow_files(&mut doc);
    let parts = form
        .files
        .into_iter()
        .map(|(name, _, c)| (name, c))
        .collect();
    let opts = WriteOpts::default();
    let fabric = &*state.fabric;
    let written = Fabric::update_doc_related(fabric, &db.name, &req.user, doc, opts, parts).await?;
    let status = crate::reply::written_status(&written, StatusCode::CREATED);
    Ok(form_written(&id, &written_rev(written.rev)?, status))
}

async fn get(
    state: &AppState,
    db: DbRef,
    id: String,
    name: String,
    req: Req,
) -> ApiResult<Response> {
    let rev = req.params.get("rev").map(Rev::parse).transpose()?;
    let (node, db_name) = (state.fabric.clone(), db.name.clone());
    let att = blocking(move || {
        Ok(Fabric::open_attachment(
            &*node,
            &db_name,
            &id,
            &name,
            rev.as_ref(),
        )?)
    })
    .await?;
    let (etag, len) = (att.etag(), att.length);
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
        Some(Ok(_)) if att.gzip => Vec::new(),
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
        return Ok(multiple_ranges(state, db, att, &ranges, &req).await);
    }
    let range = ranges.first().copied();
    // Compressed content goes out as stored to clients that accept gzip, decompressed on
    // the fly to the others; decompressed, content uploaded gzip-encoded goes out without
    // a Content-Length (its identity length is not known).
    let send_gzip = att.gzip && accepts_gzip(&req);
    let unknown_len = !send_gzip && att.identity_length_unknown();
    let (from, to) = range.unwrap_or((0, len.saturating_sub(1)));
    let body_len = match (send_gzip, len) {
        (true, _) => att.stored_length,
        _ if unknown_len => u64::MAX,
        (false, 0) => 0,
        (false, _) => to - from + 1,
    };
    let piece = match (att.gzip, send_gzip) {
        (true, true) => Piece::Stored(0..att.stored_length),
        (true, false) => Piece::Decoded {
            skip: from,
            count: body_len,
        },
        (false, _) => Piece::Stored(from..to + 1),
    };
    let (head, gzip) = (req.method == "HEAD", att.gzip);
    let content_type = HeaderValue::from_str(&att.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let mut resp = if head || body_len == 0 {
        Response::new(axum::body::Body::empty())
    } else {
        let node = state.fabric.clone();
        stream("application/octet-stream", move |out| {
            let out = &mut |b: &[u8]| out.write(b);
            Ok(Fabric::attachment_content(
                &*node, &db.name, &att, piece, out,
            )?)
        })
        .await
    };
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
    state: &AppState,
    db: DbRef,
    att: AttInfo,
    ranges: &[(u64, u64)],
    req: &Req,
) -> Response {
    let framing = ByteRanges::new(ranges, &att.content_type, att.length);
    let (body_len, multipart_type) = (framing.len, framing.content_type());
    let etag = att.etag();
    let mut resp = if req.method == "HEAD" {
        Response::new(axum::body::Body::empty())
    } else {
        let (ranges, node) = (ranges.to_vec(), state.fabric.clone());
        stream("application/octet-stream", move |out| {
            let marker = format!("\r\n--{}", framing.boundary);
            out.write(&marker.as_bytes()[2..]);
            for ((from, to), head) in ranges.iter().zip(&framing.heads) {
                out.write(head.as_bytes());
                let mut gone = false;
                let piece = Piece::Stored(*from..to + 1);
                Fabric::attachment_content(&*node, &db.name, &att, piece, &mut |b: &[u8]| {
                    gone = !out.write(b);
                    !gone
                })?;
                if gone {
                    return Ok(());
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
    content_headers(&mut resp, multipart_type, &etag, body_len);
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
