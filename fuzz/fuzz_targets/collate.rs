//! View keys as clients send them (`key`, `startkey`, `keys`, and everything a map function
//! emits from client documents): two JSON values from `[a, b]`. The order-preserving key
//! encoding sorts as CouchDB's collation compares, and each encoding's length is read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use settee_core::collate::{compare, encode_key, encoded_len};

/// Characters with a "special non-starter" decomposition in ICU4X's normalizer data. Among
/// other combining marks they trip a `debug_assert_ne!` inside icu_collator 2.4.0
/// (`elements.rs`: a combining class still at its 0xFF placeholder while sorting), found by
/// this target with `["\u0ddc\u0344\u0322d\u0344d", …]`. Release builds, which Settee ships,
/// do not check it, and there compare and encoding still agree (canonical equivalents such
/// as U+0344 and U+0308 U+0301 too); inputs holding them are skipped so that the upstream
/// assertion does not fail every run that meets one.
const SPECIAL_NON_STARTERS: &[char] = &[
    '\u{0340}', '\u{0341}', '\u{0343}', '\u{0344}', '\u{0F73}', '\u{0F75}', '\u{0F81}',
];

fn holds_special(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains(SPECIAL_NON_STARTERS),
        Value::Array(items) => items.iter().any(holds_special),
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.contains(SPECIAL_NON_STARTERS) || holds_special(v)),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if pair.iter().any(holds_special) {
        return;
    }
    let [a, b] = pair.as_slice() else {
        return;
    };
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    encode_key(a, &mut ea);
    encode_key(b, &mut eb);
    assert_eq!(encoded_len(&ea), Some(ea.len()));
    assert_eq!(
        compare(a, b),
        ea.cmp(&eb),
        "collation and encoding disagree on {a} and {b}"
    );
});
