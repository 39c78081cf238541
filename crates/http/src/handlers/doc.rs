//! Document endpoints: `GET/HEAD/PUT/DELETE/COPY /{db}/{docid}`, including `_design/` and
//! `_local/` documents.

use super::blocking;
use crate::error::{ApiError, ApiResult};
use crate::location::{absolute_uri, doc_location};
use crate::reply::{accepted, json_bytes, not_modified, rev_etag, write_response};
use crate::req::{batch_ok, etag_matches, new_edits, parse_rev_param, reconcile_rev};
use crate::{AppState, Req};
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use settee_core::{parse_doc, validate_doc_id, ParsedDoc, Rev};
use settee_db::LocalUpdate;
use settee_node::atts::AttOpts;
use settee_node::fabric::{DbRef, Written};
use settee_node::read::{ReadOpts, Rendered, Revision};
use settee_node::write::WriteOpts;
use settee_node::Fabric;
use settee_wire::path::NotUtf8;

pub async fn doc(state: &AppState, db: DbRef, id: String, req: Req) -> ApiResult<Response> {
    if id.starts_with("_local/") {
        return local(state, db, id, req).await;
    }
    match req.method.as_str() {
        "GET" | "HEAD" => get(state, db, id, req).await,
        "PUT" => put(state, db, id, req).await,
        "DELETE" => delete(state, db, id, req).await,
        "COPY" => copy(state, db, id, req).await,
        _ => Err(ApiError::MethodNotAllowed(DOC_METHODS)),
    }
}

/// A document id or attachment name that is not UTF-8 (see [`NotUtf8`]): as CouchDB, a
/// missing document or attachment to read or delete, a name refused to write.
pub async fn not_utf8(state: &AppState, name: NotUtf8, req: &Req) -> ApiResult<Response> {
    let bad_id = || settee_core::Error::IllegalDocId("Document id must be valid UTF-8".into());
    let missing = |what| Err(ApiError::Db(settee_db::Error::NotFound(what)));
    let method = req.method.as_str();
    match name {
        NotUtf8::Doc(db) => {
            state.fabric.open_db(&db)?;
            match method {
                "GET" | "HEAD" | "DELETE" | "COPY" => missing("missing"),
                "PUT" => Err(bad_id().into()),
                "POST" => {
                    crate::req::check_referer(req)?;
                    Err(bad_id().into())
                }
                _ => Err(ApiError::MethodNotAllowed(DOC_METHODS)),
            }
        }
        NotUtf8::Attachment(db, id) => {
            let db = state.fabric.open_db(&db)?.name;
            match (method, id) {
                ("GET" | "HEAD" | "DELETE", None) => missing("missing"),
                ("PUT", None) => Err(bad_id().into()),
                ("GET" | "HEAD", Some(id)) => {
                    let opts = ReadOpts {
                        rev: req.params.get("rev").map(Rev::parse).transpose()?,
                        ..Default::default()
                    };
                    let (fabric, user) = (state.fabric.clone(), req.user.clone());
                    blocking(move || Ok(fabric.open_doc(&db, &user, &id, &opts).map(drop)?))
                        .await?;
                    missing("Document is missing attachment")
                }
                ("PUT" | "DELETE", Some(_)) => Err(ApiError::bad_request(
                    "Attachment name is not UTF-8 encoded",
                )),
                _ => Err(ApiError::MethodNotAllowed("DELETE,GET,HEAD,PUT")),
            }
        }
    }
}

/// The methods CouchDB lists in a document's 405.
const DOC_METHODS: &str = "DELETE,GET,HEAD,POST,PUT,COPY";

/// CouchDB answers a `GET` of `/{db}/_design%2F{name}` with a redirect to the unescaped
/// path (`chttpd_db:db_req`).
fn design_redirect(state: &AppState, req: &Req) -> Option<Response> {
    let raw = req.uri.path_and_query().map_or("", |pq| pq.as_str());
    let at = raw.to_ascii_lowercase().find("/_design%2f")?;
    let path = format!(
        "{}/_design/{}",
        &raw[..at],
        &raw[at + "/_design%2f".len()..]
    );
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
    if let Some(loc) = absolute_uri(&state.config, req, &path) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Some(resp)
}

