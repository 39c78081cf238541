//! validate_doc_update: arguments, globals, and CouchDB's verdicts for what is thrown.

use std::time::Duration;

use serde_json::{json, Value};
use settee_js::{JsError, Limits, Rejection, ValidateSource, Validator};

const USER: &str = r#"{"db": "db", "name": "bob", "roles": ["editor"]}"#;
const ADMIN: &str = r#"{"db": "db", "name": "root", "roles": ["_admin"]}"#;
const SEC: &str =
    r#"{"admins": {"names": [], "roles": []}, "members": {"names": ["bob"], "roles": []}}"#;

fn source(ddoc_id: &str, ddoc: Value, vdu: &str) -> ValidateSource {
    ValidateSource {
        ddoc_id: ddoc_id.into(),
        ddoc,
        source: vdu.into(),
    }
}

fn validator(vdus: &[&str]) -> Validator {
    let fns: Vec<_> = vdus
        .iter()
        .enumerate()
        .map(|(i, vdu)| {
            let id = format!("_design/d{i}");
            source(&id, json!({"_id": id}), vdu)
        })
        .collect();
    Validator::new(&fns, Limits::default()).expect("validator")
}

/// Validates `doc` (new, no old doc) as a plain user with one function.
fn check(vdu: &str, doc: Value) -> Result<(), Rejection> {
    validator(&[vdu]).validate(&doc.to_string(), None, USER, SEC)
}

fn thrown(value: &str) -> Result<(), Rejection> {
    check(
        &format!("function(newDoc) {{ throw {value}; }}"),
        json!({"_id": "x"}),
    )
}

fn assert_error(result: Result<(), Rejection>, error: &str, reason: Value) {
    match result {
        Err(Rejection::Error {
            error: e,
            reason: r,
        }) => {
            assert_eq!((e.as_str(), r), (error, reason))
        }
        other => panic!("expected {error}: {reason}, got {other:?}"),
    }
}

#[test]
fn accepts_when_nothing_is_thrown() {
    let vdu = "function(newDoc, oldDoc, userCtx, secObj) { if (!newDoc.title) throw({forbidden: 'title required'}); }";
    assert!(check(vdu, json!({"_id": "a", "title": "t"})).is_ok());
    // Return values mean nothing.
    assert!(check("function() { return false; }", json!({"_id": "a"})).is_ok());
}

#[test]
fn forbidden_and_unauthorized_carry_their_reasons() {
    let vdu = "function(newDoc, oldDoc, userCtx) { if (newDoc.locked) throw({forbidden: 'locked: ' + newDoc._id}); if (newDoc.owner !== userCtx.name) throw({unauthorized: 'not yours'}); }";
    match check(vdu, json!({"_id": "a", "locked": true})) {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("locked: a")),
        other => panic!("{other:?}"),
    }
    match check(vdu, json!({"_id": "a", "owner": "eve"})) {
        Err(Rejection::Unauthorized(reason)) => assert_eq!(reason, json!("not yours")),
        other => panic!("{other:?}"),
    }
    assert!(check(vdu, json!({"_id": "a", "owner": "bob"})).is_ok());
}

