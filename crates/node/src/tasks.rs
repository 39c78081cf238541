//! Database compactions, as `_active_tasks` shows them.

use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The compactions running now.
#[derive(Default)]
pub struct Tasks(Mutex<Vec<Task>>);

struct Task {
    database: String,
    pid: u64,
    started_on: u64,
    updated_on: u64,
    progress: settee_db::CompactProgress,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Tasks {
    pub fn compacting(&self, db: &str) -> bool {
        self.0.lock().unwrap().iter().any(|t| t.database == db)
    }

    /// Registers a compaction of `database`; false when one is running already.
    pub(crate) fn start(&self, database: &str) -> bool {
        static PIDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut tasks = self.0.lock().unwrap();
        if tasks.iter().any(|t| t.database == database) {
            return false;
        }
        let now = now_secs();
        tasks.push(Task {
            database: database.to_string(),
            pid: PIDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            started_on: now,
            updated_on: now,
            progress: settee_db::CompactProgress {
                phase: settee_db::CompactPhase::DocumentCopy,
                done: 0,
                total: 0,
            },
        });
        true
    }

    pub(crate) fn update(&self, database: &str, progress: settee_db::CompactProgress) {
        if let Some(t) = self
            .0
            .lock()
            .unwrap()
            .iter_mut()
            .find(|t| t.database == database)
        {
            t.progress = progress;
            t.updated_on = now_secs();
        }
    }

    pub(crate) fn finish(&self, database: &str) {
        self.0.lock().unwrap().retain(|t| t.database != database);
    }

    /// CouchDB's `database_compaction` entries (`phase` names Settee's steps; `progress`
    /// is the percentage of the current phase).
    pub fn list(&self) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|t| {
                let p = t.progress;
                let progress = match p.total {
                    0 => 0,
                    n => (p.done * 100 / n).min(100),
                };
                json!({
                    "changes_done": p.done,
                    "database": t.database,
                    "node": settee_core::node::name(),
                    "phase": p.phase.as_str(),
                    "pid": format!("<0.{}.1>", t.pid),
                    "process_status": "running",
                    "progress": progress,
                    "retry": false,
                    "started_on": t.started_on,
                    "total_changes": p.total,
                    "type": "database_compaction",
                    "updated_on": t.updated_on,
                })
            })
            .collect()
    }
}
