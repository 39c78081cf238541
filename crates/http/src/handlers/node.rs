//! `/_node/{node-name}/…`: the node's name, its live configuration (`_config`), its
//! statistics (`_stats`, `_system`, `_prometheus`) and `_versions`, as CouchDB's
//! `chttpd_node` serves them. Settee is one node; `{node-name}` is `_local` or its name
//! ([`settee_core::node::name`]).

use super::allow;
use crate::error::{ApiError, ApiResult};
use crate::reply::{json, ok_true};
use crate::router::NodeOp;
use crate::{AppState, Req};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use settee_auth::password::{PasswordHash, DEFAULT_ITERATIONS};

/// Sections CouchDB refuses to change over HTTP (they name programs to run).
const BLACKLISTED_SECTIONS: &[&str] = &[
    "daemons",
    "external",
    "httpd_design_handlers",
    "httpd_db_handlers",
    "httpd_global_handlers",
    "native_query_servers",
    "os_daemons",
    "query_servers",
    "feature_flags",
];

pub async fn node(state: &AppState, node: &str, op: NodeOp, req: Req) -> ApiResult<Response> {
    match op {
        NodeOp::Incomplete => Err(ApiError::bad_request("Incomplete path to _node request")),
        // CouchDB answers `/_node/_local` whatever the method.
        NodeOp::Info if node == "_local" => Ok(json(
            StatusCode::OK,
            &json!({ "name": settee_core::node::name() }),
        )),
        // Under its own name CouchDB answers from its node-local interface: that
        // interface's welcome.
        NodeOp::Info => {
            check_node(node)?;
            allow(&req.method, "GET,HEAD")?;
            Ok(json(StatusCode::OK, &node_local_welcome(state)))
        }
        NodeOp::Config => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!(state.config.all())))
        }
        NodeOp::Reload => {
            allow(&req.method, "POST")?;
            check_node(node)?;
            state.config.reload()?;
            state.apply_settings();
            Ok(ok_true(StatusCode::OK))
        }
        NodeOp::Section(section) => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &json!(state.config.section(&section))))
        }
        NodeOp::Key(section, key) => config_key(state, node, &section, &key, req).await,
        NodeOp::Stats(path) => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let stats = settee_metrics::global().stats(live(state), &path);
            Ok(json(StatusCode::OK, &stats))
        }
        NodeOp::System => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &system(state)))
        }
        NodeOp::Prometheus => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            let text = settee_metrics::global().prometheus(live(state), &own_samples(state));
            Ok(crate::reply::with_type(
                StatusCode::OK,
                "text/plain; version=2.0",
                text.into(),
            ))
        }
        NodeOp::Versions => {
            allow(&req.method, "GET")?;
            check_node(node)?;
            Ok(json(StatusCode::OK, &versions()))
        }
        NodeOp::Missing => Err(ApiError::NotFound("missing".into())),
        NodeOp::Unimplemented(what, method) => {
            allow(&req.method, method)?;
            check_node(node)?;
            Err(ApiError::NotImplemented(format!(
                "{what} is not supported by this Settee version"
            )))
        }
    }
}

/// `_local` or this node's name; CouchDB's 404 for any other.
fn check_node(node: &str) -> ApiResult<()> {
    if node == "_local" || node == settee_core::node::name() {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("no such node: {node}")))
    }
}

fn unknown_value() -> ApiError {
    ApiError::NotFound("unknown_config_value".into())
}

fn check_writable(section: &str) -> ApiResult<()> {
    if BLACKLISTED_SECTIONS.contains(&section) {
        return Err(ApiError::Forbidden(
            "Config section blacklisted for modification over HTTP API.".into(),
        ));
    }
    Ok(())
}

/// `X-Couch-Persist: false` keeps a change in memory only.
fn persist(req: &Req) -> bool {
    req.header("x-couch-persist") != Some("false")
}

async fn config_key(
    state: &AppState,
    node: &str,
    section: &str,
    key: &str,
    mut req: Req,
) -> ApiResult<Response> {
    allow(&req.method, "GET,PUT,DELETE")?;
    check_node(node)?;
    let cfg = &state.config;
    let old = match req.method.as_str() {
        "PUT" => {
            check_writable(section)?;
            let value = match req.json().await? {
                Value::String(s) => s.trim().to_string(),
                _ => return Err(ApiError::bad_request("a JSON string expected")),
            };
            let value = if section == "admins" {
                hash_admin_password(state, &value)
            } else {
                value
            };
            if persist(&req) {
                cfg.set(section, key, &value)?
            } else {
                cfg.set_unpersisted(section, key, &value)?
            }
            .unwrap_or_default()
        }
        "DELETE" => {
            check_writable(section)?;
            if cfg.get(section, key).is_none() {
                return Err(unknown_value());
            }
            let old = if persist(&req) {
                cfg.delete(section, key)?
            } else {
                cfg.delete_unpersisted(section, key)
            };
            old.ok_or_else(unknown_value)?
        }
        _ => cfg.get(section, key).ok_or_else(unknown_value)?,
    };
    state.apply_settings();
    Ok(json(StatusCode::OK, &Value::String(old)))
}

