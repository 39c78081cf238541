//! Attachment content, stored apart from document bodies in the `atts` column family:
//! written and read in 64 KiB chunks (a 1 GB attachment is never in memory whole) and
//! addressed by the MD5 of its stored bytes, once per database.
//!
//! Keys (after the database's 8-byte prefix):
//! - `'C' | att id (u64 BE) | chunk number (u32 BE)` → up to [`CHUNK`] bytes;
//! - `'D' | md5 (16 bytes)` → `att id (u64 BE) | length (u64 BE)`.
//!
//! A writer streams chunks under a fresh random id while hashing; `finish` then either
//! records the id under the digest or, when that content is already stored, drops its own
//! chunks. Chunks are written through the WAL without an fsync: the document commit that
//! refers to them is fsynced afterwards, and the WAL is replayed in order. An interrupted
//! upload leaves chunks no digest points to; [`Database::reclaim_attachments`] removes
//! them, and content no kept revision refers to, when the database is compacted.

use crate::database::Database;
use crate::{Error, Result};
use md5::{Digest, Md5};
use settee_storage::{key_in_db, Cf, Read, Store};
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

/// Bytes per stored chunk.
pub const CHUNK: usize = 64 << 10;

/// Content younger than this is never reclaimed: its upload may still be running, or the
/// revision that refers to it may not be committed yet. Attachment ids carry their upload's
/// start time in the high 32 bits (unix seconds) for this.
const GRACE_SECS: u64 = 3600;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn new_att_id() -> u64 {
    (now_secs() << 32) | u64::from(rand::random::<u32>())
}

fn is_recent(id: u64, now: u64) -> bool {
    (id >> 32) + GRACE_SECS > now
}

/// What a finished write stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttData {
    /// MD5 of the stored bytes (CouchDB's `digest`, before base64).
    pub digest: [u8; 16],
    pub length: u64,
}

fn chunk_key(db: u64, id: u64, n: u32) -> Vec<u8> {
    let mut suffix = Vec::with_capacity(13);
    suffix.push(b'C');
    suffix.extend_from_slice(&id.to_be_bytes());
    suffix.extend_from_slice(&n.to_be_bytes());
    key_in_db(db, &suffix)
}

fn chunks_of(db: u64, id: u64) -> (Vec<u8>, Vec<u8>) {
    let mut lo = vec![b'C'];
    lo.extend_from_slice(&id.to_be_bytes());
    let mut hi = vec![b'C'];
    hi.extend_from_slice(&(id + 1).to_be_bytes());
    (key_in_db(db, &lo), key_in_db(db, &hi))
}

fn digest_key(db: u64, digest: &[u8; 16]) -> Vec<u8> {
    let mut suffix = vec![b'D'];
    suffix.extend_from_slice(digest);
    key_in_db(db, &suffix)
}

fn decode_record(v: &[u8]) -> Option<(u64, u64)> {
    let id = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    let len = u64::from_be_bytes(v.get(8..16)?.try_into().ok()?);
    Some((id, len))
}

fn corrupt(what: &str) -> Error {
    Error::Storage(settee_storage::Error::Corrupted(format!(
        "attachment {what}"
    )))
}

/// Streams one attachment's bytes into the store.
pub struct AttWriter {
    store: Arc<Store>,
    db: u64,
    id: u64,
    buf: Vec<u8>,
    next_chunk: u32,
    md5: Md5,
    length: u64,
    limit: u64,
}

