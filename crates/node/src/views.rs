//! View queries: the arguments checked against the view (`ViewArgs::for_view`), and one
//! query run with its rows rendered as CouchDB's (`run`): the head, each row (with
//! `include_docs` as CouchDB picks the document), reductions, the end.
//!
//! Threading: `run` blocks (the view's update, RocksDB reads, JavaScript reduces).

use crate::atts::{AttOpts, AttRender};
use crate::config::NodeConfig;
use crate::{doc_json, doc_json_with, seqs, with_doc, DocOpts, Error, Result};
use serde_json::{json, Map, Value};
use settee_core::Rev;
use settee_db::Database;
use settee_views::{Event, Freshness, Group, Grouping, ReduceKind, ViewQuery, Views};
use settee_wire::mrargs::{GroupLevel, MrArgs, Update, ViewType};
use std::ops::ControlFlow;
use std::sync::Arc;

/// A parsed view request: the index query plus how its rows are rendered.
#[derive(Clone, Debug)]
pub struct ViewArgs {
    pub query: ViewQuery,
    pub include_docs: bool,
    pub conflicts: bool,
    pub atts: AttOpts,
    pub update_seq: bool,
    pub fresh: Freshness,
    /// Whose credentials `include_docs` hides (`replicator_read`).
    pub reader: Option<std::sync::Arc<crate::replicator_read::Reader>>,
}

/// The member of a view POST's body in which a coordinator gives a shard copy the design
/// document to query (see [`crate::Node::query_given_view`]).
pub const GIVEN_DESIGN: &str = "settee_design";

/// The member of such a POST's body by which a coordinator asks the copy for reductions
/// as partial results (`true`), not finalized: CouchDB's shard workers give their
/// coordinator `_approx_count_distinct`'s registers and `_first`/`_last`'s key and id,
/// which only the coordinator, having every range's, finalizes.
pub const GIVEN_PARTIALS: &str = "settee_partials";

/// CouchDB's `?MAX_VIEW_LIMIT`: the default of `query_limit` and `partition_query_limit`.
pub const MAX_VIEW_LIMIT: u64 = 0x1000_0000;

fn parse_error(msg: &str) -> Error {
    Error::QueryParse(msg.to_owned())
}

impl ViewArgs {
    /// Validates the arguments for view number `n` of `g` as CouchDB does (the limit against `[query_server_config] query_limit`, or
    /// `partition_query_limit` for a partitioned view; then `validate_args`, the partition,
    /// then the key range).
    pub fn for_view(a: MrArgs, g: &Group, n: usize, node: &NodeConfig) -> Result<ViewArgs> {
        debug_assert_eq!(
            g.reduces[n] != ReduceKind::None,
            g.def.views[n].reduce.is_some()
        );
        ViewArgs::for_def(a, &g.def, n, g.partitioned, node)
    }

    /// [`ViewArgs::for_view`] for view `n` of design `def` in a database partitioned or
    /// not: how a cluster's coordinator checks a query before it asks any copy, so that
    /// its errors are a node's.
    pub fn for_def(
        mut a: MrArgs,
        def: &settee_core::design::ViewGroupDef,
        n: usize,
        db_partitioned: bool,
        node: &NodeConfig,
    ) -> Result<ViewArgs> {
        let partitioned = def.partitioned.unwrap_or(db_partitioned);
        let limit_key = if partitioned {
            "partition_query_limit"
        } else {
            "query_limit"
        };
        let max_limit = node.get_u64("query_server_config", limit_key, MAX_VIEW_LIMIT);
        settee_wire::mrargs::apply_limit(&mut a.limit, max_limit)?;
        let has_reduce = def.views[n].reduce.is_some();
        let view_type = if has_reduce && a.reduce != Some(false) {
            ViewType::Red
        } else {
            ViewType::Map
        };
        let level = a.validate(view_type)?;
        if a.partition.as_deref() == Some("") {
            return Err(parse_error("Invalid value for `partition`."));
        }
        match (partitioned, &a.partition) {
            (true, Some(p)) => settee_core::validate_partition(p)?,
            (true, None) => {
                return Err(parse_error(
                    "`partition` parameter is mandatory for queries to this view.",
                ))
            }
            (false, Some(_)) => {
                return Err(parse_error(
                    "`partition` parameter is not supported in this design doc",
                ))
            }
            _ => {}
        }
        let query = ViewQuery {
            keys: a.key_list(),
            start_key: a.start_key,
            end_key: a.end_key,
            start_docid: a.start_key_docid,
            end_docid: a.end_key_docid,
            inclusive_end: a.inclusive_end,
            descending: a.descending,
            skip: a.skip,
            limit: a.limit,
            reduce: view_type == ViewType::Red,
            grouping: match level {
                None => Grouping::None,
                Some(GroupLevel::Exact) => Grouping::Exact,
                Some(GroupLevel::Level(l)) => {
                    Grouping::Level(usize::try_from(l).unwrap_or(usize::MAX))
                }
            },
            partition: a.partition,
            partials: false,
        };
        query.check_range(def.raw(n)).map_err(Error::QueryParse)?;
        Ok(ViewArgs {
            query,
            include_docs: a.include_docs,
            conflicts: a.conflicts.unwrap_or(false),
            atts: AttOpts {
                inline: a.attachments,
                encoding_info: a.att_encoding_info,
                since: Vec::new(),
            },
            update_seq: a.update_seq,
            fresh: match a.update {
                Update::True => Freshness::Update,
                Update::False => Freshness::Stale,
                Update::Lazy => Freshness::UpdateAfter,
            },
            reader: None,
        })
    }
}

