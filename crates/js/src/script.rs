//! Evaluating source text: parse with the memory cap lifted, run under it.

use std::ffi::CString;

use rquickjs::{qjs, Ctx, Value};

use crate::monitor::Monitor;

/// Evaluates `source` as a sloppy-mode global script and returns its completion value.
/// `filename` names it in stack traces.
pub(crate) fn eval_script<'js>(
    ctx: &Ctx<'js>,
    monitor: &Monitor,
    source: &str,
    filename: &str,
) -> rquickjs::Result<Value<'js>> {
    let text = CString::new(source)?;
    let name = CString::new(filename)?;
    let raw = ctx.as_raw().as_ptr();
    let flags = (qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_COMPILE_ONLY) as i32;
    // SAFETY: `text` is NUL-terminated as JS_Eval requires and outlives the call; the
    // returned value is owned and either an exception marker or a compiled script.
    let compiled = monitor.unlimited(|| unsafe {
        qjs::JS_Eval(raw, text.as_ptr(), source.len() as _, name.as_ptr(), flags)
    });
    // SAFETY: JS_EvalFunction consumes the compiled script and returns an owned value.
    unsafe {
        if qjs::JS_IsException(compiled) {
            return Err(rquickjs::Error::Exception);
        }
        let result = qjs::JS_EvalFunction(raw, compiled);
        if qjs::JS_IsException(result) {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), result))
    }
}
