//! `/_node/{node}/_config` and CORS over real HTTP: changes through the API are persisted,
//! survive restarts, and take effect without one.

use crate::common;
use common::{Resp, Server};
use serde_json::json;

const CFG: &str = "/_node/_local/_config";

fn anon(s: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    s.req_with(method, path, None, headers, false)
}

fn basic(name: &str, password: &str) -> String {
    use base64::Engine;
    let pair = format!("{name}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

#[test]
fn read_write_and_delete_values() {
    let s = Server::start();
    let all = s.get(CFG);
    assert_eq!(all.status, 200);
    let all = all.json();
    assert!(all["couchdb"]["uuid"].is_string(), "{all}");
    assert!(all["admins"]["admin"]
        .as_str()
        .unwrap()
        .starts_with("-pbkdf2:sha256-"));

    let key = format!("{CFG}/test/greeting");
    let r = s.put(&key, r#""hello""#);
    assert_eq!(
        (r.status, r.json()),
        (200, json!("")),
        "new key: old value is empty"
    );
    let r = s.put(&key, r#""  bonjour  ""#);
    assert_eq!(r.json(), json!("hello"), "overwrite returns the old value");
    assert_eq!(s.get(&key).json(), json!("bonjour"), "values are trimmed");
    s.put(&format!("{CFG}/test/other"), r#""x""#);
    assert_eq!(
        s.get(&format!("{CFG}/test")).json(),
        json!({"greeting": "bonjour", "other": "x"})
    );
    assert_eq!(s.get(CFG).json()["test"]["greeting"], "bonjour");
    // the node's own name works as well as `_local`
    let named = s.get("/_node/nonode@nohost/_config/test/greeting");
    assert_eq!(named.json(), json!("bonjour"));
    assert_eq!(
        s.get("/_node/_local").json(),
        json!({"name": "nonode@nohost"})
    );
    assert_eq!(
        s.get("/_membership").json(),
        json!({"all_nodes": ["nonode@nohost"], "cluster_nodes": ["nonode@nohost"]})
    );

    let r = s.delete(&key);
    assert_eq!((r.status, r.json()), (200, json!("bonjour")));
    let missing = json!({"error": "not_found", "reason": "unknown_config_value"});
    let r = s.get(&key);
    assert_eq!((r.status, r.json()), (404, missing.clone()));
    let r = s.delete(&key);
    assert_eq!((r.status, r.json()), (404, missing));
    assert_eq!(s.get(&format!("{CFG}/nosuchsection")).json(), json!({}));
}

#[test]
fn bad_requests() {
    let s = Server::start();
    let key = format!("{CFG}/test/k");
    for body in ["not json", "42", r#"{"a":"b"}"#, ""] {
        let r = s.put(&key, body);
        assert_eq!(r.status, 400, "{body:?}: {}", r.text);
        assert_eq!(r.json()["error"], "bad_request");
    }
    let r = s.put(&key, r#""two\nlines""#);
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "Invalid configuration value"})
        )
    );
    let r = s.put(&format!("{CFG}/te%5Bst/k"), r#""v""#);
    assert_eq!(r.json()["reason"], "Invalid configuration section");
    let r = s.put(&format!("{CFG}/query_servers/evil"), r#""/bin/sh""#);
    assert_eq!(
        (r.status, r.json()),
        (
            403,
            json!({"error": "forbidden",
                   "reason": "Config section blacklisted for modification over HTTP API."})
        )
    );
    let r = s.get("/_node/other@host/_config");
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "not_found", "reason": "no such node: other@host"})
        )
    );
    let r = s.post(CFG, "{}");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
    assert_eq!(s.get(&format!("{CFG}/_reload")).status, 405);
    assert_eq!(s.req("POST", &key, Some(r#""v""#)).status, 405);
    assert_eq!(s.get(&format!("{CFG}/a/b/c")).status, 404);
    assert_eq!(s.get("/_node").status, 400);
}

#[test]
fn admin_only() {
    let s = Server::start();
    for (method, path) in [
        ("GET", CFG.to_string()),
        ("GET", format!("{CFG}/admins")),
        ("GET", format!("{CFG}/couchdb/uuid")),
        ("PUT", format!("{CFG}/admins/mallory")),
        ("DELETE", format!("{CFG}/admins/admin")),
        ("POST", format!("{CFG}/_reload")),
    ] {
        let r = s.req_with(
            method,
            &path,
            Some(r#""pw""#),
            &[("content-type", "application/json")],
            false,
        );
        assert_eq!(r.status, 401, "{method} {path}");
        assert_eq!(r.json()["reason"], "You are not a server admin.");
    }
    assert_eq!(s.get(&format!("{CFG}/admins/mallory")).status, 404);
}

#[test]
fn persisted_across_restarts_unless_asked_not_to() {
    let mut s = Server::start();
    let dir = s.take_dir();
    s.put(&format!("{CFG}/test/kept"), r#""yes""#);
    s.put(&format!("{CFG}/test/gone"), r#""soon""#);
    s.delete(&format!("{CFG}/test/gone"));
    let r = s.req_with(
        "PUT",
        &format!("{CFG}/test/memory"),
        Some(r#""only""#),
        &[("x-couch-persist", "false")],
        true,
    );
    assert_eq!(r.status, 200);
    assert_eq!(s.get(&format!("{CFG}/test/memory")).json(), json!("only"));
    let ini = std::fs::read_to_string(dir.path().join("local.ini")).unwrap();
    assert!(
        ini.contains("kept=yes") || ini.contains("kept = yes"),
        "{ini}"
    );
    assert!(!ini.contains("memory"), "{ini}");

    // `_reload` re-reads the files and drops unpersisted values
    let r = s.post(&format!("{CFG}/_reload"), "");
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    assert_eq!(s.get(&format!("{CFG}/test/memory")).status, 404);
    assert_eq!(s.get("/_session").json()["userCtx"]["name"], "admin");

    drop(s);
    let s = Server::start_in(dir.path());
    assert_eq!(s.get(&format!("{CFG}/test")).json(), json!({"kept": "yes"}));
}

/// `[settee] storage_cache_size` sizes the storage engine's cache at start; a value that
/// is not a number refuses to start rather than being replaced by the default.
#[test]
fn storage_cache_size_is_read_at_start() {
    let s = Server::start_with_ini("[settee]\nstorage_cache_size = 33554432\n");
    assert_eq!(
        s.get(&format!("{CFG}/settee/storage_cache_size")).json(),
        json!("33554432")
    );
    assert_eq!(s.put("/small", "").status, 201);
    assert_eq!(s.put("/small/d", r#"{"a":1}"#).status, 201);
    assert_eq!(s.get("/small/d").json()["a"], 1);

    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("settee.ini");
    std::fs::write(&ini, "[settee]\nstorage_cache_size = lots\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_settee"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--bind", "127.0.0.1:0", "--admin", "admin:pw", "--config"])
        .arg(&ini)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[settee] storage_cache_size must be an integer"),
        "{err}"
    );
}

#[test]
fn deleting_a_value_from_a_read_only_file_persists() {
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("settee.ini");
    std::fs::write(&ini, "[test]\nfrom_file = 1\n").unwrap();
    let args = ["--config", ini.to_str().unwrap()];
    let data = dir.path().join("data");
    let s = Server::start_with(&data, &args);
    assert_eq!(s.get(&format!("{CFG}/test/from_file")).json(), json!("1"));
    assert_eq!(
        s.delete(&format!("{CFG}/test/from_file")).json(),
        json!("1")
    );
    drop(s);
    let s = Server::start_with(&data, &args);
    assert_eq!(s.get(&format!("{CFG}/test/from_file")).status, 404);
}

#[test]
fn admin_passwords_are_hashed_and_work_at_once() {
    let s = Server::start();
    // fewer PBKDF2 rounds keep the test quick, and show the setting is read live
    s.put(&format!("{CFG}/chttpd_auth/iterations"), r#""1000""#);
    let key = format!("{CFG}/admins/bob");
    let r = s.put(&key, r#""b0bs3cret""#);
    assert_eq!((r.status, r.json()), (200, json!("")));
    let stored = s.get(&key).json();
    let stored = stored.as_str().unwrap();
    assert!(stored.starts_with("-pbkdf2:sha256-"), "{stored}");
    assert!(stored.ends_with(",1000"), "{stored}");
    assert!(!stored.contains("b0bs3cret"));

    let bob = basic("bob", "b0bs3cret");
    let r = anon(&s, "GET", "/_session", &[("authorization", &bob)]);
    assert_eq!(
        r.json()["userCtx"],
        json!({"name": "bob", "roles": ["_admin"]})
    );
    assert_eq!(
        anon(&s, "GET", "/_all_dbs", &[("authorization", &bob)]).status,
        200
    );

    // a new password replaces the old one; the old hash is returned
    let r = s.put(&key, r#""n3w""#);
    assert_eq!(r.json(), json!(stored));
    assert_eq!(
        anon(&s, "GET", "/_all_dbs", &[("authorization", &bob)]).status,
        401
    );
    let bob2 = basic("bob", "n3w");
    assert_eq!(
        anon(&s, "GET", "/_all_dbs", &[("authorization", &bob2)]).status,
        200
    );
    // deleted admins are refused at once
    s.delete(&key);
    assert_eq!(
        anon(&s, "GET", "/_all_dbs", &[("authorization", &bob2)]).status,
        401
    );
}

#[test]
fn limits_are_live() {
    let s = Server::start();
    assert_eq!(s.get("/_uuids?count=5").status, 200);
    s.put(&format!("{CFG}/uuids/max_count"), r#""3""#);
    assert_eq!(s.get("/_uuids?count=5").status, 400);
    s.create_db("db");
    let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(5000));
    assert_eq!(s.put("/db/before", &big).status, 201);
    s.put(&format!("{CFG}/couchdb/max_document_size"), r#""1000""#);
    let r = s.put("/db/doc_limit", &big);
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.json()["error"], "document_too_large");
    s.delete(&format!("{CFG}/couchdb/max_document_size"));
    assert_eq!(s.put("/db/doc_limit", &big).status, 201);
    s.put(&format!("{CFG}/chttpd/max_http_request_size"), r#""2000""#);
    assert_eq!(s.put("/db/after", &big).status, 413);
    // the JavaScript time limit applies to the next runtime
    s.put(&format!("{CFG}/couchdb/os_process_timeout"), r#""200""#);
    let ddoc = json!({"views": {"v": {"map": "function(d){ var t = Date.now(); while (Date.now() - t < 1000) {} emit(1); }"}}});
    assert_eq!(s.put("/db/_design/slow", &ddoc.to_string()).status, 201);
    let r = s.get("/db/_design/slow/_view/v");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "os_process_error");
}

const ORIGIN: &str = "http://app.example";

fn preflight(s: &Server, origin: &str, method: &str, headers: Option<&str>) -> Resp {
    let mut h = vec![
        ("origin", origin),
        ("access-control-request-method", method),
    ];
    if let Some(v) = headers {
        h.push(("access-control-request-headers", v));
    }
    anon(s, "OPTIONS", "/db/doc", &h)
}

#[test]
fn cors_is_off_by_default_and_enabled_at_runtime() {
    let s = Server::start();
    s.create_db("db");
    s.put("/db/doc", r#"{"a":1}"#);
    let simple = anon(&s, "GET", "/", &[("origin", ORIGIN)]);
    assert_eq!(simple.status, 200);
    assert_eq!(simple.header("access-control-allow-origin"), None);
    let pre = preflight(&s, ORIGIN, "GET", None);
    assert_ne!(pre.status, 204);
    assert_eq!(pre.header("access-control-allow-origin"), None);

    s.put(&format!("{CFG}/chttpd/enable_cors"), r#""true""#);
    s.put(
        &format!("{CFG}/cors/origins"),
        &format!(r#""http://other.example, {ORIGIN}""#),
    );

    // a preflight is answered without credentials
    let pre = preflight(&s, ORIGIN, "PUT", Some("Content-Type, Accept"));
    assert_eq!(pre.status, 204, "{}", pre.text);
    assert_eq!(pre.text, "");
    assert_eq!(pre.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(
        pre.header("access-control-allow-methods"),
        Some("CONNECT, COPY, DELETE, GET, HEAD, OPTIONS, POST, PUT, TRACE")
    );
    assert_eq!(
        pre.header("access-control-allow-headers"),
        Some("Content-Type, Accept")
    );
    assert_eq!(pre.header("access-control-max-age"), Some("600"));
    assert_eq!(pre.header("access-control-allow-credentials"), None);

    // refused preflights are handled as ordinary requests (here: 401, anonymous)
    let r = preflight(&s, "http://evil.example", "GET", None);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("access-control-allow-origin"), None);
    for r in [
        preflight(&s, ORIGIN, "GET", Some("x-not-allowed")),
        preflight(&s, ORIGIN, "PATCH", None),
    ] {
        assert_eq!(r.status, 401);
        assert_eq!(r.header("access-control-allow-methods"), None);
        assert_eq!(r.header("access-control-allow-headers"), None);
    }

    // ordinary responses, errors included, carry the allow and expose headers
    let r = s.req_with("GET", "/db/doc", None, &[("origin", ORIGIN)], true);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some(
            "content-type, cache-control, accept-ranges, etag, server, \
             x-couch-request-id, x-couch-update-newrev, x-couchdb-body-time"
        )
    );
    let denied = anon(&s, "GET", "/db/doc", &[("origin", ORIGIN)]);
    assert_eq!(denied.status, 401);
    assert_eq!(denied.header("access-control-allow-origin"), Some(ORIGIN));
    let evil = anon(&s, "GET", "/", &[("origin", "http://evil.example")]);
    assert_eq!(evil.header("access-control-allow-origin"), None);
    assert_eq!(evil.header("access-control-expose-headers"), None);

    // settings are read per request
    s.put(
        &format!("{CFG}/cors/exposed_headers"),
        r#""X-Couch-Request-ID""#,
    );
    s.put(&format!("{CFG}/cors/max_age"), r#""60""#);
    let r = anon(&s, "GET", "/", &[("origin", ORIGIN)]);
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("content-type, cache-control, x-couch-request-id")
    );
    let pre = preflight(&s, ORIGIN, "GET", None);
    assert_eq!(pre.header("access-control-max-age"), Some("60"));
    s.put(&format!("{CFG}/chttpd/enable_cors"), r#""false""#);
    let r = anon(&s, "GET", "/", &[("origin", ORIGIN)]);
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn cors_credentials_and_wildcard() {
    let s = Server::start();
    s.put(&format!("{CFG}/chttpd/enable_cors"), r#""true""#);
    s.put(&format!("{CFG}/cors/origins"), r#""*""#);
    let pre = preflight(&s, ORIGIN, "GET", None);
    assert_eq!(pre.status, 204);
    assert_eq!(pre.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(pre.header("access-control-allow-credentials"), None);

    s.put(&format!("{CFG}/cors/credentials"), r#""true""#);
    // with credentials the origin is echoed, never `*`
    let pre = preflight(&s, ORIGIN, "GET", None);
    assert_eq!(pre.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(pre.header("access-control-allow-credentials"), Some("true"));
    let r = s.req_with("GET", "/_all_dbs", None, &[("origin", ORIGIN)], true);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
}
