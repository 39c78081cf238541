//! `multipart/related` document uploads, two ways, chosen by the first byte's top bit (its
//! other bits pick how the body is cut into chunks, as the network delivers it):
//! - raw: the rest is the body, split at boundary `abc`. An accepted body's attachment parts
//!   each went to an attachment the document marks `"follows": true`, opened once and
//!   finished once, and the result does not depend on the chunking;
//! - round trip: the rest, cut at `0xFF` bytes, is a list of part header styles (none,
//!   `Content-Type`, `Content-Disposition` with the filename) and then the attachments'
//!   contents; the body written from them (as a replicator writes one) reads back as exactly
//!   those contents under those names.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use settee_wire::{read_related, Error, FollowsSink};
use std::collections::BTreeMap;

#[derive(Default)]
struct Collect {
    open: usize,
    parts: BTreeMap<String, Vec<u8>>,
}

impl FollowsSink for Collect {
    type Part = Vec<u8>;
    type Error = Error;
    fn open(&mut self, _: &str, _: &Map<String, Value>) -> Result<Vec<u8>, Error> {
        self.open += 1;
        Ok(Vec::new())
    }
    fn write(&mut self, part: &mut Vec<u8>, chunk: &[u8]) -> Result<(), Error> {
        part.extend_from_slice(chunk);
        Ok(())
    }
    fn finish(&mut self, name: &str, part: Vec<u8>) -> Result<(), Error> {
        self.open -= 1;
        self.parts.insert(name.to_string(), part);
        Ok(())
    }
}

/// Runs a future over in-memory input: it never waits for a wake-up.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn read(body: &[u8], chunk: usize) -> (Result<Value, Error>, Collect) {
    let chunks: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(chunk.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let mut sink = Collect::default();
    let doc = block_on(read_related(
        futures_util::stream::iter(chunks),
        "abc".to_string(),
        &mut sink,
    ));
    (doc, sink)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let cut = (first & 0x7f) as usize;
    if first & 0x80 == 0 {
        raw(rest, cut);
    } else {
        round_trip(rest, cut);
    }
});

fn round_trip(data: &[u8], cut: usize) {
    let mut segs = data.split(|&b| b == 0xff);
    let styles = segs.next().unwrap_or_default();
    let contents: Vec<&[u8]> = segs.collect();
    if contents.iter().any(|c| c.windows(5).any(|w| w == b"--abc")) {
        return; // a body holding its own boundary cannot be framed
    }
    let names: Vec<String> = (0..contents.len()).map(|i| format!("a{i}")).collect();
    let atts: Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), serde_json::json!({"follows": true})))
        .collect();
    let doc = serde_json::json!({"_id": "d", "_attachments": atts});
    let style = |i: usize| styles.get(i).map_or(1, |s| s % 3);
    let head = |i: usize, name: Option<&str>| match (style(i), name) {
        (0, _) => String::new(),
        (2, Some(n)) => format!("Content-Disposition: attachment; filename=\"{n}\"\r\n"),
        _ => "Content-Type: application/octet-stream\r\n".to_string(),
    };
    let mut body = format!("--abc\r\n{}\r\n{doc}", head(0, None)).into_bytes();
    for (i, c) in contents.iter().enumerate() {
        body.extend_from_slice(
            format!("\r\n--abc\r\n{}\r\n", head(i + 1, Some(&names[i]))).as_bytes(),
        );
        body.extend_from_slice(c);
    }
    body.extend_from_slice(b"\r\n--abc--\r\n");
    let (read_doc, sink) = read(&body, cut);
    assert_eq!(
        read_doc.ok(),
        Some(doc),
        "{:?}",
        String::from_utf8_lossy(&body)
    );
    let sent: BTreeMap<String, Vec<u8>> = names
        .into_iter()
        .zip(contents.iter().map(|c| c.to_vec()))
        .collect();
    assert_eq!(sink.parts, sent, "{:?}", String::from_utf8_lossy(&body));
}

fn raw(body: &[u8], cut: usize) {
    let (doc, sink) = read(body, cut);
    let Ok(doc) = doc else {
        return;
    };
    assert_eq!(sink.open, 0, "every part opened was finished");
    for name in sink.parts.keys() {
        let att = &doc["_attachments"][name];
        assert_eq!(att["follows"], Value::Bool(true), "{name} does not follow");
    }
    let (whole, whole_sink) = read(body, body.len());
    assert_eq!(
        whole.ok(),
        Some(doc),
        "the document does not depend on chunking"
    );
    assert_eq!(whole_sink.parts, sink.parts, "nor do the parts");
}
