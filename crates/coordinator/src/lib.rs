//! The cluster's coordinator (CouchDB's `fabric` over `mem3`): [`Coordinator`] is the
//! [`Fabric`] a cluster member's HTTP layer calls.
//!
//! A database with a shard map in the cluster state (etcd) is a clustered one: its
//! documents live in `q` ranges, each range in `n` copies, each copy a database of its own
//! on the node that holds it (`shards/{range}/{db}.{created}`). The coordinator serves
//! such a database from its copies, through the copies' own HTTP API on their members
//! (signed as this member, on behalf of the client: the copy applies the client's
//! rights), and combines their answers as CouchDB does ([`merge`]). Every other database
//! (system databases, shard copies themselves, databases created before the node joined)
//! is this node's own, and every call on it goes to the local node unchanged.
//!
//! What a clustered database serves so far: creation and deletion, its information,
//! `_all_dbs`/`_dbs_info`/`_shards`, single JSON documents (`PUT`, `POST`, `GET`,
//! `DELETE`) and `_bulk_docs` with CouchDB's write quorum (`w`, 202 below it),
//! newest-wins reads with read repair, `_all_docs`/`_design_docs` merged across ranges
//! ([`all_docs`]), `_bulk_get`/`_revs_diff`/`_missing_revs` ([`revs`]), the security
//! object kept on every copy, which authorizes its requests ([`security`]), local
//! documents and `_local_docs` ([`local`]), `_changes` with resumable vector sequences
//! ([`changes`], [`feed`]), views, the design document given to each range's copy
//! ([`views`]), Mango indexes and queries, the index design documents given to each
//! range's copy ([`mango`]), `open_revs` ([`revs`]) and attachment reads ([`atts`]),
//! show, list and update functions run here over the cluster's reads, writes and view
//! merge ([`design`]), filter functions and `_view` filters on `_changes`, the design
//! document given to every copy ([`changes`]). Writes to this member's copies validate
//! with the whole clustered database's `validate_doc_update` functions, which this
//! member reads and keeps, told by the coordinator that writes a design document
//! ([`ddocs`]). Attachment uploads and deletions go to every copy at the write quorum,
//! multipart clients read documents with their attachments as parts, and `atts_since`
//! works on every read ([`atts`]); `multipart/related` document writes (form uploads
//! too, through `http`), `batch=ok`
//! (single documents and local ones) and `COPY` ([`writes`]); a partition's `_all_docs`
//! asks its one range ([`all_docs`]), as do a partition's info ([`partitions`]) and its
//! views ([`views`]); `_purge`, `_revs_limit`, `_purged_infos_limit`,
//! `_compact`, `_compact/{ddoc}`, `_view_cleanup` and a design document's `_info`
//! ([`admin`]). Every other operation on it answers 501 `not_implemented` (never a local
//! answer about a database this node does not hold).
//!
//! Threading: the [`Fabric`] contract's blocking calls wait for the copies with the Tokio
//! runtime's handle, so they must run on a blocking thread (as `http` runs them).

mod admin;
mod all_docs;
mod atts;
mod builds;
mod changes;
mod copies;
mod ddocs;
mod design;
mod everywhere;
pub mod feed;
mod local;
mod mango;
pub mod merge;
mod partitions;
mod rereduce;
mod revs;
mod security;
mod users;
pub use users::keep_auth_ddoc;
mod views;
mod writes;

use bytes::Bytes;
use copies::Ask;
use futures_util::future::{join_all, BoxFuture};
use merge::{EntryReply, ReadOutcome, Reply, WriteOutcome};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_cluster::{Cluster, Copies, ShardMap};
use settee_core::{ParsedDoc, Rev};
use settee_db::{LocalDoc, LocalUpdate, RevsDiff};
use settee_mango::index::Index;
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_node::all_docs::{Namespace, Query};
use settee_node::att_read::{self, AttInfo};
use settee_node::att_write::AttUpload;
use settee_node::changes::{ChangesOpts, FeedOut, FilterSpec, Live, ShownSeq};
use settee_node::dbs::{CreateDb, Limit, NameRange};
use settee_node::fabric::{Copied, DbRef, FeedEnd, Fut, Out, Purged, Reached, ReqFn, Written};
use settee_node::list::{ListCall, Piece};
use settee_node::mango_index::{self, BulkDeleted, Created};
use settee_node::parsed_docs;
use settee_node::read::{Read, ReadOpts, Rendered, Revision};
use settee_node::render::{FnCall, Shown, Updated};
use settee_node::write::{BulkAnswer, BulkDocs, BulkEntry, BulkGetItem, BulkGetOpts, WriteOpts};
use settee_node::{Error, Fabric, Node, Result};
use settee_wire::mrargs::MrArgs;
use settee_wire::path::Endpoint;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// A cluster member's fabric: clustered databases from their copies, the rest from the
/// node. Cloning it is cheap (its caches are shared).
#[derive(Clone)]
pub struct Coordinator {
    node: Arc<Node>,
    security: Arc<security::SecurityCache>,
    /// Clustered databases' design documents, validating writes to this member's copies.
    designs: Arc<ddocs::Designs>,
    render_error: RenderError,
    /// Where the other copies of each index were last asked to build to ([`builds`]).
    builds: Arc<builds::Builds>,
}

/// How the HTTP layer answers an error (status, JSON body): a range's copy on this
/// member is written in-process by `_bulk_docs`, with no request and no second parse of
/// its documents, and its refusals are read as another member's would be.
pub type RenderError = fn(Error) -> (u16, Value);

/// A copy's `_bulk_docs` answer: its entries, or the reply that failed the whole request.
type BulkReply = std::result::Result<Vec<merge::BulkEntry>, Reply>;

/// How long a decided write waits for its other copies before it answers (see
/// `Coordinator::ask_until`).
const QUORUM_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// `q` of a database created without one (CouchDB's `[cluster] q` default).
const DEFAULT_Q: u32 = 2;
/// `n` of a database created without one (CouchDB's `[cluster] n` default).
const DEFAULT_N: u32 = 3;

impl Coordinator {
    /// The coordinator of `node`, which from now on validates writes to its shard
    /// copies with their clustered databases' design documents ([`ddocs`]).
    pub fn new(node: Arc<Node>, render_error: RenderError) -> Coordinator {
        let coordinator = Coordinator {
            node,
            security: Default::default(),
            designs: Default::default(),
            render_error,
            builds: Default::default(),
        };
        let hook = ddocs::Hook {
            node: Arc::downgrade(&coordinator.node),
            security: coordinator.security.clone(),
            designs: coordinator.designs.clone(),
            render_error,
            builds: coordinator.builds.clone(),
        };
        coordinator.node.set_cluster_designs(Arc::new(hook));
        coordinator
    }

