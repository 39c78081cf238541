//! Mango's json indexes as view indexes: the native map of design documents with
//! `"language": "query"` (CouchDB's `mango_native_proc`, which CouchDB's process manager
//! serves that language with). Each view's `map` is an index definition,
//! `{"fields": {"path": "asc", …}, "partial_filter_selector": {…}}`.
//!
//! A document gives an index one row, key = the values of the fields in their stored
//! order, value = `null`, when it matches the partial filter and has every field (a
//! `null` value is present; a missing member or a path through a scalar or past an
//! array's end is not); otherwise none. Design documents are never indexed, whatever
//! `include_design` says.

use serde_json::{Map, Value};
use settee_core::design::{DesignError, ViewDef, ViewGroupDef};
use settee_mango::field::{self, Found};
use settee_mango::Selector;
use settee_views::{NativeLanguages, NativeMap};
use std::sync::Arc;

/// Mango's design document language.
pub const LANGUAGE: &str = "query";

/// Has the indexer map `query` design documents with [`MangoMap`].
pub fn register_query_language(languages: &mut NativeLanguages) {
    languages.register(LANGUAGE, |def| {
        MangoMap::new(def).map(|m| Arc::new(m) as Arc<dyn NativeMap>)
    });
}

/// The json indexes of one design document, in the group's view order, and the top-level
/// members they read (`None`: a partial filter reads whole documents).
pub struct MangoMap(Vec<JsonIndex>, Option<Vec<String>>);

/// One json index: its fields' paths, and its partial filter unless that is `{}`.
struct JsonIndex {
    fields: Vec<Vec<String>>,
    filter: Option<Selector>,
}

impl MangoMap {
    /// Reads every view's index definition. CouchDB's native server fails on the first
    /// document when a definition has no `fields` object, a field path it cannot parse or
    /// a partial filter it cannot normalise; here the update fails before mapping.
    pub fn new(def: &ViewGroupDef) -> Result<MangoMap, DesignError> {
        let indexes: Vec<JsonIndex> = def
            .views
            .iter()
            .map(JsonIndex::new)
            .collect::<Result<_, _>>()?;
        let mut needed = Some(vec!["_id".to_string()]);
        for i in &indexes {
            let filter = match &i.filter {
                None => Some(vec![]),
                Some(f) => f.top_fields(),
            };
            needed = needed.zip(filter).map(|(mut names, more)| {
                let firsts = i.fields.iter().filter_map(|p| p.first().cloned());
                for n in more.into_iter().chain(firsts) {
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                names
            });
        }
        Ok(MangoMap(indexes, needed))
    }
}

impl JsonIndex {
    fn new(view: &ViewDef) -> Result<JsonIndex, DesignError> {
        let invalid = |what: String| DesignError(format!("View {}: {what}", view.name));
        let map: Map<String, Value> = serde_json::from_str(&view.map)
            .map_err(|_| invalid("the map must be an index definition object".into()))?;
        let Some(Value::Object(fields)) = map.get("fields") else {
            return Err(invalid("`fields` must be an object".into()));
        };
        let fields = fields
            .keys()
            .map(|f| field::parse(f).map_err(|e| invalid(e.to_string())))
            .collect::<Result<_, _>>()?;
        let filter = match partial_filter(&map) {
            None => None,
            Some(s) => Some(Selector::parse(s).map_err(|e| invalid(e.to_string()))?),
        };
        Ok(JsonIndex { fields, filter })
    }

