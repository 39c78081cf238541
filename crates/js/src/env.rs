//! The global scope that design-document functions see: `emit`, `log`, `sum`, `isArray`,
//! `toJSON`, `require` (plus the intrinsics, `JSON` among them).

use std::cell::RefCell;
use std::rc::Rc;

use rquickjs::function::Opt;
use rquickjs::{Ctx, Function, Object, Persistent, Value};
use serde_json::Value as Json;

use crate::compile::compile_module;
use crate::from_json::Builder;
use crate::monitor::Monitor;
use crate::script::eval_script;
use crate::to_json::rust_string;

/// One `emit(key, value)` call, kept as JS values until the map function returns: CouchDB
/// serialises emitted rows only then, so later mutations of an emitted object show.
pub(crate) type EmittedRow = (Persistent<Value<'static>>, Persistent<Value<'static>>);

/// Rows emitted by the map function currently running.
pub(crate) type Emitted = Rc<RefCell<Vec<EmittedRow>>>;

const PRELUDE: &str = include_str!("prelude.js");

/// Installs the view-server globals into the context's global object, with `require`
/// resolving against `{views: {lib}}` (map functions see only `views.lib`, as in CouchDB).
pub(crate) fn install<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    lib: Option<&Json>,
    emitted: &Emitted,
) -> rquickjs::Result<()> {
    let root = match lib {
        Some(lib) => serde_json::json!({ "views": { "lib": lib } }),
        None => serde_json::json!({ "views": {} }),
    };
    let root = Builder::new(ctx, false).value(&root)?;
    install_with_root(ctx, monitor, root, emitted)
}

/// Installs the globals with `require` resolving against `root`.
pub(crate) fn install_with_root<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    root: Value<'js>,
    emitted: &Emitted,
) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    globals.set("emit", emit_function(ctx, Rc::clone(emitted))?)?;
    globals.set("log", Function::new(ctx.clone(), log)?.with_name("log")?)?;
    let json: Object = globals.get("JSON")?;
    globals.set("toJSON", json.get::<_, Function>("stringify")?)?;
    crate::guard::install(ctx, monitor)?;
    let helpers = prelude_helpers(ctx, monitor, root)?;
    for name in ["require", "sum", "isArray"] {
        globals.set(name, helpers.get::<_, Value>(name)?)?;
    }
    Ok(())
}

/// A `require` resolving paths against `root`, with a module cache of its own.
pub(crate) fn require_function<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    root: Value<'js>,
) -> rquickjs::Result<Function<'js>> {
    prelude_helpers(ctx, monitor, root)?.get("require")
}

fn emit_function<'js>(ctx: &Ctx<'js>, emitted: Emitted) -> rquickjs::Result<Function<'js>> {
    let emit = move |ctx: Ctx<'js>, key: Opt<Value<'js>>, value: Opt<Value<'js>>| {
        let undefined = || Value::new_undefined(ctx.clone());
        let key = Persistent::save(&ctx, key.0.unwrap_or_else(undefined));
        let value = Persistent::save(&ctx, value.0.unwrap_or_else(undefined));
        emitted.borrow_mut().push((key, value));
    };
    Function::new(ctx.clone(), emit)?.with_name("emit")
}

/// `log(message)`: strings as they are, anything else as JSON (CouchDB's rule).
fn log<'js>(ctx: Ctx<'js>, message: Opt<Value<'js>>) -> rquickjs::Result<()> {
    let message = message
        .0
        .unwrap_or_else(|| Value::new_undefined(ctx.clone()));
    let text = if message.is_string() {
        rust_string(&message)?
    } else {
        match ctx.json_stringify(message)? {
            Some(json) => json.to_string()?,
            None => "undefined".to_owned(),
        }
    };
    tracing::info!(target: "settee_js", "{text}");
    Ok(())
}

/// Runs the prelude's factory with the object `require` paths start from.
fn prelude_helpers<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    root: Value<'js>,
) -> rquickjs::Result<Object<'js>> {
    let factory: Function = eval_script(ctx, monitor, PRELUDE, "settee-prelude")?.get()?;
    let monitor = monitor.clone();
    let compile = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, source: String, id: String| {
            compile_module(&ctx, &monitor, &source, &id)
        },
    )?;
    factory.call((root, compile))
}
