//! CouchDB 3.5 fidelity follow-ups: live `_changes` feeds byte for byte, `_changes`
//! parameter names, design document checks, who gets 401 or 403, `Connection: close`,
//! `_design_docs/queries`, view `_info`, and new document ids. Each test states CouchDB's
//! exact answer (sources in /work/notes/follow.md).

use crate::common;
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

// ---- design documents -----------------------------------------------------------------

#[test]
fn design_documents_that_do_not_compile_name_the_function_and_view() {
    let s = Server::start();
    s.create_db("db");
    // couch_query_servers:try_compile; the query server's own message follows the colon
    let r = s.put("/db/_design/foo", r#"{"views":{"bar":{"map":"baz"}}}"#);
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"], "compilation_error");
    let reason = r.json()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("Compilation of the map function in the 'bar' view failed: ")
            && reason.ends_with(" (baz)"),
        "{reason}"
    );
    let r = s.put(
        "/db/_design/foo",
        r#"{"views":{"red":{"map":"function(doc){}","reduce":"function(k, v) {"}}}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"], "compilation_error");
    let reason = r.json()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("Compilation of the reduce function in the 'red' view failed: "),
        "{reason}"
    );
    // the same error in a _bulk_docs row
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"docs":[{"_id":"_design/b","views":{"bar":{"map":"baz"}}}]}"#,
    );
    assert_eq!(r.status, 201);
    let row = &r.json()[0];
    assert_eq!(row["id"], "_design/b");
    assert_eq!(row["error"], "compilation_error");
    assert!(row["reason"]
        .as_str()
        .unwrap()
        .starts_with("Compilation of the map function in the 'bar' view failed: "));
}

#[test]
fn design_document_members_are_type_checked_on_save() {
    let s = Server::start();
    s.create_db("db");
    let put = |body: Value| sj(&s.put("/db/_design/d", &body.to_string()));
    let bad = |reason: &str| err(400, "invalid_design_doc", reason);
    let wrong = |path: &str, ty: &str| bad(&format!("`{path}` field must have {ty} type"));
    assert_eq!(put(json!({"filters": "x"})), wrong("filters", "object"));
    assert_eq!(
        put(json!({"filters": {"f": 1}})),
        wrong("filters.f", "string or object")
    );
    assert_eq!(put(json!({"language": 1})), wrong("language", "string"));
    assert_eq!(put(json!({"lists": []})), wrong("lists", "object"));
    assert_eq!(
        put(json!({"lists": {"l": null}})),
        wrong("lists.l", "string or object")
    );
    assert_eq!(put(json!({"options": "x"})), wrong("options", "object"));
    assert_eq!(
        put(json!({"options": {"include_design": "yes"}})),
        wrong("options.include_design", "boolean")
    );
    assert_eq!(
        put(json!({"rewrites": 1})),
        wrong("rewrites", "array or string")
    );
    assert_eq!(
        put(json!({"shows": {"s": true}})),
        wrong("shows.s", "string or object")
    );
    assert_eq!(put(json!({"updates": "x"})), wrong("updates", "object"));
    assert_eq!(
        put(json!({"validate_doc_update": {}})),
        wrong("validate_doc_update", "string")
    );
    assert_eq!(put(json!({"views": "x"})), wrong("views", "object"));
    assert_eq!(
        put(json!({"views": {"lib": []}})),
        wrong("views.lib", "object")
    );
    assert_eq!(put(json!({"views": {"v": []}})), wrong("views.v", "object"));
    assert_eq!(
        put(json!({"views": {"v": {"map": 1}}})),
        wrong("views.v.map", "string")
    );
    assert_eq!(
        put(json!({"views": {"v": {"map": "function(doc){}", "reduce": []}}})),
        wrong("views.v.reduce", "string")
    );
    assert_eq!(
        put(json!({"views": {"v": {"reduce": "_count"}}})),
        bad("View `v` must contain map function")
    );
    assert_eq!(
        put(json!({"views": {"v": {"map": "function(doc){}", "reduce": "_median"}}})),
        bad("`_median` is not a supported reduce function.")
    );
    // the checks hold for every language; only JavaScript is compiled
    assert_eq!(
        put(json!({"language": "erlang", "filters": 1})),
        wrong("filters", "object")
    );
    assert_eq!(
        s.put(
            "/db/_design/e",
            r#"{"language":"erlang","views":{"v":{"map":"fun({Doc}) -> ok end."}}}"#
        )
        .status,
        201
    );
    // well-typed members are stored
    let good = json!({
        "filters": {"f": "function(doc, req) { return true; }"},
        "lists": {}, "shows": {"s": "function(doc, req) {}"}, "updates": {},
        "rewrites": [], "validate_doc_update": "function(n, o, u) {}",
        "options": {"local_seq": true},
        "views": {"lib": {"m": "exports.x = 1;"}, "v": {"map": "function(doc){}", "reduce": "_sum"}}
    });
    assert_eq!(s.put("/db/_design/d", &good.to_string()).status, 201);
}

