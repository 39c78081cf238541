//! require(): CommonJS modules from the design document's `views.lib`.

use crate::common;

use common::*;
use serde_json::json;

fn lib() -> serde_json::Value {
    json!({
        "math": "exports.double = function(x) { return x * 2; }; exports.loads = (exports.loads || 0) + 1;",
        "greet": "module.exports = function(name) { return 'hi ' + name; };",
        "util": {
            "fmt": "var m = require('./helpers/pad'); exports.fmt = function(x) { return m.pad(x) + require('../suffix').s; };",
            "helpers": {
                "pad": "exports.pad = function(x) { return '[' + x + ']'; };"
            }
        },
        "suffix": "exports.s = '!'; // trailing comment",
        "counter": "var n = 0; exports.next = function() { return ++n; };",
        "broken": "exports.x = ;",
        "throws": "throw new Error('module failed');",
        "notjs": 42,
        "abs": "exports.v = require('views/lib/math').double(21);",
        "dyn": "import('os');"
    })
}

fn map_with_lib(map: &str) -> settee_js::MapResult {
    let mut rt = runtime_with_lib(vec![view("v", map)], lib());
    rt.map_doc(&doc().to_string()).unwrap().remove(0)
}

#[test]
fn requires_modules_by_design_doc_path() {
    let out = map_with_lib(
        "function(doc) { var m = require('views/lib/math'); emit(m.double(doc.month), require('views/lib/greet')(doc._id)); }",
    );
    assert_eq!(texts(&out), r#"[[10,"hi d1"]]"#);
}

#[test]
fn nested_and_relative_paths_resolve_against_the_module() {
    let out = map_with_lib("function(doc) { emit(require('views/lib/util/fmt').fmt(doc._id), require('views/lib/abs').v); }");
    assert_eq!(texts(&out), r#"[["[d1]!",42]]"#);
}

#[test]
fn modules_are_cached_per_runtime() {
    let mut rt = runtime_with_lib(
        vec![
            view("a", "function(doc) { emit(require('views/lib/counter').next(), require('views/lib/math').loads); }"),
            view("b", "function(doc) { emit(require('views/lib/counter').next(), require('views/lib/math').loads); }"),
        ],
        lib(),
    );
    let first = rt.map_doc(&doc().to_string()).unwrap();
    let second = rt.map_doc(&doc().to_string()).unwrap();
    assert_eq!(texts(&first[0]), "[[1,1]]");
    assert_eq!(texts(&first[1]), "[[2,1]]");
    assert_eq!(texts(&second[0]), "[[3,1]]");
}

#[test]
fn unknown_paths_and_bad_modules_throw_couchdb_errors_in_the_map() {
    let cases = [
        (
            "views/lib/nope",
            r#"["error","invalid_require_path","Object has no property \"nope\". {"#,
        ),
        (
            "lib/math",
            r#"["error","invalid_require_path","Object has no property \"lib\". {"#,
        ),
        (
            "./math",
            "TypeError: can't access property \"parent\", mod is undefined",
        ),
        (
            "views/lib/notjs",
            "Must require a JavaScript string, not: number",
        ),
        (
            "views/lib/util",
            "Must require a JavaScript string, not: object",
        ),
        (
            "views/lib/broken",
            "Module require('views/lib/broken') raised error SyntaxError",
        ),
        (
            "views/lib/throws",
            "Module require('views/lib/throws') raised error Error: module failed",
        ),
    ];
    for (path, expected) in cases {
        let out = map_with_lib(&format!("function(doc) {{ emit(1, require('{path}')); }}"));
        let err = out.unwrap_err();
        assert!(err.contains(expected), "{path}: {err}");
    }
}

#[test]
fn a_failed_module_stays_an_empty_object() {
    // CouchDB caches `{}` for a module before running it and keeps it when it throws.
    let mut rt = runtime_with_lib(
        vec![view("v", "function(doc) { try { require('views/lib/throws'); } catch (e) { emit('caught', e[1]); } emit('again', require('views/lib/throws')); }")],
        lib(),
    );
    let out = rt.map_doc(&doc().to_string()).unwrap().remove(0);
    assert_eq!(
        out.unwrap(),
        vec![
            (json!("caught"), json!("compilation_error")),
            (json!("again"), json!({}))
        ]
    );
}

#[test]
fn a_circular_require_gets_the_empty_placeholder() {
    let lib = json!({
        "one": "var two = require('./two'); exports.name = 'one'; exports.two = two.name;",
        "two": "var one = require('./one'); exports.name = 'two'; exports.one = JSON.stringify(one);",
    });
    let mut rt = runtime_with_lib(
        vec![view("v", "function(doc) { var one = require('views/lib/one'); emit([one.name, one.two], require('views/lib/two').one); }")],
        lib,
    );
    let out = rt.map_doc(&doc().to_string()).unwrap().remove(0);
    assert_eq!(out.unwrap(), vec![(json!(["one", "two"]), json!("{}"))]);
}

#[test]
fn without_lib_require_fails_cleanly() {
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { emit(1, require('views/lib/x')); }",
    )]);
    let out = rt.map_doc(&doc().to_string()).unwrap().remove(0);
    assert!(out
        .unwrap_err()
        .contains(r#"Object has no property \"lib\". {}"#));
}

#[test]
fn no_filesystem_or_host_modules() {
    let out = map_with_lib("function(doc) { emit(1, require('fs')); }");
    assert!(out
        .unwrap_err()
        .contains(r#"Object has no property \"fs\""#));
    let out = map_with_lib(
        "function(doc) { var r = []; try { require('views/lib/dyn'); r.push('dynamic import parsed'); } catch (e) { r.push(String(e[0])); } emit(r, [typeof std, typeof os, typeof scriptArgs]); }",
    );
    let rows = out.unwrap();
    assert_eq!(rows[0].1, json!(["undefined", "undefined", "undefined"]));
}
