//! Views in languages other than JavaScript, through external query servers, over real
//! HTTP: couchpy (PyPI `CouchDB`) against the same views in JavaScript, and a scripted fake
//! server (`crates/queryserver/tests/fixtures/fake_qs.py`) that crashes, hangs or answers
//! garbage on request.

use crate::common;
use common::Server;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const FAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../queryserver/tests/fixtures/fake_qs.py"
);

/// The Python query servers these tests run: couchpy (PyPI `CouchDB`) and Settee's own
/// (`pip install ./python`).
const COUCHPY: &str = "couchpy";
const SETTEE_QS: &str = "settee-query-server";

/// A program's path, or `None` (and the reason printed) when it is not installed.
fn on_path(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!(
            "SKIPPED: `{program}` is not on PATH (pip install -r tests/clients/requirements.txt \
             ./python)"
        );
    }
    found.map(|p| p.to_string_lossy().into_owned())
}

/// A server running `python` views with `program`.
fn python_server_with(program: &str) -> Option<Server> {
    let command = on_path(program)?;
    Some(Server::start_with_env_ini(
        &[("COUCHDB_QUERY_SERVER_PYTHON", &command)],
        "",
    ))
}

fn python_server() -> Option<Server> {
    python_server_with(COUCHPY)
}

fn fake_server(timeout_ms: u64) -> Server {
    Server::start_with_ini(&format!(
        "[query_servers]\nfake = python3 {FAKE}\n\n[couchdb]\nos_process_timeout = {timeout_ms}\n"
    ))
}

fn bulk(s: &Server, db: &str, docs: Vec<Value>) {
    let r = s.post(
        &format!("/{db}/_bulk_docs"),
        &json!({ "docs": docs }).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
}

fn rows(s: &Server, path: &str) -> Value {
    let path = path
        .replace('[', "%5B")
        .replace(']', "%5D")
        .replace('"', "%22")
        .replace('{', "%7B")
        .replace('}', "%7D");
    let r = s.get(&path);
    assert_eq!(r.status, 200, "{path}: {}", r.text);
    r.json()["rows"].clone()
}

/// The server's child processes (pid, command name).
fn children(s: &Server) -> Vec<(u32, String)> {
    let parent = s.pid();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after the last ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid: u32 = tail
            .split_whitespace()
            .nth(1)
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        if ppid == parent {
            let comm = head.split_once('(').map_or("", |x| x.1).to_owned();
            out.push((pid, comm));
        }
    }
    out
}

fn wait_for(mut ok: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ok()
}

fn score_docs(range: std::ops::Range<usize>) -> Vec<Value> {
    range
        .map(|i| {
            let tag = ["a", "b", "c"][i % 3];
            json!({"_id": format!("d{i:04}"), "n": i % 17, "tag": tag,
                   "name": format!("doc {i}")})
        })
        .collect()
}

const JS: &str = r#"{
  "views": {
    "all": {"map": "function(doc) { if (doc.n !== undefined) emit([doc.tag, doc.n], doc.n); }"},
    "sum": {"map": "function(doc) { if (doc.n !== undefined) emit([doc.tag, doc.n], doc.n); }",
            "reduce": "_sum"},
    "red": {"map": "function(doc) { if (doc.n !== undefined) emit([doc.tag, doc.n], doc.n); }",
            "reduce": "function(keys, values, rereduce) { return sum(values); }"}
  }
}"#;

fn python_ddoc() -> String {
    let map = "def fun(doc):\n    if 'n' in doc:\n        yield [doc['tag'], doc['n']], doc['n']";
    json!({
        "language": "python",
        "views": {
            "all": {"map": map},
            "sum": {"map": map, "reduce": "_sum"},
            "red": {"map": map, "reduce": "def fun(keys, values, rereduce):\n    return sum(values)"},
        }
    })
    .to_string()
}

const QUERIES: &[&str] = &[
    "all",
    "all?descending=true&limit=7&skip=3",
    "all?startkey=[\"b\"]&endkey=[\"b\",{}]",
    "sum",
    "sum?group=true",
    "sum?group_level=1",
    "sum?reduce=false&limit=5",
    "red",
    "red?group_level=1",
    "red?group=true&startkey=[\"a\",5]&endkey=[\"c\",3]",
];

