//! `_changes` of a clustered database (CouchDB's `fabric_view_changes`): one copy of
//! every range asked for its feed from where the client's vector stands on that range,
//! the answers folded into rows that each show the whole vector ([`crate::feed`]).
//! Longpoll and continuous feeds go round: a round of normal feeds, then a wait for any
//! range's copy to show a change (a longpoll of each), then another round.
//!
//! Filters: `_doc_ids`, `_design` and `_selector` go to the copies as the client sent
//! them. Filter functions and `_view` filters run on every copy (as CouchDB's shard
//! workers run them), which holds only its own range's design documents: the design
//! document is read here and given whole to each copy in its `_changes` body, with the
//! request object a function is told about ([`Coordinator::clustered_filter`]).

use crate::copies::{passed_over, Ask};
use crate::feed::{self, CopyFeed, From, RangePos, Start};
use crate::merge::Reply;
use crate::Coordinator;
use crate::{copy_error, copy_path, form_query, merge};
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_node::changes::{
    ChangesOpts, FeedOut, Filter, FilterSpec, Live, ShownSeq, DEFAULT_LIMIT, GIVEN_DESIGN,
    GIVEN_REQ,
};
use settee_node::design_filter::check_member;
use settee_node::fabric::{FeedEnd, ReqFn};
use settee_node::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// The longest a copy is asked to hold a longpoll open; a longer wait asks again (so a
/// copy that stopped answering is noticed within it).
const COPY_WAIT: Duration = Duration::from_secs(45);

/// Query parameters for the copies, and a POST body.
type CopyQuery = (Vec<(&'static str, String)>, Option<Value>);

/// A feed's filter as the copies are given it: query parameters and body members.
fn copy_filter(filter: &Filter) -> Result<CopyQuery> {
    let (spec, given) = match filter {
        Filter::None => return Ok((Vec::new(), None)),
        Filter::Copies(spec, given) => (spec, given),
        _ => return Err(Error::internal("a node's filter on a clustered feed")),
    };
    let mut body = given.as_deref().cloned().unwrap_or_default();
    let params = match spec {
        FilterSpec::None => Vec::new(),
        FilterSpec::Design => vec![("filter", "_design".into())],
        FilterSpec::DocIds(ids) => {
            let mut ids: Vec<&String> = ids.iter().collect();
            ids.sort();
            body.insert("doc_ids".into(), json!(ids));
            vec![("filter", "_doc_ids".into())]
        }
        FilterSpec::Selector(sel) => {
            body.insert("selector".into(), sel.clone());
            vec![("filter", "_selector".into())]
        }
        FilterSpec::View(ddoc, view) => vec![
            ("filter", "_view".into()),
            ("view", format!("{ddoc}/{view}")),
        ],
        FilterSpec::Function(ddoc, name) => vec![("filter", format!("{ddoc}/{name}"))],
    };
    let body = (!body.is_empty()).then_some(Value::Object(body));
    Ok((params, body))
}

impl Coordinator {
    /// The filter a clustered feed keeps for its copies (CouchDB's `configure_filter` at
    /// the coordinator, then the filter passed to every shard's worker): a filter
    /// function's or `_view`'s design document is read here through the cluster, with a
    /// node's 404s, and given whole to every copy in its `_changes` body
    /// (`Node::given_changes_filter`), a function's request object with it.
    pub(crate) async fn clustered_filter<'a>(
        &'a self,
        db: &'a str,
        map: Arc<ShardMap>,
        user: &'a UserCtx,
        spec: FilterSpec,
        req: ReqFn<'a>,
    ) -> Result<Filter> {
        let (ddoc, member) = match &spec {
            FilterSpec::Function(ddoc, name) => (ddoc.clone(), ["filters", name.as_str()]),
            FilterSpec::View(ddoc, view) => (ddoc.clone(), ["views", view.as_str()]),
            _ => return Ok(Filter::Copies(spec, None)),
        };
        let member = member.map(str::to_owned);
        let req = matches!(spec, FilterSpec::Function(..)).then(req);
        let (me, name, u) = (self.clone(), db.to_owned(), user.clone());
        let given = settee_node::blocking::<_, Error>(move || {
            let design = me.design(&name, &map, &u, &ddoc)?;
            let path: Vec<&str> = member.iter().map(String::as_str).collect();
            check_member(&Value::Object(design.clone()), &path)?;
            let mut given = serde_json::Map::new();
            if let Some(req) = req {
                let security = me.security_clustered(&name, &map)?;
                given.insert(GIVEN_REQ.into(), req.to_json_for(&name, &security));
            }
            given.insert(GIVEN_DESIGN.into(), Value::Object(design));
            Ok(given)
        })
        .await?;
        Ok(Filter::Copies(spec, Some(Arc::new(given))))
    }
}

/// One feed on a clustered database: where it stands and what it asks the copies.
struct Feed<'a> {
    coord: &'a Coordinator,
    db: &'a str,
    map: Arc<ShardMap>,
    opts: &'a ChangesOpts,
    vector: Vec<RangePos>,
    starts: Vec<Start>,
    /// Rows sent so far, and the feed's limit.
    sent: u64,
    limit: u64,
}

