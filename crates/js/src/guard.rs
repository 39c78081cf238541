//! Routes user code's own parsing (`eval`, `new Function`) through [`eval_script`], so
//! that QuickJS's parser always runs with the hard memory cap lifted (it does not survive
//! allocation failure; see the `monitor` module).
//!
//! The replacement `eval` evaluates in the global scope, as an indirect `eval` does: code
//! that relies on a direct `eval` seeing the caller's local variables does not work here.

use rquickjs::function::Rest;
use rquickjs::object::Property;
use rquickjs::{Ctx, Function, Object, Value};

use crate::monitor::Monitor;
use crate::script::eval_script;
use crate::to_json::rust_string;

/// The four function constructors, by the keyword that starts their source.
const CONSTRUCTORS: [(&str, &str); 4] = [
    ("function", "(function () {})"),
    ("async function", "(async function () {})"),
    ("function*", "(function* () {})"),
    ("async function*", "(async function* () {})"),
];

/// Replaces the global `eval`, `Function` and the constructors reachable through
/// `(async) (generator) function` prototypes.
pub(crate) fn install<'js>(ctx: &Ctx<'js>, monitor: &Monitor) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    globals.set("eval", guarded_eval(ctx, monitor.clone())?)?;
    for (keyword, sample) in CONSTRUCTORS {
        let sample: Object = eval_script(ctx, monitor, sample, "settee-guard")?.get()?;
        let original: Object = sample.get("constructor")?;
        let prototype: Object = original.get("prototype")?;
        let replacement = guarded_constructor(ctx, monitor.clone(), keyword)?;
        replacement.prop("prototype", Property::from(prototype.clone()))?;
        prototype.prop(
            "constructor",
            Property::from(replacement.clone())
                .writable()
                .configurable(),
        )?;
        if keyword == "function" {
            globals.set("Function", replacement)?;
        }
    }
    Ok(())
}

fn guarded_eval<'js>(ctx: &Ctx<'js>, monitor: Monitor) -> rquickjs::Result<Function<'js>> {
    let eval = move |ctx: Ctx<'js>, source: rquickjs::function::Opt<Value<'js>>| match source.0 {
        Some(text) if text.is_string() => eval_script(&ctx, &monitor, &rust_string(&text)?, "eval"),
        Some(other) => Ok(other),
        None => Ok(Value::new_undefined(ctx.clone())),
    };
    Function::new(ctx.clone(), eval)?.with_name("eval")
}

/// `new Function(p1, ..., body)` for one kind of function.
fn guarded_constructor<'js>(
    ctx: &Ctx<'js>,
    monitor: Monitor,
    keyword: &'static str,
) -> rquickjs::Result<Function<'js>> {
    let construct = move |ctx: Ctx<'js>, args: Rest<Value<'js>>| {
        let mut texts = Vec::with_capacity(args.0.len());
        for arg in &args.0 {
            texts.push(coerce_string(arg)?);
        }
        let body = texts.pop().unwrap_or_default();
        let source = format!(
            "({keyword} anonymous({}\n) {{\n{body}\n}})",
            texts.join(",")
        );
        eval_script(&ctx, &monitor, &source, "anonymous")
    };
    let f = Function::new(ctx.clone(), construct)?.with_name(constructor_name(keyword))?;
    Ok(f.with_constructor(true))
}

fn coerce_string(v: &Value<'_>) -> rquickjs::Result<String> {
    if v.is_string() {
        return rust_string(v);
    }
    let coerced: rquickjs::Coerced<String> = v.get()?;
    Ok(coerced.0)
}

fn constructor_name(keyword: &str) -> &'static str {
    match keyword {
        "async function" => "AsyncFunction",
        "function*" => "GeneratorFunction",
        "async function*" => "AsyncGeneratorFunction",
        _ => "Function",
    }
}
