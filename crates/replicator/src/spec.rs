//! A replication request (`POST /_replicate`'s body), parsed and checked as CouchDB's
//! `couch_replicator_parse` checks it, with its error texts. Pure.

use crate::endpoint::Filter;
use crate::job::Options;
use crate::Error;
use serde_json::{Map, Value};
use std::time::Duration;

/// A `source` or `target`.
#[derive(Clone, Debug, PartialEq)]
pub enum PeerSpec {
    /// A database of this server named without a URL (`_replicate` only).
    Name(String),
    Url {
        url: String,
        headers: Map<String, Value>,
        /// `auth: {"basic": {"username", "password"}}`.
        basic: Option<(String, String)>,
    },
}

/// A parsed replication request.
#[derive(Clone, Debug)]
pub struct Request {
    /// `None` only in a cancel request naming the replication by id.
    pub source: Option<PeerSpec>,
    pub target: Option<PeerSpec>,
    pub options: Options,
    pub cancel: bool,
    /// `replication_id` / `_local_id` / `id`, with `+` restored where a URL made it a space.
    pub id: Option<String>,
    /// A user filter's `ddoc/name`, whose source code the replication id needs.
    pub filter_function: Option<(String, String)>,
    pub retries: u32,
    /// Connections kept open to each HTTP peer.
    pub http_connections: u64,
}

fn bad(msg: &str) -> Error {
    Error::BadRequest(msg.to_string())
}

fn boolean(body: &Map<String, Value>, key: &str) -> Result<Option<bool>, Error> {
    match body.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(bad(&format!("parameter `{key}` must be a boolean"))),
    }
}

/// An integer option: a JSON integer or a string of one.
fn integer(body: &Map<String, Value>, key: &str, default: u64) -> Result<u64, Error> {
    match body.get(key) {
        None => Ok(default),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or(default)),
        Some(Value::String(s)) if s.trim().parse::<u64>().is_ok() => {
            Ok(s.trim().parse().unwrap_or(default))
        }
        Some(_) => Err(Error::Invalid(format!(
            "parameter `{key}` must be an integer"
        ))),
    }
}

fn peer(v: Option<&Value>) -> Result<Option<PeerSpec>, Error> {
    let invalid = || Error::Invalid("endpoint has an invalid url".into());
    let is_url = |s: &str| s.starts_with("http://") || s.starts_with("https://");
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if is_url(s) => Ok(Some(PeerSpec::Url {
            url: s.clone(),
            headers: Map::new(),
            basic: None,
        })),
        Some(Value::String(s)) => Ok(Some(PeerSpec::Name(s.clone()))),
        Some(Value::Object(o)) => {
            let url = o.get("url").and_then(Value::as_str).ok_or_else(invalid)?;
            if !is_url(url) {
                return Ok(Some(PeerSpec::Name(url.to_string())));
            }
            let headers = match o.get("headers") {
                None => Map::new(),
                Some(Value::Object(h)) => h.clone(),
                Some(_) => return Err(invalid()),
            };
            let basic = o.get("auth").and_then(|a| a.get("basic")).and_then(|b| {
                Some((
                    b.get("username")?.as_str()?.to_string(),
                    b.get("password")?.as_str()?.to_string(),
                ))
            });
            Ok(Some(PeerSpec::Url {
                url: url.to_string(),
                headers,
                basic,
            }))
        }
        Some(_) => Err(invalid()),
    }
}

/// Percent-decodes a `doc_ids` entry, as CouchDB does before using it.
fn unquote(id: &str) -> String {
    percent_encoding::percent_decode_str(id)
        .decode_utf8_lossy()
        .into_owned()
}

