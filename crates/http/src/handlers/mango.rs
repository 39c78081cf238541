//! Mango over HTTP: `POST /{db}/_find` and `_explain`, `/{db}/_index` (list, create,
//! delete, bulk delete). The meaning of selectors and options and the choice of index are
//! `settee_mango`'s; this module reads the rows the plan names (from `_all_docs` or a json
//! index's view) and renders CouchDB's answers.

use super::{allow, blocking, doc};
use crate::error::{ApiError, ApiResult};
use crate::render::{doc_json, winner_json_with, DocOpts};
use crate::reply::{json, stream, JSON};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::split_stored;
use settee_db::Database;
use settee_mango::bookmark::Bookmark;
use settee_mango::index::{self, Index, Kind};
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_mango::plan::{self, Plan};
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
    let mut out = vec![Index::all_docs()];
    let mut failure = None;
    db.scan_docs(b"_design/", Some(b"_design0"), false, true, |row| {
        let Some(body) = row.body.as_deref() else {
            return ControlFlow::Continue(());
        };
        match serde_json::from_slice::<Map<String, Value>>(split_stored(body).0) {
            Ok(map) => out.extend(index::from_design_doc(&row.id, &map, false)),
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

/// `POST /{db}/_find` (or `_explain` when `explain`).
pub async fn find(
    state: AppState,
    db: Arc<Database>,
    mut req: Req,
    explain: bool,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    let body = object_body(&mut req).await?;
    let default_limit = state.node.get_u64("mango", "default_limit", 25);
    let opts = FindOpts::parse(&body, default_limit)?;
    if !opts.partition.is_empty() {
        return Err(ApiError::bad_request(
            "`partition` parameter is not supported in this db.",
        ));
    }
    let d = db.clone();
    let all = blocking(move || indexes(&d)).await?;
    let plan = plan::plan(&opts, &all, explain)?;
    if explain {
        return Ok(json(StatusCode::OK, &explain_json(&db, &opts, &plan)));
    }
    let threshold = state
        .node
        .get_u64("mango", "index_scan_warning_threshold", 10);
    Ok(stream(JSON, move |sink| {
        run(&state, &db, &opts, &plan, threshold, &mut |b| sink.write(b))
    })
    .await)
}

fn explain_json(db: &Database, opts: &FindOpts, plan: &Plan) -> Value {
    let mut out = json!({
        "dbname": db.name,
        "index": plan.index.as_ref().map(Index::to_json),
        "partitioned": false,
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
    last: Option<Bookmark>,
    open: bool,
}

impl Run<'_> {
    fn done(&self) -> bool {
        !self.open || self.stats.returned >= self.opts.limit
    }

    /// Offers a candidate row; `doc` is its rendered JSON (`text`) and parsed value.
    fn offer(&mut self, key: Value, id: &str, text: &[u8], doc: &Value) -> ApiResult<()> {
        if !self.opts.selector.matches(doc) {
            return Ok(());
        }
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

/// A rendered or stored document parsed (stored text is valid JSON; failing that is an
/// internal error).
pub(crate) fn parse_doc(text: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(text)
        .map_err(|_| ApiError::Db(settee_db::Error::Internal("stored body".into())))
}

/// Executes a planned `_find`, writing its body.
fn run(
    state: &AppState,
    db: &Arc<Database>,
    opts: &FindOpts,
    plan: &Plan,
    threshold: u64,
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
        last: None,
        open: true,
    };
    let index = plan.index.as_ref().expect("a _find plan has an index");
    if opts.limit > 0 {
        match &index.kind {
            Kind::Special => scan_all_docs(db, opts, plan, resume.as_ref(), &mut r)?,
            Kind::Json { .. } => scan_view(state, db, opts, plan, index, resume.as_ref(), &mut r)?,
        }
    }
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

/// The top-level members a query reads from each document, when they can be picked out
/// of its stored JSON without parsing the rest; `None` when the whole document is needed
/// (the selector reads it as a whole, or names members only a rendered document has).
fn needed_members(opts: &FindOpts) -> Option<Vec<String>> {
    let mut names = opts.selector.top_fields()?;
    for f in opts.fields.iter().flatten() {
        let first = settee_mango::field::parse(f).ok()?.into_iter().next()?;
        if !names.contains(&first) {
            names.push(first);
        }
    }
    let rendered_only = |n: &String| n.starts_with('_') && n != "_id" && n != "_rev";
    (!names.iter().any(rendered_only)).then_some(names)
}

/// The document a selector sees: the rendered document, or only the members it reads
/// (with `_id` and `_rev` when it reads them).
fn candidate(
    id: &str,
    info: &settee_db::DocInfo,
    rev: &settee_core::Rev,
    body: &[u8],
    needed: Option<&[String]>,
    dopts: &DocOpts,
) -> ApiResult<Value> {
    let Some(names) = needed else {
        return parse_doc(&winner_json_with(id, info, body, dopts, None));
    };
    let stored = split_stored(body).0;
    let mut doc = settee_mango::lazy::pick_members(stored, names)
        .ok_or_else(|| ApiError::Db(settee_db::Error::Internal("stored body".into())))?;
    for name in names {
        match name.as_str() {
            "_id" => doc.insert("_id".into(), json!(id)),
            "_rev" => doc.insert("_rev".into(), json!(rev.to_string())),
            _ => None,
        };
    }
    Ok(Value::Object(doc))
}

/// `_all_docs`: documents by id over the plan's `_id` range, design documents skipped.
/// Rows are read in batches (bodies by one multi-get), and each batch's documents are
/// matched on every core before the matches are taken in order.
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
        needed: needed_members(opts),
        dopts: doc_opts(opts),
    };
    let mut batch = Vec::new();
    let mut size = 64;
    let mut failure = None;
    db.scan_infos_in(
        &snap,
        &lower,
        upper.as_deref(),
        plan.descending,
        |id, info| {
            if skip_id.as_deref() == Some(id.as_str()) {
                return ControlFlow::Continue(());
            }
            batch.push((id, info));
            if batch.len() < size {
                return ControlFlow::Continue(());
            }
            size = (size * 2).min(1 << 16);
            match scan.batch(std::mem::take(&mut batch), r) {
                Ok(()) if !r.done() => ControlFlow::Continue(()),
                Ok(()) => ControlFlow::Break(()),
                Err(e) => {
                    failure = Some(e);
                    ControlFlow::Break(())
                }
            }
        },
    )?;
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
    needed: Option<Vec<String>>,
    dopts: DocOpts,
}

impl Scan<'_> {
    fn batch(&self, rows: Vec<(String, settee_db::DocInfo)>, r: &mut Run<'_>) -> ApiResult<()> {
        // Design documents are read (and counted) but never returned.
        let rows: Vec<(String, settee_db::DocInfo, Option<settee_core::Leaf>)> = rows
            .into_iter()
            .map(|(id, info)| {
                let winner = info
                    .tree
                    .winner()
                    .filter(|w| w.body.is_some() && !id.starts_with("_design/"));
                (id, info, winner)
            })
            .collect();
        let docs: Vec<(&str, &settee_db::DocInfo, &settee_core::Leaf)> = rows
            .iter()
            .filter_map(|(id, info, w)| Some((id.as_str(), info, w.as_ref()?)))
            .collect();
        let ids: Vec<u64> = docs.iter().filter_map(|(_, _, w)| w.body).collect();
        let pinned = self.db.bodies_in(self.snap, &ids, true)?;
        let bodies: Vec<&[u8]> = pinned.iter().map(|p| &p[..]).collect();
        // Match on every core; each document's verdict is its candidate if it matched.
        let judge = |i: usize| -> ApiResult<Option<Value>> {
            let (id, info, w) = docs[i];
            let doc = candidate(
                id,
                info,
                &w.rev,
                bodies[i],
                self.needed.as_deref(),
                &self.dopts,
            )?;
            Ok(self.opts.selector.matches(&doc).then_some(doc))
        };
        let n = docs.len();
        let workers = std::thread::available_parallelism()
            .map_or(1, |c| c.get())
            .min(n.div_ceil(256))
            .max(1);
        let per = n.div_ceil(workers);
        let verdicts: Vec<ApiResult<Option<Value>>> = if workers == 1 {
            (0..n).map(judge).collect()
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers)
                    .map(|w| {
                        let judge = &judge;
                        scope.spawn(move || {
                            (w * per..((w + 1) * per).min(n))
                                .map(judge)
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().expect("matcher thread"))
                    .collect()
            })
        };
        let mut verdicts = verdicts.into_iter();
        let mut bodies = bodies.into_iter();
        for (id, info, winner) in &rows {
            r.stats.keys += 1;
            if winner.is_none() {
                continue;
            }
            r.stats.docs += 1;
            let body = bodies.next().expect("a body per document");
            if let Some(doc) = verdicts.next().expect("a verdict per document")? {
                r.offer_matched(Value::String(id.clone()), id, |fields| match fields {
                    None => Ok(winner_json_with(id, info, body, &self.dopts, None)),
                    Some(f) => {
                        Ok(serde_json::to_vec(&settee_mango::field::project(&doc, f)?)
                            .expect("json"))
                    }
                })?;
            }
            if r.done() {
                break;
            }
        }
        Ok(())
    }
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
    let (g, view) =
        super::views::load_group(state, db, ddoc.trim_start_matches("_design/"), &index.name)?;
    let (start, end) = plan.json_keys(max_key());
    let mut q = ViewQuery {
        start_key: Some(start),
        end_key: Some(end),
        descending: plan.descending,
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
    r.stats.keys += 1;
    let key: Value = parse_doc(key)?;
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
        } else {
            r.stats.docs += 1;
        }
        let found = match db.open_doc(id, None) {
            Ok(d) if !d.deleted => d,
            _ => return Ok(()),
        };
        let text = doc_json(&found, &doc_opts(opts));
        let doc = parse_doc(&text)?;
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
        Ok((creation?, rev))
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
