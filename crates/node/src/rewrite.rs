//! `_rewrite` (CouchDB 3.5's `chttpd_rewrite`, deprecated there but served): what a
//! design document's `rewrites` make of a request. An array of rules is matched by
//! [`settee_core::rewrite`]; a string is a rewrite function, given CouchDB's request
//! object (without `info`, `form`, `uuid` and `id`) and answering a new `path` (with
//! `query`, `method`, `headers`, `body`) or a response of its own (`code`, `headers`,
//! `body`). Routing the new request again (authentication, access, further rewrites)
//! is the caller's.
//!
//! Threading: everything here blocks (the design document's read, JavaScript).

use crate::render::{rewrite_answer, DesignDoc, FnDb};
use crate::{Error, Node, Result};
use serde_json::{Map, Value};
use settee_core::reduce::reason_text;
use settee_core::rewrite::{self, RewriteError};
use settee_db::Database;
use std::sync::Arc;

/// Why a rewrite failed, as CouchDB names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The design document has no usable `rewrites`, or its function matched nothing:
    /// 404 `rewrite_error` "Invalid path.".
    InvalidPath,
    /// The rules' failure.
    Rules(RewriteError),
    /// A function's answer CouchDB refuses: 500 `rewrite_error` with the reason.
    BadAnswer(String),
    /// A function's answer of no known shape: 500 `unknown_error`, the answer as reason.
    Unknown(String),
}

/// A design document's rewrites.
pub enum Rewrites {
    Rules(Vec<Value>),
    /// A rewrite function (in `body`'s `rewrites`).
    Function {
        design: Box<DesignDoc>,
        body: Value,
    },
}

/// A request's rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// Route this request instead: `method` (the same when `None`), `location` (path
    /// and query), `headers` set on top of the request's, `body` in place of its body.
    Route {
        method: Option<String>,
        location: String,
        headers: Vec<(String, String)>,
        body: Option<String>,
    },
    /// The function's own response (its `body`; the request's body when `None`).
    Respond {
        code: u16,
        headers: Vec<(String, String)>,
        body: Option<String>,
    },
}

fn failed(f: Failure) -> Error {
    Error::Rewrite(f)
}

fn bad(reason: impl Into<String>) -> Error {
    failed(Failure::BadAnswer(reason.into()))
}

impl Rewrites {
    /// The rewrites of design document `design` (however it was read).
    pub fn of(design: DesignDoc) -> Result<Rewrites> {
        let body = design.body()?;
        match body.get("rewrites") {
            Some(Value::Array(rules)) => Ok(Rewrites::Rules(rules.clone())),
            Some(Value::String(_)) => Ok(Rewrites::Function {
                design: Box::new(design),
                body,
            }),
            _ => Err(failed(Failure::InvalidPath)),
        }
    }
}

impl Node {
    /// Design document `ddoc`'s rewrites.
    pub fn rewrites(&self, db: &Database, ddoc: &str) -> Result<Rewrites> {
        Rewrites::of(DesignDoc::open(db, ddoc)?)
    }

    /// Where `rules` send `method` on `path` (the segments after `_rewrite`) with
    /// `query`, under `/{db}/_design/{ddoc}/`; `[chttpd] secure_rewrites` (default on)
    /// refuses rules climbing above the database.
    pub fn rewrite_by_rules(
        &self,
        (db, ddoc): (&str, &str),
        rules: &[Value],
        method: &str,
        path: &[String],
        query: &[(String, String)],
    ) -> Result<String> {
        let secure = self.config.chttpd("secure_rewrites").as_deref() != Some("false");
        let target = rewrite::apply_rules(rules, method, path, query, secure)
            .map_err(|e| failed(Failure::Rules(e)))?;
        Ok(rewrite::resolve(&encode(db), &encode(ddoc), &target))
    }

