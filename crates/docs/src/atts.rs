//! Attachments as a write stores them: content streamed into the database's attachment
//! store (gzip-compressed when its type is compressible, as CouchDB does), and a written
//! document's `_attachments` resolved into the stubs stored after its body (inline base64
//! data stored, `stub: true` entries carried over from the revision being replaced,
//! `follows` entries taken from parts stored beforehand).

use crate::{Error, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};
use settee_core::{join_stored, split_stored, ParsedDoc};
use settee_db::Database;

/// `[attachments] compressible_types` and `compression_level`: content of these types is
/// stored gzip-compressed, as CouchDB does.
pub struct Compression {
    types: Vec<String>,
    level: u32,
}

impl Compression {
    /// CouchDB's defaults for the two settings.
    pub const DEFAULT_TYPES: &'static str =
        "text/*, application/javascript, application/json, application/xml";
    pub const DEFAULT_LEVEL: u64 = 8;

    /// From the settings' values: a comma-separated list of types (`text/*` matches a
    /// prefix) and a zlib level (0: store nothing compressed; above 9 is 9).
    pub fn new(types: &str, level: u64) -> Compression {
        Compression {
            types: types
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect(),
            level: level.min(9) as u32,
        }
    }

    /// The gzip level for content of this type, if it is stored compressed.
    pub fn level_for(&self, content_type: &str) -> Option<u32> {
        let ct = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let matches = self.types.iter().any(|t| match t.strip_suffix('*') {
            Some(prefix) => ct.starts_with(prefix),
            None => *t == ct,
        });
        (matches && self.level > 0).then_some(self.level)
    }
}

/// Writes content to the attachment store, gzip-compressing it on the way when asked;
/// enforces the size limit on the content's own (identity) length.
pub struct ContentWriter {
    sink: Sink,
    identity: u64,
    limit: u64,
}

enum Sink {
    Plain(settee_db::AttWriter),
    /// A zlib stream with a gzip wrapper (see [`gzip_stream`]).
    Gzip(flate2::write::ZlibEncoder<settee_db::AttWriter>),
}

/// The compressor CouchDB stores attachments with: zlib (flate2's system-zlib backend)
/// set up as `couch_stream` does, `deflateInit2(level, Z_DEFLATED, 16 + 15, 8,
/// Z_DEFAULT_STRATEGY)`, so that zlib writes the gzip header itself (mtime 0, its OS
/// byte) and the stored bytes, and therefore the `digest` (md5 of the stored bytes), are
/// the ones CouchDB reports for the same upload.
pub(crate) fn gzip_stream<W: std::io::Write>(w: W, level: u32) -> flate2::write::ZlibEncoder<W> {
    let compress = flate2::Compress::new_gzip(flate2::Compression::new(level), 15);
    flate2::write::ZlibEncoder::new_with_compress(w, compress)
}

/// Contents stored from the parts of a `multipart/related` upload, by attachment name.
#[derive(Default)]
pub struct Followed {
    parts: std::collections::HashMap<String, Written>,
    /// The contents are not new (a coordinator copying a document, `COPY`): their
    /// attachments keep the `revpos` the document gives, as CouchDB keeps it for
    /// contents it already holds. Otherwise a new revision's `revpos`.
    pub keep_revpos: bool,
}

impl Followed {
    pub fn new() -> Followed {
        Followed::default()
    }

    pub fn insert(&mut self, name: String, content: Written) {
        self.parts.insert(name, content);
    }

    fn remove(&mut self, name: &str) -> Option<Written> {
        self.parts.remove(name)
    }
}

/// What [`ContentWriter::finish`] stored.
pub struct Written {
    stored: settee_db::AttData,
    identity: u64,
    gzip: bool,
}

impl Written {
    /// Content sent already gzip-encoded and stored as sent: it is marked so, with its
    /// identity length when the sender gave one (else the encoded length stands, as
    /// CouchDB does not know the identity length either).
    pub fn sent_gzipped(&mut self, identity: Option<u64>) {
        self.gzip = true;
        if let Some(n) = identity {
            self.identity = n;
        }
    }
}

