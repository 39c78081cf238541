//! CouchDB's built-in view reduce functions — `_sum`, `_count`, `_stats` and
//! `_approx_count_distinct` — computed as CouchDB 3.x computes them in
//! `couch_query_servers` (and `couch_hyper`), over `serde_json` values.
//!
//! A view's reduce tree calls [`Builtin::reduce`] on the map rows of a leaf, and
//! [`Builtin::rereduce`] on the partial results of its children; a query shows
//! [`Builtin::finalize`] of the combined partial to the client. For well-formed input,
//! rereducing the partials of any split of the rows into non-empty runs gives the reduction
//! of all rows — exactly for integers, while float sums may round differently, as in
//! CouchDB. (CouchDB's `_sum` is not associative on some ill-formed mixes, e.g. objects
//! after numbers that add up to `0`, and neither is this module.)
//!
//! # Numbers
//!
//! CouchDB works on Erlang terms: a JSON number literal containing `.`, `e` or `E` is a
//! float, any other literal an integer of any size. Integers here are `i128`; a literal,
//! sum or square beyond ±2^127 (where Erlang would use a bignum) becomes a float. Integer
//! arithmetic stays exact and integral; any float operand makes a float result, the integer
//! converted as Erlang converts it (not always to the nearest double above 2^64). A float
//! result that would overflow (Erlang raises `badarith`) is an error. Results render floats
//! as CouchDB's JSON encoder does: shortest round-trip digits, at least one fractional
//! digit (`3.0`), plain notation for decimal exponents −6 to 20 and `1e+21` / `1.5e-7`
//! outside it.
//!
//! # `_count`
//!
//! `reduce` is the number of rows; `rereduce` adds the partial counts (with `_sum`'s rules).
//!
//! # `_sum`
//!
//! Folds the values into an accumulator that starts as the integer `0`:
//!
//! * number + number adds;
//! * arrays add element-wise, the longer array's tail kept as is; a number meeting an array
//!   acts as a one-element array (`2` + `[3,5,7]` = `[5,5,7]`);
//! * an object replaces an accumulator that is the integer `0`, and adds member-wise (by
//!   name, recursively with these rules) to an accumulator that is an object; the sum's
//!   members are sorted by name (bytewise), members present on one side only are kept
//!   unchecked.
//!
//! Anything else — a string, `null`, a boolean, a number or array meeting an object, an
//! array element that is not a number where both arrays have one — fails with
//! `builtin_reduce_error` and CouchDB's reason; `caused_by` is the term CouchDB blames: the
//! offending value, or for arrays the remaining tail of the *accumulator* from the first
//! bad position (`[1,2,3]` + `[1,"a",3]` blames `[2,3]`). CouchDB does not fail the query
//! for this error: the error object *is* the reduction, shown as the row's value with
//! status 200, and rereducing a partial that is such an object yields it again. Callers get
//! an `Err` whose [`ReduceError::is_row_value`] is true; to follow CouchDB they store
//! [`ReduceError::to_json`] as the partial and show it as the value ([`Builtin::rereduce`]
//! turns such a partial back into the same `Err`).
//!
//! A few inputs crash CouchDB's code instead of producing that error object (the query
//! fails): an object meeting a non-zero number or an array accumulator (`case_clause`), an
//! object value with an `"error"` member other than `"builtin_reduce_error"`
//! (`case_clause`), and float overflow (`badarith`). They return an `Err` that is not a row
//! value, named as CouchDB's HTTP layer names such exceptions.
//!
//! # `_stats`
//!
//! Each value is a number, a pre-aggregated object with numeric `sum`, `count`, `min`,
//! `max` and `sumsqr` members (others ignored), or an array of those (arrays may nest);
//! arrays are reduced element-wise and must all have the first row's length. The result —
//! and the partial, since CouchDB's partial is the same five numbers — is
//! `{"sum","count","min","max","sumsqr"}` in that order, or an array of such objects. Sums
//! follow the number rules above, so integer inputs give integer statistics; when `min` or
//! `max` compares equal numbers of both kinds (`1` and `1.0`) the later value's one is
//! kept, as Erlang's `min/2` and `max/2` return their first argument (the value) on a tie.
//! No rows give all zeros. Invalid input fails with `invalid_value` and CouchDB's message,
//! whose embedded Erlang terms are printed as Erlang's `~w` and `~p` print them (including
//! `~p`'s line breaks); arrays of different lengths fail with `function_clause`. CouchDB
//! throws these (the query fails), so they are not row values.
//!
//! # `_approx_count_distinct`
//!
//! HyperLogLog over the row *keys* as CouchDB 3.x's `couch_hyper` does it: precision 11
//! (2048 six-bit registers); a key is hashed with SHA-1 over its Erlang external term
//! format (`term_to_binary(Key, [{minor_version, 1}])`), the first 11 bits select the
//! register and the next 53 give the rank (leading zeros + 1). The estimate is
//! HyperLogLog++'s: the raw estimate corrected by the empirical bias table when at most
//! 5·2048, linear counting while that gives at most 1800, rounded to an integer. A number
//! key that is integral is hashed as the integer it equals (CouchDB hashes `2.0` as a float)
//! so that keys which collate equal count once; every other key hashes as in CouchDB, so
//! the registers and estimates are CouchDB's.
//!
//! The partial is the register state as a JSON string, internal to the reduce tree and
//! never shown: `"S"` + base64 (standard alphabet, no padding) of `(index: u16 BE, rank:
//! u8)` triples in index order for the non-zero registers while they take fewer bytes than
//! the dense form, else `"D"` + base64 of all 2048 ranks packed as 6-bit big-endian
//! fields (1536 bytes). The encoding of a register set is unique, so equal partials compare
//! equal. The leading letter versions the format. `rereduce` takes the register-wise
//! maximum; `finalize` gives the estimate as an integer.
//!
//! # Not modelled
//!
//! CouchDB's `reduce_limit` check on `_sum` (an output term larger than 4906 bytes and more
//! than half the input's size becomes a `builtin_reduce_error` "Reduce output must shrink
//! more rapidly" object) depends on server configuration and on Erlang term sizes of rows
//! that include document ids; it is left to the view layer. Rows are folded in the order
//! given, which decides `caused_by` and float rounding.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Number, Value};

/// A built-in reduce function named by a view's `reduce` source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    Sum,
    Count,
    Stats,
    ApproxCountDistinct,
    /// `_top_N`: the N greatest distinct values in collation order, greatest first.
    Top(u8),
    /// `_bottom_N`: the N least distinct values in collation order, least first.
    Bottom(u8),
    /// `_first`: the value of the first row in index order (key, then document id).
    First,
    /// `_last`: the value of the last row in index order.
    Last,
}

/// The largest N of `_top_N` and `_bottom_N` (CouchDB's `MAX_RANK`).
pub const MAX_RANK: u8 = 100;

/// A reduction CouchDB reports as an error: `error` and `reason` as CouchDB names them
/// (`builtin_reduce_error` for `_sum`'s bad input, `invalid_value` for `_stats`'), and for
/// `_sum` the term it blames in `caused_by`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReduceError {
    pub error: String,
    pub reason: String,
    pub caused_by: Option<Value>,
}

/// The `error` of `_sum`'s bad-input result, which CouchDB shows as a row value.
const BUILTIN_REDUCE_ERROR: &str = "builtin_reduce_error";

const SUM_ERROR: &str = "The _sum function requires that map values be numbers, arrays of \
    numbers, or objects. Objects cannot be mixed with other data structures. Objects can be \
    arbitrarily nested, provided that the values for all fields are themselves numbers, \
    arrays of numbers, or objects.";

const STAT_ERROR_PREFIX: &str =
    "The _stats function requires that map values be numbers or arrays of numbers, not '";

impl Builtin {
    /// The built-in a view's `reduce` source names, matched as CouchDB matches it: by
    /// prefix, without trimming (`"_sum"`, `"_sum\n"` and `"_summary"` are all `_sum`;
    /// `" _sum"` is JavaScript). `None` for anything else — JavaScript source, or an unknown
    /// `_`-name, which CouchDB rejects when the design document is saved (see
    /// [`Builtin::is_reserved`]).
    pub fn from_source(src: &str) -> Option<Builtin> {
        Builtin::parse(src).ok().flatten()
    }

    /// [`Builtin::from_source`] with the reason CouchDB gives when it refuses to save a
    /// design document naming `src`: `Ok(None)` for JavaScript, an error for an unknown
    /// `_`-name or a rank (`_top_N`, `_bottom_N`) that is not an integer from 1 to
    /// [`MAX_RANK`].
    pub fn parse(src: &str) -> Result<Option<Builtin>, String> {
        const PREFIXES: [(&str, Builtin); 6] = [
            ("_sum", Builtin::Sum),
            ("_count", Builtin::Count),
            ("_stats", Builtin::Stats),
            ("_approx_count_distinct", Builtin::ApproxCountDistinct),
            ("_first", Builtin::First),
            ("_last", Builtin::Last),
        ];
        if let Some(&(_, builtin)) = PREFIXES.iter().find(|(prefix, _)| src.starts_with(prefix)) {
            return Ok(Some(builtin));
        }
        if let Some(n) = src.strip_prefix("_top_") {
            return rank(n).map(|n| Some(Builtin::Top(n)));
        }
        if let Some(n) = src.strip_prefix("_bottom_") {
            return rank(n).map(|n| Some(Builtin::Bottom(n)));
        }
        if Builtin::is_reserved(src) {
            return Err(format!("`{src}` is not a supported reduce function."));
        }
        Ok(None)
    }

