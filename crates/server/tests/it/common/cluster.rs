//! Cluster members for the cluster test files: Settee nodes joined through a real etcd.

use super::Server;
use serde_json::{json, Value};
use settee_cluster::testing::Etcd;
use std::path::Path;
use std::time::{Duration, Instant};

pub const SECRET: (&str, &str) = ("SETTEE_CLUSTER_SECRET", "cluster-test-secret");

/// The members' names in `three_members`.
pub const NAMES: [&str; 3] = [
    "settee1@127.0.0.1",
    "settee2@127.0.0.1",
    "settee3@127.0.0.1",
];

/// The lease of `member`'s members (seconds): a member that dies or stops answering is no
/// longer running for the others within it.
pub const LEASE_TTL: u64 = 2;

/// A member named `name` on `dir`, joined to `etcd` through all its members, with a
/// `LEASE_TTL` lease so that a crash shows quickly.
pub fn member(etcd: &Etcd, name: &str, dir: &Path) -> Server {
    member_with_lease(etcd, name, dir, LEASE_TTL)
}

pub fn member_with_lease(etcd: &Etcd, name: &str, dir: &Path, lease_ttl: u64) -> Server {
    member_with(etcd, name, dir, lease_ttl, &[])
}

/// [`member_with_lease`], with more of the server's environment (`env`).
pub fn member_with(
    etcd: &Etcd,
    name: &str,
    dir: &Path,
    lease_ttl: u64,
    env: &[(&str, &str)],
) -> Server {
    let ini = dir.join("cluster.ini");
    std::fs::write(&ini, format!("[cluster]\nlease_ttl = {lease_ttl}\n")).unwrap();
    let endpoints = etcd.endpoints().join(",");
    let args = [
        "--node-name",
        name,
        "--cluster",
        &endpoints,
        "--config",
        ini.to_str().unwrap(),
    ];
    let env: Vec<(&str, &str)> = std::iter::once(SECRET).chain(env.iter().copied()).collect();
    Server::start_in_with_env(dir, &args, &env)
}

/// `_membership`'s `all_nodes` (running) and `cluster_nodes` (listed).
pub fn membership(s: &Server) -> (Value, Value) {
    let r = s.get("/_membership");
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    (v["all_nodes"].clone(), v["cluster_nodes"].clone())
}

pub fn eventually(what: &str, cond: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(20), what, cond)
}

pub fn eventually_within(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three members on `etcd` (their data directories kept, so that one can be started again
/// on its own), each seeing all three running and listed.
pub fn three_members_on(etcd: &Etcd) -> (Vec<tempfile::TempDir>, Vec<Server>) {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Server> = (0..3)
        .map(|i| member(etcd, NAMES[i], dirs[i].path()))
        .collect();
    for n in &nodes {
        eventually("three members running and listed", || {
            membership(n) == (json!(NAMES), json!(NAMES))
        });
    }
    (dirs, nodes)
}

/// One etcd and `three_members_on` it.
pub fn three_members() -> (Etcd, Vec<tempfile::TempDir>, Vec<Server>) {
    let etcd = Etcd::start(1);
    let (dirs, nodes) = three_members_on(&etcd);
    (etcd, dirs, nodes)
}

/// The database's ranges and their nodes, as `_shards` shows them on `s`.
pub fn shards(s: &Server, db: &str) -> Value {
    let r = s.get(&format!("/{db}/_shards"));
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["shards"].clone()
}

/// The ids of `db`'s `_changes` rows since `since`, asked of `s`.
pub fn changes_ids_since(s: &Server, db: &str, since: &str) -> Vec<String> {
    let r = s.get(&format!("/{db}/_changes?since={since}"));
    assert_eq!(r.status, 200, "{}", r.text);
    (r.json()["results"].as_array().unwrap().iter())
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A shard copy's name (`shards/{range}/{db}.{created}`) as one path segment.
pub fn enc(s: &str) -> String {
    s.replace('/', "%2F")
}

/// Creates user `name` through the first of `nodes` and waits until every one of them
/// knows it (`_users` is kept whole on every member, pushed from the member written).
pub fn add_user_everywhere(nodes: &[&Server], name: &str, password: &str) {
    nodes[0].add_user(name, password, &[]);
    let auth = super::basic(name, password);
    for n in nodes {
        eventually("the user known on every member", || {
            let r = n.anon("GET", "/_session", None, &[("Authorization", &auth)]);
            r.status == 200 && r.json()["userCtx"]["name"] == name
        });
    }
}

/// Writes `{"during": true}` documents `w0000`, `w0001`, … to `db`, each through the next
/// of `nodes` in turn, until `stop` or `limit` documents; every write must be acknowledged
/// (201 or 202), and its id goes into `written`. The writer of the tests that change a
/// map under load.
pub fn keep_writing(
    nodes: &[Server],
    db: &str,
    limit: usize,
    stop: &std::sync::atomic::AtomicBool,
    written: &std::sync::Mutex<Vec<String>>,
) {
    let mut i = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < limit {
        let id = format!("w{i:04}");
        let r = nodes[i % nodes.len()].put(&format!("/{db}/{id}"), r#"{"during": true}"#);
        assert!(
            matches!(r.status, 201 | 202),
            "write {id}: {} {}",
            r.status,
            r.text
        );
        written.lock().unwrap().push(id);
        i += 1;
    }
}
