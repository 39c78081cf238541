//! Attachments over real HTTP: inline upload, stubs, standalone reads with ranges,
//! `attachments=true`, replicated writes and limits. (Standalone uploads and multipart
//! bodies are not implemented yet and answer 501.)

use crate::common;

use common::Server;
use serde_json::{json, Value};

const HELLO_B64: &str = "aGVsbG8gd29ybGQ="; // "hello world"
const HELLO_MD5: &str = "md5-XrY7u+Ae7tCTyyK7j1rNww==";

fn with_att(extra: Value) -> String {
    let mut doc = json!({"title": "t", "_attachments": {"hello.txt": {"content_type": "application/x-hello", "data": HELLO_B64}}});
    if let (Value::Object(d), Value::Object(e)) = (&mut doc, extra) {
        d.extend(e);
    }
    doc.to_string()
}

/// `GET /db/doc/hello.txt` as the admin with this `Range` header.
fn hello_range(s: &Server, range: &str) -> common::Resp {
    s.req_with("GET", "/db/doc/hello.txt", None, &[("range", range)], true)
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
        r.text.trim_end().ends_with(&format!(
            r#""_attachments":{{"hello.txt":{{"content_type":"application/x-hello","revpos":1,"digest":"{HELLO_MD5}","length":11,"stub":true}}}}}}"#
        )),
        "stubs come last, as CouchDB renders them: {}",
        r.text
    );

    let r = s.get("/db/doc/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.text, "hello world");
    assert_eq!(r.header("content-type"), Some("application/x-hello"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").unwrap().to_string();
    assert_eq!(etag, "\"XrY7u+Ae7tCTyyK7j1rNww==\"");
    let r = hello_range(&s, "bytes=0-4");
    assert_eq!(r.status, 206);
    assert_eq!(r.text, "hello");
    assert_eq!(r.header("content-range"), Some("bytes 0-4/11"));
    let r = hello_range(&s, "bytes=-5");
    assert_eq!((r.status, r.text.as_str()), (206, "world"));
    let r = hello_range(&s, "bytes=20-");
    assert_eq!(r.status, 416);
    // Several ranges: one multipart/byteranges body, framed as CouchDB frames it.
    let r = hello_range(&s, "bytes=0-1,6-7");
    assert_eq!(r.status, 206);
    let ctype = r.header("content-type").unwrap();
    let boundary = ctype
        .strip_prefix("multipart/byteranges; boundary=\"")
        .and_then(|b| b.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{ctype}"));
    let expected = format!(
        "--{boundary}\r\nContent-Type: application/x-hello\r\nContent-Range: bytes 0-1/11\r\n\r\nhe\r\n--{boundary}\r\nContent-Type: application/x-hello\r\nContent-Range: bytes 6-7/11\r\n\r\nwo\r\n--{boundary}--"
    );
    assert_eq!(r.text, expected);
    assert_eq!(
        r.header("content-length"),
        Some(expected.len().to_string().as_str())
    );
    for (range, status) in [
        ("bytes=0-", 200),
        ("bytes=0-1,7-3", 416),
        ("bytes=0-1,30-40", 416),
    ] {
        assert_eq!(hello_range(&s, range).status, status, "{range}");
    }
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
        json!({"content_type": "application/x-hello", "revpos": 1, "digest": HELLO_MD5, "data": HELLO_B64})
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
    let r = s.req("PUT", "/db/_local/l/a.txt", Some("x"));
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (400, Some("_local documents do not accept attachments."))
    );
    let under = json!({"_attachments": {"_x": {"data": HELLO_B64}}});
    assert_eq!(s.put("/db/u", &under.to_string()).status, 400);
    s.put(
        "/_node/_local/_config/couchdb/max_attachment_size",
        r#""5""#,
    );
    let r = s.put("/db/big", &with_att(json!({})));
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.json()["error"], "attachment_too_large");
}

#[test]
fn standalone_put_and_delete() {
    let s = Server::start();
    s.create_db("db");
    let ct = [("content-type", "application/x-hello")];
    // a new document made by its first attachment
    let r = s.req_with("PUT", "/db/new/a.txt", Some("hello world"), &ct, true);
    assert_eq!(r.status, 201, "{}", r.text);
    let rev1 = r.json()["rev"].as_str().unwrap().to_string();
    assert!(rev1.starts_with("1-"));
    assert_eq!(s.get("/db/new/a.txt").text, "hello world");
    assert_eq!(
        s.get("/db/new").json()["_attachments"]["a.txt"]["digest"],
        HELLO_MD5
    );
    // an existing document needs its current rev
    let r = s.req_with("PUT", "/db/new/b.bin", Some("xyz"), &ct, true);
    assert_eq!(r.status, 409, "{}", r.text);
    let r = s.req_with(
        "PUT",
        &format!("/db/new/b.bin?rev={rev1}"),
        Some("xyz"),
        &[],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let rev2 = r.json()["rev"].as_str().unwrap().to_string();
    let d = s.get("/db/new").json();
    assert_eq!(d["_attachments"]["a.txt"]["revpos"], 1);
    assert_eq!(d["_attachments"]["b.bin"]["revpos"], 2);
    assert_eq!(
        s.get("/db/new/b.bin").header("content-type"),
        Some("application/octet-stream")
    );
    // Content-MD5 is checked
    let r = s.req_with(
        "PUT",
        &format!("/db/new/c.txt?rev={rev2}"),
        Some("hello world"),
        &[("content-md5", "AAAAAAAAAAAAAAAAAAAAAA==")],
        true,
    );
    assert_eq!(r.status, 400, "{}", r.text);
    let r = s.req_with(
        "PUT",
        &format!("/db/new/c.txt?rev={rev2}"),
        Some("hello world"),
        &[("content-md5", "XrY7u+Ae7tCTyyK7j1rNww==")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let rev3 = r.json()["rev"].as_str().unwrap().to_string();
    // delete one
    assert_eq!(s.delete(&format!("/db/new/zzz?rev={rev3}")).status, 404);
    assert_eq!(s.delete("/db/new/a.txt").status, 409, "a rev is needed");
    let r = s.delete(&format!("/db/new/a.txt?rev={rev3}"));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(s.get("/db/new/a.txt").status, 404);
    assert_eq!(s.get("/db/new/b.bin").text, "xyz");
    // design documents' attachments need a database admin
    let r = s.anon("PUT", "/db/_design/app/x.js", Some("1"), &[]);
    assert_eq!(r.status, 401);
}

/// A 200 MB upload and download, checked by digest, with the server's peak memory staying
/// far below the attachment's size (content is streamed in 64 KiB chunks).
#[test]
fn large_attachment_is_streamed() {
    let s = Server::start();
    s.create_db("db");
    let size = 200 << 20;
    let data: Vec<u8> = (0..size)
        .map(|i: usize| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let peak_before = s.peak_rss_kb();
    let r = s.req_bytes(
        "PUT",
        "/db/big/blob.bin",
        data.clone(),
        &[("content-type", "application/octet-stream")],
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = s.req_bytes("GET", "/db/big/blob.bin", Vec::new(), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), data.len());
    assert!(r.body == data, "content round-trips");
    let d = s.get("/db/big").json();
    use base64::Engine;
    use md5::Digest as _;
    let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&data));
    assert_eq!(
        d["_attachments"]["blob.bin"]["digest"],
        format!("md5-{md5}")
    );
    assert_eq!(d["_attachments"]["blob.bin"]["length"], size);
    let sizes = &s.get("/db").json()["sizes"];
    assert!(
        sizes["external"].as_u64().unwrap() >= size as u64,
        "{sizes}"
    );
    assert!(
        sizes["file"].as_u64().unwrap() >= size as u64 / 2,
        "{sizes}"
    );
    let grew_mb = (s.peak_rss_kb() - peak_before) / 1024;
    eprintln!("peak RSS growth for a 200 MB attachment: {grew_mb} MB");
    assert!(
        grew_mb < 100,
        "peak RSS grew {grew_mb} MB for a 200 MB attachment"
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

/// Compressible types (`[attachments] compressible_types`) are stored gzip-compressed, as
/// CouchDB does: the digest is of the stored bytes, `length` the content's own.
#[test]
fn compressible_types_are_stored_gzipped() {
    let s = Server::start();
    s.create_db("db");
    let text = "all work and no play makes jack a dull boy\n".repeat(200);
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(&text);
    let doc = json!({"_attachments": {"t.txt": {"content_type": "text/plain", "data": data}}});
    assert_eq!(s.put("/db/d", &doc.to_string()).status, 201);
    let stub = &s.get("/db/d").json()["_attachments"]["t.txt"];
    assert_eq!(stub["length"], text.len());
    assert!(
        stub.get("encoding").is_none(),
        "only with att_encoding_info"
    );
    let info = &s.get("/db/d?att_encoding_info=true").json()["_attachments"]["t.txt"];
    assert_eq!(info["encoding"], "gzip");
    let encoded = info["encoded_length"].as_u64().unwrap();
    assert!(encoded < text.len() as u64 / 10, "{encoded}");
    use md5::Digest as _;
    let identity_md5 = format!(
        "md5-{}",
        base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(text.as_bytes()))
    );
    assert_ne!(
        stub["digest"], identity_md5,
        "the digest is of the stored (gzip) bytes"
    );
    // served decoded unless the client accepts gzip
    let r = s.get("/db/d/t.txt");
    assert_eq!(r.text, text);
    assert!(r.header("content-encoding").is_none());
    let r = s.req_bytes(
        "GET",
        "/db/d/t.txt",
        Vec::new(),
        &[("accept-encoding", "gzip")],
    );
    assert_eq!(r.body.len() as u64, encoded, "sent as stored");
    // CouchDB serves ranges of identity-encoded attachments only: this one whole
    let r = s.req_with("GET", "/db/d/t.txt", None, &[("range", "bytes=4-8")], true);
    assert_eq!((r.status, r.text == text), (200, true));
    let inline = s.get("/db/d?attachments=true").json();
    assert_eq!(inline["_attachments"]["t.txt"]["data"], data);
    // streamed uploads too
    let r = s.req_with(
        "PUT",
        "/db/s/t.txt",
        Some(&text),
        &[("content-type", "text/plain; charset=utf-8")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/db/s/t.txt").text, text);
    assert_eq!(
        s.get("/db/s?att_encoding_info=true").json()["_attachments"]["t.txt"]["encoding"],
        "gzip"
    );
}

/// `PUT /{db}/{doc}?new_edits=false` with a `multipart/related` body, as CouchDB's
/// replicator sends documents with attachments: JSON first, then the parts that follow
/// (one of them gzip-encoded as the source stored it).
#[test]
fn multipart_related_upload() {
    let s = Server::start();
    s.create_db("db");
    let text = "compressible text\n".repeat(100);
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let doc = json!({
        "_id": "m", "_rev": "2-bbb", "_revisions": {"start": 2, "ids": ["bbb", "aaa"]},
        "title": "multi",
        "_attachments": {
            "a.bin": {"content_type": "application/octet-stream", "revpos": 1, "digest": HELLO_MD5, "length": 11, "follows": true},
            "t.txt": {"content_type": "text/plain", "revpos": 2, "length": text.len(), "encoding": "gzip", "encoded_length": gz.len(), "follows": true}
        }
    });
    let mut body = Vec::new();
    body.extend_from_slice(b"--XyZ\r\nContent-Type: application/json\r\n\r\n");
    body.extend_from_slice(doc.to_string().as_bytes());
    body.extend_from_slice(b"\r\n--XyZ\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\nhello world\r\n--XyZ\r\nContent-Disposition: attachment; filename=\"t.txt\"\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n\r\n");
    body.extend_from_slice(&gz);
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    let r = s.req_bytes(
        "PUT",
        "/db/m?new_edits=false",
        body,
        &[("content-type", "multipart/related; boundary=\"XyZ\"")],
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let d = s.get("/db/m").json();
    assert_eq!(d["_rev"], "2-bbb");
    assert_eq!(d["title"], "multi");
    assert_eq!(d["_attachments"]["a.bin"]["digest"], HELLO_MD5);
    assert_eq!(d["_attachments"]["a.bin"]["revpos"], 1);
    assert_eq!(d["_attachments"]["t.txt"]["length"], text.len());
    assert_eq!(s.get("/db/m/a.bin").text, "hello world");
    assert_eq!(
        s.get("/db/m/t.txt").text,
        text,
        "stored as sent (gzip), served decoded"
    );
    // a part missing for an attachment that follows is refused, and nothing is written
    let doc2 = json!({"_attachments": {"x": {"content_type": "text/plain", "follows": true}}});
    let mut body = Vec::new();
    body.extend_from_slice(b"--B\r\nContent-Type: application/json\r\n\r\n");
    body.extend_from_slice(doc2.to_string().as_bytes());
    body.extend_from_slice(b"\r\n--B--\r\n");
    let r = s.req_bytes(
        "PUT",
        "/db/n",
        body,
        &[("content-type", "multipart/related; boundary=B")],
    );
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(s.get("/db/n").status, 404);
}

/// Parts with no headers at all (RFC 2046 allows them; CouchDB reads them) are each their
/// own attachment's content, an empty one included.
#[test]
fn multipart_related_parts_without_headers() {
    let s = Server::start();
    s.create_db("db");
    let doc = json!({"_attachments": {
        "e": {"content_type": "text/plain", "follows": true},
        "t": {"content_type": "text/plain", "follows": true}
    }});
    let mut body = b"--B\r\n\r\n".to_vec();
    body.extend_from_slice(doc.to_string().as_bytes());
    body.extend_from_slice(b"\r\n--B\r\n\r\n\r\n--B\r\n\r\nline\r\n\r\nnext\r\n--B--\r\n");
    let r = s.req_bytes(
        "PUT",
        "/db/h",
        body,
        &[("content-type", "multipart/related; boundary=B")],
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(s.get("/db/h/e").text, "");
    assert_eq!(s.get("/db/h/t").text, "line\r\n\r\nnext");
}

/// `GET /{db}/{doc}?attachments=true` with `Accept: multipart/related`: the document's JSON
/// (attachments marked `follows`), then each attachment as a part, as CouchDB sends it.
#[test]
fn multipart_related_download() {
    let s = Server::start();
    s.create_db("db");
    let text = "some text\n".repeat(50);
    use base64::Engine;
    let doc = json!({"_attachments": {
        "a.bin": {"content_type": "application/octet-stream", "data": HELLO_B64},
        "t.txt": {"content_type": "text/plain", "data": base64::engine::general_purpose::STANDARD.encode(&text)}
    }});
    assert_eq!(s.put("/db/d", &doc.to_string()).status, 201);
    let r = s.send_raw(
        "GET",
        "/db/d?attachments=true",
        &[("Accept", "multipart/related")],
        None,
        true,
    );
    assert_eq!(r.status, 200);
    let ct = r
        .headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(ct.starts_with("multipart/related; boundary="), "{ct}");
    let boundary = ct.split("boundary=").nth(1).unwrap().trim_matches('"');
    let text_of = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let delim = format!("--{boundary}").into_bytes();
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut rest: &[u8] = &r.body;
    while let Some(at) = rest
        .windows(delim.len())
        .position(|w| w == delim.as_slice())
    {
        if at > 0 {
            parts.push(&rest[..at]);
        }
        rest = &rest[at + delim.len()..];
    }
    assert_eq!(text_of(rest), "--");
    assert_eq!(parts.len(), 3, "{}", text_of(&r.body));
    let split = |p: &[u8]| {
        let at = p.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        (text_of(&p[..at]), p[at + 4..p.len() - 2].to_vec())
    };
    let (_, json) = split(parts[0]);
    let d: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(d["_attachments"]["a.bin"]["follows"], true);
    assert_eq!(d["_attachments"]["a.bin"]["length"], 11);
    let (head, body) = split(parts[1]);
    assert!(head.contains("filename=\"a.bin\""), "{head}");
    assert_eq!(body, b"hello world");
    // Compressible content goes as stored, gzip, as CouchDB sends it.
    let (head, body) = split(parts[2]);
    assert!(head.contains("Content-Encoding: gzip"), "{head}");
    let mut inflated = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut inflated)
        .unwrap();
    assert_eq!(inflated, text);
    // open_revs for a multipart/mixed client (CouchDB's replicator): a nested
    // multipart/related part for the revision with its attachments
    let rev = s.get("/db/d").json()["_rev"].as_str().unwrap().to_string();
    let r = s.send_raw(
        "GET",
        &format!("/db/d?open_revs=%5B%22{rev}%22,%221-0%22%5D&revs=true&attachments=true"),
        &[("Accept", "multipart/mixed")],
        None,
        true,
    );
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        r.headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("multipart/mixed; boundary=")),
        "{:?}",
        r.headers
    );
    assert!(
        text.contains("Content-Type: multipart/related; boundary="),
        "{text}"
    );
    assert!(text.contains("\r\n\r\nhello world\r\n"), "{text}");
    assert!(text.contains(r#"{"missing":"1-0"}"#), "{text}");
    // without that Accept header, JSON with inline data
    let j = s.get("/db/d?attachments=true").json();
    assert_eq!(j["_attachments"]["a.bin"]["data"], HELLO_B64);
}

/// An upload cut off mid-body leaves no revision behind (its chunks are discarded).
#[test]
fn interrupted_upload_leaves_no_revision() {
    use std::io::Write;
    let s = Server::start();
    s.create_db("db");
    let host = s.url.trim_start_matches("http://").to_string();
    let auth = common::basic(common::ADMIN.0, common::ADMIN.1);
    {
        let mut sock = std::net::TcpStream::connect(&host).unwrap();
        let head = format!(
            "PUT /db/cut/a.bin HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\nContent-Type: application/octet-stream\r\nContent-Length: 10000000\r\n\r\n"
        );
        sock.write_all(head.as_bytes()).unwrap();
        sock.write_all(&vec![7u8; 300_000]).unwrap();
        sock.flush().unwrap();
        // the client goes away mid-upload
    }
    // whenever the server notices, a partial body never becomes a revision
    assert_eq!(s.get("/db/cut").status, 404);
    assert_eq!(s.get("/db").json()["doc_count"], 0);
    // the server is fine
    let r = s.req_with("PUT", "/db/ok/a.bin", Some("x"), &[], true);
    assert_eq!(r.status, 201);
}
