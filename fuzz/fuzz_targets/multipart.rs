//! `multipart/related` document uploads: the first byte picks how the body is cut into
//! chunks (as the network delivers it), the rest is the body, split at boundary `abc`. An
//! accepted body's attachment parts each went to an attachment the document marks
//! `"follows": true`, opened once and finished once, and the result does not depend on the
//! chunking.
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
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let (doc, sink) = read(body, cut as usize);
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
});
