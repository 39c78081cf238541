//! Reduce functions as the tree sees them ([`Reducer`]): built-ins run natively
//! ([`settee_core::reduce`]), JavaScript in a [`ViewRuntime`].
//!
//! A stored partial is empty (no reduce function), `0x01` + JSON text (a partial result),
//! or `0x02` + `{"error","reason"}` (the reduction failed). A failure is kept in the tree
//! rather than failing the index build, so map queries keep working and reduce queries
//! touching the failed range report the error, as CouchDB reports it.

use crate::layout::decode_payload;
use crate::tree::{Reducer, Row};
use serde_json::{json, Value};
use settee_core::reduce::Builtin;
use settee_js::{JsError, Limits, ViewFns, ViewRuntime};

const OK: u8 = 1;
const ERR: u8 = 2;
/// CouchDB's `reduce_limit`: output above this many bytes must be under half the input.
const REDUCE_LIMIT_BYTES: usize = 200;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReduceFailure {
    pub error: String,
    pub reason: String,
}

fn ok(v: &Value) -> Vec<u8> {
    let mut out = vec![OK];
    serde_json::to_writer(&mut out, v).expect("json");
    out
}

fn err(error: &str, reason: &str) -> Vec<u8> {
    let mut out = vec![ERR];
    serde_json::to_writer(&mut out, &json!({"error": error, "reason": reason})).expect("json");
    out
}

/// The value of a stored partial.
pub fn decode(bytes: &[u8]) -> Result<Value, ReduceFailure> {
    let failure = |error: &str, reason: &str| ReduceFailure {
        error: error.into(),
        reason: reason.into(),
    };
    match bytes.split_first() {
        Some((&OK, json)) => serde_json::from_slice(json)
            .map_err(|_| failure("corrupted_index", "unreadable reduction")),
        Some((&ERR, json)) => {
            let v: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
            let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            Err(ReduceFailure {
                error: s("error"),
                reason: s("reason"),
            })
        }
        _ => Err(failure("corrupted_index", "missing reduction")),
    }
}

/// Rows' keys and values as JSON, or an error partial.
fn parse_rows(rows: &[&Row]) -> Result<Vec<(Value, String, Value)>, Vec<u8>> {
    rows.iter()
        .map(|r| {
            let p = decode_payload(&r.value).ok_or_else(|| err("corrupted_index", "bad row"))?;
            let k = serde_json::from_slice(p.key).map_err(|_| err("corrupted_index", "bad key"))?;
            let v =
                serde_json::from_slice(p.value).map_err(|_| err("corrupted_index", "bad value"))?;
            Ok((k, p.doc_id.to_owned(), v))
        })
        .collect()
}

/// Partials as values; the first failure wins.
fn parse_parts(parts: &[&[u8]]) -> Result<Vec<Value>, Vec<u8>> {
    parts
        .iter()
        .map(|p| decode(p).map_err(|f| err(&f.error, &f.reason)))
        .collect()
}

pub struct BuiltinReducer(pub Builtin);

impl Reducer for BuiltinReducer {
    fn reduce(&mut self, rows: &[&Row]) -> Vec<u8> {
        let rows = match parse_rows(rows) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let pairs: Vec<(&Value, &Value)> = rows.iter().map(|(k, _, v)| (k, v)).collect();
        builtin_partial(self.0.reduce(&pairs))
    }

    fn rereduce(&mut self, parts: &[&[u8]]) -> Vec<u8> {
        let values = match parse_parts(parts) {
            Ok(v) => v,
            Err(e) => return e,
        };
        let refs: Vec<&Value> = values.iter().collect();
        builtin_partial(self.0.rereduce(&refs))
    }
}

/// CouchDB shows a `_sum` error as the row's value (status 200), and rereducing it gives
/// it back; other built-in errors fail the query.
fn builtin_partial(r: Result<Value, settee_core::reduce::ReduceError>) -> Vec<u8> {
    match r {
        Ok(v) => ok(&v),
        Err(e) if e.is_row_value() => ok(&e.to_json()),
        Err(e) => err(&e.error, &e.reason),
    }
}

