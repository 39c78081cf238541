//! HTTP sweep: malformed requests of every kind (bad JSON, invalid UTF-8, deep nesting,
//! huge numbers, broken framing and lengths, chunked garbage, odd methods, paths, headers
//! and query parameters) to every route family. No answer may be a 5xx, and afterwards the
//! server still answers and the data written before is intact.
//!
//! Requests are written by hand on TCP sockets so that framing can be broken. The sweep
//! targets a sacrificial database (`t`, re-created when a request legitimately deletes it);
//! the data that must survive lives in `keep`, which the sweep only reads.

use crate::common;
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
/// Mango's `unknown_error` for option values `mango_error` has no entry for (a bookmark
/// that is not a string), and `501 not_implemented` for what Settee does not implement yet.
fn couchdb_does_too(status: u16, error: &str) -> bool {
    matches!(
        (status, error),
        (500, "error") | (500, "invalid_list_index_params") | (500, "unknown_error") | (501, _)
    )
}

/// What a sweep's answers came to: a 5xx CouchDB gives too is counted by name, any other
/// 5xx is a failure. `SWEEP_TRACE=1` prints every answer.
#[derive(Default)]
struct Verdicts {
    trace: bool,
    sent: u64,
    unanswered: u64,
    statuses: std::collections::BTreeMap<u16, u64>,
    faithful: std::collections::BTreeMap<String, u64>,
    bad: Vec<String>,
}

impl Verdicts {
    fn new() -> Verdicts {
        Verdicts {
            trace: std::env::var_os("SWEEP_TRACE").is_some(),
            ..Verdicts::default()
        }
    }

    fn record(&mut self, what: &str, answer: Option<(u16, String)>) {
        if self.trace {
            eprintln!("{answer:?} {what:.200}");
        }
        self.sent += 1;
        let Some((code, error)) = answer else {
            self.unanswered += 1;
            return;
        };
        *self.statuses.entry(code).or_default() += 1;
        if code >= 500 && couchdb_does_too(code, &error) {
            *self.faithful.entry(format!("{code} {error}")).or_default() += 1;
        } else if code >= 500 {
            self.bad.push(format!("{code} {error} {what:.400}"));
        }
    }

    /// Prints the tally and fails on any unexpected 5xx.
    fn finish(&self, name: &str) {
        eprintln!(
            "{name}: {} requests, statuses {:?}, {} closed without an answer, {} unexpected \
             5xx; 5xx as CouchDB answers them: {:?}",
            self.sent,
            self.statuses,
            self.unanswered,
            self.bad.len(),
            self.faithful
        );
        assert!(
            self.bad.is_empty(),
            "{name}: 5xx answers ({}):\n{}",
            self.bad.len(),
            self.bad.join("\n")
        );
    }
}

/// Sends `req` and returns its answer. A HEAD answer has no body to name its error, so a
/// HEAD that gets a 5xx is asked again with GET to learn the name.
fn ask(host: &str, req: &Req, patience: Duration) -> Option<(u16, String)> {
    let (code, error) = send(host, &req.bytes(host), patience)?;
    if code >= 500 && req.method == "HEAD" {
        let get = Req {
            method: "GET",
            ..req.clone()
        };
        let named = send(host, &get.bytes(host), WELL_FRAMED).map(|a| a.1);
        return Some((code, named.unwrap_or(error)));
    }
    Some((code, error))
}

#[derive(Clone)]
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

    let mut verdicts = Verdicts::new();
    let mut check = |what: String, answer| verdicts.record(&what, answer);
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
                    ask(&host, &req, WELL_FRAMED),
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
                check(format!("{method} {path}{q}"), ask(&host, &req, WELL_FRAMED));
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
                    ask(&host, &req, WELL_FRAMED),
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
                    ask(&host, &req, WELL_FRAMED),
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
                    ask(&host, &req, WELL_FRAMED),
                );
            }
        }
    }
    populate(&s);
    // broken framing
    for (name, bytes) in broken_framing(&host, &auth) {
        check(format!("framing: {name}"), send(&host, &bytes, BROKEN));
    }

    verdicts.finish("http_sweep");

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

