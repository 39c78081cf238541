//! How document JSON text reaches map functions: exact values, escapes, numbers, freezing,
//! duplicate members, nesting, and invalid input.

mod common;

use common::*;
use serde_json::{json, Value};
use settee_js::JsError;

/// Maps `text` with `emit(null, doc)` and returns the emitted document.
fn round_trip(text: &str) -> Value {
    let mut rt = runtime(vec![view("v", "function(doc) { emit(null, doc); }")]);
    let mut out = rt
        .map_doc(text)
        .expect("map_doc")
        .remove(0)
        .expect("view result");
    out.remove(0).1
}

#[test]
fn values_arrive_exactly() {
    let texts = [
        r#"{"_id":"a","s":"plain","n":null,"t":true,"f":false,"e":{},"l":[],"nested":{"a":[1,[2,{"b":[]}]]}}"#,
        r#"{"_id":"esc","q":"\"quoted\" \\ \/ \b\f\n\r\t","u":"\u00e9\u4e2d\ud83d\ude00","raw":"é中😀"}"#,
        r#"{"_id":"nums","i":0,"neg":-17,"big":1234567890123,"max":9007199254740991,"f":0.5,"e":1e3,"E":-2.5E-3,"z":-0.0}"#,
        "  {\n\t\"_id\" : \"ws\" ,\r\n \"a\" : [ 1 , 2 ] }  ",
    ];
    for text in texts {
        let expected: Value = serde_json::from_str(text).unwrap();
        let got = round_trip(text);
        assert_eq!(got.to_string(), normalise(&expected).to_string(), "{text}");
    }
}

/// Numbers as JSON.stringify prints JS numbers: integral values as integers.
fn normalise(v: &Value) -> Value {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap();
            if f.fract() == 0.0 && f.abs() < 1e21 {
                json!(f as i64)
            } else {
                json!(f)
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(normalise).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalise(v))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn numbers_are_js_numbers() {
    let text = r#"{"_id":"n","int":912,"big":123456789012345678901,"tiny":5e-324,"huge":1e400,"negzero":-0}"#;
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { emit([typeof doc.int, doc.int + 1, doc.big, doc.tiny > 0, doc.huge, Object.is(doc.negzero, -0)], null); }",
    )]);
    let rows = rt.map_doc(text).unwrap().remove(0).unwrap();
    assert_eq!(
        rows[0].0.to_string(),
        r#"["number",913,123456789012345680000,true,null,true]"#
    );
}

#[test]
fn lone_surrogates_become_replacement_characters() {
    let got = round_trip(r#"{"_id":"s","a":"x\ud800y","b":"\udc00","c":"\ud800\u0041"}"#);
    assert_eq!(
        got,
        json!({"_id": "s", "a": "x\u{FFFD}y", "b": "\u{FFFD}", "c": "\u{FFFD}A"})
    );
}

#[test]
fn documents_are_frozen_all_the_way_down() {
    let text = r#"{"_id":"f","o":{"a":[1,{"b":2}]},"l":[[1],[2]]}"#;
    let mut rt = runtime(vec![view(
        "v",
        r#"function(doc) {
            var all = [doc, doc.o, doc.o.a, doc.o.a[1], doc.l, doc.l[0]];
            emit(all.map(Object.isFrozen), all.map(Object.isExtensible));
            doc.o.a[0] = 99; doc.l.length = 0; doc.o.a[1].b = 3;
            emit([doc.o.a[0], doc.l.length, doc.o.a[1].b], Array.isArray(doc.l));
        }"#,
    )]);
    let rows = rt.map_doc(text).unwrap().remove(0).unwrap();
    assert_eq!(
        rows[0],
        (
            json!([true, true, true, true, true, true]),
            json!([false, false, false, false, false, false])
        )
    );
    assert_eq!(rows[1], (json!([1, 2, 2]), json!(true)));
}

#[test]
fn duplicate_members_resolve_like_json_parse() {
    // Last value wins, at the first occurrence's position.
    let got = round_trip(r#"{"_id":"d","a":1,"b":2,"a":{"x":[1,1]}}"#);
    assert_eq!(got.to_string(), r#"{"_id":"d","a":{"x":[1,1]},"b":2}"#);
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { emit(Object.isFrozen(doc.a), doc.a.x.length); }",
    )]);
    let rows = rt
        .map_doc(r#"{"a":1,"a":{"x":[1,2,3]}}"#)
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(rows, vec![(json!(true), json!(3))]);
}

#[test]
fn too_deep_documents_fail_every_view_but_not_the_runtime() {
    let deep = format!(
        "{{\"_id\":\"deep\",\"x\":{}1{}}}",
        "[".repeat(600),
        "]".repeat(600)
    );
    let mut rt = runtime(vec![
        view("a", "function(doc) { emit(1, 1); }"),
        view("b", "function(doc) {}"),
    ]);
    let results = rt.map_doc(&deep).unwrap();
    for r in &results {
        assert!(
            r.as_ref().unwrap_err().contains("nested deeper than"),
            "{r:?}"
        );
    }
    let ok = format!(
        "{{\"_id\":\"ok\",\"x\":{}1{}}}",
        "[".repeat(400),
        "]".repeat(400)
    );
    assert_eq!(texts(&rt.map_doc(&ok).unwrap()[0]), "[[1,1]]");
}

#[test]
fn invalid_json_is_rejected() {
    let bad = [
        "",
        "{",
        "{\"a\":}",
        "{\"a\":1,}",
        "[1,]",
        "{\"a\" 1}",
        "{a:1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1e}",
        "{\"a\":-}",
        "{\"a\":\"unterminated}",
        "{\"a\":\"tab\there\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12\"}",
        "{\"a\":tru}",
        "{\"a\":nul}",
        "{} {}",
        "{\"a\":NaN}",
    ];
    let mut rt = runtime(vec![view("v", "function(doc) { emit(1, 1); }")]);
    for text in bad {
        let err = rt.map_doc(text).unwrap_err();
        assert!(matches!(err, JsError::Internal(_)), "{text:?}: {err:?}");
    }
    assert_eq!(texts(&rt.map_doc("{}").unwrap()[0]), "[[1,1]]");
}
