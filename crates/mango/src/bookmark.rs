//! `_find` bookmarks: where the next page starts, as CouchDB writes them — base64url
//! (unpadded) of `term_to_binary([{startkey_docid, Id}, {startkey, Key}], [compressed,
//! {minor_version, 1}])` — so bookmarks are opaque tokens of the same form on both servers.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Number, Value};
use settee_core::etf;

use crate::Error;

/// The row a page ended on.
#[derive(Clone, Debug, PartialEq)]
pub struct Bookmark {
    pub key: Value,
    pub docid: String,
}

impl Bookmark {
    pub fn encode(&self) -> String {
        let mut term = Vec::new();
        etf::list_header(2, &mut term);
        etf::small_tuple(2, &mut term);
        etf::atom("startkey_docid", &mut term);
        etf::binary(self.docid.as_bytes(), &mut term);
        etf::small_tuple(2, &mut term);
        etf::atom("startkey", &mut term);
        etf::value(&self.key, &mut term);
        etf::nil(&mut term);
        URL_SAFE_NO_PAD.encode(etf::to_binary_compressed(&term))
    }

    /// Reads a bookmark; anything else is CouchDB's `invalid_bookmark`.
    pub fn decode(text: &str) -> Result<Bookmark, Error> {
        let invalid = || Error::InvalidBookmark(text.to_string());
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|_| invalid())?;
        let term = parse(&bytes).ok_or_else(invalid)?;
        let Term::List(items) = term else {
            return Err(invalid());
        };
        let (mut key, mut docid) = (None, None);
        for item in items {
            if let Term::Tuple(mut pair) = item {
                if pair.len() == 2 {
                    let v = pair.pop().expect("two");
                    match pair.pop() {
                        Some(Term::Atom(a)) if a == "startkey" => key = Some(v),
                        Some(Term::Atom(a)) if a == "startkey_docid" => docid = Some(v),
                        _ => {}
                    }
                }
            }
        }
        let key = key.and_then(Term::into_json).ok_or_else(invalid)?;
        let docid = match docid.and_then(Term::into_json) {
            Some(Value::String(s)) => s,
            _ => return Err(invalid()),
        };
        Ok(Bookmark { key, docid })
    }
}

/// An Erlang term, as far as JSON values and bookmarks need.
#[derive(Debug)]
enum Term {
    Int(i128),
    /// An integer of any size (`SMALL_BIG_EXT`, `LARGE_BIG_EXT`), in decimal.
    Big(String),
    Float(f64),
    Atom(String),
    Binary(Vec<u8>),
    List(Vec<Term>),
    Tuple(Vec<Term>),
}

impl Term {
    /// The JSON value of a term as CouchDB's EJSON has it.
    fn into_json(self) -> Option<Value> {
        Some(match self {
            Term::Int(i) => Value::Number(i.to_string().parse::<Number>().ok()?),
            Term::Big(digits) => Value::Number(digits.parse::<Number>().ok()?),
            Term::Float(f) => Value::Number(Number::from_f64(f)?),
            Term::Atom(a) => match a.as_str() {
                "null" => Value::Null,
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return None,
            },
            Term::Binary(b) => Value::String(String::from_utf8(b).ok()?),
            Term::List(items) => Value::Array(
                items
                    .into_iter()
                    .map(Term::into_json)
                    .collect::<Option<_>>()?,
            ),
            Term::Tuple(mut items) if items.len() == 1 => {
                let Term::List(members) = items.pop()? else {
                    return None;
                };
                let mut map = Map::new();
                for m in members {
                    let Term::Tuple(mut kv) = m else { return None };
                    if kv.len() != 2 {
                        return None;
                    }
                    let v = kv.pop()?.into_json()?;
                    let Some(Value::String(k)) = kv.pop()?.into_json() else {
                        return None;
                    };
                    map.insert(k, v);
                }
                Value::Object(map)
            }
            Term::Tuple(_) => return None,
        })
    }
}

/// `binary_to_term` of what [`Bookmark::encode`] (or CouchDB) writes; `None` for anything
/// malformed or outside JSON's terms.
fn parse(bytes: &[u8]) -> Option<Term> {
    let body = etf::from_binary(bytes, MAX_INFLATED)?;
    let mut r = Reader { s: &body, i: 0 };
    let t = r.term(0)?;
    (r.i == body.len()).then_some(t)
}

/// Largest bignum read (bytes of magnitude, about 9,900 decimal digits): the conversion to
/// decimal is quadratic in it.
const MAX_BIG_BYTES: usize = 4096;

/// The most a compressed bookmark may inflate to. A bookmark holds one row's key and doc
/// id, far smaller than this; the bound keeps a small zlib bomb in a request from
/// allocating up to the 4 GiB its size field can claim.
const MAX_INFLATED: usize = 16 << 20;

