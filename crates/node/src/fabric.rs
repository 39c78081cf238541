//! The operations a request can ask of a node, by database name, as one trait: the local
//! [`Node`] implements it (behind its `Arc`), and a cluster coordinator is to implement it
//! too, fanning each call out to shard copies and merging their answers (CouchDB's
//! `fabric`). The conformance suites in `tests/` run through it.
//!
//! Threading contract: reads block (storage reads, index updates, JavaScript), so async
//! callers run them on a blocking thread. Writes return a [`Fut`]: they wait for a
//! database writer's group commit, which holds no thread. Rows leave through `out` as
//! CouchDB's JSON; `out` returns false when the reader has gone, and the call then stops
//! early and returns `Ok`. Implementations are `Send + Sync`.
//!
//! `http` reaches a database through [`Fabric::open_db`]'s [`DbRef`]; the endpoints whose
//! work is not yet behind the trait take the database's handle from [`DbRef::engine`],
//! which a clustered database (one this node holds only copies of) does not have.
//!
//! Sequences: a feed's `ChangesOpts` carries the database's `SeqCodec` ([`DbRef::seqs`]);
//! the node's rows and ends give its counter, a coordinator's its packed vector
//! ([`ShownSeq`]). Outside the trait, as in CouchDB (where they are beside `fabric`, not in it):
//! the replication manager, the configuration, statistics, users and `_rewrite`.

use crate::all_docs::{self, Namespace};
use crate::att_read::{self, AttInfo};
use crate::att_write::AttUpload;
use crate::changes::{self, ChangesOpts, FeedOut, FilterSpec, Live, ShownSeq};
use crate::dbs::{CreateDb, Limit, NameRange};
use crate::design_filter::ReqInfo;
use crate::list::{ListCall, Piece};
use crate::mango_index::{BulkDeleted, Created};
use crate::read::{Read, ReadOpts, Revision};
use crate::render::{FnCall, Shown, Updated};
use crate::write::{self, BulkAnswer, BulkDocs, BulkEntry, BulkGetItem, BulkGetOpts, WriteOpts};
use crate::{Node, Result};
use futures_util::future::BoxFuture;
use serde_json::Value;
use settee_auth::UserCtx;
use settee_core::{ParsedDoc, Rev};
use settee_db::{Database, LocalDoc, LocalUpdate, RevsDiff};
use settee_mango::index::Index;
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_wire::mrargs::MrArgs;
use settee_wire::path::Endpoint;
use std::sync::Arc;

/// Where a call's rows go; false: stop, the reader has gone.
pub type Out<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// The request a filter function is told about, made when one asks for it.
pub type ReqFn<'a> = Box<dyn FnOnce() -> ReqInfo + Send + 'a>;

/// A write's answer, once committed.
pub type Fut<'a, T> = BoxFuture<'a, Result<T>>;

/// Where a normal `_changes` feed ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedEnd {
    pub last_seq: ShownSeq,
    pub pending: u64,
}

/// How far a database's creation or deletion got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    /// Every copy.
    All,
    /// Not every copy (a member down): CouchDB's `accepted`, a 202.
    Some,
}

/// A document write's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// The new revision; `None` when acknowledged early (`batch=ok`) or when a replicated
    /// revision needs none.
    pub rev: Option<Rev>,
    /// Fewer copies than the write quorum (`w`) hold it yet, though at least one does:
    /// CouchDB's 202 `accepted`.
    pub accepted: bool,
}

/// A `_purge`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Purged {
    /// Each id asked for, in order, with the revisions purged.
    pub ids: Vec<(String, Vec<Rev>)>,
    /// Fewer copies than the write quorum agree on some id's (a 202).
    pub accepted: bool,
    /// Ids of a clustered database that no copy could purge (by their place in `ids`,
    /// where their revisions are empty), each with its entry's `error` and `reason`: the
    /// request answers them as CouchDB's `fabric_doc_purge` does, each id on its own, with
    /// status 500.
    pub failed: std::collections::BTreeMap<usize, (String, String)>,
}

