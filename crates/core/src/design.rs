//! Design documents: the view definitions a `_design/*` document carries, and the
//! signature that identifies their index.
//!
//! A view group is every view of one design document. Its signature is the MD5 of the
//! views' names and sources, the language, the design options and `views.lib`, so design
//! documents with identical views share one index and any edit to them starts a new one
//! (the ddoc's other members — shows, filters, `_rev` — do not change it).

use md5::{Digest, Md5};
use serde_json::{json, Map, Value};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewDef {
    pub name: String,
    pub map: String,
    /// The reduce source: a built-in name such as `_sum`, or JavaScript.
    pub reduce: Option<String>,
    /// The view's own `options` (part of the signature, as in CouchDB).
    pub options: Option<Value>,
    /// `"collation": "raw"` in the view's `options` (where CouchDB reads it) or, failing
    /// that, in the design document's: keys sort as Erlang terms instead of by ICU.
    pub raw_collation: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ViewGroupDef {
    pub language: String,
    /// Sorted by name.
    pub views: Vec<ViewDef>,
    /// `views.lib`, the CommonJS modules map functions may `require()`.
    pub lib: Option<Value>,
    /// `options.include_design`: map design documents too.
    pub include_design: bool,
    /// `options.local_seq`: map functions see `_local_seq`.
    pub local_seq: bool,
    options: Value,
}

/// Why a design document's views cannot be indexed; CouchDB answers `invalid_design_doc`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DesignError(pub String);

impl ViewGroupDef {
    /// The view group of a design document body (`views`, `language`, `options`). A design
    /// document without views gives an empty group.
    pub fn from_ddoc(ddoc: &Map<String, Value>) -> Result<ViewGroupDef, DesignError> {
        let language = match ddoc.get("language") {
            None | Some(Value::Null) => "javascript".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(DesignError("`language` must be a string".into())),
        };
        let options = match ddoc.get("options") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(o @ Value::Object(_)) => o.clone(),
            Some(_) => return Err(DesignError("`options` must be an object".into())),
        };
        let raw_default = is_raw(&options);
        let (views, lib) = match ddoc.get("views") {
            None | Some(Value::Null) => (Vec::new(), None),
            Some(Value::Object(vs)) => parse_views(vs, raw_default)?,
            Some(_) => return Err(DesignError("`views` must be an object".into())),
        };
        Ok(ViewGroupDef {
            language,
            views,
            lib,
            include_design: options.get("include_design") == Some(&Value::Bool(true)),
            local_seq: options.get("local_seq") == Some(&Value::Bool(true)),
            options,
        })
    }

    pub fn view(&self, name: &str) -> Option<(usize, &ViewDef)> {
        self.views.iter().enumerate().find(|(_, v)| v.name == name)
    }

    /// Whether view number `view` sorts its keys raw (see [`ViewDef::raw_collation`]).
    pub fn raw(&self, view: usize) -> bool {
        self.views.get(view).is_some_and(|v| v.raw_collation)
    }

    /// Hex MD5 of everything that determines the index contents.
    pub fn signature(&self) -> String {
        let views: Vec<Value> = self
            .views
            .iter()
            .map(|v| match &v.options {
                None => json!([v.name, v.map, v.reduce]),
                Some(o) => json!([v.name, v.map, v.reduce, o]),
            })
            .collect();
        let canonical = json!([self.language, views, self.options, self.lib]);
        hex::encode(Md5::digest(canonical.to_string().as_bytes()))
    }
}

fn is_raw(options: &Value) -> bool {
    options.get("collation") == Some(&json!("raw"))
}

