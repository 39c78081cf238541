//! Erlang's external term format for JSON values as CouchDB decodes them (jiffy): objects
//! are `{[{Key, Value}]}`, strings binaries, `true`/`false`/`null` atoms, a number literal
//! with `.`, `e` or `E` a float and any other an integer of any size. The bytes are those of
//! `term_to_binary(Term, [{minor_version, 1}])`, which CouchDB hashes into revision ids.

use serde_json::Value;

pub const VERSION: u8 = 131;
const NEW_FLOAT: u8 = 70;
const SMALL_INTEGER: u8 = 97;
const INTEGER: u8 = 98;
const ATOM: u8 = 100;
const SMALL_TUPLE: u8 = 104;
const NIL: u8 = 106;
const STRING: u8 = 107;
const LIST: u8 = 108;
const BINARY: u8 = 109;
const SMALL_BIG: u8 = 110;
const LARGE_BIG: u8 = 111;

/// An atom (Latin-1 names, as `minor_version` 1 writes them).
pub fn atom(name: &str, out: &mut Vec<u8>) {
    out.push(ATOM);
    out.extend((name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
}

pub fn binary(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(BINARY);
    out.extend((bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

pub fn small_tuple(arity: u8, out: &mut Vec<u8>) {
    out.extend([SMALL_TUPLE, arity]);
}

/// The header of a proper list of `len > 0` elements; the caller writes them, then [`nil`].
pub fn list_header(len: usize, out: &mut Vec<u8>) {
    out.push(LIST);
    out.extend((len as u32).to_be_bytes());
}

pub fn nil(out: &mut Vec<u8>) {
    out.push(NIL);
}

pub fn integer(i: i64, out: &mut Vec<u8>) {
    if (0..=255).contains(&i) {
        out.extend([SMALL_INTEGER, i as u8]);
    } else if let Ok(small) = i32::try_from(i) {
        out.push(INTEGER);
        out.extend(small.to_be_bytes());
    } else {
        big(i < 0, &i.unsigned_abs().to_le_bytes(), out);
    }
}

/// A bignum from its sign and little-endian magnitude (trailing zero bytes dropped).
fn big(negative: bool, magnitude: &[u8], out: &mut Vec<u8>) {
    let len = magnitude
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |at| at + 1);
    if len <= 255 {
        out.extend([SMALL_BIG, len as u8]);
    } else {
        out.push(LARGE_BIG);
        out.extend((len as u32).to_be_bytes());
    }
    out.push(u8::from(negative));
    out.extend_from_slice(&magnitude[..len]);
}

/// An integer literal of any length: its little-endian base-256 magnitude.
fn decimal_magnitude(digits: &str) -> Vec<u8> {
    let mut mag: Vec<u8> = Vec::new();
    for d in digits.bytes().filter(u8::is_ascii_digit) {
        let mut carry = u32::from(d - b'0');
        for byte in mag.iter_mut() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            mag.push(carry as u8);
            carry >>= 8;
        }
    }
    mag
}

fn number(text: &str, out: &mut Vec<u8>) {
    if text.contains(['.', 'e', 'E']) {
        let f: f64 = text.parse().unwrap_or(f64::INFINITY);
        out.push(NEW_FLOAT);
        out.extend(f.to_bits().to_be_bytes());
        return;
    }
    if let Ok(i) = text.parse::<i64>() {
        return integer(i, out);
    }
    let negative = text.starts_with('-');
    big(negative, &decimal_magnitude(text), out);
}

/// The list elements as a byte string, when Erlang writes the list as one (`STRING_EXT`):
/// every element an integer 0..=255, at most 65535 of them.
fn byte_string(items: &[Value]) -> Option<Vec<u8>> {
    if items.len() > usize::from(u16::MAX) {
        return None;
    }
    items
        .iter()
        .map(|v| match v {
            Value::Number(n) => {
                let text = n.to_string();
                if text.contains(['.', 'e', 'E']) {
                    return None;
                }
                text.parse::<u8>().ok()
            }
            _ => None,
        })
        .collect()
}

/// A JSON value as a term (without the leading version byte).
pub fn value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => atom("null", out),
        Value::Bool(b) => atom(if *b { "true" } else { "false" }, out),
        Value::Number(n) => number(&n.to_string(), out),
        Value::String(s) => binary(s.as_bytes(), out),
        Value::Array(items) if items.is_empty() => nil(out),
        Value::Array(items) => match byte_string(items) {
            Some(bytes) => {
                out.push(STRING);
                out.extend((bytes.len() as u16).to_be_bytes());
                out.extend(bytes);
            }
            None => {
                list_header(items.len(), out);
                items.iter().for_each(|item| value(item, out));
                nil(out);
            }
        },
        Value::Object(members) => {
            small_tuple(1, out);
            if members.is_empty() {
                return nil(out);
            }
            list_header(members.len(), out);
            for (k, v) in members {
                small_tuple(2, out);
                binary(k.as_bytes(), out);
                value(v, out);
            }
            nil(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn term(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        value(v, &mut out);
        out
    }

    #[test]
    fn scalars_as_erlang_writes_them() {
        assert_eq!(term(&json!(true)), [100, 0, 4, b't', b'r', b'u', b'e']);
        assert_eq!(term(&json!(7)), [97, 7]);
        assert_eq!(term(&json!(-1)), [98, 255, 255, 255, 255]);
        assert_eq!(term(&json!(1.5)), [70, 63, 248, 0, 0, 0, 0, 0, 0]);
        assert_eq!(term(&json!("ab")), [109, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(term(&json!([])), [106]);
        assert_eq!(term(&json!({})), [104, 1, 106]);
        assert_eq!(term(&json!([1, 2])), [107, 0, 2, 1, 2]);
        assert_eq!(
            term(&json!([1, 300])),
            [108, 0, 0, 0, 2, 97, 1, 98, 0, 0, 1, 44, 106]
        );
    }

    #[test]
    fn big_integers() {
        // 2^40 = 1099511627776: SMALL_BIG_EXT, 6 bytes, positive, little-endian.
        assert_eq!(
            term(&json!(1099511627776i64)),
            [110, 6, 0, 0, 0, 0, 0, 0, 1]
        );
        let huge: Value = serde_json::from_str("-18446744073709551616").unwrap();
        assert_eq!(term(&huge), [110, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    }
}