    /// Whether CouchDB reads `src` as a built-in name rather than JavaScript: it starts
    /// with `_`. Such a source that [`Builtin::from_source`] does not know is invalid.
    pub fn is_reserved(src: &str) -> bool {
        src.starts_with('_')
    }

    /// The canonical name: `"_sum"`, `"_count"`, `"_stats"`, `"_top_3"`, ….
    pub fn name(self) -> String {
        match self {
            Builtin::Sum => "_sum".into(),
            Builtin::Count => "_count".into(),
            Builtin::Stats => "_stats".into(),
            Builtin::ApproxCountDistinct => "_approx_count_distinct".into(),
            Builtin::Top(n) => format!("_top_{n}"),
            Builtin::Bottom(n) => format!("_bottom_{n}"),
            Builtin::First => "_first".into(),
            Builtin::Last => "_last".into(),
        }
    }

    /// Reduction of map rows `(key, value)`, in the order given: a partial result that
    /// [`Builtin::rereduce`] combines and [`Builtin::finalize`] shows.
    pub fn reduce(self, rows: &[(&Value, &Value)]) -> Result<Value, ReduceError> {
        let values = || rows.iter().map(|(_, value)| Term::from_json(value));
        match self {
            Builtin::Sum => sum_rows(values()),
            Builtin::Count => Ok(Value::from(rows.len())),
            Builtin::Stats => stats_rows(values()),
            Builtin::ApproxCountDistinct => {
                Ok(hll::Sketch::of_keys(rows.iter().map(|(key, _)| *key)).to_json())
            }
            Builtin::Top(n) | Builtin::Bottom(n) => Ok(ranked(
                self,
                n,
                rows.iter().map(|(_, value)| std::slice::from_ref(*value)),
            )),
            // Rows come in index order, so the first and last rows are the edges; the
            // partial is `[value]` (`[]` for no rows).
            Builtin::First => Ok(Value::Array(
                rows.first().map(|r| r.1.clone()).into_iter().collect(),
            )),
            Builtin::Last => Ok(Value::Array(
                rows.last().map(|r| r.1.clone()).into_iter().collect(),
            )),
        }
    }

    /// Combines partial results of [`Builtin::reduce`] / `rereduce`, in the order given.
    pub fn rereduce(self, partials: &[&Value]) -> Result<Value, ReduceError> {
        let values = || partials.iter().map(|partial| Term::from_json(partial));
        match self {
            Builtin::Sum | Builtin::Count => sum_rows(values()),
            Builtin::Stats => stats_rows(partials.iter().map(|partial| stats_partial(partial))),
            Builtin::ApproxCountDistinct => hll::Sketch::union(partials).map(|s| s.to_json()),
            Builtin::Top(n) | Builtin::Bottom(n) => Ok(ranked(
                self,
                n,
                partials
                    .iter()
                    .map(|p| p.as_array().map_or(&[][..], Vec::as_slice)),
            )),
            // Partials come in index order too: the first (last) one that saw a row.
            Builtin::First => Ok(edge(partials.iter())),
            Builtin::Last => Ok(edge(partials.iter().rev())),
        }
    }

    /// The value shown to clients for a partial result: the partial itself, except for
    /// `_approx_count_distinct`, whose partial is the register state and whose value is
    /// the estimated number of distinct keys. A value that is not such a state (never
    /// produced by this module) finalizes to `null`.
    pub fn finalize(self, partial: &Value) -> Value {
        match self {
            Builtin::ApproxCountDistinct => hll::Sketch::from_json(partial)
                .map_or(Value::Null, |sketch| Value::from(sketch.estimate())),
            Builtin::First | Builtin::Last => partial
                .as_array()
                .and_then(|a| a.first())
                .cloned()
                .unwrap_or(Value::Null),
            _ => partial.clone(),
        }
    }
}

/// A rank as CouchDB's `binary_to_integer/1` reads it, from 1 to [`MAX_RANK`].
fn rank(n: &str) -> Result<u8, String> {
    match crate::etf::binary_to_integer(n) {
        None => Err("invalid rank reducer".into()),
        Some(v) if (1..=i128::from(MAX_RANK)).contains(&v) => Ok(v as u8),
        Some(_) => Err(format!("rank value must be between 1 and {MAX_RANK}")),
    }
}

/// `_top_N` / `_bottom_N`: the values of `lists`, distinct in collation (one of each
/// equal group, the first seen), greatest (least) first, at most `n` of them.
fn ranked<'a>(which: Builtin, n: u8, lists: impl Iterator<Item = &'a [Value]>) -> Value {
    let mut acc: Vec<Value> = Vec::new();
    for v in lists.flatten() {
        let pos = acc.binary_search_by(|x| {
            let o = crate::collate::compare(x, v);
            if matches!(which, Builtin::Top(_)) {
                o.reverse()
            } else {
                o
            }
        });
        if let Err(at) = pos {
            acc.insert(at, v.clone());
            acc.truncate(usize::from(n));
        }
    }
    Value::Array(acc)
}

/// `_first` / `_last` over partials in the order to search: the first non-empty one.
fn edge<'a>(mut partials: impl Iterator<Item = &'a &'a Value>) -> Value {
    partials
        .find(|p| p.as_array().is_some_and(|a| !a.is_empty()))
        .map_or(Value::Array(Vec::new()), |p| (*p).clone())
}

impl ReduceError {
    fn new(error: &str, reason: impl Into<String>, caused_by: Option<Value>) -> Self {
        ReduceError {
            error: error.to_owned(),
            reason: reason.into(),
            caused_by,
        }
    }

    /// CouchDB's JSON for the error: `{"error", "reason"}` plus `"caused_by"` when known.
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("error".into(), Value::from(self.error.as_str()));
        obj.insert("reason".into(), Value::from(self.reason.as_str()));
        if let Some(cause) = &self.caused_by {
            obj.insert("caused_by".into(), cause.clone());
        }
        Value::Object(obj)
    }

    /// Whether CouchDB returns this error as the reduction itself — the row's value in a
    /// successful response, and a partial that rereduces to itself — rather than failing
    /// the query. True for `_sum`'s `builtin_reduce_error`.
    pub fn is_row_value(&self) -> bool {
        self.error == BUILTIN_REDUCE_ERROR
    }

    /// The error a `{"error": "builtin_reduce_error", …}` value stands for.
    fn from_error_object(props: &[(String, Term)]) -> Self {
        let reason = match lookup(props, "reason") {
            Some(Term::Bin(reason)) => reason.clone(),
            Some(other) => other.to_json().to_string(),
            None => String::new(),
        };
        let caused_by = lookup(props, "caused_by").map(Term::to_json);
        ReduceError::new(BUILTIN_REDUCE_ERROR, reason, caused_by)
    }
}

impl fmt::Display for ReduceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error, self.reason)
    }
}

impl std::error::Error for ReduceError {}

/// How a reduction fails inside CouchDB's code.
enum Fail {
    /// `_sum` met a term it cannot add (`throw({invalid_value, Reason, Cause})`).
    Sum(Term),
    /// `_sum` met an error object (`throw({builtin_reduce_error, Obj})`).
    ErrorObject(Vec<(String, Term)>),
    /// `_stats` rejected its input (`throw({invalid_value, Msg})`).
    Invalid(Vec<u8>),
    /// `{case_clause, Term}`: no branch of a `case` matched.
    CaseClause(Term),
    /// An Erlang runtime error without a term (`badarith`, `function_clause`).
    Crash(&'static str),
}

impl From<Fail> for ReduceError {
    fn from(fail: Fail) -> Self {
        match fail {
            Fail::Sum(cause) => {
                ReduceError::new(BUILTIN_REDUCE_ERROR, SUM_ERROR, Some(cause.to_json()))
            }
            Fail::ErrorObject(props) => ReduceError::from_error_object(&props),
            Fail::Invalid(msg) => {
                ReduceError::new("invalid_value", latin1_bytes_to_string(msg), None)
            }
            // CouchDB's HTTP layer renders `{Error, Reason}` as error `Error` with reason
            // `Reason` printed (`~p`), and a bare atom as `unknown_error` with the atom.
            Fail::CaseClause(term) => ReduceError::new(
                "case_clause",
                latin1_bytes_to_string(erl::print(&term, 1)),
                None,
            ),
            Fail::Crash(atom) => ReduceError::new("unknown_error", atom, None),
        }
    }
}

/// An error reason as CouchDB's HTTP layer prints one (`couch_util:to_binary/1` of the
/// EJSON term): text as it is, `true`/`false`/`null` by name, an array that is an iolist
/// (strings, integers 0–255 and such arrays) concatenated, anything else as `~p` prints it
/// (an empty object is `{[]}`, `{"a": 1}` is `{[{<<"a">>,1}]}`).
pub fn reason_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Array(_) => {
            let mut bytes = Vec::new();
            if iolist(value, &mut bytes) {
                return latin1_bytes_to_string(bytes);
            }
            latin1_bytes_to_string(erl::print(&Term::from_json(value), 1))
        }
        Value::Number(_) | Value::Object(_) => {
            latin1_bytes_to_string(erl::print(&Term::from_json(value), 1))
        }
    }
}

/// Appends the bytes of an iolist (`list_to_binary/1`'s argument); false if it is not one.
fn iolist(value: &Value, out: &mut Vec<u8>) -> bool {
    match value {
        Value::String(s) => {
            out.extend_from_slice(s.as_bytes());
            true
        }
        Value::Number(n) => match n.as_u64() {
            Some(b) if b <= 255 => {
                out.push(b as u8);
                true
            }
            _ => false,
        },
        Value::Array(items) => items.iter().all(|item| iolist(item, out)),
        _ => false,
    }
}

