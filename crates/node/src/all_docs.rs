//! `_all_docs`, `_design_docs` and `_local_docs`: the query checked as CouchDB checks it
//! (`Query::from_args`, `for_partition`), its id range in a namespace or a partition, and
//! one query run with its rows rendered as CouchDB's, the offset counted as a shard does.
//!
//! Threading: `run` blocks (RocksDB scans and reads).

use crate::atts::{AttOpts, AttRender};
use crate::{winner_json_with, with_doc, DocOpts, Error, Result};
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_db::{AllDocsRow, Database};
use settee_wire::mrargs::{MrArgs, ViewType};
use std::ops::ControlFlow;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    All,
    Design,
    Local,
}

/// An `_all_docs` (`_design_docs`, `_local_docs`) query, checked.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub keys: Option<Vec<Value>>,
    /// Where the range starts and ends, as document ids (`None`: the first or last).
    pub start: Option<String>,
    pub end: Option<String>,
    pub inclusive_end: bool,
    pub limit: Option<u64>,
    pub skip: u64,
    pub descending: bool,
    pub include_docs: bool,
    pub update_seq: bool,
    pub opts: DocOpts,
    pub atts: AttOpts,
    /// For a non-admin listing `_users` (`users_db_public`): the only members included
    /// documents show.
    pub public_only: Option<Vec<String>>,
    /// `/{db}/_partition/{p}/_all_docs`: only ids `p:…`.
    pub partition: Option<String>,
    /// The range's upper end is a key that is not a string: no id is below it.
    pub upper_before_all: bool,
}

impl Query {
    /// Checks the arguments as CouchDB does for `_all_docs` (a map view without a key
    /// range check) and turns them into an id range or a list of ids.
    /// The query as `user` may run it on `db`: `_users` documents showing their public
    /// fields only to those who are not its admins, `_replicator` credentials hidden.
    pub fn for_reader(
        mut self,
        config: &crate::NodeConfig,
        db: &Database,
        user: &UserCtx,
    ) -> Query {
        self.public_only = crate::access::users_reader(config, db, user).map(|(_, fields)| fields);
        self.opts.reader = crate::replicator_read::reader(db, user);
        self
    }

    pub fn from_args(a: MrArgs) -> Result<Query> {
        a.validate(ViewType::Map)?;
        if a.partition.is_some() {
            return Err(Error::QueryParse(
                "`partition` parameter is not supported on this db".into(),
            ));
        }
        // A string key bounds the ids; without a key the doc-id bound applies, if given
        // (CouchDB's `all_docs_key_opts`). A key that is not a string sorts before every
        // id in the term order CouchDB's cluster compares `_all_docs` rows in: at the
        // range's lower end it bounds nothing, at its upper end it leaves no row.
        let bound = |key: &Option<Value>, docid: &Option<String>| match key {
            Some(Value::String(s)) => Some(Some(s.clone())),
            Some(_) => None,
            None => Some(docid.clone()),
        };
        let (start, end) = (
            bound(&a.start_key, &a.start_key_docid),
            bound(&a.end_key, &a.end_key_docid),
        );
        let upper = if a.descending { &start } else { &end };
        Ok(Query {
            keys: a.key_list(),
            upper_before_all: upper.is_none(),
            start: start.flatten(),
            end: end.flatten(),
            inclusive_end: a.inclusive_end,
            limit: a.limit,
            skip: a.skip,
            descending: a.descending,
            include_docs: a.include_docs,
            update_seq: a.update_seq,
            opts: DocOpts {
                conflicts: a.conflicts.unwrap_or(false),
                ..Default::default()
            },
            atts: AttOpts {
                inline: a.attachments,
                encoding_info: a.att_encoding_info,
                since: Vec::new(),
            },
            public_only: None,
            partition: None,
        })
    }

    /// A query within one partition (`couch_mrview_util:validate_all_docs_args` with a
    /// partition): the limit defaults to, and may not exceed, `partition_query_limit`;
    /// the range is clamped to the partition's ids.
    pub fn for_partition(mut a: MrArgs, partition: &str, max_limit: u64) -> Result<Query> {
        a.partition = None;
        let mut q = Query::from_args(a)?;
        settee_wire::mrargs::apply_limit(&mut q.limit, max_limit)?;
        q.partition = Some(partition.to_string());
        Ok(q)
    }

    /// `[first, end)` of the ids the query may see: its namespace, or its partition
    /// (`partition:` up to `partition;`, `;` being the byte after `:`).
    fn scope(&self, ns: Namespace) -> (String, Option<String>) {
        if let Some(p) = &self.partition {
            let (first, end) = settee_core::partition_id_range(p);
            return (first, Some(end));
        }
        match ns {
            Namespace::All => (String::new(), None),
            Namespace::Design => ("_design/".into(), Some("_design0".into())),
            Namespace::Local => ("_local/".into(), Some("_local0".into())),
        }
    }

