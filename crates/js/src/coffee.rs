//! CoffeeScript sources, compiled to JavaScript as CouchDB's `coffeescript` query server
//! compiles them (`CoffeeScript.compile(source, {bare: true})`, then evaluated as
//! JavaScript).
//!
//! The compiler (CoffeeScript 1.12.7, `coffee-script.js`, 330 KB of JavaScript) lives in a
//! QuickJS runtime of its own, one per thread, created the first time the thread meets a
//! CoffeeScript design document, so runtimes that serve JavaScript never load it. Its
//! output is plain JavaScript, evaluated where the JavaScript of other design documents
//! is; compiling is a pure function of the source, so recent results are kept per thread.

use std::cell::RefCell;

use rquickjs::{Array, Context, Function, Persistent, Runtime};

use crate::error::JsError;
use crate::monitor::Monitor;
use crate::runtime::{new_context, settle_all};
use crate::script::eval_script;
use crate::Limits;

const COMPILER: &str = include_str!("coffee-script.js");

/// `[true, javascript]`, or `[false, message]` with the message as CouchDB reports it (the
/// error's own `toString`: `[stdin]:1:10: error: unmatched ]` and the line, marked).
const COMPILE: &str = r#"(function (source) {
  try { return [true, CoffeeScript.compile(source, {bare: true})]; }
  catch (e) { return [false, String(e)]; }
})"#;

/// Compiled sources kept per thread.
const CACHED: usize = 64;

/// The budget of one compilation (and of loading the compiler).
const LIMITS: Limits = Limits {
    timeout: std::time::Duration::from_secs(5),
    memory_limit: 64 * 1024 * 1024,
};

struct Compiler {
    // Drop order: the function before the context and runtime that own it.
    compile: Persistent<Function<'static>>,
    monitor: Monitor,
    context: Context,
    _runtime: Runtime,
}

thread_local! {
    static COMPILER_SLOT: RefCell<Option<Compiler>> = const { RefCell::new(None) };
    /// (CoffeeScript source, its JavaScript or compile error), most recent last.
    static RESULTS: RefCell<Vec<(String, Result<String, String>)>> = const { RefCell::new(Vec::new()) };
}

/// The JavaScript of a CoffeeScript source, or the compiler's error message. The outer
/// `Err` is the compiler's own failure (time or memory limit, a broken runtime).
pub(crate) fn to_javascript(source: &str) -> Result<Result<String, String>, JsError> {
    let cached = RESULTS.with_borrow(|r| {
        r.iter()
            .rev()
            .find(|(s, _)| s == source)
            .map(|(_, out)| out.clone())
    });
    if let Some(out) = cached {
        return Ok(out);
    }
    let out = COMPILER_SLOT.with_borrow_mut(|slot| {
        let compiler = match slot {
            Some(c) => c,
            None => slot.insert(Compiler::new()?),
        };
        let out = compiler.compile(source);
        if out.is_err() {
            // A runtime stopped for time or memory is not reused.
            *slot = None;
        }
        out
    })?;
    RESULTS.with_borrow_mut(|r| {
        if r.len() == CACHED {
            drop(r.remove(0));
        }
        r.push((source.to_owned(), out.clone()));
    });
    Ok(out)
}

impl Compiler {
    fn new() -> Result<Compiler, JsError> {
        let (runtime, context, monitor) = new_context(LIMITS)?;
        let compile = context.with(|ctx| {
            let _armed = monitor.start(LIMITS.timeout);
            let loaded = eval_script(&ctx, &monitor, COMPILER, "coffee-script.js");
            settle_all(&ctx, loaded, &monitor)?;
            let compile =
                eval_script(&ctx, &monitor, COMPILE, "settee-coffee").and_then(|f| f.get());
            let compile: Function = settle_all(&ctx, compile, &monitor)?;
            Ok::<_, JsError>(Persistent::save(&ctx, compile))
        })?;
        Ok(Compiler {
            compile,
            monitor,
            context,
            _runtime: runtime,
        })
    }

    fn compile(&self, source: &str) -> Result<Result<String, String>, JsError> {
        self.context.with(|ctx| {
            let _armed = self.monitor.start(LIMITS.timeout);
            let compile = self.compile.clone().restore(&ctx);
            let answer = compile.and_then(|f| {
                let pair: Array = f.call((source,))?;
                Ok((pair.get::<bool>(0)?, pair.get::<String>(1)?))
            });
            let (ok, text) = settle_all(&ctx, answer, &self.monitor)?;
            Ok(if ok { Ok(text) } else { Err(text) })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_bare_functions() {
        let js = to_javascript("(doc) ->\n  emit doc._id, doc.v if doc.k\n")
            .unwrap()
            .unwrap();
        assert!(js.starts_with("(function(doc) {"), "{js}");
        assert!(js.contains("return emit(doc._id, doc.v);"), "{js}");
    }

    #[test]
    fn errors_read_as_couchdb_prints_them() {
        let err = to_javascript("(doc) -> ]]] emit").unwrap().unwrap_err();
        assert_eq!(
            err,
            "[stdin]:1:10: error: unmatched ]\n(doc) -> ]]] emit\n         ^"
        );
        let err = to_javascript("function(doc){ emit(doc._id, 1); }")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            err,
            "[stdin]:1:1: error: reserved word 'function'\nfunction(doc){ emit(doc._id, 1); }\n^^^^^^^^"
        );
        // Cached answers are the same.
        assert_eq!(
            to_javascript("(doc) -> ]]] emit").unwrap().unwrap_err(),
            "[stdin]:1:10: error: unmatched ]\n(doc) -> ]]] emit\n         ^"
        );
    }
}
