//! View queries over a committed index: key ranges in collation order, map rows with
//! `skip`/`limit`/`offset`, and reductions read from the tree's stored partials, grouped
//! by exact key or `group_level`.

use crate::group::{Group, ReduceKind};
use crate::layout::{self, decode_payload, push_doc_id, Meta};
use crate::reducer::{decode, JsReducers};
use crate::tree::{self, Entry, NodeRead, Range, Row};
use crate::{Error, Result, Views};
use serde_json::Value;
use settee_core::collate;
use settee_core::reduce::Builtin;
use std::cmp::Ordering;
use std::ops::{Bound, ControlFlow};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    None,
    Exact,
    Level(usize),
}

/// A validated view query (see the HTTP layer for parameter parsing).
#[derive(Clone, Debug)]
pub struct ViewQuery {
    pub keys: Option<Vec<Value>>,
    pub start_key: Option<Value>,
    pub end_key: Option<Value>,
    pub start_docid: Option<String>,
    pub end_docid: Option<String>,
    pub inclusive_end: bool,
    pub descending: bool,
    pub skip: u64,
    pub limit: Option<u64>,
    /// Whether to reduce (the view has a reduce and `reduce` was not `false`).
    pub reduce: bool,
    pub grouping: Grouping,
    /// The partition a query of a partitioned view reads (required for those views).
    pub partition: Option<String>,
    /// Reductions given as their partial results, not finalized: what a cluster's
    /// coordinator reduces again across ranges (see [`partial_of`]).
    pub partials: bool,
}

impl Default for ViewQuery {
    fn default() -> Self {
        ViewQuery {
            keys: None,
            start_key: None,
            end_key: None,
            start_docid: None,
            end_docid: None,
            inclusive_end: true,
            descending: false,
            skip: 0,
            limit: None,
            reduce: false,
            grouping: Grouping::None,
            partition: None,
            partials: false,
        }
    }
}

/// What a query produces, in order: one `Head`, then rows.
pub enum Event<'a> {
    /// `offset` is `None` for reduce queries.
    Head {
        total_rows: u64,
        offset: Option<u64>,
        update_seq: u64,
    },
    Row {
        id: &'a str,
        key: &'a [u8],
        value: &'a [u8],
    },
    Reduced {
        key: &'a Value,
        value: &'a Value,
    },
}

pub type Out<'o> = dyn FnMut(Event<'_>) -> ControlFlow<()> + 'o;

impl ViewQuery {
    /// CouchDB's check that the range can hold rows.
    pub fn check_range(&self, raw: bool) -> std::result::Result<(), String> {
        let (Some(s), Some(e)) = (&self.start_key, &self.end_key) else {
            return Ok(());
        };
        // Identical keys (e.g. from `key`) never conflict, whatever the doc ids say.
        if s == e {
            return Ok(());
        }
        let ord = if raw {
            collate::compare_raw(s, e)
        } else {
            collate::compare(s, e)
        };
        let ord = ord.then_with(|| match (&self.start_docid, &self.end_docid) {
            (Some(a), Some(b)) => a.cmp(b),
            _ => Ordering::Equal,
        });
        match (self.descending, ord) {
            (false, Ordering::Greater) => Err("No rows can match your key range, reverse your start_key and end_key or set descending=true".into()),
            (true, Ordering::Less) => Err("No rows can match your key range, reverse your start_key and end_key or set descending=false".into()),
            _ => Ok(()),
        }
    }

    /// The tree-key prefix of the query's partition (empty for a global query).
    fn prefix(&self) -> Vec<u8> {
        self.partition
            .as_deref()
            .map_or_else(Vec::new, layout::partition_prefix)
    }

    fn enc(&self, v: &Value, raw: bool) -> Vec<u8> {
        let mut out = self.prefix();
        if raw {
            collate::encode_key_raw(v, &mut out);
        } else {
            collate::encode_key(v, &mut out);
        }
        out
    }

    /// Tree-key range of `start..end` with this query's docids, direction and end rule,
    /// within the query's partition.
    fn range(&self, start: Option<&Value>, end: Option<&Value>, raw: bool) -> Range {
        let mut r = self.key_range(start, end, raw);
        if self.partition.is_some() {
            let prefix = self.prefix();
            if matches!(r.lo, Bound::Unbounded) {
                r.lo = Bound::Included(prefix.clone());
            }
            if matches!(r.hi, Bound::Unbounded) {
                r.hi = Bound::Excluded(layout::partition_end(&prefix));
            }
        }
        r
    }

