//! Running index builds and view compactions, as `_active_tasks` shows them.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Indexer,
    /// Compacting the index, copying view number `view`.
    ViewCompaction {
        view: usize,
    },
}

#[derive(Clone, Debug)]
struct Task {
    kind: Kind,
    database: String,
    design_document: String,
    changes_done: u64,
    total_changes: u64,
    started_on: u64,
    updated_on: u64,
}

#[derive(Default)]
pub struct Tasks {
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, Task>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A running task; it disappears from the list when dropped.
pub struct TaskHandle<'a> {
    tasks: &'a Tasks,
    id: u64,
}

impl Tasks {
    pub fn start(&self, database: &str, ddoc: &str, total_changes: u64) -> TaskHandle<'_> {
        self.start_kind(Kind::Indexer, database, ddoc, total_changes)
    }

    /// A view compaction copying `total_rows` rows, view after view.
    pub fn start_compaction(&self, database: &str, ddoc: &str, total_rows: u64) -> TaskHandle<'_> {
        self.start_kind(Kind::ViewCompaction { view: 0 }, database, ddoc, total_rows)
    }

    fn start_kind(
        &self,
        kind: Kind,
        database: &str,
        ddoc: &str,
        total_changes: u64,
    ) -> TaskHandle<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let t = now();
        self.running.lock().expect("tasks").insert(
            id,
            Task {
                kind,
                database: database.to_owned(),
                design_document: ddoc.to_owned(),
                changes_done: 0,
                total_changes,
                started_on: t,
                updated_on: t,
            },
        );
        TaskHandle { tasks: self, id }
    }

    /// The running tasks as CouchDB's `_active_tasks` entries.
    pub fn list(&self) -> Vec<Value> {
        self.running
            .lock()
            .expect("tasks")
            .iter()
            .map(|(id, t)| {
                let progress = match t.total_changes {
                    0 => 0,
                    n => (t.changes_done * 100 / n).min(100),
                };
                let pid = format!("<0.{id}.0>");
                let mut v = json!({
                    "changes_done": t.changes_done,
                    "database": t.database,
                    "design_document": t.design_document,
                    "node": settee_core::node::name(),
                    "pid": pid,
                    "process_status": "running",
                    "progress": progress,
                    "started_on": t.started_on,
                    "total_changes": t.total_changes,
                    "updated_on": t.updated_on,
                });
                match t.kind {
                    Kind::Indexer => {
                        v["indexer_pid"] = json!(pid);
                        v["type"] = json!("indexer");
                    }
                    Kind::ViewCompaction { view } => {
                        v["phase"] = json!("view");
                        v["view"] = json!(view);
                        v["type"] = json!("view_compaction");
                    }
                }
                v
            })
            .collect()
    }
}

impl TaskHandle<'_> {
    /// A view compaction moves on to view number `view`.
    pub fn view(&self, view: usize) {
        if let Some(t) = self.tasks.running.lock().expect("tasks").get_mut(&self.id) {
            t.kind = Kind::ViewCompaction { view };
            t.updated_on = now();
        }
    }

    pub fn advance(&self, changes: u64) {
        if let Some(t) = self.tasks.running.lock().expect("tasks").get_mut(&self.id) {
            t.changes_done += changes;
            t.updated_on = now();
        }
    }
}

impl Drop for TaskHandle<'_> {
    fn drop(&mut self) {
        self.tasks.running.lock().expect("tasks").remove(&self.id);
    }
}
