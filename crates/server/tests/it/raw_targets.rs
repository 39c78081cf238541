//! Request targets with bytes that are not strictly legal in a URI, sent raw as curl sends
//! them, and mochiweb's line limits: the connection-level request head gate
//! (`settee_wire::head`). Expected answers are CouchDB 3.5.2's (notes §1, §2).

use crate::common;
use common::{split_responses, RawResp, Server};
use serde_json::{json, Value};

/// One request on its own connection (`Connection: close`).
fn ask(s: &Server, line: &[u8]) -> RawResp {
    let all = s.exchange(&s.raw_head(line, "Connection: close\r\n"));
    let mut r = split_responses(&all);
    assert_eq!(r.len(), 1, "{}", String::from_utf8_lossy(&all));
    r.remove(0)
}

fn ids(r: &RawResp) -> Vec<Value> {
    r.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].clone())
        .collect()
}

fn setup() -> Server {
    let s = Server::start();
    s.create_db("db");
    for id in ["a", "a%20b", "b", "c", "x%3Cy%3E", "a%60b", "%C3%A9"] {
        assert_eq!(
            s.put(&format!("/db/{id}"), r#"{"v":1}"#).status,
            201,
            "{id}"
        );
    }
    s
}

#[test]
fn json_and_unsafe_bytes_in_targets() {
    let s = setup();
    let r = ask(&s, br#"GET /_all_dbs?start_key="db"&limit=1 HTTP/1.1"#);
    assert_eq!((r.status, r.json()), (200, json!(["db"])));

    let r = ask(&s, br#"GET /db/_all_docs?startkey="a"&endkey="b" HTTP/1.1"#);
    assert_eq!(r.status, 200);
    assert_eq!(
        ids(&r),
        [json!("a"), json!("a b"), json!("a`b"), json!("b")]
    );

    let r = ask(&s, br#"GET /db/_all_docs?key={"a":1} HTTP/1.1"#);
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"total_rows": 7, "offset": 0, "rows": []}))
    );

    for (line, id) in [
        (&b"GET /db/x<y> HTTP/1.1"[..], "x<y>"),
        (b"GET /db/a`b HTTP/1.1", "a`b"),
        ("GET /db/é HTTP/1.1".as_bytes(), "é"),
    ] {
        let r = ask(&s, line);
        assert_eq!((r.status, r.json()["_id"].clone()), (200, json!(id)));
    }

    let r = ask(
        &s,
        "GET /db/_all_docs?keys=[\"x<y>\",\"a`b\",\"é\"] HTTP/1.1".as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert_eq!(ids(&r), [json!("x<y>"), json!("a`b"), json!("é")]);

    // Control bytes reach the router (CouchDB: no such document). (A raw `\xff` reaches it
    // too, as `%FF`; Settee refuses a non-UTF-8 id where CouchDB's GET says `missing`.)
    for line in [&b"GET /db/a\x01b HTTP/1.1"[..], b"GET /db/a\x7fb HTTP/1.1"] {
        let r = ask(&s, line);
        assert_eq!(
            (r.status, r.json()),
            (404, json!({"error": "not_found", "reason": "missing"})),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    // Not UTF-8 inside a JSON parameter.
    let r = ask(&s, b"GET /db/_all_docs?key=\"a\xc3\" HTTP/1.1");
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "invalid UTF-8 JSON"})
        )
    );
}

/// On one keep-alive connection: a rewritten request, then bodies framed by
/// Content-Length and chunked (whose bytes look like requests), then more rewritten ones.
#[test]
fn pipelined_requests_keep_their_framing() {
    let s = setup();
    let json_body = br#"{"v":"GET /db/x<y> HTTP/1.1"}"#;
    let mut sent = s.raw_head(br#"GET /db/_all_docs?key="x<y>" HTTP/1.1"#, "");
    sent.extend(s.raw_head(
        b"PUT /db/p<1> HTTP/1.1",
        &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            json_body.len()
        ),
    ));
    sent.extend_from_slice(json_body);
    sent.extend(s.raw_head(
        b"PUT /db/p`2 HTTP/1.1",
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
    ));
    sent.extend_from_slice(b"5;x=y\r\n{\"v\":\r\n");
    sent.extend_from_slice(b"19\r\n\"GET /a<b> HTTP/1.1\\r\\n\"}\r\n0\r\nX-Trailer: t\r\n\r\n");
    sent.extend(s.raw_head(b"GET /db/p<1> HTTP/1.1", ""));
    sent.extend(s.raw_head(b"GET /db/p`2 HTTP/1.1", "Connection: close\r\n"));
    let r = split_responses(&s.exchange(&sent));
    let got: Vec<(u16, Value)> = r.iter().map(|r| (r.status, r.json())).collect();
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(got[0].0, 200);
    assert_eq!(ids(&r[0]), [json!("x<y>")]);
    assert_eq!((got[1].0, &got[1].1["id"]), (201, &json!("p<1>")));
    assert_eq!((got[2].0, &got[2].1["id"]), (201, &json!("p`2")));
    assert_eq!(got[3].1["v"], "GET /db/x<y> HTTP/1.1");
    assert_eq!(got[4].1["v"], "GET /a<b> HTTP/1.1\r\n");
}

