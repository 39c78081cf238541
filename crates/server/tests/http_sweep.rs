//! HTTP sweep: malformed requests of every kind (bad JSON, invalid UTF-8, deep nesting,
//! huge numbers, broken framing and lengths, chunked garbage, odd methods, paths, headers
//! and query parameters) to every route family. No answer may be a 5xx, and afterwards the
//! server still answers and the data written before is intact.
//!
//! Requests are written by hand on TCP sockets so that framing can be broken. The sweep
//! targets a sacrificial database (`t`, re-created when a request legitimately deletes it);
//! the data that must survive lives in `keep`, which the sweep only reads.

mod common;
use common::{basic, Server, ADMIN};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a well-framed request may take to answer (a loaded CI machine).
const WELL_FRAMED: Duration = Duration::from_secs(20);
/// How long to wait before ending a request whose framing promises more than it sends.
const BROKEN: Duration = Duration::from_secs(3);

/// The status of the first answer to `bytes` and the `error` member of its body, or
/// `None` if the server closed the connection without answering (what it may do with a
/// request it cannot frame). After `patience` without an answer the write side is closed,
/// which ends a request whose framing promises more body than it sends.
fn send(addr: &str, bytes: &[u8], patience: Duration) -> Option<(u16, String)> {
    let t0 = std::time::Instant::now();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(patience)).unwrap();
    let _ = sock.write_all(bytes);
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    let mut closed_write = false;
    loop {
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                all.extend_from_slice(&buf[..n]);
                if all.len() > 1 << 20 {
                    break;
                }
            }
            // A request that promises more body than it sends: end it, and read on.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if closed_write || !all.is_empty() {
                    break;
                }
                closed_write = true;
                let _ = sock.shutdown(std::net::Shutdown::Write);
                sock.set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
            }
            Err(_) => break,
        }
    }
    if t0.elapsed() > Duration::from_secs(1) {
        let line = String::from_utf8_lossy(&bytes[..bytes.len().min(100)]).into_owned();
        eprintln!("slow ({:?}): {line:?}", t0.elapsed());
    }
    let head = std::str::from_utf8(all.get(..all.len().min(64))?).ok()?;
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let text = String::from_utf8_lossy(&all);
    let error = text
        .split_once("\"error\":\"")
        .and_then(|(_, rest)| rest.split('"').next())
        .unwrap_or("")
        .to_string();
    Some((status, error))
}

/// 5xx answers that CouchDB gives too, so they are not failures of input handling:
/// `{error, Reason}` throws rendered as `500 error` (the replicator's document parser,
/// `_security` validation), Mango's `invalid_list_index_params` (500 in `mango_error`),
/// and `501 not_implemented` for what Settee does not implement yet.
fn couchdb_does_too(status: u16, error: &str) -> bool {
    matches!(
        (status, error),
        (500, "error") | (500, "invalid_list_index_params") | (501, _)
    )
}

struct Req<'a> {
    method: &'a str,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Write `Content-Length` for `body` (false: the headers frame it themselves).
    length: bool,
}

