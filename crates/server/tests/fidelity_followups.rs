//! CouchDB 3.5 fidelity follow-ups: live `_changes` feeds byte for byte, `_changes`
//! parameter names, design document checks, who gets 401 or 403, `Connection: close`,
//! `_design_docs/queries`, view `_info`, and new document ids. Each test states CouchDB's
//! exact answer (sources in /work/notes/follow.md).

mod common;
use common::{basic, Resp, Server, ADMIN};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn sj(r: &Resp) -> (u16, Value) {
    (r.status, r.json())
}

fn err(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

/// A request on its own socket whose answer is read as it arrives.
struct Live {
    sock: TcpStream,
    raw: Vec<u8>,
    /// Where the body starts in `raw`.
    body_at: usize,
}

impl Live {
    /// Sends `method path` as the admin (with `body` as JSON when given).
    fn open(s: &Server, method: &str, path: &str, body: Option<&str>) -> Live {
        let host = s.url.trim_start_matches("http://");
        let mut sock = TcpStream::connect(host).unwrap();
        // Only a guard against a hang: every read below expects bytes that are due.
        sock.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let body = body.unwrap_or("");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            basic(ADMIN.0, ADMIN.1),
            body.len()
        );
        sock.write_all(head.as_bytes()).unwrap();
        Live {
            sock,
            raw: Vec::new(),
            body_at: 0,
        }
    }

    fn more(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        let n = self
            .sock
            .read(&mut buf)
            .expect("the server answers in time");
        self.raw.extend_from_slice(&buf[..n]);
        n > 0
    }

    /// The status and headers (names lowercased).
    fn head(&mut self) -> (u16, Vec<(String, String)>) {
        let end = loop {
            if let Some(i) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            assert!(self.more(), "connection closed before the headers");
        };
        self.body_at = end + 4;
        let text = String::from_utf8(self.raw[..end].to_vec()).unwrap();
        let mut lines = text.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_lowercase(), v.to_string()))
            .collect();
        (status.parse().unwrap(), headers)
    }

    /// The chunked body received so far, and whether its last chunk has come.
    fn dechunked(&self) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut at = self.body_at;
        let raw = &self.raw;
        loop {
            let Some(eol) = raw[at..].windows(2).position(|w| w == b"\r\n") else {
                return (out, false);
            };
            let size = std::str::from_utf8(&raw[at..at + eol]).unwrap();
            let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
            let data = at + eol + 2;
            if raw.len() < data + size + 2 {
                return (out, false);
            }
            if size == 0 {
                return (out, true);
            }
            out.extend_from_slice(&raw[data..data + size]);
            at = data + size + 2;
        }
    }

    /// Reads until the body received so far satisfies `enough`; returns it.
    fn body_until(&mut self, enough: impl Fn(&[u8]) -> bool) -> String {
        loop {
            let (body, done) = self.dechunked();
            if enough(&body) || done {
                return String::from_utf8(body).unwrap();
            }
            assert!(self.more(), "connection closed mid-body");
        }
    }

    /// Reads the whole body.
    fn body(&mut self) -> String {
        loop {
            let (body, done) = self.dechunked();
            if done {
                return String::from_utf8(body).unwrap();
            }
            assert!(self.more(), "connection closed mid-body");
        }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The database's update seq as JSON text (a quoted string).
fn update_seq(s: &Server, db: &str) -> String {
    s.get(&format!("/{db}")).json()["update_seq"].to_string()
}

/// A `_changes` row as CouchDB encodes it.
fn row(seq: &str, id: &str, rev: &str) -> String {
    format!(r#"{{"seq":{seq},"id":"{id}","changes":[{{"rev":"{rev}"}}]}}"#)
}

fn put_rev(s: &Server, path: &str, body: &str) -> String {
    let r = s.put(path, body);
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["rev"].as_str().unwrap().to_string()
}

// ---- _changes feeds -------------------------------------------------------------------

#[test]
fn normal_changes_rows_are_separated_by_comma_crlf() {
    let s = Server::start();
    s.create_db("db");
    let ra = put_rev(&s, "/db/a", "{}");
    let rb = put_rev(&s, "/db/b", "{}");
    let r = s.get("/db/_changes");
    assert_eq!(r.status, 200);
    let v = r.json();
    let seqs: Vec<String> = (0..2).map(|i| v["results"][i]["seq"].to_string()).collect();
    assert_eq!(
        r.text,
        format!(
            "{{\"results\":[\n{},\r\n{}\n],\n\"last_seq\":{},\"pending\":0}}\n",
            row(&seqs[0], "a", &ra),
            row(&seqs[1], "b", &rb),
            seqs[1]
        )
    );
}

#[test]
fn longpoll_sends_its_headers_and_a_newline_before_waiting() {
    let s = Server::start();
    s.create_db("db");
    put_rev(&s, "/db/a", "{}");
    let mut lp = Live::open(&s, "GET", "/db/_changes?feed=longpoll&since=now", None);
    let (status, headers) = lp.head();
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "transfer-encoding"), Some("chunked"));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(header(&headers, "cache-control"), Some("must-revalidate"));
    assert_eq!(header(&headers, "content-length"), None);
    // fabric's waiting_for_updates: nothing sent yet, so a newline goes out now
    let waiting = "{\"results\":[\n\n";
    assert_eq!(lp.body_until(|b| b.len() >= waiting.len()), waiting);
    // the update wakes the feed: CouchDB's timeout callback sends a newline, then the row
    let rev = put_rev(&s, "/db/b", "{}");
    let seq = update_seq(&s, "db");
    assert_eq!(
        lp.body(),
        format!(
            "{waiting}\n{}\n],\n\"last_seq\":{seq},\"pending\":0}}\n",
            row(&seq, "b", &rev)
        )
    );
}

