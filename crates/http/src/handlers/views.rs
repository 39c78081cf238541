//! Views: `_design/{ddoc}/_view/{view}` (GET/POST, `/queries`), `_design/{ddoc}/_info`,
//! `_compact/{ddoc}`, `_view_cleanup` and `_temp_view`. Rows stream.

use super::{allow, blocking, query_results};
use crate::design_render::DesignDoc;
use crate::error::{ApiError, ApiResult};
use crate::handlers::attachments::{AttOpts, AttRender};
use crate::mrargs::{GroupLevel, MrArgs, Update, ViewType};
use crate::reply::{json, json_bytes, ok_true, stream, JSON};
use crate::req::require_json;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::Rev;
use settee_db::Database;
use settee_node::config::NodeConfig;
use settee_node::{doc_json, doc_json_with, seqs, with_doc, DocOpts};
use settee_views::{Event, Freshness, Group, Grouping, ReduceKind, ViewQuery, Views};
use std::ops::ControlFlow;
use std::sync::Arc;

/// A parsed view request: the query plus what only the HTTP layer handles.
#[derive(Clone, Debug)]
pub struct ViewArgs {
    pub query: ViewQuery,
    pub include_docs: bool,
    pub conflicts: bool,
    pub atts: AttOpts,
    pub update_seq: bool,
    pub fresh: Freshness,
    /// Whose credentials `include_docs` hides (`replicator_read`).
    pub reader: Option<std::sync::Arc<settee_node::replicator_read::Reader>>,
}

/// CouchDB's `?MAX_VIEW_LIMIT`: the default of `query_limit` and `partition_query_limit`.
pub const MAX_VIEW_LIMIT: u64 = 0x1000_0000;

fn parse_error(msg: &str) -> ApiError {
    ApiError::QueryParse(msg.to_owned())
}

