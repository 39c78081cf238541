//! Document writes of a clustered database beyond plain JSON ones: `multipart/related`
//! documents (their attachments' content as parts, as CouchDB's replicator pushes them),
//! `batch=ok` (answered at once, written in the background as CouchDB's `chttpd_db`
//! spawns the write) and `COPY` (the source read from its range's copies, written to the
//! destination's range as a write of its own).

use crate::merge::{self, Reply, WriteOutcome};
use crate::{copy_error, unavailable, Coordinator};
use bytes::Bytes;
use serde_json::Value;
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::{ParsedDoc, Rev};
use settee_db::LocalUpdate;
use settee_node::fabric::{Copied, Written};
use settee_node::read::{ReadOpts, Rendered};
use settee_node::write::WriteOpts;
use settee_node::{Error, Fabric, Result};
use std::sync::Arc;

/// A write's copies' replies as its answer at the write quorum `w`.
pub(crate) fn written_of(replies: &[Reply], w: usize) -> Result<Written> {
    match merge::write(replies, w) {
        WriteOutcome::Ok(rev) => Ok(Written {
            rev: Some(rev),
            accepted: false,
        }),
        WriteOutcome::Accepted(rev) => Ok(Written {
            rev: Some(rev),
            accepted: true,
        }),
        WriteOutcome::Refused { status, body } => Err(copy_error(status, &body)),
        WriteOutcome::Unanswered(why) => Err(unavailable(why)),
    }
}

/// A `multipart/related` body: the document's JSON, then each part (name, content) in
/// the order given, under `boundary`.
fn related_body(json: &[u8], parts: &[(String, Bytes)], boundary: &str) -> Bytes {
    let size: usize = parts.iter().map(|(n, c)| n.len() + c.len() + 128).sum();
    let mut out = Vec::with_capacity(json.len() + size + 128);
    out.extend_from_slice(
        format!("--{boundary}\r\nContent-Type: application/json\r\n\r\n").as_bytes(),
    );
    out.extend_from_slice(json);
    for (name, content) in parts {
        let name = serde_json::to_string(name).expect("json");
        out.extend_from_slice(
            format!("\r\n--{boundary}\r\nContent-Disposition: attachment; filename={name}\r\n\r\n")
                .as_bytes(),
        );
        out.extend_from_slice(content);
    }
    out.extend_from_slice(format!("\r\n--{boundary}--").as_bytes());
    Bytes::from(out)
}

/// A boundary that no part's content holds.
fn boundary_for(parts: &[(String, Bytes)]) -> String {
    let mut n: u64 = 0;
    loop {
        let b = format!("settee-related-{n:x}");
        let found = |c: &Bytes| c.windows(b.len()).any(|w| w == b.as_bytes());
        if !parts.iter().any(|(_, c)| found(c)) {
            return b;
        }
        n += 1;
    }
}

