//! `_changes`: the filters (`_doc_ids`, `_design`, `_view`, `_selector`, design filter
//! functions), the scan that renders a feed's rows, where a feed ends (`last_seq`,
//! `pending`, as fabric counts them), and the wait of longpoll and continuous feeds. What a
//! request asks for arrives parsed ([`ChangesOpts`], [`FilterSpec`]); rows leave as
//! CouchDB's JSON, one per change, through a callback or a [`FeedOut`].
//!
//! Threading: [`normal`] and [`Node::resolve_filter`] block (RocksDB reads, filter
//! functions); the async functions run their blocking parts on blocking threads.

use crate::atts::{AttOpts, AttRender};
use crate::design_filter::{self, DesignFilter, ReqInfo};
use crate::{blocking, winner_json_with, with_doc, DocOpts, Error, Node, Result};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use settee_core::{Rev, SeqArg, SeqCodec};
use settee_db::{Change, Database};
use settee_wire::mrargs::{parse_pos_int, Val};
use settee_wire::Params;
use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A feed's filter, its design document read.
#[derive(Clone, Debug)]
pub enum Filter {
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
    /// A clustered database's filter as the request named it, for its copies to resolve
    /// (a coordinator's feed; never a node's), with the members each copy's `_changes`
    /// body is given (a filter function's or `_view`'s design document: [`GIVEN_DESIGN`],
    /// [`GIVEN_REQ`]).
    Copies(FilterSpec, Option<Arc<serde_json::Map<String, Value>>>),
}

/// The member of a `_changes` POST body in which a coordinator gives a shard copy the
/// design document of its filter function or `_view` filter (as views take theirs:
/// [`crate::views::GIVEN_DESIGN`]).
pub const GIVEN_DESIGN: &str = crate::views::GIVEN_DESIGN;

/// The member of a `_changes` POST body in which a coordinator gives a shard copy the
/// request object its filter function is told about (without `info` and `uuid`).
pub const GIVEN_REQ: &str = "settee_req";

#[derive(Clone)]
pub struct ViewFilter {
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
    fn load(node: &Node, db: &Database, ddoc: &str, view: &str) -> Result<ViewFilter> {
        design_member(db, ddoc, &["views", view])?;
        let (group, view) = node.view_group(db, ddoc, view)?;
        ViewFilter::of(node, group, view)
    }

    /// The filter of view `view` of design document `design` (`_design/{ddoc}`'s body) a
    /// shard copy's coordinator gives.
    fn given(
        node: &Node,
        db: &Database,
        ddoc: &str,
        design: &serde_json::Map<String, Value>,
        view: &str,
    ) -> Result<ViewFilter> {
        design_filter::check_member(&Value::Object(design.clone()), &["views", view])?;
        let group = node.views.group(db, &format!("_design/{ddoc}"), design)?;
        let n = (group.def.view(view).map(|(i, _)| i))
            .ok_or_else(|| Error::NotFound("missing_named_view".into()))?;
        ViewFilter::of(node, Arc::new(group), n)
    }

    fn of(node: &Node, group: Arc<settee_views::Group>, view: usize) -> Result<ViewFilter> {
        if !node.views.knows_language(&group.def.language) {
            let unknown =
                settee_views::queryserver::Error::UnknownLanguage(group.def.language.clone());
            return Err(settee_views::Error::QueryServer(unknown).into());
        }
        let native = node.views.native_map(&group.def)?;
        Ok(ViewFilter {
            group,
            view,
            native,
        })
    }

    fn mapper(&self, state_limits: &settee_views::Limits) -> Result<ViewMapper> {
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
            .map_err(|e| Error::Views(settee_views::Error::Js(e)))
    }
}