impl ContentWriter {
    pub fn new(db: &Database, limit: u64, gzip_level: Option<u32>) -> ContentWriter {
        let w = db.attachment_writer(u64::MAX);
        let sink = match gzip_level {
            Some(level) => Sink::Gzip(gzip_stream(w, level)),
            None => Sink::Plain(w),
        };
        ContentWriter {
            sink,
            identity: 0,
            limit,
        }
    }

    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        use std::io::Write;
        self.identity += data.len() as u64;
        if self.identity > self.limit {
            self.discard();
            return Err(Error::Db(settee_db::Error::AttachmentTooLarge));
        }
        match &mut self.sink {
            Sink::Plain(w) => w.write(data)?,
            Sink::Gzip(g) => g.write_all(data).map_err(io_error)?,
        }
        Ok(())
    }

    pub fn finish(self) -> Result<Written> {
        let (w, gzip) = match self.sink {
            Sink::Plain(w) => (w, false),
            Sink::Gzip(g) => (g.finish().map_err(io_error)?, true),
        };
        Ok(Written {
            stored: w.finish()?,
            identity: self.identity,
            gzip,
        })
    }

    /// Drops what was written so far (an upload that failed half-way).
    pub fn discard(&mut self) {
        let w = match &mut self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(g) => g.get_mut(),
        };
        if let Err(e) = w.discard() {
            tracing::warn!(error = %e, "discarding an attachment upload");
        }
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::Db(settee_db::Error::Internal(format!(
        "attachment content: {e}"
    )))
}

/// Stores the content of an attachment whose entry (`att`, in the document's
/// `_attachments`) is marked `follows`, as it arrives: compressed as its type asks, or,
/// when the entry says `"encoding": "gzip"`, stored as sent (the entry's `length` is then
/// the content's own). Used for `multipart/related` parts and replicated content.
pub struct FollowsWriter {
    w: ContentWriter,
    /// For content sent gzip-encoded: its identity length.
    encoded: Option<u64>,
}

impl FollowsWriter {
    pub fn new(
        db: &Database,
        att: &Map<String, Value>,
        compression: &Compression,
        limit: u64,
    ) -> FollowsWriter {
        let encoded = (att.get("encoding").and_then(Value::as_str) == Some("gzip"))
            .then(|| att.get("length").and_then(Value::as_u64).unwrap_or(0));
        let level = match encoded {
            Some(_) => None,
            None => compression.level_for(content_type_of(att.get("content_type"))),
        };
        FollowsWriter {
            w: ContentWriter::new(db, limit, level),
            encoded,
        }
    }

    /// Appends content; `413 attachment_too_large` past the limit (what was stored is
    /// dropped).
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        self.w.write(data)
    }

    pub fn finish(self) -> Result<Written> {
        let mut written = self.w.finish()?;
        if let Some(identity) = self.encoded {
            written.sent_gzipped(Some(identity));
        }
        Ok(written)
    }

    /// Abandons the content, removing what was stored.
    pub fn discard(&mut self) {
        self.w.discard();
    }
}

/// A revision's attachments as stored: the stubs as rendered, and the encoding details of
/// those stored compressed.
#[derive(Default)]
pub struct StoredAtts {
    pub stubs: Map<String, Value>,
    pub encodings: Map<String, Value>,
}

impl StoredAtts {
    pub fn of(stored: &[u8]) -> StoredAtts {
        let Some(section) = split_stored(stored).1 else {
            return StoredAtts::default();
        };
        let (stubs, encodings) = settee_core::split_encodings(section);
        let parse = |b: &[u8]| serde_json::from_slice(b).unwrap_or_default();
        StoredAtts {
            stubs: parse(stubs),
            encodings: encodings.map(parse).unwrap_or_default(),
        }
    }

    pub fn insert(&mut self, name: String, content_type: &str, revpos: u64, w: &Written) {
        self.stubs.insert(
            name.clone(),
            json!({
                "content_type": content_type,
                "revpos": revpos,
                "digest": digest_text(&w.stored.digest),
                "length": w.identity,
                "stub": true,
            }),
        );
        if w.gzip {
            self.encodings.insert(
                name,
                json!({"encoding": "gzip", "encoded_length": w.stored.length}),
            );
        } else {
            self.encodings.remove(&name);
        }
    }