    /// The cluster and `db`'s shard map, when `db` is clustered.
    fn clustered(&self, db: &str) -> Option<(&Arc<Cluster>, Arc<ShardMap>)> {
        let cluster = self.node.cluster()?;
        cluster.db(db).map(|map| (cluster, map))
    }

    /// The local node, for an operation on `db` unless `db` is clustered (then 501:
    /// `what` is not served from copies yet).
    fn local(&self, db: &str, what: &'static str) -> Result<&Arc<Node>> {
        match self.clustered(db) {
            Some(_) => Err(Error::NotOnCluster(what)),
            None => Ok(&self.node),
        }
    }

    /// A request of one copy's member (a path under the copy's database), for `user`.
    async fn ask(
        &self,
        member: &str,
        method: &str,
        target: &str,
        user: Option<&UserCtx>,
        body: Option<&Value>,
    ) -> Reply {
        let bytes = body.map(|b| Bytes::from(b.to_string()));
        self.ask_raw(member, method, target, user, bytes).await
    }

    /// [`Self::ask`] with a body already written.
    async fn ask_raw(
        &self,
        member: &str,
        method: &str,
        target: &str,
        user: Option<&UserCtx>,
        body: Option<Bytes>,
    ) -> Reply {
        let answer = (self.node)
            .peer_json(member, method, target, user, body)
            .await;
        reply_of(member, answer)
    }

