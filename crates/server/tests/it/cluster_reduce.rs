//! Reductions of clustered views that the copies cannot finalize alone, each checked
//! against a single Settee holding the same documents: `_approx_count_distinct` (the
//! ranges' registers merged before they are counted), `_first` and `_last` (the ranges'
//! rows compared by key and document id), and reduce functions of external query servers
//! (Python), reduced again at the coordinator through its query server. Then writes a
//! clustered CouchDB answers per document: `_bulk_docs` with `all_or_nothing`, and
//! `_purge` when no copy of some id's range answers.

use crate::common;

use common::cluster::*;
use common::Server;
use serde_json::{json, Value};
use settee_cluster::testing::Etcd;
use std::path::Path;

fn status(r: &common::Resp, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.text);
}

/// A program's path, or `None` when it is not installed.
fn on_path(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file());
    found.map(|p| p.to_string_lossy().into_owned())
}

/// A member of `etcd` (as `common::cluster::member`) with `python` views run by `python`.
fn python_member(etcd: &Etcd, name: &str, dir: &Path, python: &str) -> Server {
    let env = [("COUCHDB_QUERY_SERVER_PYTHON", python)];
    member_with(etcd, name, dir, LEASE_TTL, &env)
}

/// Three members and a single node, all running `python` views when couchpy is installed
/// (`None` then).
fn servers() -> (
    Etcd,
    Vec<tempfile::TempDir>,
    Vec<Server>,
    Server,
    Option<String>,
) {
    let python = on_path("couchpy");
    if python.is_none() {
        eprintln!("SKIPPED (Python views): `couchpy` is not on PATH");
    }
    let etcd = Etcd::start(1);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Server> = (0..3)
        .map(|i| match &python {
            Some(p) => python_member(&etcd, NAMES[i], dirs[i].path(), p),
            None => member(&etcd, NAMES[i], dirs[i].path()),
        })
        .collect();
    for n in &nodes {
        eventually("three members running and listed", || {
            membership(n) == (json!(NAMES), json!(NAMES))
        });
    }
    let single = match &python {
        Some(p) => Server::start_with_env_ini(&[("COUCHDB_QUERY_SERVER_PYTHON", p)], ""),
        None => Server::start(),
    };
    (etcd, dirs, nodes, single, python)
}

#[test]
fn clustered_reductions() {
    let (_etcd, _dirs, nodes, single, python) = servers();
    same_data(&nodes[0], &single, "red");
    finalized_builtins(&nodes, &single);
    if python.is_some() {
        python_reduce(&nodes, &single);
    }
    all_or_nothing(&nodes, &single);
    // Last: it stops a member.
    purge_per_id(&nodes);
}

/// Creates `db` (q=4, n=2 on the cluster) on both with the same documents: keys
/// `[g, k]` repeat across documents, so across ranges.
fn same_data(cluster: &Server, single: &Server, db: &str) {
    status(&cluster.put(&format!("/{db}?q=4&n=2"), ""), 201, "create");
    status(&single.put(&format!("/{db}"), ""), 201, "create");
    let docs: Vec<Value> = (0..60)
        .map(|i| json!({"_id": format!("doc{i:03}"), "n": i, "g": i % 3, "k": i % 7}))
        .collect();
    let first = "function(doc) { if (doc.n !== undefined) emit([doc.g, doc.k], doc._id); }";
    let raw = "function(doc) { if (doc.n !== undefined) emit(doc.n % 2 ? 'B' + doc.k : 'a' + doc.k, doc.n); }";
    let design = json!({
        "_id": "_design/r",
        "views": {
            "acd": {"map": "function(doc) { if (doc.n !== undefined) emit([doc.g, doc.k, doc.n % 4], null); }",
                    "reduce": "_approx_count_distinct"},
            "first": {"map": first, "reduce": "_first"},
            "last": {"map": first, "reduce": "_last"},
            "raw_first": {"map": raw, "reduce": "_first", "options": {"collation": "raw"}},
            "stats": {"map": "function(doc) { if (doc.n !== undefined) emit([doc.g, doc.k], doc.n); }",
                      "reduce": "_stats"},
        }
    });
    let mut all = docs;
    all.push(design);
    if let Some(p) = python_design() {
        all.push(p);
    }
    let body = json!({ "docs": all }).to_string();
    status(
        &single.post(&format!("/{db}/_bulk_docs"), &body),
        201,
        "bulk",
    );
    let r = cluster.post(&format!("/{db}/_bulk_docs"), &body);
    assert!(r.status == 201 || r.status == 202, "bulk: {}", r.text);
    // Below the quorum (202), the copies a view reads may learn of some documents later.
    eventually("every document in the view's copies", || {
        let r = cluster.get(&format!("/{db}/_design/r/_view/stats"));
        r.status == 200 && r.json()["rows"][0]["value"]["count"] == 60
    });
}

