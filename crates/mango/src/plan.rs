//! Query planning: which index answers a `_find`, over which key range, in which order —
//! CouchDB's `mango_cursor`/`mango_idx_view` rules as pure functions of the selector, the
//! options and the indexes.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{json, Value};
use settee_core::collate;

use crate::index::{ddoc_id, Index, Kind};
use crate::opts::{Dir, FindOpts};
use crate::Error;

/// One end of a range: a value and whether it is included.
pub type Bound = Option<(Value, bool)>;

/// The values a selector allows a field to take, from the conditions on it that an index
/// range can use.
#[derive(Clone, Debug, PartialEq)]
pub struct Range {
    pub low: Bound,
    pub high: Bound,
}

impl Range {
    fn full() -> Range {
        Range {
            low: None,
            high: None,
        }
    }

    /// Whether no value fits (contradictory bounds).
    pub fn is_empty(&self, raw: bool) -> bool {
        match (&self.low, &self.high) {
            (Some((l, li)), Some((h, hi))) => match cmp(l, h, raw) {
                Ordering::Greater => true,
                Ordering::Equal => !(*li && *hi),
                Ordering::Less => false,
            },
            _ => false,
        }
    }

    fn narrow(&mut self, op: &str, v: &Value, raw: bool) {
        let low = |r: &mut Range, b: (Value, bool)| {
            let tighter = match &r.low {
                None => true,
                Some((cur, inc)) => match cmp(&b.0, cur, raw) {
                    Ordering::Greater => true,
                    Ordering::Equal => *inc && !b.1,
                    Ordering::Less => false,
                },
            };
            if tighter {
                r.low = Some(b);
            }
        };
        let high = |r: &mut Range, b: (Value, bool)| {
            let tighter = match &r.high {
                None => true,
                Some((cur, inc)) => match cmp(&b.0, cur, raw) {
                    Ordering::Less => true,
                    Ordering::Equal => *inc && !b.1,
                    Ordering::Greater => false,
                },
            };
            if tighter {
                r.high = Some(b);
            }
        };
        match op {
            "$eq" => {
                low(self, (v.clone(), true));
                high(self, (v.clone(), true));
            }
            "$gt" => low(self, (v.clone(), false)),
            "$gte" => low(self, (v.clone(), true)),
            "$lt" => high(self, (v.clone(), false)),
            "$lte" => high(self, (v.clone(), true)),
            "$beginsWith" => {
                if let Some(p) = v.as_str() {
                    low(self, (v.clone(), true));
                    high(self, (Value::String(format!("{p}\u{ffff}")), true));
                }
            }
            _ => {}
        }
    }
}

fn cmp(a: &Value, b: &Value, raw: bool) -> Ordering {
    if raw {
        collate::compare_raw(a, b)
    } else {
        collate::compare(a, b)
    }
}

fn single(v: &Value) -> Option<(&str, &Value)> {
    match v {
        Value::Object(m) if m.len() == 1 => m.iter().next().map(|(k, v)| (k.as_str(), v)),
        _ => None,
    }
}

/// The conditions an index range can use: those on fields reached through `$and` only.
fn range_conditions<'a>(sel: &'a Value, out: &mut Vec<(&'a str, &'a str, &'a Value)>) {
    let Some((k, v)) = single(sel) else { return };
    match k {
        "$and" => v
            .as_array()
            .into_iter()
            .flatten()
            .for_each(|a| range_conditions(a, out)),
        _ if k.starts_with('$') => {}
        field => {
            if let Some((op, arg)) = single(v) {
                let usable = matches!(op, "$lt" | "$lte" | "$eq" | "$gte" | "$gt")
                    || (op == "$beginsWith" && arg.is_string())
                    || (op == "$exists" && arg == &Value::Bool(true));
                if usable {
                    out.push((field, op, arg));
                }
            }
        }
    }
}

/// Per field an index could use, its range (fields in name order).
pub fn field_ranges(selector: &Value) -> BTreeMap<String, Range> {
    let mut conds = Vec::new();
    range_conditions(selector, &mut conds);
    let mut out: BTreeMap<String, Range> = BTreeMap::new();
    for (field, op, arg) in conds {
        let raw = field == "_id";
        out.entry(field.to_string())
            .or_insert_with(Range::full)
            .narrow(op, arg, raw);
    }
    out
}

