//! [`ViewRuntime`]: one QuickJS runtime holding one design document's view functions.

use rquickjs::context::intrinsic::{
    Date, Eval, Json as JsonIntrinsic, MapSet, Promise, RegExp, RegExpCompiler,
};
use rquickjs::{Array, Context, Ctx, Function, Persistent, Runtime, Value};
use serde_json::Value as Json;

use crate::compile::compile_function;
use crate::doc::{self, DocError};
use crate::env::{self, Emitted};
use crate::error::{settle, Failure, JsError};
use crate::from_json::Builder;
use crate::language::Dialect;
use crate::lazy::LazyDocs;
use crate::monitor::Monitor;
use crate::to_json::{Classes, Converter};
use crate::{Limits, ViewFns, ViewSource, JS_STACK_LIMIT};

/// The intrinsics CouchDB's couchjs gives its contexts (besides the base objects), plus
/// `Promise`: without it QuickJS leaks the objects of `async` functions and `import()`,
/// and then aborts the process when the runtime is freed.
type Intrinsics = (
    Date,
    Eval,
    RegExpCompiler,
    RegExp,
    JsonIntrinsic,
    MapSet,
    Promise,
);

/// Emitted rows of one view for one document, or the message of the exception it threw.
pub type MapResult = Result<Vec<(Json, Json)>, String>;

struct CompiledView {
    name: String,
    map: Persistent<Function<'static>>,
    reduce: Option<Persistent<Function<'static>>>,
}

/// The compiled map and reduce functions of one design document's views, in a private
/// QuickJS runtime. Not `Send`: keep one per thread. Drop it after any `Timeout`,
/// `OutOfMemory` or `Internal` error.
pub struct ViewRuntime {
    // Field order is drop order: every JS value held from Rust must go before the context
    // and runtime that own it.
    views: Vec<CompiledView>,
    emitted: Emitted,
    classes: Classes,
    lazy: LazyDocs,
    monitor: Monitor,
    limits: Limits,
    context: Context,
    _runtime: Runtime,
}

impl ViewRuntime {
    /// Creates a runtime and compiles every view's functions (running their top-level code
    /// under the time limit).
    pub fn new(fns: &ViewFns, limits: Limits) -> Result<ViewRuntime, JsError> {
        let (runtime, context, monitor) = new_context(limits)?;
        let emitted = Emitted::default();
        let (views, classes, lazy) = context.with(|ctx| {
            let _armed = monitor.start(limits.timeout);
            settle_all(
                &ctx,
                env::install(&ctx, &monitor, fns.lib.as_ref(), &emitted),
                &monitor,
            )?;
            let lazy = settle_all(&ctx, LazyDocs::register(&ctx), &monitor)?;
            let classes = settle_all(&ctx, Classes::probe(&ctx), &monitor)?.with_lazy(lazy.class);
            let views = fns
                .views
                .iter()
                .map(|view| compile_view(&ctx, view, &monitor, fns.dialect))
                .collect::<Result<Vec<_>, _>>()?;
            settle_all(&ctx, run_pending_jobs(&ctx, &monitor), &monitor)?;
            Ok::<_, JsError>((views, classes, lazy))
        })?;
        Ok(ViewRuntime {
            views,
            emitted,
            classes,
            lazy,
            monitor,
            limits,
            context,
            _runtime: runtime,
        })
    }

    /// Runs every view's map function over one document, given as its full JSON text.
    ///
    /// The outer `Err` (timeout, out of memory, internal) means the runtime must be dropped.
    /// Per view: the emitted `(key, value)` rows in emit order, or the message of the
    /// exception the map function threw (CouchDB skips the document for that view; it is
    /// logged here with the document id).
    pub fn map_doc(&mut self, doc_json: &str) -> Result<Vec<MapResult>, JsError> {
        let this = &*self;
        this.context.with(|ctx| {
            let _armed = this.monitor.start(this.limits.timeout);
            let doc = match this.build_doc(&ctx, doc_json)? {
                Ok(doc) => doc,
                Err(message) => return Ok(this.reject_doc(doc_json, message)),
            };
            this.views
                .iter()
                .map(|view| this.map_view(&ctx, view, &doc))
                .collect()
        })
    }

    /// `reduce(keys, values, false)` of view `view` (an index into [`ViewFns::views`]) over
    /// `rows` = (key, doc id, value); keys reach JS as CouchDB passes them: `[[key, id], ...]`.
    pub fn reduce(&mut self, view: usize, rows: &[(&Json, &str, &Json)]) -> Result<Json, JsError> {
        self.call_reduce(view, |ctx, build| {
            let keys = Array::new(ctx.clone())?;
            let values = Array::new(ctx.clone())?;
            for (i, (key, id, value)) in rows.iter().enumerate() {
                let pair = Array::new(ctx.clone())?;
                pair.set(0, build.value(key)?)?;
                pair.set(1, *id)?;
                keys.set(i, pair)?;
                values.set(i, build.value(value)?)?;
            }
            Ok((keys.into_value(), values.into_value(), false))
        })
    }

