//! Erlang's external term format for JSON values as CouchDB decodes them (jiffy): objects
//! are `{[{Key, Value}]}`, strings binaries, `true`/`false`/`null` atoms, a number literal
//! with `.`, `e` or `E` a float and any other an integer of any size. The bytes are those of
//! `term_to_binary(Term, [{minor_version, 1}])`, which CouchDB hashes into revision ids.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use serde_json::Value;
use std::borrow::Cow;
use std::cell::RefCell;

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
const LARGE_TUPLE: u8 = 105;
const SMALL_ATOM: u8 = 115;
const ATOM_UTF8: u8 = 118;
const SMALL_ATOM_UTF8: u8 = 119;
/// `term_to_binary(T, [compressed])`: the uncompressed size (u32) and a zlib stream follow.
pub const COMPRESSED: u8 = 80;

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
pub fn big(negative: bool, magnitude: &[u8], out: &mut Vec<u8>) {
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

pub fn float(f: f64, out: &mut Vec<u8>) {
    out.push(NEW_FLOAT);
    out.extend(f.to_bits().to_be_bytes());
}

/// A list of small integers as Erlang writes it (`STRING_EXT`): at most 65535 bytes.
pub fn byte_list(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(STRING);
    out.extend((bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn number(text: &str, out: &mut Vec<u8>) {
    if text.contains(['.', 'e', 'E']) {
        return float(text.parse().unwrap_or(f64::INFINITY), out);
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
            Some(bytes) => byte_list(&bytes, out),
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

/// [`value`] straight from JSON text, without building a `Value`: the term of a stored body
/// is computed on the writer's thread for every edit, where parsing into a tree cost ~15×
/// the MD5 of the same bytes. `None` if the text is not one JSON value.
pub fn json_text(text: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let mut p = Transcoder { s: text, i: 0 };
    p.value(out)?;
    p.ws();
    (p.i == text.len()).then_some(())
}

struct Transcoder<'a> {
    s: &'a [u8],
    i: usize,
}

impl Transcoder<'_> {
    fn ws(&mut self) {
        while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.ws();
        (self.s.get(self.i) == Some(&b)).then(|| self.i += 1)
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.i + word.len();
        (self.s.get(self.i..end) == Some(word.as_bytes())).then(|| self.i = end)
    }

    fn value(&mut self, out: &mut Vec<u8>) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(out),
            b'[' => self.array(out),
            b'"' => self.string(out),
            b't' => self.literal("true").map(|()| atom("true", out)),
            b'f' => self.literal("false").map(|()| atom("false", out)),
            b'n' => self.literal("null").map(|()| atom("null", out)),
            _ => self.number(out),
        }
    }

    /// Writes a list header whose count is patched in by [`Self::close_list`].
    fn open_list(out: &mut Vec<u8>) -> usize {
        out.push(LIST);
        out.extend([0; 4]);
        out.len() - 4
    }

    fn close_list(out: &mut Vec<u8>, at: usize, count: usize) {
        if count == 0 {
            out.truncate(at - 1);
        } else {
            out[at..at + 4].copy_from_slice(&(count as u32).to_be_bytes());
        }
        nil(out);
    }

    fn object(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.eat(b'{')?;
        small_tuple(1, out);
        let at = Self::open_list(out);
        let mut count = 0;
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                small_tuple(2, out);
                self.ws();
                self.string(out)?;
                self.eat(b':')?;
                self.value(out)?;
                count += 1;
                match self.peek()? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        Self::close_list(out, at, count);
        Some(())
    }

    /// A list; one of integers 0..=255 only (at most 65535) is rewritten as a byte string,
    /// as Erlang writes it.
    fn array(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.eat(b'[')?;
        let at = Self::open_list(out);
        let mut count = 0;
        let mut bytes_only = true;
        if self.peek()? == b']' {
            self.i += 1;
        } else {
            loop {
                let start = out.len();
                self.value(out)?;
                bytes_only &= out.len() == start + 2 && out[start] == SMALL_INTEGER;
                count += 1;
                match self.peek()? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        if count > 0 && bytes_only && count <= usize::from(u16::MAX) {
            let bytes: Vec<u8> = out[at + 4..].iter().skip(1).step_by(2).copied().collect();
            out.truncate(at - 1);
            byte_list(&bytes, out);
            return Some(());
        }
        Self::close_list(out, at, count);
        Some(())
    }

    /// A number; the common case (an integer that fits 64 bits) without allocating.
    fn number(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let start = self.i;
        let mut integral = true;
        while let Some(&b) = self.s.get(self.i) {
            match b {
                b'0'..=b'9' | b'-' => {}
                b'+' | b'.' | b'e' | b'E' => integral = false,
                _ => break,
            }
            self.i += 1;
        }
        let text = &self.s[start..self.i];
        if text.is_empty() {
            return None;
        }
        if integral && text.len() < 19 {
            let (neg, digits) = match text {
                [b'-', rest @ ..] => (true, rest),
                _ => (false, text),
            };
            let mut n: i64 = 0;
            for &d in digits {
                if !d.is_ascii_digit() {
                    return None;
                }
                n = n * 10 + i64::from(d - b'0');
            }
            integer(if neg { -n } else { n }, out);
            return Some(());
        }
        number(std::str::from_utf8(text).ok()?, out);
        Some(())
    }

    /// A JSON string as a binary of its decoded UTF-8 bytes.
    fn string(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.eat(b'"')?;
        out.push(BINARY);
        let at = out.len();
        out.extend([0; 4]);
        loop {
            let run = memchr::memchr2(b'"', b'\\', &self.s[self.i..])?;
            out.extend_from_slice(&self.s[self.i..self.i + run]);
            self.i += run;
            if self.s[self.i] == b'"' {
                self.i += 1;
                let len = (out.len() - at - 4) as u32;
                out[at..at + 4].copy_from_slice(&len.to_be_bytes());
                return Some(());
            }
            let esc = *self.s.get(self.i + 1)?;
            self.i += 2;
            let simple = match esc {
                b'"' => Some(b'"'),
                b'\\' => Some(b'\\'),
                b'/' => Some(b'/'),
                b'b' => Some(8),
                b'f' => Some(12),
                b'n' => Some(b'\n'),
                b'r' => Some(b'\r'),
                b't' => Some(b'\t'),
                b'u' => None,
                _ => return None,
            };
            if let Some(b) = simple {
                out.push(b);
                continue;
            }
            let mut c = u32::from(self.hex4()?);
            if (0xD800..0xDC00).contains(&c) && self.s.get(self.i..self.i + 2) == Some(b"\\u") {
                self.i += 2;
                let low = u32::from(self.hex4()?);
                c = 0x10000 + ((c - 0xD800) << 10) + (low.checked_sub(0xDC00)? & 0x3FF);
            }
            let ch = char::from_u32(c)?;
            out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
        }
    }

    fn hex4(&mut self) -> Option<u16> {
        let digits = std::str::from_utf8(self.s.get(self.i..self.i + 4)?).ok()?;
        self.i += 4;
        u16::from_str_radix(digits, 16).ok()
    }
}

/// A decoded term, of the kinds CouchDB writes into the values clients hand back (update
/// sequences): anything else (pids, references, maps, floats, funs) does not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Term {
    /// Integers up to 120 bits of magnitude; larger bignums do not decode.
    Int(i128),
    Atom(String),
    Binary(Vec<u8>),
    Tuple(Vec<Term>),
    /// A proper list (`STRING_EXT` decodes to a list of small integers, as in Erlang).
    List(Vec<Term>),
}

/// Writes a decoded term back (atoms as `ATOM_EXT`, as `minor_version` 1 does).
pub fn term(t: &Term, out: &mut Vec<u8>) {
    match t {
        Term::Int(i) => match i64::try_from(*i) {
            Ok(i) => integer(i, out),
            Err(_) => big(*i < 0, &i.unsigned_abs().to_le_bytes(), out),
        },
        Term::Atom(name) => match name.chars().map(|c| u8::try_from(c).ok()).collect() {
            Some(latin1) => {
                let latin1: Vec<u8> = latin1;
                out.push(ATOM);
                out.extend((latin1.len() as u16).to_be_bytes());
                out.extend_from_slice(&latin1);
            }
            None => {
                out.push(ATOM_UTF8);
                out.extend((name.len() as u16).to_be_bytes());
                out.extend_from_slice(name.as_bytes());
            }
        },
        Term::Binary(b) => binary(b, out),
        Term::Tuple(items) => {
            match u8::try_from(items.len()) {
                Ok(n) => small_tuple(n, out),
                Err(_) => {
                    out.push(LARGE_TUPLE);
                    out.extend((items.len() as u32).to_be_bytes());
                }
            }
            items.iter().for_each(|item| term(item, out));
        }
        Term::List(items) if items.is_empty() => nil(out),
        Term::List(items)
            if items.len() <= usize::from(u16::MAX)
                && items.iter().all(|i| matches!(i, Term::Int(0..=255))) =>
        {
            let bytes: Vec<u8> = items
                .iter()
                .map(|i| match i {
                    Term::Int(b) => *b as u8,
                    _ => 0,
                })
                .collect();
            byte_list(&bytes, out);
        }
        Term::List(items) => {
            list_header(items.len(), out);
            items.iter().for_each(|item| term(item, out));
            nil(out);
        }
    }
}

/// Nesting deeper than this does not decode: the input is a client's.
const MAX_DEPTH: usize = 32;

/// The term encoded by `bytes` (without the version byte and uncompressed): the whole
/// input, or `None`.
pub fn decode(bytes: &[u8]) -> Option<Term> {
    let mut r = Reader { s: bytes, i: 0 };
    let term = r.term(0)?;
    (r.i == bytes.len()).then_some(term)
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.s.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn u32(&mut self) -> Option<usize> {
        let b = self.take(4)?;
        usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok()
    }

    /// `n` terms; every term takes at least one byte, so a count beyond the input is
    /// refused before anything is allocated for it.
    fn terms(&mut self, n: usize, depth: usize) -> Option<Vec<Term>> {
        if n > self.s.len() - self.i {
            return None;
        }
        (0..n).map(|_| self.term(depth + 1)).collect()
    }

    fn bignum(&mut self, len: usize) -> Option<Term> {
        let negative = self.u8()? != 0;
        let digits = self.take(len)?;
        let used = digits.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1);
        if used > 15 {
            return None;
        }
        let magnitude = digits[..used]
            .iter()
            .rev()
            .fold(0i128, |acc, &b| (acc << 8) | i128::from(b));
        Some(Term::Int(if negative { -magnitude } else { magnitude }))
    }

    fn atom(&mut self, len: usize, latin1: bool) -> Option<Term> {
        let bytes = self.take(len)?;
        Some(Term::Atom(if latin1 {
            bytes.iter().map(|&b| char::from(b)).collect()
        } else {
            String::from_utf8(bytes.to_vec()).ok()?
        }))
    }

    fn term(&mut self, depth: usize) -> Option<Term> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.u8()? {
            SMALL_INTEGER => self.u8().map(|b| Term::Int(i128::from(b))),
            INTEGER => {
                let b = self.take(4)?;
                Some(Term::Int(i128::from(i32::from_be_bytes([
                    b[0], b[1], b[2], b[3],
                ]))))
            }
            SMALL_BIG => {
                let len = usize::from(self.u8()?);
                self.bignum(len)
            }
            LARGE_BIG => {
                let len = self.u32()?;
                self.bignum(len)
            }
            ATOM => {
                let len = self.u16()?;
                self.atom(len, true)
            }
            SMALL_ATOM => {
                let len = usize::from(self.u8()?);
                self.atom(len, true)
            }
            ATOM_UTF8 => {
                let len = self.u16()?;
                self.atom(len, false)
            }
            SMALL_ATOM_UTF8 => {
                let len = usize::from(self.u8()?);
                self.atom(len, false)
            }
            BINARY => {
                let len = self.u32()?;
                self.take(len).map(|b| Term::Binary(b.to_vec()))
            }
            SMALL_TUPLE => {
                let n = usize::from(self.u8()?);
                self.terms(n, depth).map(Term::Tuple)
            }
            LARGE_TUPLE => {
                let n = self.u32()?;
                self.terms(n, depth).map(Term::Tuple)
            }
            NIL => Some(Term::List(Vec::new())),
            STRING => {
                let len = self.u16()?;
                let bytes = self.take(len)?;
                Some(Term::List(
                    bytes.iter().map(|&b| Term::Int(i128::from(b))).collect(),
                ))
            }
            LIST => {
                let n = self.u32()?;
                let items = self.terms(n, depth)?;
                // Only proper lists: the tail must be `[]`.
                (self.u8()? == NIL).then_some(Term::List(items))
            }
            _ => None,
        }
    }
}

/// `term_to_binary(Term, [compressed])` from the term's bytes (`body`, without the version
/// byte): zlib level 6 when the stream fits in 5 bytes less than the plain body (Erlang
/// gives zlib no more room; checked against OTP 27 on both sides of the bound), else the
/// plain term.
pub fn to_binary_compressed(body: &[u8]) -> Vec<u8> {
    thread_local! {
        static DEFLATE: RefCell<Compress> = RefCell::new(Compress::new(Compression::new(6), true));
    }
    let room = body.len().saturating_sub(5);
    let mut zipped = Vec::with_capacity(room);
    let fits = DEFLATE.with(|d| {
        let mut d = d.borrow_mut();
        let status = d.compress_vec(body, &mut zipped, FlushCompress::Finish);
        d.reset();
        // The allocation may be larger than asked for: the bound is Erlang's, not its.
        matches!(status, Ok(Status::StreamEnd)) && zipped.len() <= room
    });
    let mut out = vec![VERSION];
    if fits {
        out.push(COMPRESSED);
        out.extend((body.len() as u32).to_be_bytes());
        out.extend_from_slice(&zipped);
    } else {
        out.extend_from_slice(body);
    }
    out
}

/// The term's bytes in what `term_to_binary` wrote (compressed or not), without the
/// version byte; `None` when malformed or when it would inflate past `max` bytes (the
/// input is a client's: its size field may claim up to 4 GiB).
pub fn from_binary(bytes: &[u8], max: usize) -> Option<Cow<'_, [u8]>> {
    match bytes {
        [VERSION, COMPRESSED, a, b, c, d, zipped @ ..] => {
            let size = usize::try_from(u32::from_be_bytes([*a, *b, *c, *d])).ok()?;
            if size > max {
                return None;
            }
            let mut body = Vec::with_capacity(size);
            let mut inflate = Decompress::new(true);
            let status = inflate
                .decompress_vec(zipped, &mut body, FlushDecompress::Finish)
                .ok()?;
            let whole = status == Status::StreamEnd && inflate.total_in() == zipped.len() as u64;
            (whole && body.len() == size).then_some(Cow::Owned(body))
        }
        [VERSION, body @ ..] => Some(Cow::Borrowed(body)),
        _ => None,
    }
}

