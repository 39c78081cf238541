//! Fidelity of server routes, `_changes` and `/_node/{node}/_config` to CouchDB 3.5: each
//! test asserts the status, headers and body CouchDB gives (sources in the comments and in
//! notes/server.md).

use crate::common;
use common::{Resp, Server};
use serde_json::{json, Value};

const CFG: &str = "/_node/_local/_config";

fn anon(s: &Server, method: &str, path: &str, body: Option<&str>) -> Resp {
    s.anon(method, path, body, &[])
}

fn with_headers(
    s: &Server,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Resp {
    s.req_with(method, path, Some(body), headers, true)
}

/// The status and JSON body of a response.
fn sj(r: &Resp) -> (u16, Value) {
    (r.status, r.json())
}

fn err(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

fn method_not_allowed(r: &Resp, allow: &str) {
    assert_eq!(
        sj(r),
        err(405, "method_not_allowed", &format!("Only {allow} allowed")),
        "{}",
        r.text
    );
    assert_eq!(r.header("allow"), Some(allow));
}

/// A request written by hand, as admin, without `Content-Length` unless `headers` give it:
/// the status, the head (lower-cased) and the body.
fn raw_text(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let r = s.send_raw(method, path, headers, None, true);
    let head: String = r
        .headers
        .iter()
        .map(|(k, v)| format!("\r\n{k}: {}", v.to_ascii_lowercase()))
        .collect();
    (
        r.status,
        head + "\r\n",
        String::from_utf8_lossy(&r.body).into_owned(),
    )
}

fn raw(s: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let (status, _, body) = raw_text(s, method, path, headers);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Sets a configuration value for this run (`X-Couch-Persist: false`).
fn set(s: &Server, section: &str, key: &str, value: &str) {
    let r = with_headers(
        s,
        "PUT",
        &format!("{CFG}/{section}/{key}"),
        &json!(value).to_string(),
        &[
            ("content-type", "application/json"),
            ("x-couch-persist", "false"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

/// CouchDB's `make_etag(Term)`: base-36 MD5 of the term's external format, quoted.
fn erlang_etag(term: &[u8]) -> String {
    use md5::{Digest, Md5};
    let mut n = u128::from_be_bytes(Md5::digest(term).into());
    let mut digits = Vec::new();
    loop {
        digits.push(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    format!("\"{}\"", String::from_utf8(digits).unwrap())
}

fn is_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

// ---- / and request headers -----------------------------------------------------------

#[test]
fn welcome_lists_fields_in_couchdbs_order() {
    let s = Server::start();
    let r = anon(&s, "GET", "/", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("cache-control"), Some("must-revalidate"));
    let body = r.json();
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["couchdb", "version", "git_sha", "uuid", "features", "vendor"]
    );
    assert_eq!(body["couchdb"], "Welcome");
    assert_eq!(body["version"], "3.5.2");
    let sha = body["git_sha"].as_str().unwrap();
    assert!(sha == "unknown" || (sha.len() == 9 && is_hex(sha)), "{sha}");
    assert_eq!(body["uuid"], s.get(&format!("{CFG}/couchdb/uuid")).json());
    assert_eq!(body["features"], json!(["quickjs"]));
    assert_eq!(
        body["vendor"],
        json!({"name": "Settee", "version": env!("CARGO_PKG_VERSION")})
    );
    // `vendor` is the [vendor] section, left out when the section is empty
    set(&s, "vendor", "name", "Acme");
    assert_eq!(
        s.get("/").json()["vendor"],
        json!({"name": "Acme", "version": env!("CARGO_PKG_VERSION")})
    );
    for key in ["name", "version"] {
        let r = with_headers(
            &s,
            "DELETE",
            &format!("{CFG}/vendor/{key}"),
            "",
            &[("x-couch-persist", "false")],
        );
        assert_eq!(r.status, 200);
    }
    assert!(s.get("/").json().get("vendor").is_none());
    method_not_allowed(&s.post("/", "{}"), "GET,HEAD");
}

#[test]
fn request_ids_echo_usable_client_ids_else_fresh_nonces() {
    let s = Server::start();
    let id_for = |sent: &str| {
        let r = s.req_with("GET", "/_up", None, &[("x-couch-request-id", sent)], false);
        r.header("x-couch-request-id").unwrap().to_string()
    };
    // chttpd's nonce/1: at most 36 characters of [0-9A-Za-z_-] are echoed.
    assert_eq!(id_for("client-chosen_ID-1"), "client-chosen_ID-1");
    let longest = "a".repeat(36);
    assert_eq!(id_for(&longest), longest);
    for unusable in ["a b", "x/y", "a.b", &"a".repeat(37)] {
        let id = id_for(unusable);
        assert!(id.len() == 10 && is_hex(&id), "{unusable} -> {id}");
    }
    let a = s.req_with("GET", "/_up", None, &[("x-couch-request-id", "a.b")], false);
    let b = s.get("/_up");
    let ids: Vec<&str> = [&a, &b]
        .iter()
        .map(|r| r.header("x-couch-request-id").unwrap())
        .collect();
    for id in &ids {
        assert_eq!(id.len(), 10, "{id}");
        assert!(is_hex(id), "{id}");
    }
    assert_ne!(ids[0], ids[1]);
    // chttpd's timing(): the body's receive time in ms, "0" without a body
    assert_eq!(b.header("x-couchdb-body-time"), Some("0"));
    let err = s.get("/nope");
    assert!(err.header("x-couch-request-id").is_some());
    assert!(err.header("x-couchdb-body-time").is_some());
}

// ---- _uuids ---------------------------------------------------------------------------

#[test]
fn uuids_count_limits_errors_and_cache_busting_headers() {
    let s = Server::start();
    let r = anon(&s, "GET", "/_uuids", None);
    assert_eq!(r.status, 200);
    let ids = r.json()["uuids"].as_array().unwrap().clone();
    assert_eq!(ids.len(), 1);
    assert!(ids[0].as_str().is_some_and(|u| u.len() == 32 && is_hex(u)));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("pragma"), Some("no-cache"));
    assert_eq!(r.header("expires"), Some("Mon, 01 Jan 1990 00:00:00 GMT"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("date").is_some());
    let ids: Vec<String> = ids
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut term = vec![131u8, 108, 0, 0, 0, 1, 109, 0, 0, 0, 32];
    term.extend_from_slice(ids[0].as_bytes());
    term.push(106);
    assert_eq!(r.header("etag"), Some(erlang_etag(&term).as_str()));

    // count=0 is an empty list, whose ETag is fixed: If-None-Match gets a 304
    let empty = s.get("/_uuids?count=0");
    assert_eq!(sj(&empty), (200, json!({"uuids": []})));
    let etag = erlang_etag(&[131, 106]);
    assert_eq!(empty.header("etag"), Some(etag.as_str()));
    let cached = s.req_with(
        "GET",
        "/_uuids?count=0",
        None,
        &[("if-none-match", &etag)],
        false,
    );
    assert_eq!((cached.status, cached.text.as_str()), (304, ""));
    assert_eq!(cached.header("etag"), Some(etag.as_str()));

    assert_eq!(
        s.get("/_uuids?count=1000").json()["uuids"]
            .as_array()
            .unwrap()
            .len(),
        1000
    );
    assert_eq!(
        s.get("/_uuids?count=%2B2").json()["uuids"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        sj(&s.get("/_uuids?count=1001")),
        err(400, "bad_request", "count parameter too large")
    );
    for bad in ["-1", "abc", "1.5", "", "%201"] {
        assert_eq!(
            sj(&s.get(&format!("/_uuids?count={bad}"))),
            err(400, "bad_request", "count must be a positive integer"),
            "{bad}"
        );
    }
    set(&s, "uuids", "max_count", "5");
    assert_eq!(
        sj(&s.get("/_uuids?count=6")),
        err(400, "bad_request", "count parameter too large")
    );
    // handle_uuids_req allows GET only (HEAD is GET to chttpd)
    method_not_allowed(&s.post("/_uuids", "{}"), "GET");
    assert_eq!(s.req("HEAD", "/_uuids", None).status, 200);
}

#[test]
fn uuid_algorithms_follow_the_uuids_section() {
    let s = Server::start();
    // default.ini: sequential — one 26-digit prefix, increasing 6-digit counters
    let seq: Vec<String> =
        serde_json::from_value(s.get("/_uuids?count=1000").json()["uuids"].clone()).unwrap();
    for w in seq.windows(2) {
        assert_eq!(w[1].len(), 32);
        assert!(w[0] < w[1], "{} < {}", w[0], w[1]);
    }
    set(&s, "uuids", "algorithm", "utc_id");
    set(&s, "uuids", "utc_id_suffix", "frog");
    let utc: Vec<String> =
        serde_json::from_value(s.get("/_uuids?count=10").json()["uuids"].clone()).unwrap();
    for w in utc.windows(2) {
        assert_eq!(w[1].len(), 14 + 4);
        assert!(w[1].ends_with("frog") && is_hex(&w[1][..14]));
        assert!(w[0] < w[1]);
    }
    set(&s, "uuids", "algorithm", "utc_random");
    let r: Vec<String> =
        serde_json::from_value(s.get("/_uuids?count=1000").json()["uuids"].clone()).unwrap();
    assert!(r.iter().all(|u| u.len() == 32 && is_hex(u)));
    assert!(r[1][..14] < r[999][..14], "roughly ordered by time");
    set(&s, "uuids", "algorithm", "random");
    let r: Vec<String> =
        serde_json::from_value(s.get("/_uuids?count=3").json()["uuids"].clone()).unwrap();
    assert!(r.iter().all(|u| u.len() == 32 && is_hex(u)));
    set(&s, "uuids", "algorithm", "bogus");
    assert_eq!(
        sj(&s.get("/_uuids")),
        err(500, "unknown_uuid_algorithm", "bogus")
    );
    // nor does a new document get an id (fidelity_followups.rs has the details)
    s.create_db("db");
    assert_eq!(
        sj(&s.post("/db", "{}")),
        err(500, "unknown_uuid_algorithm", "bogus")
    );
}

// ---- server paths ---------------------------------------------------------------------

#[test]
fn removed_and_unknown_root_paths_are_database_names() {
    let s = Server::start();
    let missing = err(404, "not_found", "Database does not exist.");
    for path in [
        "/_config",
        "/_config/query_servers/javascript",
        "/_stats",
        "/_plugins",
        "/_restart",
        "/_log",
        "/_foo/bar",
        "/_deleted_dbs",
    ] {
        assert_eq!(sj(&s.get(path)), missing, "{path}");
        // chttpd_auth_request: `_` paths are for server admins…
        if path != "/_stats" {
            assert_eq!(
                sj(&anon(&s, "GET", path, None)),
                err(401, "unauthorized", "You are not a server admin."),
                "{path}"
            );
        }
    }
    // …except `_stats`, which anyone reaches
    assert_eq!(sj(&anon(&s, "GET", "/_stats", None)), missing);
    assert_eq!(
        sj(&s.put("/_config", "")),
        err(
            400,
            "illegal_database_name",
            "Name: '_config'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, -, and / are allowed. Must begin with a letter."
        )
    );
    assert_eq!(sj(&s.delete("/_config")), missing);
    assert_eq!(
        sj(&s.delete("/_config?rev=1-a")),
        err(400, "bad_request", "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?")
    );
    assert_eq!(sj(&s.post("/_config/x", "{}")), missing);
}

#[test]
fn fauxton_paths_without_fauxton() {
    let s = Server::start_with_ini("[chttpd]\ndocroot = /nonexistent/fauxton\n");
    let host = s.url.trim_start_matches("http://");
    let (status, head, body) = raw_text(&s, "GET", "/_utils", &[]);
    assert_eq!((status, body.as_str()), (301, ""));
    assert!(
        head.contains(&format!("\r\nlocation: http://{host}/_utils/\r\n")),
        "{head}"
    );
    // The dashboard's page says how to install Fauxton; other files are mochiweb's 404.
    for path in ["/_utils/", "/_utils/index.html"] {
        let r = anon(&s, "GET", path, None);
        assert_eq!(r.status, 404, "{path}");
        assert!(r.text.contains("./scripts/fauxton"), "{}", r.text);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(r.header("cache-control"), Some("private, must-revalidate"));
    }
    let r = anon(&s, "GET", "/_utils//docs/x.js", None);
    assert_eq!((r.status, r.text.as_str()), (404, "Not found."));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("cache-control"), Some("private, must-revalidate"));
    let icon = anon(&s, "GET", "/favicon.ico", None);
    assert_eq!((icon.status, icon.text.as_str()), (404, "Not found."));
    assert_eq!(
        icon.header("cache-control"),
        Some("public, max-age=31536000")
    );
    // other methods need an admin, then are refused
    assert_eq!(
        sj(&anon(&s, "POST", "/_utils", Some("{}"))),
        err(401, "unauthorized", "You are not a server admin.")
    );
    method_not_allowed(&s.post("/_utils/", "{}"), "GET,HEAD");
    method_not_allowed(&s.delete("/favicon.ico"), "GET,HEAD");
}

/// Fauxton's files from `[chttpd] docroot`: content types, CouchDB's caching and CSP
/// headers, gzip for clients that accept it, conditional requests; no way out of the root.
#[test]
fn fauxton_files_from_the_docroot() {
    let root = tempfile::tempdir().unwrap();
    let page = format!("<!doctype html><title>dash</title>{}", "x".repeat(4000));
    std::fs::write(root.path().join("index.html"), &page).unwrap();
    std::fs::create_dir(root.path().join("js")).unwrap();
    std::fs::write(root.path().join("js/app.js"), "var app = 1;").unwrap();
    std::fs::write(root.path().join("favicon.ico"), [0u8, 0, 1, 0]).unwrap();
    let ini = format!("[chttpd]\ndocroot = {}\n", root.path().display());
    let s = Server::start_with_ini(&ini);
    let r = anon(&s, "GET", "/_utils/", None);
    assert_eq!((r.status, r.text.as_str()), (200, page.as_str()));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("cache-control"), Some("private, must-revalidate"));
    assert!(r
        .header("content-security-policy")
        .is_some_and(|c| c.starts_with("child-src 'self' data: blob:; default-src 'self';")));
    let js = anon(&s, "GET", "/_utils/js/app.js", None);
    assert_eq!((js.status, js.text.as_str()), (200, "var app = 1;"));
    assert_eq!(js.header("content-type"), Some("text/javascript"));
    // gzip for a client that asks for it.
    let (status, head, _) = raw_text(
        &s,
        "GET",
        "/_utils/index.html",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(status, 200);
    assert!(head.contains("\r\ncontent-encoding: gzip\r\n"), "{head}");
    // Conditional requests.
    let modified = r.header("last-modified").unwrap().to_string();
    let (status, _, _) = raw_text(
        &s,
        "GET",
        "/_utils/",
        &[("If-Modified-Since", modified.as_str())],
    );
    assert_eq!(status, 304);
    // Nothing outside the root.
    let r = anon(&s, "GET", "/_utils/../../etc/passwd", None);
    assert_eq!(r.status, 404);
    let r = anon(&s, "GET", "/_utils/%2e%2e/%2e%2e/etc/passwd", None);
    assert_eq!(r.status, 404);
    let icon = anon(&s, "GET", "/favicon.ico", None);
    assert_eq!(icon.status, 200);
    assert_eq!(
        icon.header("cache-control"),
        Some("public, max-age=31536000")
    );
}

#[test]
fn replication_routes_keep_couchdbs_grammar() {
    let s = Server::start();
    // /_replicate reads its body as a JSON object before anything else
    assert_eq!(
        raw(&s, "GET", "/_replicate", &[]),
        err(400, "bad_request", "Missing request body")
    );
    assert_eq!(
        raw(&s, "GET", "/_replicate", &[("content-length", "0")]),
        err(400, "bad_request", "invalid UTF-8 JSON")
    );
    assert_eq!(
        sj(&s.post("/_replicate", "{")),
        err(400, "bad_request", "invalid UTF-8 JSON")
    );
    assert_eq!(
        sj(&s.post("/_replicate", "[]")),
        err(400, "bad_request", "Request body must be a JSON object")
    );
    method_not_allowed(&s.put("/_replicate", "{}"), "POST");
    let r = with_headers(
        &s,
        "POST",
        "/_replicate",
        "{}",
        &[("content-type", "text/plain")],
    );
    assert_eq!(
        sj(&r),
        err(
            415,
            "bad_content_type",
            "Content-Type must be application/json"
        )
    );
    let body = r#"{"source": "a", "target": "b"}"#;
    assert_eq!(
        sj(&s.post("/_replicate", body)),
        err(500, "db_not_found", &format!("could not open {}/a/", s.url))
    );

    // couch_replicator_httpd:handle_scheduler_req
    let empty_jobs = (200, json!({"total_rows": 0, "offset": 0, "jobs": []}));
    let empty_docs = (200, json!({"total_rows": 0, "offset": 0, "docs": []}));
    assert_eq!(sj(&s.get("/_scheduler/jobs")), empty_jobs);
    assert_eq!(sj(&s.get("/_scheduler/docs")), empty_docs);
    assert_eq!(sj(&s.get("/_scheduler/docs/_replicator")), empty_docs);
    let missing = err(404, "not_found", "missing");
    for path in [
        "/_scheduler/jobs/abc",
        "/_scheduler/docs/_replicator/x",
        "/_scheduler/docs/a/_replicator/x",
        "/_scheduler/docs/a%2F_replicator/x",
    ] {
        assert_eq!(sj(&s.get(path)), missing, "{path}");
    }
    for path in ["/_scheduler", "/_scheduler/foo", "/_scheduler/jobs/a/b"] {
        assert_eq!(
            sj(&s.get(path)),
            (404, json!({"error": "not found"})),
            "{path}"
        );
    }
    assert_eq!(
        sj(&s.get("/_scheduler/docs/a/b")),
        err(400, "bad_request", "")
    );
    method_not_allowed(&s.post("/_scheduler/jobs", "{}"), "GET,HEAD");
    assert_eq!(
        sj(&anon(&s, "GET", "/_scheduler/jobs", None)),
        err(401, "unauthorized", "You are not a server admin.")
    );

    // mem3_reshard_httpd
    let absent = err(
        501,
        "not_implemented",
        "resharding is not supported by this Settee version",
    );
    assert_eq!(sj(&s.get("/_reshard")), absent);
    assert_eq!(sj(&s.get("/_reshard/jobs/j1/state")), absent);
    method_not_allowed(&s.post("/_reshard", "{}"), "GET,HEAD");
    method_not_allowed(&s.post("/_reshard/state", "{}"), "GET,HEAD,PUT");
    method_not_allowed(&s.delete("/_reshard/jobs"), "GET,HEAD,POST");
    method_not_allowed(&s.put("/_reshard/jobs/j1", "{}"), "GET,HEAD,DELETE");
    let r = with_headers(
        &s,
        "PUT",
        "/_reshard/state",
        "{}",
        &[("content-type", "text/plain")],
    );
    assert_eq!(r.status, 415);
}

#[test]
fn setup_search_and_query_server_routes() {
    let s = Server::start();
    assert_eq!(
        sj(&s.get("/_cluster_setup")),
        (200, json!({"state": "single_node_enabled"}))
    );
    assert_eq!(
        sj(&s.get("/_cluster_setup?ensure_dbs_exist=%5B")),
        err(400, "bad_request", "invalid UTF-8 JSON")
    );
    method_not_allowed(&s.put("/_cluster_setup", "{}"), "GET,POST");
    assert_eq!(
        sj(&s.post("/_cluster_setup", "[]")),
        err(400, "bad_request", "Missing JSON body'")
    );
    assert_eq!(
        sj(&s.post("/_cluster_setup", r#"{"action": "dance"}"#)),
        err(400, "bad_request", "Invalid Action'")
    );
    assert_eq!(
        sj(&s.post("/_cluster_setup", r#"{"action": "enable_single_node"}"#)),
        err(
            501,
            "not_implemented",
            "This node is set up as a single node when it first starts"
        )
    );
    assert_eq!(
        sj(&anon(&s, "GET", "/_cluster_setup", None)),
        err(401, "unauthorized", "You are not a server admin.")
    );

    // dreyfus_httpd:handle_analyze_req checks its parameters before asking Clouseau
    let bad = |reason| err(400, "bad_request", reason);
    assert_eq!(
        sj(&s.get("/_search_analyze")),
        bad("analyzer parameter is mandatory")
    );
    assert_eq!(
        sj(&s.get("/_search_analyze?analyzer=standard")),
        bad("text parameter is mandatory")
    );
    assert_eq!(
        sj(&s.post("/_search_analyze", r#"{"analyzer": 1, "text": "x"}"#)),
        bad("analyzer parameter must be a string or an object")
    );
    assert_eq!(
        sj(&s.post("/_search_analyze", r#"{"analyzer": "standard", "text": 1}"#)),
        bad("text parameter must be a string")
    );
    assert_eq!(
        sj(&s.get("/_search_analyze?analyzer=standard&text=hi")),
        // As CouchDB 3.5.2 answers without its search service.
        err(503, "service unavailable", "Search is not available")
    );
    method_not_allowed(&s.delete("/_search_analyze"), "GET,POST");
    // nouveau_httpd: 404 while Nouveau is disabled
    assert_eq!(
        sj(&s.post(
            "/_nouveau_analyze",
            r#"{"analyzer": "standard", "text": "hi"}"#
        )),
        err(404, "not_found", "missing")
    );
    method_not_allowed(&s.get("/_nouveau_analyze"), "POST");

    assert_eq!(
        sj(&s.post("/_reload_query_servers", "")),
        (200, json!({"ok": true}))
    );
    method_not_allowed(&s.get("/_reload_query_servers"), "POST");
}

#[test]
fn node_routes() {
    let s = Server::start();
    // Statistics are served (their shapes are checked in `stats.rs`).
    for path in [
        "_stats",
        "_stats/couchdb/request_time",
        "_system",
        "_prometheus",
        "_versions",
    ] {
        assert_eq!(
            s.get(&format!("/_node/_local/{path}")).status,
            200,
            "{path}"
        );
    }
    assert_eq!(
        sj(&s.get("/_node/_local/_smoosh/status")),
        err(
            501,
            "not_implemented",
            "compaction scheduling (_smoosh) is not supported by this Settee version"
        )
    );
    method_not_allowed(&s.post("/_node/_local/_stats", "{}"), "GET");
    method_not_allowed(&s.post("/_node/_local/_versions", "{}"), "GET");
    method_not_allowed(&s.get("/_node/_local/_restart"), "POST");
    assert_eq!(
        sj(&s.post("/_node/_local/_restart", "")),
        err(
            501,
            "not_implemented",
            "_restart is not supported by this Settee version"
        )
    );
    assert_eq!(
        sj(&s.get("/_node/elsewhere@host/_stats")),
        err(404, "not_found", "no such node: elsewhere@host")
    );
    // `/_node/_local` answers whatever the method
    assert_eq!(
        sj(&s.post("/_node/_local", "{}")),
        (200, json!({"name": "nonode@nohost"}))
    );
    method_not_allowed(&s.get(&format!("{CFG}/_reload")), "POST");
    method_not_allowed(&s.post(CFG, "{}"), "GET");
    method_not_allowed(&s.post(&format!("{CFG}/couchdb"), "{}"), "GET");
    method_not_allowed(
        &s.post(&format!("{CFG}/couchdb/uuid"), "{}"),
        "GET,PUT,DELETE",
    );
    assert_eq!(
        sj(&s.get(&format!("{CFG}/a/b/c"))),
        err(404, "not_found", "missing")
    );
    assert_eq!(
        sj(&s.get("/_node")),
        err(400, "bad_request", "Incomplete path to _node request")
    );
    // empty segments are dropped, as CouchDB splits paths
    assert_eq!(s.get(&format!("{CFG}/")).status, 200);
}

#[test]
fn all_dbs_and_dbs_info_parameters_and_sub_paths() {
    let s = Server::start();
    for db in ["a", "b", "c"] {
        s.create_db(db);
    }
    let names = |q: &str| s.get(&format!("/_all_dbs{q}")).json();
    // `_replicator` and `_users` exist from the start, as on a set-up CouchDB.
    let all = json!(["_replicator", "_users", "a", "b", "c"]);
    assert_eq!(names(""), all);
    assert_eq!(names("/"), all);
    // non-string keys sort before every name (Erlang term order of the shards db's ids)
    assert_eq!(names("?startkey=1"), all);
    assert_eq!(names("?endkey=null"), json!([]));
    assert_eq!(names("?descending=true&startkey=%5B%5D"), json!([]));
    assert_eq!(names("?key=%22b%22"), json!(["b"]));
    assert_eq!(names("?key=%22b%22&inclusive_end=false"), json!([]));
    assert_eq!(
        names("?descending=true&startkey=%22b%22"),
        json!(["b", "a", "_users", "_replicator"])
    );
    assert_eq!(
        names("?descending=true&endkey=%22b%22&inclusive_end=false"),
        json!(["c"])
    );
    assert_eq!(
        names("?start_key=%22a%22&end_key=%22b%22"),
        json!(["a", "b"])
    );
    assert_eq!(names("?skip=2&limit=2"), json!(["a", "b"]));
    assert_eq!(
        sj(&s.get("/_all_dbs?keys=%5B%22a%22%5D")),
        err(
            400,
            "bad_request",
            "`keys` is not supported by /_all_dbs and /_dbs_info in this Settee version"
        )
    );
    assert_eq!(sj(&s.get("/_all_dbs/x")), err(404, "not_found", "missing"));
    method_not_allowed(&s.post("/_all_dbs/x", "{}"), "GET,HEAD");
    method_not_allowed(&s.post("/_all_dbs", "{}"), "GET,HEAD");

    let info = s.get("/_dbs_info?startkey=%22b%22").json();
    let keys: Vec<&Value> = info.as_array().unwrap().iter().map(|r| &r["key"]).collect();
    assert_eq!(keys, [&json!("b"), &json!("c")]);
    assert_eq!(sj(&s.get("/_dbs_info/x")), err(404, "not_found", "missing"));
    // POST works on sub-paths too (chttpd_misc ignores the rest of the path)
    let r = s.post("/_dbs_info/x", r#"{"keys": ["a", "nope", 1]}"#);
    assert_eq!(r.status, 200);
    let rows = r.json();
    assert_eq!(rows[0]["key"], "a");
    assert_eq!(rows[0]["info"]["db_name"], "a");
    assert_eq!(rows[1], json!({"key": "nope", "error": "not_found"}));
    assert_eq!(rows[2], json!({"key": 1, "error": "not_found"}));
    assert_eq!(
        sj(&s.post("/_dbs_info", "{}")),
        err(400, "bad_request", "`keys` member must exist.")
    );
    assert_eq!(
        sj(&s.post("/_dbs_info", r#"{"keys": "a"}"#)),
        err(400, "bad_request", "`keys` member must be an array.")
    );
    let many: Vec<String> = (0..101).map(|i| format!("d{i}")).collect();
    assert_eq!(
        sj(&s.post("/_dbs_info", &json!({"keys": many}).to_string())),
        err(400, "bad_request", "too_many_keys")
    );
    method_not_allowed(&s.delete("/_dbs_info/x"), "GET,HEAD,POST");
}

// ---- _changes -------------------------------------------------------------------------

fn changes_db(s: &Server) {
    s.create_db("db");
    for i in 0..5 {
        assert_eq!(s.put(&format!("/db/d{i}"), "{}").status, 201);
    }
}

#[test]
fn changes_parameter_errors() {
    let s = Server::start();
    changes_db(&s);
    let bad = |q: &str| sj(&s.get(&format!("/db/_changes?{q}")));
    // changes_test.exs
    assert_eq!(
        bad("feed=continuous&heartbeat=-1000"),
        err(
            400,
            "bad_request",
            "The heartbeat value should be a positive integer (in milliseconds)."
        )
    );
    assert_eq!(
        bad("feed=continuous&heartbeat=0"),
        err(
            400,
            "bad_request",
            "The heartbeat value should be a positive integer (in milliseconds)."
        )
    );
    for v in ["a1000", "1.5", "", "false"] {
        assert_eq!(
            bad(&format!("feed=continuous&heartbeat={v}")),
            err(
                400,
                "bad_request",
                "Invalid heartbeat value. Expecting a positive integer value (in milliseconds)."
            ),
            "{v}"
        );
    }
    for v in ["0", "-1", "x", ""] {
        assert_eq!(
            bad(&format!("seq_interval={v}")),
            err(400, "bad_request", "invalid_seq_interval"),
            "{v}"
        );
    }
    // the first bad parameter in the query string is the one reported
    assert_eq!(
        bad("seq_interval=0&heartbeat=-1"),
        err(400, "bad_request", "invalid_seq_interval")
    );
    assert_eq!(
        bad("feed=bogus"),
        err(
            400,
            "bad_request",
            "Supported `feed` types: normal, continuous, live, longpoll, eventsource"
        )
    );
    // the filter is configured before the feed is checked
    assert_eq!(
        bad("feed=bogus&filter=_bogus"),
        err(400, "bad_request", "unknown builtin filter name")
    );
    method_not_allowed(&s.put("/db/_changes", "{}"), "GET,POST,HEAD");
    let r = with_headers(
        &s,
        "POST",
        "/db/_changes",
        "{}",
        &[("content-type", "text/plain")],
    );
    assert_eq!(
        sj(&r),
        err(
            415,
            "bad_content_type",
            "Content-Type must be application/json"
        )
    );
    // a selector in the body means nothing without filter=_selector
    let r = s.post("/db/_changes", r#"{"selector": {"a": 1}}"#);
    assert_eq!(r.json()["results"].as_array().unwrap().len(), 5);
}

#[test]
fn changes_seq_interval_shows_every_nth_seq() {
    let s = Server::start();
    changes_db(&s);
    let seqs = |q: &str| -> Vec<bool> {
        let body = s.get(&format!("/db/_changes?{q}")).json();
        assert!(
            body["last_seq"].is_string(),
            "last_seq is always given: {body}"
        );
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert!(r["seq"].is_string() || r["seq"].is_null());
                r["seq"].is_string()
            })
            .collect()
    };
    // remaining limit (10^15 by default) divisible by N: rows 0, 2, 4 for N=2
    assert_eq!(seqs("seq_interval=2"), [true, false, true, false, true]);
    // 10^15 mod 3 = 1: rows 1 and 4
    assert_eq!(seqs("seq_interval=3"), [false, true, false, false, true]);
    // limit=5 counts 5, 4, 3, 2, 1
    assert_eq!(
        seqs("seq_interval=2&limit=5"),
        [false, true, false, true, false]
    );
    assert_eq!(seqs("seq_interval=1"), [true; 5]);
    // continuous rows follow the same rule
    let r = s.get("/db/_changes?feed=continuous&timeout=100&seq_interval=2&limit=3");
    let lines: Vec<Value> = r
        .text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shown: Vec<bool> = lines[..3].iter().map(|l| l["seq"].is_string()).collect();
    assert_eq!(shown, [false, true, false]);
    assert!(lines[3]["last_seq"].is_string());
}

#[test]
fn changes_filter_errors() {
    let s = Server::start();
    changes_db(&s);
    let get = |q: &str| sj(&s.get(&format!("/db/_changes?{q}")));
    let nf = |reason: &str| err(404, "not_found", reason);
    // changes_test.exs: missing design doc / function → 404
    assert_eq!(get("filter=nothingtosee/bop"), nf("missing"));
    s.put("/db/_design/plain", r#"{"views": {}}"#);
    assert_eq!(get("filter=plain/bop"), nf("missing json key: filters"));
    s.put("/db/_design/noviews", r#"{"filters": {}}"#);
    assert_eq!(get("filter=noviews/f"), nf("missing json key: f"));
    s.put(
        "/db/_design/changes_filter",
        r#"{"filters": {"bop": "function(doc, req) { return doc.bop; }"}, "views": {"blah": {"map": "function(doc) { emit(null, null); }"}}}"#,
    );
    assert_eq!(
        get("filter=changes_filter/movealong"),
        nf("missing json key: movealong")
    );
    // The function exists: it runs (none of the documents has a `bop`).
    let (status, body) = get("filter=changes_filter/bop");
    assert_eq!(status, 200);
    assert_eq!(body["results"], json!([]));
    let r = s.get("/db/_design/plain");
    let rev = r.json()["_rev"].as_str().unwrap().to_string();
    s.delete(&format!("/db/_design/plain?rev={rev}"));
    assert_eq!(get("filter=plain/f"), nf("deleted"));
    let form = err(
        400,
        "bad_request",
        "`filter` must be of the form `designname/filtername`",
    );
    assert_eq!(get("filter=bop"), form);
    assert_eq!(get("filter=a/b/c"), form);
    assert_eq!(
        get("filter=_bogus"),
        err(400, "bad_request", "unknown builtin filter name")
    );
    // an empty filter name, or one of only slashes, is no filter
    for q in ["filter=", "filter=/"] {
        assert_eq!(
            s.get(&format!("/db/_changes?{q}")).json()["results"]
                .as_array()
                .unwrap()
                .len(),
            8,
            "{q}"
        );
    }
    // _view
    assert_eq!(
        get("filter=_view"),
        err(
            400,
            "bad_request",
            "`view` filter parameter is not provided."
        )
    );
    assert_eq!(
        get("filter=_view&view=blah"),
        err(
            400,
            "bad_request",
            "`view` must be of the form `designname/viewname`"
        )
    );
    assert_eq!(
        get("filter=_view&view=changes_filter/nope"),
        nf("missing json key: nope")
    );
    assert_eq!(
        get("filter=_view&view=noviews/v"),
        nf("missing json key: views")
    );
    assert_eq!(
        s.get("/db/_changes?filter=_view&view=changes_filter/blah")
            .status,
        200
    );
    // _doc_ids
    let not_list = err(
        400,
        "bad_request",
        "`doc_ids` filter parameter is not a list of doc ids.",
    );
    assert_eq!(get("filter=_doc_ids"), not_list);
    assert_eq!(get("filter=_doc_ids&doc_ids=%5B1%5D"), not_list);
    assert_eq!(
        get("filter=_doc_ids&doc_ids=%5B"),
        err(400, "bad_request", "invalid UTF-8 JSON")
    );
    assert_eq!(
        sj(&s.post("/db/_changes?filter=_doc_ids", r#"{"doc_ids": "d1"}"#)),
        not_list
    );
    // POST reads doc_ids from the body only
    let r = s.post(
        "/db/_changes?filter=_doc_ids&doc_ids=%5B%22d1%22%5D",
        r#"{"doc_ids": ["d2"]}"#,
    );
    assert_eq!(r.json()["results"][0]["id"], "d2");
    // _selector
    assert_eq!(
        get("filter=_selector"),
        err(
            400,
            "bad_request",
            "Selector must be specified in POST payload"
        )
    );
    assert_eq!(
        sj(&s.post("/db/_changes?filter=_selector", r#"{"selector": 1}"#)),
        err(400, "bad_request", "Selector error: expected a JSON object")
    );
    // (Selector filtering itself: tests/mango.rs.)
    assert_eq!(
        s.post("/db/_changes?filter=_selector", r#"{"selector": {"a": 1}}"#)
            .status,
        200
    );
}

#[test]
fn changes_feeds_live_and_eventsource() {
    let s = Server::start();
    changes_db(&s);
    // `live` is CouchDB's other name for `continuous`
    let r = s.get("/db/_changes?feed=live&timeout=100");
    let lines: Vec<Value> = r
        .text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    assert!(lines[5]["last_seq"].is_string());

    let all = s.get("/db/_changes").json();
    let second = all["results"][1]["seq"].as_str().unwrap().to_string();
    let r = s.req_with(
        "GET",
        "/db/_changes?feed=eventsource&timeout=100&since=0",
        None,
        &[("last-event-id", &second)],
        true,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    let events: Vec<&str> = r.text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 3, "Last-Event-ID overrides since: {}", r.text);
    let first = events[0];
    let (data, id) = first.split_once('\n').unwrap();
    let row: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(row["id"], "d2");
    assert_eq!(
        id,
        format!("id: {}", json!(row["seq"])),
        "the id is the JSON seq"
    );
    // with seq_interval the hidden seqs are `id: null`
    let r = s.get("/db/_changes?feed=eventsource&timeout=100&seq_interval=2&limit=2");
    let ids: Vec<&str> = r.text.lines().filter(|l| l.starts_with("id: ")).collect();
    assert!(ids[0].starts_with("id: \""), "{ids:?}");
    assert_eq!(ids[1], "id: null");
}

// ---- /_node/_local/_config ----------------------------------------------------------

#[test]
fn config_shows_standard_options_settee_honours() {
    let s = Server::start();
    let all = s.get(CFG).json();
    // config_test.exs: "Standard config options are present"
    assert_eq!(all["couchdb"]["database_dir"], s.dir.display().to_string());
    assert_eq!(
        all["chttpd"]["port"], "0",
        "the port the command line asked for"
    );
    assert_eq!(all["chttpd"]["bind_address"], "127.0.0.1");
    assert_eq!(
        all["uuids"],
        json!({"algorithm": "sequential", "max_count": "1000"})
    );
    assert_eq!(all["query_server_config"]["reduce_limit"], "true");
    // Settee's default is 4 per core (CouchDB's 100 is for processes of every language).
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        all["query_server_config"]["os_process_limit"],
        (4 * cores).to_string()
    );
    assert_eq!(
        all["attachments"],
        json!({
            "compressible_types": "text/*, application/javascript, application/json, application/xml",
            "compression_level": "8"
        })
    );
    assert_eq!(all["couchdb"]["max_document_size"], "8000000");
    assert_eq!(all["couchdb"]["os_process_timeout"], "5000");
    assert_eq!(all["couchdb"]["default_security"], "admin_only");
    assert_eq!(
        all["settee"],
        json!({"js_memory_limit": "67108864", "view_index_workers": "0",
               "storage_cache_size": "201326592"})
    );
    assert_eq!(all["cors"], json!({"credentials": "false"}));
    // "Default whitelist is empty"
    assert!(all["chttpd"].get("config_whitelist").is_none());

    // a default can be changed, and deleted (persisted as an empty value)
    let key = format!("{CFG}/uuids/max_count");
    assert_eq!(sj(&s.put(&key, r#""5""#)), (200, json!("1000")));
    assert_eq!(sj(&s.delete(&key)), (200, json!("5")));
    assert_eq!(
        sj(&s.get(&key)),
        err(404, "not_found", "unknown_config_value")
    );
    let local = std::fs::read_to_string(s.dir.join("local.ini")).unwrap();
    assert!(
        local.contains("max_count = \n") || local.contains("max_count =\n"),
        "{local}"
    );
    let r = s.post(&format!("{CFG}/_reload"), "");
    assert_eq!(sj(&r), (200, json!({"ok": true})));
    assert_eq!(s.get(&key).status, 404, "still deleted after _reload");
    assert_eq!(
        s.get(&format!("{CFG}/uuids/algorithm")).json(),
        "sequential",
        "defaults stay"
    );
}

#[test]
fn config_values_whitelist_blacklist_and_reload() {
    let s = Server::start();
    // "Only JSON strings are accepted"
    for v in ["true", "11", "{}", r#"{"testing": [1, 2, 3]}"#, "null"] {
        assert_eq!(
            sj(&s.put(&format!("{CFG}/a/b"), v)),
            err(400, "bad_request", "a JSON string expected"),
            "{v}"
        );
    }
    // the blacklist (couch_util), for PUT and DELETE
    for section in [
        "daemons",
        "external",
        "httpd_design_handlers",
        "httpd_db_handlers",
        "httpd_global_handlers",
        "native_query_servers",
        "os_daemons",
        "query_servers",
        "feature_flags",
    ] {
        let denied = err(
            403,
            "forbidden",
            "Config section blacklisted for modification over HTTP API.",
        );
        assert_eq!(
            sj(&s.put(&format!("{CFG}/{section}/wohali"), r#""rules""#)),
            denied,
            "{section}"
        );
        assert_eq!(
            sj(&s.delete(&format!("{CFG}/{section}/wohali"))),
            denied,
            "{section}"
        );
    }
    // CouchDB 3's clustered _config does not read config_whitelist (only the removed
    // node-local /_config did): setting one restricts nothing
    for section in ["chttpd", "httpd"] {
        let r = s.put(
            &format!("{CFG}/{section}/config_whitelist"),
            r#""[{chttpd,config_whitelist}, {test,foo}]""#,
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        sj(&s.put(&format!("{CFG}/other/key"), r#""x""#)),
        (200, json!(""))
    );
    assert_eq!(
        sj(&s.delete(&format!("{CFG}/other/key"))),
        (200, json!("x"))
    );

    // X-Couch-Persist: false lasts until _reload
    set(&s, "test", "transient", "1");
    assert_eq!(s.put(&format!("{CFG}/test/kept"), r#""2""#).status, 200);
    assert_eq!(
        sj(&s.post(&format!("{CFG}/_reload"), "")),
        (200, json!({"ok": true}))
    );
    assert_eq!(s.get(&format!("{CFG}/test")).json(), json!({"kept": "2"}));
}

#[test]
fn config_admin_passwords_are_hashed_on_the_server() {
    let s = Server::start();
    let key = format!("{CFG}/admins/administrator");
    assert_eq!(sj(&s.put(&key, r#""s3cret""#)), (200, json!("")));
    let stored = s.get(&key).json();
    let stored = stored.as_str().unwrap();
    assert!(stored.starts_with("-pbkdf2:sha256-"), "{stored}");
    assert!(!stored.contains("s3cret"));
    let me = s
        .as_user(("administrator", "s3cret"), "GET", "/_session", None)
        .json();
    assert_eq!(me["userCtx"]["name"], "administrator");
    assert_eq!(me["userCtx"]["roles"], json!(["_admin"]));
    // a value that already is a hash is kept as it is
    assert_eq!(
        sj(&s.put(&key, &json!(stored).to_string())),
        (200, json!(stored))
    );
    assert_eq!(s.get(&key).json(), json!(stored));
    assert_eq!(sj(&s.delete(&key)), (200, json!(stored)));
}
