//! Mango indexes as their design documents: creating a json index writes (or finds) its
//! `"language": "query"` design document, deleting one rewrites or deletes it. The
//! writes go through the normal write path, so only database admins make them and
//! validation functions run. What an index is, and how a body gains or loses one, is
//! `settee_mango::index`'s; listing them is [`crate::find::indexes`].
//!
//! Threading: the design document is read on a blocking thread, then written as any
//! document is (the returned futures wait for the writer's commit).

use crate::fabric::Fabric;
use crate::{Error, Node, Result};
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_core::split_stored;
use settee_db::Database;
use settee_mango::index;
use settee_mango::opts::IndexOpts;
use std::sync::Arc;

/// `POST /{db}/_index`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// The design document holding the index.
    pub id: String,
    pub name: String,
    /// False when an identical index was there already (CouchDB's `"exists"`).
    pub created: bool,
}

/// `_index/_bulk_delete`'s answer: the design documents whose json indexes went, and
/// those that had none, each in CouchDB's (reversed) order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BulkDeleted {
    pub success: Vec<String>,
    pub fail: Vec<String>,
}

impl Node {
    /// Creates the json index `opts` asks for in `db`, as `user`.
    pub async fn create_index(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        opts: IndexOpts,
    ) -> Result<Created> {
        let d = self.couch.get(db)?;
        let (creation, rev) = crate::blocking(move || {
            let mut rev = None;
            let mut failure = None;
            let creation = index::create(&opts, |id| match ddoc_body(&d, id) {
                Ok(found) => found.map(|(b, r)| {
                    rev = Some(r);
                    b
                }),
                Err(e) => {
                    failure = Some(e);
                    None
                }
            });
            if let Some(e) = failure {
                return Err(e);
            }
            let creation = creation?;
            // CouchDB checks the design document's id once the index is valid (`_design/`).
            settee_core::validate_doc_id(&creation.ddoc_id)?;
            Ok::<_, Error>((creation, rev))
        })
        .await?;
        let created = match creation.body {
            None => false,
            Some(body) => {
                self.save_ddoc(db, user, &creation.ddoc_id, rev.as_deref(), Some(body))
                    .await?;
                true
            }
        };
        Ok(Created {
            id: creation.ddoc_id,
            name: creation.name,
            created,
        })
    }

    /// Deletes json index `name` (every json index when `None`) of design document
    /// `ddoc` (with or without its `_design/` prefix); false when it has none such.
    /// CouchDB answers `ok` even when the write then fails, but not when it is refused.
    pub async fn delete_index(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        ddoc: &str,
        name: Option<&str>,
    ) -> Result<bool> {
        let ddoc = index::ddoc_id(ddoc);
        let (d, id) = (self.couch.get(db)?, ddoc.clone());
        let Some((body, rev)) = crate::blocking(move || ddoc_body(&d, &id)).await? else {
            return Ok(false);
        };
        let names = match name {
            Some(n) => vec![n.to_string()],
            None => index::json_names(&body),
        };
        if names.is_empty() {
            return Ok(false);
        }
        let mut current = Some(body);
        for n in &names {
            let Some(b) = &current else { break };
            match index::remove(b, "json", n) {
                None => return Ok(false),
                Some(next) => current = next,
            }
        }
        match self.save_ddoc(db, user, &ddoc, Some(&rev), current).await {
            Err(Error::SavingDdoc(e)) if e.is_refusal() => Err(*e),
            _ => Ok(true),
        }
    }

    /// `_index/_bulk_delete`: every json index of each design document named.
    pub async fn bulk_delete_indexes(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        ddocs: Vec<String>,
    ) -> Result<BulkDeleted> {
        let mut out = BulkDeleted::default();
        for ddoc in ddocs {
            let ddoc = index::ddoc_id(&ddoc);
            if self.delete_index(db, user, &ddoc, None).await? {
                out.success.push(ddoc);
            } else {
                out.fail.push(ddoc);
            }
        }
        out.success.reverse();
        out.fail.reverse();
        Ok(out)
    }

    /// Writes design document `id` with `body` (deletes it when `None` or empty); a
    /// failure comes back as [`Error::SavingDdoc`], which CouchDB words its own way.
    async fn save_ddoc(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        id: &str,
        rev: Option<&str>,
        body: Option<Map<String, Value>>,
    ) -> Result<()> {
        let mut doc = body.unwrap_or_default();
        if doc.is_empty() {
            doc.insert("_deleted".into(), json!(true));
        }
        doc.insert("_id".into(), json!(id));
        if let Some(rev) = rev {
            doc.insert("_rev".into(), json!(rev));
        }
        let parsed = settee_core::parse_doc(Value::Object(doc))?;
        Fabric::update_doc(self, db, user, parsed, Default::default())
            .await
            .map(drop)
            .map_err(|e| Error::SavingDdoc(Box::new(e)))
    }
}

/// The body of design document `id` (without `_id`/`_rev`) and its revision, if it exists.
fn ddoc_body(db: &Database, id: &str) -> Result<Option<(Map<String, Value>, String)>> {
    match db.open_doc(id, None) {
        Ok(d) if !d.deleted => {
            let body = serde_json::from_slice(split_stored(&d.body).0)
                .map_err(|_| Error::internal("stored body"))?;
            Ok(Some((body, d.rev.to_string())))
        }
        Ok(_) | Err(settee_db::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
