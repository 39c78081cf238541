//! Node statistics: the counters, gauges and histograms CouchDB 3.5 describes in its
//! `stats_descriptions.cfg` that Settee can truthfully count, kept in one process-wide
//! [`Metrics`] ([`global`]) so any crate counts without plumbing, and rendered as
//! `/_node/{node}/_stats` JSON ([`Metrics::stats`]) and Prometheus text
//! ([`Metrics::prometheus`]) under CouchDB's names.
//!
//! Counting is cheap enough for the request path: counters and gauges are
//! `prometheus`'s atomics, histograms record into per-thread-sharded `hdrhistogram`s
//! (see [`hist`]). This crate depends on no other Settee crate; values only the caller can
//! measure (open databases, file descriptors, the storage engine's counters) are passed
//! in when rendering.

pub mod hist;
pub mod process;
mod prom;

pub use hist::{Histogram, Summary};
pub use prom::Sample;
use prometheus::{IntCounter, IntGauge};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;
use std::time::Instant;

/// The HTTP methods CouchDB counts (`httpd_request_methods`).
pub const METHODS: [&str; 7] = ["COPY", "DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"];

/// The status codes CouchDB counts (`httpd_status_codes`), with their descriptions.
const CODES: [(u16, &str); 25] = [
    (200, "number of HTTP 200 OK responses"),
    (201, "number of HTTP 201 Created responses"),
    (202, "number of HTTP 202 Accepted responses"),
    (204, "number of HTTP 204 No Content responses"),
    (206, "number of HTTP 206 Partial Content"),
    (301, "number of HTTP 301 Moved Permanently responses"),
    (302, "number of HTTP 302 Found responses"),
    (304, "number of HTTP 304 Not Modified responses"),
    (400, "number of HTTP 400 Bad Request responses"),
    (401, "number of HTTP 401 Unauthorized responses"),
    (403, "number of HTTP 403 Forbidden responses"),
    (404, "number of HTTP 404 Not Found responses"),
    (405, "number of HTTP 405 Method Not Allowed responses"),
    (406, "number of HTTP 406 Not Acceptable responses"),
    (409, "number of HTTP 409 Conflict responses"),
    (412, "number of HTTP 412 Precondition Failed responses"),
    (413, "number of HTTP 413 Request Entity Too Long responses"),
    (414, "number of HTTP 414 Request URI Too Long responses"),
    (415, "number of HTTP 415 Unsupported Media Type responses"),
    (
        416,
        "number of HTTP 416 Requested Range Not Satisfiable responses",
    ),
    (417, "number of HTTP 417 Expectation Failed responses"),
    (500, "number of HTTP 500 Internal Server Error responses"),
    (501, "number of HTTP 501 Not Implemented responses"),
    (503, "number of HTTP 503 Service unavailable responses"),
    (507, "number of HTTP 507 Insufficient Storage responses"),
];

fn counter() -> IntCounter {
    IntCounter::new("c", "c").expect("valid name")
}

/// Every statistic Settee keeps. Fields are public so that the code that sees an event
/// counts it directly (`global().database_reads.inc()`).
pub struct Metrics {
    started: Instant,
    pub requests: IntCounter,
    methods: Vec<IntCounter>,
    codes: Vec<IntCounter>,
    /// Milliseconds from a request's arrival to its response's head.
    pub request_time: Histogram,
    pub bulk_requests: IntCounter,
    /// Documents per `_bulk_docs` request.
    pub bulk_docs: Histogram,
    pub view_reads: IntCounter,
    pub purge_requests: IntCounter,
    pub partition_all_docs_requests: IntCounter,
    pub clients_requesting_changes: IntGauge,
    pub database_reads: IntCounter,
    pub database_writes: IntCounter,
    pub database_purges: IntCounter,
    pub document_inserts: IntCounter,
    pub document_writes: IntCounter,
    pub local_document_writes: IntCounter,
    /// Commits (one fsynced batch each) by the databases' writers.
    pub commits: IntCounter,
    pub mango_unindexed_queries: IntCounter,
    pub mango_too_many_docs_scanned: IntCounter,
    pub mango_docs_examined: IntCounter,
    pub mango_keys_examined: IntCounter,
    pub mango_results_returned: IntCounter,
    /// Milliseconds per `_find` request.
    pub mango_query_time: Histogram,
    /// Writes refused by a `validate_doc_update` function (forbidden or unauthorized).
    pub vdu_rejects: IntCounter,
    /// Users found among those read from other members (a clustered authentication
    /// database), and users read from them.
    pub auth_cache_hits: IntCounter,
    pub auth_cache_misses: IntCounter,
    /// Passwords hashed the fast way (the verified-password cache).
    pub password_hashing_fast: IntCounter,
    /// Passwords hashed the slow way (a stored hash's own scheme and rounds).
    pub password_hashing_slow: IntCounter,
    /// Milliseconds spent in a write's validation functions.
    pub vdu_process_time: Histogram,
    /// Milliseconds to answer a database's info (`GET /{db}`).
    pub dbinfo: Histogram,
    /// Settee's own: document changes read by view index builds.
    pub indexer_changes: IntCounter,
    pub replicator_jobs_adds: IntCounter,
    pub replicator_jobs_duplicate_adds: IntCounter,
    pub replicator_jobs_removes: IntCounter,
    pub replicator_jobs_starts: IntCounter,
    pub replicator_jobs_stops: IntCounter,
    pub replicator_jobs_crashes: IntCounter,
    /// Log lines written, by [`LOG_LEVELS`].
    logged: Vec<IntCounter>,
}

