//! How a document read renders its attachments, from its query parameters.

use crate::error::{Error, Result};
use crate::params::Params;
use settee_core::Rev;

/// How a read renders attachments: stubs (default), or content inline for every attachment
/// (`attachments=true`) or for those newer than the revisions of `atts_since`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttOpts {
    pub inline: bool,
    /// `att_encoding_info=true`: stubs of compressed attachments show `encoding` and
    /// `encoded_length`.
    pub encoding_info: bool,
    /// Only attachments with a `revpos` above this are inlined.
    pub since_pos: u64,
}

impl AttOpts {
    pub fn from_params(p: &Params) -> Result<AttOpts> {
        let mut opts = AttOpts {
            inline: p.is_true("attachments"),
            encoding_info: p.is_true("att_encoding_info"),
            since_pos: 0,
        };
        if let Some(raw) = p.get("atts_since") {
            let revs: Vec<String> = serde_json::from_str(raw)
                .map_err(|_| Error::bad_request("atts_since must be a JSON array of revisions"))?;
            let positions = revs
                .iter()
                .map(|r| Rev::parse(r).map(|r| r.pos))
                .collect::<std::result::Result<Vec<u64>, _>>()?;
            opts.inline = true;
            opts.since_pos = positions.into_iter().max().unwrap_or(0);
        }
        Ok(opts)
    }
}
