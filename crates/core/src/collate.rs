//! CouchDB view-key collation: the order in which view rows are sorted, as a comparison
//! ([`compare`]) and as an order-preserving byte encoding ([`encode_key`]) for storing keys
//! in a byte-ordered store.
//!
//! The order (CouchDB's documented view collation) is:
//!
//! * by type first: `null` < `false` < `true` < numbers < strings < arrays < objects;
//! * numbers by numeric value, exactly: `3`, `3.0` and `30e-1` are equal, and integers of
//!   any size compare exactly against each other and against doubles (an integer literal
//!   is an exact integer, any other literal is the nearest `f64`, as CouchDB's JSON decoder
//!   reads them; Erlang then compares the two exactly). A literal beyond the `f64` range
//!   such as `1e400` counts as ±infinity, above (below) every other number;
//! * strings by the Unicode Collation Algorithm with the root (CLDR) collation and
//!   default options (tertiary strength), as CouchDB does with ICU's root collator:
//!   `"a"` < `"A"` < `"aa"` < `"b"` < `"B"`. Strings that collate equal (e.g. canonically
//!   equivalent ones, or ones differing only by completely ignorable characters such as
//!   U+0000) compare `Equal`; CouchDB then orders rows by document id;
//! * arrays element by element, a proper prefix first;
//! * objects member by member in their stored order, comparing the member name (as a
//!   string) and then the value, a proper prefix first — `{"b":2}` < `{"b":2,"a":1}` <
//!   `{"b":2,"c":2}`, whatever the names sort as after the first difference.
//!
//! [`compare_raw`] / [`encode_key_raw`] give the order of views with `"collation": "raw"`,
//! where CouchDB compares keys as Erlang terms: by type numbers < `false` < `null` < `true`
//! (atoms, by name) < objects (tuples) < arrays (lists) < strings (binaries); strings and
//! member names by their UTF-8 bytes (= code point order), a proper prefix first; numbers,
//! arrays and objects within their type as above.
//!
//! # Encoding
//!
//! `encode_key(a).cmp(&encode_key(b)) == compare(a, b)` for all values, so a store that
//! sorts keys bytewise returns rows in view order. Each value starts with a type tag
//! (`0x02` null … `0x08` object); arrays and objects end with `0x01`, below every tag, so a
//! proper prefix sorts first. A string is its ICU sort key (raw mode: its UTF-8) with any
//! `0x00` byte written as `0x00 0xFF`, then a `0x00` terminator. An object member is a
//! string-tagged name followed by its value. A number is a class byte (−∞, negative,
//! zero, positive, +∞) and, for non-zero finite values, the binary exponent and the
//! mantissa bits after the leading one, seven to a byte, bitwise inverted for negatives —
//! exact for every value, compact for small integers.
//!
//! # Stability of stored keys
//!
//! ICU sort keys are only comparable with sort keys made by the same collation data and
//! code: a new `icu_collator` release (new CLDR or Unicode data, or a change to the
//! sort-key algorithm) may order or encode strings differently. An index that stores
//! [`encode_key`] output must record [`collator_version`] (and [`KEY_FORMAT_VERSION`],
//! for this module's own layout) and rebuild itself when either changes. Raw-mode keys
//! depend only on [`KEY_FORMAT_VERSION`].

use std::cmp::Ordering;
use std::sync::OnceLock;

use icu_collator::{Collator, CollatorBorrowed};
use serde_json::{Map, Number, Value};

/// The `icu_collator` crate version whose root collation produces the string sort keys in
/// [`encode_key`] (its compiled data: CLDR 49, Unicode 18). Kept in step with Cargo.lock by
/// a test.
pub const ICU_COLLATOR_VERSION: &str = "2.4.0";

/// Version of this module's byte layout (tags, number and string framing). Bump it when
/// the layout changes so stored indexes know to rebuild.
pub const KEY_FORMAT_VERSION: u32 = 1;

/// Version of the raw-mode layout on top of [`KEY_FORMAT_VERSION`]: 2 since raw keys
/// order their types as Erlang terms.
pub const RAW_KEY_FORMAT_VERSION: u32 = 2;

/// The `icu_collator` version behind [`encode_key`]'s string sort keys, for stored indexes
/// to record next to their keys (see the module docs).
pub fn collator_version() -> &'static str {
    ICU_COLLATOR_VERSION
}

/// The process-wide root collator with default options (compiled data, so it cannot fail).
fn collator() -> &'static CollatorBorrowed<'static> {
    static COLLATOR: OnceLock<CollatorBorrowed<'static>> = OnceLock::new();
    COLLATOR.get_or_init(|| {
        Collator::try_new(Default::default(), Default::default())
            .expect("compiled root collation data is always available")
    })
}

