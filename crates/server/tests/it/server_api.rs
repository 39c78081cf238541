//! Server-level endpoints, authentication, and database lifecycle over real HTTP.

use crate::common;
use common::Server;
use serde_json::json;

#[test]
fn welcome_up_and_uuids() {
    let s = Server::start();
    let r = s.req_with("GET", "/", None, &[], false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["couchdb"], "Welcome");
    assert_eq!(v["vendor"]["name"], "Settee");
    assert!(r.header("server").unwrap().starts_with("CouchDB/"));
    assert_eq!(
        s.req_with("GET", "/_up", None, &[], false).json()["status"],
        "ok"
    );
    let u = s
        .req_with("GET", "/_uuids?count=5", None, &[], false)
        .json();
    let ids = u["uuids"].as_array().unwrap();
    assert_eq!(ids.len(), 5);
    assert!(ids.iter().all(|i| i.as_str().unwrap().len() == 32));
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    assert_eq!(&sorted, ids, "sequential uuids sort in issue order");
    assert_eq!(s.get("/_uuids?count=1001").status, 400);
    assert_eq!(
        s.get("/_uuids?count=x").json(),
        json!({"error": "bad_request", "reason": "count must be a positive integer"})
    );
}

#[test]
fn no_admin_party() {
    let s = Server::start();
    let anon = s.req_with("PUT", "/db", None, &[], false);
    assert_eq!(anon.status, 401);
    assert_eq!(anon.json()["error"], "unauthorized");
    let r = s.req_with("GET", "/_all_dbs", None, &[], false);
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["reason"], "You are not a server admin.");
    let bad = s.req_with(
        "GET",
        "/",
        None,
        &[("authorization", "Basic YWRtaW46d3Jvbmc=")],
        false,
    );
    assert_eq!(bad.status, 401);
    assert_eq!(bad.json()["reason"], "Name or password is incorrect.");
    let session = s.req_with("GET", "/_session", None, &[], false).json();
    assert_eq!(session["userCtx"], json!({"name": null, "roles": []}));
    assert_eq!(
        s.get("/_session").json()["userCtx"]["roles"],
        json!(["_admin"])
    );
}

#[test]
fn first_start_creates_a_hashed_admin() {
    let dir = tempfile::tempdir().unwrap();
    // Occupy the port so the server sets up its data directory, then fails to listen and exits.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_settee"))
        .args(["serve", "--bind", &bind, "--data-dir"])
        .arg(dir.path())
        .env_remove("SETTEE_ADMIN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("created server admin `admin` with password"),
        "{stderr}"
    );
    let pw = stderr
        .split("with password `")
        .nth(1)
        .unwrap()
        .split('`')
        .next()
        .unwrap();
    let ini = std::fs::read_to_string(dir.path().join("local.ini")).unwrap();
    assert!(ini.contains("-pbkdf2:sha256-"), "{ini}");
    assert!(!ini.contains(pw), "the plaintext password is never stored");
}

#[test]
fn database_lifecycle() {
    let s = Server::start();
    let r = s.put("/db1", "");
    assert_eq!(r.status, 201);
    assert_eq!(r.json(), json!({"ok": true}));
    assert!(r.header("location").unwrap().ends_with("/db1"));
    let again = s.put("/db1", "");
    assert_eq!(again.status, 412);
    assert_eq!(again.json()["error"], "file_exists");
    let info = s.get("/db1").json();
    assert_eq!(info["db_name"], "db1");
    assert_eq!(info["doc_count"], 0);
    assert!(info["update_seq"].as_str().unwrap().starts_with("0-"));
    for k in ["file", "active", "external"] {
        assert!(info["sizes"][k].is_u64(), "{k}");
    }
    assert_eq!(s.req("HEAD", "/db1", None).status, 200);
    assert_eq!(s.req("HEAD", "/nope", None).status, 404);
    let missing = s.get("/nope");
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"error": "not_found", "reason": "Database does not exist."})
    );
    // names with a slash, encoded
    assert_eq!(s.put("/a%2Fb", "").status, 201);
    assert_eq!(s.get("/a%2Fb").json()["db_name"], "a/b");
    for bad in ["/Upper", "/1abc", "/a%20b", "/_foo"] {
        let r = s.put(bad, "");
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.json()["error"], "illegal_database_name", "{bad}");
    }
    // `_users` and `_replicator` are created at startup
    assert_eq!(s.put("/_users", "").status, 412);
    assert_eq!(s.put("/_replicator", "").status, 412);
    assert_eq!(
        s.get("/_all_dbs").json(),
        json!(["_replicator", "_users", "a/b", "db1"])
    );
    assert_eq!(
        s.get("/_all_dbs?descending=true&limit=2").json(),
        json!(["db1", "a/b"])
    );
    assert_eq!(
        s.get("/_all_dbs?startkey=%22a%22&endkey=%22b%22").json(),
        json!(["a/b"])
    );
    // delete, then recreate starts empty
    s.put("/db1/doc", "{}");
    assert_eq!(s.delete("/db1?rev=1-x").status, 400);
    assert_eq!(s.delete("/db1").json(), json!({"ok": true}));
    assert_eq!(s.delete("/db1").status, 404);
    s.create_db("db1");
    assert_eq!(s.get("/db1").json()["doc_count"], 0);
    assert_eq!(s.get("/db1/doc").status, 404);
}