/// Generated requests: a grammar of CouchDB requests (paths, parameters, headers and bodies
/// for every route family), each drawn at random and then, often, mutated byte by byte.
/// `SWEEP_FUZZ_REQUESTS` sets how many (CI runs a few thousand; 100,000 by hand) and
/// `SWEEP_SEED` replays a run; the seed is printed either way.
mod generated {
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::Rng;
    use serde_json::{json, Map, Value};

    /// Databases the generator may write to; `keep` is never named.
    const DBS: &[&str] = &[
        "t",
        "p",
        "t",
        "t",
        "p",
        "fz",
        "_users",
        "_replicator",
        "Bad$Name",
        "%ff",
    ];
    const IDS: &[&str] = &[
        "doc",
        "a",
        "pa:doc",
        "pa:x",
        "_design/d",
        "_design/idx",
        "_local/l",
        "_bad",
        "",
        "x%2Fy",
        "%ff",
        "_design/",
        "pb:",
        ":x",
        "h",
    ];
    const DDOCS: &[&str] = &["d", "idx", "nope", "%ff", ""];
    const VIEWS: &[&str] = &["v", "red", "nope", "by_a"];
    const PARAMS: &[&str] = &[
        "key",
        "keys",
        "startkey",
        "start_key",
        "endkey",
        "end_key",
        "startkey_docid",
        "start_key_doc_id",
        "endkey_docid",
        "limit",
        "skip",
        "descending",
        "group",
        "group_level",
        "reduce",
        "include_docs",
        "inclusive_end",
        "stale",
        "update",
        "stable",
        "update_seq",
        "sorted",
        "conflicts",
        "attachments",
        "att_encoding_info",
        "atts_since",
        "rev",
        "revs",
        "revs_info",
        "open_revs",
        "latest",
        "local_seq",
        "meta",
        "deleted_conflicts",
        "since",
        "feed",
        "heartbeat",
        "timeout",
        "style",
        "filter",
        "doc_ids",
        "view",
        "seq_interval",
        "batch",
        "new_edits",
        "w",
        "r",
        "q",
        "n",
        "partitioned",
        "partition",
        "count",
        "callback",
        "selector",
        "format",
        "descending",
        "skip",
        "limit",
        "db",
        "name",
        "type",
    ];

    pub struct Gen {
        pub rng: StdRng,
    }

    pub struct Drawn {
        pub method: String,
        pub target: String,
        pub headers: Vec<(String, String)>,
        pub body: Vec<u8>,
        /// Whether the body is framed by a correct `Content-Length`.
        pub length: bool,
    }

    impl Gen {
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs.choose(&mut self.rng).unwrap()
        }

        fn chance(&mut self, p: f64) -> bool {
            self.rng.gen_bool(p)
        }

        /// A short string, often odd: unicode, escapes, control characters, empty.
        fn string(&mut self) -> String {
            match self.rng.gen_range(0..10) {
                0 => String::new(),
                1 => "\u{0}\u{1f}\u{7f}".into(),
                2 => "é☃😀\u{fffd}".into(),
                3 => "x".repeat(self.rng.gen_range(100..5000)),
                4 => self.pick(IDS).to_string(),
                5 => format!("{}-{}", self.rng.gen_range(0..5), "abc"),
                6 => format!(
                    "{}-{:032x}",
                    self.rng.gen_range(1..4),
                    self.rng.gen::<u128>()
                ),
                _ => (0..self.rng.gen_range(1..8))
                    .map(|_| *b"ab_:$/-. z09AZ".choose(&mut self.rng).unwrap() as char)
                    .collect(),
            }
        }

        fn number(&mut self) -> Value {
            match self.rng.gen_range(0..8) {
                0 => json!(0),
                1 => json!(-1),
                2 => json!(u64::MAX),
                3 => json!(i64::MIN),
                4 => json!(1.5e300),
                5 => json!(-0.0),
                _ => json!(self.rng.gen_range(-1000i64..1000)),
            }
        }

