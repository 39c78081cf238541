//! The node's own state on a real RocksDB: its live configuration as `/_config` changes
//! it (sections CouchDB will not change, admin passwords stored hashed, values kept in
//! memory only) and what `_stats`, `_system` and `_prometheus` report.

use settee_metrics::ReplicatorJobs;
use settee_node::Error;

mod common;
use common::fixture;

#[test]
fn configuration_changes_apply_and_refuse_as_couchdb() {
    let f = fixture();
    let node = &f.node;
    assert_eq!(
        node.set_config("log", "level", " debug ", true).unwrap(),
        ""
    );
    assert_eq!(node.config_value("log", "level").unwrap(), "debug");
    assert_eq!(
        node.set_config("log", "level", "info", false).unwrap(),
        "debug"
    );
    assert_eq!(node.delete_config("log", "level", true).unwrap(), "info");
    let unknown = node.config_value("log", "level").unwrap_err();
    assert!(matches!(unknown, Error::NotFound(r) if r == "unknown_config_value"));
    let gone = node.delete_config("log", "level", true).unwrap_err();
    assert!(matches!(gone, Error::NotFound(_)));

    // Programs to run are not changed over HTTP.
    let e = node.set_config("query_servers", "js", "/bin/sh", true);
    assert!(matches!(e, Err(Error::Forbidden(r)) if r.contains("blacklisted")));
    assert!(node.config_value("query_servers", "js").is_err());

    // A plaintext admin password is stored as a PBKDF2 hash; a hash is kept as it is.
    node.set_config("chttpd_auth", "iterations", "10", true)
        .unwrap();
    node.set_config("admins", "root", "secret", true).unwrap();
    let stored = node.config_value("admins", "root").unwrap();
    assert!(stored.starts_with("-pbkdf2"), "{stored}");
    node.set_config("admins", "other", &stored, true).unwrap();
    assert_eq!(node.config_value("admins", "other").unwrap(), stored);
}

#[tokio::test(flavor = "multi_thread")]
async fn statistics_describe_this_node() {
    let f = fixture();
    let jobs = ReplicatorJobs::default();
    let stats = f.node.stats(jobs, &[]);
    assert!(stats["couchdb"]["open_databases"]["value"]
        .as_u64()
        .is_some());
    let one = f.node.stats(jobs, &["couchdb", "open_databases"]);
    assert_eq!(one["type"], "counter");
    let system = f.node.system();
    for member in ["uptime", "memory", "run_queue", "os_proc_count", "open_fds"] {
        assert!(system.get(member).is_some(), "{member}: {system}");
    }
    let text = f.node.prometheus(jobs);
    assert!(text.contains("couchdb_uptime_seconds"));
    assert!(text.contains("settee_rocksdb_live_sst_bytes"));
    let versions = settee_node::status::versions();
    assert_eq!(versions["javascript_engine"]["name"], "quickjs-ng");
}
