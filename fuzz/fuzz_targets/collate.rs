//! View keys as clients send them (`key`, `startkey`, `keys`, and everything a map function
//! emits from client documents): two JSON values from `[a, b]`. The order-preserving key
//! encoding sorts as CouchDB's collation compares, and each encoding's length is read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use settee_core::collate::{compare, encode_key, encoded_len};

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
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
