//! Calls per second of a show and an update function through `Renderer`, with a request
//! object shaped like the HTTP layer's (headers, query, userCtx, secObj; `info` lazy).
//!
//! `cargo run --release -p settee-js --example renderbench [seconds-per-case]`
//!
//! Reports calls per wall-clock second and per CPU second of this thread (the machine may
//! be shared, so the CPU figure is the one to compare).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use settee_js::{Limits, RenderSource, Renderer};

fn req(i: usize) -> Value {
    json!({
        "info": null,
        "uuid": format!("{i:032x}"),
        "id": format!("d{i}"),
        "method": "POST",
        "requested_path": ["db", "_design", "b", "_update", "u", format!("d{i}")],
        "path": ["db", "_design", "b", "_update", "u", format!("d{i}")],
        "raw_path": format!("/db/_design/b/_update/u/d{i}"),
        "query": {},
        "headers": {"Host": "x", "Authorization": "Basic YWRtaW46YWRtaW4=", "Content-Length": "0",
                    "Content-Type": "application/json"},
        "body": "",
        "peer": "127.0.0.1",
        "form": {},
        "cookie": {},
        "userCtx": {"db": "db", "name": "admin", "roles": ["_admin"]},
        "secObj": {}
    })
}

fn doc(i: usize) -> Value {
    json!({"_id": format!("d{i}"), "_rev": "3-0123456789abcdef0123456789abcdef",
           "n": i, "name": format!("doc{i}"),
           "_revisions": {"start": 3, "ids": ["0123456789abcdef0123456789abcdef",
                                              "1123456789abcdef0123456789abcdef",
                                              "2123456789abcdef0123456789abcdef"]}})
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

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let source = RenderSource {
        ddoc_id: "_design/b".into(),
        ddoc: json!({"_id": "_design/b", "_rev": "1-a",
            "shows": {"s": "function(doc, req) { return {body: 'Hello ' + doc.name, headers: {'X-N': '' + doc.n}}; }"},
            "updates": {"u": "function(doc, req) { doc = doc || {_id: req.id, n: 0}; doc.n += 1; return [doc, 'n=' + doc.n]; }"}}),
    };
    let mut r = Renderer::new(&source, Limits::default()).expect("renderer");
    r.set_info_source(Some(Box::new(|| json!({"db_name": "db"}))));
    let reqs: Vec<Value> = (0..1000).map(req).collect();
    let docs: Vec<Value> = (0..1000).map(doc).collect();
    for (label, update) in [("show", false), ("update", true)] {
        let (wall0, cpu0) = (Instant::now(), thread_cpu());
        let mut n = 0usize;
        while wall0.elapsed().as_secs_f64() < seconds {
            let (d, q) = (&docs[n % 1000], &reqs[n % 1000]);
            let out = if update {
                r.update("u", d, q)
            } else {
                r.show("s", d, q)
            };
            out.expect("call");
            n += 1;
        }
        let wall = wall0.elapsed().as_secs_f64();
        let cpu = (thread_cpu() - cpu0).as_secs_f64();
        println!(
            "{label:>6}: {n:>8} calls, {:>8.0} calls/s wall, {:>8.0} calls/CPU-s ({:.1} us/call CPU)",
            n as f64 / wall,
            n as f64 / cpu,
            cpu * 1e6 / n as f64
        );
    }
}
