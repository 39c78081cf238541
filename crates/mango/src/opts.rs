//! Request options of `_find`/`_explain`, `POST _index` and `_index/_bulk_delete`, checked
//! as CouchDB's `mango_opts` checks them: in a fixed order (the first failure wins), then
//! any key left over is `invalid_key`.

use serde_json::{json, Map, Value};

use crate::{Error, Selector};

/// A sort direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Asc,
    Desc,
}

impl Dir {
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Asc => "asc",
            Dir::Desc => "desc",
        }
    }
}

/// A `sort` (also an index's `fields`): fields in order, all in one direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sort(pub Vec<(String, Dir)>);

impl Sort {
    /// CouchDB's `mango_sort:new`.
    pub fn parse(v: &Value) -> Result<Sort, Error> {
        let Value::Array(items) = v else {
            return Err(Error::InvalidSortJson(v.clone()));
        };
        let mut fields = Vec::with_capacity(items.len());
        for item in items {
            fields.push(match item {
                Value::String(f) if !f.is_empty() => (f.clone(), Dir::Asc),
                Value::Object(m) if m.len() == 1 => {
                    let (f, d) = m.iter().next().expect("one member");
                    match d.as_str() {
                        Some("asc") => (f.clone(), Dir::Asc),
                        Some("desc") => (f.clone(), Dir::Desc),
                        _ => return Err(Error::InvalidSortField(item.clone())),
                    }
                }
                _ => return Err(Error::InvalidSortField(item.clone())),
            });
        }
        if fields.windows(2).any(|w| w[0].1 != w[1].1) {
            return Err(Error::MixedSort);
        }
        Ok(Sort(fields))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(f, _)| f.as_str())
    }

    /// The direction of every field (ascending when there are none).
    pub fn dir(&self) -> Dir {
        self.0.first().map_or(Dir::Asc, |(_, d)| *d)
    }

    /// The object form `{"a": "asc", ...}` (`_explain`'s `opts.sort`, an index's
    /// `map.fields`).
    pub fn to_object(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(f, d)| (f.clone(), Value::String(d.as_str().into())))
                .collect(),
        )
    }

    /// The list form `[{"a": "asc"}, ...]` (an index's `def.fields`).
    pub fn to_list(&self) -> Value {
        Value::Array(self.0.iter().map(|(f, d)| json!({f: d.as_str()})).collect())
    }
}

/// The options of a `_find` or `_explain`.
#[derive(Debug)]
pub struct FindOpts {
    pub selector: Selector,
    /// `[]`, `[ddoc]` or `[ddoc, name]` (the ddoc as given, maybe without `_design/`).
    pub use_index: Vec<String>,
    pub bookmark: Option<String>,
    pub limit: u64,
    pub skip: u64,
    pub sort: Sort,
    /// `None`: the whole documents.
    pub fields: Option<Vec<String>>,
    pub partition: String,
    pub r: u64,
    pub conflicts: bool,
    /// `stale: "ok"` (the same as `stable: true, update: false`).
    pub stale_ok: bool,
    pub update: bool,
    pub stable: bool,
    pub execution_stats: bool,
    pub allow_fallback: bool,
}

