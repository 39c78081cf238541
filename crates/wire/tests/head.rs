//! The request head gate through its public API: targets come out as `http::Uri` takes them
//! with only refused bytes encoded, framing survives pipelining and any split of the input,
//! and mochiweb's line limits are refused byte-exactly.

use proptest::prelude::*;
use settee_wire::head::{encode_target, Gate, Refusal, MAX_HEADER_LINE, MAX_REQUEST_LINE};

/// Feeds `input` in pieces cut at `cuts` (offsets, any order).
fn run(input: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<Refusal>) {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(0);
    points.push(input.len());
    points.sort_unstable();
    let mut gate = Gate::new();
    let mut out = Vec::new();
    let mut refusal = None;
    for w in points.windows(2) {
        if let Some(r) = gate.feed(&input[w[0]..w[1]], &mut out) {
            assert!(refusal.is_none(), "one refusal");
            refusal = Some(r);
        }
    }
    (out, refusal)
}

fn gate(input: &[u8]) -> (Vec<u8>, Option<Refusal>) {
    run(input, &[])
}

/// What httparse and `http::Uri` together accept as a request target.
fn hyper_takes(target: &[u8]) -> bool {
    std::str::from_utf8(target).is_ok()
        && target.iter().all(|&b| b > 0x20 && b != 0x7f)
        && http::Uri::try_from(target).is_ok()
}

/// `encoded` is `raw` with some bytes replaced by their `%XX`: the positions replaced.
fn replaced(raw: &[u8], encoded: &[u8]) -> Vec<usize> {
    let (mut j, mut at) = (0, Vec::new());
    for (i, &b) in raw.iter().enumerate() {
        if encoded.get(j) == Some(&b) {
            j += 1;
        } else {
            assert_eq!(
                &encoded[j..j + 3],
                format!("%{b:02X}").as_bytes(),
                "byte {i} of {raw:?}"
            );
            at.push(i);
            j += 3;
        }
    }
    assert_eq!(j, encoded.len());
    at
}

#[test]
fn targets_couchdb_takes() {
    let cases: &[(&[u8], &[u8])] = &[
        (
            b"/_all_dbs?start_key=\"db\"",
            b"/_all_dbs?start_key=%22db%22",
        ),
        (
            b"/db/_all_docs?key={\"a\":1}",
            b"/db/_all_docs?key={%22a%22:1}",
        ),
        (b"/db/a<b>c`d", b"/db/a%3Cb%3Ec%60d"),
        (b"/db/x|y^z[]{}\\\"", b"/db/x|y^z[]{}\\\""),
        (
            b"/db/_all_docs?startkey=\"a`|^\"",
            b"/db/_all_docs?startkey=%22a`|^%22",
        ),
        (b"/db/a\x01b\x7f", b"/db/a%01b%7F"),
        ("/db/é?k=é".as_bytes(), "/db/é?k=é".as_bytes()),
        (b"/db/\xff\xc3?k=\xe9", b"/db/%FF%C3?k=%E9"),
        (b"/db#frag\"<\x01", b"/db#frag\"<%01"),
        (b"/db?a#b\"", b"/db?a#b\""),
        (b"/db?x=%zz", b"/db?x=%zz"),
    ];
    for (raw, want) in cases {
        let got = encode_target(raw);
        assert_eq!(&*got, *want, "{}", String::from_utf8_lossy(raw));
        assert!(hyper_takes(&got));
    }
}

proptest! {
    /// Every target comes out as hyper takes it, and exactly the bytes hyper would refuse
    /// are encoded: putting any one of them back makes hyper refuse the target again.
    #[test]
    fn encoded_targets_are_taken_and_minimal(
        tail in proptest::collection::vec(
            prop_oneof![any::<u8>(), Just(b'?'), Just(b'#'), Just(b'"'), Just(b'%')], 0..24)
    ) {
        let mut raw = vec![b'/'];
        raw.extend(tail);
        let encoded = encode_target(&raw).into_owned();
        prop_assert!(hyper_takes(&encoded), "{:?} → {:?}", raw, encoded);
        let at = replaced(&raw, &encoded);
        for (k, &i) in at.iter().enumerate() {
            let mut back = encoded.clone();
            let j = i + 2 * k;
            back.splice(j..j + 3, [raw[i]]);
            prop_assert!(!hyper_takes(&back), "{:?}: byte {} needed no encoding", raw, i);
        }
    }
}

