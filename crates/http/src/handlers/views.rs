//! Views: `_design/{ddoc}/_view/{view}` (GET/POST, `/queries`), `_design/{ddoc}/_info`,
//! `_compact/{ddoc}`, `_view_cleanup` and `_temp_view`. Rows stream.

use super::{allow, blocking, query_results};
use crate::error::{ApiError, ApiResult};
use crate::render::{doc_json, seq, with_doc, DocOpts};
use crate::reply::{json, json_bytes, ok_true, stream, JSON};
use crate::req::{require_json, Params};
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::design::ViewGroupDef;
use settee_core::{ParsedDoc, Rev};
use settee_db::Database;
use settee_views::{Event, Freshness, Group, Grouping, ReduceKind, ViewQuery, Views};
use std::ops::ControlFlow;
use std::sync::Arc;

/// A parsed view request: the query plus what only the HTTP layer handles.
#[derive(Clone, Debug)]
pub struct ViewArgs {
    pub query: ViewQuery,
    pub include_docs: bool,
    pub conflicts: bool,
    pub update_seq: bool,
    pub fresh: Freshness,
}

fn parse_error(msg: &str) -> ApiError {
    ApiError::QueryParse(msg.to_owned())
}

fn freshness(p: &Params) -> ApiResult<Freshness> {
    let mut fresh = Freshness::Update;
    if let Some(s) = p.get("stale") {
        fresh = match s {
            "ok" => Freshness::Stale,
            "update_after" => Freshness::UpdateAfter,
            "false" => Freshness::Update,
            _ => return Err(parse_error("Invalid value for `stale`.")),
        };
    }
    if let Some(u) = p.get("update") {
        fresh = match u {
            "true" => Freshness::Update,
            "false" => Freshness::Stale,
            "lazy" => Freshness::UpdateAfter,
            _ => return Err(parse_error("Invalid value for `update`.")),
        };
    }
    Ok(fresh)
}

fn grouping(p: &Params) -> ApiResult<Grouping> {
    let group = p.bool("group")?;
    let level = p.uint("group_level")?;
    Ok(match (group, level) {
        (Some(false), Some(n)) if n > 0 => {
            return Err(parse_error(
                "Can't specify group=false and group_level>0 at the same time",
            ))
        }
        (_, Some(0)) | (None | Some(false), None) => Grouping::None,
        (_, Some(n)) => Grouping::Level(n as usize),
        (Some(true), None) => Grouping::Exact,
    })
}

impl ViewArgs {
    /// Parses and validates parameters for view number `n` of `g`, key range included.
    pub fn for_view(p: &Params, g: &Group, n: usize) -> ApiResult<ViewArgs> {
        let args = ViewArgs::parse(p, g.reduces[n] != ReduceKind::None)?;
        args.query
            .check_range(g.def.raw(n))
            .map_err(ApiError::QueryParse)?;
        Ok(args)
    }

    /// Parses and validates parameters as CouchDB's `validate_args` does, for a view that
    /// has a reduce function (`has_reduce`) or not.
    pub fn parse(p: &Params, has_reduce: bool) -> ApiResult<ViewArgs> {
        if p.get("partition").is_some() {
            return Err(parse_error(
                "`partition` parameter is not supported in this database.",
            ));
        }
        for k in [
            "sorted",
            "stable",
            "attachments",
            "att_encoding_info",
            "local_seq",
        ] {
            p.bool(k)?;
        }
        let reduce_param = p.bool("reduce")?;
        if reduce_param == Some(true) && !has_reduce {
            return Err(parse_error("Reduce is invalid for map-only views."));
        }
        let reduce = has_reduce && reduce_param != Some(false);
        let grouping = grouping(p)?;
        if !reduce && grouping != Grouping::None {
            return Err(parse_error("Invalid use of grouping on a map view."));
        }
        let keys = match p.json("keys")? {
            None => None,
            Some(Value::Array(a)) => Some(a),
            Some(_) => return Err(parse_error("`keys` must be an array of strings.")),
        };
        if reduce && keys.is_some() && grouping != Grouping::Exact {
            return Err(parse_error(
                "Multi-key fetchs for reduce views must use `group=true`",
            ));
        }
        let include_docs = p.flag("include_docs")?;
        if reduce && include_docs {
            return Err(parse_error("`include_docs` is invalid for reduce"));
        }
        let conflicts = p.bool("conflicts")?;
        if reduce && conflicts.is_some() {
            return Err(parse_error("`conflicts` is invalid for reduce views."));
        }
        let mut query = ViewQuery {
            keys,
            start_key: p.json_any(&["startkey", "start_key"])?,
            end_key: p.json_any(&["endkey", "end_key"])?,
            start_docid: p
                .get_any(&["startkey_docid", "start_key_docid"])
                .map(|(_, v)| v.to_owned()),
            end_docid: p
                .get_any(&["endkey_docid", "end_key_docid"])
                .map(|(_, v)| v.to_owned()),
            inclusive_end: p.bool("inclusive_end")?.unwrap_or(true),
            descending: p.flag("descending")?,
            skip: p.uint("skip")?.unwrap_or(0),
            limit: p.uint("limit")?,
            reduce,
            grouping,
        };
        if let Some(k) = p.json("key")? {
            query.start_key = Some(k.clone());
            query.end_key = Some(k);
        }
        if query.keys.is_some() && (query.start_key.is_some() || query.end_key.is_some()) {
            return Err(parse_error(
                "`keys` is incompatible with `key`, `start_key` and `end_key`",
            ));
        }
        Ok(ViewArgs {
            query,
            include_docs,
            conflicts: conflicts.unwrap_or(false),
            update_seq: p.flag("update_seq")?,
            fresh: freshness(p)?,
        })
    }
}

