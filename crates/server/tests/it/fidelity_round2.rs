//! The second fidelity round: behaviours checked against a running Apache CouchDB 3.5.2
//! (the reference in `../shared/reference`; its answers are quoted in the comments).
//! `tests/differential/` replays the same requests against both servers where the
//! reference is available; these tests pin the answers without it.

use crate::common;
use common::Server;
use serde_json::{json, Value};

/// `--node-name` names the node in `_membership`, `/_node/{name}/…` and `_shards`; an
/// unknown name is CouchDB's 404.
#[test]
fn node_name_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir.path(), &["--node-name", "node1@127.0.0.1"]);
    let m = s.get("/_membership");
    assert_eq!(
        m.json(),
        json!({"all_nodes": ["node1@127.0.0.1"], "cluster_nodes": ["node1@127.0.0.1"]})
    );
    // couch_httpd (not chttpd) answers `_membership`: no request id, no body time.
    assert!(m.header("x-couch-request-id").is_none());
    assert!(m.header("x-couchdb-body-time").is_none());
    for path in [
        "/_node/node1@127.0.0.1/_config/couchdb/max_document_size",
        "/_node/_local/_config/couchdb/max_document_size",
    ] {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }
    assert_eq!(
        s.get("/_node/_local").json(),
        json!({"name": "node1@127.0.0.1"})
    );
    // Under its own name the node answers from CouchDB's node-local interface: that
    // interface's welcome, without a request id; GET and HEAD only.
    let r = s.get("/_node/node1@127.0.0.1");
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        (v["couchdb"].as_str(), keys),
        (
            Some("Welcome"),
            vec!["couchdb", "uuid", "version", "vendor"]
        )
    );
    assert!(r.header("x-couch-request-id").is_none());
    let r = s.post("/_node/node1@127.0.0.1", "{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,HEAD")));
    assert!(r.header("x-couch-request-id").is_none());
    for path in ["/_node/_local/_stats", "/_node/node1@127.0.0.1/_system"] {
        assert_eq!(s.get(path).status, 200, "{path}");
    }
    let r = s.get("/_node/nonode@nohost/_config");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"error": "not_found", "reason": "no such node: nonode@nohost"})
    );
    s.put("/db", "").json();
    assert_eq!(
        s.get("/db/_shards").json()["shards"]["00000000-ffffffff"],
        json!(["node1@127.0.0.1"])
    );
    s.stop();

    // `[settee] node_name` in an ini file; a name that is not `name@host` is refused.
    let ini = dir.path().join("named.ini");
    std::fs::write(&ini, "[settee]\nnode_name = couchdb@localhost\n").unwrap();
    let s = Server::start_with(dir.path(), &["--config", ini.to_str().unwrap()]);
    assert_eq!(
        s.get("/_membership").json()["all_nodes"],
        json!(["couchdb@localhost"])
    );
    s.stop();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_settee"))
        .args(["serve", "--node-name", "nohost", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("name@host"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every 304 is framed with `Content-Length: 0`, as mochiweb frames it.
#[test]
fn not_modified_carries_content_length_zero() {
    let s = Server::start();
    s.put("/db", "");
    let rev = s.put("/db/d", r#"{"x": 1}"#).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let tag = format!("\"{rev}\"");
    for method in ["GET", "HEAD"] {
        let r = s.send_raw(method, "/db/d", &[("If-None-Match", &tag)], None, true);
        assert_eq!(r.status, 304);
        let h = |n: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(h("content-length").as_deref(), Some("0"), "{method}");
        assert_eq!(h("etag").as_deref(), Some(tag.as_str()));
        assert!(h("transfer-encoding").is_none());
    }
}

/// JSON booleans in the bodies of `POST` queries, as couch_mrview_http reads them.
#[test]
fn booleans_in_post_query_bodies() {
    let s = Server::start();
    s.put("/db", "");
    s.post(
        "/db/_bulk_docs",
        r#"{"docs": [{"_id": "a", "k": 1}, {"_id": "b", "k": 2}]}"#,
    );
    s.put(
        "/db/_design/d",
        r#"{"views": {"v": {"map": "function(doc) { emit(doc.k, 1); }", "reduce": "_sum"}}}"#,
    );
    let ids = |v: Value| -> Vec<Value> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].clone())
            .collect()
    };
    let r = s.post(
        "/db/_all_docs",
        r#"{"descending": true, "stable": true, "update": true}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        ids(r.json()),
        vec![json!("b"), json!("a"), json!("_design/d")]
    );
    let r = s.post("/db/_design_docs", r#"{"stable": false, "update": false}"#);
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s.post(
        "/db/_design/d/_view/v",
        r#"{"reduce": false, "stable": true, "update": true, "descending": true}"#,
    );
    assert_eq!(ids(r.json()), vec![json!("b"), json!("a")]);
    let r = s.post(
        "/db/_design/d/_view/v/queries",
        r#"{"queries": [{"stable": true, "update": true, "group": true}]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["results"][0]["rows"].as_array().unwrap().len(), 2);
    let r = s.post("/db/_all_docs", r#"{"update": 1}"#);
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "query_parse_error", "reason": "Invalid value for `update`."})
        )
    );
}

