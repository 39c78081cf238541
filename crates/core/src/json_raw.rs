//! Reading a document's JSON text in place, for the map functions run without their
//! language's engine (`settee-jsmap`, `settee-pymap`): members and elements are found by
//! skipping values, and a value is decoded only when the function reads it. The text is a
//! stored document (valid JSON, member names unique at every level, as every stored body
//! is re-serialised from a parsed object), so the first member of a name is the one a
//! decoder would keep; text that is not as expected answers `None`, never a panic.

use crate::json_scan::{skip_string, skip_value, ws};
use std::borrow::Cow;

/// The members of the object `obj` (its text, braces included): each name's text (quotes
/// included) and its value's text.
pub fn members(obj: &str) -> Members<'_> {
    Members {
        s: obj,
        i: 1,
        done: false,
    }
}

pub struct Members<'a> {
    s: &'a str,
    i: usize,
    done: bool,
}

impl<'a> Iterator for Members<'a> {
    type Item = Option<(&'a str, &'a str)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let b = self.s.as_bytes();
        let step = || -> Option<Option<(usize, usize, usize, usize)>> {
            let mut i = ws(b, self.i);
            if b.get(i) == Some(&b'}') {
                return Some(None);
            }
            if b.get(i) == Some(&b',') {
                i = ws(b, i + 1);
            }
            let key_start = i;
            let (key_end, _) = skip_string(b, i)?;
            i = ws(b, key_end);
            if b.get(i) != Some(&b':') {
                return None;
            }
            let value_start = ws(b, i + 1);
            let value_end = skip_value(b, value_start)?;
            Some(Some((key_start, key_end, value_start, value_end)))
        };
        match step() {
            Some(Some((ks, ke, vs, ve))) => {
                self.i = ve;
                Some(Some((&self.s[ks..ke], &self.s[vs..ve])))
            }
            Some(None) => {
                self.done = true;
                None
            }
            None => {
                self.done = true;
                Some(None)
            }
        }
    }
}

/// The elements of the array `arr` (its text, brackets included).
pub fn elements(arr: &str) -> Elements<'_> {
    Elements {
        s: arr,
        i: 1,
        done: false,
    }
}

pub struct Elements<'a> {
    s: &'a str,
    i: usize,
    done: bool,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Option<&'a str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let b = self.s.as_bytes();
        let mut i = ws(b, self.i);
        if b.get(i) == Some(&b']') {
            self.done = true;
            return None;
        }
        if b.get(i) == Some(&b',') {
            i = ws(b, i + 1);
        }
        match skip_value(b, i) {
            Some(end) => {
                self.i = end;
                Some(Some(&self.s[i..end]))
            }
            None => {
                self.done = true;
                Some(None)
            }
        }
    }
}

/// Whether the name text `quoted` (quotes included) is `name`.
pub fn name_is(quoted: &str, name: &str) -> bool {
    let inner = &quoted[1..quoted.len() - 1];
    if inner == name && !name.contains('\\') {
        return true;
    }
    // Only an escape can make different text the same name.
    inner.contains('\\') && string(quoted).is_some_and(|s| s == name)
}

/// The value of the string text `quoted` (quotes included).
pub fn string(quoted: &str) -> Option<Cow<'_, str>> {
    let inner = quoted.get(1..quoted.len().checked_sub(1)?)?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_members_and_elements() {
        let text = r#" {"a": 1, "b\"": {"x": [1, "]}\"", {"y": "}"}]}, "c\u0041": "v\n", "d": [ [] , -1.5e3 ] }"#.trim();
        let m: Vec<(&str, &str)> = members(text).map(Option::unwrap).collect();
        assert_eq!(m.len(), 4);
        assert_eq!(m[0], (r#""a""#, "1"));
        assert_eq!(m[1].1, r#"{"x": [1, "]}\"", {"y": "}"}]}"#);
        assert!(name_is(m[2].0, "cA") && name_is(m[1].0, "b\""));
        assert_eq!(string(m[2].1).unwrap(), "v\n");
        let e: Vec<&str> = elements(m[3].1).map(Option::unwrap).collect();
        assert_eq!(e, vec!["[]", "-1.5e3"]);
        assert_eq!(members("{}").count(), 0);
        assert_eq!(elements("[ ]").count(), 0);
        assert_eq!(members(r#"{"a" 1}"#).next(), Some(None));
        assert_eq!(elements(r#"["a]"#).next(), Some(None));
    }
}