#[derive(Clone, Copy)]
enum Mode {
    /// ICU root collation for strings (CouchDB's default).
    Icu,
    /// Unicode code point order for strings (CouchDB's `"collation": "raw"`).
    Raw,
}

/// Compares two view keys in CouchDB's default (ICU) view collation.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    cmp_value(a, b, Mode::Icu)
}

/// Compares two view keys as CouchDB's `"collation": "raw"` does (Erlang term order; see
/// the module docs).
pub fn compare_raw(a: &Value, b: &Value) -> Ordering {
    cmp_value(a, b, Mode::Raw)
}

/// Appends the order-preserving encoding of `v` to `out`: encodings compare bytewise as
/// [`compare`] compares the values. Depends on the ICU data version (module docs).
pub fn encode_key(v: &Value, out: &mut Vec<u8>) {
    encode_value(v, out, Mode::Icu);
}

/// Appends the order-preserving encoding of `v` under [`compare_raw`] to `out`.
pub fn encode_key_raw(v: &Value, out: &mut Vec<u8>) {
    encode_value(v, out, Mode::Raw);
}

// ---------------------------------------------------------------------------------------
// Comparison

/// The type tag of `v`: its rank among types, and its first byte when encoded.
fn tag(v: &Value, mode: Mode) -> u8 {
    match (mode, v) {
        (Mode::Icu, Value::Null) => TAG_NULL,
        (Mode::Icu, Value::Bool(false)) => TAG_FALSE,
        (Mode::Icu, Value::Bool(true)) => TAG_TRUE,
        (Mode::Icu, Value::Number(_)) => TAG_NUMBER,
        (Mode::Icu, Value::String(_)) => TAG_STRING,
        (Mode::Icu, Value::Array(_)) => TAG_ARRAY,
        (Mode::Icu, Value::Object(_)) => TAG_OBJECT,
        (Mode::Raw, Value::Number(_)) => RAW_NUMBER,
        (Mode::Raw, Value::Bool(false)) => RAW_FALSE,
        (Mode::Raw, Value::Null) => RAW_NULL,
        (Mode::Raw, Value::Bool(true)) => RAW_TRUE,
        (Mode::Raw, Value::Object(_)) => RAW_OBJECT,
        (Mode::Raw, Value::Array(_)) => RAW_ARRAY,
        (Mode::Raw, Value::String(_)) => RAW_STRING,
    }
}

fn cmp_value(a: &Value, b: &Value, mode: Mode) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_number(x, y),
        (Value::String(x), Value::String(y)) => cmp_str(x, y, mode),
        (Value::Array(x), Value::Array(y)) => cmp_array(x, y, mode),
        (Value::Object(x), Value::Object(y)) => cmp_object(x, y, mode),
        _ => tag(a, mode).cmp(&tag(b, mode)),
    }
}

fn cmp_str(a: &str, b: &str, mode: Mode) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match mode {
        // Byte order of UTF-8 is code point order.
        Mode::Raw => a.cmp(b),
        Mode::Icu => collator().compare(a, b),
    }
}

fn cmp_array(a: &[Value], b: &[Value], mode: Mode) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = cmp_value(x, y, mode);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

fn cmp_object(a: &Map<String, Value>, b: &Map<String, Value>, mode: Mode) -> Ordering {
    for ((ka, va), (kb, vb)) in a.iter().zip(b) {
        let o = cmp_str(ka, kb, mode).then_with(|| cmp_value(va, vb, mode));
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// A JSON number as CouchDB's decoder sees it.
enum Num<'a> {
    /// An integer literal that fits in i64.
    Int(i64),
    /// An integer literal beyond i64: sign and decimal digits without leading zeros.
    Big { neg: bool, digits: &'a str },
    /// Any other literal, as the nearest double (±infinity beyond the range; never NaN).
    Float(f64),
}

fn classify(n: &Number) -> Num<'_> {
    let s = n.as_str();
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(i) = s.parse::<i64>() {
            return Num::Int(i);
        }
        return Num::Big {
            neg,
            digits: body.trim_start_matches('0'),
        };
    }
    // serde_json only holds valid JSON number text; anything unparsable counts as zero.
    let f = s.parse::<f64>().ok().filter(|f| !f.is_nan()).unwrap_or(0.0);
    Num::Float(f)
}

/// 2^53: integers up to this magnitude convert to f64 exactly.
const F64_EXACT_INT: u64 = 1 << 53;

