//! Errors, and the classification of what a failed call into QuickJS left behind.

use rquickjs::{Ctx, Value};

use crate::monitor::Monitor;

/// Why a call into the JavaScript environment failed.
#[derive(Debug, thiserror::Error)]
pub enum JsError {
    /// A function or library module that does not compile or does not evaluate to a function.
    #[error("compilation error in {what}: {reason}")]
    Compile {
        /// What was being compiled, as CouchDB says it failed, e.g. "Compilation of the
        /// map function in the 'by_x' view failed".
        what: String,
        /// CouchDB-style reason, e.g. "Expression does not eval to a function. (...)".
        reason: String,
    },
    /// A call exceeded [`Limits::timeout`](crate::Limits::timeout).
    #[error("JavaScript call exceeded its time limit")]
    Timeout,
    /// The runtime hit [`Limits::memory_limit`](crate::Limits::memory_limit).
    #[error("JavaScript runtime exceeded its memory limit")]
    OutOfMemory,
    /// A JavaScript exception escaped (its message, string form, or JSON).
    #[error("JavaScript exception: {0}")]
    Thrown(String),
    /// Anything else: a bug or a broken invariant, never the user's code.
    #[error("internal JavaScript environment error: {0}")]
    Internal(String),
}

/// A failed call, before deciding whether it is the user's problem or the runtime's.
#[derive(Debug)]
pub(crate) enum Failure {
    /// User code threw (or produced an unconvertible value). `fatal` marks CouchDB's
    /// `"fatal_error"` / `["fatal", ...]` forms, which abort the whole map_doc.
    Thrown { message: String, fatal: bool },
    /// The runtime itself failed: timeout, out of memory, internal error.
    Abort(JsError),
}

impl Failure {
    /// Collapses into the public error, for calls where a throw is simply an error.
    pub(crate) fn into_error(self) -> JsError {
        match self {
            Failure::Thrown { message, .. } => JsError::Thrown(message),
            Failure::Abort(e) => e,
        }
    }
}

/// The outcome of a call into QuickJS. A call that went over the memory limit fails with
/// `OutOfMemory` even if user code caught the error it got, since its results may be
/// incomplete.
pub(crate) fn settle<T>(
    ctx: &Ctx<'_>,
    result: rquickjs::Result<T>,
    monitor: &Monitor,
) -> Result<T, Failure> {
    match result {
        Ok(_) if monitor.out_of_memory() => Err(Failure::Abort(JsError::OutOfMemory)),
        Ok(value) => Ok(value),
        Err(err) => Err(classify(ctx, err, monitor)),
    }
}

/// Turns an rquickjs error into a [`Failure`], taking (and so clearing) the pending exception.
fn classify(ctx: &Ctx<'_>, err: rquickjs::Error, monitor: &Monitor) -> Failure {
    let exception = match err {
        rquickjs::Error::Exception => Some(ctx.catch()),
        _ => None,
    };
    if monitor.timed_out() {
        return Failure::Abort(JsError::Timeout);
    }
    if monitor.out_of_memory() || matches!(err, rquickjs::Error::Allocation) {
        return Failure::Abort(JsError::OutOfMemory);
    }
    let Some(exc) = exception else {
        return Failure::Abort(JsError::Internal(err.to_string()));
    };
    let failure = Failure::Thrown {
        fatal: is_fatal(&exc),
        message: describe(&exc),
    };
    // Describing runs user code (getters, toJSON, toString) that may itself have thrown.
    drop(ctx.catch());
    failure
}

/// CouchDB aborts map processing when a function throws `"fatal_error"` or `["fatal", ...]`.
fn is_fatal(exc: &Value<'_>) -> bool {
    if let Some(s) = exc.as_string() {
        return s.to_string().is_ok_and(|s| s == "fatal_error");
    }
    exc.as_array()
        .and_then(|a| a.get::<Option<String>>(0).ok().flatten())
        .is_some_and(|first| first == "fatal")
}

/// The text reported for a thrown value: `Name: message (at place)` for errors, the string
/// itself for strings, JSON for other values.
fn describe(exc: &Value<'_>) -> String {
    if let Some(err) = exc.as_exception() {
        return describe_error(err);
    }
    if let Some(s) = exc.as_string() {
        return s.to_string().unwrap_or_else(|_| "<invalid string>".into());
    }
    if exc.is_object() {
        if let Ok(Some(json)) = exc.ctx().json_stringify(exc.clone()) {
            if let Ok(json) = json.to_string() {
                return json;
            }
        }
    }
    let coerced: rquickjs::Result<rquickjs::Coerced<String>> = exc.get();
    coerced.map_or_else(|_| "<unprintable exception>".into(), |c| c.0)
}

fn describe_error(err: &rquickjs::Exception<'_>) -> String {
    let name: String = err.get("name").unwrap_or_else(|_| "Error".into());
    let mut text = format!("{name}: {}", err.message().unwrap_or_default());
    let place = err.stack().and_then(|stack| {
        let line = stack.lines().find(|l| l.trim_start().starts_with("at "))?;
        Some(line.trim().to_owned())
    });
    if let Some(place) = place {
        text.push_str(&format!(" ({place})"));
    }
    text
}
