//! require(): CommonJS modules from the design document's `views.lib`.

mod common;

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
        "abs": "exports.v = require('views/lib/math').double(21);"
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
fn unknown_paths_and_bad_modules_throw_in_the_map() {
    let cases = [
        ("views/lib/nope", "require('views/lib/nope') failed"),
        ("lib/math", "require('lib/math') failed"),
        ("./math", "relative path outside a module"),
        ("views/lib/notjs", "must name a JavaScript string"),
        ("views/lib/util", "must name a JavaScript string"),
        ("views/lib/broken", "raised error SyntaxError"),
        ("views/lib/throws", "raised error Error: module failed"),
    ];
    for (path, expected) in cases {
        let out = map_with_lib(&format!("function(doc) {{ emit(1, require('{path}')); }}"));
        let err = out.unwrap_err();
        assert!(err.contains(expected), "{path}: {err}");
    }
}

#[test]
fn failed_module_is_not_cached() {
    let mut rt = runtime_with_lib(
        vec![view("v", "function(doc) { try { require('views/lib/throws'); } catch (e) { emit('caught', 1); } require('views/lib/throws'); }")],
        lib(),
    );
    let out = rt.map_doc(&doc().to_string()).unwrap().remove(0);
    assert!(out.unwrap_err().contains("module failed"));
}

#[test]
fn without_lib_require_fails_cleanly() {
    let mut rt = runtime(vec![view(
        "v",
        "function(doc) { emit(1, require('views/lib/x')); }",
    )]);
    let out = rt.map_doc(&doc().to_string()).unwrap().remove(0);
    assert!(out.unwrap_err().contains("require('views/lib/x') failed"));
}

#[test]
fn no_filesystem_or_host_modules() {
    let out = map_with_lib("function(doc) { emit(1, require('fs')); }");
    assert!(out.unwrap_err().contains("require('fs') failed"));
    let out = map_with_lib(
        "function(doc) { var r = []; try { eval('import(\"os\")'); r.push('dynamic import parsed'); } catch (e) { r.push(String(e.name)); } emit(r, [typeof std, typeof os, typeof scriptArgs]); }",
    );
    let rows = out.unwrap();
    assert_eq!(rows[0].1, json!(["undefined", "undefined", "undefined"]));
}