fn same_rows(s: &Server) {
    for q in QUERIES {
        let js = rows(s, &format!("/db/_design/js/_view/{q}"));
        let py = rows(s, &format!("/db/_design/py/_view/{q}"));
        assert_eq!(js, py, "{q}");
        assert!(!js.as_array().unwrap().is_empty(), "{q}");
    }
}

#[test]
fn python_views_answer_as_the_same_views_in_javascript() {
    for program in [COUCHPY, SETTEE_QS] {
        if let Some(s) = python_server_with(program) {
            same_as_javascript(&s);
        }
    }
}

fn same_as_javascript(s: &Server) {
    s.create_db("db");
    bulk(s, "db", score_docs(0..600));
    assert_eq!(s.put("/db/_design/js", JS).status, 201);
    assert_eq!(s.put("/db/_design/py", &python_ddoc()).status, 201);
    same_rows(s);
    assert_eq!(
        rows(s, "/db/_design/py/_view/sum"),
        json!([{"key": null, "value": (0..600).map(|i| i % 17).sum::<usize>()}])
    );

    // Incremental: edits, deletions, new documents.
    let mut changed = Vec::new();
    for i in (0..600).step_by(7) {
        let id = format!("d{i:04}");
        let mut doc = s.get(&format!("/db/{id}")).json();
        if i % 2 == 0 {
            doc["_deleted"] = json!(true);
        } else {
            doc["n"] = json!(100 + i);
        }
        changed.push(doc);
    }
    bulk(s, "db", changed);
    bulk(s, "db", score_docs(600..700));
    same_rows(s);
    let info = s.get("/db/_design/py/_info").json();
    assert_eq!(info["view_index"]["language"], "python");
}

#[test]
fn a_python_map_that_raises_skips_the_document() {
    let Some(s) = python_server() else { return };
    s.create_db("db");
    bulk(
        &s,
        "db",
        (0..5)
            .map(|i| json!({"_id": format!("d{i}"), "n": i}))
            .collect(),
    );
    let ddoc = json!({"language": "python", "views": {"v": {
        "map": "def fun(doc):\n    yield 12 // doc['n'], doc['_id']"
    }}});
    assert_eq!(s.put("/db/_design/py", &ddoc.to_string()).status, 201);
    let got = rows(&s, "/db/_design/py/_view/v");
    let ids: Vec<&str> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["d4", "d3", "d2", "d1"],
        "d0 divides by zero and emits nothing"
    );
}

#[test]
fn unknown_languages_fail_the_query_not_the_save() {
    let s = fake_server(5000);
    s.create_db("db");
    let ddoc = json!({"language": "cobol", "views": {"v": {"map": "MOVE 1 TO X"}}});
    assert_eq!(s.put("/db/_design/c", &ddoc.to_string()).status, 201);
    let r = s.get("/db/_design/c/_view/v");
    assert_eq!(r.status, 500, "{}", r.text);
    let body = r.json();
    assert_eq!(
        body,
        json!({"error": "unknown_query_language", "reason": "cobol", "ref": body["ref"]})
    );
}

