//! The node's own state on a real RocksDB: its live configuration as `/_config` changes
//! it (sections CouchDB will not change, admin passwords stored hashed, values kept in
//! memory only), what `_stats`, `_system` and `_prometheus` report, and its users: server
//! admins and `_users` documents logging in, and session cookies naming them.

use serde_json::json;
use settee_metrics::ReplicatorJobs;
use settee_node::dbs::CreateDb;
use settee_node::Error;

use crate::common;
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

#[tokio::test(flavor = "multi_thread")]
async fn users_log_in_and_sessions_name_them() {
    let f = fixture();
    let (node, fabric) = (&f.node, f.fabric());
    node.set_config("chttpd_auth", "iterations", "10", true)
        .unwrap();
    node.set_config("admins", "root", "secret", true).unwrap();
    let login = |name: &str, password: &str| {
        tokio::task::block_in_place(|| node.login(name, password, "127.0.0.1")).unwrap()
    };
    let (root, salt) = login("root", "secret").expect("the admin");
    assert_eq!(root.name.as_deref(), Some("root"));
    assert!(root.roles.contains(&"_admin".to_string()));
    assert!(login("root", "wrong").is_none());
    assert!(login("nobody", "secret").is_none());

    // A user document in `_users`, its password hashed by the write path.
    tokio::task::block_in_place(|| fabric.create_db("_users", CreateDb::default())).unwrap();
    let bob = json!({"_id": "org.couchdb.user:bob", "type": "user", "name": "bob",
        "roles": ["reader"], "password": "pw"});
    let doc = settee_core::parse_doc(bob).unwrap();
    fabric
        .update_doc("_users", &root, doc, Default::default())
        .await
        .unwrap();
    let (user, _) = login("bob", "pw").expect("bob");
    assert_eq!(user.roles, ["reader"]);

    // A session cookie opened for a user names them; a malformed one is a 400.
    let set_cookie = node.session_cookie("root", &salt).unwrap();
    let value = set_cookie
        .strip_prefix("AuthSession=")
        .and_then(|v| v.split(';').next())
        .unwrap();
    let session = tokio::task::block_in_place(|| node.session(value)).unwrap();
    assert_eq!(session.unwrap().user.name.as_deref(), Some("root"));
    assert!(matches!(node.session("%%%"), Err(Error::BadRequest(_))));
    assert!(node.cleared_session_cookie().starts_with("AuthSession=;"));
}
