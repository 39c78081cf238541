//! Running index builds, as `_active_tasks` shows them.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug)]
struct Task {
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
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let t = now();
        self.running.lock().expect("tasks").insert(
            id,
            Task {
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
                json!({
                    "changes_done": t.changes_done,
                    "database": t.database,
                    "design_document": t.design_document,
                    "indexer_pid": format!("<0.{id}.0>"),
                    "node": "nonode@nohost",
                    "pid": format!("<0.{id}.0>"),
                    "process_status": "running",
                    "progress": progress,
                    "started_on": t.started_on,
                    "total_changes": t.total_changes,
                    "type": "indexer",
                    "updated_on": t.updated_on,
                })
            })
            .collect()
    }
}

impl TaskHandle<'_> {
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
