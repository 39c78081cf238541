//! Mango `_find` execution: the indexes a database has, and a planned query run over
//! `_all_docs` (in parallel batches) or a json index, with CouchDB's skip, limit,
//! bookmark, `execution_stats` and warnings, the body written through a callback.
//! Planning itself is `settee_mango::plan`, a pure function.
//!
//! Threading: everything here blocks (RocksDB reads, the view's update); `run` may use
//! a second thread for a large `_all_docs` scan.

use crate::{doc_json, winner_json_with, DocOpts, Error, Node, Result};
use serde_json::{json, Map, Value};
use settee_core::split_stored;
use settee_db::{Database, LiveDoc};
use settee_mango::bookmark::Bookmark;
use settee_mango::index::{self, Index, Kind};
use settee_mango::opts::FindOpts;
use settee_mango::plan::{self, Plan};
use settee_views::{Event, Freshness, ViewQuery};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

/// The member of a `_find` body in which a cluster's coordinator gives a shard copy the
/// database's Mango index design documents (an array of whole design documents, `_id`
/// included), which stand in for the copy's own (see [`Node::find_given`]).
pub const GIVEN_INDEXES: &str = "settee_indexes";

impl Node {
    /// Plans a `_find` over `db`'s indexes (for `_explain` when `explain`).
    pub fn plan_find(&self, db: &Database, opts: &FindOpts, explain: bool) -> Result<Plan> {
        plan_over(opts, &indexes(db)?, db.props().partitioned, explain)
    }

