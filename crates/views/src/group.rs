//! A view group ready to index: its definition, signature, storage prefix, the JavaScript
//! a runtime compiles, and which reduce each view uses.

use crate::layout::{collation_tag, IndexPrefix};
use crate::native_fns::NativeFns;
use crate::reducer::{BuiltinReducer, JsReducers};
use crate::tree::{NoReduce, Reducer};
use settee_core::design::ViewGroupDef;
use settee_core::reduce::Builtin;
use settee_js::{Dialect, ViewFns, ViewSource};
use settee_storage::DbId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceKind {
    None,
    Builtin(Builtin),
    Js,
}

pub struct Group {
    pub def: ViewGroupDef,
    /// The design document it came from (for `_active_tasks` and `_info`).
    pub ddoc_id: String,
    pub sig: [u8; 16],
    pub prefix: IndexPrefix,
    pub fns: ViewFns,
    /// The map functions run without their engine (QuickJS or the query server), when
    /// every view's is in [`settee_jsmap`]'s or [`settee_pymap`]'s subset; a document any
    /// of them cannot answer goes to the engine whole.
    pub native_fns: Option<NativeFns>,
    pub reduces: Vec<ReduceKind>,
    /// Whether rows are kept per partition (`options.partitioned`, by default the
    /// database's): queries then name a partition and read only its rows.
    pub partitioned: bool,
}

impl Group {
    /// The group of a design document of an unpartitioned database.
    pub fn new(db: DbId, ddoc_id: &str, def: ViewGroupDef) -> Group {
        Group::in_db(db, false, ddoc_id, def)
    }

    /// The group of a design document of a database that is partitioned or not.
    pub fn in_db(db: DbId, db_partitioned: bool, ddoc_id: &str, def: ViewGroupDef) -> Group {
        let partitioned = def.partitioned.unwrap_or(db_partitioned);
        let sig_hex = def.signature();
        let mut sig = [0u8; 16];
        hex::decode_to_slice(&sig_hex, &mut sig).expect("signature is 32 hex digits");
        let reduces = def
            .views
            .iter()
            .map(|v| match v.reduce.as_deref() {
                None => ReduceKind::None,
                Some(src) => Builtin::from_source(src).map_or(ReduceKind::Js, ReduceKind::Builtin),
            })
            .collect::<Vec<_>>();
        let fns = ViewFns {
            views: def
                .views
                .iter()
                .zip(&reduces)
                .map(|(v, r)| ViewSource {
                    name: v.name.clone(),
                    map: v.map.clone(),
                    reduce: (*r == ReduceKind::Js).then(|| v.reduce.clone()).flatten(),
                })
                .collect(),
            lib: def.lib.clone(),
            dialect: Dialect::of(Some(&def.language)).unwrap_or_default(),
        };
        let native_fns = NativeFns::compile(&def);
        Group {
            ddoc_id: ddoc_id.to_owned(),
            prefix: IndexPrefix::new(db, &sig),
            sig,
            fns,
            native_fns,
            reduces,
            def,
            partitioned,
        }
    }

    /// Whether the document `id` has rows in this index: design documents only with
    /// `include_design`, and in a partitioned index only documents of a partition.
    pub fn indexes(&self, id: &str) -> bool {
        if id.starts_with("_design/") {
            self.def.include_design && !self.partitioned
        } else {
            !self.partitioned || id.contains(':')
        }
    }

    pub fn signature(&self) -> String {
        hex::encode(self.sig)
    }

    pub fn collation(&self) -> String {
        collation_tag(self.def.views.iter().map(|v| v.raw_collation))
    }

    /// Runs `f` with the reducer of view `view`.
    pub fn with_reducer<T>(
        &self,
        view: usize,
        js: &mut JsReducers<'_>,
        f: impl FnOnce(&mut dyn Reducer) -> T,
    ) -> T {
        match self.reduces[view] {
            ReduceKind::None => f(&mut NoReduce),
            ReduceKind::Builtin(b) => f(&mut BuiltinReducer(b)),
            ReduceKind::Js => f(&mut js.view(view)),
        }
    }
}