        /// Any JSON value, at most `depth` deep.
        fn value(&mut self, depth: u32) -> Value {
            let top = if depth == 0 { 5 } else { 8 };
            match self.rng.gen_range(0..top) {
                0 => Value::Null,
                1 => json!(self.chance(0.5)),
                2 | 3 => self.number(),
                4 => json!(self.string()),
                5 | 6 => {
                    let n = self.rng.gen_range(0..4);
                    Value::Array((0..n).map(|_| self.value(depth - 1)).collect())
                }
                _ => {
                    let n = self.rng.gen_range(0..4);
                    let mut m = Map::new();
                    for _ in 0..n {
                        let k = self.key();
                        m.insert(k, self.value(depth - 1));
                    }
                    Value::Object(m)
                }
            }
        }

        /// Member names, CouchDB's special ones among them.
        fn key(&mut self) -> String {
            const SPECIAL: &[&str] = &[
                "_id",
                "_rev",
                "_deleted",
                "_attachments",
                "_revisions",
                "_conflicts",
                "_local_seq",
                "_revs_info",
                "_x",
                "a",
                "b",
                "docs",
                "keys",
                "selector",
                "fields",
                "sort",
                "limit",
                "skip",
                "views",
                "map",
                "reduce",
                "options",
                "language",
                "filters",
                "validate_doc_update",
                "members",
                "admins",
                "names",
                "roles",
                "source",
                "target",
                "continuous",
                "create_target",
                "doc_ids",
                "since_seq",
                "index",
                "ddoc",
                "name",
                "type",
                "use_index",
                "bookmark",
                "execution_stats",
                "r",
                "partition",
                "queries",
                "new_edits",
                "all_or_nothing",
                "password",
                "data",
                "stub",
                "follows",
                "length",
                "content_type",
                "digest",
                "revpos",
                "encoding",
                "start",
                "ids",
                "id",
                "rev",
                "atts_since",
                "partial_filter_selector",
                "cancel",
                "filter",
                "query_params",
            ];
            if self.chance(0.8) {
                self.pick(SPECIAL).to_string()
            } else {
                self.string()
            }
        }

        /// A Mango selector, well-formed or nearly so.
        fn selector(&mut self, depth: u32) -> Value {
            const OPS: &[&str] = &[
                "$eq",
                "$ne",
                "$gt",
                "$gte",
                "$lt",
                "$lte",
                "$in",
                "$nin",
                "$exists",
                "$type",
                "$size",
                "$mod",
                "$regex",
                "$elemMatch",
                "$allMatch",
                "$keyMapMatch",
                "$all",
                "$not",
                "$beginsWith",
                "$bogus",
            ];
            const COMBINE: &[&str] = &["$and", "$or", "$nor"];
            const FIELDS: &[&str] = &["a", "b.c", "_id", "a.0", "\\.x", "", "a..b", "$x"];
            if depth > 0 && self.chance(0.3) {
                let n = self.rng.gen_range(0..3);
                let parts: Vec<Value> = (0..n).map(|_| self.selector(depth - 1)).collect();
                let parts = if self.chance(0.9) {
                    json!(parts)
                } else {
                    self.value(1)
                };
                return json!({ self.pick(COMBINE): parts });
            }
            let field = self.pick(FIELDS);
            let op = self.pick(OPS);
            let arg = match op {
                "$regex" => json!(self.pick(&["^a", "(", "[", "a{99999}", "(?i)x", "\\"])),
                "$mod" => json!([self.number(), self.number()]),
                "$in" | "$nin" | "$all" => Value::Array((0..2).map(|_| self.value(1)).collect()),
                "$elemMatch" | "$allMatch" | "$keyMapMatch" | "$not" if depth > 0 => {
                    self.selector(depth - 1)
                }
                "$type" => json!(self.pick(&["string", "number", "null", "bogus"])),
                _ => self.value(1),
            };
            if self.chance(0.2) {
                json!({ field: arg })
            } else {
                json!({ field: { op: arg } })
            }
        }