    /// Asks each of `asks` (member, method, target, body) at once, each on a task of its
    /// own, and hands the replies so far (in the order of `asks`) to `decided` as they
    /// come. Once it says the answer is decided, the other copies get [`QUORUM_GRACE`]
    /// more, then those still working finish in the background: CouchDB's
    /// `fabric_doc_update` answers at the quorum, not when the slowest copy does; the grace
    /// keeps a write visible on every running copy when it is answered (a listing read
    /// from one copy per range then shows it), unless a copy is slow.
    async fn ask_until(
        &self,
        asks: Vec<(String, &'static str, String, Option<Bytes>)>,
        user: Option<&UserCtx>,
        decided: impl Fn(&[Option<Reply>]) -> bool,
    ) -> Vec<Option<Reply>> {
        self.ask_until_with(asks, user, None, decided).await
    }

    /// [`Self::ask_until`] with bodies described by `headers` (lowercase name, value)
    /// instead of JSON ones: an attachment's content, a `multipart/related` document.
    async fn ask_until_with(
        &self,
        asks: Vec<(String, &'static str, String, Option<Bytes>)>,
        user: Option<&UserCtx>,
        headers: Option<Arc<Vec<(String, String)>>>,
        decided: impl Fn(&[Option<Reply>]) -> bool,
    ) -> Vec<Option<Reply>> {
        let tasks = (asks.into_iter())
            .map(|(member, method, target, body)| {
                self.spawn_ask(member, method, target, user, body, headers.clone())
            })
            .collect();
        until_decided(tasks, decided).await
    }

    /// A request of one copy's member, on a task of its own (see [`Self::ask_until_with`]).
    fn spawn_ask(
        &self,
        member: String,
        method: &'static str,
        target: String,
        user: Option<&UserCtx>,
        body: Option<Bytes>,
        headers: Option<Arc<Vec<(String, String)>>>,
    ) -> JoinHandle<Reply> {
        let (node, user) = (self.node.clone(), user.cloned());
        tokio::spawn(async move {
            let user = user.as_ref();
            let answer = match headers {
                None => node.peer_json(&member, method, &target, user, body).await,
                Some(h) => {
                    let h: Vec<(&str, &str)> =
                        h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    let body = body.unwrap_or_default();
                    node.peer_raw(&member, method, &target, user, &h, body)
                        .await
                }
            };
            reply_of(&member, answer)
        })
    }

    /// `_bulk_docs` of `copy`, this member's copy of a range, in-process on a task of its
    /// own: its entries as another member's answer gives them, refusals in the HTTP
    /// layer's words ([`RenderError`]). The coordinator has authorized `user` on the
    /// clustered database, whose security object every copy holds; the node validates
    /// each document as for a request.
    fn bulk_here(&self, copy: String, user: &UserCtx, req: BulkDocs) -> JoinHandle<BulkReply> {
        let (node, user, render) = (self.node.clone(), user.clone(), self.render_error);
        tokio::spawn(async move {
            let entries = match Fabric::bulk_docs(&node, &copy, &user, req).await {
                Ok(BulkAnswer::Entries(entries)) => entries,
                Ok(BulkAnswer::AllOrNothingRefused(_)) => {
                    let why = "a copy refused all_or_nothing, which copies are not sent";
                    return Err(Reply::Unreachable(why.into()));
                }
                Err(e) => {
                    let (status, body) = render(e);
                    return Err(Reply::Answered { status, body });
                }
            };
            let entry = |ok, id, rev| merge::BulkEntry {
                ok,
                id: Some(id),
                rev,
                ..Default::default()
            };
            Ok((entries.into_iter())
                .map(|e| match e {
                    BulkEntry::Written { id, rev } | BulkEntry::Accepted { id, rev } => {
                        entry(true, id, Some(rev))
                    }
                    BulkEntry::Failed { id, rev, error } => {
                        let (_, mut body) = render(error);
                        merge::BulkEntry {
                            error: body["error"].as_str().map(str::to_owned),
                            reason: Some(body["reason"].take()),
                            ..entry(false, id, rev)
                        }
                    }
                })
                .collect())
        })
    }

    /// `_bulk_docs` of `member`'s copy of a range at `path`, on a task of its own: the
    /// documents as this member parsed them ([`parsed_docs`]), the answer's entries read
    /// as typed fields.
    fn bulk_there(
        &self,
        member: String,
        path: String,
        user: &UserCtx,
        body: Bytes,
    ) -> JoinHandle<BulkReply> {
        let (node, user) = (self.node.clone(), user.clone());
        tokio::spawn(async move {
            let headers = [
                ("content-type", parsed_docs::MEDIA_TYPE),
                ("accept", "application/json"),
            ];
            let answer = node
                .peer_raw(&member, "POST", &path, Some(&user), &headers, body)
                .await;
            match answer {
                Ok(Some(a)) if (200..300).contains(&a.status) => serde_json::from_slice(&a.body)
                    .map_err(|e| {
                        Reply::Unreachable(format!("{member} answered _bulk_docs with {e}"))
                    }),
                answer => Err(reply_of(&member, answer)),
            }
        })
    }

    /// This member's name in the cluster.
    fn me(&self) -> Option<&str> {
        self.node.cluster().map(|c| c.config().node.as_str())
    }

    /// `db`'s copies of the range holding `id`: (member, path of the document).
    fn doc_copies(map: &ShardMap, db: &str, id: &str) -> Vec<(String, String)> {
        let copies = map.copies_of(id);
        let path = format!("{}/{}", copy_path(map, db, &copies.range), enc_id(id));
        copies
            .nodes
            .iter()
            .map(|n| (n.clone(), path.clone()))
            .collect()
    }

    fn create_clustered(
        &self,
        cluster: &Arc<Cluster>,
        name: &str,
        opts: CreateDb,
    ) -> Result<Reached> {
        settee_core::validate_db_name(name)?;
        if self.node.couch.exists(name) {
            return Err(settee_db::Error::DbExists.into());
        }
        let config = &self.node.config;
        let q = (opts.q).unwrap_or_else(|| config.get_positive("cluster", "q", DEFAULT_Q));
        let n = (opts.n).unwrap_or_else(|| config.get_positive("cluster", "n", DEFAULT_N));
        let map =
            block_on(cluster.create_db(name, q, n, opts.placement.as_deref(), opts.partitioned))
                .map_err(|e| match e {
                    settee_cluster::Error::Exists => settee_db::Error::DbExists.into(),
                    e => Error::from(e),
                })?;
        // Each copy's database, on its member (CouchDB creates them all and accepts those
        // that fail: internal replication fills them once they exist). A copy holds one
        // range: its sequences sit on one ring entry, which clustered feeds rely on
        // (`feed::copy_since`).
        let query = if opts.partitioned {
            "?q=1&partitioned=true"
        } else {
            "?q=1"
        };
        Ok(self.every_copy(name, &map, "PUT", query, 201))
    }

    fn delete_clustered(
        &self,
        cluster: &Arc<Cluster>,
        name: &str,
        map: &ShardMap,
    ) -> Result<Reached> {
        block_on(cluster.delete_db(name))?;
        let reached = self.every_copy(name, map, "DELETE", "", 200);
        if let Err(e) = block_on(settee_node::reshard::forget_completed(
            cluster, name, &map.uuid,
        )) {
            tracing::warn!(db = name, error = %e, "a deleted database's completed reshard jobs");
        }
        Ok(reached)
    }

    /// Asks every copy's member for `method` on the copy's database (with `query`), and
    /// logs those that do not answer `expected`: CouchDB goes on without them, and answers
    /// 202 rather than 201 or 200.
    fn every_copy(
        &self,
        name: &str,
        map: &ShardMap,
        method: &str,
        query: &str,
        expected: u16,
    ) -> Reached {
        let asks: Vec<(String, String)> = (map.by_range.iter())
            .flat_map(|c| {
                let path = format!("{}{query}", copy_path(map, name, &c.range));
                c.nodes.iter().map(move |n| (n.clone(), path.clone()))
            })
            .collect();
        let replies = block_on(join_all(
            (asks.iter()).map(|(node, path)| self.ask(node, method, path, None, None)),
        ));
        let mut reached = Reached::All;
        for ((node, path), reply) in asks.iter().zip(&replies) {
            if !matches!(reply, Reply::Answered { status, .. } if *status == expected) {
                tracing::warn!(%node, %path, method, ?reply, "a shard copy's database");
                reached = Reached::Some;
            }
        }
        reached
    }

    fn clustered_info(&self, name: &str, map: &ShardMap) -> Result<Value> {
        let mut infos = Vec::new();
        for copies in &map.by_range {
            let path = copy_path(map, name, &copies.range);
            let asks = (copies.nodes.iter())
                .map(|node| Ask {
                    node: node.clone(),
                    method: "GET",
                    target: path.clone(),
                    body: None,
                })
                .collect();
            let (node, info) = block_on(self.first_answer(&copies.range, asks, None))?;
            infos.push((copies.range.as_str(), node, info));
        }
        let ranges: Vec<merge::RangeInfo<'_>> = infos
            .iter()
            .map(|(range, node, info)| merge::RangeInfo { range, node, info })
            .collect();
        Ok(merge::db_info(name, &ranges, map.q, map.n))
    }

    async fn write_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        mut doc: ParsedDoc,
        opts: WriteOpts,
    ) -> Result<Written> {
        (self.users_before_update(db, map, user, std::slice::from_mut(&mut doc))).await?;
        let id = doc
            .id
            .clone()
            .ok_or_else(|| Error::internal("a document write without an id"))?;
        let copies = Self::doc_copies(map, db, &id);
        let w = merge::quorum_or(opts.w, copies.len());
        let mut body = Vec::new();
        merge::write_doc(&doc, !opts.new_edits, &mut body);
        let body = Bytes::from(body);
        let query = if opts.new_edits {
            ""
        } else {
            "?new_edits=false"
        };
        let asks = (copies.iter())
            .map(|(node, path)| {
                (
                    node.clone(),
                    "PUT",
                    format!("{path}{query}"),
                    Some(body.clone()),
                )
            })
            .collect();
        let replies = self
            .ask_until(asks, Some(user), |r| merge::write_decided(r, w))
            .await;
        let replies: Vec<Reply> = replies.into_iter().flatten().collect();
        writes::written_of(&replies, w)
    }

    /// `_bulk_docs` on a clustered database: each range's documents to every copy of the
    /// range in one `_bulk_docs`, each document's answers combined as a single write's.
    async fn bulk_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        mut req: BulkDocs,
    ) -> Result<BulkAnswer> {
        self.users_before_update(db, map, user, &mut req.docs)
            .await?;
        if let Some(refused) = req.all_or_nothing_refusal() {
            return Ok(BulkAnswer::AllOrNothingRefused(refused));
        }
        let ids: Vec<String> = (req.docs.iter())
            .map(|d| d.id.clone().unwrap_or_default())
            .collect();
        // Documents by range, in request order within each.
        let mut by_range: std::collections::BTreeMap<&str, (&Copies, Vec<usize>)> =
            Default::default();
        let copies_of = map.copies_finder();
        for (i, id) in ids.iter().enumerate() {
            let copies = copies_of(id);
            (by_range.entry(&copies.range))
                .or_insert_with(|| (copies, Vec::new()))
                .1
                .push(i);
        }
        // Every range's copies at once; each document's quorum and its copies' answers.
        // Each range's document ids, in the order its copies are sent them.
        let range_ids: Vec<Vec<&str>> = (by_range.values())
            .map(|(_, docs)| docs.iter().map(|i| ids[*i].as_str()).collect())
            .collect();
        let ranges = join_all(by_range.iter().zip(&range_ids).map(
            |((range, (copies, docs)), range_ids)| {
                // This member's copy in-process, the others over HTTP, the documents as
                // parsed here (`parsed_docs`: their copies do not parse them again).
                let body = std::cell::LazyCell::new(|| {
                    let docs = docs.iter().map(|i| &req.docs[*i]);
                    Bytes::from(parsed_docs::write(docs, req.new_edits))
                });
                let path = format!("{}/_bulk_docs", copy_path(map, db, range));
                let new_edits = req.new_edits;
                let tasks = (copies.nodes.iter()).map(|member| {
                    let task = match self.me() == Some(member.as_str()) {
                        true => {
                            let here = BulkDocs {
                                docs: docs.iter().map(|i| req.docs[*i].clone()).collect(),
                                new_edits,
                                all_or_nothing: false,
                                w: None,
                            };
                            self.bulk_here(map.copy_name(db, range), user, here)
                        }
                        false => {
                            self.bulk_there(member.clone(), path.clone(), user, (*body).clone())
                        }
                    };
                    // Each document's reply, once, as the copy answers.
                    async move {
                        let answer =
                            (task.await).unwrap_or_else(|e| Err(Reply::Unreachable(e.to_string())));
                        merge::bulk_replies(answer, range_ids, new_edits)
                    }
                });
                let w = merge::quorum_or(req.w, copies.nodes.len());
                // Decided once every document of the range is: written on `w` copies, or
                // every copy answered.
                let decided = move |replies: &[Option<Vec<EntryReply>>]| {
                    replies.iter().all(Option::is_some)
                        || (0..range_ids.len()).all(|k| {
                            let written = replies.iter().flatten().filter(|r| r[k].written());
                            written.count() >= w
                        })
                };
                until_decided_of(tasks.collect(), decided)
            },
        ))
        .await;
        // Each document's quorum and its copies' replies.
        let mut per_doc: Vec<(usize, Vec<EntryReply>)> = vec![(0, Vec::new()); ids.len()];
        for ((copies, docs), replies) in by_range.values().zip(ranges) {
            let w = merge::quorum_or(req.w, copies.nodes.len());
            for i in docs {
                per_doc[*i].0 = w;
            }
            for each in replies.into_iter().flatten() {
                for (i, reply) in docs.iter().zip(each) {
                    per_doc[*i].1.push(reply);
                }
            }
        }
        let mut entries = Vec::with_capacity(ids.len());
        for (id, (w, replies)) in ids.into_iter().zip(&per_doc) {
            let outcome = merge::bulk_write(replies, *w);
            entries.push(match outcome {
                // A replicated revision written: no entry, as CouchDB.
                _ if !req.new_edits && replies.contains(&EntryReply::Replicated) => continue,
                WriteOutcome::Ok(rev) => BulkEntry::Written {
                    id,
                    rev: rev.to_owned(),
                },
                WriteOutcome::Accepted(rev) => BulkEntry::Accepted {
                    id,
                    rev: rev.to_owned(),
                },
                WriteOutcome::Refused { status, body } => BulkEntry::Failed {
                    id,
                    rev: body["rev"].as_str().map(str::to_owned),
                    error: copy_error(status, &body),
                },
                WriteOutcome::Unanswered(why) => return Err(unavailable(why)),
            });
        }
        Ok(BulkAnswer::Entries(entries))
    }

