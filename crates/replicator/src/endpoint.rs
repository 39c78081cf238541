//! The seam between the replication algorithm and the two databases it copies between: an
//! [`Endpoint`] is either a database of this server (read and written in process) or a
//! database of an HTTP peer. Both answer in the protocol's JSON shapes, so the algorithm is
//! the same whatever the pair.
//!
//! Threading contract: an endpoint is shared by the tasks of one replication (`Send +
//! Sync`); its calls may run concurrently.
//!
//! Documents move in two ways (see [`crate::streamed`]): in batches, as JSON with any
//! attachments inline (`bulk_get` → `bulk_docs`), or one at a time with attachment content
//! streamed from the source to the target and never whole in memory (`bulk_get` with
//! stubs → `attachment` → `put_streamed`), as CouchDB's replicator writes documents with
//! attachments.

use crate::Result;
use bytes::Bytes;
use futures_util::Stream;
use serde_json::{json, Map, Value};
use settee_core::ParsedDoc;
use std::future::Future;
use std::pin::Pin;

/// What the replicator needs of a database's info.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    pub update_seq: Value,
    pub instance_start_time: String,
}

/// One row of a changes feed read with `style=all_docs`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeRow {
    pub seq: Value,
    pub id: String,
    /// The document's leaf revisions.
    pub revs: Vec<String>,
    pub deleted: bool,
}

impl ChangeRow {
    /// A row of a `_changes` response.
    pub fn from_json(v: &Value) -> Option<ChangeRow> {
        Some(ChangeRow {
            seq: v.get("seq")?.clone(),
            id: v.get("id")?.as_str()?.to_string(),
            revs: v
                .get("changes")?
                .as_array()?
                .iter()
                .filter_map(|c| Some(c.get("rev")?.as_str()?.to_string()))
                .collect(),
            deleted: v.get("deleted") == Some(&Value::Bool(true)),
        })
    }
}

/// A batch of changes and the seq to continue from.
#[derive(Clone, Debug)]
pub struct Changes {
    pub rows: Vec<ChangeRow>,
    pub last_seq: Value,
}

/// Which changes a replication copies.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Filter {
    #[default]
    All,
    /// `doc_ids`: only these documents.
    DocIds(Vec<String>),
    /// `selector`: documents a Mango selector matches.
    Selector(Value),
    /// `filter`: a design document's filter function (`ddoc/name`), with `query_params`.
    Design {
        name: String,
        query_params: Map<String, Value>,
    },
}

/// How long a changes read may wait for a change when there is none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wait {
    /// Answer at once.
    No,
    /// Wait up to this many milliseconds for the first change (`feed=longpoll`).
    UpTo(u64),
}

/// The revisions of a document the target lacks (`_revs_diff`).
#[derive(Clone, Debug, PartialEq)]
pub struct Missing {
    pub id: String,
    pub revs: Vec<String>,
    pub possible_ancestors: Vec<String>,
}

/// A document revision on its way from the source to the target.
#[derive(Clone, Debug, PartialEq)]
pub enum Doc {
    /// The protocol's JSON: `_id`, `_rev`, `_revisions`, attachments inline. What peers
    /// send and take.
    Json(Value),
    /// A revision of one of this server's databases as it is stored (`revs`: its path,
    /// cut to the source's `_revs_limit`), without attachments: another of this server's
    /// databases takes it as it is, with no rendering and parsing in between.
    Stored(ParsedDoc),
}

impl Doc {
    /// The protocol's JSON for the revision.
    pub fn into_json(self) -> Value {
        let d = match self {
            Doc::Json(v) => return v,
            Doc::Stored(d) => d,
        };
        let mut m = Map::new();
        m.insert(
            "_id".into(),
            Value::String(d.id.clone().unwrap_or_default()),
        );
        if let Some((pos, ids)) = &d.revs {
            if let Some(first) = ids.first() {
                m.insert("_rev".into(), Value::String(format!("{pos}-{first}")));
            }
            let ids: Vec<Value> = ids.iter().map(|i| Value::String(i.to_string())).collect();
            m.insert("_revisions".into(), json!({"start": pos, "ids": ids}));
        }
        if d.deleted {
            m.insert("_deleted".into(), Value::Bool(true));
        }
        let body: Map<String, Value> =
            serde_json::from_slice(settee_core::split_stored(&d.body).0).unwrap_or_default();
        m.extend(body);
        Value::Object(m)
    }
}