    /// What the rewrite function of `ddoc` makes of the request `req` (its query
    /// `query`, kept when the function gives none).
    pub fn rewrite_by_function(
        self: &Arc<Self>,
        db: &Arc<Database>,
        ddoc: &str,
        design: (&DesignDoc, &Value),
        req: Value,
        query: &[(String, String)],
    ) -> Result<Rewrite> {
        let db = FnDb::local(self, db);
        self.rewrite_by_function_in(&db, ddoc, design, req, query)
    }

    /// [`Node::rewrite_by_function`] for a database a design function runs for (a
    /// node's, or a clustered one).
    pub fn rewrite_by_function_in(
        self: &Arc<Self>,
        db: &FnDb,
        ddoc: &str,
        (design, body): (&DesignDoc, &Value),
        mut req: Value,
        query: &[(String, String)],
    ) -> Result<Rewrite> {
        if let Some(members) = req.as_object_mut() {
            for key in ["info", "form", "uuid", "id"] {
                members.shift_remove(key);
            }
        }
        let answer = rewrite_answer(self, db, design, body, &req)?;
        let rewrite = match answer {
            Value::Array(a) if a.len() == 1 && a[0] == "no_dispatch_rule" => {
                return Err(failed(Failure::InvalidPath))
            }
            Value::Array(mut a) if a.len() == 2 && a[0] == "ok" => match a.pop() {
                Some(Value::Object(o)) => o,
                _ => return Err(bad("bad rewrite")),
            },
            Value::Object(o) if o.len() == 1 && o.contains_key("forbidden") => {
                return Err(Error::Forbidden(reason_text(&o["forbidden"])))
            }
            Value::Object(o) if o.len() == 1 && o.contains_key("unauthorized") => {
                return Err(Error::Unauthorized(reason_text(&o["unauthorized"])))
            }
            other => return Err(failed(Failure::Unknown(other.to_string()))),
        };
        check_answer(&rewrite)?;
        let text = |k: &str| rewrite.get(k).and_then(Value::as_str);
        let strings = |k: &str| -> Vec<(String, String)> {
            let members = rewrite
                .get(k)
                .and_then(Value::as_object)
                .into_iter()
                .flatten();
            members
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        };
        let body = text("body").map(String::from);
        if let Some(code) = rewrite.get("code").and_then(Value::as_u64) {
            let headers = strings("headers");
            let code = code as u16;
            return Ok(Rewrite::Respond {
                code,
                headers,
                body,
            });
        }
        let path = text("path").ok_or_else(|| bad("Rewrite result must produce a new path."))?;
        let query = match rewrite.get("query") {
            Some(_) => strings("query"),
            None => query.to_vec(),
        };
        let qs: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", rewrite::quote_plus(k), rewrite::quote_plus(v)))
            .collect();
        let target = match qs.is_empty() {
            true => path.to_owned(),
            false => format!("{path}?{}", qs.join("&")),
        };
        Ok(Rewrite::Route {
            method: text("method").map(String::from),
            location: rewrite::resolve(&encode(&db.name), &encode(ddoc), &target),
            headers: strings("headers"),
            body,
        })
    }
}

/// CouchDB's checks of a rewrite function's answer (`validate_rewrite_response`).
fn check_answer(rewrite: &Map<String, Value>) -> Result<()> {
    for (key, value) in rewrite {
        let ok = match key.as_str() {
            "method" | "path" | "body" => value.is_string(),
            "headers" | "query" => {
                let Some(members) = value.as_object() else {
                    return Err(bad(format!("bad {key}")));
                };
                if let Some((k, v)) = members.iter().find(|(_, v)| !v.is_string()) {
                    return Err(bad(format!("object key/value must be strings {k}={v}")));
                }
                true
            }
            "code" => value.as_u64().is_some_and(|c| (200..600).contains(&c)),
            _ => true,
        };
        if !ok {
            return Err(bad(format!("bad {key}")));
        }
    }
    Ok(())
}

/// A name as a path segment of the rewritten request.
fn encode(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, SEGMENT).to_string()
}

const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
