//! Document endpoints: `GET/HEAD/PUT/DELETE/COPY /{db}/{docid}`, including `_design/` and
//! `_local/` documents.

use super::{await_write, blocking};
use crate::admission::Admission;
use crate::error::{ApiError, ApiResult};
use crate::handlers::attachments::{AttOpts, Followed, MixedPart};
use crate::handlers::database::location;
use crate::render::{doc_json_with, DocOpts};
use crate::reply::{json, json_bytes, with_type};
use crate::req::etag_value;
use crate::{AppState, Req};
use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use settee_core::{parse_doc, validate_doc_id, DocJson, ParsedDoc, Rev};
use settee_db::{Database, LocalUpdate, OpenDoc, UpdateResult};
use std::sync::Arc;

pub async fn doc(state: &AppState, db: Arc<Database>, id: String, req: Req) -> ApiResult<Response> {
    if id.starts_with("_local/") {
        return local(db, id, req).await;
    }
    match req.method.as_str() {
        "GET" | "HEAD" => get(state, db, id, req).await,
        "PUT" => put(state, db, id, req).await,
        "DELETE" => delete(state, db, id, req).await,
        "COPY" => copy(state, db, id, req).await,
        "POST" => super::attachments::form(state, db, id, req).await,
        _ => Err(ApiError::MethodNotAllowed("DELETE,GET,HEAD,POST,PUT,COPY")),
    }
}

fn etag(rev: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{rev}\"")).expect("revs are ASCII")
}

/// Latest leaves descending from `rev` (itself if it is a leaf).
fn latest_leaves(info: &settee_db::DocInfo, rev: &Rev) -> Vec<Rev> {
    info.tree
        .leaves()
        .into_iter()
        .map(|l| l.rev)
        .filter(|l| {
            l.pos >= rev.pos
                && info.tree.ancestry(l).get((l.pos - rev.pos) as usize) == Some(&rev.id)
        })
        .collect()
}

fn parse_rev_param(req: &Req) -> ApiResult<Option<Rev>> {
    Ok(req.params.get("rev").map(Rev::parse).transpose()?)
}

/// How a document read renders its attachments: JSON (with `_attachments` replaced when
/// content is inlined), or `multipart/related` (the stubs, and the parts to stream).
enum Rendered {
    Json(Option<Vec<u8>>),
    Multipart(Vec<u8>, Vec<super::attachments::Part>),
}

