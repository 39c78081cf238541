//! Map throughput of a CouchDB-style view through `ViewRuntime::map_doc`.
//!
//! `cargo run --release -p settee-js --example mapbench [seconds-per-case] [small|large|floats]`
//!
//! Reports documents per wall-clock second and per CPU second of this thread (the machine
//! may be shared, so the CPU figure is the one to compare).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use settee_js::{Limits, ViewFns, ViewRuntime, ViewSource};

const MAP: &str = "function(doc) { emit([doc.year, doc.month], doc.score); }";

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

fn run(label: &str, docs: &[String], seconds: f64) {
    let fns = ViewFns {
        views: vec![ViewSource {
            name: "by_date".into(),
            map: MAP.into(),
            reduce: None,
        }],
        lib: None,
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
        run("small", &small, seconds);
    }
    if wanted("large") {
        let large: Vec<String> = (0..1_000).map(large_doc).collect();
        run("large", &large, seconds);
    }
    if wanted("floats") {
        let floats: Vec<String> = (0..1_000).map(float_doc).collect();
        run("floats", &floats, seconds);
    }
}
