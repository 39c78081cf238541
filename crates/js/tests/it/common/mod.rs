#![allow(dead_code)]

use serde_json::{json, Value};
use settee_js::{Limits, MapResult, ViewFns, ViewRuntime, ViewSource};

pub fn view(name: &str, map: &str) -> ViewSource {
    ViewSource {
        name: name.into(),
        map: map.into(),
        reduce: None,
    }
}

pub fn reduce_view(name: &str, map: &str, reduce: &str) -> ViewSource {
    ViewSource {
        name: name.into(),
        map: map.into(),
        reduce: Some(reduce.into()),
    }
}

pub fn runtime(views: Vec<ViewSource>) -> ViewRuntime {
    ViewRuntime::new(
        &ViewFns {
            views,
            lib: None,
            dialect: Default::default(),
        },
        Limits::default(),
    )
    .expect("runtime")
}

pub fn runtime_with_lib(views: Vec<ViewSource>, lib: Value) -> ViewRuntime {
    ViewRuntime::new(
        &ViewFns {
            views,
            lib: Some(lib),
            dialect: Default::default(),
        },
        Limits::default(),
    )
    .expect("runtime")
}

/// Maps `doc` with a single-view runtime built from `map`, expecting success.
pub fn map_one(map: &str, doc: &Value) -> Vec<(Value, Value)> {
    let mut rt = runtime(vec![view("v", map)]);
    let mut results = rt.map_doc(&doc.to_string()).expect("map_doc");
    assert_eq!(results.len(), 1);
    results.remove(0).expect("map function succeeded")
}

pub fn rows(pairs: &[(Value, Value)]) -> Value {
    Value::Array(pairs.iter().map(|(k, v)| json!([k, v])).collect())
}

pub fn texts(result: &MapResult) -> String {
    match result {
        Ok(pairs) => rows(pairs).to_string(),
        Err(e) => format!("ERR {e}"),
    }
}

pub fn doc() -> Value {
    json!({"_id": "d1", "_rev": "1-abc", "year": 2024, "month": 5, "score": 912, "tags": ["a", "b"]})
}
