//! map_doc: emitted shapes, conversion rules, per-view isolation of errors and of the doc.

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn emits_rows_in_order_with_exact_numbers() {
    let rows = map_one(
        "function(doc) { emit([doc.year, doc.month], doc.score); emit(doc._id, null); }",
        &doc(),
    );
    assert_eq!(
        rows,
        vec![(json!([2024, 5]), json!(912)), (json!("d1"), json!(null))]
    );
    // 912 stays an integer in JSON text, not 912.0.
    assert_eq!(rows[0].1.to_string(), "912");
    assert!(rows[0].1.is_i64());
}

#[test]
fn no_emit_gives_empty_rows() {
    assert!(map_one("function(doc) {}", &doc()).is_empty());
    assert!(map_one("function(doc) { if (doc.nope) emit(1, 2); }", &doc()).is_empty());
}

#[test]
fn missing_and_undefined_values_become_null() {
    let rows = map_one(
        "function(doc) { emit(doc._id); emit(undefined, undefined); emit(); emit(null, doc.nope); }",
        &doc(),
    );
    assert_eq!(
        rows,
        vec![
            (json!("d1"), json!(null)),
            (json!(null), json!(null)),
            (json!(null), json!(null)),
            (json!(null), json!(null)),
        ]
    );
}

#[test]
fn nested_values_follow_json_stringify() {
    let rows = map_one(
        r#"function(doc) {
            emit([1, [2, [3, {a: [4]}]]], {z: 1, a: 2, m: {y: true, b: false}});
            emit("holes", [undefined, function() {}, NaN, Infinity, -Infinity]);
            emit("omitted", {u: undefined, f: function() {}, n: null, s: "x"});
            emit("date", new Date(Date.UTC(2024, 0, 2, 3, 4, 5)));
            emit("toJSON", {toJSON: function(k) { return "custom:" + k; }});
            emit("boxed", [new Number(3), new String("s"), new Boolean(false)]);
            emit("fn", function() {});
        }"#,
        &doc(),
    );
    let expected = vec![
        (
            json!([1, [2, [3, {"a": [4]}]]]),
            json!({"z": 1, "a": 2, "m": {"y": true, "b": false}}),
        ),
        (json!("holes"), json!([null, null, null, null, null])),
        (json!("omitted"), json!({"n": null, "s": "x"})),
        (json!("date"), json!("2024-01-02T03:04:05.000Z")),
        (json!("toJSON"), json!("custom:")),
        (json!("boxed"), json!([3, "s", false])),
        (json!("fn"), json!(null)),
    ];
    assert_eq!(rows, expected);
    // Member order is the object's own order, not sorted.
    assert_eq!(
        rows[0].1.to_string(),
        r#"{"z":1,"a":2,"m":{"y":true,"b":false}}"#
    );
}

#[test]
fn integral_and_fractional_numbers() {
    let rows = map_one(
        "function(doc) { emit(1.5, 2.0); emit(-0, 1e3); emit(0.1 + 0.2, 9007199254740993);
                         emit(2e20, 1e21); emit(-7, 1/3); emit(doc.big, doc.neg); }",
        &json!({"_id": "n", "big": 12_345_678_901_i64, "neg": -42.25}),
    );
    let text: Vec<String> = rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
    assert_eq!(
        text,
        vec![
            "1.5 2",
            "0 1000",
            "0.30000000000000004 9007199254740992",
            "200000000000000000000 1e+21",
            "-7 0.3333333333333333",
            "12345678901 -42.25",
        ]
    );
    assert!(rows[0].1.is_i64() && rows[4].0.is_i64());
    assert!(rows[0].0.is_f64() && rows[4].1.is_f64());
}

#[test]
fn strings_and_unicode_round_trip() {
    let d = json!({"_id": "u", "s": "héllo \u{1F600} \"q\" \\ \n\t", "k": "ключ"});
    let rows = map_one("function(doc) { emit(doc.s, doc.k + '!'); }", &d);
    assert_eq!(
        rows,
        vec![(json!("héllo \u{1F600} \"q\" \\ \n\t"), json!("ключ!"))]
    );
}

#[test]
fn doc_member_order_and_special_keys_preserved() {
    let text = r#"{"_id":"o","z":1,"a":{"y":2,"b":3},"__proto__":{"p":1},"arr":[1,{"x":null}]}"#;
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { emit(Object.keys(doc), doc); }",
    )]);
    let out = rt.map_doc(text).unwrap().remove(0).unwrap();
    assert_eq!(out[0].0, json!(["_id", "z", "a", "__proto__", "arr"]));
    assert_eq!(out[0].1.to_string(), text);
}