fn python_design() -> Option<Value> {
    on_path("couchpy")?;
    let map = "def fun(doc):\n    if 'n' in doc:\n        yield [doc['g'], doc['k']], doc['n']";
    Some(json!({
        "_id": "_design/py",
        "language": "python",
        "views": {
            "sum": {"map": map, "reduce": "def fun(keys, values, rereduce):\n    return sum(values)"},
            "count": {"map": map,
                      "reduce": "def fun(keys, values, rereduce):\n    if rereduce:\n        return sum(values)\n    return len(values)"},
            "builtin": {"map": map, "reduce": "_count"},
        }
    }))
}

/// `path` answers the same (status and body) through `member` as on `single`.
fn same_answer(member: &Server, single: &Server, method: &str, path: &str, body: Option<&str>) {
    let path = path
        .replace('[', "%5B")
        .replace(']', "%5D")
        .replace('"', "%22")
        .replace('{', "%7B")
        .replace('}', "%7D");
    let (a, b) = (
        member.req(method, &path, body),
        single.req(method, &path, body),
    );
    assert_eq!(
        a.status, b.status,
        "{method} {path}: {} vs {}",
        a.text, b.text
    );
    assert_eq!(a.json(), b.json(), "{method} {path}");
}

/// The query strings every reducing view is asked with.
const QUERIES: &[&str] = &[
    "",
    "?group=true",
    "?group_level=1",
    "?group_level=2",
    "?group=true&descending=true",
    "?group_level=1&descending=true",
    "?start_key=[1]&end_key=[2]",
    "?start_key=[0,3]&end_key=[2,2]&group_level=1",
    "?start_key=[0,3]&end_key=[2,2]&inclusive_end=false&group=true",
    "?group=true&skip=2&limit=4",
    "?key=[1,4]",
    "?key=[1,4]&group=true",
    "?start_key=[2,9]&end_key=[1]&descending=true",
    "?start_key=[5]",
];

/// `_approx_count_distinct`, `_first`, `_last` (in ICU and raw collation) and `_stats` as on
/// a single node, through every member, for whole, grouped and ranged reductions.
fn finalized_builtins(nodes: &[Server], single: &Server) {
    for (i, view) in ["acd", "first", "last", "stats"].iter().enumerate() {
        let member = &nodes[i % nodes.len()];
        for q in QUERIES {
            let path = format!("/red/_design/r/_view/{view}{q}");
            same_answer(member, single, "GET", &path, None);
        }
        let keys = json!({"keys": [[1, 4], [0, 0], [2, 6]]}).to_string();
        let path = format!("/red/_design/r/_view/{view}?group=true");
        same_answer(member, single, "POST", &path, Some(&keys));
    }
    for q in ["", "?group=true", "?start_key=\"B3\"", "?descending=true"] {
        let path = format!("/red/_design/r/_view/raw_first{q}");
        same_answer(&nodes[1], single, "GET", &path, None);
    }
    // The merged registers count keys that several ranges hold once.
    let r = nodes[2].get("/red/_design/r/_view/acd");
    status(&r, 200, "acd");
    let estimate = r.json()["rows"][0]["value"].as_u64().unwrap();
    assert!(
        (57..=63).contains(&estimate),
        "60 distinct keys: {}",
        r.text
    );
    let r = nodes[2].get("/red/_design/r/_view/first?group=true&limit=1");
    assert_eq!(
        r.json()["rows"],
        json!([{"key": [0, 0], "value": "doc000"}])
    );
    partitioned(&nodes[1], single);
    // `/queries` too.
    let queries = json!({"queries": [{"group": true}, {"group_level": 1, "descending": true}]});
    same_answer(
        &nodes[0],
        single,
        "POST",
        "/red/_design/r/_view/acd/queries",
        Some(&queries.to_string()),
    );
}