    fn key_range(&self, start: Option<&Value>, end: Option<&Value>, raw: bool) -> Range {
        // Start of key k's rows (optionally at doc id d), or just past them.
        let at = |k: &Value, d: Option<&String>| {
            let mut b = self.enc(k, raw);
            if let Some(d) = d {
                push_doc_id(&mut b, d);
            }
            b
        };
        let past = |k: &Value, d: Option<&String>| {
            let mut b = at(k, d);
            if d.is_some() {
                *b.last_mut().expect("doc id terminator") += 1;
            } else {
                b.push(0xFF);
            }
            b
        };
        let (sd, ed) = (self.start_docid.as_ref(), self.end_docid.as_ref());
        if !self.descending {
            Range {
                lo: start.map_or(Bound::Unbounded, |k| Bound::Included(at(k, sd))),
                hi: end.map_or(Bound::Unbounded, |k| {
                    if self.inclusive_end {
                        Bound::Excluded(past(k, ed))
                    } else {
                        Bound::Excluded(at(k, ed))
                    }
                }),
            }
        } else {
            Range {
                hi: start.map_or(Bound::Unbounded, |k| Bound::Excluded(past(k, sd))),
                lo: end.map_or(Bound::Unbounded, |k| {
                    if self.inclusive_end {
                        Bound::Included(at(k, ed))
                    } else {
                        Bound::Included(past(k, ed))
                    }
                }),
            }
        }
    }

    /// The ranges to read, in output order. Map rows of several keys come in the order of
    /// the keys, from the last key when descending (CouchDB's coordinator sorts them by the
    /// key's position); reduce rows always in the keys' order, each key once.
    fn ranges(&self, raw: bool) -> Vec<Range> {
        match &self.keys {
            Some(keys) => {
                let mut seen = std::collections::HashSet::new();
                let mut ranges: Vec<Range> = keys
                    .iter()
                    .filter(|k| !self.reduce || seen.insert(self.enc(k, raw)))
                    .map(|k| self.range(Some(k), Some(k), raw))
                    .collect();
                if self.descending && !self.reduce {
                    ranges.reverse();
                }
                ranges
            }
            None => vec![self.range(self.start_key.as_ref(), self.end_key.as_ref(), raw)],
        }
    }
}

/// CouchDB's `offset` before `skip`: the rank (in the query's direction) of the first row
/// the ranges hold, or where the last range lies if they hold none.
fn first_rank(
    nodes: &dyn NodeRead,
    root: Option<&Entry>,
    ranges: &[Range],
    descending: bool,
) -> Result<u64> {
    let rank = |r: &Range| -> Result<u64> {
        Ok(if descending {
            tree::rows_after(nodes, root, &r.hi)?
        } else {
            tree::rows_before(nodes, root, &r.lo)?
        })
    };
    for r in ranges {
        if tree::reduce_range(nodes, root, r, &mut tree::NoReduce)?.1 > 0 {
            return rank(r);
        }
    }
    ranges.last().map_or(Ok(0), rank)
}

/// Skip and limit over the rows of all ranges, and the response head: sent just before
/// the first row that is emitted, or at the end when none is.
struct Rows {
    skip: u64,
    left: u64,
    head_sent: bool,
}

enum Admit {
    Emit,
    Skip,
    Stop,
}

impl Rows {
    fn new(q: &ViewQuery) -> Rows {
        Rows {
            skip: q.skip,
            left: q.limit.unwrap_or(u64::MAX),
            head_sent: false,
        }
    }

    /// Whether the next row is emitted; before the first one, sends the head `head` makes.
    fn admit(
        &mut self,
        out: &mut Out<'_>,
        head: impl FnOnce() -> Result<Event<'static>>,
    ) -> Result<Admit> {
        if self.left == 0 {
            return Ok(Admit::Stop);
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(Admit::Skip);
        }
        self.left -= 1;
        if !self.head_sent {
            self.head_sent = true;
            if out(head()?).is_break() {
                return Ok(Admit::Stop);
            }
        }
        Ok(Admit::Emit)
    }