/// A `COPY`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    /// The destination's new revision (`0-N` for a local document).
    pub rev: String,
    /// Fewer copies than the write quorum hold it yet (a 202).
    pub accepted: bool,
}

/// A database a request names, as [`Fabric::open_db`] finds it: its name and properties,
/// and its handle when this node holds it whole (not as shard copies).
#[derive(Clone)]
pub struct DbRef {
    pub name: String,
    pub partitioned: bool,
    local: Option<Arc<Database>>,
}

impl DbRef {
    /// A database this node holds whole.
    pub fn on_node(db: Arc<Database>) -> DbRef {
        DbRef {
            name: db.name.clone(),
            partitioned: db.props().partitioned,
            local: Some(db),
        }
    }

    /// A database held as shard copies across a cluster.
    pub fn clustered(name: &str, partitioned: bool) -> DbRef {
        DbRef {
            name: name.to_owned(),
            partitioned,
            local: None,
        }
    }

    /// How the feeds of this database write and read their sequences: a clustered
    /// database's are vectors its coordinator packs and resolves.
    pub fn seqs(&self) -> settee_core::SeqCodec {
        match &self.local {
            Some(db) => crate::seqs(db),
            None => settee_core::SeqCodec::clustered(),
        }
    }

    /// The database's handle on this node, for the work of `what` that is not yet behind
    /// the fabric: `not_implemented` for a clustered database.
    pub fn engine(&self, what: &'static str) -> Result<&Arc<Database>> {
        self.local.as_ref().ok_or(crate::Error::NotOnCluster(what))
    }
}

/// The operations of a node, by database name, for `user`.
pub trait Fabric: Send + Sync {
    /// The database `name` (`not_found` when there is none).
    fn open_db(&self, name: &str) -> Result<DbRef>;

    /// Whether `user` may call `endpoint` with `method` (see [`crate::access`]).
    fn authorize(&self, endpoint: &Endpoint, method: &str, user: &UserCtx) -> Result<()>;

    /// `_all_dbs`: the names of the databases in `range`.
    fn all_dbs(&self, range: &NameRange) -> Result<Vec<String>>;

    /// `_dbs_info`: per key, in order, its database's information or `not_found`.
    fn dbs_info(&self, keys: Vec<Value>) -> Result<Vec<Value>>;

    /// Where the database's documents are (`_shards`, `_shards/{docid}`).
    fn shards(&self, db: &str, id: Option<&str>) -> Result<Value>;

    /// A database property a database admin sets.
    fn get_limit(&self, db: &str, which: Limit) -> Result<u64>;

    /// Sets a database property a database admin sets.
    fn set_limit(&self, db: &str, which: Limit, n: u64) -> Result<()>;

    /// Compacts the database in the background (`_compact`).
    fn compact_db(&self, db: &str) -> Result<()>;

    /// Creates database `name`.
    fn create_db(&self, name: &str, opts: CreateDb) -> Result<Reached>;

    /// Deletes database `name`.
    fn delete_db(&self, name: &str) -> Result<Reached>;

    /// The database's security object.
    fn get_security(&self, db: &str) -> Result<Value>;

    /// Sets the database's security object.
    fn set_security(&self, db: &str, security: Value) -> Result<()>;

    /// The database's info (`GET /{db}`).
    fn db_info(&self, db: &str) -> Result<Value>;

    /// A partition's info (`GET /{db}/_partition/{partition}`, CouchDB's
    /// `fabric_db_partition_info`).
    fn partition_info(&self, db: &str, partition: &str) -> Result<Value>;

    /// `_all_docs` (`_design_docs`, `_local_docs`): the whole response object.
    fn all_docs(
        &self,
        db: &str,
        user: &UserCtx,
        q: all_docs::Query,
        ns: Namespace,
        out: Out<'_>,
    ) -> Result<()>;