/// A partition's reductions (its one range's copy asked) as on a single node.
fn partitioned(member: &Server, single: &Server) {
    status(
        &member.put("/part?q=3&n=2&partitioned=true", ""),
        201,
        "create",
    );
    status(&single.put("/part?partitioned=true", ""), 201, "create");
    let mut docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("p{}:d{i:02}", i % 2), "k": i % 4}))
        .collect();
    docs.push(json!({"_id": "_design/r", "views": {
        "acd": {"map": "function(doc) { emit(doc.k, null); }", "reduce": "_approx_count_distinct"},
        "last": {"map": "function(doc) { emit(doc.k, doc._id); }", "reduce": "_last"},
    }}));
    let body = json!({ "docs": docs }).to_string();
    status(&single.post("/part/_bulk_docs", &body), 201, "bulk");
    let r = member.post("/part/_bulk_docs", &body);
    assert!(r.status == 201 || r.status == 202, "bulk: {}", r.text);
    for view in ["acd", "last"] {
        for q in ["", "?group=true", "?start_key=1&end_key=2"] {
            let path = format!("/part/_partition/p1/_design/r/_view/{view}{q}");
            eventually("the partition's documents in its copy's view", || {
                let (a, b) = (member.get(&path), single.get(&path));
                a.status == 200 && a.json() == b.json()
            });
        }
    }
}

/// A Python reduce function on a clustered view answers as on a single node: the ranges'
/// reductions reduced again through the coordinator's query server.
fn python_reduce(nodes: &[Server], single: &Server) {
    for (i, view) in ["sum", "count", "builtin"].iter().enumerate() {
        let member = &nodes[i % nodes.len()];
        for q in QUERIES {
            let path = format!("/red/_design/py/_view/{view}{q}");
            same_answer(member, single, "GET", &path, None);
        }
    }
    let r = nodes[1].get("/red/_design/py/_view/sum");
    assert_eq!(
        r.json()["rows"],
        json!([{"key": null, "value": 1770}]),
        "{}",
        r.text
    );
}