    /// `reduce(null, values, true)` of view `view`.
    pub fn rereduce(&mut self, view: usize, values: &[&Json]) -> Result<Json, JsError> {
        self.call_reduce(view, |ctx, build| {
            let array = Array::new(ctx.clone())?;
            for (i, value) in values.iter().enumerate() {
                array.set(i, build.value(value)?)?;
            }
            Ok((Value::new_null(ctx.clone()), array.into_value(), true))
        })
    }

    /// The names of the compiled views, in [`ViewFns::views`] order.
    pub fn view_names(&self) -> impl Iterator<Item = &str> {
        self.views.iter().map(|v| v.name.as_str())
    }

    /// The document as a deep-frozen JS object: lazily built ([`crate::lazy`]) unless it has
    /// too many top-level members. The inner `Err` is a document that JS cannot take (too
    /// deeply nested), reported against every view.
    fn build_doc<'js>(
        &self,
        ctx: &Ctx<'js>,
        doc_json: &str,
    ) -> Result<Result<Value<'js>, String>, JsError> {
        match self.lazy.build(ctx, doc_json) {
            Ok(Some(doc)) => return Ok(Ok(doc)),
            Err(DocError::Js(e)) => {
                return match settle(ctx, Err(e), &self.monitor) {
                    Err(Failure::Thrown { message, .. }) => Ok(Err(message)),
                    Err(Failure::Abort(e)) => Err(e),
                    Ok(never) => never,
                }
            }
            // Not worth it, or not an object: the eager parser reports what is wrong.
            Ok(None) | Err(DocError::Syntax(_) | DocError::Duplicate) => {}
        }
        let built = match doc::parse_frozen(ctx, doc_json) {
            Ok(doc) => Ok(doc),
            Err(DocError::Js(e)) => Err(e),
            Err(DocError::Duplicate) => build_doc_slowly(ctx, doc_json)?,
            Err(DocError::Syntax(at)) => {
                let reason = format!("document is not valid JSON (at byte {at})");
                return Err(JsError::Internal(reason));
            }
        };
        match settle(ctx, built, &self.monitor) {
            Ok(doc) => Ok(Ok(doc)),
            Err(Failure::Thrown { message, .. }) => Ok(Err(message)),
            Err(Failure::Abort(e)) => Err(e),
        }
    }

    fn reject_doc(&self, doc_json: &str, message: String) -> Vec<MapResult> {
        let doc_id = doc_id_of(doc_json);
        tracing::warn!(target: "settee_js", doc_id, "document cannot be mapped: {message}");
        self.views.iter().map(|_| Err(message.clone())).collect()
    }

    fn map_view<'js>(
        &self,
        ctx: &Ctx<'js>,
        view: &CompiledView,
        doc: &Value<'js>,
    ) -> Result<MapResult, JsError> {
        self.emitted.borrow_mut().clear();
        let map = restore(ctx, &view.map)?;
        let outcome = map
            .call::<_, Value>((doc.clone(),))
            .and_then(|_| run_pending_jobs(ctx, &self.monitor))
            .and_then(|_| self.take_emitted(ctx));
        match settle(ctx, outcome, &self.monitor) {
            Ok(rows) => Ok(Ok(rows)),
            Err(Failure::Abort(e)) => Err(e),
            Err(Failure::Thrown {
                message,
                fatal: true,
            }) => Err(JsError::Thrown(message)),
            Err(Failure::Thrown { message, .. }) => {
                let doc_id = doc_id_of_js(doc);
                tracing::warn!(target: "settee_js", view = %view.name, doc_id,
                    "map function raised exception: {message}");
                Ok(Err(message))
            }
        }
    }

    /// Converts the rows emitted by the map function that just returned.
    fn take_emitted(&self, ctx: &Ctx<'_>) -> rquickjs::Result<Vec<(Json, Json)>> {
        let rows = std::mem::take(&mut *self.emitted.borrow_mut());
        let mut out = Vec::with_capacity(rows.len());
        for (key, value) in rows {
            let key = self.converter().to_json(&key.restore(ctx)?)?;
            let value = self.converter().to_json(&value.restore(ctx)?)?;
            out.push((key, value));
        }
        Ok(out)
    }

    fn converter(&self) -> Converter<'_> {
        Converter {
            classes: self.classes,
            monitor: &self.monitor,
        }
    }

    fn call_reduce<F>(&mut self, view: usize, args: F) -> Result<Json, JsError>
    where
        F: for<'js> FnOnce(
            &Ctx<'js>,
            &Builder<'js>,
        ) -> rquickjs::Result<(Value<'js>, Value<'js>, bool)>,
    {
        let Some(reduce) = self.views.get(view).and_then(|v| v.reduce.as_ref()) else {
            return Err(JsError::Internal(format!(
                "view #{view} has no JavaScript reduce function"
            )));
        };
        self.context.with(|ctx| {
            let _armed = self.monitor.start(self.limits.timeout);
            let reduce = restore(&ctx, reduce)?;
            let result = args(&ctx, &Builder::new(&ctx, false))
                .and_then(|(keys, values, rereduce)| {
                    reduce.call::<_, Value>((keys, values, rereduce))
                })
                .and_then(|out| run_pending_jobs(&ctx, &self.monitor).map(|()| out))
                .and_then(|out| self.converter().to_json(&out));
            settle_all(&ctx, result, &self.monitor)
        })
    }
}