impl Coordinator {
    /// A `multipart/related` document written to every copy of its range as
    /// `multipart/related` (each copy stores the parts as a node stores a client's),
    /// answered at the write quorum as a JSON document's write.
    pub(crate) async fn write_related_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        mut doc: ParsedDoc,
        opts: WriteOpts,
        parts: Vec<(String, Bytes)>,
    ) -> Result<Written> {
        (self.users_before_update(db, map, user, std::slice::from_mut(&mut doc))).await?;
        let id =
            (doc.id.clone()).ok_or_else(|| Error::internal("a document write without an id"))?;
        let mut json = Vec::new();
        merge::write_doc(&doc, !opts.new_edits, &mut json);
        let boundary = boundary_for(&parts);
        let body = related_body(&json, &parts, &boundary);
        let ct = format!("multipart/related; boundary=\"{boundary}\"");
        let headers = Arc::new(vec![
            ("content-type".to_owned(), ct),
            ("accept".to_owned(), "application/json".to_owned()),
        ]);
        let query = match (opts.new_edits, opts.keep_revpos) {
            (false, _) => "?new_edits=false",
            (true, true) => "?settee_keep_revpos=true",
            (true, false) => "",
        };
        let copies = Self::doc_copies(map, db, &id);
        let w = merge::quorum_or(opts.w, copies.len());
        let asks = (copies.into_iter())
            .map(|(node, path)| (node, "PUT", format!("{path}{query}"), Some(body.clone())))
            .collect();
        let replies = (self.ask_until_with(asks, Some(user), Some(headers), |r| {
            merge::write_decided(r, w)
        }))
        .await;
        let replies: Vec<Reply> = replies.into_iter().flatten().collect();
        written_of(&replies, w)
    }

    /// `batch=ok`: the write (`multipart/related` when `parts` follow) done in the
    /// background (by a clone of this coordinator), its failures only logged, as CouchDB's;
    /// answered at once. A design document's is written before the answer, through
    /// [`Fabric`], which tells the members of it (still answered as accepted, failures
    /// logged).
    pub(crate) async fn write_batched(
        &self,
        db: &str,
        map: Arc<ShardMap>,
        user: &UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
        parts: Vec<(String, Bytes)>,
    ) -> Written {
        let opts = WriteOpts {
            batch: false,
            ..opts
        };
        let id = doc.id.clone().unwrap_or_default();
        let design = id.starts_with("_design/");
        let log = move |db: &str, e: Error| {
            tracing::debug!(%db, %id, error = %e, "a batch=ok write failed");
        };
        if design {
            let written = match parts.is_empty() {
                true => Fabric::update_doc(self, db, user, doc, opts).await,
                false => Fabric::update_doc_related(self, db, user, doc, opts, parts).await,
            };
            if let Err(e) = written {
                log(db, e);
            }
        } else {
            let (c, db, user) = (self.clone(), db.to_owned(), user.clone());
            tokio::spawn(async move {
                let written = match parts.is_empty() {
                    true => c.write_clustered(&db, &map, &user, doc, opts).await,
                    false => (c.write_related_clustered(&db, &map, &user, doc, opts, parts)).await,
                };
                if let Err(e) = written {
                    log(&db, e);
                }
            });
        }
        Written {
            rev: None,
            accepted: true,
        }
    }

    /// A local document's `batch=ok` write: in the background, answered at once.
    pub(crate) fn put_local_batched(&self, db: &str, map: Arc<ShardMap>, update: LocalUpdate) {
        let (coordinator, db) = (self.clone(), db.to_owned());
        tokio::spawn(async move {
            let id = update.id.clone();
            if let Err(e) = coordinator.put_local_clustered(&db, &map, update).await {
                tracing::debug!(%db, %id, error = %e, "a batch=ok local write failed");
            }
        });
    }

    /// `COPY /{db}/{id}`: revision `source.1` (the winner without one) of `source.0`
    /// (a local document's body when `_local/…`) read from its copies, its attachments'
    /// content as stored, and written as `dest.0` (over revision `dest.1`; a new document
    /// without one) to the destination's copies, which may hold another range: a
    /// `multipart/related` write when attachments follow, so that they keep their
    /// `revpos`, encoding and digest as CouchDB's copy keeps them. A local destination
    /// keeps the body alone, as on a node.
    pub(crate) async fn copy_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        (src_id, src_rev): (&str, Option<Rev>),
        (dest_id, dest_rev): (&str, Option<Rev>),
    ) -> Result<Copied> {
        let to_local = dest_id.starts_with("_local/");
        let (mut body, parts) = if src_id.starts_with("_local/") {
            let local = self.open_local_clustered(db, map, src_id).await?;
            (json_of(&local.body)?, Vec::new())
        } else {
            let opts = ReadOpts {
                rev: src_rev,
                ..Default::default()
            };
            let read =
                tokio::task::block_in_place(|| self.read_clustered(db, map, user, src_id, &opts))?;
            let doc = json_of(rendered_json(&read.body)?)?;
            let has_atts = doc["_attachments"]
                .as_object()
                .is_some_and(|a| !a.is_empty());
            if has_atts && !to_local {
                let mut opts = ReadOpts::default();
                opts.atts.inline = true;
                let copies = Self::doc_copies(map, db, src_id);
                match self.read_related(&copies, user, &read.rev, &opts).await? {
                    Rendered::Multipart { doc, parts } => (
                        json_of(&doc)?,
                        (parts.into_iter())
                            .map(|p| (p.name, p.content.unwrap_or_default()))
                            .collect(),
                    ),
                    Rendered::Json(doc) => (json_of(&doc)?, Vec::new()),
                }
            } else {
                (doc, Vec::new())
            }
        };
        if let Some(o) = body.as_object_mut() {
            for special in ["_id", "_rev", "_revisions"] {
                o.shift_remove(special);
            }
            if to_local {
                o.shift_remove("_attachments");
            }
        }
        if to_local {
            // A local document's write refuses any other generation than 0, as a node's.
            let rev = match dest_rev {
                None => None,
                Some(r) if r.pos == 0 => {
                    Some(settee_node::write::local_rev_number(&r.to_string())?)
                }
                Some(_) => return Err(Error::Bare("Invalid rev format".into())),
            };
            let update = LocalUpdate {
                id: dest_id.to_owned(),
                rev,
                deleted: false,
                body: serde_json::to_vec(&body).expect("json"),
            };
            let n = self.put_local_clustered(db, map, update).await?;
            return Ok(Copied {
                rev: format!("0-{n}"),
                accepted: false,
            });
        }
        let mut doc = settee_core::parse_doc(body)?;
        doc.id = Some(dest_id.to_owned());
        doc.revs = dest_rev.map(|r| (r.pos, vec![r.id]));
        let opts = WriteOpts {
            keep_revpos: true,
            ..WriteOpts::default()
        };
        let written = if parts.is_empty() {
            self.write_clustered(db, map, user, doc, opts).await?
        } else {
            (self.write_related_clustered(db, map, user, doc, opts, parts)).await?
        };
        self.after_write(db, std::iter::once(dest_id)).await;
        Ok(Copied {
            rev: written.rev.map(|r| r.to_string()).unwrap_or_default(),
            accepted: written.accepted,
        })
    }
}

fn json_of(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::internal(format!("a copy's document: {e}")))
}

fn rendered_json(r: &Rendered) -> Result<&[u8]> {
    match r {
        Rendered::Json(b) => Ok(b),
        Rendered::Multipart { .. } => Err(Error::internal("a document read as multipart")),
    }
}