impl ViewMapper {
    /// Whether the view filter's map function emits anything for the change's document.
    fn emits(&mut self, c: &Change) -> Result<bool> {
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
                let text = String::from_utf8(text).map_err(|_| Error::bad_request("body"))?;
                let res = rt
                    .map_doc(&text)
                    .map_err(|e| Error::Views(settee_views::Error::Js(e)))?;
                Ok(matches!(res.first(), Some(Ok(rows)) if !rows.is_empty()))
            }
            ViewMapper::Native(map, view) => {
                let rows = map.map_doc(&text).map_err(Error::internal)?;
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
) -> Result<Vec<Rev>> {
    let matches = |json: Vec<u8>| -> Result<bool> { Ok(sel.matches(&crate::parse_json(&json)?)) };
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
        if matches(crate::doc_json(&doc, &DocOpts::default()))? {
            passed.push(leaf.rev);
        }
    }
    Ok(passed)
}

/// The `filter` a request names, before its design document is read.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterSpec {
    None,
    DocIds(HashSet<String>),
    Design,
    View(String, String),
    /// `designname/filtername`: a JavaScript filter function.
    Function(String, String),
    Selector(Value),
}

impl FilterSpec {
    /// CouchDB's `configure_filter`: the filter named by `filter`, with CouchDB's errors.
    /// `body` is a POST's JSON body (`None` for an empty one).
    pub fn parse(
        filter: Option<&str>,
        p: &Params,
        post: bool,
        body: Option<&Value>,
    ) -> Result<FilterSpec> {
        let invalid_json = || Error::bad_request("invalid UTF-8 JSON");
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
                    return Err(Error::bad_request(
                        "Selector must be specified in POST payload",
                    ));
                }
                match body.ok_or_else(invalid_json)?.get("selector") {
                    Some(sel @ Value::Object(_)) => FilterSpec::Selector(sel.clone()),
                    _ => return Err(Error::bad_request("Selector error: expected a JSON object")),
                }
            }
            "_design" => FilterSpec::Design,
            "_view" => {
                let view = p.get("view").unwrap_or("");
                if view.is_empty() {
                    return Err(Error::bad_request(
                        "`view` filter parameter is not provided.",
                    ));
                }
                match tokens(view).as_slice() {
                    [d, v] => FilterSpec::View(d.to_string(), v.to_string()),
                    _ => {
                        return Err(Error::bad_request(
                            "`view` must be of the form `designname/viewname`",
                        ))
                    }
                }
            }
            name if name.starts_with('_') => {
                return Err(Error::bad_request("unknown builtin filter name"))
            }
            name => match tokens(name).as_slice() {
                [] => FilterSpec::None,
                [d, f] => FilterSpec::Function(d.to_string(), f.to_string()),
                _ => {
                    return Err(Error::bad_request(
                        "`filter` must be of the form `designname/filtername`",
                    ))
                }
            },
        })
    }
}

/// `name` split at `/` into non-empty parts, as CouchDB's `string:tokens`.
fn tokens(name: &str) -> Vec<&str> {
    name.split('/').filter(|t| !t.is_empty()).collect()
}

fn doc_ids(v: &Value) -> Result<HashSet<String>> {
    let list = v.as_array().ok_or_else(|| {
        Error::bad_request("`doc_ids` filter parameter is not a list of doc ids.")
    })?;
    list.iter()
        .map(|i| {
            i.as_str().map(str::to_string).ok_or_else(|| {
                Error::bad_request("`doc_ids` filter parameter is not a list of doc ids.")
            })
        })
        .collect()
}

