//! What the seam suites share: a local node over a real RocksDB in a temporary directory,
//! with the real JavaScript engine and Mango's `query` language, and one database.
#![allow(dead_code)] // each suite uses part of it

use serde_json::{json, Value};
use settee_db::Database;
use settee_node::config::{builtin_defaults, Sections};
use settee_node::{Node, NodeConfig};
use std::sync::Arc;

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub node: Arc<Node>,
    pub db: Arc<Database>,
}

impl Fixture {
    /// The node as the suites call it: through the operations trait.
    pub fn fabric(&self) -> &dyn settee_node::Fabric {
        &self.node
    }
}

/// A fresh node with the built-in defaults and an empty database `db`.
pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let couch = settee_db::Couch::open(
        &dir.path().join("store"),
        settee_db::Config::default(),
        &settee_storage::StoreOptions::default(),
    )
    .unwrap();
    let config = NodeConfig::in_memory(Sections::new());
    config.set_defaults(builtin_defaults());
    let mut views = settee_views::Config::default();
    settee_node::query_language::register_query_language(&mut views.native);
    let views = settee_views::Views::new(views);
    let node = Arc::new(Node::new(couch.clone(), views, Arc::new(config)));
    let db = couch.create("db", json!({})).unwrap();
    Fixture {
        _dir: dir,
        node,
        db,
    }
}

/// Writes `docs` as new edits, each of which must succeed. Blocks; inside a Tokio runtime
/// it must run on a multi-threaded one.
pub fn write(db: &Arc<Database>, docs: Vec<Value>) {
    let parsed = docs
        .into_iter()
        .map(|d| settee_core::parse_doc(d).unwrap())
        .collect();
    let rx = db.update_docs(parsed, true).unwrap();
    let written = match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::task::block_in_place(|| rx.blocking_recv()),
        Err(_) => rx.blocking_recv(),
    };
    for r in written.unwrap().unwrap() {
        assert!(matches!(r, settee_db::UpdateResult::Ok { .. }), "{r:?}");
    }
}

/// A call's whole answer (everything it writes to its `out`), parsed.
pub fn answer(
    call: impl FnOnce(settee_node::fabric::Out<'_>) -> settee_node::Result<()>,
) -> settee_node::Result<Value> {
    let mut body = Vec::new();
    call(&mut |b| {
        body.extend_from_slice(b);
        true
    })?;
    Ok(serde_json::from_slice(&body).expect("a JSON answer"))
}