    /// Sends `head` if no row was emitted.
    fn finish(&mut self, out: &mut Out<'_>, head: Event<'static>) {
        if !self.head_sent {
            self.head_sent = true;
            let _ = out(head);
        }
    }
}

pub(crate) fn run(
    views: &Views,
    g: &Group,
    meta: &Meta,
    nodes: &dyn NodeRead,
    view: usize,
    q: &ViewQuery,
    out: &mut Out<'_>,
) -> Result<()> {
    let root = meta.roots[view].as_ref();
    if q.reduce && g.reduces[view] != ReduceKind::None {
        reduce_rows(views, g, meta, nodes, view, q, out)
    } else {
        map_rows(meta, nodes, root, q, g.def.raw(view), out)
    }
}

fn map_rows(
    meta: &Meta,
    nodes: &dyn NodeRead,
    root: Option<&Entry>,
    q: &ViewQuery,
    raw: bool,
    out: &mut Out<'_>,
) -> Result<()> {
    // A partition query too reports the whole index (CouchDB's shard, with q=1): its rows
    // and the rank of the first row among them.
    let total_rows = root.map_or(0, |r| r.count);
    let ranges = q.ranges(raw);
    // As CouchDB's coordinator reports it: the shard's offset plus `skip`, at most the total.
    let offset = first_rank(nodes, root, &ranges, q.descending)?
        .saturating_add(q.skip)
        .min(total_rows);
    let head = || Event::Head {
        total_rows,
        offset: Some(offset),
        update_seq: meta.seq,
    };
    let mut rows = Rows::new(q);
    for range in &ranges {
        // Skipped rows are passed over inside the tree, by subtree counts.
        let mut skip = std::mem::take(&mut rows.skip);
        let mut reader = RowReader {
            rows: &mut rows,
            out: &mut *out,
            head: &head,
            nodes,
            root,
            descending: q.descending,
            partition_len: q.prefix().len(),
            check_straddle: q.descending && skip > 0,
            run: Vec::new(),
            run_prefix: Vec::new(),
            passed_prefix: None,
            failure: None,
        };
        let flow = tree::fold_skipping(nodes, root, range, q.descending, &mut skip, &mut |row| {
            reader.visit(row)
        })?;
        let flow = if flow.is_break() {
            flow
        } else {
            reader.flush()
        };
        if let Some(e) = reader.failure {
            return Err(e);
        }
        rows.skip = skip;
        if flow.is_break() {
            break;
        }
    }
    rows.finish(out, head());
    Ok(())
}

/// Emits map rows as the tree yields them, except that a descending read still gives one
/// document's rows under one key by ascending value (their stored order), as CouchDB does:
/// such a run is collected and emitted reversed.
struct RowReader<'r, 'o, 'h> {
    rows: &'r mut Rows,
    out: &'r mut Out<'o>,
    head: &'h dyn Fn() -> Event<'static>,
    nodes: &'r dyn NodeRead,
    root: Option<&'r Entry>,
    descending: bool,
    /// The length of the partition prefix every tree key of the query starts with.
    partition_len: usize,
    /// The first row read after the tree skipped rows may sit inside a run whose other
    /// rows were skipped: those must be the run's first rows in output order instead.
    check_straddle: bool,
    run: Vec<Row>,
    run_prefix: Vec<u8>,
    /// A run already emitted whole: its remaining rows in the tree are passed over.
    passed_prefix: Option<Vec<u8>>,
    failure: Option<Error>,
}