/// JavaScript reduces of one view group, sharing one lazily started runtime.
pub struct JsReducers<'a> {
    fns: &'a ViewFns,
    limits: Limits,
    reduce_limit: bool,
    rt: Option<ViewRuntime>,
}

impl<'a> JsReducers<'a> {
    pub fn new(fns: &'a ViewFns, limits: Limits, reduce_limit: bool) -> JsReducers<'a> {
        JsReducers {
            fns,
            limits,
            reduce_limit,
            rt: None,
        }
    }

    /// The reducer of view number `view`.
    pub fn view(&mut self, view: usize) -> JsReducer<'_, 'a> {
        JsReducer { all: self, view }
    }

    fn call(
        &mut self,
        input_len: usize,
        f: impl FnOnce(&mut ViewRuntime) -> Result<Value, JsError>,
    ) -> Vec<u8> {
        if self.rt.is_none() {
            match ViewRuntime::new(self.fns, self.limits) {
                Ok(rt) => self.rt = Some(rt),
                Err(e) => return js_error(&e),
            }
        }
        let rt = self.rt.as_mut().expect("started above");
        match f(rt) {
            Ok(v) => self.limited(v, input_len),
            Err(e) => {
                if matches!(e, JsError::Timeout | JsError::OutOfMemory) {
                    self.rt = None; // a stopped runtime is not reused
                }
                js_error(&e)
            }
        }
    }

    fn limited(&self, v: Value, input_len: usize) -> Vec<u8> {
        let out = ok(&v);
        let len = out.len() - 1;
        if self.reduce_limit && len > REDUCE_LIMIT_BYTES && len * 2 > input_len {
            let text = String::from_utf8_lossy(&out[1..]);
            let preview: String = text.chars().take(100).collect();
            return err(
                "reduce_overflow_error",
                &format!(
                    "Reduce output must shrink more rapidly: Current output: '{preview}'... (first 100 of {len} bytes)"
                ),
            );
        }
        out
    }
}

pub fn js_error(e: &JsError) -> Vec<u8> {
    let (error, reason) = js_error_parts(e);
    err(error, &reason)
}

/// CouchDB's error name and reason for a failed JavaScript call.
pub fn js_error_parts(e: &JsError) -> (&'static str, String) {
    match e {
        JsError::Compile { what, reason } => ("compilation_error", format!("{what}: {reason}")),
        JsError::Timeout => ("os_process_error", "JavaScript call timed out".into()),
        JsError::OutOfMemory => (
            "os_process_error",
            "JavaScript call exceeded the memory limit".into(),
        ),
        JsError::Thrown(m) => ("reduce_error", m.clone()),
        JsError::Internal(m) => ("os_process_error", m.clone()),
    }
}

pub struct JsReducer<'r, 'a> {
    all: &'r mut JsReducers<'a>,
    view: usize,
}

impl Reducer for JsReducer<'_, '_> {
    fn reduce(&mut self, rows: &[&Row]) -> Vec<u8> {
        let input_len = rows.iter().map(|r| r.value.len()).sum();
        let rows = match parse_rows(rows) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let refs: Vec<(&Value, &str, &Value)> =
            rows.iter().map(|(k, id, v)| (k, id.as_str(), v)).collect();
        let view = self.view;
        self.all.call(input_len, |rt| rt.reduce(view, &refs))
    }

    fn rereduce(&mut self, parts: &[&[u8]]) -> Vec<u8> {
        let input_len = parts.iter().map(|p| p.len()).sum();
        let values = match parse_parts(parts) {
            Ok(v) => v,
            Err(e) => return e,
        };
        let refs: Vec<&Value> = values.iter().collect();
        let view = self.view;
        self.all.call(input_len, |rt| rt.rereduce(view, &refs))
    }
}
