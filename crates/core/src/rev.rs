//! Revision ids. A revision is `pos-id`; ids of 32 hex digits are kept as 16 raw bytes,
//! any other id (allowed from replication peers) as its bytes. Ordering of ids is the
//! byte order of that representation, which is what CouchDB's winner rule compares.

use crate::Error;
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

    /// Parses the part after `N-`. 32 characters must be hex (as CouchDB requires).
    pub fn parse(s: &str) -> Option<Self> {
        if s.is_empty() {
            return None;
        }
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
            f.write_str(&hex::encode(&self.0))
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
        if pos == 0 {
            return Err(invalid());
        }
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

/// Deterministic revision id: the same parent, deletion flag and body always give the same
/// id, so two nodes that make the same edit agree (as CouchDB's do).
pub fn new_rev_id(parent: Option<&Rev>, deleted: bool, body: &[u8]) -> RevId {
    let mut h = Md5::new();
    h.update([u8::from(deleted)]);
    if let Some(p) = parent {
        h.update(p.pos.to_be_bytes());
        h.update((p.id.as_bytes().len() as u32).to_be_bytes());
        h.update(p.id.as_bytes());
    }
    h.update(body);
    RevId(h.finalize().as_slice().into())
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
        for bad in [
            "",
            "1",
            "-abc",
            "x-abc",
            "0-abc",
            "1-",
            "1-zz23456789abcdef0123456789abcdef",
        ] {
            assert!(Rev::parse(bad).is_err(), "{bad}");
        }
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
