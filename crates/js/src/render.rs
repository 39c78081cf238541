//! [`Renderer`]: the show, list and update functions of one design document revision.
//!
//! CouchDB sends each of these to the query server as a `ddoc` prompt (`["shows", name]`,
//! `["lists", name]`, `["updates", name]`), which runs it through `Render` in
//! `share/server/render.js` and answers with the protocol's shapes: a show
//! `["resp", resp]`, an update `["up", doc, resp]`, a list `["start", chunks, resp]` when it
//! first asks for a row, `["chunks", chunks]` (or with a `resp` after a new `start()`) at
//! each later row, and `["end", chunks]` when it returns. A [`Renderer`] answers the same
//! shapes, as JSON, so that the HTTP layer renders in-process and external query servers'
//! answers alike. `render.js` (beside this file) is that environment, rewritten: content
//! negotiation (`provides`, `registerType`, `?format=`, `Accept`), `start`, `send` and
//! `getRow`. A list pulls its rows through [`ListIo::next_row`] while it runs and hands its
//! intermediate answers to [`ListIo::send`].
//!
//! Errors are CouchDB's terms ([`Rejection`]): what render.js throws (`render_error` for a
//! plain exception, `not_found` "document not found" for a show of a missing document that
//! fails, `not_acceptable`, `method_not_allowed` for an update by GET) or the function throws
//! as `{error, reason}` or `["error", name, reason]`, through the dispatch loop's rules
//! ([`crate::filter::JUDGE`]); `not_found` for a missing function; `compilation_error`.
//!
//! Functions are compiled at their first call, as CouchDB compiles them, and kept in place
//! of their source on the design document (`this`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use rquickjs::{Ctx, Function, Object, Persistent, Value};
use serde_json::Value as Json;

use crate::compile::{compile_function, dialect};
use crate::env::Emitted;
use crate::error::{settle, JsError};
use crate::filter::{compile_rejection, ddoc_environment, member_code};
use crate::from_json::Builder;
use crate::monitor::Monitor;
use crate::runtime::{new_context, run_pending_jobs, settle_all};
use crate::script::eval_script;
use crate::to_json::{Classes, Converter};
use crate::validate::{error_term, judged, Rejection};
use crate::Limits;

const RENDER: &str = include_str!("render.js");

/// A design document whose render functions a [`Renderer`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderSource {
    /// The design document's id, used in errors and logs.
    pub ddoc_id: String,
    /// The whole design document: `this` of every function, the root of `require(path)`,
    /// and where sources are found (`shows.<name>`, `lists.<name>`, `updates.<name>`).
    pub ddoc: Json,
}

/// The kinds of render function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenderKind {
    Show,
    List,
    Update,
    /// The design document's `rewrites` when it is a function (a member of its own, not a
    /// set of named functions).
    Rewrite,
}

impl RenderKind {
    /// The design document's member holding functions of this kind.
    pub fn member(self) -> &'static str {
        match self {
            RenderKind::Show => "shows",
            RenderKind::List => "lists",
            RenderKind::Update => "updates",
            RenderKind::Rewrite => "rewrites",
        }
    }

    fn runner(self) -> &'static str {
        match self {
            RenderKind::Show => "show",
            RenderKind::List => "list",
            RenderKind::Update => "update",
            RenderKind::Rewrite => "rewrite",
        }
    }
}

/// What a running list function reads from and writes to.
pub trait ListIo {
    /// The next row (`{id, key, value}`, with `doc` for `include_docs`; `{key, value}` for
    /// a reduce), or `None` after the last (CouchDB's `list_end`). The function's deadline
    /// restarts after each row, as each is a prompt of its own in CouchDB.
    fn next_row(&mut self) -> Option<Json>;
    /// An intermediate answer: `["start", chunks, resp]`, then `["chunks", chunks]` or
    /// `["chunks", chunks, resp]`.
    fn send(&mut self, message: Json);
}

