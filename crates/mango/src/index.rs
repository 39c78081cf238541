//! Mango's indexes: the built-in `_all_docs` ("special") index and `json` indexes, which
//! are views of design documents with `"language": "query"` — read from and written to
//! those documents in CouchDB's shape, so they replicate and show in `_design_docs`.

use serde_json::{json, Map, Value};
use settee_core::etf;
use sha1::{Digest, Sha1};

use crate::erlfmt::w;
use crate::opts::{IndexOpts, Sort};
use crate::{Error, Selector};

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// `_all_docs`: documents by id.
    Special,
    /// A view whose key is the array of the `columns`' values.
    Json {
        columns: Sort,
        /// The normalised `partial_filter_selector` (`{}` when none).
        partial: Value,
        /// Other members of the stored `map` (passed through to `def`).
        extra: Map<String, Value>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Index {
    /// `_design/…`; `None` for `_all_docs`.
    pub ddoc: Option<String>,
    pub name: String,
    pub kind: Kind,
    pub partitioned: bool,
}

impl Index {
    pub fn all_docs() -> Index {
        Index {
            ddoc: None,
            name: "_all_docs".into(),
            kind: Kind::Special,
            partitioned: false,
        }
    }

    pub fn is_special(&self) -> bool {
        self.kind == Kind::Special
    }

    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Special => "special",
            Kind::Json { .. } => "json",
        }
    }

    /// The fields the index is keyed on, in order.
    pub fn columns(&self) -> Vec<String> {
        match &self.kind {
            Kind::Special => vec!["_id".into()],
            Kind::Json { columns, .. } => columns.fields().map(str::to_string).collect(),
        }
    }

    /// Whether the index only holds documents matching a partial filter.
    pub fn is_partial(&self) -> bool {
        matches!(&self.kind, Kind::Json { partial, .. } if partial.as_object().is_some_and(|m| !m.is_empty()))
    }

    /// The index as `GET /{db}/_index` lists it.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Special => json!({
                "ddoc": null, "name": "_all_docs", "type": "special",
                "def": {"fields": [{"_id": "asc"}]}
            }),
            Kind::Json {
                columns,
                partial,
                extra,
            } => {
                let mut def = Map::new();
                def.insert("fields".into(), columns.to_list());
                if self.is_partial() {
                    def.insert("partial_filter_selector".into(), partial.clone());
                }
                for (k, v) in extra {
                    def.insert(k.clone(), v.clone());
                }
                json!({
                    "ddoc": self.ddoc, "name": self.name, "type": "json",
                    "partitioned": self.partitioned, "def": def
                })
            }
        }
    }

    /// Whether `use_index` (`[ddoc]` or `[ddoc, name]`) names this index.
    pub fn named_by(&self, use_index: &[String]) -> bool {
        let Some(ddoc) = &self.ddoc else { return false };
        match use_index {
            [d] => ddoc_id(d) == *ddoc,
            [d, n] => ddoc_id(d) == *ddoc && *n == self.name,
            _ => false,
        }
    }
}

/// `_design/` + `name` unless it already starts so.
pub fn ddoc_id(name: &str) -> String {
    if name.starts_with("_design/") {
        name.to_string()
    } else {
        format!("_design/{name}")
    }
}