/// The levels Settee logs at, by CouchDB's names (it has no `critical`, `alert` or
/// `emergency` messages).
pub const LOG_LEVELS: [&str; 5] = ["debug", "info", "notice", "warning", "error"];

/// The process-wide statistics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Values the caller measures at the time of reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct Live {
    pub open_databases: u64,
    pub open_os_files: u64,
    pub replicator_jobs: ReplicatorJobs,
}

/// The replication scheduler's jobs by state.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicatorJobs {
    pub running: u64,
    pub pending: u64,
    pub crashed: u64,
    pub total: u64,
}

/// What a statistic holds.
#[derive(Clone, Debug)]
enum Val {
    Counter(u64),
    Gauge(i64),
    Histogram(Summary),
}

/// One statistic of the `_stats` tree.
#[derive(Clone, Debug)]
struct Stat {
    path: Vec<String>,
    /// The `type` `_stats` reports (CouchDB calls some gauges counters).
    kind: &'static str,
    desc: &'static str,
    val: Val,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            started: Instant::now(),
            requests: counter(),
            methods: METHODS.iter().map(|_| counter()).collect(),
            codes: CODES.iter().map(|_| counter()).collect(),
            request_time: Histogram::new(1000.0),
            bulk_requests: counter(),
            bulk_docs: Histogram::new(1.0),
            view_reads: counter(),
            purge_requests: counter(),
            partition_all_docs_requests: counter(),
            clients_requesting_changes: IntGauge::new("g", "g").expect("valid name"),
            database_reads: counter(),
            database_writes: counter(),
            database_purges: counter(),
            document_inserts: counter(),
            document_writes: counter(),
            local_document_writes: counter(),
            commits: counter(),
            mango_unindexed_queries: counter(),
            mango_too_many_docs_scanned: counter(),
            mango_docs_examined: counter(),
            mango_keys_examined: counter(),
            mango_results_returned: counter(),
            mango_query_time: Histogram::new(1000.0),
            indexer_changes: counter(),
            vdu_rejects: counter(),
            auth_cache_hits: counter(),
            auth_cache_misses: counter(),
            password_hashing_fast: counter(),
            password_hashing_slow: counter(),
            vdu_process_time: Histogram::new(1000.0),
            dbinfo: Histogram::new(1000.0),
            replicator_jobs_adds: counter(),
            replicator_jobs_duplicate_adds: counter(),
            replicator_jobs_removes: counter(),
            replicator_jobs_starts: counter(),
            replicator_jobs_stops: counter(),
            replicator_jobs_crashes: counter(),
            logged: LOG_LEVELS.iter().map(|_| counter()).collect(),
        }
    }

    pub fn uptime_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Counts one answered request: its method (as the client sent it), its status and
    /// how long it took.
    pub fn request(&self, method: &str, status: u16, millis: f64) {
        self.requests.inc();
        if let Some(i) = METHODS.iter().position(|m| *m == method) {
            self.methods[i].inc();
        }
        if let Some(i) = CODES.iter().position(|c| c.0 == status) {
            self.codes[i].inc();
        }
        self.request_time.record(millis);
    }

    /// Counts a log line written at `level` (one of [`LOG_LEVELS`]).
    pub fn logged(&self, level: &str) {
        if let Some(i) = LOG_LEVELS.iter().position(|l| *l == level) {
            self.logged[i].inc();
        }
    }

    fn all(&self, live: Live) -> Vec<Stat> {
        let mut out = Vec::new();
        let mut c = |path: &[&str], desc: &'static str, v: &IntCounter| {
            out.push(Stat {
                path: path.iter().map(|s| s.to_string()).collect(),
                kind: "counter",
                desc,
                val: Val::Counter(v.get()),
            })
        };
        c(
            &["couchdb", "database_reads"],
            "number of times a document was read from a database",
            &self.database_reads,
        );
        c(
            &["couchdb", "database_writes"],
            "number of times a database was changed",
            &self.database_writes,
        );
        c(
            &["couchdb", "database_purges"],
            "number of times a database was purged",
            &self.database_purges,
        );
        c(
            &["couchdb", "document_inserts"],
            "number of documents inserted",
            &self.document_inserts,
        );
        c(
            &["couchdb", "document_writes"],
            "number of document write operations",
            &self.document_writes,
        );
        c(
            &["couchdb", "local_document_writes"],
            "number of _local document write operations",
            &self.local_document_writes,
        );
        c(
            &["couchdb", "commits"],
            "number of commits performed",
            &self.commits,
        );
        c(
            &["couchdb", "httpd", "requests"],
            "number of HTTP requests",
            &self.requests,
        );
        c(
            &["couchdb", "httpd", "bulk_requests"],
            "number of bulk requests",
            &self.bulk_requests,
        );
        c(
            &["couchdb", "httpd", "view_reads"],
            "number of view reads",
            &self.view_reads,
        );
        c(
            &["couchdb", "httpd", "purge_requests"],
            "number of purge requests",
            &self.purge_requests,
        );
        c(
            &["couchdb", "httpd", "partition_all_docs_requests"],
            "number of partition HTTP _all_docs requests",
            &self.partition_all_docs_requests,
        );
        for (m, v) in METHODS.iter().zip(&self.methods) {
            let desc = METHOD_DESCS[METHODS.iter().position(|x| x == m).unwrap_or(0)];
            c(&["couchdb", "httpd_request_methods", m], desc, v);
        }
        for ((code, desc), v) in CODES.iter().zip(&self.codes) {
            c(
                &["couchdb", "httpd_status_codes", &code.to_string()],
                desc,
                v,
            );
        }
        c(
            &["mango", "unindexed_queries"],
            "number of mango queries that could not use an index",
            &self.mango_unindexed_queries,
        );
        c(
            &["mango", "too_many_docs_scanned"],
            "number of mango queries that generated an index scan warning",
            &self.mango_too_many_docs_scanned,
        );
        c(
            &["mango", "docs_examined"],
            "number of documents examined by mango queries coordinated by this node",
            &self.mango_docs_examined,
        );
        c(
            &["mango", "keys_examined"],
            "number of keys examined by mango queries coordinated by this node",
            &self.mango_keys_examined,
        );
        c(
            &["mango", "results_returned"],
            "number of rows returned by mango queries",
            &self.mango_results_returned,
        );
        c(
            &["couch_replicator", "jobs", "adds"],
            "number of jobs added to replicator scheduler",
            &self.replicator_jobs_adds,
        );
        c(
            &["couch_replicator", "jobs", "duplicate_adds"],
            "number of duplicate jobs added to replicator scheduler",
            &self.replicator_jobs_duplicate_adds,
        );
        c(
            &["couch_replicator", "jobs", "removes"],
            "number of jobs removed from replicator scheduler",
            &self.replicator_jobs_removes,
        );
        c(
            &["couch_replicator", "jobs", "starts"],
            "number of jobs started by replicator scheduler",
            &self.replicator_jobs_starts,
        );
        c(
            &["couch_replicator", "jobs", "stops"],
            "number of jobs stopped by replicator scheduler",
            &self.replicator_jobs_stops,
        );
        c(
            &["couch_replicator", "jobs", "crashes"],
            "number of job crashed noticed by replicator scheduler",
            &self.replicator_jobs_crashes,
        );
        c(
            &["couchdb", "auth_cache_hits"],
            "number of authentication cache hits",
            &self.auth_cache_hits,
        );
        c(
            &["couchdb", "auth_cache_misses"],
            "number of authentication cache misses",
            &self.auth_cache_misses,
        );
        c(
            &["couchdb", "password_hashing_fast"],
            "number of fast password hashing operations",
            &self.password_hashing_fast,
        );
        c(
            &["couchdb", "password_hashing_slow"],
            "number of slow password hashing operations",
            &self.password_hashing_slow,
        );
        c(
            &["couchdb", "query_server", "vdu_rejects"],
            "number of rejections by validate_doc_update function",
            &self.vdu_rejects,
        );
        for (level, v) in LOG_LEVELS.iter().zip(&self.logged) {
            let desc = match *level {
                "debug" => "number of logged debug messages",
                "info" => "number of logged info messages",
                "notice" => "number of logged notice messages",
                "warning" => "number of logged warning messages",
                _ => "number of logged error messages",
            };
            c(&["couch_log", "level", level], desc, v);
        }
        let mut g = |path: &[&str], kind, desc, v: i64| {
            out.push(Stat {
                path: path.iter().map(|s| s.to_string()).collect(),
                kind,
                desc,
                val: Val::Gauge(v),
            })
        };
        // CouchDB describes these three as counters (they go up and down); Prometheus
        // gets them as gauges, as CouchDB converts them.
        g(
            &["couchdb", "open_databases"],
            "counter",
            "number of open databases",
            live.open_databases as i64,
        );
        g(
            &["couchdb", "open_os_files"],
            "counter",
            "number of file descriptors CouchDB has open",
            live.open_os_files as i64,
        );
        g(
            &["couchdb", "httpd", "clients_requesting_changes"],
            "counter",
            "number of clients for continuous _changes",
            self.clients_requesting_changes.get(),
        );
        let jobs = live.replicator_jobs;
        for (name, desc, v) in [
            ("running", "replicator scheduler running jobs", jobs.running),
            ("pending", "replicator scheduler pending jobs", jobs.pending),
            ("crashed", "replicator scheduler crashed jobs", jobs.crashed),
            (
                "total",
                "total number of replicator scheduler jobs",
                jobs.total,
            ),
        ] {
            g(&["couch_replicator", "jobs", name], "gauge", desc, v as i64);
        }
        let mut h = |path: &[&str], desc, v: &Histogram| {
            out.push(Stat {
                path: path.iter().map(|s| s.to_string()).collect(),
                kind: "histogram",
                desc,
                val: Val::Histogram(v.summary()),
            })
        };
        h(
            &["couchdb", "request_time"],
            "length of a request inside CouchDB without MochiWeb",
            &self.request_time,
        );
        h(
            &["couchdb", "httpd", "bulk_docs"],
            "distribution of the number of docs in _bulk_docs requests",
            &self.bulk_docs,
        );
        h(
            &["couchdb", "query_server", "vdu_process_time"],
            "duration of validate_doc_update function calls",
            &self.vdu_process_time,
        );
        h(
            &["couchdb", "dbinfo"],
            "distribution of latencies for calls to retrieve DB info",
            &self.dbinfo,
        );
        h(
            &["mango", "query_time"],
            "length of time processing a mango query",
            &self.mango_query_time,
        );
        out
    }

    /// `/_node/{node}/_stats/{path…}`: the tree below `path`, or `null` where nothing
    /// is (as CouchDB answers).
    pub fn stats(&self, live: Live, path: &[&str]) -> Value {
        let mut root = Map::new();
        for s in self.all(live) {
            let leaf = json!({
                "value": match &s.val {
                    Val::Counter(v) => json!(v),
                    Val::Gauge(v) => json!(v),
                    Val::Histogram(h) => h.to_json(),
                },
                "type": s.kind,
                "desc": s.desc,
            });
            insert(&mut root, &s.path, leaf);
        }
        let mut at = &Value::Object(root);
        for seg in path {
            match at.get(*seg) {
                Some(v) => at = v,
                None => return Value::Null,
            }
        }
        at.clone()
    }

    /// `/_node/{node}/_prometheus`: the statistics under CouchDB's Prometheus names, then
    /// `own` (Settee's), in the text exposition format 0.0.4.
    pub fn prometheus(&self, live: Live, own: &[Sample]) -> String {
        prom::render(&self.all(live), own)
    }
}