/// `_top_N`, `_bottom_N`, `_first` and `_last`, CouchDB 3.5's newer built-in reducers, and
/// the reasons a design document naming a bad one is refused with.
#[test]
fn rank_and_edge_reducers() {
    let s = Server::start();
    s.put("/db", "");
    s.post(
        "/db/_bulk_docs",
        r#"{"docs": [{"_id": "a", "g": "x", "k": 1}, {"_id": "b", "g": "x", "k": 5},
            {"_id": "c", "g": "y", "k": 3}, {"_id": "d", "g": "y", "k": 5},
            {"_id": "e", "g": "y", "k": "s"}, {"_id": "f", "g": "x", "k": [1]}]}"#,
    );
    let map = "function(doc) { emit(doc.g, doc.k); }";
    let views: serde_json::Map<String, Value> = ["_top_3", "_bottom_2", "_first", "_last"]
        .iter()
        .map(|r| {
            (
                r.trim_start_matches('_').to_string(),
                json!({"map": map, "reduce": r}),
            )
        })
        .collect();
    let r = s.put("/db/_design/r", &json!({ "views": views }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rows = |view: &str, q: &str| {
        s.get(&format!("/db/_design/r/_view/{view}{q}")).json()["rows"].clone()
    };
    // As CouchDB 3.5.2 answers these (values deduplicated, in collation order).
    assert_eq!(
        rows("top_3", ""),
        json!([{"key": null, "value": [[1], "s", 5]}])
    );
    assert_eq!(
        rows("top_3", "?group=true"),
        json!([{"key": "x", "value": [[1], 5, 1]}, {"key": "y", "value": ["s", 5, 3]}])
    );
    assert_eq!(
        rows("bottom_2", "?descending=true"),
        json!([{"key": null, "value": [1, 3]}])
    );
    assert_eq!(rows("first", ""), json!([{"key": null, "value": 1}]));
    assert_eq!(rows("last", ""), json!([{"key": null, "value": "s"}]));
    assert_eq!(
        rows("last", "?group=true"),
        json!([{"key": "x", "value": [1]}, {"key": "y", "value": "s"}])
    );
    for (reduce, reason) in [
        ("_top_0", "rank value must be between 1 and 100"),
        ("_bottom_101", "rank value must be between 1 and 100"),
        ("_top_x", "invalid rank reducer"),
        ("_bottom_", "invalid rank reducer"),
        ("_foo", "`_foo` is not a supported reduce function."),
    ] {
        let body = json!({"views": {"v": {"map": map, "reduce": reduce}}});
        let r = s.put("/db/_design/bad", &body.to_string());
        assert_eq!(
            (r.status, r.json()),
            (
                400,
                json!({"error": "invalid_design_doc", "reason": reason})
            ),
            "{reduce}"
        );
    }
}

/// A document with attachments read as `multipart/related`: framed with a
/// `Content-Length`, compressed attachments sent as stored (`Content-Encoding: gzip`), the
/// JSON part carrying their encoding; chosen for any client whose `Accept` admits it.
#[test]
fn multipart_documents_as_couchdb_sends_them() {
    let s = Server::start();
    s.put("/db", "");
    let text = "hello ".repeat(40);
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let png = [0x89u8, b'P', b'N', b'G', 0, 1, 2, 3];
    let doc = json!({"v": 1, "_attachments": {
        "a.txt": {"content_type": "text/plain", "data": b64(text.as_bytes())},
        "b.png": {"content_type": "image/png", "data": b64(&png)},
    }});
    let rev = s.put("/db/mp", &doc.to_string()).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let stub = s.get("/db/mp?att_encoding_info=true").json();
    let encoded_length = stub["_attachments"]["a.txt"]["encoded_length"]
        .as_u64()
        .unwrap();
    assert_eq!(stub["_attachments"]["a.txt"]["encoding"], "gzip");

    for accept in ["multipart/related", "*/*", "multipart/*"] {
        let r = s.send_raw(
            "GET",
            "/db/mp?attachments=true",
            &[("Accept", accept)],
            None,
            true,
        );
        let h = |n: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(r.status, 200);
        let ct = h("content-type").unwrap();
        assert!(
            ct.starts_with("multipart/related; boundary=\""),
            "{accept}: {ct}"
        );
        assert_eq!(
            h("content-length"),
            Some(r.body.len().to_string()),
            "{accept}"
        );
        assert!(h("transfer-encoding").is_none());
        assert!(h("cache-control").is_none());
        assert_eq!(h("etag"), Some(format!("\"{rev}\"")));
        let body = String::from_utf8_lossy(&r.body);
        let boundary = ct.split('"').nth(1).unwrap();
        let parts: Vec<&str> = body.split(&format!("--{boundary}")).collect();
        // preamble (empty), JSON, two attachments, closing `--`
        assert_eq!(parts.len(), 5, "{body}");
        assert_eq!(parts[4], "--");
        let json_part = parts[1]
            .strip_prefix("\r\nContent-Type: application/json\r\n\r\n")
            .unwrap()
            .trim_end_matches("\r\n");
        let j: Value = serde_json::from_str(json_part).unwrap();
        assert_eq!(
            serde_json::to_string(&j["_attachments"]["a.txt"]).unwrap(),
            format!(
                "{{\"content_type\":\"text/plain\",\"revpos\":1,\"digest\":{},\"length\":{},\"follows\":true,\"encoding\":\"gzip\",\"encoded_length\":{encoded_length}}}",
                j["_attachments"]["a.txt"]["digest"],
                text.len()
            )
        );
        assert!(parts[2].starts_with(&format!(
            "\r\nContent-Disposition: attachment; filename=\"a.txt\"\r\nContent-Type: text/plain\r\nContent-Length: {encoded_length}\r\nContent-Encoding: gzip\r\n\r\n"
        )), "{}", parts[2]);
        assert!(parts[3].starts_with(
            "\r\nContent-Disposition: attachment; filename=\"b.png\"\r\nContent-Type: image/png\r\nContent-Length: 8\r\n\r\n"
        ));
    }
    // A client asking for JSON gets JSON.
    let r = s.get("/db/mp?attachments=true");
    assert_eq!(
        r.json()["_attachments"]["a.txt"]["data"],
        b64(text.as_bytes())
    );
    // `open_revs` for a multipart/mixed client: attachments always sent, as stored.
    let r = s.send_raw(
        "GET",
        "/db/mp?open_revs=all",
        &[("Accept", "*/*")],
        None,
        true,
    );
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("Content-Type: multipart/related; boundary="),
        "{body}"
    );
    assert!(body.contains("Content-Encoding: gzip"), "{body}");
}