/// One request as a test writes it.
#[derive(Debug, Clone)]
struct Request {
    method: &'static str,
    target: Vec<u8>,
    http10: bool,
    /// Blank lines before the request line.
    blank: Vec<&'static [u8]>,
    headers: Vec<(String, String)>,
    body: Body,
    lf_only: bool,
}

#[derive(Debug, Clone)]
enum Body {
    None,
    Length(Vec<u8>),
    /// Chunks, an extension on each size line, trailers.
    Chunked(Vec<Vec<u8>>, bool, Vec<(String, String)>),
}

impl Request {
    /// The bytes a client sends (`target` as given) or hyper should see (`target` encoded).
    fn bytes(&self, encode: bool) -> Vec<u8> {
        let eol: &[u8] = if self.lf_only { b"\n" } else { b"\r\n" };
        let mut b = Vec::new();
        for blank in &self.blank {
            b.extend_from_slice(blank);
        }
        b.extend_from_slice(self.method.as_bytes());
        b.push(b' ');
        if encode {
            b.extend_from_slice(&encode_target(&self.target));
        } else {
            b.extend_from_slice(&self.target);
        }
        b.extend_from_slice(if self.http10 {
            b" HTTP/1.0"
        } else {
            b" HTTP/1.1"
        });
        b.extend_from_slice(eol);
        for (k, v) in &self.headers {
            b.extend_from_slice(format!("{k}: {v}").as_bytes());
            b.extend_from_slice(eol);
        }
        match &self.body {
            Body::None => {
                b.extend_from_slice(eol);
            }
            Body::Length(data) => {
                b.extend_from_slice(format!("Content-Length: {}", data.len()).as_bytes());
                b.extend_from_slice(eol);
                b.extend_from_slice(eol);
                b.extend_from_slice(data);
            }
            Body::Chunked(chunks, ext, trailers) => {
                b.extend_from_slice(b"Transfer-Encoding: chunked");
                b.extend_from_slice(eol);
                b.extend_from_slice(eol);
                for c in chunks.iter().filter(|c| !c.is_empty()) {
                    b.extend_from_slice(format!("{:x}", c.len()).as_bytes());
                    if *ext {
                        b.extend_from_slice(b" ;name=\"v a;l\"");
                    }
                    b.extend_from_slice(b"\r\n");
                    b.extend_from_slice(c);
                    b.extend_from_slice(b"\r\n");
                }
                b.extend_from_slice(b"0\r\n");
                for (k, v) in trailers {
                    b.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
                }
                b.extend_from_slice(b"\r\n");
            }
        }
        b
    }
}

fn target() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        // SP and HTAB separate the request line's parts (Erlang's parser).
        4 => any::<u8>().prop_filter("no SP, HTAB or LF", |b| !b" \t\n".contains(b)),
        1 => proptest::sample::select(b"\"<>`?#%{}|\r\xc3\xa9".to_vec()),
    ];
    proptest::collection::vec(byte, 0..40).prop_map(|t| {
        let mut v = vec![b'/'];
        v.extend(t);
        v
    })
}

/// Bodies are bytes that look like requests, to catch a gate that rewrites inside them.
fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        Just(b"GET /a<b> HTTP/1.1\r\n\r\n".to_vec()),
        Just(b"\r\n0\r\n\r\n".to_vec()),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    let header = ("X-[A-Za-z]{1,8}", "[ -~]{0,20}")
        .prop_map(|(k, v): (String, String)| (k, v.trim().to_string()));
    let body = prop_oneof![
        Just(Body::None),
        body_bytes().prop_map(Body::Length),
        (
            proptest::collection::vec(body_bytes(), 0..4),
            any::<bool>(),
            proptest::collection::vec(header.clone(), 0..2)
        )
            .prop_map(|(c, e, t)| Body::Chunked(c, e, t)),
    ];
    (
        proptest::sample::select(vec!["GET", "PUT", "POST", "COPY", "DELETE", "get"]),
        target(),
        any::<bool>(),
        proptest::collection::vec(proptest::sample::select(vec![&b"\r\n"[..], b"\n"]), 0..2),
        proptest::collection::vec(header, 0..4),
        body,
        any::<bool>(),
    )
        .prop_map(|(method, target, http10, blank, headers, body, lf_only)| {
            // HTTP/1.0 has no chunked bodies (hyper refuses them).
            let body = match body {
                Body::Chunked(..) if http10 => Body::None,
                b => b,
            };
            Request {
                method,
                target,
                http10,
                blank,
                headers,
                body,
                lf_only,
            }
        })
}