    fn read_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        id: &str,
        opts: &ReadOpts,
    ) -> Result<Read> {
        let d = &opts.doc;
        // A multipart client's attachments come from one copy once the revision is known
        // (`read_related`); stubs until then.
        let related = opts.atts.inline && opts.multipart;
        let mut query: Vec<(&str, String)> = vec![("revs", "true".into())];
        for (flag, on) in [
            ("revs_info", d.revs_info),
            ("conflicts", d.conflicts),
            ("deleted_conflicts", d.deleted_conflicts),
            ("local_seq", d.local_seq),
            ("attachments", opts.atts.inline && !related),
            ("att_encoding_info", opts.atts.encoding_info),
            ("latest", opts.latest),
        ] {
            if on {
                query.push((flag, "true".into()));
            }
        }
        query.extend(atts::since_param(&opts.atts).filter(|_| !related));
        if let Some(rev) = &opts.rev {
            query.push(("rev", rev.to_string()));
        }
        let query: String = form_query(&query);
        let copies = Self::doc_copies(map, db, id);
        let replies = block_on(join_all(copies.iter().map(|(node, path)| {
            let target = format!("{path}?{query}");
            async move { self.ask(node, "GET", &target, Some(user), None).await }
        })));
        let outcome = merge::read(&replies);
        if let ReadOutcome::Found { rev, .. } = &outcome {
            if opts.rev.is_none() && self.missed_deletion(&copies, &replies, rev, user) {
                return Err(settee_db::Error::NotFound("deleted").into());
            }
        }
        match outcome {
            ReadOutcome::Found {
                mut doc,
                rev,
                stale,
            } => {
                // Read repair: the copies without the newest revision get it, as a
                // replicated write (its history in `_revisions`): before the answer when
                // fewer than `r` copies had it, as CouchDB, else in the background.
                // Documents with attachments wait for internal replication.
                if opts.rev.is_none() && !stale.is_empty() && doc.get("_attachments").is_none() {
                    let answered = (replies.iter())
                        .filter(|r| matches!(r, Reply::Answered { .. }))
                        .count();
                    let r = merge::quorum_or(opts.r, copies.len());
                    let repair = self.repair(&copies, &stale, doc.clone());
                    if answered - stale.len() < r {
                        block_on(repair);
                    } else {
                        tokio::runtime::Handle::current().spawn(repair);
                    }
                }
                if !d.revs {
                    if let Value::Object(m) = &mut doc {
                        m.shift_remove("_revisions");
                    }
                }
                let has_meta = d.revs_info || d.conflicts || d.deleted_conflicts || d.local_seq;
                let body = if related && doc.get("_attachments").is_some() {
                    block_on(self.read_related(&copies, user, &rev, opts))?
                } else {
                    Rendered::Json(serde_json::to_vec(&doc).expect("json"))
                };
                Ok(Read {
                    rev,
                    has_meta,
                    body,
                })
            }
            ReadOutcome::NotFound(reason) => Err(settee_db::Error::NotFound(reason).into()),
            ReadOutcome::Failed { status, body } => Err(copy_error(status, &body)),
            ReadOutcome::Unanswered(why) => Err(unavailable(why)),
        }
    }

    /// Whether copies that answered `deleted` hold a deletion descending from `rev`, the
    /// newest live revision the others have (a deletion they missed, acknowledged with
    /// 202): if so, it is repaired onto the copies that answered, before the answer.
    fn missed_deletion(
        &self,
        copies: &[(String, String)],
        replies: &[Reply],
        rev: &Rev,
        user: &UserCtx,
    ) -> bool {
        let said_deleted: Vec<usize> = (0..replies.len())
            .filter(|i| {
                matches!(&replies[*i], Reply::Answered { status: 404, body }
                    if body["reason"] == "deleted")
            })
            .collect();
        if said_deleted.is_empty() {
            return false;
        }
        let leaves = block_on(join_all(said_deleted.iter().map(|i| {
            let (node, path) = &copies[*i];
            let target = format!("{path}?open_revs=all&revs=true");
            async move { self.ask(node, "GET", &target, Some(user), None).await }
        })));
        let Some(deletion) = (leaves.iter().flat_map(merge::deleted_leaves))
            .find(|leaf| merge::deletion_supersedes(leaf, rev))
        else {
            return false;
        };
        let stale: Vec<usize> = (0..copies.len())
            .filter(|i| !said_deleted.contains(i))
            .filter(|i| matches!(replies[*i], Reply::Answered { .. }))
            .collect();
        block_on(self.repair(copies, &stale, deletion));
        true
    }

    /// Writes `doc` (with its `_revisions`) to the copies at `stale`.
    fn repair(
        &self,
        copies: &[(String, String)],
        stale: &[usize],
        doc: Value,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let node = self.node.clone();
        let targets: Vec<(String, String)> = stale.iter().map(|i| copies[*i].clone()).collect();
        async move {
            let body = Bytes::from(doc.to_string());
            for (member, path) in targets {
                let target = format!("{path}?new_edits=false");
                let sent =
                    (node.peer_json(&member, "PUT", &target, None, Some(body.clone()))).await;
                let status = sent.as_ref().map(|a| a.as_ref().map(|a| a.status));
                tracing::debug!(%member, %path, ?status, "read repair");
            }
        }
    }
}

