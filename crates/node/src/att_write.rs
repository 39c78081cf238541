//! Attachment writes: content streamed into the attachment store as it arrives (a
//! standalone upload, the parts of a `multipart/related` document, a form's files), and
//! the revision an attachment change edits, written with its new attachments through the
//! ordinary write path.

use crate::write::WriteOpts;
use crate::{blocking, Error, Node, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use serde_json::{Map, Value};
use settee_auth::UserCtx;
use settee_core::{join_stored, split_stored, ParsedDoc, Rev};
use settee_db::Database;
use settee_docs::atts::{ContentWriter, FollowsWriter, StoredAtts};
use settee_docs::{Followed, Written};
use std::sync::Arc;

/// An attachment to put into a revision, its content stored already.
pub struct NewAttachment<'a> {
    pub name: String,
    pub content_type: &'a str,
    pub content: &'a Written,
}

/// A standalone attachment upload (`PUT /{db}/{docid}/{attname}`), its content arriving
/// as a stream.
pub struct AttUpload<'a> {
    pub name: String,
    pub content_type: String,
    /// Sent gzip-encoded: stored as sent.
    pub gzipped: bool,
    /// The revision to edit; none: a new document.
    pub rev: Option<Rev>,
    /// The client's `Content-MD5`, checked against the content as sent.
    pub content_md5: Option<String>,
    /// `w`: how many copies must hold the new revision for a 201 (see
    /// [`crate::write::WriteOpts::w`]).
    pub w: Option<u32>,
    /// The content; an error ends the upload with it, nothing written.
    pub body: BoxStream<'a, Result<Bytes>>,
}

/// CouchDB refuses attachment names that start with `_`.
pub fn check_name(name: &str) -> Result<()> {
    if name.starts_with('_') {
        return Err(Error::bad_request(format!(
            "Attachment name '{name}' starts with prohibited character '_'"
        )));
    }
    Ok(())
}

/// One attachment's content being stored (compressed when its type is compressible;
/// content sent gzip-encoded is stored as sent, its `length` then the encoded one, as
/// CouchDB does not know the identity length either).
pub struct Upload {
    w: ContentWriter,
    md5: md5::Md5,
    gzipped: bool,
}

impl Node {
    /// Starts storing an attachment of `content_type`; `gzipped`: sent gzip-encoded.
    pub fn upload(&self, db: &Database, content_type: &str, gzipped: bool) -> Upload {
        let settings = self.write_settings();
        let level = if gzipped {
            None
        } else {
            settings.compression.level_for(content_type)
        };
        Upload {
            w: ContentWriter::new(db, settings.att_limit, level),
            md5: md5::Md5::default(),
            gzipped,
        }
    }

