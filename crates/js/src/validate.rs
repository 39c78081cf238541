//! [`Validator`]: the `validate_doc_update` functions of a database's design documents.
//!
//! CouchDB calls each design document's function as `fun.apply(ddoc, [newDoc, oldDoc,
//! userCtx, secObj])` in its own query-server prompt and reads the outcome back over the
//! line protocol, so what a client finally sees for a thrown value is decided in three
//! places: the query server's `Validate.validate` and dispatch loop (JavaScript), its line
//! reader (`couch_os_process`), and `couch_query_servers:validate_doc_update`. [`JUDGE`]
//! reproduces the JavaScript half; [`answer`] the Erlang half.

use rquickjs::function::This;
use rquickjs::{Array, Ctx, Function, Object, Persistent, Value};
use serde_json::Value as Json;

use crate::compile::{compile_function, dialect};
use crate::env::{self, Emitted};
use crate::error::{settle, Failure, JsError};
use crate::from_json::Builder;
use crate::monitor::Monitor;
use crate::runtime::{new_context, run_pending_jobs, settle_all};
use crate::script::eval_script;
use crate::to_json::{Classes, Converter};
use crate::Limits;

/// The `validate_doc_update` function of one design document.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidateSource {
    /// The design document's id, used in errors and logs.
    pub ddoc_id: String,
    /// The whole design document: the function's `this`, and where its `require(path)`
    /// resolves paths (`require('lib/x')` reads the document's top-level `lib.x`).
    pub ddoc: Json,
    /// The design document's `validate_doc_update` source.
    pub source: String,
}

/// Why a validation did not accept a document, or why a filter function failed: one of
/// CouchDB's error terms.
///
/// `Forbidden` and `Unauthorized` are CouchDB's 403 and 401. Every other rejection is one of
/// CouchDB's `{error, reason}` terms, which its HTTP error table renders as status 500 with
/// `{"error": error, "reason": reason}` (a non-string reason printed as text), except that
/// an error naming one of the table's own entries takes that entry (`not_found` is 404,
/// `conflict` 409, `bad_request` 400) and a `null` reason gives
/// `{"error": "unknown_error", "reason": error}`.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// `throw({forbidden: reason})`: 403 `{"error": "forbidden", "reason": reason}`. The
    /// reason is passed through as whatever JSON was thrown.
    #[error("forbidden: {0}")]
    Forbidden(Json),
    /// `throw({unauthorized: reason})`: 401 `{"error": "unauthorized", "reason": reason}`.
    #[error("unauthorized: {0}")]
    Unauthorized(Json),
    /// Any other thrown value, as CouchDB's `{error, reason}` term (see the type's docs).
    #[error("{error}: {reason}")]
    Error {
        /// The error name, e.g. `unknown_error`, or `TypeError` for a thrown `TypeError`.
        error: String,
        /// The reason, as JSON.
        reason: Json,
    },
    /// The environment failed (timeout, out of memory, internal): drop the [`Validator`].
    #[error(transparent)]
    Failed(#[from] JsError),
}

/// What CouchDB's query server makes of a value a validate function threw:
/// `["respond", value]` when it writes the value back as the function's answer, or
/// `["error", name, reason]` when its dispatch loop reports an error instead.
const JUDGE: &str = r#"(function (thrown) {
  "use strict";
  var e = thrown;
  try {
    // Errors (whatever has a truthy name and stack) are re-thrown to the dispatch loop;
    // reading those off null or undefined throws a TypeError, which goes the same way.
    if (!(thrown.name && thrown.stack)) return ["respond", thrown];
  } catch (inner) {
    e = inner;
  }
  if (e.name == "InternalError") return ["error", e.name, e.message];
  if (e.error && e.reason) return ["error", e.error, e.reason];
  if (e.name) return ["error", e.name, e];
  return ["error", "unnamed_error", e.stack];
})"#;

struct CompiledValidate {
    ddoc_id: String,
    /// The design document as a JS object: `this` of the function and root of `require`.
    ddoc: Persistent<Object<'static>>,
    require: Persistent<Function<'static>>,
    function: Persistent<Function<'static>>,
}

/// The compiled `validate_doc_update` functions of a database's design documents, in a
/// private QuickJS runtime. Not `Send`: keep one per thread. Drop it after any
/// [`Rejection::Failed`].
pub struct Validator {
    // Field order is drop order: every JS value held from Rust goes before the context.
    fns: Vec<CompiledValidate>,
    judge: Persistent<Function<'static>>,
    emitted: Emitted,
    classes: Classes,
    monitor: Monitor,
    limits: Limits,
    context: rquickjs::Context,
    _runtime: rquickjs::Runtime,
}