        /// A document, its special members often of the wrong type.
        fn doc(&mut self) -> Value {
            let mut m = Map::new();
            if self.chance(0.7) {
                m.insert("_id".into(), json!(self.string()));
            }
            if self.chance(0.3) {
                m.insert("_rev".into(), json!(self.string()));
            }
            if self.chance(0.2) {
                let n = self.rng.gen_range(0..3);
                let atts: Map<String, Value> = (0..n)
                    .map(|_| {
                        let att = match self.rng.gen_range(0..4) {
                            0 => json!({"data": "aGVsbG8=", "content_type": "text/plain"}),
                            1 => json!({"stub": true, "revpos": self.number()}),
                            2 => json!({"follows": true, "length": self.number(),
                                        "content_type": "x/y"}),
                            _ => self.value(2),
                        };
                        (self.string(), att)
                    })
                    .collect();
                m.insert("_attachments".into(), Value::Object(atts));
            }
            if self.chance(0.15) {
                m.insert(
                    "_revisions".into(),
                    json!({"start": self.number(), "ids": [self.string(), self.string()]}),
                );
            }
            if self.chance(0.1) {
                m.insert("_deleted".into(), self.value(0));
            }
            for _ in 0..self.rng.gen_range(0..4) {
                let k = self.key();
                m.insert(k, self.value(3));
            }
            Value::Object(m)
        }

        /// A body shaped for the route it goes to.
        fn body_for(&mut self, path: &str) -> Value {
            let docs = |g: &mut Gen| -> Vec<Value> {
                (0..g.rng.gen_range(0..5)).map(|_| g.doc()).collect()
            };
            if path.contains("_bulk_docs") {
                json!({"docs": docs(self), "new_edits": self.value(0)})
            } else if path.contains("_bulk_get") {
                let ds: Vec<Value> = (0..3)
                    .map(|_| {
                        json!({"id": self.string(), "rev": self.string(),
                                    "atts_since": self.value(1)})
                    })
                    .collect();
                json!({ "docs": ds })
            } else if path.contains("_find") || path.contains("_explain") {
                let mut q = json!({"selector": self.selector(3)});
                for k in [
                    "fields",
                    "sort",
                    "limit",
                    "skip",
                    "use_index",
                    "bookmark",
                    "r",
                    "execution_stats",
                    "update",
                    "stable",
                    "partition",
                ] {
                    if self.chance(0.2) {
                        q[k] = self.value(2);
                    }
                }
                if self.chance(0.2) {
                    q["sort"] = json!([{"a": self.pick(&["asc", "desc", "up"])}]);
                }
                q
            } else if path.contains("_index") {
                json!({"index": {"fields": self.value(2),
                                 "partial_filter_selector": self.selector(2)},
                       "ddoc": self.value(0), "name": self.value(0), "type": self.value(0),
                       "partitioned": self.value(0)})
            } else if path.contains("_revs_diff")
                || path.contains("_missing_revs")
                || path.contains("_purge")
            {
                let mut m = Map::new();
                for _ in 0..3 {
                    m.insert(self.string(), json!([self.string(), self.string()]));
                }
                Value::Object(m)
            } else if path.contains("_security") {
                json!({"admins": {"names": self.value(1), "roles": self.value(1)},
                       "members": {"names": self.value(1), "roles": self.value(1)}})
            } else if path.contains("_replicate") {
                let ends = [
                    "t",
                    "p",
                    "fz",
                    "http://127.0.0.1:1/x",
                    "",
                    "http://[::1",
                    "ftp://x",
                ];
                json!({"source": self.pick(&ends), "target": self.pick(&ends),
                       "continuous": self.chance(0.1), "create_target": self.value(0),
                       "doc_ids": self.value(1), "filter": self.value(0),
                       "selector": self.selector(1), "cancel": self.value(0)})
            } else if path.contains("_all_docs") || path.contains("_view") {
                let mut q = json!({"keys": self.value(2)});
                if self.chance(0.3) {
                    q = json!({"queries": [{"keys": self.value(1), "limit": self.value(0)},
                                           self.value(2)]});
                }
                q
            } else if path.contains("/_design/") && !path.contains("/_view") {
                json!({"views": {self.pick(VIEWS): {
                          "map": self.pick(&["function(doc) { emit(doc._id, 1); }",
                                             "function(doc) { emit(", "", "42"]),
                          "reduce": self.pick(&["_sum", "_count", "_stats", "_bogus",
                                                "function(k, v) { return 1; }"])}},
                       "options": self.value(1), "language": self.value(0),
                       "filters": self.value(1), "validate_doc_update": self.value(0)})
            } else {
                self.doc()
            }
        }

