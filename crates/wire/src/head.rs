//! The request head gate: the bytes a client sends on one connection, made fit for hyper
//! without changing what CouchDB would make of them.
//!
//! CouchDB's parser (Erlang's `{packet, http}` under mochiweb) takes any byte but SP in a
//! request target: `?startkey="a"`, `?key={"a":1}`, `<`, `>`, the backtick, control bytes,
//! raw UTF-8. hyper hands the target to `http::Uri`, which refuses some of them, so the
//! request would end in a bare 400. [`Gate`] sits between the socket and hyper: it finds
//! each request line by following the framing of the messages before it (Content-Length
//! and chunked bodies, blank lines between requests) and percent-encodes in its target
//! exactly the bytes `http::Uri` (and httparse) would refuse ([`encode_target`]). Handlers
//! percent-decode, so they see what CouchDB's do. Every other byte passes unchanged.
//!
//! Whatever the gate cannot frame with certainty (a Content-Length that is not one decimal
//! number, a Transfer-Encoding other than `chunked`, an upgrade, a request line hyper will
//! refuse anyway, a chunk hyper's decoder would reject) turns it into a pass-through for the
//! rest of the connection: hyper then sees the client's bytes as they are and refuses what
//! it refuses. The gate never rewrites a byte it is not sure is part of a request target.
//!
//! It also gives mochiweb's own refusals, which come before any of CouchDB's handling: a
//! request line of more than 8192 bytes with its line end, a header line of more than
//! 8191, the 1000th header line ([`Refusal`]). So the bytes it holds are bounded by one
//! line.
//!
//! Pure: bytes in, bytes out, no I/O; `fuzz/fuzz_targets/head.rs` fuzzes it.

use std::borrow::Cow;

/// The longest request line mochiweb takes, with its `\r\n` (Erlang's 8192-byte line buffer).
pub const MAX_REQUEST_LINE: usize = 8192;
/// The longest header line mochiweb takes, with its `\r\n`.
pub const MAX_HEADER_LINE: usize = 8191;
/// mochiweb's `?MAX_HEADERS`: the 1000th header line is refused.
pub const MAX_HEADERS: u32 = 1000;

/// A connection's request stream, as far as the gate follows it.
#[derive(Debug)]
pub struct Gate {
    phase: Phase,
    /// The head line being collected (request line or header line), up to its `\n`.
    line: Vec<u8>,
    head: Head,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between messages: blank lines, then a request line.
    RequestLine,
    /// After the request line, up to the blank line ending the head.
    Headers,
    /// A Content-Length body: this many bytes to go.
    Body(u64),
    /// A chunked body, in hyper's decoder states.
    Chunk(Chunk),
    /// Bytes pass unchanged for the rest of the connection.
    PassThrough,
    /// A refusal was given; nothing more is read.
    Refused,
}

/// hyper's chunked decoder (`proto::h1::decode::ChunkedState`), byte by byte: the gate
/// accepts exactly the chunk framing hyper does and hands the rest to hyper to refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// The first hex digit of a chunk size.
    Start,
    Size(u64),
    /// Blanks after the size.
    SizeLws(u64),
    Extension(u64),
    /// The `\n` after the size line's `\r`.
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    /// After the last chunk: a trailer line or the final `\r\n`.
    EndCr,
    Trailer,
    TrailerLf,
    EndLf,
}

/// What the gate knows about the head it is in.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    http10: bool,
    connection_close: bool,
    header_lines: u32,
    content_length: Option<u64>,
    chunked: bool,
    /// The message cannot be framed with certainty (or its connection stops being HTTP).
    unsure: bool,
}

/// A request mochiweb refuses before CouchDB sees it: `400 Bad Request`, no body, then the
/// connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The request said `HTTP/1.0` (known once its request line was read).
    pub http10: bool,
    /// The answer says `Connection: close` (a refused request line, an `HTTP/1.0` request,
    /// or a `Connection: close` header before the refused line).
    pub connection_close: bool,
}

