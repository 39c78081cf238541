//! `_changes` (normal, longpoll, continuous, eventsource) and `_db_updates`.

use super::attachments::AttRender;
use super::{allow, blocking};
use crate::design_filter::{self, DesignFilter, ReqInfo};
use crate::error::{ApiError, ApiResult};
use crate::mrargs::{parse_pos_int, Val};
use crate::reply::{delayed, stream, stream_async, JSON};
use crate::req::Params;
use crate::{AppState, Req};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Value};
use settee_core::{Rev, SeqArg, SeqCodec};
use settee_db::{Change, Database};
use settee_node::{seqs, winner_json_with, with_doc, DocOpts};
use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feed {
    Normal,
    Longpoll,
    Continuous,
    EventSource,
}

impl Feed {
    /// `_changes`'s `feed` (`live` is CouchDB's other name for `continuous`).
    fn for_changes(p: &Params) -> ApiResult<Feed> {
        Ok(match p.get("feed").unwrap_or("normal") {
            "normal" => Feed::Normal,
            "longpoll" => Feed::Longpoll,
            "continuous" | "live" => Feed::Continuous,
            "eventsource" => Feed::EventSource,
            _ => {
                return Err(ApiError::bad_request(
                    "Supported `feed` types: normal, continuous, live, longpoll, eventsource",
                ))
            }
        })
    }

    fn parse(p: &Params) -> ApiResult<Feed> {
        Ok(match p.get("feed").unwrap_or("normal") {
            "normal" => Feed::Normal,
            "longpoll" => Feed::Longpoll,
            "continuous" => Feed::Continuous,
            "eventsource" => Feed::EventSource,
            other => return Err(ApiError::bad_request(format!("Supported `feed` types: normal, continuous, live, longpoll, eventsource (got {other})"))),
        })
    }
}

#[derive(Clone, Debug)]
enum Filter {
    None,
    /// `filter=_doc_ids`; `lookup` when there are few enough ids to look each up
    /// (`[couchdb] changes_doc_ids_optimization_threshold`) rather than scan the sequences.
    DocIds {
        ids: HashSet<String>,
        lookup: bool,
    },
    Design,
    /// `filter=_view`: changes of documents the view's map function emits rows for.
    View(ViewFilter),
    /// `filter=_selector`: revisions whose documents match a Mango selector.
    Selector(Arc<settee_mango::Selector>),
    /// `filter=ddoc/name`: revisions a design document's filter function passes.
    Function(DesignFilter),
}

#[derive(Clone)]
struct ViewFilter {
    group: Arc<settee_views::Group>,
    view: usize,
    /// The group's map when its language is native (Mango's `query`), not JavaScript.
    native: Option<Arc<dyn settee_views::NativeMap>>,
}

impl std::fmt::Debug for ViewFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ViewFilter({}, {})", self.group.ddoc_id, self.view)
    }
}

/// What maps documents for a view filter while one feed runs.
enum ViewMapper {
    Js(settee_js::ViewRuntime),
    /// The whole group's native map, and which of its views the filter names.
    Native(Arc<dyn settee_views::NativeMap>, usize),
}

impl ViewFilter {
    fn load(state: &AppState, db: &Database, ddoc: &str, view: &str) -> ApiResult<ViewFilter> {
        design_member(db, ddoc, &["views", view])?;
        let (group, view) = super::views::load_group(state, db, ddoc, view)?;
        if !state.views.knows_language(&group.def.language) {
            let unknown =
                settee_views::queryserver::Error::UnknownLanguage(group.def.language.clone());
            return Err(settee_views::Error::QueryServer(unknown).into());
        }
        let native = state.views.native_map(&group.def).map_err(ApiError::from)?;
        Ok(ViewFilter {
            group,
            view,
            native,
        })
    }

    fn mapper(&self, state_limits: &settee_views::Limits) -> ApiResult<ViewMapper> {
        if let Some(native) = &self.native {
            return Ok(ViewMapper::Native(native.clone(), self.view));
        }
        let src = &self.group.fns.views[self.view];
        let fns = settee_js::ViewFns {
            views: vec![settee_js::ViewSource {
                name: src.name.clone(),
                map: src.map.clone(),
                reduce: None,
            }],
            lib: self.group.fns.lib.clone(),
            dialect: self.group.fns.dialect,
        };
        settee_js::ViewRuntime::new(&fns, *state_limits)
            .map(ViewMapper::Js)
            .map_err(|e| ApiError::from(settee_views::Error::Js(e)))
    }
}

impl ViewMapper {
    /// Whether the view filter's map function emits anything for the change's document.
    fn emits(&mut self, c: &Change) -> ApiResult<bool> {
        let w = c.info.tree.winner().expect("stored docs have a winner");
        let mut j = settee_core::DocJson::new(
            &c.id,
            Some(&w.rev.to_string()),
            c.body.as_deref().unwrap_or(b"{}"),
        );
        if w.deleted {
            j.member("_deleted", &Value::Bool(true));
        }
        let text = j.finish();
        match self {
            ViewMapper::Js(rt) => {
                let text = String::from_utf8(text).map_err(|_| ApiError::bad_request("body"))?;
                let res = rt
                    .map_doc(&text)
                    .map_err(|e| ApiError::from(settee_views::Error::Js(e)))?;
                Ok(matches!(res.first(), Some(Ok(rows)) if !rows.is_empty()))
            }
            ViewMapper::Native(map, view) => {
                let rows = map
                    .map_doc(&text)
                    .map_err(|e| ApiError::Db(settee_db::Error::Internal(e)))?;
                Ok(rows.get(*view).is_some_and(|r| !r.is_empty()))
            }
        }
    }
}

