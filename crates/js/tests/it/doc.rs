//! How document JSON text reaches map functions: exact values, escapes, numbers, freezing,
//! duplicate members, nesting, and invalid input.

use crate::common;

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
fn too_deep_members_fail_the_views_that_read_them_but_not_the_runtime() {
    let deep = format!(
        "{{\"_id\":\"deep\",\"x\":{}1{}}}",
        "[".repeat(600),
        "]".repeat(600)
    );
    let mut rt = runtime(vec![
        view("reads", "function(doc) { emit(1, doc.x); }"),
        view("ignores", "function(doc) { emit(doc._id, 1); }"),
    ]);
    let results = rt.map_doc(&deep).unwrap();
    let err = results[0].as_ref().unwrap_err();
    assert!(err.contains("nested deeper than"), "{err}");
    assert_eq!(texts(&results[1]), r#"[["deep",1]]"#);
    let ok = format!(
        "{{\"_id\":\"ok\",\"x\":{}1{}}}",
        "[".repeat(400),
        "]".repeat(400)
    );
    let results = rt.map_doc(&ok).unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert_eq!(texts(&results[1]), r#"[["ok",1]]"#);
}

/// Whatever is wrong with the document's outline fails the call; a malformed member value
/// (only a corrupt store could hold one: documents are validated when written) is found
/// when a map function reads it, and fails that view for that document.
#[test]
fn invalid_json_is_rejected() {
    let bad_outline = [
        "",
        "{",
        "{\"a\":}",
        "{\"a\":1,}",
        "[1,]",
        "{\"a\" 1}",
        "{a:1}",
        "{\"a\":\"unterminated}",
        "{\"a\":\"ends in an escape\\",
        "{\"a\":[\"x\\",
        "{\"a\":{\"k\":\"a long string that ends in an escape\\",
        "{} {}",
    ];
    let mut rt = runtime(vec![view("v", "function(doc) { emit(1, 1); }")]);
    for text in bad_outline {
        let err = rt.map_doc(text).unwrap_err();
        assert!(matches!(err, JsError::Internal(_)), "{text:?}: {err:?}");
    }
    assert_eq!(texts(&rt.map_doc("{}").unwrap()[0]), "[[1,1]]");
    let bad_members = [
        "01",
        "1.",
        ".5",
        "1e",
        "-",
        "\"tab\there\"",
        "\"\\x\"",
        "\"\\u12\"",
        "tru",
        "nul",
        "NaN",
        "[1,]",
        "{\"b\":1,}",
    ];
    let mut rt = runtime(vec![
        view("reads", "function(doc) { emit(doc.a, 1); }"),
        view("ignores", "function(doc) { emit(doc.b, 1); }"),
    ]);
    for member in bad_members {
        let text = format!("{{\"a\":{member},\"b\":2}}");
        let results = rt.map_doc(&text).unwrap();
        let err = results[0].as_ref().unwrap_err();
        assert!(err.contains("not valid JSON"), "{text}: {err}");
        assert_eq!(texts(&results[1]), "[[2,1]]", "{text}");
    }
}

/// The lazily built document answers every way of looking at an object as the eagerly
/// built frozen one does.
#[test]
fn documents_behave_as_frozen_plain_objects() {
    let text = r#"{"b":1,"2":"two","a":{"x":[1]},"1":null,"_id":"lazy"}"#;
    let checks = r#"function(doc) {
        "use strict";
        var seen = [];
        for (var k in doc) seen.push(k);
        var d = Object.getOwnPropertyDescriptor(doc, "b");
        var threw = [];
        try { doc.b = 5; } catch (e) { threw.push(e instanceof TypeError); }
        try { doc.c = 5; } catch (e) { threw.push(e instanceof TypeError); }
        try { delete doc.b; } catch (e) { threw.push(e instanceof TypeError); }
        try { Object.defineProperty(doc, "b", {value: 6}); } catch (e) { threw.push(e instanceof TypeError); }
        try { Object.defineProperty(doc, "z", {value: 6}); } catch (e) { threw.push(e instanceof TypeError); }
        Object.freeze(doc);
        Object.defineProperty(doc, "b", {value: 1});
        emit("keys", [Object.keys(doc), seen, Object.getOwnPropertyNames(doc)]);
        emit("json", JSON.stringify(doc));
        emit("desc", [d.value, d.writable, d.enumerable, d.configurable, "get" in d]);
        emit("threw", threw);
        emit("shape", [Object.getPrototypeOf(doc) === Object.prototype,
            Object.prototype.toString.call(doc), typeof doc, Array.isArray(doc),
            doc instanceof Object, doc.constructor === Object, Object.isFrozen(doc),
            Object.isSealed(doc), Object.isExtensible(doc)]);
        emit("has", [doc.hasOwnProperty("a"), "a" in doc, "zz" in doc, doc.hasOwnProperty("toString"),
            "toString" in doc, doc.a === doc.a, Object.isFrozen(doc.a), doc[2], doc["1"], doc.zz]);
        emit("copies", [Object.assign({}, doc), Object.entries(doc).length, JSON.parse(JSON.stringify(doc)).b,
            Reflect.ownKeys(doc).length, Reflect.defineProperty(doc, "q", {value: 1})]);
    }"#;
    let mut rt = runtime(vec![view("v", checks)]);
    let rows = rt.map_doc(text).unwrap().remove(0).unwrap();
    let get = |name: &str| rows.iter().find(|(k, _)| k == name).unwrap().1.clone();
    let keys = json!(["1", "2", "b", "a", "_id"]);
    assert_eq!(get("keys"), json!([keys, keys, keys]));
    assert_eq!(
        get("json"),
        json!(r#"{"1":null,"2":"two","b":1,"a":{"x":[1]},"_id":"lazy"}"#)
    );
    assert_eq!(get("desc"), json!([1, false, true, false, false]));
    assert_eq!(get("threw"), json!([true, true, true, true, true]));
    assert_eq!(
        get("shape"),
        json!([
            true,
            "[object Object]",
            "object",
            false,
            true,
            true,
            true,
            true,
            false
        ])
    );
    assert_eq!(
        get("has"),
        json!([true, true, false, false, true, true, true, "two", null, null])
    );
    assert_eq!(
        get("copies"),
        json!([{"1": null, "2": "two", "b": 1, "a": {"x": [1]}, "_id": "lazy"}, 5, 1, 5, false])
    );
}

/// Sloppy-mode writes are ignored without an exception, as on a frozen object.
#[test]
fn sloppy_writes_to_documents_are_ignored() {
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { doc.a = 2; doc.n = 1; var gone = delete doc.a; emit([doc.a, doc.n, gone], null); }",
    )]);
    let rows = rt.map_doc(r#"{"a":1}"#).unwrap().remove(0).unwrap();
    assert_eq!(rows[0].0, json!([1, null, false]));
}

