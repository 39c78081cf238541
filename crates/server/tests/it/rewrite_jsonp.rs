//! `_rewrite` with CouchDB's array rules (and the limits around them), with rewrite
//! functions (JavaScript in process, Python through Settee's query server), and JSONP
//! (`[httpd] allow_jsonp`, `?callback=`) over real HTTP.

use crate::common;
use common::Server;
use serde_json::{json, Value};

fn setup(s: &Server) {
    s.create_db("db");
    for (id, body) in [
        ("a", json!({"n": 1, "type": "x"})),
        ("b", json!({"n": 2, "type": "y"})),
        ("a b", json!({"n": 3})),
    ] {
        let r = s.put(
            &format!("/db/{}", id.replace(' ', "%20")),
            &body.to_string(),
        );
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let ddoc = json!({
        "views": {"by_n": {"map": "function(doc) { if (doc.n) emit(doc.n, doc.type || null); }"}},
        "rewrites": [
            {"from": "doc/:id", "to": "../../:id"},
            {"from": "all", "to": "../../_all_docs", "query": {"limit": "1"}},
            {"from": "n/:n", "to": "_view/by_n", "query": {"key": ":n"}, "formats": {"n": "int"}},
            {"from": "range", "to": "_view/by_n"},
            {"from": "put/:id", "to": "../../:id", "method": "PUT"},
            {"from": "put/:id", "to": "../../_all_docs"},
            {"from": "files/*", "to": "../../*"},
            {"from": "loop", "to": "_rewrite/loop"},
            {"from": "info", "to": "_info"},
            {"from": "db", "to": "../.."}
        ]
    });
    let r = s.put("/db/_design/app", &ddoc.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
}

fn get(s: &Server, path: &str) -> (u16, Value) {
    let r = s.get(path);
    (r.status, r.json())
}

#[test]
fn array_rules_route_to_documents_views_and_the_database() {
    let s = Server::start();
    setup(&s);
    let base = "/db/_design/app/_rewrite";
    let (status, doc) = get(&s, &format!("{base}/doc/a"));
    assert_eq!((status, doc["n"].clone()), (200, json!(1)));
    // A bound segment is decoded, then quoted back into the new path (a space as `+`,
    // which `[chttpd] decode_plus_to_space` turns back into a space).
    s.put(
        "/_node/_local/_config/chttpd/decode_plus_to_space",
        r#""true""#,
    );
    assert_eq!(get(&s, &format!("{base}/doc/a%20b")).1["n"], json!(3));
    // The rule's query is added to the request's own parameters.
    let (_, all) = get(&s, &format!("{base}/all?include_docs=true"));
    assert_eq!(all["rows"].as_array().unwrap().len(), 1);
    assert_eq!(all["rows"][0]["doc"]["_id"], "_design/app");
    // `:n` with `formats` int becomes a JSON number key.
    let (_, by_n) = get(&s, &format!("{base}/n/2"));
    assert_eq!(by_n["rows"], json!([{"id": "b", "key": 2, "value": "y"}]));
    // JSON parameters pass through as JSON.
    let (_, range) = get(&s, &format!("{base}/range?startkey=2&endkey=3"));
    let keys: Vec<&Value> = range["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["key"])
        .collect();
    assert_eq!(keys, [&json!(2), &json!(3)]);
    // `*` carries the rest of the path.
    assert_eq!(get(&s, &format!("{base}/files/b")).1["n"], json!(2));
    assert_eq!(get(&s, &format!("{base}/info")).1["name"], "app");
    assert_eq!(get(&s, &format!("{base}/db")).1["db_name"], "db");
}

#[test]
fn the_method_picks_the_rule_and_the_body_follows() {
    let s = Server::start();
    setup(&s);
    let r = s.put("/db/_design/app/_rewrite/put/c", r#"{"via": "rewrite"}"#);
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/db/c").json()["via"], "rewrite");
    // Other methods fall through to the next rule with that path.
    let (status, all) = get(&s, "/db/_design/app/_rewrite/put/c");
    assert_eq!(status, 200);
    assert!(all["rows"].is_array());
}

#[test]
fn rewrite_errors_are_couchdbs() {
    let s = Server::start();
    setup(&s);
    assert_eq!(
        get(&s, "/db/_design/app/_rewrite/nothing/here"),
        (404, json!({"error": "not_found", "reason": "missing"}))
    );
    assert_eq!(
        get(&s, "/db/_design/app/_rewrite/loop"),
        (
            400,
            json!({"error": "bad_request", "reason": "Exceeded rewrite recursion limit"})
        )
    );
    // The limit is a setting.
    let r = s.put("/_node/_local/_config/chttpd/rewrite_limit", r#""0""#);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(get(&s, "/db/_design/app/_rewrite/doc/a").0, 400);
    s.delete("/_node/_local/_config/chttpd/rewrite_limit");
    assert_eq!(get(&s, "/db/_design/app/_rewrite/doc/a").0, 200);
    // A design document without rules, or no design document.
    s.put("/db/_design/plain", "{}");
    assert_eq!(
        get(&s, "/db/_design/plain/_rewrite/x"),
        (
            404,
            json!({"error": "rewrite_error", "reason": "Invalid path."})
        )
    );
    assert_eq!(get(&s, "/db/_design/none/_rewrite/x").0, 404);
    // Rules that climb out of the database, or have no target.
    s.put(
        "/db/_design/bad",
        &json!({"rewrites": [{"from": "x", "to": "../../../other"}]}).to_string(),
    );
    assert_eq!(
        get(&s, "/db/_design/bad/_rewrite/x"),
        (
            500,
            json!({"error": "insecure_rewrite_rule", "reason": "too many ../.. segments"})
        )
    );
    s.put(
        "/db/_design/notarget",
        &json!({"rewrites": [{"from": "x"}]}).to_string(),
    );
    assert_eq!(
        get(&s, "/db/_design/notarget/_rewrite/x"),
        (
            500,
            json!({"error": "error", "reason": "invalid_rewrite_target"})
        )
    );
}

#[test]
fn rewritten_requests_are_authorized_again() {
    let s = Server::start();
    setup(&s);
    s.create_db("secret");
    s.put("/secret/doc", "{}");
    s.add_user("joe", "pw", &[]);
    let sec = json!({"members": {"names": ["joe"]}});
    assert_eq!(s.put("/db/_security", &sec.to_string()).status, 200);
    s.put(
        "/db/_design/climb",
        &json!({"rewrites": [{"from": "x", "to": "../../../secret/doc"}]}).to_string(),
    );
    // With secure_rewrites off, a rule may leave the database, but the user still needs
    // access to where it leads.
    s.put("/_node/_local/_config/chttpd/secure_rewrites", r#""false""#);
    let joe = ("joe", "pw");
    let r = s.as_user(joe, "GET", "/db/_design/climb/_rewrite/x", None);
    assert_eq!(r.status, 403, "{}", r.text);
    let r = s.get("/db/_design/climb/_rewrite/x");
    assert_eq!(r.status, 200, "{}", r.text);
    // Non-members of the database cannot rewrite through it.
    let r = s.anon("GET", "/db/_design/app/_rewrite/doc/a", None, &[]);
    assert_eq!(r.status, 401, "{}", r.text);
}

#[test]
fn jsonp_wraps_json_answers_when_allowed() {
    let s = Server::start();
    setup(&s);
    // Off by default: the parameter is ignored.
    let r = s.get("/db/a?callback=cb");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["n"], 1);

    s.put("/_node/_local/_config/httpd/allow_jsonp", r#""true""#);
    let r = s.get("/db/a?callback=cb");
    assert_eq!(r.header("content-type"), Some("application/javascript"));
    let inner = r
        .text
        .strip_prefix("/* CouchDB */cb(")
        .and_then(|t| t.strip_suffix(");\n"))
        .unwrap_or_else(|| panic!("{:?}", r.text));
    assert_eq!(serde_json::from_str::<Value>(inner).unwrap()["n"], 1);
    // Streamed answers (views) and errors too; names may have dots and brackets.
    let r = s.get("/db/_design/app/_view/by_n?callback=app.cbs%5B0%5D");
    let inner = r
        .text
        .strip_prefix("/* CouchDB */app.cbs[0](")
        .and_then(|t| t.strip_suffix(");\n"))
        .unwrap_or_else(|| panic!("{:?}", r.text));
    assert_eq!(
        serde_json::from_str::<Value>(inner).unwrap()["total_rows"],
        3
    );
    let r = s.get("/db/missing?callback=cb");
    assert_eq!(r.status, 404);
    assert!(
        r.text
            .starts_with("/* CouchDB */cb({\"error\":\"not_found\""),
        "{}",
        r.text
    );
    // An empty callback is no callback; a bad one is CouchDB's 400.
    assert_eq!(s.get("/db/a?callback=").json()["n"], 1);
    let r = s.get("/db/a?callback=alert(1)");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "invalid_callback"})
        )
    );
    // Answers that are not JSON are left alone.
    let r = s.req_with(
        "PUT",
        "/db/t/f.txt",
        Some("hello"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.get("/db/t/f.txt?callback=cb");
    assert_eq!((r.status, r.text.as_str()), (200, "hello"));
}

/// A JavaScript rewrite function: new paths, queries, methods, bodies and headers, answers
/// of its own, refusals, and CouchDB's errors for answers it cannot use.
#[test]
fn rewrite_functions_route_answer_and_refuse() {
    let s = Server::start();
    setup(&s);
    let fun = r#"function(req) {
        var p = req.path.slice(4);
        if (p[0] == 'doc') return '../../' + p[1];
        if (p[0] == 'first') return {path: '../../_all_docs', query: {limit: '1'}};
        if (p[0] == 'keep') return {path: '../../_all_docs'};
        if (p[0] == 'post') return {path: '../../', method: 'POST', body: JSON.stringify({_id: 'posted', v: req.query.v}),
                                    headers: {'Content-Type': 'application/json'}};
        if (p[0] == 'echo') return {code: 202, body: req.method + ' ' + req.body + ' ' + (req.userCtx.name || ''),
                                    headers: {'X-Rewritten': 'yes'}};
        if (p[0] == 'deny') throw({forbidden: 'not here'});
        if (p[0] == 'who') throw({unauthorized: 'log in'});
        if (p[0] == 'keys') return {path: 'x', info: req.info === undefined, uuid: req.uuid === undefined};
        if (p[0] == 'badcode') return {code: 99};
        if (p[0] == 'nopath') return {query: {a: 'b'}};
        if (p[0] == 'badquery') return {path: 'x', query: {a: 1}};
        if (p[0] == 'boom') throw new Error('boom');
        return false;
    }"#;
    let r = s.put("/db/_design/fn", &json!({ "rewrites": fun }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let base = "/db/_design/fn/_rewrite";
    assert_eq!(get(&s, &format!("{base}/doc/b")).1["n"], json!(2));
    let (_, first) = get(&s, &format!("{base}/first?limit=10"));
    assert_eq!(first["rows"].as_array().unwrap().len(), 1, "{first}");
    // Without `query`, the request's own parameters go along.
    let (_, kept) = get(&s, &format!("{base}/keep?limit=2"));
    assert_eq!(kept["rows"].as_array().unwrap().len(), 2, "{kept}");
    let r = s.req("PUT", &format!("{base}/post?v=7"), Some("ignored"));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/db/posted").json()["v"], "7");
    let r = s.post(&format!("{base}/echo"), "hi");
    assert_eq!((r.status, r.text.as_str()), (202, "POST hi admin"));
    assert_eq!(r.header("x-rewritten"), Some("yes"));
    assert_eq!(
        get(&s, &format!("{base}/deny")),
        (403, json!({"error": "forbidden", "reason": "not here"}))
    );
    assert_eq!(
        get(&s, &format!("{base}/who")),
        (401, json!({"error": "unauthorized", "reason": "log in"}))
    );
    assert_eq!(
        get(&s, &format!("{base}/nothing")),
        (
            404,
            json!({"error": "rewrite_error", "reason": "Invalid path."})
        )
    );
    for (what, reason) in [
        ("badcode", "bad code"),
        ("nopath", "Rewrite result must produce a new path."),
        ("badquery", "object key/value must be strings a=1"),
    ] {
        assert_eq!(
            get(&s, &format!("{base}/{what}")),
            (500, json!({"error": "rewrite_error", "reason": reason})),
            "{what}"
        );
    }
    let (status, boom) = get(&s, &format!("{base}/boom"));
    assert_eq!(
        (status, boom["error"].clone()),
        (500, json!("render_error"))
    );
}

/// The same rewrite function written in Python runs in Settee's query server.
#[test]
fn python_rewrite_functions_run_in_the_query_server() {
    let on_path = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| d.join("settee-query-server").is_file())
    });
    if !on_path {
        eprintln!("SKIPPED: settee-query-server is not on PATH (pip install ./python)");
        return;
    }
    let s = Server::start();
    setup(&s);
    let fun = "def rewrite(req):\n    p = req['path'][4:]\n    if p and p[0] == 'doc':\n        return '../../' + p[1]\n    if p and p[0] == 'deny':\n        raise Forbidden('no')\n    return None\n";
    let r = s.put(
        "/db/_design/py",
        &json!({"language": "python", "rewrites": fun}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(get(&s, "/db/_design/py/_rewrite/doc/a").1["n"], json!(1));
    assert_eq!(
        get(&s, "/db/_design/py/_rewrite/deny"),
        (403, json!({"error": "forbidden", "reason": "no"}))
    );
    assert_eq!(get(&s, "/db/_design/py/_rewrite/other").0, 404);
}