/// The revisions of a change whose documents match `sel` (CouchDB's selector filter): the
/// winner, or with `style=all_docs` every leaf, each as `GET /{db}/{id}?rev=` shows it.
fn selector_passes(
    db: &Database,
    sel: &settee_mango::Selector,
    c: &Change,
    all_leaves: bool,
) -> ApiResult<Vec<Rev>> {
    let matches =
        |json: Vec<u8>| -> ApiResult<bool> { Ok(sel.matches(&super::mango::parse_doc(&json)?)) };
    let winner = c.info.tree.winner().expect("stored docs have a winner");
    if !all_leaves {
        let body = c.body.as_deref().unwrap_or(b"{}");
        let json = winner_json_with(&c.id, &c.info, body, &DocOpts::default(), None);
        return Ok(if matches(json)? {
            vec![winner.rev]
        } else {
            vec![]
        });
    }
    let mut passed = Vec::new();
    for leaf in c.info.tree.leaves() {
        let doc = db.open_doc(&c.id, Some(&leaf.rev))?;
        if matches(settee_node::doc_json(&doc, &DocOpts::default()))? {
            passed.push(leaf.rev);
        }
    }
    Ok(passed)
}

/// The `filter` a request names, before its design document is read.
#[derive(Debug, PartialEq)]
enum FilterSpec {
    None,
    DocIds(HashSet<String>),
    Design,
    View(String, String),
    /// `designname/filtername`: a JavaScript filter function.
    Function(String, String),
    Selector(Value),
}

/// `name` split at `/` into non-empty parts, as CouchDB's `string:tokens`.
fn tokens(name: &str) -> Vec<&str> {
    name.split('/').filter(|t| !t.is_empty()).collect()
}

/// CouchDB's `configure_filter`: the filter named by `filter`, with CouchDB's errors.
/// `body` is a POST's JSON body (`None` for an empty one).
fn filter_spec(
    filter: Option<&str>,
    p: &Params,
    post: bool,
    body: Option<&Value>,
) -> ApiResult<FilterSpec> {
    let invalid_json = || ApiError::bad_request("invalid UTF-8 JSON");
    Ok(match filter.unwrap_or("") {
        "_doc_ids" => {
            let ids = if post {
                body.ok_or_else(invalid_json)?.get("doc_ids").cloned()
            } else {
                let raw = p.get("doc_ids").unwrap_or("null");
                Some(serde_json::from_str(raw).map_err(|_| invalid_json())?)
            };
            FilterSpec::DocIds(doc_ids(ids.as_ref().unwrap_or(&Value::Null))?)
        }
        "_selector" => {
            if !post {
                return Err(ApiError::bad_request(
                    "Selector must be specified in POST payload",
                ));
            }
            match body.ok_or_else(invalid_json)?.get("selector") {
                Some(sel @ Value::Object(_)) => FilterSpec::Selector(sel.clone()),
                _ => {
                    return Err(ApiError::bad_request(
                        "Selector error: expected a JSON object",
                    ))
                }
            }
        }
        "_design" => FilterSpec::Design,
        "_view" => {
            let view = p.get("view").unwrap_or("");
            if view.is_empty() {
                return Err(ApiError::bad_request(
                    "`view` filter parameter is not provided.",
                ));
            }
            match tokens(view).as_slice() {
                [d, v] => FilterSpec::View(d.to_string(), v.to_string()),
                _ => {
                    return Err(ApiError::bad_request(
                        "`view` must be of the form `designname/viewname`",
                    ))
                }
            }
        }
        name if name.starts_with('_') => {
            return Err(ApiError::bad_request("unknown builtin filter name"))
        }
        name => match tokens(name).as_slice() {
            [] => FilterSpec::None,
            [d, f] => FilterSpec::Function(d.to_string(), f.to_string()),
            _ => {
                return Err(ApiError::bad_request(
                    "`filter` must be of the form `designname/filtername`",
                ))
            }
        },
    })
}

/// Checks that design document `ddoc` exists and has the member at `path`, with
/// CouchDB's 404s (see [`design_filter::check_member`]).
fn design_member(db: &Database, ddoc: &str, path: &[&str]) -> ApiResult<()> {
    let (_, body) = design_filter::open_design(db, ddoc)?;
    design_filter::check_member(&body, path)
}

/// `limit`'s value when none is given: CouchDB's `#changes_args.limit` default, which
/// `seq_interval` counts down from.
const DEFAULT_LIMIT: u64 = 1_000_000_000_000_000;