/// A message built from Erlang's output, whose characters are bytes of the original UTF-8
/// strings (Erlang's `iolist_to_binary` puts them back together the same way).
fn latin1_bytes_to_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

// ---------------------------------------------------------------------------------------
// Terms: JSON as CouchDB's Erlang code sees it

/// An Erlang number: integer (a bignum here only up to ±2^127) or float.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

/// A JSON value as the Erlang term CouchDB decodes it to (`Obj` is `{[{Key, Value}]}`),
/// plus tuples, which appear in CouchDB's messages.
#[derive(Clone, Debug, PartialEq)]
enum Term {
    Num(Num),
    Atom(&'static str),
    Bin(String),
    List(Vec<Term>),
    Obj(Vec<(String, Term)>),
    Tuple(Vec<Term>),
}

impl Term {
    fn from_json(value: &Value) -> Term {
        match value {
            Value::Null => Term::Atom("null"),
            Value::Bool(true) => Term::Atom("true"),
            Value::Bool(false) => Term::Atom("false"),
            Value::Number(n) => Term::Num(Num::from_json(n)),
            Value::String(s) => Term::Bin(s.clone()),
            Value::Array(items) => Term::List(items.iter().map(Term::from_json).collect()),
            Value::Object(members) => Term::Obj(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), Term::from_json(v)))
                    .collect(),
            ),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Term::Num(n) => Value::Number(n.to_json()),
            Term::Atom("true") => Value::Bool(true),
            Term::Atom("false") => Value::Bool(false),
            Term::Atom(_) => Value::Null,
            Term::Bin(s) => Value::String(s.clone()),
            Term::List(items) | Term::Tuple(items) => {
                Value::Array(items.iter().map(Term::to_json).collect())
            }
            Term::Obj(props) => Value::Object(
                props
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// The first value stored under `key`, as Erlang's `lists:keyfind` / `proplists` find it.
fn lookup<'a>(props: &'a [(String, Term)], key: &str) -> Option<&'a Term> {
    props.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

impl Num {
    /// An integer literal is an integer (a float beyond `i128`), anything else a float.
    fn from_json(n: &Number) -> Num {
        // Most values are integers in range: read them without printing the number first.
        if let Some(i) = n.as_i64() {
            return Num::Int(i.into());
        }
        let text = n.to_string();
        let float = || Num::Float(text.parse().unwrap_or(f64::INFINITY));
        if text.contains(['.', 'e', 'E']) {
            return float();
        }
        text.parse().map(Num::Int).unwrap_or_else(|_| float())
    }

    /// The float Erlang converts a number to for mixed arithmetic. An integer of two
    /// 64-bit digits converts as `big_to_double` does — `hi · 2^64 + lo` in double
    /// arithmetic — which is not always the nearest double.
    fn to_f64(self) -> f64 {
        match self {
            Num::Int(i) => {
                let magnitude = i.unsigned_abs();
                let (hi, lo) = ((magnitude >> 64) as u64, magnitude as u64);
                let d = if hi == 0 {
                    lo as f64
                } else {
                    hi as f64 * 18446744073709551616.0 + lo as f64
                };
                if i < 0 {
                    -d
                } else {
                    d
                }
            }
            Num::Float(f) => f,
        }
    }

    fn add(self, other: Num) -> Result<Num, Fail> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => match a.checked_add(b) {
                Some(sum) => Ok(Num::Int(sum)),
                None => finite(self.to_f64() + other.to_f64()),
            },
            _ => finite(self.to_f64() + other.to_f64()),
        }
    }

    fn square(self) -> Result<Num, Fail> {
        match self {
            Num::Int(a) => match a.checked_mul(a) {
                Some(sq) => Ok(Num::Int(sq)),
                None => finite(self.to_f64() * self.to_f64()),
            },
            Num::Float(f) => finite(f * f),
        }
    }

    /// Erlang's exact numeric order between integers and floats.
    fn cmp(self, other: Num) -> Ordering {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Num::Int(a), Num::Float(b)) => cmp_int_float(a, b),
            (Num::Float(a), Num::Int(b)) => cmp_int_float(b, a).reverse(),
        }
    }

    fn to_json(self) -> Number {
        match self {
            Num::Int(i) => match i64::try_from(i) {
                Ok(small) => Number::from(small),
                Err(_) => parse_number(&i.to_string()),
            },
            Num::Float(f) => parse_number(&float_json(f)),
        }
    }
}

/// A float result; Erlang raises `badarith` instead of producing ±infinity.
fn finite(f: f64) -> Result<Num, Fail> {
    if f.is_finite() {
        Ok(Num::Float(f))
    } else {
        Err(Fail::Crash("badarith"))
    }
}

fn cmp_int_float(i: i128, f: f64) -> Ordering {
    const TWO_127: f64 = 1.7014118346046923e38;
    if f.is_nan() {
        return Ordering::Equal;
    }
    if f >= TWO_127 {
        return Ordering::Less;
    }
    if f < -TWO_127 {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    i.cmp(&(whole as i128))
        .then_with(|| 0.0.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal))
}

/// `erlang:min/2`: the first argument unless the second is smaller.
fn erl_min(a: Num, b: Num) -> Num {
    if a.cmp(b) == Ordering::Greater {
        b
    } else {
        a
    }
}

/// `erlang:max/2`: the first argument unless the second is larger.
fn erl_max(a: Num, b: Num) -> Num {
    if a.cmp(b) == Ordering::Less {
        b
    } else {
        a
    }
}

fn parse_number(text: &str) -> Number {
    text.parse().expect("a formatted number is valid JSON")
}

/// A literal beyond the float range (`1e400`), which CouchDB's JSON decoder rejects and so
/// never reduces; it passes through unchanged as far as its sign goes.
fn out_of_range(f: f64) -> String {
    if f < 0.0 { "-1e999" } else { "1e999" }.into()
}

/// Shortest round-trip digits of a finite non-zero `|f|` and the decimal exponent of the
/// first digit: `1234.5` is `("12345", 3)`. When two shortest candidates are equally close
/// (`790362678270387.25` → `…387.2` or `…387.3`) the one ending in an even digit wins, as
/// in Erlang's and CouchDB's JSON encoder's shortest printing; Rust's own picks upward.
fn shortest_digits(f: f64) -> (String, i32) {
    let f = f.abs();
    let (digits, exp) = split_sci(&format!("{f:e}"));
    if digits.ends_with(['0', '2', '4', '6', '8']) {
        return (digits, exp);
    }
    match tie_partner(f, &digits, exp) {
        Some(partner) if partner.0.ends_with(['0', '2', '4', '6', '8']) => partner,
        _ => (digits, exp),
    }
}

/// `"1.2345e3"` as `("12345", 3)`.
fn split_sci(sci: &str) -> (String, i32) {
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp writes an exponent");
    let exp = exp.parse().expect("LowerExp writes an integer exponent");
    (mantissa.replace('.', ""), exp)
}

/// The other shortest candidate for `f` when `f` lies exactly halfway between it and
/// `digits`, and it reads back as `f` too.
fn tie_partner(f: f64, digits: &str, exp: i32) -> Option<(String, i32)> {
    let n = digits.len();
    // Rust prints a double's exact decimal expansion (at most 767 significant digits).
    let (exact, exact_exp) = split_sci(&format!("{f:.800e}"));
    let (head, rest) = exact.split_at(n);
    let halfway = rest.starts_with('5') && rest[1..].bytes().all(|b| b == b'0');
    if exact_exp != exp || !halfway {
        return None;
    }
    let partner = if head == digits {
        increment(head, exp)
    } else {
        (head.to_owned(), exp)
    };
    let text = format!("{}.{}e{}", &partner.0[..1], &partner.0[1..], partner.1);
    (text.parse::<f64>().ok()? == f).then_some(partner)
}

/// The decimal digits plus one unit in the last place, trailing zeros dropped.
fn increment(digits: &str, exp: i32) -> (String, i32) {
    let mut bytes = digits.as_bytes().to_vec();
    let mut i = bytes.len();
    loop {
        if i == 0 {
            bytes.insert(0, b'1');
            return (trim_zeros(bytes), exp + 1);
        }
        i -= 1;
        if bytes[i] == b'9' {
            bytes[i] = b'0';
        } else {
            bytes[i] += 1;
            return (trim_zeros(bytes), exp);
        }
    }
}

fn trim_zeros(mut bytes: Vec<u8>) -> String {
    while bytes.len() > 1 && bytes.last() == Some(&b'0') {
        bytes.pop();
    }
    String::from_utf8(bytes).expect("ASCII digits")
}

/// Digits placed in plain decimal notation, always with a fractional part: `("15", 0)` is
/// `1.5`, `("3", 0)` is `3.0`, `("12", -3)` is `0.0012`.
fn plain_decimal(digits: &str, exp: i32) -> String {
    if exp < 0 {
        return format!("0.{}{digits}", "0".repeat((-exp - 1) as usize));
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
    } else {
        format!("{}.{}", &digits[..int_len], &digits[int_len..])
    }
}

/// A float as CouchDB's JSON encoder (jiffy, double-conversion `ToShortest` with decimal
/// exponents −6..21 in plain notation) writes it.
fn float_json(f: f64) -> String {
    if f == 0.0 {
        return "0.0".into();
    }
    if !f.is_finite() {
        return out_of_range(f);
    }
    let (digits, exp) = shortest_digits(f);
    let sign = if f < 0.0 { "-" } else { "" };
    if (-6..21).contains(&exp) {
        return format!("{sign}{}", plain_decimal(&digits, exp));
    }
    let (first, rest) = digits.split_at(1);
    let fraction = if rest.is_empty() {
        String::new()
    } else {
        format!(".{rest}")
    };
    let exp_sign = if exp < 0 { '-' } else { '+' };
    format!("{sign}{first}{fraction}e{exp_sign}{}", exp.abs())
}