    /// A view query of `_design/{ddoc}`: the whole response object.
    fn query_view(
        &self,
        db: &str,
        user: &UserCtx,
        ddoc: &str,
        view: &str,
        args: MrArgs,
        out: Out<'_>,
    ) -> Result<()>;

    /// A Mango `_find`: the whole response object.
    fn find(&self, db: &str, user: &UserCtx, opts: &FindOpts, out: Out<'_>) -> Result<()>;

    /// Resolves a feed's filter (CouchDB's `configure_filter`, before any feed starts):
    /// `opts` with the filter `spec` names (`req`, asked for only by a filter function:
    /// the request it is told about) and `user`'s view of `_replicator` credentials.
    fn changes_filter<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        spec: FilterSpec,
        opts: ChangesOpts,
        req: ReqFn<'a>,
    ) -> Fut<'a, ChangesOpts>;

    /// A normal `_changes` feed (`opts` from [`Fabric::changes_filter`]): each row with
    /// the seq it shows, then where the feed ends.
    fn changes(
        &self,
        db: &str,
        opts: &ChangesOpts,
        row: &mut dyn FnMut(Option<ShownSeq>, &[u8]) -> bool,
    ) -> Result<FeedEnd>;

    /// A longpoll or continuous feed (`opts` from [`Fabric::changes_filter`]), run to its
    /// end: rows, waits, heartbeats and the end (or the error it ends with) go to `out`.
    fn live_changes<'a>(
        &'a self,
        db: &'a str,
        opts: ChangesOpts,
        live: Live,
        out: Box<dyn FeedOut>,
    ) -> BoxFuture<'a, ()>;

    /// Writes one document: its new revision (see [`Written`]).
    fn update_doc<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
    ) -> Fut<'a, Written>;

    /// Writes one document sent as `multipart/related`: the content of its attachments
    /// marked `follows`, as sent, in `parts` (name, content), held in memory.
    fn update_doc_related<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
        parts: Vec<(String, bytes::Bytes)>,
    ) -> Fut<'a, Written>;

    /// `_bulk_docs`.
    fn bulk_docs<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        req: BulkDocs,
    ) -> Fut<'a, BulkAnswer>;

    /// Writes a local document: its new `N` of `0-N`, `None` when acknowledged early.
    fn put_local<'a>(
        &'a self,
        db: &'a str,
        update: LocalUpdate,
        batch: bool,
    ) -> Fut<'a, Option<u64>>;

    /// `_purge`: each id asked for, in order, with the revisions purged; accepted when
    /// fewer than `w` copies agree on an id's.
    fn purge<'a>(
        &'a self,
        db: &'a str,
        asked: Vec<(String, Vec<Rev>)>,
        w: Option<u32>,
    ) -> Fut<'a, Purged>;

    /// `COPY`: revision `rev` of document `id` (a local document when `_local/…`)
    /// written as `dest` at `dest_rev`; the copy's revision.
    fn copy_doc<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        source: (&'a str, Option<Rev>),
        dest: (&'a str, Option<Rev>),
    ) -> Fut<'a, Copied>;

    /// A document (`GET /{db}/{docid}`).
    fn open_doc(&self, db: &str, user: &UserCtx, id: &str, opts: &ReadOpts) -> Result<Read>;

    /// A document's revisions (`open_revs`: `all` or a JSON list).
    fn open_revs(
        &self,
        db: &str,
        user: &UserCtx,
        id: &str,
        wanted: &str,
        opts: &ReadOpts,
    ) -> Result<Vec<Revision>>;

    /// A show function's answer (`matches`: whether the client's `If-None-Match` names an
    /// ETag).
    fn show(
        &self,
        db: &str,
        call: &FnCall,
        accept: Option<&str>,
        matches: &dyn Fn(&str) -> bool,
    ) -> Result<Shown>;

    /// An update function's answer, its document written as `user` (`refused`: asked for
    /// with GET).
    fn update<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        call: FnCall,
        refused: bool,
    ) -> Fut<'a, Updated>;

    /// A local document (404 `missing` when there is none).
    fn open_local(&self, db: &str, id: &str) -> Result<LocalDoc>;

    /// `_bulk_get`: each of `items` (`{"id","rev"}`) answered in order.
    fn bulk_get(
        &self,
        db: &str,
        user: &UserCtx,
        items: &[Value],
        opts: BulkGetOpts,
        out: &mut dyn FnMut(BulkGetItem) -> bool,
    ) -> Result<()>;

    /// `_revs_diff`: for each id, the revisions missing and their possible ancestors.
    fn revs_diff(&self, db: &str, asked: Vec<(String, Vec<Rev>)>) -> Result<RevsDiff>;

    /// `_list`: a list function over a view's (or `_all_docs`') rows, its response's
    /// pieces arriving on the receiver as the function sends them.
    fn list<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        call: ListCall,
    ) -> Fut<'a, tokio::sync::mpsc::Receiver<Piece>>;

    /// Attachment `name` of revision `rev` (the winner without one) of document `id`.
    fn open_attachment(&self, db: &str, id: &str, name: &str, rev: Option<&Rev>)
        -> Result<AttInfo>;

    /// Sends `piece` of an attachment's content (as [`Fabric::open_attachment`] found it).
    fn attachment_content(
        &self,
        db: &str,
        att: &AttInfo,
        piece: att_read::Piece,
        out: Out<'_>,
    ) -> Result<()>;

    /// Stores an attachment's content as it arrives and puts it into a revision: the new
    /// revision (always one), accepted below `up.w` (see [`Written`]).
    fn upload_attachment<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        id: &'a str,
        up: AttUpload<'a>,
    ) -> Fut<'a, Written>;

    /// Removes attachment `name` from revision `rev`: the new revision (always one),
    /// accepted below `w`.
    fn delete_attachment<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        id: &'a str,
        name: &'a str,
        rev: Option<Rev>,
        w: Option<u32>,
    ) -> Fut<'a, Written>;

    /// `POST …/_view/{view}/queries`: each query object over `base`, all checked before
    /// any runs; each one's response to `out` with its place.
    #[allow(clippy::too_many_arguments)]
    fn view_queries(
        &self,
        db: &str,
        user: &UserCtx,
        ddoc: &str,
        view: &str,
        base: MrArgs,
        queries: &[Value],
        out: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> Result<()>;

    /// A design document's index information (`_design/{ddoc}/_info`).
    fn design_info(&self, db: &str, ddoc: &str) -> Result<Value>;

    /// Compacts a design document's index in the background (`_compact/{ddoc}`).
    fn compact_design(&self, db: &str, ddoc: &str) -> Result<()>;

    /// Removes the indexes no design document uses any more (`_view_cleanup`).
    fn view_cleanup(&self, db: &str) -> Result<()>;

    /// `_explain`: how `_find` would answer `opts`.
    fn explain(&self, db: &str, opts: &FindOpts) -> Result<Value>;

    /// Every Mango index of the database, in listing order (`_all_docs` first).
    fn indexes(&self, db: &str) -> Result<Vec<Index>>;

    /// Creates a json index (`POST /{db}/_index`).
    fn create_index<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        opts: IndexOpts,
    ) -> Fut<'a, Created>;

    /// Deletes json index `name` of design document `ddoc`; false when it has none such.
    fn delete_index<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        ddoc: &'a str,
        name: Option<&'a str>,
    ) -> Fut<'a, bool>;

    /// `_index/_bulk_delete`: every json index of each design document named.
    fn bulk_delete_indexes<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        ddocs: Vec<String>,
    ) -> Fut<'a, BulkDeleted>;
}