    /// Adds or replaces an attachment written through the standalone or form APIs: it
    /// comes first, before the revision's other attachments, as CouchDB lists them
    /// (`NewAtts ++ OldAtts`).
    pub fn put_first(&mut self, name: String, content_type: &str, revpos: u64, w: &Written) {
        let rest = std::mem::take(&mut self.stubs);
        self.insert(name.clone(), content_type, revpos, w);
        self.stubs
            .extend(rest.into_iter().filter(|(n, _)| *n != name));
    }

    pub fn remove(&mut self, name: &str) -> Option<Value> {
        self.encodings.shift_remove(name);
        self.stubs.shift_remove(name)
    }

    pub fn gzip(&self, name: &str) -> bool {
        self.encodings
            .get(name)
            .and_then(|e| e.get("encoding"))
            .and_then(Value::as_str)
            == Some("gzip")
    }

    /// The attachment section to store after a body (`None` when there are none).
    pub fn section(&self) -> Option<Vec<u8>> {
        if self.stubs.is_empty() {
            return None;
        }
        let stubs = serde_json::to_vec(&self.stubs).expect("json");
        if self.encodings.is_empty() {
            return Some(stubs);
        }
        let enc = serde_json::to_vec(&self.encodings).expect("json");
        Some(join_stored(&stubs, Some(&enc)))
    }
}

/// An attachment entry's `content_type` (CouchDB's default when absent).
pub fn content_type_of(content_type: Option<&Value>) -> &str {
    content_type
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream")
}

fn bad(reason: String) -> Error {
    Error::BadRequest(reason)
}

pub fn digest_text(d: &[u8; 16]) -> String {
    format!("md5-{}", STANDARD.encode(d))
}

pub fn parse_digest(v: Option<&Value>) -> Option<[u8; 16]> {
    let b64 = v?.as_str()?.strip_prefix("md5-")?;
    STANDARD.decode(b64).ok()?.try_into().ok()
}

/// Where a document's new attachments go: the database, `[couchdb] max_attachment_size`,
/// the compression settings, and contents already stored from multipart parts.
pub struct Target<'a> {
    pub db: &'a Database,
    pub limit: u64,
    pub compression: &'a Compression,
    pub followed: &'a mut Followed,
}

/// Replaces `doc.atts` (as the client sent them) by stored stubs appended to the body.
/// `old` are the attachments of the revision the write replaces.
pub fn resolve(
    to: &mut Target<'_>,
    id: &str,
    doc: &mut ParsedDoc,
    old: Option<&StoredAtts>,
    new_edits: bool,
) -> Result<()> {
    let Target {
        db,
        limit,
        compression,
        followed,
    } = to;
    let (db, limit) = (*db, *limit);
    let Some(atts) = doc.atts.take() else {
        return Ok(());
    };
    // An interactive edit's attachments written now belong to the new revision.
    let new_pos = doc.revs.as_ref().map_or(1, |(pos, _)| pos + 1);
    let mut out = StoredAtts::default();
    for (name, att) in atts {
        if name.starts_with('_') {
            return Err(bad(format!(
                "Attachment name '{name}' starts with prohibited character '_'"
            )));
        }
        let Value::Object(att) = att else {
            return Err(bad(format!("Invalid attachment data for {name}")));
        };
        if att.get("stub") == Some(&Value::Bool(true)) {
            // A stub needs nothing but `stub: true`; one naming a later `revpos` than the
            // stored attachment's does not describe it (CouchDB: missing_stub).
            let given_pos = att.get("revpos").and_then(Value::as_u64);
            let prev = old
                .and_then(|o| o.stubs.get(&name))
                .filter(|p| {
                    let stored = p.get("revpos").and_then(Value::as_u64).unwrap_or(0);
                    given_pos.is_none_or(|g| g <= stored)
                })
                .cloned()
                .ok_or_else(|| {
                    Error::MissingStub(format!("Invalid attachment stub in {id} for {name}"))
                })?;
            if let Some(enc) = old.and_then(|o| o.encodings.get(&name)) {
                out.encodings.insert(name.clone(), enc.clone());
            }
            out.stubs.insert(name, prev);
        } else if let Some(data) = att.get("data") {
            let bytes = data
                .as_str()
                .and_then(|s| STANDARD.decode(s).ok())
                .ok_or_else(|| bad(format!("Invalid attachment data for {name}")))?;
            let content_type = content_type_of(att.get("content_type"));
            let mut w = ContentWriter::new(db, limit, compression.level_for(content_type));
            w.write(&bytes)?;
            let written = w.finish()?;
            let revpos = match att.get("revpos").and_then(Value::as_u64) {
                _ if new_edits => new_pos,
                // A replicated revision's attachment is stored as sent: without a
                // `revpos`, 0 (CouchDB's `couch_att:inline_from_json`).
                given => given.unwrap_or(0),
            };
            out.insert(name, content_type, revpos, &written);
        } else if att.get("follows") == Some(&Value::Bool(true)) {
            let written = followed
                .remove(&name)
                .ok_or_else(|| bad(format!("Missing attachment data for {name}")))?;
            let content_type = content_type_of(att.get("content_type"));
            let revpos = match att.get("revpos").and_then(Value::as_u64) {
                Some(p) if !new_edits || followed.keep_revpos => p,
                // As inline data: 0 when a replicated revision names none
                // (`couch_att:follow_from_json`).
                None if !new_edits => 0,
                _ => new_pos,
            };
            out.insert(name, content_type, revpos, &written);
        } else {
            return Err(bad(format!("Invalid attachment data for {name}")));
        }
    }
    doc.body = join_stored(&doc.body, out.section().as_deref());
    Ok(())
}

