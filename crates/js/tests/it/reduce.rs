//! reduce and rereduce.

use crate::common;

use common::*;
use serde_json::{json, Value};
use settee_js::JsError;

const MAP: &str = "function(doc) { emit(doc._id, 1); }";

#[test]
fn reduce_sees_couchdb_keys_and_values() {
    let mut rt = runtime(vec![
        view("plain", MAP),
        reduce_view("echo", MAP, "function(keys, values, rereduce) { return {keys: keys, values: values, rereduce: rereduce}; }"),
    ]);
    let (k1, k2, v1, v2) = (json!(["a", 1]), json!({"x": 1.5}), json!(10), json!(null));
    let out = rt
        .reduce(1, &[(&k1, "doc1", &v1), (&k2, "doc2", &v2)])
        .unwrap();
    assert_eq!(
        out,
        json!({"keys": [[["a", 1], "doc1"], [{"x": 1.5}, "doc2"]], "values": [10, null], "rereduce": false})
    );
}

#[test]
fn reduce_and_rereduce_with_sum() {
    let mut rt = runtime(vec![reduce_view(
        "s",
        MAP,
        "function(keys, values, rereduce) { return sum(values); }",
    )]);
    let values: Vec<Value> = (1..=100).map(|i| json!(i)).collect();
    let keys: Vec<Value> = (1..=100).map(|i| json!([i])).collect();
    let rows: Vec<(&Value, &str, &Value)> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| (k, "id", v))
        .collect();
    let total = rt.reduce(0, &rows).unwrap();
    assert_eq!(total.to_string(), "5050");
    let parts = [json!(5050), json!(0.5), json!(-50)];
    let refs: Vec<&Value> = parts.iter().collect();
    assert_eq!(rt.rereduce(0, &refs).unwrap(), json!(5000.5));
}

#[test]
fn rereduce_gets_null_keys() {
    let mut rt = runtime(vec![reduce_view(
        "r",
        MAP,
        "function(keys, values, rereduce) { return [keys, rereduce, values.length]; }",
    )]);
    let v = json!({"count": 3});
    assert_eq!(rt.rereduce(0, &[&v, &v]).unwrap(), json!([null, true, 2]));
    assert_eq!(rt.rereduce(0, &[]).unwrap(), json!([null, true, 0]));
}

#[test]
fn typical_stats_reduce() {
    let src = r#"function(keys, values, rereduce) {
        if (rereduce) {
            return values.reduce(function(a, b) { return {count: a.count + b.count, max: Math.max(a.max, b.max)}; });
        }
        return {count: values.length, max: Math.max.apply(null, values)};
    }"#;
    let mut rt = runtime(vec![reduce_view("stats", MAP, src)]);
    let (k, a, b) = (json!("k"), json!(3), json!(7.25));
    let first = rt.reduce(0, &[(&k, "1", &a), (&k, "2", &b)]).unwrap();
    assert_eq!(first, json!({"count": 2, "max": 7.25}));
    let other = json!({"count": 5, "max": 2});
    assert_eq!(
        rt.rereduce(0, &[&first, &other]).unwrap(),
        json!({"count": 7, "max": 7.25})
    );
}

#[test]
fn throwing_reduce_is_thrown_error() {
    let mut rt = runtime(vec![reduce_view(
        "t",
        MAP,
        "function(k, v) { throw new TypeError('nope'); }",
    )]);
    let v = json!(1);
    match rt.rereduce(0, &[&v]) {
        Err(JsError::Thrown(msg)) => assert!(msg.starts_with("TypeError: nope"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // Still usable afterwards.
    assert!(matches!(rt.rereduce(0, &[&v]), Err(JsError::Thrown(_))));
}

#[test]
fn undefined_reduce_result_is_null() {
    let mut rt = runtime(vec![reduce_view("u", MAP, "function(k, v) {}")]);
    assert_eq!(rt.rereduce(0, &[]).unwrap(), Value::Null);
}

#[test]
fn view_without_reduce_is_internal_error() {
    let mut rt = runtime(vec![view("m", MAP)]);
    assert!(matches!(rt.rereduce(0, &[]), Err(JsError::Internal(_))));
    assert!(matches!(rt.rereduce(7, &[]), Err(JsError::Internal(_))));
}