impl Fabric for Arc<Node> {
    fn open_db(&self, name: &str) -> Result<DbRef> {
        Ok(DbRef::on_node(self.couch.get(name)?))
    }

    fn authorize(&self, endpoint: &Endpoint, method: &str, user: &UserCtx) -> Result<()> {
        crate::access::authorize(self, endpoint, method, user)
    }

    fn all_dbs(&self, range: &NameRange) -> Result<Vec<String>> {
        Ok(Node::all_dbs(self, range))
    }

    fn dbs_info(&self, keys: Vec<Value>) -> Result<Vec<Value>> {
        Ok(Node::dbs_info(self, keys))
    }

    fn shards(&self, db: &str, id: Option<&str>) -> Result<Value> {
        Node::shards(self, &*self.couch.get(db)?, id)
    }

    fn get_limit(&self, db: &str, which: Limit) -> Result<u64> {
        Ok(Node::get_limit(self, &*self.couch.get(db)?, which))
    }

    fn set_limit(&self, db: &str, which: Limit, n: u64) -> Result<()> {
        Node::set_limit(self, &*self.couch.get(db)?, which, n)
    }

    fn compact_db(&self, db: &str) -> Result<()> {
        Node::compact(self, self.couch.get(db)?);
        Ok(())
    }

    fn create_db(&self, name: &str, opts: CreateDb) -> Result<Reached> {
        Node::create_db(self, name, opts).map(|()| Reached::All)
    }

