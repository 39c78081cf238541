//! Attachment reads of a clustered database (`GET /{db}/{id}/{name}`): the copies of the
//! document's range asked in turn (this member's first) for the revision's stub
//! (`att_encoding_info`) and then the content as stored (gzip when stored compressed),
//! which is served from memory ([`AttInfo::content`]): ranges, `ETag`, encodings as a node
//! serves its own. Uploads and deletions are not served yet.

use crate::{copy_error, enc, merge::Reply, unavailable, Coordinator};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;
use settee_cluster::ShardMap;
use settee_core::Rev;
use settee_node::att_read::{AttInfo, Piece};
use settee_node::fabric::Out;
use settee_node::{Error, Result};

impl Coordinator {
    pub(crate) fn open_attachment_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        id: &str,
        name: &str,
        rev: Option<&Rev>,
    ) -> Result<AttInfo> {
        let mut copies = Self::doc_copies(map, db, id);
        let me = settee_core::node::name();
        copies.sort_by_key(|(node, _)| node != me);
        let mut replies = Vec::new();
        for (node, path) in &copies {
            match crate::block_on(self.fetch(node, path, name, rev)) {
                Ok(att) => return Ok(att),
                Err(reply) => replies.push(reply),
            }
        }
        match crate::merge::first_refusal(&replies) {
            Some((status, body)) => Err(copy_error(status, body)),
            None => Err(unavailable(format!("no copy answered: {replies:?}"))),
        }
    }

    /// The attachment from one copy: its stub in the revision, then its content.
    async fn fetch(
        &self,
        node: &str,
        path: &str,
        name: &str,
        rev: Option<&Rev>,
    ) -> std::result::Result<AttInfo, Reply> {
        let query = rev.map_or(String::new(), |r| format!("&rev={r}"));
        let target = format!("{path}?att_encoding_info=true{query}");
        let doc = match self.ask(node, "GET", &target, None, None).await {
            Reply::Answered { status: 200, body } => body,
            other => return Err(other),
        };
        let stub = &doc["_attachments"][name];
        let (Some(digest), Some(rev)) = (digest_of(&stub["digest"]), doc["_rev"].as_str()) else {
            return Err(Reply::Answered {
                status: 404,
                body: serde_json::json!({"error": "not_found", "reason": "Document is missing attachment"}),
            });
        };
        let target = format!("{path}/{}?rev={rev}", enc(name));
        let answer = match self.node.peer_attachment(node, &target).await {
            Ok(Some(answer)) if answer.status == 200 => answer,
            Ok(Some(answer)) => {
                let body = serde_json::from_slice(&answer.body).unwrap_or_default();
                return Err(Reply::Answered {
                    status: answer.status,
                    body,
                });
            }
            Ok(None) => return Err(Reply::Unreachable(format!("{node} is not running"))),
            Err(e) => return Err(Reply::Unreachable(e.to_string())),
        };
        let gzip = answer.content_encoding.as_deref() == Some("gzip");
        let stored_length = answer.body.len() as u64;
        Ok(AttInfo {
            digest,
            content_type: (stub["content_type"].as_str())
                .unwrap_or("application/octet-stream")
                .to_owned(),
            length: stub["length"].as_u64().unwrap_or(stored_length),
            gzip,
            stored_length,
            content: Some(answer.body),
        })
    }
}

/// A stub's `md5-<base64>` digest.
fn digest_of(v: &Value) -> Option<[u8; 16]> {
    let b64 = v.as_str()?.strip_prefix("md5-")?;
    STANDARD.decode(b64).ok()?.try_into().ok()
}

/// Sends `piece` of content fetched from a copy (stored bytes, or gzip content decoded).
pub(crate) fn send_fetched(content: &[u8], piece: Piece, out: Out<'_>) -> Result<()> {
    let slice = |bytes: &[u8], from: u64, to: u64| -> Vec<u8> {
        let end = usize::try_from(to).unwrap_or(usize::MAX).min(bytes.len());
        let start = usize::try_from(from).unwrap_or(usize::MAX).min(end);
        bytes[start..end].to_vec()
    };
    match piece {
        Piece::Stored(range) => {
            out(&slice(content, range.start, range.end));
        }
        Piece::Decoded { skip, count } => {
            use std::io::Read;
            let mut decoded = Vec::new();
            flate2::read::GzDecoder::new(content)
                .read_to_end(&mut decoded)
                .map_err(|e| Error::internal(format!("a fetched attachment: {e}")))?;
            out(&slice(&decoded, skip, skip.saturating_add(count)));
        }
    }
    Ok(())
}