impl RowReader<'_, '_, '_> {
    fn visit(&mut self, row: &Row) -> ControlFlow<()> {
        if !self.descending {
            return self.emit(row);
        }
        let plen = self.partition_len;
        let prefix = &row.key
            [..layout::row_prefix_len(&row.key[plen..]).map_or(row.key.len(), |l| plen + l)];
        if self.passed_prefix.as_deref() == Some(prefix) {
            return ControlFlow::Continue(());
        }
        self.passed_prefix = None;
        if std::mem::take(&mut self.check_straddle) {
            match self.straddling_run(row, prefix) {
                Ok(Some(tail)) => {
                    self.passed_prefix = Some(prefix.to_vec());
                    return tail.iter().try_for_each(|r| self.emit(r));
                }
                Ok(None) => {}
                Err(e) => {
                    self.failure = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        if !self.run.is_empty() && self.run_prefix != prefix {
            self.flush()?;
        }
        if self.run.is_empty() {
            self.run_prefix = prefix.to_vec();
        }
        self.run.push(row.clone());
        ControlFlow::Continue(())
    }

    /// If rows of `row`'s run with a higher ordinal were skipped, the run's rows to emit
    /// (ascending, without as many leading rows as were skipped).
    fn straddling_run(&self, row: &Row, prefix: &[u8]) -> Result<Option<Vec<Row>>> {
        let mut end = prefix.to_vec();
        end.extend_from_slice(&[0xFF; 5]);
        let above = Range {
            lo: Bound::Excluded(row.key.clone()),
            hi: Bound::Excluded(end.clone()),
        };
        let skipped = tree::reduce_range(self.nodes, self.root, &above, &mut tree::NoReduce)?.1;
        if skipped == 0 {
            return Ok(None);
        }
        let whole = Range {
            lo: Bound::Included(prefix.to_vec()),
            hi: Bound::Excluded(end),
        };
        let mut run = Vec::new();
        let _ = tree::fold(self.nodes, self.root, &whole, false, &mut |r| {
            run.push(r.clone());
            ControlFlow::Continue(())
        })?;
        Ok(Some(run.split_off((skipped as usize).min(run.len()))))
    }

    /// Emits the collected run, reversed.
    fn flush(&mut self) -> ControlFlow<()> {
        let run = std::mem::take(&mut self.run);
        run.iter().rev().try_for_each(|r| self.emit(r))
    }

    fn emit(&mut self, row: &Row) -> ControlFlow<()> {
        let head = self.head;
        match self.rows.admit(self.out, || Ok(head())) {
            Ok(Admit::Emit) => {}
            Ok(Admit::Skip) => return ControlFlow::Continue(()),
            Ok(Admit::Stop) => return ControlFlow::Break(()),
            Err(e) => {
                self.failure = Some(e);
                return ControlFlow::Break(());
            }
        }
        match decode_payload(&row.value) {
            Some(p) => (self.out)(Event::Row {
                id: p.doc_id,
                key: p.key,
                value: p.value,
            }),
            None => {
                self.failure = Some(Error::Internal("bad view row".into()));
                ControlFlow::Break(())
            }
        }
    }
}

fn reduce_rows(
    views: &Views,
    g: &Group,
    meta: &Meta,
    nodes: &dyn NodeRead,
    view: usize,
    q: &ViewQuery,
    out: &mut Out<'_>,
) -> Result<()> {
    let root = meta.roots[view].as_ref();
    let mut js = views.reducers(g);
    let head = || Event::Head {
        total_rows: 0,
        offset: None,
        update_seq: meta.seq,
    };
    let mut rows = Rows::new(q);
    let mut emit = |key: &Value, value: &Value, out: &mut Out<'_>| -> Result<ControlFlow<()>> {
        Ok(match rows.admit(out, || Ok(head()))? {
            Admit::Emit => out(Event::Reduced { key, value }),
            Admit::Skip => ControlFlow::Continue(()),
            Admit::Stop => ControlFlow::Break(()),
        })
    };
    let plen = q.prefix().len();
    'ranges: for range in q.ranges(g.def.raw(view)) {
        let level = match q.grouping {
            Grouping::None => {
                if let Some(v) = reduce_value(g, view, &mut js, nodes, root, &range, q.partials)? {
                    if emit(&Value::Null, &v, out)?.is_break() {
                        break 'ranges;
                    }
                }
                continue;
            }
            Grouping::Exact => None,
            Grouping::Level(n) => Some(n),
        };
        let mut cur = range;
        while let Some(row) = edge_row(nodes, root, &cur, q.descending)? {
            let key = &row.key[plen..];
            let len = plen
                + match level {
                    None => collate::encoded_len(key),
                    Some(n) => collate::group_prefix_len(key, n),
                }
                .ok_or_else(|| Error::Internal("unreadable view key".into()))?;
            let prefix = row.key[..len].to_vec();
            let mut after = prefix.clone();
            after.push(0xFF);
            let group = intersect(&cur, &prefix, &after);
            let key = group_key(&row, level)?;
            if let Some(v) = reduce_value(g, view, &mut js, nodes, root, &group, q.partials)? {
                if emit(&key, &v, out)?.is_break() {
                    break 'ranges;
                }
            }
            if q.descending {
                cur.hi = Bound::Excluded(prefix);
            } else {
                cur.lo = Bound::Included(after);
            }
        }
    }
    rows.finish(out, head());
    Ok(())
}