impl Validator {
    /// Compiles the `validate_doc_update` of each design document, in the order given
    /// (CouchDB runs them in design-document id order), running their top-level code under
    /// the time limit. A source that does not compile is a [`JsError::Compile`] naming
    /// its design document.
    pub fn new(fns: &[ValidateSource], limits: Limits) -> Result<Validator, JsError> {
        let (runtime, context, monitor) = new_context(limits)?;
        let emitted = Emitted::default();
        let (fns, judge, classes) = context.with(|ctx| {
            let _armed = monitor.start(limits.timeout);
            let globals = Object::new(ctx.clone()).map(Object::into_value);
            let installed =
                globals.and_then(|root| env::install_with_root(&ctx, &monitor, root, &emitted));
            settle_all(&ctx, installed, &monitor)?;
            let classes = settle_all(&ctx, Classes::probe(&ctx), &monitor)?;
            let judge = eval_script(&ctx, &monitor, JUDGE, "settee-validate")
                .and_then(|judge| judge.get::<Function>());
            let judge = Persistent::save(&ctx, settle_all(&ctx, judge, &monitor)?);
            let fns = fns
                .iter()
                .map(|source| compile_validate(&ctx, source, &monitor))
                .collect::<Result<Vec<_>, _>>()?;
            settle_all(&ctx, run_pending_jobs(&ctx, &monitor), &monitor)?;
            Ok::<_, JsError>((fns, judge, classes))
        })?;
        Ok(Validator {
            fns,
            judge,
            emitted,
            classes,
            monitor,
            limits,
            context,
            _runtime: runtime,
        })
    }

    /// Runs every function in order on `(newDoc, oldDoc, userCtx, secObj)`, each given as
    /// JSON text (`old_doc` is `None` for a new document, which the functions see as
    /// `null`), and stops at the first rejection. Each function gets its own copies of the
    /// arguments, which it may modify without effect, and its own deadline, as each is a
    /// separate query-server call in CouchDB.
    pub fn validate(
        &mut self,
        new_doc: &str,
        old_doc: Option<&str>,
        user_ctx: &str,
        sec_obj: &str,
    ) -> Result<(), Rejection> {
        let args = [
            parse("newDoc", new_doc)?,
            old_doc.map_or(Ok(Json::Null), |old| parse("oldDoc", old))?,
            parse("userCtx", user_ctx)?,
            parse("secObj", sec_obj)?,
        ];
        let this = &*self;
        this.context
            .with(|ctx| this.fns.iter().try_for_each(|f| this.run(&ctx, f, &args)))
    }

    /// The design-document ids of the compiled functions, in the order they run.
    pub fn ddoc_ids(&self) -> impl Iterator<Item = &str> {
        self.fns.iter().map(|f| f.ddoc_id.as_str())
    }

    fn run<'js>(
        &self,
        ctx: &Ctx<'js>,
        f: &CompiledValidate,
        args: &[Json; 4],
    ) -> Result<(), Rejection> {
        let _armed = self.monitor.start(self.limits.timeout);
        let outcome = self.call(ctx, f, args);
        // Anything the function emitted means nothing here.
        self.emitted.borrow_mut().clear();
        match outcome {
            Ok(()) if self.monitor.out_of_memory() => Err(JsError::OutOfMemory.into()),
            Ok(()) => Ok(()),
            Err(rquickjs::Error::Exception) if !self.stopped() => {
                let thrown = ctx.catch();
                let verdict = self.judge(ctx, thrown);
                if let Err(rejection) = &verdict {
                    tracing::debug!(target: "settee_js", ddoc = %f.ddoc_id,
                        "validate_doc_update rejected the document: {rejection}");
                }
                verdict
            }
            Err(e) => {
                let failure = settle(ctx, Err::<(), _>(e), &self.monitor)
                    .expect_err("a failed call settles to a failure");
                Err(failure.into_error().into())
            }
        }
    }

    /// Whether the monitor, not user code, ended the call.
    fn stopped(&self) -> bool {
        self.monitor.timed_out() || self.monitor.out_of_memory()
    }

    fn call<'js>(
        &self,
        ctx: &Ctx<'js>,
        f: &CompiledValidate,
        args: &[Json; 4],
    ) -> rquickjs::Result<()> {
        let function = f.function.clone().restore(ctx)?;
        let require = f.require.clone().restore(ctx)?;
        let ddoc = f.ddoc.clone().restore(ctx)?;
        ctx.globals().set("require", require)?;
        let build = Builder::new(ctx, false);
        let [new_doc, old_doc, user_ctx, sec_obj] = args;
        function.call::<_, Value>((
            This(ddoc),
            build.value(new_doc)?,
            build.value(old_doc)?,
            build.value(user_ctx)?,
            build.value(sec_obj)?,
        ))?;
        run_pending_jobs(ctx, &self.monitor)
    }

    /// Turns a thrown value into CouchDB's verdict.
    fn judge<'js>(&self, ctx: &Ctx<'js>, thrown: Value<'js>) -> Result<(), Rejection> {
        let verdict = judged(ctx, &self.judge, self.classes, &self.monitor, thrown)
            .map_err(|f| f.into_error())?;
        answer(verdict)
    }
}

