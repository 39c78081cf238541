//! [`FilterFn`]: one filter function of a design document (`filters.<name>`), as
//! `_changes?filter=ddoc/name` and filtered replication run it.
//!
//! CouchDB sends a change's documents (its winning revision, or with `style=all_docs` each
//! leaf) and the request object to the query server in one `filters` prompt; the server's
//! `Filter.filter` calls `fun.apply(ddoc, [doc, req])` for each document and answers
//! whether each result is truthy. Anything the function throws leaves `Filter.filter`
//! uncaught and reaches the query server's dispatch loop (`handleError`), which answers
//! `["error", name, reason]`; Erlang turns that into the request's `{name, reason}` error.
//! [`JUDGE`] reproduces the dispatch loop's half, [`crate::validate`]'s `error_term` the
//! Erlang half. The function is compiled when the runner is built, which CouchDB does at
//! the first document it filters.

use rquickjs::function::This;
use rquickjs::{Coerced, Ctx, Function, Object, Persistent, Value};
use serde_json::Value as Json;

use crate::compile::{compile_function, dialect};
use crate::env::{self, Emitted};
use crate::error::{settle, JsError};
use crate::from_json::Builder;
use crate::monitor::Monitor;
use crate::runtime::{new_context, run_pending_jobs, settle_all};
use crate::script::eval_script;
use crate::to_json::Classes;
use crate::validate::{error_term, judged, Rejection};
use crate::Limits;

/// A design document's filter function, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterSource {
    /// The design document's id, used in errors and logs.
    pub ddoc_id: String,
    /// The whole design document: the function's `this`, where its `require(path)`
    /// resolves paths, and where its source is found (`filters.<name>`).
    pub ddoc: Json,
    /// The filter's name, a member of the design document's `filters`.
    pub name: String,
}

/// What CouchDB's dispatch loop answers for a value a filter threw, as `[name, reason]`.
pub(crate) const JUDGE: &str = r#"(function (e) {
  "use strict";
  if (e === null) return ["internal_error", null];
  var type;
  try {
    type = e[0];
  } catch (inner) {
    // `throw undefined`: reading from it throws a TypeError, which is reported instead.
    e = inner;
  }
  if (type == "fatal" || type == "error") return [e[1], e[2]];
  if (e.name == "InternalError") return [e.name, e.message];
  if (e.error && e.reason) return [e.error, e.reason];
  if (e.name) return [e.name, e];
  return ["unnamed_error", e.stack];
})"#;

/// A design document's environment in `ctx`, as filter and render functions share it: the
/// document as a JS object (their `this`, and the root `require` resolves against), the
/// global scope, the classes conversions check, and [`JUDGE`] (evaluated as `script`).
pub(crate) fn ddoc_environment<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    ddoc: &Json,
    emitted: &Emitted,
    script: &str,
) -> Result<(Object<'js>, Classes, Function<'js>), JsError> {
    let ddoc = Builder::new(ctx, false)
        .value(ddoc)
        .and_then(|ddoc| ddoc.get::<Object>());
    let ddoc = settle_all(ctx, ddoc, monitor)?;
    let root = ddoc.clone().into_value();
    let installed = env::install_with_root(ctx, monitor, root, emitted);
    settle_all(ctx, installed, monitor)?;
    let classes = settle_all(ctx, Classes::probe(ctx), monitor)?;
    let judge = eval_script(ctx, monitor, JUDGE, script).and_then(|judge| judge.get::<Function>());
    let judge = settle_all(ctx, judge, monitor)?;
    Ok((ddoc, classes, judge))
}

/// A compiled filter function in a private QuickJS runtime. Not `Send`: keep one per
/// thread. Drop it after any error: CouchDB stops the query server process whenever a
/// prompt fails, so no state a failed call left behind survives.
pub struct FilterFn {
    // Field order is drop order: every JS value held from Rust goes before the context.
    function: Persistent<Function<'static>>,
    /// The design document as a JS object, `this` of every call. Like CouchDB's cached
    /// design document it is shared by all calls, and holds the compiled function in place
    /// of its source.
    ddoc: Persistent<Object<'static>>,
    judge: Persistent<Function<'static>>,
    emitted: Emitted,
    classes: Classes,
    monitor: Monitor,
    limits: Limits,
    ddoc_id: String,
    context: rquickjs::Context,
    _runtime: rquickjs::Runtime,
}

impl FilterFn {
    /// Compiles the function `filters.<name>` of the design document (running the
    /// source's top-level code under the time limit). As CouchDB's query server says it:
    /// a missing or falsy member is `not_found` ("missing filters function …"), a source
    /// that does not compile `compilation_error` with the source in the reason.
    pub fn new(source: &FilterSource, limits: Limits) -> Result<FilterFn, Rejection> {
        let code = filter_code(source)?;
        let (runtime, context, monitor) = new_context(limits)?;
        let emitted = Emitted::default();
        let compiled = context.with(|ctx| {
            let _armed = monitor.start(limits.timeout);
            let (ddoc, classes, judge) =
                ddoc_environment(&ctx, &monitor, &source.ddoc, &emitted, "settee-filter")?;
            let what = format!(
                "filters function {} of design document `{}`",
                source.name, source.ddoc_id
            );
            let function = compile_function(&ctx, &code, &what, &monitor, dialect(&source.ddoc))?;
            // CouchDB keeps the compiled function in place of the source.
            let cached = ddoc
                .get::<_, Object>("filters")
                .and_then(|filters| filters.set(source.name.as_str(), function.clone()));
            settle_all(&ctx, cached, &monitor)?;
            settle_all(&ctx, run_pending_jobs(&ctx, &monitor), &monitor)?;
            Ok::<_, JsError>((
                Persistent::save(&ctx, function),
                Persistent::save(&ctx, ddoc),
                Persistent::save(&ctx, judge),
                classes,
            ))
        });
        let (function, ddoc, judge, classes) = compiled.map_err(compile_rejection)?;
        Ok(FilterFn {
            function,
            ddoc,
            judge,
            emitted,
            classes,
            monitor,
            limits,
            ddoc_id: source.ddoc_id.clone(),
            context,
            _runtime: runtime,
        })
    }