/// Whether every document the selector matches has all of `fields` (CouchDB's
/// `mango_selector:has_required_fields`).
pub fn has_required_fields(selector: &Value, fields: &[String]) -> bool {
    if matches!(selector, Value::Object(m) if m.is_empty()) {
        return fields.is_empty();
    }
    required_left(std::slice::from_ref(selector), fields.to_vec()).is_empty()
}

fn required_left(sels: &[Value], mut required: Vec<String>) -> Vec<String> {
    for (i, sel) in sels.iter().enumerate() {
        if required.is_empty() {
            return required;
        }
        let Some((k, v)) = single(sel) else { continue };
        match k {
            "$and" => {
                let args = v.as_array().map(Vec::as_slice).unwrap_or_default();
                if sels.len() == 1 {
                    return required_left(args, required);
                }
                required = required_left(args, required);
            }
            "$or" => {
                let args = v.as_array().map(Vec::as_slice).unwrap_or_default();
                let mut left: Vec<String> = args
                    .iter()
                    .flat_map(|a| required_left(std::slice::from_ref(a), required.clone()))
                    .collect();
                left.sort();
                left.dedup();
                return required_left(&sels[i + 1..], left);
            }
            _ if k.starts_with('$') => {}
            field => {
                if single(v) != Some(("$exists", &Value::Bool(false))) {
                    if let Some(pos) = required.iter().position(|f| f == field) {
                        required.remove(pos);
                    }
                }
            }
        }
    }
    required
}

/// Whether the selector pins `field` to one value (`$eq`) at its top level.
fn is_constant(selector: &Value, field: &str) -> bool {
    match single(selector) {
        Some(("$and", Value::Array(args))) => args.iter().any(|a| is_constant(a, field)),
        Some((f, cond)) if f == field => matches!(single(cond), Some(("$eq", _))),
        _ => false,
    }
}

/// Why an index cannot or did not answer (`_explain`'s reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Usable,
    FieldMismatch,
    SortOrderMismatch,
    NeedsTextSearch,
}

fn has_text(sel: &Value) -> bool {
    match sel {
        Value::Object(m) => m.iter().any(|(k, v)| k == "$default" || has_text(v)),
        Value::Array(items) => items.iter().any(has_text),
        _ => false,
    }
}

fn judge(index: &Index, opts: &FindOpts, ranges: &BTreeMap<String, Range>) -> Verdict {
    let selector = opts.selector.normalized();
    let sort: Vec<&str> = opts.sort.fields().collect();
    match &index.kind {
        Kind::Special => {
            if sort.is_empty() || (sort == ["_id"] && ranges.contains_key("_id")) {
                Verdict::Usable
            } else {
                Verdict::FieldMismatch
            }
        }
        Kind::Json { .. } => {
            if has_text(selector) {
                return Verdict::NeedsTextSearch;
            }
            let columns = index.columns();
            let required: Vec<String> = columns
                .iter()
                .filter(|c| !sort.contains(&c.as_str()) && *c != "_id" && *c != "_rev")
                .cloned()
                .collect();
            if !has_required_fields(selector, &required) {
                return Verdict::FieldMismatch;
            }
            if sort.is_empty() || can_use_sort(&columns, &sort, selector) {
                Verdict::Usable
            } else {
                Verdict::SortOrderMismatch
            }
        }
    }
}

fn can_use_sort(columns: &[String], sort: &[&str], selector: &Value) -> bool {
    for (i, c) in columns.iter().enumerate() {
        if c == sort[0] {
            let rest = &columns[i..];
            return sort.len() <= rest.len() && sort.iter().zip(rest).all(|(s, c)| s == c);
        }
        if !is_constant(selector, c) {
            return false;
        }
    }
    false
}

/// The leading columns of `index` the selector has ranges for.
fn prefix<'a>(index: &Index, ranges: &'a BTreeMap<String, Range>) -> Vec<&'a Range> {
    let mut out = Vec::new();
    for c in index.columns() {
        match ranges.get(&c) {
            Some(r) => out.push(r),
            None => break,
        }
    }
    out
}

/// How a query runs.
#[derive(Debug)]
pub struct Plan {
    /// `None` only for `_explain` when no index can sort.
    pub index: Option<Index>,
    /// Ranges of the index's leading columns (for `_all_docs`, of `_id`, or none for all).
    pub ranges: Vec<Range>,
    /// Whether the range holds nothing (the query answers `{"docs":[]}` at once).
    pub empty: bool,
    pub descending: bool,
    /// Documents are rebuilt from index keys instead of read.
    pub covering: bool,
    pub warnings: Vec<String>,
    /// `_explain`'s `index_candidates`.
    pub candidates: Vec<Value>,
    /// `_explain`'s `selector_hints`.
    pub hints: Value,
}

