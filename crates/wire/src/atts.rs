//! How a document read renders its attachments, from its query parameters.

use crate::error::{Error, Result};
use crate::params::Params;
use settee_core::{Rev, RevId};

/// How a read renders attachments: stubs (default), or content inline for every attachment
/// (`attachments=true`) or for those newer than the revisions of `atts_since`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttOpts {
    pub inline: bool,
    /// `att_encoding_info=true`: stubs of compressed attachments show `encoding` and
    /// `encoded_length`.
    pub encoding_info: bool,
    /// `atts_since`: the revisions the client holds. Of a revision read, only attachments
    /// newer than the newest of these in its own history are inlined ([`since_pos`]).
    pub since: Vec<Rev>,
}

impl AttOpts {
    pub fn from_params(p: &Params) -> Result<AttOpts> {
        let mut opts = AttOpts {
            inline: p.is_true("attachments"),
            encoding_info: p.is_true("att_encoding_info"),
            since: Vec::new(),
        };
        if let Some(raw) = p.get("atts_since") {
            let revs: Vec<String> = serde_json::from_str(raw)
                .map_err(|_| Error::bad_request("atts_since must be a JSON array of revisions"))?;
            opts.since = revs
                .iter()
                .map(|r| Rev::parse(r))
                .collect::<std::result::Result<Vec<Rev>, _>>()?;
            opts.inline = true;
        }
        Ok(opts)
    }

    /// The position below which (inclusive) a revision's attachments stay stubs:
    /// [`since_pos`] of `atts_since` in the revision's history.
    pub fn since_pos(&self, rev: &Rev, history: &[RevId]) -> u64 {
        since_pos(rev.pos, history, &self.since)
    }
}

/// The position of the newest revision of a history (`history[0]` at `pos`, each next id
/// its parent) that is one of `since`; 0 when none is. As CouchDB's `atts_since` finds
/// it (`couch_db:find_ancestor_rev_pos`): a revision given that is not in the history
/// counts for nothing, whatever its position.
pub fn since_pos(pos: u64, history: &[RevId], since: &[Rev]) -> u64 {
    (history.iter().enumerate())
        .map_while(|(i, id)| Some((pos.checked_sub(i as u64)?, id)))
        .find(|(p, id)| since.iter().any(|s| s.pos == *p && &s.id == *id))
        .map_or(0, |(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(s: &str) -> Rev {
        Rev::parse(s).unwrap()
    }

    fn ids(v: &[&str]) -> Vec<RevId> {
        v.iter().map(|s| RevId::parse(s).unwrap()).collect()
    }

    #[test]
    fn since_pos_counts_only_revisions_of_the_history() {
        let h = ids(&["c", "b", "a"]);
        assert_eq!(since_pos(3, &h, &[]), 0);
        assert_eq!(since_pos(3, &h, &[rev("1-a")]), 1);
        assert_eq!(since_pos(3, &h, &[rev("1-a"), rev("2-b")]), 2);
        assert_eq!(since_pos(3, &h, &[rev("2-b"), rev("1-a")]), 2);
        // The revision itself: nothing is newer.
        assert_eq!(since_pos(3, &h, &[rev("3-c")]), 3);
        // Not ancestors: a higher position elsewhere, the right position with another id.
        assert_eq!(since_pos(3, &h, &[rev("1-x")]), 0);
        assert_eq!(since_pos(3, &h, &[rev("2-x"), rev("1-a")]), 1);
        assert_eq!(since_pos(3, &h, &[rev("9-c")]), 0);
        // A stemmed history knows only what it kept.
        assert_eq!(since_pos(3, &ids(&["c"]), &[rev("1-a")]), 0);
    }
}