/// A listing's body as a node writes its own: `head` (`{` and the members before the
/// rows, each followed by a comma), then `"rows":[`, the rows one per line, and the end;
/// stops when `out` says the reader has gone.
fn send_rows(head: &str, rows: &[Value], out: Out<'_>) {
    if !out(format!("{head}\"rows\":[\r\n").as_bytes()) {
        return;
    }
    for (i, row) in rows.iter().enumerate() {
        let sep: &[u8] = if i == 0 { b"" } else { b",\r\n" };
        if !(out(sep) && out(&serde_json::to_vec(row).expect("json"))) {
            return;
        }
    }
    out(b"\r\n]}\n");
}

/// A member's answer as a copy's reply.
fn reply_of(member: &str, answer: Result<Option<settee_node::cluster::Forwarded>>) -> Reply {
    match answer {
        Ok(Some(answer)) => Reply::Answered {
            status: answer.status,
            body: serde_json::from_slice(&answer.body).unwrap_or(Value::Null),
        },
        Ok(None) => Reply::Unreachable(format!("{member} is not running")),
        Err(Error::PeerTimeout(why)) => Reply::TimedOut(why),
        Err(e) => Reply::Unreachable(e.to_string()),
    }
}

/// Waits for `fut` from a blocking thread.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(fut)
}

/// The replies of `tasks` (copies asked at once, each on a task of its own), in their
/// order, handed to `decided` as they come: once it says the answer is decided, the other
/// copies get [`QUORUM_GRACE`] more, then those still working finish in the background
/// (see `Coordinator::ask_until`).
async fn until_decided(
    tasks: Vec<tokio::task::JoinHandle<Reply>>,
    decided: impl Fn(&[Option<Reply>]) -> bool,
) -> Vec<Option<Reply>> {
    let tasks = (tasks.into_iter())
        .map(|task| async {
            task.await
                .unwrap_or_else(|e| Reply::Unreachable(e.to_string()))
        })
        .collect();
    until_decided_of(tasks, decided).await
}

/// [`until_decided`] of any kind of reply.
async fn until_decided_of<T>(
    tasks: Vec<impl std::future::Future<Output = T>>,
    decided: impl Fn(&[Option<T>]) -> bool,
) -> Vec<Option<T>> {
    let mut pending: futures_util::stream::FuturesUnordered<_> = (tasks.into_iter())
        .enumerate()
        .map(|(i, task)| async move { (i, task.await) })
        .collect();
    let mut replies: Vec<Option<T>> = (0..pending.len()).map(|_| None).collect();
    let mut grace: Option<tokio::time::Instant> = None;
    loop {
        let next = futures_util::StreamExt::next(&mut pending);
        let got = match grace {
            None => next.await,
            Some(until) => match tokio::time::timeout_at(until, next).await {
                Ok(got) => got,
                Err(_) => break,
            },
        };
        let Some((i, reply)) = got else { break };
        replies[i] = Some(reply);
        if grace.is_none() && decided(&replies) {
            grace = Some(tokio::time::Instant::now() + QUORUM_GRACE);
        }
    }
    replies
}

/// The path of `db`'s copy of `range` (its database, one path segment).
fn copy_path(map: &ShardMap, db: &str, range: &str) -> String {
    format!("/{}", enc(&map.copy_name(db, range)))
}

/// A database name or document id as one path segment.
fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// A document id in a path: `_design/` and `_local/` keep their slash, as CouchDB's paths.
fn enc_id(id: &str) -> String {
    for prefix in ["_design/", "_local/"] {
        if let Some(rest) = id.strip_prefix(prefix) {
            return format!("{prefix}{}", enc(rest));
        }
    }
    enc(id)
}