    fn delete_db(&self, name: &str) -> Result<Reached> {
        Node::delete_db(self, name).map(|()| Reached::All)
    }

    fn get_security(&self, db: &str) -> Result<Value> {
        Ok(self.couch.get(db)?.props().security.clone())
    }

    fn set_security(&self, db: &str, security: Value) -> Result<()> {
        Node::set_security(self, &*self.couch.get(db)?, security)
    }

    fn db_info(&self, db: &str) -> Result<Value> {
        let db = self.couch.get(db)?;
        Ok(Node::db_info(self, &db))
    }

    /// Sizes are those Settee keeps per database, restricted to the partition:
    /// `external` the bytes of current bodies, `active` those of live keys and values,
    /// uncompressed.
    fn partition_info(&self, db: &str, partition: &str) -> Result<Value> {
        let db = self.couch.get(db)?;
        let s = db.partition_stats(partition)?;
        Ok(serde_json::json!({
            "db_name": db.name,
            "sizes": {"active": s.active, "external": s.external},
            "partition": partition,
            "doc_count": s.doc_count,
            "doc_del_count": s.doc_del_count,
        }))
    }

    fn all_docs(
        &self,
        db: &str,
        user: &UserCtx,
        q: all_docs::Query,
        ns: Namespace,
        out: Out<'_>,
    ) -> Result<()> {
        let db = self.couch.get(db)?;
        let q = q.for_reader(&self.config, &db, user);
        all_docs::run(&db, &q, ns, out)
    }

    fn query_view(
        &self,
        db: &str,
        user: &UserCtx,
        ddoc: &str,
        view: &str,
        args: MrArgs,
        out: Out<'_>,
    ) -> Result<()> {
        let db = self.couch.get(db)?;
        let (g, n) = self.view_group(&db, ddoc, view)?;
        self.run_view(&db, user, g, n, args, out)
    }

    fn find(&self, db: &str, user: &UserCtx, opts: &FindOpts, out: Out<'_>) -> Result<()> {
        let db = self.couch.get(db)?;
        let plan = self.plan_find(&db, opts, false)?;
        let reader = crate::replicator_read::reader(&db, user);
        Node::find(self, &db, opts, &plan, reader, out)
    }