proptest! {
    /// Any pipeline of framable requests, cut anywhere, comes out as the same requests
    /// with only their targets encoded.
    #[test]
    fn pipelines_keep_their_framing(
        requests in proptest::collection::vec(request(), 1..5),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let sent: Vec<u8> = requests.iter().flat_map(|r| r.bytes(false)).collect();
        let want: Vec<u8> = requests.iter().flat_map(|r| r.bytes(true)).collect();
        let (out, refusal) = run(&sent, &cuts);
        prop_assert!(refusal.is_none());
        prop_assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&want));
        // What the gate emits, it passes again unchanged.
        prop_assert_eq!(gate(&out).0, out);
    }
}

#[test]
fn bodies_are_never_rewritten() {
    let body = b"GET /a<b> HTTP/1.1\r\n\r\n";
    let sent = [
        format!(
            "PUT /db/d HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
        body,
        b"GET /x<y> HTTP/1.1\r\n\r\n",
    ]
    .concat();
    let (out, _) = gate(&sent);
    assert!(out.ends_with(b"GET /a<b> HTTP/1.1\r\n\r\nGET /x%3Cy%3E HTTP/1.1\r\n\r\n"));
}

/// Messages the gate cannot frame leave the rest of the connection to hyper, unchanged.
#[test]
fn unsure_framing_passes_through() {
    let next = b"GET /a<b> HTTP/1.1\r\n\r\n";
    let heads: &[&[u8]] = &[
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nContent-Length: 7, 7\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"PUT /d HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /d HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
        b"CONNECT /d HTTP/1.1\r\n\r\n",
        b"GET /d HTTP/1.1\r\n folded\r\n\r\n",
        b"GET /d HTTP/1.1\r\nX Bad: v\r\n\r\n",
        b"GET /a b HTTP/1.1\r\n\r\n",
        b" GET /d HTTP/1.1\r\n\r\n",
        b"GET /d http/1.1\r\n\r\n",
        b"GET /d HTTP/1\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1 2\r\nx\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;a\nb\r\nx\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: v\rx",
    ];
    for head in heads {
        let sent = [*head, next].concat();
        let (out, refusal) = gate(&sent);
        assert!(refusal.is_none());
        assert!(
            out.ends_with(next),
            "{}: {}",
            String::from_utf8_lossy(head),
            String::from_utf8_lossy(&out)
        );
    }
}

/// Request lines Erlang's parser takes and hyper would not: blanks in runs, any
/// `HTTP/x.y`, no version at all (HTTP/0.9, answered on a closing connection).
#[test]
fn lenient_request_lines() {
    let cases: &[(&[u8], &[u8])] = &[
        (b"GET   /a<   HTTP/1.1\r\n", b"GET /a%3C HTTP/1.1\r\n"),
        (b"GET\t/d\tHTTP/1.1 \r\n", b"GET /d HTTP/1.1\r\n"),
        (b"GET /d HTTP/1.2\r\n", b"GET /d HTTP/1.1\r\n"),
        (b"GET /d HTTP/10.0\r\n", b"GET /d HTTP/1.1\r\n"),
        (b"GET /d HTTP/001.000\n", b"GET /d HTTP/1.0\n"),
        (
            b"GET /d HTTP/0.9\r\n",
            b"GET /d HTTP/1.1\r\nConnection: close\r\n",
        ),
        (b"GET /d\r\n", b"GET /d HTTP/1.1\r\nConnection: close\r\n"),
    ];
    for (line, want) in cases {
        let (out, refusal) = gate(&[*line, b"Host: x\r\n\r\n".as_slice()].concat());
        assert!(refusal.is_none());
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&[*want, b"Host: x\r\n\r\n".as_slice()].concat())
        );
    }
}

/// Framing the gate follows, then a rewritten request after it.
#[test]
fn framed_messages_continue() {
    let next = b"GET /a<b> HTTP/1.1\r\n\r\n";
    let heads: &[&[u8]] = &[
        b"PUT /d HTTP/1.1\r\ncontent-length:  3 \r\n\r\nabc",
        b"PUT /d HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        b"PUT /d HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\nA;x\r\n0123456789\r\n0\r\n\r\n",
        b"PUT /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\t \r\nx\r\n0\r\nA: b\r\nC: d\r\n\r\n",
        b"PUT /d HTTP/1.0\r\nContent-Length: 1\r\n\r\nx",
        b"GET * HTTP/1.1\r\n\r\n",
        b"GET http://h/a\"b HTTP/1.1\r\n\r\n",
        b"\r\n\n\r\nGET /d HTTP/1.1\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
    ];
    for head in heads {
        let sent = [*head, next].concat();
        let (out, refusal) = gate(&sent);
        assert!(refusal.is_none());
        let want = [*head, b"GET /a%3Cb%3E HTTP/1.1\r\n\r\n"].concat();
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
    }
}