// ---- who gets 401, who 403 ------------------------------------------------------------

const FAST: &str = "[chttpd_auth]\niterations = 1\n";

#[test]
fn anonymous_sign_up_meets_the_admin_only_users_database() {
    let s = Server::start_with_ini(FAST);
    // CouchDB 3's default_security applies to _users when it is created
    assert_eq!(
        s.get("/_users/_security").json(),
        json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
    );
    let doc = json!({"name": "joe", "password": "pw", "roles": [], "type": "user"});
    let not_member = err(
        401,
        "unauthorized",
        "You are not authorized to access this db.",
    );
    let r = s.anon(
        "PUT",
        "/_users/org.couchdb.user:joe",
        Some(&doc.to_string()),
        &[],
    );
    assert_eq!(sj(&r), not_member);
    let r = s.anon(
        "POST",
        "/_users",
        Some(&json!({"_id": "org.couchdb.user:joe", "name": "joe", "password": "pw", "roles": [], "type": "user"}).to_string()),
        &[],
    );
    assert_eq!(sj(&r), not_member);
    assert_eq!(s.get("/_users/org.couchdb.user:joe").status, 404);
    // a user an admin created is no member either
    s.add_user("tom", "mp3", &[]);
    let forbidden = err(403, "forbidden", "You are not allowed to access this db.");
    assert_eq!(
        sj(&s.as_user(("tom", "mp3"), "GET", "/_users/org.couchdb.user:tom", None)),
        forbidden
    );
}

#[test]
fn logged_in_users_get_401_on_admin_only_routes() {
    let s = Server::start_with_ini(FAST);
    s.add_user("bob", "bobpw", &[]);
    s.create_db("db");
    assert_eq!(s.put("/db/_security", "{}").status, 200);
    let not_admin = err(401, "unauthorized", "You are not a server admin.");
    let bob = |method: &str, path: &str, body: Option<&str>| {
        sj(&s.as_user(("bob", "bobpw"), method, path, body))
    };
    for (method, path) in [
        ("GET", "/_all_dbs"),
        ("GET", "/_dbs_info"),
        ("PUT", "/newdb"),
        ("DELETE", "/db"),
        ("GET", "/_active_tasks"),
        ("GET", "/_db_updates"),
        ("GET", "/_membership"),
        ("GET", "/_node/_local/_config"),
        ("GET", "/_config"),
        ("GET", "/_scheduler/jobs"),
    ] {
        assert_eq!(bob(method, path, None), not_admin, "{method} {path}");
    }
    // require_db_admin: a 401 for every non-admin, members of a public db included
    let not_db_admin = err(401, "unauthorized", "You are not a server or db admin.");
    assert_eq!(bob("POST", "/db/_compact", Some("")), not_db_admin);
    assert_eq!(bob("POST", "/db/_view_cleanup", Some("")), not_db_admin);
    assert_eq!(
        sj(&s.anon("POST", "/db/_compact", Some(""), &[])),
        not_db_admin
    );
    // database-level checks keep 401 for anonymous and 403 for a named user
    let sec = json!({"admins": {"names": ["ann"]}, "members": {"names": ["ann"]}});
    assert_eq!(s.put("/db/_security", &sec.to_string()).status, 200);
    assert_eq!(
        bob("GET", "/db", None),
        err(403, "forbidden", "You are not allowed to access this db.")
    );
    assert_eq!(
        bob("PUT", "/db/_security", Some("{}")),
        err(403, "forbidden", "You are not allowed to access this db.")
    );
}

// ---- Connection: close ----------------------------------------------------------------

/// Sends one request on `sock` and reads its answer (sized or chunked).
fn exchange(
    sock: &mut TcpStream,
    s: &Server,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let host = s.url.trim_start_matches("http://");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {}\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        basic(ADMIN.0, ADMIN.1),
        body.len()
    );
    sock.write_all(head.as_bytes()).unwrap();
    let mut live = Live {
        sock: sock.try_clone().unwrap(),
        raw: Vec::new(),
        body_at: 0,
    };
    let (status, headers) = live.head();
    let text = match header(&headers, "content-length") {
        Some(n) => {
            let n: usize = n.parse().unwrap();
            while live.raw.len() < live.body_at + n {
                assert!(live.more());
            }
            String::from_utf8(live.raw[live.body_at..live.body_at + n].to_vec()).unwrap()
        }
        None => live.body(),
    };
    (status, headers, text)
}

