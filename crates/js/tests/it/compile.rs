//! Compiling CouchDB function sources.

use crate::common;

use common::*;
use serde_json::json;
use settee_js::{JsError, Limits, ViewFns, ViewRuntime};

fn compile(map: &str) -> Result<ViewRuntime, JsError> {
    ViewRuntime::new(
        &ViewFns {
            views: vec![view("by_x", map)],
            lib: None,
            dialect: Default::default(),
        },
        Limits::default(),
    )
}

fn compile_reason(map: &str) -> (String, String) {
    match compile(map) {
        Err(JsError::Compile { what, reason }) => (what, reason),
        Err(other) => panic!("expected a compile error, got {other:?}"),
        Ok(_) => panic!("expected a compile error for {map:?}"),
    }
}

#[test]
fn accepts_couchdb_source_forms() {
    let sources = [
        "function(doc) { emit(doc._id, 1); }",
        "  \n function (doc) { emit(doc._id, 1); }  \n",
        "function(doc) { emit(doc._id, 1); };",
        "function(doc) { emit(doc._id, 1); }; ",
        "// leading comment\nfunction(doc) { emit(doc._id, 1); }",
        "/* block */ function(doc) { emit(doc._id, 1); } // trailing comment",
        "function(doc) { emit(doc._id, 1); }; // trailing comment after semicolon",
        "function mapper(doc) { emit(doc._id, 1); }",
        "(function(doc) { emit(doc._id, 1); })",
        "var one = 1; (function(doc) { emit(doc._id, one); })",
        "(doc) => { emit(doc._id, 1); }",
    ];
    for source in sources {
        let mut rt = compile(source).unwrap_or_else(|e| panic!("{source:?}: {e}"));
        let rows = rt.map_doc(&doc().to_string()).unwrap().remove(0).unwrap();
        assert_eq!(rows, vec![(json!("d1"), json!(1))], "{source:?}");
    }
}

#[test]
fn syntax_errors_are_compile_errors() {
    let (what, reason) = compile_reason("function(doc) { emit(doc._id, 1 }");
    assert_eq!(
        what,
        "Compilation of the map function in the 'by_x' view failed"
    );
    assert!(reason.starts_with("SyntaxError"), "{reason}");
    assert!(
        reason.ends_with("(function(doc) { emit(doc._id, 1 })"),
        "{reason}"
    );
}

#[test]
fn non_functions_are_compile_errors() {
    for source in ["42", "'function'", "{}", "var x = 1;", "null"] {
        let (_, reason) = compile_reason(source);
        assert_eq!(
            reason,
            format!("Expression does not eval to a function. ({source})")
        );
    }
    let (_, reason) = compile_reason("   ");
    assert_eq!(reason, "missing function");
}

#[test]
fn top_level_errors_are_compile_errors() {
    let (_, reason) = compile_reason("undefinedThing.foo; (function(doc) {})");
    assert!(reason.starts_with("ReferenceError"), "{reason}");
}

#[test]
fn bad_reduce_names_the_reduce() {
    let fns = ViewFns {
        views: vec![reduce_view(
            "r",
            "function(doc) { emit(1, 1); }",
            "function(keys, values {",
        )],
        lib: None,
        dialect: Default::default(),
    };
    match ViewRuntime::new(&fns, Limits::default()) {
        Err(JsError::Compile { what, .. }) => {
            assert_eq!(
                what,
                "Compilation of the reduce function in the 'r' view failed"
            )
        }
        other => panic!("{:?}", other.err()),
    }
}
