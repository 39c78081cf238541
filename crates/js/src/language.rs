//! Design-document languages as CouchDB looks them up.
//!
//! CouchDB's process manager finds a language's query server by the upper-cased name
//! (`string:to_upper(Lang)`), so `"JavaScript"` is JavaScript; with QuickJS as its engine
//! it registers `JAVASCRIPT`, `JAVASCRIPT_QUICKJS` and `COFFEESCRIPT`, the last one a
//! JavaScript server that compiles every function from CoffeeScript first. Settee runs
//! those in-process ([`Dialect`]); every other name is looked up, lower-cased, among the
//! native and external query servers, and a name none of them serves is CouchDB's
//! `unknown_query_language`.

use std::borrow::Cow;

/// The source languages Settee's own JavaScript engine runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    #[default]
    JavaScript,
    /// CoffeeScript 1.x, compiled to JavaScript (`bare`) before it is evaluated.
    CoffeeScript,
}

impl Dialect {
    /// The in-process dialect of a design document's `language` (absent: JavaScript), or
    /// `None` for a language some other server must run.
    pub fn of(language: Option<&str>) -> Option<Dialect> {
        match language.map(lookup_name).as_deref() {
            None | Some("javascript") | Some("javascript_quickjs") => Some(Dialect::JavaScript),
            Some("coffeescript") => Some(Dialect::CoffeeScript),
            Some(_) => None,
        }
    }

    /// The dialect of a design document body's `language` member: a missing or non-string
    /// member is JavaScript's (a non-string one is refused when the document is saved).
    pub fn of_ddoc(ddoc: &serde_json::Value) -> Option<Dialect> {
        match ddoc.get("language") {
            Some(serde_json::Value::String(l)) => Dialect::of(Some(l)),
            _ => Some(Dialect::JavaScript),
        }
    }
}

/// The name a language's server is registered under here: lower case, as the
/// configuration's names are (CouchDB compares upper-cased names).
pub fn lookup_name(language: &str) -> Cow<'_, str> {
    if language.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(language.to_ascii_lowercase())
    } else {
        Cow::Borrowed(language)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_case_insensitive() {
        assert_eq!(Dialect::of(None), Some(Dialect::JavaScript));
        for js in [
            "javascript",
            "JavaScript",
            "JAVASCRIPT_QUICKJS",
            "javascript_quickjs",
        ] {
            assert_eq!(Dialect::of(Some(js)), Some(Dialect::JavaScript), "{js}");
        }
        assert_eq!(
            Dialect::of(Some("CoffeeScript")),
            Some(Dialect::CoffeeScript)
        );
        for other in ["erlang", "query", "", "python", "javascript "] {
            assert_eq!(Dialect::of(Some(other)), None, "{other:?}");
        }
        assert_eq!(lookup_name("Python"), "python");
    }

    #[test]
    fn ddoc_members() {
        assert_eq!(Dialect::of_ddoc(&json!({})), Some(Dialect::JavaScript));
        assert_eq!(
            Dialect::of_ddoc(&json!({"language": null})),
            Some(Dialect::JavaScript)
        );
        assert_eq!(
            Dialect::of_ddoc(&json!({"language": "coffeescript"})),
            Some(Dialect::CoffeeScript)
        );
        assert_eq!(Dialect::of_ddoc(&json!({"language": "erlang"})), None);
    }
}
