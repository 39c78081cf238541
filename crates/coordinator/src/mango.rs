//! Mango on a clustered database, as CouchDB's `mango_httpd` → `mango_crud` → `fabric`:
//!
//! - Indexes are `"language": "query"` design documents, written and deleted as any
//!   document is (on every copy of their id's range, with the write quorum) by the node's
//!   own index logic (`settee_node::mango_index::Ddocs`), reading the design document
//!   through the cluster. Listing reads `_design_docs` of one copy per range.
//! - `_find` plans here over those design documents, then gives them to one copy of every
//!   range (body member `settee_indexes`), which runs its ordinary `_find` with them in
//!   place of its own (`Node::find_given`: the same plan, its own view of each index)
//!   and writes each row with its index key. The rows are merged here in the index's
//!   order (the sort's), `skip` and `limit` applied here (copies are asked for
//!   `skip + limit` from 0), `execution_stats` summed, warnings judged here.
//! - The bookmark is the node's: the last row taken (skipped or returned) as
//!   `(key, id)` of the chosen index. The copies' rows are merged in that index's global
//!   order, so every copy resumes after the same row (`startkey`/`startkey_docid`, one
//!   row skipped), as CouchDB's clustered `mango_json_bookmark` does.
//! - `_explain` is planned here over the same indexes (CouchDB's coordinator answers it
//!   without asking any shard).
//!
//! Each range is asked in the map's order turned by its number, as views, so the ranges'
//! Mango indexes build on different members; the other copies build theirs after the
//! query answered ([`crate::builds`]), from the `update_seq` a copy's json index answer
//! ends with.