        fn path(&mut self) -> String {
            let db = self.pick(DBS);
            let id = self.pick(IDS);
            let ddoc = self.pick(DDOCS);
            let view = self.pick(VIEWS);
            let tail: String = match self.rng.gen_range(0..30) {
                0 => "".into(),
                1 => "/_all_docs".into(),
                2 => "/_bulk_docs".into(),
                3 => "/_bulk_get".into(),
                4 => "/_changes".into(),
                5 => "/_find".into(),
                6 => "/_explain".into(),
                7 => "/_index".into(),
                8 => format!("/_index/_design/{ddoc}/json/{view}"),
                9 => "/_revs_diff".into(),
                10 => "/_purge".into(),
                11 => "/_security".into(),
                12 => format!("/_design/{ddoc}/_view/{view}"),
                13 => format!("/_design/{ddoc}/_view/{view}/queries"),
                14 => format!("/_design/{ddoc}/_show/s/{id}"),
                15 => format!("/_design/{ddoc}/_list/l/{view}"),
                16 => format!("/_design/{ddoc}/_update/u/{id}"),
                17 => format!("/_design/{ddoc}/_info"),
                18 => format!(
                    "/_partition/{}/_all_docs",
                    self.pick(&["pa", "pb", "", "%ff", "_x"])
                ),
                19 => format!("/_partition/pa/_design/{ddoc}/_view/{view}"),
                20 => "/_partition/pa/_find".into(),
                21 => format!("/{id}/{}", self.pick(&["att.txt", "a/b", "%ff", ""])),
                22 => "/_compact".into(),
                23 => "/_local_docs".into(),
                24 => format!("/_shards/{id}"),
                _ => format!("/{id}"),
            };
            match self.rng.gen_range(0..40) {
                0 => "/_replicate".into(),
                1 => "/_uuids".into(),
                2 => "/_all_dbs".into(),
                3 => "/_dbs_info".into(),
                4 => "/_session".into(),
                5 => format!("/_node/_local/_config/sweep/{}", self.string()),
                6 => "/_scheduler/jobs".into(),
                7 => "/_db_updates".into(),
                _ => format!("/{db}{tail}"),
            }
        }

        /// A query value: JSON of any kind, or bytes that are not.
        fn param_value(&mut self) -> String {
            let raw = match self.rng.gen_range(0..8) {
                0..=3 => self
                    .pick(&[
                        "true",
                        "false",
                        "ok",
                        "now",
                        "0",
                        "-1",
                        "1e400",
                        "normal",
                        "longpoll",
                        "continuous",
                        "all_docs",
                        "main_only",
                        "_view",
                        "_doc_ids",
                        "_selector",
                        "99999999999999999999",
                        "1",
                        "10",
                        "\"a\"",
                        "[\"a\"]",
                        "[\"a\",1]",
                    ])
                    .to_string(),
                4 if self.chance(0.2) => {
                    return self
                        .pick(&["%ff", "%", "%zz", "%22%5Cud800%22", "%5B%5B%5B"])
                        .to_string()
                }
                _ => self.value(2).to_string(),
            };
            raw.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect()
        }

        fn query(&mut self) -> String {
            let n = self.rng.gen_range(0..4);
            if n == 0 || self.chance(0.3) {
                return String::new();
            }
            let pairs: Vec<String> = (0..n)
                .map(|_| format!("{}={}", self.pick(PARAMS), self.param_value()))
                .collect();
            format!("?{}", pairs.join("&"))
        }