const NO_INDEX_WARNING: &str = "No matching index found, create an index to optimize query time.";

/// Chooses the index for a query among `indexes` (which include `_all_docs`). `explain`
/// plans without failing when no index can sort.
pub fn plan(opts: &FindOpts, indexes: &[Index], explain: bool) -> Result<Plan, Error> {
    let selector = opts.selector.normalized();
    let ranges = field_ranges(selector);
    let global = opts.partition.is_empty();
    // Partial indexes only when asked for; a partition query uses partitioned indexes.
    let considered: Vec<&Index> = indexes
        .iter()
        .filter(|i| !i.is_partial() || i.named_by(&opts.use_index))
        .filter(|i| i.is_special() || i.partitioned != global)
        .collect();
    let verdicts: Vec<Verdict> = considered.iter().map(|i| judge(i, opts, &ranges)).collect();
    let usable: Vec<&Index> = considered
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| **v == Verdict::Usable)
        .map(|(i, _)| *i)
        .collect();
    let mut warnings = Vec::new();
    let named: Vec<&Index> = usable
        .iter()
        .copied()
        .filter(|i| i.named_by(&opts.use_index))
        .collect();
    let pool = if !opts.use_index.is_empty() && named.is_empty() {
        if !opts.allow_fallback {
            return Err(Error::NoFallback(use_index_text(
                &opts.use_index,
                "specified by \"use_index\" could not be found or it is not suitable",
            )));
        }
        warnings.push(use_index_text(&opts.use_index, ""));
        usable.clone()
    } else if named.is_empty() {
        usable.clone()
    } else {
        named
    };
    let json_pool: Vec<&Index> = pool.iter().copied().filter(|i| !i.is_special()).collect();
    let mut ranked: Vec<&Index> = if json_pool.is_empty() {
        pool.clone()
    } else {
        json_pool
    };
    let gap = |i: &Index| prefix_gap(i, &ranges);
    ranked.sort_by(|a, b| {
        (gap(a), a.columns().len(), &a.ddoc, &a.name).cmp(&(
            gap(b),
            b.columns().len(),
            &b.ddoc,
            &b.name,
        ))
    });
    let chosen = ranked.first().map(|i| (*i).clone());
    let Some(index) = chosen else {
        if explain {
            return Ok(Plan {
                index: None,
                ranges: vec![],
                empty: false,
                descending: opts.sort.dir() == Dir::Desc,
                covering: false,
                warnings,
                candidates: candidates(
                    indexes,
                    &considered,
                    &verdicts,
                    None,
                    &ranked,
                    opts,
                    &ranges,
                ),
                hints: hints(selector, &ranges),
            });
        }
        return Err(Error::NoUsableSortIndex);
    };
    if index.is_special() {
        if !opts.allow_fallback && opts.use_index.is_empty() {
            return Err(Error::NoFallback(
                "No index exists for this selector, try indexing by the selector fields.".into(),
            ));
        }
        warnings.push(NO_INDEX_WARNING.into());
    }
    let prefix_ranges: Vec<Range> = if index.is_special() {
        ranges.get("_id").cloned().into_iter().collect()
    } else {
        prefix(&index, &ranges).into_iter().cloned().collect()
    };
    let empty = prefix_ranges
        .first()
        .is_some_and(|r| r.is_empty(index.is_special()))
        || trivially_empty(selector);
    let covering = is_covering(&index, opts);
    let candidates = candidates(
        indexes,
        &considered,
        &verdicts,
        Some(&index),
        &ranked,
        opts,
        &ranges,
    );
    Ok(Plan {
        descending: opts.sort.dir() == Dir::Desc,
        ranges: prefix_ranges,
        empty,
        covering,
        warnings,
        candidates,
        hints: hints(selector, &ranges),
        index: Some(index),
    })
}

/// `{"$or": []}` and the like: nothing can match.
fn trivially_empty(sel: &Value) -> bool {
    matches!(single(sel), Some(("$or" | "$and" | "$in" | "$all", Value::Array(a))) if a.is_empty())
}