/// What the prelude's `judge` makes of a thrown value (the pair CouchDB's query server
/// answers with), as JSON. A value JSON cannot hold (a cycle, a BigInt) leaves CouchDB's
/// query server without an answer until its timeout kills it: a failure here too.
pub(crate) fn judged<'js>(
    ctx: &Ctx<'js>,
    judge: &Persistent<Function<'static>>,
    classes: Classes,
    monitor: &Monitor,
    thrown: Value<'js>,
) -> Result<Json, Failure> {
    let converter = Converter { classes, monitor };
    let result = judge
        .clone()
        .restore(ctx)
        .and_then(|judge| judge.call::<_, Array>((thrown,)))
        .and_then(|pair| converter.to_json(pair.as_value()));
    settle(ctx, result, monitor)
}

impl Drop for Validator {
    fn drop(&mut self) {
        // Rows emitted by an interrupted call hold JS values: release them while the
        // runtime is alive.
        self.emitted.borrow_mut().clear();
    }
}

fn compile_validate<'js>(
    ctx: &Ctx<'js>,
    source: &ValidateSource,
    monitor: &Monitor,
) -> Result<CompiledValidate, JsError> {
    let what = format!(
        "validate_doc_update function of design document `{}`",
        source.ddoc_id
    );
    let ddoc = Builder::new(ctx, false)
        .value(&source.ddoc)
        .and_then(|ddoc| ddoc.get::<Object>());
    let ddoc = settle_all(ctx, ddoc, monitor).map_err(|e| match e {
        JsError::Thrown(reason) => JsError::Compile {
            what: what.clone(),
            reason,
        },
        other => other,
    })?;
    let require =
        env::require_function(ctx, monitor, ddoc.clone().into_value()).and_then(|require| {
            ctx.globals()
                .set("require", require.clone())
                .map(|()| require)
        });
    let require = settle_all(ctx, require, monitor)?;
    let function = compile_function(ctx, &source.source, &what, monitor, dialect(&source.ddoc))?;
    // CouchDB keeps the compiled function in place of the source on the design document.
    let replaced = ddoc.set("validate_doc_update", function.clone());
    settle_all(ctx, replaced, monitor)?;
    Ok(CompiledValidate {
        ddoc_id: source.ddoc_id.clone(),
        ddoc: Persistent::save(ctx, ddoc),
        require: Persistent::save(ctx, require),
        function: Persistent::save(ctx, function),
    })
}

fn parse(what: &str, text: &str) -> Result<Json, Rejection> {
    serde_json::from_str(text)
        .map_err(|e| JsError::Internal(format!("{what} is not valid JSON: {e}")).into())
}

/// The Erlang half: `couch_os_process` reads an `["error" | "fatal", name, reason]` line as
/// an error, whatever wrote it; `couch_query_servers:validate_doc_update` accepts `1` or
/// `true`, and maps single-member objects and strings.
fn answer(verdict: Json) -> Result<(), Rejection> {
    let Json::Array(mut parts) = verdict else {
        return Err(JsError::Internal("validate verdict is not an array".into()).into());
    };
    let (tag, value) = match parts.len() {
        2 => (parts.remove(0), parts.remove(0)),
        3 => (parts.remove(0), Json::Array(parts)),
        _ => return Err(JsError::Internal("malformed validate verdict".into()).into()),
    };
    match tag.as_str() {
        Some("respond") => respond(value),
        _ => Err(error_term(value)),
    }
}

/// The function's answer as CouchDB's line reader and `validate_doc_update` take it.
fn respond(value: Json) -> Result<(), Rejection> {
    match value {
        Json::Array(ref items)
            if items.len() == 3 && matches!(items[0].as_str(), Some("error" | "fatal")) =>
        {
            Err(error_term(Json::Array(items[1..].to_vec())))
        }
        Json::Bool(true) => Ok(()),
        Json::Number(ref n) if n.as_f64() == Some(1.0) => Ok(()),
        Json::Object(members) if members.len() == 1 => {
            let (key, reason) = members.into_iter().next().expect("one member");
            Err(match key.as_str() {
                "forbidden" => Rejection::Forbidden(reason),
                "unauthorized" => Rejection::Unauthorized(reason),
                _ => unknown_error(reason),
            })
        }
        reason @ Json::String(_) => Err(unknown_error(reason)),
        // CouchDB has no case for anything else: the request fails with a 500.
        other => Err(unknown_error(other)),
    }
}

/// `[name, reason]` as CouchDB's `{name, reason}` error term; `forbidden` and
/// `unauthorized` keep their meaning whichever way they arrive.
pub(crate) fn error_term(pair: Json) -> Rejection {
    let Json::Array(mut pair) = pair else {
        return unknown_error(pair);
    };
    let reason = pair.pop().unwrap_or(Json::Null);
    match pair.pop() {
        Some(Json::String(name)) => match name.as_str() {
            "forbidden" => Rejection::Forbidden(reason),
            "unauthorized" => Rejection::Unauthorized(reason),
            _ => Rejection::Error {
                error: name,
                reason,
            },
        },
        // Erlang cannot make an error name of anything but a string: the request fails.
        Some(other) => unknown_error(other),
        None => unknown_error(reason),
    }
}

fn unknown_error(reason: Json) -> Rejection {
    Rejection::Error {
        error: "unknown_error".into(),
        reason,
    }
}
