//! Multipart bodies Settee sends: a document with its attachments as parts
//! (`multipart/related`), `open_revs` for multipart clients (`multipart/mixed`), and the
//! framing of several byte ranges of an attachment (`multipart/byteranges`).

use crate::error::{ApiError, ApiResult};
use crate::reply::stream;
use crate::{AppState, Req};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_db::Database;
use settee_docs::Followed;
use settee_node::atts::Part;
use settee_node::read::Revision;
use settee_wire::boundary_of;
use std::sync::Arc;

/// The framing of a `multipart/byteranges` body: the part headers before each range's
/// bytes, the separators, and the body's total length.
pub struct ByteRanges {
    pub boundary: String,
    pub heads: Vec<String>,
    pub len: u64,
}

impl ByteRanges {
    pub fn new(ranges: &[(u64, u64)], content_type: &str, total: u64) -> ByteRanges {
        let boundary = hex::encode(rand::random::<[u8; 16]>());
        let heads: Vec<String> = ranges
            .iter()
            .map(|(from, to)| {
                format!(
                    "\r\nContent-Type: {content_type}\r\nContent-Range: bytes {from}-{to}/{total}\r\n\r\n"
                )
            })
            .collect();
        // "--B", then per range its head, its bytes and "\r\n--B", then "--".
        let framing = 2 + boundary.len() + 2;
        let per_range: u64 = ranges
            .iter()
            .zip(&heads)
            .map(|((from, to), head)| (head.len() + 4 + boundary.len()) as u64 + (to - from + 1))
            .sum();
        ByteRanges {
            len: framing as u64 + per_range,
            boundary,
            heads,
        }
    }

    pub fn content_type(&self) -> String {
        format!("multipart/byteranges; boundary=\"{}\"", self.boundary)
    }
}