    /// Runs a planned `_find` as `reader` (whose view of `_replicator` credentials
    /// applies), writing its body to `out`.
    pub fn find(
        &self,
        db: &Arc<Database>,
        opts: &FindOpts,
        plan: &Plan,
        reader: Option<Arc<crate::replicator_read::Reader>>,
        out: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<()> {
        let threshold = self
            .config
            .get_u64("mango", "index_scan_warning_threshold", 10);
        run(self, db, opts, plan, threshold, reader, None, out)
    }

    /// A `_find` on shard copy `db` over the index design documents `designs` its caller
    /// gives instead of the copy's own (which hold only its range's design documents):
    /// how a cluster's coordinator queries a copy, as CouchDB's shard workers are given
    /// the index's design document. The json indexes are the copy's own views of those
    /// designs (built on first use, by signature). Each row is written as `{"key", "id",
    /// "doc"}` (the index key the coordinator merges by), and a json index's answer ends
    /// with where the index stands (`update_seq`). Only a shard copy, only for a server
    /// admin (a member, for its coordinator).
    pub fn find_given(
        &self,
        db: &Arc<Database>,
        user: &settee_auth::UserCtx,
        opts: &FindOpts,
        designs: &[Value],
        out: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<()> {
        if !settee_core::is_shard_name(&db.name) || !user.is_server_admin() {
            return Err(Error::Forbidden(
                "Indexes are given only to a shard copy, by a member.".into(),
            ));
        }
        let mut given = Vec::with_capacity(designs.len());
        for d in designs {
            match (d.as_object(), d["_id"].as_str()) {
                (Some(body), Some(id)) if id.starts_with("_design/") => given.push((id, body)),
                _ => {
                    return Err(Error::bad_request(
                        "A given index must be a design document.",
                    ))
                }
            }
        }
        let partitioned = db.props().partitioned;
        let all = indexes_of(given, partitioned);
        let plan = plan_over(opts, &all, partitioned, false)?;
        let threshold = self
            .config
            .get_u64("mango", "index_scan_warning_threshold", 10);
        let reader = crate::replicator_read::reader(db, user);
        run(self, db, opts, &plan, threshold, reader, Some(designs), out)
    }
}

/// Plans a `_find` over `all` (for `_explain` when `explain`) in a database that is
/// `partitioned` or not. A sort no index serves in a partitioned database names the
/// indexes' scope, as `mango_idx:mango_sort_error` does.
pub fn plan_over(opts: &FindOpts, all: &[Index], partitioned: bool, explain: bool) -> Result<Plan> {
    if !opts.partition.is_empty() && !partitioned {
        return Err(Error::bad_request(
            "`partition` parameter is not supported in this db.",
        ));
    }
    plan::plan(opts, all, explain).map_err(|e| match e {
        settee_mango::Error::NoUsableSortIndex if partitioned => Error::NoUsableIndex(format!(
            "No {} index exists for this sort, try indexing by the sort fields.",
            if opts.partition.is_empty() {
                "global"
            } else {
                "partitioned"
            }
        )),
        e => e.into(),
    })
}

/// Every index of the design documents `designs` (`(id, body)`, any order), in listing
/// order, `_all_docs` first.
pub fn indexes_of<'a>(
    designs: impl IntoIterator<Item = (&'a str, &'a Map<String, Value>)>,
    partitioned: bool,
) -> Vec<Index> {
    let mut out = vec![Index::all_docs()];
    for (id, body) in designs {
        out.extend(index::from_design_doc(id, body, partitioned));
    }
    index::sort_for_listing(&mut out);
    out
}

/// Every index of `db`: `_all_docs`, then the json indexes of its `"language": "query"`
/// design documents, in listing order.
pub fn indexes(db: &Database) -> Result<Vec<Index>> {
    let partitioned = db.props().partitioned;
    let mut out = vec![Index::all_docs()];
    let mut failure = None;
    db.scan_docs(b"_design/", Some(b"_design0"), false, true, |row| {
        let Some(body) = row.body.as_deref() else {
            return ControlFlow::Continue(());
        };
        match serde_json::from_slice::<Map<String, Value>>(split_stored(body).0) {
            Ok(map) => out.extend(index::from_design_doc(&row.id, &map, partitioned)),
            Err(e) => failure = Some(e),
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failure {
        return Err(Error::Db(settee_db::Error::Internal(format!(
            "design document: {e}"
        ))));
    }
    index::sort_for_listing(&mut out);
    Ok(out)
}

/// `_explain`'s answer for a planned query.
pub fn explain(db: &Database, opts: &FindOpts, plan: &Plan) -> Value {
    explain_of(&db.name, db.props().partitioned, opts, plan)
}

/// `_explain`'s answer for a planned query of database `name` (`partitioned` or not).
pub fn explain_of(name: &str, partitioned: bool, opts: &FindOpts, plan: &Plan) -> Value {
    let mut out = json!({
        "dbname": name,
        "index": plan.index.as_ref().map(Index::to_json),
        "partitioned": plan.index.as_ref().is_some_and(|i| if i.is_special() {
            partitioned
        } else {
            i.partitioned
        }),
        "selector": opts.selector.normalized(),
        "opts": opts.to_json(),
        "limit": opts.limit,
        "skip": opts.skip,
        "fields": opts.fields.as_deref().unwrap_or_default(),
        "index_candidates": plan.candidates,
        "selector_hints": plan.hints,
    });
    if plan.index.is_some() {
        out["mrargs"] = plan.mrargs(opts);
        out["covering"] = json!(plan.covering);
    }
    out
}

/// What a query has done so far (`execution_stats`).
///
/// Counted as CouchDB's coordinator receives them: its shard counts every index row it
/// reads (and every document it loads) and sends the counts along with each matching row;
/// the coordinator stops at the first match beyond `skip + limit` (so the rows up to and
/// including that one count), and drops the design documents an `_all_docs` scan matches
/// together with the counts they carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub keys: u64,
    pub docs: u64,
    pub quorum_docs: u64,
    pub returned: u64,
}

/// The bookmark a `_find` answers: the last row it took (`last`), else the one it was
/// given, else CouchDB's `nil`.
pub fn bookmark_after(last: Option<&Bookmark>, given: Option<&String>) -> String {
    match (last, given) {
        (Some(b), _) => b.encode(),
        (None, Some(given)) => given.clone(),
        (None, None) => "nil".into(),
    }
}

/// A `_find` body's end after its rows, in CouchDB's framing: the bookmark, the execution
/// statistics when asked for (with the milliseconds taken), the warnings, and for a
/// coordinator where the copy's json index stands (`update_seq`, Settee's own).
pub fn body_tail(
    bookmark: String,
    stats: Option<(&Stats, f64)>,
    warnings: &[String],
    update_seq: Option<u64>,
) -> String {
    let mut tail = format!("\r\n],\r\n\"bookmark\": {}", Value::String(bookmark));
    if let Some((s, ms)) = stats {
        let stats = json!({
            "total_keys_examined": s.keys,
            "total_docs_examined": s.docs,
            "total_quorum_docs_examined": s.quorum_docs,
            "results_returned": s.returned,
            "execution_time_ms": ms,
        });
        tail.push_str(&format!(",\r\n\"execution_stats\": {stats}"));
    }
    if !warnings.is_empty() {
        let warning = Value::String(warnings.join("\n"));
        tail.push_str(&format!(",\r\n\"warning\": {warning}"));
    }
    if let Some(seq) = update_seq {
        tail.push_str(&format!(",\r\n\"update_seq\": {seq}"));
    }
    tail.push_str("}\r\n");
    tail
}

/// One `_find` executing: the rows it takes, skips and returns.
struct Run<'a> {
    opts: &'a FindOpts,
    out: &'a mut dyn FnMut(&[u8]) -> bool,
    skip: u64,
    stats: Stats,
    /// Rows (keys, documents) read since the last match, not yet counted in `stats`.
    pending: (u64, u64),
    /// A match beyond `skip + limit` arrived: the query is over.
    ended: bool,
    last: Option<Bookmark>,
    open: bool,
    /// Whose credentials documents hide (`replicator_read`).
    reader: Option<Arc<crate::replicator_read::Reader>>,
    /// Rows are written as `{"key", "id", "doc"}` (for a coordinator, [`Node::find_given`]).
    keyed: bool,
    /// Where the json index read stood (its `update_seq`), once read.
    index_seq: Option<u64>,
}

impl Run<'_> {
    fn done(&self) -> bool {
        !self.open || self.ended
    }

    /// A row read (`doc`: and its document loaded).
    fn read_row(&mut self, doc: bool) {
        self.pending.0 += 1;
        self.pending.1 += u64::from(doc);
    }

    /// The counts since the last match arrive with this one (`kept`), or are dropped
    /// with it (a design document at the coordinator).
    fn roll(&mut self, kept: bool) {
        let (keys, docs) = std::mem::take(&mut self.pending);
        if kept {
            self.stats.keys += keys;
            self.stats.docs += docs;
        }
    }

    /// Offers a candidate row; `doc` is its rendered JSON (`text`) and parsed value.
    fn offer(&mut self, key: Value, id: &str, text: &[u8], doc: &Value) -> Result<()> {
        if !self.opts.selector.matches(doc) {
            return Ok(());
        }
        self.roll(true);
        self.offer_matched(key, id, |fields| match fields {
            None => Ok(text.to_vec()),
            Some(f) => {
                Ok(serde_json::to_vec(&settee_mango::field::project(doc, f)?).expect("json"))
            }
        })
    }

    /// Takes a row whose document matched: skipped, or returned as `render` writes it
    /// (given the `fields` to project, if any).
    fn offer_matched(
        &mut self,
        key: Value,
        id: &str,
        render: impl FnOnce(Option<&Vec<String>>) -> Result<Vec<u8>>,
    ) -> Result<()> {
        if self.skip == 0 && self.stats.returned >= self.opts.limit {
            self.ended = true;
            return Ok(());
        }
        self.last = Some(Bookmark {
            key,
            docid: id.to_string(),
        });
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(());
        }
        let sep: &[u8] = if self.stats.returned == 0 {
            b"\r\n"
        } else {
            b",\r\n"
        };
        self.stats.returned += 1;
        let mut bytes = render(self.opts.fields.as_ref())?;
        if self.keyed {
            let last = self.last.as_ref().expect("set above");
            bytes = keyed_row(&last.key, id, &bytes);
        }
        self.open = (self.out)(sep) && (self.out)(&bytes);
        Ok(())
    }
}

