//! A JavaScript group's map functions run without QuickJS when every one of them is in
//! [`settee_jsmap`]'s subset. They read the stored body's text in place — or the whole
//! document's JSON, built as for QuickJS, when they read a `_` member (`_id`, `_rev`,
//! `_conflicts`, …) or use the document otherwise, since only it holds those.

use serde_json::Value;
use settee_core::design::ViewGroupDef;
use settee_js::Dialect;
use settee_jsmap::MapFn;

pub struct NativeJs {
    fns: Vec<MapFn>,
    /// No function needs more of the document than its stored body.
    body_only: bool,
}

impl NativeJs {
    /// The group's functions, when its language is JavaScript and each is in the subset.
    pub(crate) fn compile(def: &ViewGroupDef) -> Option<NativeJs> {
        if Dialect::of(Some(&def.language)) != Some(Dialect::JavaScript) {
            return None;
        }
        let fns: Vec<MapFn> = def
            .views
            .iter()
            .map(|v| MapFn::compile(&v.map))
            .collect::<Option<_>>()?;
        let body_only = fns.iter().all(|f| {
            f.reads()
                .is_some_and(|names| names.iter().all(|n| !n.starts_with('_')))
        });
        Some(NativeJs { fns, body_only })
    }

    /// Each view's rows for a document, given its stored bytes and a way to build the JSON
    /// a map function sees; `None` when a function leaves the document to QuickJS.
    pub(crate) fn map(
        &self,
        stored: &[u8],
        json: impl FnOnce() -> Vec<u8>,
    ) -> Option<Vec<Vec<(Value, Value)>>> {
        let built;
        let text = if self.body_only {
            settee_core::split_stored(stored).0
        } else {
            built = json();
            &built
        };
        let text = simdutf8::basic::from_utf8(text).ok()?;
        self.fns.iter().map(|f| f.map(text).ok()).collect()
    }
}
