//! Selectors: normalisation to CouchDB's canonical form and matching against documents.
//!
//! [`normalize`] follows CouchDB's three passes over the JSON (`mango_selector`), so
//! `_explain` can show the same normalised selector and errors come in the same order:
//! 1. operators are checked and implicit forms made explicit (`{"a": 1, "b": 2}` becomes an
//!    `$and`, a bare value an `$eq`);
//! 2. field names are pushed down through `$and`/`$or`/`$not`/`$nor` and joined into dotted
//!    paths (`{"a": {"b": {"$gt": 1}}}` becomes `{"a.b": {"$gt": 1}}`);
//! 3. negations are pushed down to the conditions (De Morgan; `$not` of `$gt` is `$lte`).
//!
//! [`Selector`] compiles the normalised form into a tree that matches parsed JSON values
//! with CouchDB's view collation (Erlang term order for `_id`, as CouchDB compares ids).

use std::cmp::Ordering;

use serde_json::{Map, Value};
use settee_core::collate;

use crate::field::{self, Found};
use crate::Error;

/// A normalised, compiled selector.
#[derive(Debug)]
pub struct Selector {
    normalized: Value,
    root: Node,
}

impl Selector {
    /// Normalises and compiles `selector` (a JSON object in every caller CouchDB has).
    pub fn parse(selector: &Value) -> Result<Selector, Error> {
        let normalized = normalize(selector)?;
        let root = compile(&normalized)?;
        Ok(Selector { normalized, root })
    }

    /// The normalised selector, as `_explain` shows it.
    pub fn normalized(&self) -> &Value {
        &self.normalized
    }

    /// Whether the selector is `{}`, which matches every document.
    pub fn is_empty(&self) -> bool {
        matches!(self.root, Node::Everything)
    }

    /// The top-level members of a document the selector reads (the first name of each
    /// field path), or `None` when it reads the document as a whole.
    pub fn top_fields(&self) -> Option<Vec<String>> {
        let mut out = Vec::new();
        top_fields(&self.root, &mut out).then_some(out)
    }

    /// Whether `doc` (a document body with `_id`, `_rev`, …) matches.
    pub fn matches(&self, doc: &Value) -> bool {
        eval(&self.root, doc, Collation::View)
    }
}

// ---------------------------------------------------------------------------------------
// Normalisation

/// CouchDB's normal form of `selector`, or the error CouchDB gives for it.
pub fn normalize(selector: &Value) -> Result<Value, Error> {
    if matches!(selector, Value::Object(m) if m.is_empty()) {
        return Ok(selector.clone());
    }
    let sel = norm_ops(selector)?;
    let sel = norm_fields(&sel, "")?;
    let sel = norm_negations(&sel)?;
    if let Value::Object(map) = &sel {
        if map.keys().any(String::is_empty) {
            return Err(Error::MissingFieldName);
        }
    }
    Ok(sel)
}

/// The one member of a one-member object.
fn single(v: &Value) -> Option<(&str, &Value)> {
    match v {
        Value::Object(map) if map.len() == 1 => map.iter().next().map(|(k, v)| (k.as_str(), v)),
        _ => None,
    }
}

fn obj(key: &str, value: Value) -> Value {
    let mut map = Map::with_capacity(1);
    map.insert(key.to_string(), value);
    Value::Object(map)
}

fn bad_arg(op: &str, arg: &Value) -> Error {
    Error::BadArg {
        op: op.to_string(),
        arg: arg.clone(),
    }
}

fn map_all(args: &[Value], f: impl Fn(&Value) -> Result<Value, Error>) -> Result<Value, Error> {
    args.iter()
        .map(f)
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// An integer as Erlang's `is_integer` sees a decoded JSON number: a literal with no
/// fraction or exponent.
pub(crate) fn integer(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => {
            let text = n.to_string();
            if text.contains(['.', 'e', 'E']) {
                None
            } else {
                text.parse().ok()
            }
        }
        _ => None,
    }
}