/// A bignum's decimal text: `digits` is its magnitude, least significant byte first, as
/// Erlang writes it. Any size: [`Bookmark::encode`] writes JSON integers of any size.
fn big_decimal(negative: bool, digits: &[u8]) -> String {
    let mut magnitude: Vec<u8> = digits.iter().rev().copied().collect();
    let mut out = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in magnitude.iter_mut() {
            let cur = rem * 256 + u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        out.push(b'0' + rem as u8);
    }
    if out.is_empty() {
        out.push(b'0');
    } else if negative {
        out.push(b'-');
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let out = self.s.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<usize> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?) as usize)
    }

    fn u32(&mut self) -> Option<usize> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize)
    }

    fn term(&mut self, depth: usize) -> Option<Term> {
        if depth > 512 {
            return None;
        }
        Some(match self.u8()? {
            97 => Term::Int(self.u8()?.into()),
            98 => Term::Int(i32::from_be_bytes(self.take(4)?.try_into().ok()?).into()),
            110 | 111 => {
                let n = if self.s.get(self.i - 1) == Some(&110) {
                    self.u8()?.into()
                } else {
                    self.u32()?
                };
                let sign = self.u8()?;
                let digits = self.take(n)?;
                if n > MAX_BIG_BYTES {
                    return None;
                }
                Term::Big(big_decimal(sign != 0, digits))
            }
            70 => Term::Float(f64::from_bits(u64::from_be_bytes(
                self.take(8)?.try_into().ok()?,
            ))),
            100 | 118 => {
                let n = self.u16()?;
                Term::Atom(String::from_utf8(self.take(n)?.to_vec()).ok()?)
            }
            115 | 119 => {
                let n = self.u8()?.into();
                Term::Atom(String::from_utf8(self.take(n)?.to_vec()).ok()?)
            }
            104 => {
                let n = self.u8()?.into();
                Term::Tuple(
                    (0..n)
                        .map(|_| self.term(depth + 1))
                        .collect::<Option<_>>()?,
                )
            }
            105 => {
                let n = self.u32()?;
                Term::Tuple(
                    (0..n)
                        .map(|_| self.term(depth + 1))
                        .collect::<Option<_>>()?,
                )
            }
            106 => Term::List(vec![]),
            107 => {
                let n = self.u16()?;
                Term::List(
                    self.take(n)?
                        .iter()
                        .map(|b| Term::Int((*b).into()))
                        .collect(),
                )
            }
            108 => {
                let n = self.u32()?;
                if n > self.s.len() {
                    return None;
                }
                let items = (0..n)
                    .map(|_| self.term(depth + 1))
                    .collect::<Option<Vec<_>>>()?;
                // Proper lists only.
                if self.u8()? != 106 {
                    return None;
                }
                Term::List(items)
            }
            109 => {
                let n = self.u32()?;
                Term::Binary(self.take(n)?.to_vec())
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips() {
        for key in [
            json!("doc-1"),
            json!([1, "a", null, true, 2.5]),
            json!({"k": [{}]}),
            json!([]),
        ] {
            let b = Bookmark {
                key: key.clone(),
                docid: "doc-1".into(),
            };
            let text = b.encode();
            assert!(!text.contains(['=', '+', '/']), "{text}");
            assert_eq!(Bookmark::decode(&text).unwrap(), b);
        }
        // Long keys compress, and CouchDB's bookmarks then start g1AAAA.
        let long = Bookmark {
            key: json!(["x".repeat(200)]),
            docid: "y".repeat(100),
        };
        assert!(long.encode().starts_with("g1AAAA"));
        assert_eq!(Bookmark::decode(&long.encode()).unwrap(), long);
    }

    /// Found by the `mango_bookmark` fuzz target: a 16-byte bignum at or above 2^127
    /// overflowed the `i128` it was read into (wrapping to a wrong key in release builds),
    /// and the integers above 16 bytes that `encode` writes were refused.
    #[test]
    fn integers_of_any_size() {
        for key in [
            "170141183460469231731687303715884105728",  // 2^127
            "-170141183460469231731687303715884105728", // -2^127
            "340282366920938463463374607431768211455",  // 2^128 - 1
            "1000000000000000000000000000000000000000000000000000000000000",
            "-9223372036854775809",
            "18446744073709551616",
        ] {
            let b = Bookmark {
                key: json!([serde_json::from_str::<Value>(key).unwrap(), 1]),
                docid: "d".into(),
            };
            assert_eq!(Bookmark::decode(&b.encode()).unwrap(), b, "{key}");
        }
        // SMALL_BIG_EXT, 16 bytes of 0xff, read on its own.
        let mut r = Reader {
            s: &[&[110, 16, 0][..], &[0xff; 16]].concat(),
            i: 0,
        };
        assert!(
            matches!(r.term(0), Some(Term::Big(d)) if d == "340282366920938463463374607431768211455")
        );
        assert_eq!(big_decimal(true, &[0, 0]), "0");
    }

    /// A bookmark that inflates past the bound is refused unread: a few megabytes of zlib
    /// could otherwise claim and fill 4 GiB. Keys as large as a document can hold still pass.
    #[test]
    fn refuses_to_inflate_past_the_bound() {
        let fits = Bookmark {
            key: json!("x".repeat(8 << 20)),
            docid: "d".into(),
        };
        assert_eq!(Bookmark::decode(&fits.encode()).unwrap(), fits);
        let bomb = Bookmark {
            key: json!("x".repeat(MAX_INFLATED)),
            docid: "d".into(),
        };
        let text = bomb.encode();
        assert!(text.len() < 100_000, "compressed: {} bytes", text.len());
        assert!(Bookmark::decode(&text).is_err());
    }

    #[test]
    fn rejects_what_is_not_a_bookmark() {
        for bad in ["nil", "xyz", "", "g2wAAAAC", "g2o"] {
            assert_eq!(
                Bookmark::decode(bad),
                Err(Error::InvalidBookmark(bad.into())),
                "{bad}"
            );
        }
    }
}
