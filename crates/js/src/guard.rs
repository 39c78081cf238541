//! Refuses runtime code evaluation, as CouchDB's default JavaScript server does: `couchjs`
//! (SpiderMonkey) installs a content-security callback that blocks `eval()` and the
//! `Function()` constructors unless it runs with `-e`, so such a call throws an
//! `EvalError` and the function that made it fails (a map function emits nothing for the
//! document; see `view_sandboxing_test.exs`, "runtime code evaluation can be prevented").
//!
//! Design-document code itself is compiled from Rust (`compile.rs`), not through these.
//! Replacing them also keeps QuickJS's parser from running on user input while the hard
//! memory cap is in force (it does not survive allocation failure; see `monitor`).

use rquickjs::{Ctx, Function};

use crate::monitor::Monitor;
use crate::script::eval_script;

/// Replaces the global `eval` and `Function` and the `constructor` of every kind of
/// function prototype (plain, async, generator, async generator) with functions that throw
/// SpiderMonkey's `EvalError`.
const GUARD: &str = r#"(function (global) {
  "use strict";
  function refuse(name) {
    var message = "call to " + name + "() blocked by CSP";
    return function () { throw new EvalError(message); };
  }
  Object.defineProperty(global, "eval", {
    value: refuse("eval"), writable: true, configurable: true, enumerable: false
  });
  var samples = [function () {}, async function () {}, function* () {}, async function* () {}];
  for (var i = 0; i < samples.length; i++) {
    var prototype = Object.getPrototypeOf(samples[i]);
    var replacement = refuse("Function");
    Object.defineProperty(replacement, "prototype", { value: prototype });
    Object.defineProperty(prototype, "constructor", {
      value: replacement, writable: true, configurable: true, enumerable: false
    });
    if (i === 0) {
      Object.defineProperty(global, "Function", {
        value: replacement, writable: true, configurable: true, enumerable: false
      });
    }
  }
})"#;

pub(crate) fn install<'js>(ctx: &Ctx<'js>, monitor: &Monitor) -> rquickjs::Result<()> {
    let guard: Function = eval_script(ctx, monitor, GUARD, "settee-guard")?.get()?;
    guard.call((ctx.globals(),))
}
