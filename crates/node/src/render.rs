//! Design functions run for a request: shows, lists, updates and rewrites, in process
//! (the QuickJS [`Renderer`], cached per thread by design document revision) or in the
//! language's query server, with CouchDB's request object and its answers in the
//! query-server protocol's shapes. Reading those answers into an HTTP response is
//! `http`'s.
//!
//! Threading: everything here blocks (JavaScript, query-server round trips).

use crate::design_filter::ReqInfo;
use crate::{doc_json, DocOpts, Error, Node, Result};
use serde_json::{Map, Value};
use settee_auth::UserCtx;
use settee_core::recent::Recent;
use settee_db::{Database, OpenDoc};
use settee_js::{Limits, ListIo, RenderKind, RenderSource, Renderer};
use std::cell::RefCell;
use std::sync::Arc;

/// A design document whose render functions are called.
pub struct DesignDoc {
    pub id: String,
    pub rev: String,
    doc: Source,
}

/// Where a [`DesignDoc`]'s body is: stored in this node's database (read in full only
/// when a render environment is built), or given whole (read through a cluster).
enum Source {
    Stored(OpenDoc),
    /// The document with `_id` and `_rev`.
    Given(Value),
}

impl DesignDoc {
    /// Reads `_design/{name}` with CouchDB's 404s (`missing`, `deleted`).
    pub fn open(db: &Database, name: &str) -> Result<DesignDoc> {
        let doc = db.open_doc(&format!("_design/{name}"), None)?;
        Ok(DesignDoc {
            id: doc.id.clone(),
            rev: doc.rev.to_string(),
            doc: Source::Stored(doc),
        })
    }

    /// A design document read elsewhere (a clustered database's, through its
    /// coordinator): its JSON with `_id` and `_rev`.
    pub fn given(doc: Value) -> Result<DesignDoc> {
        let text = |k: &str| doc.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(id), Some(rev)) = (text("_id"), text("_rev")) else {
            return Err(Error::internal("a design document without _id or _rev"));
        };
        Ok(DesignDoc {
            id,
            rev,
            doc: Source::Given(doc),
        })
    }

    /// Reads `_design/{name}` of `db` through `fabric` (a clustered database's through
    /// its coordinator), with the 404s of a read.
    pub fn open_via(
        fabric: &dyn crate::Fabric,
        db: &str,
        user: &UserCtx,
        name: &str,
    ) -> Result<DesignDoc> {
        let read = fabric.open_doc(db, user, &format!("_design/{name}"), &Default::default())?;
        let text = match &read.body {
            crate::read::Rendered::Json(text) => text,
            crate::read::Rendered::Multipart { doc, .. } => doc,
        };
        DesignDoc::given(serde_json::from_slice(text).map_err(|e| Error::internal(e.to_string()))?)
    }

    /// The value of top-level member `member`, if any (only that member is read in full).
    fn member(&self, member: &str) -> Option<Value> {
        use serde_json::value::RawValue;
        match &self.doc {
            Source::Stored(doc) => {
                let members: std::collections::HashMap<String, &RawValue> =
                    serde_json::from_slice(settee_core::split_stored(&doc.body).0)
                        .unwrap_or_default();
                let raw = members.get(member)?;
                Some(serde_json::from_str(raw.get()).unwrap_or(Value::Null))
            }
            Source::Given(doc) => doc.get(member).cloned(),
        }
    }

    /// CouchDB's lookup of `{member}.{name}` before it runs the function (404 `missing
    /// json key: shows` without the member, `missing json key: {name}` without the
    /// function).
    pub fn require_function(&self, member: &str, name: &str) -> Result<()> {
        let Some(fns) = self.member(member) else {
            return Err(Error::NotFound(format!("missing json key: {member}")));
        };
        crate::design_filter::check_member(&fns, &[name])
    }

    /// The document as functions get it (`this`), with `_id` and `_rev`; only needed to
    /// build a render environment or teach a query server.
    pub fn body(&self) -> Result<Value> {
        match &self.doc {
            Source::Stored(doc) => serde_json::from_slice(&doc_json(doc, &DocOpts::default()))
                .map_err(|e| Error::internal(e.to_string())),
            Source::Given(doc) => Ok(doc.clone()),
        }
    }
}

/// The database a design function runs for, as its request object shows it: the name
/// (`userCtx.db`), the security object (`secObj`) and the information (`info`, read only
/// when a function asks for it). A node's own database, or a clustered one (its
/// coordinator's answers).
#[derive(Clone)]
pub struct FnDb {
    pub name: String,
    pub security: Value,
    pub info: Arc<dyn Fn() -> Value + Send + Sync>,
}