/// The view group of `_design/{ddoc}` and the number of view `view` in it.
pub fn load_group(
    state: &AppState,
    db: &Database,
    ddoc: &str,
    view: &str,
) -> ApiResult<(Arc<Group>, usize)> {
    let g = load_ddoc_group(state, db, ddoc)?;
    let n = g
        .def
        .view(view)
        .map(|(i, _)| i)
        .ok_or_else(|| ApiError::NotFound("missing_named_view".into()))?;
    Ok((g, n))
}

fn load_ddoc_group(state: &AppState, db: &Database, ddoc: &str) -> ApiResult<Arc<Group>> {
    let id = format!("_design/{ddoc}");
    let doc = db.open_doc(&id, None)?;
    let body: Map<String, Value> =
        serde_json::from_slice(settee_core::split_stored(&doc.body).0)
            .map_err(|_| ApiError::Db(settee_db::Error::Internal("stored body".into())))?;
    let g = state.views.group(db, &id, &body).map_err(ApiError::from)?;
    check_language(&g.def)?;
    Ok(Arc::new(g))
}

fn check_language(def: &ViewGroupDef) -> ApiResult<()> {
    if def.language == "javascript" {
        Ok(())
    } else {
        Err(ApiError::Named(
            StatusCode::BAD_REQUEST,
            "unknown_query_language".into(),
            def.language.clone(),
        ))
    }
}

/// CouchDB's check of a design document on save: JavaScript views must be well formed and
/// their functions must compile (`400 invalid_design_doc` / `compilation_error`). Design
/// docs of other languages (such as Mango's `query`) are stored as they are.
pub fn validate_design(id: &str, doc: &ParsedDoc) -> ApiResult<()> {
    if !id.starts_with("_design/") || doc.deleted {
        return Ok(());
    }
    let Ok(body) =
        serde_json::from_slice::<Map<String, Value>>(settee_core::split_stored(&doc.body).0)
    else {
        return Ok(());
    };
    let js = matches!(body.get("language"), None | Some(Value::Null))
        || body.get("language") == Some(&json!("javascript"));
    if !js {
        return Ok(());
    }
    let def =
        ViewGroupDef::from_ddoc(&body).map_err(|e| ApiError::from(settee_views::Error::from(e)))?;
    if def.views.is_empty() {
        return Ok(());
    }
    let g = Group::new(0, id, def);
    settee_js::ViewRuntime::new(&g.fns, settee_js::Limits::default())
        .map(|_| ())
        .map_err(|e| ApiError::from(settee_views::Error::Js(e)))
}

pub async fn view(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    view: String,
    mut req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let params = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = req.json().await?;
        req.params.with_body(&body)?
    } else {
        req.params.clone()
    };
    let (g, n, db) = {
        let (state, db) = (state.clone(), db.clone());
        blocking(move || {
            let (g, n) = load_group(&state, &db, &ddoc, &view)?;
            Ok((g, n, db))
        })
        .await?
    };
    let args = ViewArgs::for_view(&params, &g, n)?;
    let views = state.views.clone();
    Ok(stream(JSON, move |sink| {
        run(&views, &db, &g, n, &args, &mut |b| sink.write(b))
    })
    .await)
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
    let body = req.json().await?;
    let list = body
        .get("queries")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("Request body must contain a `queries` array"))?;
    let views = state.views.clone();
    let base = req.params.clone();
    let out = blocking(move || {
        let (g, n) = load_group(&state, &db, &ddoc, &view)?;
        let args = list
            .iter()
            .map(|b| ViewArgs::for_view(&base.with_body(b)?, &g, n))
            .collect::<ApiResult<Vec<_>>>()?;
        query_results(&args, |a, out| run(&views, &db, &g, n, a, out))
    })
    .await?;
    Ok(json_bytes(StatusCode::OK, out))
}