fn use_index_text(use_index: &[String], tail: &str) -> String {
    let ddoc = ddoc_id(use_index[0].trim_start_matches("_design/"));
    match (use_index.get(1), tail.is_empty()) {
        (None, true) => {
            format!("{ddoc} was not used because it does not contain a valid index for this query.")
        }
        (Some(n), true) => {
            format!("{ddoc}, {n} was not used because it is not a valid index for this query.")
        }
        (None, false) => format!("{ddoc} {tail}"),
        (Some(n), false) => format!("{ddoc}, {n} {tail}"),
    }
}

/// Whether the index holds every field the query reads (`fields` and the selector's), so
/// documents need not be read.
fn is_covering(index: &Index, opts: &FindOpts) -> bool {
    let (Kind::Json { .. }, Some(fields)) = (&index.kind, &opts.fields) else {
        return false;
    };
    let columns = index.columns();
    let mut needed: Vec<String> = fields.clone();
    selector_fields(opts.selector.normalized(), &mut needed);
    needed.iter().all(|f| f == "_id" || columns.contains(f))
}

/// Every field path a normalised selector names.
pub fn selector_fields(sel: &Value, out: &mut Vec<String>) {
    if let Value::Object(m) = sel {
        for (k, v) in m {
            if k.starts_with('$') {
                match v {
                    Value::Array(items) if matches!(k.as_str(), "$and" | "$or" | "$nor") => {
                        items.iter().for_each(|i| selector_fields(i, out))
                    }
                    Value::Object(_) if k == "$not" => selector_fields(v, out),
                    _ => {}
                }
            } else if !k.is_empty() {
                out.push(k.clone());
            }
        }
    }
}

fn hints(selector: &Value, ranges: &BTreeMap<String, Range>) -> Value {
    let mut all = Vec::new();
    selector_fields(selector, &mut all);
    all.sort();
    all.dedup();
    let (indexable, unindexable): (Vec<String>, Vec<String>) =
        all.into_iter().partition(|f| ranges.contains_key(f));
    json!([{"type": "json", "indexable_fields": indexable, "unindexable_fields": unindexable}])
}

/// Why an index did not answer a query, in `_explain`'s order of precedence.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Lost {
    /// Lost the ranking among indexes of the winner's type (its position).
    Ranked(usize),
    UnfavoredType,
    ExcludedByUser,
    Unusable(Verdict),
    ScopeMismatch,
    IsPartial,
}

/// `_explain`'s `index_candidates`: every index but the chosen one, with why it lost and
/// CouchDB's ranking (groups numbered after one another, empty groups taking no number).
fn candidates(
    all: &[Index],
    considered: &[&Index],
    verdicts: &[Verdict],
    chosen: Option<&Index>,
    ranked: &[&Index],
    opts: &FindOpts,
    ranges: &BTreeMap<String, Range>,
) -> Vec<Value> {
    let global = opts.partition.is_empty();
    let chose_named = chosen.is_some_and(|c| c.named_by(&opts.use_index));
    let lost: Vec<(&Index, Lost)> = all
        .iter()
        .filter(|i| Some(*i) != chosen)
        .map(|i| {
            let why = if let Some(pos) = ranked.iter().position(|r| *r == i) {
                Lost::Ranked(pos)
            } else if i.is_partial() && !i.named_by(&opts.use_index) {
                Lost::IsPartial
            } else if !i.is_special() && i.partitioned == global {
                Lost::ScopeMismatch
            } else {
                let at = considered.iter().position(|c| *c == i).expect("considered");
                match verdicts[at] {
                    Verdict::Usable if chose_named && !i.named_by(&opts.use_index) => {
                        Lost::ExcludedByUser
                    }
                    Verdict::Usable => Lost::UnfavoredType,
                    v => Lost::Unusable(v),
                }
            };
            (i, why)
        })
        .collect();
    let any = |f: fn(&Lost) -> bool| usize::from(lost.iter().any(|(_, l)| f(l)));
    let unfavored = ranked.len().max(1);
    let excluded = unfavored + any(|l| *l == Lost::UnfavoredType);
    let unusable = excluded + any(|l| *l == Lost::ExcludedByUser);
    let scope = unusable + any(|l| matches!(l, Lost::Unusable(_)));
    let partial = scope + any(|l| *l == Lost::ScopeMismatch);
    let winner_cols = chosen.map_or(0, |c| c.columns().len());
    let winner_gap = chosen.map_or(0, |c| prefix_gap(c, ranges));
    let mut out: Vec<(&Index, Value)> = lost
        .into_iter()
        .map(|(i, why)| {
            let (usable, reason, ranking) = match why {
                Lost::Ranked(pos) => {
                    let reason = if prefix_gap(i, ranges) > winner_gap {
                        "less_overlap"
                    } else if i.columns().len() > winner_cols {
                        "too_many_fields"
                    } else {
                        "alphabetically_comes_after"
                    };
                    (true, reason, pos)
                }
                Lost::UnfavoredType => (true, "unfavored_type", unfavored),
                Lost::ExcludedByUser => (true, "excluded_by_user", excluded),
                Lost::Unusable(v) => (false, verdict_name(v), unusable),
                Lost::ScopeMismatch => (false, "scope_mismatch", scope),
                Lost::IsPartial => (false, "is_partial", partial),
            };
            let covering = match (&i.kind, &opts.fields) {
                (Kind::Special, _) => Value::Null,
                (Kind::Json { .. }, Some(f)) => {
                    Value::Bool(f.iter().all(|f| f == "_id" || i.columns().contains(f)))
                }
                (Kind::Json { .. }, None) => Value::Bool(false),
            };
            let analysis = json!({"usable": usable, "reasons": [{"name": reason}],
                                  "ranking": ranking, "covering": covering});
            (i, json!({"index": i.to_json(), "analysis": analysis}))
        })
        .collect();
    // Descending by (ddoc, name, type), `_all_docs` last.
    out.sort_by(|(a, _), (b, _)| {
        (b.ddoc.is_some(), &b.ddoc, &b.name, b.type_name()).cmp(&(
            a.ddoc.is_some(),
            &a.ddoc,
            &a.name,
            a.type_name(),
        ))
    });
    out.into_iter().map(|(_, v)| v).collect()
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Usable => "usable",
        Verdict::FieldMismatch => "field_mismatch",
        Verdict::SortOrderMismatch => "sort_order_mismatch",
        Verdict::NeedsTextSearch => "needs_text_search",
    }
}