impl FnDb {
    /// A database of this node.
    pub fn local(node: &Arc<Node>, db: &Arc<Database>) -> FnDb {
        let (node, d) = (node.clone(), db.clone());
        FnDb {
            name: db.name.clone(),
            security: db.props().security,
            info: Arc::new(move || node.db_info(&d)),
        }
    }

    /// Database `name` as `fabric` serves it (a clustered one through its coordinator):
    /// its security object read now, its information when a function asks for it.
    /// Blocks (it may ask other members).
    pub fn via(fabric: Arc<dyn crate::Fabric>, name: &str) -> Result<FnDb> {
        let security = fabric.get_security(name)?;
        let n = name.to_owned();
        Ok(FnDb {
            name: name.to_owned(),
            security,
            info: Arc::new(move || fabric.db_info(&n).unwrap_or(Value::Null)),
        })
    }
}

/// What identifies a compiled design document on a thread.
#[derive(Clone, PartialEq)]
struct Key {
    db: String,
    ddoc_id: String,
    rev: String,
    limits: Limits,
}

/// Design documents' render environments cached per (blocking) thread, most recently used
/// last.
const CACHED_RENDERERS: usize = 4;

thread_local! {
    /// Render environments built on this thread, by database, design document and revision.
    /// One in use is taken out and put back when its call succeeded; one whose call failed
    /// is dropped, as CouchDB stops a query server whose prompt failed.
    static RENDERERS: RefCell<Recent<Key, Renderer>> =
        const { RefCell::new(Recent::new(CACHED_RENDERERS)) };
}

/// Runs `f` with the design document's render environment (this thread's, or a new one),
/// `req.info` being the database's information, read only if a function reads it.
pub fn with_renderer<T>(
    node: &Arc<Node>,
    db: &FnDb,
    ddoc: &DesignDoc,
    f: impl FnOnce(&mut Renderer) -> Result<T, settee_js::Rejection>,
) -> Result<T> {
    let key = Key {
        db: db.name.clone(),
        ddoc_id: ddoc.id.clone(),
        rev: ddoc.rev.clone(),
        limits: node.views.limits(),
    };
    let cached = RENDERERS.with_borrow_mut(|cache| cache.take(&key));
    let mut renderer = match cached {
        Some(r) => r,
        None => {
            let source = RenderSource {
                ddoc_id: ddoc.id.clone(),
                ddoc: ddoc.body()?,
            };
            Renderer::new(&source, key.limits).map_err(settee_js::Rejection::from)?
        }
    };
    let info = db.info.clone();
    renderer.set_info_source(Some(Box::new(move || info())));
    let out = f(&mut renderer);
    // A cached environment holds no database.
    renderer.set_info_source(None);
    let out = out?;
    RENDERERS.with_borrow_mut(|cache| cache.put(key, renderer));
    Ok(out)
}

/// What runs a design document's render functions, chosen by its `language`: the
/// in-process [`Renderer`] (JavaScript and CoffeeScript, in any case), or that language's
/// external query server (an unknown language is the query servers'
/// `unknown_query_language`).
enum Runner {
    InProcess,
    /// The language and the design document's body, as the server is taught it.
    External(String, Value),
}

impl Runner {
    fn of(ddoc: &DesignDoc) -> Result<Runner> {
        let language = ddoc.member("language");
        match language.as_ref().and_then(Value::as_str) {
            Some(language) if settee_js::Dialect::of(Some(language)).is_none() => {
                Ok(Runner::External(language.to_owned(), ddoc.body()?))
            }
            _ => Ok(Runner::InProcess),
        }
    }
}

/// Fails as running a function of `ddoc` would when nothing runs its language (a list
/// checks this before its view's query starts, as CouchDB gets the list's process first).
pub fn require_runner(node: &Node, ddoc: &DesignDoc) -> Result<()> {
    match Runner::of(ddoc)? {
        Runner::External(language, _) if !node.views.query_servers.knows(&language) => Err(
            qs_error(settee_views::queryserver::Error::UnknownLanguage(language)),
        ),
        _ => Ok(()),
    }
}

/// An external server's request object: unlike the renderer, which reads `info` only
/// when a function does, a server gets it filled in, as CouchDB sends it.
fn external_req(db: &FnDb, req: &Value) -> Value {
    let mut req = req.clone();
    if let Value::Object(members) = &mut req {
        members.insert("info".into(), (db.info)());
    }
    req
}

fn qs_error(e: settee_views::queryserver::Error) -> Error {
    Error::Views(settee_views::Error::QueryServer(e))
}

