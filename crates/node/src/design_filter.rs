//! Design-document filter functions (`filter=ddoc/name`) for `_changes` and for replication
//! from a database of this server: the function's design document, CouchDB's request
//! object, the documents a change offers the function, and the compiled functions each
//! thread keeps.
//!
//! As CouchDB (`couch_changes:filter/3` with a `custom` filter): the design document is read
//! once, when the feed starts, and that revision serves the whole feed. A change offers its
//! winning revision (with `_conflicts`), or with `style=all_docs` every leaf (without), each
//! as `couch_doc:to_json_obj(Doc, [{revs, 20}])` renders a revision opened from the change's
//! `doc_info`: `_revisions` names only the revision itself. The revisions the function
//! passes are the change's `changes`; a change none passes is left out and does not count
//! toward `limit`. The function is compiled at the first document it filters, so a source
//! that does not compile fails a feed only once there is a change to filter.

use crate::{doc_json, winner_json_with, DocOpts};
use crate::{Error, Node, Result};
use serde_json::{Map, Value};
use settee_auth::UserCtx;
use settee_core::recent::Recent;
use settee_core::Rev;
use settee_db::{Change, Database, OpenDoc};
use settee_js::{FilterFn, FilterSource, Limits};
use std::cell::RefCell;
use std::sync::Arc;

/// A filter function of a design document, ready to run over one feed's changes.
#[derive(Clone)]
pub struct DesignFilter {
    node: Arc<Node>,
    db_name: String,
    /// The design document as read when the feed started, and the function's name.
    source: Arc<FilterSource>,
    /// The design document's revision: with the database, id and name, what keys the
    /// compiled function.
    rev: String,
    limits: Limits,
    /// CouchDB's request object, but for `info` and `uuid` (see [`Running`]).
    req: Arc<Value>,
    /// The design document's language when a query server runs it (not JavaScript).
    external: Option<String>,
}

impl std::fmt::Debug for DesignFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DesignFilter({}/{})",
            self.source.ddoc_id, self.source.name
        )
    }
}

impl DesignFilter {
    /// Reads `_design/{ddoc}` and checks it has `filters.{name}`, with CouchDB's 404s (see
    /// [`check_member`]). Runs on a blocking thread.
    pub fn load(
        node: &Arc<Node>,
        db: &Database,
        ddoc: &str,
        name: &str,
        req: &ReqInfo,
    ) -> Result<DesignFilter> {
        let (doc, body) = open_design(db, ddoc)?;
        check_member(&body, &["filters", name])?;
        let ddoc_json: Value = serde_json::from_slice(&doc_json(&doc, &DocOpts::default()))
            .map_err(|e| Error::internal(e.to_string()))?;
        let rev = doc.rev.to_string();
        Ok(DesignFilter::of(
            node,
            db,
            ddoc_json,
            rev,
            name,
            req.to_json(db),
        ))
    }

    /// The filter `name` of design document `design` (its JSON with `_id` and `_rev`)
    /// a shard copy's coordinator gives, with the request object `req` it made (without
    /// `info` and `uuid`, which the copy adds: its own information, as CouchDB's shards).
    pub fn given(
        node: &Arc<Node>,
        db: &Database,
        design: Value,
        name: &str,
        req: Value,
    ) -> Result<DesignFilter> {
        check_member(&design, &["filters", name])?;
        let rev = design["_rev"].as_str().unwrap_or_default().to_owned();
        Ok(DesignFilter::of(node, db, design, rev, name, req))
    }

    fn of(
        node: &Arc<Node>,
        db: &Database,
        ddoc: Value,
        rev: String,
        name: &str,
        req: Value,
    ) -> DesignFilter {
        let external = match ddoc.get("language").and_then(Value::as_str) {
            Some(language) if settee_js::Dialect::of(Some(language)).is_none() => {
                Some(language.to_owned())
            }
            _ => None,
        };
        DesignFilter {
            node: node.clone(),
            db_name: db.name.clone(),
            source: Arc::new(FilterSource {
                ddoc_id: ddoc["_id"].as_str().unwrap_or_default().to_owned(),
                ddoc,
                name: name.to_string(),
            }),
            rev,
            limits: node.views.limits(),
            req: Arc::new(req),
            external,
        }
    }

    /// Starts one pass over changes (one blocking task's worth).
    pub fn start(&self) -> Running<'_> {
        Running {
            filter: self,
            fun: None,
            req: None,
        }
    }

    fn key(&self) -> Key {
        Key {
            db: self.db_name.clone(),
            ddoc_id: self.source.ddoc_id.clone(),
            rev: self.rev.clone(),
            name: self.source.name.clone(),
            limits: self.limits,
        }
    }
}