async fn get(state: &AppState, db: Arc<Database>, id: String, req: Req) -> ApiResult<Response> {
    let opts = DocOpts::from_params(&req.params)?;
    let atts = AttOpts::from_params(&req.params)?;
    let users_view = users_reader(state, &db, &req)?;
    if req.params.get("open_revs").is_some() {
        if users_view.is_some() {
            return Err(ApiError::Forbidden(
                "Only admins can read revisions of other users' documents.".into(),
            ));
        }
        return open_revs(db, id, req, opts, atts).await;
    }
    let rev = parse_rev_param(&req)?;
    let latest = req.params.is_true("latest");
    let wants_multipart = req
        .header("accept")
        .is_some_and(|a| a.contains("multipart/related"));
    let db_for_parts = db.clone();
    let (mut doc, rendered) = blocking(move || {
        let mut doc = db.open_doc(&id, rev.as_ref())?;
        if latest {
            if let Some(r) = &rev {
                if let Some(newest) = latest_leaves(&doc.info, r).into_iter().max() {
                    doc = db.open_doc(&id, Some(&newest))?;
                }
            }
        }
        // Attachment content is read here only for JSON; multipart parts are streamed later.
        let rendered = match wants_multipart
            .then(|| atts.multipart_stubs(&doc.body))
            .flatten()
        {
            Some((stubs, parts)) => Rendered::Multipart(stubs, parts),
            None => Rendered::Json(atts.render(&db, &doc.body)?),
        };
        Ok((doc, rendered))
    })
    .await?;
    let restricted = users_view.is_some();
    if let Some((sec, public)) = users_view {
        let (body, atts) = settee_core::split_stored(&doc.body);
        let atts = atts.map(<[u8]>::to_vec);
        let body: serde_json::Map<String, Value> = serde_json::from_slice(body).unwrap_or_default();
        let whole = body.len();
        let public: Vec<&str> = public.iter().map(String::as_str).collect();
        let kept = settee_auth::users::filter_read(&doc.id, body, &req.user, &sec, &public)
            .map_err(|e| match e {
                settee_auth::users::UsersError::NotFound => {
                    ApiError::Db(settee_db::Error::NotFound("missing"))
                }
                settee_auth::users::UsersError::Denied(d) => d.into(),
            })?;
        // Only a reader who sees the whole document sees its attachments.
        let atts = atts.filter(|_| kept.len() == whole);
        doc.body =
            settee_core::join_stored(&serde_json::to_vec(&kept).expect("json"), atts.as_deref());
    }
    let tag = doc.rev.to_string();
    if !opts.has_meta()
        && etag_value(&req.headers, header::IF_NONE_MATCH).as_deref() == Some(tag.as_str())
    {
        let mut resp = with_type(StatusCode::NOT_MODIFIED, crate::reply::JSON, Body::empty());
        resp.headers_mut().insert(header::ETAG, etag(&tag));
        return Ok(resp);
    }
    // Users reading others' `_users` documents see no attachments at all.
    let inline = match rendered {
        _ if restricted => None,
        Rendered::Multipart(stubs, parts) => {
            let json = doc_json_with(&doc, &opts, Some(stubs));
            return Ok(super::attachments::multipart_response(db_for_parts, json, parts).await);
        }
        Rendered::Json(inline) => inline,
    };
    let mut resp = json_bytes(StatusCode::OK, doc_json_with(&doc, &opts, inline));
    // As CouchDB: a body carrying meta fields (conflicts, revs_info, local_seq) has no ETag,
    // since those change without the revision changing.
    if !opts.has_meta() {
        resp.headers_mut().insert(header::ETAG, etag(&tag));
    }
    Ok(resp)
}

/// For a reader of `_users` who is not its admin: the security object and the public
/// fields (`[chttpd_auth] public_fields`) that `users::filter_read` needs.
pub(crate) fn users_reader(
    state: &AppState,
    db: &Database,
    req: &Req,
) -> ApiResult<Option<(settee_auth::security::SecurityObject, Vec<String>)>> {
    if !crate::access::is_system_db(&db.name) {
        return Ok(None);
    }
    let sec = settee_auth::security::SecurityObject::from_json(&db.props().security);
    if sec.is_admin(&req.user) {
        return Ok(None);
    }
    let public = crate::access::public_fields(&state.node).unwrap_or_default();
    Ok(Some((sec, public)))
}

async fn open_revs(
    db: Arc<Database>,
    id: String,
    req: Req,
    opts: DocOpts,
    atts: AttOpts,
) -> ApiResult<Response> {
    let raw = req.params.get("open_revs").unwrap_or_default();
    let wanted: Option<Vec<Rev>> = if raw == "all" {
        None
    } else {
        let v: Value =
            serde_json::from_str(raw).map_err(|_| ApiError::bad_request("invalid UTF-8 JSON"))?;
        let list = v
            .as_array()
            .ok_or_else(|| ApiError::bad_request("Invalid rev format"))?;
        Some(
            list.iter()
                .map(|r| {
                    r.as_str()
                        .ok_or_else(|| ApiError::bad_request("Invalid rev format"))
                        .and_then(|s| Ok(Rev::parse(s)?))
                })
                .collect::<ApiResult<_>>()?,
        )
    };
    let latest = req.params.is_true("latest");
    let wants_multipart = req
        .header("accept")
        .is_some_and(|a| a.contains("multipart/mixed"));
    let db_for_parts = db.clone();
    let parts = blocking(move || {
        let wanted = match (wanted, latest) {
            (Some(revs), true) => match db.doc_info(&id)? {
                Some(info) => {
                    let mut out: Vec<Rev> = Vec::new();
                    for r in revs {
                        let leaves = latest_leaves(&info, &r);
                        if leaves.is_empty() {
                            out.push(r);
                        }
                        out.extend(
                            leaves
                                .into_iter()
                                .filter(|l| !out.contains(l))
                                .collect::<Vec<_>>(),
                        );
                    }
                    Some(out)
                }
                None => Some(revs),
            },
            (w, _) => w,
        };
        let found = db.open_revs(&id, wanted.as_deref())?;
        found
            .iter()
            .map(|(rev, doc)| match doc {
                Some(d) => match wants_multipart
                    .then(|| atts.multipart_stubs(&d.body))
                    .flatten()
                {
                    Some((stubs, parts)) => Ok(MixedPart::Related {
                        doc: doc_json_with(d, &opts, Some(stubs)),
                        parts,
                    }),
                    None => Ok(MixedPart::Json {
                        ok: true,
                        body: doc_json_with(d, &opts, atts.render(&db, &d.body)?),
                    }),
                },
                None => Ok(MixedPart::Json {
                    ok: false,
                    body: serde_json::to_vec(&json!({"missing": rev.to_string()})).expect("json"),
                }),
            })
            .collect::<ApiResult<Vec<MixedPart>>>()
    })
    .await?;
    if wants_multipart {
        return Ok(super::attachments::multipart_mixed(db_for_parts, parts).await);
    }
    let mut out = b"[".to_vec();
    for (i, part) in parts.iter().enumerate() {
        let MixedPart::Json { ok, body } = part else {
            unreachable!("documents are sent as related parts only to multipart clients")
        };
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(if *ok { b"{\"ok\":" } else { b"" });
        out.extend_from_slice(body);
        if *ok {
            out.push(b'}');
        }
    }
    out.push(b']');
    Ok(json_bytes(StatusCode::OK, out))
}