/// A row as [`Node::find_given`] writes it: `{"key": key, "id": id, "doc": doc}`.
fn keyed_row(key: &Value, id: &str, doc: &[u8]) -> Vec<u8> {
    let mut row = format!("{{\"key\":{key},\"id\":{},\"doc\":", json!(id)).into_bytes();
    row.extend_from_slice(doc);
    row.push(b'}');
    row
}

/// CouchDB's warning of a query that examined many documents (`examined`, quorum reads
/// included) for those it returned, given `[mango] index_scan_warning_threshold`.
pub fn scan_warning(examined: u64, returned: u64, threshold: u64) -> Option<&'static str> {
    let ratio = if returned == 0 {
        examined
    } else {
        examined / returned.max(1)
    };
    let over = if returned == 0 {
        examined > threshold
    } else {
        examined > threshold * returned
    };
    (threshold > 0 && over && ratio > 0).then_some("The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this.")
}

/// Executes a planned `_find`, writing its body; with `given` design documents (see
/// [`Node::find_given`]) json indexes are views of those, and rows carry their index key.
#[allow(clippy::too_many_arguments)]
fn run(
    node: &Node,
    db: &Arc<Database>,
    opts: &FindOpts,
    plan: &Plan,
    threshold: u64,
    reader: Option<Arc<crate::replicator_read::Reader>>,
    given: Option<&[Value]>,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<()> {
    let started = Instant::now();
    out(b"{\"docs\":[");
    if plan.empty {
        out(b"\r\n]}\r\n");
        return Ok(());
    }
    let resume = opts.bookmark.as_deref().map(Bookmark::decode).transpose()?;
    let mut r = Run {
        opts,
        out,
        skip: opts.skip,
        stats: Stats::default(),
        pending: (0, 0),
        ended: false,
        last: None,
        open: true,
        reader,
        keyed: given.is_some(),
        index_seq: None,
    };
    let index = plan.index.as_ref().expect("a _find plan has an index");
    // Even `limit: 0` reads up to the first match, which ends it.
    match &index.kind {
        Kind::Special => scan_all_docs(db, opts, plan, resume.as_ref(), &mut r)?,
        Kind::Json { .. } => {
            let view = index_view(node, db, index, given)?;
            scan_view(node, db, opts, plan, index, view, resume.as_ref(), &mut r)?
        }
    }
    // A scan that ran out of rows sends the counts of those after its last match.
    r.roll(true);
    let bookmark = bookmark_after(r.last.as_ref(), opts.bookmark.as_ref());
    let s = &r.stats;
    let ms = started.elapsed().as_micros() as f64 / 1000.0;
    let m = settee_metrics::global();
    m.mango_keys_examined.inc_by(s.keys);
    m.mango_docs_examined.inc_by(s.docs);
    m.mango_results_returned.inc_by(s.returned);
    m.mango_query_time.record(ms);
    if matches!(index.kind, Kind::Special) {
        m.mango_unindexed_queries.inc();
    }
    let mut warnings = plan.warnings.clone();
    if let Some(w) = scan_warning(s.docs + s.quorum_docs, s.returned, threshold) {
        m.mango_too_many_docs_scanned.inc();
        warnings.push(w.into());
    }
    // For a coordinator (`Coordinator::build_others`): where this copy's index stands.
    let index_seq = r.index_seq.filter(|_| r.keyed);
    let stats = opts.execution_stats.then_some((s, ms));
    let tail = body_tail(bookmark, stats, &warnings, index_seq);
    (r.out)(tail.as_bytes());
    Ok(())
}

fn doc_opts(opts: &FindOpts) -> DocOpts {
    DocOpts {
        conflicts: opts.conflicts,
        ..Default::default()
    }
}

/// What a query reads of each document it examines.
struct Needs {
    /// The top-level members of the stored JSON the selector and `fields` read, when they
    /// can be picked out of it without parsing the rest; `None` when the whole rendered
    /// document is needed (the selector reads it as a whole, or names members only a
    /// rendered document has).
    members: Option<Vec<String>>,
    /// Of `_id` and `_rev`, those the selector reads (added before matching)...
    selector_meta: Vec<&'static str>,
    /// ... and those `fields` names (added to a match before projecting).
    fields_meta: Vec<&'static str>,
}

impl Needs {
    fn of(opts: &FindOpts) -> Needs {
        let selector = opts.selector.top_fields();
        let fields: Option<Vec<String>> = opts
            .fields
            .iter()
            .flatten()
            .map(|f| settee_mango::field::parse(f).ok()?.into_iter().next())
            .collect();
        let meta = |names: &Option<Vec<String>>| -> Vec<&'static str> {
            ["_id", "_rev"]
                .into_iter()
                .filter(|m| names.iter().flatten().any(|n| n == m))
                .collect()
        };
        let (selector_meta, fields_meta) = (meta(&selector), meta(&fields));
        let members = selector.zip(fields).and_then(|(mut names, fields)| {
            for f in fields {
                if !names.contains(&f) {
                    names.push(f);
                }
            }
            names.retain(|n| n != "_id" && n != "_rev");
            (!names.iter().any(|n| n.starts_with('_'))).then_some(names)
        });
        Needs {
            members,
            selector_meta,
            fields_meta,
        }
    }
}