/// The first (or, descending, last) row of `range`.
fn edge_row(
    nodes: &dyn NodeRead,
    root: Option<&Entry>,
    range: &Range,
    descending: bool,
) -> Result<Option<Row>> {
    let mut found = None;
    let _ = tree::fold(nodes, root, range, descending, &mut |r| {
        found = Some(r.clone());
        ControlFlow::Break(())
    })?;
    Ok(found)
}

/// `range` narrowed to keys in `[lo, hi)`.
fn intersect(range: &Range, lo: &[u8], hi: &[u8]) -> Range {
    let lo_b = match &range.lo {
        Bound::Included(l) | Bound::Excluded(l) if l.as_slice() >= lo => range.lo.clone(),
        _ => Bound::Included(lo.to_vec()),
    };
    let hi_b = match &range.hi {
        Bound::Included(h) | Bound::Excluded(h) if h.as_slice() < hi => range.hi.clone(),
        _ => Bound::Excluded(hi.to_vec()),
    };
    Range { lo: lo_b, hi: hi_b }
}

/// The key a group row shows: the row's key, cut to `level` elements if it is an array.
fn group_key(row: &Row, level: Option<usize>) -> Result<Value> {
    let p = decode_payload(&row.value).ok_or_else(|| Error::Internal("bad view row".into()))?;
    let mut key: Value =
        serde_json::from_slice(p.key).map_err(|_| Error::Internal("bad view key".into()))?;
    if let (Some(n), Value::Array(items)) = (level, &mut key) {
        items.truncate(n);
    }
    Ok(key)
}

/// The final reduction of the rows in `range` (with `partials`, its partial result, see
/// [`partial_of`]), or `None` if it holds no rows.
fn reduce_value(
    g: &Group,
    view: usize,
    js: &mut JsReducers<'_>,
    nodes: &dyn NodeRead,
    root: Option<&Entry>,
    range: &Range,
    partials: bool,
) -> Result<Option<Value>> {
    let (parts, count) =
        g.with_reducer(view, js, |red| tree::reduce_range(nodes, root, range, red))?;
    if count == 0 {
        return Ok(None);
    }
    let combined = match parts.len() {
        1 => parts.into_iter().next().expect("one part"),
        _ => {
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            g.with_reducer(view, js, |red| red.rereduce(&refs))
        }
    };
    let value = decode(&combined).map_err(Error::Reduce)?;
    Ok(Some(match g.reduces[view] {
        ReduceKind::Builtin(b) if partials => partial_of(b, value, nodes, root, range)?,
        ReduceKind::Builtin(b) => b.finalize(&value),
        _ => value,
    }))
}

/// The partial result a coordinator merges with other ranges' ones, for the rows of
/// `range` whose stored partial is `value`: that partial, except for `_first` and `_last`,
/// whose stored partial (`[value]`) relies on index order and so is given with its row's
/// key and document id, `[key, id, value]`, as CouchDB's `{Key, Id, Value}` partial.
fn partial_of(
    b: Builtin,
    value: Value,
    nodes: &dyn NodeRead,
    root: Option<&Entry>,
    range: &Range,
) -> Result<Value> {
    let last = match b {
        Builtin::First => false,
        Builtin::Last => true,
        _ => return Ok(value),
    };
    let Some(row) = edge_row(nodes, root, range, last)? else {
        return Ok(value);
    };
    let p = decode_payload(&row.value).ok_or_else(|| Error::Internal("bad view row".into()))?;
    let key: Value =
        serde_json::from_slice(p.key).map_err(|_| Error::Internal("bad view key".into()))?;
    let value = value.as_array().and_then(|a| a.first()).cloned();
    Ok(Value::Array(vec![
        key,
        p.doc_id.into(),
        value.unwrap_or(Value::Null),
    ]))
}
