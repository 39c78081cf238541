//! Mango over HTTP: `POST /{db}/_find` and `_explain`, `/{db}/_index` (list, create,
//! delete, bulk delete). The meaning of selectors and options and the choice of index are
//! `settee_mango`'s; this module reads the rows the plan names (from `_all_docs` or a json
//! index's view) and renders CouchDB's answers.

use super::{allow, blocking, doc};
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, stream, JSON};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::split_stored;
use settee_db::{Database, LiveDoc};
use settee_mango::bookmark::Bookmark;
use settee_mango::index::{self, Index, Kind};
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_mango::plan::{self, Plan};
use settee_mango::Error as MangoError;
use settee_node::{doc_json, winner_json_with, DocOpts};
use settee_views::{Event, Freshness, ViewQuery};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

/// The body of a Mango POST: JSON content, a JSON object.
async fn object_body(req: &mut Req) -> ApiResult<Map<String, Value>> {
    require_json(&req.headers)?;
    match req.json().await? {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("Request body must be a JSON object")),
    }
}

/// Every index of `db`: `_all_docs`, then the json indexes of its `"language": "query"`
/// design documents, in listing order.
fn indexes(db: &Database) -> ApiResult<Vec<Index>> {
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
        return Err(ApiError::Db(settee_db::Error::Internal(format!(
            "design document: {e}"
        ))));
    }
    index::sort_for_listing(&mut out);
    Ok(out)
}

/// `POST /{db}/_find` (or `_explain` when `explain`); `partition` is the one of
/// `/{db}/_partition/{p}/_find`, which takes the place of the body's.
pub async fn find(
    state: AppState,
    db: Arc<Database>,
    mut req: Req,
    explain: bool,
    partition: Option<String>,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    let body = object_body(&mut req).await?;
    let default_limit = state.config.get_u64("mango", "default_limit", 25);
    let mut opts = FindOpts::parse(&body, default_limit)?;
    if let Some(p) = partition {
        opts.partition = p;
    }
    let partitioned = db.props().partitioned;
    if !opts.partition.is_empty() && !partitioned {
        return Err(ApiError::bad_request(
            "`partition` parameter is not supported in this db.",
        ));
    }
    let d = db.clone();
    let all = blocking(move || indexes(&d)).await?;
    let plan = plan::plan(&opts, &all, explain).map_err(|e| match e {
        // `mango_idx:mango_sort_error`: a partitioned database names the indexes' scope.
        MangoError::NoUsableSortIndex if partitioned => ApiError::Named(
            StatusCode::BAD_REQUEST,
            "no_usable_index".into(),
            format!(
                "No {} index exists for this sort, try indexing by the sort fields.",
                if opts.partition.is_empty() {
                    "global"
                } else {
                    "partitioned"
                }
            ),
        ),
        e => e.into(),
    })?;
    if explain {
        return Ok(json(StatusCode::OK, &explain_json(&db, &opts, &plan)));
    }
    let threshold = state
        .config
        .get_u64("mango", "index_scan_warning_threshold", 10);
    let reader = settee_node::replicator_read::reader(&db, &req.user);
    Ok(stream(JSON, move |sink| {
        run(&state, &db, &opts, &plan, threshold, reader, &mut |b| {
            sink.write(b)
        })
    })
    .await)
}

