//! Runs a parsed map function on a document's JSON text (read in place, [`settee_core::json_raw`])
//! with JavaScript's semantics for the values it can meet. Where those semantics need what is not modelled (an exception, an
//! object's identity or `toString`, a prototype's member, Unicode case mapping), the run
//! stops with [`Fallback`] and the engine maps the document instead.

use crate::parse::{BinOp, Expr, Function, Lit, Method, Stmt};
use crate::{number, Fallback, Rows};
use serde_json::{Map, Value};
use settee_core::json_raw as raw;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::rc::Rc;

type R<T> = Result<T, Fallback>;

/// A JavaScript value: primitives, the document's own arrays and objects (their text,
/// read in place), and arrays and objects the function built.
#[derive(Clone, Debug)]
enum V<'a> {
    Undef,
    Null,
    Bool(bool),
    Num(f64),
    Str(Cow<'a, str>),
    DocArr(&'a str),
    DocObj(&'a str),
    Arr(Rc<Vec<V<'a>>>),
    Obj(Rc<Vec<(&'a str, V<'a>)>>),
}

/// `Object.prototype`'s members: a document without a member of that name reads the
/// prototype's (a function), which this evaluator does not model.
const OBJECT_PROTO: &[&str] = &[
    "constructor",
    "__proto__",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toString",
    "toLocaleString",
    "valueOf",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

pub(crate) fn run(f: &Function, doc: &str) -> R<Rows> {
    let doc = from_raw(doc.trim_matches([' ', '\t', '\n', '\r']))?;
    if !matches!(doc, V::DocObj(_)) {
        return Err(Fallback);
    }
    let mut env = Env {
        doc,
        vars: vec![V::Undef; f.vars],
        rows: Vec::new(),
        read: Vec::new(),
    };
    env.block(&f.body)?;
    Ok(env.rows)
}

struct Env<'a> {
    doc: V<'a>,
    vars: Vec<V<'a>>,
    rows: Rows,
    /// Members of the document's objects already read (the object's text's address, the
    /// name, the value): functions test a member before they read it, and finding one
    /// means skipping the values before it.
    read: Vec<(usize, &'a str, V<'a>)>,
}

/// A property key: an array index or a name.
enum Key<'k> {
    Index(u32),
    Name(Cow<'k, str>),
}

impl<'a> Env<'a> {
    /// Runs statements; `true` once one returned.
    fn block(&mut self, body: &'a [Stmt]) -> R<bool> {
        for s in body {
            if self.stmt(s)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn stmt(&mut self, s: &'a Stmt) -> R<bool> {
        match s {
            Stmt::Expr(e) => {
                self.eval(e)?;
            }
            Stmt::If(cond, then, otherwise) => {
                let branch = if truthy(&self.eval(cond)?) {
                    Some(then)
                } else {
                    otherwise.as_ref()
                };
                if let Some(b) = branch {
                    return self.stmt(b);
                }
            }
            Stmt::Block(body) => return self.block(body),
            Stmt::Return(value) => {
                if let Some(e) = value {
                    self.eval(e)?;
                }
                return Ok(true);
            }
            Stmt::Init(slot, value) => {
                self.vars[*slot] = match value {
                    Some(e) => self.eval(e)?,
                    None => V::Undef,
                };
            }
        }
        Ok(false)
    }

    fn eval(&mut self, e: &'a Expr) -> R<V<'a>> {
        Ok(match e {
            Expr::Lit(l) => match l {
                Lit::Undefined => V::Undef,
                Lit::Null => V::Null,
                Lit::Bool(b) => V::Bool(*b),
                Lit::Num(n) => V::Num(*n),
                Lit::Str(s) => V::Str(Cow::Borrowed(s)),
            },
            Expr::Doc => self.doc.clone(),
            Expr::Var(slot) => self.vars[*slot].clone(),
            Expr::Get(obj, name) => match self.eval(obj)? {
                V::DocObj(text) => {
                    let at = text.as_ptr() as usize;
                    match self.read.iter().find(|(a, n, _)| *a == at && *n == name) {
                        Some((_, _, v)) => v.clone(),
                        None => {
                            let v = get(&V::DocObj(text), Key::Name(Cow::Borrowed(name)))?;
                            self.read.push((at, name, v.clone()));
                            v
                        }
                    }
                }
                obj => get(&obj, Key::Name(Cow::Borrowed(name)))?,
            },
            Expr::Index(obj, index) => {
                let obj = self.eval(obj)?;
                let index = self.eval(index)?;
                get(&obj, key(&index)?)?
            }
            Expr::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    out.push(self.eval(i)?);
                }
                V::Arr(Rc::new(out))
            }
            Expr::Object(members) => {
                let mut out: Vec<(&'a str, V<'a>)> = Vec::with_capacity(members.len());
                for (k, e) in members {
                    let v = self.eval(e)?;
                    // A repeated key keeps its first place and takes the last value.
                    match out.iter_mut().find(|(name, _)| *name == k.as_str()) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                V::Obj(Rc::new(out))
            }
            Expr::Not(x) => V::Bool(!truthy(&self.eval(x)?)),
            Expr::Neg(x) => V::Num(-to_number(&self.eval(x)?)?),
            Expr::Plus(x) => V::Num(to_number(&self.eval(x)?)?),
            Expr::TypeOf(x) => V::Str(Cow::Borrowed(type_of(&self.eval(x)?))),
            Expr::Bin(op, a, b) => {
                let a = self.eval(a)?;
                let b = self.eval(b)?;
                binary(*op, &a, &b)?
            }
            Expr::And(a, b) => {
                let a = self.eval(a)?;
                if truthy(&a) {
                    self.eval(b)?
                } else {
                    a
                }
            }
            Expr::Or(a, b) => {
                let a = self.eval(a)?;
                if truthy(&a) {
                    a
                } else {
                    self.eval(b)?
                }
            }
            Expr::Cond(c, a, b) => {
                if truthy(&self.eval(c)?) {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
            Expr::Emit(args) => {
                let key = self.eval(&args[0])?;
                let value = match args.get(1) {
                    Some(e) => self.eval(e)?,
                    None => V::Undef,
                };
                let row = (
                    to_json(&key)?.unwrap_or(Value::Null),
                    to_json(&value)?.unwrap_or(Value::Null),
                );
                self.rows.push(row);
                V::Undef
            }
            Expr::Call(recv, method, args) => {
                let recv = self.eval(recv)?;
                let mut values = Vec::with_capacity(args.len());
                for a in args {
                    values.push(self.eval(a)?);
                }
                call(recv, *method, &values)?
            }
            Expr::Assign(slot, value) => {
                let v = self.eval(value)?;
                self.vars[*slot] = v.clone();
                v
            }
        })
    }
}

/// The value whose JSON text is `text`.
fn from_raw(text: &str) -> R<V<'_>> {
    Ok(match text.as_bytes().first().ok_or(Fallback)? {
        b'n' => V::Null,
        b't' => V::Bool(true),
        b'f' => V::Bool(false),
        b'"' => V::Str(raw::string(text).ok_or(Fallback)?),
        b'[' => V::DocArr(text),
        b'{' => V::DocObj(text),
        _ => V::Num(text.parse().map_err(|_| Fallback)?),
    })
}

fn key<'a>(v: &V<'a>) -> R<Key<'a>> {
    Ok(match v {
        V::Num(f) if *f >= 0.0 && f.fract() == 0.0 && *f < u32::MAX as f64 => Key::Index(*f as u32),
        V::Str(s) => match number::array_index(s) {
            Some(i) => Key::Index(i),
            None => Key::Name(s.clone()),
        },
        V::Undef | V::Null | V::Bool(_) | V::Num(_) => {
            Key::Name(Cow::Owned(to_str(v)?.into_owned()))
        }
        _ => return Err(Fallback),
    })
}

fn get<'a>(obj: &V<'a>, key: Key<'_>) -> R<V<'a>> {
    let name = |k: &Key<'_>| -> Cow<'static, str> {
        match k {
            Key::Index(i) => Cow::Owned(i.to_string()),
            Key::Name(n) => Cow::Owned(n.to_string()),
        }
    };
    let missing = |n: &str| {
        if OBJECT_PROTO.contains(&n) {
            Err(Fallback)
        } else {
            Ok(V::Undef)
        }
    };
    match obj {
        V::DocObj(text) => {
            let n = match &key {
                Key::Name(n) => Cow::Borrowed(n.as_ref()),
                k => name(k),
            };
            for m in raw::members(text) {
                let (quoted, value) = m.ok_or(Fallback)?;
                if raw::name_is(quoted, &n) {
                    return from_raw(value);
                }
            }
            missing(&n)
        }
        V::Obj(members) => {
            let n = name(&key);
            match members.iter().find(|(k, _)| *k == n.as_ref()) {
                Some((_, v)) => Ok(v.clone()),
                None => missing(&n),
            }
        }
        V::DocArr(text) => match key {
            Key::Index(i) => match raw::elements(text).nth(i as usize) {
                Some(item) => from_raw(item.ok_or(Fallback)?),
                None => Ok(V::Undef),
            },
            Key::Name(n) if n == "length" => {
                let mut len = 0;
                for item in raw::elements(text) {
                    item.ok_or(Fallback)?;
                    len += 1;
                }
                Ok(V::Num(len as f64))
            }
            Key::Name(_) => Err(Fallback),
        },
        V::Arr(items) => match key {
            Key::Index(i) => Ok(items.get(i as usize).cloned().unwrap_or(V::Undef)),
            Key::Name(n) if n == "length" => Ok(V::Num(items.len() as f64)),
            Key::Name(_) => Err(Fallback),
        },
        V::Str(s) => match key {
            Key::Name(n) if n == "length" => Ok(V::Num(s.encode_utf16().count() as f64)),
            Key::Index(i) if s.is_ascii() => Ok(s
                .get(i as usize..i as usize + 1)
                .map_or(V::Undef, |c| V::Str(Cow::Owned(c.to_owned())))),
            _ => Err(Fallback),
        },
        // Reading a member of undefined or null throws; numbers' and booleans' members
        // are their prototypes'.
        V::Undef | V::Null | V::Bool(_) | V::Num(_) => Err(Fallback),
    }
}

fn call<'a>(recv: V<'a>, method: Method, args: &[V<'a>]) -> R<V<'a>> {
    let V::Str(s) = recv else {
        return Err(Fallback);
    };
    match method {
        Method::Split => {
            let sep = match args.first() {
                Some(V::Str(sep)) if !sep.is_empty() => sep,
                _ => return Err(Fallback),
            };
            let parts: Vec<V<'a>> = match s {
                Cow::Borrowed(b) => b
                    .split(sep.as_ref())
                    .map(|p| V::Str(Cow::Borrowed(p)))
                    .collect(),
                Cow::Owned(o) => o
                    .split(sep.as_ref())
                    .map(|p| V::Str(Cow::Owned(p.to_owned())))
                    .collect(),
            };
            Ok(V::Arr(Rc::new(parts)))
        }
        Method::Lower | Method::Upper if s.is_ascii() => {
            Ok(V::Str(Cow::Owned(if method == Method::Lower {
                s.to_ascii_lowercase()
            } else {
                s.to_ascii_uppercase()
            })))
        }
        Method::Lower | Method::Upper => Err(Fallback),
    }
}

fn truthy(v: &V<'_>) -> bool {
    match v {
        V::Undef | V::Null => false,
        V::Bool(b) => *b,
        V::Num(n) => *n != 0.0 && !n.is_nan(),
        V::Str(s) => !s.is_empty(),
        V::DocArr(_) | V::DocObj(_) | V::Arr(_) | V::Obj(_) => true,
    }
}

fn is_object(v: &V<'_>) -> bool {
    matches!(v, V::DocArr(_) | V::DocObj(_) | V::Arr(_) | V::Obj(_))
}

fn type_of(v: &V<'_>) -> &'static str {
    match v {
        V::Undef => "undefined",
        V::Bool(_) => "boolean",
        V::Num(_) => "number",
        V::Str(_) => "string",
        V::Null | V::DocArr(_) | V::DocObj(_) | V::Arr(_) | V::Obj(_) => "object",
    }
}

/// `ToNumber` of a primitive; objects would need their `valueOf`/`toString`.
fn to_number(v: &V<'_>) -> R<f64> {
    match v {
        V::Undef => Ok(f64::NAN),
        V::Null => Ok(0.0),
        V::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        V::Num(n) => Ok(*n),
        V::Str(s) => number::from_string(s).ok_or(Fallback),
        _ => Err(Fallback),
    }
}

/// `ToString` of a primitive.
fn to_str<'a>(v: &V<'a>) -> R<Cow<'a, str>> {
    Ok(match v {
        V::Undef => Cow::Borrowed("undefined"),
        V::Null => Cow::Borrowed("null"),
        V::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        V::Num(n) => Cow::Owned(number::to_string(*n)),
        V::Str(s) => s.clone(),
        _ => return Err(Fallback),
    })
}

fn binary<'a>(op: BinOp, a: &V<'a>, b: &V<'a>) -> R<V<'a>> {
    Ok(match op {
        BinOp::Eq => V::Bool(loose_eq(a, b)?),
        BinOp::Ne => V::Bool(!loose_eq(a, b)?),
        BinOp::StrictEq => V::Bool(strict_eq(a, b)?),
        BinOp::StrictNe => V::Bool(!strict_eq(a, b)?),
        BinOp::Lt => V::Bool(compare(a, b)? == Some(Ordering::Less)),
        BinOp::Gt => V::Bool(compare(a, b)? == Some(Ordering::Greater)),
        BinOp::Le => V::Bool(matches!(
            compare(a, b)?,
            Some(Ordering::Less | Ordering::Equal)
        )),
        BinOp::Ge => V::Bool(matches!(
            compare(a, b)?,
            Some(Ordering::Greater | Ordering::Equal)
        )),
        BinOp::Add => {
            if is_object(a) || is_object(b) {
                return Err(Fallback);
            }
            if matches!(a, V::Str(_)) || matches!(b, V::Str(_)) {
                let mut s = to_str(a)?.into_owned();
                s.push_str(&to_str(b)?);
                V::Str(Cow::Owned(s))
            } else {
                V::Num(to_number(a)? + to_number(b)?)
            }
        }
        BinOp::Sub => V::Num(to_number(a)? - to_number(b)?),
    })
}

/// `IsLooselyEqual`, without the object cases (identity, `ToPrimitive`).
fn loose_eq(a: &V<'_>, b: &V<'_>) -> R<bool> {
    Ok(match (a, b) {
        (V::Undef | V::Null, V::Undef | V::Null) => true,
        (V::Undef | V::Null, _) | (_, V::Undef | V::Null) => false,
        _ if is_object(a) || is_object(b) => return Err(Fallback),
        (V::Num(x), V::Num(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Bool(_), _) => loose_eq(&V::Num(to_number(a)?), b)?,
        (_, V::Bool(_)) => loose_eq(a, &V::Num(to_number(b)?))?,
        (V::Num(x), V::Str(_)) => *x == to_number(b)?,
        (V::Str(_), V::Num(y)) => to_number(a)? == *y,
        _ => return Err(Fallback),
    })
}

/// `IsStrictlyEqual`; two objects would compare by identity.
fn strict_eq(a: &V<'_>, b: &V<'_>) -> R<bool> {
    Ok(match (a, b) {
        _ if is_object(a) && is_object(b) => return Err(Fallback),
        (V::Undef, V::Undef) | (V::Null, V::Null) => true,
        (V::Num(x), V::Num(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::Bool(x), V::Bool(y)) => x == y,
        _ => false,
    })
}

/// `IsLessThan`'s order: strings by UTF-16 code units, anything else as numbers; `None`
/// when a NaN makes the answer false either way.
fn compare(a: &V<'_>, b: &V<'_>) -> R<Option<Ordering>> {
    if is_object(a) || is_object(b) {
        return Err(Fallback);
    }
    if let (V::Str(x), V::Str(y)) = (a, b) {
        return Ok(Some(x.encode_utf16().cmp(y.encode_utf16())));
    }
    Ok(to_number(a)?.partial_cmp(&to_number(b)?))
}

/// A value as `JSON.stringify` converts it; `None` for undefined (left out of objects,
/// null elsewhere).
fn to_json(v: &V<'_>) -> R<Option<Value>> {
    Ok(Some(match v {
        V::Undef => return Ok(None),
        V::Null => Value::Null,
        V::Bool(b) => Value::Bool(*b),
        V::Num(n) => number::to_json(*n),
        V::Str(s) => Value::String(s.to_string()),
        V::DocArr(text) | V::DocObj(text) => doc_json(text)?,
        V::Arr(items) => Value::Array(
            items
                .iter()
                .map(|i| Ok(to_json(i)?.unwrap_or(Value::Null)))
                .collect::<R<_>>()?,
        ),
        V::Obj(members) => {
            let mut out = Map::with_capacity(members.len());
            for (k, v) in members.iter() {
                if let Some(j) = to_json(v)? {
                    out.insert((*k).to_owned(), j);
                }
            }
            Value::Object(out)
        }
    }))
}

/// A part of the document as it comes back out of JavaScript: numbers through doubles,
/// and objects whose keys JavaScript would reorder (array indexes) left to the engine.
fn doc_json(text: &str) -> R<Value> {
    Ok(match from_raw(text)? {
        V::DocArr(_) => {
            let mut out = Vec::new();
            for item in raw::elements(text) {
                out.push(doc_json(item.ok_or(Fallback)?)?);
            }
            Value::Array(out)
        }
        V::DocObj(_) => {
            let mut out = Map::new();
            for m in raw::members(text) {
                let (quoted, value) = m.ok_or(Fallback)?;
                let name = raw::string(quoted).ok_or(Fallback)?;
                if number::is_array_index(&name) {
                    return Err(Fallback);
                }
                out.insert(name.into_owned(), doc_json(value)?);
            }
            Value::Object(out)
        }
        v => to_json(&v)?.unwrap_or(Value::Null),
    })
}