fn cmp_number(a: &Number, b: &Number) -> Ordering {
    let (x, y) = (classify(a), classify(b));
    // Fast paths, each exact; everything else compares the exact encodings.
    match (&x, &y) {
        (Num::Int(i), Num::Int(j)) => return i.cmp(j),
        (Num::Float(f), Num::Float(g)) => return f.partial_cmp(g).unwrap_or(Ordering::Equal),
        (Num::Int(i), Num::Float(g)) if i.unsigned_abs() <= F64_EXACT_INT => {
            return (*i as f64).partial_cmp(g).unwrap_or(Ordering::Equal)
        }
        (Num::Float(f), Num::Int(j)) if j.unsigned_abs() <= F64_EXACT_INT => {
            return f.partial_cmp(&(*j as f64)).unwrap_or(Ordering::Equal)
        }
        _ => {}
    }
    let (mut ka, mut kb) = (Vec::new(), Vec::new());
    encode_num(&x, &mut ka);
    encode_num(&y, &mut kb);
    ka.cmp(&kb)
}

// ---------------------------------------------------------------------------------------
// Encoding

/// Closes an array or object; below every type tag, so a proper prefix sorts first.
const END: u8 = 0x01;
const TAG_NULL: u8 = 0x02;
const TAG_FALSE: u8 = 0x03;
const TAG_TRUE: u8 = 0x04;
const TAG_NUMBER: u8 = 0x05;
const TAG_STRING: u8 = 0x06;
const TAG_ARRAY: u8 = 0x07;
const TAG_OBJECT: u8 = 0x08;
// Raw mode's tags, in Erlang term order: number < atom (false < null < true, by name) <
// tuple (an object) < list (an array) < binary (a string). Object member names keep
// `TAG_STRING` in both modes.
const RAW_NUMBER: u8 = 0x10;
const RAW_FALSE: u8 = 0x11;
const RAW_NULL: u8 = 0x12;
const RAW_TRUE: u8 = 0x13;
const RAW_OBJECT: u8 = 0x14;
const RAW_ARRAY: u8 = 0x15;
const RAW_STRING: u8 = 0x16;

/// Ends a string's bytes. Followed only by a tag, [`END`] or the end of the key, all
/// below [`STR_ESCAPE`].
const STR_TERM: u8 = 0x00;
/// Follows a `0x00` byte that belongs to the string.
const STR_ESCAPE: u8 = 0xFF;

const NUM_NEG_INF: u8 = 0x01;
const NUM_NEG: u8 = 0x02;
const NUM_ZERO: u8 = 0x03;
const NUM_POS: u8 = 0x04;
const NUM_POS_INF: u8 = 0x05;

fn encode_value(v: &Value, out: &mut Vec<u8>, mode: Mode) {
    out.push(tag(v, mode));
    match v {
        Value::Null | Value::Bool(_) => {}
        Value::Number(n) => encode_num(&classify(n), out),
        Value::String(s) => encode_str(s, out, mode),
        Value::Array(items) => {
            for item in items {
                encode_value(item, out, mode);
            }
            out.push(END);
        }
        Value::Object(members) => {
            for (name, value) in members {
                // The tag keeps a member (even one named "") above END.
                out.push(TAG_STRING);
                encode_str(name, out, mode);
                encode_value(value, out, mode);
            }
            out.push(END);
        }
    }
}

/// Short strings and their ICU sort keys, per thread. View keys repeat the same short
/// strings (types, dates, tags) across documents, and a lookup costs a fraction of
/// computing the key again (ICU was ~10% of a view build's map work).
const SORT_KEY_CACHE_LEN: usize = 32;
const SORT_KEY_CACHE_ENTRIES: usize = 4096;