fn parse_views(
    vs: &Map<String, Value>,
    raw_default: bool,
) -> Result<(Vec<ViewDef>, Option<Value>), DesignError> {
    let mut views = Vec::new();
    let mut lib = None;
    for (name, v) in vs {
        if name == "lib" {
            lib = Some(v.clone());
            continue;
        }
        views.push(parse_view(name, v, raw_default)?);
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((views, lib))
}

fn parse_view(name: &str, v: &Value, raw_default: bool) -> Result<ViewDef, DesignError> {
    let obj = v
        .as_object()
        .ok_or_else(|| DesignError(format!("View {name} must be an object")))?;
    let map = match obj.get("map") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(DesignError(format!("View {name} must have a map function"))),
    };
    let reduce = match obj.get("reduce") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(DesignError(format!(
                "View {name} has a reduce that is not a string"
            )))
        }
    };
    let options = match obj.get("options") {
        None | Some(Value::Null) => None,
        Some(o @ Value::Object(_)) => Some(o.clone()),
        Some(_) => {
            return Err(DesignError(format!(
                "View {name} has options that are not an object"
            )))
        }
    };
    let raw_collation = match options.as_ref().and_then(|o| o.get("collation")) {
        Some(_) => options.as_ref().is_some_and(is_raw),
        None => raw_default,
    };
    Ok(ViewDef {
        name: name.to_owned(),
        map,
        reduce,
        options,
        raw_collation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(v: Value) -> ViewGroupDef {
        ViewGroupDef::from_ddoc(v.as_object().unwrap()).unwrap()
    }

    #[test]
    fn parses_views_lib_and_options() {
        let g = group(json!({
            "_id": "_design/a",
            "views": {
                "b": {"map": "function(doc){}", "reduce": "_sum"},
                "a": {"map": "function(doc){emit(1)}"},
                "lib": {"m": "exports.x = 1"}
            },
            "options": {"include_design": true, "collation": "raw"}
        }));
        assert_eq!(g.views.len(), 2);
        assert_eq!(g.views[0].name, "a");
        assert_eq!(g.views[1].reduce.as_deref(), Some("_sum"));
        assert_eq!(g.lib, Some(json!({"m": "exports.x = 1"})));
        assert!(g.include_design && g.raw(0) && g.raw(1) && !g.local_seq);
        assert_eq!(g.language, "javascript");
    }

    #[test]
    fn collation_is_read_per_view() {
        let g = group(json!({
            "views": {
                "icu": {"map": "f"},
                "raw": {"map": "f", "options": {"collation": "raw"}},
                "set": {"map": "f", "options": {"collation": "icu"}}
            }
        }));
        assert_eq!([g.raw(0), g.raw(1), g.raw(2)], [false, true, false]);
        let g = group(json!({
            "options": {"collation": "raw"},
            "views": {"a": {"map": "f"}, "b": {"map": "f", "options": {"collation": "unicode"}}}
        }));
        assert_eq!([g.raw(0), g.raw(1)], [true, false]);
        let plain = group(json!({"views": {"v": {"map": "f"}}}));
        let with = group(json!({"views": {"v": {"map": "f", "options": {"collation": "raw"}}}}));
        assert_ne!(plain.signature(), with.signature());
        let bad = json!({"views": {"v": {"map": "f", "options": 1}}});
        assert!(ViewGroupDef::from_ddoc(bad.as_object().unwrap()).is_err());
    }

    #[test]
    fn signature_depends_on_views_only() {
        let a = group(json!({"_id": "_design/a", "_rev": "1-x", "views": {"v": {"map": "f"}}}));
        let b = group(json!({"_id": "_design/b", "shows": {}, "views": {"v": {"map": "f"}}}));
        let c = group(json!({"views": {"v": {"map": "f;"}}}));
        assert_eq!(a.signature(), b.signature());
        assert_ne!(a.signature(), c.signature());
        assert_eq!(a.signature().len(), 32);
    }

    #[test]
    fn rejects_views_without_map() {
        let err = ViewGroupDef::from_ddoc(json!({"views": {"v": {}}}).as_object().unwrap());
        assert_eq!(
            err.unwrap_err().0,
            "View v must have a map function".to_string()
        );
    }
}