async fn get(state: &AppState, db: DbRef, id: String, req: Req) -> ApiResult<Response> {
    if req.method == "GET" {
        if let Some(redirect) = design_redirect(state, &req) {
            return Ok(redirect);
        }
    }
    let mut opts = ReadOpts {
        doc: crate::req::doc_opts(&req.params),
        atts: AttOpts::from_params(&req.params)?,
        latest: req.params.is_true("latest"),
        r: crate::req::read_quorum(&req),
        ..Default::default()
    };
    if let Some(wanted) = req.params.get("open_revs") {
        // As chttpd_db: multipart for any client whose Accept admits it.
        opts.multipart = settee_wire::accepts(req.header("accept"), "multipart/mixed");
        return open_revs(state, db, id, wanted.to_string(), req.user, opts).await;
    }
    opts.rev = parse_rev_param(&req)?;
    // As chttpd_db's send_doc_efficiently: multipart for any client whose Accept admits it
    // (no Accept header does), JSON otherwise.
    opts.multipart = settee_wire::accepts(req.header("accept"), "multipart/related");
    let (node, name, user) = (state.fabric.clone(), db.name.clone(), req.user.clone());
    let read = blocking(move || Ok(node.open_doc(&name, &user, &id, &opts)?)).await?;
    let tag = read.rev.to_string();
    if !read.has_meta && etag_matches(&req.headers, &format!("\"{tag}\"")) {
        return Ok(not_modified(rev_etag(&tag)));
    }
    let mut resp = match read.body {
        Rendered::Multipart { doc, parts } => {
            // A clustered database's parts carry their content.
            let db = db.engine("multipart documents").ok().cloned();
            crate::multipart::multipart_response(db, doc, parts).await
        }
        Rendered::Json(doc) => json_bytes(StatusCode::OK, doc),
    };
    // As CouchDB: a body carrying meta fields (conflicts, revs_info, local_seq) has no ETag,
    // since those change without the revision changing.
    if resp.status() == StatusCode::OK && !read.has_meta {
        resp.headers_mut().insert(header::ETAG, rev_etag(&tag));
    }
    Ok(resp)
}