    /// Where a `multipart/related` document's attachment parts are stored as they arrive.
    pub fn follows_store<'a>(&self, db: &'a Database) -> FollowsStore<'a> {
        FollowsStore {
            db,
            settings: self.write_settings(),
            followed: Followed::new(),
        }
    }

    /// Writes `edit` with `atts` instead of its attachments, as `user`: the new revision.
    pub async fn write_atts(
        &self,
        db: Arc<Database>,
        user: &UserCtx,
        id: &str,
        edit: Edited,
        atts: &StoredAtts,
    ) -> Result<Rev> {
        let doc = ParsedDoc {
            id: Some(id.to_string()),
            revs: edit.rev.map(|r| (r.pos, vec![r.id])),
            deleted: edit.deleted,
            body: join_stored(split_stored(&edit.stored).0, atts.section().as_deref()),
            atts: None,
            body_term: None,
        };
        written(
            self.update_doc_with(db, user, doc, WriteOpts::default(), Followed::new())
                .await?,
        )
    }

    /// Stores `up`'s content and puts it into the revision it names (a new document
    /// without one), as `user`: the new revision. The revision is checked, and the disk's
    /// room for edits, before any content is stored.
    pub async fn upload_attachment(
        &self,
        db: Arc<Database>,
        user: &UserCtx,
        id: &str,
        mut up: AttUpload<'_>,
    ) -> Result<Rev> {
        use futures_util::StreamExt;
        check_name(&up.name)?;
        if up.rev.is_none() {
            settee_core::validate_doc_id(id)?;
        }
        // Past `[disk_monitor]`'s threshold the edit would be refused: do not store the
        // content first.
        db.config().disk.room_for_edits()?;
        let base = edited(&db, id, up.rev.take()).await?;
        let mut upload = self.upload(&db, &up.content_type, up.gzipped);
        while let Some(chunk) = up.body.next().await {
            match chunk {
                Ok(bytes) => upload.write(&bytes)?,
                Err(e) => {
                    upload.discard();
                    return Err(e);
                }
            }
        }
        let written = upload.finish(up.content_md5.as_deref())?;
        let att = NewAttachment {
            name: up.name,
            content_type: &up.content_type,
            content: &written,
        };
        self.put_attachment(db, user, id, base, att).await
    }

    /// Puts `att` (its content stored already) into the revision `edit`, first among its
    /// attachments, as `user`: the new revision.
    pub async fn put_attachment(
        &self,
        db: Arc<Database>,
        user: &UserCtx,
        id: &str,
        edit: Edited,
        att: NewAttachment<'_>,
    ) -> Result<Rev> {
        let mut atts = StoredAtts::of(&edit.stored);
        let revpos = edit.rev.as_ref().map_or(1, |r| r.pos + 1);
        atts.put_first(att.name, att.content_type, revpos, att.content);
        self.write_atts(db, user, id, edit, &atts).await
    }

    /// Removes attachment `name` from revision `rev` as `user`: the new revision. Without
    /// a revision, CouchDB looks for the document and the attachment, then its write (a
    /// new document) conflicts.
    pub async fn delete_attachment(
        &self,
        db: Arc<Database>,
        user: &UserCtx,
        id: &str,
        rev: Option<Rev>,
        name: &str,
    ) -> Result<Rev> {
        let Some(rev) = rev else {
            let (db, id) = (db.clone(), id.to_string());
            let doc = blocking::<_, Error>(move || Ok(db.open_doc(&id, None)?)).await?;
            if !StoredAtts::of(&doc.body).stubs.contains_key(name) {
                return Err(missing_attachment());
            }
            return Err(settee_db::Error::Conflict.into());
        };
        let edit = edited(&db, id, Some(rev)).await?;
        let mut atts = StoredAtts::of(&edit.stored);
        if atts.remove(name).is_none() {
            return Err(missing_attachment());
        }
        self.write_atts(db, user, id, edit, &atts).await
    }
}

/// The revision a write returned (an attachment change always makes one).
pub fn written(rev: Option<Rev>) -> Result<Rev> {
    rev.ok_or_else(|| Error::internal("no revision written"))
}

impl Upload {
    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        md5::Digest::update(&mut self.md5, chunk);
        Ok(self.w.write(chunk)?)
    }

    /// An interrupted upload leaves no revision: its chunks are removed now.
    pub fn discard(mut self) {
        self.w.discard();
    }

    /// The content stored; `content_md5` (the `Content-MD5` sent, base64) must match the
    /// content as sent (CouchDB's 400 `content_md5_mismatch`).
    pub fn finish(self, content_md5: Option<&str>) -> Result<Written> {
        let mut written = self.w.finish()?;
        if self.gzipped {
            written.sent_gzipped(None);
        }
        if let Some(sent) = content_md5 {
            let got: [u8; 16] = md5::Digest::finalize(self.md5).into();
            if STANDARD.decode(sent.trim()).ok().as_deref() != Some(&got[..]) {
                return Err(Error::ContentMd5Mismatch);
            }
        }
        Ok(written)
    }
}

/// Attachment parts of a `multipart/related` document, into the attachment store.
pub struct FollowsStore<'a> {
    db: &'a Database,
    settings: settee_docs::Settings,
    pub followed: Followed,
}

impl settee_wire::FollowsSink for FollowsStore<'_> {
    type Part = FollowsWriter;
    type Error = Error;

    fn open(&mut self, _: &str, att: &Map<String, Value>) -> Result<FollowsWriter> {
        let s = &self.settings;
        Ok(FollowsWriter::new(
            self.db,
            att,
            &s.compression,
            s.att_limit,
        ))
    }

    fn write(&mut self, w: &mut FollowsWriter, chunk: &[u8]) -> Result<()> {
        Ok(w.write(chunk)?)
    }

    fn finish(&mut self, name: &str, w: FollowsWriter) -> Result<()> {
        self.followed.insert(name.to_string(), w.finish()?);
        Ok(())
    }
}