/// A query server that crashes, hangs or answers garbage fails the query with
/// `os_process_error`, is killed and replaced, and the view works once the cause is gone.
#[test]
fn broken_query_servers_fail_the_query_and_are_replaced() {
    // A timeout long enough for process start-ups on a loaded machine: the hang case waits
    // it out once.
    let s = fake_server(5000);
    s.create_db("db");
    bulk(
        &s,
        "db",
        (0..300)
            .map(|i| json!({"_id": format!("d{i:03}"), "v": i}))
            .collect(),
    );
    let ddoc = json!({"language": "fake", "views": {
        "ids": {"map": "[[doc['_id'], doc.get('v')]]"},
        "total": {"map": "[[None, doc.get('v', 0)]]", "reduce": "sum(values)"},
    }});
    assert_eq!(s.put("/db/_design/f", &ddoc.to_string()).status, 201);
    assert_eq!(rows(&s, "/db/_design/f/_view/ids?limit=1")[0]["id"], "d000");
    assert_eq!(
        rows(&s, "/db/_design/f/_view/total"),
        json!([{"key": null, "value": 44850}])
    );

    let cases = [
        ("crash", "{exit_status,3}"),
        ("hang", "OS process timed out."),
        ("garbage", ""),
    ];
    for (what, reason) in cases {
        let r = s.put(&format!("/db/{what}"), &json!({ what: true }).to_string());
        assert_eq!(r.status, 201);
        let rev = r.json()["rev"].as_str().unwrap().to_owned();
        let r = s.get("/db/_design/f/_view/ids?limit=1");
        assert_eq!(r.status, 500, "{what}: {}", r.text);
        assert_eq!(r.json()["error"], "os_process_error", "{what}: {}", r.text);
        if !reason.is_empty() {
            assert_eq!(r.json()["reason"], reason, "{what}");
        }
        assert_eq!(s.get("/").status, 200);
        assert_eq!(s.delete(&format!("/db/{what}?rev={rev}")).status, 200);
        assert_eq!(
            rows(&s, "/db/_design/f/_view/ids?limit=1")[0]["id"],
            "d000",
            "{what}"
        );
    }

    // An error answer to a reduce is stored as the reduction and reported by reduce
    // queries; map queries of the view still work.
    bulk(&s, "db", vec![json!({"_id": "e", "v": {"error": true}})]);
    let r = s.get("/db/_design/f/_view/total");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "my_error");
    assert_eq!(
        rows(&s, "/db/_design/f/_view/total?reduce=false")
            .as_array()
            .unwrap()
            .len(),
        301
    );

    // Every process the server started is its child; none outlives a reload.
    assert!(!children(&s).is_empty());
    assert!(children(&s).len() <= 8, "{:?}", children(&s));
    assert_eq!(s.post("/_reload_query_servers", "{}").status, 200);
    assert!(wait_for(|| children(&s).is_empty()), "{:?}", children(&s));
    assert_eq!(rows(&s, "/db/_design/f/_view/ids?limit=1")[0]["id"], "d000");
}

/// Filters and validate functions of a design document in a query server's language run
/// there, with CouchDB's readings of their answers.
#[test]
fn filters_and_validate_functions_run_in_the_query_server() {
    let s = fake_server(5000);
    s.create_db("db");
    let ddoc = json!({"language": "fake", "real": true,
        "filters": {"kept": "keep"}, "validate_doc_update": "forbid",
        "views": {"v": {"map": "[[doc['_id'], 1]] if doc.get('keep') else []"}}});
    assert_eq!(s.put("/db/_design/f", &ddoc.to_string()).status, 201);
    let r = s.put("/db/no", r#"{"forbid": true}"#);
    assert_eq!(
        (r.status, r.json()),
        (403, json!({"error": "forbidden", "reason": "no no"}))
    );
    let r = s.put("/db/who", r#"{"unauthorized": true}"#);
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(s.put("/db/a", r#"{"keep": true}"#).status, 201);
    assert_eq!(s.put("/db/b", r#"{"keep": false}"#).status, 201);
    assert_eq!(s.put("/db/c", r#"{"keep": true}"#).status, 201);
    let r = s.get("/db/_changes?filter=f/kept");
    assert_eq!(r.status, 200, "{}", r.text);
    let ids: Vec<Value> = r.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(ids, [json!("a"), json!("c")]);
    // `filter=_view` maps each change through the view's query server.
    let r = s.get("/db/_changes?filter=_view&view=f/v");
    assert_eq!(r.status, 200, "{}", r.text);
    let ids: Vec<Value> = r.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(ids, [json!("a"), json!("c")]);
}

#[test]
fn python_maps_are_compiled_when_the_design_document_is_saved() {
    let Some(s) = python_server() else { return };
    s.create_db("db");
    let ddoc = json!({"language": "python", "views": {
        "good": {"map": "def fun(doc):\n    yield doc['_id'], 1"},
        "bad": {"map": "def fun(doc):\n    yield doc[[["},
    }});
    let r = s.put("/db/_design/py", &ddoc.to_string());
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"], "compilation_error");
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.starts_with("Compilation of the map function in the 'bad' view failed: "),
        "{reason}"
    );
    let ddoc = json!({"language": "python", "views": {"good": {"map": "def fun(doc):\n    yield doc['_id'], 1"}}});
    assert_eq!(s.put("/db/_design/py", &ddoc.to_string()).status, 201);
}
