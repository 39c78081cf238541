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
    /// `options.collation == "raw"`: keys sort by code point instead of ICU collation.
    pub raw_collation: bool,
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
        let (views, lib) = match ddoc.get("views") {
            None | Some(Value::Null) => (Vec::new(), None),
            Some(Value::Object(vs)) => parse_views(vs)?,
            Some(_) => return Err(DesignError("`views` must be an object".into())),
        };
        Ok(ViewGroupDef {
            language,
            views,
            lib,
            include_design: options.get("include_design") == Some(&Value::Bool(true)),
            local_seq: options.get("local_seq") == Some(&Value::Bool(true)),
            raw_collation: options.get("collation") == Some(&json!("raw")),
            options,
        })
    }

    /// A group for a `_temp_view` request body (`map`, `reduce`, `language`, `options`).
    pub fn temp_view(body: &Map<String, Value>) -> Result<ViewGroupDef, DesignError> {
        let mut view = Map::new();
        for k in ["map", "reduce"] {
            if let Some(v) = body.get(k) {
                view.insert(k.to_owned(), v.clone());
            }
        }
        let mut ddoc = Map::new();
        ddoc.insert("views".into(), json!({ "temp": view }));
        for k in ["language", "options"] {
            if let Some(v) = body.get(k) {
                ddoc.insert(k.to_owned(), v.clone());
            }
        }
        ViewGroupDef::from_ddoc(&ddoc)
    }

    pub fn view(&self, name: &str) -> Option<(usize, &ViewDef)> {
        self.views.iter().enumerate().find(|(_, v)| v.name == name)
    }

    /// Hex MD5 of everything that determines the index contents.
    pub fn signature(&self) -> String {
        let views: Vec<Value> = self
            .views
            .iter()
            .map(|v| json!([v.name, v.map, v.reduce]))
            .collect();
        let canonical = json!([self.language, views, self.options, self.lib]);
        hex::encode(Md5::digest(canonical.to_string().as_bytes()))
    }
}

fn parse_views(vs: &Map<String, Value>) -> Result<(Vec<ViewDef>, Option<Value>), DesignError> {
    let mut views = Vec::new();
    let mut lib = None;
    for (name, v) in vs {
        if name == "lib" {
            lib = Some(v.clone());
            continue;
        }
        views.push(parse_view(name, v)?);
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((views, lib))
}

fn parse_view(name: &str, v: &Value) -> Result<ViewDef, DesignError> {
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
    Ok(ViewDef {
        name: name.to_owned(),
        map,
        reduce,
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
        assert!(g.include_design && g.raw_collation && !g.local_seq);
        assert_eq!(g.language, "javascript");
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