/// How [`Endpoint::bulk_get`] hands over revisions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fetch {
    /// Attachment content inline (`attachments=true`); else stubs carrying `encoding` and
    /// `encoded_length` for content stored gzip-encoded (`att_encoding_info=true`).
    pub inline: bool,
    /// The target [`takes_stored`](Endpoint::takes_stored): a database of this server may
    /// hand over revisions without attachments as [`Doc::Stored`].
    pub stored: bool,
}

/// A document revision the target refused (`_bulk_docs` with `new_edits: false`).
#[derive(Clone, Debug, PartialEq)]
pub struct WriteFailure {
    pub id: String,
    pub error: String,
    pub reason: String,
}

/// An attachment's content on its way from the source to the target: its bytes as stored
/// (gzip-encoded content stays encoded), in chunks of a size the producer chooses. An `Err`
/// item ends it unfinished; a consumer must then drop what it stored.
pub type Content = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send + Sync>>;

/// The content of one attachment of a streamed write, which follows the document.
pub struct Follows {
    /// The attachment's name: its entry in the document's `_attachments` is marked
    /// `"follows": true`.
    pub name: String,
    /// How many bytes `content` yields (the stored length: `encoded_length` for
    /// gzip-encoded content).
    pub length: u64,
    pub content: Content,
}

/// A database the replicator reads from or writes to.
pub trait Endpoint: Send + Sync {
    /// The database's name as replication ids and logs show it: the URL of a remote
    /// database (credentials removed), the name of a local one.
    fn name(&self) -> String;

    /// The database's info; [`crate::Error::DbNotFound`] when it does not exist.
    fn info(&self) -> impl Future<Output = Result<PeerInfo>> + Send;

    /// Creates the database (`create_target`), with CouchDB's creation parameters; an
    /// existing database is fine.
    fn create(&self, params: &Map<String, Value>) -> impl Future<Output = Result<()>> + Send;

    /// A `_local` document (`id` includes `_local/`).
    fn get_local(&self, id: &str) -> impl Future<Output = Result<Option<Value>>> + Send;

    /// Writes a `_local` document (its `_rev`, if any, is the one it replaces); the new
    /// `_rev`.
    fn put_local(&self, id: &str, doc: Value) -> impl Future<Output = Result<String>> + Send;

    /// Changes after `since`, at most `limit`, every leaf revision of each document.
    fn changes(
        &self,
        since: &Value,
        limit: usize,
        filter: &Filter,
        wait: Wait,
    ) -> impl Future<Output = Result<Changes>> + Send;

    /// The revisions of `revs` this database lacks.
    fn revs_diff(
        &self,
        revs: Vec<(String, Vec<String>)>,
    ) -> impl Future<Output = Result<Vec<Missing>>> + Send;

    /// The documents at these revisions, with `_revisions` (`_bulk_get` with
    /// `revs=true&latest=true`), attachments as `fetch` asks; a revision that can no
    /// longer be read is left out.
    fn bulk_get(
        &self,
        wanted: Vec<(String, String)>,
        fetch: Fetch,
    ) -> impl Future<Output = Result<Vec<Doc>>> + Send;

    /// Whether this endpoint is a database of this server, which takes [`Doc::Stored`]
    /// revisions as they are.
    fn takes_stored(&self) -> bool {
        false
    }

    /// Writes replicated revisions (`_bulk_docs` with `new_edits: false`); the documents it
    /// refused.
    fn bulk_docs(&self, docs: Vec<Doc>) -> impl Future<Output = Result<Vec<WriteFailure>>> + Send;

    /// The content of attachment `name` of revision `rev` of document `id`, streamed as
    /// stored: `gzip` (the stub's `encoding`) asks for the stored gzip bytes, not the
    /// decoded ones.
    fn attachment(
        &self,
        id: &str,
        rev: &str,
        name: &str,
        gzip: bool,
    ) -> impl Future<Output = Result<Content>> + Send;

    /// Writes one replicated revision (`new_edits=false`) whose `_attachments` entries
    /// marked `follows` get their content from `atts`, in the same order (the others are
    /// stubs of content the target holds); `Some` if the target refused it. Implementations
    /// consume `atts` in order and drop them when done or failing, so the producer never
    /// waits on a part nobody reads.
    fn put_streamed(
        &self,
        doc: Value,
        atts: Vec<Follows>,
    ) -> impl Future<Output = Result<Option<WriteFailure>>> + Send;
}