impl Req<'_> {
    fn bytes(&self, host: &str) -> Vec<u8> {
        let mut out = format!(
            "{} {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n",
            self.method, self.target
        )
        .into_bytes();
        for (k, v) in &self.headers {
            out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        if self.length {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// Bodies no route should fail on with a 5xx.
fn bodies() -> Vec<(&'static str, Vec<u8>)> {
    let deep =
        |open: &str, close: &str, n: usize| [open.repeat(n), close.repeat(n)].concat().into_bytes();
    vec![
        ("empty", Vec::new()),
        ("truncated JSON", br#"{"a": [1, 2"#.to_vec()),
        ("not JSON", b"hello there".to_vec()),
        ("array", b"[]".to_vec()),
        ("string", br#""str""#.to_vec()),
        ("null", b"null".to_vec()),
        ("number", b"12".to_vec()),
        ("invalid UTF-8", b"{\"_id\": \"\xff\xfe\", \"a\": \"\xc3\x28\"}".to_vec()),
        ("lone surrogate", br#"{"_id": "x\ud800", "k": "\udc00"}"#.to_vec()),
        ("bad escape", br#"{"a": "\u00"}"#.to_vec()),
        ("deep arrays", deep("[", "]", 100_000)),
        ("deep objects", [r#"{"a":"#.repeat(100_000), "1".into(), "}".repeat(100_000)].concat().into_bytes()),
        ("deep in docs", [r#"{"docs":[{"_id":"deep","x":"#.to_string(), "[".repeat(50_000), "]".repeat(50_000), "}]}".into()].concat().into_bytes()),
        ("huge exponent", br#"{"_id": "huge", "n": 1e999999, "docs": [{"n": -1e400}], "keys": [1e999]}"#.to_vec()),
        ("huge integer", format!(r#"{{"_id": "bigint", "n": {}, "limit": {}}}"#, "9".repeat(10_000), "9".repeat(400)).into_bytes()),
        ("wrong member types", br#"{"_id": 1, "_rev": [], "docs": "x", "keys": {}, "selector": [], "fields": 3, "source": 1, "target": [], "doc_ids": "x", "new_edits": "no", "_attachments": [], "_deleted": "yes", "name": [], "password": {}, "members": "x", "admins": 1, "index": "x", "ddoc": [], "limit": "x", "sort": {}, "use_index": 5, "queries": {}, "continuous": "x", "filter": 1, "since": {}, "w": "x", "r": []}"#.to_vec()),
        ("bad attachments", br#"{"_id": "attbad", "_attachments": {"a": {"data": "!!!notbase64", "content_type": 7}, "b": {"stub": true, "revpos": "x"}, "c": {"follows": true, "length": -5}}}"#.to_vec()),
        ("bad revisions", br#"{"_id": "revbad", "_rev": "x-y", "_revisions": {"start": -1, "ids": [1, 2]}, "docs": [{"_id": "r", "_rev": "1-zz", "_revisions": {"start": 99999999999999999999, "ids": []}}], "new_edits": false}"#.to_vec()),
        ("revs_diff junk", br#"{"a": ["1-x", 5, null], "b": "x", "c": {"d": 1}}"#.to_vec()),
        ("bulk_get junk", br#"{"docs": [{"id": 5}, {"rev": "1-x"}, {"id": "a", "rev": "bad", "atts_since": "x"}, 7, null]}"#.to_vec()),
        ("null bytes", b"{\"_id\": \"a\x00b\", \"\x00\": 1}".to_vec()),
        ("long key", format!(r#"{{"{}": 1}}"#, "k".repeat(200_000)).into_bytes()),
    ]
}

/// Query strings no route should fail on with a 5xx.
const QUERIES: &[&str] = &[
    "?limit=-1",
    "?limit=abc&skip=-5",
    "?skip=99999999999999999999999",
    "?limit=1e400",
    "?startkey=notjson&endkey=%7B",
    "?key=%22%5Cud800%22",
    "?keys=%5B",
    "?keys=%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B%5B",
    "?since=garbage&feed=bogus&heartbeat=x&timeout=-5",
    "?since=now&feed=longpoll&timeout=1",
    "?since=-1&limit=0&style=weird&filter=nope",
    "?filter=_view&view=nope",
    "?filter=_doc_ids&doc_ids=%5B1",
    "?filter=_selector",
    "?rev=garbage&revs=maybe&open_revs=%5Bbad",
    "?open_revs=all&atts_since=%5B1",
    "?attachments=true&att_encoding_info=x&local_seq=2",
    "?descending=maybe&inclusive_end=2&group_level=-3&reduce=x&group=1",
    "?stale=never&update=sometimes&stable=x",
    "?%ff=%fe&%=&&&=",
    "?a",
    "?count=-1&count=1e10",
    "?q=999&n=-1&partitioned=yes",
    "?batch=nope&new_edits=maybe&w=x",
    "?include_docs=true&conflicts=x&update_seq=y&sorted=z&start_key_doc_id=%ff",
    "?callback=alert(1)",
];

/// Every route family, under the sacrificial database `t` where there is one.
const PATHS: &[&str] = &[
    "/",
    "/_up",
    "/_uuids",
    "/_all_dbs",
    "/_dbs_info",
    "/_db_updates",
    "/_active_tasks",
    "/_session",
    "/_membership",
    "/_node/_local",
    "/_node/_local/_config",
    "/_node/_local/_config/sweep",
    "/_node/_local/_config/sweep/key",
    "/_node/nonode@nohost/_stats",
    "/_replicate",
    "/_scheduler/jobs",
    "/_scheduler/docs/_replicator/x",
    "/_cluster_setup",
    "/_reshard",
    "/_utils/",
    "/t",
    "/t/_all_docs",
    "/t/_all_docs/queries",
    "/t/_design_docs",
    "/t/_local_docs",
    "/t/_bulk_docs",
    "/t/_bulk_get",
    "/t/_changes",
    "/t/_compact",
    "/t/_compact/d",
    "/t/_ensure_full_commit",
    "/t/_revs_limit",
    "/t/_purge",
    "/t/_purged_infos_limit",
    "/t/_revs_diff",
    "/t/_missing_revs",
    "/t/_security",
    "/t/_view_cleanup",
    "/t/_find",
    "/t/_explain",
    "/t/_index",
    "/t/_index/_bulk_delete",
    "/t/_index/_design/idx/json/by_a",
    "/t/_shards",
    "/t/_shards/doc",
    "/t/_sync_shards",
    "/t/doc",
    "/t/doc/att.txt",
    "/t/doc/a/b/c",
    "/t/_local/l",
    "/t/_design/d",
    "/t/_design/d/att.txt",
    "/t/_design/d/_info",
    "/t/_design/d/_view/v",
    "/t/_design/d/_view/v/queries",
    "/t/_design/d/_view/red",
    "/t/_design/d/_show/s",
    "/t/_design/d/_show/s/doc",
    "/t/_design/d/_list/l/v",
    "/t/_design/d/_list/l/d/v",
    "/t/_design/d/_update/u",
    "/t/_design/d/_update/u/doc",
    "/t/_design/d/_rewrite/x",
    "/t/_design/d/_search/x",
    "/p/_partition/pa",
    "/p/_partition/pa/_all_docs",
    "/p/_partition/pa/_design/d/_view/v",
    "/p/_partition/pa/_find",
    "/p/_partition/pa/_explain",
    "/p/_partition/%ff/_all_docs",
    "/p/pa:doc",
];

/// Paths that are odd in themselves.
fn odd_paths() -> Vec<String> {
    vec![
        "/%ff".into(),
        "/t/%ff".into(),
        "/t/%ff/%fe".into(),
        "/t/_design/%ff/_view/%fe".into(),
        "/t/_local/%c3%28".into(),
        "/%".into(),
        "/t/%zz".into(),
        "/t/doc%00".into(),
        "//".into(),
        "/t//doc".into(),
        "/t/doc/../../_all_dbs".into(),
        "/t/_design/".into(),
        "/t/_design/d/_view/".into(),
        "/t/_design/d/_show/".into(),
        "/t/_design/d/_list/l".into(),
        "/t/_design/d/_update/".into(),
        "/t/_design/d/_rewrite".into(),
        "/t/_local/".into(),
        "/t/_local/a/b".into(),
        "/t/_partition".into(),
        "/p/_partition/".into(),
        "/p/_partition/pa/_design/d/_view/".into(),
        "/_node/_local/_config/%ff".into(),
        "/_node/_local/_config/a/b/c".into(),
        "/_node/".into(),
        "/_scheduler/docs/%ff".into(),
        "/A_BAD_DB_NAME".into(),
        format!("/{}", "a".repeat(300)),
        format!("/t/{}", "x".repeat(60_000)),
        format!("/t/{}/att", "x".repeat(5000)),
        format!("/t/_all_docs?keys={}", "%5B".repeat(20_000)),
        "*".into(),
        "http://example.com/t/doc".into(),
        "t/doc".into(),
    ]
}

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "COPY", "PATCH", "OPTIONS", "TRACE", "MKCOL", "FOO",
];

/// Header sets no route should fail on with a 5xx.
fn header_sets() -> Vec<(&'static str, Vec<(String, String)>)> {
    let h = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    vec![
        (
            "multipart no boundary",
            h(&[("Content-Type", "multipart/related")]),
        ),
        (
            "multipart garbage",
            h(&[("Content-Type", "multipart/related; boundary=\"zz\"")]),
        ),
        (
            "multipart form",
            h(&[("Content-Type", "multipart/form-data; boundary=zz")]),
        ),
        (
            "form",
            h(&[("Content-Type", "application/x-www-form-urlencoded")]),
        ),
        ("odd content type", h(&[("Content-Type", ";;;/;=\"")])),
        (
            "gzip lie",
            h(&[
                ("Content-Type", "application/json"),
                ("Content-Encoding", "gzip"),
            ]),
        ),
        (
            "unknown encoding",
            h(&[
                ("Content-Type", "application/json"),
                ("Content-Encoding", "br, zz"),
            ]),
        ),
        (
            "accept garbage",
            h(&[("Accept", "*/*;q=x, ;;, multipart/mixed;boundary")]),
        ),
        (
            "if-match garbage",
            h(&[("If-Match", "\"garbage"), ("If-None-Match", "*, \"x")]),
        ),
        ("range garbage", h(&[("Range", "bytes=garbage")])),
        (
            "range huge",
            h(&[(
                "Range",
                "bytes=99999999999999999999-, -99999999999999999999, 5-2",
            )]),
        ),
        (
            "destination odd",
            h(&[
                ("Destination", "%ff?rev=x"),
                ("Content-Type", "application/json"),
            ]),
        ),
        ("destination empty", h(&[("Destination", "")])),
        ("auth garbage", h(&[("Authorization", "Basic !!!")])),
        ("auth no colon", h(&[("Authorization", "Basic YWRtaW4=")])),
        (
            "auth unknown scheme",
            h(&[("Authorization", "Bearer a.b.c")]),
        ),
        (
            "cookie garbage",
            h(&[("Cookie", "AuthSession=%ff%fe; AuthSession=YWRtaW46MDoxMjM=")]),
        ),
        (
            "proxy auth",
            h(&[
                ("X-Auth-CouchDB-UserName", "\u{7f}"),
                ("X-Auth-CouchDB-Roles", ",,,"),
            ]),
        ),
        (
            "full commit",
            h(&[
                ("X-Couch-Full-Commit", "maybe"),
                ("Content-Type", "application/json"),
            ]),
        ),
        (
            "overlong header",
            vec![("X-Long".to_string(), "v".repeat(100_000))],
        ),
        (
            "many headers",
            (0..500)
                .map(|i| (format!("X-H{i}"), "v".to_string()))
                .collect(),
        ),
        (
            "origin odd",
            h(&[
                ("Origin", "\u{1}://%ff"),
                ("Access-Control-Request-Method", "FOO"),
            ]),
        ),
        (
            "expect",
            h(&[
                ("Expect", "100-continue"),
                ("Content-Type", "application/json"),
            ]),
        ),
        ("expect odd", h(&[("Expect", "teapot")])),
    ]
}

/// Requests whose framing is broken; written whole, byte for byte.
fn broken_framing(host: &str, auth: &str) -> Vec<(&'static str, Vec<u8>)> {
    let pre = |first: &str| format!("{first}\r\nHost: {host}\r\nAuthorization: {auth}\r\n");
    vec![
        ("short body", format!("{}Content-Length: 100\r\nContent-Type: application/json\r\n\r\n{{\"a\":", pre("PUT /t/short HTTP/1.1")).into_bytes()),
        ("long body", format!("{}Content-Length: 2\r\nContent-Type: application/json\r\n\r\n{{\"a\":1}}GARBAGE GARBAGE\r\n\r\n", pre("PUT /t/long HTTP/1.1")).into_bytes()),
        ("negative length", format!("{}Content-Length: -1\r\n\r\n{{}}", pre("POST /t/_bulk_docs HTTP/1.1")).into_bytes()),
        ("letters length", format!("{}Content-Length: abc\r\n\r\n{{}}", pre("POST /t/_find HTTP/1.1")).into_bytes()),
        ("huge length", format!("{}Content-Length: 99999999999999999999999\r\n\r\n{{}}", pre("POST /t/_all_docs HTTP/1.1")).into_bytes()),
        ("two lengths", format!("{}Content-Length: 2\r\nContent-Length: 5\r\n\r\n{{}}abc", pre("POST /t/_bulk_get HTTP/1.1")).into_bytes()),
        ("length and chunked", format!("{}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n", pre("POST /t/_revs_diff HTTP/1.1")).into_bytes()),
        ("chunked garbage", format!("{}Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", pre("POST /t/_bulk_docs HTTP/1.1")).into_bytes()),
        ("chunk too short", format!("{}Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n10\r\n{{}}\r\n", pre("PUT /t/chunky HTTP/1.1")).into_bytes()),
        ("chunk size overflow", format!("{}Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\nx\r\n0\r\n\r\n", pre("PUT /t/doc/att2 HTTP/1.1")).into_bytes()),
        ("chunked then stop", format!("{}Transfer-Encoding: chunked\r\nContent-Type: application/octet-stream\r\n\r\n5\r\nhello\r\n", pre("PUT /t/doc/att3?rev=1-x HTTP/1.1")).into_bytes()),
        ("unknown transfer coding", format!("{}Transfer-Encoding: gzip, zz\r\n\r\nabc", pre("POST /t/_changes HTTP/1.1")).into_bytes()),
        ("gzip garbage", format!("{}Content-Encoding: gzip\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n0123456789", pre("POST /t/_bulk_docs HTTP/1.1")).into_bytes()),
        ("multipart truncated", format!("{}Content-Type: multipart/related; boundary=\"b\"\r\nContent-Length: 60\r\n\r\n--b\r\nContent-Type: application/json\r\n\r\n{{\"_id\":\"m\"\r\n--b", pre("PUT /t/multi HTTP/1.1")).into_bytes()),
        ("multipart lying attachment", format!("{}Content-Type: multipart/related; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: application/json\r\n\r\n{{\"_id\":\"m\",\"_attachments\":{{\"a\":{{\"follows\":true,\"length\":1000,\"content_type\":\"text/plain\"}}}}}}\r\n--b\r\n\r\nshort\r\n--b--", pre("PUT /t/multi2 HTTP/1.1")).into_bytes()),
        ("HTTP/0.9", b"GET /\r\n\r\n".to_vec()),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()),
        ("version garbage", format!("GET / HTTP/9.9\r\nHost: {host}\r\n\r\n").into_bytes()),
        ("no host", b"GET /t HTTP/1.1\r\n\r\n".to_vec()),
        ("bare LF", format!("GET /t HTTP/1.1\nHost: {host}\n\n").into_bytes()),
        ("header no colon", format!("{}Garbage header line\r\n\r\n", pre("GET /t HTTP/1.1")).into_bytes()),
        ("header folding", format!("{}X-A: a\r\n  folded\r\n\r\n", pre("GET /t HTTP/1.1")).into_bytes()),
        ("binary request line", b"\x00\x01\x02\xff\xfe GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("lower method", format!("get /t HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()),
        ("long method", format!("{} /t HTTP/1.1\r\nHost: {host}\r\n\r\n", "M".repeat(10_000)).into_bytes()),
        ("pipelined", format!("{}Content-Length: 0\r\n\r\nGET /t HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", pre("GET /t HTTP/1.1")).into_bytes()),
        ("tls hello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03".to_vec()),
    ]
}

/// The data that must survive, as read through the API.
fn snapshot(s: &Server) -> (Value, Vec<u8>, Value) {
    let docs = s.get("/keep/_all_docs?include_docs=true").json();
    let att = s
        .req_bytes("GET", "/keep/withatt/a.bin", Vec::new(), &[])
        .body;
    let view = s.get("/keep/_design/k/_view/v").json();
    (docs, att, view)
}

fn populate(s: &Server) {
    for path in [
        "/t/_design/d/_view/red",
        "/p/_partition/pa/_design/d/_view/v",
        "/keep/_design/k/_view/v",
    ] {
        // Through the ordinary client (60 s timeout): the views still answer after each
        // family of requests (a 404 when a request legitimately deleted the design doc).
        let status = s.get(path).status;
        assert!(
            matches!(status, 200 | 404),
            "{path} after the last family: {status}"
        );
    }
    let ddoc = json!({
        "views": {"v": {"map": "function(doc) { emit(doc._id, 1); }"},
                  "red": {"map": "function(doc) { emit(doc._id, 1); }", "reduce": "_sum"}},
        "shows": {"s": "function(doc, req) { return {body: 'ok'}; }"},
        "lists": {"l": "function(head, req) { while (getRow()) {} return 'ok'; }"},
        "updates": {"u": "function(doc, req) { return [null, 'ok']; }"},
        "filters": {"f": "function(doc, req) { return true; }"},
        "validate_doc_update": "function(n, o, u) { if (n.forbid) throw({forbidden: 'no'}); }",
        "rewrites": [{"from": "x", "to": "_view/v"}],
    });
    if s.get("/t").status == 404 {
        s.create_db("t");
    }
    s.put("/t/_design/d", &ddoc.to_string());
    s.put("/t/doc", r#"{"a": 1}"#);
    let rev = s.get("/t/doc").json()["_rev"]
        .as_str()
        .unwrap_or("")
        .to_string();
    s.req_bytes(
        "PUT",
        &format!("/t/doc/att.txt?rev={rev}"),
        b"hello".to_vec(),
        &[("content-type", "text/plain")],
    );
    s.put("/t/_local/l", r#"{"a": 1}"#);
    s.post(
        "/t/_index",
        r#"{"index": {"fields": ["a"]}, "ddoc": "idx", "name": "by_a"}"#,
    );
    if s.get("/p").status == 404 {
        assert_eq!(s.put("/p?partitioned=true", "").status, 201);
    }
    s.put(
        "/p/_design/d",
        r#"{"views": {"v": {"map": "function(doc) { emit(doc._id, 1); }"}}}"#,
    );
    s.put("/p/pa:doc", r#"{"a": 1}"#);
}

#[test]
fn malformed_requests_get_no_5xx() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path());
    if std::env::var_os("SWEEP_KEEP").is_some() {
        eprintln!("data directory kept: {}", tmp.keep().display());
    }
    let host = s.addr().to_string();
    let auth = basic(ADMIN.0, ADMIN.1);
    // the data that must come through intact
    s.create_db("keep");
    for i in 0..20 {
        s.put(
            &format!("/keep/d{i}"),
            &json!({"i": i, "s": "x".repeat(i * 10)}).to_string(),
        );
    }
    let r = s.put("/keep/withatt", "{}");
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let r = s.req_bytes(
        "PUT",
        &format!("/keep/withatt/a.bin?rev={rev}"),
        bytes.clone(),
        &[("content-type", "application/octet-stream")],
    );
    assert_eq!(r.status, 201);
    s.put(
        "/keep/_design/k",
        r#"{"views": {"v": {"map": "function(doc) { emit(doc._id, doc.i); }"}}}"#,
    );
    s.put("/keep/_local/l", r#"{"x": 1}"#);
    let before = snapshot(&s);
    populate(&s);

    let mut bad: Vec<String> = Vec::new();
    let mut sent = 0u64;
    let mut unanswered = 0u64;
    let trace = std::env::var_os("SWEEP_TRACE").is_some();
    let mut faithful = std::collections::BTreeMap::<String, u64>::new();
    let mut check = |what: String, answer: Option<(u16, String)>| {
        if trace {
            eprintln!("{answer:?} {:.200}", what);
        }
        sent += 1;
        match answer {
            Some((code, error)) if code >= 500 && couchdb_does_too(code, &error) => {
                *faithful.entry(format!("{code} {error}")).or_default() += 1;
            }
            Some((code, error)) if code >= 500 => bad.push(format!("{code} {error} {what:.300}")),
            None => unanswered += 1,
            _ => {}
        }
    };
    let admin = vec![("Authorization".to_string(), auth.clone())];
    let json_ct = ("Content-Type".to_string(), "application/json".to_string());

    // every route × every method × every body, as admin
    let bodies = bodies();
    for path in PATHS {
        for method in METHODS {
            // A DELETE of the sacrificial database itself is legitimate; of `keep`, never sent.
            for (name, body) in &bodies {
                let mut headers = admin.clone();
                headers.push(json_ct.clone());
                let req = Req {
                    method,
                    target: path.to_string(),
                    headers,
                    body: body.clone(),
                    length: true,
                };
                check(
                    format!("{method} {path} body={name}"),
                    send(&host, &req.bytes(&host), WELL_FRAMED),
                );
            }
        }
        populate(&s);
    }
    // every route × bad query strings, GET and POST
    for path in PATHS {
        for q in QUERIES {
            for method in ["GET", "POST"] {
                let mut headers = admin.clone();
                headers.push(json_ct.clone());
                let body = br#"{"keys": ["a"], "selector": {"a": 1}}"#.to_vec();
                let req = Req {
                    method,
                    target: format!("{path}{q}"),
                    headers,
                    body,
                    length: true,
                };
                check(
                    format!("{method} {path}{q}"),
                    send(&host, &req.bytes(&host), WELL_FRAMED),
                );
            }
        }
        populate(&s);
    }
    // every route × odd headers, with a plausible body
    for path in PATHS {
        for (name, hs) in header_sets() {
            for method in ["GET", "PUT", "POST", "COPY"] {
                let mut headers = if name.starts_with("auth") || name.starts_with("cookie") {
                    Vec::new()
                } else {
                    admin.clone()
                };
                headers.extend(hs.iter().cloned());
                let body = br#"{"_id": "h", "docs": [{"_id": "h"}], "selector": {}}"#.to_vec();
                let req = Req {
                    method,
                    target: path.to_string(),
                    headers,
                    body,
                    length: true,
                };
                check(
                    format!("{method} {path} headers={name}"),
                    send(&host, &req.bytes(&host), WELL_FRAMED),
                );
            }
        }
        populate(&s);
    }
    // odd paths × methods, admin and anonymous
    for path in odd_paths() {
        for method in METHODS {
            for anon in [false, true] {
                let headers = if anon { Vec::new() } else { admin.clone() };
                let req = Req {
                    method,
                    target: path.clone(),
                    headers,
                    body: b"{}".to_vec(),
                    length: true,
                };
                check(
                    format!("{method} {path:.80} anon={anon}"),
                    send(&host, &req.bytes(&host), WELL_FRAMED),
                );
            }
        }
        populate(&s);
    }
    // anonymous: every route, a few methods and bodies
    for path in PATHS {
        for method in ["GET", "PUT", "POST", "DELETE"] {
            for (name, body) in bodies.iter().take(8) {
                let req = Req {
                    method,
                    target: path.to_string(),
                    headers: vec![json_ct.clone()],
                    body: body.clone(),
                    length: true,
                };
                check(
                    format!("anon {method} {path} body={name}"),
                    send(&host, &req.bytes(&host), WELL_FRAMED),
                );
            }
        }
    }
    populate(&s);
    // broken framing
    for (name, bytes) in broken_framing(&host, &auth) {
        check(format!("framing: {name}"), send(&host, &bytes, BROKEN));
    }

    eprintln!(
        "http_sweep: {sent} requests, {} 5xx, {unanswered} closed without an answer; \
         5xx as CouchDB answers them: {faithful:?}",
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "5xx answers ({}):\n{}",
        bad.len(),
        bad.join("\n")
    );

    // The server is intact: it answers, `keep` is as it was, and it takes writes.
    assert_eq!(s.get("/").status, 200);
    assert_eq!(s.get("/_up").status, 200);
    let after = snapshot(&s);
    assert_eq!(after.0, before.0, "keep's documents changed");
    assert!(after.1 == bytes, "keep's attachment changed");
    assert_eq!(after.2, before.2, "keep's view changed");
    assert_eq!(s.get("/keep/_local/l").json()["x"], 1);
    assert_eq!(s.put("/keep/after", r#"{"ok": true}"#).status, 201);
    assert_eq!(s.get("/keep").json()["doc_count"], 23);
}