/// What identifies a compiled function.
#[derive(Clone, PartialEq)]
struct Key {
    db: String,
    ddoc_id: String,
    rev: String,
    name: String,
    limits: Limits,
}

/// Compiled functions cached per (blocking) thread, most recently used last.
const CACHED_FILTERS: usize = 4;

thread_local! {
    /// Filter functions compiled on this thread: a feed's passes (and other requests
    /// naming the same function of the same design document revision) reuse them.
    /// One in use is taken out and put back when its [`Running`] ends; one whose call
    /// failed is dropped, as CouchDB stops a query server process whose prompt failed.
    static COMPILED: RefCell<Recent<Key, FilterFn>> =
        const { RefCell::new(Recent::new(CACHED_FILTERS)) };
}

/// One pass of a [`DesignFilter`] over changes, on one thread.
pub struct Running<'f> {
    filter: &'f DesignFilter,
    fun: Option<FilterFn>,
    /// The request object with this pass's `info`, built at the first change.
    req: Option<Value>,
}

impl Running<'_> {
    /// The revisions of `c` the function passes: the winner, or with `all_docs` every leaf.
    pub fn passes(&mut self, db: &Database, c: &Change, all_docs: bool) -> Result<Vec<Rev>> {
        let (revs, docs) = if all_docs {
            leaf_docs(db, c)?
        } else {
            winner_doc(c)?
        };
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let req = self.request(db)?;
        if let Some(language) = &self.filter.external {
            let passes = self.external(language, &docs, req)?;
            return Ok(revs
                .into_iter()
                .zip(passes)
                .filter_map(|(rev, pass)| pass.then_some(rev))
                .collect());
        }
        let fun = self.function()?;
        let passes = match fun.filter(&docs, &req) {
            Ok(passes) => passes,
            Err(e) => {
                // A failed function is not reused (see `COMPILED`).
                self.fun = None;
                return Err(e.into());
            }
        };
        Ok(revs
            .into_iter()
            .zip(passes)
            .filter_map(|(rev, pass)| pass.then_some(rev))
            .collect())
    }

    /// Runs the filter in the language's query server: `[true, [pass, ..]]`, each pass
    /// truthy as CouchDB reads it (`true` only).
    fn external(&self, language: &str, docs: &[Value], req: Value) -> Result<Vec<bool>> {
        let f = self.filter;
        let ddoc = settee_views::queryserver::DdocRef {
            id: &f.source.ddoc_id,
            rev: &f.rev,
            body: &f.source.ddoc,
        };
        let qs = &f.node.views.query_servers;
        let answer = qs
            .filter(language, &ddoc, &f.source.name, docs, req)
            .map_err(|e| Error::Views(settee_views::Error::QueryServer(e)))?;
        match answer.as_array().map(Vec::as_slice) {
            Some([Value::Bool(true), Value::Array(passes)]) if passes.len() == docs.len() => {
                Ok(passes.iter().map(|p| *p == Value::Bool(true)).collect())
            }
            _ => Err(Error::Views(settee_views::Error::QueryServer(
                settee_views::queryserver::Error::Garbage(format!("filter answer {answer}")),
            ))),
        }
    }

    /// The request object for one change: this pass's `info`, and a fresh `uuid` (CouchDB
    /// builds the object for every change it filters).
    fn request(&mut self, db: &Database) -> Result<Value> {
        let req = match &mut self.req {
            Some(req) => req,
            slot => {
                let mut req = (*self.filter.req).clone();
                req["info"] = self.filter.node.db_info(db);
                slot.insert(req)
            }
        };
        let uuid = self.filter.node.uuids(1)?.pop().unwrap_or_default();
        req["uuid"] = Value::String(uuid);
        Ok(req.clone())
    }

    /// The compiled function: this pass's, this thread's cached one, or a new one.
    fn function(&mut self) -> Result<&mut FilterFn> {
        if self.fun.is_none() {
            let key = self.filter.key();
            let cached = COMPILED.with_borrow_mut(|cache| cache.take(&key));
            let fun = match cached {
                Some(fun) => fun,
                None => FilterFn::new(&self.filter.source, self.filter.limits)?,
            };
            self.fun = Some(fun);
        }
        Ok(self.fun.as_mut().expect("set above"))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let Some(fun) = self.fun.take() else {
            return;
        };
        let key = self.filter.key();
        COMPILED.with_borrow_mut(|cache| cache.put(key, fun));
    }
}

