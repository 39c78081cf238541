//! Attachment reads (`GET /{db}/{docid}/{attname}`): which content a revision's
//! attachment names, and that content as stored or decompressed, whole or a byte range.
//! Rendering (ranges asked for, `ETag`, encodings accepted) is the caller's.
//!
//! Threading: both calls block (RocksDB reads).

use crate::{Error, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;
use settee_core::Rev;
use settee_db::Database;
use settee_docs::atts::{content_type_of, parse_digest, StoredAtts};
use std::ops::Range;

/// One attachment of one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttInfo {
    pub digest: [u8; 16],
    pub content_type: String,
    /// Its `length`: the identity length, or the encoded one for content uploaded
    /// gzip-encoded (CouchDB knows no other).
    pub length: u64,
    /// Stored gzip-compressed.
    pub gzip: bool,
    /// The length of what is stored (`length` unless compressed).
    pub stored_length: u64,
    /// The content itself (identity-encoded) when it was fetched from a shard copy held by
    /// another member (a clustered database's); `None`: in this node's store, by `digest`.
    pub content: Option<bytes::Bytes>,
}

impl AttInfo {
    /// Its `ETag`: the base64 of its digest, quoted.
    pub fn etag(&self) -> String {
        format!("\"{}\"", STANDARD.encode(self.digest))
    }

    /// Content uploaded gzip-encoded has no known identity length (its `length` is the
    /// encoded one; CouchDB tells the two apart by their being equal).
    pub fn identity_length_unknown(&self) -> bool {
        self.gzip && self.length == self.stored_length
    }
}

/// Which bytes of an attachment to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Bytes of what is stored (gzip content stays compressed).
    Stored(Range<u64>),
    /// `count` bytes from `skip` of the content decompressed.
    Decoded { skip: u64, count: u64 },
}

/// Attachment `name` of revision `rev` (the winner without one) of document `id`.
pub fn open(db: &Database, id: &str, name: &str, rev: Option<&Rev>) -> Result<AttInfo> {
    let doc = db.open_doc(id, rev)?;
    let mut atts = StoredAtts::of(&doc.body);
    let gzip = atts.gzip(name);
    let stub = atts
        .remove(name)
        .ok_or_else(crate::att_write::missing_attachment)?;
    let digest =
        parse_digest(stub.get("digest")).ok_or_else(|| Error::internal("attachment stub"))?;
    let length = stub.get("length").and_then(Value::as_u64).unwrap_or(0);
    let stored_length = if gzip {
        db.attachment_length(&digest)?.unwrap_or(0)
    } else {
        length
    };
    Ok(AttInfo {
        digest,
        content_type: content_type_of(stub.get("content_type")).to_string(),
        length,
        gzip,
        stored_length,
        content: None,
    })
}

/// Sends `piece` of `att`'s content to `out` (until it returns false).
pub fn content(
    db: &Database,
    att: &AttInfo,
    piece: Piece,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<()> {
    let range = match &piece {
        Piece::Stored(r) => r.clone(),
        Piece::Decoded { .. } => 0..att.stored_length,
    };
    let chunks = db
        .attachment_chunks(&att.digest, range)?
        .ok_or_else(|| Error::internal("attachment content"))?;
    match piece {
        Piece::Stored(_) => {
            for c in chunks {
                if !out(&c?) {
                    break;
                }
            }
            Ok(())
        }
        Piece::Decoded { skip, count } => send_decoded(chunks, skip, count, out),
    }
}

/// Decompresses stored gzip chunks as they are read and sends `count` bytes from `skip`.
fn send_decoded(
    chunks: settee_db::AttChunks,
    mut skip: u64,
    mut count: u64,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<()> {
    use std::io::Read;
    let reader = ChunkReader {
        chunks,
        buf: Vec::new(),
        at: 0,
    };
    let mut gz = flate2::read::GzDecoder::new(reader);
    let mut buf = vec![0u8; 64 << 10];
    while count > 0 {
        let n = gz.read(&mut buf).map_err(crate::atts::io_error)?;
        if n == 0 {
            break;
        }
        let mut piece = &buf[..n];
        let drop = skip.min(piece.len() as u64) as usize;
        piece = &piece[drop..];
        skip -= drop as u64;
        let take = count.min(piece.len() as u64) as usize;
        if take > 0 && !out(&piece[..take]) {
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
