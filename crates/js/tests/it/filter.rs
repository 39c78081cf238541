//! Filter functions: arguments, truthiness, and CouchDB's errors for what is thrown.

use std::time::Duration;

use serde_json::{json, Value};
use settee_js::{FilterFn, FilterSource, JsError, Limits, Rejection};

const DDOC_ID: &str = "_design/f";

fn source_of(ddoc: Value) -> FilterSource {
    FilterSource {
        ddoc_id: DDOC_ID.into(),
        ddoc,
        name: "f".into(),
    }
}

fn compile(fun: &str) -> Result<FilterFn, Rejection> {
    let ddoc = json!({"_id": DDOC_ID, "_rev": "1-a", "filters": {"f": fun}});
    FilterFn::new(&source_of(ddoc), Limits::default())
}

fn filter(fun: &str) -> FilterFn {
    compile(fun).expect("filter compiles")
}

fn req() -> Value {
    json!({"query": {"field": "kind"}, "userCtx": {"db": "db", "name": "bob", "roles": []}})
}

/// Runs `fun` over one document with [`req`].
fn run(fun: &str, doc: Value) -> Result<bool, Rejection> {
    filter(fun).filter(&[doc], &req()).map(|passes| passes[0])
}

fn thrown(value: &str) -> Rejection {
    run(
        &format!("function(doc, req) {{ throw {value}; }}"),
        json!({"_id": "x"}),
    )
    .expect_err("the filter throws")
}

fn assert_error(rejection: Rejection, error: &str, reason: Value) {
    match rejection {
        Rejection::Error {
            error: e,
            reason: r,
        } => assert_eq!((e.as_str(), r), (error, reason)),
        other => panic!("expected {error}: {reason}, got {other:?}"),
    }
}

#[test]
fn passes_what_javascript_finds_truthy() {
    let fun = "function(doc, req) { return doc.v; }";
    let mut f = filter(fun);
    let values = [
        json!("foom"),
        json!(true),
        json!(1),
        json!(-0.5),
        json!({}),
        json!([]),
        json!("0"),
        json!(false),
        json!(0),
        json!(""),
        json!(null),
    ];
    let docs: Vec<Value> = values.iter().map(|v| json!({"_id": "d", "v": v})).collect();
    let passes = f.filter(&docs, &req()).unwrap();
    assert_eq!(
        passes,
        [true, true, true, true, true, true, true, false, false, false, false]
    );
    // A missing member (undefined) and NaN are falsy too.
    assert_eq!(f.filter(&[json!({"_id": "d"})], &req()).unwrap(), [false]);
    assert!(!run("function(doc) { return NaN; }", json!({})).unwrap());
    assert!(!run("function(doc) { }", json!({})).unwrap());
}

#[test]
fn sees_the_document_the_request_and_the_design_document() {
    let fun = "function(doc, req) { return doc[req.query.field] === 'post' && req.userCtx.name === 'bob'; }";
    let mut f = filter(fun);
    let docs = [
        json!({"_id": "a", "kind": "post"}),
        json!({"_id": "b", "kind": "comment"}),
    ];
    assert_eq!(f.filter(&docs, &req()).unwrap(), [true, false]);
    // `this` is the design document, with the compiled function in place of its source.
    let this = "function(doc) { return this._id === '_design/f' && typeof this.filters.f === 'function'; }";
    assert!(run(this, json!({})).unwrap());
}

#[test]
fn deleted_documents_are_documents_too() {
    let fun = "function(doc) { return doc._deleted === true; }";
    let doc = json!({"_id": "gone", "_rev": "2-b", "_deleted": true});
    assert!(run(fun, doc).unwrap());
}

#[test]
fn documents_and_the_request_are_plain_objects() {
    // CouchDB does not freeze a filter's arguments; writes are the filter's own business.
    let fun = "function(doc, req) { 'use strict'; doc.seen = true; req.query.x = 1; return doc.seen && req.query.x === 1; }";
    assert!(run(fun, json!({"_id": "a"})).unwrap());
}

#[test]
fn the_request_is_shared_by_one_calls_documents() {
    let fun = "function(doc, req) { req.count = (req.count || 0) + 1; return req.count === 2; }";
    let mut f = filter(fun);
    let docs = [json!({"_id": "a"}), json!({"_id": "b"})];
    assert_eq!(f.filter(&docs, &req()).unwrap(), [false, true]);
    // Each call parses the request afresh.
    assert_eq!(f.filter(&docs, &req()).unwrap(), [false, true]);
}

#[test]
fn require_resolves_against_the_design_document() {
    let ddoc = json!({
        "_id": DDOC_ID,
        "lib": {"kinds": "exports.wanted = function(k) { return k === 'post'; };"},
        "filters": {"f": "function(doc) { return require('lib/kinds').wanted(doc.kind); }"}
    });
    let mut f = FilterFn::new(&source_of(ddoc), Limits::default()).unwrap();
    let docs = [json!({"kind": "post"}), json!({"kind": "other"})];
    assert_eq!(f.filter(&docs, &req()).unwrap(), [true, false]);
}