/// A document kept by a map function past its call still reads its own members later.
#[test]
fn documents_kept_across_calls_keep_their_values() {
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { var kept = globalThis.kept = globalThis.kept || []; kept.push(doc); emit(kept.map(function(d) { return d.n; }), kept.length); }",
    )]);
    for n in 1..=3 {
        rt.map_doc(&format!(r#"{{"n":{n},"pad":"{}"}}"#, "x".repeat(n * 100)))
            .unwrap();
    }
    let rows = rt.map_doc(r#"{"n":4}"#).unwrap().remove(0).unwrap();
    assert_eq!(rows[0], (json!([1, 2, 3, 4]), json!(4)));
}

/// Documents with many top-level members are built eagerly, with the same result.
#[test]
fn documents_with_many_members_map_the_same() {
    let members: Vec<String> = (0..100).map(|i| format!(r#""k{i}":{i}"#)).collect();
    let text = format!("{{{}}}", members.join(","));
    let expected: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(round_trip(&text), expected);
}

/// Every truncation and single-byte corruption of a document either maps or fails cleanly:
/// the outline scan and the member parser never read past the text.
#[test]
fn damaged_documents_never_panic() {
    let text = r#"{"_id":"d","s":"a \"quoted\" \\ string with an escape at the end\\","n":[1,-2.5e3,{"k":["x\\y",null,true]}],"o":{"deep":{"er":"yes"}},"t":"tail"}"#;
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { emit(doc.s, [doc.n, doc.o, doc.t, doc.zz]); }",
    )]);
    let bytes = text.as_bytes();
    for cut in 0..bytes.len() {
        let _ = rt.map_doc(&text[..cut]);
    }
    for at in 0..bytes.len() {
        for b in [b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b' '] {
            let mut damaged = bytes.to_vec();
            damaged[at] = b;
            let _ = rt.map_doc(std::str::from_utf8(&damaged).unwrap());
        }
    }
    assert!(rt.map_doc(text).unwrap()[0].is_ok());
}
