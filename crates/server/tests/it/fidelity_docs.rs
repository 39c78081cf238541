//! CouchDB 3.5 fidelity of documents and writes: `Location` headers, `_bulk_docs`,
//! `new_edits=false`, local documents, method override, form posts, `COPY`, document ids,
//! ETags, revision ids, purge and stemming. Each test states CouchDB's exact answer (the
//! source is in /work/notes/docs.md).

use crate::common;
use common::{Resp, Server};
use serde_json::{json, Value};

/// A request as admin with a JSON body and extra headers.
fn with_headers(
    s: &Server,
    method: &str,
    path: &str,
    body: Option<&str>,
    h: &[(&str, &str)],
) -> Resp {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(h);
    s.req_with(method, path, body, &all, true)
}

fn rev_of(r: &Resp) -> String {
    r.json()["rev"].as_str().unwrap().to_string()
}

fn host(s: &Server) -> String {
    s.url.trim_start_matches("http://").to_string()
}

#[test]
fn location_headers_encode_as_couch_util() {
    let s = Server::start();
    let base = s.url.clone();
    // `_`, `.`, `-`, `:` stay; `$`, `(`, `)`, `+`, `/` are escaped (uppercase hex).
    // (`+` in a path is a space, `[chttpd] decode_plus_to_space` being true by default.)
    let r = s.put("/a_b$c(d)%2Be-f", "");
    assert_eq!(r.status, 201);
    assert_eq!(r.json(), json!({"ok": true}));
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/a_b%24c%28d%29%2Be-f")
    );
    let r = s.put("/x%2Fwith_slashes", "");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/x%2Fwith_slashes")
    );
    s.create_db("db");
    let r = s.put("/db/d_1.x:y~z", "{}");
    assert_eq!(r.status, 201);
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/db/d_1.x:y%7Ez")
    );
    assert_eq!(r.header("etag").unwrap(), format!("\"{}\"", rev_of(&r)));
    // COUCHDB-708: newlines in document names
    let r = s.put("/db/docidtest%0A", "{}");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/db/docidtest%0A")
    );
    let r = s.post("/db", r#"{"_id":"docidtestpost%0A"}"#);
    assert_eq!(r.status, 201);
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/db/docidtestpost%250A")
    );
    assert_eq!(r.header("etag"), None, "CouchDB's POST answer has no ETag");
    let r = s.put("/db/_design/foo", "{}");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/db/_design%2Ffoo")
    );
    // An attachment upload names the attachment (database name as it is) and has no ETag.
    let r = with_headers(
        &s,
        "PUT",
        "/db/docid%0A/attachment.txt",
        Some("hi"),
        &[("content-type", "text/plain;charset=utf-8")],
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/db/docid%0A/attachment.txt")
    );
    assert_eq!(r.header("etag"), None);
    let del = s.delete(&format!("/db/docid%0A/attachment.txt?rev={}", rev_of(&r)));
    assert_eq!(del.status, 200);
    assert_eq!(del.header("location"), None);
    // COPY: Location and ETag
    let c = s.raw("COPY", "/db/_design/foo", &[("Destination", "copied doc")]);
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(
        c.header("location").unwrap(),
        format!("{base}/db/copied%20doc")
    );
    assert!(c.header("etag").is_some());
    // local documents too
    let r = s.put("/db/_local/cp", "{}");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/db/_local%2Fcp")
    );
}

#[test]
fn location_honours_forwarded_headers() {
    let s = Server::start();
    s.create_db("db");
    let put = |path: &str, h: &[(&str, &str)]| with_headers(&s, "PUT", path, Some("{}"), h);
    let r = put("/db/test2", &[("x-forwarded-host", "mysite.com")]);
    assert_eq!(r.header("location").unwrap(), "http://mysite.com/db/test2");
    let r = put("/db/t3", &[("x-forwarded-proto", "https")]);
    assert_eq!(
        r.header("location").unwrap(),
        format!("https://{}/db/t3", host(&s))
    );
    let r = put(
        "/db/t4",
        &[("x-forwarded-ssl", "on"), ("x-forwarded-host", "h")],
    );
    assert_eq!(r.header("location").unwrap(), "https://h/db/t4");
    let r = put("/db/t5", &[("x-forwarded-proto", "ftp")]);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://{}/db/t5", host(&s))
    );
    // the header names come from `[httpd]` (or `[chttpd]`) settings
    let cfg = "/_node/_local/_config";
    assert_eq!(
        s.put(&format!("{cfg}/httpd/x_forwarded_host"), r#""X-Host""#)
            .status,
        200
    );
    assert_eq!(
        s.put(&format!("{cfg}/chttpd/x_forwarded_proto"), r#""X-Scheme""#)
            .status,
        200
    );
    let r = put(
        "/db/test3",
        &[("x-host", "mysite2.com"), ("x-scheme", "https")],
    );
    assert_eq!(
        r.header("location").unwrap(),
        "https://mysite2.com/db/test3"
    );
    let r = put("/db/test4", &[("x-forwarded-host", "ignored.com")]);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://{}/db/test4", host(&s))
    );
}