async fn open_revs(
    state: &AppState,
    db: DbRef,
    id: String,
    wanted: String,
    user: settee_auth::UserCtx,
    opts: ReadOpts,
) -> ApiResult<Response> {
    let multipart = opts.multipart;
    let (node, name) = (state.fabric.clone(), db.name.clone());
    let revs = blocking(move || {
        Ok(Fabric::open_revs(
            &*node, &name, &user, &id, &wanted, &opts,
        )?)
    })
    .await?;
    if multipart {
        let engine = db.engine("open_revs").ok().cloned();
        return Ok(crate::multipart::multipart_mixed(engine, revs).await);
    }
    let mut out = b"[".to_vec();
    for (i, rev) in revs.iter().enumerate() {
        let Revision::Json { ok, body } = rev else {
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

async fn put(state: &AppState, db: DbRef, id: String, mut req: Req) -> ApiResult<Response> {
    validate_doc_id(&id)?;
    let new_edits = new_edits(&req);
    let batch = batch_ok(&req)?;
    let multipart = req
        .header("content-type")
        .is_some_and(|c| c.to_ascii_lowercase().starts_with("multipart/related"));
    // Attachments that follow a multipart body are written before the document, to the
    // database's own store; a clustered database's are held for its copies.
    let (body, followed, held) = match db.engine("multipart document writes") {
        Ok(engine) if multipart => {
            let engine = engine.clone();
            let (body, followed) =
                crate::multipart::read_multipart(state, &engine, &mut req).await?;
            (body, Some((engine, followed)), None)
        }
        Err(_) if multipart => {
            let (body, held) = crate::multipart::read_held(state, &mut req).await?;
            (body, None, Some(held))
        }
        _ => (req.json().await?, None, None),
    };
    let mut doc = parse_doc(body)?;
    doc.id = Some(id.clone());
    if let Some(rev) = reconcile_rev(&req, doc.rev())? {
        if doc.revs.is_none() {
            doc.revs = Some((rev.pos, vec![rev.id]));
        }
    }
    if !new_edits && doc.revs.is_none() {
        return Err(settee_node::write::needs_revs().into());
    }
    let deleted = doc.deleted;
    let opts = WriteOpts {
        new_edits,
        batch,
        w: crate::req::write_quorum(&req),
        // A coordinator's `COPY` to a shard copy (`?settee_keep_revpos=true`).
        keep_revpos: settee_core::is_shard_name(&db.name)
            && req.params.get("settee_keep_revpos") == Some("true"),
    };
    let written = match (followed, held) {
        (Some((engine, followed)), _) => Written {
            accepted: settee_node::write::short_of(opts.w, 1),
            rev: (state.node)
                .update_doc_with(engine, &req.user, doc, opts, followed)
                .await?,
        },
        (None, Some(parts)) => {
            let fabric = &*state.fabric;
            Fabric::update_doc_related(fabric, &db.name, &req.user, doc, opts, parts).await?
        }
        (None, None) => Fabric::update_doc(&*state.fabric, &db.name, &req.user, doc, opts).await?,
    };
    if batch {
        return Ok(accepted(&id));
    }
    let rev = written
        .rev
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default();
    // A deletion answers 200, anything else 201 (`chttpd_db:update_doc`); 202 either
    // way when fewer copies than the quorum hold it.
    let ok = if deleted {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let status = crate::reply::written_status(&written, ok);
    let location = doc_location(&state.config, &req, &db.name, &id);
    Ok(write_response(
        status,
        &id,
        &rev,
        Some(rev_etag(&rev)),
        location,
    ))
}

/// `DELETE /{db}/{docid}`: the document must exist (404 `missing` or `deleted`
/// otherwise, before any revision check); the revision comes from `?rev=` or `If-Match`.
async fn delete(state: &AppState, db: DbRef, id: String, req: Req) -> ApiResult<Response> {
    // As chttpd_db: the document is opened first (a missing one is a 404).
    let (node, name, id2, user) = (
        state.fabric.clone(),
        db.name.clone(),
        id.clone(),
        req.user.clone(),
    );
    blocking(move || {
        Ok(node
            .open_doc(&name, &user, &id2, &ReadOpts::default())
            .map(drop)?)
    })
    .await?;
    let rev = reconcile_rev(&req, None)?;
    let doc = ParsedDoc {
        id: Some(id.clone()),
        revs: rev.map(|r| (r.pos, vec![r.id])),
        deleted: true,
        body: b"{}".to_vec(),
        atts: None,
        body_term: None,
    };
    let opts = WriteOpts {
        w: crate::req::write_quorum(&req),
        ..WriteOpts::default()
    };
    let written = Fabric::update_doc(&*state.fabric, &db.name, &req.user, doc, opts).await?;
    let rev = written
        .rev
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default();
    let status = crate::reply::written_status(&written, StatusCode::OK);
    Ok(write_response(
        status,
        &id,
        &rev,
        Some(rev_etag(&rev)),
        None,
    ))
}

/// The target of a `COPY`, as CouchDB's `parse_copy_destination_header` reads the
/// `Destination` header's bytes: a relative document id (`^https?://`, case-sensitive, is
/// refused), optionally followed by `?key=rev` to overwrite that revision (the key's name is
/// not looked at). The pattern matches CouchDB makes on the parts of `?` and `=` crash
/// when the counts differ; those 500s are reproduced. The id is then unquoted.
fn copy_destination(req: &Req) -> ApiResult<(String, Option<Rev>)> {
    let dest = req
        .headers
        .get("destination")
        .ok_or_else(|| ApiError::bad_request("Destination header is mandatory for COPY."))?
        .as_bytes();
    if dest.starts_with(b"http://") || dest.starts_with(b"https://") {
        return Err(ApiError::bad_request("Destination URL must be relative."));
    }
    let badmatch = |parts: Vec<&[u8]>, stack_hash| ApiError::Crash {
        error: "badmatch".into(),
        reason: String::from_utf8_lossy(&parts.concat()).into_owned(),
        stack_hash,
    };
    let parts: Vec<&[u8]> = dest.split(|&b| b == b'?').collect();
    let (raw_id, rev) = match parts[..] {
        [id] => (id, None),
        [id, query] => {
            let kv: Vec<&[u8]> = query.split(|&b| b == b'=').collect();
            let [_, value] = kv[..] else {
                return Err(badmatch(kv, 3_889_971_851));
            };
            let value = std::str::from_utf8(value)
                .map_err(|_| ApiError::bad_request("Invalid rev format"))?;
            (id, Some(Rev::parse(value)?))
        }
        _ => return Err(badmatch(parts, 3_015_477_523)),
    };
    Ok((unquote(req, raw_id)?, rev))
}

/// `chttpd:unquote`: percent-decoding (an invalid escape stays as it is), with `+` a space
/// under `[chttpd] decode_plus_to_space`. The id must be UTF-8.
fn unquote(req: &Req, s: &[u8]) -> ApiResult<String> {
    let s: Vec<u8> = if req.decode_plus_to_space {
        s.iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect()
    } else {
        s.to_vec()
    };
    let bytes: Vec<u8> = percent_encoding::percent_decode(&s).collect();
    String::from_utf8(bytes).map_err(|_| {
        settee_core::Error::IllegalDocId("Document id must be valid UTF-8".into()).into()
    })
}

/// `COPY /{db}/{docid}` (or of a local document): the copy's revision is its `ETag`,
/// local destinations too.
async fn copy(state: &AppState, db: DbRef, id: String, req: Req) -> ApiResult<Response> {
    let (dest_id, dest_rev) = copy_destination(&req)?;
    validate_doc_id(&dest_id)?;
    let rev = match id.starts_with("_local/") {
        true => None,
        false => reconcile_rev(&req, None)?,
    };
    let (source, dest) = ((id.as_str(), rev), (dest_id.as_str(), dest_rev));
    let copied = Fabric::copy_doc(&*state.fabric, &db.name, &req.user, source, dest).await?;
    let rev = copied.rev;
    let location = doc_location(&state.config, &req, &db.name, &dest_id);
    let etag = Some(rev_etag(&rev));
    let status = match copied.accepted {
        true => StatusCode::ACCEPTED,
        false => StatusCode::CREATED,
    };
    Ok(write_response(status, &dest_id, &rev, etag, location))
}

// ---- local documents ------------------------------------------------------------------

/// Local documents: no revision tree and no MVCC (CouchDB's `_local` documents, which
/// replication checkpoints use). Reads of a given `rev` find nothing, as CouchDB looks
/// revisions up in the document tree where local documents are not.
async fn local(state: &AppState, db: DbRef, id: String, mut req: Req) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => {
            if req.params.get("rev").is_some() || req.params.get("open_revs") == Some("all") {
                parse_rev_param(&req)?;
                return Err(ApiError::NotFound("missing".into()));
            }
            if let Some(wanted) = req.params.get("open_revs") {
                // Revisions are looked up in the document tree, where local documents
                // are not: every one asked for is missing.
                let opts = ReadOpts {
                    multipart: settee_wire::accepts(req.header("accept"), "multipart/mixed"),
                    ..Default::default()
                };
                let wanted = wanted.to_string();
                return open_revs(state, db, id, wanted, req.user, opts).await;
            }
            let node = state.fabric.clone();
            let d = blocking(move || Ok(node.open_local(&db.name, &id)?)).await?;
            let tag = crate::reply::local_etag(d.rev, &d.body);
            if etag_matches(&req.headers, tag.to_str().unwrap_or("")) {
                return Ok(not_modified(tag));
            }
            let mut json = settee_node::local_json(&d);
            // `revs=true` is the one read option CouchDB applies to a local document.
            if req.params.is_true("revs") {
                json.pop();
                json.extend_from_slice(
                    format!(",\"_revisions\":{{\"start\":0,\"ids\":[\"{}\"]}}}}", d.rev).as_bytes(),
                );
            }
            let mut resp = json_bytes(StatusCode::OK, json);
            resp.headers_mut().insert(header::ETAG, tag);
            Ok(resp)
        }
        "PUT" => {
            validate_doc_id(&id)?;
            let batch = batch_ok(&req)?;
            let body = req.json().await?;
            super::put_local(state, db, id, body, &req, batch).await
        }
        "DELETE" => {
            let (fabric, db2, id2) = (state.fabric.clone(), db.name.clone(), id.clone());
            blocking(move || Ok(fabric.open_local(&db2, &id2).map(drop)?)).await?;
            let rev = crate::req::local_rev(&req, None)?;
            let update = LocalUpdate {
                id: id.clone(),
                rev,
                deleted: true,
                body: b"{}".to_vec(),
            };
            Fabric::put_local(&*state.fabric, &db.name, update, false).await?;
            Ok(write_response(
                StatusCode::OK,
                &id,
                "0-0",
                Some(crate::reply::local_etag(0, b"{}")),
                None,
            ))
        }
        "COPY" => copy(state, db, id, req).await,
        _ => Err(ApiError::MethodNotAllowed(DOC_METHODS)),
    }
}