// ---------------------------------------------------------------------------------------
// _sum (and _count's rereduce)

fn sum_rows(values: impl Iterator<Item = Term>) -> Result<Value, ReduceError> {
    let mut acc = Term::Num(Num::Int(0));
    for value in values {
        acc = sum_values(value, acc)?;
    }
    Ok(acc.to_json())
}

fn sum_values(value: Term, acc: Term) -> Result<Term, Fail> {
    match (value, acc) {
        (Term::Num(v), Term::Num(a)) => Ok(Term::Num(a.add(v)?)),
        (Term::List(v), Term::List(a)) => sum_arrays(a, v),
        (Term::Num(v), Term::List(a)) => sum_arrays(a, vec![Term::Num(v)]),
        (Term::List(v), Term::Num(a)) => sum_arrays(vec![Term::Num(a)], v),
        (Term::Obj(props), acc) => sum_object(props, acc),
        (value, _) => Err(Fail::Sum(value)),
    }
}

/// Adds an object value: it must not be an error object, and the accumulator must be the
/// integer `0` (replaced) or an object (added member-wise).
fn sum_object(props: Vec<(String, Term)>, acc: Term) -> Result<Term, Fail> {
    match lookup(&props, "error") {
        None => {}
        Some(Term::Bin(e)) if e == BUILTIN_REDUCE_ERROR => return Err(Fail::ErrorObject(props)),
        Some(other) => {
            let found = Term::Tuple(vec![Term::Bin("error".into()), other.clone()]);
            return Err(Fail::CaseClause(found));
        }
    }
    match acc {
        Term::Num(Num::Int(0)) => Ok(Term::Obj(props)),
        Term::Obj(acc_props) => Ok(Term::Obj(sum_objects(sorted(props), sorted(acc_props))?)),
        other => Err(Fail::CaseClause(other)),
    }
}

fn sorted(mut props: Vec<(String, Term)>) -> Vec<(String, Term)> {
    props.sort_by(|a, b| a.0.cmp(&b.0));
    props
}

/// Merges two name-sorted member lists, adding the values of names present in both.
fn sum_objects(
    values: Vec<(String, Term)>,
    accs: Vec<(String, Term)>,
) -> Result<Vec<(String, Term)>, Fail> {
    let mut out = Vec::with_capacity(values.len().max(accs.len()));
    let mut values = values.into_iter().peekable();
    let mut accs = accs.into_iter().peekable();
    while let (Some((kv, _)), Some((ka, _))) = (values.peek(), accs.peek()) {
        match kv.cmp(ka) {
            Ordering::Less => out.extend(values.next()),
            Ordering::Greater => out.extend(accs.next()),
            Ordering::Equal => {
                let (k, v) = values.next().expect("peeked");
                let (_, a) = accs.next().expect("peeked");
                out.push((k, sum_values(v, a)?));
            }
        }
    }
    out.extend(values);
    out.extend(accs);
    Ok(out)
}

/// Adds two arrays element-wise, keeping the longer tail. A non-number where both have an
/// element fails, blaming the accumulator's remaining elements.
fn sum_arrays(accs: Vec<Term>, values: Vec<Term>) -> Result<Term, Fail> {
    let mut out = Vec::with_capacity(accs.len().max(values.len()));
    let mut accs = accs.into_iter();
    let mut values = values.into_iter();
    loop {
        match (accs.next(), values.next()) {
            (Some(Term::Num(a)), Some(Term::Num(v))) => out.push(Term::Num(a.add(v)?)),
            (Some(a), Some(_)) => return Err(Fail::Sum(Term::List(prepend(a, accs)))),
            (Some(a), None) => return Ok(Term::List(finish(out, a, accs))),
            (None, Some(v)) => return Ok(Term::List(finish(out, v, values))),
            (None, None) => return Ok(Term::List(out)),
        }
    }
}

fn prepend(first: Term, rest: impl Iterator<Item = Term>) -> Vec<Term> {
    std::iter::once(first).chain(rest).collect()
}

fn finish(mut out: Vec<Term>, next: Term, rest: impl Iterator<Item = Term>) -> Vec<Term> {
    out.push(next);
    out.extend(rest);
    out
}

// ---------------------------------------------------------------------------------------
// _stats

/// `{Sum, Count, Min, Max, SumSqr}`.
#[derive(Clone, Copy, Debug)]
struct Stats {
    sum: Num,
    count: Num,
    min: Num,
    max: Num,
    sumsqr: Num,
}

/// The accumulator: statistics of one series, or of each element of array values.
enum StatAcc {
    One(Stats),
    Many(Vec<StatAcc>),
}

/// A value being added: a term as emitted, or one already turned into statistics.
enum StatIn {
    Term(Term),
    Stats(Stats),
}

const STATS_FIELDS: [&str; 5] = ["sum", "count", "min", "max", "sumsqr"];

fn stats_rows(mut values: impl Iterator<Item = Term>) -> Result<Value, ReduceError> {
    let Some(first) = values.next() else {
        return Ok(StatAcc::One(Stats::zero()).to_json());
    };
    let mut acc = initial_stats(first)?;
    for value in values {
        acc = stat_values(StatIn::Term(value), acc)?;
    }
    Ok(acc.to_json())
}

/// A `_stats` partial as the term CouchDB keeps: each statistics object is the tuple
/// `{Sum, Count, Min, Max, SumSqr}` (which shows only in error messages).
fn stats_partial(partial: &Value) -> Term {
    match partial {
        Value::Array(items) => Term::List(items.iter().map(stats_partial).collect()),
        Value::Object(members) if members.len() == STATS_FIELDS.len() => {
            let numbers: Option<Vec<Term>> = STATS_FIELDS
                .iter()
                .map(|field| match members.get(*field) {
                    Some(Value::Number(n)) => Some(Term::Num(Num::from_json(n))),
                    _ => None,
                })
                .collect();
            numbers.map_or_else(|| Term::from_json(partial), Term::Tuple)
        }
        other => Term::from_json(other),
    }
}

fn initial_stats(first: Term) -> Result<StatAcc, Fail> {
    match first {
        Term::Tuple(numbers) => Ok(StatAcc::One(Stats::from_tuple(&numbers))),
        Term::List(items) => Ok(StatAcc::Many(
            items
                .into_iter()
                .map(initial_stats)
                .collect::<Result<_, _>>()?,
        )),
        Term::Num(x) => Ok(StatAcc::One(Stats::of(x)?)),
        Term::Obj(props) => Ok(StatAcc::One(unpack_stats(&props)?)),
        other => Err(Fail::Invalid(cat(
            b"non-numeric _stats input: ",
            &erl::write(&other),
        ))),
    }
}

fn stat_values(value: StatIn, acc: StatAcc) -> Result<StatAcc, Fail> {
    match (value, acc) {
        (StatIn::Term(Term::List(items)), StatAcc::Many(accs)) => zip_stats(items, accs),
        (StatIn::Term(Term::Obj(props)), acc) => {
            stat_values(StatIn::Stats(unpack_stats(&props)?), acc)
        }
        (StatIn::Term(Term::Num(x)), acc) => stat_values(StatIn::Stats(Stats::of(x)?), acc),
        (StatIn::Term(Term::Tuple(numbers)), acc) => {
            stat_values(StatIn::Stats(Stats::from_tuple(&numbers)), acc)
        }
        (StatIn::Stats(s), StatAcc::One(a)) => Ok(StatAcc::One(s.merge(a)?)),
        (StatIn::Term(term), _) => Err(stat_error(&term)),
        (StatIn::Stats(s), _) => Err(stat_error(&s.to_tuple())),
    }
}

/// `lists:zipwith/3`: pairs in order, then `function_clause` if the lengths differ.
fn zip_stats(items: Vec<Term>, accs: Vec<StatAcc>) -> Result<StatAcc, Fail> {
    let same_length = items.len() == accs.len();
    let zipped = items
        .into_iter()
        .zip(accs)
        .map(|(item, acc)| stat_values(StatIn::Term(item), acc))
        .collect::<Result<Vec<_>, _>>()?;
    if same_length {
        Ok(StatAcc::Many(zipped))
    } else {
        Err(Fail::Crash("function_clause"))
    }
}

fn stat_error(term: &Term) -> Fail {
    let col = STAT_ERROR_PREFIX.len() + 1;
    let msg = cat(STAT_ERROR_PREFIX.as_bytes(), &erl::print(term, col));
    Fail::Invalid(cat(&msg, b"'"))
}

/// A pre-aggregated object's five numbers, taken in field order.
fn unpack_stats(props: &[(String, Term)]) -> Result<Stats, Fail> {
    let field = |name| stats_field(name, props);
    Ok(Stats {
        sum: field("sum")?,
        count: field("count")?,
        min: field("min")?,
        max: field("max")?,
        sumsqr: field("sumsqr")?,
    })
}

fn stats_field(name: &str, props: &[(String, Term)]) -> Result<Num, Fail> {
    match lookup(props, name) {
        Some(Term::Num(n)) => Ok(*n),
        Some(other) => {
            let prefix = format!("non-numeric _stats input received for {name}: ");
            Err(Fail::Invalid(cat(prefix.as_bytes(), &erl::write(other))))
        }
        None => {
            let prefix = format!("user _stats input missing required field {name} (");
            let list = Term::List(props.iter().map(pair_tuple).collect());
            let msg = cat(prefix.as_bytes(), &erl::print(&list, prefix.len() + 1));
            Err(Fail::Invalid(cat(&msg, b")")))
        }
    }
}