/// The json indexes of a design document: the views of a `"language": "query"` document
/// whose `map` holds a `fields` object and which have an `options` object. Anything else is
/// skipped, as CouchDB skips it.
pub fn from_design_doc(id: &str, body: &Map<String, Value>, db_partitioned: bool) -> Vec<Index> {
    if body.get("language").and_then(Value::as_str) != Some("query") {
        return vec![];
    }
    let partitioned = body
        .get("options")
        .and_then(|o| o.get("partitioned"))
        .and_then(Value::as_bool)
        .unwrap_or(db_partitioned);
    let Some(Value::Object(views)) = body.get("views") else {
        return vec![];
    };
    let mut out = Vec::new();
    for (name, view) in views {
        let (Some(Value::Object(map)), Some(Value::Object(_))) =
            (view.get("map"), view.get("options"))
        else {
            continue;
        };
        let Some(Value::Object(fields)) = map.get("fields") else {
            continue;
        };
        let mut columns = Vec::new();
        for (f, d) in fields {
            let dir = if d.as_str() == Some("desc") {
                crate::opts::Dir::Desc
            } else {
                crate::opts::Dir::Asc
            };
            columns.push((f.clone(), dir));
        }
        let partial = map
            .get("partial_filter_selector")
            .or_else(|| map.get("selector"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let extra: Map<String, Value> = map
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "fields" | "partial_filter_selector" | "selector"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push(Index {
            ddoc: Some(id.to_string()),
            name: name.clone(),
            kind: Kind::Json {
                columns: Sort(columns),
                partial,
                extra,
            },
            partitioned,
        });
    }
    out
}

/// Sorts indexes as `GET /{db}/_index` lists them: `_all_docs` first, then by design
/// document id, name and type.
pub fn sort_for_listing(indexes: &mut [Index]) {
    indexes.sort_by(|a, b| {
        (a.ddoc.is_some(), &a.ddoc, &a.name, a.type_name()).cmp(&(
            b.ddoc.is_some(),
            &b.ddoc,
            &b.name,
            b.type_name(),
        ))
    });
}

/// What `POST /{db}/_index` does to the design document.
#[derive(Debug, PartialEq)]
pub struct Creation {
    pub ddoc_id: String,
    pub name: String,
    /// The body to write; `None` when the index exists as asked ("exists").
    pub body: Option<Map<String, Value>>,
}

/// Plans an index creation. `existing` is the design document's body (`None` when it is
/// missing or deleted).
pub fn create(
    opts: &IndexOpts,
    existing: impl FnOnce(&str) -> Option<Map<String, Value>>,
) -> Result<Creation, Error> {
    match opts.kind.as_str() {
        "json" => {}
        "text" | "nouveau" => return Err(Error::IndexServiceUnavailable(opts.kind.clone())),
        other => return Err(Error::InvalidIndexType(other.to_string())),
    }
    let auto = auto_name(opts);
    let name = opts.name.clone().unwrap_or_else(|| auto.clone());
    let ddoc_id = ddoc_id(opts.ddoc.as_deref().unwrap_or(&auto));
    let map = json_def(&opts.def)?;
    let old = existing(&ddoc_id);
    let mut body = match &old {
        None => {
            let mut m = Map::new();
            m.insert("language".into(), json!("query"));
            m
        }
        Some(b) => {
            match b.get("language") {
                Some(Value::String(l)) if l == "query" => {}
                Some(l) => {
                    return Err(Error::InvalidDdocLang(format!(
                        "{{<<\"language\">>,{}}}",
                        w(l)
                    )))
                }
                None => return Err(Error::InvalidDdocLang("false".into())),
            }
            b.clone()
        }
    };
    let view = json!({"map": map, "reduce": "_count", "options": {"def": opts.def}});
    let views = body.entry("views").or_insert_with(|| json!({}));
    if !views.is_object() {
        *views = json!({});
    }
    views
        .as_object_mut()
        .expect("object")
        .insert(name.clone(), view);
    if let Some(p) = opts.partitioned {
        match &old {
            None => {
                body.insert("options".into(), json!({"partitioned": p}));
            }
            Some(b) => {
                let current = b
                    .get("options")
                    .and_then(|o| o.get("partitioned"))
                    .and_then(Value::as_bool);
                if current != Some(p) {
                    return Err(Error::PartitionedOptionMismatch(ddoc_id));
                }
            }
        }
    }
    let unchanged = old
        .as_ref()
        .is_some_and(|o| without_meta(o) == without_meta(&body));
    Ok(Creation {
        ddoc_id,
        name,
        body: (!unchanged).then_some(body),
    })
}

fn without_meta(body: &Map<String, Value>) -> Map<String, Value> {
    body.iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The stored `map` of a json index definition (`{"fields": [...],
/// "partial_filter_selector": {...}}` as sent).
fn json_def(def: &Value) -> Result<Value, Error> {
    let Value::Object(d) = def else {
        return Err(Error::InvalidIndexJson(def.clone()));
    };
    let mut rest = d.clone();
    let fields = rest
        .remove("fields")
        .ok_or_else(|| Error::MissingRequiredKey("fields".into()))?;
    let columns = Sort::parse(&fields)?;
    let partial = match rest.remove("partial_filter_selector") {
        None => json!({}),
        Some(v @ Value::Object(_)) => Selector::parse(&v)?.normalized().clone(),
        Some(other) => return Err(Error::InvalidSelectorJson(other)),
    };
    if let Some(k) = rest.keys().next() {
        return Err(Error::InvalidKey(k.clone()));
    }
    Ok(json!({"fields": columns.to_object(), "partial_filter_selector": partial}))
}

/// A generated index and design document name: hex SHA-1 of the definition and options
/// (CouchDB hashes its own Erlang terms of them, so the names differ from CouchDB's).
fn auto_name(opts: &IndexOpts) -> String {
    // CouchDB's `mango_idx:gen_name`: the hex SHA-1 of
    // `term_to_binary({Def, lists:usort(Opts)})`, where `Opts` are the validated options
    // by tag, absent ones at their defaults (`auto_name`, `db_default`, `w` 2), and the
    // sorted tags are ddoc < def < name < partitioned < type < w.
    let mut term = vec![etf::VERSION];
    etf::small_tuple(2, &mut term);
    etf::value(&opts.def, &mut term);
    etf::list_header(6, &mut term);
    let string_or_auto = |s: &Option<String>, out: &mut Vec<u8>| match s {
        Some(s) => etf::binary(s.as_bytes(), out),
        None => etf::atom("auto_name", out),
    };
    let tagged = |tag: &str, out: &mut Vec<u8>| {
        etf::small_tuple(2, out);
        etf::atom(tag, out);
    };
    tagged("ddoc", &mut term);
    string_or_auto(&opts.ddoc, &mut term);
    tagged("def", &mut term);
    etf::value(&opts.def, &mut term);
    tagged("name", &mut term);
    string_or_auto(&opts.name, &mut term);
    tagged("partitioned", &mut term);
    match opts.partitioned {
        Some(true) => etf::atom("true", &mut term),
        Some(false) => etf::atom("false", &mut term),
        None => etf::atom("db_default", &mut term),
    }
    tagged("type", &mut term);
    etf::binary(opts.kind.as_bytes(), &mut term);
    tagged("w", &mut term);
    etf::value(&opts.w, &mut term);
    etf::nil(&mut term);
    hex(&Sha1::digest(&term))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What deleting the index `name` of type `kind` from design document `body` leaves:
/// `None` if there is no such index; `Some(None)` when the document goes away (nothing but
/// its language is left); `Some(Some(body))` otherwise.
#[allow(clippy::option_option)]
pub fn remove(
    body: &Map<String, Value>,
    kind: &str,
    name: &str,
) -> Option<Option<Map<String, Value>>> {
    if kind != "json" {
        return None;
    }
    let listed = from_design_doc("", body, false);
    if !listed.iter().any(|i| i.name == name) {
        return None;
    }
    let mut body = body.clone();
    if let Some(Value::Object(views)) = body.get_mut("views") {
        views.remove(name);
        if views.is_empty() {
            body.remove("views");
            body.remove("options");
        }
    }
    let left = without_meta(&body);
    if left.len() == 1 && left.get("language") == Some(&json!("query")) {
        return Some(None);
    }
    Some(Some(body))
}

/// Every json index name of a design document (for `_bulk_delete`).
pub fn json_names(body: &Map<String, Value>) -> Vec<String> {
    from_design_doc("", body, false)
        .into_iter()
        .map(|i| i.name)
        .collect()
}
