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
    /// The map function's source; for a language whose maps are objects (Mango's
    /// `query`), the object's JSON text in its stored member order.
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
    /// `options.partitioned`, when given (otherwise the database decides).
    pub partitioned: Option<bool>,
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
            Some(Value::Object(vs)) => parse_views(vs, raw_default, object_maps(&language))?,
            Some(_) => return Err(DesignError("`views` must be an object".into())),
        };
        Ok(ViewGroupDef {
            language,
            views,
            lib,
            include_design: options.get("include_design") == Some(&Value::Bool(true)),
            local_seq: options.get("local_seq") == Some(&Value::Bool(true)),
            partitioned: options.get("partitioned").and_then(Value::as_bool),
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

/// A JSON type CouchDB's design document checks name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Object,
    String,
    Array,
    Boolean,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::String => "string",
            Ty::Array => "array",
            Ty::Boolean => "boolean",
        }
    }

    /// JSON `null` is of no type: only an absent member passes a check.
    fn holds(self, v: &Value) -> bool {
        match self {
            Ty::Object => v.is_object(),
            Ty::String => v.is_string(),
            Ty::Array => v.is_array(),
            Ty::Boolean => v.is_boolean(),
        }
    }
}

/// One step of a member path: a named member, or every member of an object.
#[derive(Clone, Copy)]
enum Step {
    Key(&'static str, &'static [Ty]),
    Each(&'static [Ty]),
}

/// The member checks of a design document, in the order CouchDB makes them
/// (`couch_mrview:validate_ddoc_fields`); `None` stands for the map function's type, which
/// depends on the language.
const MEMBER_PATHS: &[&[Option<Step>]] = {
    use Step::{Each, Key};
    use Ty::*;
    const OBJ: &[Ty] = &[Object];
    const FUNCTION: &[Ty] = &[Object, String];
    &[
        &[Some(Key("filters", OBJ)), Some(Each(FUNCTION))],
        &[Some(Key("language", &[String]))],
        &[Some(Key("lists", OBJ)), Some(Each(FUNCTION))],
        &[Some(Key("options", OBJ))],
        &[
            Some(Key("options", OBJ)),
            Some(Key("include_design", &[Boolean])),
        ],
        &[
            Some(Key("options", OBJ)),
            Some(Key("local_seq", &[Boolean])),
        ],
        &[
            Some(Key("options", OBJ)),
            Some(Key("partitioned", &[Boolean])),
        ],
        &[Some(Key("rewrites", &[String, Array]))],
        &[Some(Key("shows", OBJ)), Some(Each(FUNCTION))],
        &[Some(Key("updates", OBJ)), Some(Each(FUNCTION))],
        &[Some(Key("validate_doc_update", &[String]))],
        &[Some(Key("views", OBJ)), Some(Key("lib", OBJ))],
        &[Some(Key("views", OBJ)), Some(Each(OBJ)), None],
        &[
            Some(Key("views", OBJ)),
            Some(Each(OBJ)),
            Some(Key("reduce", &[String])),
        ],
    ]
};

/// CouchDB's checks of a design document's members on save (`couch_mrview:validate/2`):
/// the first member of the wrong type is "`views.v.map` field must have string type" (JSON
/// `null` is a wrong type, only absence passes); then each view but `views.lib` must have
/// a map function; then a `_`-named reduce must be a built-in CouchDB knows. These hold
/// for design documents of every language (compiling is for JavaScript only).
pub fn check_members(ddoc: &Map<String, Value>) -> Result<(), DesignError> {
    // Mango's (`"language": "query"`) map functions are objects.
    let object = matches!(ddoc.get("language"), Some(Value::String(l)) if object_maps(l));
    let map_type: &[Ty] = if object { &[Ty::Object] } else { &[Ty::String] };
    for path in MEMBER_PATHS {
        let steps: Vec<Step> = path
            .iter()
            .map(|s| s.unwrap_or(Step::Key("map", map_type)))
            .collect();
        check_path(ddoc, &steps, &mut Vec::new())?;
    }
    let Some(Value::Object(views)) = ddoc.get("views") else {
        return Ok(());
    };
    for (name, view) in views.iter().filter(|(name, _)| *name != "lib") {
        if view.get("map").is_none() {
            return Err(DesignError(format!(
                "View `{name}` must contain map function"
            )));
        }
    }
    for view in views
        .iter()
        .filter(|(name, _)| *name != "lib")
        .map(|(_, v)| v)
    {
        if let Some(Value::String(reduce)) = view.get("reduce") {
            crate::reduce::Builtin::parse(reduce).map_err(DesignError)?;
        }
    }
    Ok(())
}

fn check_path<'a>(
    at: &'a Map<String, Value>,
    steps: &[Step],
    path: &mut Vec<&'a str>,
) -> Result<(), DesignError> {
    let Some((step, rest)) = steps.split_first() else {
        return Ok(());
    };
    let members: Vec<(&'a String, &'a Value, &'static [Ty])> = match *step {
        Step::Key(key, types) => match at.get_key_value(key) {
            Some((k, v)) => vec![(k, v, types)],
            None => return Ok(()),
        },
        Step::Each(types) => at.iter().map(|(k, v)| (k, v, types)).collect(),
    };
    for (key, value, types) in members {
        path.push(key);
        if !types.iter().any(|t| t.holds(value)) {
            // CouchDB's `format_type` joins the names back to front.
            let names: Vec<&str> = types.iter().rev().map(|t| t.name()).collect();
            return Err(DesignError(format!(
                "`{}` field must have {} type",
                path.join("."),
                names.join(" or ")
            )));
        }
        if let Value::Object(inner) = value {
            check_path(inner, rest, path)?;
        }
        path.pop();
    }
    Ok(())
}