/// A failed view query. An index whose language has no query server cannot be updated:
/// CouchDB raises that from its indexer, with a stack (`ref`).
fn index_error(e: settee_views::Error) -> Error {
    use settee_views::queryserver::Error as Qs;
    match e {
        settee_views::Error::QueryServer(Qs::UnknownLanguage(language)) => {
            Error::UnknownQueryLanguage(language)
        }
        other => other.into(),
    }
}

/// Runs one view query, writing the complete response object through `out`: the head,
/// then each row (with its separator) in one call, then the end.
pub fn run(
    views: &Arc<Views>,
    db: &Arc<Database>,
    g: &Arc<Group>,
    view: usize,
    args: &ViewArgs,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<()> {
    let mut first = true;
    let mut head_sent = false;
    let mut sink = |e: Event<'_>| -> ControlFlow<()> {
        let bytes = match e {
            Event::Head {
                total_rows,
                offset,
                update_seq,
            } => {
                head_sent = true;
                let mut head = String::from("{");
                if let Some(off) = offset {
                    head.push_str(&format!("\"total_rows\":{total_rows},\"offset\":{off},"));
                }
                if args.update_seq {
                    let packed = Value::String(seqs(db).bare_seq(update_seq));
                    head.push_str(&format!("\"update_seq\":{packed},"));
                }
                head.push_str("\"rows\":[\r\n");
                head.into_bytes()
            }
            Event::Row { id, key, value } => {
                let mut row = Vec::with_capacity(id.len() + key.len() + value.len() + 32);
                row.extend_from_slice(if first { b"" } else { b",\r\n" });
                first = false;
                row.extend_from_slice(b"{\"id\":");
                serde_json::to_writer(&mut row, id).expect("json");
                row.extend_from_slice(b",\"key\":");
                row.extend_from_slice(key);
                row.extend_from_slice(b",\"value\":");
                row.extend_from_slice(value);
                row.push(b'}');
                if args.include_docs {
                    row = with_doc(row, row_doc(db, id, value, args));
                }
                row
            }
            Event::Reduced { key, value } => {
                let sep: &[u8] = if first { b"" } else { b",\r\n" };
                first = false;
                let mut row = sep.to_vec();
                serde_json::to_writer(&mut row, &reduce_row(key, value)).expect("json");
                row
            }
        };
        settee_views::keep_going(out(&bytes))
    };
    views
        .query(db, g, view, &args.query, args.fresh, &mut sink)
        .map_err(index_error)?;
    if head_sent {
        out(b"\r\n]}\n");
    }
    Ok(())
}

/// A reduce row; a reduction that overflowed `reduce_limit` is shown as CouchDB's
/// coordinator shows it, as an error row with a `null` key.
fn reduce_row(key: &Value, value: &Value) -> Value {
    match value.as_object() {
        Some(m) if m.len() == 1 && m.contains_key("reduce_overflow_error") => json!({
            "key": null,
            "error": "reduce_overflow_error",
            "reason": m["reduce_overflow_error"],
        }),
        _ => json!({"key": key, "value": value}),
    }
}

/// The document a row's `include_docs` shows (`None` renders `null`), as CouchDB picks it
/// from the emitted value:
/// * `{"_id": id}` (and `"_rev"`): that document (revision; a deleted revision shows as
///   deleted), fetched without the query's document options; `{"_id": null}`: none;
/// * `{"_rev": rev}` without `_id`: the row's own document at that revision;
/// * anything else: the row's own document, with `_conflicts` and attachments as asked.
///
/// A deleted document, or a revision that is missing or not parseable, shows as `null`.
fn row_doc(db: &Database, id: &str, value: &[u8], args: &ViewArgs) -> Option<Vec<u8>> {
    let value: Option<Map<String, Value>> = serde_json::from_slice(value).ok();
    let member = |k: &str| value.as_ref().and_then(|m| m.get(k));
    let rev = |r: &Value| r.as_str().and_then(|r| Rev::parse(r).ok());
    match member("_id") {
        Some(Value::Null) => None,
        Some(linked) => {
            let linked = linked.as_str()?;
            let doc = match member("_rev") {
                Some(r) => db.open_doc(linked, Some(&rev(r)?)).ok()?,
                None => db.open_doc(linked, None).ok()?,
            };
            let opts = DocOpts {
                reader: args.reader.clone(),
                ..Default::default()
            };
            Some(doc_json(&doc, &opts))
        }
        None => {
            let doc = match member("_rev") {
                Some(r) => db.open_doc(id, Some(&rev(r)?)).ok()?,
                None => db.open_doc(id, None).ok()?,
            };
            if doc.deleted {
                return None;
            }
            let opts = DocOpts {
                conflicts: args.conflicts && member("_rev").is_none(),
                reader: args.reader.clone(),
                ..Default::default()
            };
            let atts = args.atts.render(db, &doc.body, 0).unwrap_or_else(|e| {
                tracing::warn!(id, error = ?e, "reading attachments");
                None
            });
            Some(doc_json_with(&doc, &opts, atts))
        }
    }
}

