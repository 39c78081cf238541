//! Write-side and maintenance operations on clustered databases, as a clustered CouchDB
//! 3.5.2 answers them: attachment uploads and deletions, `multipart/related` document
//! writes and reads, `open_revs` for a `multipart/mixed` client, `atts_since`, `COPY`, `batch=ok`, `_purge`, the database limits,
//! compaction, view clean-up, a design document's `_info` and a partition's `_all_docs`.
//! Revisions are CouchDB's own (the same content makes the same revision), so the values
//! asserted are those the reference CouchDB gave for the same requests.

use crate::common;

use common::cluster::*;
use common::{split_responses, RawResp, Server};
use serde_json::{json, Value};

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The path of `db`'s copy of its one range (`q=1`) on member `n`, created at or after
/// `t0`.
fn copy_of(n: &Server, db: &str, t0: u64) -> String {
    (t0..=now_secs())
        .map(|t| format!("/shards%2F00000000-ffffffff%2F{db}.{t}"))
        .find(|c| n.get(c).status == 200)
        .expect("the member's copy")
}

fn status_json(r: common::Resp) -> (u16, Value) {
    let v = serde_json::from_str(&r.text).unwrap_or(Value::Null);
    (r.status, v)
}

const REV1: &str = "1-23202479633c2b380f79507a776743d5";
const REV2: &str = "2-cb25466e989bfc7d9a7c93b0a7bd9e81";

#[test]
fn clustered_writes_and_maintenance_answer_as_couchdb() {
    let (_etcd, _dirs, nodes) = three_members();
    let t0 = now_secs();
    // One range with a copy on every member, so each copy can be read directly.
    assert_eq!(nodes[0].put("/wdb?q=1&n=3", "").status, 201);
    let copies: Vec<String> = nodes.iter().map(|n| copy_of(n, "wdb", t0)).collect();

    parsed_documents(&nodes, &copies);
    attachments(&nodes, &copies);
    related_documents(&nodes);
    open_revs_multipart(&nodes);
    copies_and_batches(&nodes);
    forms(&nodes);
    maintenance(&nodes, &copies);
    partitions(&nodes);
}

/// The form in which coordinators send copies the documents they parsed is taken from
/// members only: a client's (even an admin's) is a body that is not JSON. The
/// coordinators' own writes in it are every other test's.
fn parsed_documents(nodes: &[Server], copies: &[String]) {
    let parsed = r#"{"docs":[{"id":"p1","body":{}}],"new_edits":true}"#;
    let ct = [("content-type", "application/x-settee-parsed-docs")];
    for path in [
        "/wdb/_bulk_docs".to_string(),
        format!("{}/_bulk_docs", copies[0]),
    ] {
        let r = nodes[0].req_with("POST", &path, Some(parsed), &ct, true);
        assert_eq!(
            (r.status, r.json()["error"].clone()),
            (415, json!("bad_content_type")),
            "{path}: {}",
            r.text
        );
    }
    assert_eq!(nodes[1].get("/wdb/p1").status, 404);
}