/// The members `names` of a stored body, parsed (see [`Needs::members`]).
fn pick(body: &[u8], names: &[String]) -> Result<Map<String, Value>> {
    settee_mango::lazy::pick_members(body, names).ok_or_else(|| Error::internal("stored body"))
}

/// Adds a document's `_id` and/or `_rev` (`meta`) to its picked members.
fn add_meta(doc: &mut Map<String, Value>, meta: &[&str], row: &LiveDoc) {
    for &m in meta {
        let v = match m {
            "_id" => json!(row.id),
            _ => json!(row.winner.rev.to_string()),
        };
        doc.insert(m.into(), v);
    }
}

/// The stored info of a document met by an `_all_docs` scan.
fn info(row: &LiveDoc) -> Result<settee_db::DocInfo> {
    Ok(settee_db::DocInfo::decode(&row.info).map_err(settee_db::Error::from)?)
}

/// The body an `_all_docs` scan reads and matches for a document, if any (design documents
/// are read and matched too, but never returned).
fn examined(row: &LiveDoc) -> Option<u64> {
    row.winner.body
}

/// Rows read by an `_all_docs` scan at most at once, and bodies held at most at once.
const MAX_BATCH: usize = 1 << 18;
const BODY_CHUNK: usize = 1 << 16;

/// `_all_docs`: documents by id over the plan's `_id` range, design documents skipped.
/// Rows are read in batches that grow from 64 (a query that ends early reads little), or
/// all at once, from both ends by two threads, when the query will read every document
/// anyway and they are not too many.
fn scan_all_docs(
    db: &Arc<Database>,
    opts: &FindOpts,
    plan: &Plan,
    resume: Option<&Bookmark>,
    r: &mut Run<'_>,
) -> Result<()> {
    let mut lower: Vec<u8> = Vec::new();
    let mut upper: Option<Vec<u8>> = None;
    if let Some(range) = plan.ranges.first() {
        // Ids are strings, which sort after every other JSON value in raw order.
        if let Some((Value::String(s), _)) = &range.low {
            lower = s.as_bytes().to_vec();
        }
        match &range.high {
            Some((Value::String(s), _)) => {
                let mut u = s.as_bytes().to_vec();
                u.push(0);
                upper = Some(u);
            }
            Some(_) => return Ok(()),
            None => {}
        }
    }
    // A partition query reads only the partition's ids, `p:` up to `p;`.
    if !opts.partition.is_empty() {
        let (first, end) = settee_core::partition_id_range(&opts.partition);
        let (first, end) = (first.into_bytes(), end.into_bytes());
        if lower < first {
            lower = first;
        }
        if upper.as_ref().is_none_or(|u| *u > end) {
            upper = Some(end);
        }
    }
    let mut skip_id = None;
    if let Some(b) = resume {
        if plan.descending {
            upper = Some(b.docid.as_bytes().to_vec());
        } else {
            lower = b.docid.as_bytes().to_vec();
            skip_id = Some(b.docid.clone());
        }
    }
    let snap = db.store().snapshot();
    let scan = Scan {
        db,
        snap: &snap,
        opts,
        // A reader from whom credentials are hidden is matched against what they see.
        needs: Needs {
            members: Needs::of(opts).members.filter(|_| r.reader.is_none()),
            ..Needs::of(opts)
        },
        dopts: DocOpts {
            reader: r.reader.clone(),
            ..doc_opts(opts)
        },
    };
    // A query that can return every document (design documents never are) reads them all.
    let mut design = 0;
    let count = if opts.partition.is_empty() {
        db.scan_winners_in(&snap, b"_design/", Some(b"_design0"), false, |_| {
            design += 1;
            ControlFlow::Continue(())
        })?;
        db.stats_in(&snap)?.doc_count
    } else {
        db.partition_stats_in(&snap, &opts.partition)?.doc_count
    };
    if opts.limit.saturating_add(opts.skip).saturating_add(design) >= count
        && count <= MAX_BATCH as u64
    {
        let mut rows = db.winners_in(&snap, &lower, upper.as_deref())?;
        rows.retain(|d| skip_id.as_deref() != Some(d.id.as_str()));
        if plan.descending {
            rows.reverse();
        }
        return scan.batch(rows, r);
    }
    let mut size = 64;
    let mut batch = Vec::with_capacity(size);
    let mut failure = None;
    db.scan_winners_in(&snap, &lower, upper.as_deref(), plan.descending, |doc| {
        if skip_id.as_deref() == Some(doc.id.as_str()) {
            return ControlFlow::Continue(());
        }
        batch.push(doc);
        if batch.len() < size {
            return ControlFlow::Continue(());
        }
        size = (size * 2).min(MAX_BATCH);
        let full = std::mem::replace(&mut batch, Vec::with_capacity(size));
        match scan.batch(full, r) {
            Ok(()) if !r.done() => ControlFlow::Continue(()),
            Ok(()) => ControlFlow::Break(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    if !batch.is_empty() && !r.done() {
        scan.batch(batch, r)?;
    }
    Ok(())
}

/// A `_find` over `_all_docs` in progress.
struct Scan<'a> {
    db: &'a Database,
    snap: &'a settee_storage::Snapshot<'a>,
    opts: &'a FindOpts,
    needs: Needs,
    dopts: DocOpts,
}

impl Scan<'_> {
    /// Matches a batch of rows and offers the matches in id order. Bodies are read in body
    /// order (one pass over the bodies the batch names), a chunk at a time, each chunk
    /// split between the cores, which read their parts' bodies and match them.
    fn batch(&self, rows: Vec<LiveDoc>, r: &mut Run<'_>) -> Result<()> {
        // (body id, row) of every row examined, in body order.
        let mut order: Vec<(u64, usize)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, row)| Some((examined(row)?, i)))
            .collect();
        order.sort_unstable();
        let mut matches: Vec<(usize, Vec<u8>)> = Vec::new();
        for chunk in order.chunks(BODY_CHUNK) {
            let parts = par_chunks(chunk, |part| -> Result<Vec<(usize, Vec<u8>)>> {
                let ids: Vec<u64> = part.iter().map(|&(b, _)| b).collect();
                let mut found = Vec::new();
                let mut failure = None;
                self.db.each_body_in(self.snap, &ids, true, |j, body| {
                    let i = part[j].1;
                    match self.judge(&rows[i], body) {
                        Ok(Some(rendered)) => found.push((i, rendered)),
                        Ok(None) => {}
                        Err(e) => failure = failure.take().or(Some(e)),
                    }
                })?;
                failure.map_or(Ok(found), Err)
            });
            for part in parts {
                matches.extend(part?);
            }
        }
        matches.sort_unstable_by_key(|&(i, _)| i);
        // Rows count as examined up to the one that ends the query.
        let mut matches = matches.into_iter().peekable();
        for (i, row) in rows.iter().enumerate() {
            r.read_row(examined(row).is_some());
            let Some((_, rendered)) = matches.next_if(|(m, _)| *m == i) else {
                continue;
            };
            let design = row.id.starts_with("_design/");
            r.roll(!design);
            if design {
                continue;
            }
            r.offer_matched(Value::String(row.id.clone()), &row.id, |_| Ok(rendered))?;
            if r.done() {
                break;
            }
        }
        Ok(())
    }

    /// A document's rendering (whole, or its `fields`) if it matches the selector.
    fn judge(&self, row: &LiveDoc, body: &[u8]) -> Result<Option<Vec<u8>>> {
        // The candidate: the rendered document (kept, it may be the answer), or only the
        // members the query reads.
        let (mut doc, rendered) = match &self.needs.members {
            None => {
                let text = winner_json_with(&row.id, &info(row)?, body, &self.dopts, None);
                (crate::parse_json(&text)?, Some(text))
            }
            Some(members) => {
                let mut doc = pick(body, members)?;
                add_meta(&mut doc, &self.needs.selector_meta, row);
                (Value::Object(doc), None)
            }
        };
        if !self.opts.selector.matches(&doc) {
            return Ok(None);
        }
        Ok(Some(match (&self.opts.fields, rendered) {
            (None, Some(text)) => text,
            (None, None) => winner_json_with(&row.id, &info(row)?, body, &self.dopts, None),
            (Some(f), _) => {
                if let Value::Object(m) = &mut doc {
                    add_meta(m, &self.needs.fields_meta, row);
                }
                serde_json::to_vec(&settee_mango::field::project(&doc, f)?).expect("json")
            }
        }))
    }
}