#[test]
fn idle_longpoll_ends_on_timeout_with_couchdb_bytes() {
    let s = Server::start();
    s.create_db("db");
    put_rev(&s, "/db/a", "{}");
    let seq = update_seq(&s, "db");
    let r = s.get("/db/_changes?feed=longpoll&since=now&timeout=100");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(
        r.text,
        format!("{{\"results\":[\n\n\n],\n\"last_seq\":{seq},\"pending\":0}}\n")
    );
    // rows already there: no waiting, no newlines
    let r = s.get("/db/_changes?feed=longpoll&since=0&timeout=100");
    let v = r.json();
    assert_eq!(
        r.text,
        format!(
            "{{\"results\":[\n{}\n],\n\"last_seq\":{seq},\"pending\":0}}\n",
            row(
                &seq,
                "a",
                v["results"][0]["changes"][0]["rev"].as_str().unwrap()
            )
        )
    );
}

#[test]
fn longpoll_with_heartbeat_sends_newlines_and_outlives_its_timeout() {
    let s = Server::start();
    s.create_db("db");
    let mut lp = Live::open(
        &s,
        "GET",
        "/db/_changes?feed=longpoll&since=now&heartbeat=20&timeout=50",
        None,
    );
    assert_eq!(lp.head().0, 200);
    // the waiting newline, then a heartbeat every 20 ms: ten newlines need more than the
    // 50 ms timeout, and the feed is still open
    let open = "{\"results\":[\n";
    let beats = lp.body_until(|b| b.len() >= open.len() + 10);
    assert_eq!(beats, format!("{open}{}", "\n".repeat(10)));
    let rev = put_rev(&s, "/db/x", "{}");
    let seq = update_seq(&s, "db");
    let body = lp.body();
    let tail = format!(
        "{}\n],\n\"last_seq\":{seq},\"pending\":0}}\n",
        row(&seq, "x", &rev)
    );
    let newlines = body
        .strip_prefix(open)
        .and_then(|b| b.strip_suffix(&tail))
        .unwrap_or_else(|| panic!("{body:?}"));
    assert!(newlines.len() > 10 && newlines.bytes().all(|b| b == b'\n'));
}