impl<'a> Feed<'a> {
    fn new(coord: &'a Coordinator, db: &'a str, map: Arc<ShardMap>, opts: &'a ChangesOpts) -> Self {
        let ranges: Vec<((u32, u32), Vec<String>)> = (map.by_range.iter())
            .map(|c| {
                (
                    feed::bounds(&c.range).unwrap_or((0, u32::MAX)),
                    c.nodes.clone(),
                )
            })
            .collect();
        let running: Vec<String> = (coord.node.cluster())
            .map(|c| c.members().into_iter().map(|m| m.name).collect())
            .unwrap_or_default();
        let me = settee_core::node::name();
        let starts = feed::starts(&ranges, &opts.since, me, |n| running.iter().any(|r| r == n));
        let vector = (ranges.iter().zip(&starts))
            .map(|((bounds, _), s)| RangePos {
                bounds: *bounds,
                node: s.order[0].clone(),
                at: match &s.first {
                    From::At(at) => at.clone(),
                    _ => settee_core::seq::At::Bare(0),
                },
            })
            .collect();
        Feed {
            coord,
            db,
            map,
            opts,
            vector,
            starts,
            sent: 0,
            limit: opts.limit.unwrap_or(DEFAULT_LIMIT),
        }
    }

    /// Each range whose vector named a copy that is not read any more: resumed on its
    /// first copy where that copy's internal replication checkpoint of its pushes to the
    /// lost one vouches ([`feed::resume_on`]); from 0 when it cannot be read or vouches
    /// for nothing.
    async fn resume_lost(&mut self) {
        let lookups = (self.map.by_range.iter().zip(&self.starts).enumerate())
            .filter(|(_, (_, s))| s.first == From::Zero)
            .filter_map(|(i, (copies, s))| {
                let on = s.order.first()?.clone();
                let copy = self.map.copy_name(self.db, &copies.range);
                // The checkpoint that vouches for a place: of this copy's pushes to the
                // lost one, or of the split's copies into this half.
                let (checkpoint, from) = match (&s.lost, &s.split) {
                    (Some((lost_node, at)), _) => (
                        settee_node::moves::checkpoint_id(&copy, &on, lost_node),
                        Place::Lost(at.clone()),
                    ),
                    (None, Some(at)) => (
                        settee_node::reshard::run::checkpoint_id(&copy),
                        Place::Split(at.clone()),
                    ),
                    (None, None) => return None,
                };
                let path = copy_path(&self.map, self.db, &copies.range);
                let target = format!("{path}/_local/{checkpoint}");
                let coord = self.coord;
                Some(async move {
                    let reply = coord.ask(&on, "GET", &target, None, None).await;
                    (i, reply, from)
                })
            });
        let found: Vec<(usize, settee_core::seq::At)> = (join_all(lookups).await.into_iter())
            .filter_map(|(i, reply, from)| match reply {
                Reply::Answered { status: 200, body } => {
                    let history = body["history"].as_array()?;
                    let at = match from {
                        Place::Lost(lost) => feed::resume_on(history, &lost),
                        Place::Split(whole) => feed::resume_split(history, &whole),
                    };
                    Some((i, at?))
                }
                _ => None,
            })
            .collect();
        for (i, at) in found {
            self.starts[i].first = From::At(at.clone());
            self.vector[i].at = at;
        }
    }