/// `f` over `items` split into one contiguous part per core (one part when there are few),
/// the parts' results in order.
fn par_chunks<T: Sync, R: Send>(items: &[T], f: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |c| c.get())
        .min(items.len().div_ceil(256))
        .max(1);
    if workers == 1 {
        return vec![f(items)];
    }
    let per = items.len().div_ceil(workers);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per)
            .map(|part| {
                let f = &f;
                scope.spawn(move || f(part))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("matcher thread"))
            .collect()
    })
}

/// An upper bound above every value: objects sort last, and no member name sorts after
/// U+FFFF in ICU's root collation.
fn max_key() -> Value {
    json!({"\u{ffff}\u{ffff}": "\u{ffff}"})
}

/// A json index's view: of its design document in the database, or of the one `given`.
fn index_view(
    node: &Node,
    db: &Database,
    index: &Index,
    given: Option<&[Value]>,
) -> Result<(Arc<settee_views::Group>, usize)> {
    let ddoc = index.ddoc.as_deref().unwrap_or_default();
    let Some(given) = given else {
        return node.view_group(db, ddoc.trim_start_matches("_design/"), &index.name);
    };
    let design = (given.iter())
        .find(|d| d["_id"] == ddoc)
        .and_then(Value::as_object)
        .ok_or_else(|| Error::internal("a given index without its design document"))?;
    let g = node.views.group(db, ddoc, design)?;
    let n = (g.def.view(&index.name).map(|(i, _)| i))
        .ok_or_else(|| Error::NotFound("missing_named_view".into()))?;
    Ok((Arc::new(g), n))
}