fn pair_tuple((key, value): &(String, Term)) -> Term {
    Term::Tuple(vec![Term::Bin(key.clone()), value.clone()])
}

fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    [a, b].concat()
}

impl Stats {
    /// CouchDB's statistics of no rows.
    fn zero() -> Stats {
        let zero = Num::Int(0);
        Stats {
            sum: zero,
            count: zero,
            min: zero,
            max: zero,
            sumsqr: zero,
        }
    }

    fn of(x: Num) -> Result<Stats, Fail> {
        Ok(Stats {
            sum: x,
            count: Num::Int(1),
            min: x,
            max: x,
            sumsqr: x.square()?,
        })
    }

    /// Adds statistics `self` (from the value) to `acc`, in CouchDB's operand order.
    fn merge(self, acc: Stats) -> Result<Stats, Fail> {
        Ok(Stats {
            sum: self.sum.add(acc.sum)?,
            count: self.count.add(acc.count)?,
            min: erl_min(self.min, acc.min),
            max: erl_max(self.max, acc.max),
            sumsqr: self.sumsqr.add(acc.sumsqr)?,
        })
    }

    /// A tuple made by [`stats_partial`]: five numbers.
    fn from_tuple(numbers: &[Term]) -> Stats {
        let n = |i: usize| match numbers[i] {
            Term::Num(n) => n,
            _ => unreachable!("stats tuples hold numbers"),
        };
        Stats {
            sum: n(0),
            count: n(1),
            min: n(2),
            max: n(3),
            sumsqr: n(4),
        }
    }

    fn numbers(self) -> [Num; 5] {
        [self.sum, self.count, self.min, self.max, self.sumsqr]
    }

    fn to_tuple(self) -> Term {
        Term::Tuple(self.numbers().into_iter().map(Term::Num).collect())
    }

    fn to_json(self) -> Value {
        let members = STATS_FIELDS.iter().zip(self.numbers());
        Value::Object(
            members
                .map(|(k, n)| ((*k).to_owned(), Value::Number(n.to_json())))
                .collect(),
        )
    }
}

impl StatAcc {
    fn to_json(&self) -> Value {
        match self {
            StatAcc::One(stats) => stats.to_json(),
            StatAcc::Many(items) => Value::Array(items.iter().map(StatAcc::to_json).collect()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Erlang's term printing, for CouchDB's messages

mod erl {
    //! `io_lib:write/1` (`~w`) and `io_lib_pretty` (`~p`, line length 80) for the terms
    //! CouchDB's messages embed, as Erlang/OTP 25 prints them. Output is latin-1 characters as bytes: a binary's UTF-8
    //! bytes are printed one character each, so the bytes come out unchanged.

    use super::{shortest_digits, Num, Term};

    const LINE: i64 = 80;

    /// `~w`: one line, binaries as byte lists, lists never as strings.
    pub(super) fn write(term: &Term) -> Vec<u8> {
        let mut out = Vec::new();
        write_into(term, &mut out);
        out
    }

    fn write_into(term: &Term, out: &mut Vec<u8>) {
        match term {
            Term::Num(n) => out.extend(number(*n).bytes()),
            Term::Atom(a) => out.extend(a.bytes()),
            Term::Bin(s) => out.extend(byte_list(s.as_bytes())),
            Term::List(items) => write_seq(items.iter(), b'[', b']', out),
            Term::Tuple(items) => write_seq(items.iter(), b'{', b'}', out),
            Term::Obj(_) => write_into(&obj_as_tuple(term), out),
        }
    }

    fn write_seq<'a>(
        items: impl Iterator<Item = &'a Term>,
        open: u8,
        close: u8,
        out: &mut Vec<u8>,
    ) {
        out.push(open);
        for (i, item) in items.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_into(item, out);
        }
        out.push(close);
    }

    /// `{[{<<"k">>, V}, …]}`, CouchDB's object representation.
    fn obj_as_tuple(term: &Term) -> Term {
        let Term::Obj(props) = term else {
            return term.clone();
        };
        let pairs = props.iter().map(super::pair_tuple).collect();
        Term::Tuple(vec![Term::List(pairs)])
    }

    /// `<<1,2,3>>`.
    fn byte_list(bytes: &[u8]) -> Vec<u8> {
        let body: Vec<String> = bytes.iter().map(u8::to_string).collect();
        format!("<<{}>>", body.join(",")).into_bytes()
    }

    fn number(n: Num) -> String {
        match n {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => float(f),
        }
    }

    /// Erlang's shortest float form (`io_lib_format:fwrite_g/1`): shortest round-trip
    /// digits in plain notation (`123.0`, `0.001`) unless scientific notation (`1.0e3`) is
    /// shorter, and always scientific for integral values of 2^53 or more.
    pub(super) fn float(f: f64) -> String {
        if !f.is_finite() {
            return super::out_of_range(f);
        }
        if f == 0.0 {
            return if f.is_sign_negative() {
                "-0.0".into()
            } else {
                "0.0".into()
            };
        }
        let (digits, exp) = shortest_digits(f);
        let sign = if f < 0.0 { "-" } else { "" };
        let len = digits.len() as i32;
        // Characters scientific notation adds: "e" and the exponent, and ".0" after a
        // single digit; plain notation adds "0." and leading zeros, or zeros and ".0".
        let sci_cost = exp.to_string().len() as i32 + 2 + i32::from(len == 1);
        let last_place = exp - len + 1;
        let plain = if last_place < 0 {
            exp >= 0 || 1 - exp <= sci_cost
        } else {
            sci_cost >= last_place + 2 && f.abs() < 9007199254740992.0
        };
        if plain {
            return format!("{sign}{}", super::plain_decimal(&digits, exp));
        }
        let (first, rest) = digits.split_at(1);
        format!(
            "{sign}{first}.{}e{exp}",
            if rest.is_empty() { "0" } else { rest }
        )
    }

    /// `~p` starting at 1-based column `col`.
    pub(super) fn print(term: &Term, col: usize) -> Vec<u8> {
        let col = col.max(1) as i64;
        if matches!(term, Term::Num(_) | Term::Atom(_)) {
            return write(term);
        }
        let node = Node::of(term);
        if node.len < LINE - col {
            return node.flat();
        }
        let indent = vec![b' '; col as usize - 1];
        Pp { max: node.len }.pp(&node, col, &indent, 0, 0)
    }

    /// `io_lib_pretty`'s intermediate form: the printed width of each subterm.
    struct Node {
        kind: Kind,
        len: i64,
    }

    enum Kind {
        /// Printed as is (numbers, atoms, strings, printable binaries).
        Atomic(Vec<u8>),
        /// A binary printed as bytes, which may wrap between bytes.
        Binary(Vec<u8>),
        List(Vec<Node>),
        Tuple(Vec<Node>),
    }

    impl Node {
        fn of(term: &Term) -> Node {
            match term {
                Term::Num(_) | Term::Atom(_) => Node::atomic(write(term)),
                Term::Bin(s) => Node::binary(s.as_bytes()),
                Term::List(items) if items.is_empty() => Node::atomic(b"[]".to_vec()),
                Term::List(items) => match printable_chars(items) {
                    Some(chars) => Node::atomic(quoted(&chars, b"\"", b"\"")),
                    None => Node::seq(items, Kind::List),
                },
                Term::Tuple(items) => Node::seq(items, Kind::Tuple),
                Term::Obj(_) => Node::of(&obj_as_tuple(term)),
            }
        }

        fn atomic(text: Vec<u8>) -> Node {
            Node {
                len: text.len() as i64,
                kind: Kind::Atomic(text),
            }
        }

        fn binary(bytes: &[u8]) -> Node {
            if bytes.is_empty() {
                return Node::atomic(b"<<>>".to_vec());
            }
            if bytes.iter().all(|&b| printable(b)) {
                return Node::atomic(quoted(bytes, b"<<\"", b"\">>"));
            }
            let text = byte_list(bytes);
            Node {
                len: text.len() as i64,
                kind: Kind::Binary(text),
            }
        }

        fn seq(items: &[Term], kind: fn(Vec<Node>) -> Kind) -> Node {
            let nodes: Vec<Node> = items.iter().map(Node::of).collect();
            let len = 2 + nodes.iter().map(|n| n.len).sum::<i64>() + nodes.len() as i64 - 1;
            Node {
                kind: kind(nodes),
                len,
            }
        }

        fn is_atomic(&self) -> bool {
            matches!(self.kind, Kind::Atomic(_))
        }

        fn flat(&self) -> Vec<u8> {
            match &self.kind {
                Kind::Atomic(text) | Kind::Binary(text) => text.clone(),
                Kind::List(items) => flat_seq(items, b'[', b']'),
                Kind::Tuple(items) => flat_seq(items, b'{', b'}'),
            }
        }
    }

    fn flat_seq(items: &[Node], open: u8, close: u8) -> Vec<u8> {
        let mut out = vec![open];
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend(item.flat());
        }
        out.push(close);
        out
    }

    /// `io_lib:printable_latin1_list/1` for one character.
    fn printable(c: u8) -> bool {
        matches!(c, 0o40..=0o176 | 0o240..=0o377 | b'\n' | b'\r' | b'\t' | 0x0b | 0x08 | 0x0c | 0x1b)
    }

    /// The characters of a list that `~p` prints as a string, if it is one.
    fn printable_chars(items: &[Term]) -> Option<Vec<u8>> {
        items
            .iter()
            .map(|item| match item {
                Term::Num(Num::Int(c)) => u8::try_from(*c).ok().filter(|&c| printable(c)),
                _ => None,
            })
            .collect()
    }

    /// Printable characters quoted as `io_lib:write_string/2` does.
    fn quoted(chars: &[u8], open: &[u8], close: &[u8]) -> Vec<u8> {
        let mut out = open.to_vec();
        for &c in chars {
            let escape = match c {
                b'"' => Some(b'"'),
                b'\\' => Some(b'\\'),
                b'\n' => Some(b'n'),
                b'\r' => Some(b'r'),
                b'\t' => Some(b't'),
                0x0b => Some(b'v'),
                0x08 => Some(b'b'),
                0x0c => Some(b'f'),
                0x1b => Some(b'e'),
                _ => None,
            };
            match escape {
                Some(e) => out.extend([b'\\', e]),
                None => out.push(c),
            }
        }
        out.extend_from_slice(close);
        out
    }

    /// The line-breaking pass, for a term too wide for the rest of its line. `max` is the
    /// whole term's width (`io_lib_pretty`'s `M` when no limit is given).
    struct Pp {
        max: i64,
    }

    impl Pp {
        fn fits(&self, node: &Node, col: i64, ld: i64, w: i64) -> bool {
            node.len < LINE - col - ld && node.len + w + ld <= self.max
        }

        fn pp(&self, node: &Node, col: i64, ind: &[u8], ld: i64, w: i64) -> Vec<u8> {
            if self.fits(node, col, ld, w) {
                return node.flat();
            }
            match &node.kind {
                Kind::List(items) => self.bracketed(items, b'[', b']', col, ind, ld, w),
                Kind::Tuple(items) => self.bracketed(items, b'{', b'}', col, ind, ld, w),
                Kind::Binary(text) => self.binary(text, col + 2, &indented(2, ind), ld, w),
                Kind::Atomic(text) => text.clone(),
            }
        }

        #[allow(clippy::too_many_arguments)]
        fn bracketed(
            &self,
            items: &[Node],
            open: u8,
            close: u8,
            col: i64,
            ind: &[u8],
            ld: i64,
            w: i64,
        ) -> Vec<u8> {
            let mut out = vec![open];
            out.extend(self.list(items, col + 1, &indented(1, ind), ld, w + 1));
            out.push(close);
            out
        }

        /// `pp_list` + `pp_tail`: elements stay on the line while they fit, else each
        /// starts a new line at `col0`.
        fn list(&self, items: &[Node], col0: i64, ind: &[u8], ld: i64, w: i64) -> Vec<u8> {
            let last_depth = |i: usize| if i + 1 < items.len() { 0 } else { ld + 1 };
            let (mut out, first_w) = self.element(&items[0], col0, ind, last_depth(0), w);
            let (mut col, mut w) = (col0 + first_w, w + first_w);
            for (i, item) in items.iter().enumerate().skip(1) {
                let ld1 = last_depth(i);
                let elen = 1 + item.len;
                let fits = if ld1 == 0 {
                    elen + 1 < LINE - col && w + elen < self.max
                } else {
                    elen < LINE - col - ld1 && w + elen + ld1 <= self.max
                };
                if fits && item.is_atomic() {
                    out.push(b',');
                    out.extend(item.flat());
                    col += elen;
                    w += elen;
                } else {
                    let (text, width) = self.element(item, col0, ind, ld1, 0);
                    out.extend_from_slice(b",\n");
                    out.extend_from_slice(ind);
                    out.extend(text);
                    col = col0 + width;
                    w = width;
                }
            }
            out
        }

        /// An element and the width it takes (the whole line once broken).
        fn element(&self, node: &Node, col: i64, ind: &[u8], ld: i64, w: i64) -> (Vec<u8>, i64) {
            if self.fits(node, col, ld, w) && node.is_atomic() {
                (node.flat(), node.len)
            } else {
                (self.pp(node, col, ind, ld, w), LINE)
            }
        }

        /// `<<1,2,…>>` wrapped between bytes to a width of at least 8.
        fn binary(&self, text: &[u8], col: i64, ind: &[u8], ld: i64, w: i64) -> Vec<u8> {
            let width = 8.max((LINE - col).min(self.max - 4 - w) - ld);
            let body = &text[2..text.len() - 2];
            let pieces: Vec<&[u8]> = body.split(|&b| b == b',').collect();
            let (last, init) = pieces.split_last().expect("a non-empty binary");
            let mut out = b"<<".to_vec();
            let mut room = width;
            for piece in init {
                let len = piece.len() as i64 + 1;
                if room - len < 0 {
                    out.push(b'\n');
                    out.extend_from_slice(ind);
                    room = width - len;
                } else {
                    room -= len;
                }
                out.extend_from_slice(piece);
                out.push(b',');
            }
            if last.len() as i64 > room {
                out.push(b'\n');
                out.extend_from_slice(ind);
            }
            out.extend_from_slice(last);
            out.extend_from_slice(b">>");
            out
        }
    }

    fn indented(n: usize, ind: &[u8]) -> Vec<u8> {
        let mut out = vec![b' '; n];
        out.extend_from_slice(ind);
        out
    }
}

// ---------------------------------------------------------------------------------------
// _approx_count_distinct

mod hll {
    //! The HyperLogLog sketch of `couch_hyper` at precision 11.

