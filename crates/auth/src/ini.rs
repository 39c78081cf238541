//! Reading typed values out of one ini section the way CouchDB's `config` module does:
//! values are trimmed, a missing or unparsable value falls back to the default.

use std::collections::BTreeMap;

pub(crate) type Section = BTreeMap<String, String>;

/// The trimmed value of `key`, or `None` when the key is missing.
pub(crate) fn get<'a>(section: &'a Section, key: &str) -> Option<&'a str> {
    section.get(key).map(|v| v.trim())
}

/// The trimmed value of `key`, or `default` when missing.
pub(crate) fn get_or<'a>(section: &'a Section, key: &str, default: &'a str) -> &'a str {
    get(section, key).unwrap_or(default)
}

/// `config:get_boolean`: only `true` and `false` are booleans; anything else is the default.
pub(crate) fn get_bool(section: &Section, key: &str, default: bool) -> bool {
    match get(section, key) {
        Some("true") => true,
        Some("false") => false,
        _ => default,
    }
}

/// `config:get_integer`: a decimal integer, otherwise the default.
pub(crate) fn get_int(section: &Section, key: &str, default: i64) -> i64 {
    get(section, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Splits like Erlang's `re:split(S, "\\s*,\\s*", [trim])`: whitespace around each comma
/// is dropped, whitespace at the very ends is kept, trailing empty items are removed.
pub(crate) fn split_list(value: &str) -> Vec<String> {
    let pieces: Vec<&str> = value.split(',').collect();
    let last = pieces.len() - 1;
    let mut items: Vec<String> = pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| trim_around_commas(piece, i > 0, i < last).to_string())
        .collect();
    while items.last().is_some_and(|s| s.is_empty()) {
        items.pop();
    }
    items
}

/// Erlang's `re:split(S, "\\s*,\\s*", [trim])` exactly, as CouchDB splits role lists (proxy
/// roles header, a JWT's roles string): like [`split_list`], except that an empty string
/// is one empty item (`[<<>>]`), where `","` is none.
pub(crate) fn split_roles(value: &str) -> Vec<String> {
    if value.is_empty() {
        return vec![String::new()];
    }
    split_list(value)
}

fn trim_around_commas(piece: &str, after_comma: bool, before_comma: bool) -> &str {
    let piece = if after_comma {
        piece.trim_start_matches(is_space)
    } else {
        piece
    };
    if before_comma {
        piece.trim_end_matches(is_space)
    } else {
        piece
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// A section from literal pairs, for tests.
#[cfg(test)]
pub(crate) fn section(pairs: &[(&str, &str)]) -> Section {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_list_matches_erlang_re_split_with_trim() {
        assert_eq!(split_list("a, b ,c"), vec!["a", "b", "c"]);
        assert_eq!(split_list(" a , b "), vec![" a", "b "]);
        assert_eq!(split_list("a,,b"), vec!["a", "", "b"]);
        assert_eq!(split_list("a, , "), vec!["a"]);
        assert_eq!(split_list(",a"), vec!["", "a"]);
        assert!(split_list("").is_empty());
    }

    #[test]
    fn split_roles_keeps_erlangs_one_empty_item() {
        // re:split(<<>>, "\\s*,\\s*", [trim, {return, binary}]) =:= [<<>>] on OTP 27,
        // while re:split(<<",,">>, …) =:= [].
        assert_eq!(split_roles(""), vec![""]);
        assert!(split_roles(",,").is_empty());
        assert_eq!(
            split_roles("a, b ,c,,_admin"),
            vec!["a", "b", "c", "", "_admin"]
        );
    }

    #[test]
    fn typed_getters_fall_back_to_defaults() {
        let s = section(&[("t", " true "), ("n", " 42 "), ("bad", "yes")]);
        assert!(get_bool(&s, "t", false));
        assert!(!get_bool(&s, "bad", false));
        assert!(get_bool(&s, "missing", true));
        assert_eq!(get_int(&s, "n", 0), 42);
        assert_eq!(get_int(&s, "bad", 7), 7);
        assert_eq!(get_or(&s, "missing", "d"), "d");
    }
}