fn form_query(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn unavailable(why: String) -> Error {
    Error::MembersUnavailable(why)
}

/// A copy's refusal as the node's error of the same name and status; one without a node
/// error of its own is passed on as the copy gave it.
fn copy_error(status: u16, body: &Value) -> Error {
    let reason = match &body["reason"] {
        Value::String(r) => r.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    match (status, body["error"].as_str().unwrap_or_default()) {
        (409, "conflict") => settee_db::Error::Conflict.into(),
        (409, "not_found") => Error::MissingRev,
        (413, "attachment_too_large") => settee_db::Error::AttachmentTooLarge.into(),
        (400, "content_md5_mismatch") => Error::ContentMd5Mismatch,
        (412, "missing_stub") => Error::Rejected(settee_js::Rejection::Error {
            error: "missing_stub".into(),
            reason: Value::String(reason),
        }),
        (404, "not_found") => Error::NotFound(reason),
        (400, "bad_request") => Error::BadRequest(reason),
        (401, "unauthorized") => Error::Unauthorized(reason),
        (403, "forbidden") => Error::Forbidden(reason),
        (500, error) if body["ref"].is_u64() => Error::RelayedCrash {
            error: error.to_owned(),
            reason,
            stack_hash: body["ref"].as_u64().map_or(0, |r| r as u32),
        },
        (_, error) => Error::Relayed {
            status,
            error: error.to_owned(),
            reason,
        },
    }
}

/// Whether `name` stays on the node that has it whatever the cluster (CouchDB's
/// node-local and system databases: `_users`, `_replicator`, …; shard copies).
fn node_only(name: &str) -> bool {
    name.starts_with('_') || settee_core::is_shard_name(name)
}

impl Fabric for Coordinator {
    fn open_db(&self, name: &str) -> Result<DbRef> {
        match self.clustered(name) {
            Some((_, map)) => Ok(DbRef::clustered(name, map.partitioned)),
            None => Fabric::open_db(&self.node, name),
        }
    }

    fn authorize(&self, endpoint: &Endpoint, method: &str, user: &UserCtx) -> Result<()> {
        settee_node::access::authorize_with(&self.node, endpoint, method, user, |db| {
            match self.clustered(db) {
                Some((_, map)) => self.authorizing_security(db, &map),
                None => settee_node::access::security_of(&self.node, db),
            }
        })
    }

    fn all_dbs(&self, range: &NameRange) -> Result<Vec<String>> {
        let mut names: Vec<String> = (Fabric::all_dbs(&self.node, &NameRange::default())?)
            .into_iter()
            .filter(|n| !settee_core::is_shard_name(n))
            .collect();
        if let Some(cluster) = self.node.cluster() {
            names.extend(cluster.dbs());
        }
        names.sort();
        names.dedup();
        Ok(range.select(names))
    }

    fn dbs_info(&self, keys: Vec<Value>) -> Result<Vec<Value>> {
        keys.into_iter()
            .map(|key| match key.as_str().and_then(|n| self.clustered(n)) {
                Some((_, map)) => {
                    let name = key.as_str().unwrap_or_default().to_owned();
                    Ok(json!({"key": key, "info": self.clustered_info(&name, &map)?}))
                }
                None => Ok(Fabric::dbs_info(&self.node, vec![key])?.remove(0)),
            })
            .collect()
    }

    fn shards(&self, db: &str, id: Option<&str>) -> Result<Value> {
        let Some((_, map)) = self.clustered(db) else {
            return Fabric::shards(&self.node, db, id);
        };
        Ok(match id {
            None => {
                let shards: serde_json::Map<String, Value> = (map.by_range.iter())
                    .map(|c| (c.range.clone(), json!(c.nodes)))
                    .collect();
                json!({ "shards": shards })
            }
            Some(id) => {
                if map.partitioned {
                    settee_core::validate_partitioned_doc_id(id)?;
                }
                let copies = map.copies_of(id);
                json!({"range": copies.range, "nodes": copies.nodes})
            }
        })
    }

    fn get_limit(&self, db: &str, which: Limit) -> Result<u64> {
        match self.clustered(db) {
            Some((_, map)) => self.get_limit_clustered(db, &map, which),
            None => Fabric::get_limit(&self.node, db, which),
        }
    }

    fn set_limit(&self, db: &str, which: Limit, n: u64) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.set_limit_clustered(db, &map, which, n),
            None => Fabric::set_limit(&self.node, db, which, n),
        }
    }

    fn compact_db(&self, db: &str) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.every_copy_cast(db, &map, "_compact"),
            None => Fabric::compact_db(&self.node, db),
        }
    }

    fn create_db(&self, name: &str, opts: CreateDb) -> Result<Reached> {
        if settee_core::is_shard_name(name) {
            return self.node.create_copy(name, opts).map(|()| Reached::All);
        }
        match self.node.cluster() {
            Some(cluster) if !node_only(name) => {
                let reached = self.create_clustered(cluster, name, opts)?;
                if name == settee_node::settings::auth_db(&self.node.config) {
                    // Born with `_design/_auth`, as on a node.
                    if let Err(e) = self.ensure_auth_ddoc(name) {
                        tracing::warn!(db = name, error = %e, "writing _design/_auth");
                    }
                }
                Ok(reached)
            }
            _ => Fabric::create_db(&self.node, name, opts),
        }
    }

    fn delete_db(&self, name: &str) -> Result<Reached> {
        match self.clustered(name) {
            Some((cluster, map)) => self.delete_clustered(cluster, name, &map),
            None => Fabric::delete_db(&self.node, name),
        }
    }

    fn get_security(&self, db: &str) -> Result<Value> {
        match self.clustered(db) {
            Some((_, map)) => self.security_clustered(db, &map),
            None => Fabric::get_security(&self.node, db),
        }
    }

    fn set_security(&self, db: &str, security: Value) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.set_security_clustered(db, &map, security),
            None => Fabric::set_security(&self.node, db, security),
        }
    }

    fn db_info(&self, db: &str) -> Result<Value> {
        match self.clustered(db) {
            Some((_, map)) => self.clustered_info(db, &map),
            None => Fabric::db_info(&self.node, db),
        }
    }

    fn partition_info(&self, db: &str, partition: &str) -> Result<Value> {
        match self.clustered(db) {
            Some((_, map)) => self.partition_info_clustered(db, &map, partition),
            None => Fabric::partition_info(&self.node, db, partition),
        }
    }

    fn all_docs(
        &self,
        db: &str,
        user: &UserCtx,
        q: Query,
        ns: Namespace,
        out: Out<'_>,
    ) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.all_docs_clustered(db, &map, user, q, ns, out),
            None => Fabric::all_docs(&self.node, db, user, q, ns, out),
        }
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
        match self.clustered(db) {
            Some((_, map)) => self.view_clustered(db, &map, user, ddoc, view, args, out),
            None => Fabric::query_view(&self.node, db, user, ddoc, view, args, out),
        }
    }

    fn find(&self, db: &str, user: &UserCtx, opts: &FindOpts, out: Out<'_>) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.find_clustered(db, &map, opts, out),
            None => Fabric::find(&self.node, db, user, opts, out),
        }
    }

    fn changes_filter<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        spec: FilterSpec,
        opts: ChangesOpts,
        req: ReqFn<'a>,
    ) -> Fut<'a, ChangesOpts> {
        match self.clustered(db) {
            None => Fabric::changes_filter(&self.node, db, user, spec, opts, req),
            Some((_, map)) => Box::pin(async move {
                let mut opts = opts;
                opts.filter = self.clustered_filter(db, map, user, spec, req).await?;
                Ok(opts)
            }),
        }
    }

    fn changes(
        &self,
        db: &str,
        opts: &ChangesOpts,
        row: &mut dyn FnMut(Option<ShownSeq>, &[u8]) -> bool,
    ) -> Result<FeedEnd> {
        match self.clustered(db) {
            Some((_, map)) => self.changes_clustered(db, map, opts, row),
            None => Fabric::changes(&self.node, db, opts, row),
        }
    }

    fn live_changes<'a>(
        &'a self,
        db: &'a str,
        opts: ChangesOpts,
        live: Live,
        out: Box<dyn FeedOut>,
    ) -> BoxFuture<'a, ()> {
        match self.clustered(db) {
            Some((_, map)) => Box::pin(self.live_clustered(db, map, opts, live, out)),
            None => Fabric::live_changes(&self.node, db, opts, live, out),
        }
    }

    fn update_doc<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
    ) -> Fut<'a, Written> {
        Box::pin(async move {
            match self.clustered(db) {
                Some((_, map)) if opts.batch => Ok(self
                    .write_batched(db, map, user, doc, opts, Vec::new())
                    .await),
                Some((_, map)) => {
                    let id = doc.id.clone().unwrap_or_default();
                    let written = self.write_clustered(db, &map, user, doc, opts).await?;
                    self.after_write(db, std::iter::once(id.as_str())).await;
                    Ok(written)
                }
                None => {
                    let id = doc.id.clone();
                    let written = Fabric::update_doc(&self.node, db, user, doc, opts).await?;
                    self.spread(db, id.as_deref().into_iter()).await;
                    Ok(written)
                }
            }
        })
    }

    fn update_doc_related<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        doc: ParsedDoc,
        opts: WriteOpts,
        parts: Vec<(String, Bytes)>,
    ) -> Fut<'a, Written> {
        Box::pin(async move {
            match self.clustered(db) {
                Some((_, map)) if opts.batch => {
                    Ok(self.write_batched(db, map, user, doc, opts, parts).await)
                }
                Some((_, map)) => {
                    let id = doc.id.clone().unwrap_or_default();
                    let written =
                        (self.write_related_clustered(db, &map, user, doc, opts, parts)).await?;
                    self.after_write(db, std::iter::once(id.as_str())).await;
                    Ok(written)
                }
                None => {
                    let id = doc.id.clone();
                    let written =
                        Fabric::update_doc_related(&self.node, db, user, doc, opts, parts).await?;
                    self.spread(db, id.as_deref().into_iter()).await;
                    Ok(written)
                }
            }
        })
    }

    fn bulk_docs<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        req: BulkDocs,
    ) -> Fut<'a, BulkAnswer> {
        Box::pin(async move {
            match self.clustered(db) {
                Some((_, map)) => {
                    let ids: Vec<String> = (req.docs.iter())
                        .filter_map(|d| d.id.clone().filter(|id| id.starts_with("_design/")))
                        .collect();
                    let answer = self.bulk_clustered(db, &map, user, req).await?;
                    self.after_write(db, ids.iter().map(String::as_str)).await;
                    Ok(answer)
                }
                None => {
                    let answer = Fabric::bulk_docs(&self.node, db, user, req).await?;
                    if let BulkAnswer::Entries(entries) = &answer {
                        let ids = entries.iter().filter_map(|e| match e {
                            BulkEntry::Written { id, .. } | BulkEntry::Accepted { id, .. } => {
                                Some(id.as_str())
                            }
                            _ => None,
                        });
                        self.spread(db, ids).await;
                    }
                    Ok(answer)
                }
            }
        })
    }

    fn put_local<'a>(
        &'a self,
        db: &'a str,
        update: LocalUpdate,
        batch: bool,
    ) -> Fut<'a, Option<u64>> {
        match self.clustered(db) {
            Some((_, map)) if batch => {
                self.put_local_batched(db, map, update);
                Box::pin(async { Ok(None) })
            }
            Some((_, map)) => {
                Box::pin(async move { self.put_local_clustered(db, &map, update).await.map(Some) })
            }
            None => Fabric::put_local(&self.node, db, update, batch),
        }
    }

    fn purge<'a>(
        &'a self,
        db: &'a str,
        asked: Vec<(String, Vec<Rev>)>,
        w: Option<u32>,
    ) -> Fut<'a, Purged> {
        match self.clustered(db) {
            Some((_, map)) => {
                Box::pin(async move { self.purge_clustered(db, &map, asked, w).await })
            }
            None => Fabric::purge(&self.node, db, asked, w),
        }
    }

    fn copy_doc<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        source: (&'a str, Option<Rev>),
        dest: (&'a str, Option<Rev>),
    ) -> Fut<'a, Copied> {
        match self.clustered(db) {
            Some((_, map)) => {
                Box::pin(async move { self.copy_clustered(db, &map, user, source, dest).await })
            }
            None => Box::pin(async move {
                let copied = Fabric::copy_doc(&self.node, db, user, source, dest.clone()).await?;
                self.spread(db, std::iter::once(dest.0)).await;
                Ok(copied)
            }),
        }
    }

    fn open_doc(&self, db: &str, user: &UserCtx, id: &str, opts: &ReadOpts) -> Result<Read> {
        match self.clustered(db) {
            Some((_, map)) => self.read_clustered(db, &map, user, id, opts),
            None => Fabric::open_doc(&self.node, db, user, id, opts),
        }
    }

    fn open_revs(
        &self,
        db: &str,
        user: &UserCtx,
        id: &str,
        wanted: &str,
        opts: &ReadOpts,
    ) -> Result<Vec<Revision>> {
        match self.clustered(db) {
            Some((_, map)) => self.open_revs_clustered(db, &map, user, id, wanted, opts),
            None => Fabric::open_revs(&self.node, db, user, id, wanted, opts),
        }
    }

    fn show(
        &self,
        db: &str,
        call: &FnCall,
        accept: Option<&str>,
        matches: &dyn Fn(&str) -> bool,
    ) -> Result<Shown> {
        match self.clustered(db) {
            Some((_, map)) => self.show_clustered(db, map, call, accept, matches),
            None => Fabric::show(&self.node, db, call, accept, matches),
        }
    }

    fn update<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        call: FnCall,
        refused: bool,
    ) -> Fut<'a, Updated> {
        match self.clustered(db) {
            Some((_, map)) => Box::pin(self.update_clustered(db, map, user, call, refused)),
            None => Box::pin(async move {
                let updated = Fabric::update(&self.node, db, user, call, refused).await?;
                let id = updated.written.as_ref().map(|(id, _)| id.as_str());
                self.spread(db, id.into_iter()).await;
                Ok(updated)
            }),
        }
    }

    fn open_local(&self, db: &str, id: &str) -> Result<LocalDoc> {
        match self.clustered(db) {
            Some((_, map)) => block_on(self.open_local_clustered(db, &map, id)),
            None => Fabric::open_local(&self.node, db, id),
        }
    }

    fn bulk_get(
        &self,
        db: &str,
        user: &UserCtx,
        items: &[Value],
        opts: BulkGetOpts,
        out: &mut dyn FnMut(BulkGetItem) -> bool,
    ) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.bulk_get_clustered(db, &map, user, items, opts, out),
            None => Fabric::bulk_get(&self.node, db, user, items, opts, out),
        }
    }

    fn revs_diff(&self, db: &str, asked: Vec<(String, Vec<Rev>)>) -> Result<RevsDiff> {
        match self.clustered(db) {
            Some((_, map)) => self.revs_diff_clustered(db, &map, asked),
            None => Fabric::revs_diff(&self.node, db, asked),
        }
    }

    fn list<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        call: ListCall,
    ) -> Fut<'a, tokio::sync::mpsc::Receiver<Piece>> {
        match self.clustered(db) {
            Some((_, map)) => Box::pin(self.list_clustered(db, map, user, call)),
            None => Fabric::list(&self.node, db, user, call),
        }
    }

    fn open_attachment(
        &self,
        db: &str,
        id: &str,
        name: &str,
        rev: Option<&Rev>,
    ) -> Result<AttInfo> {
        match self.clustered(db) {
            Some((_, map)) => self.open_attachment_clustered(db, &map, id, name, rev),
            None => Fabric::open_attachment(&self.node, db, id, name, rev),
        }
    }

    fn attachment_content(
        &self,
        db: &str,
        att: &AttInfo,
        piece: att_read::Piece,
        out: Out<'_>,
    ) -> Result<()> {
        match &att.content {
            Some(content) => atts::send_fetched(content, piece, out),
            None => Fabric::attachment_content(self.local(db, "attachments")?, db, att, piece, out),
        }
    }

    fn upload_attachment<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        id: &'a str,
        up: AttUpload<'a>,
    ) -> Fut<'a, Written> {
        match self.clustered(db) {
            Some((_, map)) => Box::pin(async move {
                self.upload_attachment_clustered(db, &map, user, id, up)
                    .await
            }),
            None => Box::pin(async move {
                let written = Fabric::upload_attachment(&self.node, db, user, id, up).await?;
                self.spread(db, std::iter::once(id)).await;
                Ok(written)
            }),
        }
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
        match self.clustered(db) {
            Some((_, map)) => Box::pin(async move {
                (self.delete_attachment_clustered(db, &map, user, id, name, rev, w)).await
            }),
            None => Box::pin(async move {
                let written =
                    Fabric::delete_attachment(&self.node, db, user, id, name, rev, w).await?;
                self.spread(db, std::iter::once(id)).await;
                Ok(written)
            }),
        }
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
        let Some((_, map)) = self.clustered(db) else {
            return Fabric::view_queries(&self.node, db, user, ddoc, view, base, queries, out);
        };
        // Every query checked before any runs, as on a node.
        let args = (queries.iter())
            .map(|q| {
                let q = (q.as_object())
                    .ok_or_else(|| Error::bad_request("Each query must be a JSON object"))?;
                Ok(base.for_query_object(q)?)
            })
            .collect::<Result<Vec<_>>>()?;
        for (i, a) in args.into_iter().enumerate() {
            self.view_clustered(db, &map, user, ddoc, view, a, &mut |b| out(i, b))?;
        }
        Ok(())
    }

    fn design_info(&self, db: &str, ddoc: &str) -> Result<Value> {
        match self.clustered(db) {
            Some((_, map)) => self.design_info_clustered(db, &map, ddoc),
            None => Fabric::design_info(&self.node, db, ddoc),
        }
    }

    fn compact_design(&self, db: &str, ddoc: &str) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.compact_design_clustered(db, &map, ddoc),
            None => Fabric::compact_design(&self.node, db, ddoc),
        }
    }

    fn view_cleanup(&self, db: &str) -> Result<()> {
        match self.clustered(db) {
            Some((_, map)) => self.every_copy_cast(db, &map, "_view_cleanup"),
            None => Fabric::view_cleanup(&self.node, db),
        }
    }

    fn explain(&self, db: &str, opts: &FindOpts) -> Result<Value> {
        match self.clustered(db) {
            Some((_, map)) => self.explain_clustered(db, &map, opts),
            None => Fabric::explain(&self.node, db, opts),
        }
    }

    fn indexes(&self, db: &str) -> Result<Vec<Index>> {
        match self.clustered(db) {
            Some((_, map)) => self.indexes_clustered(db, &map),
            None => Fabric::indexes(&self.node, db),
        }
    }

    fn create_index<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        opts: IndexOpts,
    ) -> Fut<'a, Created> {
        let Some((_, map)) = self.clustered(db) else {
            return Fabric::create_index(&self.node, db, user, opts);
        };
        Box::pin(async move {
            let store = mango::ClusterDdocs::new(self, db, map, user);
            mango_index::create_index(&store, db, user, opts).await
        })
    }

    fn delete_index<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        ddoc: &'a str,
        name: Option<&'a str>,
    ) -> Fut<'a, bool> {
        let Some((_, map)) = self.clustered(db) else {
            return Fabric::delete_index(&self.node, db, user, ddoc, name);
        };
        Box::pin(async move {
            let store = mango::ClusterDdocs::new(self, db, map, user);
            mango_index::delete_index(&store, db, user, ddoc, name).await
        })
    }

    fn bulk_delete_indexes<'a>(
        &'a self,
        db: &'a str,
        user: &'a UserCtx,
        ddocs: Vec<String>,
    ) -> Fut<'a, BulkDeleted> {
        let Some((_, map)) = self.clustered(db) else {
            return Fabric::bulk_delete_indexes(&self.node, db, user, ddocs);
        };
        Box::pin(async move {
            let store = mango::ClusterDdocs::new(self, db, map, user);
            mango_index::bulk_delete_indexes(&store, db, user, ddocs).await
        })
    }
}