/// A `multipart/related` response: the document's JSON, then each attachment's content
/// (as CouchDB sends documents to clients that accept it), streamed with a
/// `Content-Length` known in advance, as `couch_doc:len_doc_to_multi_part_stream` gives it.
/// With no parts to send it is the JSON alone (`application/json`, no final newline).
pub async fn multipart_response(
    db: Option<Arc<Database>>,
    doc_json: Vec<u8>,
    parts: Vec<Part>,
) -> Response {
    if parts.is_empty() {
        let len = doc_json.len();
        let mut resp = Response::new(axum::body::Body::from(doc_json));
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        return resp;
    }
    let boundary = new_boundary();
    let len = related_length(&boundary, &doc_json, &parts);
    let b = boundary.clone();
    let mut resp = stream("multipart/related", move |out| {
        write_related(out, db.as_deref(), &b, &doc_json, parts)
    })
    .await;
    if resp.status() == StatusCode::OK {
        let h = resp.headers_mut();
        h.remove(header::CACHE_CONTROL);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    with_boundary(resp, "multipart/related", &boundary)
}

/// `open_revs` for clients that accept `multipart/mixed` (CouchDB's replicator): one part
/// per revision, nested `multipart/related` for those whose attachments are sent, read
/// from `db` (a clustered database's parts carry their content); streamed.
pub async fn multipart_mixed(db: Option<Arc<Database>>, revs: Vec<Revision>) -> Response {
    let boundary = new_boundary();
    let b = boundary.clone();
    let mut resp = stream("multipart/mixed", move |out| {
        for part in revs {
            match part {
                Revision::Json { ok, body } => {
                    let ct = if ok {
                        "application/json"
                    } else {
                        "application/json; error=\"true\""
                    };
                    out.write(format!("--{b}\r\nContent-Type: {ct}\r\n\r\n").as_bytes());
                    out.write(&body);
                    out.write(b"\r\n");
                }
                Revision::Related { doc, parts } => {
                    let inner = new_boundary();
                    out.write(
                        format!("--{b}\r\nContent-Type: multipart/related; boundary=\"{inner}\"\r\n\r\n")
                            .as_bytes(),
                    );
                    write_related(out, db.as_deref(), &inner, &doc, parts)?;
                    out.write(b"\r\n");
                }
            }
        }
        out.write(format!("--{b}--").as_bytes());
        Ok(())
    })
    .await;
    // No Cache-Control, as chttpd_db's send_docs_multipart starts it.
    resp.headers_mut().remove(header::CACHE_CONTROL);
    with_boundary(resp, "multipart/mixed", &boundary)
}

fn new_boundary() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

fn with_boundary(mut resp: Response, kind: &str, boundary: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(&format!("{kind}; boundary=\"{boundary}\"")) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// The head of a `multipart/related` document, before its JSON.
fn related_head(boundary: &str) -> String {
    format!("--{boundary}\r\nContent-Type: application/json\r\n\r\n")
}

/// The headers of an attachment part, with the delimiter before them.
fn part_head(boundary: &str, p: &Part) -> String {
    format!(
        "\r\n--{boundary}\r\nContent-Disposition: attachment; filename={}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}\r\n",
        serde_json::to_string(&p.name).expect("json"),
        p.content_type,
        p.length,
        if p.gzip { "Content-Encoding: gzip\r\n" } else { "" },
    )
}

fn related_tail(boundary: &str) -> String {
    format!("\r\n--{boundary}--")
}

/// The length of what [`write_related`] writes.
fn related_length(boundary: &str, doc_json: &[u8], parts: &[Part]) -> u64 {
    let heads: u64 = parts
        .iter()
        .map(|p| part_head(boundary, p).len() as u64 + p.length)
        .sum();
    (related_head(boundary).len() + doc_json.len() + related_tail(boundary).len()) as u64 + heads
}

/// The body of a `multipart/related` document: its JSON, then each attachment part as
/// stored (its content read from `db`, unless the part carries it).
fn write_related(
    out: &mut crate::reply::Chunks,
    db: Option<&Database>,
    boundary: &str,
    doc_json: &[u8],
    parts: Vec<Part>,
) -> ApiResult<()> {
    let missing = || ApiError::Db(settee_db::Error::Internal("attachment content".into()));
    out.write(related_head(boundary).as_bytes());
    out.write(doc_json);
    for p in parts {
        out.write(part_head(boundary, &p).as_bytes());
        if let Some(content) = &p.content {
            out.write(content);
            continue;
        }
        let chunks = (db.ok_or_else(missing)?)
            .attachment_chunks(&p.digest, 0..p.length)?
            .ok_or_else(missing)?;
        for c in chunks {
            out.write(&c?);
        }
    }
    out.write(related_tail(boundary).as_bytes());
    Ok(())
}

/// Reads a `multipart/related` document upload (`settee_wire::read_related` frames it):
/// parts are streamed into the attachment store; parts of attachments with
/// `"encoding": "gzip"` are stored as sent.
pub async fn read_multipart(
    state: &AppState,
    db: &Database,
    req: &mut Req,
) -> ApiResult<(Value, Followed)> {
    let ct = req.header("content-type").unwrap_or("").to_string();
    let boundary =
        boundary_of(&ct).ok_or_else(|| ApiError::bad_request("Missing multipart boundary"))?;
    let mut store = state.node.follows_store(db);
    let body = req.take_body().into_data_stream();
    let doc = settee_wire::read_related(body, boundary, &mut store).await?;
    Ok((doc, store.followed))
}

/// Reads a `multipart/related` document upload into memory (a clustered database's: its
/// copies are sent it whole): the document and its parts (name, content as sent), none
/// larger than `[couchdb] max_attachment_size`.
pub async fn read_held(
    state: &AppState,
    req: &mut Req,
) -> ApiResult<(Value, Vec<(String, bytes::Bytes)>)> {
    let ct = req.header("content-type").unwrap_or("").to_string();
    let boundary =
        boundary_of(&ct).ok_or_else(|| ApiError::bad_request("Missing multipart boundary"))?;
    let limit = state.node.write_settings().att_limit;
    let mut held = settee_node::att_write::HeldParts::new(limit);
    let body = req.take_body().into_data_stream();
    let doc = settee_wire::read_related(body, boundary, &mut held).await?;
    Ok((doc, held.parts))
}