/// `400 Bad Request` as mochiweb writes it: no body, its own `Server`, then the close.
fn assert_mochiweb_400(all: &[u8], connection_close: bool) {
    let text = String::from_utf8_lossy(all);
    let close = if connection_close {
        "Connection: close\r\n"
    } else {
        ""
    };
    let want = regex::Regex::new(&format!(
        "^HTTP/1.1 400 Bad Request\r\n{close}Content-Length: 0\r\n\
         Date: [A-Z][a-z]{{2}}, \\d\\d [A-Z][a-z]{{2}} \\d{{4}} \\d\\d:\\d\\d:\\d\\d GMT\r\n\
         Server: MochiWeb/1.0 \\(Any of you quaids got a smint\\?\\)\r\n\r\n$"
    ))
    .unwrap();
    assert!(want.is_match(&text), "{text:?}");
}

/// A request line of 8190 bytes (before its CRLF) is taken, 8191 refused; a header line
/// of 8189 is taken, 8190 refused.
#[test]
fn line_limits() {
    let s = Server::start();
    let line = |len: usize| {
        let mut l = b"GET /_up?x=".to_vec();
        l.resize(len - b" HTTP/1.1".len(), b'a');
        l.extend_from_slice(b" HTTP/1.1");
        l
    };
    assert_eq!(ask(&s, &line(8190)).status, 200);
    assert_mochiweb_400(&s.exchange(&s.raw_head(&line(8191), "")), true);
    let header = |len: usize| format!("X-Long: {}\r\n", "a".repeat(len - 8));
    let head = |extra: &str| s.raw_head(b"GET /_up HTTP/1.1", extra);
    let ok = split_responses(&s.exchange(&head(&(header(8189) + "Connection: close\r\n"))));
    assert_eq!(ok[0].status, 200);
    assert_mochiweb_400(&s.exchange(&head(&header(8190))), false);
    assert_mochiweb_400(
        &s.exchange(&head(
            &("Connection: close\r\n".to_string() + &header(9000)),
        )),
        true,
    );
    // After an answered request on the same connection.
    let mut sent = head("");
    sent.extend(line(9000));
    let all = s.exchange(&sent);
    let at = all.windows(12).rposition(|w| w == b"HTTP/1.1 400").unwrap();
    assert_eq!(split_responses(&all[..at])[0].status, 200);
    assert_mochiweb_400(&all[at..], true);
}

/// Request lines Erlang's parser takes (CouchDB 3.5.2 answers them all): blanks in runs
/// between the parts, any `HTTP/x.y` (answered as 1.1, or 1.0), no version at all (answered
/// as 1.1 on a connection that closes). What it does not take gets a bare 400 here
/// (CouchDB leaves the connection hanging).
#[test]
fn lenient_request_lines() {
    let s = Server::start();
    for line in [
        &b"GET   /_up   HTTP/1.1"[..],
        b"GET\t/_up\tHTTP/1.1 ",
        b"GET /_up HTTP/1.2",
        b"GET /_up HTTP/3.0",
        b"GET /_up HTTP/1.10",
    ] {
        let r = ask(&s, line);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(line));
        assert_eq!(r.json()["status"], "ok");
    }
    for line in [&b"GET /_up HTTP/0.9"[..], b"GET /_up"] {
        // No `Connection: close` from the client: the server closes all the same.
        let all = s.exchange(&s.raw_head(line, ""));
        let r = split_responses(&all);
        assert_eq!((r.len(), r[0].status), (1, 200));
        assert_eq!(r[0].header("connection"), Some("close"));
    }
    for line in [
        &b" GET /_up HTTP/1.1"[..],
        b"GET /_up http/1.1",
        b"GET /_u p HTTP/1.1",
    ] {
        let r = ask(&s, line);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(line));
    }
}

/// mochiweb takes up to 999 header lines of up to 8191 bytes (the gate refuses beyond, as
/// `line_limits` and settee_wire's tests show); hyper alone would answer 431 past 100
/// headers or ~400 KB of head.
#[test]
fn many_and_long_headers() {
    let s = Server::start();
    let extra: String = (0..990)
        .map(|i| format!("X-H{i}: {}\r\n", "v".repeat(1000)))
        .collect();
    let all = s.exchange(&s.raw_head(b"GET /_up HTTP/1.1", &(extra + "Connection: close\r\n")));
    let r = split_responses(&all);
    assert_eq!((r.len(), r[0].status), (1, 200));
}