/// `_bulk_docs` with `all_or_nothing` as a clustered CouchDB 3.5.2 answers it (its fabric
/// refuses it whatever `q`): 417, every document named with the revision it gives and
/// nothing written; no documents, `[]`; replicated writes ignore it.
fn all_or_nothing(nodes: &[Server], single: &Server) {
    status(&nodes[0].put("/aon?q=3&n=2", ""), 201, "create");
    status(&single.put("/aon", ""), 201, "create");
    let docs: Vec<Value> = (0..6)
        .map(|i| json!({"_id": format!("a{i}"), "i": i}))
        .collect();
    let mut with_revs = docs.clone();
    with_revs.push(json!({"_id": "b", "_rev": "1-x"}));
    with_revs.push(json!({"_id": "_local/l"}));
    with_revs.push(json!({"_id": "_design/d"}));
    let bodies = [
        json!({"all_or_nothing": true, "docs": with_revs}),
        json!({"all_or_nothing": true, "docs": []}),
        json!({"all_or_nothing": false, "docs": [{"_id": "c"}]}),
        json!({"all_or_nothing": true, "new_edits": false,
               "docs": [{"_id": "r", "_rev": "1-abc"}]}),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let member = &nodes[i % nodes.len()];
        same_answer(
            member,
            single,
            "POST",
            "/aon/_bulk_docs",
            Some(&body.to_string()),
        );
    }
    let r = nodes[1].post("/aon/_bulk_docs", &bodies[0].to_string());
    assert_eq!(
        r.json()[6],
        json!({"id": "b", "rev": "1-x", "error": "not_implemented",
        "reason": "all_or_nothing is not supported"})
    );
    // Nothing of the refused request was written; the others were.
    for n in nodes {
        for id in ["a0", "a5", "b", "_local/l", "_design/d"] {
            status(&n.get(&format!("/aon/{id}")), 404, id);
        }
        for id in ["c", "r"] {
            status(&n.get(&format!("/aon/{id}")), 200, id);
        }
    }
}

/// `_purge` answers each id on its own, as CouchDB's `fabric_doc_purge`: with the only copy
/// of some ranges stopped, their ids get `{"error": "error", "reason":
/// "internal_server_error"}` and the request 500, the other ids are purged.
fn purge_per_id(nodes: &[Server]) {
    status(&nodes[0].put("/pur?q=3&n=1", ""), 201, "create");
    let docs: Vec<Value> = (0..12).map(|i| json!({"_id": format!("p{i}")})).collect();
    let r = nodes[0].post("/pur/_bulk_docs", &json!({ "docs": docs }).to_string());
    status(&r, 201, "bulk");
    let revs: Vec<(String, String)> = (r.json().as_array().unwrap().iter())
        .map(|e| {
            (
                e["id"].as_str().unwrap().into(),
                e["rev"].as_str().unwrap().into(),
            )
        })
        .collect();
    let holder = |id: &str| {
        let s = nodes[0].get(&format!("/pur/_shards/{id}")).json();
        let name = s["nodes"][0].as_str().unwrap().to_owned();
        NAMES.iter().position(|n| *n == name).unwrap()
    };
    let stopped = holder("p0");
    let (down, up): (Vec<_>, Vec<_>) = revs.iter().partition(|(id, _)| holder(id) == stopped);
    assert!(!up.is_empty(), "every id in the stopped member's ranges");
    let absent = (0..)
        .map(|i| format!("x{i}"))
        .find(|id| holder(id) != stopped)
        .unwrap();
    let coordinator = &nodes[(stopped + 1) % nodes.len()];
    nodes[stopped].kill9();

    let body: serde_json::Map<String, Value> = (revs.iter())
        .map(|(id, rev)| (id.clone(), json!([rev])))
        .collect();
    let r = coordinator.post("/pur/_purge", &Value::Object(body).to_string());
    status(&r, 500, "purge with a range down");
    let purged = &r.json()["purged"];
    assert_eq!(r.json()["purge_seq"], Value::Null);
    for (id, rev) in &up {
        assert_eq!(purged[id], json!([rev]), "{id}: {}", r.text);
    }
    for (id, _) in &down {
        let error = json!({"error": "error", "reason": "internal_server_error"});
        assert_eq!(purged[id], error, "{id}: {}", r.text);
    }
    // Ids of running copies only: 201; the purged ones are gone.
    let (id, rev) = up[0];
    let again = json!({ id.as_str(): [rev], absent.as_str(): ["1-abc"] }).to_string();
    let r = coordinator.post("/pur/_purge", &again);
    status(&r, 201, "purge of ids on running copies");
    assert_eq!(
        r.json()["purged"],
        json!({id.as_str(): [], absent.as_str(): []})
    );
    status(&coordinator.get(&format!("/pur/{id}")), 404, "purged");
}
