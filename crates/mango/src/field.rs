//! Field paths: `"a.b.0"` names member `b` of member `a` and then element 0 of an array;
//! `\.` is a dot inside a name and every other `\` is dropped (`"\$foo"` names `$foo`).

use serde_json::Value;

use crate::Error;

/// Splits a field path into its names (CouchDB's `mango_util:parse_field`). An empty name
/// (`"a..b"`, `"a."`, `""`) is an error.
pub fn parse(field: &str) -> Result<Vec<String>, Error> {
    let invalid = || Error::InvalidFieldName(field.to_string());
    if !field.contains('\\') {
        let parts: Vec<String> = field.split('.').map(str::to_string).collect();
        if parts.iter().any(String::is_empty) {
            return Err(invalid());
        }
        return Ok(parts);
    }
    // Split at dots not preceded by a backslash, then drop every backslash.
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut prev_backslash = false;
    for c in field.chars() {
        if c == '.' && !prev_backslash {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        prev_backslash = c == '\\';
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| {
            if p.is_empty() {
                Err(invalid())
            } else {
                Ok(p.replace('\\', ""))
            }
        })
        .collect()
}

/// What a path finds in a value.
#[derive(Debug, PartialEq)]
pub enum Found<'a> {
    Value(&'a Value),
    /// An object along the path lacks the name.
    NotFound,
    /// The path goes through a scalar, or indexes an array with a name that is not an
    /// index in range.
    BadPath,
}

/// Follows `path` from `value` (CouchDB's `mango_doc:get_field`): names select object
/// members, and array elements by a decimal index.
pub fn get<'a>(value: &'a Value, path: &[String]) -> Found<'a> {
    let mut cur = value;
    for name in path {
        cur = match cur {
            Value::Object(map) => match map.get(name) {
                Some(v) => v,
                None => return Found::NotFound,
            },
            Value::Array(items) => match name.parse::<i64>() {
                Ok(i) if i >= 0 && (i as usize) < items.len() => &items[i as usize],
                _ => return Found::BadPath,
            },
            _ => return Found::BadPath,
        };
    }
    Found::Value(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Vec<String> {
        parse(s).unwrap()
    }

    #[test]
    fn paths() {
        assert_eq!(p("ab"), ["ab"]);
        assert_eq!(p("a.b.c"), ["a", "b", "c"]);
        assert_eq!(p("a\\.b"), ["a.b"]);
        assert_eq!(p("a.b\\.c"), ["a", "b.c"]);
        assert_eq!(p("\\$foo"), ["$foo"]);
        for bad in ["a..b", "", "a.", ".a", "a\\..b."] {
            assert!(
                matches!(parse(bad), Err(Error::InvalidFieldName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn lookups() {
        let doc = json!({"a": {"b": [10, {"c": 1}]}, "s": "x"});
        assert_eq!(get(&doc, &p("a.b.0")), Found::Value(&json!(10)));
        assert_eq!(get(&doc, &p("a.b.1.c")), Found::Value(&json!(1)));
        assert_eq!(get(&doc, &p("a.x")), Found::NotFound);
        assert_eq!(get(&doc, &p("a.b.2")), Found::BadPath);
        assert_eq!(get(&doc, &p("a.b.x")), Found::BadPath);
        assert_eq!(get(&doc, &p("s.len")), Found::BadPath);
        assert_eq!(get(&doc, &p("a.b.+1.c")), Found::Value(&json!(1)));
    }
}

/// A document cut down to `fields` (CouchDB's `mango_fields:extract`): each path found in
/// `doc` is written at the same path of a new object, in the order the fields are given;
/// paths not found are left out. A name on the way that is missing in the output becomes
/// an object member, even where the document had an array.
pub fn project(doc: &Value, fields: &[String]) -> Result<Value, Error> {
    let mut out = Value::Object(Default::default());
    for f in fields {
        let path = parse(f)?;
        if let Found::Value(v) = get(doc, &path) {
            set(&mut out, &path, v.clone());
        }
    }
    Ok(out)
}

/// Writes `value` at `path` (CouchDB's `mango_doc:set_field`).
pub fn set(target: &mut Value, path: &[String], value: Value) {
    let Some((name, rest)) = path.split_first() else {
        *target = value;
        return;
    };
    match target {
        Value::Object(map) => match map.get_mut(name) {
            Some(existing) => set(existing, rest, value),
            None => {
                let nested = rest.iter().rev().fold(value, |v, n| {
                    Value::Object([(n.clone(), v)].into_iter().collect())
                });
                map.insert(name.clone(), nested);
            }
        },
        Value::Array(items) => {
            if let Ok(i) = name.parse::<usize>() {
                if let Some(item) = items.get_mut(i) {
                    set(item, rest, value);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod projection_tests {
    use super::*;
    use serde_json::json;

    fn f(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn projects_in_field_order() {
        let doc = json!({"_id": "x", "a": 1, "b": {"c": 2, "d": 3}, "favorites": ["p", "q"]});
        let out = project(&doc, &f(&["b.c", "a", "b.d", "missing", "a.z"])).unwrap();
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            r#"{"b":{"c":2,"d":3},"a":1}"#
        );
        assert_eq!(
            project(&doc, &f(&["favorites.1"])).unwrap(),
            json!({"favorites": {"1": "q"}})
        );
        assert_eq!(project(&doc, &f(&["_id"])).unwrap(), json!({"_id": "x"}));
        assert!(matches!(
            project(&doc, &f(&["a..b"])),
            Err(Error::InvalidFieldName(_))
        ));
    }
}