    /// The copies' query for a feed from `since`, at most `left` rows (a longpoll of up to
    /// `wait` when given), and its POST body.
    fn query(
        &self,
        since: &str,
        left: u64,
        wait: Option<Duration>,
    ) -> Result<(String, Option<Value>)> {
        let o = self.opts;
        let (mut params, body) = copy_filter(&o.filter)?;
        params.push(("since", since.to_owned()));
        if left < DEFAULT_LIMIT {
            params.push(("limit", left.to_string()));
        }
        for (name, on) in [
            ("descending", o.descending),
            ("include_docs", o.include_docs),
            ("conflicts", o.conflicts),
            ("attachments", o.atts.inline),
            ("att_encoding_info", o.atts.encoding_info),
        ] {
            if on {
                params.push((name, "true".into()));
            }
        }
        if o.all_docs_style {
            params.push(("style", "all_docs".into()));
        }
        if let Some(wait) = wait {
            params.push(("feed", "longpoll".into()));
            params.push(("timeout", wait.as_millis().max(1).to_string()));
        }
        Ok((form_query(&params), body))
    }

    /// One normal feed of every range's copy, from where the feed stands: each range's
    /// copies tried in turn, the first from its place, the others from 0.
    async fn ask_round(&self) -> Result<Vec<CopyFeed>> {
        let left = self.limit - self.sent;
        let asks = (self.map.by_range.iter().zip(&self.starts)).map(|(copies, start)| {
            let path = copy_path(&self.map, self.db, &copies.range);
            let asks = (start.order.iter().enumerate())
                .map(|(i, node)| {
                    let from = if i == 0 { &start.first } else { &From::Zero };
                    let (query, body) = self.query(&feed::copy_since(node, from), left, None)?;
                    Ok(Ask {
                        node: node.clone(),
                        method: if body.is_some() { "POST" } else { "GET" },
                        target: format!("{path}/_changes?{query}"),
                        body,
                    })
                })
                .collect::<Result<Vec<_>>>();
            async move {
                let asks = asks?;
                let (node, body) = self.coord.first_answer(&copies.range, asks, None).await?;
                Ok(copy_feed(&node, body))
            }
        });
        futures_util::future::join_all(asks)
            .await
            .into_iter()
            .collect()
    }

    /// A round: the copies' rows past the vector, folded into it (see [`feed::fold`]).
    async fn round(&mut self) -> Result<feed::Round> {
        let answers = self.ask_round().await?;
        let left = self.limit - self.sent;
        let round = feed::fold(
            &mut self.vector,
            answers,
            left,
            (self.limit, self.sent, self.opts.seq_interval),
            self.opts.descending,
        );
        self.sent += round.rows.len() as u64;
        // The next round starts where this one stands, on the copies that answered.
        self.starts = (self.vector.iter().zip(&self.starts))
            .map(|(pos, s)| {
                let mut order = s.order.clone();
                order.retain(|n| *n != pos.node);
                order.insert(0, pos.node.clone());
                Start {
                    order,
                    first: From::At(pos.at.clone()),
                    lost: None,
                    split: None,
                }
            })
            .collect();
        Ok(round)
    }

    /// Waits up to `wait` for any range's copy to show a change past the vector: true if
    /// one did (a copy that fails to answer counts as one, after a pause, so that the next
    /// round finds another copy).
    async fn wait_for_change(&self, wait: Duration) -> Result<bool> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            let slice = (deadline - now).min(COPY_WAIT);
            let mut waits: FuturesUnordered<_> = (self.map.by_range.iter().zip(&self.starts))
                .map(|(copies, start)| {
                    let node = &start.order[0];
                    let query = self.query(&feed::copy_since(node, &start.first), 1, Some(slice));
                    async move {
                        let (query, body) = query?;
                        let target = format!(
                            "{}/_changes?{query}",
                            copy_path(&self.map, self.db, &copies.range)
                        );
                        let method = if body.is_some() { "POST" } else { "GET" };
                        Ok::<_, Error>(
                            self.coord
                                .ask(node, method, &target, None, body.as_ref())
                                .await,
                        )
                    }
                })
                .collect();
            while let Some(reply) = waits.next().await {
                match reply? {
                    merge::Reply::Answered { status: 200, body } => {
                        if body["results"].as_array().is_some_and(|r| !r.is_empty()) {
                            return Ok(true);
                        }
                    }
                    merge::Reply::Answered { status, body } if !passed_over(status, &body) => {
                        return Err(copy_error(status, &body))
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_secs(1).min(slice)).await;
                        return Ok(true);
                    }
                }
            }
        }
    }

    fn last_seq(&self) -> ShownSeq {
        ShownSeq::Packed(feed::pack(&self.vector))
    }
}

