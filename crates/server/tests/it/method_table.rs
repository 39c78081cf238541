//! Methods a path does not take, the whole table of CouchDB 3.5.2's answers (notes §3):
//! `405` with its JSON body and `Allow` exactly as each handler lists it (order and all),
//! `Update functions do not allow GET` without `Allow`, update and show functions taking
//! any other method, and the paths whose other checks come before the method's.

use crate::common;
use common::Server;
use serde_json::json;

/// What a row's answer carries.
enum Want {
    /// `{"error":"method_not_allowed","reason":"Only <list> allowed"}`.
    Only(&'static str),
    /// `{"error": …, "reason": …}` (and, for a 500, whatever else).
    Error(&'static str, &'static str),
    /// A design function's own text.
    Text(&'static str),
    /// No body (`HEAD`).
    Empty,
}

/// (method, path, body, status, `Allow`, body wanted). `{node}` is the node's name.
type Row = (
    &'static str,
    &'static str,
    Option<&'static str>,
    u16,
    Option<&'static str>,
    Want,
);

#[rustfmt::skip]
const TABLE: &[Row] = &[
    ("PUT", "/db/_revs_diff", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_revs_diff", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("HEAD", "/db/_revs_diff", Some("{}"), 405, Some("POST"), Want::Empty),
    ("DELETE", "/db/_view_cleanup", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_view_cleanup", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("DELETE", "/db/_design/d/_update/u", Some("{}"), 200, None, Want::Text("x")),
    ("PUT", "/db/_design/d/_update/u", Some("{}"), 200, None, Want::Text("x")),
    ("POST", "/db/_design/d/_update/u", Some("{}"), 200, None, Want::Text("x")),
    ("PATCH", "/db/_design/d/_update/u", Some("{}"), 200, None, Want::Text("x")),
    ("GET", "/db/_design/d/_update/u", Some("{}"), 405, None, Want::Error("method_not_allowed", "Update functions do not allow GET")),
    ("PUT", "/db/_bulk_docs", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_bulk_docs", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("DELETE", "/db/_compact", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_compact", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("PUT", "/_session", Some("{}"), 405, Some("GET,HEAD,POST,DELETE"), Want::Only("GET,HEAD,POST,DELETE")),
    ("PUT", "/_session/x", Some("{}"), 405, Some("GET,HEAD,POST,DELETE"), Want::Only("GET,HEAD,POST,DELETE")),
    ("DELETE", "/_all_dbs", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("POST", "/_all_dbs", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("POST", "/", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("FOO", "/", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("get", "/", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("TRACE", "/", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("OPTIONS", "/", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("PUT", "/db/_changes", Some("{}"), 405, Some("GET,POST,HEAD"), Want::Only("GET,POST,HEAD")),
    ("DELETE", "/db/_find", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_find", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("PUT", "/db/_index", Some("{}"), 405, Some("GET,POST"), Want::Only("GET,POST")),
    ("PATCH", "/db/doc", Some("{}"), 405, Some("DELETE,GET,HEAD,POST,PUT,COPY"), Want::Only("DELETE,GET,HEAD,POST,PUT,COPY")),
    ("PATCH", "/db/_local/x", Some("{}"), 405, Some("DELETE,GET,HEAD,POST,PUT,COPY"), Want::Only("DELETE,GET,HEAD,POST,PUT,COPY")),
    ("PATCH", "/db/_design/d", Some("{}"), 405, Some("DELETE,GET,HEAD,POST,PUT,COPY"), Want::Only("DELETE,GET,HEAD,POST,PUT,COPY")),
    ("MOVE", "/db/doc", Some("{}"), 405, Some("DELETE,GET,HEAD,POST,PUT,COPY"), Want::Only("DELETE,GET,HEAD,POST,PUT,COPY")),
    ("PUT", "/db/_all_docs", Some("{}"), 405, Some("GET,HEAD,POST"), Want::Only("GET,HEAD,POST")),
    ("PUT", "/db/_design_docs", Some("{}"), 405, Some("GET,HEAD,POST"), Want::Only("GET,HEAD,POST")),
    ("PUT", "/db/_local_docs", Some("{}"), 405, Some("GET,HEAD,POST"), Want::Only("GET,HEAD,POST")),
    ("DELETE", "/db/_design/d/_view/v", Some("{}"), 405, Some("GET,POST,HEAD"), Want::Only("GET,POST,HEAD")),
    ("DELETE", "/db/_design/d/_view/nope", Some("{}"), 405, Some("GET,POST,HEAD"), Want::Only("GET,POST,HEAD")),
    ("DELETE", "/db/_design/d/_list/l/v", Some("{}"), 405, Some("GET,POST,HEAD"), Want::Only("GET,POST,HEAD")),
    ("PUT", "/db/_design/d/_show/s", Some("{}"), 200, None, Want::Text("s")),
    ("DELETE", "/db/_design/d/_show/s", Some("{}"), 200, None, Want::Text("s")),
    ("PATCH", "/db/_design/d/_show/s", Some("{}"), 200, None, Want::Text("s")),
    ("DELETE", "/db/_design/d/_info", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("POST", "/db/_design/d/_info", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("POST", "/_uuids", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("PUT", "/_up", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("POST", "/_up", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("POST", "/_membership", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("DELETE", "/_node/_local/_stats", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("POST", "/_node/_local/_stats", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("POST", "/_node/{node}/_stats", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("POST", "/_node/_local/_system", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("DELETE", "/_node/_local/_versions", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("POST", "/_node/_local/_prometheus", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("PUT", "/_node/_local/_config", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("GET", "/_node/_local/_restart", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("HEAD", "/_node/_local/_restart", Some("{}"), 405, Some("POST"), Want::Empty),
    ("PUT", "/_node/_local/_restart", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/_node/other@host/_restart", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("POST", "/_node/_local/_config/couchdb/uuid", Some("{}"), 405, Some("GET,PUT,DELETE"), Want::Only("GET,PUT,DELETE")),
    ("POST", "/_node/_local/_config/couchdb", Some("{}"), 405, Some("GET"), Want::Only("GET")),
    ("DELETE", "/db/_bulk_get", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("PUT", "/db/_explain", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("PUT", "/db/_purge", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("PUT", "/db/_all_docs/queries", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_design/d/_view/v/queries", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/db/_ensure_full_commit", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("DELETE", "/db/_ensure_full_commit", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("PUT", "/_replicate", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("DELETE", "/db/_security", Some("{}"), 405, Some("PUT,GET"), Want::Only("PUT,GET")),
    ("POST", "/db/_revs_limit", Some("{}"), 405, Some("PUT,GET"), Want::Only("PUT,GET")),
    ("FOO", "/db", Some("{}"), 405, Some("DELETE,GET,HEAD,POST"), Want::Only("DELETE,GET,HEAD,POST")),
    ("PATCH", "/db", Some("{}"), 405, Some("DELETE,GET,HEAD,POST"), Want::Only("DELETE,GET,HEAD,POST")),
    ("get", "/db", Some("{}"), 405, Some("DELETE,GET,HEAD,POST"), Want::Only("DELETE,GET,HEAD,POST")),
    ("PATCH", "/db/doc/att", Some("{}"), 405, Some("DELETE,GET,HEAD,PUT"), Want::Only("DELETE,GET,HEAD,PUT")),
    ("POST", "/db/doc/att", Some("{}"), 405, Some("DELETE,GET,HEAD,PUT"), Want::Only("DELETE,GET,HEAD,PUT")),
    ("PUT", "/_active_tasks", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("PUT", "/_scheduler/jobs", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("PUT", "/_reshard", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("PUT", "/_utils", Some("{}"), 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("PUT", "/_cluster_setup", Some("{}"), 405, Some("GET,POST"), Want::Only("GET,POST")),
    ("GET", "/_replicate", Some("{}"), 405, Some("POST"), Want::Only("POST")),
    ("GET", "/_replicate", None, 400, None, Want::Error("bad_request", "Missing request body")),
    ("POST", "/_dbs_info", Some("{}"), 400, None, Want::Error("bad_request", "`keys` member must exist.")),
    ("POST", "/db/_local/x", Some("{}"), 400, None, Want::Error("bad_request", "Referer header required.")),
    ("POST", "/_session/x", Some("{}"), 400, None, Want::Error("bad_request", "request body must contain a username")),
    ("POST", "/db/_design/d/_update", Some("{}"), 404, None, Want::Error("update_error", "Invalid path.")),
    ("PUT", "/db/_design/d/_rewrite/x", Some("{}"), 404, None, Want::Error("rewrite_error", "Invalid path.")),
    ("PUT", "/db/_local/x/att", Some("{}"), 400, None, Want::Error("bad_request", "_local documents do not accept attachments.")),
    ("DELETE", "/db/_partition/p/_all_docs", Some("{}"), 400, None, Want::Error("bad_request", "database is not partitioned")),
    ("PUT", "/nodb/_revs_diff", Some("{}"), 404, None, Want::Error("not_found", "Database does not exist.")),
    ("DELETE", "/db/_design/nope/_view/v", Some("{}"), 404, None, Want::Error("not_found", "missing")),
    ("DELETE", "/db/_design/nope/_info", Some("{}"), 404, None, Want::Error("not_found", "missing")),
    ("GET", "/db/_design/nope/_update/u", Some("{}"), 404, None, Want::Error("not_found", "missing")),
    ("CONNECT", "/", None, 405, Some("GET,HEAD"), Want::Only("GET,HEAD")),
    ("HEAD", "/db/_design/d/_update/u", None, 405, None, Want::Empty),
    ("OPTIONS", "/db/_design/d/_update/u", None, 200, None, Want::Text("x")),
    ("PUT", "/db/_revs_limit", Some("{}"), 500, None, Want::Error("unknown_error", "function_clause")),
];

#[test]
fn methods_a_path_does_not_take() {
    let s = Server::start();
    s.create_db("db");
    let ddoc = json!({
        "updates": {"u": "function(doc, req) { return [null, 'x']; }"},
        "shows": {"s": "function(doc, req) { return 's'; }"},
        "lists": {"l": "function(head, req) { send('l'); }"},
        "views": {"v": {"map": "function(doc) { emit(doc._id, 1); }"}},
    });
    assert_eq!(s.put("/db/_design/d", &ddoc.to_string()).status, 201);
    let rev = s.put("/db/doc", "{}").json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let att = s.send_raw(
        "PUT",
        &format!("/db/doc/att?rev={rev}"),
        &[],
        Some("hello"),
        true,
    );
    assert_eq!(att.status, 201);
    let node = s.get("/_node/_local").json()["name"]
        .as_str()
        .unwrap()
        .to_string();
    let mut wrong = Vec::new();
    for (method, path, body, status, allow, want) in TABLE {
        let path = path.replace("{node}", &node);
        let headers: &[(&str, &str)] = match body {
            Some(_) => &[("Content-Type", "application/json")],
            None => &[],
        };
        let r = s.send_raw(method, &path, headers, *body, true);
        let text = String::from_utf8_lossy(&r.body).into_owned();
        let json = || serde_json::from_slice::<serde_json::Value>(&r.body).ok();
        let body_ok = match want {
            Want::Only(list) => {
                text == format!(
                    "{{\"error\":\"method_not_allowed\",\"reason\":\"Only {list} allowed\"}}\n"
                )
            }
            Want::Error(error, reason) => {
                json().is_some_and(|j| j["error"] == *error && j["reason"] == *reason)
            }
            Want::Text(t) => text == *t,
            Want::Empty => r.body.is_empty(),
        };
        let got_allow = r
            .headers
            .iter()
            .find(|(k, _)| k == "allow")
            .map(|(_, v)| v.as_str());
        if r.status != *status || got_allow != *allow || !body_ok {
            wrong.push(format!(
                "{method} {path}: {} Allow {got_allow:?} {text:?}",
                r.status
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} rows differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
