//! Compiling CouchDB function sources.
//!
//! CouchDB's QuickJS is patched to accept an anonymous `function(...) {...}` at the start of
//! a script as an expression, and takes the script's completion value. Stock QuickJS rejects
//! that, so the source is first evaluated behind `0,`, which turns a leading function
//! (anonymous or named) into an expression and leaves comments, a trailing `;` and line
//! numbers intact. Sources that are statement lists ending in a function expression
//! (`var x = 1; (function (doc) {...})`) fail that and are evaluated as written.
//!
//! CoffeeScript sources are compiled to JavaScript first ([`crate::coffee`]); errors then
//! quote the CoffeeScript source, as CouchDB's do.

use crate::language::Dialect;
use rquickjs::{Ctx, Function};

use crate::error::{settle, Failure, JsError};
use crate::monitor::Monitor;
use crate::script::eval_script;

/// Compiles `source` (CouchDB's expression form, in `dialect`) to a function; `what`
/// names it in errors.
pub(crate) fn compile_function<'js>(
    ctx: &Ctx<'js>,
    source: &str,
    what: &str,
    monitor: &Monitor,
    dialect: Dialect,
) -> Result<Function<'js>, JsError> {
    if source.trim().is_empty() {
        return Err(compile_error(what, "missing function".into()));
    }
    let javascript = match dialect {
        Dialect::JavaScript => std::borrow::Cow::Borrowed(source),
        Dialect::CoffeeScript => match crate::coffee::to_javascript(source)? {
            Ok(js) => std::borrow::Cow::Owned(js),
            Err(message) => return Err(compile_error(what, format!("{message} ({source})"))),
        },
    };
    let as_expression = evaluate(ctx, format!("0,{javascript}"), what, monitor);
    if let Ok(Some(f)) = as_expression {
        return Ok(f);
    }
    let as_script = evaluate(ctx, javascript.into_owned(), what, monitor);
    match (as_expression, as_script) {
        (_, Ok(Some(f))) => Ok(f),
        (Err(Failure::Abort(e)), _) | (_, Err(Failure::Abort(e))) => Err(e),
        (Ok(_), _) | (_, Ok(_)) => Err(compile_error(
            what,
            format!("Expression does not eval to a function. ({source})"),
        )),
        (Err(Failure::Thrown { message, .. }), Err(_)) => Err(compile_error(
            what,
            format!("{} ({source})", without_place(&message)),
        )),
    }
}

/// An exception's text without the `(at script:line:col)` Settee adds to thrown errors:
/// CouchDB reports a compile error as the error's `toString()` alone.
fn without_place(message: &str) -> &str {
    match message.rsplit_once(" (at ") {
        Some((text, place)) if place.ends_with(')') && !place.contains('\n') => text,
        _ => message,
    }
}

/// Evaluates a global script; `Ok(None)` when its value is not a function.
fn evaluate<'js>(
    ctx: &Ctx<'js>,
    script: String,
    what: &str,
    monitor: &Monitor,
) -> Result<Option<Function<'js>>, Failure> {
    let value = settle(ctx, eval_script(ctx, monitor, &script, what), monitor)?;
    Ok(value.into_function())
}

/// Compiles a CommonJS module body to `function (module, exports, require)`.
pub(crate) fn compile_module<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    source: &str,
    id: &str,
) -> rquickjs::Result<Function<'js>> {
    // The newline before `}` keeps a trailing line comment from swallowing it.
    let wrapped = format!("(function (module, exports, require) {{ {source}\n}})");
    eval_script(ctx, monitor, &wrapped, id)?.get()
}

/// The dialect of a design document's functions (a language this engine does not run is
/// never handed to it: the caller routes it to its query server).
pub(crate) fn dialect(ddoc: &serde_json::Value) -> Dialect {
    Dialect::of_ddoc(ddoc).unwrap_or_default()
}

fn compile_error(what: &str, reason: String) -> JsError {
    JsError::Compile {
        what: what.to_owned(),
        reason,
    }
}
