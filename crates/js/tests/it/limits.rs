//! Time and memory limits stop calls with the right error, and the process stays healthy.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use settee_js::{JsError, Limits, ViewFns, ViewRuntime};

fn limited(
    views: Vec<settee_js::ViewSource>,
    timeout_ms: u64,
    memory_limit: usize,
) -> Result<ViewRuntime, JsError> {
    let limits = Limits {
        timeout: Duration::from_millis(timeout_ms),
        memory_limit,
    };
    ViewRuntime::new(
        &ViewFns {
            views,
            lib: None,
            dialect: Default::default(),
        },
        limits,
    )
}

fn assert_fresh_runtime_works() {
    let rows = map_one("function(doc) { emit(doc._id, doc.score); }", &doc());
    assert_eq!(rows, vec![(json!("d1"), json!(912))]);
}

#[test]
fn infinite_map_loop_times_out_even_with_try_catch() {
    let sources = [
        "function(doc) { while (true) {} }",
        "function(doc) { while (true) { try { while (true) {} } catch (e) { emit('caught', String(e)); } } }",
        "function(doc) { for (;;) { try { for (;;) {} } finally { emit('finally', 1); continue; } } }",
    ];
    for source in sources {
        let mut rt = limited(vec![view("spin", source)], 200, 16 << 20).unwrap();
        let started = Instant::now();
        let err = rt.map_doc(&doc().to_string()).unwrap_err();
        assert!(matches!(err, JsError::Timeout), "{source}: {err:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        drop(rt);
        assert_fresh_runtime_works();
    }
}

#[test]
fn each_call_gets_a_fresh_deadline() {
    let mut rt = limited(
        vec![view(
            "slow",
            "function(doc) { var end = Date.now() + 60; while (Date.now() < end) {} emit(1, 1); }",
        )],
        600,
        16 << 20,
    )
    .unwrap();
    for _ in 0..4 {
        assert_eq!(
            texts(&rt.map_doc(&doc().to_string()).unwrap()[0]),
            "[[1,1]]"
        );
    }
}

#[test]
fn endless_promise_chains_are_stopped() {
    let sources = [
        // Constant memory: each job schedules the next one.
        "function(doc) { function f() { Promise.resolve().then(f); } f(); }",
        // Growing memory: every promise waits on the next.
        "function(doc) { function f() { return Promise.resolve().then(f); } f(); }",
    ];
    for source in sources {
        let mut rt = limited(vec![view("jobs", source)], 300, 16 << 20).unwrap();
        let err = rt.map_doc(&doc().to_string()).unwrap_err();
        assert!(
            matches!(err, JsError::Timeout | JsError::OutOfMemory),
            "{source}: {err:?}"
        );
        drop(rt);
        assert_fresh_runtime_works();
    }
}

#[test]
fn infinite_loop_at_top_level_times_out_compilation() {
    let err = limited(vec![view("v", "while (true) {}")], 200, 16 << 20)
        .err()
        .unwrap();
    assert!(matches!(err, JsError::Timeout), "{err:?}");
    assert_fresh_runtime_works();
}

#[test]
fn reduce_loop_times_out() {
    let mut rt = limited(
        vec![reduce_view(
            "r",
            "function(doc) {}",
            "function(k, v, r) { while (true) {} }",
        )],
        200,
        16 << 20,
    )
    .unwrap();
    assert!(matches!(rt.rereduce(0, &[]), Err(JsError::Timeout)));
    assert!(matches!(rt.reduce(0, &[]), Err(JsError::Timeout)));
    drop(rt);
    assert_fresh_runtime_works();
}

#[test]
fn giant_allocations_hit_the_memory_limit() {
    let sources = [
        "function(doc) { var a = []; while (true) a.push({i: a.length, s: 'x' + a.length}); }",
        "function(doc) { var s = 'x'; while (true) s = s.repeat(2); }",
        "function(doc) { emit(1, new Array(1e9).fill(1)); }",
        "function(doc) { var a = []; while (true) { try { a.push(new Array(1e5).fill(0)); } catch (e) {} } }",
    ];
    for source in sources {
        let mut rt = limited(vec![view("hog", source)], 1_500, 16 << 20).unwrap();
        let err = rt.map_doc(&doc().to_string()).unwrap_err();
        assert!(
            matches!(err, JsError::OutOfMemory | JsError::Timeout),
            "{source}: {err:?}"
        );
        if !source.contains("catch") {
            assert!(matches!(err, JsError::OutOfMemory), "{source}: {err:?}");
        }
        drop(rt);
        assert_fresh_runtime_works();
    }
}

#[test]
fn cyclic_garbage_is_not_out_of_memory() {
    // ~30 MB of self-referencing garbage, which only the cycle collector frees, under a
    // 4 MB limit: the limit applies to live data.
    let mut rt = limited(
        vec![view(
            "cycles",
            "function(doc) { for (var i = 0; i < 1e5; i++) { var a = {pad: 'x'.repeat(200) + i}; a.self = a; } emit(i, 1); }",
        )],
        10_000,
        4 << 20,
    )
    .unwrap();
    for _ in 0..3 {
        assert_eq!(
            texts(&rt.map_doc(&doc().to_string()).unwrap()[0]),
            "[[100000,1]]"
        );
    }
}

#[test]
fn giant_emit_hits_the_memory_limit() {
    let mut rt = limited(
        vec![view(
            "big",
            "function(doc) { for (var i = 0; i < 1e7; i++) emit([i, 'some key text'], {v: i}); }",
        )],
        10_000,
        16 << 20,
    )
    .unwrap();
    let err = rt.map_doc(&doc().to_string()).unwrap_err();
    assert!(matches!(err, JsError::OutOfMemory), "{err:?}");
    drop(rt);
    assert_fresh_runtime_works();
}

#[test]
fn converted_output_is_charged_to_the_memory_limit() {
    // Each row references the same 1 MB string: cheap in JS, 1 GB once converted.
    let mut rt = limited(
        vec![view(
            "fanout",
            "function(doc) { var s = 'x'.repeat(1e6); for (var i = 0; i < 1000; i++) emit(i, s); }",
        )],
        10_000,
        16 << 20,
    )
    .unwrap();
    let err = rt.map_doc(&doc().to_string()).unwrap_err();
    assert!(matches!(err, JsError::OutOfMemory), "{err:?}");
}

#[test]
fn parsing_near_the_memory_limit_is_safe() {
    // Fill memory to just under the hard cap, then make QuickJS parse a module: require
    // parses with the cap lifted, so it fails cleanly or succeeds (eval and new Function
    // are refused outright).
    let code =
        "var x = [1, {b: 2}]; if (x) { let q = x; for (let i = 0; i < 3; i++) { const z = i; } }";
    for fill_kb in (1800..2048).step_by(16) {
        let map = format!(
            "function(doc) {{ var code = '{code}'.repeat(50); var filler = 'y'.repeat({fill_kb} * 1024); require('views/lib/m'); }}"
        );
        let fns = ViewFns {
            views: vec![view("v", &map)],
            lib: Some(json!({ "m": code.repeat(50) })),
            dialect: Default::default(),
        };
        let limits = Limits {
            timeout: Duration::from_secs(5),
            memory_limit: 1 << 20,
        };
        let outcome =
            ViewRuntime::new(&fns, limits).and_then(|mut rt| rt.map_doc(&doc().to_string()));
        assert!(
            matches!(outcome, Ok(_) | Err(JsError::OutOfMemory)),
            "{outcome:?}"
        );
    }
    assert_fresh_runtime_works();
}

#[test]
fn document_larger_than_the_memory_limit() {
    let mut rt = limited(
        vec![view("v", "function(doc) { emit(1, 1); }")],
        1_000,
        2 << 20,
    )
    .unwrap();
    let big: Vec<String> = (0..200_000).map(|i| format!("item number {i}")).collect();
    let err = rt
        .map_doc(&json!({"_id": "big", "items": big}).to_string())
        .unwrap_err();
    assert!(matches!(err, JsError::OutOfMemory), "{err:?}");
    drop(rt);
    assert_fresh_runtime_works();
}

#[test]
fn tiny_memory_limit_fails_creation_cleanly() {
    let err = limited(vec![view("v", "function(doc) {}")], 1_000, 64 << 10)
        .err()
        .unwrap();
    assert!(matches!(err, JsError::OutOfMemory), "{err:?}");
    assert_fresh_runtime_works();
}

#[test]
fn runtimes_work_on_many_threads() {
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rt = runtime(vec![view("v", "function(doc) { emit(doc.t, doc.n * 2); }")]);
                (0..200)
                    .map(|n| {
                        rt.map_doc(&json!({"_id": "x", "t": t, "n": n}).to_string())
                            .unwrap()
                    })
                    .count()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 200);
    }
}

/// Documents a map function keeps alive are charged to its memory limit (their text lives
/// in the runtime's heap until their members are read).
#[test]
fn kept_documents_hit_the_memory_limit() {
    let mut rt = limited(
        vec![view(
            "v",
            "function(doc) { (globalThis.kept = globalThis.kept || []).push(doc); }",
        )],
        5_000,
        4 << 20,
    )
    .unwrap();
    let text = json!({"_id": "d", "pad": "x".repeat(64 << 10)}).to_string();
    let err = (0..1_000)
        .find_map(|_| rt.map_doc(&text).err())
        .expect("the kept documents outgrow the limit");
    assert!(matches!(err, JsError::OutOfMemory), "{err:?}");
    drop(rt);
    assert_fresh_runtime_works();
}
