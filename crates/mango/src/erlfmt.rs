//! JSON values written as Erlang's `~w` writes the terms CouchDB decodes them to (jiffy's
//! EJSON): CouchDB puts such text into several Mango error reasons (`Bad argument for
//! operator $in: 5`, `Invalid value for limit: <<"x">>`), and clients compare reasons.
//!
//! EJSON: `null`/`true`/`false` are atoms, integers and floats are Erlang numbers, strings
//! are binaries (`<<"abc">>`, or `<<195,169>>` when a byte is not printable Latin-1),
//! arrays are lists and objects are `{[{Key,Value},...]}`.

use serde_json::{Number, Value};

/// `io_lib:format("~w", [Term])` of the EJSON term of `v`.
pub fn w(v: &Value) -> String {
    let mut out = String::new();
    write_value(v, &mut out);
    out
}

fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => binary(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("{[");
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('{');
                binary(k, out);
                out.push(',');
                write_value(v, out);
                out.push('}');
            }
            out.push_str("]}");
        }
    }
}

/// A string as `~w` writes a binary: `<<"...">>` with escapes when every byte is printable
/// Latin-1 (Erlang's default printable range), else the list of byte values.
pub fn binary(s: &str, out: &mut String) {
    let printable = s.bytes().all(
        |b| matches!(b, 32..=126 | 160..=255 | b'\n' | b'\r' | b'\t' | 0x0b | 0x08 | 0x0c | 0x1b),
    );
    if !printable {
        out.push_str("<<");
        for (i, b) in s.bytes().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&b.to_string());
        }
        out.push_str(">>");
        return;
    }
    // Every byte is printable: Erlang writes each byte as the Latin-1 character it is,
    // and the reason's binary then holds the original bytes, that is the UTF-8 of `s`.
    out.push_str("<<\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\u{1b}' => out.push_str("\\e"),
            _ => out.push(c),
        }
    }
    out.push_str("\">>");
}

/// An EJSON number: an integer literal as its digits, any other literal as Erlang writes
/// the nearest double (shortest round-trip digits, `1.0e20`, `0.001`, `100.0`).
pub fn number(n: &Number) -> String {
    let text = n.to_string();
    if !text.contains(['.', 'e', 'E']) {
        return text.trim_start_matches('+').to_string();
    }
    let f: f64 = text.parse().unwrap_or(f64::INFINITY);
    float(f)
}

/// Erlang's shortest float text: the shorter of the plain and the scientific form (the
/// plain one on a tie), always with a `.` in the mantissa.
pub fn float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{:e}", f.abs()); // "1.2345e4", "1e20", "5e-324"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    let plain = if exp >= 0 {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
        } else {
            format!("{}.{}", &digits[..int_len], &digits[int_len..])
        }
    } else {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    };
    let frac = if digits.len() > 1 { &digits[1..] } else { "0" };
    let scientific = format!("{}.{frac}e{exp}", &digits[..1]);
    if scientific.len() < plain.len() {
        format!("{sign}{scientific}")
    } else {
        format!("{sign}{plain}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terms() {
        assert_eq!(w(&json!(5)), "5");
        assert_eq!(w(&json!("yes")), "<<\"yes\">>");
        assert_eq!(w(&json!([1, "a", null])), "[1,<<\"a\">>,null]");
        assert_eq!(
            w(&json!({"a": 1, "b": [true]})),
            "{[{<<\"a\">>,1},{<<\"b\">>,[true]}]}"
        );
        assert_eq!(w(&json!({})), "{[]}");
        assert_eq!(w(&json!([])), "[]");
        assert_eq!(w(&json!("a\"b\\c\n")), "<<\"a\\\"b\\\\c\\n\">>");
        assert_eq!(w(&json!("é")), "<<\"é\">>");
        assert_eq!(w(&json!("ā")), "<<196,129>>");
        assert_eq!(w(&json!("\u{1}")), "<<1>>");
    }

    #[test]
    fn floats() {
        let f = |s: &str| w(&serde_json::from_str::<Value>(s).unwrap());
        assert_eq!(f("1.5"), "1.5");
        assert_eq!(f("1.0"), "1.0");
        assert_eq!(f("100.0"), "100.0");
        assert_eq!(f("1e20"), "1.0e20");
        assert_eq!(f("1e10"), "1.0e10");
        assert_eq!(f("12345.0"), "12345.0");
        assert_eq!(f("0.001"), "0.001");
        assert_eq!(f("1e-5"), "1.0e-5");
        assert_eq!(f("-2.5"), "-2.5");
        assert_eq!(f("0.1"), "0.1");
    }
}