/// Stores the parts of a `multipart/related` document held in memory (name, content as
/// sent) as [`FollowsStore`] stores them as they arrive; an attachment `doc` does not
/// mark `follows` is refused as CouchDB refuses a part it does not expect.
pub fn store_parts(
    node: &Node,
    db: &Database,
    doc: &ParsedDoc,
    parts: Vec<(String, Bytes)>,
) -> Result<Followed> {
    use settee_wire::FollowsSink;
    let mut store = node.follows_store(db);
    let empty = Map::new();
    let atts = doc.atts.as_ref().unwrap_or(&empty);
    for (name, content) in parts {
        let att = (atts.get(&name))
            .and_then(Value::as_object)
            .filter(|a| a.get("follows") == Some(&Value::Bool(true)))
            .ok_or_else(|| Error::bad_request(format!("Unexpected attachment part: {name}")))?;
        let mut part = store.open(&name, att)?;
        store.write(&mut part, &content)?;
        store.finish(&name, part)?;
    }
    Ok(store.followed)
}

/// The parts of a `multipart/related` body held in memory (name, content as sent), in the
/// order they came, none larger than `limit` bytes: a clustered database's document goes
/// to each copy whole.
pub struct HeldParts {
    pub parts: Vec<(String, Bytes)>,
    limit: u64,
}

impl HeldParts {
    pub fn new(limit: u64) -> HeldParts {
        HeldParts {
            parts: Vec::new(),
            limit,
        }
    }
}

impl settee_wire::FollowsSink for HeldParts {
    type Part = Vec<u8>;
    type Error = Error;

    fn open(&mut self, _: &str, _: &Map<String, Value>) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }

    fn write(&mut self, part: &mut Vec<u8>, chunk: &[u8]) -> Result<()> {
        part.extend_from_slice(chunk);
        if part.len() as u64 > self.limit {
            return Err(settee_db::Error::AttachmentTooLarge.into());
        }
        Ok(())
    }

    fn finish(&mut self, name: &str, part: Vec<u8>) -> Result<()> {
        self.parts.push((name.to_owned(), Bytes::from(part)));
        Ok(())
    }
}

/// The revision an attachment change edits, opened as CouchDB opens it.
pub struct Edited {
    rev: Option<Rev>,
    /// Its stored body and attachment stubs (`{}` for a new document).
    stored: Vec<u8>,
    /// A deleted revision stays deleted when its attachments are edited, as in CouchDB,
    /// which edits the revision it opened whatever it is.
    deleted: bool,
}

impl Edited {
    /// The attachments the revision has now.
    pub fn atts(&self) -> StoredAtts {
        StoredAtts::of(&self.stored)
    }
}

/// CouchDB's 404 for an attachment the revision does not have.
pub fn missing_attachment() -> Error {
    settee_db::Error::NotFound("Document is missing attachment").into()
}

/// With `rev`, that revision of the document (409 `missing_rev` if it has none such);
/// without, a new document, which conflicts with an existing live one (checked before
/// the upload is stored).
pub async fn edited(db: &Arc<Database>, id: &str, rev: Option<Rev>) -> Result<Edited> {
    let (db, id) = (db.clone(), id.to_string());
    blocking(move || match rev {
        Some(rev) => match db.open_doc(&id, Some(&rev)) {
            Ok(d) => Ok(Edited {
                rev: Some(rev),
                stored: d.body,
                deleted: d.deleted,
            }),
            Err(settee_db::Error::NotFound(_)) => Err(Error::MissingRev),
            Err(e) => Err(e.into()),
        },
        None => match db.open_doc(&id, None) {
            Ok(_) => Err(settee_db::Error::Conflict.into()),
            Err(settee_db::Error::NotFound(_)) => Ok(Edited {
                rev: None,
                stored: b"{}".to_vec(),
                deleted: false,
            }),
            Err(e) => Err(e.into()),
        },
    })
    .await
}