fn ddoc_ref<'a>(ddoc: &'a DesignDoc, body: &'a Value) -> settee_views::queryserver::DdocRef<'a> {
    settee_views::queryserver::DdocRef {
        id: &ddoc.id,
        rev: &ddoc.rev,
        body,
    }
}

/// Runs the show or update function `name` (`kind` is [`RenderKind::Show`] or
/// [`RenderKind::Update`]) on `doc` (`null` for none), in the design document's language:
/// the protocol's `["resp", resp]` for a show, `["up", doc or null, resp]` for an update.
pub fn doc_answer(
    node: &Arc<Node>,
    db: &FnDb,
    ddoc: &DesignDoc,
    kind: RenderKind,
    name: &str,
    doc: &Value,
    req: &Value,
) -> Result<Value> {
    match Runner::of(ddoc)? {
        Runner::InProcess => with_renderer(node, db, ddoc, |r| match kind {
            RenderKind::Update => r.update(name, doc, req),
            _ => r.show(name, doc, req),
        }),
        Runner::External(language, body) => node
            .views
            .query_servers
            .ddoc_call(
                &language,
                &ddoc_ref(ddoc, &body),
                &[kind.member(), name],
                serde_json::json!([doc, external_req(db, req)]),
            )
            .map_err(qs_error),
    }
}

/// Runs the list `name` over `io`'s rows, in the design document's language, as
/// [`Renderer::list`] does: the intermediate answers (`["start", ..]`, `["chunks", ..]`)
/// go to `io.send`, the last (`["end", ..]`) is returned. An external list holds its
/// server's process until it ends, prompting `list_row` for each row and `list_end` after
/// the last (the list may end itself earlier by answering a row with `end`).
pub fn list_answer(
    node: &Arc<Node>,
    db: &FnDb,
    ddoc: &DesignDoc,
    name: &str,
    head: &Value,
    req: &Value,
    io: &mut dyn ListIo,
) -> Result<Value> {
    let (language, body) = match Runner::of(ddoc)? {
        Runner::InProcess => return with_renderer(node, db, ddoc, |r| r.list(name, head, req, io)),
        Runner::External(language, body) => (language, body),
    };
    let qs = &node.views.query_servers;
    let req = external_req(db, req);
    let (start, mut session) = qs
        .list(&language, &ddoc_ref(ddoc, &body), name, head.clone(), req)
        .map_err(qs_error)?;
    expect_answer(&start, &["start"])?;
    io.send(start);
    while let Some(row) = io.next_row() {
        let answer = session.row(&row).map_err(qs_error)?;
        if expect_answer(&answer, &["chunks", "end"])? == "end" {
            return Ok(answer);
        }
        io.send(answer);
    }
    let end = session.end().map_err(qs_error)?;
    expect_answer(&end, &["end"])?;
    Ok(end)
}

/// The tag of a list's answer, one of `tags`, with its chunks (a list) after it; anything
/// else is CouchDB's failed match, an `external_response_error`.
fn expect_answer<'a>(answer: &'a Value, tags: &[&str]) -> Result<&'a str> {
    let tag = answer
        .as_array()
        .filter(|a| matches!(a.get(1), Some(Value::Array(_))))
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .filter(|t| tags.contains(t));
    tag.ok_or_else(|| Error::ExternalResponse(format!("answer {answer}")))
}

/// Runs the design document's rewrite function (its `rewrites`, in `body`) on `req`, in
/// process for JavaScript, else in its language's query server: the protocol's answer.
pub fn rewrite_answer(
    node: &Arc<Node>,
    db: &FnDb,
    ddoc: &DesignDoc,
    body: &Value,
    req: &Value,
) -> Result<Value> {
    let language = match body.get("language").and_then(Value::as_str) {
        Some(language) if settee_js::Dialect::of(Some(language)).is_none() => language,
        _ => return with_renderer(node, db, ddoc, |r| r.rewrite(req)),
    };
    let qs = &node.views.query_servers;
    qs.rewrite(language, &ddoc_ref(ddoc, body), req.clone())
        .map_err(qs_error)
}

/// A document as CouchDB hands it to a function (`couch_query_servers:json_doc`): the
/// current revision with `_revisions` and `_conflicts`; `null` when there is none (missing
/// or deleted).
pub fn function_doc(db: &Database, id: &str) -> Result<Value> {
    let doc = match db.open_doc(id, None) {
        Ok(doc) => doc,
        Err(settee_db::Error::NotFound(_)) => return Ok(Value::Null),
        Err(e) => return Err(e.into()),
    };
    let opts = DocOpts {
        revs: true,
        conflicts: true,
        ..DocOpts::default()
    };
    serde_json::from_slice(&doc_json(&doc, &opts)).map_err(|e| Error::internal(e.to_string()))
}