        /// A multipart/related document body: the JSON part, then one part per attachment
        /// that `follows`, with lengths that agree or not.
        fn multipart(&mut self, boundary: &str) -> Vec<u8> {
            let n = self.rng.gen_range(0..3);
            let mut atts = Map::new();
            for i in 0..n {
                let len = if self.chance(0.8) {
                    json!(5)
                } else {
                    self.number()
                };
                atts.insert(
                    format!("f{i}"),
                    json!({"follows": true, "length": len,
                                                    "content_type": "text/plain"}),
                );
            }
            let doc = json!({"_id": self.string(), "_attachments": atts});
            let mut out =
                format!("--{boundary}\r\nContent-Type: application/json\r\n\r\n{doc}").into_bytes();
            for _ in 0..n + self.rng.gen_range(0..2) {
                out.extend_from_slice(format!("\r\n--{boundary}\r\n\r\nhello").as_bytes());
            }
            out.extend_from_slice(format!("\r\n--{boundary}--").as_bytes());
            out
        }

        /// Byte-level damage: flips, cuts, insertions and repeats.
        fn mutate(&mut self, mut body: Vec<u8>) -> Vec<u8> {
            for _ in 0..self.rng.gen_range(1..4) {
                if body.is_empty() {
                    body.push(self.rng.gen());
                    continue;
                }
                let at = self.rng.gen_range(0..body.len());
                match self.rng.gen_range(0..5) {
                    0 => body[at] = self.rng.gen(),
                    1 => body.truncate(at),
                    2 => body.insert(at, *b"{}[]\",:\\\x00\xff".choose(&mut self.rng).unwrap()),
                    3 => {
                        let end = (at + self.rng.gen_range(1..16)).min(body.len());
                        let piece = body[at..end].to_vec();
                        body.splice(at..at, piece);
                    }
                    _ => {
                        body.remove(at);
                    }
                }
            }
            body
        }

        /// A method the route answers, so that most requests get past the router.
        fn method_for(&mut self, path: &str) -> &'static str {
            let last = path.rsplit('/').next().unwrap_or("");
            let segments = path.matches('/').count();
            let choices: &[&'static str] = match last {
                "_bulk_docs" | "_bulk_get" | "_find" | "_explain" | "_revs_diff" | "_purge"
                | "queries" | "_compact" | "_replicate" => &["POST"],
                "_index" => &["GET", "POST"],
                "_security" => &["GET", "PUT"],
                "_all_docs" | "_changes" | "_local_docs" => &["GET", "POST"],
                _ if path.contains("/_view/") => &["GET", "POST"],
                _ if path.contains("/_update/") => &["POST", "PUT"],
                _ if path.contains("/_show/") || path.contains("/_list/") => &["GET", "POST"],
                _ if segments == 1 => &["GET", "PUT", "POST", "HEAD", "DELETE"],
                _ => &["GET", "PUT", "PUT", "DELETE", "COPY", "HEAD"],
            };
            choices.choose(&mut self.rng).unwrap()
        }

        pub fn draw(&mut self, auth: &str) -> Drawn {
            const METHODS: &[&str] = &[
                "GET", "GET", "GET", "PUT", "PUT", "POST", "POST", "POST", "DELETE", "HEAD",
                "COPY", "OPTIONS", "PATCH",
            ];
            let path = self.path();
            let method = if self.chance(0.7) {
                self.method_for(&path)
            } else {
                self.pick(METHODS)
            }
            .to_string();
            let target = format!("{path}{}", self.query());
            let mut headers = Vec::new();
            match self.rng.gen_range(0..20) {
                0 => {}
                1 => headers.push(("Authorization".into(), "Basic Zno6d3Jvbmc=".into())),
                _ => headers.push(("Authorization".into(), auth.to_string())),
            }
            let boundary = "xyzzy";
            let mut body = Vec::new();
            let mut multipart = false;
            if matches!(method.as_str(), "PUT" | "POST") || self.chance(0.1) {
                if method == "PUT" && self.chance(0.1) {
                    multipart = true;
                    body = self.multipart(boundary);
                } else if path.matches('/').count() >= 3 && self.chance(0.15) {
                    body = (0..self.rng.gen_range(0..300))
                        .map(|_| self.rng.gen())
                        .collect();
                } else {
                    body = self.body_for(&path).to_string().into_bytes();
                }
                if self.chance(0.3) {
                    body = self.mutate(body);
                }
            }
            let ct = if multipart {
                format!("multipart/related; boundary=\"{boundary}\"")
            } else {
                self.pick(&[
                    "application/json",
                    "application/json",
                    "application/json",
                    "text/plain",
                    "application/octet-stream",
                    "multipart/related",
                    "application/x-www-form-urlencoded",
                    "",
                    "application/json; charset=latin1",
                ])
                .to_string()
            };
            if !ct.is_empty() {
                headers.push(("Content-Type".into(), ct));
            }
            if self.chance(0.05) {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::Write::write_all(&mut gz, &body).unwrap();
                body = gz.finish().unwrap();
                if self.chance(0.3) {
                    body = self.mutate(body);
                }
                headers.push(("Content-Encoding".into(), "gzip".into()));
            }
            for (name, p) in [
                ("If-Match", 0.05),
                ("Range", 0.05),
                ("Destination", 0.05),
                ("Accept", 0.1),
                ("X-Couch-Full-Commit", 0.02),
            ] {
                if self.chance(p) {
                    let v = match name {
                        "Range" => format!(
                            "bytes={}-{}",
                            self.rng.gen_range(-3i64..9),
                            self.pick(&["", "2", "999999999999", "-1"])
                        ),
                        "Accept" => self
                            .pick(&[
                                "application/json",
                                "multipart/mixed",
                                "multipart/related",
                                "text/html",
                                "*/*;q=x",
                            ])
                            .to_string(),
                        "Destination" => format!("{}?rev={}", self.string(), self.string()),
                        _ => self.string(),
                    };
                    let v: String = v.chars().filter(|c| !c.is_control()).collect();
                    headers.push((name.to_string(), v));
                }
            }
            Drawn {
                method,
                target,
                headers,
                body,
                length: !self.chance(0.01),
            }
        }
    }
}

