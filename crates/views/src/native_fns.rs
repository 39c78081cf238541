//! A group's map functions run without their language's engine when every one of them is
//! in the subset of [`settee_jsmap`] (JavaScript, instead of QuickJS) or of
//! [`settee_pymap`] (`python`, instead of the query-server process). They read the stored
//! body's text in place — or the whole document's JSON, built as for the engine, when they
//! read a `_` member (`_id`, `_rev`, `_conflicts`, …) or use the document otherwise, since
//! only it holds those.

use serde_json::Value;
use settee_core::design::ViewGroupDef;
use settee_js::Dialect;

enum Fns {
    Js(Vec<settee_jsmap::MapFn>),
    Py(Vec<settee_pymap::MapFn>),
}

pub struct NativeFns {
    fns: Fns,
    /// No function needs more of the document than its stored body.
    body_only: bool,
}

impl NativeFns {
    /// The group's functions, when its language has a subset and each is in it.
    pub(crate) fn compile(def: &ViewGroupDef) -> Option<NativeFns> {
        let maps = def.views.iter().map(|v| v.map.as_str());
        let (fns, body_only) = match Dialect::of(Some(&def.language)) {
            Some(Dialect::JavaScript) => {
                let fns: Vec<_> = maps
                    .map(settee_jsmap::MapFn::compile)
                    .collect::<Option<_>>()?;
                let body_only = body_only(fns.iter().map(settee_jsmap::MapFn::reads));
                (Fns::Js(fns), body_only)
            }
            None if def.language == "python" => {
                let fns: Vec<_> = maps
                    .map(settee_pymap::MapFn::compile)
                    .collect::<Option<_>>()?;
                let body_only = body_only(fns.iter().map(settee_pymap::MapFn::reads));
                (Fns::Py(fns), body_only)
            }
            _ => return None,
        };
        Some(NativeFns { fns, body_only })
    }

    /// Each view's rows for a document, given its stored bytes and a way to build the JSON
    /// its engine is given; `None` when a function leaves the document to the engine.
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
        match &self.fns {
            Fns::Js(fns) => fns.iter().map(|f| f.map(text).ok()).collect(),
            Fns::Py(fns) => fns.iter().map(|f| f.map(text).ok()).collect(),
        }
    }
}

/// Whether functions reading these members (`None`: the whole document) need no more
/// than the stored body.
fn body_only<'a>(mut reads: impl Iterator<Item = Option<&'a [String]>>) -> bool {
    reads.all(|names| names.is_some_and(|names| names.iter().all(|n| !n.starts_with('_'))))
}