#[test]
fn throwing_map_skips_only_that_view() {
    let mut rt = runtime(vec![
        view("ok1", "function(doc) { emit(doc._id, 1); }"),
        view(
            "bad",
            "function(doc) { emit('before', 1); throw new Error('boom ' + doc._id); }",
        ),
        view("typeerr", "function(doc) { emit(doc.missing.field, 1); }"),
        view("ok2", "function(doc) { emit(doc._id, 2); }"),
    ]);
    let results = rt.map_doc(&doc().to_string()).unwrap();
    assert_eq!(texts(&results[0]), r#"[["d1",1]]"#);
    let bad = results[1].as_ref().unwrap_err();
    assert!(bad.starts_with("Error: boom d1"), "{bad}");
    let typeerr = results[2].as_ref().unwrap_err();
    assert!(typeerr.starts_with("TypeError"), "{typeerr}");
    assert_eq!(texts(&results[3]), r#"[["d1",2]]"#);
    // The runtime keeps working for the next document.
    let next = rt.map_doc(r#"{"_id":"d2"}"#).unwrap();
    assert_eq!(texts(&next[0]), r#"[["d2",1]]"#);
    assert!(next[1].is_err());
}

#[test]
fn thrown_non_errors_are_described() {
    let mut rt = runtime(vec![
        view("s", "function(doc) { throw 'plain string'; }"),
        view("o", "function(doc) { throw {error: 'x', reason: 'y'}; }"),
        view("n", "function(doc) { throw 42; }"),
    ]);
    let results = rt.map_doc(&doc().to_string()).unwrap();
    assert_eq!(texts(&results[0]), "ERR plain string");
    assert_eq!(texts(&results[1]), r#"ERR {"error":"x","reason":"y"}"#);
    assert_eq!(texts(&results[2]), "ERR 42");
}

#[test]
fn fatal_error_aborts_map_doc() {
    let mut rt = runtime(vec![
        view("ok", "function(doc) { emit(1, 1); }"),
        view("fatal", "function(doc) { throw 'fatal_error'; }"),
    ]);
    let err = rt.map_doc(&doc().to_string()).unwrap_err();
    assert!(
        matches!(err, settee_js::JsError::Thrown(ref m) if m == "fatal_error"),
        "{err:?}"
    );
}

#[test]
fn doc_is_deep_frozen_and_shared_safely_between_views() {
    let mut rt = runtime(vec![
        view(
            "mutator",
            r#"function(doc) {
                doc.year = 1; doc.added = true; delete doc._id; doc.tags.push('c'); doc.tags[0] = 'z';
                emit(Object.isFrozen(doc) && Object.isFrozen(doc.tags), [doc.year, doc.added, doc._id, doc.tags]);
            }"#,
        ),
        view(
            "strict",
            "function(doc) { 'use strict'; doc.year = 1; emit('unreachable', 1); }",
        ),
        view("reader", "function(doc) { emit(doc.year, doc.tags); }"),
    ]);
    let results = rt.map_doc(&doc().to_string()).unwrap();
    // push() on a frozen array throws even in sloppy mode, like in CouchDB.
    assert!(
        results[0].as_ref().unwrap_err().starts_with("TypeError"),
        "{:?}",
        results[0]
    );
    assert!(
        results[1].as_ref().unwrap_err().starts_with("TypeError"),
        "{:?}",
        results[1]
    );
    assert_eq!(texts(&results[2]), r#"[[2024,["a","b"]]]"#);

    let mut rt = runtime(vec![
        view(
            "sloppy",
            "function(doc) { doc.year = 1; doc.added = true; doc.tags[0] = 'z'; emit(doc.year, [doc.added, doc.tags]); }",
        ),
        view("reader", "function(doc) { emit(doc.year, doc.tags); }"),
    ]);
    let results = rt.map_doc(&doc().to_string()).unwrap();
    assert_eq!(texts(&results[0]), r#"[[2024,[null,["a","b"]]]]"#);
    assert_eq!(texts(&results[1]), r#"[[2024,["a","b"]]]"#);
}

#[test]
fn emitted_objects_are_serialised_after_the_map_returns() {
    let rows = map_one(
        "function(doc) { var v = {n: 1}; emit('k', v); v.n = 2; }",
        &doc(),
    );
    assert_eq!(rows, vec![(json!("k"), json!({"n": 2}))]);
}

#[test]
fn unconvertible_emits_fail_the_view() {
    let mut rt = runtime(vec![
        view(
            "cycle",
            "function(doc) { var a = {}; a.self = a; emit(1, a); }",
        ),
        view("bigint", "function(doc) { emit(1, 10n); }"),
        view(
            "deep",
            "function(doc) { var a = []; for (var i = 0; i < 10000; i++) a = [a]; emit(a, 1); }",
        ),
        view("fine", "function(doc) { emit(1, 1); }"),
    ]);
    let results = rt.map_doc(&doc().to_string()).unwrap();
    for r in &results[..3] {
        assert!(r.as_ref().unwrap_err().starts_with("TypeError"), "{r:?}");
    }
    assert_eq!(texts(&results[3]), "[[1,1]]");
}

#[test]
fn globals_match_couchdb_sandbox() {
    let rows = map_one(
        r#"function(doc) {
            emit('sum', sum([1, 2, 3.5]));
            emit('isArray', [isArray([]), isArray({}), isArray('x')]);
            emit('toJSON', toJSON({a: [1, 'x']}));
            emit('JSON', JSON.parse('{"b":1}'));
            log('a message'); log({an: 'object'});
            emit('types', [typeof require, typeof std, typeof os, typeof print, typeof process,
                           typeof setTimeout, typeof fetch]);
        }"#,
        &doc(),
    );
    assert_eq!(
        rows,
        vec![
            (json!("sum"), json!(6.5)),
            (json!("isArray"), json!([true, false, false])),
            (json!("toJSON"), json!(r#"{"a":[1,"x"]}"#)),
            (json!("JSON"), json!({"b": 1})),
            (
                json!("types"),
                json!([
                    "function",
                    "undefined",
                    "undefined",
                    "undefined",
                    "undefined",
                    "undefined",
                    "undefined"
                ])
            ),
        ]
    );
}

#[test]
fn deep_recursion_throws_and_runtime_survives() {
    let mut rt = runtime(vec![
        view(
            "rec",
            "function(doc) { function f(n) { return f(n + 1) + 1; } emit(f(0), 1); }",
        ),
        view("ok", "function(doc) { emit(doc._id, 1); }"),
    ]);
    let results = rt.map_doc(&doc().to_string()).unwrap();
    let err = results[0].as_ref().unwrap_err();
    assert!(err.contains("RangeError") || err.contains("stack"), "{err}");
    assert_eq!(texts(&results[1]), r#"[["d1",1]]"#);
    let again = rt.map_doc(&doc().to_string()).unwrap();
    assert_eq!(texts(&again[1]), r#"[["d1",1]]"#);
}

#[test]
fn invalid_doc_json_is_internal_error() {
    let mut rt = runtime(vec![view("v", "function(doc) { emit(1, 1); }")]);
    assert!(matches!(
        rt.map_doc("{not json"),
        Err(settee_js::JsError::Internal(_))
    ));
    assert_eq!(texts(&rt.map_doc("{}").unwrap()[0]), "[[1,1]]");
}

#[test]
fn runtime_code_evaluation_is_refused_as_couchjs_refuses_it() {
    // CouchDB's default JavaScript server blocks eval() and the Function constructors
    // (view_sandboxing_test.exs): the map function throws and emits nothing.
    for code in [
        "eval('1 + 2')",
        "(0, eval)('1')",
        "new Function('return 1')",
        "Function('return 1')()",
        "emit.constructor('return this')()",
        "(function*(){}).constructor('yield 1')",
        "(async function(){}).constructor('return 1')",
    ] {
        let mut rt = runtime(vec![view(
            "v",
            &format!("function(doc) {{ {code}; emit(1, 1); }}"),
        )]);
        let out = rt.map_doc(&doc().to_string()).unwrap().remove(0);
        let err = out.unwrap_err();
        assert!(err.contains("EvalError"), "{code}: {err}");
        assert!(err.contains("blocked by CSP"), "{code}: {err}");
    }
    let rows = map_one(
        r#"function(doc) {
            try { eval('1'); } catch (e) { emit(e.name, e.message); }
            try { new Function('a', 'return a'); } catch (e) { emit(e.name, e.message); }
            emit((function(){}).constructor === Function, typeof eval);
        }"#,
        &doc(),
    );
    assert_eq!(
        rows,
        vec![
            (json!("EvalError"), json!("call to eval() blocked by CSP")),
            (
                json!("EvalError"),
                json!("call to Function() blocked by CSP")
            ),
            (json!(true), json!("function")),
        ]
    );
}

#[test]
fn async_map_functions_run_to_completion() {
    let rows = map_one(
        "function(doc) { (async function() { var v = await Promise.resolve(doc.score); emit('async', v); })(); }",
        &doc(),
    );
    assert_eq!(rows, vec![(json!("async"), json!(912))]);
}