fn line_of(len: usize, prefix: &str, suffix: &str) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.resize(len - suffix.len(), b'a');
    v.extend_from_slice(suffix.as_bytes());
    v
}

const REFUSED_LINE: Refusal = Refusal {
    http10: false,
    connection_close: true,
};

/// mochiweb's limits, measured on CouchDB 3.5.2: a request line of 8190 bytes before its
/// `\r\n` (8191 before a bare `\n`) is taken, one more is refused.
#[test]
fn request_line_limit() {
    for (eol, max) in [("\r\n", MAX_REQUEST_LINE - 2), ("\n", MAX_REQUEST_LINE - 1)] {
        for len in [max, max + 1] {
            let line = line_of(len, "GET /_up?x=", " HTTP/1.1");
            let sent = [&line[..], eol.as_bytes(), b"Host: x\r\n\r\n"].concat();
            let (out, refusal) = gate(&sent);
            if len == max {
                assert_eq!((out, refusal), (sent, None));
            } else {
                assert_eq!((out, refusal), (Vec::new(), Some(REFUSED_LINE)));
            }
        }
    }
    // Refused before the line ends, after what came before it.
    let first = b"GET /_up HTTP/1.1\r\n\r\n";
    let sent = [&first[..], &line_of(20_000, "GET /", "")].concat();
    assert_eq!(gate(&sent), (first.to_vec(), Some(REFUSED_LINE)));
}

/// A header line of 8189 bytes before `\r\n` (8190 before `\n`) is taken, one more is
/// refused; the answer says `Connection: close` for HTTP/1.0 or after `Connection: close`.
#[test]
fn header_line_limit() {
    for (eol, max) in [("\r\n", MAX_HEADER_LINE - 2), ("\n", MAX_HEADER_LINE - 1)] {
        for len in [max, max + 1] {
            let line = line_of(len, "X-Long: ", "");
            let head = format!("GET /_up HTTP/1.1{eol}Host: x{eol}");
            let sent = [head.as_bytes(), &line, eol.as_bytes(), eol.as_bytes()].concat();
            let (out, refusal) = gate(&sent);
            if len == max {
                assert_eq!((out, refusal), (sent, None));
            } else {
                assert_eq!(out, head.as_bytes());
                let keep = Refusal {
                    http10: false,
                    connection_close: false,
                };
                assert_eq!(refusal, Some(keep));
            }
        }
    }
    let long = line_of(9000, "X-Long: ", "\r\n");
    for (head, http10, close) in [
        ("GET / HTTP/1.1\r\nConnection: Close\r\n", false, true),
        ("GET / HTTP/1.1\r\n", false, false),
        ("GET / HTTP/1.0\r\n", true, true),
        ("GET / HTTP/1.0\r\nConnection: keep-alive\r\n", true, true),
    ] {
        let (_, refusal) = gate(&[head.as_bytes(), &long].concat());
        let want = Refusal {
            http10,
            connection_close: close,
        };
        assert_eq!(refusal, Some(want), "{head}");
    }
}

/// 999 header lines are taken; the 1000th is refused.
#[test]
fn header_count_limit() {
    for n in [999, 1000] {
        let mut sent = b"GET /_up HTTP/1.1\r\n".to_vec();
        for i in 0..n {
            sent.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        sent.extend_from_slice(b"\r\n");
        let (_, refusal) = gate(&sent);
        assert_eq!(refusal.is_some(), n == 1000, "{n}");
    }
}

#[test]
fn refusal_bytes() {
    let date = "Fri, 27 Nov 2026 05:43:09 GMT";
    assert_eq!(
        String::from_utf8(REFUSED_LINE.response(date)).unwrap(),
        "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\
         Date: Fri, 27 Nov 2026 05:43:09 GMT\r\n\
         Server: MochiWeb/1.0 (Any of you quaids got a smint?)\r\n\r\n"
    );
    let header = Refusal {
        http10: true,
        connection_close: false,
    };
    assert!(header
        .response(date)
        .starts_with(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n"));
}

#[test]
fn nothing_after_a_refusal() {
    let mut g = Gate::new();
    let mut out = Vec::new();
    assert!(g.feed(&line_of(9000, "GET /", ""), &mut out).is_some());
    assert!(g
        .feed(b" HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", &mut out)
        .is_none());
    assert!(out.is_empty());
}
