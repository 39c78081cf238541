//! Revision strings (`rev=`, `_rev`, `If-Match`, `open_revs`, `atts_since`) and sequence
//! strings (`since=`, `last-event-id`), as text. A revision that parses formats to text that
//! parses to the same revision, and that text is the input as CouchDB prints it (position
//! without leading zeros, a 32-digit hex id in lower case, an id of 16 bytes as the hex of
//! those bytes — CouchDB's `revid_to_str` — and any other id as sent). A sequence a
//! database formats reads back to its number, and any text reads without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use settee_core::{Rev, RevId, SeqArg, SeqCodec};

fuzz_target!(|data: &[u8]| {
    let codec = SeqCodec::new(
        "node1@127.0.0.1",
        1 + u32::from(data.first().copied().unwrap_or(0) % 8),
        "0123456789abcdef0123456789abcdef",
    );
    if data.len() >= 8 {
        let n = u64::from_le_bytes(data[..8].try_into().unwrap()) >> 1;
        assert_eq!(codec.since(&codec.changes_seq(n)), Ok(SeqArg::Seq(n)));
        assert_eq!(codec.since(&codec.update_seq(n)), Ok(SeqArg::Seq(n)));
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(SeqArg::Seq(n)) = codec.since(s) {
        assert_eq!(codec.since(&codec.changes_seq(n)), Ok(SeqArg::Seq(n)));
    }
    if let Some(id) = RevId::parse(s) {
        assert_eq!(RevId::parse(&id.to_string()).as_ref(), Some(&id));
    }
    let Ok(rev) = Rev::parse(s) else {
        return;
    };
    let text = rev.to_string();
    assert_eq!(Rev::parse(&text).as_ref(), Ok(&rev), "{text:?}");
    let (_, id) = s.split_once('-').unwrap();
    let id = match id.len() {
        32 => id.to_ascii_lowercase(),
        16 => id.bytes().map(|b| format!("{b:02x}")).collect(),
        _ => id.to_string(),
    };
    assert_eq!(
        text,
        format!("{}-{id}", rev.pos),
        "a revision prints as sent"
    );
});