/// The list being run, for the `respond` and `readRow` natives. Set only for the duration of
/// [`Renderer::list`], which clears it before returning (see [`IoGuard`]).
type IoSlot = Rc<Cell<Option<*mut (dyn ListIo + 'static)>>>;

/// Where `req.info` comes from (see [`Renderer::set_info_source`]).
pub type InfoSource = Box<dyn Fn() -> Json>;

type InfoSlot = Rc<RefCell<Option<InfoSource>>>;

/// A design document's render functions in a private QuickJS runtime. Not `Send`: keep
/// one per thread. Drop it after any error, as CouchDB stops a query server whose prompt
/// failed.
pub struct Renderer {
    // Field order is drop order: every JS value held from Rust goes before the context.
    functions: RefCell<HashMap<(RenderKind, String), Persistent<Function<'static>>>>,
    /// `{show, update, list}` from render.js.
    runners: Persistent<Object<'static>>,
    /// The design document as a JS object, `this` of every call.
    ddoc: Persistent<Object<'static>>,
    judge: Persistent<Function<'static>>,
    io: IoSlot,
    info: InfoSlot,
    emitted: Emitted,
    classes: Classes,
    monitor: Monitor,
    limits: Limits,
    source: RenderSource,
    context: rquickjs::Context,
    _runtime: rquickjs::Runtime,
}

impl Renderer {
    /// Builds the environment for the design document (no function is compiled yet).
    pub fn new(source: &RenderSource, limits: Limits) -> Result<Renderer, JsError> {
        let (runtime, context, monitor) = new_context(limits)?;
        let emitted = Emitted::default();
        let io = IoSlot::default();
        let info = InfoSlot::default();
        let built = context.with(|ctx| {
            let _armed = monitor.start(limits.timeout);
            let (ddoc, classes, judge) = ddoc_environment(
                &ctx,
                &monitor,
                &source.ddoc,
                &emitted,
                "settee-render-judge",
            )?;
            let natives = Natives {
                io: Rc::clone(&io),
                info: Rc::clone(&info),
                classes,
                timeout: limits.timeout,
            };
            let runners = install_render(&ctx, &monitor, natives);
            let runners = settle_all(&ctx, runners, &monitor)?;
            settle_all(&ctx, run_pending_jobs(&ctx, &monitor), &monitor)?;
            Ok::<_, JsError>((
                Persistent::save(&ctx, runners),
                Persistent::save(&ctx, ddoc),
                Persistent::save(&ctx, judge),
                classes,
            ))
        });
        let (runners, ddoc, judge, classes) = built?;
        Ok(Renderer {
            functions: RefCell::default(),
            runners,
            ddoc,
            judge,
            io,
            info,
            emitted,
            classes,
            monitor,
            limits,
            source: source.clone(),
            context,
            _runtime: runtime,
        })
    }

    /// The design document's id.
    pub fn ddoc_id(&self) -> &str {
        &self.source.ddoc_id
    }

    /// Makes `req.info` lazy in the calls that follow: CouchDB's request object always
    /// carries the database's information, which costs a look at the database's files to
    /// produce, so it is produced by `source` only when a function reads it (or
    /// serialises the request). `None` passes `req.info` as given.
    pub fn set_info_source(&mut self, source: Option<InfoSource>) {
        *self.info.borrow_mut() = source;
    }

    /// Runs `shows.<name>` on `doc` (`null` for none) and `req`: `["resp", resp]`.
    pub fn show(&mut self, name: &str, doc: &Json, req: &Json) -> Result<Json, Rejection> {
        self.run(RenderKind::Show, name, doc, req)
    }

    /// Runs `updates.<name>` on `doc` (`null` for none) and `req`: `["up", doc, resp]`.
    pub fn update(&mut self, name: &str, doc: &Json, req: &Json) -> Result<Json, Rejection> {
        self.run(RenderKind::Update, name, doc, req)
    }

    /// Runs the design document's rewrite function (`rewrites`, a string) on `req`:
    /// `["ok", {..}]`, `["no_dispatch_rule"]`, or `{"forbidden": ..}`/`{"unauthorized": ..}`.
    pub fn rewrite(&mut self, req: &Json) -> Result<Json, Rejection> {
        self.run(RenderKind::Rewrite, "", req, req)
    }

    /// Runs `lists.<name>` on the view's `head` (`{total_rows, offset}`…) and `req`,
    /// reading rows from and sending answers to `io`; returns the last answer,
    /// `["end", chunks]` (or `["end", chunks, resp]`). A missing or uncompilable function
    /// fails before `io` is used.
    pub fn list(
        &mut self,
        name: &str,
        head: &Json,
        req: &Json,
        io: &mut dyn ListIo,
    ) -> Result<Json, Rejection> {
        let io: *mut (dyn ListIo + '_) = io;
        // SAFETY: only the lifetime is erased. The pointer is cleared by `IoGuard` before
        // this function returns (or unwinds), so the natives never see it dangling, and
        // they run only inside `run` below, while `io` is borrowed by this call.
        let io: *mut (dyn ListIo + 'static) = unsafe { std::mem::transmute(io) };
        self.io.set(Some(io));
        let _guard = IoGuard(&self.io);
        self.run(RenderKind::List, name, head, req)
    }

    fn run(&self, kind: RenderKind, name: &str, arg: &Json, req: &Json) -> Result<Json, Rejection> {
        self.context.with(|ctx| {
            let _armed = self.monitor.start(self.limits.timeout);
            let function = self.function(&ctx, kind, name)?;
            let outcome = self.call(&ctx, kind, function, arg, req);
            // Anything emitted means nothing here.
            self.emitted.borrow_mut().clear();
            match outcome {
                Ok(_) if self.monitor.out_of_memory() => Err(JsError::OutOfMemory.into()),
                Ok(answer) => Ok(answer),
                Err(rquickjs::Error::Exception) if !self.stopped() => {
                    let thrown = ctx.catch();
                    let error = match judged(&ctx, &self.judge, self.classes, &self.monitor, thrown)
                    {
                        Ok(pair) => error_term(pair),
                        Err(failure) => failure.into_error().into(),
                    };
                    tracing::debug!(target: "settee_js", ddoc = %self.source.ddoc_id,
                        "{} function {name} failed: {error}", kind.member());
                    Err(error)
                }
                Err(e) => {
                    let failure = settle(&ctx, Err::<(), _>(e), &self.monitor)
                        .expect_err("a failed call settles to a failure");
                    Err(failure.into_error().into())
                }
            }
        })
    }

    fn call<'js>(
        &self,
        ctx: &Ctx<'js>,
        kind: RenderKind,
        function: Function<'js>,
        arg: &Json,
        req: &Json,
    ) -> rquickjs::Result<Json> {
        let runners = self.runners.clone().restore(ctx)?;
        let runner: Function = runners.get(kind.runner())?;
        let ddoc = self.ddoc.clone().restore(ctx)?;
        let build = Builder::new(ctx, false);
        let req = build.value(req)?;
        if self.info.borrow().is_some() {
            let defer: Function = runners.get("deferInfo")?;
            defer.call::<_, ()>((req.clone(),))?;
        }
        let answer: Value = runner.call((function, ddoc, build.value(arg)?, req))?;
        run_pending_jobs(ctx, &self.monitor)?;
        Converter {
            classes: self.classes,
            monitor: &self.monitor,
        }
        .to_json(&answer)
    }

    /// The compiled function `<kind>.<name>`, compiled now if this is its first call.
    fn function<'js>(
        &self,
        ctx: &Ctx<'js>,
        kind: RenderKind,
        name: &str,
    ) -> Result<Function<'js>, Rejection> {
        let key = (kind, name.to_owned());
        if let Some(f) = self.functions.borrow().get(&key) {
            return f
                .clone()
                .restore(ctx)
                .map_err(|e| JsError::Internal(e.to_string()).into());
        }
        let member = kind.member();
        let (ddoc, id) = (&self.source.ddoc, &self.source.ddoc_id);
        let code = match kind {
            // `rewrites` itself is the function: CouchDB's path is `["rewrites"]`.
            RenderKind::Rewrite => {
                let mut outer = serde_json::Map::new();
                outer.insert(member.into(), ddoc.clone());
                member_code(&Json::Object(outer), id, member, member)?
            }
            _ => member_code(ddoc, id, member, name)?,
        };
        let what = format!("{member} function {name} of design document `{id}`");
        let function = compile_function(ctx, &code, &what, &self.monitor, dialect(ddoc))
            .map_err(compile_rejection)?;
        // CouchDB keeps the compiled function in place of the source.
        let cached = self.ddoc.clone().restore(ctx).and_then(|ddoc| match kind {
            RenderKind::Rewrite => ddoc.set(member, function.clone()),
            _ => ddoc
                .get::<_, Object>(member)
                .and_then(|fns| fns.set(name, function.clone())),
        });
        settle_all(ctx, cached, &self.monitor)?;
        self.functions
            .borrow_mut()
            .insert(key, Persistent::save(ctx, function.clone()));
        Ok(function)
    }

    /// Whether the monitor, not user code, ended the call.
    fn stopped(&self) -> bool {
        self.monitor.timed_out() || self.monitor.out_of_memory()
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        self.emitted.borrow_mut().clear();
    }
}