#[test]
fn bulk_docs_member_errors() {
    let s = Server::start();
    s.create_db("db");
    let post = |body: &str| s.post("/db/_bulk_docs", body);
    let bad = |r: Resp, reason: &str| {
        assert_eq!(r.status, 400, "{}", r.text);
        assert_eq!(r.json(), json!({"error": "bad_request", "reason": reason}));
    };
    bad(post("[]"), "Request body must be a JSON object");
    bad(
        post(r#"{"doc":[{"foo":"bar"}]}"#),
        "POST body must include `docs` parameter.",
    );
    bad(
        post(r#"{"docs":"foo"}"#),
        "`docs` parameter must be an array.",
    );
    bad(
        post(r#"{"docs":[{"a":1},1]}"#),
        "Document must be a JSON object",
    );
    bad(
        post(r#"{"docs":[],"new_edits":0}"#),
        "`new_edits` parameter must be a boolean.",
    );
    let r = post(r#"{"docs":[{"_id":"_invalid"}]}"#);
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "illegal_docid");
    assert_eq!(s.get("/db").json()["doc_count"], 0, "nothing was written");
    // `_design/` and `_local/` ids are fine
    let r = post(r#"{"docs":[{"_id":"_design/foo"},{"_id":"_local/bar"}]}"#);
    assert_eq!(r.status, 201);
    assert_eq!(s.get("/db/_design/foo").json()["_id"], "_design/foo");
    assert_eq!(s.get("/db/_local/bar").json()["_id"], "_local/bar");
}

#[test]
fn bulk_docs_all_or_nothing_is_refused() {
    let s = Server::start();
    s.create_db("db");
    let rev = rev_of(&s.put("/db/b", "{}"));
    let body = json!({"all_or_nothing": true, "docs": [
        {"_id": "a", "v": 1},
        {"_id": "b", "_rev": rev},
        {"_id": "_local/c"},
    ]});
    let r = s.post("/db/_bulk_docs", &body.to_string());
    assert_eq!(r.status, 417);
    let reason = "all_or_nothing is not supported";
    assert_eq!(
        r.json(),
        json!([
            {"id": "a", "rev": "0-", "error": "not_implemented", "reason": reason},
            {"id": "b", "rev": rev, "error": "not_implemented", "reason": reason},
            {"id": "_local/c", "rev": "0-", "error": "not_implemented", "reason": reason},
        ])
    );
    assert_eq!(s.get("/db/a").status, 404);
    // only with new_edits: all_or_nothing is ignored for replicated writes
    let body = json!({"all_or_nothing": true, "new_edits": false,
                      "docs": [{"_id": "r", "_rev": "1-abc"}]});
    assert_eq!(
        s.post("/db/_bulk_docs", &body.to_string()).json(),
        json!([])
    );
}

#[test]
fn bulk_docs_new_edits_false_needs_revisions() {
    let s = Server::start();
    s.create_db("db");
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"new_edits":false,"docs":[{"_id":"ok","_rev":"1-abc"},{"_id":"x","v":1}]}"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "bad_request",
               "reason": "When `new_edits: false`, the document needs `_rev` or `_revisions` specified"})
    );
    assert_eq!(s.get("/db/ok").status, 404, "the whole request failed");
    // a bare `1-` is a revision with an empty id, as CouchDB parses it
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"new_edits":false,"docs":[{"_id":"bare","_rev":"1-","v":1}]}"#,
    );
    assert_eq!((r.status, r.json()), (201, json!([])));
    let d = s.get("/db/bare").json();
    assert_eq!(d, json!({"_id": "bare", "_rev": "1-", "v": 1}));
    // no `_id`: one is made up, as for interactive writes
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"new_edits":false,"docs":[{"_rev":"1-abc","v":2}]}"#,
    );
    assert_eq!((r.status, r.json()), (201, json!([])));
    assert_eq!(s.get("/db").json()["doc_count"], 2);
    // `new_edits` is read from the body only: in the query string it changes nothing
    let r = s.post(
        "/db/_bulk_docs?new_edits=false",
        r#"{"docs":[{"_id":"q","_rev":"1-abc"}]}"#,
    );
    assert_eq!(
        r.json(),
        json!([{"id": "q", "error": "conflict", "reason": "Document update conflict."}])
    );
    // a single-document PUT says the same
    let r = s.put("/db/y?new_edits=false", r#"{"v":1}"#);
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "When `new_edits: false`, the document needs `_rev` or `_revisions` specified"
    );
}

