//! Query parameters with CouchDB's typed readings and error messages.

use crate::error::{Error, Result};
use crate::mrargs::{parse_boolean, parse_pos_int, Val};
use serde_json::Value;

/// Query parameters in order of appearance.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// The pairs of a query string, `+` a space and escapes decoded. A value whose bytes
    /// are not UTF-8 is kept (lossily) behind a NUL, which no JSON parameter parses past:
    /// CouchDB answers `invalid UTF-8 JSON` for such a key, and no id or name holds a NUL.
    pub fn parse(query: Option<&str>) -> Params {
        let decode = |raw: &str| -> String {
            let bytes: Vec<u8> = raw
                .bytes()
                .map(|b| if b == b'+' { b' ' } else { b })
                .collect();
            let bytes: Vec<u8> = percent_encoding::percent_decode(&bytes).collect();
            match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(e) => format!("\0{}", String::from_utf8_lossy(e.as_bytes())),
            }
        };
        Params(
            query
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    /// The first of several spellings that is present (`startkey` / `start_key`).
    pub fn get_any<'a, 'k>(&'a self, ks: &[&'k str]) -> Option<(&'k str, &'a str)> {
        ks.iter().find_map(|k| self.get(k).map(|v| (*k, v)))
    }

    /// Sets `k` to `v`, replacing every earlier value.
    pub fn set(&mut self, k: &str, v: &str) {
        self.0.retain(|(n, _)| n != k);
        self.0.push((k.to_owned(), v.to_owned()));
    }

    /// All parameters in order of appearance.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// CouchDB's `parse_boolean` (views, `_all_docs`, `_all_dbs`): `true`/`false` in any
    /// letter case, else `400 query_parse_error`.
    pub fn bool(&self, k: &str) -> Result<Option<bool>> {
        self.get(k).map(|v| parse_boolean(Val::Text(v))).transpose()
    }

    pub fn flag(&self, k: &str) -> Result<bool> {
        Ok(self.bool(k)?.unwrap_or(false))
    }

    /// CouchDB's rule for document and `_changes` options (`revs=true`, ...): on only for
    /// exactly `true`; any other value is ignored, as CouchDB ignores it.
    pub fn is_true(&self, k: &str) -> bool {
        self.get(k) == Some("true")
    }

    /// CouchDB's `parse_pos_int`: a non-negative integer.
    pub fn uint(&self, k: &str) -> Result<Option<u64>> {
        self.get(k).map(|v| parse_pos_int(Val::Text(v))).transpose()
    }

    pub fn json(&self, k: &str) -> Result<Option<Value>> {
        self.get(k).map(decode_param_json).transpose()
    }

    pub fn json_any(&self, ks: &[&str]) -> Result<Option<Value>> {
        self.get_any(ks)
            .map(|(_, v)| decode_param_json(v))
            .transpose()
    }
}

impl FromIterator<(String, String)> for Params {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Params {
        Params(pairs.into_iter().collect())
    }
}

/// A JSON query parameter, decoded; text that is not JSON is CouchDB's `400 bad_request`
/// "invalid UTF-8 JSON", as for a body.
pub fn decode_param_json(v: &str) -> Result<Value> {
    parse_json(v.as_bytes())
}

/// A JSON body (or body part): CouchDB's `400 bad_request` "invalid UTF-8 JSON" when it
/// does not parse.
pub fn parse_json(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|_| Error::bad_request("invalid UTF-8 JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_decoding_and_typed_getters() {
        let p = Params::parse(Some("a=1&b=x%20y&a=2&c=%22s%22&d=TRUE&e=-1"));
        assert_eq!(p.get("a"), Some("1"), "the first of repeated names");
        assert_eq!(p.get("b"), Some("x y"));
        assert_eq!(p.json("c").unwrap(), Some(Value::String("s".into())));
        assert_eq!(p.bool("d").unwrap(), Some(true));
        assert!(!p.is_true("d"), "document options want exactly `true`");
        assert!(matches!(p.uint("e"), Err(Error::QueryParse(_))));
        assert_eq!(
            p.json("b").unwrap_err(),
            Error::bad_request("invalid UTF-8 JSON")
        );
        assert_eq!(p.get_any(&["z", "b"]), Some(("b", "x y")));
        let mut p = p;
        p.set("a", "3");
        assert_eq!(p.pairs().filter(|(k, _)| *k == "a").count(), 1);
    }
}