thread_local! {
    static SORT_KEYS: std::cell::RefCell<std::collections::HashMap<Box<str>, Box<[u8]>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn icu_sort_key(s: &str, out: &mut Vec<u8>) {
    if s.len() > SORT_KEY_CACHE_LEN {
        let Ok(()) = collator().write_sort_key_to(s, out);
        return;
    }
    SORT_KEYS.with_borrow_mut(|cache| {
        if let Some(key) = cache.get(s) {
            out.extend_from_slice(key);
            return;
        }
        let start = out.len();
        let Ok(()) = collator().write_sort_key_to(s, out);
        if cache.len() >= SORT_KEY_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(s.into(), out[start..].into());
    })
}

fn encode_str(s: &str, out: &mut Vec<u8>, mode: Mode) {
    let start = out.len();
    match mode {
        Mode::Raw => out.extend_from_slice(s.as_bytes()),
        Mode::Icu => icu_sort_key(s, out),
    }
    // ICU sort keys hold no zero byte (as in ICU4C), but raw strings may (U+0000).
    if out[start..].contains(&0) {
        let body = out.split_off(start);
        for b in body {
            out.push(b);
            if b == 0 {
                out.push(STR_ESCAPE);
            }
        }
    }
    out.push(STR_TERM);
}

fn encode_num(n: &Num<'_>, out: &mut Vec<u8>) {
    match *n {
        Num::Int(i) => encode_magnitude(i < 0, &[i.unsigned_abs()], 0, out),
        Num::Big { neg, digits } => encode_magnitude(neg, &decimal_to_limbs(digits), 0, out),
        Num::Float(f) if f.is_infinite() => {
            out.push(if f < 0.0 { NUM_NEG_INF } else { NUM_POS_INF })
        }
        Num::Float(f) => {
            let bits = f.to_bits();
            let biased = ((bits >> 52) & 0x7ff) as i64;
            let frac = bits & ((1 << 52) - 1);
            let (mantissa, shift) = if biased == 0 {
                (frac, -1074)
            } else {
                (frac | (1 << 52), biased - 1075)
            };
            encode_magnitude(f.is_sign_negative(), &[mantissa], shift, out)
        }
    }
}

/// Encodes ±(limbs × 2^shift), `limbs` little-endian. Layout for a non-zero value: class
/// byte, exponent of the leading one bit, the bits below it (trailing zeros dropped) seven
/// to a byte with the high bit set, then `0x00`; everything after the class byte is
/// inverted for negative values, so larger magnitudes sort first.
fn encode_magnitude(neg: bool, limbs: &[u64], shift: i64, out: &mut Vec<u8>) {
    let Some(top) = limbs.iter().rposition(|&l| l != 0) else {
        out.push(NUM_ZERO);
        return;
    };
    let low_limb = limbs.iter().position(|&l| l != 0).unwrap_or(top);
    let bit_len = top as u64 * 64 + u64::from(64 - limbs[top].leading_zeros());
    let low_bit = low_limb as u64 * 64 + u64::from(limbs[low_limb].trailing_zeros());

    out.push(if neg { NUM_NEG } else { NUM_POS });
    let start = out.len();
    encode_exponent((bit_len - 1) as i64 + shift, out);
    let (mut acc, mut n) = (0u8, 0u32);
    let mut pos = bit_len - 1;
    while pos > low_bit {
        pos -= 1;
        let bit = (limbs[(pos / 64) as usize] >> (pos % 64)) & 1;
        acc = (acc << 1) | bit as u8;
        n += 1;
        if n == 7 {
            out.push(0x80 | acc);
            (acc, n) = (0, 0);
        }
    }
    if n > 0 {
        out.push(0x80 | (acc << (7 - n)));
    }
    out.push(0x00);
    if neg {
        for b in &mut out[start..] {
            *b = !*b;
        }
    }
}

/// Order-preserving, self-delimiting signed integer: a header byte giving sign and length,
/// then the minimal big-endian bytes (of the value, or of its one's complement when
/// negative, inverted so that larger negatives sort later).
fn encode_exponent(e: i64, out: &mut Vec<u8>) {
    fn byte_len(u: u64) -> usize {
        (64 - u.leading_zeros() as usize).div_ceil(8)
    }
    if e >= 0 {
        let u = e as u64;
        let n = byte_len(u);
        out.push(0x80 + n as u8);
        out.extend_from_slice(&u.to_be_bytes()[8 - n..]);
    } else {
        let c = !(e as u64); // -e - 1 >= 0
        let n = byte_len(c);
        out.push(0x7f - n as u8);
        out.extend_from_slice(&(!c).to_be_bytes()[8 - n..]);
    }
}

/// Decimal digits to little-endian u64 limbs, 19 digits at a time.
fn decimal_to_limbs(digits: &str) -> Vec<u64> {
    let mut limbs: Vec<u64> = Vec::with_capacity(digits.len() / 19 + 1);
    for chunk in digits.as_bytes().chunks(19) {
        let mul = 10u64.pow(chunk.len() as u32);
        let add = chunk
            .iter()
            .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
        let mut carry = u128::from(add);
        for limb in limbs.iter_mut() {
            let t = u128::from(*limb) * u128::from(mul) + carry;
            *limb = t as u64;
            carry = t >> 64;
        }
        if carry != 0 {
            limbs.push(carry as u64);
        }
    }
    limbs
}

/// Length of the first encoded value in `enc` (output of [`encode_key`] or
/// [`encode_key_raw`], possibly followed by other bytes). Encodings are self-delimiting
/// and prefix-free, so a key's bytes can be followed by a tie-breaker such as a document id
/// (anything that does not start with `0xFF`, which no UTF-8 text does).
/// `None` if `enc` does not start with a whole encoded value.
pub fn encoded_len(enc: &[u8]) -> Option<usize> {
    skip_value(enc, 0)
}

/// Length of the prefix of an encoded key that identifies its group at `group_level`:
/// for an array key, the tag and its first `level` elements (the whole array if shorter);
/// for any other key, the whole key. Keys of one group are exactly the keys starting with
/// these bytes, so a group is a contiguous range in encoded order.
pub fn group_prefix_len(enc: &[u8], level: usize) -> Option<usize> {
    if !matches!(enc.first(), Some(&(TAG_ARRAY | RAW_ARRAY))) {
        return encoded_len(enc);
    }
    let mut pos = 1;
    for _ in 0..level {
        if *enc.get(pos)? == END {
            return Some(pos + 1);
        }
        pos = skip_value(enc, pos)?;
    }
    Some(pos)
}

fn skip_value(enc: &[u8], pos: usize) -> Option<usize> {
    let pos_after = pos + 1;
    match *enc.get(pos)? {
        TAG_NULL | TAG_FALSE | TAG_TRUE | RAW_FALSE | RAW_NULL | RAW_TRUE => Some(pos_after),
        TAG_NUMBER | RAW_NUMBER => skip_number(enc, pos_after),
        TAG_STRING | RAW_STRING => skip_string(enc, pos_after),
        TAG_ARRAY | RAW_ARRAY => skip_items(enc, pos_after, false),
        TAG_OBJECT | RAW_OBJECT => skip_items(enc, pos_after, true),
        _ => None,
    }
}

fn skip_items(enc: &[u8], mut pos: usize, members: bool) -> Option<usize> {
    loop {
        if *enc.get(pos)? == END {
            return Some(pos + 1);
        }
        if members {
            pos = skip_value(enc, pos)?; // the member name
        }
        pos = skip_value(enc, pos)?;
    }
}

fn skip_string(enc: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        if *enc.get(pos)? == STR_TERM {
            if enc.get(pos + 1) != Some(&STR_ESCAPE) {
                return Some(pos + 1);
            }
            pos += 1;
        }
        pos += 1;
    }
}