#[test]
fn new_edits_false_semantics() {
    let s = Server::start();
    s.create_db("db");
    // A validation function refusing everything: known revisions are not checked again,
    // refusals of new ones name the revision.
    let vdu = json!({"validate_doc_update":
        "function(n, o) { if (n.v === 'no') throw({forbidden: 'nope'}); }"});
    assert_eq!(s.put("/db/_design/v", &vdu.to_string()).status, 201);
    let body = json!({"new_edits": false, "docs": [
        {"_id": "d", "_rev": "1-aaaa", "v": 1},
        {"_id": "e", "_rev": "1-bbbb", "v": "no"},
    ]});
    let r = s.post("/db/_bulk_docs", &body.to_string());
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json(),
        json!([{"id": "e", "rev": "1-bbbb", "error": "forbidden", "reason": "nope"}])
    );
    // replaying a known revision (even one the function would now refuse) is a no-op
    let replay = json!({"new_edits": false, "docs": [{"_id": "d", "_rev": "1-aaaa", "v": "no"}]});
    let r = s.post("/db/_bulk_docs", &replay.to_string());
    assert_eq!((r.status, r.json()), (201, json!([])));
    assert_eq!(s.get("/db/d").json()["v"], 1);
    // PUT ?new_edits=false answers 201 with the revision given, ETag and Location
    let r = s.put(
        "/db/d?new_edits=false",
        r#"{"_revisions":{"start":3,"ids":["cccc","bbbb","aaaa"]},"v":3}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json(), json!({"ok": true, "id": "d", "rev": "3-cccc"}));
    assert_eq!(r.header("etag"), Some("\"3-cccc\""));
    let d = s.get("/db/d?revs=true").json();
    assert_eq!(
        d["_revisions"],
        json!({"start": 3, "ids": ["cccc", "bbbb", "aaaa"]})
    );
    // `latest=true` opens the winning revision, whatever `rev` names (apache/couchdb#3362)
    let branches = json!({"new_edits": false, "docs": [
        {"_id": "l", "_rev": "1-a", "v": "a"},
        {"_id": "l", "_revisions": {"start": 2, "ids": ["b", "a"]}, "v": "b"},
        {"_id": "l", "_revisions": {"start": 2, "ids": ["c", "a"]}, "v": "c"},
    ]});
    s.post("/db/_bulk_docs", &branches.to_string());
    assert_eq!(s.get("/db/l?rev=1-a&latest=true").json()["_rev"], "2-c");
    assert_eq!(s.get("/db/l?rev=2-b&latest=true").json()["_rev"], "2-c");
    assert_eq!(s.get("/db/l?rev=2-b").json()["_rev"], "2-b");
    // `new_edits` other than "false" is an interactive edit, as in CouchDB
    let r = s.put("/db/f?new_edits=maybe", "{}");
    assert_eq!(r.status, 201);
}

