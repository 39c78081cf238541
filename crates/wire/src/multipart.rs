//! The framing of a `multipart/related` document upload (how replicators and CouchDB itself
//! send documents with attachments): the document's JSON first, then one part per
//! attachment marked `"follows": true`, in order, or named by the part's
//! `Content-Disposition` filename. Where the parts' bytes go is the caller's
//! ([`FollowsSink`]): `settee-http` streams them into the attachment store.

use crate::error::Error;
use bytes::Bytes;
use futures_util::{stream, Stream, StreamExt};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// The `boundary` parameter of a multipart content type.
pub fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("boundary")).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Where the attachment parts of a `multipart/related` body go.
pub trait FollowsSink {
    /// One attachment's content being received.
    type Part;
    type Error: From<Error>;
    /// A part for attachment `name`, whose entry in the document's `_attachments` is `att`.
    fn open(&mut self, name: &str, att: &Map<String, Value>) -> Result<Self::Part, Self::Error>;
    fn write(&mut self, part: &mut Self::Part, chunk: &[u8]) -> Result<(), Self::Error>;
    /// The part's last byte has arrived.
    fn finish(&mut self, name: &str, part: Self::Part) -> Result<(), Self::Error>;
}

fn bad(reason: &str) -> Error {
    Error::bad_request(reason)
}

fn framing(e: multer::Error) -> Error {
    Error::BadRequest(format!("Invalid multipart body: {e}"))
}