    fn in_scope(&self, id: &str) -> bool {
        self.partition
            .as_deref()
            .is_none_or(|p| settee_core::partition_of(id) == Some(p))
    }

    /// `[lower, upper)` over ids (`None`: no upper bound), clamped to the namespace as
    /// CouchDB clamps `_design_docs`; it may be empty.
    fn id_range(&self, ns: Namespace) -> (String, Option<String>) {
        let after = |s: &str| format!("{s}\0");
        let (lo, hi) = if self.descending {
            let lo = match &self.end {
                None => String::new(),
                Some(e) if self.inclusive_end => e.clone(),
                Some(e) => after(e),
            };
            (lo, self.start.as_deref().map(after))
        } else {
            let hi = self.end.as_deref().map(|e| {
                if self.inclusive_end {
                    after(e)
                } else {
                    e.to_owned()
                }
            });
            (self.start.clone().unwrap_or_default(), hi)
        };
        let hi = if self.upper_before_all {
            Some(String::new())
        } else {
            hi
        };
        let (ns_lo, ns_hi) = self.scope(ns);
        let lo = if lo < ns_lo { ns_lo } else { lo };
        let hi = match (hi, ns_hi) {
            (Some(h), Some(n)) if h > n => Some(n),
            (None, Some(n)) => Some(n),
            (h, _) => h,
        };
        (lo, hi)
    }
}

fn row_value(info: &settee_db::DocInfo, deleted: bool) -> Value {
    let w = info.tree.winner().expect("stored docs have a winner");
    if deleted {
        json!({"rev": w.rev.to_string(), "deleted": true})
    } else {
        json!({"rev": w.rev.to_string()})
    }
}

fn render_row(db: &Database, row: &AllDocsRow, q: &Query) -> Vec<u8> {
    let Some(info) = &row.info else {
        return serde_json::to_vec(&json!({"key": row.id, "error": "not_found"})).expect("json");
    };
    let deleted = info.is_deleted();
    let mut out = serde_json::to_vec(
        &json!({"id": row.id, "key": row.id, "value": row_value(info, deleted)}),
    )
    .expect("json");
    if q.include_docs {
        let doc = row.body.as_deref().filter(|_| !deleted).map(|b| {
            let atts = q.atts.render(db, b, 0).unwrap_or_else(|e| {
                tracing::warn!(id = %row.id, error = ?e, "reading attachments");
                None
            });
            let doc = winner_json_with(&row.id, info, b, &q.opts, atts);
            match &q.public_only {
                Some(fields) => public_part(&doc, fields),
                None => doc,
            }
        });
        out = with_doc(out, doc);
    }
    out
}

/// A document reduced to `fields`. CouchDB's listing strips the rendered document, so even
/// `_id` and `_rev` stay only if listed in `public_fields` (single reads strip the body and
/// keep them).
fn public_part(doc: &[u8], fields: &[String]) -> Vec<u8> {
    let Ok(members) = serde_json::from_slice::<serde_json::Map<String, Value>>(doc) else {
        return doc.to_vec();
    };
    let kept: serde_json::Map<String, Value> = members
        .into_iter()
        .filter(|(k, _)| fields.contains(k))
        .collect();
    serde_json::to_vec(&kept).expect("json")
}

