//! Reading only the members a query needs from a stored document's JSON text: the members
//! are found by skipping values (`settee_core::json_scan`: memchr over quotes and brackets) and only
//! the wanted ones are parsed. A full parse of every document was most of a full-scan
//! query's time.

use serde_json::{Map, Value};
use settee_core::json_scan;

/// The members of the JSON object `text` whose names are in `wanted` (distinct names),
/// parsed. `None` if `text` is not a well-formed object as far as it was read. Meant for
/// stored bodies, whose member names are unique (every body is re-serialised from a parsed
/// object): it stops reading once every wanted member is found, so of a repeated name the
/// first value is taken.
pub fn pick_members(text: &[u8], wanted: &[String]) -> Option<Map<String, Value>> {
    let mut s = Scan { b: text, i: 0 };
    let mut out = Map::with_capacity(wanted.len());
    s.ws();
    s.eat(b'{')?;
    s.ws();
    if s.eat(b'}').is_some() {
        return Some(out);
    }
    loop {
        s.ws();
        let key_start = s.i;
        let escaped = s.string()?;
        let quoted = &text[key_start..s.i];
        s.ws();
        s.eat(b':')?;
        s.ws();
        let start = s.i;
        s.value()?;
        let name = if escaped {
            Some(serde_json::from_slice::<String>(quoted).ok()?)
        } else {
            None
        };
        let bytes = name
            .as_ref()
            .map_or(&quoted[1..quoted.len() - 1], |n| n.as_bytes());
        if let Some(w) = wanted.iter().find(|w| w.as_bytes() == bytes) {
            if !out.contains_key(w.as_str()) {
                out.insert(w.clone(), scalar_or_parse(&text[start..s.i])?);
                if out.len() == wanted.len() {
                    return Some(out);
                }
            }
        }
        s.ws();
        if s.eat(b'}').is_some() {
            return Some(out);
        }
        s.eat(b',')?;
    }
}

/// A value's JSON text parsed: literals, numbers and plain strings directly, the rest by
/// serde_json.
fn scalar_or_parse(text: &[u8]) -> Option<Value> {
    match text {
        b"true" => Some(Value::Bool(true)),
        b"false" => Some(Value::Bool(false)),
        b"null" => Some(Value::Null),
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => std::str::from_utf8(inner)
            .ok()
            .map(|s| Value::String(s.to_string())),
        [b'-' | b'0'..=b'9', ..] => std::str::from_utf8(text)
            .ok()?
            .parse()
            .ok()
            .map(Value::Number),
        _ => serde_json::from_slice(text).ok(),
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        self.i = json_scan::ws(self.b, self.i);
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// Moves past a string at its opening quote; whether it held an escape.
    fn string(&mut self) -> Option<bool> {
        let (end, escaped) = json_scan::skip_string(self.b, self.i)?;
        self.i = end;
        Some(escaped)
    }

    /// Moves past a value without building it.
    fn value(&mut self) -> Option<()> {
        self.i = json_scan::skip_value(self.b, self.i)?;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn pick(text: &str, names: &[&str]) -> Option<Value> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        pick_members(text.as_bytes(), &names).map(Value::Object)
    }

    #[test]
    fn picks_wanted_members() {
        let text = r#" {"a": 1, "b": {"x": [1, "]}\"", {"y": "}"}]}, "c\u0041": "v", "d": [[]], "a": 2 } "#;
        // Of a repeated name (never in a stored body) the first value is taken.
        assert_eq!(pick(text, &["a", "cA"]), Some(json!({"a": 1, "cA": "v"})));
        assert_eq!(
            pick(text, &["b"]),
            Some(json!({"b": {"x": [1, "]}\"", {"y": "}"}]}}))
        );
        assert_eq!(pick("{}", &["a"]), Some(json!({})));
        assert_eq!(pick("[1]", &["a"]), None);
        assert_eq!(pick(r#"{"a": tru"#, &["a"]), None);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z\"\\\\{}\\[\\]]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c\"]{1,2}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Picking every member gives what a full parse gives.
        #[test]
        fn agrees_with_a_full_parse(m in prop::collection::vec(("[a-c\"\\\\]{1,3}", json_value()), 0..6)) {
            let v = Value::Object(m.into_iter().collect());
            let text = serde_json::to_string_pretty(&v).unwrap();
            let all: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            prop_assert_eq!(pick_members(text.as_bytes(), &all).map(Value::Object), Some(v.clone()));
            let a: Vec<String> = all.iter().filter(|k| k.starts_with('a')).cloned().collect();
            let some = pick_members(text.as_bytes(), &a).unwrap();
            let want: Map<String, Value> = v.as_object().unwrap().iter()
                .filter(|(k, _)| k.starts_with('a')).map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(some, want);
        }
    }
}
