//! Hostile JavaScript: map, reduce, filter, show, list, update and validate functions that
//! loop forever, allocate without bound, recurse without end or produce enormous output are
//! stopped with CouchDB's errors, and the server keeps serving everything else.
//!
//! `unrelated_reads_during_attack` prints the latency of plain document reads while the
//! hostile functions run (recorded in docs/reliability.md; no timing is asserted):
//!
//! ```text
//! HOSTILE_SECS=20 cargo test --release --locked -p settee --test hostile_js unrelated -- --nocapture
//! ```

use crate::common;
use common::Server;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The time limit the tests run with (CouchDB's default is 5000 ms) and a 16 MiB heap (64).
const INI: &str = "[couchdb]\nos_process_timeout = 1000\n\n[settee]\njs_memory_limit = 16777216\n";

/// The four kinds of hostility, as a statement run inside a function.
const LOOP: &str = "while (true) {}";
const ALLOC: &str = "var a = []; while (true) a.push(new Array(100000).join('x') + a.length);";
const RECURSE: &str = "var f = function(n) { return f(n + 1) + 1; }; f(0);";

const KINDS: [(&str, &str); 3] = [("loop", LOOP), ("alloc", ALLOC), ("recurse", RECURSE)];

/// A huge string (64 MiB of characters), as an expression.
const HUGE: &str = "new Array(64 * 1024 * 1024).join('x')";

/// What a hostile call may answer: CouchDB's error for a query server that was stopped
/// (`os_process_error`, as `couch_os_process` throws on a timeout and a crash), or the
/// error the function's own exception gives.
fn stopped(what: &str, r: &common::Resp, allowed: &[(u16, &str)]) {
    let error = serde_json::from_str::<Value>(&r.text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_default();
    eprintln!(
        "{what}: {} {}",
        r.status,
        r.text.chars().take(200).collect::<String>()
    );
    assert!(
        allowed
            .iter()
            .any(|(s, e)| *s == r.status && (e.is_empty() || *e == error)),
        "{what}: {} {}; expected one of {allowed:?}",
        r.status,
        r.text.chars().take(500).collect::<String>()
    );
}

const OS_ERROR: (u16, &str) = (500, "os_process_error");

fn setup(s: &Server) {
    s.create_db("h");
    s.create_db("calm");
    let docs: Vec<Value> = (0..3)
        .map(|i| json!({"_id": format!("d{i}"), "n": i}))
        .collect();
    assert_eq!(
        s.post("/h/_bulk_docs", &json!({"docs": docs}).to_string())
            .status,
        201
    );
    let docs: Vec<Value> = (0..200)
        .map(|i| json!({"_id": format!("c{i}"), "n": i, "s": "calm"}))
        .collect();
    assert_eq!(
        s.post("/calm/_bulk_docs", &json!({"docs": docs}).to_string())
            .status,
        201
    );
    // one design document per hostile view: a design document's views are built together
    let mut maps: Vec<(String, String)> = KINDS
        .iter()
        .map(|(k, body)| {
            (
                format!("map_{k}"),
                format!("function(doc) {{ {body} emit(doc._id, 1); }}"),
            )
        })
        .collect();
    maps.push((
        "map_huge".into(),
        format!("function(doc) {{ emit(doc._id, {HUGE}); }}"),
    ));
    maps.push((
        "map_many".into(),
        "function(doc) { for (var i = 0; i < 1e9; i++) emit([doc._id, i], i); }".into(),
    ));
    for (name, map) in maps {
        let ddoc = json!({"views": {"v": {"map": map}}});
        assert_eq!(
            s.put(&format!("/h/_design/{name}"), &ddoc.to_string())
                .status,
            201
        );
    }
    let mut reduces: Vec<(String, String)> = KINDS
        .iter()
        .map(|(k, body)| {
            (
                format!("red_{k}"),
                format!("function(k, v, re) {{ {body} return 1; }}"),
            )
        })
        .collect();
    reduces.push((
        "red_huge".into(),
        format!("function(k, v, re) {{ return {HUGE}; }}"),
    ));
    for (name, reduce) in reduces {
        let ddoc = json!({"views": {"v": {"map": "function(doc) { emit(doc._id, 1); }", "reduce": reduce}}});
        assert_eq!(
            s.put(&format!("/h/_design/{name}"), &ddoc.to_string())
                .status,
            201
        );
    }
    // shows, lists, updates and filters do not share state: one design document
    let mut fns = json!({"shows": {}, "lists": {}, "updates": {}, "filters": {},
                         "views": {"all": {"map": "function(doc) { emit(doc._id, 1); }"}}});
    for (k, body) in KINDS {
        fns["shows"][k] = json!(format!("function(doc, req) {{ {body} return 'x'; }}"));
        fns["lists"][k] = json!(format!("function(head, req) {{ {body} return 'x'; }}"));
        fns["updates"][k] = json!(format!(
            "function(doc, req) {{ {body} return [null, 'x']; }}"
        ));
        fns["filters"][k] = json!(format!("function(doc, req) {{ {body} return true; }}"));
    }
    fns["shows"]["huge"] = json!(format!("function(doc, req) {{ return {HUGE}; }}"));
    fns["lists"]["huge"] = json!(format!(
        "function(head, req) {{ while (getRow()) {{ send({HUGE}); }} }}"
    ));
    fns["updates"]["huge"] = json!(format!("function(doc, req) {{ return [null, {HUGE}]; }}"));
    fns["updates"]["huge_doc"] = json!(format!(
        "function(doc, req) {{ return [{{_id: 'big', s: {HUGE}}}, 'x']; }}"
    ));
    fns["filters"]["huge"] =
        json!("function(doc, req) { return new Array(512 * 1024 * 1024).join('x').length > 0; }");
    assert_eq!(s.put("/h/_design/fns", &fns.to_string()).status, 201);
    // validation functions run on every write to their database: one database each
    for (k, body) in KINDS.iter().chain(&[(
        "huge",
        "throw({forbidden: new Array(64 * 1024 * 1024).join('x')});",
    )]) {
        let db = format!("vdu_{k}");
        s.create_db(&db);
        let ddoc = json!({"validate_doc_update": format!("function(newDoc, oldDoc, userCtx) {{ {body} }}")});
        assert_eq!(
            s.put(&format!("/{db}/_design/v"), &ddoc.to_string()).status,
            201
        );
    }
}

/// A hostile request: what it is, method, path, body, and the answers it may get.
type Attack = (
    String,
    &'static str,
    String,
    Option<&'static str>,
    Vec<(u16, &'static str)>,
);

/// Every hostile request, with what it may answer.
fn attacks() -> Vec<Attack> {
    let mut out = Vec::new();
    for (k, _) in KINDS {
        // A map function that throws (too much recursion) skips the document, as CouchDB does.
        let map_ok: Vec<(u16, &str)> = if k == "recurse" {
            vec![(200, "")]
        } else {
            vec![OS_ERROR]
        };
        out.push((
            format!("map {k}"),
            "GET",
            format!("/h/_design/map_{k}/_view/v"),
            None,
            map_ok,
        ));
        // A reduce function that throws gives null, as CouchDB's does (logged).
        let red_ok: Vec<(u16, &str)> = if k == "recurse" {
            vec![(200, "")]
        } else {
            vec![OS_ERROR]
        };
        out.push((
            format!("reduce {k}"),
            "GET",
            format!("/h/_design/red_{k}/_view/v"),
            None,
            red_ok,
        ));
        // Deep recursion is a RangeError the function throws: CouchDB's JavaScript server
        // answers `["error", e.name, e]` (`500 {"error": name}`), or for shows, lists and
        // updates `render_error` ("function raised error: ...").
        let thrown: Vec<(u16, &str)> = if k == "recurse" {
            vec![(500, "RangeError"), (500, "render_error")]
        } else {
            vec![OS_ERROR]
        };
        out.push((
            format!("filter {k}"),
            "GET",
            format!("/h/_changes?filter=fns/{k}"),
            None,
            thrown.clone(),
        ));
        out.push((
            format!("show {k}"),
            "GET",
            format!("/h/_design/fns/_show/{k}/d0"),
            None,
            thrown.clone(),
        ));
        out.push((
            format!("list {k}"),
            "GET",
            format!("/h/_design/fns/_list/{k}/all"),
            None,
            thrown.clone(),
        ));
        out.push((
            format!("update {k}"),
            "POST",
            format!("/h/_design/fns/_update/{k}/d0"),
            Some("{}"),
            thrown.clone(),
        ));
        out.push((
            format!("validate {k}"),
            "PUT",
            format!("/vdu_{k}/doc"),
            Some("{}"),
            thrown.clone(),
        ));
    }
    out.push((
        "map huge".into(),
        "GET",
        "/h/_design/map_huge/_view/v".into(),
        None,
        vec![OS_ERROR],
    ));
    out.push((
        "map many".into(),
        "GET",
        "/h/_design/map_many/_view/v?limit=1".into(),
        None,
        vec![OS_ERROR],
    ));
    out.push((
        "reduce huge".into(),
        "GET",
        "/h/_design/red_huge/_view/v".into(),
        None,
        vec![OS_ERROR],
    ));
    out.push((
        "filter huge".into(),
        "GET",
        "/h/_changes?filter=fns/huge".into(),
        None,
        vec![OS_ERROR],
    ));
    out.push((
        "show huge".into(),
        "GET",
        "/h/_design/fns/_show/huge/d0".into(),
        None,
        vec![OS_ERROR],
    ));
    out.push((
        "list huge".into(),
        "GET",
        "/h/_design/fns/_list/huge/all".into(),
        None,
        vec![OS_ERROR],
    ));
    out.push((
        "update huge".into(),
        "POST",
        "/h/_design/fns/_update/huge/d0".into(),
        Some("{}"),
        vec![OS_ERROR],
    ));
    out.push((
        "update huge doc".into(),
        "POST",
        "/h/_design/fns/_update/huge_doc".into(),
        Some("{}"),
        vec![OS_ERROR, (413, "document_too_large")],
    ));
    out.push((
        "validate huge".into(),
        "PUT",
        "/vdu_huge/doc".into(),
        Some("{}"),
        vec![OS_ERROR, (403, "forbidden")],
    ));
    out
}

/// The server still serves: plain reads, a view of well-behaved functions, writes, and
/// each hostile function's neighbours.
fn healthy(s: &Server) {
    assert_eq!(s.get("/_up").status, 200);
    assert_eq!(s.get("/calm/c1").json()["n"], 1);
    assert_eq!(s.get("/h/_design/fns/_view/all").json()["total_rows"], 3);
    let r = s.put("/h/after", "{}");
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.get("/h/_changes").json();
    assert!(r["results"].as_array().unwrap().len() >= 4);
    s.delete(&format!(
        "/h/after?rev={}",
        s.get("/h/after").json()["_rev"].as_str().unwrap()
    ));
}

#[test]
fn hostile_functions_are_stopped() {
    let s = Server::start_with_ini(INI);
    setup(&s);
    for (what, method, path, body, allowed) in attacks() {
        let r = s.req(method, &path, body);
        stopped(&what, &r, &allowed);
        // the same again: a stopped runtime is replaced, not left broken
        let r = s.req(method, &path, body);
        stopped(&what, &r, &allowed);
        healthy(&s);
    }
}

/// Latency of plain document reads while every hostile request runs in a loop on two
/// threads: printed, not asserted; every read must succeed.
#[test]
fn unrelated_reads_during_attack() {
    let secs: u64 = std::env::var("HOSTILE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let s = Server::start_with_ini(INI);
    setup(&s);
    let measure = |label: &str, attack: bool| {
        let stop = AtomicBool::new(false);
        let lat = Mutex::new(Vec::new());
        let attacks_done = Mutex::new(0u64);
        std::thread::scope(|scope| {
            if attack {
                for t in 0..2 {
                    let (s, stop, done) = (&s, &stop, &attacks_done);
                    scope.spawn(move || {
                        let all = attacks();
                        let mut i = t * 7;
                        while !stop.load(Ordering::Relaxed) {
                            let (what, method, path, body, allowed) = &all[i % all.len()];
                            let r = s.req(method, path, *body);
                            assert!(
                                allowed.iter().any(|(st, _)| *st == r.status),
                                "{what}: {} {}",
                                r.status,
                                r.text
                            );
                            *done.lock().unwrap() += 1;
                            i += 1;
                        }
                    });
                }
            }
            let (s, stop, lat) = (&s, &stop, &lat);
            scope.spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let r = s.get(&format!("/calm/c{}", i % 200));
                    let took = t0.elapsed();
                    assert_eq!(r.status, 200, "{}", r.text);
                    lat.lock().unwrap().push(took);
                    i += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            std::thread::sleep(Duration::from_secs(secs));
            stop.store(true, Ordering::Relaxed);
        });
        let mut lat = lat.into_inner().unwrap();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize].as_secs_f64() * 1000.0;
        eprintln!(
            "{label}: {} reads in {secs} s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {} hostile requests",
            lat.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0),
            attacks_done.into_inner().unwrap()
        );
    };
    measure("baseline", false);
    measure("under attack", true);
    healthy(&s);
}