fn norm_ops(sel: &Value) -> Result<Value, Error> {
    let Value::Object(map) = sel else {
        return Ok(obj("$eq", sel.clone()));
    };
    if map.len() >= 2 {
        let parts = map.iter().map(|(k, v)| norm_ops(&obj(k, v.clone())));
        return Ok(obj("$and", Value::Array(parts.collect::<Result<_, _>>()?)));
    }
    let Some((op, arg)) = single(sel) else {
        return Ok(obj("$eq", sel.clone()));
    };
    let keep = || Ok(sel.clone());
    match op {
        "$and" | "$or" | "$nor" => match arg {
            Value::Array(args) => Ok(obj(op, map_all(args, norm_ops)?)),
            _ => Err(bad_arg(op, arg)),
        },
        "$not" | "$elemMatch" | "$allMatch" | "$keyMapMatch" => match arg {
            Value::Object(_) => Ok(obj(op, norm_ops(arg)?)),
            _ => Err(bad_arg(op, arg)),
        },
        "$in" | "$nin" | "$all" => match arg {
            Value::Array(_) => keep(),
            _ => Err(bad_arg(op, arg)),
        },
        "$exists" => match arg {
            Value::Bool(_) => keep(),
            _ => Err(bad_arg(op, arg)),
        },
        "$type" => match arg {
            Value::String(_) => keep(),
            _ => Err(bad_arg(op, arg)),
        },
        "$mod" => match arg.as_array().map(Vec::as_slice) {
            Some([d, r]) if integer(d).is_some() && integer(r).is_some() => keep(),
            _ => Err(bad_arg(op, arg)),
        },
        "$regex" => match arg {
            Value::String(re) if fancy_regex::Regex::new(re).is_ok() => keep(),
            _ => Err(bad_arg(op, arg)),
        },
        "$size" => match integer(arg) {
            Some(n) if n >= 0 => keep(),
            _ => Err(bad_arg(op, arg)),
        },
        "$text" => match arg {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {
                Ok(obj("$default", obj("$text", arg.clone())))
            }
            _ => Err(bad_arg(op, arg)),
        },
        // A string prefix; any other operand falls through to "Invalid operator", as in
        // CouchDB.
        "$beginsWith" if arg.is_string() => keep(),
        "$default" | "$lt" | "$lte" | "$eq" | "$ne" | "$gte" | "$gt" => keep(),
        "$where" | "$geoWithin" | "$geoIntersects" | "$near" | "$nearSphere" => {
            Err(Error::NotSupported(op.to_string()))
        }
        _ if op.starts_with('$') => Err(Error::InvalidOperator(op.to_string())),
        field => Ok(obj(field, norm_ops(arg)?)),
    }
}

fn norm_fields(sel: &Value, path: &str) -> Result<Value, Error> {
    let Some((op, arg)) = single(sel) else {
        return Err(Error::BadField(sel.clone()));
    };
    match op {
        "$and" | "$or" | "$nor" => {
            let args = arg.as_array().map(Vec::as_slice).unwrap_or_default();
            Ok(obj(op, map_all(args, |a| norm_fields(a, path))?))
        }
        "$not" => Ok(obj(op, norm_fields(arg, path)?)),
        "$elemMatch" | "$allMatch" | "$keyMapMatch" => {
            let inner = if matches!(arg, Value::Object(m) if m.is_empty()) {
                arg.clone()
            } else {
                norm_fields(arg, "")?
            };
            Ok(obj(path, obj(op, inner)))
        }
        "$default" => match single(arg) {
            Some(("$text", _)) if path.is_empty() => Ok(sel.clone()),
            _ => Err(Error::BadField(sel.clone())),
        },
        _ if op.starts_with('$') => Ok(obj(path, sel.clone())),
        field if path.is_empty() => norm_fields(arg, field),
        field => norm_fields(arg, &format!("{path}.{field}")),
    }
}

fn norm_negations(sel: &Value) -> Result<Value, Error> {
    let Some((op, arg)) = single(sel) else {
        return Ok(sel.clone());
    };
    let args = || arg.as_array().map(Vec::as_slice).unwrap_or_default();
    match op {
        "$not" => negate(arg),
        "$nor" => Ok(obj("$and", map_all(args(), negate)?)),
        "$and" | "$or" => Ok(obj(op, map_all(args(), norm_negations)?)),
        "$elemMatch" | "$allMatch" | "$keyMapMatch" => Ok(obj(op, norm_negations(arg)?)),
        _ => Ok(sel.clone()),
    }
}

