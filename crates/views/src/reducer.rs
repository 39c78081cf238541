//! Reduce functions as the tree sees them ([`Reducer`]): built-ins run natively
//! ([`settee_core::reduce`]), JavaScript in a [`ViewRuntime`], other languages' in their
//! query server (`reduce`/`rereduce` commands).
//!
//! A stored partial is empty (no reduce function), `0x01` + JSON text (a partial result),
//! or `0x02` + `{"error","reason"}` (the reduction failed). A failure is kept in the tree
//! rather than failing the index build, so map queries keep working and reduce queries
//! touching the failed range report the error, as CouchDB reports it.

use crate::layout::decode_payload;
use crate::tree::{Reducer, RowRef};
use crate::ReduceLimit;
use serde_json::{json, Value};
use settee_core::reduce::Builtin;
use settee_core::varint;
use settee_js::{JsError, Limits, ViewFns, ViewRuntime};
use settee_queryserver::{QueryServers, Result as QsResult};

const OK: u8 = 1;
const ERR: u8 = 2;
/// CouchDB's `reduce_limit`: output longer than this must be under half the input.
const REDUCE_LIMIT_CHARS: usize = 4096;

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

/// Rows' keys, document ids and values, or an error partial. A key or value not `wanted`
/// (`[keys, values]`) is not parsed and reads as null.
fn parse_rows<'r>(
    rows: &[RowRef<'r>],
    wanted: [bool; 2],
) -> Result<Vec<(Value, &'r str, Value)>, Vec<u8>> {
    let parse = |json: &[u8], wanted: bool, what: &str| match wanted {
        true => serde_json::from_slice(json).map_err(|_| err("corrupted_index", what)),
        false => Ok(Value::Null),
    };
    rows.iter()
        .map(|r| {
            let p = decode_payload(r.value).ok_or_else(|| err("corrupted_index", "bad row"))?;
            let k = parse(p.key, wanted[0], "bad key")?;
            let v = parse(p.value, wanted[1], "bad value")?;
            Ok((k, p.doc_id, v))
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
    fn reduce(&mut self, rows: &[RowRef<'_>]) -> Vec<u8> {
        if self.0 == Builtin::Sum {
            if let Some(sum) = sum_small_integers(rows) {
                return ok(&Value::from(sum));
            }
        }
        self.reduce_parsed(rows)
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

impl BuiltinReducer {
    /// The general path: every value read is parsed.
    fn reduce_parsed(&self, rows: &[RowRef<'_>]) -> Vec<u8> {
        // Only `_approx_count_distinct` reads keys and `_count` reads nothing: parsing what
        // is not read was most of a fresh `_sum` index's tree building.
        let wanted = [
            self.0 == Builtin::ApproxCountDistinct,
            self.0 != Builtin::Count,
        ];
        let rows = match parse_rows(rows, wanted) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let pairs: Vec<(&Value, &Value)> = rows.iter().map(|(k, _, v)| (k, v)).collect();
        builtin_partial(self.0.reduce(&pairs))
    }
}

/// The `_sum` of rows whose values are all integers of at most 18 digits, read straight
/// from their JSON text; `None` when any value is something else (the general path then
/// parses them all). The result is the general path's: integers add exactly there too.
/// Parsing each value into a JSON value was half of a fresh `_sum` index's tree writing.
fn sum_small_integers(rows: &[RowRef<'_>]) -> Option<i64> {
    rows.iter().try_fold(0i64, |sum, r| {
        let mut payload = r.value;
        varint::get_bytes(&mut payload)?; // the doc id
        varint::get_bytes(&mut payload)?; // the key
        sum.checked_add(small_integer(payload)?)
    })
}

/// The integer JSON `text` is, when it is one of at most 18 digits as a JSON printer
/// writes it (no leading zero, and not `-0`, which JSON parsers read as a float).
fn small_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    let canonical = match digits {
        [] => false,
        [b'0'] => !negative,
        [first, ..] => *first != b'0' && digits.len() <= 18,
    };
    if !canonical || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = (digits.iter()).fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    Some(if negative { -n } else { n })
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

/// The reduce functions of one view group: JavaScript sharing one lazily started
/// runtime, or (for a group of an external language) its query server's.
pub struct JsReducers<'a> {
    fns: &'a ViewFns,
    limits: Limits,
    reduce_limit: ReduceLimit,
    rt: Option<ViewRuntime>,
    external: Option<(&'a QueryServers, &'a str)>,
}

impl<'a> JsReducers<'a> {
    pub fn new(fns: &'a ViewFns, limits: Limits, reduce_limit: ReduceLimit) -> JsReducers<'a> {
        JsReducers {
            fns,
            limits,
            reduce_limit,
            rt: None,
            external: None,
        }
    }

    /// Reduces through the query server of `language` instead of JavaScript.
    pub fn external(mut self, qs: &'a QueryServers, language: &'a str) -> JsReducers<'a> {
        self.external = Some((qs, language));
        self
    }

    /// One `reduce`/`rereduce` command through the group's query server. A failure is
    /// stored as the partial, as a JavaScript failure is (a broken process was killed and
    /// the next call gets a new one).
    fn call_external(
        &mut self,
        view: usize,
        f: impl FnOnce(&mut settee_queryserver::Lease, &str) -> QsResult<Vec<Value>>,
    ) -> Vec<u8> {
        let (qs, language) = self.external.expect("external reducers");
        let source = self.fns.views[view].reduce.as_deref().unwrap_or_default();
        match qs
            .checkout_any(language)
            .and_then(|mut p| f(&mut p, source))
        {
            Ok(mut results) => ok(&results.pop().unwrap_or(Value::Null)),
            Err(e) => {
                let name = self.fns.views.get(view).map_or("", |v| v.name.as_str());
                tracing::warn!(view = name, language, error = %e, "reduce through the query server failed");
                let (error, reason) = e.parts();
                err(&error, &reason)
            }
        }
    }

    /// The reducer of view number `view`.
    pub fn view(&mut self, view: usize) -> JsReducer<'_, 'a> {
        JsReducer { all: self, view }
    }

    /// Runs one reduce call; `input` is the length CouchDB's JavaScript server would see
    /// for the call's arguments (see [`input_length`]).
    fn call(
        &mut self,
        view: usize,
        input: usize,
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
            Ok(v) => self.limited(v, input),
            Err(JsError::Thrown(message)) if !is_fatal(&message) => {
                // CouchDB logs what a reduce function throws and takes `null` as its result.
                let name = self.fns.views.get(view).map_or("", |v| v.name.as_str());
                tracing::warn!(target: "settee_js", view = name,
                    "reduce function raised exception: {message}");
                ok(&Value::Null)
            }
            Err(e) => {
                if matches!(e, JsError::Timeout | JsError::OutOfMemory) {
                    self.rt = None; // a stopped runtime is not reused
                }
                js_error(&e)
            }
        }
    }

    /// CouchDB's `reduce_limit` check: output longer than 4096 characters and more than
    /// half the input fails the reduction (as the value `{"reduce_overflow_error": reason}`,
    /// which CouchDB shows as an error row), or is only logged with `reduce_limit = log`.
    fn limited(&self, v: Value, input: usize) -> Vec<u8> {
        let out = ok(&v);
        if self.reduce_limit == ReduceLimit::Off {
            return out;
        }
        // CouchDB measures the JSON of the list of the view's reductions: `[value]`.
        let output = js_length(&out[1..]) + 2;
        if output <= REDUCE_LIMIT_CHARS || output * 2 <= input {
            return out;
        }
        let reason = format!(
            "Reduce output must shrink more rapidly: input size: {input} output size: {output}"
        );
        if self.reduce_limit == ReduceLimit::Log {
            tracing::warn!(target: "settee_js", "reduce_overflow_error: {reason}");
            return out;
        }
        ok(&json!({ "reduce_overflow_error": reason }))
    }
}

/// What CouchDB's JavaScript server throws to fail the call instead of logging: the string
/// `"fatal_error"` or an array starting with `"fatal"`.
fn is_fatal(message: &str) -> bool {
    message == "fatal_error" || message.starts_with(r#"["fatal""#)
}

/// The length of JSON text as JavaScript counts it (UTF-16 code units).
fn js_length(json: &[u8]) -> usize {
    String::from_utf8_lossy(json).encode_utf16().count()
}

/// The length of the request line CouchDB's JavaScript server gets for a reduce call,
/// minus the length of the function source, which is what it compares the output with:
/// `["reduce",["<source>"],<kvs>]` or `["rereduce",["<source>"],<values>]`.
fn input_length(source: &str, rereduce: bool, args_json_len: usize) -> usize {
    let quoted = js_length(&serde_json::to_vec(source).expect("json"));
    let command = if rereduce { "rereduce" } else { "reduce" };
    // `["` + command + `",[` + quoted source + `],` + args + `]`
    2 + command.len() + 3 + quoted + 2 + args_json_len + 1 - js_length(source.as_bytes())
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
        // A function that throws "fatal_error" makes CouchDB's server fail the call.
        JsError::Thrown(m) if m == "fatal_error" => {
            ("map_runtime_error", "function raised 'fatal_error'".into())
        }
        JsError::Thrown(m) => ("reduce_error", m.clone()),
        JsError::Internal(m) => ("os_process_error", m.clone()),
    }
}

pub struct JsReducer<'r, 'a> {
    all: &'r mut JsReducers<'a>,
    view: usize,
}

impl Reducer for JsReducer<'_, '_> {
    fn reduce(&mut self, rows: &[RowRef<'_>]) -> Vec<u8> {
        let rows = match parse_rows(rows, [true, true]) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let refs: Vec<(&Value, &str, &Value)> = rows.iter().map(|(k, id, v)| (k, *id, v)).collect();
        if self.all.external.is_some() {
            return self
                .all
                .call_external(self.view, |p, src| p.reduce(&[src], &refs));
        }
        // `[[[key,id],value],...]`: the commas and brackets, plus each part's JSON.
        let args_len = 2
            + rows.len().saturating_sub(1)
            + rows
                .iter()
                .map(|(k, id, v)| 6 + json_len(k) + json_len(&json!(id)) + json_len(v))
                .sum::<usize>();
        let input = self.input(false, args_len);
        let view = self.view;
        self.all.call(view, input, |rt| rt.reduce(view, &refs))
    }

    fn rereduce(&mut self, parts: &[&[u8]]) -> Vec<u8> {
        let values = match parse_parts(parts) {
            Ok(v) => v,
            Err(e) => return e,
        };
        let refs: Vec<&Value> = values.iter().collect();
        if self.all.external.is_some() {
            return self
                .all
                .call_external(self.view, |p, src| p.rereduce(&[src], &refs));
        }
        let args_len =
            2 + values.len().saturating_sub(1) + values.iter().map(json_len).sum::<usize>();
        let input = self.input(true, args_len);
        let view = self.view;
        self.all.call(view, input, |rt| rt.rereduce(view, &refs))
    }
}

impl JsReducer<'_, '_> {
    fn input(&self, rereduce: bool, args_len: usize) -> usize {
        let source = self.all.fns.views[self.view]
            .reduce
            .as_deref()
            .unwrap_or_default();
        input_length(source, rereduce, args_len)
    }
}

fn json_len(v: &Value) -> usize {
    js_length(&serde_json::to_vec(v).expect("json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_length_is_the_request_line_without_the_source() {
        let src = "function(k, v) { return \"x\"; }";
        let line = serde_json::to_string(&json!(["reduce", [src], [[[1, "a"], 2]]])).unwrap();
        let args = serde_json::to_string(&json!([[[1, "a"], 2]])).unwrap();
        assert_eq!(input_length(src, false, args.len()), line.len() - src.len());
        let line = serde_json::to_string(&json!(["rereduce", [src], [1, 2]])).unwrap();
        assert_eq!(input_length(src, true, 5), line.len() - src.len());
    }

    #[test]
    fn sums_read_from_the_text_are_the_parsed_sums() {
        use crate::layout::encode_payload;
        let texts = [
            "0",
            "7",
            "-1",
            "10",
            "123456789012345678",
            "-123456789012345678",
            "999999999999999999",
            "1234567890123456789",
            "9223372036854775807",
            "-9223372036854775808",
            "-0",
            "00",
            "01",
            "-01",
            "1.0",
            "1e3",
            "-",
            "",
            "\"5\"",
            "null",
            "[1]",
            "{}",
            "1 ",
            "+1",
            "0x10",
        ];
        let mut red = BuiltinReducer(Builtin::Sum);
        let payloads = |values: &[&str]| -> Vec<Vec<u8>> {
            (values.iter())
                .map(|v| encode_payload("d", b"1", v.as_bytes()))
                .collect()
        };
        let mut cases: Vec<Vec<&str>> = vec![vec![]];
        for a in texts {
            cases.push(vec![a]);
            for b in texts {
                cases.push(vec![a, b, "3"]);
            }
        }
        cases.push(vec!["999999999999999999"; 20]);
        cases.push(vec!["-999999999999999999"; 20]);
        for values in cases {
            let bytes = payloads(&values);
            let rows: Vec<RowRef<'_>> = (bytes.iter())
                .map(|p| RowRef {
                    key: b"k",
                    value: p,
                })
                .collect();
            let fast = sum_small_integers(&rows);
            let plain = values.iter().all(|v| {
                let digits = v.strip_prefix('-').unwrap_or(v);
                !digits.is_empty()
                    && digits.len() <= 18
                    && digits.bytes().all(|d| d.is_ascii_digit())
                    && (digits == "0" || !digits.starts_with('0'))
                    && *v != "-0"
            });
            let fits = (values.iter())
                .map(|v| v.parse::<i128>().unwrap_or(0))
                .sum::<i128>()
                .abs()
                <= i128::from(i64::MAX);
            assert_eq!(fast.is_some(), plain && fits, "{values:?}");
            assert_eq!(red.reduce(&rows), red.reduce_parsed(&rows), "{values:?}");
        }
    }

    #[test]
    fn thrown_fatal_errors_are_recognised() {
        assert!(is_fatal("fatal_error"));
        assert!(is_fatal(r#"["fatal","oops","why"]"#));
        assert!(!is_fatal("Error: boom"));
    }
}