#[test]
fn connection_closes_only_when_the_body_was_left_unread() {
    let s = Server::start();
    s.create_db("db");
    let host = s.url.trim_start_matches("http://");
    let mut sock = TcpStream::connect(host).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let json = "application/json";
    let (status, headers, _) = exchange(&mut sock, &s, "PUT", "/db/x", json, r#"{"a":1}"#);
    assert_eq!(status, 201);
    assert_eq!(header(&headers, "connection"), None);
    // the body was read, then the write conflicted: the connection stays open
    let (status, headers, text) = exchange(&mut sock, &s, "PUT", "/db/x", json, r#"{"a":2}"#);
    assert_eq!(
        (status, serde_json::from_str::<Value>(&text).unwrap()),
        err(409, "conflict", "Document update conflict.")
    );
    assert_eq!(header(&headers, "connection"), None);
    let (status, _, _) = exchange(&mut sock, &s, "GET", "/db/x", json, "");
    assert_eq!(status, 200, "the same connection serves another request");
    // refused before its body was read: the answer closes the connection
    let (status, headers, text) = exchange(&mut sock, &s, "POST", "/db", "text/plain", "{}");
    assert_eq!(
        (status, serde_json::from_str::<Value>(&text).unwrap()),
        err(
            415,
            "bad_content_type",
            "Content-Type must be application/json"
        )
    );
    assert_eq!(header(&headers, "connection"), Some("close"));
    let mut rest = Vec::new();
    assert_eq!(sock.read_to_end(&mut rest).unwrap(), 0, "closed");
}

// ---- _design_docs/queries, _local_docs/queries ------------------------------------------

#[test]
fn design_and_local_docs_take_queries_like_all_docs() {
    let s = Server::start();
    s.create_db("db");
    for id in ["a", "b", "_design/x", "_design/y", "_local/l1", "_local/l2"] {
        assert_eq!(s.put(&format!("/db/{id}"), "{}").status, 201, "{id}");
    }
    for ns in ["_design_docs", "_local_docs", "_all_docs"] {
        let body = json!({"queries": [{}, {"limit": 1, "descending": true}, {"keys": ["_design/y", "_local/l1", "a"]}]});
        let r = s.post(&format!("/db/{ns}/queries"), &body.to_string());
        assert_eq!(r.status, 200, "{ns}: {}", r.text);
        let one = |q: &str| s.get(&format!("/db/{ns}?{q}")).json();
        let keys = "keys=%5B%22_design%2Fy%22%2C%22_local%2Fl1%22%2C%22a%22%5D";
        assert_eq!(
            r.json(),
            json!({"results": [one(""), one("limit=1&descending=true"), one(keys)]}),
            "{ns}"
        );
    }
    let r = s.get("/db/_design_docs/queries");
    assert_eq!(sj(&r), err(405, "method_not_allowed", "Only POST allowed"));
    assert_eq!(
        sj(&s.post("/db/_local_docs/queries", "{}")),
        err(
            400,
            "bad_request",
            "POST body must include `queries` parameter."
        )
    );
}

// ---- view _info -----------------------------------------------------------------------

#[test]
fn view_info_reports_the_purges_the_index_has_applied() {
    let s = Server::start();
    s.create_db("db");
    let ra = put_rev(&s, "/db/a", r#"{"v":1}"#);
    put_rev(&s, "/db/b", r#"{"v":2}"#);
    let ddoc = json!({"views": {"v": {"map": "function(doc) { emit(doc.v, null); }"}}});
    assert_eq!(s.put("/db/_design/d", &ddoc.to_string()).status, 201);
    let purge_seq = || s.get("/db/_design/d/_info").json()["view_index"]["purge_seq"].clone();
    assert_eq!(s.get("/db/_design/d/_view/v").json()["total_rows"], 2);
    assert_eq!(purge_seq(), json!(0));
    let r = s.post("/db/_purge", &json!({"a": [ra]}).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    // an integer (fabric_group_info sums the shards'), moved once the index has the purge
    assert_eq!(purge_seq(), json!(0));
    assert_eq!(s.get("/db/_design/d/_view/v").json()["total_rows"], 1);
    assert_eq!(purge_seq(), json!(1));
}

// ---- new document ids -----------------------------------------------------------------

#[test]
fn an_unknown_uuid_algorithm_fails_writes_that_need_an_id() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/_node/_local/_config/uuids/algorithm", r#""bogus""#);
    assert_eq!(r.status, 200, "{}", r.text);
    let bogus = err(500, "unknown_uuid_algorithm", "bogus");
    assert_eq!(sj(&s.get("/_uuids")), bogus);
    assert_eq!(sj(&s.post("/db", r#"{"a":1}"#)), bogus);
    assert_eq!(
        sj(&s.post("/db/_bulk_docs", r#"{"docs":[{"_id":"named"},{"a":1}]}"#)),
        bogus
    );
    // nothing was written; documents with ids are written as usual
    assert_eq!(s.get("/db").json()["doc_count"], 0);
    assert_eq!(s.post("/db", r#"{"_id":"named"}"#).status, 201);
    let r = s.post("/db/_bulk_docs", r#"{"docs":[{"_id":"n2"}]}"#);
    assert_eq!(r.status, 201);
    assert_eq!(r.json()[0]["ok"], true);
}