const METHOD_DESCS: [&str; 7] = [
    "number of HTTP COPY requests",
    "number of HTTP DELETE requests",
    "number of HTTP GET requests",
    "number of HTTP HEAD requests",
    "number of HTTP OPTIONS requests",
    "number of HTTP POST requests",
    "number of HTTP PUT requests",
];

fn insert(map: &mut Map<String, Value>, path: &[String], leaf: Value) {
    match path {
        [] => {}
        [last] => {
            map.insert(last.clone(), leaf);
        }
        [first, rest @ ..] => {
            let child = map
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = child {
                insert(m, rest, leaf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_method_and_code() {
        let m = Metrics::new();
        m.request("GET", 200, 2.0);
        m.request("PUT", 201, 4.0);
        m.request("PATCH", 299, 1.0);
        let s = m.stats(Live::default(), &["couchdb"]);
        assert_eq!(s["httpd"]["requests"]["value"], 3);
        assert_eq!(s["httpd_request_methods"]["GET"]["value"], 1);
        assert_eq!(s["httpd_status_codes"]["201"]["value"], 1);
        assert_eq!(s["request_time"]["type"], "histogram");
        assert_eq!(s["request_time"]["value"]["n"], 3);
        assert_eq!(
            m.stats(Live::default(), &["couchdb", "httpd", "requests"]),
            json!({"value": 3, "type": "counter", "desc": "number of HTTP requests"})
        );
        assert_eq!(m.stats(Live::default(), &["couchdb", "nope"]), Value::Null);
    }
}
