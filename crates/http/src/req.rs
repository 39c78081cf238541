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

    /// These parameters with `first` taking precedence (a POST body over the query string).
    pub fn merged(&self, first: Vec<(String, String)>) -> Params {
        let mut all = first;
        all.extend(self.0.iter().cloned());
        Params(all)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    /// The first of several spellings that is present (`startkey` / `start_key`).
    pub fn get_any<'a, 'k>(&'a self, ks: &[&'k str]) -> Option<(&'k str, &'a str)> {
        ks.iter().find_map(|k| self.get(k).map(|v| (*k, v)))
    }

    pub fn bool(&self, k: &str) -> ApiResult<Option<bool>> {
        match self.get(k) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(v) => Err(ApiError::QueryParse(format!(
                "Invalid boolean parameter: \"{v}\""
            ))),
        }
    }

    pub fn flag(&self, k: &str) -> ApiResult<bool> {
        Ok(self.bool(k)?.unwrap_or(false))
    }

    pub fn uint(&self, k: &str) -> ApiResult<Option<u64>> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                ApiError::QueryParse(format!("Invalid value for positive integer: \"{v}\""))
            }),
        }
    }

    pub fn json(&self, k: &str) -> ApiResult<Option<Value>> {
        self.get(k).map(|v| parse_param_json(k, v)).transpose()
    }

    pub fn json_any(&self, ks: &[&str]) -> ApiResult<Option<Value>> {
        self.get_any(ks)
            .map(|(k, v)| parse_param_json(k, v))
            .transpose()
    }

    /// A POST body's members as parameters, taking precedence over these (CouchDB accepts
    /// `keys` and any query parameter in the body). Doc ids and `stale`/`update` are taken
    /// as text, everything else as JSON.
    pub fn with_body(&self, body: &Value) -> ApiResult<Params> {
        let obj = body
            .as_object()
            .ok_or_else(|| ApiError::bad_request("Request body must be a JSON object"))?;
        let pairs = obj
            .iter()
            .map(|(k, v)| {
                let text = match (k.as_str(), v) {
                    (
                        "startkey_docid" | "start_key_docid" | "endkey_docid" | "end_key_docid"
                        | "stale" | "update",
                        Value::String(s),
                    ) => s.clone(),
                    (_, v) => v.to_string(),
                };
                (k.clone(), text)
            })
            .collect();
        Ok(self.merged(pairs))
    }

    /// Rejects parameters Settee knows but does not implement on this route.
    pub fn reject(&self, names: &[&str], context: &str) -> ApiResult<()> {
        for n in names {
            if self.get(n).is_some() {
                return Err(ApiError::bad_request(format!(
                    "`{n}` is not supported {context} by this Settee version"
                )));
            }
        }
        Ok(())
    }
}

fn parse_param_json(k: &str, v: &str) -> ApiResult<Value> {
    serde_json::from_str(v)
        .map_err(|_| ApiError::QueryParse(format!("Invalid JSON value for `{k}`: {v}")))
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