impl Refusal {
    /// mochiweb's answer, byte for byte, with `date` as its `Date` (RFC 1123).
    pub fn response(&self, date: &str) -> Vec<u8> {
        let version = if self.http10 { "1.0" } else { "1.1" };
        let close = if self.connection_close {
            "Connection: close\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/{version} 400 Bad Request\r\n{close}Content-Length: 0\r\nDate: {date}\r\n\
             Server: MochiWeb/1.0 (Any of you quaids got a smint?)\r\n\r\n"
        )
        .into_bytes()
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    pub fn new() -> Gate {
        Gate {
            phase: Phase::RequestLine,
            line: Vec::new(),
            head: Head::default(),
        }
    }

    /// Takes the next bytes the client sent and appends to `out` the bytes hyper should
    /// see. Bytes of an unfinished head line are held until its `\n` arrives. A refusal is
    /// returned once; the gate then takes nothing more.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Option<Refusal> {
        while !input.is_empty() {
            match self.phase {
                Phase::Refused => return None,
                Phase::PassThrough => {
                    out.extend_from_slice(input);
                    return None;
                }
                Phase::Body(left) | Phase::Chunk(Chunk::Data(left)) => {
                    let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    let left = left - n as u64;
                    self.phase = match (self.phase, left) {
                        (Phase::Body(_), 0) => Phase::RequestLine,
                        (Phase::Body(_), _) => Phase::Body(left),
                        (_, 0) => Phase::Chunk(Chunk::DataCr),
                        (_, _) => Phase::Chunk(Chunk::Data(left)),
                    };
                }
                Phase::Chunk(state) => {
                    out.push(input[0]);
                    self.phase = match chunk_step(state, input[0]) {
                        Some(Some(next)) => Phase::Chunk(next),
                        Some(None) => Phase::RequestLine,
                        None => Phase::PassThrough,
                    };
                    input = &input[1..];
                }
                Phase::RequestLine | Phase::Headers => {
                    let (taken, complete) = match memchr::memchr(b'\n', input) {
                        Some(i) => (i + 1, true),
                        None => (input.len(), false),
                    };
                    self.line.extend_from_slice(&input[..taken]);
                    input = &input[taken..];
                    if let Some(refusal) = self.check_length(complete) {
                        self.phase = Phase::Refused;
                        self.line = Vec::new();
                        return Some(refusal);
                    }
                    if complete {
                        let line = std::mem::take(&mut self.line);
                        if let Some(refusal) = self.head_line(&line, out) {
                            self.phase = Phase::Refused;
                            return Some(refusal);
                        }
                        self.line = line;
                        self.line.clear();
                    }
                }
            }
        }
        None
    }

    /// mochiweb's line limits, on the line collected so far (`complete`: it has its `\n`).
    fn check_length(&self, complete: bool) -> Option<Refusal> {
        let (max, refusal) = match self.phase {
            Phase::RequestLine => (
                MAX_REQUEST_LINE,
                Refusal {
                    http10: false,
                    connection_close: true,
                },
            ),
            _ => (MAX_HEADER_LINE, self.header_refusal()),
        };
        // Without its `\n` yet, a line at the limit will be over it.
        let over = if complete {
            self.line.len() > max
        } else {
            self.line.len() >= max
        };
        over.then_some(refusal)
    }

    fn header_refusal(&self) -> Refusal {
        Refusal {
            http10: self.head.http10,
            connection_close: self.head.http10 || self.head.connection_close,
        }
    }

    /// One complete head line (with its `\n`).
    fn head_line(&mut self, line: &[u8], out: &mut Vec<u8>) -> Option<Refusal> {
        let content = strip_line_end(line);
        if self.phase == Phase::RequestLine {
            if content.is_empty() {
                // A blank line between requests, which hyper (and mochiweb) skip.
                out.extend_from_slice(line);
                return None;
            }
            self.head = Head::default();
            match RequestLine::parse(content) {
                Some(request) => {
                    self.head.http10 = request.version == Version::Http10;
                    self.head.unsure = request.method == b"CONNECT";
                    out.extend_from_slice(request.method);
                    out.push(b' ');
                    if request.target.first() == Some(&b'/') {
                        out.extend_from_slice(&encode_target(request.target));
                    } else {
                        // `*` or absolute-form: left to hyper as sent.
                        out.extend_from_slice(request.target);
                    }
                    out.extend_from_slice(match request.version {
                        Version::Http10 => b" HTTP/1.0",
                        Version::Http11 | Version::Older => b" HTTP/1.1",
                    });
                    let end = &line[content.len()..];
                    out.extend_from_slice(end);
                    if request.version == Version::Older {
                        out.extend_from_slice(b"Connection: close");
                        out.extend_from_slice(end);
                    }
                    self.phase = Phase::Headers;
                }
                None => {
                    out.extend_from_slice(line);
                    self.phase = Phase::PassThrough;
                }
            }
            return None;
        }
        out.extend_from_slice(line);
        if content.is_empty() {
            self.phase = self.body_phase();
            return None;
        }
        self.head.header_lines += 1;
        if self.head.header_lines >= MAX_HEADERS {
            return Some(self.header_refusal());
        }
        self.header(content);
        None
    }

