//! Revision ids. A revision is `pos-id`; ids of 32 hex digits are kept as 16 raw bytes,
//! any other id (allowed from replication peers) as its bytes. Ordering of ids is the
//! byte order of that representation, which is what CouchDB's winner rule compares.

use crate::{etf, Error};
use md5::{Digest, Md5};
use std::fmt;

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RevId(Box<[u8]>);

impl RevId {
    pub fn from_bytes(bytes: &[u8]) -> Self {
        RevId(bytes.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Parses the part after `N-`. 32 characters must be hex (as CouchDB requires); any
    /// other text, even none (`1-`), is an id as CouchDB's `parse_rev` takes it.
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() == 32 {
            let mut raw = [0u8; 16];
            hex::decode_to_slice(s.to_ascii_lowercase(), &mut raw).ok()?;
            return Some(RevId(raw.into()));
        }
        Some(RevId(s.as_bytes().into()))
    }
}

impl fmt::Display for RevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() == 16 {
            // Into a buffer: `hex::encode` builds its string a char at a time, which was a
            // visible part of handing documents to query servers.
            let mut text = [0u8; 32];
            hex::encode_to_slice(&self.0, &mut text).expect("32 bytes hold 16 in hex");
            f.write_str(std::str::from_utf8(&text).expect("hex is ASCII"))
        } else {
            f.write_str(&String::from_utf8_lossy(&self.0))
        }
    }
}

impl fmt::Debug for RevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rev {
    pub pos: u64,
    pub id: RevId,
}

impl Rev {
    pub fn new(pos: u64, id: RevId) -> Self {
        Rev { pos, id }
    }

    pub fn parse(s: &str) -> Result<Self, Error> {
        let invalid = || Error::bad_request("Invalid rev format");
        let (pos, id) = s.split_once('-').ok_or_else(invalid)?;
        if pos.is_empty() || !pos.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let pos: u64 = pos.parse().map_err(|_| invalid())?;
        Ok(Rev {
            pos,
            id: RevId::parse(id).ok_or_else(invalid)?,
        })
    }
}

impl fmt::Display for Rev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.pos, self.id)
    }
}

impl fmt::Debug for Rev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// CouchDB's revision id for an edit (`couch_db:new_revid`): the MD5 of the Erlang term
/// `[Deleted, ParentPos, ParentId, Body, Atts]` (a new document's parent is `0, 0`; `Atts`
/// is `{Name, Type, Md5}` per attachment, in reverse order). Computed from the revision's
/// stored bytes, so the same edit gets the same id here and in CouchDB.
pub fn new_rev_id(parent: Option<&Rev>, deleted: bool, stored: &[u8]) -> RevId {
    new_rev_id_with(parent, deleted, stored, None)
}

/// The Erlang term of a revision's body (its stored bytes' JSON part), which
/// [`new_rev_id_with`] hashes: computed ahead of the database writer, whose thread every
/// edit of a database passes through.
pub fn body_term(stored: &[u8]) -> Vec<u8> {
    let body = crate::doc::split_stored(stored).0;
    let mut t = Vec::with_capacity(body.len() + body.len() / 4);
    if etf::json_text(body, &mut t).is_none() {
        // Stored bodies are JSON objects; anything else is still hashed deterministically.
        t.clear();
        etf::binary(body, &mut t);
    }
    t
}

/// [`new_rev_id`] with the body's term already computed by [`body_term`] (`None`: compute
/// it here).
pub fn new_rev_id_with(
    parent: Option<&Rev>,
    deleted: bool,
    stored: &[u8],
    term: Option<&[u8]>,
) -> RevId {
    let atts = crate::doc::split_stored(stored).1;
    let mut h = Md5::new();
    let mut t = vec![etf::VERSION];
    etf::list_header(5, &mut t);
    etf::atom(if deleted { "true" } else { "false" }, &mut t);
    match parent {
        None => {
            etf::integer(0, &mut t);
            etf::integer(0, &mut t);
        }
        Some(p) => {
            etf::integer(p.pos as i64, &mut t);
            etf::binary(p.id.as_bytes(), &mut t);
        }
    }
    h.update(&t);
    match term {
        Some(term) => h.update(term),
        None => h.update(body_term(stored)),
    }
    t.clear();
    let digested = atts.map(attachment_digests).unwrap_or_default();
    if !digested.is_empty() {
        etf::list_header(digested.len(), &mut t);
        for (name, kind, md5) in digested.iter().rev() {
            etf::small_tuple(3, &mut t);
            etf::binary(name.as_bytes(), &mut t);
            etf::binary(kind.as_bytes(), &mut t);
            etf::binary(md5, &mut t);
        }
    }
    etf::nil(&mut t);
    etf::nil(&mut t);
    h.update(&t);
    RevId(h.finalize().as_slice().into())
}

