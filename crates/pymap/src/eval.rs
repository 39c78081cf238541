//! Runs a parsed map function on a document's JSON text (read in place, with
//! [`settee_core::json_raw`]) with Python's semantics for the values it can meet, as the
//! query server decodes the document (with orjson, or the standard library: the same
//! values for what is let through here). Where Python would raise (a missing key, an
//! index out of range, unpacking the wrong count, a type error) or the answer needs what
//! is not modelled (floats, numbers past 64 bits, bools used as numbers, comparing
//! containers), the run stops with [`Fallback`] and the query server maps the document
//! instead, logging the exception as it always has.

use crate::parse::{Cmp, Expr, Function, Lit, Method, Stmt};
use crate::{Fallback, Rows};
use serde_json::Value;
use settee_core::json_raw as raw;
use settee_core::json_scan::{skip_string, ws};
use std::borrow::Cow;
use std::rc::Rc;

type R<T> = Result<T, Fallback>;

/// A Python value: `None`, bools, ints, strings, the document's own dicts, lists and
/// numbers other than 64-bit ints (their text, read in place), and lists the function
/// built (tuples too: both become JSON arrays).
#[derive(Clone, Debug)]
enum V<'a> {
    None,
    Bool(bool),
    Int(i64),
    Str(Cow<'a, str>),
    Dict(&'a str),
    DocList(&'a str),
    /// A number that is not a 64-bit int as written (a float, `-0`, or past 64 bits):
    /// what Python makes of it is left to Python.
    Num,
    List(Rc<Vec<V<'a>>>),
}

pub(crate) fn run<'a>(f: &'a Function, doc: &'a str) -> R<Rows> {
    let doc = doc.trim_matches([' ', '\t', '\n', '\r']);
    if !decodes_alike(doc) {
        return Err(Fallback);
    }
    let doc = from_raw(doc)?;
    if !matches!(doc, V::Dict(_)) {
        return Err(Fallback);
    }
    let mut env = Env {
        locals: vec![None; f.locals],
        rows: Vec::new(),
    };
    env.locals[0] = Some(doc);
    env.block(&f.body)?;
    Ok(env.rows)
}

/// Whether every Python JSON decoder reads the text as the same values (so the query
/// server would not fail on the document, or read it differently): no escaped surrogate
/// (orjson refuses a lone one), no number with an exponent of three digits or more or of
/// more than 300 characters (orjson refuses one that is infinite as a double), and no
/// nesting deeper than 256 (decoders limit recursion).
fn decodes_alike(text: &str) -> bool {
    let b = text.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => {
                let Some((end, escaped)) = skip_string(b, i) else {
                    return false;
                };
                if escaped && has_surrogate_escape(&b[i..end]) {
                    return false;
                }
                i = end;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > 256 {
                    return false;
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let len = b[i..]
                    .iter()
                    .take_while(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                let num = &b[i..i + len];
                if len > 300 {
                    return false;
                }
                if let Some(e) = num.iter().position(|c| matches!(c, b'e' | b'E')) {
                    let digits = num[e + 1..].iter().filter(|c| c.is_ascii_digit()).count();
                    if digits >= 3 {
                        return false;
                    }
                }
                i += len;
            }
            _ => i += 1,
        }
    }
    true
}

fn has_surrogate_escape(s: &[u8]) -> bool {
    s.windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && matches!(w[2], b'd' | b'D')
            && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// The value of a JSON text read in place.
fn from_raw(text: &str) -> R<V<'_>> {
    Ok(match *text.as_bytes().first().ok_or(Fallback)? {
        b'"' => V::Str(raw::string(text).ok_or(Fallback)?),
        b'{' => V::Dict(text),
        b'[' => V::DocList(text),
        b't' => V::Bool(true),
        b'f' => V::Bool(false),
        b'n' => V::None,
        _ => match text.parse::<i64>() {
            // Only a 64-bit int written as Python writes it reads back as the same text.
            Ok(n) if n.to_string() == text => V::Int(n),
            _ => V::Num,
        },
    })
}

struct Env<'a> {
    /// `None`: not assigned yet (reading it raises `UnboundLocalError`).
    locals: Vec<Option<V<'a>>>,
    rows: Rows,
}

enum Flow {
    Next,
    Return,
}

impl<'a> Env<'a> {
    fn block(&mut self, body: &'a [Stmt]) -> R<Flow> {
        for s in body {
            if let Flow::Return = self.stmt(s)? {
                return Ok(Flow::Return);
            }
        }
        Ok(Flow::Next)
    }

    fn stmt(&mut self, s: &'a Stmt) -> R<Flow> {
        match s {
            Stmt::Pass => {}
            Stmt::Return => return Ok(Flow::Return),
            Stmt::Assign(slot, e) => {
                let v = self.expr(e)?;
                self.locals[*slot] = Some(v);
            }
            Stmt::Unpack(slots, e) => {
                let items = items(self.expr(e)?)?;
                if items.len() != slots.len() {
                    return Err(Fallback); // ValueError
                }
                for (slot, v) in slots.iter().zip(items) {
                    self.locals[*slot] = Some(v);
                }
            }
            Stmt::Yield(e) => {
                // The query server unpacks each yielded item into a key and a value.
                let pair = items(self.expr(e)?)?;
                let [key, value] = <[V; 2]>::try_from(pair).map_err(|_| Fallback)?;
                self.rows.push((to_json(&key)?, to_json(&value)?));
            }
            Stmt::If(arms, otherwise) => {
                for (cond, body) in arms {
                    if truthy(&self.expr(cond)?)? {
                        return self.block(body);
                    }
                }
                return self.block(otherwise);
            }
        }
        Ok(Flow::Next)
    }

    fn expr(&mut self, e: &'a Expr) -> R<V<'a>> {
        Ok(match e {
            Expr::Lit(Lit::None) => V::None,
            Expr::Lit(Lit::Bool(b)) => V::Bool(*b),
            Expr::Lit(Lit::Int(n)) => V::Int(*n),
            Expr::Lit(Lit::Str(s)) => V::Str(Cow::Borrowed(s)),
            Expr::Local(slot) => self.locals[*slot].clone().ok_or(Fallback)?,
            Expr::List(items) => V::List(Rc::new(
                items.iter().map(|e| self.expr(e)).collect::<R<_>>()?,
            )),
            Expr::Index(obj, index) => {
                let obj = self.expr(obj)?;
                let index = self.expr(index)?;
                subscript(&obj, &index)?
            }
            Expr::Call(obj, method, args) => {
                let obj = self.expr(obj)?;
                let args: Vec<V> = args.iter().map(|e| self.expr(e)).collect::<R<_>>()?;
                call(&obj, *method, &args)?
            }
            Expr::Not(e) => V::Bool(!truthy(&self.expr(e)?)?),
            Expr::And(a, b) => {
                let a = self.expr(a)?;
                if truthy(&a)? {
                    self.expr(b)?
                } else {
                    a
                }
            }
            Expr::Or(a, b) => {
                let a = self.expr(a)?;
                if truthy(&a)? {
                    a
                } else {
                    self.expr(b)?
                }
            }
            Expr::IsNone(e, is) => V::Bool(matches!(self.expr(e)?, V::None) == *is),
            Expr::Cmp(op, a, b) => {
                let a = self.expr(a)?;
                let b = self.expr(b)?;
                V::Bool(compare(*op, &a, &b)?)
            }
        })
    }
}

/// Python's truth value.
fn truthy(v: &V) -> R<bool> {
    Ok(match v {
        V::None => false,
        V::Bool(x) => *x,
        V::Int(n) => *n != 0,
        V::Str(s) => !s.is_empty(),
        V::List(items) => !items.is_empty(),
        V::Dict(text) | V::DocList(text) => {
            let b = text.as_bytes();
            b.get(ws(b, 1)).is_some_and(|c| !matches!(c, b'}' | b']'))
        }
        V::Num => return Err(Fallback),
    })
}

/// The items of a sequence, as Python iterates them to unpack it.
fn items(v: V<'_>) -> R<Vec<V<'_>>> {
    match v {
        V::List(items) => Ok(Rc::try_unwrap(items).unwrap_or_else(|rc| rc.as_ref().clone())),
        V::DocList(text) => raw::elements(text)
            .map(|e| from_raw(e.ok_or(Fallback)?))
            .collect(),
        // A string unpacks into its characters, a dict into its keys: left to Python.
        _ => Err(Fallback),
    }
}

fn subscript<'a>(obj: &V<'a>, index: &V<'a>) -> R<V<'a>> {
    match (obj, index) {
        (V::Dict(text), V::Str(key)) => member(text, key)?.ok_or(Fallback), // KeyError
        (V::List(items), V::Int(i)) => Ok(items[position(*i, items.len())?].clone()),
        (V::DocList(_), V::Int(i)) => {
            let mut items = items(obj.clone())?;
            let at = position(*i, items.len())?;
            Ok(items.swap_remove(at))
        }
        (V::Str(s), V::Int(i)) => {
            let at = position(*i, s.chars().count())?;
            let c = s.chars().nth(at).ok_or(Fallback)?;
            Ok(V::Str(Cow::Owned(c.to_string())))
        }
        _ => Err(Fallback),
    }
}

/// Where Python's index `i` (negative from the end) falls in a sequence of `len` items;
/// out of range it raises `IndexError`.
fn position(i: i64, len: usize) -> R<usize> {
    let len = len as i64;
    let at = if i < 0 { i + len } else { i };
    if (0..len).contains(&at) {
        Ok(at as usize)
    } else {
        Err(Fallback)
    }
}

/// The member `key` of the dict `text`, if it has one.
fn member<'a>(text: &'a str, key: &str) -> R<Option<V<'a>>> {
    for m in raw::members(text) {
        let (quoted, value) = m.ok_or(Fallback)?;
        if raw::name_is(quoted, key) {
            return from_raw(value).map(Some);
        }
    }
    Ok(None)
}

fn call<'a>(obj: &V<'a>, method: Method, args: &[V<'a>]) -> R<V<'a>> {
    match (method, obj, args) {
        (Method::Get, V::Dict(text), [key, rest @ ..]) => {
            let found = match key {
                V::Str(k) => member(text, k)?,
                // Hashable keys other than strings are never a JSON object's.
                V::None | V::Bool(_) | V::Int(_) => None,
                _ => return Err(Fallback),
            };
            Ok(found.unwrap_or_else(|| rest.first().cloned().unwrap_or(V::None)))
        }
        (Method::Split, V::Str(s), [V::Str(sep)]) if !sep.is_empty() => {
            let parts: Vec<V> = match s {
                Cow::Borrowed(s) => s
                    .split(sep.as_ref())
                    .map(|p| V::Str(Cow::Borrowed(p)))
                    .collect(),
                Cow::Owned(s) => (s.split(sep.as_ref()))
                    .map(|p| V::Str(Cow::Owned(p.to_owned())))
                    .collect(),
            };
            Ok(V::List(Rc::new(parts)))
        }
        _ => Err(Fallback),
    }
}

fn compare(op: Cmp, a: &V, b: &V) -> R<bool> {
    use std::cmp::Ordering;
    let order = |a: &V, b: &V| -> R<Ordering> {
        match (a, b) {
            (V::Str(x), V::Str(y)) => Ok(x.as_bytes().cmp(y.as_bytes())),
            (V::Int(x), V::Int(y)) => Ok(x.cmp(y)),
            _ => Err(Fallback),
        }
    };
    Ok(match op {
        Cmp::Eq => equal(a, b)?,
        Cmp::Ne => !equal(a, b)?,
        Cmp::Lt => order(a, b)?.is_lt(),
        Cmp::Le => order(a, b)?.is_le(),
        Cmp::Gt => order(a, b)?.is_gt(),
        Cmp::Ge => order(a, b)?.is_ge(),
        Cmp::In => contains(b, a)?,
        Cmp::NotIn => !contains(b, a)?,
    })
}

/// Python's `==` where it is plain: strings never equal other types, `None` equals only
/// itself; ints and bools compare within their type (`True == 1` is left to Python, as
/// are floats and containers).
fn equal(a: &V, b: &V) -> R<bool> {
    Ok(match (a, b) {
        (V::None, other) | (other, V::None) => matches!(other, V::None),
        (V::Str(x), V::Str(y)) => x == y,
        (V::Str(_), _) | (_, V::Str(_)) => false,
        (V::Int(x), V::Int(y)) => x == y,
        (V::Bool(x), V::Bool(y)) => x == y,
        _ => return Err(Fallback),
    })
}

/// Python's `needle in haystack`, for a string needle.
fn contains(haystack: &V, needle: &V) -> R<bool> {
    let V::Str(needle) = needle else {
        return Err(Fallback);
    };
    match haystack {
        V::Dict(text) => Ok(member(text, needle)?.is_some()),
        V::Str(s) => Ok(s.contains(needle.as_ref())),
        V::DocList(_) | V::List(_) => Ok(items(haystack.clone())?
            .iter()
            .any(|v| matches!(v, V::Str(s) if s == needle))),
        _ => Err(Fallback), // TypeError
    }
}

/// The JSON the query server would send for an emitted value. The document's own dicts
/// and lists go as they are, unless they hold a number the server would write otherwise
/// (any but a 64-bit int written as Python writes it).
fn to_json(v: &V) -> R<Value> {
    Ok(match v {
        V::None => Value::Null,
        V::Bool(b) => Value::Bool(*b),
        V::Int(n) => Value::from(*n),
        V::Str(s) => Value::String(s.as_ref().to_owned()),
        V::List(items) => Value::Array(items.iter().map(to_json).collect::<R<_>>()?),
        V::Num => return Err(Fallback),
        V::Dict(text) | V::DocList(text) => {
            let value: Value = serde_json::from_str(text).map_err(|_| Fallback)?;
            if !ints_only(&value) {
                return Err(Fallback);
            }
            value
        }
    })
}

fn ints_only(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_i64().is_some_and(|i| i.to_string() == n.to_string()),
        Value::Array(items) => items.iter().all(ints_only),
        Value::Object(m) => m.values().all(ints_only),
        _ => true,
    }
}