    use base64::engine::general_purpose::STANDARD_NO_PAD;
    use base64::Engine;
    use serde_json::Value;
    use sha1::{Digest, Sha1};

    use super::{etf, ReduceError};

    const P: u32 = 11;
    const M: usize = 1 << P;
    /// Bytes of the dense form: 2048 six-bit ranks.
    const DENSE_BYTES: usize = M * 6 / 8;
    /// Largest rank: 53 hash bits after the index, all zero.
    const MAX_RANK: u8 = 64 - P as u8 + 1;
    /// Up to this many estimated keys, linear counting is used (`couch_hyper`'s threshold).
    const LINEAR_COUNTING_LIMIT: f64 = 1800.0;

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(super) struct Sketch {
        ranks: Vec<u8>,
    }

    impl Sketch {
        fn empty() -> Sketch {
            Sketch { ranks: vec![0; M] }
        }

        pub(super) fn of_keys<'a>(keys: impl Iterator<Item = &'a Value>) -> Sketch {
            let mut sketch = Sketch::empty();
            let mut buf = Vec::new();
            for key in keys {
                buf.clear();
                etf::encode_key(key, &mut buf);
                sketch.insert_hash(&Sha1::digest(&buf));
            }
            sketch
        }

        fn insert_hash(&mut self, hash: &[u8]) {
            let bits = u64::from_be_bytes(hash[..8].try_into().expect("SHA-1 has 20 bytes"));
            let index = (bits >> (64 - P)) as usize;
            let rest = bits << P;
            let rank = (rest.leading_zeros() as u8).min(MAX_RANK - 1) + 1;
            self.ranks[index] = self.ranks[index].max(rank);
        }

        pub(super) fn union(partials: &[&Value]) -> Result<Sketch, ReduceError> {
            let mut union = Sketch::empty();
            for partial in partials {
                let sketch = Sketch::from_json(partial).ok_or_else(|| invalid(partial))?;
                for (rank, other) in union.ranks.iter_mut().zip(sketch.ranks) {
                    *rank = (*rank).max(other);
                }
            }
            Ok(union)
        }

        /// `couch_hyper:card/1`: HyperLogLog++ with bias correction, then linear counting
        /// while that estimate is small enough.
        pub(super) fn estimate(&self) -> u64 {
            let m = M as f64;
            let register_sum: f64 = self.ranks.iter().map(|&r| 2f64.powi(-i32::from(r))).sum();
            let alpha = 0.7213 / (1.0 + 1.079 / m);
            let raw = alpha * (m * m) / register_sum;
            let corrected = if raw <= 5.0 * m {
                raw - estimate_bias(raw)
            } else {
                raw
            };
            let zeros = self.ranks.iter().filter(|&&r| r == 0).count();
            let linear = if zeros == 0 {
                corrected
            } else {
                m * (m / zeros as f64).ln()
            };
            let estimate = if linear <= LINEAR_COUNTING_LIMIT {
                linear
            } else {
                corrected
            };
            estimate.round().max(0.0) as u64
        }

        pub(super) fn to_json(&self) -> Value {
            let nonzero: Vec<(usize, u8)> = self
                .ranks
                .iter()
                .enumerate()
                .filter(|(_, &r)| r > 0)
                .map(|(i, &r)| (i, r))
                .collect();
            let text = if nonzero.len() * 3 < DENSE_BYTES {
                let bytes: Vec<u8> = nonzero
                    .iter()
                    .flat_map(|&(i, r)| [(i >> 8) as u8, i as u8, r])
                    .collect();
                format!("S{}", STANDARD_NO_PAD.encode(bytes))
            } else {
                format!("D{}", STANDARD_NO_PAD.encode(pack(&self.ranks)))
            };
            Value::String(text)
        }

        pub(super) fn from_json(value: &Value) -> Option<Sketch> {
            let text = value.as_str()?;
            let decode = |payload| STANDARD_NO_PAD.decode(payload).ok();
            let ranks = if let Some(sparse) = text.strip_prefix('S') {
                unpack_sparse(&decode(sparse)?)?
            } else {
                let dense = decode(text.strip_prefix('D')?)?;
                (dense.len() == DENSE_BYTES).then(|| unpack(&dense))?
            };
            ranks
                .iter()
                .all(|&r| r <= MAX_RANK)
                .then_some(Sketch { ranks })
        }
    }

    fn invalid(partial: &Value) -> ReduceError {
        ReduceError::new(
            "invalid_reduction",
            format!("not an _approx_count_distinct state: {partial}"),
            None,
        )
    }

