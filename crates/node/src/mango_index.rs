//! Mango indexes as their design documents: creating a json index writes (or finds) its
//! `"language": "query"` design document, deleting one rewrites or deletes it. The
//! writes go through the normal write path, so only database admins make them and
//! validation functions run. What an index is, and how a body gains or loses one, is
//! `settee_mango::index`'s; listing them is [`crate::find::indexes`].
//!
//! The same operations serve a cluster's coordinator through [`Ddocs`], which says where
//! design documents are read and written.
//!
//! Threading: a node reads the design document on a blocking thread, then writes it as any
//! document is (the returned futures wait for the writer's commit).

use crate::fabric::{Fabric, Fut};
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

/// Where index operations read and write one database's design documents: a node reads
/// its own database and writes through its own fabric; a cluster's coordinator reads the
/// document's copies and writes through the coordinator (the write quorum applies).
pub trait Ddocs: Sync {
    /// Where design documents are written.
    fn fabric(&self) -> &dyn Fabric;

    /// Design document `id`'s body (without `_id`/`_rev`) and revision, if it exists.
    fn read(&self, id: String) -> Fut<'_, Option<(Map<String, Value>, String)>>;
}

/// A node's own database's design documents.
struct OwnDdocs<'a> {
    node: &'a Arc<Node>,
    db: &'a str,
}

impl Ddocs for OwnDdocs<'_> {
    fn fabric(&self) -> &dyn Fabric {
        self.node
    }

    fn read(&self, id: String) -> Fut<'_, Option<(Map<String, Value>, String)>> {
        Box::pin(async move {
            let d = self.node.couch.get(self.db)?;
            crate::blocking(move || ddoc_body(&d, &id)).await
        })
    }
}

impl Node {
    /// Creates the json index `opts` asks for in `db`, as `user`.
    pub async fn create_index(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        opts: IndexOpts,
    ) -> Result<Created> {
        create_index(&OwnDdocs { node: self, db }, db, user, opts).await
    }

    /// Deletes json index `name` (every json index when `None`) of design document
    /// `ddoc` (with or without its `_design/` prefix); false when it has none such.
    pub async fn delete_index(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        ddoc: &str,
        name: Option<&str>,
    ) -> Result<bool> {
        delete_index(&OwnDdocs { node: self, db }, db, user, ddoc, name).await
    }

    /// `_index/_bulk_delete`: every json index of each design document named.
    pub async fn bulk_delete_indexes(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        ddocs: Vec<String>,
    ) -> Result<BulkDeleted> {
        bulk_delete_indexes(&OwnDdocs { node: self, db }, db, user, ddocs).await
    }
}

/// Creates the json index `opts` asks for in `db` (whose design documents `store` holds),
/// as `user`.
pub async fn create_index(
    store: &dyn Ddocs,
    db: &str,
    user: &UserCtx,
    opts: IndexOpts,
) -> Result<Created> {
    // The options are judged, and the design document named, before it is read.
    let ddoc_id = index::create(&opts, |_| None)?.ddoc_id;
    let existing = store.read(ddoc_id).await?;
    let rev = existing.as_ref().map(|(_, r)| r.clone());
    let creation = index::create(&opts, |_| existing.map(|(b, _)| b))?;
    // CouchDB checks the design document's id once the index is valid (`_design/`).
    settee_core::validate_doc_id(&creation.ddoc_id)?;
    let created = match creation.body {
        None => false,
        Some(body) => {
            save(
                store,
                db,
                user,
                &creation.ddoc_id,
                rev.as_deref(),
                Some(body),
            )
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

/// Deletes json index `name` (every json index when `None`) of design document `ddoc`
/// (with or without its `_design/` prefix); false when it has none such. CouchDB answers
/// `ok` even when the write then fails, but not when it is refused.
pub async fn delete_index(
    store: &dyn Ddocs,
    db: &str,
    user: &UserCtx,
    ddoc: &str,
    name: Option<&str>,
) -> Result<bool> {
    let ddoc = index::ddoc_id(ddoc);
    let Some((body, rev)) = store.read(ddoc.clone()).await? else {
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
    match save(store, db, user, &ddoc, Some(&rev), current).await {
        Err(Error::SavingDdoc(e)) if e.is_refusal() => Err(*e),
        _ => Ok(true),
    }
}

/// `_index/_bulk_delete`: every json index of each design document named.
pub async fn bulk_delete_indexes(
    store: &dyn Ddocs,
    db: &str,
    user: &UserCtx,
    ddocs: Vec<String>,
) -> Result<BulkDeleted> {
    let mut out = BulkDeleted::default();
    for ddoc in ddocs {
        let ddoc = index::ddoc_id(&ddoc);
        if delete_index(store, db, user, &ddoc, None).await? {
            out.success.push(ddoc);
        } else {
            out.fail.push(ddoc);
        }
    }
    out.success.reverse();
    out.fail.reverse();
    Ok(out)
}

/// Writes design document `id` with `body` (deletes it when `None` or empty); a failure
/// comes back as [`Error::SavingDdoc`], which CouchDB words its own way.
async fn save(
    store: &dyn Ddocs,
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
    (store.fabric())
        .update_doc(db, user, parsed, Default::default())
        .await
        .map(drop)
        .map_err(|e| Error::SavingDdoc(Box::new(e)))
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