impl Request {
    pub fn parse(body: &Map<String, Value>) -> Result<Request, Error> {
        let cancel = boolean(body, "cancel")?.unwrap_or(false);
        let id = ["replication_id", "_local_id", "id"]
            .iter()
            .find_map(|k| body.get(*k))
            .and_then(Value::as_str)
            .map(|s| s.replace(' ', "+"));
        let continuous = boolean(body, "continuous")?.unwrap_or(false);
        let create_target = boolean(body, "create_target")?.unwrap_or(false);
        let create_target_params = match body.get("create_target_params") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Err(bad(
                    "parameter `create_target_params` must be a JSON object",
                ))
            }
        };
        let winning_revs_only = boolean(body, "winning_revs_only")?.unwrap_or(false);
        boolean(body, "use_bulk_get")?;
        let query_params = match body.get("query_params") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(bad("parameter `query_params` must be an object")),
        };
        let doc_ids = match body.get("doc_ids") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => {
                let mut ids: Vec<String> = a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(unquote)
                            .ok_or_else(|| bad("parameter `doc_ids` must be an array"))
                    })
                    .collect::<Result<_, _>>()?;
                ids.sort();
                ids.dedup();
                Some(ids)
            }
            Some(_) => return Err(bad("parameter `doc_ids` must be an array")),
        };
        let selector = match body.get("selector") {
            None => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(_) => return Err(bad("parameter `selector` must be a JSON object")),
        };
        let filter_name = body
            .get("filter")
            .and_then(Value::as_str)
            .filter(|f| !f.is_empty());
        let named = [
            doc_ids.is_some(),
            body.get("filter").is_some_and(|f| !f.is_null()),
            selector.is_some(),
        ];
        if named.iter().filter(|b| **b).count() > 1 {
            return Err(bad("`doc_ids`,`filter`,`selector` are mutually exclusive"));
        }
        let mut filter_function = None;
        let filter = match (doc_ids, selector, filter_name) {
            (Some(ids), _, _) => Filter::DocIds(ids),
            (_, Some(s), _) => Filter::Selector(s),
            (_, _, Some(name)) => {
                if !name.starts_with('_') {
                    match name.split_once('/') {
                        Some((d, f)) if !d.is_empty() && !f.is_empty() => {
                            filter_function = Some((d.to_string(), f.to_string()))
                        }
                        _ => {
                            return Err(Error::Invalid(
                                "Invalid filter. Must match `ddocname/filtername`.".into(),
                            ))
                        }
                    }
                }
                Filter::Design {
                    name: name.to_string(),
                    query_params,
                }
            }
            _ => Filter::All,
        };
        let ms = |key: &str, default: u64| integer(body, key, default).map(Duration::from_millis);
        let options = Options {
            continuous,
            filter,
            since_seq: body.get("since_seq").cloned(),
            use_checkpoints: body.get("use_checkpoints") != Some(&Value::Bool(false)),
            checkpoint_interval: ms("checkpoint_interval", 30_000)?,
            connection_timeout: ms("connection_timeout", 30_000)?,
            batch_size: integer(body, "worker_batch_size", 500)?.max(1) as usize,
            workers: integer(body, "worker_processes", 4)?.clamp(1, 64) as usize,
            winning_revs_only,
            create_target,
            create_target_params,
            requested_at: None,
            record_target_seq: crate::job::TargetSeq::Never,
        };
        let by_id = cancel && id.is_some();
        let (source, target) = if by_id {
            (None, None)
        } else {
            let missing = || Error::Invalid("Missing replicator database".into());
            (
                Some(peer(body.get("source"))?.ok_or_else(missing)?),
                Some(peer(body.get("target"))?.ok_or_else(missing)?),
            )
        };
        Ok(Request {
            source,
            target,
            options,
            cancel,
            id,
            filter_function,
            retries: integer(body, "retries_per_request", 5)? as u32,
            http_connections: integer(body, "http_connections", 20)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Request, String> {
        Request::parse(v.as_object().unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn couchdb_errors() {
        let base = |extra: Value| {
            let mut b = json!({"source": "a", "target": "http://h/b"});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            parse(b)
        };
        assert_eq!(
            base(json!({"continuous": 1})).unwrap_err(),
            "parameter `continuous` must be a boolean"
        );
        assert_eq!(
            base(json!({"doc_ids": "x"})).unwrap_err(),
            "parameter `doc_ids` must be an array"
        );
        assert_eq!(
            base(json!({"doc_ids": ["a"], "selector": {}})).unwrap_err(),
            "`doc_ids`,`filter`,`selector` are mutually exclusive"
        );
        assert_eq!(
            base(json!({"filter": "nofilter"})).unwrap_err(),
            "Invalid filter. Must match `ddocname/filtername`."
        );
        assert_eq!(
            parse(json!({"source": "a"})).unwrap_err(),
            "Missing replicator database"
        );
        let r = base(json!({"doc_ids": ["b%2Fc", "a", "a"], "worker_batch_size": "20"})).unwrap();
        assert_eq!(
            r.options.filter,
            Filter::DocIds(vec!["a".into(), "b/c".into()])
        );
        assert_eq!(r.options.batch_size, 20);
        assert_eq!(r.source, Some(PeerSpec::Name("a".into())));
        let c = parse(json!({"cancel": true, "replication_id": "abc continuous"})).unwrap();
        assert_eq!((c.id.as_deref(), c.source), (Some("abc+continuous"), None));
    }
}
