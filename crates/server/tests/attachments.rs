//! Attachments over real HTTP: inline upload, stubs, standalone reads with ranges,
//! `attachments=true`, replicated writes and limits. (Standalone uploads and multipart
//! bodies are not implemented yet and answer 501.)

mod common;

use common::Server;
use serde_json::{json, Value};

const HELLO_B64: &str = "aGVsbG8gd29ybGQ="; // "hello world"
const HELLO_MD5: &str = "md5-XrY7u+Ae7tCTyyK7j1rNww==";

fn with_att(extra: Value) -> String {
    let mut doc = json!({"title": "t", "_attachments": {"hello.txt": {"content_type": "text/plain", "data": HELLO_B64}}});
    if let (Value::Object(d), Value::Object(e)) = (&mut doc, extra) {
        d.extend(e);
    }
    doc.to_string()
}

#[test]
fn inline_upload_stubs_and_standalone_reads() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/doc", &with_att(json!({})));
    assert_eq!(r.status, 201, "{}", r.text);
    let rev1 = r.json()["rev"].as_str().unwrap().to_string();

    let r = s.get("/db/doc");
    assert!(
        r.text.ends_with(&format!(
            r#""_attachments":{{"hello.txt":{{"content_type":"text/plain","revpos":1,"digest":"{HELLO_MD5}","length":11,"stub":true}}}}}}"#
        )),
        "stubs come last, as CouchDB renders them: {}",
        r.text
    );

    let r = s.get("/db/doc/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.text, "hello world");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").unwrap().to_string();
    assert_eq!(etag, "\"XrY7u+Ae7tCTyyK7j1rNww==\"");
    let r = s.req_with(
        "GET",
        "/db/doc/hello.txt",
        None,
        &[("range", "bytes=0-4")],
        true,
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.text, "hello");
    assert_eq!(r.header("content-range"), Some("bytes 0-4/11"));
    let r = s.req_with(
        "GET",
        "/db/doc/hello.txt",
        None,
        &[("range", "bytes=-5")],
        true,
    );
    assert_eq!((r.status, r.text.as_str()), (206, "world"));
    let r = s.req_with(
        "GET",
        "/db/doc/hello.txt",
        None,
        &[("range", "bytes=20-")],
        true,
    );
    assert_eq!(r.status, 416);
    let r = s.req_with(
        "GET",
        "/db/doc/hello.txt",
        None,
        &[("if-none-match", &etag)],
        true,
    );
    assert_eq!(r.status, 304);
    let r = s.req("HEAD", "/db/doc/hello.txt", None);
    assert_eq!((r.status, r.header("content-length")), (200, Some("11")));
    assert_eq!(s.get("/db/doc/nope.txt").status, 404);
    assert_eq!(
        s.get(&format!("/db/doc/hello.txt?rev={rev1}")).text,
        "hello world"
    );

    // attachments=true inlines the content; atts_since leaves older ones as stubs
    let d = s.get("/db/doc?attachments=true").json();
    assert_eq!(
        d["_attachments"]["hello.txt"],
        json!({"content_type": "text/plain", "revpos": 1, "digest": HELLO_MD5, "data": HELLO_B64})
    );
    let d = s
        .get(&format!("/db/doc?atts_since=%5B%22{rev1}%22%5D"))
        .json();
    assert_eq!(d["_attachments"]["hello.txt"]["stub"], true);

    // a stub carries the attachment into the next revision, revpos unchanged
    let stub = json!({"_rev": rev1, "title": "t2", "_attachments": {"hello.txt": {"stub": true}}});
    let r = s.put("/db/doc", &stub.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rev2 = r.json()["rev"].as_str().unwrap().to_string();
    let d = s.get("/db/doc").json();
    assert_eq!(d["title"], "t2");
    assert_eq!(d["_attachments"]["hello.txt"]["revpos"], 1);
    assert_eq!(s.get("/db/doc/hello.txt").text, "hello world");
    // a stub for an attachment the replaced revision lacks is CouchDB's 412
    let bad = json!({"_rev": rev2, "_attachments": {"other.txt": {"stub": true}}});
    let r = s.put("/db/doc", &bad.to_string());
    assert_eq!(r.status, 412, "{}", r.text);
    assert_eq!(r.json()["error"], "missing_stub");
    // an update without _attachments drops them
    let r = s.put("/db/doc", &json!({"_rev": rev2}).to_string());
    assert_eq!(r.status, 201);
    assert_eq!(s.get("/db/doc/hello.txt").status, 404);
    // the old revision still has it
    assert_eq!(
        s.get(&format!("/db/doc/hello.txt?rev={rev2}")).text,
        "hello world"
    );
}

#[test]
fn bad_input_and_limits() {
    let s = Server::start();
    s.create_db("db");
    let bad =
        json!({"_attachments": {"x": {"content_type": "text/plain", "data": "%%%not base64"}}});
    let r = s.put("/db/bad", &bad.to_string());
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(s.get("/db/bad").status, 404, "nothing was written");
    let under = json!({"_attachments": {"_x": {"data": HELLO_B64}}});
    assert_eq!(s.put("/db/u", &under.to_string()).status, 400);
    s.put(
        "/_node/_local/_config/couchdb/max_attachment_size",
        r#""5""#,
    );
    let r = s.put("/db/big", &with_att(json!({})));
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.json()["error"], "attachment_too_large");
    assert_eq!(
        s.req("PUT", "/db/doc/att.txt", Some("x")).status,
        501,
        "standalone uploads are not implemented yet"
    );
}

#[test]
fn names_with_slashes_design_docs_and_replicated_writes() {
    let s = Server::start();
    s.create_db("db");
    let doc =
        json!({"_attachments": {"a/b.txt": {"content_type": "text/plain", "data": HELLO_B64}}});
    assert_eq!(s.put("/db/d", &doc.to_string()).status, 201);
    assert_eq!(s.get("/db/d/a/b.txt").text, "hello world");
    assert_eq!(s.get("/db/d/a%2Fb.txt").text, "hello world");
    assert_eq!(s.put("/db/_design/app", &doc.to_string()).status, 201);
    assert_eq!(s.get("/db/_design/app/a/b.txt").text, "hello world");

    // as a replicator writes them: new_edits=false, revpos and data given
    let body = json!({"new_edits": false, "docs": [{
        "_id": "r", "_rev": "3-abc", "_revisions": {"start": 3, "ids": ["abc", "def", "123"]},
        "_attachments": {"f.bin": {"content_type": "application/octet-stream", "revpos": 2, "digest": HELLO_MD5, "data": HELLO_B64}}
    }]});
    let r = s.post("/db/_bulk_docs", &body.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let d = s.get("/db/r").json();
    assert_eq!(d["_attachments"]["f.bin"]["revpos"], 2);
    assert_eq!(d["_attachments"]["f.bin"]["digest"], HELLO_MD5);
    let r = s.post(
        "/db/_bulk_get?revs=true&attachments=true",
        &json!({"docs": [{"id": "r", "rev": "3-abc"}]}).to_string(),
    );
    let got = &r.json()["results"][0]["docs"][0]["ok"];
    assert_eq!(got["_attachments"]["f.bin"]["data"], HELLO_B64);
    let r = s.get("/db/r?open_revs=%5B%223-abc%22%5D&attachments=true");
    assert_eq!(r.status, 200);
    assert!(r.text.contains(HELLO_B64), "{}", r.text);
}
