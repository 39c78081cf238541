//! Node statistics, status and logs over real HTTP: `_stats`, `_system`, `_prometheus`,
//! `_versions`, `_membership`, `_up`, the access log and its runtime level,
//! `X-Couch-Request-ID`, and compactions in `_active_tasks`.

use crate::common;
use common::Server;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The value of the statistic at `path` below `/_node/_local/_stats`.
fn stat(s: &Server, path: &str) -> Value {
    let r = s.get(&format!("/_node/_local/_stats/{path}"));
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["value"].clone()
}

fn count(s: &Server, path: &str) -> u64 {
    stat(s, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not a count"))
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

#[test]
fn stats_tree_has_couchdb_shapes() {
    let s = Server::start();
    let all = s.get("/_node/_local/_stats");
    assert_eq!(all.status, 200);
    let all = all.json();
    let by_name = s.get("/_node/nonode@nohost/_stats").json();
    assert!(by_name["couchdb"]["httpd"]["requests"]["value"].is_u64());
    for group in ["httpd", "httpd_request_methods", "httpd_status_codes"] {
        assert!(all["couchdb"][group].is_object(), "couchdb.{group}");
    }
    assert_eq!(
        s.get("/_node/_local/_stats/couchdb/httpd/view_reads")
            .json(),
        json!({"value": 0, "type": "counter", "desc": "number of view reads"})
    );
    for (path, kind) in [
        ("couchdb/httpd/requests", "counter"),
        ("couchdb/httpd/bulk_requests", "counter"),
        ("couchdb/httpd/clients_requesting_changes", "counter"),
        ("couchdb/httpd_request_methods/GET", "counter"),
        ("couchdb/httpd_status_codes/200", "counter"),
        ("couchdb/database_reads", "counter"),
        ("couchdb/database_writes", "counter"),
        ("couchdb/document_inserts", "counter"),
        ("couchdb/document_writes", "counter"),
        ("couchdb/open_databases", "counter"),
        ("couchdb/open_os_files", "counter"),
        ("couchdb/request_time", "histogram"),
        ("couchdb/httpd/bulk_docs", "histogram"),
        ("mango/query_time", "histogram"),
    ] {
        let leaf = s.get(&format!("/_node/_local/_stats/{path}")).json();
        assert_eq!(keys(&leaf), ["value", "type", "desc"], "{path}");
        assert_eq!(leaf["type"], kind, "{path}");
        assert!(!leaf["desc"].as_str().unwrap().is_empty(), "{path}");
    }
    let time = stat(&s, "couchdb/request_time");
    assert_eq!(
        keys(&time),
        [
            "min",
            "max",
            "arithmetic_mean",
            "geometric_mean",
            "harmonic_mean",
            "median",
            "variance",
            "standard_deviation",
            "skewness",
            "kurtosis",
            "percentile",
            "histogram",
            "n"
        ]
    );
    let percentiles: Vec<u64> = time["percentile"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_u64().unwrap())
        .collect();
    assert_eq!(percentiles, [50, 75, 90, 95, 99, 999]);
    assert!(time["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b.as_array().unwrap().len() == 2));
    // The requests above were answered before this one read the statistics.
    assert!(time["n"].as_u64().unwrap() >= 10, "{time}");
    // An unknown path is `null`, as CouchDB answers it.
    let none = s.get("/_node/_local/_stats/couchdb/no_such_stat");
    assert_eq!((none.status, none.text.trim()), (200, "null"));
    assert_eq!(
        s.get("/_node/_local/_stats/nothing/here").json(),
        Value::Null
    );
    assert_eq!(s.post("/_node/_local/_stats", "{}").status, 405);
    assert_eq!(
        s.get("/_node/other@host/_stats").json(),
        json!({"error": "not_found", "reason": "no such node: other@host"})
    );
    assert_eq!(
        s.req_with("GET", "/_node/_local/_stats", None, &[], false)
            .status,
        401
    );
}

#[test]
fn counters_move_with_requests() {
    let s = Server::start();
    s.create_db("db");
    let before = |p: &str| count(&s, p);
    let (requests, gets, puts, created, reads, writes, inserts, bulk, views) = (
        before("couchdb/httpd/requests"),
        before("couchdb/httpd_request_methods/GET"),
        before("couchdb/httpd_request_methods/PUT"),
        before("couchdb/httpd_status_codes/201"),
        before("couchdb/database_reads"),
        before("couchdb/document_writes"),
        before("couchdb/document_inserts"),
        before("couchdb/httpd/bulk_requests"),
        before("couchdb/httpd/view_reads"),
    );
    let bulk_n = stat(&s, "couchdb/httpd/bulk_docs")["n"].as_u64().unwrap();
    let docs = json!({"docs": [{"_id": "a", "n": 1}, {"_id": "b", "n": 2}, {"_id": "c", "n": 3}]});
    assert_eq!(s.post("/db/_bulk_docs", &docs.to_string()).status, 201);
    let a = s.get("/db/a").json();
    let r = s.put("/db/a", &json!({"_rev": a["_rev"], "n": 10}).to_string());
    assert_eq!(r.status, 201);
    assert_eq!(s.get("/db/missing").status, 404);
    let ddoc = json!({"views": {"n": {"map": "function(d) { emit(d.n, null); }"}}});
    assert_eq!(s.put("/db/_design/d", &ddoc.to_string()).status, 201);
    assert_eq!(s.get("/db/_design/d/_view/n").status, 200);

    assert!(count(&s, "couchdb/httpd/requests") >= requests + 7);
    assert!(count(&s, "couchdb/httpd_request_methods/GET") >= gets + 3);
    assert!(count(&s, "couchdb/httpd_request_methods/PUT") >= puts + 2);
    assert!(count(&s, "couchdb/httpd_status_codes/201") >= created + 3);
    assert!(count(&s, "couchdb/httpd_status_codes/404") >= 1);
    assert!(count(&s, "couchdb/database_reads") > reads);
    assert_eq!(count(&s, "couchdb/document_writes"), writes + 5);
    assert_eq!(count(&s, "couchdb/document_inserts"), inserts + 4);
    assert_eq!(count(&s, "couchdb/httpd/bulk_requests"), bulk + 1);
    assert_eq!(count(&s, "couchdb/httpd/view_reads"), views + 1);
    let bulk_docs = stat(&s, "couchdb/httpd/bulk_docs");
    assert_eq!(bulk_docs["n"], bulk_n + 1);
    assert_eq!(bulk_docs["max"], 3);
    // _users, _replicator and db.
    assert_eq!(count(&s, "couchdb/open_databases"), 3);
    assert!(count(&s, "couchdb/open_os_files") > 3);

    let found = s.post("/db/_find", r#"{"selector": {"n": {"$gt": 1}}}"#);
    assert_eq!(found.status, 200, "{}", found.text);
    assert!(count(&s, "mango/unindexed_queries") >= 1);
    assert!(count(&s, "mango/docs_examined") >= 3);
    assert_eq!(count(&s, "mango/results_returned"), 3);
    assert_eq!(stat(&s, "mango/query_time")["n"], 1);

    // Validation functions: their time, and the writes they refuse.
    let vdu = json!({"validate_doc_update":
        "function(n) { if (n.bad) throw({forbidden: 'no'}); }"});
    assert_eq!(s.put("/db/_design/v", &vdu.to_string()).status, 201);
    let (rejects, vdu_n) = (
        count(&s, "couchdb/query_server/vdu_rejects"),
        stat(&s, "couchdb/query_server/vdu_process_time")["n"]
            .as_u64()
            .unwrap(),
    );
    assert_eq!(s.put("/db/ok", r#"{"bad": false}"#).status, 201);
    assert_eq!(s.put("/db/no", r#"{"bad": true}"#).status, 403);
    assert_eq!(count(&s, "couchdb/query_server/vdu_rejects"), rejects + 1);
    let vdu_time = stat(&s, "couchdb/query_server/vdu_process_time");
    assert_eq!(vdu_time["n"], vdu_n + 2);
    let infos = stat(&s, "couchdb/dbinfo")["n"].as_u64().unwrap();
    assert_eq!(s.get("/db").status, 200);
    assert_eq!(stat(&s, "couchdb/dbinfo")["n"], infos + 1);

    // A one-shot replication is added to the scheduler and started.
    let (adds, starts) = (
        count(&s, "couch_replicator/jobs/adds"),
        count(&s, "couch_replicator/jobs/starts"),
    );
    let r = s.post(
        "/_replicate",
        r#"{"source": "db", "target": "db2", "create_target": true}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(count(&s, "couch_replicator/jobs/adds"), adds + 1);
    assert_eq!(count(&s, "couch_replicator/jobs/starts"), starts + 1);
    let jobs = s.get("/_node/_local/_stats/couch_replicator/jobs").json();
    for gauge in ["running", "pending", "crashed", "total"] {
        assert_eq!(jobs[gauge]["type"], "gauge", "{gauge}");
    }
}

#[test]
fn system_versions_membership_and_up() {
    let s = Server::start();
    let sys = s.get("/_node/_local/_system");
    assert_eq!(sys.status, 200);
    let sys = sys.json();
    assert_eq!(
        keys(&sys),
        [
            "uptime",
            "memory",
            "run_queue",
            "context_switches",
            "io_input",
            "io_output",
            "os_proc_count",
            "process_count",
            "internal_replication_jobs",
            "distribution",
            "thread_count",
            "open_fds"
        ]
    );
    assert_eq!(
        keys(&sys["memory"]),
        [
            "rss",
            "rss_peak",
            "virtual",
            "storage_block_cache",
            "storage_memtables"
        ]
    );
    for n in ["thread_count", "open_fds", "process_count", "io_output"] {
        assert!(sys[n].as_u64().unwrap() > 0, "{n}: {sys}");
    }
    assert!(sys["memory"]["rss"].as_u64().unwrap() > 1 << 20);
    assert_eq!(sys["distribution"], json!({}));
    assert_eq!(s.put("/_node/_local/_system", "{}").status, 405);

    let v = s.get("/_node/_local/_versions").json();
    assert_eq!(keys(&v), ["collation_driver", "javascript_engine"]);
    assert_eq!(
        keys(&v["collation_driver"]),
        ["name", "library_version", "collation_algorithm_version"]
    );
    assert_eq!(v["javascript_engine"]["name"], "quickjs-ng");
    assert_eq!(s.post("/_node/_local/_versions", "{}").status, 405);

    assert_eq!(
        s.get("/_membership").json(),
        json!({"all_nodes": ["nonode@nohost"], "cluster_nodes": ["nonode@nohost"]})
    );
    let up = s.req_with("GET", "/_up", None, &[], false);
    assert_eq!(
        (up.status, up.json()),
        (200, json!({"status": "ok", "seeds": {}}))
    );
}

/// The samples of a Prometheus scrape, checking every line is one the format allows.
fn scrape(text: &str) -> prometheus_parse::Scrape {
    for line in text.lines().filter(|l| !l.is_empty()) {
        let parsed = prometheus_parse::LineInfo::parse(line);
        let ok = if line.starts_with('#') {
            !matches!(parsed, prometheus_parse::LineInfo::Sample { .. })
        } else {
            matches!(parsed, prometheus_parse::LineInfo::Sample { .. })
        };
        assert!(ok, "not a Prometheus text line: {line}");
    }
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

fn sample<'a>(
    scrape: &'a prometheus_parse::Scrape,
    name: &str,
    label: Option<(&str, &str)>,
) -> &'a prometheus_parse::Value {
    &scrape
        .samples
        .iter()
        .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .unwrap_or_else(|| panic!("no sample {name} {label:?}"))
        .value
}

fn scalar(v: &prometheus_parse::Value) -> f64 {
    use prometheus_parse::Value::*;
    match v {
        Counter(x) | Gauge(x) | Untyped(x) => *x,
        other => panic!("not a scalar: {other:?}"),
    }
}

#[test]
fn prometheus_text_parses_with_couchdb_names() {
    let s = Server::start();
    s.create_db("db");
    let docs: Vec<Value> = (0..50)
        .map(|i| json!({"_id": format!("d{i}"), "n": i}))
        .collect();
    let r = s.post("/db/_bulk_docs", &json!({"docs": docs}).to_string());
    assert_eq!(r.status, 201);
    let ddoc = json!({"views": {"n": {"map": "function(d) { emit(d.n, null); }"}}});
    assert_eq!(s.put("/db/_design/d", &ddoc.to_string()).status, 201);
    assert_eq!(s.get("/db/_design/d/_view/n?limit=1").status, 200);
    assert_eq!(s.get("/db/d1").status, 200);

    let r = s.get("/_node/_local/_prometheus");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; version=2.0"));
    let text = r.text;
    let p = scrape(&text);
    use prometheus_parse::Value::*;
    assert!(matches!(sample(&p, "couchdb_httpd_requests_total", None), Counter(n) if *n >= 5.0));
    assert!(matches!(
        sample(&p, "couchdb_httpd_request_methods", Some(("method", "PUT"))),
        Counter(n) if *n >= 2.0
    ));
    assert!(matches!(
        sample(&p, "couchdb_httpd_status_codes", Some(("code", "201"))),
        Counter(n) if *n >= 3.0
    ));
    assert!(matches!(sample(&p, "couchdb_open_databases", None), Gauge(n) if *n == 3.0));
    assert!(matches!(
        sample(&p, "couchdb_open_os_files", None),
        Gauge(_)
    ));
    assert!(matches!(sample(&p, "couchdb_document_writes_total", None), Counter(n) if *n >= 51.0));
    assert!(matches!(sample(&p, "couchdb_httpd_view_reads_total", None), Counter(n) if *n == 1.0));
    assert!(matches!(
        sample(&p, "couchdb_mango_docs_examined_total", None),
        Counter(_)
    ));
    match sample(&p, "couchdb_request_time_seconds", None) {
        Summary(qs) => {
            let quantiles: Vec<f64> = qs.iter().map(|q| q.quantile).collect();
            assert_eq!(quantiles, [0.5, 0.75, 0.9, 0.95, 0.99, 0.999]);
            assert!(qs.iter().all(|q| q.count > 0.0 && q.count < 60.0), "{qs:?}");
        }
        other => panic!("request_time is {other:?}"),
    }
    assert!(scalar(sample(&p, "couchdb_request_time_seconds_count", None)) >= 5.0);
    assert!(scalar(sample(&p, "couchdb_request_time_seconds_sum", None)) > 0.0);
    assert!(matches!(
        sample(&p, "couchdb_uptime_seconds", None),
        Counter(_)
    ));
    assert!(matches!(
        sample(&p, "couchdb_membership", Some(("nodes", "cluster_nodes"))),
        Gauge(n) if *n == 1.0
    ));
    // Settee's own.
    assert!(matches!(sample(&p, "settee_indexer_changes_total", None), Counter(n) if *n >= 50.0));
    assert!(matches!(
        sample(&p, "settee_indexer_pending_changes", None),
        Gauge(_)
    ));
    assert!(matches!(sample(&p, "settee_rocksdb_wal_syncs_total", None), Counter(n) if *n >= 2.0));
    assert!(matches!(
        sample(&p, "settee_rocksdb_pending_compaction_bytes", None),
        Gauge(_)
    ));
    // (Reads served from memtables touch no block: these may still be 0.)
    for name in [
        "settee_rocksdb_block_cache_hits_total",
        "settee_rocksdb_block_cache_misses_total",
    ] {
        assert!(matches!(sample(&p, name, None), Counter(_)), "{name}");
    }
    assert!(scalar(sample(&p, "settee_process_resident_memory_bytes", None)) > 0.0);
    // Each family is described once.
    for name in ["couchdb_httpd_status_codes", "couchdb_request_time_seconds"] {
        let types = text
            .lines()
            .filter(|l| l.starts_with(&format!("# TYPE {name} ")))
            .count();
        assert_eq!(types, 1, "{name}");
    }
    assert_eq!(s.post("/_node/_local/_prometheus", "{}").status, 405);
}

/// Waits (bounded) until the log holds a line containing `needle`; returns that line.
fn log_line(log: &std::path::Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(needle)) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no line with {needle} in\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn request_id(r: &common::Resp) -> String {
    let id = r.header("x-couch-request-id").expect("X-Couch-Request-ID");
    assert!(
        id.len() == 10 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    id.to_string()
}

#[test]
fn access_log_request_ids_and_runtime_level() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("settee.log");
    let s = Server::start_logged(&dir.path().join("data"), &[], &log);

    // A client's id that chttpd would not use ('/' is not among its characters) is
    // replaced: every answer carries a fresh one, errors included.
    let r = s.req_with(
        "GET",
        "/_up?x=1",
        None,
        &[("x-couch-request-id", "mine/1")],
        true,
    );
    let id = request_id(&r);
    assert_ne!(id, "mine/1");
    assert_ne!(request_id(&s.get("/nope")), id);
    request_id(&s.req_with("GET", "/_all_dbs", None, &[], false));

    let line = log_line(&log, &format!(" {id} "));
    let shape = regex::Regex::new(&format!(
        r"^\[notice\] \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{6}}Z nonode@nohost <0\.\d+\.0> {id} {host} 127\.0\.0\.1 admin GET /_up\?x=1 200 ok \d+$",
        host = regex::escape(s.addr()),
    ))
    .unwrap();
    assert!(shape.is_match(&line), "{line}");
    let anon = log_line(&log, " GET /_all_dbs 401 ok ");
    assert!(anon.contains(" 127.0.0.1 undefined GET "), "{anon}");
    // Written lines are counted by level.
    assert!(count(&s, "couch_log/level/notice") >= 3);

    // `[log] level` applies at once: at `error` no access line is written ...
    let old = s.put("/_node/_local/_config/log/level", r#""error""#);
    assert_eq!(old.status, 200);
    let quiet = request_id(&s.get("/_up?quiet"));
    // ... and at `notice` it is again (the line of the request that set it, too).
    let set = s.put("/_node/_local/_config/log/level", r#""notice""#);
    assert_eq!(set.json(), json!("error"));
    log_line(&log, &format!(" {} ", request_id(&set)));
    let loud = request_id(&s.get("/_up?loud"));
    log_line(&log, &format!(" {loud} "));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(&quiet), "{text}");
    assert!(!text.contains("GET /_up?quiet"), "{text}");
    // `notice` hides `debug` and `info` events.
    let after_notice = text.split(&request_id(&set)).nth(1).unwrap();
    assert!(
        after_notice
            .lines()
            .all(|l| !l.starts_with("[debug]") && !l.starts_with("[info]")),
        "{after_notice}"
    );
}

/// Polls `_active_tasks` while `start` runs a compaction, until an entry of `kind` shows
/// up or the compaction is over (`running` says so); the entries seen.
fn watch_tasks(s: &Server, kind: &str, running: &dyn Fn() -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let tasks = s.get("/_active_tasks").json();
        seen.extend(
            tasks
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["type"] == kind)
                .cloned(),
        );
        if !seen.is_empty() || !running() || Instant::now() > deadline {
            return seen;
        }
    }
}

fn insert_docs(s: &Server, db: &str, from: usize, n: usize) {
    for chunk in (from..from + n).collect::<Vec<_>>().chunks(5000) {
        let docs: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"_id": format!("doc{i:07}"), "n": i, "pad": "x".repeat(100)}))
            .collect();
        let r = s.post(
            &format!("/{db}/_bulk_docs"),
            &json!({"docs": docs}).to_string(),
        );
        assert_eq!(r.status, 201);
    }
}

#[test]
fn database_compaction_in_active_tasks() {
    let s = Server::start();
    s.create_db("big");
    let mut total = 0;
    // A compaction fast enough to finish between two polls is tried again on more data.
    let seen = loop {
        insert_docs(&s, "big", total, 20_000);
        total += 20_000;
        assert_eq!(s.post("/big/_compact", "{}").status, 202);
        let running = || s.get("/big").json()["compact_running"] == true;
        let seen = watch_tasks(&s, "database_compaction", &running);
        if !seen.is_empty() || total >= 100_000 {
            break seen;
        }
    };
    let t = seen.first().expect("a database_compaction task was seen");
    assert_eq!(
        keys(t),
        [
            "changes_done",
            "database",
            "node",
            "phase",
            "pid",
            "process_status",
            "progress",
            "retry",
            "started_on",
            "total_changes",
            "type",
            "updated_on"
        ]
    );
    assert_eq!(t["database"], "big");
    assert_eq!(t["node"], "nonode@nohost");
    assert!(["document_copy", "attachments", "storage_compaction"]
        .contains(&t["phase"].as_str().unwrap()));
    assert!(t["progress"].as_u64().unwrap() <= 100);
    assert!(t["changes_done"].as_u64().unwrap() <= t["total_changes"].as_u64().unwrap());
    assert!(t["updated_on"].as_u64().unwrap() >= t["started_on"].as_u64().unwrap());
    // It goes when the compaction ends.
    let deadline = Instant::now() + Duration::from_secs(120);
    while s.get("/big").json()["compact_running"] == true {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = s.get("/_active_tasks").json();
    assert!(left
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["type"] != "database_compaction"));
}

#[test]
fn view_compaction_in_active_tasks() {
    let s = Server::start();
    s.create_db("v");
    let ddoc = json!({"views": {
        "a": {"map": "function(d) { emit(d.n, d.pad); }"},
        "b": {"map": "function(d) { emit(d._id, 1); }", "reduce": "_count"},
    }});
    assert_eq!(s.put("/v/_design/d", &ddoc.to_string()).status, 201);
    let mut total = 0;
    let seen = loop {
        insert_docs(&s, "v", total, 20_000);
        total += 20_000;
        assert_eq!(s.get("/v/_design/d/_view/b").status, 200);
        assert_eq!(s.post("/v/_compact/d", "{}").status, 202);
        let running =
            || s.get("/v/_design/d/_info").json()["view_index"]["compact_running"] == true;
        let seen = watch_tasks(&s, "view_compaction", &running);
        if !seen.is_empty() || total >= 100_000 {
            break seen;
        }
    };
    let t = seen.first().expect("a view_compaction task was seen");
    assert_eq!(
        keys(t),
        [
            "changes_done",
            "database",
            "design_document",
            "node",
            "pid",
            "process_status",
            "progress",
            "started_on",
            "total_changes",
            "updated_on",
            "phase",
            "view",
            "type"
        ]
    );
    assert_eq!(t["database"], "v");
    assert_eq!(t["design_document"], "_design/d");
    assert_eq!(t["phase"], "view");
    assert!(t["view"].as_u64().unwrap() < 2);
    assert_eq!(t["total_changes"], 2 * total as u64);
    assert!(t["progress"].as_u64().unwrap() <= 100);
}