/// `batch=ok`: acknowledge with 202 before the commit.
pub fn batch_ok(req: &Req) -> ApiResult<bool> {
    match req.params.get("batch") {
        None => Ok(false),
        Some("ok") => Ok(true),
        Some(v) => Err(ApiError::QueryParse(format!(
            "Invalid value for `batch`: \"{v}\" (only \"ok\" is valid)"
        ))),
    }
}

/// Writes one document; `Ok(None)` when acknowledged early (`batch=ok`) or when a
/// replicated revision needs no new rev.
pub async fn write_one(
    state: &AppState,
    db: Arc<Database>,
    req: &Req,
    doc: ParsedDoc,
    new_edits: bool,
    batch: bool,
) -> ApiResult<Option<Rev>> {
    write_one_with(state, db, req, doc, new_edits, batch, Followed::new()).await
}

/// [`write_one`] for a document whose `follows` attachments were stored already (the
/// parts of a `multipart/related` upload).
pub async fn write_one_with(
    state: &AppState,
    db: Arc<Database>,
    req: &Req,
    doc: ParsedDoc,
    new_edits: bool,
    batch: bool,
    followed: Followed,
) -> ApiResult<Option<Rev>> {
    let doc = admit_with(state, &db, req, vec![doc], new_edits, followed)
        .await?
        .pop()
        .expect("one result")?;
    let given = doc.rev();
    let rx = db.update_docs(vec![doc], new_edits)?;
    if batch {
        tokio::spawn(async move {
            if let Ok(Err(e)) = rx.await {
                tracing::warn!(error = %e, "batch=ok write failed");
            }
        });
        return Ok(None);
    }
    match await_write(rx).await?.pop() {
        Some(UpdateResult::Ok { rev, .. }) => Ok(rev.or(given)),
        Some(UpdateResult::Err { error, .. }) => Err(error.into()),
        None => Err(ApiError::Db(settee_db::Error::Internal(
            "no result for write".into(),
        ))),
    }
}

/// Runs the per-document write checks (`admission`) on a blocking thread; one result per
/// document, in order.
pub async fn admit(
    state: &AppState,
    db: &Arc<Database>,
    req: &Req,
    docs: Vec<ParsedDoc>,
    new_edits: bool,
) -> ApiResult<Vec<ApiResult<ParsedDoc>>> {
    admit_with(state, db, req, docs, new_edits, Followed::new()).await
}

