//! Attachment reads of a clustered database (`GET /{db}/{id}/{name}`): the copies of the
//! document's range asked in turn (this member's first) for the revision's stub
//! (`att_encoding_info`) and then the content as stored (gzip when stored compressed),
//! which is served from memory ([`AttInfo::content`]): ranges, `ETag`, encodings as a node
//! serves its own.
//!
//! Uploads and deletions (`PUT`/`DELETE /{db}/{id}/{name}`) go to every copy of the
//! document's range as the same request (the content read into memory first, up to
//! `[couchdb] max_attachment_size`), each copy editing its revision as a node does
//! (revisions are computed from their content, so the copies make the same one), answered
//! at the write quorum as a document write ([`merge::write`]). CouchDB's coordinator opens
//! the revision and sends the edited document to every shard instead; a copy's edit of its
//! own revision is the same edit, and keeps a copy's refusal (no such revision, no such
//! attachment) its own, merged as a document write's.

use crate::merge::{self, Reply};
use crate::{copy_error, enc, unavailable, Coordinator};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde_json::Value;
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::Rev;
use settee_node::att_read::{AttInfo, Piece};
use settee_node::att_write::{check_name, AttUpload, HeldParts};
use settee_node::atts::{AttOpts, Part};
use settee_node::cluster::Forwarded;
use settee_node::fabric::{Out, Written};
use settee_node::read::{ReadOpts, Rendered};
use settee_node::{Error, Result};
use std::sync::Arc;

