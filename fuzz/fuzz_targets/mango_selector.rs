//! Mango selectors (`_find`, `_explain`, `_index` partial filters, `_changes?filter=_selector`)
//! as JSON `[selector, document]`, and `_find`/`_index` request bodies (any other JSON
//! object) through the options' validation: a selector that parses normalises to a fixed point
//! (normalising the normal form changes nothing, and it parses again), and matching any
//! document against it answers without panicking, the same for both compiled forms.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_mango::{normalize, Selector};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let (selector, doc) = match value {
        Value::Array(mut pair) if pair.len() == 2 => {
            let doc = pair.pop().unwrap();
            (pair.pop().unwrap(), doc)
        }
        Value::Object(body) if body.contains_key("selector") || body.contains_key("index") => {
            if let Ok(opts) = FindOpts::parse(&body, 25) {
                let _ = (opts.refresh(), opts.to_json());
            }
            let _ = IndexOpts::parse(&body);
            let selector = body.get("selector").cloned().unwrap_or(Value::Null);
            (selector, Value::Null)
        }
        other => (other, Value::Null),
    };
    let Ok(parsed) = Selector::parse(&selector) else {
        return;
    };
    let normal = parsed.normalized();
    assert_eq!(
        normalize(normal).as_ref().ok(),
        Some(normal),
        "normalising is idempotent"
    );
    let again = Selector::parse(normal).expect("a normal form parses");
    let _ = parsed.top_fields();
    let _ = parsed.is_empty();
    assert_eq!(parsed.matches(&doc), again.matches(&doc));
});