#[test]
fn non_string_reasons_pass_through_as_json() {
    match thrown("{forbidden: {field: 'title', problems: [1, 2.5, null]}}") {
        Err(Rejection::Forbidden(reason)) => {
            assert_eq!(
                reason,
                json!({"field": "title", "problems": [1, 2.5, null]})
            )
        }
        other => panic!("{other:?}"),
    }
    match thrown("{unauthorized: 42}") {
        Err(Rejection::Unauthorized(reason)) => assert_eq!(reason, json!(42)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn runs_in_order_and_stops_at_the_first_rejection() {
    let mut v = validator(&[
        "function(doc) { log('first'); if (doc.a) throw({forbidden: 'first'}); }",
        "function(doc) { if (doc.b) throw({forbidden: 'second'}); }",
        // Would time out if it ran: proves the chain stopped.
        "function(doc) { if (doc.a || doc.b) while (true) {} }",
    ]);
    let ids: Vec<_> = v.ddoc_ids().collect();
    assert_eq!(ids, ["_design/d0", "_design/d1", "_design/d2"]);
    for (doc, expected) in [
        (json!({"a": 1, "b": 1}), "first"),
        (json!({"b": 1}), "second"),
    ] {
        match v.validate(&doc.to_string(), None, USER, SEC) {
            Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!(expected)),
            other => panic!("{other:?}"),
        }
    }
    assert!(v.validate("{}", None, USER, SEC).is_ok());
}

#[test]
fn old_doc_is_null_for_new_documents() {
    let mut v = validator(&[
        "function(newDoc, oldDoc) { if (oldDoc === null) throw({forbidden: 'created'}); if (oldDoc.n >= newDoc.n) throw({forbidden: 'n must grow from ' + oldDoc.n}); }",
    ]);
    let new = json!({"_id": "c", "_rev": "1-a", "n": 2}).to_string();
    match v.validate(&new, None, USER, SEC) {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("created")),
        other => panic!("{other:?}"),
    }
    let old = json!({"_id": "c", "_rev": "1-a", "n": 1}).to_string();
    assert!(v.validate(&new, Some(&old), USER, SEC).is_ok());
    let old = json!({"_id": "c", "_rev": "1-a", "n": 5}).to_string();
    match v.validate(&new, Some(&old), USER, SEC) {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("n must grow from 5")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn user_ctx_roles_and_sec_obj_are_visible() {
    let mut v = validator(&[
        "function(newDoc, oldDoc, userCtx, secObj) { if (userCtx.roles.indexOf('_admin') !== -1) return; if (secObj.members.names.indexOf(userCtx.name) === -1) throw({unauthorized: 'members only'}); if (newDoc.admin_only) throw({forbidden: 'admins only (' + userCtx.db + ')'}); }",
    ]);
    let doc = json!({"_id": "d", "admin_only": true}).to_string();
    assert!(v.validate(&doc, None, ADMIN, SEC).is_ok());
    match v.validate(&doc, None, USER, SEC) {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("admins only (db)")),
        other => panic!("{other:?}"),
    }
    let stranger = r#"{"db": "db", "name": "eve", "roles": []}"#;
    assert!(matches!(
        v.validate(&doc, None, stranger, SEC),
        Err(Rejection::Unauthorized(_))
    ));
}

#[test]
fn require_resolves_against_the_whole_design_document() {
    let ddoc = json!({
        "_id": "_design/app",
        "lib": {
            "rules": "var fmt = require('./fmt'); exports.check = function(doc) { if (!doc.type) throw({forbidden: fmt.msg('type')}); };",
            "fmt": "exports.msg = function(f) { return f + ' is required'; };"
        },
        "views": {"lib": {"v": "exports.x = 1;"}}
    });
    let vdu = "function(newDoc) { require('lib/rules').check(newDoc); if (require('views/lib/v').x !== 1) throw('bad'); if (this._id !== '_design/app') throw('bad this'); }";
    let other = json!({"_id": "_design/other", "lib": {"rules": "exports.check = function() { throw({forbidden: 'other rules'}); };"}});
    let mut v = Validator::new(
        &[
            source("_design/app", ddoc, vdu),
            source(
                "_design/other",
                other,
                "function(doc) { if (doc.other) require('lib/rules').check(doc); }",
            ),
        ],
        Limits::default(),
    )
    .unwrap();
    match v.validate(r#"{"_id": "x"}"#, None, USER, SEC) {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("type is required")),
        other => panic!("{other:?}"),
    }
    assert!(v
        .validate(r#"{"_id": "x", "type": "t"}"#, None, USER, SEC)
        .is_ok());
    // Each design document's `require` reads its own `lib`.
    match v.validate(r#"{"_id": "x", "type": "t", "other": 1}"#, None, USER, SEC) {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("other rules")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn thrown_strings_and_other_objects_are_unknown_errors() {
    assert_error(thrown("'plain text'"), "unknown_error", json!("plain text"));
    assert_error(thrown("{invalid: 'nope'}"), "unknown_error", json!("nope"));
    assert_error(
        thrown("{invalid: {a: 1}}"),
        "unknown_error",
        json!({"a": 1}),
    );
    // CouchDB only understands single-member objects; anything else fails the request.
    assert_error(
        thrown("{forbidden: 'x', extra: 1}"),
        "unknown_error",
        json!({"forbidden": "x", "extra": 1}),
    );
    assert_error(thrown("{}"), "unknown_error", json!({}));
    assert_error(thrown("42"), "unknown_error", json!(42));
    assert_error(thrown("[1, 2]"), "unknown_error", json!([1, 2]));
}

#[test]
fn thrown_one_or_true_accepts_as_in_couchdb() {
    assert!(thrown("1").is_ok());
    assert!(thrown("true").is_ok());
}

#[test]
fn thrown_errors_report_their_name() {
    // CouchDB re-throws Errors, and reports `[name, the error as JSON]`.
    assert_error(thrown("new Error('boom')"), "Error", json!({}));
    assert_error(thrown("new TypeError('bad type')"), "TypeError", json!({}));
    let custom = "(function() { var e = new Error('x'); e.field = 'title'; return e; })()";
    assert_error(thrown(custom), "Error", json!({"field": "title"}));
    // Errors thrown by the engine take the same path.
    assert_error(
        check("function(doc) { doc.missing.field; }", json!({})),
        "TypeError",
        json!({}),
    );
    // An Error carrying `error` and `reason` is reported with those.
    let shaped = "(function() { var e = new Error('x'); e.error = 'not_found'; e.reason = 'gone'; return e; })()";
    assert_error(thrown(shaped), "not_found", json!("gone"));
    // Reading `name` off null or undefined throws a TypeError in CouchDB's handler.
    assert_error(thrown("null"), "TypeError", json!({}));
    assert_error(thrown("undefined"), "TypeError", json!({}));
}

#[test]
fn error_arrays_are_read_as_error_lines() {
    assert_error(
        thrown("['error', 'my_error', 'why']"),
        "my_error",
        json!("why"),
    );
    match thrown("['fatal', 'forbidden', 'via array']") {
        Err(Rejection::Forbidden(reason)) => assert_eq!(reason, json!("via array")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn mutating_arguments_is_harmless_and_not_seen_by_the_next_function() {
    let mut v = validator(&[
        "function(newDoc, oldDoc, userCtx, secObj) { 'use strict'; newDoc.title = 'changed'; newDoc.tags.push('x'); delete newDoc._id; userCtx.roles.push('_admin'); secObj.admins = null; }",
        "function(newDoc, oldDoc, userCtx, secObj) { if (newDoc.title !== 'orig' || newDoc.tags.length !== 1 || !newDoc._id) throw({forbidden: 'saw a mutation'}); if (userCtx.roles.indexOf('_admin') !== -1 || secObj.admins === null) throw({forbidden: 'saw a ctx mutation'}); }",
    ]);
    let doc = json!({"_id": "m", "title": "orig", "tags": ["a"]}).to_string();
    for _ in 0..2 {
        assert!(v.validate(&doc, None, USER, SEC).is_ok());
    }
}

#[test]
fn endless_loop_times_out_and_a_new_validator_works() {
    let limits = Limits {
        timeout: Duration::from_millis(200),
        memory_limit: 16 << 20,
    };
    let fns = [source(
        "_design/spin",
        json!({}),
        "function(doc) { while (true) { try { while (true) {} } catch (e) {} } }",
    )];
    let mut v = Validator::new(&fns, limits).unwrap();
    let result = v.validate("{}", None, USER, SEC);
    assert!(
        matches!(result, Err(Rejection::Failed(JsError::Timeout))),
        "{result:?}"
    );
    drop(v);
    assert!(check("function(doc) {}", json!({})).is_ok());
}

#[test]
fn runaway_memory_fails_the_validator() {
    let limits = Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 16 << 20,
    };
    let fns = [source(
        "_design/hog",
        json!({}),
        "function(doc) { var s = 'x'; while (true) s = s.repeat(2); }",
    )];
    let mut v = Validator::new(&fns, limits).unwrap();
    let result = v.validate("{}", None, USER, SEC);
    assert!(
        matches!(result, Err(Rejection::Failed(JsError::OutOfMemory))),
        "{result:?}"
    );
}

#[test]
fn syntax_error_is_a_compile_error_naming_the_design_document() {
    let fns = [
        source("_design/good", json!({}), "function(doc) {}"),
        source("_design/broken", json!({}), "function(doc) { if (doc { }"),
    ];
    match Validator::new(&fns, Limits::default()) {
        Err(JsError::Compile { what, reason }) => {
            assert!(what.contains("`_design/broken`"), "{what}");
            assert!(reason.starts_with("SyntaxError"), "{reason}");
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("compiled a syntax error"),
    }
    let fns = [source("_design/nofn", json!({}), "42")];
    assert!(matches!(
        Validator::new(&fns, Limits::default()),
        Err(JsError::Compile { .. })
    ));
}

#[test]
fn globals_match_the_couchdb_sandbox() {
    let vdu = "function(doc) { log({seen: doc._id}); emit('ignored', 1); if (sum([1, 2]) !== 3 || !isArray([]) || toJSON({a: 1}) !== '{\"a\":1}' || JSON.parse('[1]')[0] !== 1) throw({forbidden: 'globals'}); }";
    assert!(check(vdu, json!({"_id": "g"})).is_ok());
}

#[test]
fn invalid_argument_json_fails_cleanly() {
    let mut v = validator(&["function(doc) {}"]);
    assert!(matches!(
        v.validate("{not json", None, USER, SEC),
        Err(Rejection::Failed(JsError::Internal(_)))
    ));
}