#[test]
fn generated_requests_get_no_5xx() {
    use rand::SeedableRng;
    let count: u64 = std::env::var("SWEEP_FUZZ_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("SWEEP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("generated sweep: {count} requests, SWEEP_SEED={seed}");
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path());
    let host = s.addr().to_string();
    let auth = basic(ADMIN.0, ADMIN.1);
    s.create_db("keep");
    for i in 0..20 {
        s.put(&format!("/keep/d{i}"), &json!({"i": i}).to_string());
    }
    s.put(
        "/keep/_design/k",
        r#"{"views": {"v": {"map": "function(doc) { emit(doc._id, doc.i); }"}}}"#,
    );
    let before = snapshot(&s);
    populate(&s);
    let mut g = generated::Gen {
        rng: rand::rngs::StdRng::seed_from_u64(seed),
    };
    let mut verdicts = Verdicts::new();
    for n in 0..count {
        let d = g.draw(&auth);
        let req = Req {
            method: &d.method,
            target: d.target.clone(),
            headers: d.headers,
            body: d.body,
            length: d.length,
        };
        let patience = if d.length { WELL_FRAMED } else { BROKEN };
        let body = String::from_utf8_lossy(&req.body[..req.body.len().min(200)]).into_owned();
        let what = format!("#{n} {} {:.200} body={body}", d.method, d.target);
        verdicts.record(&what, ask(&host, &req, patience));
        if n % 500 == 499 {
            // Fresh sacrificial databases: random edits may have left their design
            // documents in any state.
            s.delete("/t");
            s.delete("/p");
            populate(&s);
        }
    }
    verdicts.finish(&format!("generated sweep (SWEEP_SEED={seed})"));
    assert_eq!(s.get("/_up").status, 200);
    let after = snapshot(&s);
    assert_eq!(after.0, before.0, "keep's documents changed");
    assert_eq!(after.2, before.2, "keep's view changed");
    assert_eq!(s.put("/keep/after", r#"{"ok": true}"#).status, 201);
}