/// The options a revision opened from a change's `doc_info` is rendered with: its own
/// revision id in `_revisions`, and (for the winner) the live conflicts.
fn revision_opts(conflicts: bool) -> DocOpts {
    DocOpts {
        revs: true,
        revs_limit: Some(1),
        conflicts,
        ..DocOpts::default()
    }
}

fn parse(json: &[u8]) -> Result<Value> {
    serde_json::from_slice(json).map_err(|e| Error::internal(e.to_string()))
}

/// The winning revision, with `_conflicts`.
fn winner_doc(c: &Change) -> Result<(Vec<Rev>, Vec<Value>)> {
    let winner = c.info.tree.winner().expect("stored docs have a winner");
    let body = c.body.as_deref().unwrap_or(b"{}");
    let json = winner_json_with(&c.id, &c.info, body, &revision_opts(true), None);
    Ok((vec![winner.rev], vec![parse(&json)?]))
}

/// Every leaf, deleted ones too, in the order the change lists them. A leaf whose body
/// cannot be read is left out, as CouchDB's `open_revs` leaves out what fails to open.
fn leaf_docs(db: &Database, c: &Change) -> Result<(Vec<Rev>, Vec<Value>)> {
    let mut revs = Vec::new();
    let mut docs = Vec::new();
    for leaf in c.info.tree.leaves() {
        let Some(body) = db.body_of(&c.info, &leaf.rev)? else {
            continue;
        };
        let doc = OpenDoc {
            id: c.id.clone(),
            rev: leaf.rev.clone(),
            deleted: leaf.deleted,
            body,
            info: c.info.clone(),
        };
        docs.push(parse(&doc_json(&doc, &revision_opts(false)))?);
        revs.push(leaf.rev);
    }
    Ok((revs, docs))
}

/// `_design/{name}` and its body, with CouchDB's 404s: `missing`, or `deleted`.
pub fn open_design(db: &Database, name: &str) -> Result<(OpenDoc, Value)> {
    let doc = db.open_doc(&format!("_design/{name}"), None)?;
    let body = serde_json::from_slice(settee_core::split_stored(&doc.body).0)
        .map_err(|_| Error::internal("stored body"))?;
    Ok((doc, body))
}

/// Checks that a design document's body has the member at `path`, with CouchDB's 404s
/// (`couch_util:get_nested_json_value`): `missing json key: K` for the first absent key,
/// `json_mismatch` where a value on the way is not an object.
pub fn check_member(body: &Value, path: &[&str]) -> Result<()> {
    let mut at = body;
    for key in path {
        let Value::Object(members) = at else {
            return Err(Error::NotFound("json_mismatch".into()));
        };
        at = members
            .get(*key)
            .ok_or_else(|| Error::NotFound(format!("missing json key: {key}")))?;
    }
    Ok(())
}

/// What CouchDB's request object (`chttpd_external:json_req_obj`) tells a filter about the
/// request it runs for; the database's parts are added by [`ReqInfo::to_json`].
#[derive(Clone)]
pub struct ReqInfo {
    pub method: String,
    /// The path's segments, decoded (`requested_path` and `path`).
    pub path: Vec<String>,
    /// The path and query string as sent.
    pub raw_path: String,
    /// The query string's parameters, in order.
    pub query: Vec<(String, String)>,
    /// Header names as clients usually write them (`Content-Type`), values as sent; a
    /// repeated header's values joined with `, `, as mochiweb keeps them.
    pub headers: Vec<(String, String)>,
    /// `"undefined"` without a body, else the body (a `_changes` POST's JSON object).
    pub body: Value,
    pub peer: String,
    pub cookie: Vec<(String, String)>,
    pub user: UserCtx,
    /// The document a show or update function is asked about (`id`).
    pub id: Option<String>,
    /// A `PUT` or `POST` body sent as `application/x-www-form-urlencoded`, decoded (`form`).
    pub form: Vec<(String, String)>,
}

impl ReqInfo {
    /// The request object with a fresh `uuid`; `info` is left `null` for the renderer,
    /// which reads it only when a function does (`http`'s `design_render::with_renderer`).
    pub fn render_json(&self, node: &Node, db: &Database) -> Result<Value> {
        let mut req = self.to_json(db);
        req["uuid"] = Value::String(node.next_uuid()?);
        Ok(req)
    }