use crate::{copy_error, copy_path, merge, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_mango::bookmark::Bookmark;
use settee_mango::index::Index;
use settee_mango::opts::FindOpts;
use settee_node::fabric::{Fut, Out};
use settee_node::find::{
    body_tail, bookmark_after, explain_of, indexes_of, plan_over, scan_warning, Stats,
    GIVEN_INDEXES,
};
use settee_node::mango_index::Ddocs;
use settee_node::{Error, Fabric, Result};
use std::sync::Arc;
use std::time::Instant;

impl Coordinator {
    /// Every Mango index of a clustered database, in listing order.
    pub(crate) fn indexes_clustered(&self, db: &str, map: &ShardMap) -> Result<Vec<Index>> {
        let designs = self.query_designs(db, map)?;
        Ok(indexes_of(named(&designs), map.partitioned))
    }

    /// `_explain` of a clustered database: planned here over its indexes.
    pub(crate) fn explain_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        opts: &FindOpts,
    ) -> Result<Value> {
        let designs = self.query_designs(db, map)?;
        let all = indexes_of(named(&designs), map.partitioned);
        let plan = plan_over(opts, &all, map.partitioned, true)?;
        Ok(explain_of(db, map.partitioned, opts, &plan))
    }

    /// `_find` of a clustered database (see the module's documentation).
    pub(crate) fn find_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        opts: &FindOpts,
        out: Out<'_>,
    ) -> Result<()> {
        let started = Instant::now();
        // A bookmark the copies would refuse is the client's `invalid_bookmark` here.
        if let Some(b) = &opts.bookmark {
            Bookmark::decode(b)?;
        }
        let designs = self.query_designs(db, map)?;
        let all = indexes_of(named(&designs), map.partitioned);
        let plan = plan_over(opts, &all, map.partitioned, false)?;
        if plan.empty {
            // As a single node: nothing can match, nothing is read.
            out(b"{\"docs\":[\r\n]}\r\n");
            return Ok(());
        }
        let index = plan.index.as_ref().expect("a _find plan has an index");
        let rev = (designs.iter())
            .find(|d| index.ddoc.as_deref().is_some_and(|id| d["_id"] == id))
            .map(|d| d["_rev"].clone());
        let body = copy_body(opts, designs);
        // A partition's documents are all in its range.
        let only = (!opts.partition.is_empty()).then(|| {
            map.copies_of(&format!("{}:", opts.partition))
                .range
                .as_str()
        });
        let target = |range: &str| format!("{}/_find", copy_path(map, db, range));
        let answers = self.each_range_turned(map, only, target, &body)?;
        if let (Some(rev), true) = (rev, opts.refresh()) {
            // The other copies build their view of the index: a query that stops at its
            // first match.
            let ddoc = index.ddoc.as_deref().unwrap_or_default();
            self.build_others(
                map,
                &format!("{db}\0{ddoc}\0{rev}"),
                &answers,
                target,
                || {
                    let mut build = body.clone();
                    build["limit"] = json!(0);
                    build["execution_stats"] = json!(false);
                    if let Value::Object(m) = &mut build {
                        m.shift_remove("bookmark");
                    }
                    build
                },
            );
        }

        let mut stats = Stats::default();
        let mut rows = Vec::with_capacity(answers.len());
        for mut answer in answers.into_iter().map(|a| a.body) {
            add_stats(&mut stats, &answer["execution_stats"]);
            rows.push(match answer["docs"].take() {
                Value::Array(docs) => docs,
                _ => return Err(unavailable("a copy's _find answer without docs".into())),
            });
        }
        let order = merge::find_order(index.is_special(), plan.descending);
        let (page, last) = merge::find_page(rows, order, opts.skip, opts.limit);
        stats.returned = page.len() as u64;

        if !out(b"{\"docs\":[") {
            return Ok(());
        }
        for (i, row) in page.iter().enumerate() {
            let sep: &[u8] = if i == 0 { b"\r\n" } else { b",\r\n" };
            if !(out(sep) && out(&serde_json::to_vec(&row["doc"]).expect("json"))) {
                return Ok(());
            }
        }
        let last = last.map(|row| Bookmark {
            key: row["key"].clone(),
            docid: row["id"].as_str().unwrap_or_default().to_owned(),
        });
        let bookmark = bookmark_after(last.as_ref(), opts.bookmark.as_ref());
        let mut warnings = plan.warnings.clone();
        let threshold = (self.node.config).get_u64("mango", "index_scan_warning_threshold", 10);
        let examined = stats.docs + stats.quorum_docs;
        if let Some(w) = scan_warning(examined, stats.returned, threshold) {
            warnings.push(w.into());
        }
        let ms = started.elapsed().as_micros() as f64 / 1000.0;
        let shown = opts.execution_stats.then_some((&stats, ms));
        let tail = body_tail(bookmark, shown, &warnings, None);
        out(tail.as_bytes());
        Ok(())
    }

    /// The database's `"language": "query"` design documents, whole (`_id` and `_rev`
    /// included), from one copy of each range's `_design_docs`, in id order.
    fn query_designs(&self, db: &str, map: &ShardMap) -> Result<Vec<Value>> {
        let mut designs: Vec<Value> = (self.design_docs_of(db, map)?.into_iter())
            .flat_map(|a| match a.body {
                Value::Object(mut m) => match m.shift_remove("rows") {
                    Some(Value::Array(rows)) => rows,
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            })
            .filter_map(|mut row| {
                let doc = row["doc"].take();
                (doc["language"] == "query").then_some(doc)
            })
            .collect();
        designs.sort_by(|a, b| {
            let id = |d: &Value| d["_id"].as_str().unwrap_or_default().to_owned();
            id(a).cmp(&id(b))
        });
        Ok(designs)
    }
}

/// A clustered database's design documents as index operations read and write them: read
/// from every copy of their range (the newest revision wins), written through the
/// coordinator (every copy, the write quorum).
pub(crate) struct ClusterDdocs<'a> {
    coordinator: &'a Coordinator,
    db: &'a str,
    map: Arc<ShardMap>,
    user: &'a UserCtx,
}

impl<'a> ClusterDdocs<'a> {
    pub(crate) fn new(
        coordinator: &'a Coordinator,
        db: &'a str,
        map: Arc<ShardMap>,
        user: &'a UserCtx,
    ) -> Self {
        ClusterDdocs {
            coordinator,
            db,
            map,
            user,
        }
    }
}