impl ViewArgs {
    /// Validates the arguments for view number `n` of `g` as CouchDB does (the limit against `[query_server_config] query_limit`, or
    /// `partition_query_limit` for a partitioned view; then `validate_args`, the partition,
    /// then the key range).
    pub fn for_view(mut a: MrArgs, g: &Group, n: usize, node: &NodeConfig) -> ApiResult<ViewArgs> {
        let limit_key = if g.partitioned {
            "partition_query_limit"
        } else {
            "query_limit"
        };
        let max_limit = node.get_u64("query_server_config", limit_key, MAX_VIEW_LIMIT);
        crate::mrargs::apply_limit(&mut a.limit, max_limit)?;
        let has_reduce = g.reduces[n] != ReduceKind::None;
        let view_type = if has_reduce && a.reduce != Some(false) {
            ViewType::Red
        } else {
            ViewType::Map
        };
        let level = a.validate(view_type)?;
        if a.partition.as_deref() == Some("") {
            return Err(parse_error("Invalid value for `partition`."));
        }
        match (g.partitioned, &a.partition) {
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
        };
        query
            .check_range(g.def.raw(n))
            .map_err(ApiError::QueryParse)?;
        Ok(ViewArgs {
            query,
            include_docs: a.include_docs,
            conflicts: a.conflicts.unwrap_or(false),
            atts: AttOpts {
                inline: a.attachments,
                encoding_info: a.att_encoding_info,
                since_pos: 0,
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
pub(crate) fn index_error(e: settee_views::Error) -> ApiError {
    use settee_views::queryserver::Error as Qs;
    match e {
        // The ref CouchDB 3.5.2 reports for a view query of an unknown language.
        settee_views::Error::QueryServer(Qs::UnknownLanguage(language)) => ApiError::Crash {
            error: "unknown_query_language",
            reason: language,
            stack_hash: 4180022058,
        },
        other => other.into(),
    }
}

/// A POST body as CouchDB's `json_body_obj` takes it.
fn body_object(body: Value) -> ApiResult<Map<String, Value>> {
    match body {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("Request body must be a JSON object")),
    }
}

/// `queries` of a body, if any (CouchDB's `get_view_queries`).
fn queries_member(body: &Map<String, Value>) -> ApiResult<Option<Vec<Value>>> {
    match body.get("queries") {
        None => Ok(None),
        Some(Value::Array(q)) => Ok(Some(q.clone())),
        Some(_) => Err(ApiError::bad_request("`queries` member must be an array.")),
    }
}

/// The method check of a path below `_design/{ddoc}/`: CouchDB opens the design document
/// first, so a missing one is a 404 whatever the method.
pub async fn allow_in_ddoc(
    db: &Arc<Database>,
    ddoc: &str,
    req: &Req,
    methods: &'static str,
) -> ApiResult<()> {
    let refused = allow(&req.method, methods);
    if refused.is_err() {
        let (db, ddoc) = (db.clone(), ddoc.to_string());
        blocking(move || DesignDoc::open(&db, &ddoc).map(drop)).await?;
    }
    refused
}

pub async fn view(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    view: String,
    mut req: Req,
) -> ApiResult<Response> {
    allow_in_ddoc(&db, &ddoc, &req, "GET,POST,HEAD").await?;
    settee_metrics::global().view_reads.inc();
    let args = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = req.bytes().await?;
        args_of_body(&req, &body)?
    } else {
        MrArgs::from_query(&req.params)?
    };
    let (g, n, db) = {
        let (state, db) = (state.clone(), db.clone());
        blocking(move || {
            let (g, n) = state.view_group(&db, &ddoc, &view)?;
            Ok((g, n, db))
        })
        .await?
    };
    let mut args = ViewArgs::for_view(args, &g, n, &state.config)?;
    args.reader = settee_node::replicator_read::reader(&db, &req.user);
    let views = state.views.clone();
    Ok(stream(JSON, move |sink| {
        run(&views, &db, &g, n, &args, &mut |b| sink.write(b))
    })
    .await)
}

/// A view query's arguments from a POST body (and the query string).
pub(crate) fn args_of_body(req: &Req, body: &[u8]) -> ApiResult<MrArgs> {
    let body = body_object(crate::req::parse_json(body)?)?;
    if queries_member(&body)?.is_some() {
        return Err(ApiError::bad_request(
            "The `queries` parameter is no longer supported at this endpoint",
        ));
    }
    if body.get("keys").is_some_and(|k| !k.is_array()) {
        return Err(ApiError::bad_request("`keys` member must be an array."));
    }
    Ok(MrArgs::from_body_and_query(&body, &req.params, true)?)
}

pub async fn view_queries(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    view: String,
    mut req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    settee_metrics::global().view_reads.inc();
    let body = body_object(req.json().await?)?;
    let list = queries_member(&body)?
        .ok_or_else(|| ApiError::bad_request("POST body must include `queries` parameter."))?;
    let base = MrArgs::from_query(&req.params)?;
    let views = state.views.clone();
    let reader = settee_node::replicator_read::reader(&db, &req.user);
    let out = blocking(move || {
        let (g, n) = state.view_group(&db, &ddoc, &view)?;
        let args = list
            .iter()
            .map(|q| {
                let q = q
                    .as_object()
                    .ok_or_else(|| ApiError::bad_request("Each query must be a JSON object"))?;
                ViewArgs::for_view(base.for_query_object(q)?, &g, n, &state.config).map(|a| {
                    ViewArgs {
                        reader: reader.clone(),
                        ..a
                    }
                })
            })
            .collect::<ApiResult<Vec<_>>>()?;
        query_results(&args, |a, out| run(&views, &db, &g, n, a, out))
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}

/// Runs one view query, writing the complete response object through `out`: the head,
/// then each row (with its separator) in one call, then the end.
pub(crate) fn run(
    views: &Arc<Views>,
    db: &Arc<Database>,
    g: &Arc<Group>,
    view: usize,
    args: &ViewArgs,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> ApiResult<()> {
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
            let atts = args.atts.render(db, &doc.body).unwrap_or_else(|e| {
                tracing::warn!(id, error = ?e, "reading attachments");
                None
            });
            Some(doc_json_with(&doc, &opts, atts))
        }
    }
}

pub async fn design_info(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow_in_ddoc(&db, &ddoc, &req, "GET").await?;
    let body = blocking(move || {
        let g = state.ddoc_group(&db, &ddoc)?;
        let info = state.views.info(&db, &g).map_err(ApiError::from)?;
        let pending = db.update_seq().saturating_sub(info.update_seq);
        // CouchDB's member order (`couch_mrview:get_info` as chttpd renders it).
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
    })
    .await?;
    Ok(json(StatusCode::OK, &body))
}

pub async fn compact_design(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let g = {
        let (state, db) = (state.clone(), db.clone());
        blocking(move || Ok(state.ddoc_group(&db, &ddoc)?)).await?
    };
    state.views.compact_later(db, g);
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// Removes indexes no design document uses any more.
pub async fn view_cleanup(state: AppState, db: Arc<Database>, req: Req) -> ApiResult<Response> {
    // chttpd_db's handle_view_cleanup_req checks no content type.
    allow(&req.method, "POST")?;
    blocking(move || {
        let mut keep = Vec::new();
        let mut bad = None;
        db.scan_docs(b"_design/", Some(b"_design0"), false, true, |row| {
            let group = row
                .body
                .as_deref()
                .and_then(|b| {
                    serde_json::from_slice::<Map<String, Value>>(settee_core::split_stored(b).0)
                        .ok()
                })
                .map(|body| state.views.group(&db, &row.id, &body));
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
        state.views.cleanup(&db, &keep).map_err(ApiError::from)?;
        Ok(())
    })
    .await?;
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// `/{db}/_temp_view`: CouchDB 3 has no temporary views and answers `410 gone` to any
/// method.
pub async fn temp_view(_req: Req) -> ApiResult<Response> {
    Err(ApiError::Gone(
        "Temporary views are not supported in CouchDB".into(),
    ))
}