/// Checks that design document `ddoc` exists and has the member at `path`, with
/// CouchDB's 404s (see [`design_filter::check_member`]).
fn design_member(db: &Database, ddoc: &str, path: &[&str]) -> Result<()> {
    let (_, body) = design_filter::open_design(db, ddoc)?;
    design_filter::check_member(&body, path)
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

fn parse_timing(p: &Params, changes_timeout: Duration, seqs: &SeqCodec) -> Result<Timing> {
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
                Some(None) => return Err(Error::bad_request(
                    "The heartbeat value should be a positive integer (in milliseconds).",
                )),
                None => return Err(Error::bad_request(
                    "Invalid heartbeat value. Expecting a positive integer value (in milliseconds).",
                )),
            },
            "seq_interval" => match positive(v) {
                Some(Some(n)) => t.seq_interval = Some(n),
                _ => return Err(Error::bad_request("invalid_seq_interval")),
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

impl ChangesOpts {
    /// A feed's query string read as CouchDB's `parse_changes_query` reads it, everything but
    /// the filter (see [`FilterSpec`] and [`Node::changes_filter`]): `all` is every parameter
    /// in order, `p` the folded values (see [`fold_params`]); `changes_timeout` is
    /// `[chttpd] changes_timeout`, the longest `timeout` and `heartbeat`.
    pub fn parse(
        all: &Params,
        p: &Params,
        changes_timeout: Duration,
        seqs: SeqCodec,
    ) -> Result<ChangesOpts> {
        let timing = parse_timing(all, changes_timeout, &seqs)?;
        let style = p.get("style").unwrap_or("main_only");
        if !["main_only", "all_docs"].contains(&style) {
            return Err(Error::bad_request(
                "Invalid `style` parameter: use main_only or all_docs",
            ));
        }
        let mut o = ChangesOpts::new(seqs);
        if let Some(s) = p.get("since") {
            o.since = o.seqs.since(s)?;
        }
        o.limit = p.uint("limit")?;
        // CouchDB's `parse_changes_query`: on only for exactly `true`.
        o.descending = p.is_true("descending");
        o.include_docs = p.is_true("include_docs");
        o.all_docs_style = style == "all_docs";
        o.conflicts = p.is_true("conflicts");
        o.heartbeat = timing.heartbeat;
        o.timeout = timing.timeout;
        o.seq_interval = timing.seq_interval;
        // CouchDB's `parse_changes_query` knows no `atts_since`: ignored, even malformed.
        o.atts = AttOpts {
            inline: p.is_true("attachments"),
            encoding_info: p.is_true("att_encoding_info"),
            since: Vec::new(),
        };
        Ok(o)
    }
}

/// The query string as CouchDB's `parse_changes_query` folds it: names lowercased, a later
/// value replacing an earlier one (`last-event-id` is another name for `since`), and the
/// options only `true` switches on staying on once on. Every pair stays, in order, for the
/// checks that stop at the first bad value; `get` sees the folded value.
pub fn fold_params(p: &Params) -> (Params, Params) {
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

/// `limit`'s value when none is given: CouchDB's `#changes_args.limit` default, which
/// `seq_interval` counts down from.
pub const DEFAULT_LIMIT: u64 = 1_000_000_000_000_000;

/// What a feed sends, parsed from its request (but for the filter, resolved with
/// [`Node::changes_filter`]).
#[derive(Clone, Debug)]
pub struct ChangesOpts {
    /// How the database's sequences are written and read.
    pub seqs: SeqCodec,
    pub since: SeqArg,
    pub limit: Option<u64>,
    pub descending: bool,
    pub include_docs: bool,
    pub all_docs_style: bool,
    pub conflicts: bool,
    pub heartbeat: Option<Duration>,
    pub timeout: Duration,
    pub seq_interval: Option<u64>,
    pub filter: Filter,
    pub js_limits: settee_views::Limits,
    pub atts: AttOpts,
    /// Whose credentials `include_docs` hides (`replicator_read`).
    pub reader: Option<Arc<crate::replicator_read::Reader>>,
}

impl ChangesOpts {
    /// A normal feed of every change from the start, winners only, no documents.
    pub fn new(seqs: SeqCodec) -> ChangesOpts {
        ChangesOpts {
            seqs,
            since: SeqArg::Seq(0),
            limit: None,
            descending: false,
            include_docs: false,
            all_docs_style: false,
            conflicts: false,
            heartbeat: None,
            timeout: Duration::from_secs(60),
            seq_interval: None,
            filter: Filter::None,
            js_limits: Default::default(),
            atts: AttOpts::default(),
            reader: None,
        }
    }

    fn keep(&self, c: &Change) -> bool {
        match &self.filter {
            Filter::None => true,
            Filter::DocIds { ids, .. } => ids.contains(&c.id),
            Filter::Design => c.id.starts_with("_design/"),
            // Checked in `scan`, which reads the bodies (and owns a runtime).
            Filter::View(_) | Filter::Selector(_) | Filter::Function(_) | Filter::Copies(..) => {
                true
            }
        }
    }
}

/// A change's row. `passed` lists the revisions a selector or filter function let through,
/// when one did.
fn render_change(
    db: &Database,
    c: &Change,
    o: &ChangesOpts,
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
                let atts = o.atts.render(db, b, 0).unwrap_or_else(|e| {
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
    o: &ChangesOpts,
    since: u64,
    limit: u64,
    row: &mut dyn FnMut(Option<u64>, Vec<u8>) -> bool,
) -> Result<Scanned> {
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

/// Where a feed starts: `since`, the database's sequence for `now`, the top when
/// descending.
fn start_seq(db: &Database, o: &ChangesOpts) -> u64 {
    match o.since {
        SeqArg::Now => db.update_seq(),
        SeqArg::Seq(_) if o.descending => u64::MAX - 1,
        SeqArg::Seq(n) => n,
        // Only a clustered database's codec leaves a vector unresolved, and its feeds run
        // at its coordinator.
        SeqArg::Vector(_) => 0,
    }
}

/// CouchDB's default `changes_doc_ids_optimization_threshold`.
pub const DOC_IDS_LOOKUP_LIMIT: u64 = 1000;

/// A normal feed: from where `o` starts, each row through `row` (with the seq it shows),
/// then its `last_seq` and `pending`.
pub fn normal(
    db: &Database,
    o: &ChangesOpts,
    row: &mut dyn FnMut(Option<u64>, Vec<u8>) -> bool,
) -> Result<(u64, u64)> {
    let since = start_seq(db, o);
    let scanned = scan(db, o, since, o.limit.unwrap_or(DEFAULT_LIMIT), row)?;
    feed_end(db, o, since, scanned)
}

/// A feed's `last_seq` and `pending`, as fabric_rpc counts them: `pending` starts at the
/// changes ahead of the start (descending: all of them) and loses one per change visited. A
/// `_doc_ids` or `_design` feed visits only the documents it sends (couch_changes reads them
/// by id), and a descending one ends at the last of them. `since` is where the feed started ([`start_seq`]); `scanned` what it went
/// through, rounds of a live feed added up.
fn feed_end(db: &Database, o: &ChangesOpts, since: u64, scanned: Scanned) -> Result<(u64, u64)> {
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

impl Node {
    /// The filter `spec` names, with its design document read (a view's or a filter
    /// function's; `req` describes the request to a filter function). A view filter sets
    /// the JavaScript limits in `o`. Blocks for a view or a filter function.
    pub fn resolve_filter(
        self: &Arc<Self>,
        db: &Arc<Database>,
        spec: FilterSpec,
        o: &mut ChangesOpts,
        req: impl FnOnce() -> ReqInfo,
    ) -> Result<Filter> {
        Ok(match spec {
            FilterSpec::None => Filter::None,
            FilterSpec::DocIds(ids) => {
                let limit = self.config.get_u64(
                    "couchdb",
                    "changes_doc_ids_optimization_threshold",
                    DOC_IDS_LOOKUP_LIMIT,
                );
                let lookup = ids.len() as u64 <= limit;
                Filter::DocIds { ids, lookup }
            }
            FilterSpec::Design => Filter::Design,
            FilterSpec::View(ddoc, view) => {
                let f = ViewFilter::load(self, db, &ddoc, &view)?;
                o.js_limits = self.views.limits();
                Filter::View(f)
            }
            FilterSpec::Function(ddoc, name) => {
                Filter::Function(DesignFilter::load(self, db, &ddoc, &name, &req())?)
            }
            FilterSpec::Selector(sel) => {
                Filter::Selector(Arc::new(settee_mango::Selector::parse(&sel)?))
            }
        })
    }

    /// A shard copy's feed filter with the design document its coordinator gives
    /// (`design`: `_design/{ddoc}` of a filter function or `_view` filter, and `req`, the
    /// request object a function is told about): how a clustered database's feeds run
    /// those filters on every copy, which holds only its own range's design documents.
    /// Only a shard copy, only for a server admin (a member, for its coordinator).
    #[allow(clippy::too_many_arguments)]
    pub async fn given_changes_filter(
        self: &Arc<Self>,
        db: &Arc<Database>,
        user: &settee_auth::UserCtx,
        spec: FilterSpec,
        design: serde_json::Map<String, Value>,
        req: Option<Value>,
        mut o: ChangesOpts,
    ) -> Result<ChangesOpts> {
        if !settee_core::is_shard_name(&db.name) || !user.is_server_admin() {
            return Err(Error::Forbidden(
                "A design document is given only to a shard copy, by a member.".into(),
            ));
        }
        let (node, d) = (self.clone(), db.clone());
        let (filter, js_limits) = blocking::<_, Error>(move || match spec {
            FilterSpec::Function(_, name) => {
                let req = req.unwrap_or_else(|| json!({}));
                let f = DesignFilter::given(&node, &d, Value::Object(design), &name, req)?;
                Ok((Filter::Function(f), None))
            }
            FilterSpec::View(ddoc, view) => {
                let f = ViewFilter::given(&node, &d, &ddoc, &design, &view)?;
                Ok((Filter::View(f), Some(node.views.limits())))
            }
            _ => Err(Error::bad_request(
                "A design document is given only with a filter function or _view.",
            )),
        })
        .await?;
        o.filter = filter;
        if let Some(limits) = js_limits {
            o.js_limits = limits;
        }
        o.reader = crate::replicator_read::reader(db, user);
        Ok(o)
    }

    /// [`Node::resolve_filter`] for async callers: design documents are read on a
    /// blocking thread.
    pub async fn changes_filter(
        self: &Arc<Self>,
        db: &Arc<Database>,
        spec: FilterSpec,
        o: &mut ChangesOpts,
        req: impl FnOnce() -> ReqInfo,
    ) -> Result<Filter> {
        match spec {
            FilterSpec::View(..) | FilterSpec::Function(..) => {
                let (node, d, req, mut opts) = (self.clone(), db.clone(), req(), o.clone());
                let (filter, opts) = blocking::<_, Error>(move || {
                    let filter = node.resolve_filter(&d, spec, &mut opts, || req)?;
                    Ok((filter, opts))
                })
                .await?;
                *o = opts;
                Ok(filter)
            }
            spec => self.resolve_filter(db, spec, o, req),
        }
    }

    /// The replicator's read of a local database: up to `limit` changes after `since` as
    /// `style=all_docs` rows (rendered as `_changes` renders them) through `filter`,
    /// waiting up to `wait` for the first when there is none yet; the rows and the last
    /// seq read.
    pub async fn changes_for_replication(
        self: &Arc<Self>,
        db: Arc<Database>,
        since: u64,
        limit: u64,
        filter: ReplicationFilter,
        wait: Option<Duration>,
    ) -> Result<(Vec<Value>, u64)> {
        let mut o = ChangesOpts::new(crate::seqs(&db));
        o.all_docs_style = true;
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
                let req =
                    ReqInfo::for_replication(&db.name, &name, &query_params, &since, wait, &user);
                let params: Params = req.query.iter().cloned().collect();
                let spec = FilterSpec::parse(Some(&name), &params, false, None)?;
                self.changes_filter(&db, spec, &mut o, || req).await?
            }
        };
        let o = Arc::new(o);
        let mut rx = db.watch_seq();
        let mut waited = false;
        loop {
            let seen = db.update_seq();
            let (d, opts) = (db.clone(), o.clone());
            let (rows, last) = blocking::<_, Error>(move || {
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
                .map(|r| serde_json::from_slice(r).map_err(|e| Error::internal(e.to_string())))
                .collect::<Result<Vec<Value>>>()?;
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

/// Waits for the sequence to move past `seen`, up to `wait`. False on timeout.
pub async fn wait_past(rx: &mut watch::Receiver<u64>, seen: u64, wait: Duration) -> bool {
    let moved = rx.wait_for(|s| *s > seen);
    matches!(tokio::time::timeout(wait, moved).await, Ok(Ok(_)))
}

/// Where a live feed's rows go, and how its reader learns that it waits (an HTTP
/// response, for `http`).
/// A sequence a feed shows: this node's counter, which the feed's codec writes, or a
/// clustered database's vector, packed by its coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShownSeq {
    Node(u64),
    Packed(String),
}

impl ShownSeq {
    /// As the feed's JSON shows it.
    pub fn render(&self, seqs: &SeqCodec) -> String {
        match self {
            ShownSeq::Node(n) => seqs.changes_seq(*n),
            ShownSeq::Packed(s) => s.clone(),
        }
    }
}

pub trait FeedOut: Send + 'static {
    /// A row (called on a blocking thread): the seq it shows and its JSON. False once the
    /// reader has gone.
    fn row(&mut self, seq_shown: Option<ShownSeq>, row: &[u8]) -> bool;
    /// Whether the reader is still there.
    fn is_open(&self) -> bool;
    /// The feed is about to wait for an update.
    fn waiting(&mut self) -> BoxFuture<'_, ()>;
    /// A heartbeat is due, or an update woke the feed.
    fn beat(&mut self) -> BoxFuture<'_, ()>;
    /// Resolves once the reader has gone.
    fn gone(&self) -> BoxFuture<'_, ()>;
    /// The feed has ended: with its `last_seq` and `pending`, or with an error.
    fn end(self: Box<Self>, end: Result<(ShownSeq, u64)>) -> BoxFuture<'static, ()>;
}

/// How a live feed runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// A longpoll (ends once it has sent rows), else continuous.
    pub longpoll: bool,
    /// `[fabric] changes_duration`: how long a feed with a heartbeat may run idle.
    pub max_duration: Option<Duration>,
}

/// A longpoll (`longpoll`) or continuous feed, as CouchDB's `keep_sending_changes` runs
/// it: send what there is; stop once a longpoll has sent rows or a continuous feed its
/// `limit`; otherwise wait for an update up to the heartbeat (or, without one, the
/// timeout, which ends the feed). A heartbeat or an update beats, and the feed goes round
/// again. With a heartbeat only `max_duration` (`[fabric] changes_duration`) ends an idle
/// feed. A feed whose reader went away just stops; one whose scan panicked drops `out`.
pub async fn live(db: Arc<Database>, o: ChangesOpts, live: Live, mut out: Box<dyn FeedOut>) {
    let Live {
        longpoll,
        max_duration,
    } = live;
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
    let o = Arc::new(o);
    loop {
        let seen = *seq_rx.borrow_and_update();
        let (db2, o2) = (db.clone(), o.clone());
        let (since, left) = (seen_all.last, limit - seen_all.sent);
        let scanned = tokio::task::spawn_blocking(move || {
            let scanned = scan(&db2, &o2, since, left, &mut |s, row| {
                out.row(s.map(ShownSeq::Node), &row)
            });
            (out, scanned)
        })
        .await;
        let round = match scanned {
            Ok((back, Ok(round))) => {
                out = back;
                round
            }
            Ok((back, Err(e))) => return back.end(Err(e)).await,
            Err(e) => {
                tracing::error!(db = %db.name, error = %e, "a feed's scan failed");
                return;
            }
        };
        seen_all = Scanned {
            last: round.last,
            last_sent: round.last_sent.or(seen_all.last_sent),
            sent: seen_all.sent + round.sent,
        };
        let done = match longpoll {
            true => round.sent > 0,
            false => seen_all.sent == limit,
        };
        if done || o.descending || !out.is_open() {
            break;
        }
        out.waiting().await;
        let updated = tokio::select! {
            moved = wait_past(&mut seq_rx, seen, wait) => moved,
            _ = out.gone() => return,
        };
        let overdue = max_duration.is_some_and(|max| started.elapsed() > max);
        if !updated && (o.heartbeat.is_none() || overdue) {
            break;
        }
        out.beat().await;
        if !out.is_open() {
            return;
        }
    }
    let end = blocking(move || feed_end(&db, &o, start, seen_all)).await;
    out.end(end.map(|(last, pending)| (ShownSeq::Node(last), pending)))
        .await
}