/// Runs one view query, writing the complete response object through `out`.
fn run(
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
                    head.push_str(&format!("\"update_seq\":{},", seq(update_seq)));
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
                    row = with_doc(row, linked_doc(db, id, value, args.conflicts));
                }
                row
            }
            Event::Reduced { key, value } => {
                let sep: &[u8] = if first { b"" } else { b",\r\n" };
                first = false;
                let mut row = sep.to_vec();
                serde_json::to_writer(&mut row, &json!({"key": key, "value": value}))
                    .expect("json");
                row
            }
        };
        settee_views::keep_going(out(&bytes))
    };
    views
        .query(db, g, view, &args.query, args.fresh, &mut sink)
        .map_err(ApiError::from)?;
    if head_sent {
        out(b"\r\n]}\n");
    }
    Ok(())
}

/// The document a row's `include_docs` shows: the one a `{"_id": …}` value links to (at
/// its `_rev` if given), else the row's own, or `null`.
fn linked_doc(db: &Database, id: &str, value: &[u8], conflicts: bool) -> Option<Vec<u8>> {
    let linked: Option<(String, Option<Rev>)> = match serde_json::from_slice::<Value>(value) {
        Ok(Value::Object(m)) => m.get("_id").and_then(Value::as_str).map(|lid| {
            let rev = m
                .get("_rev")
                .and_then(Value::as_str)
                .and_then(|r| Rev::parse(r).ok());
            (lid.to_owned(), rev)
        }),
        _ => None,
    };
    let (doc_id, rev) = linked.unwrap_or_else(|| (id.to_owned(), None));
    let doc = db.open_doc(&doc_id, rev.as_ref()).ok()?;
    let opts = DocOpts {
        conflicts,
        ..Default::default()
    };
    Some(doc_json(&doc, &opts))
}

pub async fn design_info(
    state: AppState,
    db: Arc<Database>,
    ddoc: String,
    req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let body = blocking(move || {
        let g = load_ddoc_group(&state, &db, &ddoc)?;
        let info = state.views.info(&db, &g).map_err(ApiError::from)?;
        let pending = db.update_seq().saturating_sub(info.update_seq);
        Ok(json!({
            "name": ddoc,
            "view_index": {
                "collator_versions": [settee_core::collate::collator_version()],
                "compact_running": info.compact_running,
                "language": info.language,
                "purge_seq": 0,
                "signature": info.signature,
                "sizes": {
                    "active": info.active_bytes,
                    "external": info.active_bytes,
                    "file": info.file_bytes,
                },
                "update_seq": info.update_seq,
                "updater_running": info.updater_running,
                "updates_pending": {"minimum": pending, "preferred": pending, "total": pending},
                "waiting_clients": 0,
                "waiting_commit": false,
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
        blocking(move || load_ddoc_group(&state, &db, &ddoc)).await?
    };
    state.views.compact_later(db, g);
    Ok(ok_true(StatusCode::ACCEPTED))
}

/// Removes indexes no design document uses any more.
pub async fn view_cleanup(state: AppState, db: Arc<Database>, req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
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

/// `POST /{db}/_temp_view`: a view defined in the request body, indexed like a design
/// document's (identical bodies share an index; `_view_cleanup` removes it).
pub async fn temp_view(state: AppState, db: Arc<Database>, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let body = req.json().await?;
    let obj = body
        .as_object()
        .ok_or_else(|| ApiError::bad_request("Request body must be a JSON object"))?;
    let def =
        ViewGroupDef::temp_view(obj).map_err(|e| ApiError::from(settee_views::Error::from(e)))?;
    check_language(&def)?;
    let g = Arc::new(Group::new(db.id, "_temp_view", def));
    let args = ViewArgs::for_view(&req.params, &g, 0)?;
    let views = state.views.clone();
    Ok(stream(JSON, move |sink| {
        run(&views, &db, &g, 0, &args, &mut |b| sink.write(b))
    })
    .await)
}