fn negate(sel: &Value) -> Result<Value, Error> {
    let Some((op, arg)) = single(sel) else {
        return Ok(obj("$not", sel.clone()));
    };
    let args = || arg.as_array().map(Vec::as_slice).unwrap_or_default();
    let flip = |to: &str| Ok(obj(to, arg.clone()));
    match op {
        "$not" => norm_negations(arg),
        "$nor" => Ok(obj("$or", map_all(args(), norm_negations)?)),
        "$and" => Ok(obj("$or", map_all(args(), negate)?)),
        "$or" => Ok(obj("$and", map_all(args(), negate)?)),
        "$default" => Err(bad_arg("$not", sel)),
        "$lt" => flip("$gte"),
        "$lte" => flip("$gt"),
        "$eq" => flip("$ne"),
        "$ne" => flip("$eq"),
        "$gte" => flip("$lt"),
        "$gt" => flip("$lte"),
        "$in" => flip("$nin"),
        "$nin" => flip("$in"),
        "$exists" => Ok(obj("$exists", Value::Bool(!arg.as_bool().unwrap_or(false)))),
        _ if op.starts_with('$') => Ok(obj("$not", sel.clone())),
        field => Ok(obj(field, negate(arg)?)),
    }
}

// ---------------------------------------------------------------------------------------
// Matching