    /// The document's row, if it has one.
    fn entry(&self, doc: &Value) -> Option<(Value, Value)> {
        if self.filter.as_ref().is_some_and(|f| !f.matches(doc)) {
            return None;
        }
        let key = self
            .fields
            .iter()
            .map(|path| match field::get(doc, path) {
                Found::Value(v) => Some(v.clone()),
                Found::NotFound | Found::BadPath => None,
            })
            .collect::<Option<Vec<Value>>>()?;
        Some((Value::Array(key), Value::Null))
    }
}

/// `partial_filter_selector`, or failing that (when absent or `{}`) the legacy
/// `selector`; `None` when neither restricts anything.
fn partial_filter(map: &Map<String, Value>) -> Option<&Value> {
    let empty = |v: &&Value| matches!(v, Value::Object(m) if m.is_empty());
    match map.get("partial_filter_selector").filter(|v| !empty(v)) {
        Some(s) => Some(s),
        None => map.get("selector").filter(|v| !empty(v)),
    }
}

impl NativeMap for MangoMap {
    fn map_doc(&self, doc: &[u8]) -> Result<Vec<Vec<(Value, Value)>>, String> {
        let doc = match &self.1 {
            Some(names) => settee_mango::lazy::pick_members(doc, names)
                .map(Value::Object)
                .ok_or_else(|| "not a JSON object".to_string())?,
            None => serde_json::from_slice(doc).map_err(|e| e.to_string())?,
        };
        let design =
            matches!(doc.get("_id"), Some(Value::String(id)) if id.starts_with("_design/"));
        Ok(self
            .0
            .iter()
            .map(|index| match design {
                true => Vec::new(),
                false => index.entry(&doc).into_iter().collect(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mango(views: Value) -> Result<MangoMap, String> {
        let ddoc = json!({"language": "query", "views": views});
        let def = ViewGroupDef::from_ddoc(ddoc.as_object().unwrap()).map_err(|e| e.0)?;
        MangoMap::new(&def).map_err(|e| e.0)
    }

    fn index(map: Value) -> MangoMap {
        mango(json!({"i": {"map": map, "reduce": "_count"}})).unwrap()
    }

    /// The keys index `i` of `m` gives `doc`.
    fn keys(m: &MangoMap, doc: Value) -> Vec<Value> {
        let mut per_view = m.map_doc(doc.to_string().as_bytes()).unwrap();
        assert_eq!(per_view.len(), 1);
        per_view
            .remove(0)
            .into_iter()
            .map(|(k, v)| {
                assert_eq!(v, Value::Null);
                k
            })
            .collect()
    }

    #[test]
    fn one_row_of_the_fields_values_when_all_are_present() {
        let m = index(json!({"fields": {"foo": "asc", "bar.baz": "desc"}}));
        let doc = |body: Value| {
            let mut d = json!({"_id": "d", "_rev": "1-a"});
            d.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            d
        };
        assert_eq!(
            keys(&m, doc(json!({"foo": 1, "bar": {"baz": "x"}}))),
            [json!([1, "x"])]
        );
        // null is a value; objects and arrays are keys' parts as they are
        assert_eq!(
            keys(&m, doc(json!({"foo": null, "bar": {"baz": [1, {"a": 2}]}}))),
            [json!([null, [1, {"a": 2}]])]
        );
        // a missing member, a path through a scalar: no row
        assert!(keys(&m, doc(json!({"foo": 1}))).is_empty());
        assert!(keys(&m, doc(json!({"foo": 1, "bar": {}}))).is_empty());
        assert!(keys(&m, doc(json!({"foo": 1, "bar": 5}))).is_empty());
        assert!(keys(&m, doc(json!({"bar": {"baz": 1}}))).is_empty());
    }

    #[test]
    fn paths_index_arrays_and_escape_dots() {
        let m = index(json!({"fields": {"a.1": "asc", "b\\.c": "asc", "_id": "asc"}}));
        assert_eq!(
            keys(&m, json!({"_id": "x", "a": [5, 6], "b.c": true})),
            [json!([6, true, "x"])]
        );
        assert!(keys(&m, json!({"_id": "x", "a": [5], "b.c": true})).is_empty());
        assert!(keys(&m, json!({"_id": "x", "a": {"1": 6}, "b.c": true})).len() == 1);
        assert!(keys(&m, json!({"_id": "x", "a": [5, 6], "b": {"c": true}})).is_empty());
    }

    #[test]
    fn partial_filter_and_legacy_selector() {
        let m = index(json!({
            "fields": {"year": "asc"},
            "partial_filter_selector": {"year": {"$gt": 2000}}
        }));
        assert_eq!(keys(&m, json!({"_id": "a", "year": 2010})), [json!([2010])]);
        assert!(keys(&m, json!({"_id": "b", "year": 1990})).is_empty());
        let legacy = index(json!({
            "fields": {"year": "asc"},
            "partial_filter_selector": {},
            "selector": {"kind": "film"}
        }));
        assert_eq!(
            keys(&legacy, json!({"_id": "a", "year": 1, "kind": "film"})),
            [json!([1])]
        );
        assert!(keys(&legacy, json!({"_id": "b", "year": 1, "kind": "book"})).is_empty());
        let empty = index(json!({"fields": {}}));
        assert_eq!(keys(&empty, json!({"_id": "a"})), [json!([])]);
    }

    #[test]
    fn design_documents_are_never_indexed() {
        let m = index(json!({"fields": {"_id": "asc"}}));
        assert!(keys(&m, json!({"_id": "_design/x", "_rev": "1-a"})).is_empty());
        assert_eq!(
            keys(&m, json!({"_id": "_designer"})),
            [json!(["_designer"])]
        );
    }

    #[test]
    fn views_in_name_order() {
        let m = mango(json!({
            "z": {"map": {"fields": {"b": "asc"}}},
            "a": {"map": {"fields": {"a": "asc"}}}
        }))
        .unwrap();
        let rows = m
            .map_doc(json!({"_id": "d", "a": 1}).to_string().as_bytes())
            .unwrap();
        assert_eq!(rows, [vec![(json!([1]), Value::Null)], vec![]]);
    }

    #[test]
    fn unusable_definitions_fail() {
        let bad = |map: Value| mango(json!({"i": {"map": map}})).err().unwrap();
        assert_eq!(bad(json!({})), "View i: `fields` must be an object");
        assert_eq!(
            bad(json!({"fields": ["a"]})),
            "View i: `fields` must be an object"
        );
        assert!(bad(json!({"fields": {"a..b": "asc"}})).starts_with("View i: "));
        assert!(bad(
            json!({"fields": {"a": "asc"}, "partial_filter_selector": {"a": {"$bad": 1}}})
        )
        .starts_with("View i: "));
    }
}
