//! A database of this server as a replication endpoint, read and written in process
//! (never through loopback HTTP) as the user the request's (or the URL's) credentials
//! authenticate: reads need a member, and writes go through the write path `_bulk_docs`
//! takes (`settee_docs::write`: design documents, `_users` rules, `validate_doc_update`,
//! attachments).

use super::Hooks;
use crate::atts::{AttOpts, AttRender};
use crate::changes::ReplicationFilter;
use crate::{blocking, doc_json_with, seqs, Error, Node, Result};
use serde_json::{Map, Value};
use settee_auth::security::SecurityObject;
use settee_auth::UserCtx;
use settee_core::{ParsedDoc, Rev, SeqArg, SeqCodec};
use settee_db::{Database, LocalUpdate};
use settee_docs::atts::FollowsWriter;
use settee_docs::Followed;
use settee_replicator::{
    ChangeRow, Changes, Content, Doc, Endpoint, Error as RepError, Fetch, Filter, Follows, Missing,
    PeerInfo, Wait, WriteFailure,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

type RepResult<T> = std::result::Result<T, RepError>;

/// A database of this server, used as the user `user`.
#[derive(Clone)]
pub struct LocalDb {
    node: Arc<Node>,
    hooks: Arc<dyn Hooks>,
    name: String,
    user: UserCtx,
    /// The database's URL as CouchDB shows it (password hidden, trailing `/`).
    url: String,
}

impl LocalDb {
    /// The database `name` of this server, read and written as `user`; `url` is how
    /// replication ids and tasks name it; `hooks` name its errors.
    pub fn new(
        node: &Arc<Node>,
        hooks: &Arc<dyn Hooks>,
        name: &str,
        user: UserCtx,
        url: String,
    ) -> LocalDb {
        LocalDb {
            node: node.clone(),
            hooks: hooks.clone(),
            name: name.to_string(),
            user,
            url,
        }
    }

    /// An error met here, as the replicator sees a peer's answer.
    fn rep_error(&self, e: impl Into<Error>) -> RepError {
        let (status, error, reason) = self.hooks.describe(e.into());
        match status {
            401 | 403 => RepError::Unauthorized { status, reason },
            _ => RepError::Protocol(format!("{error}: {reason}")),
        }
    }

    /// A refused document, as the replicator records it.
    fn failure(&self, id: &str, e: impl Into<Error>) -> WriteFailure {
        let (_, error, reason) = self.hooks.describe(e.into());
        WriteFailure {
            id: id.to_string(),
            error,
            reason,
        }
    }

    /// The database, if it exists and the user may read and write it.
    pub(super) fn db(&self) -> RepResult<Arc<Database>> {
        let db = self
            .node
            .couch
            .get(&self.name)
            .map_err(|_| RepError::DbNotFound(format!("could not open {}", self.url)))?;
        let sec = SecurityObject::from_json(&db.props().security);
        if !sec.is_member(&self.user) {
            // As a peer's 401 or 403 reads (see `Remote`): a 403 names only the URL.
            let (status, reason) = match self.user.name {
                None => (
                    401,
                    format!("unauthorized to access or create database {}", self.url),
                ),
                Some(_) => (403, self.url.clone()),
            };
            return Err(RepError::Unauthorized { status, reason });
        }
        Ok(db)
    }
}

/// Where a replication's `since` (a checkpoint's seq, or `0`) stands in the database.
fn seq_of(codec: &SeqCodec, v: &Value) -> RepResult<u64> {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match codec.since(&text) {
        Ok(SeqArg::Seq(n)) => Ok(n),
        _ => Err(RepError::BadRequest(format!("Invalid sequence `{text}`"))),
    }
}

impl Endpoint for LocalDb {
    fn name(&self) -> String {
        self.url.clone()
    }

    async fn info(&self) -> RepResult<PeerInfo> {
        let db = self.db()?;
        Ok(PeerInfo {
            update_seq: Value::String(seqs(&db).update_seq(db.update_seq())),
            instance_start_time: "0".into(),
        })
    }

    async fn create(&self, params: &Map<String, Value>) -> RepResult<()> {
        if self.node.couch.exists(&self.name) {
            return Ok(());
        }
        if params.get("partitioned") == Some(&Value::Bool(true)) {
            return Err(RepError::BadRequest(
                "Partitioned databases are not supported by this Settee version".into(),
            ));
        }
        if !self.user.is_server_admin() {
            return Err(RepError::Unauthorized {
                status: 401,
                reason: format!("unauthorized to access or create database {}", self.url),
            });
        }
        let security = settee_auth::security::default_for(
            self.node
                .config
                .get("couchdb", "default_security")
                .as_deref(),
        );
        let (couch, name) = (self.node.couch.clone(), self.name.clone());
        blocking::<_, Error>(move || Ok(couch.create(&name, security).map(|_| ())?))
            .await
            .map_err(|e| self.rep_error(e))
    }

    async fn get_local(&self, id: &str) -> RepResult<Option<Value>> {
        let db = self.db()?;
        let found = db.local_doc(id).map_err(|e| self.rep_error(e))?;
        Ok(found.map(|d| serde_json::from_slice(&crate::local_json(&d)).unwrap_or(Value::Null)))
    }

    async fn put_local(&self, id: &str, mut body: Value) -> RepResult<String> {
        let db = self.db()?;
        let rev = match body.as_object_mut().and_then(|o| o.shift_remove("_rev")) {
            Some(Value::String(r)) => r.strip_prefix("0-").and_then(|n| n.parse().ok()),
            _ => None,
        };
        let parsed = settee_core::parse_doc(body).map_err(|e| self.rep_error(e))?;
        let update = LocalUpdate {
            id: id.to_string(),
            rev,
            deleted: false,
            body: parsed.body,
        };
        let n = crate::write::put_local(&db, update, false)
            .await
            .map_err(|e| self.rep_error(e))?
            .unwrap_or_default();
        Ok(format!("0-{n}"))
    }

    async fn changes(
        &self,
        since: &Value,
        limit: usize,
        filter: &Filter,
        wait: Wait,
    ) -> RepResult<Changes> {
        let db = self.db()?;
        let codec = seqs(&db);
        let since_n = seq_of(&codec, since)?;
        let filter = match filter {
            Filter::All => ReplicationFilter::All,
            Filter::DocIds(ids) => {
                ReplicationFilter::DocIds(ids.iter().cloned().collect::<HashSet<_>>())
            }
            Filter::Selector(s) => ReplicationFilter::Selector(Arc::new(
                settee_mango::Selector::parse(s)
                    .map_err(|e| RepError::BadRequest(e.to_string()))?,
            )),
            Filter::Design { name, query_params } => ReplicationFilter::Named {
                name: name.clone(),
                query_params: query_params.clone(),
                user: self.user.clone(),
            },
        };
        let wait = match wait {
            Wait::No => None,
            Wait::UpTo(ms) => Some(Duration::from_millis(ms)),
        };
        let (rows, last) = self
            .node
            .changes_for_replication(db, since_n, limit as u64, filter, wait)
            .await
            .map_err(|e| self.rep_error(e))?;
        let rows = rows.iter().filter_map(ChangeRow::from_json).collect();
        let last_seq = if last == since_n {
            since.clone()
        } else {
            Value::String(codec.changes_seq(last))
        };
        Ok(Changes { rows, last_seq })
    }

    async fn revs_diff(&self, revs: Vec<(String, Vec<String>)>) -> RepResult<Vec<Missing>> {
        let db = self.db()?;
        let mut asked = Vec::with_capacity(revs.len());
        for (id, rs) in revs {
            let parsed = rs
                .iter()
                .map(|r| {
                    settee_core::Rev::parse(r)
                        .map_err(|_| RepError::Protocol(format!("bad revision {r}")))
                })
                .collect::<RepResult<Vec<_>>>()?;
            asked.push((id, parsed));
        }
        let diff = blocking::<_, Error>(move || Ok(db.revs_diff(asked)?))
            .await
            .map_err(|e| self.rep_error(e))?;
        Ok(diff
            .into_iter()
            .map(|(id, missing, ancestors)| Missing {
                id,
                revs: missing.iter().map(ToString::to_string).collect(),
                possible_ancestors: ancestors.iter().map(ToString::to_string).collect(),
            })
            .collect())
    }

    async fn bulk_get(&self, wanted: Vec<(String, String)>, fetch: Fetch) -> RepResult<Vec<Doc>> {
        let (db, user) = (self.db()?, self.user.clone());
        let atts = AttOpts {
            inline: fetch.inline,
            encoding_info: !fetch.inline,
            since: Vec::new(),
        };
        blocking::<_, Error>(move || read_revisions(&db, &user, wanted, atts, fetch.stored))
            .await
            .map_err(|e| self.rep_error(e))
    }

    fn takes_stored(&self) -> bool {
        true
    }

    async fn bulk_docs(&self, docs: Vec<Doc>) -> RepResult<Vec<WriteFailure>> {
        let db = self.db()?;
        let mut failures = Vec::new();
        let mut parsed = Vec::with_capacity(docs.len());
        for d in docs {
            let d = match d {
                Doc::Stored(p) => {
                    parsed.push(p);
                    continue;
                }
                Doc::Json(v) => v,
            };
            let id = d
                .get("_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match settee_core::parse_doc(d) {
                Ok(p) if p.revs.is_some() && p.id.is_some() => parsed.push(p),
                Ok(_) => failures
                    .push(self.failure(&id, Error::bad_request("missing _id or _revisions"))),
                Err(e) => failures.push(self.failure(&id, e)),
            }
        }
        failures.extend(self.write_replicated(&db, parsed, Followed::new()).await?);
        Ok(failures)
    }

    /// The content as stored, whatever `gzip` says: the stub asked about came from this
    /// same store.
    async fn attachment(&self, id: &str, rev: &str, name: &str, _gzip: bool) -> RepResult<Content> {
        let db = self.db()?;
        let rev = settee_core::Rev::parse(rev)
            .map_err(|_| RepError::Protocol(format!("bad revision {rev}")))?;
        let (id, name) = (id.to_string(), name.to_string());
        let chunks = blocking::<_, Error>(move || {
            let doc = db.open_doc(&id, Some(&rev))?;
            crate::atts::stored_content(&db, &doc.body, &name)
        })
        .await
        .map_err(|e| self.rep_error(e))?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            for chunk in chunks {
                let item = chunk.map(bytes::Bytes::from).map_err(|e| this.rep_error(e));
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    break;
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    /// Each part is stored as it arrives, as a `multipart/related` upload's parts are
    /// (`attachments::FollowsWriter`), then the revision is admitted and written with
    /// them.
    async fn put_streamed(
        &self,
        doc: Value,
        atts: Vec<Follows>,
    ) -> RepResult<Option<WriteFailure>> {
        let db = self.db()?;
        let id = doc
            .get("_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let entries = doc
            .get("_attachments")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let settings = self.node.write_settings();
        let mut followed = Followed::new();
        for f in atts {
            let Some(Value::Object(entry)) = entries.get(&f.name) else {
                return Err(RepError::Protocol(format!(
                    "{id}: attachment {} has no entry to follow",
                    f.name
                )));
            };
            let name = f.name.clone();
            match store_follows(&db, entry, &settings, f).await? {
                Ok(written) => {
                    followed.insert(name, written);
                }
                Err(refused) => return Ok(Some(self.failure(&id, refused))),
            }
        }
        let parsed = match settee_core::parse_doc(doc) {
            Ok(p) if p.revs.is_some() && p.id.is_some() => p,
            Ok(_) => {
                let e = Error::bad_request("missing _id or _revisions");
                return Ok(Some(self.failure(&id, e)));
            }
            Err(e) => return Ok(Some(self.failure(&id, e))),
        };
        let refused = self.write_replicated(&db, vec![parsed], followed).await?;
        Ok(refused.into_iter().next())
    }
}

impl LocalDb {
    /// Writes replicated revisions (whose `follows` contents are stored already) through
    /// the write path `_bulk_docs` takes; the revisions refused.
    async fn write_replicated(
        &self,
        db: &Arc<Database>,
        docs: Vec<ParsedDoc>,
        followed: Followed,
    ) -> RepResult<Vec<WriteFailure>> {
        let ids: Vec<String> = docs
            .iter()
            .map(|p| p.id.clone().unwrap_or_default())
            .collect();
        let settings = self.node.write_settings();
        let written = settee_docs::write(&settings, db, &self.user, docs, false, followed)
            .await
            .map_err(|e| self.rep_error(e))?;
        Ok(ids
            .iter()
            .zip(written)
            .filter_map(|(id, w)| w.err().map(|e| self.failure(id, e)))
            .collect())
    }
}

/// Stores one attachment's content as it arrives from the source: what was stored, the
/// target's refusal (`attachment_too_large`), or the source's failure (nothing is kept).
async fn store_follows(
    db: &Database,
    entry: &Map<String, Value>,
    settings: &settee_docs::Settings,
    f: Follows,
) -> RepResult<settee_docs::Result<settee_docs::Written>> {
    use futures_util::StreamExt;
    let mut w = FollowsWriter::new(db, entry, &settings.compression, settings.att_limit);
    let mut content = f.content;
    let mut received = 0u64;
    while let Some(chunk) = content.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                w.discard();
                return Err(e);
            }
        };
        received += chunk.len() as u64;
        if let Err(refused) = w.write(&chunk) {
            return Ok(Err(refused));
        }
    }
    if received != f.length {
        w.discard();
        return Err(RepError::Protocol(format!(
            "attachment {}: {received} bytes arrived of {}",
            f.name, f.length
        )));
    }
    Ok(w.finish())
}

/// Revisions of documents as `_bulk_get` reads them for `user` (`revs=true&latest=true`,
/// attachments as `atts` says); a revision that can no longer be read is left out, as
/// `_bulk_get` answers it with an error. With `stored`, revisions without attachments are
/// handed over as stored (unless the user would see them altered).
fn read_revisions(
    db: &Database,
    user: &UserCtx,
    wanted: Vec<(String, String)>,
    atts: AttOpts,
    stored: bool,
) -> Result<Vec<Doc>> {
    let revs_limit = db.props().revs_limit as usize;
    let opts = crate::write::revision_reader(db, user, true);
    let stored = stored && opts.reader.is_none();
    let mut out = Vec::with_capacity(wanted.len());
    for (id, rev) in wanted {
        let Ok(d) = Rev::parse(&rev)
            .map_err(drop)
            .and_then(|r| crate::write::open_latest(db, &id, &r).map_err(drop))
        else {
            continue;
        };
        let doc = if stored && settee_core::split_stored(&d.body).1.is_none() {
            let path = d.info.tree.ancestry(&d.rev);
            Doc::Stored(ParsedDoc {
                id: Some(d.id),
                revs: Some((
                    d.rev.pos,
                    path.into_iter().take(revs_limit.max(1)).collect(),
                )),
                deleted: d.deleted,
                body: d.body,
                atts: None,
                body_term: None,
            })
        } else {
            let rendered = doc_json_with(&d, &opts, atts.render(db, &d.body, 0)?);
            Doc::Json(
                serde_json::from_slice(&rendered).map_err(|e| Error::internal(e.to_string()))?,
            )
        };
        out.push(doc);
    }
    Ok(out)
}