impl FindOpts {
    /// CouchDB's `mango_opts:validate_find` of a request body (a JSON object).
    /// `default_limit` is `[mango] default_limit` (25).
    pub fn parse(body: &Map<String, Value>, default_limit: u64) -> Result<FindOpts, Error> {
        let mut rest = body.clone();
        let mut take = |k: &str| rest.remove(k);
        let selector = match take("selector") {
            None => return Err(Error::MissingRequiredKey("selector".into())),
            Some(v @ Value::Object(_)) => Selector::parse(&v)?,
            Some(other) => return Err(Error::InvalidSelectorJson(other)),
        };
        let use_index = match take("use_index") {
            None => vec![],
            Some(v) => use_index(&v)?,
        };
        let bookmark = match take("bookmark") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => return Err(Error::unknown("mango_opts", "invalid_bookmark", &other)),
        };
        let limit = take("limit").map_or(Ok(default_limit), |v| non_neg(&v))?;
        let skip = take("skip").map_or(Ok(0), |v| non_neg(&v))?;
        let sort = take("sort").map_or(Ok(Sort::default()), |v| Sort::parse(&v))?;
        let fields = match take("fields") {
            None => None,
            Some(v) => fields(&v)?,
        };
        let partition = match take("partition") {
            None => String::new(),
            Some(Value::String(p)) => p,
            Some(other) => {
                return Err(Error::unknown(
                    "couch_partition",
                    "invalid_partition",
                    &other,
                ))
            }
        };
        let r = match take("r") {
            None => 1,
            Some(v) => match crate::selector::integer(&v) {
                Some(n) if n > 0 => n.min(u64::MAX as i128) as u64,
                _ => return Err(Error::InvalidPosInteger(v)),
            },
        };
        let conflicts = boolean(take("conflicts"), false)?;
        let stale_ok = match take("stale") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::String(s)) if s == "false" => false,
            Some(Value::String(s)) if s == "ok" => true,
            Some(other) => {
                return Err(Error::unknown(
                    "mango_opts",
                    "invalid_ok_or_false_value",
                    &other,
                ))
            }
        };
        let update = boolean(take("update"), true)?;
        let stable = boolean(take("stable"), false)?;
        let execution_stats = boolean(take("execution_stats"), false)?;
        let allow_fallback = boolean(take("allow_fallback"), true)?;
        if let Some(k) = rest.keys().next() {
            return Err(Error::InvalidKey(k.clone()));
        }
        Ok(FindOpts {
            selector,
            use_index,
            bookmark,
            limit,
            skip,
            sort,
            fields,
            partition,
            r,
            conflicts,
            stale_ok,
            update,
            stable,
            execution_stats,
            allow_fallback,
        })
    }

    /// Whether the index is brought up to date first.
    pub fn refresh(&self) -> bool {
        self.update && !self.stale_ok
    }

    /// `_explain`'s `opts`: every option but the selector, as validated.
    pub fn to_json(&self) -> Value {
        json!({
            "use_index": self.use_index,
            "bookmark": self.bookmark.as_deref().unwrap_or("nil"),
            "limit": self.limit,
            "skip": self.skip,
            "sort": self.sort.to_object(),
            "fields": self.fields.as_deref().unwrap_or_default(),
            "partition": self.partition,
            "r": self.r,
            "conflicts": self.conflicts,
            "stale": if self.stale_ok { json!("ok") } else { json!(false) },
            "update": self.update,
            "stable": self.stable,
            "execution_stats": self.execution_stats,
            "allow_fallback": self.allow_fallback,
        })
    }
}

fn non_neg(v: &Value) -> Result<u64, Error> {
    match crate::selector::integer(v) {
        Some(n) if n >= 0 => Ok(n.min(u64::MAX as i128) as u64),
        _ => Err(Error::InvalidNonNegInteger(v.clone())),
    }
}

fn boolean(v: Option<Value>, default: bool) -> Result<bool, Error> {
    match v {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(b),
        Some(other) => Err(Error::InvalidBoolean(other)),
    }
}

/// CouchDB 3.4+'s `use_index`: a name split at every `/` (`ddoc`, `_design/ddoc`,
/// `ddoc/name`, `_design/ddoc/name`), or a list of one or two strings.
pub fn use_index(v: &Value) -> Result<Vec<String>, Error> {
    let invalid = || Error::InvalidIndexName(v.clone());
    match v {
        Value::Null => Ok(vec![]),
        Value::String(s) => {
            let parts: Vec<&str> = s.split('/').collect();
            match parts.as_slice() {
                [d] | ["_design", d] => Ok(vec![d.to_string()]),
                [d, n] | ["_design", d, n] => Ok(vec![d.to_string(), n.to_string()]),
                _ => Err(invalid()),
            }
        }
        Value::Array(items) => match items.as_slice() {
            [] => Ok(vec![]),
            [Value::String(d)] => Ok(vec![d.clone()]),
            [Value::String(d), Value::String(n)] => Ok(vec![d.clone(), n.clone()]),
            _ => Err(invalid()),
        },
        _ => Err(invalid()),
    }
}

