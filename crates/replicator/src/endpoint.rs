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
//! streamed from the source to the target and never whole in memory (`bulk_get_stubs` →
//! `attachment` → `put_streamed`), as CouchDB's replicator writes documents with
//! attachments.

use crate::Result;
use bytes::Bytes;
use futures_util::Stream;
use serde_json::{Map, Value};
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

    /// The documents at these revisions, with `_revisions` and attachments inline
    /// (`_bulk_get` with `revs=true&attachments=true&latest=true`); a revision that can no
    /// longer be read is left out.
    fn bulk_get(
        &self,
        wanted: Vec<(String, String)>,
    ) -> impl Future<Output = Result<Vec<Value>>> + Send;

    /// Writes replicated revisions (`_bulk_docs` with `new_edits: false`); the documents it
    /// refused.
    fn bulk_docs(&self, docs: Vec<Value>)
        -> impl Future<Output = Result<Vec<WriteFailure>>> + Send;

    /// As [`Endpoint::bulk_get`], but with attachment stubs instead of content, carrying
    /// `encoding` and `encoded_length` for content stored gzip-encoded
    /// (`att_encoding_info=true`).
    fn bulk_get_stubs(
        &self,
        wanted: Vec<(String, String)>,
    ) -> impl Future<Output = Result<Vec<Value>>> + Send;

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