    /// Notes what a header line says about the message's framing.
    fn header(&mut self, content: &[u8]) {
        let Some(colon) = content.iter().position(|&b| b == b':') else {
            self.head.unsure = true;
            return;
        };
        let (name, value) = (&content[..colon], trim(&content[colon + 1..]));
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            // Folded or malformed: hyper refuses the head.
            self.head.unsure = true;
            return;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            match parse_decimal(value) {
                Some(n) if self.head.content_length.is_none_or(|m| m == n) => {
                    self.head.content_length = Some(n)
                }
                _ => self.head.unsure = true,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if value.eq_ignore_ascii_case(b"chunked") && !self.head.http10 {
                self.head.chunked = true;
            } else {
                self.head.unsure = true;
            }
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            self.head.unsure = true;
        } else if name.eq_ignore_ascii_case(b"connection") && value.eq_ignore_ascii_case(b"close") {
            self.head.connection_close = true;
        }
    }

    /// Where the message goes after its head, as hyper frames a request (RFC 9112 §6.3:
    /// chunked wins over Content-Length; neither means no body).
    fn body_phase(&self) -> Phase {
        match self.head {
            Head { unsure: true, .. } => Phase::PassThrough,
            Head { chunked: true, .. } => Phase::Chunk(Chunk::Start),
            Head {
                content_length: Some(n),
                ..
            } if n > 0 => Phase::Body(n),
            _ => Phase::RequestLine,
        }
    }
}

/// The next chunked-decoder state after `b`: `Some(None)` when the body ended, `None` when
/// hyper's decoder would fail on `b`.
fn chunk_step(state: Chunk, b: u8) -> Option<Option<Chunk>> {
    use Chunk::*;
    let hex = |size: u64| {
        let digit = (b as char).to_digit(16)?;
        size.checked_mul(16)?.checked_add(u64::from(digit))
    };
    let next = match (state, b) {
        (Start, _) => Size(hex(0)?),
        (Size(n), b'\t' | b' ') | (SizeLws(n), b'\t' | b' ') => SizeLws(n),
        (Size(n) | SizeLws(n) | Extension(n), b';') => Extension(n),
        (Size(n) | SizeLws(n) | Extension(n), b'\r') => SizeLf(n),
        (Size(n), _) => Size(hex(n)?),
        (SizeLws(_), _) | (Extension(_), b'\n') => return None,
        (Extension(n), _) => Extension(n),
        (SizeLf(0), b'\n') => EndCr,
        (SizeLf(n), b'\n') => Data(n),
        (DataCr, b'\r') => DataLf,
        (DataLf, b'\n') => Start,
        (EndCr, b'\r') => EndLf,
        (EndCr, _) | (Trailer, _) if b != b'\r' => Trailer,
        (Trailer, b'\r') => TrailerLf,
        (TrailerLf, b'\n') => EndCr,
        (EndLf, b'\n') => return Some(None),
        _ => return None,
    };
    Some(Some(next))
}

/// A request line as Erlang's `{packet, http}` reads it: the method at the line's start,
/// then the target and the version, separated by runs of SP or HTAB (trailing blanks
/// allowed), the version `HTTP/major.minor` in any digits or absent (HTTP/0.9).
struct RequestLine<'a> {
    method: &'a [u8],
    target: &'a [u8],
    version: Version,
}

/// A request's HTTP version, as the gate passes it on to hyper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    Http10,
    Http11,
    /// `HTTP/0.x` or none: answered as HTTP/1.1 on a connection that then closes, as
    /// mochiweb answers it.
    Older,
}

