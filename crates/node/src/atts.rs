//! A revision's attachments as reads render them: inline (`attachments=true`), with their
//! encoding info, or as the parts of a `multipart/related` document.

use crate::{Error, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};
use settee_db::Database;
use settee_docs::atts::{content_type_of, parse_digest, StoredAtts};

pub use settee_wire::AttOpts;

/// What [`AttOpts`] (parsed by `settee_wire`) make of a revision's stored attachments.
pub trait AttRender {
    /// The `_attachments` to render instead of the stored stubs (`None`: the stubs).
    /// Attachments with a `revpos` up to `since_pos` (of `atts_since`, in the revision's
    /// history: [`AttOpts::since_pos`]) stay stubs.
    fn render(&self, db: &Database, stored: &[u8], since_pos: u64) -> Result<Option<Vec<u8>>>;
    /// `_attachments` for a `multipart/related` response: attachments sent as parts are
    /// marked `follows` (content decompressed, so no encoding), older ones stay stubs.
    /// Returns the member's JSON and the parts to send, in order.
    fn multipart_stubs(&self, stored: &[u8], since_pos: u64) -> Option<(Vec<u8>, Vec<Part>)>;
}

impl AttRender for AttOpts {
    fn render(&self, db: &Database, stored: &[u8], since_pos: u64) -> Result<Option<Vec<u8>>> {
        if !self.inline && !self.encoding_info {
            return Ok(None);
        }
        let atts = StoredAtts::of(stored);
        if atts.stubs.is_empty() {
            return Ok(None);
        }
        if self.inline {
            return inline(db, &atts, since_pos, self.encoding_info).map(Some);
        }
        let mut stubs = atts.stubs;
        for (name, enc) in &atts.encodings {
            if let (Some(Value::Object(stub)), Value::Object(enc)) = (stubs.get_mut(name), enc) {
                stub.extend(enc.clone());
            }
        }
        Ok(Some(serde_json::to_vec(&stubs).expect("json")))
    }

    fn multipart_stubs(&self, stored: &[u8], since_pos: u64) -> Option<(Vec<u8>, Vec<Part>)> {
        let atts = StoredAtts::of(stored);
        if !self.inline || atts.stubs.is_empty() {
            return None;
        }
        let mut out = Map::new();
        let mut parts = Vec::new();
        for (name, stub) in &atts.stubs {
            let revpos = stub.get("revpos").and_then(Value::as_u64).unwrap_or(0);
            let digest = parse_digest(stub.get("digest"))?;
            let mut entry = stub.clone();
            let Value::Object(m) = &mut entry else {
                return None;
            };
            if revpos > since_pos {
                m.remove("stub");
                m.insert("follows".into(), Value::Bool(true));
                let encoded_length = atts
                    .encodings
                    .get(name)
                    .and_then(|e| e.get("encoded_length"));
                parts.push(Part {
                    name: name.clone(),
                    content_type: content_type_of(stub.get("content_type")).to_string(),
                    length: match encoded_length {
                        Some(n) => n.as_u64().unwrap_or(0),
                        None => stub.get("length").and_then(Value::as_u64).unwrap_or(0),
                    },
                    digest,
                    gzip: atts.gzip(name),
                    content: None,
                });
            }
            // CouchDB sends multipart documents with their encoding info, attachments as
            // stored (`att_encoding_info` is implied).
            if let Some(Value::Object(enc)) = atts.encodings.get(name) {
                m.extend(enc.clone());
            }
            out.insert(name.clone(), entry);
        }
        Some((serde_json::to_vec(&out).expect("json"), parts))
    }
}

/// `_attachments` with the content inline (for attachments with `revpos > since_pos`), as
/// CouchDB renders it: `content_type`, `revpos`, `digest`, `data`, then with
/// `encoding_info` the stored `encoding` and `encoded_length`; older ones stay stubs.
fn inline(
    db: &Database,
    atts: &StoredAtts,
    since_pos: u64,
    encoding_info: bool,
) -> Result<Vec<u8>> {
    let mut out = Map::new();
    for (name, stub) in &atts.stubs {
        if stub.get("revpos").and_then(Value::as_u64).unwrap_or(0) <= since_pos {
            // A stub, with its encoding info when asked, as stubs always show it.
            let mut stub = stub.clone();
            if let (true, Some(Value::Object(enc)), Value::Object(m)) =
                (encoding_info, atts.encodings.get(name), &mut stub)
            {
                m.extend(enc.clone());
            }
            out.insert(name.clone(), stub);
            continue;
        }
        let digest = parse_digest(stub.get("digest"))
            .ok_or_else(|| Error::Db(settee_db::Error::Internal("attachment stub".into())))?;
        let mut content = read_all(db, &digest)?;
        if atts.gzip(name) {
            content = gunzip(&content)?;
        }
        let mut entry = json!({
            "content_type": stub["content_type"],
            "revpos": stub["revpos"],
            "digest": stub["digest"],
            "data": STANDARD.encode(content),
        });
        if let (true, Some(Value::Object(enc)), Value::Object(m)) =
            (encoding_info, atts.encodings.get(name), &mut entry)
        {
            m.extend(enc.clone());
        }
        out.insert(name.clone(), entry);
    }
    Ok(serde_json::to_vec(&out).expect("json"))
}

fn read_all(db: &Database, digest: &[u8; 16]) -> Result<Vec<u8>> {
    let chunks = db
        .attachment_chunks(digest, 0..u64::MAX)?
        .ok_or_else(|| Error::Db(settee_db::Error::Internal("attachment content".into())))?;
    let mut all = Vec::new();
    for c in chunks {
        all.extend_from_slice(&c?);
    }
    Ok(all)
}

fn gunzip(data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .map_err(io_error)?;
    Ok(out)
}

pub(crate) fn io_error(e: std::io::Error) -> Error {
    Error::Db(settee_db::Error::Internal(format!(
        "attachment content: {e}"
    )))
}

/// One attachment sent as a part of a `multipart/related` response, as stored (gzip
/// content stays gzip, with `Content-Encoding: gzip`).
#[derive(Clone, Debug)]
pub struct Part {
    pub name: String,
    pub content_type: String,
    /// The stored length (the encoded length of gzip content).
    pub length: u64,
    pub digest: [u8; 16],
    pub gzip: bool,
    /// The content as stored, when it was read from elsewhere (a clustered database's
    /// copy) rather than from the database that renders it.
    pub content: Option<bytes::Bytes>,
}

/// The stored content of attachment `name` of a revision (`stored`: its stored bytes),
/// in chunks: gzip-encoded content as stored.
pub fn stored_content(db: &Database, stored: &[u8], name: &str) -> Result<settee_db::AttChunks> {
    let atts = StoredAtts::of(stored);
    let stub = atts
        .stubs
        .get(name)
        .ok_or_else(crate::att_write::missing_attachment)?;
    let digest =
        parse_digest(stub.get("digest")).ok_or_else(|| Error::internal("attachment stub"))?;
    db.attachment_chunks(&digest, 0..u64::MAX)?
        .ok_or_else(|| Error::internal("attachment content"))
}