/// CouchDB stores admin passwords hashed: a plaintext value becomes a PBKDF2 hash with
/// `[chttpd_auth] iterations`; a value that already is a hash is kept.
fn hash_admin_password(state: &AppState, value: &str) -> String {
    if value.is_empty() || PasswordHash::parse(value).is_some() {
        return value.to_string();
    }
    let iterations = state
        .config
        .get_u64("chttpd_auth", "iterations", DEFAULT_ITERATIONS.into())
        .clamp(1, u32::MAX.into()) as u32;
    PasswordHash::new(value, iterations).stored()
}

/// `GET /_membership`: this one node.
pub fn membership(req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET")?;
    let name = settee_core::node::name();
    Ok(json(
        StatusCode::OK,
        &json!({"all_nodes": [name], "cluster_nodes": [name]}),
    ))
}

/// The gauges only the server can read: open databases and file descriptors.
fn live(state: &AppState) -> settee_metrics::Live {
    settee_metrics::Live {
        open_databases: state.couch.open_databases() as u64,
        open_os_files: settee_metrics::process::open_fds(),
        replicator_jobs: state.replicator.counts(),
    }
}

/// Live query-server processes, all languages together.
fn os_proc_count(state: &AppState) -> usize {
    let qs = &state.views.query_servers;
    let languages: Vec<String> = qs.languages().map(|(l, _)| l.to_string()).collect();
    languages.iter().map(|l| qs.counts(l).0).sum()
}

/// `GET /_node/{node}/_system`: CouchDB's members where Settee has a true equivalent
/// (Tokio tasks stand for Erlang processes, the global run queue for the schedulers'),
/// plus Settee's own (`memory` holds the process's and the storage engine's figures,
/// `thread_count`, `open_fds`).
fn system(state: &AppState) -> Value {
    let p = settee_metrics::process::snapshot();
    let engine = state.couch.engine_stats();
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
        "os_proc_count": os_proc_count(state),
        "process_count": rt.num_alive_tasks(),
        "internal_replication_jobs": 0,
        "distribution": {},
        "thread_count": p.threads,
        "open_fds": p.open_fds,
    })
}

/// Settee's own series for `_prometheus`: the storage engine, the indexer, the process.
fn own_samples(state: &AppState) -> Vec<settee_metrics::Sample> {
    use settee_metrics::Sample;
    let e = state.couch.engine_stats();
    let p = settee_metrics::process::snapshot();
    let rt = tokio::runtime::Handle::current().metrics();
    let indexers: Vec<Value> = state
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
            os_proc_count(state) as f64,
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

/// The collation library (ICU4X) and its data's Unicode version, and the JavaScript
/// engine (QuickJS-ng, through rquickjs). A unit test keeps these in step with Cargo.lock.
const ICU4X_VERSION: &str = "2.4.0";
const ICU4X_UNICODE_VERSION: &str = "18.0.0";
const QUICKJS_VERSION: &str = "0.16.2";

/// `GET /_node/{node}/_versions`: CouchDB's `collation_driver` and `javascript_engine`
/// with Settee's libraries (there is no Erlang runtime to describe).
fn versions() -> Value {
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

/// The welcome of CouchDB's node-local interface (`/_node/{its name}`): the root's
/// without `git_sha` and `features`, `vendor` last.
fn node_local_welcome(state: &AppState) -> Value {
    let mut body = json!({
        "couchdb": "Welcome",
        "uuid": state.config.get_or("couchdb", "uuid", &state.http.server_uuid),
        "version": "3.5.2",
    });
    state.add_vendor(&mut body);
    body
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_follow_the_lock_file() {
        let lock = include_str!("../../../../Cargo.lock");
        let pinned = |name: &str, version: &str| {
            lock.contains(&format!("name = \"{name}\"\nversion = \"{version}\"\n"))
        };
        assert!(pinned("icu_collator", super::ICU4X_VERSION));
        assert!(pinned("icu_collator_data", super::ICU4X_VERSION));
        // rquickjs-sys 0.14.0 bundles QuickJS-ng 0.16.2.
        assert!(pinned("rquickjs-sys", "0.14.0"), "update QUICKJS_VERSION");
    }
}
