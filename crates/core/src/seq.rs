//! Update sequences. CouchDB 3 presents sequences as opaque strings `"<n>-<opaque>"`;
//! clients hand them back verbatim. Settee's opaque part encodes `n` again, so any
//! previously returned value parses, as do bare integers and `now`.

use crate::Error;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

pub fn format_seq(n: u64) -> String {
    let mut raw = b"settee\0\0".to_vec();
    raw.extend_from_slice(&n.to_be_bytes());
    format!("{n}-g1AAAA{}", URL_SAFE_NO_PAD.encode(raw))
}

/// A `since` value as a client may send it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqArg {
    Seq(u64),
    Now,
}

pub fn parse_seq(s: &str) -> Result<SeqArg, Error> {
    let s = s.trim();
    let s = s
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s);
    if s == "now" {
        return Ok(SeqArg::Now);
    }
    let head = s.split_once('-').map_or(s, |(n, _)| n);
    head.parse::<u64>()
        .map(SeqArg::Seq)
        .map_err(|_| Error::bad_request("Malformed sequence supplied in 'since' parameter."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        for n in [0, 1, 42, u64::MAX] {
            assert_eq!(parse_seq(&format_seq(n)), Ok(SeqArg::Seq(n)));
        }
        assert_eq!(parse_seq("7"), Ok(SeqArg::Seq(7)));
        assert_eq!(parse_seq("\"7-abc\""), Ok(SeqArg::Seq(7)));
        assert_eq!(parse_seq("now"), Ok(SeqArg::Now));
        assert!(parse_seq("x").is_err());
    }
}
