//! The node's own state as CouchDB reports it: statistics (`_stats`, `_prometheus`), the
//! process and runtime (`_system`) and the libraries it runs on (`_versions`).
//!
//! Threading: everything here reads counters and `/proc`; `system` and the Prometheus
//! series read the Tokio runtime's metrics, so they run inside it.

use crate::Node;
use serde_json::{json, Value};
use settee_metrics::ReplicatorJobs;

impl Node {
    /// `GET /_node/{node}/_stats[/{path}]`: CouchDB's statistics with `jobs` (the
    /// replication scheduler's).
    pub fn stats(&self, jobs: ReplicatorJobs, path: &[&str]) -> Value {
        settee_metrics::global().stats(self.live(jobs), path)
    }

    /// `GET /_node/{node}/_prometheus`: CouchDB's series, then Settee's own.
    pub fn prometheus(&self, jobs: ReplicatorJobs) -> String {
        settee_metrics::global().prometheus(self.live(jobs), &self.own_samples())
    }

    /// The gauges only the server can read: open databases and file descriptors.
    fn live(&self, replicator_jobs: ReplicatorJobs) -> settee_metrics::Live {
        settee_metrics::Live {
            open_databases: self.couch.open_databases() as u64,
            open_os_files: settee_metrics::process::open_fds(),
            replicator_jobs,
        }
    }

    /// Live query-server processes, all languages together.
    fn os_proc_count(&self) -> usize {
        let qs = &self.views.query_servers;
        let languages: Vec<String> = qs.languages().map(|(l, _)| l.to_string()).collect();
        languages.iter().map(|l| qs.counts(l).0).sum()
    }

    /// `GET /_node/{node}/_system`: CouchDB's members where Settee has a true equivalent
    /// (Tokio tasks stand for Erlang processes, the global run queue for the schedulers'),
    /// plus Settee's own (`memory` holds the process's and the storage engine's figures,
    /// `thread_count`, `open_fds`).
    pub fn system(&self) -> Value {
        let p = settee_metrics::process::snapshot();
        let engine = self.couch.engine_stats();
        let rt = tokio::runtime::Handle::current().metrics();
        json!({
            "uptime": settee_metrics::global().uptime_secs(),
            "memory": {
                "rss": p.rss_bytes,
                "rss_peak": p.rss_peak_bytes,
                "virtual": p.virtual_bytes,
                "storage_block_cache": engine.block_cache_usage,
                "storage_memtables": engine.memtable_bytes,
            },
            "run_queue": rt.global_queue_depth(),
            "context_switches": p.context_switches,
            "io_input": p.io_read_bytes,
            "io_output": p.io_written_bytes,
            "os_proc_count": self.os_proc_count(),
            "process_count": rt.num_alive_tasks(),
            "internal_replication_jobs": 0,
            "distribution": {},
            "thread_count": p.threads,
            "open_fds": p.open_fds,
        })
    }