/// `_bulk_get` errors as CouchDB shapes them (`rev, reason, id, error`), and the ids a
/// partitioned database refuses there and in `_purge`.
#[test]
fn bulk_get_errors_and_partitioned_refusals() {
    let s = Server::start();
    s.put("/db", "");
    s.put("/db/a", "{}");
    let r = s.post(
        "/db/_bulk_get",
        r#"{"docs": [{"id": "nope"}, {"id": "a", "rev": "9-x"}, {"id": "_bad"}, {"rev": "1-x"}, {"id": "a", "rev": "bad"}, {}]}"#,
    );
    assert_eq!(
        r.text,
        concat!(
            r#"{"results":["#,
            r#"{"id":"nope","docs":[{"error":{"rev":"undefined","reason":"missing","id":"nope","error":"not_found"}}]},"#,
            r#"{"id":"a","docs":[{"error":{"rev":"9-x","reason":"missing","id":"a","error":"not_found"}}]},"#,
            r#"{"id":"_bad","docs":[{"error":{"rev":null,"reason":"Only reserved document ids may start with underscore.","id":"_bad","error":"illegal_docid"}}]},"#,
            r#"{"id":null,"docs":[{"error":{"rev":null,"reason":"document id missed","id":null,"error":"bad_request"}}]},"#,
            r#"{"id":"a","docs":[{"error":{"rev":"bad","reason":"Invalid rev format","id":"a","error":"bad_request"}}]},"#,
            r#"{"id":null,"docs":[{"error":{"rev":null,"reason":"document must be a JSON object","id":null,"error":"bad_request"}}]}"#,
            "]}"
        )
        .to_string()
            + "\n"
    );
    // `_local` ids are accepted by `_purge`, with nothing purged.
    let r = s.post("/db/_purge", r#"{"_local/x": ["1-abc"]}"#);
    assert_eq!(
        (r.status, r.json()),
        (201, json!({"purge_seq": null, "purged": {"_local/x": []}}))
    );

    s.put("/p?partitioned=true", "");
    let r = s.post(
        "/p/_bulk_get",
        r#"{"docs": [{"id": "nocolon"}, {"id": ":x"}]}"#,
    );
    assert_eq!(
        r.json(),
        json!({"results": [
            {"id": "nocolon", "docs": [{"error": {"rev": null, "reason": "Doc id must be of form partition:id", "id": "nocolon", "error": "illegal_docid"}}]},
            {"id": ":x", "docs": [{"error": {"rev": null, "reason": "Partition must not be empty", "id": ":x", "error": "illegal_partition"}}]},
        ]})
    );
    let r = s.post("/p/_purge", r#"{"p1:zz": ["1-abc"], "nocolon": ["1-abc"]}"#);
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "illegal_docid", "reason": "Doc id must be of form partition:id"})
        )
    );
    let r = s.post("/p/_purge", r#"{"p1:zz": ["1-abc"], ":x": ["1-abc"]}"#);
    assert_eq!(
        (r.status, r.json()),
        (
            201,
            json!({"purge_seq": null, "purged": {"p1:zz": [], ":x": []}})
        )
    );
}

