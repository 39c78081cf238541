//! `_all_docs`, `_design_docs`, `_local_docs` and `_all_docs/queries`. Rows stream.

use super::{allow, blocking, query_results};
use crate::error::{ApiError, ApiResult};
use crate::handlers::attachments::AttOpts;
use crate::handlers::doc::local_json;
use crate::render::{seq, winner_json_with, with_doc, DocOpts};
use crate::reply::{json_bytes, stream, JSON};
use crate::req::{require_json, Params};
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use settee_db::{AllDocsRow, Database};
use std::ops::ControlFlow;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    All,
    Design,
    Local,
}

/// Where a JSON key falls among document ids (which are all strings): below every id,
/// at an id, or above every id — CouchDB's collation puts numbers before strings and
/// arrays/objects after them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bound {
    Low,
    Id(String),
    High,
}

impl Bound {
    fn of(v: &Value) -> Bound {
        match v {
            Value::String(s) => Bound::Id(s.clone()),
            Value::Array(_) | Value::Object(_) => Bound::High,
            _ => Bound::Low,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Query {
    keys: Option<Vec<Value>>,
    start: Option<Bound>,
    end: Option<Bound>,
    start_docid: Option<String>,
    end_docid: Option<String>,
    inclusive_end: bool,
    limit: Option<u64>,
    skip: u64,
    descending: bool,
    include_docs: bool,
    update_seq: bool,
    opts: DocOpts,
    atts: AttOpts,
    /// For a non-admin listing `_users` (`users_db_public`): the only members included
    /// documents show.
    public_only: Option<Vec<String>>,
}

impl Query {
    fn from_params(p: &Params) -> ApiResult<Query> {
        for k in ["group", "group_level", "reduce"] {
            if p.get(k).is_some() && !(k == "reduce" && p.get(k) == Some("false")) {
                return Err(ApiError::QueryParse(format!(
                    "`{k}` is invalid for _all_docs (it has no reduce)"
                )));
            }
        }
        for k in ["attachments", "att_encoding_info", "sorted"] {
            p.bool(k)?;
        }
        if let Some(s) = p.get("stale") {
            if !["ok", "update_after", "false"].contains(&s) {
                return Err(ApiError::QueryParse(format!(
                    "Invalid value for `stale`: {s}"
                )));
            }
        }
        if let Some(u) = p.get("update") {
            if !["true", "false", "lazy"].contains(&u) {
                return Err(ApiError::QueryParse(format!(
                    "Invalid value for `update`: {u}"
                )));
            }
        }
        let key = p.json("key")?;
        let keys = match p.json("keys")? {
            None => None,
            Some(Value::Array(a)) => Some(a),
            Some(_) => return Err(ApiError::QueryParse("`keys` must be an array".into())),
        };
        let mut q = Query {
            keys,
            start: p
                .json_any(&["startkey", "start_key"])?
                .as_ref()
                .map(Bound::of),
            end: p.json_any(&["endkey", "end_key"])?.as_ref().map(Bound::of),
            start_docid: p
                .get_any(&["startkey_docid", "start_key_docid"])
                .map(|(_, v)| v.to_string()),
            end_docid: p
                .get_any(&["endkey_docid", "end_key_docid"])
                .map(|(_, v)| v.to_string()),
            inclusive_end: p.bool("inclusive_end")?.unwrap_or(true),
            limit: p.uint("limit")?,
            skip: p.uint("skip")?.unwrap_or(0),
            descending: p.flag("descending")?,
            include_docs: p.flag("include_docs")?,
            update_seq: p.flag("update_seq")?,
            opts: DocOpts {
                conflicts: p.flag("conflicts")?,
                ..Default::default()
            },
            atts: AttOpts::from_params(p)?,
            public_only: None,
        };
        if let Some(k) = key {
            if q.keys.is_some() {
                return Err(ApiError::QueryParse(
                    "`keys` is incompatible with `key`, `start_key` and `end_key`".into(),
                ));
            }
            q.start = Some(Bound::of(&k));
            q.end = Some(Bound::of(&k));
            q.inclusive_end = true;
        }
        if q.keys.is_some() && (q.start.is_some() || q.end.is_some()) {
            return Err(ApiError::QueryParse(
                "`keys` is incompatible with `key`, `start_key` and `end_key`".into(),
            ));
        }
        Ok(q)
    }

    /// Applies the members of a POST body (`keys` and any query parameter).
    fn from_body(body: &Value, base: &Params) -> ApiResult<Query> {
        Query::from_params(&base.with_body(body)?)
    }

    /// `[lower, upper)` over ids, or `None` when the range is empty.
    fn id_range(&self, ns: Namespace) -> Option<(String, Option<String>)> {
        let after = |s: &str| format!("{s}\0");
        // Ids are unique keys, so a `*_docid` only matters when it excludes the bound id.
        let (lo_b, hi_b, lo_docid) = if self.descending {
            (&self.end, &self.start, &self.end_docid)
        } else {
            (&self.start, &self.end, &self.start_docid)
        };
        let mut lo = match lo_b {
            None | Some(Bound::Low) => String::new(),
            Some(Bound::High) => return None,
            Some(Bound::Id(s)) => {
                let exclusive = if self.descending {
                    !self.inclusive_end
                } else {
                    false
                };
                let docid_past = lo_docid.as_deref().is_some_and(|d| d > s.as_str());
                if exclusive || docid_past {
                    after(s)
                } else {
                    s.clone()
                }
            }
        };
        let mut hi = match hi_b {
            None | Some(Bound::High) => None,
            Some(Bound::Low) => return None,
            Some(Bound::Id(s)) => {
                let inclusive = if self.descending {
                    true
                } else {
                    self.inclusive_end
                };
                Some(if inclusive { after(s) } else { s.clone() })
            }
        };
        let (ns_lo, ns_hi) = match ns {
            Namespace::All => ("", None),
            Namespace::Design => ("_design/", Some("_design0")),
            Namespace::Local => ("_local/", Some("_local0")),
        };
        if lo.as_str() < ns_lo {
            lo = ns_lo.to_string();
        }
        if let Some(nh) = ns_hi {
            if hi.as_deref().is_none_or(|h| h > nh) {
                hi = Some(nh.to_string());
            }
        }
        if hi.as_deref().is_some_and(|h| h <= lo.as_str()) {
            return None;
        }
        Some((lo, hi))
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
            let atts = q.atts.render(db, b).unwrap_or_else(|e| {
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

/// The public-fields filter for this reader (`Query::public_only`).
fn public_only(state: &AppState, db: &Database, req: &Req) -> ApiResult<Option<Vec<String>>> {
    Ok(super::doc::users_reader(state, db, req)?.map(|(_, fields)| fields))
}

/// Runs one query, writing the complete response object through `out`.
fn run(
    db: &Database,
    q: &Query,
    ns: Namespace,
    out: &mut dyn FnMut(&[u8]) -> bool,
) -> ApiResult<()> {
    let total: Value = match ns {
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
    let mut skip = q.skip;
    let mut left = q.limit.unwrap_or(u64::MAX);
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
    let offset: Value = if q.keys.is_some() || ns == Namespace::Local {
        Value::Null
    } else {
        json!(count_before(db, q, ns)? + q.skip)
    };
    let mut head = format!("{{\"total_rows\":{total},\"offset\":{offset}");
    if q.update_seq {
        head.push_str(&format!(",\"update_seq\":{}", seq(db.update_seq())));
    }
    head.push_str(",\"rows\":[\r\n");
    if !out(head.as_bytes()) {
        return Ok(());
    }
    if let Some(keys) = &q.keys {
        let mut ids: Vec<String> = keys
            .iter()
            .map(|k| {
                k.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| k.to_string())
            })
            .collect();
        if q.descending {
            ids.reverse();
        }
        if ns == Namespace::Local {
            for id in ids {
                let row = match db.local_doc(&id)? {
                    Some(d) => local_row(&d, q),
                    None => {
                        serde_json::to_vec(&json!({"key": id, "error": "not_found"})).expect("json")
                    }
                };
                if emit(&row, out).is_break() {
                    break;
                }
            }
        } else {
            for row in db.lookup_docs(&ids, q.include_docs)? {
                if emit(&render_row(db, &row, q), out).is_break() {
                    break;
                }
            }
        }
    } else if let Some((lo, hi)) = q.id_range(ns) {
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

fn local_row(d: &settee_db::LocalDoc, q: &Query) -> Vec<u8> {
    let rev = format!("0-{}", d.rev);
    let mut out =
        serde_json::to_vec(&json!({"id": d.id, "key": d.id, "value": {"rev": rev}})).expect("json");
    if q.include_docs {
        out = with_doc(out, Some(local_json(d)));
    }
    out
}

/// Rows that sort before the first row of the range (CouchDB's `offset`).
fn count_before(db: &Database, q: &Query, ns: Namespace) -> ApiResult<u64> {
    let Some((lo, hi)) = q.id_range(ns) else {
        return Ok(0);
    };
    let ns_lo: &[u8] = match ns {
        Namespace::Design => b"_design/",
        _ => b"",
    };
    let mut n = 0u64;
    let count = |_: AllDocsRow| {
        n += 1;
        ControlFlow::Continue(())
    };
    if q.descending {
        let ns_hi: Option<&[u8]> = if ns == Namespace::Design {
            Some(b"_design0")
        } else {
            None
        };
        if let Some(h) = hi {
            db.scan_docs(h.as_bytes(), ns_hi, false, false, count)?;
        }
    } else if lo.as_bytes() > ns_lo {
        db.scan_docs(ns_lo, Some(lo.as_bytes()), false, false, count)?;
    }
    Ok(n)
}

pub async fn all_docs(
    state: &AppState,
    db: Arc<Database>,
    mut req: Req,
    ns: Namespace,
) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let mut q = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = req.json().await?;
        Query::from_body(&body, &req.params)?
    } else {
        Query::from_params(&req.params)?
    };
    q.public_only = public_only(state, &db, &req)?;
    Ok(stream(JSON, move |sink| run(&db, &q, ns, &mut |b| sink.write(b))).await)
}

pub async fn queries(state: &AppState, db: Arc<Database>, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "POST")?;
    require_json(&req.headers)?;
    let body = req.json().await?;
    let list = body
        .get("queries")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("Request body must contain a `queries` array"))?;
    let public = public_only(state, &db, &req)?;
    let qs = list
        .iter()
        .map(|b| {
            Query::from_body(b, &req.params).map(|q| Query {
                public_only: public.clone(),
                ..q
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let out =
        blocking(move || query_results(&qs, |q, out| run(&db, q, Namespace::All, out))).await?;
    Ok(json_bytes(StatusCode::OK, out))
}