/// The stubs stored after a revision's body, as readers see them.
pub fn stored_stubs(stored: &[u8]) -> Option<Map<String, Value>> {
    let atts = StoredAtts::of(stored);
    (!atts.stubs.is_empty()).then_some(atts.stubs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip_digest(chunks: &[&[u8]], level: u32) -> (String, usize) {
        use std::io::Write;
        let mut w = gzip_stream(Vec::new(), level);
        for c in chunks {
            w.write_all(c).unwrap();
        }
        let out = w.finish().unwrap();
        let d: [u8; 16] =
            md5::Digest::finalize(<md5::Md5 as md5::Digest>::new_with_prefix(&out)).into();
        (digest_text(&d), out.len())
    }
    /// Known answers computed independently with Python's zlib (system zlib 1.2.13), set up
    /// as CouchDB's `couch_stream` sets up Erlang's: `zlib.compressobj(level,
    /// zlib.DEFLATED, 31, 8, zlib.Z_DEFAULT_STRATEGY)`, md5 of `compress(data) + flush()`.
    #[test]
    fn gzip_matches_couchdb_zlib() {
        let lorem: &[u8] = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
        assert_eq!(
            gzip_digest(&[lorem], 8),
            ("md5-YN87iUCmrmEkr1fotlZQ+w==".into(), 72)
        );
        let eleven = lorem.repeat(11);
        assert_eq!(
            gzip_digest(&[&eleven], 8),
            ("md5-oHZnUr3YBDM9jwJKVM6t2g==".into(), 82)
        );
        assert_eq!(
            gzip_digest(&[&eleven], 1),
            ("md5-ar0J5b7Bxf8UhICkF3GLXQ==".into(), 85)
        );
        assert_eq!(
            gzip_digest(&[&eleven], 9),
            ("md5-cdQcTvccNOWD/hsooKPpRg==".into(), 82)
        );
        assert_eq!(
            gzip_digest(&[b""], 8),
            ("md5-cCkGbCesb17xjWYNV0GXmg==".into(), 20)
        );
        // Large content fed in uneven pieces (as uploads arrive) compresses the same.
        let big: Vec<u8> = (0..20000)
            .flat_map(|i| format!("line {i} of a compressible text attachment\n").into_bytes())
            .collect();
        let pieces: Vec<&[u8]> = big.chunks(4093).collect();
        assert_eq!(
            gzip_digest(&pieces, 8),
            ("md5-34hLNNez290UngqWgG9w3w==".into(), 50758)
        );
    }
}