/// Clears the list slot when a list call ends.
struct IoGuard<'a>(&'a IoSlot);

impl Drop for IoGuard<'_> {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// What render.js's natives share with the [`Renderer`].
struct Natives {
    io: IoSlot,
    info: InfoSlot,
    classes: Classes,
    timeout: Duration,
}

/// Evaluates render.js with the natives it needs, installs its globals, and returns its
/// runners.
fn install_render<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    natives: Natives,
) -> rquickjs::Result<Object<'js>> {
    let factory: Function = eval_script(ctx, monitor, RENDER, "settee-render")?.get()?;
    let log: Value = ctx.globals().get("log")?;
    let made: Object = factory.call((
        respond_function(
            ctx,
            Rc::clone(&natives.io),
            natives.classes,
            monitor.clone(),
        )?,
        read_function(ctx, natives.io, monitor.clone(), natives.timeout)?,
        log,
        info_function(ctx, natives.info)?,
    ))?;
    let globals: Object = made.get("globals")?;
    for name in ["provides", "registerType", "start", "send", "getRow"] {
        ctx.globals().set(name, globals.get::<_, Value>(name)?)?;
    }
    Ok(made)
}

/// `loadInfo()`: the request's `info`, from the source set for the call.
fn info_function<'js>(ctx: &Ctx<'js>, info: InfoSlot) -> rquickjs::Result<Function<'js>> {
    let load = move |ctx: Ctx<'js>| -> rquickjs::Result<Value<'js>> {
        let value = match &*info.borrow() {
            Some(source) => source(),
            None => Json::Null,
        };
        Builder::new(&ctx, false).value(&value)
    };
    Function::new(ctx.clone(), load)?.with_name("loadInfo")
}