/// A json index: its view's rows over the plan's key range, documents read by id (or
/// rebuilt from the key when the index covers the query).
#[allow(clippy::too_many_arguments)]
fn scan_view(
    node: &Node,
    db: &Arc<Database>,
    opts: &FindOpts,
    plan: &Plan,
    index: &Index,
    (g, view): (Arc<settee_views::Group>, usize),
    resume: Option<&Bookmark>,
    r: &mut Run<'_>,
) -> Result<()> {
    let (start, end) = plan.json_keys(max_key());
    let mut q = ViewQuery {
        start_key: Some(start),
        end_key: Some(end),
        descending: plan.descending,
        partition: (!opts.partition.is_empty()).then(|| opts.partition.clone()),
        ..Default::default()
    };
    // A bookmark resumes at its row, which is skipped: on a single node (as CouchDB's)
    // the first row whatever it is; on a shard copy (`keyed`) only if it is that row, as
    // the copy may not hold it (it was another range's).
    let mut passed = None;
    if let Some(b) = resume {
        q.start_key = Some(b.key.clone());
        q.start_docid = Some(b.docid.clone());
        if r.keyed {
            passed = Some(b.docid.as_str());
        } else {
            q.skip = 1;
        }
    }
    let fresh = if opts.refresh() {
        Freshness::Update
    } else {
        Freshness::Stale
    };
    let columns = index.columns();
    let mut failure = None;
    let mut out = |e: Event<'_>| {
        let (id, key) = match e {
            Event::Row { id, key, .. } => (id, key),
            Event::Head { update_seq, .. } => {
                r.index_seq = Some(update_seq);
                return ControlFlow::Continue(());
            }
            Event::Reduced { .. } => return ControlFlow::Continue(()),
        };
        if passed.take() == Some(id) {
            return ControlFlow::Continue(());
        }
        match view_row(db, opts, plan, &columns, r, id, key) {
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
            Ok(()) if r.done() => ControlFlow::Break(()),
            Ok(()) => ControlFlow::Continue(()),
        }
    };
    node.views.query(db, &g, view, &q, fresh, &mut out)?;
    failure.map_or(Ok(()), Err)
}

/// One row of a json index: its document read (or rebuilt from the key), then offered.
fn view_row(
    db: &Database,
    opts: &FindOpts,
    plan: &Plan,
    columns: &[String],
    r: &mut Run<'_>,
    id: &str,
    key: &[u8],
) -> Result<()> {
    r.read_row(!plan.covering && opts.r <= 1);
    let key: Value = crate::parse_json(key)?;
    let (text, doc) = if plan.covering {
        let mut doc = json!({"_id": id});
        if let Value::Array(values) = &key {
            for (c, v) in columns.iter().zip(values) {
                settee_mango::field::set(&mut doc, &settee_mango::field::parse(c)?, v.clone());
            }
        }
        (serde_json::to_vec(&doc).expect("json"), doc)
    } else {
        if opts.r > 1 {
            r.stats.quorum_docs += 1;
        }
        let found = match db.open_doc(id, None) {
            Ok(d) if !d.deleted => d,
            _ => return Ok(()),
        };
        let dopts = DocOpts {
            reader: r.reader.clone(),
            ..doc_opts(opts)
        };
        let text = doc_json(&found, &dopts);
        let doc = crate::parse_json(&text)?;
        (text, doc)
    };
    r.offer(key, id, &text, &doc)
}