/// A show's ETag (`couch_mrview_show:show_etag`): it changes with the design document's
/// revision, the document's, the `Accept` header and who asks.
pub fn show_etag(ddoc: &DesignDoc, doc: &Value, accept: Option<&str>, req: &ReqInfo) -> String {
    let parts = serde_json::json!([
        ddoc.rev,
        doc.get("_rev"),
        accept,
        req.user.name,
        req.user.roles,
    ]);
    make_etag(parts.to_string().as_bytes())
}

/// `chttpd:make_etag`: the MD5 of the parts, in base 36, quoted.
pub fn make_etag(bytes: &[u8]) -> String {
    use md5::Digest;
    let digest = md5::Md5::digest(bytes);
    let mut n = u128::from_be_bytes(digest.into());
    let mut digits = Vec::new();
    while n > 0 {
        let d = (n % 36) as u8;
        digits.push(if d < 10 { b'0' + d } else { b'A' + d - 10 });
        n /= 36;
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    digits.reverse();
    format!("\"{}\"", String::from_utf8(digits).expect("ASCII"))
}

/// Sets response headers over what the function gave (`apply_headers`: same-named ones are
/// replaced).
pub fn apply_headers(resp: &mut Value, headers: &[(&str, &str)]) {
    let Value::Object(members) = resp else {
        return;
    };
    let entry = members
        .entry("headers")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(h) = entry {
        for (name, value) in headers {
            h.shift_remove(*name);
            h.insert(name.to_string(), Value::String(value.to_string()));
        }
    }
}

/// A call of a show or update function: `{name}` of `_design/{ddoc}` about document
/// `doc_id` (if any), for request `req`.
#[derive(Clone)]
pub struct FnCall {
    pub ddoc: String,
    pub name: String,
    pub doc_id: Option<String>,
    pub req: ReqInfo,
}

/// What a show answers.
#[derive(Debug)]
pub enum Shown {
    /// The client's copy is current (`If-None-Match` matched the show's ETag).
    NotModified(String),
    Answer(crate::list::External),
}

/// An update function's answer: its response and, when it returned a document, the id
/// written and its new revision (`None` when acknowledged without one).
#[derive(Debug)]
pub struct Updated {
    pub response: crate::list::External,
    pub written: Option<(String, Option<settee_core::Rev>)>,
}

/// Where a show or an update reads its design document and the document it is about:
/// a database of this node, or a clustered one through its coordinator.
pub trait FnReads {
    /// `_design/{name}`, with a read's 404s (`missing`, `deleted`).
    fn design(&self, name: &str) -> Result<DesignDoc>;
    /// Document `id` as a function gets it (see [`function_doc`]): `null` when there is
    /// none.
    fn doc(&self, id: &str) -> Result<Value>;
    /// The database, as the request object shows it.
    fn db(&self) -> &FnDb;
}

/// A database of this node, for [`FnReads`].
struct LocalReads {
    db: Arc<Database>,
    fn_db: FnDb,
}

impl FnReads for LocalReads {
    fn design(&self, name: &str) -> Result<DesignDoc> {
        DesignDoc::open(&self.db, name)
    }

    fn doc(&self, id: &str) -> Result<Value> {
        function_doc(&self.db, id)
    }

    fn db(&self) -> &FnDb {
        &self.fn_db
    }
}

/// A show (`call`) over `reads`: its answer with its `ETag` and `Vary: Accept`, unless
/// `matches` (the client's `If-None-Match`) names the ETag. A missing document is `null`
/// to the function.
pub fn show_with(
    node: &Arc<Node>,
    reads: &dyn FnReads,
    call: &FnCall,
    accept: Option<&str>,
    matches: &dyn Fn(&str) -> bool,
) -> Result<Shown> {
    let (name, req) = (call.name.as_str(), &call.req);
    let ddoc = reads.design(&call.ddoc)?;
    ddoc.require_function("shows", name)?;
    let doc = match &call.doc_id {
        Some(id) => reads.doc(id)?,
        None => Value::Null,
    };
    let etag = show_etag(&ddoc, &doc, accept, req);
    if matches(&etag) {
        return Ok(Shown::NotModified(etag));
    }
    let db = reads.db();
    let req = req.render_json_for(node, db)?;
    let answer = doc_answer(node, db, &ddoc, RenderKind::Show, name, &doc, &req)?;
    let mut resp = crate::list::answer_part(&answer, "resp", 1)?.clone();
    apply_headers(&mut resp, &[("ETag", &etag), ("Vary", "Accept")]);
    Ok(Shown::Answer(crate::list::External::parse(&resp, 200)?))
}

/// Runs update `call` over `reads` (`refused`: asked for with GET, which CouchDB refuses
/// once it has found the function): the function's response object, and the document
/// it returned when that is an object (its id checked), to be written as the requester.
pub fn update_with(
    node: &Arc<Node>,
    reads: &dyn FnReads,
    call: &FnCall,
    refused: bool,
) -> Result<(Value, Option<settee_core::ParsedDoc>)> {
    let ddoc = reads.design(&call.ddoc)?;
    // chttpd_show looks the function up first; the refusal is the query server's.
    ddoc.require_function("updates", &call.name)?;
    if refused {
        return Err(Error::UpdateByGet);
    }
    let doc = match &call.doc_id {
        Some(id) => reads.doc(id)?,
        None => Value::Null,
    };
    let db = reads.db();
    let req = call.req.render_json_for(node, db)?;
    let answer = doc_answer(node, db, &ddoc, RenderKind::Update, &call.name, &doc, &req)?;
    let resp = crate::list::answer_part(&answer, "up", 2)?.clone();
    let new_doc = crate::list::answer_part(&answer, "up", 1)?;
    if !new_doc.is_object() {
        return Ok((resp, None));
    }
    let parsed = settee_core::parse_doc(new_doc.clone())?;
    settee_core::validate_doc_id(parsed.id.as_deref().unwrap_or_default())?;
    Ok((resp, Some(parsed)))
}

/// An update's answer (`chttpd_show:send_doc_update_response`): with a document written
/// (its id, new revision, and whether it reached fewer copies than the write quorum),
/// 201 (202 below the quorum) with `X-Couch-Update-NewRev` and `X-Couch-Id`; else 200.
/// The function's `code` overrides either.
pub fn updated(
    mut resp: Value,
    written: Option<(String, Option<settee_core::Rev>, bool)>,
) -> Result<Updated> {
    let (code, written) = match written {
        Some((id, rev, accepted)) => {
            let shown = rev.as_ref().map(|r| r.to_string()).unwrap_or_default();
            apply_headers(
                &mut resp,
                &[
                    ("X-Couch-Update-NewRev", &shown),
                    ("X-Couch-Id", &settee_wire::url_encode(&id)),
                ],
            );
            (if accepted { 202 } else { 201 }, Some((id, rev)))
        }
        None => (200, None),
    };
    Ok(Updated {
        response: crate::list::External::parse(&resp, code)?,
        written,
    })
}

impl Node {
    /// A show (`call`) of a database of this node (see [`show_with`]).
    pub fn show(
        self: &Arc<Self>,
        db: &Arc<Database>,
        call: &FnCall,
        accept: Option<&str>,
        matches: &dyn Fn(&str) -> bool,
    ) -> Result<Shown> {
        let reads = LocalReads {
            db: db.clone(),
            fn_db: FnDb::local(self, db),
        };
        show_with(self, &reads, call, accept, matches)
    }

    /// An update (`call`) as `user` of a database of this node: the function's document,
    /// if it returns one, is written as the requester would write it (see [`updated`]).
    /// `refused`: the method is GET (or HEAD).
    pub async fn update(
        self: &Arc<Self>,
        db: Arc<Database>,
        user: &UserCtx,
        call: FnCall,
        refused: bool,
    ) -> Result<Updated> {
        let (node, user2) = (self.clone(), user.clone());
        // One blocking pass runs the function and hands its document to the writer.
        let (resp, pending) = crate::blocking::<_, Error>(move || {
            let reads = LocalReads {
                fn_db: FnDb::local(&node, &db),
                db: db.clone(),
            };
            let (resp, parsed) = update_with(&node, &reads, &call, refused)?;
            let Some(parsed) = parsed else {
                return Ok((resp, None));
            };
            let id = parsed.id.clone().unwrap_or_default();
            let settings = node.write_settings();
            let pending = settee_docs::submit(
                &settings,
                &db,
                &user2,
                vec![parsed],
                true,
                settee_docs::Followed::new(),
            )?;
            Ok((resp, Some((id, pending))))
        })
        .await?;
        let written = match pending {
            Some((id, pending)) => {
                let rev = pending
                    .wait()
                    .await?
                    .pop()
                    .expect("one result per document")?;
                Some((id, rev, false))
            }
            None => None,
        };
        updated(resp, written)
    }
}
