//! Request parsing: query parameters with CouchDB's error messages, bodies, content types.

use crate::error::{ApiError, ApiResult};
use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use serde_json::Value;

/// Query parameters in order of appearance.
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn parse(query: Option<&str>) -> Params {
        Params(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    /// The first of several spellings that is present (`startkey` / `start_key`).
    pub fn get_any<'a, 'k>(&'a self, ks: &[&'k str]) -> Option<(&'k str, &'a str)> {
        ks.iter().find_map(|k| self.get(k).map(|v| (*k, v)))
    }

    /// Sets `k` to `v`, replacing every earlier value.
    pub fn set(&mut self, k: &str, v: &str) {
        self.0.retain(|(n, _)| n != k);
        self.0.push((k.to_owned(), v.to_owned()));
    }

    /// All parameters in order of appearance.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// CouchDB's `parse_boolean` (views, `_all_docs`, `_all_dbs`): `true`/`false` in any
    /// letter case, else `400 query_parse_error`.
    pub fn bool(&self, k: &str) -> ApiResult<Option<bool>> {
        self.get(k)
            .map(|v| crate::mrargs::parse_boolean(crate::mrargs::Val::Text(v)))
            .transpose()
    }

    pub fn flag(&self, k: &str) -> ApiResult<bool> {
        Ok(self.bool(k)?.unwrap_or(false))
    }

    /// CouchDB's rule for document and `_changes` options (`revs=true`, ...): on only for
    /// exactly `true`; any other value is ignored, as CouchDB ignores it.
    pub fn is_true(&self, k: &str) -> bool {
        self.get(k) == Some("true")
    }

    /// CouchDB's `parse_pos_int`: a non-negative integer.
    pub fn uint(&self, k: &str) -> ApiResult<Option<u64>> {
        self.get(k)
            .map(|v| crate::mrargs::parse_pos_int(crate::mrargs::Val::Text(v)))
            .transpose()
    }

    pub fn json(&self, k: &str) -> ApiResult<Option<Value>> {
        self.get(k).map(decode_param_json).transpose()
    }

    pub fn json_any(&self, ks: &[&str]) -> ApiResult<Option<Value>> {
        self.get_any(ks)
            .map(|(_, v)| decode_param_json(v))
            .transpose()
    }
}

impl FromIterator<(String, String)> for Params {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Params {
        Params(pairs.into_iter().collect())
    }
}

/// A JSON query parameter, decoded; text that is not JSON is CouchDB's `400 bad_request`
/// "invalid UTF-8 JSON", as for a body.
pub fn decode_param_json(v: &str) -> ApiResult<Value> {
    serde_json::from_str(v).map_err(|_| ApiError::bad_request("invalid UTF-8 JSON"))
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
    serde_json::from_slice(bytes).map_err(|_| ApiError::bad_request("invalid UTF-8 JSON"))
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