#[derive(Clone, Debug)]
struct Opts {
    feed: Feed,
    /// How the database's sequences are written and read.
    seqs: SeqCodec,
    since: SeqArg,
    limit: Option<u64>,
    descending: bool,
    include_docs: bool,
    all_docs_style: bool,
    conflicts: bool,
    heartbeat: Option<Duration>,
    timeout: Duration,
    seq_interval: Option<u64>,
    filter: Filter,
    js_limits: settee_views::Limits,
    atts: super::attachments::AttOpts,
    /// Whose credentials `include_docs` hides (`replicator_read`).
    reader: Option<Arc<settee_node::replicator_read::Reader>>,
}

fn millis(p: &Params, k: &str) -> ApiResult<Option<Duration>> {
    Ok(p.uint(k)?.map(Duration::from_millis))
}

/// `heartbeat` (ms, or `true` for 60 s) and `timeout` (ms, default 60 s) of a feed.
fn feed_timing(p: &Params) -> ApiResult<(Option<Duration>, Duration)> {
    const DEFAULT: Duration = Duration::from_millis(60_000);
    let heartbeat = match p.get("heartbeat") {
        None => None,
        Some("true") => Some(DEFAULT),
        Some(_) => millis(p, "heartbeat")?,
    };
    Ok((heartbeat, millis(p, "timeout")?.unwrap_or(DEFAULT)))
}

fn doc_ids(v: &Value) -> ApiResult<HashSet<String>> {
    let list = v.as_array().ok_or_else(|| {
        ApiError::bad_request("`doc_ids` filter parameter is not a list of doc ids.")
    })?;
    list.iter()
        .map(|i| {
            i.as_str().map(str::to_string).ok_or_else(|| {
                ApiError::bad_request("`doc_ids` filter parameter is not a list of doc ids.")
            })
        })
        .collect()
}