impl Drop for ViewRuntime {
    fn drop(&mut self) {
        // Rows left behind by an interrupted map hold JS values (possibly `emit` itself,
        // whose closure owns this list): release them while the runtime is still alive.
        self.emitted.borrow_mut().clear();
    }
}

/// Documents with repeated member names: serde_json resolves them as `JSON.parse` does.
fn build_doc_slowly<'js>(
    ctx: &Ctx<'js>,
    doc_json: &str,
) -> Result<rquickjs::Result<Value<'js>>, JsError> {
    let json: Json = serde_json::from_str(doc_json)
        .map_err(|e| JsError::Internal(format!("document is not valid JSON: {e}")))?;
    Ok(Builder::new(ctx, true).value(&json))
}

fn compile_view<'js>(
    ctx: &Ctx<'js>,
    view: &ViewSource,
    monitor: &Monitor,
    dialect: Dialect,
) -> Result<CompiledView, JsError> {
    let script = format!("map function of view `{}`", view.name);
    let map = compile_function(ctx, &view.map, &script, monitor, dialect)
        .map_err(|e| in_view(e, "map", &view.name))?;
    let reduce = match &view.reduce {
        Some(source) => {
            let script = format!("reduce function of view `{}`", view.name);
            Some(Persistent::save(
                ctx,
                compile_function(ctx, source, &script, monitor, dialect)
                    .map_err(|e| in_view(e, "reduce", &view.name))?,
            ))
        }
        None => None,
    };
    Ok(CompiledView {
        name: view.name.clone(),
        map: Persistent::save(ctx, map),
        reduce,
    })
}

/// A compile error as CouchDB's `couch_query_servers:try_compile` words it: "Compilation
/// of the map function in the 'by_x' view failed" (`reduce` for a reduce).
fn in_view(e: JsError, kind: &str, view: &str) -> JsError {
    match e {
        JsError::Compile { reason, .. } => JsError::Compile {
            what: format!("Compilation of the {kind} function in the '{view}' view failed"),
            reason,
        },
        other => other,
    }
}

fn restore<'js>(
    ctx: &Ctx<'js>,
    f: &Persistent<Function<'static>>,
) -> Result<Function<'js>, JsError> {
    f.clone()
        .restore(ctx)
        .map_err(|e| JsError::Internal(e.to_string()))
}

/// [`settle`] for calls where user code throwing is simply an error.
pub(crate) fn settle_all<T>(
    ctx: &Ctx<'_>,
    result: rquickjs::Result<T>,
    monitor: &Monitor,
) -> Result<T, JsError> {
    settle(ctx, result, monitor).map_err(Failure::into_error)
}

/// Runs the promise jobs user code queued (`async` functions, `.then`), so they neither
/// pile up across calls nor outlive the call's deadline and memory watch.
pub(crate) fn run_pending_jobs(ctx: &Ctx<'_>, monitor: &Monitor) -> rquickjs::Result<()> {
    let mut job_ctx = std::ptr::null_mut();
    loop {
        // SAFETY: the runtime is live and locked by the caller's `Context::with`; this
        // runtime has a single context, so the job's context needs no bookkeeping.
        let ran = unsafe {
            let rt = rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
            rquickjs::qjs::JS_ExecutePendingJob(rt, &mut job_ctx)
        };
        match ran {
            0 => return Ok(()),
            // An endless chain of jobs is stopped here even if no job polls the interrupt.
            1 if monitor.must_stop() => return Err(rquickjs::Error::Exception),
            1 => continue,
            _ => return Err(rquickjs::Error::Exception),
        }
    }
}

/// A runtime with CouchDB's intrinsics, the stack cap and the memory limit in force.
pub(crate) fn new_context(limits: Limits) -> Result<(Runtime, Context, Monitor), JsError> {
    let (runtime, monitor) = Monitor::runtime().map_err(|e| setup_error(&e))?;
    runtime.set_max_stack_size(JS_STACK_LIMIT);
    let context = Context::custom::<Intrinsics>(&runtime).map_err(|e| setup_error(&e))?;
    monitor.enforce(&context, limits.memory_limit);
    Ok((runtime, context, monitor))
}

fn setup_error(e: &rquickjs::Error) -> JsError {
    match e {
        rquickjs::Error::Allocation => JsError::OutOfMemory,
        other => JsError::Internal(other.to_string()),
    }
}

/// The document id for log lines, read back from the frozen JS document.
fn doc_id_of_js(doc: &Value<'_>) -> Option<String> {
    doc.as_object()?
        .get::<_, Option<String>>("_id")
        .ok()
        .flatten()
}

fn doc_id_of(doc_json: &str) -> Option<String> {
    let json: Json = serde_json::from_str(doc_json).ok()?;
    json.get("_id")?.as_str().map(str::to_owned)
}