#[test]
fn continuous_and_eventsource_feeds_send_newlines_while_waiting() {
    let s = Server::start();
    s.create_db("db");
    put_rev(&s, "/db/a", "{}");
    // nothing new before the timeout: the waiting newline, then last_seq
    let seq = update_seq(&s, "db");
    let r = s.get("/db/_changes?feed=continuous&since=now&timeout=100");
    assert_eq!(r.text, format!("\n{{\"last_seq\":{seq},\"pending\":0}}\n"));
    // waiting newline, the newline of the wake-up, the row, and the end at `limit`
    let mut c = Live::open(
        &s,
        "GET",
        "/db/_changes?feed=continuous&since=now&limit=1",
        None,
    );
    assert_eq!(c.head().0, 200);
    assert_eq!(c.body_until(|b| !b.is_empty()), "\n");
    let rev = put_rev(&s, "/db/b", "{}");
    let seq = update_seq(&s, "db");
    assert_eq!(
        c.body(),
        format!(
            "\n\n{}\n{{\"last_seq\":{seq},\"pending\":0}}\n",
            row(&seq, "b", &rev)
        )
    );
    // eventsource: its wake-up is a heartbeat event
    let mut es = Live::open(
        &s,
        "GET",
        "/db/_changes?feed=eventsource&since=now&limit=1",
        None,
    );
    let (status, headers) = es.head();
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    assert_eq!(header(&headers, "cache-control"), Some("no-cache"));
    assert_eq!(es.body_until(|b| !b.is_empty()), "\n");
    let rev = put_rev(&s, "/db/c", "{}");
    let seq = update_seq(&s, "db");
    assert_eq!(
        es.body(),
        format!(
            "\nevent: heartbeat\ndata: \n\ndata: {}\nid: {seq}\n\n",
            row(&seq, "c", &rev)
        )
    );
}

#[test]
fn changes_parameter_names_are_case_insensitive_and_later_values_win() {
    let s = Server::start();
    s.create_db("db");
    put_rev(&s, "/db/a", r#"{"n":1}"#);
    put_rev(&s, "/db/b", r#"{"n":2}"#);
    let get = |q: &str| s.get(&format!("/db/_changes?{q}"));
    let ids = |r: &Resp| -> Vec<String> {
        r.json()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    // names lowercased (chttpd_db parse_changes_query)
    let r = get("LIMIT=1&Include_Docs=true&DESCENDING=true");
    assert_eq!(ids(&r), ["b"]);
    assert_eq!(r.json()["results"][0]["doc"]["n"], 2);
    // a later value replaces an earlier one ...
    assert_eq!(ids(&get("limit=1&limit=2")), ["a", "b"]);
    assert_eq!(ids(&get("since=now&since=0")), ["a", "b"]);
    assert_eq!(ids(&get("since=0&last-event-id=now")), Vec::<String>::new());
    // ... but "true" switches an option on for good
    assert_eq!(ids(&get("descending=true&descending=false")), ["b", "a"]);
    // `filter` is folded, `doc_ids` is read as sent
    assert_eq!(ids(&get("FILTER=_doc_ids&doc_ids=%5B%22b%22%5D")), ["b"]);
    assert_eq!(
        sj(&get("filter=_doc_ids&DOC_IDS=%5B%22b%22%5D")),
        err(
            400,
            "bad_request",
            "`doc_ids` filter parameter is not a list of doc ids."
        )
    );
    // the first bad value is the error, even when a later one is good
    assert_eq!(
        sj(&get("heartbeat=x&heartbeat=10")),
        err(
            400,
            "bad_request",
            "Invalid heartbeat value. Expecting a positive integer value (in milliseconds)."
        )
    );
    assert_eq!(
        sj(&get("FEED=sideways")),
        err(
            400,
            "bad_request",
            "Supported `feed` types: normal, continuous, live, longpoll, eventsource"
        )
    );
}