/// The attachment entries marked `"follows": true`, in the document's order.
fn follows(doc: &Value) -> Vec<(String, Map<String, Value>)> {
    doc.get("_attachments")
        .and_then(Value::as_object)
        .map(|atts| {
            atts.iter()
                .filter(|(_, a)| a.get("follows") == Some(&Value::Bool(true)))
                .filter_map(|(n, a)| Some((n.clone(), a.as_object()?.clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// Gives every part with an empty header section a header multer can see.
///
/// A part may have no headers at all (RFC 2046; CouchDB's own parser takes such parts, and
/// older replicators send them): `--B CRLF CRLF content`. multer reads the delimiter's CRLF
/// and then looks for a blank line to end the headers, so it takes the part's content up to
/// the next blank line for headers: the part's content is lost and the next part's headers
/// and content are read as this part's (found by the `multipart` fuzz target). Delimiters
/// followed by an empty header section are rewritten to carry one neutral header, across
/// chunk boundaries; nothing else changes (content never holds a delimiter).
struct EmptyHeaders {
    /// `CRLF --B CRLF CRLF`: a delimiter and an empty header section.
    empty: Vec<u8>,
    /// The same with one header.
    filled: Vec<u8>,
    /// Received bytes not yet passed on: they may begin a delimiter.
    pending: Vec<u8>,
}

impl EmptyHeaders {
    fn new(boundary: &str) -> EmptyHeaders {
        EmptyHeaders {
            empty: format!("\r\n--{boundary}\r\n\r\n").into_bytes(),
            filled: format!("\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n")
                .into_bytes(),
            // The first delimiter has no CRLF before it; one more is a blank preamble.
            pending: b"\r\n".to_vec(),
        }
    }

    fn feed(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut at = 0;
        while let Some(i) = memchr::memmem::find(&self.pending[at..], &self.empty) {
            out.extend_from_slice(&self.pending[at..at + i]);
            out.extend_from_slice(&self.filled);
            at += i + self.empty.len();
        }
        let keep = self
            .pending
            .len()
            .saturating_sub(self.empty.len() - 1)
            .max(at);
        out.extend_from_slice(&self.pending[at..keep]);
        self.pending.drain(..keep);
        out.into()
    }

    fn finish(&mut self) -> Bytes {
        std::mem::take(&mut self.pending).into()
    }
}

/// `body` with [`EmptyHeaders`] applied.
fn with_headers<S, O, E>(
    body: S,
    boundary: &str,
) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    S: Stream<Item = Result<O, E>> + Send + 'static,
    O: Into<Bytes> + 'static,
    E: Send + 'static,
{
    // `None` marks the end of the body, where the held-back bytes are passed on.
    body.map(Some).chain(stream::once(async { None })).scan(
        EmptyHeaders::new(boundary),
        |fix, item| {
            let out = match item {
                Some(chunk) => chunk.map(|c| fix.feed(&c.into())),
                None => Ok(fix.finish()),
            };
            std::future::ready(Some(out))
        },
    )
}

/// Reads a `multipart/related` body split at `boundary`: returns the document (the first
/// part, JSON) after handing every later part to `sink` under the attachment it carries.
/// A part beyond the attachments that follow is `400 bad_request`; an attachment part may
/// be named twice (by filename), and then its later content is the one kept.
pub async fn read_related<S, O, E, K>(
    body: S,
    boundary: String,
    sink: &mut K,
) -> Result<Value, K::Error>
where
    S: Stream<Item = Result<O, E>> + Send + 'static,
    O: Into<Bytes> + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    K: FollowsSink,
{
    let body = with_headers(body, &boundary);
    let mut parts = multer::Multipart::new(body, boundary);
    let first = parts
        .next_field()
        .await
        .map_err(framing)?
        .ok_or_else(|| bad("Empty multipart body"))?;
    let json = first.bytes().await.map_err(framing)?;
    let doc = crate::params::parse_json(&json)?;
    let follows = follows(&doc);
    let mut done: HashSet<&str> = HashSet::new();
    let mut next = follows.iter();
    while let Some(mut part) = parts.next_field().await.map_err(framing)? {
        let named = part
            .file_name()
            .and_then(|f| follows.iter().find(|(n, _)| n == f));
        let Some((name, att)) = named.or_else(|| next.find(|(n, _)| !done.contains(n.as_str())))
        else {
            return Err(bad("More attachment parts than attachments that follow").into());
        };
        let mut w = sink.open(name, att)?;
        while let Some(chunk) = part.chunk().await.map_err(framing)? {
            sink.write(&mut w, &chunk)?;
        }
        sink.finish(name, w)?;
        done.insert(name);
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Runs a future whose input is all in memory, so it never waits on a wake-up.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    /// Collects each attachment's bytes (a later part of the same name replaces it).
    #[derive(Default)]
    struct Collect(BTreeMap<String, Vec<u8>>);

    impl FollowsSink for Collect {
        type Part = Vec<u8>;
        type Error = Error;
        fn open(&mut self, _: &str, _: &Map<String, Value>) -> Result<Vec<u8>, Error> {
            Ok(Vec::new())
        }
        fn write(&mut self, part: &mut Vec<u8>, chunk: &[u8]) -> Result<(), Error> {
            part.extend_from_slice(chunk);
            Ok(())
        }
        fn finish(&mut self, name: &str, part: Vec<u8>) -> Result<(), Error> {
            self.0.insert(name.to_string(), part);
            Ok(())
        }
    }

    fn read(body: &str) -> Result<(Value, BTreeMap<String, Vec<u8>>), Error> {
        read_in(body, body.len())
    }

    fn read_in(body: &str, chunk: usize) -> Result<(Value, BTreeMap<String, Vec<u8>>), Error> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = body
            .as_bytes()
            .chunks(chunk.max(1))
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut sink = Collect::default();
        let doc = block_on(read_related(
            futures_util::stream::iter(chunks),
            "abc".into(),
            &mut sink,
        ))?;
        Ok((doc, sink.0))
    }

    /// A part's header (multer takes a part without one to end at the next blank line).
    const T: &str = "Content-Type: application/octet-stream";
    const DOC: &str = r#"{"_id":"d","_attachments":{"a.txt":{"follows":true,"length":2},"b":{"follows":true},"c":{"stub":true}}}"#;

    #[test]
    fn parts_follow_in_order_or_by_filename() {
        let body = format!(
            "--abc\r\nContent-Type: application/json\r\n\r\n{DOC}\r\n--abc\r\n{T}\r\n\r\nhi\r\n--abc\r\n{T}\r\n\r\nthere\r\n--abc--"
        );
        let (doc, atts) = read(&body).unwrap();
        assert_eq!(doc["_id"], "d");
        assert_eq!(atts["a.txt"], b"hi");
        assert_eq!(atts["b"], b"there");
        let body = format!(
            "--abc\r\n{T}\r\n\r\n{DOC}\r\n--abc\r\nContent-Disposition: attachment; filename=\"b\"\r\n\r\nB\r\n--abc\r\n{T}\r\n\r\nA\r\n--abc--"
        );
        let (_, atts) = read(&body).unwrap();
        assert_eq!((&atts["a.txt"][..], &atts["b"][..]), (&b"A"[..], &b"B"[..]));
    }

    /// Found by the `multipart` fuzz target: multer took a part without headers to run to
    /// the next blank line, so a part's content went to the attachment before it.
    #[test]
    fn parts_without_headers() {
        let body = format!(
            "--abc\r\n\r\n{DOC}\r\n--abc\r\n\r\n\r\n--abc\r\n{T}\r\n\r\nx\r\n\r\ny\r\n--abc--"
        );
        for chunk in [1, 2, 3, 7, body.len()] {
            let (doc, atts) = read_in(&body, chunk).unwrap();
            assert_eq!(doc["_id"], "d");
            assert_eq!(atts["a.txt"], b"", "chunks of {chunk}");
            assert_eq!(atts["b"], b"x\r\n\r\ny", "chunks of {chunk}");
        }
        let body =
            format!("--abc\r\n\r\n{DOC}\r\n--abc\r\n\r\nhi\r\n--abc\r\n\r\nthere\r\n--abc--");
        let (_, atts) = read_in(&body, 4).unwrap();
        assert_eq!(
            (&atts["a.txt"][..], &atts["b"][..]),
            (&b"hi"[..], &b"there"[..])
        );
    }

    #[test]
    fn refusals() {
        let extra = format!(
            "--abc\r\n{T}\r\n\r\n{DOC}\r\n--abc\r\n{T}\r\n\r\n1\r\n--abc\r\n{T}\r\n\r\n2\r\n--abc\r\n{T}\r\n\r\n3\r\n--abc--"
        );
        assert_eq!(
            read(&extra).unwrap_err(),
            bad("More attachment parts than attachments that follow")
        );
        assert_eq!(
            read(&format!("--abc\r\n{T}\r\n\r\n{{nope\r\n--abc--")).unwrap_err(),
            bad("invalid UTF-8 JSON")
        );
        assert_eq!(
            read("--abc--\r\n").unwrap_err(),
            bad("Empty multipart body")
        );
        assert!(matches!(
            read("--abc\r\n\r\n{}"),
            Err(Error::BadRequest(r)) if r.starts_with("Invalid multipart body: ")
        ));
    }

    #[test]
    fn boundaries() {
        assert_eq!(
            boundary_of("multipart/related; boundary=\"x y\"").as_deref(),
            Some("x y")
        );
        assert_eq!(
            boundary_of("multipart/related;BOUNDARY=abc; charset=x").as_deref(),
            Some("abc")
        );
        assert_eq!(boundary_of("multipart/related"), None);
    }
}

/// Whether an `Accept` header admits `media` (`type/subtype`), as mochiweb's
/// `accepts_content_type/1` decides it: no header is `*/*`; a media range `*/*`,
/// `type/*` or the type itself with a non-zero `q` admits it, unless the type or
/// `type/*` is listed with `q=0`; a malformed `q` admits nothing.
pub fn accepts(accept: Option<&str>, media: &str) -> bool {
    let accept = accept.unwrap_or("*/*");
    let media = media.to_ascii_lowercase();
    let any_sub = format!("{}/*", media.split('/').next().unwrap_or(""));
    let mut ranges = Vec::new();
    for item in accept.split(',').filter(|i| !i.trim().is_empty()) {
        let mut fields = item.split(';');
        let range: String = fields
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        let mut q = 1.0f64;
        for param in fields {
            if let Some((k, v)) = param.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    match v.trim().parse::<f64>() {
                        Ok(x) if (0.0..=1.0).contains(&x) => q = x,
                        _ => return false,
                    }
                }
            }
        }
        ranges.push((range, q));
    }
    let refused = ranges
        .iter()
        .any(|(r, q)| *q == 0.0 && (*r == media || *r == any_sub));
    !refused
        && ranges
            .iter()
            .any(|(r, q)| *q > 0.0 && (r == "*/*" || *r == media || *r == any_sub))
}

#[cfg(test)]
mod accept_tests {
    use super::accepts;

    #[test]
    fn mochiweb_accepts_content_type() {
        let m = "multipart/related";
        for yes in [
            None,
            Some("*/*"),
            Some("multipart/related"),
            Some("multipart/*"),
            Some("application/json, multipart/related"),
            Some("Multipart/Related;q=0.5"),
        ] {
            assert!(accepts(yes, m), "{yes:?}");
        }
        for no in [
            Some(""),
            Some("application/json"),
            Some("text/html"),
            Some("multipart/mixed"),
            Some("multipart/related;q=0"),
            Some("*/*, multipart/*;q=0"),
            Some("multipart/related;q=x"),
        ] {
            assert!(!accepts(no, m), "{no:?}");
        }
    }
}