fn attachments(nodes: &[Server], copies: &[String]) {
    assert_eq!(nodes[0].put("/wdb/d1", r#"{"a":1}"#).json()["rev"], REV1);
    // An upload reaches every copy; 201 with a Location, as CouchDB.
    let r = nodes[1].req_with(
        "PUT",
        &format!("/wdb/d1/hello.txt?rev={REV1}"),
        Some("hello world"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(
        (r.status, r.json()),
        (201, json!({"ok": true, "id": "d1", "rev": REV2}))
    );
    assert!(r.header("location").unwrap().ends_with("/wdb/d1/hello.txt"));
    for (n, copy) in nodes.iter().zip(copies) {
        let r = n.req_bytes("GET", &format!("{copy}/d1/hello.txt"), vec![], &[]);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world"[..]));
        assert_eq!(n.get("/wdb/d1/hello.txt").text, "hello world");
    }
    // CouchDB's refusals: a new document where one exists, a revision it does not
    // have, a deletion without a revision, an attachment it does not have.
    let put = |path: &str| {
        status_json(nodes[2].req_with(
            "PUT",
            path,
            Some("x"),
            &[("content-type", "text/plain")],
            true,
        ))
    };
    let conflict = json!({"error": "conflict", "reason": "Document update conflict."});
    let missing_rev = json!({"error": "not_found", "reason": "missing_rev"});
    assert_eq!(put("/wdb/d1/x.txt"), (409, conflict.clone()));
    assert_eq!(put("/wdb/d1/x.txt?rev=9-abc"), (409, missing_rev.clone()));
    assert_eq!(
        status_json(nodes[0].delete("/wdb/d1/hello.txt")),
        (409, conflict)
    );
    assert_eq!(
        status_json(nodes[0].delete(&format!("/wdb/d1/nope?rev={REV2}"))),
        (
            404,
            json!({"error": "not_found", "reason": "Document is missing attachment"})
        )
    );
    // `w` above the copies is accepted (202), as a document write.
    let r = put(&format!("/wdb/d1/more.txt?rev={REV2}&w=4"));
    assert_eq!(r.0, 202, "{r:?}");
    let rev3 = r.1["rev"].as_str().unwrap().to_owned();
    let r = nodes[1].delete(&format!("/wdb/d1/more.txt?rev={rev3}"));
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["rev"].as_str().unwrap().starts_with("4-"));
    assert_eq!(nodes[2].get("/wdb/d1/more.txt").status, 404);

    // Reads with attachments: inline JSON, `atts_since`, and multipart for a client that
    // accepts it (the content as stored: gzip, as CouchDB sends it).
    let d1 = nodes[0].get("/wdb/d1?attachments=true").json();
    assert_eq!(d1["_attachments"]["hello.txt"]["data"], "aGVsbG8gd29ybGQ=");
    let since = nodes[0]
        .get(&format!("/wdb/d1?atts_since=%5B%22{REV2}%22%5D"))
        .json();
    assert_eq!(since["_attachments"]["hello.txt"]["stub"], true);
    let since = nodes[0]
        .get(&format!("/wdb/d1?atts_since=%5B%22{REV1}%22%5D"))
        .json();
    assert_eq!(
        since["_attachments"]["hello.txt"]["data"],
        "aGVsbG8gd29ybGQ="
    );
    let r = nodes[2].req_bytes(
        "GET",
        "/wdb/d1?attachments=true",
        vec![],
        &[("accept", "multipart/related")],
    );
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 200);
    assert!(text.starts_with("--"), "{text}");
    assert!(text.contains(
        r#""hello.txt":{"content_type":"text/plain","revpos":2,"digest":"md5-7mkg+nM0HN26sZkLN8KVSA==","length":11,"follows":true,"encoding":"gzip","encoded_length":31}"#
    ), "{text}");
    assert!(text.contains("Content-Encoding: gzip"), "{text}");
    let bulk = nodes[1].post(
        "/wdb/_bulk_get?revs=true&attachments=true",
        &json!({"docs": [{"id": "d1", "rev": REV2, "atts_since": ["1-x"]}]}).to_string(),
    );
    let doc = &bulk.json()["results"][0]["docs"][0]["ok"];
    assert_eq!(
        doc["_attachments"]["hello.txt"]["data"], "aGVsbG8gd29ybGQ=",
        "{}",
        bulk.text
    );
}

/// A `multipart/related` body of `doc` and one part.
fn related(doc: &Value, name: &str, content: &str) -> String {
    format!(
        "--XX\r\nContent-Type: application/json\r\n\r\n{doc}\r\n--XX\r\nContent-Disposition: attachment; filename=\"{name}\"\r\n\r\n{content}\r\n--XX--"
    )
}

fn related_documents(nodes: &[Server]) {
    let ct = [("content-type", "multipart/related; boundary=\"XX\"")];
    let att =
        json!({"f.txt": {"content_type": "text/plain", "revpos": 5, "length": 5, "follows": true}});
    let doc = json!({"b": 2, "_attachments": att});
    let r = nodes[0].req_with(
        "PUT",
        "/wdb/mp1",
        Some(&related(&doc, "f.txt", "hello")),
        &ct,
        true,
    );
    assert_eq!(
        status_json(r),
        (
            201,
            json!({"ok": true, "id": "mp1", "rev": "1-beb4183810d6e081c7909c2faaf59e24"})
        )
    );
    assert_eq!(nodes[2].get("/wdb/mp1/f.txt").text, "hello");
    assert_eq!(
        nodes[1].get("/wdb/mp1").json()["_attachments"]["f.txt"]["revpos"],
        1
    );
    // A replicated revision keeps its history and its attachment's revpos.
    let doc = json!({"b": 2, "_rev": "3-abc", "_revisions": {"start": 3, "ids": ["abc", "def", "0a0"]}, "_attachments": att});
    let r = nodes[1].req_with(
        "PUT",
        "/wdb/mp2?new_edits=false",
        Some(&related(&doc, "f.txt", "hello")),
        &ct,
        true,
    );
    assert_eq!(
        status_json(r),
        (201, json!({"ok": true, "id": "mp2", "rev": "3-abc"}))
    );
    let got = nodes[2].get("/wdb/mp2?revs=true").json();
    assert_eq!(got["_revisions"]["ids"], json!(["abc", "def", "0a0"]));
    assert_eq!(got["_attachments"]["f.txt"]["revpos"], 5);
    assert_eq!(nodes[0].get("/wdb/mp2/f.txt").text, "hello");
}

/// `open_revs` for a `multipart/mixed` client (CouchDB's replicator) on a clustered
/// database: each revision whose attachments are sent is a nested `multipart/related` (the
/// document with `follows` stubs, then each attachment as stored, gzip kept encoded), one
/// whose attachments all stay stubs (`atts_since`) is its JSON, a missing one is an error
/// part; the answers are the single node's, byte for byte but for the boundaries.
fn open_revs_multipart(nodes: &[Server]) {
    let single = Server::start();
    single.create_db("wdb");
    let text = "hello hello hello hello hello hello hello hello hello";
    let png: &[u8] = b"\x89PNG\r\n\x1a\n-not-compressed";
    let b64 = |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b);
    // Revision 1 with two attachments, 2 keeping them, and a conflicting 2 with a third.
    let mut revs = Vec::new();
    for s in [&nodes[0], &single] {
        let atts = json!({
            "a.txt": {"content_type": "text/plain", "data": b64(text.as_bytes())},
            "b.png": {"content_type": "image/png", "data": b64(png)},
        });
        let r1 = s.put(
            "/wdb/or",
            &json!({"v": 1, "_attachments": atts}).to_string(),
        );
        let r1 = r1.json()["rev"].as_str().unwrap().to_owned();
        let stubs = json!({"a.txt": {"stub": true}, "b.png": {"stub": true}});
        let r2 = s.put(
            &format!("/wdb/or?rev={r1}"),
            &json!({"v": 2, "_attachments": stubs}).to_string(),
        );
        let r2 = r2.json()["rev"].as_str().unwrap().to_owned();
        let conflict = json!({"new_edits": false, "docs": [{
            "_id": "or", "_rev": "2-ffffffffffffffffffffffffffffffff", "v": 3,
            "_revisions": {"start": 2, "ids": ["ffffffffffffffffffffffffffffffff", &r1[2..]]},
            "_attachments": {"c.bin": {"content_type": "application/octet-stream", "revpos": 2, "data": b64(b"bye")}},
        }]});
        assert_eq!(s.post("/wdb/_bulk_docs", &conflict.to_string()).status, 201);
        revs.push((r1, r2));
    }
    assert_eq!(
        revs[0], revs[1],
        "the same revisions on the cluster and the single node"
    );
    let (r1, r2) = revs.remove(0);
    let conflict = "2-ffffffffffffffffffffffffffffffff";

    let listed = format!("/wdb/or?open_revs=%5B%22{r2}%22,%22{conflict}%22,%229-x%22%5D");
    let r = get_mixed(&nodes[1], &listed);
    assert_eq!(r.status, 200);
    let ct = r.header("content-type").unwrap();
    assert!(ct.starts_with("multipart/mixed; boundary=\""), "{ct}");
    let revisions = parts_of(&r.body, boundary_of(ct));
    assert_eq!(revisions.len(), 3, "{}", String::from_utf8_lossy(&r.body));
    // Revision 2: its document, then its attachments as stored.
    let related = &revisions[0];
    let ct = related.header("content-type");
    assert!(ct.starts_with("multipart/related; boundary=\""), "{ct}");
    let inner = parts_of(&related.body, boundary_of(ct));
    assert_eq!(inner.len(), 3);
    assert_eq!(inner[0].header("content-type"), "application/json");
    let doc: Value = serde_json::from_slice(&inner[0].body).unwrap();
    assert_eq!(
        (doc["_rev"].as_str(), &doc["v"]),
        (Some(r2.as_str()), &json!(2))
    );
    let a = &doc["_attachments"]["a.txt"];
    assert_eq!(
        (&a["follows"], &a["encoding"], &a["length"], a.get("data")),
        (&json!(true), &json!("gzip"), &json!(text.len()), None),
        "{doc}"
    );
    assert_eq!(a["encoded_length"], json!(inner[1].body.len()));
    assert_eq!(doc["_attachments"]["b.png"]["follows"], true, "{doc}");
    let a_part = &inner[1];
    assert_eq!(
        a_part.header("content-disposition"),
        "attachment; filename=\"a.txt\""
    );
    assert_eq!(a_part.header("content-type"), "text/plain");
    assert_eq!(a_part.header("content-encoding"), "gzip");
    assert_eq!(
        a_part.header("content-length"),
        a_part.body.len().to_string()
    );
    let mut inflated = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(&a_part.body[..]),
        &mut inflated,
    )
    .unwrap();
    assert_eq!(inflated, text);
    assert_eq!(
        inner[2].header("content-disposition"),
        "attachment; filename=\"b.png\""
    );
    assert_eq!(inner[2].header("content-encoding"), "");
    assert_eq!(inner[2].body, png);
    // The conflicting revision, with its own attachment (not compressible: as sent).
    let ct = revisions[1].header("content-type");
    let inner = parts_of(&revisions[1].body, boundary_of(ct));
    let doc: Value = serde_json::from_slice(&inner[0].body).unwrap();
    assert_eq!((doc["_rev"].as_str(), inner.len()), (Some(conflict), 2));
    assert_eq!(inner[1].body, b"bye");
    // The revision no copy has.
    assert_eq!(
        revisions[2].header("content-type"),
        "application/json; error=\"true\""
    );
    assert_eq!(revisions[2].body, br#"{"missing":"9-x"}"#);

    // With `atts_since` revision 1, revision 2's attachments all stay stubs: its JSON.
    let since =
        format!("/wdb/or?open_revs=%5B%22{r2}%22,%22{conflict}%22%5D&atts_since=%5B%22{r1}%22%5D");
    let r = get_mixed(&nodes[2], &since);
    let revisions = parts_of(&r.body, boundary_of(r.header("content-type").unwrap()));
    assert_eq!(revisions[0].header("content-type"), "application/json");
    let doc: Value = serde_json::from_slice(&revisions[0].body).unwrap();
    let a = &doc["_attachments"]["a.txt"];
    assert_eq!(
        (&a["stub"], &a["encoding"]),
        (&json!(true), &json!("gzip")),
        "{doc}"
    );
    assert!(revisions[1]
        .header("content-type")
        .starts_with("multipart/related"));

    // Every form the same as the single node's, but for the boundaries.
    for query in [
        listed.clone(),
        since,
        format!("{listed}&revs=true"),
        format!("/wdb/or?open_revs=%5B%22{r1}%22%5D&latest=true"),
        "/wdb/or?open_revs=all&revs=true&conflicts=true".to_string(),
    ] {
        for n in nodes {
            let (clustered, mine) = (get_mixed(n, &query), get_mixed(&single, &query));
            assert_eq!(
                (clustered.status, without_boundaries(&clustered)),
                (mine.status, without_boundaries(&mine)),
                "{query}"
            );
        }
    }
}

/// `GET path` on `s` as a client that accepts `multipart/mixed`; the body de-chunked.
fn get_mixed(s: &Server, path: &str) -> RawResp {
    let head = s.raw_head(
        format!("GET {path} HTTP/1.1").as_bytes(),
        "Accept: multipart/mixed\r\nConnection: close\r\n",
    );
    split_responses(&s.exchange(&head)).remove(0)
}

/// One part of a multipart body: its headers (names lower-cased) and its content.
struct BodyPart {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl BodyPart {
    /// Header `name`'s value, or "" when the part has none.
    fn header(&self, name: &str) -> &str {
        (self.headers.iter())
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The boundary a multipart content type names (`…; boundary="B"`).
fn boundary_of(content_type: &str) -> &str {
    let b = content_type.split("boundary=").nth(1).expect("a boundary");
    b.trim_matches('"')
}

/// The parts of a multipart body delimited by `boundary`, framed as RFC 2046 frames them:
/// `--boundary` opens the body, each part is its header lines, a blank line and its
/// content, ended by `\r\n--boundary`, and `--` follows the last. Any other framing fails.
fn parts_of(body: &[u8], boundary: &str) -> Vec<BodyPart> {
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let delimiter = format!("\r\n--{boundary}");
    let mut rest = (body.strip_prefix(&delimiter.as_bytes()[2..]))
        .unwrap_or_else(|| panic!("no opening delimiter: {}", String::from_utf8_lossy(body)));
    let mut parts = Vec::new();
    while rest != b"--" {
        rest = rest
            .strip_prefix(b"\r\n")
            .expect("a part after a delimiter");
        let end = find(rest, delimiter.as_bytes()).expect("a part's closing delimiter");
        let part = &rest[..end];
        let blank = find(part, b"\r\n\r\n").expect("a part's headers");
        let headers = (std::str::from_utf8(&part[..blank]).unwrap().split("\r\n"))
            .map(|line| line.split_once(": ").expect("a header line"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
            .collect();
        parts.push(BodyPart {
            headers,
            body: part[blank + 4..].to_vec(),
        });
        rest = &rest[end + delimiter.len()..];
    }
    parts
}

/// An answer's content type and body with each multipart boundary (the body's and its
/// nested `multipart/related` parts') replaced by `B`.
fn without_boundaries(r: &RawResp) -> (String, Vec<u8>) {
    let ct = r.header("content-type").unwrap_or("").to_owned();
    let mut boundaries = Vec::new();
    if ct.starts_with("multipart/") {
        let outer = boundary_of(&ct).to_owned();
        for part in parts_of(&r.body, &outer) {
            let inner = part.header("content-type");
            if inner.starts_with("multipart/") {
                boundaries.push(boundary_of(inner).to_owned());
            }
        }
        boundaries.push(outer);
    }
    let replace = |bytes: &[u8]| {
        let mut text = bytes.to_vec();
        for b in &boundaries {
            let (b, mut out, mut rest) = (b.as_bytes(), Vec::new(), &text[..]);
            while let Some(at) = rest.windows(b.len()).position(|w| w == b) {
                out.extend_from_slice(&rest[..at]);
                out.push(b'B');
                rest = &rest[at + b.len()..];
            }
            out.extend_from_slice(rest);
            text = out;
        }
        text
    };
    (
        String::from_utf8(replace(ct.as_bytes())).unwrap(),
        replace(&r.body),
    )
}

fn copies_and_batches(nodes: &[Server]) {
    // COPY across ranges (q=2): the copy keeps the attachment, as CouchDB's.
    assert_eq!(nodes[0].put("/cdb?q=2&n=2", "").status, 201);
    assert_eq!(nodes[0].put("/cdb/d1", r#"{"a":1}"#).status, 201);
    let r = nodes[0].req_with(
        "PUT",
        &format!("/cdb/d1/hello.txt?rev={REV1}"),
        Some("hello world"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let copy_rev = "1-1ac8348394b3fd5c4a60c4ef52c3ad0d";
    for (dest, want) in [
        (
            "d1copy",
            (201, json!({"ok": true, "id": "d1copy", "rev": copy_rev})),
        ),
        (
            "d1copy",
            (
                409,
                json!({"error": "conflict", "reason": "Document update conflict."}),
            ),
        ),
        (
            "_local/l1",
            (201, json!({"ok": true, "id": "_local/l1", "rev": "0-1"})),
        ),
        (
            "_local/l1?rev=0-1",
            (201, json!({"ok": true, "id": "_local/l1", "rev": "0-2"})),
        ),
    ] {
        let r = nodes[1].raw("COPY", "/cdb/d1", &[("Destination", dest)]);
        assert_eq!(status_json(r), want, "COPY to {dest}");
    }
    let r = nodes[2].raw(
        "COPY",
        &format!("/cdb/d1?rev={REV1}"),
        &[("Destination", "d1b")],
    );
    assert_eq!(
        status_json(r),
        (201, json!({"ok": true, "id": "d1b", "rev": REV1}))
    );
    let r = nodes[2].raw("COPY", "/cdb/_local/l1", &[("Destination", "fromlocal")]);
    assert_eq!(
        status_json(r),
        (201, json!({"ok": true, "id": "fromlocal", "rev": REV1}))
    );
    let r = nodes[0].raw("COPY", "/cdb/nope", &[("Destination", "x")]);
    assert_eq!(
        status_json(r),
        (404, json!({"error": "not_found", "reason": "missing"}))
    );
    let r = nodes[2].raw(
        "COPY",
        "/cdb/d1",
        &[("Destination", &format!("d1copy?rev={copy_rev}"))],
    );
    assert_eq!(
        status_json(r),
        (
            201,
            json!({"ok": true, "id": "d1copy", "rev": "2-4f50470bf510fc01cb0bb0e111492912"})
        )
    );
    for n in nodes {
        assert_eq!(n.get("/cdb/d1copy/hello.txt").text, "hello world");
        // The attachment keeps the source's revpos, as CouchDB's copy does (its content is
        // not new), in the copy's first revision and its second.
        let copied = n.get("/cdb/d1copy").json();
        assert_eq!(copied["_attachments"]["hello.txt"]["revpos"], 2, "{copied}");
        assert_eq!(
            n.get("/cdb/_local/l1").json(),
            json!({"_id": "_local/l1", "_rev": "0-2", "a": 1})
        );
    }

    // `batch=ok`: 202 at once, the write reaching the copies afterwards.
    let ok = |id: &str| (202, json!({"ok": true, "id": id}));
    assert_eq!(
        status_json(nodes[0].put("/cdb/b1?batch=ok", r#"{"x":1}"#)),
        ok("b1")
    );
    assert_eq!(
        status_json(nodes[1].post("/cdb?batch=ok", r#"{"_id":"b2"}"#)),
        ok("b2")
    );
    assert_eq!(
        status_json(nodes[2].put("/cdb/_local/b3?batch=ok", r#"{"x":3}"#)),
        ok("_local/b3")
    );
    let r = nodes[0].put("/cdb/_design/b4?batch=ok", r#"{"views":{}}"#);
    assert_eq!(status_json(r), ok("_design/b4"));
    for n in nodes {
        eventually("batched writes on every member", || {
            n.get("/cdb/b1").json()["_rev"] == "1-0785e9eb543380151003dc452c3a001a"
                && n.get("/cdb/b2").status == 200
                && n.get("/cdb/_local/b3").json()["x"] == 3
                && n.get("/cdb/_design/b4").status == 200
        });
    }
}

fn maintenance(nodes: &[Server], copies: &[String]) {
    // _purge: every copy of each id's range; local ids purge nothing.
    let p1 = "1-967a00dff5e02add41819138abb3284d";
    assert_eq!(nodes[0].put("/wdb/p1", "{}").json()["rev"], p1);
    let r = nodes[1].post(
        "/wdb/_purge",
        &json!({"p1": [p1, "1-abc"], "nope": ["1-x"], "_local/z": []}).to_string(),
    );
    assert_eq!(
        (r.status, r.text.trim_end()),
        (
            201,
            r#"{"purge_seq":null,"purged":{"p1":["1-967a00dff5e02add41819138abb3284d"],"nope":[],"_local/z":[]}}"#
        )
    );
    for (n, copy) in nodes.iter().zip(copies) {
        assert_eq!(n.get(&format!("{copy}/p1")).status, 404);
        assert_ne!(n.get(copy).json()["purge_seq"], 0, "{copy}");
    }
    let info = nodes[2].get("/wdb").json();
    assert!(
        info["purge_seq"].as_str().unwrap().starts_with("1-"),
        "{info}"
    );
    let r = nodes[1].post("/wdb/_purge?w=4", &json!({"d1": ["9-x"]}).to_string());
    assert_eq!(
        (r.status, r.json()["purged"]["d1"].clone()),
        (202, json!([]))
    );

    // Limits: set on every copy, read from one.
    for (limit, n) in [("_revs_limit", 7), ("_purged_infos_limit", 9)] {
        assert_eq!(nodes[0].get(&format!("/wdb/{limit}")).json(), 1000);
        let r = nodes[1].put(&format!("/wdb/{limit}"), &n.to_string());
        assert_eq!(status_json(r), (200, json!({"ok": true})));
        for (m, copy) in nodes.iter().zip(copies) {
            assert_eq!(m.get(&format!("/wdb/{limit}")).json(), n);
            assert_eq!(m.get(&format!("{copy}/{limit}")).json(), n);
        }
    }
    let r = nodes[0].put("/wdb/_purged_infos_limit", "0");
    assert_eq!(
        status_json(r),
        (
            400,
            json!({"error": "bad_request", "reason": "`purged_infos_limit` must be positive integer"})
        )
    );

    // Compaction and clean-up: 202 at once, as CouchDB.
    let accepted = (202, json!({"ok": true}));
    assert_eq!(status_json(nodes[2].post("/wdb/_compact", "")), accepted);
    assert_eq!(
        status_json(nodes[0].post("/wdb/_view_cleanup", "")),
        accepted
    );
    let r = nodes[1].put(
        "/wdb/_design/v",
        r#"{"views":{"a":{"map":"function(d){emit(1)}"}}}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(nodes[1].get("/wdb/_design/v/_view/a").status, 200);
    assert_eq!(status_json(nodes[1].post("/wdb/_compact/v", "")), accepted);
    let missing = (404, json!({"error": "not_found", "reason": "missing"}));
    assert_eq!(
        status_json(nodes[1].post("/wdb/_compact/nope", "")),
        missing
    );

    // A design document's index information: the copies' combined, in CouchDB's order.
    assert_eq!(
        status_json(nodes[0].get("/wdb/_design/nope/_info")),
        missing
    );
    let info = nodes[2].get("/wdb/_design/v/_info").json();
    let index = &info["view_index"];
    assert_eq!(info["name"], "v");
    let keys: Vec<&str> = index
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "updates_pending",
            "waiting_commit",
            "waiting_clients",
            "updater_running",
            "update_seq",
            "sizes",
            "signature",
            "purge_seq",
            "language",
            "compact_running",
            "collator_versions"
        ]
    );
    // The one range's index is read from one copy, built by the query; the two others
    // build theirs after it answered.
    let pending = &index["updates_pending"];
    assert_eq!(
        (&pending["minimum"], &pending["preferred"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(index["language"], "javascript");
    eventually("every copy's index built", || {
        let info = nodes[2].get("/wdb/_design/v/_info").json();
        info["view_index"]["updates_pending"]["total"] == 0
    });
}

fn partitions(nodes: &[Server]) {
    assert_eq!(
        nodes[0].put("/pdb?q=4&n=2&partitioned=true", "").status,
        201
    );
    let docs: Vec<Value> = (1..=3)
        .flat_map(|i| {
            [
                json!({"_id": format!("a:{i}")}),
                json!({"_id": format!("b:{i}")}),
            ]
        })
        .collect();
    let r = nodes[1].post("/pdb/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let ids = |v: &Value| -> Vec<String> {
        (v["rows"].as_array().unwrap().iter())
            .map(|r| r["id"].as_str().unwrap_or("-").to_owned())
            .collect()
    };
    for n in nodes {
        let all = n.get("/pdb/_partition/a/_all_docs").json();
        assert_eq!(ids(&all), ["a:1", "a:2", "a:3"], "{all}");
        let page = n.get("/pdb/_partition/b/_all_docs?skip=1&limit=1").json();
        assert_eq!(
            (ids(&page), &page["offset"]),
            (vec!["b:2".to_owned()], &json!(1))
        );
        let desc = n
            .get("/pdb/_partition/a/_all_docs?descending=true&start_key=%22a:2%22")
            .json();
        assert_eq!(ids(&desc), ["a:2", "a:1"]);
        let keys = n
            .post("/pdb/_partition/a/_all_docs", r#"{"keys":["a:3","a:9"]}"#)
            .json();
        assert_eq!(keys["rows"][0]["id"], "a:3", "{keys}");
        assert_eq!(keys["rows"][1], json!({"key": "a:9", "error": "not_found"}));
    }
}

/// `multipart/form-data` uploads (an HTML form's) and attachment names that are not
/// UTF-8, on a clustered database.
fn forms(nodes: &[Server]) {
    let host = nodes[1].url.trim_start_matches("http://").to_string();
    let referer = format!("http://{host}");
    let ct = "multipart/form-data; boundary=----TF";
    let form = |path: &str, body: String| {
        let headers = [("content-type", ct), ("referer", referer.as_str())];
        nodes[1].req_with("POST", path, Some(&body), &headers, true)
    };
    let file = |name: &str, content: &str| {
        format!("------TF\r\nContent-Disposition: form-data; name=\"_attachments\"; filename=\"{name}\"\r\nContent-Type: text/plain\r\n\r\n{content}\r\n")
    };
    // A new document from `_doc`, then a file added to its revision with `_rev`.
    let body = format!(
        "------TF\r\nContent-Disposition: form-data; name=\"_doc\"\r\n\r\n{{\"k\":1}}\r\n{}------TF--",
        file("one.txt", "first file")
    );
    let r = form("/cdb/f1", body);
    assert_eq!(r.status, 201, "{}", r.text);
    let rev1 = r.json()["rev"].as_str().unwrap().to_owned();
    assert_eq!(r.header("etag"), Some(format!("\"{rev1}\"").as_str()));
    let body = format!(
        "------TF\r\nContent-Disposition: form-data; name=\"_rev\"\r\n\r\n{rev1}\r\n{}------TF--",
        file("two.txt", "second file")
    );
    let r = form("/cdb/f1", body);
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(
        r.json()["rev"].as_str().unwrap().starts_with("2-"),
        "{}",
        r.text
    );
    for n in nodes {
        let doc = n.get("/cdb/f1").json();
        assert_eq!(doc["k"], 1, "{doc}");
        assert_eq!(doc["_attachments"]["one.txt"]["revpos"], 1, "{doc}");
        assert_eq!(doc["_attachments"]["two.txt"]["revpos"], 2, "{doc}");
        assert_eq!(n.get("/cdb/f1/one.txt").text, "first file");
        assert_eq!(n.get("/cdb/f1/two.txt").text, "second file");
    }
    let stale = format!(
        "------TF\r\nContent-Disposition: form-data; name=\"_rev\"\r\n\r\n{rev1}\r\n{}------TF--",
        file("three.txt", "x")
    );
    assert_eq!(form("/cdb/f1", stale).status, 409);

    // A name that is not UTF-8: the document is looked up through the cluster first.
    let r = nodes[0].get("/cdb/f1/%FF");
    assert_eq!(
        status_json(r),
        (
            404,
            json!({"error": "not_found", "reason": "Document is missing attachment"})
        )
    );
    let r = nodes[0].get("/cdb/nope/%FF");
    assert_eq!(
        status_json(r),
        (404, json!({"error": "not_found", "reason": "missing"}))
    );
}