impl crate::Node {
    /// `POST …/_view/{view}/queries`: each query object over `base`, all of them checked
    /// before any runs (the view first, as CouchDB opens it first), then each one's
    /// response written to `out` with its place.
    #[allow(clippy::too_many_arguments)]
    pub fn view_queries(
        &self,
        db: &Arc<Database>,
        user: &settee_auth::UserCtx,
        (ddoc, view): (&str, &str),
        base: MrArgs,
        queries: &[Value],
        out: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> Result<()> {
        let (g, n) = self.view_group(db, ddoc, view)?;
        let reader = crate::replicator_read::reader(db, user);
        let args = (queries.iter())
            .map(|q| {
                let q = q
                    .as_object()
                    .ok_or_else(|| Error::bad_request("Each query must be a JSON object"))?;
                let a = ViewArgs::for_view(base.for_query_object(q)?, &g, n, &self.config)?;
                Ok(ViewArgs {
                    reader: reader.clone(),
                    ..a
                })
            })
            .collect::<Result<Vec<_>>>()?;
        for (i, a) in args.iter().enumerate() {
            run(&self.views, db, &g, n, a, &mut |b| out(i, b))?;
        }
        Ok(())
    }

    /// `GET /{db}/_design/{ddoc}/_info`, in CouchDB's member order (`couch_mrview:get_info`
    /// as chttpd renders it).
    pub fn design_info(&self, db: &Database, ddoc: &str) -> Result<Value> {
        let g = self.ddoc_group(db, ddoc)?;
        self.group_info(db, ddoc, &g)
    }

    /// [`Node::design_info`] of the design document a coordinator gives a shard copy
    /// (`design`: its body; see [`GIVEN_DESIGN`]), which the copy need not hold.
    pub fn design_info_given(
        &self,
        db: &Database,
        ddoc: &str,
        design: &Map<String, Value>,
    ) -> Result<Value> {
        let g = self.views.group(db, &format!("_design/{ddoc}"), design)?;
        self.group_info(db, ddoc, &g)
    }

    fn group_info(&self, db: &Database, ddoc: &str, g: &settee_views::Group) -> Result<Value> {
        let info = self.views.info(db, g)?;
        let pending = db.update_seq().saturating_sub(info.update_seq);
        Ok(json!({
            "name": ddoc,
            "view_index": {
                "updates_pending": {"minimum": pending, "preferred": pending, "total": pending},
                "waiting_commit": false,
                "waiting_clients": 0,
                "updater_running": info.updater_running,
                "update_seq": info.update_seq,
                "sizes": {
                    "file": info.file_bytes,
                    "external": info.external_bytes,
                    "active": info.active_bytes,
                },
                "signature": info.signature,
                "purge_seq": info.purge_seq,
                "language": info.language,
                "compact_running": info.compact_running,
                "collator_versions": [settee_core::collate::collator_version()],
            }
        }))
    }

    /// `POST /{db}/_compact/{ddoc}`: the design document's index compacted in the
    /// background.
    pub fn compact_design(&self, db: &Arc<Database>, ddoc: &str) -> Result<()> {
        let g = self.ddoc_group(db, ddoc)?;
        self.views.compact_later(db.clone(), g);
        Ok(())
    }

    /// `POST /{db}/_view_cleanup`: removes the indexes no design document uses any more.
    pub fn view_cleanup(&self, db: &Database) -> Result<()> {
        let mut keep = Vec::new();
        let mut bad = None;
        db.scan_docs(b"_design/", Some(b"_design0"), false, true, |row| {
            let group = (row.body.as_deref())
                .and_then(|b| {
                    serde_json::from_slice::<Map<String, Value>>(settee_core::split_stored(b).0)
                        .ok()
                })
                .map(|body| self.views.group(db, &row.id, &body));
            match group {
                Some(Ok(g)) => keep.push(g.sig),
                Some(Err(e)) => bad = Some(e),
                None => {}
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = bad {
            tracing::debug!(error = %e, "design document without valid views during cleanup");
        }
        self.views.cleanup(db, &keep)?;
        Ok(())
    }
}