/// An integer as Erlang's `binary_to_integer/1` reads text: an optional sign, then ASCII
/// digits only. Beyond `i128` the value clamps to its sign's end (callers bound it further).
pub fn binary_to_integer(s: &str) -> Option<i128> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse::<i128>().unwrap_or(if s.starts_with('-') {
        i128::MIN
    } else {
        i128::MAX
    }))
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
    fn text_transcoding_matches_values() {
        for text in [
            r#"{}"#,
            r#"[]"#,
            r#"{"a":1,"b":[1,2,255],"c":[256],"d":[],"e":{},"f":[true,null,false]}"#,
            r#"{"s":"q\"u\\o\/te\n\t\u00e9\ud83d\ude00 é","n":-0,"x":1.0e3,"y":-12.5}"#,
            r#"{"big":123456789012345678901234567890,"neg":-2147483649,"i":2147483647}"#,
            r#" { "spaced" : [ 1 , "two" ] } "#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let mut from_text = Vec::new();
            json_text(text.as_bytes(), &mut from_text).unwrap();
            assert_eq!(from_text, term(&v), "{text}");
        }
        let long: Value = (0..70000).map(|i| i % 7).collect();
        let mut from_text = Vec::new();
        json_text(long.to_string().as_bytes(), &mut from_text).unwrap();
        assert_eq!(from_text, term(&long), "more than 65535 bytes is a list");
        for bad in [
            r#"{"a":}"#,
            r#"[1,]"#,
            r#"{"a":1"#,
            "tru",
            r#""\x""#,
            "{} x",
        ] {
            assert_eq!(json_text(bad.as_bytes(), &mut Vec::new()), None, "{bad}");
        }
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

    #[test]
    fn decodes_what_it_writes() {
        let mut out = Vec::new();
        list_header(3, &mut out);
        small_tuple(2, &mut out);
        atom("n@h", &mut out);
        binary(b"ab", &mut out);
        integer(4_294_967_295, &mut out);
        integer(-7, &mut out);
        nil(&mut out);
        let t = decode(&out).unwrap();
        assert_eq!(
            t,
            Term::List(vec![
                Term::Tuple(vec![Term::Atom("n@h".into()), Term::Binary(b"ab".to_vec())]),
                Term::Int(4_294_967_295),
                Term::Int(-7),
            ])
        );
        assert_eq!(
            decode(&[107, 0, 2, 0, 255]),
            Some(Term::List(vec![Term::Int(0), Term::Int(255)]))
        );
        assert_eq!(decode(&[119, 1, b'x']), Some(Term::Atom("x".into())));
        // Trailing bytes, an improper list, a count beyond the input, deep nesting.
        assert_eq!(decode(&[97, 1, 0]), None);
        assert_eq!(decode(&[108, 0, 0, 0, 1, 97, 1, 97, 2]), None);
        assert_eq!(decode(&[108, 255, 255, 255, 255, 106]), None);
        let deep: Vec<u8> = [104, 1].repeat(100).into_iter().chain([106]).collect();
        assert_eq!(decode(&deep), None);
    }

    /// `term_to_binary(<<Text>>, [compressed])` as OTP 27 writes it at the bound: a zlib
    /// stream 4 bytes shorter than the plain body stays plain, one 5 bytes shorter is taken.
    #[test]
    fn compresses_exactly_where_erlang_does() {
        let body = |text: &str| {
            let mut body = Vec::new();
            binary(text.as_bytes(), &mut body);
            body
        };
        let plain = body("gdnndjihmagqoaahigfjegijioflpndgmgjdadajecqljnqlqkadooljmkp");
        let out = to_binary_compressed(&plain);
        assert_eq!((out[1], out.len()), (BINARY, 65));
        let packed = body("ecbhkneaaiaincaembgbdahkcleknndkhgfkeekkddajmjcfgjlikiaf");
        let out = to_binary_compressed(&packed);
        assert_eq!((out[1], out.len()), (COMPRESSED, 62));
        assert_eq!(from_binary(&out, 1 << 10).as_deref(), Some(&packed[..]));
        assert_eq!(from_binary(&out, 10), None, "inflates past the bound");
    }
}
