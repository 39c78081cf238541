//! Request parsing: bodies, content types, conditional headers; query parameters are
//! `settee_wire`'s.

use crate::error::{ApiError, ApiResult};
use crate::Req;
use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use serde_json::{Map, Value};
use settee_core::Rev;
use settee_node::write::local_rev_number;
use settee_wire::mrargs::MrArgs;

pub use settee_wire::{decode_param_json, Params};

/// CouchDB's `parse_doc_query`: each option is on only for exactly `true`.
pub fn doc_opts(p: &Params) -> settee_node::DocOpts {
    let meta = p.is_true("meta");
    settee_node::DocOpts {
        revs: p.is_true("revs"),
        revs_info: p.is_true("revs_info") || meta,
        conflicts: p.is_true("conflicts") || meta,
        deleted_conflicts: p.is_true("deleted_conflicts") || meta,
        local_seq: p.is_true("local_seq"),
        revs_limit: None,
        reader: None,
    }
}

pub async fn body_bytes(body: Body, limit: usize) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.to_string().contains("length limit"))
            || e.to_string().contains("length limit");
        if too_large {
            ApiError::TooLarge
        } else {
            ApiError::bad_request("Incomplete request body")
        }
    })
}

/// A request body as its `Content-Encoding` says: `identity` (or none) as it is, `gzip`
/// inflated up to `limit` bytes, anything else CouchDB's 415.
pub fn decompress(encoding: Option<&str>, body: Bytes, limit: usize) -> ApiResult<Bytes> {
    match encoding.map(str::trim) {
        None | Some("identity") => Ok(body),
        Some("gzip") => {
            use std::io::Read;
            let mut out = Vec::new();
            let mut gz = flate2::read::GzDecoder::new(&body[..]).take(limit as u64 + 1);
            gz.read_to_end(&mut out)
                .map_err(|_| ApiError::bad_request("Request body is not properly gzipped."))?;
            if out.len() > limit {
                return Err(ApiError::TooLarge);
            }
            Ok(out.into())
        }
        Some(other) => Err(ApiError::Named(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type".into(),
            format!("{other} is not a supported content encoding."),
        )),
    }
}

pub fn parse_json(bytes: &[u8]) -> ApiResult<Value> {
    Ok(settee_wire::parse_json(bytes)?)
}

/// CouchDB's check for endpoints that take only JSON.
pub fn require_json(headers: &HeaderMap) -> ApiResult<()> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case("application/json")
    {
        Ok(())
    } else {
        Err(ApiError::BadContentType(
            "Content-Type must be application/json",
        ))
    }
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The value of an `If-Match`/`If-None-Match` style header without quotes.
pub fn etag_value(headers: &HeaderMap, name: axum::http::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().trim_matches('"').to_string())
}

/// CouchDB's `etag_match`: whether `If-None-Match` lists `etag` (quoted, as sent), the
/// header split at commas and spaces, `W/` prefixes ignored.
pub fn etag_matches(headers: &HeaderMap, etag: &str) -> bool {
    header_str(headers, "if-none-match").is_some_and(|v| {
        v.split([',', ' '])
            .filter(|t| !t.is_empty())
            .any(|t| t.strip_prefix("W/").unwrap_or(t) == etag)
    })
}

/// `?rev=`.
pub fn parse_rev_param(req: &Req) -> ApiResult<Option<Rev>> {
    Ok(req.params.get("rev").map(Rev::parse).transpose()?)
}

/// `batch=ok`: acknowledge with 202 before the commit. CouchDB takes any other value
/// for an ordinary write.
pub fn batch_ok(req: &Req) -> ApiResult<bool> {
    Ok(req.params.get("batch") == Some("ok"))
}

/// `w=`: the copies a write waits for; a value that is no positive integer means the default,
/// as in CouchDB.
pub fn write_quorum(req: &Req) -> Option<u32> {
    quorum_param(req, "w")
}

/// `r=`: the copies a read waits for (as `w=`).
pub fn read_quorum(req: &Req) -> Option<u32> {
    quorum_param(req, "r")
}

fn quorum_param(req: &Req, name: &str) -> Option<u32> {
    (req.params.get(name)?.parse().ok()).and_then(settee_node::write::quorum_value)
}

/// `new_edits=false` (a replicated revision); CouchDB takes any other value as `true`.
pub fn new_edits(req: &Req) -> bool {
    req.params.get("new_edits") != Some("false")
}

/// The revision a write names through `?rev=`, `If-Match` and the body, which must agree.
pub fn reconcile_rev(req: &Req, body_rev: Option<Rev>) -> ApiResult<Option<Rev>> {
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

/// Whether the request carries a body at all (`Content-Length` or chunked).
pub fn has_body(req: &Req) -> bool {
    req.header("content-length").is_some() || req.header("transfer-encoding").is_some()
}

/// CouchDB's `validate_referer`: the `Referer` must name this host (the request's
/// `X-Forwarded-Host`, else `Host`).
pub fn check_referer(req: &Req) -> ApiResult<()> {
    let referer = req
        .header("referer")
        .ok_or_else(|| ApiError::bad_request("Referer header required."))?;
    let host = req
        .header("x-forwarded-host")
        .or_else(|| req.header("host"))
        .unwrap_or("");
    let netloc = referer
        .split_once("://")
        .map_or("", |(_, rest)| rest)
        .split(['/', '?', '#'])
        .next()
        .unwrap_or("");
    if netloc != host {
        return Err(ApiError::bad_request("Referer header must match host."));
    }
    Ok(())
}

/// A POST body as CouchDB's `json_body_obj` takes it.
pub fn body_object(body: Value) -> ApiResult<Map<String, Value>> {
    match body {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("Request body must be a JSON object")),
    }
}

/// `queries` of a body, if any (CouchDB's `get_view_queries`).
pub fn queries_member(body: &Map<String, Value>) -> ApiResult<Option<Vec<Value>>> {
    match body.get("queries") {
        None => Ok(None),
        Some(Value::Array(q)) => Ok(Some(q.clone())),
        Some(_) => Err(ApiError::bad_request("`queries` member must be an array.")),
    }
}

/// A view query's arguments from a POST body (and the query string).
pub fn args_of_body(req: &Req, body: &[u8]) -> ApiResult<MrArgs> {
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

/// The `N` a local write names through its body's `_rev`, `?rev=` and `If-Match`, which
/// must agree (as for other documents).
pub fn local_rev(req: &Req, body_rev: Option<&Value>) -> ApiResult<Option<u64>> {
    let body = match body_rev {
        None => None,
        Some(Value::String(s)) => Some(local_rev_number(s)?),
        Some(_) => return Err(ApiError::bad_request("Invalid rev format")),
    };
    let query = req.params.get("rev").map(local_rev_number).transpose()?;
    if let (Some(q), Some(b)) = (query, body) {
        if q != b {
            return Err(ApiError::bad_request(
                "Document rev from request body and query string have different values",
            ));
        }
    }
    let if_match = etag_value(&req.headers, header::IF_MATCH)
        .map(|s| local_rev_number(&s))
        .transpose()?;
    let explicit = body.or(query);
    if let (Some(m), Some(e)) = (if_match, explicit) {
        if m != e {
            return Err(ApiError::bad_request(
                "Document rev and etag have different values",
            ));
        }
    }
    Ok(explicit.or(if_match))
}