#[derive(Debug)]
enum Node {
    /// `{}`.
    Everything,
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    /// A condition on a field. `exists_false` marks the one condition a missing field
    /// satisfies, `{"$exists": false}` exactly.
    Field {
        path: Vec<String>,
        id: bool,
        exists_false: bool,
        cond: Box<Node>,
    },
    /// `{"": cond}`: the condition applies to the value itself (inside `$elemMatch`).
    Itself(Box<Node>),
    Cmp(Ordering, bool, Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    Type(String),
    Mod(i128, i128),
    Regex(Box<fancy_regex::Regex>),
    Size(i128),
    All(Vec<Value>),
    ElemMatch(Box<Node>),
    AllMatch(Box<Node>),
    KeyMapMatch(Box<Node>),
    BeginsWith(String),
    /// `$text` without a text index: CouchDB trusts the index it no longer has.
    Text,
}

fn compile(sel: &Value) -> Result<Node, Error> {
    if matches!(sel, Value::Object(m) if m.is_empty()) {
        return Ok(Node::Everything);
    }
    let Some((op, arg)) = single(sel) else {
        return Err(Error::BadField(sel.clone()));
    };
    let list = |arg: &Value| arg.as_array().cloned().unwrap_or_default();
    let sub = |arg: &Value| compile(arg).map(Box::new);
    Ok(match op {
        "$and" => Node::And(list(arg).iter().map(compile).collect::<Result<_, _>>()?),
        "$or" => Node::Or(list(arg).iter().map(compile).collect::<Result<_, _>>()?),
        "$not" => Node::Not(sub(arg)?),
        "$lt" => Node::Cmp(Ordering::Less, false, arg.clone()),
        "$lte" => Node::Cmp(Ordering::Greater, true, arg.clone()),
        "$eq" => Node::Cmp(Ordering::Equal, false, arg.clone()),
        "$ne" => Node::Cmp(Ordering::Equal, true, arg.clone()),
        "$gte" => Node::Cmp(Ordering::Less, true, arg.clone()),
        "$gt" => Node::Cmp(Ordering::Greater, false, arg.clone()),
        "$in" => Node::In(list(arg)),
        "$nin" => Node::Nin(list(arg)),
        "$exists" => Node::Exists(arg.as_bool().unwrap_or(false)),
        "$type" => Node::Type(arg.as_str().unwrap_or_default().to_string()),
        "$mod" => {
            let l = list(arg);
            let at = |i: usize| l.get(i).and_then(integer);
            Node::Mod(at(0).unwrap_or(0), at(1).unwrap_or(0))
        }
        "$regex" => {
            let re = fancy_regex::Regex::new(arg.as_str().unwrap_or_default())
                .map_err(|_| bad_arg(op, arg))?;
            Node::Regex(Box::new(re))
        }
        "$size" => Node::Size(integer(arg).unwrap_or(-1)),
        "$all" => Node::All(list(arg)),
        "$elemMatch" => Node::ElemMatch(sub(arg)?),
        "$allMatch" => Node::AllMatch(sub(arg)?),
        "$keyMapMatch" => Node::KeyMapMatch(sub(arg)?),
        "$beginsWith" => Node::BeginsWith(arg.as_str().unwrap_or_default().to_string()),
        "$default" => Node::Text,
        _ if op.starts_with('$') => return Err(Error::InvalidOperator(op.to_string())),
        "" => Node::Itself(sub(arg)?),
        name => Node::Field {
            path: field::parse(name)?,
            id: name == "_id",
            exists_false: single(arg) == Some(("$exists", &Value::Bool(false))),
            cond: sub(arg)?,
        },
    })
}

fn top_fields(node: &Node, out: &mut Vec<String>) -> bool {
    match node {
        Node::And(args) | Node::Or(args) => args.iter().all(|n| top_fields(n, out)),
        Node::Not(n) => top_fields(n, out),
        Node::Field { path, .. } => {
            if !out.contains(&path[0]) {
                out.push(path[0].clone());
            }
            true
        }
        Node::Everything | Node::Text => true,
        _ => false,
    }
}

/// How values compare: view collation, or Erlang term order for `_id` (CouchDB compares
/// ids as raw binaries).
#[derive(Clone, Copy)]
enum Collation {
    View,
    Raw,
}

fn cmp(a: &Value, b: &Value, c: Collation) -> Ordering {
    match c {
        Collation::View => collate::compare(a, b),
        Collation::Raw => collate::compare_raw(a, b),
    }
}

fn eval(node: &Node, v: &Value, c: Collation) -> bool {
    match node {
        Node::Everything | Node::Text => true,
        Node::And(args) => args.iter().all(|n| eval(n, v, c)),
        Node::Or(args) => args.is_empty() || args.iter().any(|n| eval(n, v, c)),
        Node::Not(n) => !eval(n, v, c),
        Node::Field {
            path,
            id,
            exists_false,
            cond,
        } => match field::get(v, path) {
            Found::Value(sub) => eval(cond, sub, if *id { Collation::Raw } else { c }),
            Found::NotFound => *exists_false,
            Found::BadPath => false,
        },
        Node::Itself(n) => eval(n, v, c),
        Node::Cmp(ord, negated, arg) => (cmp(v, arg, c) == *ord) != *negated,
        Node::In(args) => match v {
            Value::Array(items) => args
                .iter()
                .any(|a| items.iter().any(|i| cmp(i, a, c) == Ordering::Equal)),
            _ => args.iter().any(|a| cmp(v, a, c) == Ordering::Equal),
        },
        Node::Nin(args) => match v {
            Value::Array(items) => {
                args.is_empty()
                    || !args
                        .iter()
                        .any(|a| items.iter().any(|i| cmp(i, a, c) == Ordering::Equal))
            }
            _ => args.iter().all(|a| cmp(v, a, c) != Ordering::Equal),
        },
        Node::Exists(should) => *should,
        Node::Type(name) => type_name(v) == name,
        Node::Mod(d, r) => match integer(v) {
            Some(x) if *d != 0 => x % d == *r,
            _ => false,
        },
        Node::Regex(re) => matches!(v, Value::String(s) if re.is_match(s).unwrap_or(false)),
        Node::Size(n) => matches!(v, Value::Array(items) if items.len() as i128 == *n),
        Node::All(args) => match v {
            _ if args.is_empty() => false,
            Value::Array(items) => {
                args.iter()
                    .all(|a| items.iter().any(|i| exactly_equal(i, a)))
                    || matches!(args.as_slice(), [Value::Array(only)]
                        if collate::compare_raw(&Value::Array(only.clone()), v) == Ordering::Equal)
            }
            _ => false,
        },
        Node::ElemMatch(n) => {
            matches!(v, Value::Array(items) if items.iter().any(|i| eval(n, i, c)))
        }
        Node::AllMatch(n) => {
            matches!(v, Value::Array(items) if !items.is_empty() && items.iter().all(|i| eval(n, i, c)))
        }
        Node::KeyMapMatch(n) => matches!(v, Value::Object(map)
            if map.keys().any(|k| eval(n, &Value::String(k.clone()), c))),
        Node::BeginsWith(prefix) => matches!(v, Value::String(s) if s.starts_with(prefix.as_str())),
    }
}

/// Mango's `$type` names.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Erlang's `=:=` on decoded JSON: like `==` but an integer never equals a float.
fn exactly_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => {
            integer(a).is_some() == integer(b).is_some()
                && collate::compare_raw(a, b) == Ordering::Equal
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| exactly_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| k1 == k2 && exactly_equal(v1, v2))
        }
        _ => a == b,
    }
}