/// `respond(message)`: a list's intermediate answer, as JSON, to the running list's
/// [`ListIo::send`]; ignored outside a list (a show calling `getRow()`).
fn respond_function<'js>(
    ctx: &Ctx<'js>,
    io: IoSlot,
    classes: Classes,
    monitor: Monitor,
) -> rquickjs::Result<Function<'js>> {
    let respond = move |message: Value<'js>| -> rquickjs::Result<()> {
        let Some(io) = io.get() else {
            return Ok(());
        };
        let converter = Converter {
            classes,
            monitor: &monitor,
        };
        let json = converter.to_json(&message)?;
        // SAFETY: set only while `Renderer::list` holds the borrow (see there).
        unsafe { (*io).send(json) };
        Ok(())
    };
    Function::new(ctx.clone(), respond)?.with_name("respond")
}

/// `readRow()`: the running list's next row, or `null` at the end (and outside a list).
fn read_function<'js>(
    ctx: &Ctx<'js>,
    io: IoSlot,
    monitor: Monitor,
    timeout: Duration,
) -> rquickjs::Result<Function<'js>> {
    let read = move |ctx: Ctx<'js>| -> rquickjs::Result<Value<'js>> {
        let Some(io) = io.get() else {
            return Ok(Value::new_null(ctx));
        };
        // SAFETY: set only while `Renderer::list` holds the borrow (see there).
        let row = unsafe { (*io).next_row() };
        // Time spent waiting for the row is not the function's.
        monitor.renew(timeout);
        match row {
            Some(row) => Builder::new(&ctx, false).value(&row),
            None => Ok(Value::new_null(ctx)),
        }
    };
    Function::new(ctx.clone(), read)?.with_name("readRow")
}