impl<'a> RequestLine<'a> {
    fn parse(content: &'a [u8]) -> Option<RequestLine<'a>> {
        let blank = |b: &u8| *b == b' ' || *b == b'\t';
        if content.first().is_none_or(blank) {
            return None;
        }
        let mut parts = content.split(blank).filter(|p| !p.is_empty());
        let (method, target) = (parts.next()?, parts.next()?);
        let version = match parts.next() {
            None => Version::Older,
            Some(v) => Self::version(v)?,
        };
        let ok = parts.next().is_none() && method.iter().all(|&b| is_token(b));
        ok.then_some(RequestLine {
            method,
            target,
            version,
        })
    }

    /// `HTTP/major.minor`: 0.x is older than 1.0, anything past 1.1 taken as 1.1 (mochiweb
    /// answers every version from 1.1 up alike).
    fn version(v: &[u8]) -> Option<Version> {
        let rest = v.strip_prefix(b"HTTP/")?;
        let dot = rest.iter().position(|&b| b == b'.')?;
        let (major, minor) = (&rest[..dot], &rest[dot + 1..]);
        let number = |d: &[u8]| {
            (!d.is_empty() && d.iter().all(u8::is_ascii_digit)).then(|| {
                d.iter().fold(0u32, |n, &b| {
                    n.saturating_mul(10).saturating_add(u32::from(b - b'0'))
                })
            })
        };
        Some(match (number(major)?, number(minor)?) {
            (0, _) => Version::Older,
            (1, 0) => Version::Http10,
            _ => Version::Http11,
        })
    }
}

/// An origin-form request target with the bytes `http::Uri` (http 1.x) and httparse refuse
/// percent-encoded, and nothing else changed. In the path: controls, SP, `<`, `>`, the
/// backtick, DEL; in the query: controls, SP, `"`, `<`, `>`, DEL; in the fragment (which
/// `http::Uri` drops, as CouchDB does): controls, SP, DEL (httparse); and anywhere, every
/// byte of an invalid UTF-8 sequence.
pub fn encode_target(target: &[u8]) -> Cow<'_, [u8]> {
    let invalid_utf8 = invalid_utf8_mask(target);
    let mut part = Part::Path;
    let mut out: Option<Vec<u8>> = None;
    for (i, &b) in target.iter().enumerate() {
        let refused = match part {
            Part::Path => matches!(b, 0x00..=0x20 | b'<' | b'>' | b'`' | 0x7f),
            Part::Query => matches!(b, 0x00..=0x20 | b'"' | b'<' | b'>' | 0x7f),
            Part::Fragment => matches!(b, 0x00..=0x20 | 0x7f),
        } || invalid_utf8.as_ref().is_some_and(|m| m[i]);
        part = match (part, b) {
            (Part::Path, b'?') => Part::Query,
            (Part::Path | Part::Query, b'#') => Part::Fragment,
            (part, _) => part,
        };
        if refused && out.is_none() {
            let mut o = Vec::with_capacity(target.len() + 16);
            o.extend_from_slice(&target[..i]);
            out = Some(o);
        }
        match &mut out {
            Some(o) if refused => percent(o, b),
            Some(o) => o.push(b),
            None => {}
        }
    }
    out.map_or(Cow::Borrowed(target), Cow::Owned)
}

fn percent(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
}

/// The parts of a target, whose refused bytes differ (`http`'s `PATH_MAP` and `QUERY_MAP`).
#[derive(Clone, Copy)]
enum Part {
    Path,
    Query,
    Fragment,
}

/// Which bytes belong to an invalid UTF-8 sequence (`None`: the target is valid UTF-8).
fn invalid_utf8_mask(target: &[u8]) -> Option<Vec<bool>> {
    if std::str::from_utf8(target).is_ok() {
        return None;
    }
    let mut mask = Vec::with_capacity(target.len());
    for chunk in target.utf8_chunks() {
        mask.resize(mask.len() + chunk.valid().len(), false);
        mask.resize(mask.len() + chunk.invalid().len(), true);
    }
    Some(mask)
}

/// The line without its `\n` and the `\r` before it.
fn strip_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t');
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(s), Some(e)) => &v[s..=e],
        _ => &[],
    }
}

/// One or more ASCII digits, as hyper takes a Content-Length (a list such as `7, 7` is
/// left to hyper).
fn parse_decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// RFC 9110 `tchar`.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
