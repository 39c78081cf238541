//! Map throughput of a CouchDB-style view through `ViewRuntime::map_doc`.
//!
//! `cargo run --release -p settee-js --example mapbench [seconds-per-case] [small|large|floats|seed11k]`
//!
//! Reports documents per wall-clock second and per CPU second of this thread (the machine
//! may be shared, so the CPU figure is the one to compare).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use settee_js::{Limits, ViewFns, ViewRuntime, ViewSource};

const MAP: &str = "function(doc) { emit([doc.year, doc.month], doc.score); }";

/// bodysize-004's map function (seedbench): it reads two of the document's members.
const MAP_004: &str = "function(doc) { emit(doc.float1, doc.strings[1]); }";

fn small_doc(i: usize) -> String {
    json!({
        "_id": format!("doc-{i:08}"),
        "_rev": "1-0123456789abcdef0123456789abcdef",
        "year": 2000 + i % 25,
        "month": 1 + i % 12,
        "score": (i * 7919) % 1000,
        "name": format!("user {i}"),
        "tags": ["alpha", "beta"],
    })
    .to_string()
}

/// ~10 KB of floats, like a sensor or time-series document.
fn float_doc(i: usize) -> String {
    let values: Vec<f64> = (0..550)
        .map(|j| ((i * 31 + j) as f64) * 0.731 + 0.5)
        .collect();
    json!({
        "_id": format!("doc-{i:08}"),
        "_rev": "1-0123456789abcdef0123456789abcdef",
        "year": 2000 + i % 25,
        "month": 1 + i % 12,
        "score": (i * 7919) % 1000,
        "values": values,
    })
    .to_string()
}

/// ~10 KB of nested objects: an order with 110 line items.
fn large_doc(i: usize) -> String {
    let items: Vec<Value> = (0..110)
        .map(|j| {
            json!({
                "id": j,
                "label": format!("item {i}-{j} with some text"),
                "price": (j as f64) * 1.25 + 0.1,
                "qty": (i + j) % 17,
                "flags": [j % 2 == 0, j % 3 == 0],
            })
        })
        .collect();
    json!({
        "_id": format!("doc-{i:08}"),
        "_rev": "3-0123456789abcdef0123456789abcdef",
        "year": 2000 + i % 25,
        "month": 1 + i % 12,
        "score": (i * 7919) % 1000,
        "customer": {"name": format!("customer {i}"), "email": format!("c{i}@example.com"), "vip": i.is_multiple_of(5)},
        "items": items,
    })
    .to_string()
}

/// ~11 KB shaped like seedbench's bodysize-004 documents: a few scalars, 44 short strings,
/// 44 floats, 18 small objects and a long text.
fn seed_doc(i: usize) -> String {
    let f = |j: usize| ((i * 131 + j * 17) % 200_000) as f64 / 7.0 - 14_000.0;
    let word = |j: usize| ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"][(i + j) % 6];
    let objects: Vec<Value> = (0..18)
        .map(|j| {
            json!({"id": j, "name": format!("{} {} {}", word(j), word(j + 1), word(j + 2)),
                   "value": f(j), "code": format!("C{i:07}"), "tags": [word(j), word(j + 3), word(j + 4), word(j + 5)],
                   "dims": {"w": f(j + 1), "h": f(j + 2)}})
        })
        .collect();
    let text: String = (0..900).map(|j| word(j * 7)).collect::<Vec<_>>().join(" ");
    json!({
        "_id": format!("{i:032x}"),
        "_rev": "1-0123456789abcdef0123456789abcdef",
        "type": "seedbench",
        "float1": f(1),
        "float2": f(2),
        "integer1": i % 1_000_000,
        "active": i.is_multiple_of(2),
        "strings": (0..44).map(|j| format!("s{i:05}{j:06}x")).collect::<Vec<_>>(),
        "numbers": (0..44).map(f).collect::<Vec<_>>(),
        "title": "alpha bravo charlie delta echo foxtrot alpha bravo",
        "nested": {"level1": {"level2": {"a": f(3), "b": "abcdefghijkl", "c": [f(4), f(5)], "d": {"flag": true, "name": "x y z"}}}},
        "objects": objects,
        "text": text,
    })
    .to_string()
}

/// CPU time consumed by the calling thread, from /proc (Linux only; zero elsewhere).
fn thread_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return Duration::ZERO;
    };
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn run(label: &str, map: &str, docs: &[String], seconds: f64) {
    let fns = ViewFns {
        views: vec![ViewSource {
            name: "by_date".into(),
            map: map.into(),
            reduce: None,
        }],
        lib: None,
        dialect: Default::default(),
    };
    let mut rt = ViewRuntime::new(&fns, Limits::default()).expect("runtime");
    for doc in docs.iter().take(1000) {
        rt.map_doc(doc).expect("warm-up");
    }
    let (wall0, cpu0) = (Instant::now(), thread_cpu());
    let mut mapped = 0usize;
    let mut rows = 0usize;
    while wall0.elapsed().as_secs_f64() < seconds {
        for doc in docs {
            let out = rt.map_doc(doc).expect("map_doc");
            rows += out[0].as_ref().map_or(0, Vec::len);
        }
        mapped += docs.len();
    }
    let wall = wall0.elapsed().as_secs_f64();
    let cpu = (thread_cpu() - cpu0).as_secs_f64();
    let bytes = docs.iter().map(String::len).sum::<usize>() / docs.len();
    println!(
        "{label:>6} ({bytes:>5} B/doc): {mapped:>8} docs, {:>9.0} docs/s wall, {:>9.0} docs/CPU-s ({rows} rows)",
        mapped as f64 / wall,
        if cpu > 0.0 { mapped as f64 / cpu } else { f64::NAN },
    );
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let only = std::env::args().nth(2);
    let wanted = |case: &str| only.as_deref().is_none_or(|o| o == case);
    if wanted("small") {
        let small: Vec<String> = (0..10_000).map(small_doc).collect();
        run("small", MAP, &small, seconds);
    }
    if wanted("large") {
        let large: Vec<String> = (0..1_000).map(large_doc).collect();
        run("large", MAP, &large, seconds);
    }
    if wanted("floats") {
        let floats: Vec<String> = (0..1_000).map(float_doc).collect();
        run("floats", MAP, &floats, seconds);
    }
    if wanted("seed11k") {
        let seed: Vec<String> = (0..1_000).map(seed_doc).collect();
        run("seed11k", MAP_004, &seed, seconds);
    }
}