/// A positive integer as Erlang's `list_to_integer/1` reads it (`None`: not an integer;
/// `Some(None)`: zero or negative).
fn positive(v: &str) -> Option<Option<u64>> {
    let digits = v.strip_prefix('+').unwrap_or(v);
    if let Some(neg) = digits.strip_prefix('-') {
        return (!neg.is_empty() && neg.bytes().all(|b| b.is_ascii_digit())).then_some(None);
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits only: an overflow is a very large positive number.
    Some(Some(digits.parse::<u64>().unwrap_or(u64::MAX)).filter(|n| *n > 0))
}

/// What the query string sets, checked in the order given as CouchDB's
/// `parse_changes_query` does (the first bad parameter is the error).
struct Timing {
    heartbeat: Option<Duration>,
    timeout: Duration,
    seq_interval: Option<u64>,
}

fn parse_timing(p: &Params, changes_timeout: Duration, seqs: &SeqCodec) -> ApiResult<Timing> {
    let mut t = Timing {
        heartbeat: None,
        timeout: changes_timeout,
        seq_interval: None,
    };
    for (k, v) in p.pairs() {
        match k {
            "heartbeat" if v == "true" => t.heartbeat = Some(changes_timeout),
            "heartbeat" => match positive(v) {
                Some(Some(ms)) => t.heartbeat = Some(Duration::from_millis(ms).min(changes_timeout)),
                Some(None) => return Err(ApiError::bad_request(
                    "The heartbeat value should be a positive integer (in milliseconds).",
                )),
                None => return Err(ApiError::bad_request(
                    "Invalid heartbeat value. Expecting a positive integer value (in milliseconds).",
                )),
            },
            "seq_interval" => match positive(v) {
                Some(Some(n)) => t.seq_interval = Some(n),
                _ => return Err(ApiError::bad_request("invalid_seq_interval")),
            },
            "timeout" => {
                t.timeout = Duration::from_millis(parse_pos_int(Val::Text(v))?).min(changes_timeout)
            }
            "limit" => {
                parse_pos_int(Val::Text(v))?;
            }
            "since" => {
                seqs.since(v)?;
            }
            _ => {}
        }
    }
    Ok(t)
}

impl Opts {
    /// Parses everything but the filter, which needs the database (see `changes`): `all`
    /// is every parameter in order, `p` the folded values (see [`folded`]).
    fn parse(
        all: &Params,
        p: &Params,
        changes_timeout: Duration,
        seqs: SeqCodec,
    ) -> ApiResult<Opts> {
        let timing = parse_timing(all, changes_timeout, &seqs)?;
        let style = p.get("style").unwrap_or("main_only");
        if !["main_only", "all_docs"].contains(&style) {
            return Err(ApiError::bad_request(
                "Invalid `style` parameter: use main_only or all_docs",
            ));
        }
        let since = p.get("since");
        Ok(Opts {
            feed: Feed::Normal,
            since: match since {
                Some(s) => seqs.since(s)?,
                None => SeqArg::Seq(0),
            },
            seqs,
            limit: p.uint("limit")?,
            // CouchDB's `parse_changes_query`: on only for exactly `true`.
            descending: p.is_true("descending"),
            include_docs: p.is_true("include_docs"),
            all_docs_style: style == "all_docs",
            conflicts: p.is_true("conflicts"),
            heartbeat: timing.heartbeat,
            timeout: timing.timeout,
            seq_interval: timing.seq_interval,
            filter: Filter::None,
            js_limits: Default::default(),
            atts: super::attachments::AttOpts::from_params(p)?,
            reader: None,
        })
    }

    fn keep(&self, c: &Change) -> bool {
        match &self.filter {
            Filter::None => true,
            Filter::DocIds { ids, .. } => ids.contains(&c.id),
            Filter::Design => c.id.starts_with("_design/"),
            // Checked in `scan`, which reads the bodies (and owns a runtime).
            Filter::View(_) | Filter::Selector(_) | Filter::Function(_) => true,
        }
    }
}

/// A change's row. `passed` lists the revisions a selector or filter function let through,
/// when one did.
fn render_change(
    db: &Database,
    c: &Change,
    o: &Opts,
    show_seq: bool,
    passed: Option<Vec<Rev>>,
) -> Vec<u8> {
    let winner = c.info.tree.winner().expect("stored docs have a winner");
    let revs: Vec<Value> = if let Some(passed) = passed {
        passed
            .iter()
            .map(|r| json!({"rev": r.to_string()}))
            .collect()
    } else if o.all_docs_style {
        c.info
            .tree
            .leaves()
            .iter()
            .map(|l| json!({"rev": l.rev.to_string()}))
            .collect()
    } else {
        vec![json!({"rev": winner.rev.to_string()})]
    };
    let seq = if show_seq {
        Value::String(o.seqs.changes_seq(c.seq))
    } else {
        Value::Null
    };
    let mut row = json!({"seq": seq, "id": c.id, "changes": revs});
    if winner.deleted {
        row["deleted"] = json!(true);
    }
    let mut out = serde_json::to_vec(&row).expect("json");
    if o.include_docs {
        let opts = DocOpts {
            conflicts: o.conflicts,
            reader: o.reader.clone(),
            ..Default::default()
        };
        out = with_doc(
            out,
            c.body.as_deref().map(|b| {
                let atts = o.atts.render(db, b).unwrap_or_else(|e| {
                    tracing::warn!(id = %c.id, error = ?e, "reading attachments");
                    None
                });
                winner_json_with(&c.id, &c.info, b, &opts, atts)
            }),
        );
    }
    out
}

/// What a [`scan`] went through.
#[derive(Clone, Copy, Debug)]
struct Scanned {
    /// The last sequence visited (`since` when none was).
    last: u64,
    /// The sequence of the last row sent.
    last_sent: Option<u64>,
    sent: u64,
}

/// Reads matching changes after `since`, calling `row` for each until it breaks or `limit`
/// is reached. Returns what it went through. `row` gets the
/// seq the row shows: with `seq_interval=N` only rows sent while the remaining limit is a
/// multiple of N show theirs (others `null`), as CouchDB's fabric counts them.
fn scan(
    db: &Database,
    o: &Opts,
    since: u64,
    limit: u64,
    row: &mut dyn FnMut(Option<u64>, Vec<u8>) -> bool,
) -> ApiResult<Scanned> {
    let mut last = since;
    let mut last_sent = None;
    let mut sent = 0u64;
    let mut mapper = match &o.filter {
        Filter::View(f) => Some(f.mapper(&o.js_limits)?),
        _ => None,
    };
    let mut failure = None;
    let selector = match &o.filter {
        Filter::Selector(s) => Some(s.clone()),
        _ => None,
    };
    let mut function = match &o.filter {
        Filter::Function(f) => Some(f.start()),
        _ => None,
    };
    let with_bodies =
        o.include_docs || mapper.is_some() || selector.is_some() || function.is_some();
    let visit = |c: Change| {
        if sent >= limit {
            return ControlFlow::Break(());
        }
        last = c.seq;
        if !o.keep(&c) {
            return ControlFlow::Continue(());
        }
        if let Some(mapper) = mapper.as_mut() {
            match mapper.emits(&c) {
                Ok(true) => {}
                Ok(false) => return ControlFlow::Continue(()),
                Err(e) => {
                    failure = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        let passes = match (&selector, function.as_mut()) {
            (Some(sel), _) => Some(selector_passes(db, sel, &c, o.all_docs_style)),
            (_, Some(f)) => Some(f.passes(db, &c, o.all_docs_style)),
            _ => None,
        };
        let passed = match passes {
            Some(Ok(revs)) if revs.is_empty() => return ControlFlow::Continue(()),
            Some(Ok(revs)) => Some(revs),
            Some(Err(e)) => {
                failure = Some(e);
                return ControlFlow::Break(());
            }
            None => None,
        };
        let show = o
            .seq_interval
            .is_none_or(|n| (limit - sent).is_multiple_of(n));
        sent += 1;
        last_sent = Some(c.seq);
        if row(
            show.then_some(c.seq),
            render_change(db, &c, o, show, passed),
        ) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    };
    match &o.filter {
        Filter::DocIds { ids, lookup: true } => {
            db.changes_of_ids(ids, since, o.descending, with_bodies, visit)?
        }
        _ => db.changes(since, o.descending, with_bodies, visit)?,
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Scanned {
        last,
        last_sent,
        sent,
    })
}

fn start_seq(db: &Database, o: &Opts) -> u64 {
    match o.since {
        SeqArg::Now => db.update_seq(),
        SeqArg::Seq(_) if o.descending => u64::MAX - 1,
        SeqArg::Seq(n) => n,
    }
}

/// CouchDB's default `changes_doc_ids_optimization_threshold`.
const DOC_IDS_LOOKUP_LIMIT: u64 = 1000;

/// What comes between two rows of a normal or longpoll feed (CouchDB's `prepend`).
const ROW_SEPARATOR: &[u8] = b",\r\n";

/// A whole normal response body from `since`.
fn normal_body(
    db: &Database,
    o: &Opts,
    since: u64,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> ApiResult<()> {
    out(b"{\"results\":[\n");
    let mut first = true;
    let scanned = scan(
        db,
        o,
        since,
        o.limit.unwrap_or(DEFAULT_LIMIT),
        &mut |_, row| {
            let ok = out(if first { b"" } else { ROW_SEPARATOR }) && out(&row);
            first = false;
            ok
        },
    )?;
    let (last, pending) = feed_end(db, o, since, scanned)?;
    let tail = format!(
        "\n],\n\"last_seq\":{},\"pending\":{pending}}}\n",
        Value::String(o.seqs.changes_seq(last))
    );
    out(tail.as_bytes());
    Ok(())
}

/// A feed's `last_seq` and `pending`, as fabric_rpc counts them: `pending` starts at the
/// changes ahead of the start (descending: all of them) and loses one per change visited. A
/// `_doc_ids` or `_design` feed visits only the documents it sends (couch_changes reads them
/// by id), and a descending one ends at the last of them. `since` is where the feed started ([`start_seq`]); `scanned` what it went
/// through, rounds of a live feed added up.
fn feed_end(db: &Database, o: &Opts, since: u64, scanned: Scanned) -> ApiResult<(u64, u64)> {
    let top = db.update_seq();
    let total = db.count_changes();
    if let Filter::DocIds { lookup: true, .. } | Filter::Design = o.filter {
        let ahead = if o.descending || since == 0 {
            total
        } else {
            db.count_changes_after(since)?
        };
        // A feed the limit cut ends at its last row, any other at the database's sequence.
        let cut = scanned.sent >= o.limit.unwrap_or(DEFAULT_LIMIT);
        let last = match (o.descending, scanned.last_sent) {
            (true, Some(seq)) => seq,
            (false, Some(seq)) if cut => seq,
            _ => top,
        };
        return Ok((last, ahead.saturating_sub(scanned.sent)));
    }
    if o.descending {
        // Every change at or above the last visited one was visited.
        let below = total.saturating_sub(db.count_changes_after(scanned.last.saturating_sub(1))?);
        let last = if scanned.sent == 0 { top } else { scanned.last };
        return Ok((last.min(top), below));
    }
    let last = scanned.last.min(top);
    Ok((last, db.count_changes_after(last)?))
}

/// The query string as CouchDB's `parse_changes_query` folds it: names lowercased, a later
/// value replacing an earlier one (`last-event-id` is another name for `since`), and the
/// options only `true` switches on staying on once on. Every pair stays, in order, for the
/// checks that stop at the first bad value; `get` sees the folded value.
fn folded(p: &Params) -> (Params, Params) {
    const SWITCHES: [&str; 5] = [
        "descending",
        "include_docs",
        "conflicts",
        "attachments",
        "att_encoding_info",
    ];
    let all: Params = p
        .pairs()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let mut last: Vec<(String, String)> = Vec::new();
    for (k, v) in all.pairs() {
        let k = if k == "last-event-id" { "since" } else { k };
        match last.iter_mut().find(|(n, _)| n == k) {
            Some(slot) if SWITCHES.contains(&k) => {
                if v == "true" {
                    slot.1 = v.to_string();
                }
            }
            Some(slot) => slot.1 = v.to_string(),
            None => last.push((k.to_string(), v.to_string())),
        }
    }
    (all, last.into_iter().collect())
}

pub async fn changes(state: AppState, db: Arc<Database>, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,POST,HEAD")?;
    let post = req.method == "POST";
    let body = if post {
        crate::req::require_json(&req.headers)?;
        let b = req.bytes().await?;
        if b.is_empty() {
            None
        } else {
            match crate::req::parse_json(&b)? {
                v @ Value::Object(_) => Some(v),
                _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
            }
        }
    } else {
        None
    };
    let changes_timeout =
        Duration::from_millis(state.config.get_u64("chttpd", "changes_timeout", 60_000));
    let (all, params) = folded(&req.params);
    let mut o = Opts::parse(&all, &params, changes_timeout, seqs(&db))?;
    o.reader = settee_node::replicator_read::reader(&db, &req.user);
    // An EventSource reconnecting says where it stopped.
    if params.get("feed") == Some("eventsource") {
        if let Some(id) = req.header("last-event-id") {
            o.since = o.seqs.since(id)?;
        }
    }
    // `doc_ids` and `view` are read as sent (CouchDB's `configure_filter`); `filter` folded.
    let spec = filter_spec(params.get("filter"), &req.params, post, body.as_ref())?;
    o.filter = resolve(&state, &db, spec, &mut o, || {
        ReqInfo::of_request(&req, body.as_ref())
    })
    .await?;
    o.feed = Feed::for_changes(&params)?;
    match o.feed {
        Feed::Normal => {
            // chttpd_db: the ETag is the database's info, whatever the query, and a match is
            // a 304.
            let etag = crate::design_render::make_etag(state.db_info(&db).to_string().as_bytes());
            let tag = HeaderValue::from_str(&etag).expect("etags are ASCII");
            if crate::req::etag_matches(&req.headers, &etag) {
                return Ok(super::doc::not_modified(tag));
            }
            let since = start_seq(&db, &o);
            let mut resp = stream(JSON, move |sink| {
                normal_body(&db, &o, since, &mut |b| sink.write(b))
            })
            .await;
            resp.headers_mut().insert(header::ETAG, tag);
            Ok(resp)
        }
        Feed::Longpoll | Feed::Continuous | Feed::EventSource => {
            let max_duration = state
                .config
                .get("fabric", "changes_duration")
                .and_then(|v| v.trim().parse().ok())
                .map(Duration::from_millis);
            Ok(live(db, o, max_duration).await)
        }
    }
}

/// The filter `spec` names, with its design document read (a view's or a filter
/// function's; `req` describes the request to a filter function).
async fn resolve(
    state: &AppState,
    db: &Arc<Database>,
    spec: FilterSpec,
    o: &mut Opts,
    req: impl FnOnce() -> ReqInfo,
) -> ApiResult<Filter> {
    Ok(match spec {
        FilterSpec::None => Filter::None,
        FilterSpec::DocIds(ids) => {
            let limit = state.config.get_u64(
                "couchdb",
                "changes_doc_ids_optimization_threshold",
                DOC_IDS_LOOKUP_LIMIT,
            );
            let lookup = ids.len() as u64 <= limit;
            Filter::DocIds { ids, lookup }
        }
        FilterSpec::Design => Filter::Design,
        FilterSpec::View(ddoc, view) => {
            let (st, d) = (state.clone(), db.clone());
            let f = blocking(move || ViewFilter::load(&st, &d, &ddoc, &view)).await?;
            o.js_limits = state.views.limits();
            Filter::View(f)
        }
        FilterSpec::Function(ddoc, name) => {
            let (st, d, req) = (state.clone(), db.clone(), req());
            let f = blocking(move || DesignFilter::load(&st, &d, &ddoc, &name, &req)).await?;
            Filter::Function(f)
        }
        FilterSpec::Selector(sel) => {
            Filter::Selector(Arc::new(settee_mango::Selector::parse(&sel)?))
        }
    })
}

/// Which changes the replicator reads from a database of this server.
pub enum ReplicationFilter {
    All,
    DocIds(HashSet<String>),
    Selector(Arc<settee_mango::Selector>),
    /// `filter` (a design document's filter function, or a built-in filter such as
    /// `_view`) with the replication's `query_params`, as the source's `_changes` gets them
    /// from CouchDB's replicator; `user` is whom the replication reads the source as.
    Named {
        name: String,
        query_params: serde_json::Map<String, Value>,
        user: settee_auth::UserCtx,
    },
}

/// The replicator's read of a local database: up to `limit` changes after `since` as
/// `style=all_docs` rows (rendered as `_changes` renders them) through `filter`, waiting up
/// to `wait` for the first when there is none yet; the rows and the last seq read.
pub async fn for_replication(
    state: &AppState,
    db: Arc<Database>,
    since: u64,
    limit: u64,
    filter: ReplicationFilter,
    wait: Option<Duration>,
) -> ApiResult<(Vec<Value>, u64)> {
    let all = Params::parse(Some("style=all_docs"));
    let mut o = Opts::parse(&all, &all, Duration::from_secs(60), seqs(&db))?;
    o.filter = match filter {
        ReplicationFilter::All => Filter::None,
        ReplicationFilter::DocIds(ids) => Filter::DocIds {
            lookup: ids.len() as u64 <= DOC_IDS_LOOKUP_LIMIT,
            ids,
        },
        ReplicationFilter::Selector(s) => Filter::Selector(s),
        ReplicationFilter::Named {
            name,
            query_params,
            user,
        } => {
            let since = match since {
                0 => json!(0),
                n => Value::String(o.seqs.changes_seq(n)),
            };
            let req = ReqInfo::for_replication(&db.name, &name, &query_params, &since, wait, &user);
            let params: Params = req.query.iter().cloned().collect();
            let spec = filter_spec(Some(&name), &params, false, None)?;
            resolve(state, &db, spec, &mut o, || req).await?
        }
    };
    let o = Arc::new(o);
    let mut rx = db.watch_seq();
    let mut waited = false;
    loop {
        let seen = db.update_seq();
        let (d, opts) = (db.clone(), o.clone());
        let (rows, last) = blocking(move || {
            let mut rows = Vec::new();
            let scanned = scan(&d, &opts, since, limit, &mut |_, row| {
                rows.push(row);
                true
            })?;
            Ok((rows, scanned.last))
        })
        .await?;
        let rows = rows
            .iter()
            .map(|r| {
                serde_json::from_slice(r)
                    .map_err(|e| ApiError::Db(settee_db::Error::Internal(e.to_string())))
            })
            .collect::<ApiResult<Vec<Value>>>()?;
        match wait {
            Some(w) if rows.is_empty() && !waited => {
                waited = true;
                if !wait_past(&mut rx, seen, w).await {
                    return Ok((rows, last));
                }
            }
            _ => return Ok((rows, last)),
        }
    }
}

/// Waits for the sequence to move past `seen`, up to `wait`. False on timeout.
async fn wait_past(rx: &mut watch::Receiver<u64>, seen: u64, wait: Duration) -> bool {
    let moved = rx.wait_for(|s| *s > seen);
    matches!(tokio::time::timeout(wait, moved).await, Ok(Ok(_)))
}

/// The output of a longpoll, continuous or eventsource feed, as CouchDB's `changes_callback`
/// writes it: rows are buffered and go out when the feed waits or ends; nothing at all (not
/// even the status) is sent before the first chunk.
struct LiveOut {
    feed: Feed,
    /// Writes an eventsource row's `id:`.
    seqs: SeqCodec,
    tx: mpsc::Sender<ApiResult<Bytes>>,
    buf: Vec<u8>,
    /// Rows are in `buf` (a longpoll's `buf` also starts with its opening).
    rows_buffered: bool,
    /// A row has been written (the next longpoll row needs a separator).
    any_row: bool,
    /// CouchDB's `chunks_sent`: rows buffered plus chunks sent.
    chunks: u64,
    open: bool,
}

impl LiveOut {
    fn new(feed: Feed, seqs: SeqCodec, tx: mpsc::Sender<ApiResult<Bytes>>) -> LiveOut {
        let buf = if feed == Feed::Longpoll {
            b"{\"results\":[\n".to_vec()
        } else {
            Vec::new()
        };
        LiveOut {
            feed,
            seqs,
            tx,
            buf,
            rows_buffered: false,
            any_row: false,
            chunks: 0,
            open: true,
        }
    }

    /// Adds a row (from a blocking thread), sending the buffer once it is large.
    fn row(&mut self, seq_shown: Option<u64>, row: &[u8]) -> bool {
        match self.feed {
            Feed::Longpoll => {
                if self.any_row {
                    self.buf.extend_from_slice(ROW_SEPARATOR);
                }
                self.buf.extend_from_slice(row);
            }
            Feed::EventSource => {
                // `id:` is the row's seq as JSON (quoted, or `null`), as CouchDB's.
                let id = seq_shown.map_or(Value::Null, |s| Value::String(self.seqs.changes_seq(s)));
                self.buf.extend_from_slice(b"data: ");
                self.buf.extend_from_slice(row);
                self.buf
                    .extend_from_slice(format!("\nid: {id}\n\n").as_bytes());
            }
            Feed::Continuous | Feed::Normal => {
                self.buf.extend_from_slice(row);
                self.buf.push(b'\n');
            }
        }
        self.rows_buffered = true;
        self.any_row = true;
        self.chunks += 1;
        if self.buf.len() >= 32 << 10 && self.open {
            let chunk = Bytes::from(std::mem::take(&mut self.buf));
            self.open = self.tx.blocking_send(Ok(chunk)).is_ok();
        }
        self.open
    }

    async fn send(&mut self, extra: &[u8]) {
        let mut chunk = std::mem::take(&mut self.buf);
        chunk.extend_from_slice(extra);
        self.rows_buffered = false;
        if self.open && !chunk.is_empty() {
            self.open = self.tx.send(Ok(Bytes::from(chunk))).await.is_ok();
        }
    }

    /// Before waiting: the buffered rows go out; a feed that has sent nothing yet sends a
    /// newline, so the client has the status and headers while it waits.
    async fn waiting(&mut self) {
        if self.rows_buffered {
            self.send(b"").await;
        } else if self.chunks == 0 {
            self.chunks = 1;
            self.send(b"\n").await;
        }
    }

    /// A heartbeat, also sent when an update wakes the feed.
    async fn beat(&mut self) {
        self.chunks += 1;
        let beat: &[u8] = if self.feed == Feed::EventSource {
            b"event: heartbeat\ndata: \n\n"
        } else {
            b"\n"
        };
        self.send(beat).await;
    }

    async fn stop(&mut self, last_seq: Value, pending: u64) {
        let tail = match self.feed {
            Feed::Longpoll => format!("\n],\n\"last_seq\":{last_seq},\"pending\":{pending}}}\n"),
            Feed::Continuous | Feed::Normal => {
                format!("{{\"last_seq\":{last_seq},\"pending\":{pending}}}\n")
            }
            Feed::EventSource => String::new(),
        };
        self.send(tail.as_bytes()).await;
    }
}

/// One client of a live feed, counted in `couchdb.httpd.clients_requesting_changes` for
/// as long as the feed runs.
struct LiveClient;

impl LiveClient {
    fn new() -> LiveClient {
        settee_metrics::global().clients_requesting_changes.inc();
        LiveClient
    }
}

impl Drop for LiveClient {
    fn drop(&mut self) {
        settee_metrics::global().clients_requesting_changes.dec();
    }
}

/// A longpoll, continuous or eventsource feed, as CouchDB's `keep_sending_changes` runs it:
/// send what there is; stop once a longpoll has sent rows or a continuous feed its `limit`;
/// otherwise wait for an update up to the heartbeat (or, without one, the timeout, which
/// ends the feed). A heartbeat or an update sends a newline, and the feed goes round again.
/// With a heartbeat only `[fabric] changes_duration` ends an idle feed.
async fn live(db: Arc<Database>, o: Opts, max_duration: Option<Duration>) -> Response {
    let (tx, rx) = mpsc::channel::<ApiResult<Bytes>>(16);
    let content_type = if o.feed == Feed::EventSource {
        "text/event-stream"
    } else {
        JSON
    };
    tokio::spawn(async move {
        let _client = LiveClient::new();
        let mut out = LiveOut::new(o.feed, o.seqs.clone(), tx.clone());
        let mut seq_rx = db.watch_seq();
        let start = start_seq(&db, &o);
        let mut seen_all = Scanned {
            last: start,
            last_sent: None,
            sent: 0,
        };
        let limit = o.limit.unwrap_or(DEFAULT_LIMIT);
        let wait = o.heartbeat.unwrap_or(o.timeout);
        let started = tokio::time::Instant::now();
        loop {
            let seen = *seq_rx.borrow_and_update();
            let (db2, o2) = (db.clone(), o.clone());
            let (since, left) = (seen_all.last, limit - seen_all.sent);
            let scanned = blocking(move || {
                let mut out = out;
                let scanned = scan(&db2, &o2, since, left, &mut |s, row| out.row(s, &row));
                Ok((out, scanned))
            })
            .await;
            let (back, scanned) = match scanned {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            out = back;
            let round = match scanned {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            seen_all = Scanned {
                last: round.last,
                last_sent: round.last_sent.or(seen_all.last_sent),
                sent: seen_all.sent + round.sent,
            };
            let done = match o.feed {
                Feed::Longpoll => round.sent > 0,
                _ => seen_all.sent == limit,
            };
            if done || o.descending || !out.open {
                break;
            }
            out.waiting().await;
            let updated = tokio::select! {
                moved = wait_past(&mut seq_rx, seen, wait) => moved,
                _ = tx.closed() => return,
            };
            let overdue = max_duration.is_some_and(|max| started.elapsed() > max);
            if !updated && (o.heartbeat.is_none() || overdue) {
                break;
            }
            out.beat().await;
            if !out.open {
                return;
            }
        }
        let tail = blocking(move || {
            let (last, pending) = feed_end(&db, &o, start, seen_all)?;
            Ok((Value::String(o.seqs.changes_seq(last)), pending))
        })
        .await;
        match tail {
            Ok((last, pending)) => out.stop(last, pending).await,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
            }
        }
    });
    let mut resp = delayed(content_type, rx).await;
    if content_type != JSON {
        resp.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-cache"),
        );
    }
    resp
}

// ---- _db_updates ------------------------------------------------------------------------

pub async fn db_updates(state: &AppState, req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let p = &req.params;
    let feed = Feed::parse(p)?;
    let couch = state.couch.clone();
    // `_db_updates` sequences are those of CouchDB's `_global_changes` database: q=1.
    let codec = SeqCodec::new(settee_core::node::name(), 1, couch.db_events_uuid());
    let mut since = match p.get("since") {
        Some(s) => match codec.since(s)? {
            SeqArg::Now => couch.db_events_seq(),
            SeqArg::Seq(n) => n,
        },
        None => 0,
    };
    let (heartbeat, timeout) = feed_timing(p)?;
    let seq = |n: u64| Value::String(codec.changes_seq(n));
    let row = |e: &settee_db::DbEvent| json!({"db_name": e.db, "type": e.kind.as_str(), "seq": seq(e.seq)});
    let mut rx = couch.watch_db_events();
    if matches!(feed, Feed::Normal | Feed::Longpoll) {
        let mut events = couch.db_events_since(since)?;
        if events.is_empty() && feed == Feed::Longpoll && wait_past(&mut rx, since, timeout).await {
            events = couch.db_events_since(since)?;
        }
        let last = events.last().map_or(since, |e| e.seq);
        let results: Vec<Value> = events.iter().map(row).collect();
        return Ok(crate::reply::json(
            StatusCode::OK,
            &json!({"results": results, "last_seq": seq(last)}),
        ));
    }
    let eventsource = feed == Feed::EventSource;
    let (tx, out) = mpsc::channel::<Bytes>(16);
    let codec = codec.clone();
    tokio::spawn(async move {
        let seq = |n: u64| Value::String(codec.changes_seq(n));
        let row = |e: &settee_db::DbEvent| json!({"db_name": e.db, "type": e.kind.as_str(), "seq": seq(e.seq)});
        while let Ok(events) = couch.db_events_since(since) {
            for e in &events {
                since = e.seq;
                let line = serde_json::to_string(&row(e)).expect("json");
                let chunk = if eventsource {
                    format!("data: {line}\nid: {}\n\n", seq(e.seq))
                } else {
                    format!("{line}\n")
                };
                if tx.send(Bytes::from(chunk)).await.is_err() {
                    return;
                }
            }
            if !wait_past(&mut rx, since, heartbeat.unwrap_or(timeout)).await {
                if heartbeat.is_none() {
                    break;
                }
                if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
            }
        }
        let _ = tx
            .send(Bytes::from(format!("{{\"last_seq\":{}}}\n", seq(since))))
            .await;
    });
    Ok(stream_async(
        if eventsource {
            "text/event-stream"
        } else {
            JSON
        },
        out,
    ))
}
