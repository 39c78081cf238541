//! JavaScript's number conversions: `Number::toString`, `StringToNumber`, and a number as
//! `JSON.stringify` prints it.

use serde_json::{Number, Value};

/// Below this magnitude every integral double is an exact integer (2^53).
const EXACT_INTEGER_LIMIT: f64 = 9_007_199_254_740_992.0;

/// Largest magnitude `JSON.stringify` still prints as a plain integer (it switches to
/// exponent notation at 1e21).
const PLAIN_INTEGER_LIMIT: f64 = 1e21;

/// A JS number as JSON, printed as `JSON.stringify` prints it: integral values as integers
/// (912, not 912.0; beyond 2^53 with the shortest round-trip digits padded with zeros, as
/// in 123456789012345680000); NaN and ±Infinity become `null`.
pub fn to_json(f: f64) -> Value {
    if !f.is_finite() {
        return Value::Null;
    }
    if f.fract() == 0.0 && f.abs() < EXACT_INTEGER_LIMIT {
        return Value::Number(Number::from(f as i64));
    }
    if f.fract() == 0.0 && f.abs() < PLAIN_INTEGER_LIMIT {
        // Rust prints floats in full decimal with the shortest round-trip digits.
        if let Ok(n) = format!("{f}").parse::<Number>() {
            return Value::Number(n);
        }
    }
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// `Number.prototype.toString()` (radix 10): the shortest digits that round-trip, in plain
/// notation from 1e-6 up to 1e21 and in exponent notation (`1.5e-7`, `1e+21`) outside.
pub fn to_string(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f == 0.0 {
        return "0".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let n = exp.parse::<i32>().expect("exponent") + 1;
    let mut out = String::with_capacity(k as usize + 8);
    if f < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

/// `StringToNumber`: blank text is 0; a decimal literal with optional sign and exponent,
/// or `±Infinity`, between JavaScript's white space is its value; anything else is NaN.
/// `None` for the `0x`, `0o` and `0b` literals, which are left to the engine.
pub fn from_string(s: &str) -> Option<f64> {
    let t = s.trim_matches(is_js_space);
    if t.is_empty() {
        return Some(0.0);
    }
    let (sign, body) = match t.as_bytes()[0] {
        b'+' => (1.0, &t[1..]),
        b'-' => (-1.0, &t[1..]),
        _ => (1.0, t),
    };
    if body == "Infinity" {
        return Some(sign * f64::INFINITY);
    }
    let unsigned = t.len() == body.len();
    if unsigned
        && ["0x", "0X", "0o", "0O", "0b", "0B"]
            .iter()
            .any(|p| body.starts_with(p))
    {
        return None;
    }
    if !is_decimal_literal(body) {
        return Some(f64::NAN);
    }
    body.parse::<f64>().ok().map(|v| sign * v)
}

/// JavaScript's `WhiteSpace` and `LineTerminator`: tab, vertical tab, form feed, the
/// Unicode space separators (Zs), the byte order mark, and the four line terminators.
fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

/// `StrUnsignedDecimalLiteral` without `Infinity`: digits with an optional fraction (at
/// least one digit in all) and an optional exponent.
fn is_decimal_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let int_digits = count_digits(&b[i..]);
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(&b[i..]);
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = count_digits(&b[i..]);
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == b.len()
}

fn count_digits(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// Whether `key` is an array index (a canonical integer below 2^32 − 1), which JavaScript
/// orders before an object's other keys.
pub fn is_array_index(key: &str) -> bool {
    array_index(key).is_some()
}

/// The array index `key` names, if it is one.
pub fn array_index(key: &str) -> Option<u32> {
    let b = key.as_bytes();
    if b.is_empty()
        || b.len() > 10
        || !b.iter().all(u8::is_ascii_digit)
        || (b[0] == b'0' && b.len() > 1)
    {
        return None;
    }
    let v: u64 = key.parse().ok()?;
    (v < u32::MAX as u64).then_some(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_string_follows_number_to_string() {
        for (f, s) in [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (2.5e300, "2.5e+300"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (5e-324, "5e-324"),
            (123.456, "123.456"),
        ] {
            assert_eq!(to_string(f), s, "{f}");
        }
    }

    #[test]
    fn from_string_follows_string_to_number() {
        let nan = |s: &str| from_string(s).is_some_and(f64::is_nan);
        assert_eq!(from_string(""), Some(0.0));
        assert_eq!(from_string("  \n"), Some(0.0));
        assert_eq!(from_string(" 12 "), Some(12.0));
        assert_eq!(from_string("-1.5e3"), Some(-1500.0));
        assert_eq!(from_string(".5"), Some(0.5));
        assert_eq!(from_string("5."), Some(5.0));
        assert_eq!(from_string("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(nan("inf") && nan("nan") && nan("1e") && nan(".") && nan("1 2") && nan("++1"));
        assert!(nan("infinity") && nan("-0x10") && nan("1_000"));
        assert_eq!(from_string("0x10"), None);
        assert_eq!(from_string("\u{a0}5\u{3000}"), Some(5.0));
        assert!(nan("é") && nan("٣"));
    }

    #[test]
    fn array_indexes() {
        assert!(is_array_index("0") && is_array_index("4294967294"));
        assert!(!is_array_index("4294967295") && !is_array_index("01") && !is_array_index("-1"));
        assert!(!is_array_index("") && !is_array_index("1.0"));
    }
}