fn skip_number(enc: &[u8], pos: usize) -> Option<usize> {
    let class = *enc.get(pos)?;
    let neg = match class {
        NUM_NEG_INF | NUM_ZERO | NUM_POS_INF => return Some(pos + 1),
        NUM_NEG => true,
        NUM_POS => false,
        _ => return None,
    };
    let flip = |b: u8| if neg { !b } else { b };
    let header = flip(*enc.get(pos + 1)?);
    let exp_bytes = if header >= 0x80 {
        usize::from(header - 0x80)
    } else {
        usize::from(0x7f - header)
    };
    let mut p = pos + 2 + exp_bytes;
    while flip(*enc.get(p)?) != 0x00 {
        p += 1;
    }
    Some(p + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn v(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn key(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(v, &mut out);
        out
    }

    fn key_raw(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key_raw(v, &mut out);
        out
    }

    /// Every pair in `table` compares (and encodes) by its position.
    fn check_table(
        table: &[Value],
        cmp: fn(&Value, &Value) -> Ordering,
        enc: fn(&Value) -> Vec<u8>,
    ) {
        for (i, a) in table.iter().enumerate() {
            for (j, b) in table.iter().enumerate() {
                assert_eq!(cmp(a, b), i.cmp(&j), "compare({a}, {b})");
                assert_eq!(enc(a).cmp(&enc(b)), i.cmp(&j), "encode({a}) vs encode({b})");
            }
        }
    }

    /// The example ordering from CouchDB's "Views Collation" documentation.
    const DOCUMENTED: &[&str] = &[
        "null",
        "false",
        "true",
        "1",
        "2",
        "3.0",
        "4",
        r#""a""#,
        r#""A""#,
        r#""aa""#,
        r#""b""#,
        r#""B""#,
        r#""ba""#,
        r#""bb""#,
        r#"["a"]"#,
        r#"["b"]"#,
        r#"["b","c"]"#,
        r#"["b","c","a"]"#,
        r#"["b","d"]"#,
        r#"["b","d","e"]"#,
        r#"{"a":1}"#,
        r#"{"a":2}"#,
        r#"{"b":1}"#,
        r#"{"b":2}"#,
        r#"{"b":2,"a":1}"#,
        r#"{"b":2,"c":2}"#,
    ];

    #[test]
    fn documented_order() {
        let table: Vec<Value> = DOCUMENTED.iter().map(|t| v(t)).collect();
        check_table(&table, compare, key);
        // Sorting a reversed copy by encoded key gives the documented order back.
        let mut shuffled = table.clone();
        shuffled.reverse();
        shuffled.sort_by_key(key);
        assert_eq!(shuffled, table);
    }

    #[test]
    fn raw_order() {
        // Erlang term order: numbers < false < null < true < objects < arrays < strings.
        let table: Vec<Value> = [
            "-1e400",
            "-5",
            "0",
            "1",
            "1e400",
            "false",
            "null",
            "true",
            "{}",
            r#"{"B":1}"#,
            r#"{"a":1}"#,
            r#"{"a":1,"b":0}"#,
            "[]",
            "[1]",
            "[null]",
            r#"["B"]"#,
            r#"["a"]"#,
            r#""""#,
            r#""A""#,
            r#""B""#,
            r#""Z""#,
            r#""a""#,
            r#""aa""#,
            r#""b""#,
            r#""é""#,
            r#""\uffff""#,
            r#""😀""#,
        ]
        .iter()
        .map(|t| v(t))
        .collect();
        check_table(&table, compare_raw, key_raw);
    }

    #[test]
    fn zero_bytes_in_raw_strings() {
        // U+0000 is a 0x00 byte in raw keys: escaped, so a string ending early still sorts
        // below one that continues with U+0000, even with more key after it.
        let table: Vec<Value> = [
            r#"{"a":1,"b":1}"#,
            r#"{"a\u0000":1}"#,
            r#"[["a"]]"#,
            r#"[["a"],null]"#,
            r#"[["a"],"z"]"#,
            r#"[["a\u0000"]]"#,
            r#"[["a\u0000"],null]"#,
            r#"[["a\u0000\u0000"]]"#,
            r#"[["a\u0001"]]"#,
        ]
        .iter()
        .map(|t| v(t))
        .collect();
        check_table(&table, compare_raw, key_raw);
        // In ICU collation U+0000 is completely ignorable.
        assert_eq!(compare(&table[2], &table[5]), Ordering::Equal);
        assert_eq!(key(&table[2]), key(&table[5]));
    }

    #[test]
    fn numbers_compare_by_exact_value() {
        let max_double = format!("{:.0}", f64::MAX); // exact: 2^1024 - 2^971
        let max_double_plus_one = format!("{}9", &max_double[..max_double.len() - 1]);
        let ten_pow_309_plus_one = format!("1{}1", "0".repeat(308));
        // Groups of equal numbers, in ascending order.
        let table: Vec<Vec<&str>> = vec![
            vec!["-1e400", "-2e400"],
            vec!["-18446744073709551617"],
            vec!["-9223372036854775809"],
            vec!["-9223372036854775808", "-9.223372036854775808e18"],
            vec!["-3.5"],
            vec!["-3", "-3.0", "-30e-1", "-0.3e1"],
            vec!["-5e-324"],
            vec!["0", "-0", "0.0", "-0.0", "0e10", "1e-400", "-1e-400"],
            vec!["5e-324"],
            vec!["0.1"],
            vec!["0.5", "5e-1"],
            vec!["1", "1.0", "1e0", "10e-1"],
            vec!["1.0000000000000002"],
            vec!["2"],
            vec!["9007199254740991"],
            vec![
                "9007199254740992",
                "9007199254740992.0",
                "9007199254740993.0",
            ],
            vec!["9007199254740993"],
            vec!["9007199254740994", "9007199254740994.0"],
            vec!["9223372036854775807"],
            vec!["9223372036854775808", "9223372036854775808.0"],
            vec!["18446744073709551615"],
            vec!["18446744073709551616", "1.8446744073709551616e19"],
            vec!["18446744073709551617"],
            vec!["1e300"],
            vec!["1.7976931348623157e308", &max_double],
            vec![&max_double_plus_one],
            vec![&ten_pow_309_plus_one],
            vec!["1e400", "2e400"],
        ];
        let groups: Vec<Vec<Value>> = table
            .iter()
            .map(|g| g.iter().map(|t| v(t)).collect())
            .collect();
        for (i, ga) in groups.iter().enumerate() {
            for (j, gb) in groups.iter().enumerate() {
                for a in ga {
                    for b in gb {
                        assert_eq!(compare(a, b), i.cmp(&j), "compare({a}, {b})");
                        assert_eq!(key(a).cmp(&key(b)), i.cmp(&j), "encode({a}) vs encode({b})");
                    }
                }
            }
        }
        // Small integers stay small.
        assert_eq!(key(&json!(1)), [TAG_NUMBER, NUM_POS, 0x80, 0x00]);
    }

    #[test]
    fn high_key_sentinels_sort_above_text() {
        let ordinary = [
            "",
            "a",
            "zzzz",
            "Z",
            "é",
            "ß",
            "中文",
            "日本語",
            "한국어",
            "Ωμέγα",
            "😀",
        ];
        for s in ordinary {
            let s = json!(s);
            for hi in ["\u{fff0}", "\u{ffff}"] {
                let hi = json!(hi);
                assert_eq!(compare(&s, &hi), Ordering::Less, "{s} vs {hi}");
                assert!(key(&s) < key(&hi), "{s} vs {hi}");
            }
        }
        // U+FFFF is the very top: above U+FFFD and unassigned or private-use code points.
        for s in ["\u{fff0}", "\u{fffd}", "\u{10fffd}", "\u{e000}", "\u{fffe}"] {
            assert_eq!(
                compare(&json!(s), &json!("\u{ffff}")),
                Ordering::Less,
                "{s:?}"
            );
        }
        // The docs' prefix-range idiom: endkey = prefix + "\ufff0" / "\uffff".
        for end in ["abc\u{fff0}", "abc\u{ffff}"] {
            let end = json!(end);
            for inside in ["abc", "abcz", "abcZZZ", "abcé", "abc中", "abc😀"] {
                assert_eq!(compare(&json!(inside), &end), Ordering::Less, "{inside}");
            }
            assert_eq!(compare(&json!("abd"), &end), Ordering::Greater);
            // In a compound key, too.
            assert_eq!(
                compare(&json!(["abc", {"x": [1, 2]}]), &json!([end, null])),
                Ordering::Less
            );
        }
        assert!(key(&json!(["foo", "zzz"])) < key(&json!(["foo", "\u{ffff}"])));
        assert!(key(&json!(["foo", {}])) > key(&json!(["foo", "\u{ffff}"])));
    }

    #[test]
    fn strings_collate_like_icu_root() {
        let cases = [
            ("a", "A", Ordering::Less),
            ("A", "aa", Ordering::Less),
            ("resume", "résumé", Ordering::Less),
            ("résumé", "Resume", Ordering::Greater),
            ("e\u{301}", "é", Ordering::Equal), // canonically equivalent
            ("a\u{0}b", "ab", Ordering::Equal), // U+0000 is completely ignorable
            ("a b", "ab", Ordering::Less),
            ("10", "9", Ordering::Less),
        ];
        for (a, b, o) in cases {
            let (a, b) = (json!(a), json!(b));
            assert_eq!(compare(&a, &b), o, "{a} vs {b}");
            assert_eq!(key(&a).cmp(&key(&b)), o, "{a} vs {b}");
        }
    }

    #[test]
    fn empty_containers_and_empty_names() {
        let table: Vec<Value> = [
            r#""""#,
            "[]",
            "[null]",
            r#"[""]"#,
            "[[]]",
            "{}",
            r#"{"":null}"#,
            r#"{"":1}"#,
            r#"{"a":null}"#,
        ]
        .iter()
        .map(|t| v(t))
        .collect();
        check_table(&table, compare, key);
        let raw: Vec<Value> = [
            "{}",
            r#"{"":1}"#,
            r#"{"":null}"#,
            r#"{"a":null}"#,
            "[]",
            "[null]",
            "[[]]",
            r#"[""]"#,
            r#""""#,
        ]
        .iter()
        .map(|t| v(t))
        .collect();
        check_table(&raw, compare_raw, key_raw);
    }

    #[test]
    fn collator_version_matches_lockfile() {
        // Embedded at compile time: a runtime path baked in by `env!` goes stale when the
        // shared target directory reuses a build made from another checkout.
        let lock = include_str!("../../../Cargo.lock");
        let mut lines = lock.lines();
        let found = loop {
            match lines.next() {
                Some(r#"name = "icu_collator""#) => break lines.next().unwrap().to_owned(),
                Some(_) => {}
                None => panic!("icu_collator not in Cargo.lock"),
            }
        };
        assert_eq!(found, format!(r#"version = "{}""#, collator_version()));
    }

    // ----- property tests -----

    fn number_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|i| i.to_string()),
            (-20i64..20).prop_map(|i| i.to_string()),
            // One small value written several ways, so equal numbers meet often.
            (-6i64..6, 0..5u8).prop_map(|(i, form)| match form {
                0 => format!("{i}"),
                1 => format!("{i}.0"),
                2 => format!("{i}e0"),
                3 => format!("{}e-1", i * 10),
                _ => format!("{}{}.{}e1", if i < 0 { "-" } else { "" }, 0, i.abs()),
            }),
            (-1000i64..1000, 0u32..1000).prop_map(|(i, f)| format!("{i}.{f:03}")),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| Number::from_f64(f).unwrap().to_string()),
            "-?[1-9][0-9]{15,45}",
            (0i64..6).prop_map(|d| format!("{}", 9007199254740990i64 + d)),
            (0i64..6).prop_map(|d| format!("{}.0", 9007199254740990i64 + d)),
            prop::sample::select(vec![
                "1e400",
                "-1e400",
                "1e-400",
                "5e-324",
                "-5e-324",
                "1.7976931348623157e308",
                "-0",
                "-0.0",
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775808",
                "18446744073709551616",
            ])
            .prop_map(str::to_owned),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        let chars = vec![
            'a', 'A', 'b', 'B', 'e', 'E', 'é', 'É', '\u{301}', 'ß', 's', 'ı', 'i', 'I', 'Å',
            '\u{212B}', ' ', '-', '_', '0', '9', '\0', '\u{ffff}', '\u{fff0}', '\u{fffd}', '中',
            '文', '😀', 'ä', 'æ', 'Ω',
        ];
        prop_oneof![
            4 => prop::collection::vec(prop::sample::select(chars), 0..6)
                .prop_map(|cs| cs.into_iter().collect::<String>()),
            1 => any::<String>(),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            1 => Just(Value::Null),
            1 => any::<bool>().prop_map(Value::Bool),
            3 => number_text().prop_map(|t| v(&t)),
            3 => text().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            let name = prop::sample::select(vec!["", "a", "A", "b", "é", "e\u{301}", "ab"]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((name, inner), 0..4).prop_map(|members| {
                    Value::Object(
                        members
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect(),
                    )
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn encoding_order_matches_compare(a in json_value(), b in json_value()) {
            prop_assert_eq!(key(&a).cmp(&key(&b)), compare(&a, &b), "{} vs {}", a, b);
            prop_assert_eq!(key_raw(&a).cmp(&key_raw(&b)), compare_raw(&a, &b), "{} vs {}", a, b);
        }

        #[test]
        fn compare_is_antisymmetric_and_reflexive(a in json_value(), b in json_value()) {
            prop_assert_eq!(compare(&a, &b), compare(&b, &a).reverse());
            prop_assert_eq!(compare_raw(&a, &b), compare_raw(&b, &a).reverse());
            prop_assert_eq!(compare(&a, &a), Ordering::Equal);
            prop_assert_eq!(compare_raw(&a, &a), Ordering::Equal);
        }

        #[test]
        fn compare_is_transitive(a in json_value(), b in json_value(), c in json_value()) {
            for cmp in [compare as fn(&Value, &Value) -> Ordering, compare_raw] {
                let (ab, bc, ac) = (cmp(&a, &b), cmp(&b, &c), cmp(&a, &c));
                if ab != Ordering::Greater && bc != Ordering::Greater {
                    prop_assert_ne!(ac, Ordering::Greater, "{} {} {}", a, b, c);
                }
                if ab == Ordering::Equal && bc == Ordering::Equal {
                    prop_assert_eq!(ac, Ordering::Equal);
                }
                if ab == Ordering::Less && bc == Ordering::Less {
                    prop_assert_eq!(ac, Ordering::Less);
                }
            }
        }

        /// Sorting many values and checking every pair is a stronger transitivity check
        /// than random triples, which seldom share prefixes.
        #[test]
        fn sorted_lists_are_consistent(mut vals in prop::collection::vec(json_value(), 0..24)) {
            vals.sort_by(compare);
            for i in 0..vals.len() {
                for j in i + 1..vals.len() {
                    prop_assert_ne!(compare(&vals[i], &vals[j]), Ordering::Greater);
                }
            }
            let keys: Vec<Vec<u8>> = vals.iter().map(key).collect();
            prop_assert!(keys.windows(2).all(|w| w[0] <= w[1]));
        }

        #[test]
        fn numbers_match_f64_order_when_both_are_doubles(x in any::<f64>(), y in any::<f64>()) {
            prop_assume!(x.is_finite() && y.is_finite());
            let (a, b) = (json!(x), json!(y));
            prop_assert_eq!(compare(&a, &b), x.partial_cmp(&y).unwrap());
            prop_assert_eq!(key(&a).cmp(&key(&b)), x.partial_cmp(&y).unwrap());
        }

        #[test]
        fn big_integers_match_i128_order(x in any::<i128>(), y in any::<i128>()) {
            let (a, b) = (v(&x.to_string()), v(&y.to_string()));
            prop_assert_eq!(compare(&a, &b), x.cmp(&y));
            prop_assert_eq!(key(&a).cmp(&key(&b)), x.cmp(&y));
        }
    }

    proptest! {
        #[test]
        fn encoded_len_finds_the_end(v in json_value(), tail in prop::collection::vec(0u8..0xFF, 0..4)) {
            for raw in [false, true] {
                let mut enc = if raw { key_raw(&v) } else { key(&v) };
                let len = enc.len();
                enc.extend_from_slice(&tail);
                prop_assert_eq!(encoded_len(&enc), Some(len));
            }
        }

        #[test]
        fn group_prefix_is_the_encoded_prefix(items in prop::collection::vec(json_value(), 0..5), level in 0usize..6) {
            let whole = key(&Value::Array(items.clone()));
            let n = level.min(items.len());
            let mut prefix = key(&Value::Array(items[..n].to_vec()));
            if level > items.len() {
                prop_assert_eq!(group_prefix_len(&whole, level), Some(whole.len()));
            } else {
                prefix.pop(); // the END byte of the shorter array
                prop_assert_eq!(group_prefix_len(&whole, level), Some(prefix.len()));
                prop_assert_eq!(&whole[..prefix.len()], &prefix[..]);
            }
        }
    }
}