fn explain_json(db: &Database, opts: &FindOpts, plan: &Plan) -> Value {
    let mut out = json!({
        "dbname": db.name,
        "index": plan.index.as_ref().map(Index::to_json),
        "partitioned": plan.index.as_ref().is_some_and(|i| if i.is_special() {
            db.props().partitioned
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
#[derive(Default)]
struct Stats {
    keys: u64,
    docs: u64,
    quorum_docs: u64,
    returned: u64,
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
    reader: Option<Arc<settee_node::replicator_read::Reader>>,
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
    fn offer(&mut self, key: Value, id: &str, text: &[u8], doc: &Value) -> ApiResult<()> {
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
        render: impl FnOnce(Option<&Vec<String>>) -> ApiResult<Vec<u8>>,
    ) -> ApiResult<()> {
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
        let bytes = render(self.opts.fields.as_ref())?;
        self.open = (self.out)(sep) && (self.out)(&bytes);
        Ok(())
    }
}

/// Executes a planned `_find`, writing its body.
fn run(
    state: &AppState,
    db: &Arc<Database>,
    opts: &FindOpts,
    plan: &Plan,
    threshold: u64,
    reader: Option<Arc<settee_node::replicator_read::Reader>>,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> ApiResult<()> {
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
    };
    let index = plan.index.as_ref().expect("a _find plan has an index");
    // Even `limit: 0` reads up to the first match, which ends it.
    match &index.kind {
        Kind::Special => scan_all_docs(db, opts, plan, resume.as_ref(), &mut r)?,
        Kind::Json { .. } => scan_view(state, db, opts, plan, index, resume.as_ref(), &mut r)?,
    }
    // A scan that ran out of rows sends the counts of those after its last match.
    r.roll(true);
    let bookmark = match (&r.last, &opts.bookmark) {
        (Some(b), _) => b.encode(),
        (None, Some(given)) => given.clone(),
        (None, None) => "nil".into(),
    };
    let mut tail = format!("\r\n],\r\n\"bookmark\": {}", Value::String(bookmark));
    let s = &r.stats;
    if opts.execution_stats {
        let ms = started.elapsed().as_micros() as f64 / 1000.0;
        let stats = json!({
            "total_keys_examined": s.keys,
            "total_docs_examined": s.docs,
            "total_quorum_docs_examined": s.quorum_docs,
            "results_returned": s.returned,
            "execution_time_ms": ms,
        });
        tail.push_str(&format!(",\r\n\"execution_stats\": {stats}"));
    }
    let m = settee_metrics::global();
    m.mango_keys_examined.inc_by(s.keys);
    m.mango_docs_examined.inc_by(s.docs);
    m.mango_results_returned.inc_by(s.returned);
    m.mango_query_time
        .record(started.elapsed().as_micros() as f64 / 1000.0);
    if matches!(index.kind, Kind::Special) {
        m.mango_unindexed_queries.inc();
    }
    let mut warnings = plan.warnings.clone();
    let scanned = s.docs + s.quorum_docs;
    let ratio = if s.returned == 0 {
        scanned
    } else {
        scanned / s.returned.max(1)
    };
    let over = if s.returned == 0 {
        scanned > threshold
    } else {
        scanned > threshold * s.returned
    };
    if threshold > 0 && over && ratio > 0 {
        m.mango_too_many_docs_scanned.inc();
        warnings.push("The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this.".into());
    }
    if !warnings.is_empty() {
        tail.push_str(&format!(
            ",\r\n\"warning\": {}",
            Value::String(warnings.join("\n"))
        ));
    }
    tail.push_str("}\r\n");
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
fn pick(body: &[u8], names: &[String]) -> ApiResult<Map<String, Value>> {
    settee_mango::lazy::pick_members(body, names)
        .ok_or_else(|| ApiError::Db(settee_db::Error::Internal("stored body".into())))
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
fn info(row: &LiveDoc) -> ApiResult<settee_db::DocInfo> {
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
) -> ApiResult<()> {
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
    fn batch(&self, rows: Vec<LiveDoc>, r: &mut Run<'_>) -> ApiResult<()> {
        // (body id, row) of every row examined, in body order.
        let mut order: Vec<(u64, usize)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, row)| Some((examined(row)?, i)))
            .collect();
        order.sort_unstable();
        let mut matches: Vec<(usize, Vec<u8>)> = Vec::new();
        for chunk in order.chunks(BODY_CHUNK) {
            let parts = par_chunks(chunk, |part| -> ApiResult<Vec<(usize, Vec<u8>)>> {
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
    fn judge(&self, row: &LiveDoc, body: &[u8]) -> ApiResult<Option<Vec<u8>>> {
        // The candidate: the rendered document (kept, it may be the answer), or only the
        // members the query reads.
        let (mut doc, rendered) = match &self.needs.members {
            None => {
                let text = winner_json_with(&row.id, &info(row)?, body, &self.dopts, None);
                (settee_node::changes::parse_doc(&text)?, Some(text))
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

/// A json index: its view's rows over the plan's key range, documents read by id (or
/// rebuilt from the key when the index covers the query).
fn scan_view(
    state: &AppState,
    db: &Arc<Database>,
    opts: &FindOpts,
    plan: &Plan,
    index: &Index,
    resume: Option<&Bookmark>,
    r: &mut Run<'_>,
) -> ApiResult<()> {
    let ddoc = index.ddoc.as_deref().unwrap_or_default();
    let (g, view) = state.view_group(db, ddoc.trim_start_matches("_design/"), &index.name)?;
    let (start, end) = plan.json_keys(max_key());
    let mut q = ViewQuery {
        start_key: Some(start),
        end_key: Some(end),
        descending: plan.descending,
        partition: (!opts.partition.is_empty()).then(|| opts.partition.clone()),
        ..Default::default()
    };
    if let Some(b) = resume {
        q.start_key = Some(b.key.clone());
        q.start_docid = Some(b.docid.clone());
        q.skip = 1;
    }
    let fresh = if opts.refresh() {
        Freshness::Update
    } else {
        Freshness::Stale
    };
    let columns = index.columns();
    let mut failure = None;
    let mut out = |e: Event<'_>| {
        let Event::Row { id, key, .. } = e else {
            return ControlFlow::Continue(());
        };
        match view_row(db, opts, plan, &columns, r, id, key) {
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
            Ok(()) if r.done() => ControlFlow::Break(()),
            Ok(()) => ControlFlow::Continue(()),
        }
    };
    state
        .views
        .query(db, &g, view, &q, fresh, &mut out)
        .map_err(ApiError::from)?;
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
) -> ApiResult<()> {
    r.read_row(!plan.covering && opts.r <= 1);
    let key: Value = settee_node::changes::parse_doc(key)?;
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
        let doc = settee_node::changes::parse_doc(&text)?;
        (text, doc)
    };
    r.offer(key, id, &text, &doc)
}

/// `/{db}/_index[/…]`; `rest` is the path after `_index`.
pub async fn index(
    state: AppState,
    db: Arc<Database>,
    rest: Vec<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match rest.as_slice() {
        [] => match req.method.as_str() {
            "GET" | "HEAD" => list(db, &req).await,
            "POST" => create(&state, db, &mut req).await,
            _ => Err(ApiError::MethodNotAllowed("GET,POST")),
        },
        ["_bulk_delete"] => {
            allow(&req.method, "POST")?;
            let body = object_body(&mut req).await?;
            let ids = settee_mango::opts::bulk_delete_ids(&body)?;
            let (mut success, mut fail) = (Vec::new(), Vec::new());
            for id in ids {
                let ddoc = index::ddoc_id(&id);
                if delete_indexes(&state, &db, &req, &ddoc, None).await? {
                    success.push(json!({"id": ddoc, "ok": true}));
                } else {
                    fail.push(json!({"id": ddoc, "error": "not_found"}));
                }
            }
            success.reverse();
            fail.reverse();
            Ok(json(
                StatusCode::OK,
                &json!({"success": success, "fail": fail}),
            ))
        }
        ["_design", ddoc, kind, name] | [ddoc, kind, name] => {
            allow(&req.method, "DELETE")?;
            let ddoc = index::ddoc_id(ddoc);
            let (kind, name) = (kind.to_string(), name.to_string());
            if kind == "json" && delete_indexes(&state, &db, &req, &ddoc, Some(&name)).await? {
                Ok(crate::reply::ok_true(StatusCode::OK))
            } else {
                Err(ApiError::NotFound("missing".into()))
            }
        }
        _ => Err(ApiError::NotFound("missing".into())),
    }
}

/// `GET /{db}/_index`.
async fn list(db: Arc<Database>, req: &Req) -> ApiResult<Response> {
    let int = |k: &str| -> ApiResult<Option<i64>> {
        req.params
            .get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| settee_mango::Error::InvalidListIndexParams.into())
            })
            .transpose()
    };
    let (limit, skip) = (int("limit")?, int("skip")?);
    if limit.is_some_and(|l| l < 1) || skip.is_some_and(|s| s < 0) {
        return Err(settee_mango::Error::InvalidListIndexParams.into());
    }
    let all = blocking(move || indexes(&db)).await?;
    let total = all.len();
    let page: Vec<Value> = all
        .iter()
        .skip(skip.unwrap_or(0) as usize)
        .take(limit.map_or(usize::MAX, |l| l as usize))
        .map(Index::to_json)
        .collect();
    Ok(json(
        StatusCode::OK,
        &json!({"total_rows": total, "indexes": page}),
    ))
}

/// The body of design document `id` (without `_id`/`_rev`) and its revision, if it exists.
fn ddoc_body(db: &Database, id: &str) -> ApiResult<Option<(Map<String, Value>, String)>> {
    match db.open_doc(id, None) {
        Ok(d) if !d.deleted => {
            let body = serde_json::from_slice(split_stored(&d.body).0)
                .map_err(|_| ApiError::Db(settee_db::Error::Internal("stored body".into())))?;
            Ok(Some((body, d.rev.to_string())))
        }
        Ok(_) | Err(settee_db::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes a design document through the normal write path (so only database admins can,
/// and validation functions run); CouchDB words a failed save its own way.
async fn save_ddoc(
    state: &AppState,
    db: &Arc<Database>,
    req: &Req,
    id: &str,
    rev: Option<&str>,
    body: Option<Map<String, Value>>,
) -> ApiResult<()> {
    let mut doc = body.unwrap_or_default();
    let deleted = doc.is_empty();
    doc.insert("_id".into(), json!(id));
    if let Some(rev) = rev {
        doc.insert("_rev".into(), json!(rev));
    }
    if deleted {
        doc = [
            ("_id".into(), json!(id)),
            ("_rev".into(), json!(rev)),
            ("_deleted".into(), json!(true)),
        ]
        .into_iter()
        .collect();
    }
    let parsed = settee_core::parse_doc(Value::Object(doc))?;
    match doc::write_one(state, db.clone(), req, parsed, true, false).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let (status, error, _) = e.parts();
            match (status.as_u16(), error.as_ref()) {
                (401 | 403, _) => Err(e),
                (409, _) => Err(ApiError::Named(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error_saving_ddoc".into(),
                    "Encountered a conflict while saving the design document.".into(),
                )),
                (_, error) => Err(ApiError::Named(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error_saving_ddoc".into(),
                    format!("Unknown error while saving the design document: {error}"),
                )),
            }
        }
    }
}

/// `POST /{db}/_index`.
async fn create(state: &AppState, db: Arc<Database>, req: &mut Req) -> ApiResult<Response> {
    let body = object_body(req).await?;
    let opts = IndexOpts::parse(&body)?;
    let d = db.clone();
    let (creation, rev) = blocking(move || {
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
        Ok((creation, rev))
    })
    .await?;
    let result = match creation.body {
        None => "exists",
        Some(body) => {
            save_ddoc(
                state,
                &db,
                req,
                &creation.ddoc_id,
                rev.as_deref(),
                Some(body),
            )
            .await?;
            "created"
        }
    };
    Ok(json(
        StatusCode::OK,
        &json!({"result": result, "id": creation.ddoc_id, "name": creation.name}),
    ))
}

/// Deletes json index `name` (every json index when `None`) of design document `ddoc`;
/// `false` when it has none such.
async fn delete_indexes(
    state: &AppState,
    db: &Arc<Database>,
    req: &Req,
    ddoc: &str,
    name: Option<&str>,
) -> ApiResult<bool> {
    let (d, id) = (db.clone(), ddoc.to_string());
    let Some((body, rev)) = blocking(move || ddoc_body(&d, &id)).await? else {
        return Ok(false);
    };
    let names = match name {
        Some(n) => vec![n.to_string()],
        None => index::json_names(&body),
    };
    let mut current = Some(body);
    for n in &names {
        let Some(b) = &current else { break };
        match index::remove(b, "json", n) {
            None => return Ok(false),
            Some(next) => current = next,
        }
    }
    if names.is_empty() {
        return Ok(false);
    }
    // CouchDB answers `ok` even when the write fails (but not when it is refused).
    match save_ddoc(state, db, req, ddoc, Some(&rev), current).await {
        Err(e) if matches!(e.parts().0.as_u16(), 401 | 403) => Err(e),
        _ => Ok(true),
    }
}