/// Runs one query, writing the complete response object through `out`.
pub fn run(
    db: &Database,
    q: &Query,
    ns: Namespace,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<()> {
    let total: Value = match ns {
        // A partition's `_all_docs` reports the whole shard, as CouchDB's does.
        Namespace::All => json!(db.stats().doc_count),
        Namespace::Design => {
            let mut n = 0u64;
            db.scan_docs(b"_design/", Some(b"_design0"), false, false, |_| {
                n += 1;
                ControlFlow::Continue(())
            })?;
            json!(n)
        }
        Namespace::Local => Value::Null,
    };
    // With `keys`, `skip` and `limit` apply to the keys ([`asked_keys`]).
    let (mut skip, mut left) = match q.keys {
        Some(_) => (0, u64::MAX),
        None => (q.skip, q.limit.unwrap_or(u64::MAX)),
    };
    let mut first = true;
    let mut emit = |row: &[u8], out: &mut dyn FnMut(&[u8]) -> bool| -> ControlFlow<()> {
        if skip > 0 {
            skip -= 1;
            return ControlFlow::Continue(());
        }
        if left == 0 {
            return ControlFlow::Break(());
        }
        left -= 1;
        let sep: &[u8] = if first { b"" } else { b",\r\n" };
        first = false;
        if out(sep) && out(row) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    };
    let (lo, hi) = q.id_range(ns);
    let offset: Value = match (&q.keys, ns, &total) {
        (Some(_), _, _) | (_, Namespace::Local, _) => Value::Null,
        // As CouchDB's coordinator reports it: documents before the start, plus `skip`,
        // at most the total.
        (None, _, total) => {
            let before = count_before(db, q, &lo, hi.as_deref())?;
            let total = total.as_u64().unwrap_or(u64::MAX);
            json!(before.saturating_add(q.skip).min(total))
        }
    };
    let mut head = format!("{{\"total_rows\":{total},\"offset\":{offset}");
    if q.update_seq {
        // With `keys`, CouchDB's coordinator has no sequence to show.
        let update_seq = match q.keys {
            Some(_) => Value::Null,
            None => Value::String(crate::seqs(db).bare_seq(db.update_seq())),
        };
        head.push_str(&format!(",\"update_seq\":{update_seq}"));
    }
    head.push_str(",\"rows\":[\r\n");
    if !out(head.as_bytes()) {
        return Ok(());
    }
    if let Some(keys) = &q.keys {
        let ids: Vec<String> = (asked_keys(keys, q, ns).iter())
            .map(|k| k.as_str().map_or_else(|| k.to_string(), str::to_string))
            .collect();
        // `_local/` ids are local documents' rows, in `_all_docs` too (as CouchDB's
        // `open_doc` reads them); the others are looked up together.
        let local = |id: &String| id.starts_with("_local/") && ns != Namespace::Design;
        let docs: Vec<String> = ids.iter().filter(|id| !local(id)).cloned().collect();
        let mut docs = db.lookup_docs(&docs, q.include_docs)?.into_iter();
        for id in &ids {
            let row = if local(id) {
                match db.local_doc(id)? {
                    Some(d) => local_row(&d, q),
                    None => {
                        serde_json::to_vec(&json!({"key": id, "error": "not_found"})).expect("json")
                    }
                }
            } else {
                let mut row = docs.next().expect("a row per id");
                if !q.in_scope(&row.id) {
                    row.info = None;
                }
                render_row(db, &row, q)
            };
            if emit(&row, out).is_break() {
                break;
            }
        }
    } else if hi.as_deref().is_none_or(|h| h > lo.as_str()) {
        if ns == Namespace::Local {
            db.scan_local(
                lo.as_bytes(),
                hi.as_ref().map(|h| h.as_bytes()),
                q.descending,
                |d| emit(&local_row(&d, q), out),
            )?;
        } else {
            db.scan_docs(
                lo.as_bytes(),
                hi.as_ref().map(|h| h.as_bytes()),
                q.descending,
                q.include_docs,
                |row| emit(&render_row(db, &row, q), out),
            )?;
        }
    }
    out(b"\r\n]}\n");
    Ok(())
}

/// The keys a `keys` query looks up, as CouchDB's coordinator takes them
/// (`fabric_view_all_docs`): the list reversed when `descending`, `skip` and `limit`
/// applied to it, then, in `_design_docs` and `_local_docs`, only the keys of the
/// namespace (ids with its prefix): the others give no row at all, not even `not_found`.
pub fn asked_keys(keys: &[Value], q: &Query, ns: Namespace) -> Vec<Value> {
    let mut keys = keys.to_vec();
    if q.descending {
        keys.reverse();
    }
    let prefix = match ns {
        Namespace::All => None,
        Namespace::Design => Some("_design/"),
        Namespace::Local => Some("_local/"),
    };
    (keys.into_iter())
        .skip(usize::try_from(q.skip).unwrap_or(usize::MAX))
        .take(
            q.limit
                .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX)),
        )
        .filter(|k| prefix.is_none_or(|p| k.as_str().is_some_and(|id| id.starts_with(p))))
        .collect()
}

fn local_row(d: &settee_db::LocalDoc, q: &Query) -> Vec<u8> {
    let rev = format!("0-{}", d.rev);
    let mut out =
        serde_json::to_vec(&json!({"id": d.id, "key": d.id, "value": {"rev": rev}})).expect("json");
    if q.include_docs {
        out = with_doc(out, Some(crate::local_json(d)));
    }
    out
}

/// Documents before where the range starts, in its direction: CouchDB folds over every
/// document id (for `_design_docs` too), or over the partition's, and counts those it
/// passes.
fn count_before(db: &Database, q: &Query, lo: &str, hi: Option<&str>) -> Result<u64> {
    // A partition's rows sit in one shard, and CouchDB counts the rows of that whole shard
    // before the range: other partitions' and design documents too.
    use settee_core::shards::range_of;
    let ring = db.props().q;
    let shard = q
        .partition
        .as_ref()
        .map(|p| range_of(ring, &format!("{p}:"), true));
    let mut n = 0u64;
    let count = |row: AllDocsRow| {
        if shard.is_none_or(|s| range_of(ring, &row.id, true) == s) {
            n += 1;
        }
        ControlFlow::Continue(())
    };
    if q.descending {
        if let Some(h) = hi {
            db.scan_docs(h.as_bytes(), None, false, false, count)?;
        }
    } else if !lo.is_empty() {
        db.scan_docs(b"", Some(lo.as_bytes()), false, false, count)?;
    }
    Ok(n)
}