impl Ddocs for ClusterDdocs<'_> {
    fn fabric(&self) -> &dyn Fabric {
        self.coordinator
    }

    fn read(&self, id: String) -> Fut<'_, Option<(Map<String, Value>, String)>> {
        Box::pin(async move {
            let c = self.coordinator;
            let copies = Coordinator::doc_copies(&self.map, self.db, &id);
            let replies = join_all(
                (copies.iter()).map(|(node, path)| c.ask(node, "GET", path, Some(self.user), None)),
            )
            .await;
            match merge::read(&replies) {
                merge::ReadOutcome::Found { doc, rev, .. } => match doc {
                    Value::Object(mut body) => {
                        body.shift_remove("_id");
                        body.shift_remove("_rev");
                        Ok(Some((body, rev.to_string())))
                    }
                    _ => Err(Error::internal("a design document's body")),
                },
                merge::ReadOutcome::NotFound(_) => Ok(None),
                merge::ReadOutcome::Failed { status, body } => Err(copy_error(status, &body)),
                merge::ReadOutcome::Unanswered(why) => Err(unavailable(why)),
            }
        })
    }
}

/// Adds a copy's `execution_stats` (what it examined) to `sum`.
fn add_stats(sum: &mut Stats, copy: &Value) {
    let n = |name: &str| copy[name].as_u64().unwrap_or(0);
    sum.keys += n("total_keys_examined");
    sum.docs += n("total_docs_examined");
    sum.quorum_docs += n("total_quorum_docs_examined");
}

/// The `(id, body)` of each design document.
fn named(designs: &[Value]) -> impl Iterator<Item = (&str, &Map<String, Value>)> {
    (designs.iter()).filter_map(|d| Some((d["_id"].as_str()?, d.as_object()?)))
}

/// The `_find` body each copy is given: the client's options (the selector normalized,
/// as CouchDB sends it to its shards), from the first row (`skip` 0, `limit` raised by
/// `skip`), with its execution statistics, and the index design documents.
fn copy_body(opts: &FindOpts, designs: Vec<Value>) -> Value {
    let mut body = json!({
        "selector": opts.selector.normalized(),
        "limit": opts.limit.saturating_add(opts.skip),
        "skip": 0,
        "sort": opts.sort.to_list(),
        "r": opts.r,
        "conflicts": opts.conflicts,
        "stale": if opts.stale_ok { json!("ok") } else { json!(false) },
        "update": opts.update,
        "stable": opts.stable,
        "execution_stats": true,
        "allow_fallback": opts.allow_fallback,
        GIVEN_INDEXES: designs,
    });
    if !opts.use_index.is_empty() {
        body["use_index"] = json!(opts.use_index);
    }
    if let Some(fields) = &opts.fields {
        body["fields"] = json!(fields);
    }
    if let Some(b) = &opts.bookmark {
        body["bookmark"] = json!(b);
    }
    if !opts.partition.is_empty() {
        body["partition"] = json!(opts.partition);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copies_examined_rows_are_summed() {
        let mut sum = Stats::default();
        add_stats(
            &mut sum,
            &json!({"total_keys_examined": 3, "total_docs_examined": 2,
                                    "total_quorum_docs_examined": 0, "results_returned": 2}),
        );
        add_stats(
            &mut sum,
            &json!({"total_keys_examined": 1, "total_docs_examined": 1,
                                    "total_quorum_docs_examined": 4}),
        );
        add_stats(&mut sum, &Value::Null);
        let want = Stats {
            keys: 4,
            docs: 3,
            quorum_docs: 4,
            returned: 0,
        };
        assert_eq!(sum, want);
    }

    #[test]
    fn copies_are_asked_from_the_first_row_with_the_indexes() {
        let body = json!({"selector": {"n": {"$gt": 1}}, "skip": 3, "limit": 4,
                          "sort": [{"n": "desc"}], "fields": ["n"], "bookmark": "xyz"});
        let opts = FindOpts::parse(body.as_object().unwrap(), 25).unwrap();
        let sent = copy_body(&opts, vec![json!({"_id": "_design/i"})]);
        assert_eq!(sent["skip"], 0);
        assert_eq!(sent["limit"], 7);
        assert_eq!(sent["bookmark"], "xyz");
        assert_eq!(sent["execution_stats"], true);
        assert_eq!(sent[GIVEN_INDEXES][0]["_id"], "_design/i");
        // What a copy is sent parses back to the same options.
        let mut copy = sent.as_object().unwrap().clone();
        copy.shift_remove(GIVEN_INDEXES);
        let again = FindOpts::parse(&copy, 25).unwrap();
        assert_eq!(again.selector.normalized(), opts.selector.normalized());
        assert_eq!(again.sort.to_list(), opts.sort.to_list());
        assert_eq!(again.fields, opts.fields);
    }
}
