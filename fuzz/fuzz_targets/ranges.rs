//! `Range` headers of attachment reads against an attachment of any length: every range
//! returned is inside the attachment, starts before it ends, and there are at most
//! `MAX_RANGES` of them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use settee_wire::{byte_ranges, MAX_RANGES};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let raw = u64::from_le_bytes(data[..8].try_into().unwrap());
    let Ok(header) = std::str::from_utf8(&data[8..]) else {
        return;
    };
    // Small lengths most of the time, where the edge cases are; any length now and then.
    for len in [raw % 64, raw] {
        if let Some(Ok(ranges)) = byte_ranges(header, len) {
            assert!(ranges.len() <= MAX_RANGES);
            for (from, to) in ranges {
                assert!(from <= to && to < len, "{header:?} {len}: {from}-{to}");
            }
        }
    }
});