/// A place the vector gave for a range whose copy is not read any more.
enum Place {
    /// In a copy of the range that is lost.
    Lost(settee_core::seq::At),
    /// In the copy the range was split from.
    Split(settee_core::seq::At),
}

fn copy_feed(node: &str, body: Value) -> CopyFeed {
    let Value::Object(mut m) = body else {
        return CopyFeed {
            node: node.to_owned(),
            results: Vec::new(),
            last_seq: "0".into(),
            pending: 0,
        };
    };
    CopyFeed {
        node: node.to_owned(),
        results: match m.shift_remove("results") {
            Some(Value::Array(rows)) => rows,
            _ => Vec::new(),
        },
        last_seq: m["last_seq"].as_str().unwrap_or("0").to_owned(),
        pending: m["pending"].as_u64().unwrap_or(0),
    }
}

impl Coordinator {
    /// A normal feed of a clustered database.
    pub(crate) fn changes_clustered(
        &self,
        db: &str,
        map: Arc<ShardMap>,
        opts: &ChangesOpts,
        row: &mut dyn FnMut(Option<ShownSeq>, &[u8]) -> bool,
    ) -> Result<FeedEnd> {
        let mut feed = Feed::new(self, db, map, opts);
        crate::block_on(feed.resume_lost());
        let round = crate::block_on(feed.round())?;
        for (seq, r) in round.rows {
            if !row(
                seq.map(ShownSeq::Packed),
                &serde_json::to_vec(&r).expect("json"),
            ) {
                break;
            }
        }
        Ok(FeedEnd {
            last_seq: feed.last_seq(),
            pending: round.pending,
        })
    }

    /// A longpoll or continuous feed of a clustered database, run as a node runs one
    /// (`settee_node::changes::live`): a round, then a wait, until a longpoll has sent
    /// rows, a continuous feed its limit, or the wait ends without a heartbeat.
    pub(crate) async fn live_clustered(
        &self,
        db: &str,
        map: Arc<ShardMap>,
        opts: ChangesOpts,
        live: Live,
        mut out: Box<dyn FeedOut>,
    ) {
        let mut feed = Feed::new(self, db, map, &opts);
        feed.resume_lost().await;
        let wait = opts.heartbeat.unwrap_or(opts.timeout);
        let started = tokio::time::Instant::now();
        let mut pending;
        loop {
            let round = match feed.round().await {
                Ok(round) => round,
                Err(e) => return out.end(Err(e)).await,
            };
            pending = round.pending;
            let sent = round.rows.len();
            let emitted = tokio::task::spawn_blocking(move || {
                for (seq, r) in round.rows {
                    let text = serde_json::to_vec(&r).expect("json");
                    if !out.row(seq.map(ShownSeq::Packed), &text) {
                        break;
                    }
                }
                out
            })
            .await;
            out = match emitted {
                Ok(out) => out,
                Err(e) => {
                    tracing::error!(%db, error = %e, "a clustered feed's rows");
                    return;
                }
            };
            let done = match live.longpoll {
                true => sent > 0,
                false => feed.sent == feed.limit,
            };
            if done || opts.descending || !out.is_open() {
                break;
            }
            out.waiting().await;
            let changed = tokio::select! {
                changed = feed.wait_for_change(wait) => changed,
                _ = out.gone() => return,
            };
            let changed = match changed {
                Ok(changed) => changed,
                Err(e) => return out.end(Err(e)).await,
            };
            let overdue = live.max_duration.is_some_and(|max| started.elapsed() > max);
            if !changed && (opts.heartbeat.is_none() || overdue) {
                break;
            }
            out.beat().await;
            if !out.is_open() {
                return;
            }
        }
        out.end(Ok((feed.last_seq(), pending))).await
    }
}