async fn admit_with(
    state: &AppState,
    db: &Arc<Database>,
    req: &Req,
    docs: Vec<ParsedDoc>,
    new_edits: bool,
    followed: Followed,
) -> ApiResult<Vec<ApiResult<ParsedDoc>>> {
    let (state, db, user) = (state.clone(), db.clone(), req.user.clone());
    blocking(move || {
        let mut admission = Admission::new(&state, &db, &user);
        admission.followed = followed;
        Ok(docs
            .into_iter()
            .map(|mut d| admission.admit(&db, &mut d, new_edits).map(|()| d))
            .collect())
    })
    .await
}

/// 201 `{"ok":true,"id","rev"}` with `ETag` and `Location`, or 202 for `batch=ok`.
pub fn created(req: &Req, id: &str, rev: Option<&Rev>, batch: bool) -> Response {
    if batch {
        return json(StatusCode::ACCEPTED, &json!({"ok": true, "id": id}));
    }
    let rev = rev.map(|r| r.to_string()).unwrap_or_default();
    let mut resp = json(
        StatusCode::CREATED,
        &json!({"ok": true, "id": id, "rev": rev}),
    );
    resp.headers_mut().insert(header::ETAG, etag(&rev));
    let db = req
        .uri
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("");
    let db = percent_encoding::percent_decode_str(db)
        .decode_utf8_lossy()
        .into_owned();
    if let Some(loc) = location(req, &[&db, id]) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    resp
}

/// The revision a write names through `?rev=`, `If-Match` and the body, which must agree.
pub(crate) fn reconcile_rev(req: &Req, body_rev: Option<Rev>) -> ApiResult<Option<Rev>> {
    let query = parse_rev_param(req)?;
    let if_match = etag_value(&req.headers, header::IF_MATCH)
        .map(|s| Rev::parse(&s))
        .transpose()?;
    if let (Some(q), Some(b)) = (&query, &body_rev) {
        if q != b {
            return Err(ApiError::bad_request(
                "Document rev from request body and query string have different values",
            ));
        }
    }
    let explicit = body_rev.or(query);
    if let (Some(m), Some(e)) = (&if_match, &explicit) {
        if m != e {
            return Err(ApiError::bad_request(
                "Document rev and etag have different values",
            ));
        }
    }
    Ok(explicit.or(if_match))
}

async fn put(state: &AppState, db: Arc<Database>, id: String, mut req: Req) -> ApiResult<Response> {
    validate_doc_id(&id)?;
    // CouchDB: `false` replicates, `true` (or anything else) edits.
    let new_edits = req.params.get("new_edits") != Some("false");
    let batch = batch_ok(&req)?;
    let multipart = req
        .header("content-type")
        .is_some_and(|c| c.to_ascii_lowercase().starts_with("multipart/related"));
    let (body, followed) = if multipart {
        super::attachments::read_multipart(state, &db, &mut req).await?
    } else {
        (req.json().await?, Followed::new())
    };
    let mut doc = parse_doc(body)?;
    doc.id = Some(id.clone());
    if doc.revs.is_none() || new_edits {
        if let Some(rev) = reconcile_rev(&req, doc.rev())? {
            if doc.revs.is_none() {
                doc.revs = Some((rev.pos, vec![rev.id]));
            }
        }
    }
    if !new_edits && doc.revs.is_none() {
        return Err(ApiError::bad_request(
            "new_edits=false requires a _rev or _revisions",
        ));
    }
    let rev = write_one_with(state, db, &req, doc, new_edits, batch, followed).await?;
    Ok(created(&req, &id, rev.as_ref(), batch))
}

async fn delete(state: &AppState, db: Arc<Database>, id: String, req: Req) -> ApiResult<Response> {
    let rev = reconcile_rev(&req, None)?.ok_or(ApiError::Db(settee_db::Error::Conflict))?;
    let batch = batch_ok(&req)?;
    let doc = ParsedDoc {
        id: Some(id.clone()),
        revs: Some((rev.pos, vec![rev.id])),
        deleted: true,
        body: b"{}".to_vec(),
        atts: None,
    };
    let rev = write_one(state, db, &req, doc, true, batch).await?;
    if batch {
        return Ok(json(StatusCode::ACCEPTED, &json!({"ok": true, "id": id})));
    }
    let rev = rev.map(|r| r.to_string()).unwrap_or_default();
    let mut resp = json(StatusCode::OK, &json!({"ok": true, "id": id, "rev": rev}));
    resp.headers_mut().insert(header::ETAG, etag(&rev));
    Ok(resp)
}