/// How many of the selector's ranged fields the index's leading columns leave out.
fn prefix_gap(i: &Index, ranges: &BTreeMap<String, Range>) -> usize {
    ranges.len().saturating_sub(prefix(i, ranges).len())
}

/// The `"<MAX>"` marker `_explain` shows for an open end.
const MAX_MARKER: &str = "<MAX>";

impl Plan {
    /// `_explain`'s `mrargs`.
    pub fn mrargs(&self, opts: &FindOpts) -> Value {
        let Some(index) = &self.index else {
            return Value::Null;
        };
        let (start, end) = if self.empty {
            (Value::Null, Value::Null)
        } else if index.is_special() {
            let (start, end) = match self.ranges.first() {
                None => (Value::Null, json!(MAX_MARKER)),
                Some(r) => (
                    r.low.as_ref().map_or(json!(""), |(v, _)| v.clone()),
                    r.high
                        .as_ref()
                        .map_or(json!(MAX_MARKER), |(v, _)| v.clone()),
                ),
            };
            if self.descending {
                (end, start)
            } else {
                (start, end)
            }
        } else {
            self.json_keys(json!(MAX_MARKER))
        };
        let include_docs = !self.covering && opts.r <= 1;
        json!({
            "include_docs": include_docs,
            "view_type": "map",
            "reduce": false,
            "partition": if opts.partition.is_empty() { Value::Null } else { json!(opts.partition) },
            "start_key": start,
            "end_key": end,
            "direction": if self.descending { "rev" } else { "fwd" },
            "stable": opts.stable || opts.stale_ok,
            "update": opts.refresh(),
            "conflicts": if opts.conflicts { json!(true) } else { json!("undefined") },
        })
    }

    /// A json index's key range: the leading columns' lower bounds, up to the first column
    /// without one, and their upper bounds followed by `max`; swapped when descending.
    pub fn json_keys(&self, max: Value) -> (Value, Value) {
        let bounds = |side: fn(&Range) -> &Bound| -> Vec<Value> {
            self.ranges
                .iter()
                .map_while(|r| side(r).as_ref().map(|b| b.0.clone()))
                .collect()
        };
        let lows = bounds(|r| &r.low);
        let mut highs = bounds(|r| &r.high);
        highs.push(max);
        let (start, end) = (Value::Array(lows), Value::Array(highs));
        if self.descending {
            (end, start)
        } else {
            (start, end)
        }
    }
}