/// `fields`: `[]` (whole documents) or field paths.
fn fields(v: &Value) -> Result<Option<Vec<String>>, Error> {
    let Value::Array(items) = v else {
        return Err(Error::InvalidFieldsJson(v.clone()));
    };
    if items.is_empty() {
        return Ok(None);
    }
    items
        .iter()
        .map(|f| match f {
            Value::String(s) => Ok(s.clone()),
            // CouchDB lets an object (a text index field spec) through and then fails while
            // projecting; it is refused here instead.
            other => Err(Error::InvalidFieldJson(other.clone())),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The options of `POST /{db}/_index`.
#[derive(Debug)]
pub struct IndexOpts {
    /// The `index` member as sent.
    pub def: Value,
    pub kind: String,
    pub name: Option<String>,
    pub ddoc: Option<String>,
    /// `w` as sent (a positive integer), 2 when absent; part of the generated names.
    pub w: Value,
    pub partitioned: Option<bool>,
}

impl IndexOpts {
    /// CouchDB's `mango_opts:validate_idx_create`: its members checked in its order
    /// (`index`, `type`, `name`, `ddoc`, `w`, `partitioned`), then any other is refused.
    pub fn parse(body: &Map<String, Value>) -> Result<IndexOpts, Error> {
        let mut rest = body.clone();
        let mut take = |k: &str| rest.remove(k);
        let def = take("index").ok_or_else(|| Error::MissingRequiredKey("index".into()))?;
        let string = |v: Option<Value>| match v {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(Error::InvalidString(other)),
        };
        let non_empty = |v: Option<Value>| match v {
            Some(Value::String(s)) if s.is_empty() => Err(Error::InvalidEmptyString),
            other => string(other),
        };
        let kind = string(take("type"))?.unwrap_or_else(|| "json".into());
        let name = non_empty(take("name"))?;
        let ddoc = non_empty(take("ddoc"))?;
        let w = match take("w") {
            None => Value::from(2),
            Some(w) if matches!(crate::selector::integer(&w), Some(n) if n > 0) => w,
            Some(w) => return Err(Error::InvalidPosInteger(w)),
        };
        let partitioned = match take("partitioned") {
            None => None,
            Some(Value::Bool(b)) => Some(b),
            Some(other) => {
                return Err(Error::unknown(
                    "mango_opts",
                    "invalid_partitioned_value",
                    &other,
                ))
            }
        };
        if let Some(k) = rest.keys().next() {
            return Err(Error::InvalidKey(k.clone()));
        }
        Ok(IndexOpts {
            def,
            kind,
            name,
            ddoc,
            w,
            partitioned,
        })
    }
}

/// The `docids` of `POST /{db}/_index/_bulk_delete`.
pub fn bulk_delete_ids(body: &Map<String, Value>) -> Result<Vec<String>, Error> {
    let mut rest = body.clone();
    let ids = rest
        .remove("docids")
        .ok_or_else(|| Error::MissingRequiredKey("docids".into()))?;
    let Value::Array(items) = &ids else {
        return Err(Error::InvalidBulkDocs(ids));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        use_index(item)?;
        match item {
            Value::String(s) => out.push(s.clone()),
            other => return Err(Error::InvalidIndexName(other.clone())),
        }
    }
    if let Some(w) = rest.remove("w") {
        if !matches!(crate::selector::integer(&w), Some(n) if n > 0) {
            return Err(Error::InvalidPosInteger(w));
        }
    }
    if let Some(k) = rest.keys().next() {
        return Err(Error::InvalidKey(k.clone()));
    }
    Ok(out)
}