async fn copy(state: &AppState, db: Arc<Database>, id: String, req: Req) -> ApiResult<Response> {
    let dest = req
        .header("destination")
        .ok_or_else(|| ApiError::bad_request("Destination header is mandatory for COPY."))?
        .to_string();
    let (dest_id, dest_rev) = match dest.split_once("?rev=") {
        Some((d, r)) => (d.to_string(), Some(Rev::parse(r)?)),
        None => (dest.clone(), None),
    };
    let dest_id = percent_encoding::percent_decode_str(&dest_id)
        .decode_utf8_lossy()
        .into_owned();
    validate_doc_id(&dest_id)?;
    let rev = parse_rev_param(&req)?;
    let db2 = db.clone();
    let src_id = id.clone();
    let source: OpenDoc = blocking(move || Ok(db2.open_doc(&src_id, rev.as_ref())?)).await?;
    let doc = ParsedDoc {
        id: Some(dest_id.clone()),
        revs: dest_rev.map(|r| (r.pos, vec![r.id])),
        deleted: false,
        // The stored bytes carry the source's attachment stubs: COPY keeps them.
        body: source.body,
        atts: None,
    };
    let rev = write_one(state, db, &req, doc, true, false).await?;
    Ok(created(&req, &dest_id, rev.as_ref(), false))
}

// ---- local documents ------------------------------------------------------------------

fn parse_local_rev(s: &str) -> ApiResult<u64> {
    s.strip_prefix("0-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| ApiError::bad_request("Invalid rev format"))
}

pub fn local_json(d: &settee_db::LocalDoc) -> Vec<u8> {
    DocJson::new(&d.id, Some(&format!("0-{}", d.rev)), &d.body).finish()
}

async fn local(db: Arc<Database>, id: String, mut req: Req) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => {
            let d = blocking(move || {
                db.local_doc(&id)?
                    .ok_or(ApiError::NotFound("missing".into()))
            })
            .await?;
            Ok(json_bytes(StatusCode::OK, local_json(&d)))
        }
        "PUT" => {
            let body = req.json().await?;
            put_local(db, id, body, &req).await
        }
        "DELETE" => {
            let rev = match (
                req.params.get("rev"),
                etag_value(&req.headers, header::IF_MATCH),
            ) {
                (Some(r), _) => parse_local_rev(r)?,
                (None, Some(r)) => parse_local_rev(&r)?,
                (None, None) => return Err(ApiError::Db(settee_db::Error::Conflict)),
            };
            let update = LocalUpdate {
                id: id.clone(),
                rev: Some(rev),
                deleted: true,
                body: Vec::new(),
            };
            await_write(db.update_local(update)?).await?;
            Ok(json(
                StatusCode::OK,
                &json!({"ok": true, "id": id, "rev": "0-0"}),
            ))
        }
        _ => Err(ApiError::MethodNotAllowed("GET,HEAD,PUT,DELETE")),
    }
}

/// Writes a local document from a request body; its `_rev` (or `?rev=`) is `0-N`.
pub async fn put_local(
    db: Arc<Database>,
    id: String,
    mut body: Value,
    req: &Req,
) -> ApiResult<Response> {
    validate_doc_id(&id)?;
    let body_rev = body.as_object_mut().and_then(|o| o.shift_remove("_rev"));
    let doc = parse_doc(body)?;
    let rev = match (body_rev, req.params.get("rev")) {
        (Some(Value::String(s)), _) => Some(parse_local_rev(&s)?),
        (Some(_), _) => return Err(ApiError::bad_request("Invalid rev format")),
        (None, Some(q)) => Some(parse_local_rev(q)?),
        (None, None) => None,
    };
    let update = LocalUpdate {
        id: id.clone(),
        rev,
        deleted: doc.deleted,
        body: doc.body,
    };
    let n = await_write(db.update_local(update)?).await?;
    Ok(json(
        StatusCode::CREATED,
        &json!({"ok": true, "id": id, "rev": format!("0-{n}")}),
    ))
}