    /// [`ReqInfo::render_json`] for a database a design function runs for (a node's or
    /// a clustered one).
    pub fn render_json_for(&self, node: &Node, db: &crate::render::FnDb) -> Result<Value> {
        let mut req = self.to_json_for(&db.name, &db.security);
        req["uuid"] = Value::String(node.next_uuid()?);
        Ok(req)
    }

    /// The request CouchDB's replicator makes of a source's `_changes` for a filtered
    /// replication reading after `since` (waiting for changes when `wait` is given):
    /// `GET /{db}/_changes` with `filter` and `query_params` (their values as text, as a
    /// query string carries them; a parameter never replaces the replicator's own `feed`,
    /// `style` and `since`), made as `user`.
    pub fn for_replication(
        db: &str,
        filter: &str,
        params: &Map<String, Value>,
        since: &Value,
        wait: Option<std::time::Duration>,
        user: &UserCtx,
    ) -> ReqInfo {
        let feed = if wait.is_some() { "longpoll" } else { "normal" };
        // JSON, as CouchDB's replicator puts it in the query string (`0` or a quoted seq).
        let since = since.to_string();
        let base = [
            ("feed", feed.to_string()),
            ("style", "all_docs".into()),
            ("since", since),
        ];
        let mut query = vec![("filter".to_string(), filter.to_string())];
        for (k, v) in params {
            if k == "filter" || base.iter().any(|(b, _)| b == k) {
                continue;
            }
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            query.push((k.clone(), text));
        }
        query.extend(base.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let qs = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&query)
            .finish();
        let encoded = percent_encoding::utf8_percent_encode(db, percent_encoding::NON_ALPHANUMERIC);
        ReqInfo {
            method: "GET".into(),
            path: vec![db.to_string(), "_changes".into()],
            raw_path: format!("/{encoded}/_changes?{qs}"),
            query,
            headers: vec![
                ("Accept".into(), "application/json".into()),
                (
                    "User-Agent".into(),
                    concat!("Settee/", env!("CARGO_PKG_VERSION")).into(),
                ),
            ],
            body: Value::String("undefined".into()),
            peer: "127.0.0.1".into(),
            cookie: Vec::new(),
            user: user.clone(),
            id: None,
            form: Vec::new(),
        }
    }

    /// The request object without `info` and `uuid` (`null` here; see [`Running`]), in
    /// CouchDB's member order.
    fn to_json(&self, db: &Database) -> Value {
        self.to_json_for(&db.name, &db.props().security)
    }

    /// [`ReqInfo::to_json`] of database `db` (its name as `userCtx.db`) whose security
    /// object is `security`: what a coordinator gives the copies of a clustered database
    /// whose feed runs a filter function (each adds its own `info`, as CouchDB's shards).
    pub fn to_json_for(&self, db: &str, security: &Value) -> Value {
        let path: Vec<Value> = self.path.iter().cloned().map(Value::String).collect();
        let pairs = |list: &[(String, String)]| {
            Value::Object(
                list.iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            )
        };
        // `chttpd_external:json_query_keys`: these parameters are JSON.
        let query: Map<String, Value> = self
            .query
            .iter()
            .map(|(k, v)| {
                let value = match k.as_str() {
                    "key" | "startkey" | "endkey" | "descending" => serde_json::from_str(v).ok(),
                    _ => None,
                };
                (k.clone(), value.unwrap_or_else(|| Value::String(v.clone())))
            })
            .collect();
        serde_json::json!({
            "info": null,
            "uuid": null,
            "id": self.id,
            "method": method_json(&self.method),
            "requested_path": path,
            "path": path,
            "raw_path": self.raw_path,
            "query": query,
            "headers": pairs(&self.headers),
            "body": self.body,
            "peer": self.peer,
            "form": pairs(&self.form),
            "cookie": pairs(&self.cookie),
            "userCtx": self.user.to_json(Some(db)),
            "secObj": security,
        })
    }
}

/// A request method as CouchDB hands it to functions: HEAD is GET (chttpd aliases it, the
/// body is dropped later), the methods Erlang knows as atoms are strings, and any other is
/// the Erlang string it stays, a list of character codes in JSON (`PATCH` is
/// `[80,65,84,67,72]`).
fn method_json(method: &str) -> Value {
    match method {
        "HEAD" => Value::from("GET"),
        "GET" | "POST" | "PUT" | "DELETE" | "OPTIONS" | "TRACE" | "COPY" => Value::from(method),
        other => Value::Array(other.bytes().map(Value::from).collect()),
    }
}