    /// CouchDB's `filters` prompt: whether `fun(doc, req)` is truthy for each of `docs`
    /// (one change's revisions), with `this` the design document. `req` is built once per
    /// call and shared by its documents, as CouchDB's query server parses it once per
    /// prompt; the whole call has one deadline. The first throw fails the call.
    pub fn filter(&mut self, docs: &[Json], req: &Json) -> Result<Vec<bool>, Rejection> {
        let this = &*self;
        this.context.with(|ctx| {
            let _armed = this.monitor.start(this.limits.timeout);
            let outcome = this.call(&ctx, docs, req);
            // Anything the function emitted means nothing here.
            this.emitted.borrow_mut().clear();
            match outcome {
                Ok(_) if this.monitor.out_of_memory() => Err(JsError::OutOfMemory.into()),
                Ok(passes) => Ok(passes),
                Err(rquickjs::Error::Exception) if !this.stopped() => {
                    let thrown = ctx.catch();
                    let error = this.judge(&ctx, thrown);
                    tracing::debug!(target: "settee_js", ddoc = %this.ddoc_id,
                        "filter function failed: {error}");
                    Err(error)
                }
                Err(e) => {
                    let failure = settle(&ctx, Err::<(), _>(e), &this.monitor)
                        .expect_err("a failed call settles to a failure");
                    Err(failure.into_error().into())
                }
            }
        })
    }

    /// The design document the function belongs to.
    pub fn ddoc_id(&self) -> &str {
        &self.ddoc_id
    }

    fn call<'js>(&self, ctx: &Ctx<'js>, docs: &[Json], req: &Json) -> rquickjs::Result<Vec<bool>> {
        let function = self.function.clone().restore(ctx)?;
        let ddoc = self.ddoc.clone().restore(ctx)?;
        let build = Builder::new(ctx, false);
        let req = build.value(req)?;
        let mut passes = Vec::with_capacity(docs.len());
        for doc in docs {
            let result: Value =
                function.call((This(ddoc.clone()), build.value(doc)?, req.clone()))?;
            let Coerced(pass) = result.get::<Coerced<bool>>()?;
            passes.push(pass);
        }
        run_pending_jobs(ctx, &self.monitor)?;
        Ok(passes)
    }

    /// Whether the monitor, not user code, ended the call.
    fn stopped(&self) -> bool {
        self.monitor.timed_out() || self.monitor.out_of_memory()
    }

    /// Turns a thrown value into CouchDB's error term.
    fn judge<'js>(&self, ctx: &Ctx<'js>, thrown: Value<'js>) -> Rejection {
        match judged(ctx, &self.judge, self.classes, &self.monitor, thrown) {
            Ok(pair) => error_term(pair),
            Err(failure) => failure.into_error().into(),
        }
    }
}

impl Drop for FilterFn {
    fn drop(&mut self) {
        // Rows emitted by an interrupted call hold JS values: release them while the
        // runtime is alive.
        self.emitted.borrow_mut().clear();
    }
}

/// The source at `filters.<name>`.
fn filter_code(source: &FilterSource) -> Result<String, Rejection> {
    member_code(&source.ddoc, &source.ddoc_id, "filters", &source.name)
}

/// The source of the design-document function `<member>.<name>` (`filters`, `shows`, …).
/// CouchDB's dispatcher refuses a falsy member before compiling (`not_found`, "missing
/// filters function …"); any other value that is not text is compiled as what it
/// evaluates to, which is never a function.
pub(crate) fn member_code(
    ddoc: &Json,
    ddoc_id: &str,
    member: &str,
    name: &str,
) -> Result<String, Rejection> {
    let found = ddoc.get(member).and_then(|fns| fns.get(name));
    let falsy = match found {
        None | Some(Json::Null) | Some(Json::Bool(false)) => true,
        Some(Json::String(s)) => s.is_empty(),
        Some(Json::Number(n)) => n.as_f64() == Some(0.0),
        Some(_) => false,
    };
    if falsy {
        return Err(Rejection::Error {
            error: "not_found".into(),
            reason: Json::String(format!(
                "missing {member} function {name} on design doc {ddoc_id}"
            )),
        });
    }
    Ok(match found {
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => unreachable!("a missing member is falsy"),
    })
}

/// A compile error is the query server's `["error", "compilation_error", reason]`.
pub(crate) fn compile_rejection(e: JsError) -> Rejection {
    match e {
        JsError::Compile { reason, .. } => Rejection::Error {
            error: "compilation_error".into(),
            reason: Json::String(reason),
        },
        other => other.into(),
    }
}