impl AttWriter {
    /// Appends bytes; fails with `AttachmentTooLarge` past the writer's limit (the chunks
    /// written so far are removed).
    pub fn write(&mut self, mut data: &[u8]) -> Result<()> {
        self.length += data.len() as u64;
        if self.length > self.limit {
            self.discard()?;
            return Err(Error::AttachmentTooLarge);
        }
        self.md5.update(data);
        while !data.is_empty() {
            let take = (CHUNK - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() == CHUNK {
                self.flush_chunk()?;
            }
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> Result<()> {
        let mut b = self.store.batch();
        b.put(
            Cf::Atts,
            &chunk_key(self.db, self.id, self.next_chunk),
            &self.buf,
        );
        self.store.write(b, false)?;
        self.next_chunk += 1;
        self.buf.clear();
        Ok(())
    }

    /// Stores the last chunk and records the content under its digest (or, when the
    /// database already holds the same bytes, drops this copy).
    pub fn finish(mut self) -> Result<AttData> {
        if !self.buf.is_empty() {
            self.flush_chunk()?;
        }
        let digest: [u8; 16] = self.md5.clone().finalize().into();
        let key = digest_key(self.db, &digest);
        let mut b = self.store.batch();
        if self.store.get(Cf::Atts, &key)?.is_some() {
            let (lo, hi) = chunks_of(self.db, self.id);
            b.delete_range(Cf::Atts, &lo, &hi);
        } else {
            let mut record = self.id.to_be_bytes().to_vec();
            record.extend_from_slice(&self.length.to_be_bytes());
            b.put(Cf::Atts, &key, &record);
        }
        self.store.write(b, false)?;
        Ok(AttData {
            digest,
            length: self.length,
        })
    }

    /// Abandons the upload, removing what it wrote.
    pub fn discard(&mut self) -> Result<()> {
        let (lo, hi) = chunks_of(self.db, self.id);
        let mut b = self.store.batch();
        b.delete_range(Cf::Atts, &lo, &hi);
        self.store.write(b, false)?;
        self.buf.clear();
        Ok(())
    }
}

impl std::io::Write for AttWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        AttWriter::write(self, data).map_err(std::io::Error::other)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a byte range of one stored attachment, chunk by chunk.
pub struct AttChunks {
    store: Arc<Store>,
    db: u64,
    id: u64,
    pos: u64,
    end: u64,
}

impl Iterator for AttChunks {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Result<Vec<u8>>> {
        if self.pos >= self.end {
            return None;
        }
        let n = (self.pos / CHUNK as u64) as u32;
        let key = chunk_key(self.db, self.id, n);
        let chunk = match self.store.get_uncached(Cf::Atts, &key) {
            Ok(Some(c)) => c,
            Ok(None) => return Some(Err(corrupt("chunk missing"))),
            Err(e) => return Some(Err(e.into())),
        };
        let start = (self.pos % CHUNK as u64) as usize;
        let stop = ((self.end - u64::from(n) * CHUNK as u64) as usize).min(chunk.len());
        if start >= stop {
            return Some(Err(corrupt("chunk short")));
        }
        self.pos += (stop - start) as u64;
        Some(Ok(chunk[start..stop].to_vec()))
    }
}

impl Database {
    /// A writer for one attachment of at most `limit` bytes.
    pub fn attachment_writer(&self, limit: u64) -> AttWriter {
        AttWriter {
            store: self.store.clone(),
            db: self.id,
            id: new_att_id(),
            buf: Vec::with_capacity(CHUNK),
            next_chunk: 0,
            md5: Md5::new(),
            length: 0,
            limit,
        }
    }

    /// The stored length of the content with this digest, if the database holds it.
    pub fn attachment_length(&self, digest: &[u8; 16]) -> Result<Option<u64>> {
        Ok(self.attachment_record(digest)?.map(|(_, len)| len))
    }

    fn attachment_record(&self, digest: &[u8; 16]) -> Result<Option<(u64, u64)>> {
        match self.store.get(Cf::Atts, &digest_key(self.id, digest))? {
            Some(v) => Ok(Some(decode_record(&v).ok_or_else(|| corrupt("record"))?)),
            None => Ok(None),
        }
    }

    /// The bytes `range` (clamped to the content) of the content with this digest, in
    /// chunks; `None` if the database does not hold it.
    pub fn attachment_chunks(
        &self,
        digest: &[u8; 16],
        range: Range<u64>,
    ) -> Result<Option<AttChunks>> {
        let Some((id, len)) = self.attachment_record(digest)? else {
            return Ok(None);
        };
        Ok(Some(AttChunks {
            store: self.store.clone(),
            db: self.id,
            id,
            pos: range.start.min(len),
            end: range.end.min(len),
        }))
    }

    /// The digests the stored revisions' attachment stubs refer to.
    pub fn live_attachments(&self) -> Result<HashSet<[u8; 16]>> {
        let snap = self.store.snapshot();
        let (lo, hi) = settee_storage::db_range(self.id);
        let mut live = HashSet::new();
        for item in snap.range(Cf::Bodies, &lo, &hi, false) {
            let (_, v) = item?;
            let Some(section) = settee_core::split_stored(&v).1 else {
                continue;
            };
            let stubs = settee_core::split_encodings(section).0;
            let stubs: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(stubs).map_err(|_| corrupt("stubs"))?;
            for stub in stubs.values() {
                let digest = stub
                    .get("digest")
                    .and_then(|d| d.as_str())
                    .and_then(|d| d.strip_prefix("md5-"))
                    .and_then(|b| {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.decode(b).ok()
                    })
                    .and_then(|d| <[u8; 16]>::try_from(d).ok())
                    .ok_or_else(|| corrupt("stub digest"))?;
                live.insert(digest);
            }
        }
        Ok(live)
    }

    /// Removes stored content whose digest is not in `live` and chunks of uploads that never
    /// finished (both only once older than an hour); returns the number of bytes removed.
    pub fn reclaim_attachments(&self, live: &HashSet<[u8; 16]>) -> Result<u64> {
        self.reclaim_attachments_at(live, now_secs())
    }

    /// [`Database::reclaim_attachments`] as if the time were `now` (unix seconds).
    pub fn reclaim_attachments_at(&self, live: &HashSet<[u8; 16]>, now: u64) -> Result<u64> {
        let snap = self.store.snapshot();
        let (lo, hi) = (key_in_db(self.id, b"D"), key_in_db(self.id, b"E"));
        let mut kept_ids = HashSet::new();
        let mut b = self.store.batch();
        for item in snap.range(Cf::Atts, &lo, &hi, false) {
            let (k, v) = item?;
            let digest: [u8; 16] = k[9..].try_into().map_err(|_| corrupt("key"))?;
            let (id, _) = decode_record(&v).ok_or_else(|| corrupt("record"))?;
            if live.contains(&digest) || is_recent(id, now) {
                kept_ids.insert(id);
            } else {
                b.delete(Cf::Atts, &k);
            }
        }
        // Every chunk run whose id no kept record names goes (dropped content and
        // interrupted uploads alike).
        let (lo, hi) = (key_in_db(self.id, b"C"), key_in_db(self.id, b"D"));
        let mut last_id = None;
        let mut freed = 0;
        for item in snap.range(Cf::Atts, &lo, &hi, false) {
            let (k, v) = item?;
            let id = u64::from_be_bytes(k[9..17].try_into().map_err(|_| corrupt("key"))?);
            if kept_ids.contains(&id) || is_recent(id, now) {
                continue;
            }
            freed += v.len() as u64;
            if last_id != Some(id) {
                let (clo, chi) = chunks_of(self.id, id);
                b.delete_range(Cf::Atts, &clo, &chi);
                last_id = Some(id);
            }
        }
        self.store.write(b, true)?;
        Ok(freed)
    }
}