#[test]
fn emit_and_log_are_harmless() {
    let fun = "function(doc) { emit(doc._id, 1); log('filtering ' + doc._id); return true; }";
    assert!(run(fun, json!({"_id": "a"})).unwrap());
}

#[test]
fn errors_are_what_couchdbs_dispatch_loop_answers() {
    // Errors: their name, and the error object as JSON.
    assert_error(thrown("new Error('boom')"), "Error", json!({}));
    assert_error(thrown("new TypeError('bad')"), "TypeError", json!({}));
    // The old `{error, reason}` form.
    assert_error(
        thrown("{error: 'not_found', reason: 'gone'}"),
        "not_found",
        json!("gone"),
    );
    // CouchDB's own `["error", name, reason]` arrays, and `["fatal", ...]` alike.
    assert_error(
        thrown("['error', 'bad_request', 'no']"),
        "bad_request",
        json!("no"),
    );
    assert_error(thrown("['fatal', 'oops', 'dead']"), "oops", json!("dead"));
    // Anything else is unnamed, with its `stack` (none) as the reason.
    assert_error(thrown("'boom'"), "unnamed_error", Value::Null);
    assert_error(thrown("42"), "unnamed_error", Value::Null);
    assert_error(thrown("{forbidden: 'no'}"), "unnamed_error", Value::Null);
    assert_error(thrown("null"), "internal_error", Value::Null);
    assert_error(thrown("undefined"), "TypeError", json!({}));
}

#[test]
fn forbidden_and_unauthorized_keep_their_meaning() {
    match thrown("['error', 'forbidden', 'not you']") {
        Rejection::Forbidden(reason) => assert_eq!(reason, json!("not you")),
        other => panic!("expected forbidden, got {other:?}"),
    }
    match thrown("{error: 'unauthorized', reason: 'log in'}") {
        Rejection::Unauthorized(reason) => assert_eq!(reason, json!("log in")),
        other => panic!("expected unauthorized, got {other:?}"),
    }
}

#[test]
fn runtime_errors_in_the_function_are_errors() {
    let fun = "function(doc) { return doc.a.b; }";
    assert_error(
        run(fun, json!({"_id": "x"})).unwrap_err(),
        "TypeError",
        json!({}),
    );
}

#[test]
fn the_first_throw_fails_the_whole_call() {
    let fun = "function(doc) { if (doc.bad) throw new Error('bad'); return true; }";
    let mut f = filter(fun);
    let docs = [json!({"_id": "a"}), json!({"_id": "b", "bad": true})];
    assert!(f.filter(&docs, &req()).is_err());
}

#[test]
fn compile_errors_name_the_source() {
    let Err(rejection) = compile("function(doc) { return ") else {
        panic!("a syntax error compiles");
    };
    let Rejection::Error { error, reason } = rejection else {
        panic!("expected an error term");
    };
    assert_eq!(error, "compilation_error");
    let reason = reason.as_str().unwrap();
    assert!(reason.starts_with("SyntaxError"), "{reason}");
    assert!(reason.ends_with("(function(doc) { return )"), "{reason}");
    let Err(not_fun) = compile("42") else {
        panic!("a number compiles to a function");
    };
    assert_error(
        not_fun,
        "compilation_error",
        json!("Expression does not eval to a function. (42)"),
    );
}

#[test]
fn an_empty_member_is_a_missing_function() {
    for empty in [json!(""), json!(null), json!(false), json!(0)] {
        let ddoc = json!({"_id": DDOC_ID, "filters": {"f": empty}});
        let Err(rejection) = FilterFn::new(&source_of(ddoc), Limits::default()) else {
            panic!("an empty filter compiles");
        };
        assert_error(
            rejection,
            "not_found",
            json!("missing filters function f on design doc _design/f"),
        );
    }
}

#[test]
fn a_runaway_filter_times_out() {
    let limits = Limits {
        timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let ddoc = json!({"_id": DDOC_ID, "filters": {"f": "function(doc) { while (true) {} }"}});
    let mut f = FilterFn::new(&source_of(ddoc), limits).unwrap();
    match f.filter(&[json!({})], &req()) {
        Err(Rejection::Failed(JsError::Timeout)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_greedy_filter_runs_out_of_memory() {
    let limits = Limits {
        memory_limit: 8 << 20,
        ..Limits::default()
    };
    let fun = "function(doc) { var a = []; while (true) a.push({n: a.length}); }";
    let ddoc = json!({"_id": DDOC_ID, "filters": {"f": fun}});
    let mut f = FilterFn::new(&source_of(ddoc), limits).unwrap();
    match f.filter(&[json!({})], &req()) {
        Err(Rejection::Failed(JsError::OutOfMemory)) => {}
        other => panic!("expected out of memory, got {other:?}"),
    }
}