/// Whether the language's map functions are JSON objects rather than source text
/// (CouchDB's `map_function_type`: Mango's `query`).
fn object_maps(language: &str) -> bool {
    language == "query"
}

fn is_raw(options: &Value) -> bool {
    options.get("collation") == Some(&json!("raw"))
}

fn parse_views(
    vs: &Map<String, Value>,
    raw_default: bool,
    object_maps: bool,
) -> Result<(Vec<ViewDef>, Option<Value>), DesignError> {
    let mut views = Vec::new();
    let mut lib = None;
    for (name, v) in vs {
        if name == "lib" {
            lib = Some(v.clone());
            continue;
        }
        views.push(parse_view(name, v, raw_default, object_maps)?);
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((views, lib))
}

fn parse_view(
    name: &str,
    v: &Value,
    raw_default: bool,
    object_maps: bool,
) -> Result<ViewDef, DesignError> {
    let obj = v
        .as_object()
        .ok_or_else(|| DesignError(format!("View {name} must be an object")))?;
    let map = match obj.get("map") {
        Some(Value::String(s)) if !object_maps => s.clone(),
        Some(m @ Value::Object(_)) if object_maps => m.to_string(),
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

    fn members(v: Value) -> Result<(), String> {
        check_members(v.as_object().unwrap()).map_err(|e| e.0)
    }

    #[test]
    fn member_types_are_checked_in_couchdb_order() {
        let wrong = |path: &str, ty: &str| Err(format!("`{path}` field must have {ty} type"));
        assert_eq!(members(json!({"filters": []})), wrong("filters", "object"));
        assert_eq!(
            members(json!({"filters": {"ok": "function(){}", "bad": 1}})),
            wrong("filters.bad", "string or object")
        );
        assert_eq!(
            members(json!({"language": null})),
            wrong("language", "string")
        );
        assert_eq!(members(json!({"lists": "x"})), wrong("lists", "object"));
        assert_eq!(
            members(json!({"options": true})),
            wrong("options", "object")
        );
        assert_eq!(
            members(json!({"options": {"local_seq": "true"}})),
            wrong("options.local_seq", "boolean")
        );
        assert_eq!(
            members(json!({"rewrites": {}})),
            wrong("rewrites", "array or string")
        );
        assert_eq!(
            members(json!({"shows": {"s": []}})),
            wrong("shows.s", "string or object")
        );
        assert_eq!(members(json!({"updates": 1})), wrong("updates", "object"));
        assert_eq!(
            members(json!({"validate_doc_update": {}})),
            wrong("validate_doc_update", "string")
        );
        assert_eq!(members(json!({"views": []})), wrong("views", "object"));
        assert_eq!(
            members(json!({"views": {"lib": "x"}})),
            wrong("views.lib", "object")
        );
        assert_eq!(
            members(json!({"views": {"v": "x"}})),
            wrong("views.v", "object")
        );
        assert_eq!(
            members(json!({"views": {"v": {"map": {}}}})),
            wrong("views.v.map", "string")
        );
        assert_eq!(
            members(json!({"views": {"v": {"map": "f", "reduce": 1}}})),
            wrong("views.v.reduce", "string")
        );
        // the first failing check wins: filters before views, whatever the member order
        assert_eq!(
            members(json!({"views": [], "filters": 1})),
            wrong("filters", "object")
        );
        // all maps are checked before any reduce
        assert_eq!(
            members(json!({"views": {"a": {"map": "f", "reduce": 1}, "b": {"map": 2}}})),
            wrong("views.b.map", "string")
        );
        // Mango's maps are objects
        assert_eq!(
            members(json!({"language": "query", "views": {"i": {"map": {"fields": {}}}}})),
            Ok(())
        );
        assert_eq!(
            members(json!({"language": "query", "views": {"i": {"map": "f"}}})),
            wrong("views.i.map", "object")
        );
    }

    #[test]
    fn views_need_maps_and_known_builtins() {
        assert_eq!(
            members(json!({"views": {"lib": {}, "v": {"reduce": "_sum"}}})),
            Err("View `v` must contain map function".into())
        );
        assert_eq!(
            members(json!({"views": {"v": {"map": "f", "reduce": "_median"}}})),
            Err("`_median` is not a supported reduce function.".into())
        );
        assert_eq!(
            members(json!({"views": {"v": {"map": "f", "reduce": "_sum_of_all"}}})),
            Ok(())
        );
        assert_eq!(
            members(json!({"views": {"v": {"map": "f", "reduce": "function(k, v) {}"}}})),
            Ok(())
        );
        assert_eq!(members(json!({"_id": "_design/x"})), Ok(()));
    }

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
    fn query_maps_are_objects() {
        let ddoc = |language: &str, map: Value| json!({"language": language, "views": {"i": {"map": map, "reduce": "_count"}}});
        let map = json!({"fields": {"foo": "asc", "bar.baz": "asc"}});
        let g = group(ddoc("query", map.clone()));
        assert_eq!(g.language, "query");
        assert_eq!(
            g.views[0].map,
            r#"{"fields":{"foo":"asc","bar.baz":"asc"}}"#
        );
        let other = group(ddoc("query", json!({"fields": {"foo": "asc"}})));
        assert_ne!(g.signature(), other.signature());
        for bad in [
            ddoc("query", json!("function(doc){}")),
            ddoc("javascript", map.clone()),
            ddoc("erlang", map),
        ] {
            assert!(ViewGroupDef::from_ddoc(bad.as_object().unwrap()).is_err());
        }
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