    /// Sparse triples in strictly increasing index order.
    fn unpack_sparse(bytes: &[u8]) -> Option<Vec<u8>> {
        if !bytes.len().is_multiple_of(3) {
            return None;
        }
        let mut ranks = vec![0; M];
        let mut next = 0;
        for triple in bytes.chunks(3) {
            let index = usize::from(u16::from_be_bytes([triple[0], triple[1]]));
            if index < next || index >= M || triple[2] == 0 {
                return None;
            }
            ranks[index] = triple[2];
            next = index + 1;
        }
        Some(ranks)
    }

    /// Ranks as consecutive 6-bit big-endian fields.
    fn pack(ranks: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(DENSE_BYTES);
        for four in ranks.chunks(4) {
            let word = four.iter().fold(0u32, |acc, &r| (acc << 6) | u32::from(r));
            out.extend_from_slice(&word.to_be_bytes()[1..]);
        }
        out
    }

    fn unpack(bytes: &[u8]) -> Vec<u8> {
        let mut ranks = Vec::with_capacity(M);
        for three in bytes.chunks(3) {
            let word = u32::from_be_bytes([0, three[0], three[1], three[2]]);
            ranks.extend((0..4).rev().map(|k| ((word >> (6 * k)) & 0x3f) as u8));
        }
        ranks
    }

    /// The mean bias of the six grid points nearest to `raw` (ties by grid order).
    fn estimate_bias(raw: f64) -> f64 {
        let mut nearest: Vec<(f64, usize)> = ESTIMATE_DATA
            .iter()
            .enumerate()
            .map(|(i, &e)| ((raw - e) * (raw - e), i))
            .collect();
        nearest.sort_by(|a, b| a.0.total_cmp(&b.0));
        let sum = nearest[..6]
            .iter()
            .fold(0.0, |acc, &(_, i)| acc + BIAS_DATA[i]);
        sum / 6.0
    }

    /// HLL++ raw-estimate grid for precision 11 (Heule, Nunkesser & Hall 2013, appendix;
    /// the table CouchDB's `couch_hyper` uses). `ESTIMATE_DATA[i] - BIAS_DATA[i]` is the
    /// true cardinality the pair was measured at: 1, 52, 103, … 10240.
    const ESTIMATE_DATA: [f64; 201] = [
        1477.0, 1501.6014, 1526.5802, 1551.7942, 1577.3042, 1603.2062, 1629.8402, 1656.2292,
        1682.9462, 1709.9926, 1737.3026, 1765.4252, 1793.0578, 1821.6092, 1849.626, 1878.5568,
        1908.527, 1937.5154, 1967.1874, 1997.3878, 2027.37, 2058.1972, 2089.5728, 2120.1012,
        2151.9668, 2183.292, 2216.0772, 2247.8578, 2280.6562, 2313.041, 2345.714, 2380.3112,
        2414.1806, 2447.9854, 2481.656, 2516.346, 2551.5154, 2586.8378, 2621.7448, 2656.6722,
        2693.5722, 2729.1462, 2765.4124, 2802.8728, 2838.898, 2876.408, 2913.4926, 2951.4938,
        2989.6776, 3026.282, 3065.7704, 3104.1012, 3143.7388, 3181.6876, 3221.1872, 3261.5048,
        3300.0214, 3339.806, 3381.409, 3421.4144, 3461.4294, 3502.2286, 3544.651, 3586.6156,
        3627.337, 3670.083, 3711.1538, 3753.5094, 3797.01, 3838.6686, 3882.1678, 3922.8116,
        3967.9978, 4009.9204, 4054.3286, 4097.5706, 4140.6014, 4185.544, 4229.5976, 4274.583,
        4316.9438, 4361.672, 4406.2786, 4451.8628, 4496.1834, 4543.505, 4589.1816, 4632.5188,
        4678.2294, 4724.8908, 4769.0194, 4817.052, 4861.4588, 4910.1596, 4956.4344, 5002.5238,
        5048.13, 5093.6374, 5142.8162, 5187.7894, 5237.3984, 5285.6078, 5331.0858, 5379.1036,
        5428.6258, 5474.6018, 5522.7618, 5571.5822, 5618.59, 5667.9992, 5714.88, 5763.454,
        5808.6982, 5860.3644, 5910.2914, 5953.571, 6005.9232, 6055.1914, 6104.5882, 6154.5702,
        6199.7036, 6251.1764, 6298.7596, 6350.0302, 6398.061, 6448.4694, 6495.933, 6548.0474,
        6597.7166, 6646.9416, 6695.9208, 6742.6328, 6793.5276, 6842.1934, 6894.2372, 6945.3864,
        6996.9228, 7044.2372, 7094.1374, 7142.2272, 7192.2942, 7238.8338, 7288.9006, 7344.0908,
        7394.8544, 7443.5176, 7490.4148, 7542.9314, 7595.6738, 7641.9878, 7694.3688, 7743.0448,
        7797.522, 7845.53, 7899.594, 7950.3132, 7996.455, 8050.9442, 8092.9114, 8153.1374,
        8197.4472, 8252.8278, 8301.8728, 8348.6776, 8401.4698, 8453.551, 8504.6598, 8553.8944,
        8604.1276, 8657.6514, 8710.3062, 8758.908, 8807.8706, 8862.1702, 8910.4668, 8960.77,
        9007.2766, 9063.164, 9121.0534, 9164.1354, 9218.1594, 9267.767, 9319.0594, 9372.155,
        9419.7126, 9474.3722, 9520.1338, 9572.368, 9622.7702, 9675.8448, 9726.5396, 9778.7378,
        9827.6554, 9878.1922, 9928.7782, 9978.3984, 10026.578, 10076.5626, 10137.1618, 10177.5244,
        10229.9176,
    ];

    /// Measured bias of the raw estimate at each point of [`ESTIMATE_DATA`].
    #[rustfmt::skip]
    const BIAS_DATA: [f64; 201] = [
        1476.0, 1449.6014, 1423.5802, 1397.7942, 1372.3042, 1347.2062, 1321.8402, 1297.2292,
        1272.9462, 1248.9926, 1225.3026, 1201.4252, 1178.0578, 1155.6092, 1132.626, 1110.5568,
        1088.527, 1066.5154, 1045.1874, 1024.3878, 1003.37, 982.1972, 962.5728, 942.1012,
        922.9668, 903.292, 884.0772, 864.8578, 846.6562, 828.041, 809.714, 792.3112, 775.1806,
        757.9854, 740.656, 724.346, 707.5154, 691.8378, 675.7448, 659.6722, 645.5722, 630.1462,
        614.4124, 600.8728, 585.898, 572.408, 558.4926, 544.4938, 531.6776, 517.282, 505.7704,
        493.1012, 480.7388, 467.6876, 456.1872, 445.5048, 433.0214, 420.806, 411.409, 400.4144,
        389.4294, 379.2286, 369.651, 360.6156, 350.337, 342.083, 332.1538, 322.5094, 315.01,
        305.6686, 298.1678, 287.8116, 280.9978, 271.9204, 265.3286, 257.5706, 249.6014, 242.544,
        235.5976, 229.583, 220.9438, 214.672, 208.2786, 201.8628, 195.1834, 191.505, 186.1816,
        178.5188, 172.2294, 167.8908, 161.0194, 158.052, 151.4588, 148.1596, 143.4344, 138.5238,
        133.13, 127.6374, 124.8162, 118.7894, 117.3984, 114.6078, 109.0858, 105.1036, 103.6258,
        98.6018000000004, 95.7618000000002, 93.5821999999998, 88.5900000000001,
        86.9992000000002, 82.8800000000001, 80.4539999999997, 74.6981999999998,
        74.3644000000004, 73.2914000000001, 65.5709999999999, 66.9232000000002,
        65.1913999999997, 62.5882000000001, 61.5702000000001, 55.7035999999998,
        56.1764000000003, 52.7596000000003, 53.0302000000001, 49.0609999999997, 48.4694, 44.933,
        46.0474000000004, 44.7165999999997, 41.9416000000001, 39.9207999999999,
        35.6328000000003, 35.5276000000003, 33.1934000000001, 33.2371999999996,
        33.3864000000003, 33.9228000000003, 30.2371999999996, 29.1373999999996,
        25.2272000000003, 24.2942000000003, 19.8338000000003, 18.9005999999999,
        23.0907999999999, 21.8544000000002, 19.5176000000001, 15.4147999999996,
        16.9314000000004, 18.6737999999996, 12.9877999999999, 14.3688000000002,
        12.0447999999997, 15.5219999999999, 12.5299999999997, 14.5940000000001,
        14.3131999999996, 9.45499999999993, 12.9441999999999, 3.91139999999996,
        13.1373999999996, 5.44720000000052, 9.82779999999912, 7.87279999999919,
        3.67760000000089, 5.46980000000076, 5.55099999999948, 5.65979999999945,
        3.89439999999922, 3.1275999999998, 5.65140000000065, 6.3062000000009, 3.90799999999945,
        1.87060000000019, 5.17020000000048, 2.46680000000015, 0.770000000000437,
        -3.72340000000077, 1.16400000000067, 8.05340000000069, 0.135399999999208,
        2.15940000000046, 0.766999999999825, 1.0594000000001, 3.15500000000065,
        -0.287399999999252, 2.37219999999979, -2.86620000000039, -1.63199999999961,
        -2.22979999999916, -0.15519999999924, -1.46039999999994, -0.262199999999211,
        -2.34460000000036, -2.8078000000005, -3.22179999999935, -5.60159999999996,
        -8.42200000000048, -9.43740000000071, 0.161799999999857, -10.4755999999998,
        -10.0823999999993,
    ];
}