#[test]
fn dbs_info_and_db_updates() {
    let s = Server::start();
    s.create_db("a");
    s.create_db("b");
    s.put("/a/x", "{}");
    let all = s.get("/_dbs_info").json();
    assert_eq!(
        all.as_array().unwrap().len(),
        4,
        "_replicator, _users, a, b"
    );
    let some = s.post("/_dbs_info", r#"{"keys":["b","zz"]}"#).json();
    assert_eq!(some[0]["key"], "b");
    assert_eq!(some[0]["info"]["db_name"], "b");
    assert_eq!(some[1], json!({"key": "zz", "error": "not_found"}));
    let ups = s.get("/_db_updates").json();
    let types: Vec<(String, String)> = ups["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["db_name"].as_str().unwrap().to_string(),
                r["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(types.contains(&("a".into(), "updated".into())), "{types:?}");
    assert!(types.contains(&("b".into(), "created".into())), "{types:?}");
    let since = ups["last_seq"].as_str().unwrap().to_string();
    s.delete("/b");
    let later = s.get(&format!("/_db_updates?since={since}")).json();
    assert_eq!(later["results"][0]["db_name"], "b");
    assert_eq!(later["results"][0]["type"], "deleted");
}

#[test]
fn errors_have_couchdb_shape() {
    let s = Server::start();
    s.create_db("db");
    let r = s.req("PATCH", "/db", None);
    assert_eq!(r.status, 405);
    assert!(r.header("allow").is_some());
    assert_eq!(r.json()["error"], "method_not_allowed");
    let r = s.req_with(
        "POST",
        "/db/_bulk_docs",
        Some("{}"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["error"], "bad_content_type");
    let r = s.post("/db/_bulk_docs", "{not json");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "bad_request", "reason": "invalid UTF-8 JSON"})
    );
    let r = s.get("/db/_design/x/_show/y");
    assert_eq!(
        (r.status, r.json()),
        (404, json!({"error": "not_found", "reason": "missing"}))
    );
    let r = s.get("/_node/_local/_smoosh/status");
    assert_eq!(r.status, 501, "unimplemented routes say so");
    let r = s.get("/db/_changes?filter=_selector");
    assert_eq!(r.status, 400);
    let r = s.get("/db/_all_docs?limit=-1");
    assert_eq!(r.json()["error"], "query_parse_error");
    let r = s.req_with("GET", "/db", None, &[("accept", "text/html")], true);
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[test]
fn ini_config_limits_request_and_document_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("settee.ini");
    std::fs::write(
        &ini,
        "[chttpd]\nmax_http_request_size = 2000\n[couchdb]\nmax_document_size = 500\n",
    )
    .unwrap();
    let s = Server::start_with(
        &dir.path().join("data"),
        &["--config", ini.to_str().unwrap()],
    );
    s.create_db("db");
    let r = s.put("/db/big", &format!(r#"{{"a":"{}"}}"#, "x".repeat(5000)));
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json(),
        json!({"error": "too_large", "reason": "the request entity is too large"})
    );
    let r = s.put("/db/doc", &format!(r#"{{"a":"{}"}}"#, "x".repeat(1000)));
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json(),
        json!({"error": "document_too_large", "reason": "doc"})
    );
    assert_eq!(s.put("/db/small", r#"{"a":1}"#).status, 201);
}