    fn changes_filter<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        spec: FilterSpec,
        mut opts: ChangesOpts,
        req: ReqFn<'a>,
    ) -> Fut<'a, ChangesOpts> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            opts.filter = Node::changes_filter(self, &db, spec, &mut opts, req).await?;
            opts.reader = crate::replicator_read::reader(&db, user);
            Ok(opts)
        })
    }

    fn changes(
        &self,
        db: &str,
        opts: &ChangesOpts,
        row: &mut dyn FnMut(Option<ShownSeq>, &[u8]) -> bool,
    ) -> Result<FeedEnd> {
        let db = self.couch.get(db)?;
        let (last, pending) =
            changes::normal(&db, opts, &mut |seq, r| row(seq.map(ShownSeq::Node), &r))?;
        Ok(FeedEnd {
            last_seq: ShownSeq::Node(last),
            pending,
        })
    }

    fn live_changes<'a>(
        &'a self,
        db: &'a str,
        opts: ChangesOpts,
        live: Live,
        out: Box<dyn FeedOut>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match self.couch.get(db) {
                Ok(db) => changes::live(db, opts, live, out).await,
                Err(e) => out.end(Err(e.into())).await,
            }
        })
    }

    fn update_doc<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
    ) -> Fut<'a, Written> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            // One copy: a `w` above one is never met (CouchDB's single node answers 202).
            let accepted = write::short_of(opts.w, 1);
            let rev = Node::update_doc_with(self, db, user, doc, opts, Default::default()).await?;
            Ok(Written { rev, accepted })
        })
    }

    fn update_doc_related<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
        parts: Vec<(String, bytes::Bytes)>,
    ) -> Fut<'a, Written> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            let followed = crate::att_write::store_parts(self, &db, &doc, parts)?;
            let accepted = write::short_of(opts.w, 1);
            let rev = Node::update_doc_with(self, db, user, doc, opts, followed).await?;
            Ok(Written { rev, accepted })
        })
    }

    fn bulk_docs<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        req: BulkDocs,
    ) -> Fut<'a, BulkAnswer> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            let short = write::short_of(req.w, 1);
            let answer = Node::write_bulk(self, &db, user, req).await?;
            Ok(match answer {
                BulkAnswer::Entries(entries) if short => BulkAnswer::Entries(
                    (entries.into_iter())
                        .map(|e| match e {
                            BulkEntry::Written { id, rev } => BulkEntry::Accepted { id, rev },
                            other => other,
                        })
                        .collect(),
                ),
                other => other,
            })
        })
    }

    fn put_local<'a>(
        &'a self,
        db: &'a str,
        update: LocalUpdate,
        batch: bool,
    ) -> Fut<'a, Option<u64>> {
        Box::pin(async move { write::put_local(&self.couch.get(db)?, update, batch).await })
    }

    fn purge<'a>(
        &'a self,
        db: &'a str,
        asked: Vec<(String, Vec<Rev>)>,
        w: Option<u32>,
    ) -> Fut<'a, Purged> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            Ok(Purged {
                ids: Node::purge_revs(self, &db, asked).await?,
                accepted: write::short_of(w, 1),
                failed: Default::default(),
            })
        })
    }

    fn copy_doc<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        source: (&'a str, Option<Rev>),
        dest: (&'a str, Option<Rev>),
    ) -> Fut<'a, Copied> {
        Box::pin(async move {
            let rev = Node::copy_doc(self, db, user, source, dest).await?;
            Ok(Copied {
                rev,
                accepted: false,
            })
        })
    }

    fn open_doc(&self, db: &str, user: &UserCtx, id: &str, opts: &ReadOpts) -> Result<Read> {
        self.read_doc(&*self.couch.get(db)?, user, id, opts)
    }

    fn open_revs(
        &self,
        db: &str,
        user: &UserCtx,
        id: &str,
        wanted: &str,
        opts: &ReadOpts,
    ) -> Result<Vec<Revision>> {
        Node::open_revs(self, &*self.couch.get(db)?, user, id, wanted, opts)
    }

    fn show(
        &self,
        db: &str,
        call: &FnCall,
        accept: Option<&str>,
        matches: &dyn Fn(&str) -> bool,
    ) -> Result<Shown> {
        Node::show(self, &self.couch.get(db)?, call, accept, matches)
    }

    fn update<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        call: FnCall,
        refused: bool,
    ) -> Fut<'a, Updated> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            Node::update(self, db, user, call, refused).await
        })
    }

    fn open_local(&self, db: &str, id: &str) -> Result<LocalDoc> {
        write::open_local(&*self.couch.get(db)?, id)
    }

    fn bulk_get(
        &self,
        db: &str,
        user: &UserCtx,
        items: &[Value],
        opts: BulkGetOpts,
        out: &mut dyn FnMut(BulkGetItem) -> bool,
    ) -> Result<()> {
        let db = self.couch.get(db)?;
        let doc = write::revision_reader(&db, user, opts.revs);
        for item in items {
            if !out(write::bulk_get_one(&db, item, &doc, &opts)?) {
                break;
            }
        }
        Ok(())
    }

    fn revs_diff(&self, db: &str, asked: Vec<(String, Vec<Rev>)>) -> Result<RevsDiff> {
        Ok(self.couch.get(db)?.revs_diff(asked)?)
    }

    fn view_queries(
        &self,
        db: &str,
        user: &UserCtx,
        ddoc: &str,
        view: &str,
        base: MrArgs,
        queries: &[Value],
        out: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> Result<()> {
        let db = self.couch.get(db)?;
        Node::view_queries(self, &db, user, (ddoc, view), base, queries, out)
    }

    fn design_info(&self, db: &str, ddoc: &str) -> Result<Value> {
        Node::design_info(self, &*self.couch.get(db)?, ddoc)
    }

    fn compact_design(&self, db: &str, ddoc: &str) -> Result<()> {
        Node::compact_design(self, &self.couch.get(db)?, ddoc)
    }

    fn view_cleanup(&self, db: &str) -> Result<()> {
        Node::view_cleanup(self, &*self.couch.get(db)?)
    }

    fn explain(&self, db: &str, opts: &FindOpts) -> Result<Value> {
        let db = self.couch.get(db)?;
        let plan = self.plan_find(&db, opts, true)?;
        Ok(crate::find::explain(&db, opts, &plan))
    }

    fn indexes(&self, db: &str) -> Result<Vec<Index>> {
        crate::find::indexes(&*self.couch.get(db)?)
    }

    fn create_index<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        opts: IndexOpts,
    ) -> Fut<'a, Created> {
        Box::pin(Node::create_index(self, db, user, opts))
    }

    fn delete_index<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        ddoc: &'a str,
        name: Option<&'a str>,
    ) -> Fut<'a, bool> {
        Box::pin(Node::delete_index(self, db, user, ddoc, name))
    }

    fn bulk_delete_indexes<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        ddocs: Vec<String>,
    ) -> Fut<'a, BulkDeleted> {
        Box::pin(Node::bulk_delete_indexes(self, db, user, ddocs))
    }

    fn list<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        call: ListCall,
    ) -> Fut<'a, tokio::sync::mpsc::Receiver<Piece>> {
        Box::pin(Node::list(self, db, user, call))
    }

    fn open_attachment(
        &self,
        db: &str,
        id: &str,
        name: &str,
        rev: Option<&Rev>,
    ) -> Result<AttInfo> {
        crate::att_read::open(&*self.couch.get(db)?, id, name, rev)
    }

    fn attachment_content(
        &self,
        db: &str,
        att: &AttInfo,
        piece: att_read::Piece,
        out: Out<'_>,
    ) -> Result<()> {
        crate::att_read::content(&*self.couch.get(db)?, att, piece, out)
    }

    fn upload_attachment<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        id: &'a str,
        up: AttUpload<'a>,
    ) -> Fut<'a, Written> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            // One copy: a `w` above one is never met (CouchDB's single node answers 202).
            let accepted = write::short_of(up.w, 1);
            let rev = Node::upload_attachment(self, db, user, id, up).await?;
            Ok(Written {
                rev: Some(rev),
                accepted,
            })
        })
    }

    fn delete_attachment<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        id: &'a str,
        name: &'a str,
        rev: Option<Rev>,
        w: Option<u32>,
    ) -> Fut<'a, Written> {
        Box::pin(async move {
            let db = self.couch.get(db)?;
            let rev = Node::delete_attachment(self, db, user, id, rev, name).await?;
            Ok(Written {
                rev: Some(rev),
                accepted: write::short_of(w, 1),
            })
        })
    }
}