// ---------------------------------------------------------------------------------------
// Erlang external term format of a key, for hashing

mod etf {
    //! `term_to_binary(Key, [{minor_version, 1}])` of the Erlang term CouchDB decodes a
    //! JSON key to, except that integral numbers are always integers (see the module docs).

    use serde_json::Value;

    use super::Num;
    use crate::etf::{atom, big, binary, byte_list, float, list_header, nil, small_tuple};

    pub(super) fn encode_key(key: &Value, out: &mut Vec<u8>) {
        out.push(crate::etf::VERSION);
        encode(key, out);
    }

    fn encode(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Null => atom("null", out),
            Value::Bool(b) => atom(if *b { "true" } else { "false" }, out),
            Value::Number(n) => number(Num::from_json(n), out),
            Value::String(s) => binary(s.as_bytes(), out),
            Value::Array(items) => list(items, out),
            Value::Object(members) => {
                small_tuple(1, out);
                if members.is_empty() {
                    return nil(out);
                }
                list_header(members.len(), out);
                for (k, v) in members {
                    small_tuple(2, out);
                    binary(k.as_bytes(), out);
                    encode(v, out);
                }
                nil(out);
            }
        }
    }

    /// A list of small integers is a byte string; any other list is its elements and `[]`.
    fn list(items: &[Value], out: &mut Vec<u8>) {
        if items.is_empty() {
            return nil(out);
        }
        let bytes: Option<Vec<u8>> = items.iter().map(small_integer).collect();
        match bytes {
            Some(bytes) if bytes.len() <= usize::from(u16::MAX) => byte_list(&bytes, out),
            _ => {
                list_header(items.len(), out);
                items.iter().for_each(|item| encode(item, out));
                nil(out);
            }
        }
    }

    fn small_integer(value: &Value) -> Option<u8> {
        match value {
            Value::Number(n) => match canonical(Num::from_json(n)) {
                Canonical::Int(i) => u8::try_from(i).ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// A number as hashed: integral values as integers, the rest as floats.
    enum Canonical {
        Int(i128),
        /// An integral float beyond `i128`: sign and little-endian magnitude.
        Big(bool, Vec<u8>),
        Float(f64),
    }

    fn canonical(n: Num) -> Canonical {
        const TWO_127: f64 = 1.7014118346046923e38;
        match n {
            Num::Int(i) => Canonical::Int(i),
            Num::Float(f) if f.is_finite() && f.fract() == 0.0 => {
                if f.abs() < TWO_127 {
                    Canonical::Int(f as i128)
                } else {
                    Canonical::Big(f < 0.0, float_magnitude(f))
                }
            }
            Num::Float(f) => Canonical::Float(f),
        }
    }

    /// The little-endian bytes of an integral `|f|` ≥ 2^127.
    fn float_magnitude(f: f64) -> Vec<u8> {
        let bits = f.abs().to_bits();
        let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
        let shift = ((bits >> 52) & 0x7ff) as usize - 1075;
        let mut bytes = vec![0u8; shift / 8];
        let shifted = u128::from(mantissa) << (shift % 8);
        bytes.extend(shifted.to_le_bytes());
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        bytes
    }

    fn number(n: Num, out: &mut Vec<u8>) {
        match canonical(n) {
            Canonical::Int(i) => integer(i, out),
            Canonical::Big(negative, magnitude) => big(negative, &magnitude, out),
            Canonical::Float(f) => float(f, out),
        }
    }

    fn integer(i: i128, out: &mut Vec<u8>) {
        match i64::try_from(i) {
            Ok(i) => crate::etf::integer(i, out),
            Err(_) => big(i < 0, &i.unsigned_abs().to_le_bytes(), out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn term(v: Value) -> Term {
        Term::from_json(&v)
    }

    #[test]
    fn reasons_print_as_couchdb_prints_them() {
        assert_eq!(reason_text(&json!("gone")), "gone");
        assert_eq!(reason_text(&json!(null)), "null");
        assert_eq!(reason_text(&json!(true)), "true");
        assert_eq!(reason_text(&json!(42)), "42");
        assert_eq!(reason_text(&json!({})), "{[]}");
        assert_eq!(reason_text(&json!({"a": 1})), "{[{<<\"a\">>,1}]}");
        assert_eq!(reason_text(&json!(["a", ["b", 99]])), "abc");
        assert_eq!(reason_text(&json!([])), "");
        assert_eq!(reason_text(&json!([1.5])), "[1.5]");
    }

    #[test]
    fn floats_render_like_jiffy() {
        let cases = [
            (3.0, "3.0"),
            (1.5, "1.5"),
            (-0.25, "-0.25"),
            (0.0, "0.0"),
            (-0.0, "0.0"),
            (1e20, "100000000000000000000.0"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1e-6, "0.000001"),
            (1.5e-7, "1.5e-7"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (f, text) in cases {
            assert_eq!(float_json(f), text, "{f}");
            assert_eq!(Num::Float(f).to_json().to_string(), text);
        }
    }

    #[test]
    fn shortest_digits_break_ties_to_even() {
        // Exactly halfway between the 16-digit decimals …387.2 and …387.3.
        let tie = 790362678270387.0 + 0.25;
        assert_eq!(shortest_digits(tie), ("7903626782703872".into(), 14));
        assert_eq!(shortest_digits(-tie), ("7903626782703872".into(), 14));
        assert_eq!(shortest_digits(0.3), ("3".into(), -1));
        assert_eq!(shortest_digits(1234.5), ("12345".into(), 3));
        assert_eq!(erl::float(-tie), "-790362678270387.2");
        assert_eq!(float_json(tie), "790362678270387.2");
    }

    #[test]
    fn floats_print_like_erlang() {
        let cases = [
            (1000.0, "1.0e3"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (1.0e-5, "1.0e-5"),
            (123456789.0, "123456789.0"),
            (1.0e15, "1.0e15"),
            (-1.5, "-1.5"),
        ];
        for (f, text) in cases {
            assert_eq!(erl::float(f), text);
        }
    }

    #[test]
    fn literals_are_integers_or_floats_as_in_erlang() {
        assert_eq!(term(json!(1)), Term::Num(Num::Int(1)));
        assert_eq!(
            Term::from_json(&serde_json::from_str("1.0").unwrap()),
            Term::Num(Num::Float(1.0))
        );
        assert_eq!(
            Term::from_json(&serde_json::from_str("1e3").unwrap()),
            Term::Num(Num::Float(1000.0))
        );
        let big: Value = serde_json::from_str("123456789012345678901234567890").unwrap();
        assert_eq!(
            Term::from_json(&big),
            Term::Num(Num::Int(123456789012345678901234567890))
        );
    }

    #[test]
    fn integer_and_float_compare_exactly() {
        assert_eq!(Num::Int(1).cmp(Num::Float(1.0)), Ordering::Equal);
        assert_eq!(Num::Int(1).cmp(Num::Float(1.5)), Ordering::Less);
        assert_eq!(Num::Int(-2).cmp(Num::Float(-1.5)), Ordering::Less);
        assert_eq!(
            Num::Int((1 << 53) + 1).cmp(Num::Float(9007199254740992.0)),
            Ordering::Greater
        );
        assert_eq!(erl_min(Num::Int(1), Num::Float(1.0)), Num::Int(1));
        assert_eq!(erl_max(Num::Float(1.0), Num::Int(1)), Num::Float(1.0));
    }

    #[test]
    fn write_and_print_terms() {
        assert_eq!(erl::write(&term(json!("abc"))), b"<<97,98,99>>");
        assert_eq!(
            erl::write(&term(json!({"a": [1, null]}))),
            b"{[{<<97>>,[1,null]}]}"
        );
        assert_eq!(erl::print(&term(json!("abc")), 1), b"<<\"abc\">>");
        assert_eq!(erl::print(&term(json!([104, 105])), 1), b"\"hi\"");
        assert_eq!(
            erl::print(&term(json!([1, 2])), 84),
            b"[1,\n"
                .iter()
                .chain(&[b' '; 84])
                .chain(b"2]")
                .copied()
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn etf_matches_term_to_binary() {
        let cases = [
            (json!([1, 2, 3]), vec![131, 107, 0, 3, 1, 2, 3]),
            (json!(true), vec![131, 100, 0, 4, b't', b'r', b'u', b'e']),
            (
                json!(-1000000000000i64),
                vec![131, 110, 5, 1, 0, 16, 165, 212, 232],
            ),
            (
                json!([300, 2]),
                vec![131, 108, 0, 0, 0, 2, 98, 0, 0, 1, 44, 97, 2, 106],
            ),
        ];
        for (key, bytes) in cases {
            let mut out = Vec::new();
            etf::encode_key(&key, &mut out);
            assert_eq!(out, bytes, "{key}");
        }
        let mut out = Vec::new();
        etf::encode_key(&serde_json::from_str(r#"{"a":1.5}"#).unwrap(), &mut out);
        assert_eq!(
            out,
            [
                131, 104, 1, 108, 0, 0, 0, 1, 104, 2, 109, 0, 0, 0, 1, 97, 70, 63, 248, 0, 0, 0, 0,
                0, 0, 106
            ]
        );
    }

    #[test]
    fn integral_float_keys_hash_as_integers() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        etf::encode_key(&serde_json::from_str("2.0").unwrap(), &mut a);
        etf::encode_key(&json!(2), &mut b);
        assert_eq!(a, b);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        etf::encode_key(&serde_json::from_str("1e40").unwrap(), &mut a);
        etf::encode_key(
            &serde_json::from_str("10000000000000000303786028427003666890752").unwrap(),
            &mut b,
        );
        assert_eq!(a, b);
    }
}
