//! Map functions implemented in Rust for design-document languages other than JavaScript
//! (Mango's `query`). The views crate knows only this seam: a language name maps to a
//! factory that turns a view group into a [`NativeMap`]; who implements it (and what the
//! views' `map` objects mean) is the registering crate's business.
//!
//! External query servers plug in here too (`external.rs`): their [`NativeMap::map_docs`]
//! sends a whole chunk through one process.
//!
//! Threading contract: one [`NativeMap`] is built per index update round and shared by
//! every map worker of the round, which call [`NativeMap::map_docs`] (one chunk of
//! documents at a time) concurrently.

use serde_json::Value;
use settee_core::design::{DesignError, ViewGroupDef};
use settee_queryserver::Emits;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The map functions of one view group.
pub trait NativeMap: Send + Sync {
    /// The rows (key, value) each view emits for `doc`, one list per view in the group's
    /// view order (sorted by name). `doc` is the JSON text of the document as a JavaScript
    /// map function sees it: `_id`, `_rev`, the body, `_conflicts`/`_deleted_conflicts`
    /// (and `_local_seq` when asked), attachment stubs — text, so that a map reading a few
    /// members need not parse the rest. Deleted documents are never passed. An error (the
    /// text is not a JSON object) fails the index update.
    fn map_doc(&self, doc: &[u8]) -> Result<Vec<Vec<(Value, Value)>>, String>;

    /// [`NativeMap::map_doc`] of each document of a chunk, in order; the indexer calls
    /// this. A map with a per-call cost (a round trip to another process) overrides it.
    fn map_docs(&self, docs: &[&[u8]]) -> crate::Result<Vec<Vec<Emits>>> {
        docs.iter()
            .map(|d| self.map_doc(d).map_err(crate::Error::Internal))
            .collect()
    }

    /// How many map workers an index update runs, given the default (the cores).
    fn workers(&self, cores: usize) -> usize {
        cores
    }
}

/// Builds a group's [`NativeMap`]; an error (a `map` the language cannot use) fails the
/// index update.
pub type NativeFactory =
    Arc<dyn Fn(&ViewGroupDef) -> Result<Arc<dyn NativeMap>, DesignError> + Send + Sync>;

/// The native languages the indexer knows, by name.
#[derive(Clone, Default)]
pub struct NativeLanguages(BTreeMap<String, NativeFactory>);

impl NativeLanguages {
    /// Maps groups of `language` with `factory` from now on (replacing any previous one).
    pub fn register(
        &mut self,
        language: &str,
        factory: impl Fn(&ViewGroupDef) -> Result<Arc<dyn NativeMap>, DesignError>
            + Send
            + Sync
            + 'static,
    ) {
        self.0.insert(language.to_owned(), Arc::new(factory));
    }

    /// Whether `language` (any case, as CouchDB compares names) is registered.
    pub fn contains(&self, language: &str) -> bool {
        self.0.contains_key(&*settee_js::lookup_name(language))
    }

    /// The native map of `def`, or `None` when its language is not registered here.
    pub fn build(&self, def: &ViewGroupDef) -> Result<Option<Arc<dyn NativeMap>>, DesignError> {
        self.0
            .get(&*settee_js::lookup_name(&def.language))
            .map(|f| f(def))
            .transpose()
    }
}

impl std::fmt::Debug for NativeLanguages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo;

    impl NativeMap for Echo {
        fn map_doc(&self, doc: &[u8]) -> Result<Vec<Vec<(Value, Value)>>, String> {
            let doc: Value = serde_json::from_slice(doc).map_err(|e| e.to_string())?;
            Ok(vec![vec![(doc["_id"].clone(), Value::Null)]])
        }
    }

    fn def(language: &str) -> ViewGroupDef {
        let ddoc = json!({"language": language});
        ViewGroupDef::from_ddoc(ddoc.as_object().unwrap()).unwrap()
    }

    #[test]
    fn builds_the_registered_languages_maps_only() {
        let mut langs = NativeLanguages::default();
        langs.register("echo", |_| Ok(Arc::new(Echo) as Arc<dyn NativeMap>));
        langs.register("broken", |_| Err(DesignError("no".into())));
        assert!(langs.contains("echo") && !langs.contains("javascript"));
        assert!(langs.build(&def("javascript")).unwrap().is_none());
        let echo = langs.build(&def("echo")).unwrap().unwrap();
        assert_eq!(
            echo.map_doc(br#"{"_id": "a"}"#).unwrap(),
            [vec![(json!("a"), Value::Null)]]
        );
        assert_eq!(langs.build(&def("broken")).err().unwrap().0, "no");
        assert_eq!(format!("{langs:?}"), r#"{"broken", "echo"}"#);
    }
}