#[test]
fn revision_ids_are_couchdbs() {
    let s = Server::start();
    s.create_db("db");
    assert_eq!(
        rev_of(&s.put("/db/0", r#"{"a":1,"b":1}"#)),
        "1-fb8a93eb436b7e799a7bbc578a08e9a5"
    );
    assert_eq!(
        rev_of(&s.put("/db/e", "{}")),
        "1-967a00dff5e02add41819138abb3284d"
    );
    // conflicts_test.exs, COUCHDB-1178
    let vdu = json!({"_id": "_design/couchdb-1178", "validate_doc_update": "function(){}"});
    assert_eq!(
        s.put("/db/_design/couchdb-1178", &vdu.to_string()).status,
        201
    );
    let r1 = "1-47f3268e7546965196b57572099f4372";
    let r2 = "2-1d8171ab3a91475cfece749291e6f897";
    let r3 = "3-3fb0a342d2ce092fdcc77856dbe8a2ef";
    assert_eq!(rev_of(&s.put("/db/doc", r#"{"val":"r0"}"#)), r1);
    assert_eq!(
        rev_of(&s.put("/db/doc", &json!({"val": "r1", "_rev": r1}).to_string())),
        r2
    );
    assert_eq!(
        rev_of(&s.put("/db/doc", &json!({"val": "r2", "_rev": r2}).to_string())),
        r3
    );
    assert_eq!(
        s.get("/db/doc?revs=true").json(),
        json!({"_id": "doc", "_rev": r3, "val": "r2", "_revisions": {"start": 3, "ids": [
            "3fb0a342d2ce092fdcc77856dbe8a2ef", "1d8171ab3a91475cfece749291e6f897",
            "47f3268e7546965196b57572099f4372"]}})
    );
    let replay = json!({"new_edits": false, "docs": [
        {"_id": "doc", "val": "r3", "_rev": r3},
        {"_id": "doc", "val": "r2", "_rev": r2},
        {"_id": "doc", "val": "r1", "_rev": r1},
    ]});
    let r = s.post("/db/_bulk_docs", &replay.to_string());
    assert_eq!((r.status, r.json()), (201, json!([])));
}

#[test]
fn local_documents_have_no_mvcc() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/_local/cp", r#"{"_id":"ignored","seq":1}"#);
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "_local/cp", "rev": "0-1"})
    );
    assert!(r.header("etag").is_some());
    // no conflicts: the revision is the one given plus one
    assert_eq!(rev_of(&s.put("/db/_local/cp", r#"{"seq":2}"#)), "0-1");
    assert_eq!(
        rev_of(&s.put("/db/_local/cp", r#"{"_rev":"0-100","seq":3}"#)),
        "0-101"
    );
    assert_eq!(
        rev_of(&s.put("/db/_local/cp?rev=0-7", r#"{"seq":4}"#)),
        "0-8"
    );
    let bad = s.put("/db/_local/cp", r#"{"_rev":"1-abc"}"#);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["reason"], "Invalid rev format");
    let mismatch = s.put("/db/_local/cp?rev=0-1", r#"{"_rev":"0-2"}"#);
    assert_eq!(
        mismatch.json()["reason"],
        "Document rev from request body and query string have different values"
    );
    let got = s.get("/db/_local/cp");
    assert_eq!(
        got.json(),
        json!({"_id": "_local/cp", "_rev": "0-8", "seq": 4})
    );
    let tag = got.header("etag").unwrap().to_string();
    let nm = with_headers(&s, "GET", "/db/_local/cp", None, &[("if-none-match", &tag)]);
    assert_eq!(nm.status, 304);
    // revisions are looked up in the document tree, where local documents are not
    assert_eq!(
        s.get("/db/_local/cp?rev=0-8").json(),
        json!({"error": "not_found", "reason": "missing"})
    );
    // _bulk_docs: no conflicts either
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"docs":[{"_id":"_local/cp","n":1},{"_id":"_local/cp","_rev":"0-4","n":2}]}"#,
    );
    assert_eq!(
        r.json(),
        json!([{"ok": true, "id": "_local/cp", "rev": "0-1"},
               {"ok": true, "id": "_local/cp", "rev": "0-5"}])
    );
    // DELETE needs the document to exist, not its revision
    let d = s.delete("/db/_local/cp");
    assert_eq!(d.status, 200);
    assert_eq!(
        d.json(),
        json!({"ok": true, "id": "_local/cp", "rev": "0-0"})
    );
    assert_eq!(
        s.delete("/db/_local/cp?rev=0-5").json(),
        json!({"error": "not_found", "reason": "missing"})
    );
    // POST /db with a local id
    let r = s.post("/db", r#"{"_id":"_local/p","x":1}"#);
    assert_eq!(
        (r.status, r.json()),
        (201, json!({"ok": true, "id": "_local/p", "rev": "0-1"}))
    );
    // a body deleting it answers 200
    let r = s.put("/db/_local/p", r#"{"_deleted":true}"#);
    assert_eq!((r.status, r.json()["rev"].clone()), (200, json!("0-0")));
    assert_eq!(s.get("/db/_local/p").status, 404);
}

#[test]
fn method_override() {
    let s = Server::start();
    s.create_db("db");
    let over = |m: &str, path: &str, body: Option<&str>| {
        with_headers(&s, "POST", path, body, &[("x-http-method-override", m)])
    };
    let r = over("PUT", "/db/fnord", Some(r#"{"bob":"connie"}"#));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/db/fnord").json()["bob"], "connie");
    let r = over("DELETE", &format!("/db/fnord?rev={}", rev_of(&r)), None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(s.get("/db/fnord").status, 404);
    // ignored unless the real method is POST
    let r = with_headers(
        &s,
        "GET",
        "/db/fnord2",
        None,
        &[("x-http-method-override", "PUT")],
    );
    assert_eq!(r.status, 404);
    // and for methods CouchDB does not list
    let r = over("PATCH", "/db/x", Some("{}"));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["reason"], "Referer header required.");
}

#[test]
fn form_submissions() {
    let s = Server::start();
    s.create_db("db");
    let referer = format!("http://{}", host(&s));
    let form = |h: &[(&str, &str)]| s.req_with("POST", "/db/baz", Some("a=b"), h, true);
    let r = form(&[
        ("referer", &referer),
        ("content-type", "application/x-www-form-urlencoded"),
    ]);
    assert_eq!(r.status, 415);
    assert_eq!(
        r.json(),
        json!({"error": "bad_content_type", "reason": "Content-Type must be multipart/form-data"})
    );
    let r = form(&[("content-type", "application/x-www-form-urlencoded")]);
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "Referer header required."})
        )
    );
    let r = form(&[
        ("referer", "http://elsewhere:1/x"),
        ("content-type", "multipart/form-data"),
    ]);
    assert_eq!(r.json()["reason"], "Referer header must match host.");
}

#[test]
fn copy_corner_cases() {
    let s = Server::start();
    s.create_db("db");
    s.put("/db/doc_to_be_copied", r#"{"v":1}"#);
    let c = s.raw(
        "COPY",
        "/db/doc_to_be_copied",
        &[("Destination", "doc_that_was_copied")],
    );
    assert_eq!(c.status, 201);
    assert_eq!(
        serde_json::from_str::<Value>(&c.text).unwrap()["id"],
        "doc_that_was_copied"
    );
    assert_eq!(s.get("/db/doc_that_was_copied").json()["v"], 1);
    s.put("/db/doc_to_be_copied2", r#"{"v":1}"#);
    let rev = rev_of(&s.put("/db/doc_to_be_overwritten", r#"{"v":2}"#));
    let c = s.raw(
        "COPY",
        "/db/doc_to_be_copied2",
        &[("Destination", "doc_to_be_overwritten")],
    );
    assert_eq!(c.status, 409);
    let c = s.raw("COPY", "/db/doc_to_be_copied2", &[]);
    assert_eq!(c.status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&c.text).unwrap()["reason"],
        "Destination header is mandatory for COPY."
    );
    let c = s.raw(
        "COPY",
        "/db/doc_to_be_copied2",
        &[("Destination", "http://localhost:5984/db/doc_to_be_written")],
    );
    assert_eq!(c.status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&c.text).unwrap()["reason"],
        "Destination URL must be relative."
    );
    let dest = format!("doc_to_be_overwritten?rev={rev}");
    let c = s.raw("COPY", "/db/doc_to_be_copied2", &[("Destination", &dest)]);
    assert_eq!(c.status, 201, "{}", c.text);
    let d = s.get("/db/doc_to_be_overwritten").json();
    assert_ne!(d["_rev"], json!(rev));
    assert_eq!(d["v"], 1);
    // a missing source, an escaped destination, and the source revision by If-Match
    let c = s.raw("COPY", "/db/nothing", &[("Destination", "x")]);
    assert_eq!(c.status, 404);
    let src = rev_of(&s.put("/db/src", r#"{"n":1}"#));
    s.put(&format!("/db/src?rev={src}"), r#"{"n":2}"#);
    let c = s.raw(
        "COPY",
        "/db/src",
        &[("Destination", "a%20b"), ("If-Match", &src)],
    );
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(s.get("/db/a%20b").json()["n"], 1);
    // to and from local documents
    let c = s.raw("COPY", "/db/src", &[("Destination", "_local/saved")]);
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(
        serde_json::from_str::<Value>(&c.text).unwrap(),
        json!({"ok": true, "id": "_local/saved", "rev": "0-1"})
    );
    assert_eq!(
        s.get("/db/_local/saved").json(),
        json!({"_id": "_local/saved", "_rev": "0-1", "n": 2})
    );
    let c = s.raw("COPY", "/db/_local/saved", &[("Destination", "restored")]);
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(s.get("/db/restored").json()["n"], 2);
    assert_eq!(
        s.get("/db/_all_docs?key=%22_local/saved%22").json()["rows"],
        json!([])
    );
}

#[test]
fn invalid_document_ids() {
    let s = Server::start();
    s.create_db("db");
    for url in [
        "/db/_local",
        "/db/_local/",
        "/db/_local%2F",
        "/db/_local/foo/bar",
    ] {
        let r = s.put(url, "{}");
        assert_eq!(r.status, 400, "{url}");
        assert_eq!(r.json()["error"], "bad_request", "{url}");
    }
    assert_eq!(
        s.put("/db/_local", "{}").json()["reason"],
        "Invalid _local document id."
    );
    let r = s.post("/db", r#"{"_id":1}"#);
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "illegal_docid", "reason": "Document id must be a string"})
        )
    );
    for url in ["/db/_other", "/db/_tmp_view"] {
        let r = s.put(url, "{}");
        assert_eq!(
            (r.status, r.json()["error"].clone()),
            (400, json!("illegal_docid"))
        );
    }
    let r = s.post("/db", r#"{"_id":"_invalid"}"#);
    assert_eq!(
        r.json(),
        json!({"error": "illegal_docid", "reason": "Only reserved document ids may start with underscore."})
    );
    let r = s.post("/db", r#"{"_id":""}"#);
    assert_eq!(
        r.json(),
        json!({"error": "illegal_docid", "reason": "Document id must not be empty"})
    );
    let r = s.put("/db/%FF", "{}");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "illegal_docid", "reason": "Document id must be valid UTF-8"})
        )
    );
    let r = s.get("/db/a%zz");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "invalid_url_encoding"})
        )
    );
}

#[test]
fn plus_newlines_missing_and_deleted_documents() {
    let s = Server::start();
    s.create_db("db");
    // `+` is a space (CouchDB 3.5's default `decode_plus_to_space = true`)
    assert_eq!(s.put("/db/test+doc+2", "{}").json()["id"], "test doc 2");
    assert_eq!(
        s.put(
            "/_node/_local/_config/chttpd/decode_plus_to_space",
            r#""false""#
        )
        .status,
        200
    );
    let r = s.put("/db/test+doc", "{}");
    assert_eq!(r.json()["id"], "test+doc");
    assert_eq!(s.get("/db/test%2Bdoc").status, 200);
    s.put(
        "/_node/_local/_config/chttpd/decode_plus_to_space",
        r#""true""#,
    );
    // newlines are ordinary characters
    assert_eq!(s.put("/db/a%0Ab", "{}").json()["id"], "a\nb");
    assert_eq!(s.get("/db/a%0Ab").json()["_id"], "a\nb");
    // DELETE of a missing document: 404 before any revision check
    assert_eq!(
        (
            s.delete("/db/doc-does-not-exist").status,
            s.delete("/db/nope?rev=1-abc").json()
        ),
        (404, json!({"error": "not_found", "reason": "missing"}))
    );
    let rev = rev_of(&s.put("/db/gone", "{}"));
    let d = s.delete(&format!("/db/gone?rev={rev}"));
    assert_eq!(d.status, 200);
    assert_eq!(d.header("etag").unwrap(), format!("\"{}\"", rev_of(&d)));
    assert_eq!(
        s.delete(&format!("/db/gone?rev={}", rev_of(&d))).json(),
        json!({"error": "not_found", "reason": "deleted"})
    );
    // a deleted document is recreated only without a revision, from its tombstone
    let tomb = rev_of(&d);
    let r = s.put("/db/gone", &json!({"_rev": tomb, "x": 1}).to_string());
    assert_eq!(r.status, 409);
    let r = s.put("/db/gone", r#"{"x":1}"#);
    assert_eq!(r.status, 201);
    assert!(rev_of(&r).starts_with("3-"));
    let r = s.post(
        "/db/_bulk_docs",
        &json!({"docs": [{"_id": "gone", "_rev": rev_of(&r), "_deleted": true}]}).to_string(),
    );
    assert!(r.json()[0]["rev"].as_str().unwrap().starts_with("4-"));
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"docs":[{"_id":"gone","_deleted":true}]}"#,
    );
    assert_eq!(
        r.json(),
        json!([{"id": "gone", "error": "conflict", "reason": "Document update conflict."}])
    );
    // a deletion by PUT answers 200
    let rev = rev_of(&s.put("/db/p", "{}"));
    let r = s.put("/db/p", &json!({"_rev": rev, "_deleted": true}).to_string());
    assert_eq!(r.status, 200);
}

#[test]
fn etags_and_conditional_reads() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/1", "{}");
    assert_eq!(r.status, 201);
    let etag = r.header("etag").unwrap().to_string();
    assert_eq!(s.get("/db/1").header("etag").unwrap(), etag);
    let head = with_headers(&s, "HEAD", "/db/1", None, &[("if-none-match", "s")]);
    assert_eq!(
        (head.status, head.header("etag").unwrap()),
        (200, etag.as_str())
    );
    let r = with_headers(&s, "PUT", "/db/1", Some("{}"), &[("if-match", &etag)]);
    assert_eq!(r.status, 201);
    let (previous, etag) = (etag, r.header("etag").unwrap().to_string());
    assert_eq!(s.put("/db/1", "{}").status, 409);
    let get = |tag: &str| with_headers(&s, "GET", "/db/1", None, &[("if-none-match", tag)]);
    assert_eq!(get(&previous).status, 200);
    let nm = get(&etag);
    assert_eq!(nm.status, 304);
    assert_eq!(nm.text, "");
    assert_eq!(get(&format!("W/{etag}")).status, 304);
    assert_eq!(get(&format!("\"x\", {etag}")).status, 304);
    let unquoted = etag.trim_matches('"').to_string();
    assert_eq!(
        get(&unquoted).status,
        200,
        "ETags compare quoted, as CouchDB"
    );
    let del = |tag: &str| with_headers(&s, "DELETE", "/db/1", None, &[("if-match", tag)]);
    assert_eq!(del(&previous).status, 409);
    assert_eq!(del(&etag).status, 200);
    // mismatched revisions
    let r = with_headers(
        &s,
        "PUT",
        "/db/foobar",
        Some(r#"{"_rev":"1-abc"}"#),
        &[("if-match", "1-foobar")],
    );
    assert_eq!(
        r.json(),
        json!({"error": "bad_request", "reason": "Document rev and etag have different values"})
    );
}

#[test]
fn couchdb_error_texts_for_methods_and_databases() {
    let s = Server::start();
    s.create_db("db");
    s.put("/db/d", "{}");
    let r = s.req("PATCH", "/db/d", Some("{}"));
    assert_eq!(
        (r.status, r.header("allow")),
        (405, Some("DELETE,GET,HEAD,POST,PUT,COPY"))
    );
    assert_eq!(
        r.json()["reason"],
        "Only DELETE,GET,HEAD,POST,PUT,COPY allowed"
    );
    let r = s.req("PATCH", "/db", Some("{}"));
    assert_eq!(r.header("allow"), Some("DELETE,GET,HEAD,POST"));
    let r = s.req("PATCH", "/db/d/att", Some("{}"));
    assert_eq!(r.header("allow"), Some("DELETE,GET,HEAD,PUT"));
    let r = s.delete("/db/?rev=foobarbaz");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request",
            "reason": "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?"})
        )
    );
    // `batch` other than `ok` is an ordinary write
    assert_eq!(s.put("/db/b?batch=later", "{}").status, 201);
    // with `batch=ok`, validation functions run after the answer
    let vdu = json!({"validate_doc_update": "function(n) { if (n.no) throw({forbidden: 'no'}); }"});
    assert_eq!(s.put("/db/_design/v", &vdu.to_string()).status, 201);
    assert_eq!(s.put("/db/refused", r#"{"no":1}"#).status, 403);
    let r = s.put("/db/refused?batch=ok", r#"{"no":1}"#);
    assert_eq!(
        (r.status, r.json()),
        (202, json!({"ok": true, "id": "refused"}))
    );
    let r = s.post("/db?batch=ok", r#"{"_id":"refused2","no":1}"#);
    assert_eq!(r.status, 202);
    assert_eq!(r.header("location"), None);
    // GET of `_design%2F…` redirects to the unescaped path
    s.put("/db/_design/x", "{}");
    let r = s.raw("GET", "/db/_design%2Fx?revs=true", &[]);
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location").unwrap(),
        format!("{}/db/_design/x?revs=true", s.url)
    );
}

#[test]
fn purge_drops_view_rows_and_documents() {
    let s = Server::start();
    s.create_db("db");
    let ddoc = json!({"views": {
        "all_docs_twice": {"map": "function(doc) { emit(doc.integer, null); emit(doc.integer, null) }"},
        "single_doc": {"map": "function(doc) { if (doc._id == \"1\") { emit(1, null) }}"},
    }});
    assert_eq!(s.put("/db/_design/test", &ddoc.to_string()).status, 201);
    let docs: Vec<Value> = (1..=11)
        .map(|i| json!({"_id": i.to_string(), "integer": i}))
        .collect();
    s.post("/db/_bulk_docs", &json!({"docs": docs}).to_string());
    let keys = |s: &Server| -> Vec<i64> {
        let v = s.get("/db/_design/test/_view/all_docs_twice").json();
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(keys(&s).len(), 22);
    assert_eq!(
        s.get("/db/_design/test/_view/single_doc").json()["total_rows"],
        1
    );
    let before = s.get("/db").json();
    let rev = |id: &str| s.get(&format!("/db/{id}")).json()["_rev"].clone();
    let body = json!({"1": [rev("1")], "2": [rev("2")]});
    let r = s.post("/db/_purge", &body.to_string());
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json(),
        json!({"purge_seq": null, "purged": {"1": [rev_of_value(&body["1"])], "2": [rev_of_value(&body["2"])]}})
    );
    assert_eq!(s.get("/db/1").status, 404);
    let after = s.get("/db").json();
    assert_ne!(after["purge_seq"], before["purge_seq"]);
    assert_eq!(
        after["doc_count"],
        before["doc_count"].as_u64().unwrap() - 2
    );
    let k = keys(&s);
    assert_eq!(k.len(), 18);
    assert_eq!(k[0], 3);
    assert_eq!(
        s.get("/db/_design/test/_view/single_doc").json()["total_rows"],
        0
    );
    let all: Vec<String> = s.get("/db/_all_docs").json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!all.contains(&"1".to_string()) && !all.contains(&"2".to_string()));
    // purge_seq survives compaction
    assert_eq!(s.post("/db/_compact", "").status, 202);
    for _ in 0..200 {
        if s.get("/db").json()["compact_running"] == false {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(s.get("/db").json()["purge_seq"], after["purge_seq"]);
    // purging twice in a row without reading the view in between
    s.post("/db/_purge", &json!({"3": [rev("3")]}).to_string());
    s.post("/db/_purge", &json!({"4": [rev("4")]}).to_string());
    let k = keys(&s);
    assert_eq!((k.len(), k[0]), (14, 5));
    // a partial purge: the doc is indexed from its remaining branch
    let d = json!({"new_edits": false, "docs": [
        {"_id": "5", "_rev": "9-zzzz", "integer": 500},
    ]});
    s.post("/db/_bulk_docs", &d.to_string());
    assert!(keys(&s).contains(&500));
    s.post("/db/_purge", r#"{"5":["9-zzzz"]}"#);
    let k = keys(&s);
    assert!(!k.contains(&500) && k.contains(&5), "{k:?}");
    // limits
    let many: serde_json::Map<String, Value> = (0..101)
        .map(|i| (format!("x{i}"), json!(["1-a"])))
        .collect();
    let r = s.post("/db/_purge", &Value::Object(many).to_string());
    assert_eq!(r.json()["reason"], "Exceeded maximum number of documents.");
    let revs: Vec<String> = (0..1001).map(|i| format!("1-{i}")).collect();
    let r = s.post("/db/_purge", &json!({"x": revs}).to_string());
    assert_eq!(r.json()["reason"], "Exceeded maximum number of revisions.");
}

fn rev_of_value(v: &Value) -> Value {
    v[0].clone()
}

#[test]
fn revs_limit_applies_to_reads_and_compaction() {
    let s = Server::start();
    s.create_db("db");
    let mut rev = rev_of(&s.put("/db/bar", r#"{"count":0}"#));
    for i in 1..6 {
        rev = rev_of(&s.put("/db/bar", &json!({"_rev": rev, "count": i}).to_string()));
    }
    let ids = |s: &Server| {
        s.get("/db/bar?revs=true").json()["_revisions"]["ids"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(ids(&s), 6);
    assert_eq!(s.put("/db/_revs_limit", "5").status, 200);
    // reads never show more than the limit, even before compaction stems the tree
    assert_eq!(ids(&s), 5);
    assert_eq!(
        s.get("/db/bar?revs_info=true").json()["_revs_info"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert_eq!(s.post("/db/_compact", "").status, 202);
    for _ in 0..200 {
        if s.get("/db/bar?revs_info=true").json()["_revs_info"]
            .as_array()
            .unwrap()
            .len()
            == 5
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        s.get("/db/bar?revs_info=true").json()["_revs_info"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(ids(&s), 5);
    // a longer replicated path meeting the stemmed tree is merged and stemmed again
    let r = s.get("/db/bar?revs=true").json();
    let mut path: Vec<String> = r["_revisions"]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    path.insert(0, "7777".into());
    let body = json!({"new_edits": false, "docs": [
        {"_id": "bar", "_revisions": {"start": 7, "ids": path}, "count": 7}]});
    assert_eq!(
        s.post("/db/_bulk_docs", &body.to_string()).json(),
        json!([])
    );
    let d = s.get("/db/bar?revs=true&conflicts=true").json();
    assert_eq!(d["_rev"], "7-7777");
    assert_eq!(d.get("_conflicts"), None);
    assert_eq!(d["_revisions"]["ids"].as_array().unwrap().len(), 5);
    // a path that no longer meets the stemmed tree becomes a conflicting branch
    let far = json!({"new_edits": false, "docs": [
        {"_id": "bar", "_revisions": {"start": 14, "ids": ["e","d","c","b","a"]}, "count": 14}]});
    s.post("/db/_bulk_docs", &far.to_string());
    let d = s.get("/db/bar?conflicts=true").json();
    assert_eq!(d["_rev"], "14-e");
    assert_eq!(d["_conflicts"], json!(["7-7777"]));
}

#[test]
fn design_doc_deleted_by_post_stops_validating() {
    // design_docs_test.exs, COUCHDB-1227
    let s = Server::start();
    s.create_db("db");
    let ddoc = json!({"_id": "_design/test", "validate_doc_update":
        "function(n) { if (n.value % 2 == 0) throw({forbidden: 'dont like even numbers'}); return true; }"});
    assert_eq!(s.post("/db", &ddoc.to_string()).status, 201);
    let r = s.post("/db", r#"{"_id":"doc1","value":4}"#);
    assert_eq!(
        (r.status, r.json()),
        (
            403,
            json!({"error": "forbidden", "reason": "dont like even numbers"})
        )
    );
    let mut d = s.get("/db/_design/test").json();
    d["_deleted"] = json!(true);
    let r = s.post("/db", &d.to_string());
    assert_eq!(r.status, 201, "a deletion by POST answers 201: {}", r.text);
    assert_eq!(s.post("/db", r#"{"_id":"doc1","value":4}"#).status, 201);
}