impl Coordinator {
    /// `PUT /{db}/{id}/{name}` on a clustered database: the content to every copy.
    pub(crate) async fn upload_attachment_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        id: &str,
        up: AttUpload<'_>,
    ) -> Result<Written> {
        use futures_util::StreamExt;
        check_name(&up.name)?;
        if up.rev.is_none() {
            settee_core::validate_doc_id(id)?;
        }
        let limit = self.node.write_settings().att_limit;
        let mut content = Vec::new();
        let mut body = up.body;
        while let Some(chunk) = body.next().await {
            content.extend_from_slice(&chunk?);
            if content.len() as u64 > limit {
                return Err(settee_db::Error::AttachmentTooLarge.into());
            }
        }
        let mut headers = vec![("content-type".to_owned(), up.content_type.clone())];
        if up.gzipped {
            headers.push(("content-encoding".into(), "gzip".into()));
        }
        if let Some(md5) = &up.content_md5 {
            headers.push(("content-md5".into(), md5.clone()));
        }
        let query = up.rev.map_or(String::new(), |r| format!("?rev={r}"));
        let target = |path: &str| format!("{path}/{}{query}", enc(&up.name));
        let asks = self.att_asks(map, db, id, "PUT", target, Some(Bytes::from(content)));
        self.att_write(asks, user, Some(headers), up.w).await
    }

    /// `DELETE /{db}/{id}/{name}` on a clustered database: to every copy.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn delete_attachment_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        id: &str,
        name: &str,
        rev: Option<Rev>,
        w: Option<u32>,
    ) -> Result<Written> {
        check_name(name)?;
        let query = rev.map_or(String::new(), |r| format!("?rev={r}"));
        let target = |path: &str| format!("{path}/{}{query}", enc(name));
        let asks = self.att_asks(map, db, id, "DELETE", target, None);
        self.att_write(asks, user, None, w).await
    }

    /// One request per copy of `id`'s range: `target` of the document's path.
    fn att_asks(
        &self,
        map: &ShardMap,
        db: &str,
        id: &str,
        method: &'static str,
        target: impl Fn(&str) -> String,
        body: Option<Bytes>,
    ) -> Vec<(String, &'static str, String, Option<Bytes>)> {
        (Self::doc_copies(map, db, id).into_iter())
            .map(|(node, path)| (node, method, target(&path), body.clone()))
            .collect()
    }

    /// An attachment change asked of every copy, answered at the write quorum `w`.
    async fn att_write(
        &self,
        asks: Vec<(String, &'static str, String, Option<Bytes>)>,
        user: &UserCtx,
        headers: Option<Vec<(String, String)>>,
        w: Option<u32>,
    ) -> Result<Written> {
        let w = merge::quorum_or(w, asks.len());
        // A DELETE has no body: asked as JSON.
        let headers = headers.map(Arc::new);
        let replies =
            (self.ask_until_with(asks, Some(user), headers, |r| merge::write_decided(r, w))).await;
        let replies: Vec<Reply> = replies.into_iter().flatten().collect();
        crate::writes::written_of(&replies, w)
    }

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
            Err(Error::PeerTimeout(why)) => return Err(Reply::TimedOut(why)),
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

impl Coordinator {
    /// Revision `rev` of a document with its attachments as parts, for a multipart
    /// client: asked of its copies (this member's first) as a multipart client, the first
    /// to answer rendering it (JSON when no attachment follows, as a node answers).
    pub(crate) async fn read_related(
        &self,
        copies: &[(String, String)],
        user: &UserCtx,
        rev: &Rev,
        opts: &ReadOpts,
    ) -> Result<Rendered> {
        let d = &opts.doc;
        let mut query = vec![("rev", rev.to_string()), ("attachments", "true".into())];
        for (flag, on) in [
            ("revs", d.revs),
            ("revs_info", d.revs_info),
            ("conflicts", d.conflicts),
            ("deleted_conflicts", d.deleted_conflicts),
            ("local_seq", d.local_seq),
            ("att_encoding_info", opts.atts.encoding_info),
        ] {
            if on {
                query.push((flag, "true".into()));
            }
        }
        query.extend(since_param(&opts.atts));
        let query = crate::form_query(&query);
        let me = settee_core::node::name();
        let mut order: Vec<&(String, String)> = copies.iter().collect();
        order.sort_by_key(|(node, _)| node != me);
        let mut replies = Vec::new();
        for (node, path) in order {
            let target = format!("{path}?{query}");
            let accept = [("accept", "multipart/related")];
            let answer = (self.node)
                .peer_raw(node, "GET", &target, Some(user), &accept, Bytes::new())
                .await;
            match answer {
                Ok(Some(a)) if a.status == 200 => return related_of(a).await,
                other => replies.push(crate::reply_of(node, other)),
            }
        }
        match merge::first_refusal(&replies) {
            Some((status, body)) => Err(copy_error(status, body)),
            None => Err(unavailable(format!("no copy answered: {replies:?}"))),
        }
    }
}

/// A copy's document answer to a multipart client, as this member renders it.
async fn related_of(answer: Forwarded) -> Result<Rendered> {
    let ct = answer.content_type.unwrap_or_default();
    let Some(boundary) = (ct.to_ascii_lowercase().starts_with("multipart/related"))
        .then(|| settee_wire::boundary_of(&ct))
        .flatten()
    else {
        return Ok(Rendered::Json(answer.body.to_vec()));
    };
    let body = futures_util::stream::once(async move { Ok::<_, std::io::Error>(answer.body) });
    let mut parts = HeldParts::new(u64::MAX);
    let doc = settee_wire::read_related(body, boundary, &mut parts).await?;
    let stubs = &doc["_attachments"];
    let parts = (parts.parts.into_iter())
        .map(|(name, content)| {
            let stub = &stubs[&name];
            Part {
                content_type: (stub["content_type"].as_str())
                    .unwrap_or("application/octet-stream")
                    .to_owned(),
                length: content.len() as u64,
                digest: digest_of(&stub["digest"]).unwrap_or_default(),
                gzip: stub["encoding"] == "gzip",
                content: Some(content),
                name,
            }
        })
        .collect();
    Ok(Rendered::Multipart {
        doc: serde_json::to_vec(&doc).expect("json"),
        parts,
    })
}

/// `atts_since` for a copy: the revisions the client gave, each of which counts only
/// for the revisions whose history holds it (`AttOpts::since_pos`).
pub(crate) fn since_param(atts: &AttOpts) -> Option<(&'static str, String)> {
    let revs: Vec<String> = atts.since.iter().map(ToString::to_string).collect();
    (!revs.is_empty()).then(|| ("atts_since", serde_json::to_string(&revs).expect("json")))
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