/// `(name, content_type, md5)` of each attachment stub with an `md5-` digest, in order.
fn attachment_digests(section: &[u8]) -> Vec<(String, String, Vec<u8>)> {
    use base64::Engine;
    let stubs: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(crate::doc::split_encodings(section).0).unwrap_or_default();
    stubs
        .into_iter()
        .filter_map(|(name, stub)| {
            let digest = stub.get("digest")?.as_str()?.strip_prefix("md5-")?;
            let md5 = base64::engine::general_purpose::STANDARD
                .decode(digest)
                .ok()?;
            let kind = stub
                .get("content_type")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string();
            Some((name, kind, md5))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display() {
        let r = Rev::parse("3-0123456789abcdef0123456789ABCDEF").unwrap();
        assert_eq!(r.pos, 3);
        assert_eq!(r.id.as_bytes().len(), 16);
        assert_eq!(r.to_string(), "3-0123456789abcdef0123456789abcdef");
        let odd = Rev::parse("1-abc").unwrap();
        assert_eq!(odd.to_string(), "1-abc");
        // As CouchDB's parse_rev: no id and position 0 parse (and then match nothing).
        assert_eq!(Rev::parse("1-").unwrap().to_string(), "1-");
        assert_eq!(Rev::parse("0-abc").unwrap().pos, 0);
        for bad in [
            "",
            "1",
            "-abc",
            "x-abc",
            "1-zz23456789abcdef0123456789abcdef",
        ] {
            assert!(Rev::parse(bad).is_err(), "{bad}");
        }
    }

    /// Revision ids CouchDB gave for these edits (its test suite and issue threads).
    #[test]
    fn rev_ids_match_couchdb() {
        let new = |body: &str| new_rev_id(None, false, body.as_bytes()).to_string();
        assert_eq!(new(r#"{}"#), "967a00dff5e02add41819138abb3284d");
        assert_eq!(new(r#"{"a":1,"b":1}"#), "fb8a93eb436b7e799a7bbc578a08e9a5");
        assert_eq!(
            new(r#"{"joan":"is great"}"#),
            "9b0890fa11b66dc9f0cc4917e11553d1"
        );
        let r0 = Rev::parse("1-47f3268e7546965196b57572099f4372").unwrap();
        assert_eq!(new(r#"{"val":"r0"}"#), r0.id.to_string());
        let r1 = new_rev_id(Some(&r0), false, br#"{"val":"r1"}"#);
        assert_eq!(r1.to_string(), "1d8171ab3a91475cfece749291e6f897");
        let r2 = new_rev_id(Some(&Rev::new(2, r1)), false, br#"{"val":"r2"}"#);
        assert_eq!(r2.to_string(), "3fb0a342d2ce092fdcc77856dbe8a2ef");
    }

    /// Attachments enter as `{Name, Type, MD5}` tuples, last first; a precomputed body
    /// term gives the same id.
    #[test]
    fn attachments_and_precomputed_terms() {
        let stubs = r#"{"a.txt":{"content_type":"text/plain","revpos":1,"digest":"md5-+XxdKZQb+xsv2rCHSQargg==","length":3,"stub":true},"b.bin":{"content_type":"application/octet-stream","revpos":1,"digest":"md5-uKn3Fdu2T9XFbneDxoIKYQ==","length":3,"stub":true}}"#;
        let stored = crate::join_stored(br#"{"a":1}"#, Some(stubs.as_bytes()));
        let id = new_rev_id(None, false, &stored);
        assert_eq!(id.to_string(), "07d94cc6139de3035f6ed55299d0115e");
        let term = body_term(&stored);
        assert_eq!(new_rev_id_with(None, false, &stored, Some(&term)), id);
    }

    #[test]
    fn rev_ids_are_deterministic() {
        let p = Rev::parse("1-abc").unwrap();
        assert_eq!(
            new_rev_id(Some(&p), false, b"{}"),
            new_rev_id(Some(&p), false, b"{}")
        );
        assert_ne!(
            new_rev_id(Some(&p), false, b"{}"),
            new_rev_id(Some(&p), true, b"{}")
        );
        assert_ne!(
            new_rev_id(None, false, b"{}"),
            new_rev_id(Some(&p), false, b"{}")
        );
    }
}