/// `_local` documents: attachments are dropped, `revs=true` shows `0-N`'s one id, a read of
/// a revision finds nothing (even the current one), and `open_revs` lists them missing.
#[test]
fn local_documents_as_couchdb_reads_them() {
    let s = Server::start();
    s.put("/db", "");
    let r = s.put(
        "/db/_local/x",
        r#"{"a": 1, "_attachments": {"att": {"content_type": "text/plain", "data": "aGVsbG8="}}}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        s.get("/db/_local/x").json(),
        json!({"_id": "_local/x", "_rev": "0-1", "a": 1})
    );
    assert_eq!(
        s.get("/db/_local/x?attachments=true").json(),
        json!({"_id": "_local/x", "_rev": "0-1", "a": 1})
    );
    assert_eq!(
        s.get("/db/_local/x?revs=true").json(),
        json!({"_id": "_local/x", "_rev": "0-1", "a": 1, "_revisions": {"start": 0, "ids": ["1"]}})
    );
    for q in ["?rev=0-1", "?open_revs=all"] {
        let r = s.get(&format!("/db/_local/x{q}"));
        assert_eq!(
            (r.status, r.json()),
            (404, json!({"error": "not_found", "reason": "missing"})),
            "{q}"
        );
    }
    let r = s.get("/db/_local/x?open_revs=%5B%220-1%22%5D");
    assert_eq!((r.status, r.json()), (200, json!([{"missing": "0-1"}])));
    let r = s.get("/db/_local/x/att");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "_local documents do not accept attachments."})
        )
    );
}