    /// Settee's own series for `_prometheus`: the storage engine, the indexer, the process.
    fn own_samples(&self) -> Vec<settee_metrics::Sample> {
        use settee_metrics::Sample;
        let e = self.couch.engine_stats();
        let p = settee_metrics::process::snapshot();
        let rt = tokio::runtime::Handle::current().metrics();
        let indexers: Vec<Value> = self
            .views
            .tasks
            .list()
            .into_iter()
            .filter(|t| t["type"] == "indexer")
            .collect();
        let backlog: u64 = indexers
            .iter()
            .map(|t| {
                let total = t["total_changes"].as_u64().unwrap_or(0);
                total.saturating_sub(t["changes_done"].as_u64().unwrap_or(0))
            })
            .sum();
        let m = settee_metrics::global();
        vec![
            Sample::counter(
                "couchdb_uptime_seconds",
                "couchdb uptime",
                m.uptime_secs() as f64,
            ),
            Sample::gauge(
                "couchdb_internal_replication_jobs",
                "count of internal replication changes to process",
                0.0,
            ),
            Sample::gauge("couchdb_membership", "count of nodes in the cluster", 1.0)
                .with_label("nodes", "cluster_nodes"),
            Sample::gauge("couchdb_membership", "count of nodes in the cluster", 1.0)
                .with_label("nodes", "all_nodes"),
            Sample::counter(
                "settee_indexer_changes_total",
                "document changes read by view index builds",
                m.indexer_changes.get() as f64,
            ),
            Sample::gauge(
                "settee_indexer_tasks",
                "view index builds running",
                indexers.len() as f64,
            ),
            Sample::gauge(
                "settee_indexer_pending_changes",
                "changes the running index builds have still to read",
                backlog as f64,
            ),
            Sample::gauge(
                "settee_rocksdb_pending_compaction_bytes",
                "bytes the storage engine estimates compaction has to rewrite",
                e.pending_compaction_bytes as f64,
            ),
            Sample::gauge(
                "settee_rocksdb_running_compactions",
                "storage engine compactions running",
                e.running_compactions as f64,
            ),
            Sample::gauge(
                "settee_rocksdb_running_flushes",
                "storage engine memtable flushes running",
                e.running_flushes as f64,
            ),
            Sample::gauge(
                "settee_rocksdb_live_sst_bytes",
                "bytes of the storage engine's live table files",
                e.live_sst_bytes as f64,
            ),
            Sample::gauge(
                "settee_rocksdb_memtable_bytes",
                "bytes in the storage engine's memtables",
                e.memtable_bytes as f64,
            ),
            Sample::gauge(
                "settee_rocksdb_block_cache_usage_bytes",
                "bytes in the block cache (memtables are charged to it)",
                e.block_cache_usage as f64,
            ),
            Sample::counter(
                "settee_rocksdb_block_cache_hits_total",
                "block cache hits",
                e.block_cache_hits as f64,
            ),
            Sample::counter(
                "settee_rocksdb_block_cache_misses_total",
                "block cache misses",
                e.block_cache_misses as f64,
            ),
            Sample::counter(
                "settee_rocksdb_wal_syncs_total",
                "fsyncs of the write-ahead log",
                e.wal_syncs as f64,
            ),
            Sample::counter(
                "settee_rocksdb_wal_bytes_total",
                "bytes written to the write-ahead log",
                e.wal_bytes as f64,
            ),
            Sample::counter(
                "settee_rocksdb_bytes_written_total",
                "bytes written by the storage engine's writes",
                e.bytes_written as f64,
            ),
            Sample::counter(
                "settee_rocksdb_bytes_read_total",
                "bytes read by the storage engine's point reads",
                e.bytes_read as f64,
            ),
            Sample::gauge(
                "settee_process_resident_memory_bytes",
                "resident memory of the process",
                p.rss_bytes as f64,
            ),
            Sample::gauge(
                "settee_process_virtual_memory_bytes",
                "virtual memory of the process",
                p.virtual_bytes as f64,
            ),
            Sample::gauge(
                "settee_process_threads",
                "threads of the process",
                p.threads as f64,
            ),
            Sample::gauge(
                "settee_process_open_fds",
                "open file descriptors of the process",
                p.open_fds as f64,
            ),
            Sample::gauge(
                "settee_query_server_processes",
                "live external query server processes",
                self.os_proc_count() as f64,
            ),
            Sample::gauge(
                "settee_runtime_tasks",
                "asynchronous tasks alive (requests, feeds, jobs)",
                rt.num_alive_tasks() as f64,
            ),
            Sample::gauge(
                "settee_runtime_global_queue_depth",
                "tasks waiting in the runtime's global queue",
                rt.global_queue_depth() as f64,
            ),
        ]
    }
}

/// The collation library (ICU4X) and its data's Unicode version, and the JavaScript
/// engine (QuickJS-ng, through rquickjs). A unit test keeps these in step with Cargo.lock.
const ICU4X_VERSION: &str = "2.4.0";
const ICU4X_UNICODE_VERSION: &str = "18.0.0";
const QUICKJS_VERSION: &str = "0.16.2";

/// `GET /_node/{node}/_versions`: CouchDB's `collation_driver` and `javascript_engine`
/// with Settee's libraries (there is no Erlang runtime to describe).
pub fn versions() -> Value {
    json!({
        "collation_driver": {
            "name": "icu4x",
            "library_version": ICU4X_VERSION,
            "collation_algorithm_version": ICU4X_UNICODE_VERSION,
        },
        "javascript_engine": {
            "name": "quickjs-ng",
            "version": QUICKJS_VERSION,
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_follow_the_lock_file() {
        let lock = include_str!("../../../Cargo.lock");
        let pinned = |name: &str, version: &str| {
            lock.contains(&format!("name = \"{name}\"\nversion = \"{version}\"\n"))
        };
        assert!(pinned("icu_collator", super::ICU4X_VERSION));
        assert!(pinned("icu_collator_data", super::ICU4X_VERSION));
        // rquickjs-sys 0.14.0 bundles QuickJS-ng 0.16.2.
        assert!(pinned("rquickjs-sys", "0.14.0"), "update QUICKJS_VERSION");
    }
}
