//! How `_users` documents' new passwords are hashed and which passwords are accepted, as
//! `couch_users_db:save_doc/1` decides from `[chttpd_auth]`: `password_scheme`
//! (`pbkdf2`, or the deprecated `simple`), `pbkdf2_prf`, `iterations`, and
//! `password_regexp`, an Erlang term listing the regular expressions a new password must
//! all match, each optionally with a reason: `[".{10,}", {"[A-Z]"}, {"\\d", "Needs a
//! digit."}]`.

use crate::password::{PasswordHash, Prf, DEFAULT_ITERATIONS};
use crate::Denied;

/// CouchDB's reason when the hashing settings are unusable.
pub const SERVER_ERROR: &str = "Server cannot hash passwords at this time.";
/// CouchDB's reason for a password that misses a requirement (a reason may follow).
pub const REQUIREMENT_ERROR: &str = "Password does not conform to requirements.";

#[derive(Clone, Debug)]
pub struct PasswordRules {
    /// `password_scheme` (default `pbkdf2`).
    pub scheme: String,
    /// `pbkdf2_prf` (default `sha256`).
    pub prf: String,
    /// `iterations`.
    pub iterations: u32,
    /// `password_regexp`, as configured.
    pub regexp: Option<String>,
}

impl Default for PasswordRules {
    fn default() -> Self {
        PasswordRules {
            scheme: "pbkdf2".into(),
            prf: "sha256".into(),
            iterations: DEFAULT_ITERATIONS,
            regexp: None,
        }
    }
}

impl PasswordRules {
    /// Checks a new password against `password_regexp` and hashes it: 400 `bad_request`
    /// for a password that misses a requirement, 403 `forbidden` when the settings are
    /// unusable.
    pub fn hash(&self, password: &str) -> Result<PasswordHash, Denied> {
        let server_error = || Denied::Forbidden(SERVER_ERROR.into());
        let hash = match self.scheme.as_str() {
            "simple" => None,
            "pbkdf2" => Some(Prf::parse(self.prf.trim()).ok_or_else(server_error)?),
            _ => return Err(server_error()),
        };
        self.check(password)?;
        Ok(match hash {
            None => PasswordHash::simple(password),
            Some(prf) => PasswordHash::with_prf(password, prf, self.iterations),
        })
    }

    fn check(&self, password: &str) -> Result<(), Denied> {
        let text = match self.regexp.as_deref().map(str::trim) {
            None | Some("") | Some("[]") => return Ok(()),
            Some(t) => t,
        };
        let server_error = || Denied::Forbidden(SERVER_ERROR.into());
        let requirements = match parse_term(text).ok_or_else(server_error)? {
            Term::List(items) => items,
            _ => return Err(server_error()),
        };
        for item in &requirements {
            let (pattern, reason) = requirement(item).ok_or_else(server_error)?;
            let re = regex::Regex::new(pattern).map_err(|_| server_error())?;
            if !re.is_match(password) {
                let reason = match reason {
                    Some(r) => format!("{REQUIREMENT_ERROR} {r}"),
                    None => REQUIREMENT_ERROR.to_string(),
                };
                return Err(Denied::BadRequest(reason));
            }
        }
        Ok(())
    }
}

/// A requirement: `"re"`, `{"re"}` or `{"re", "reason"}` (a reason that is not a
/// non-empty string is left out of the message).
fn requirement(t: &Term) -> Option<(&str, Option<&str>)> {
    match t {
        Term::Str(re) => Some((re, None)),
        Term::Tuple(items) => match items.as_slice() {
            [Term::Str(re)] => Some((re, None)),
            [Term::Str(re), Term::Str(reason)] if !reason.is_empty() => Some((re, Some(reason))),
            [Term::Str(re), _] => Some((re, None)),
            _ => None,
        },
        _ => None,
    }
}

/// The Erlang terms a `password_regexp` may be written with.
#[derive(Debug, PartialEq)]
enum Term {
    Str(String),
    List(Vec<Term>),
    Tuple(Vec<Term>),
    /// Atoms and numbers: accepted, never a pattern.
    Other,
}

/// Parses one Erlang term (`"…"` strings with Erlang escapes, `[…]`, `{…}`, atoms and
/// integers); `None` if it is not one, as `couch_util:parse_term/1` fails.
fn parse_term(text: &str) -> Option<Term> {
    let chars: Vec<char> = text.chars().collect();
    let mut at = 0;
    let term = term(&chars, &mut at)?;
    skip_ws(&chars, &mut at);
    (at == chars.len() || (chars[at] == '.' && at + 1 == chars.len())).then_some(term)
}

fn skip_ws(c: &[char], at: &mut usize) {
    while *at < c.len() && c[*at].is_whitespace() {
        *at += 1;
    }
}

fn term(c: &[char], at: &mut usize) -> Option<Term> {
    skip_ws(c, at);
    match *c.get(*at)? {
        '"' => string(c, at).map(Term::Str),
        '[' => seq(c, at, ']').map(Term::List),
        '{' => seq(c, at, '}').map(Term::Tuple),
        ch if ch.is_alphanumeric() || ch == '_' || ch == '-' => {
            while *at < c.len() && (c[*at].is_alphanumeric() || "_-@.".contains(c[*at])) {
                *at += 1;
            }
            Some(Term::Other)
        }
        _ => None,
    }
}

fn seq(c: &[char], at: &mut usize, close: char) -> Option<Vec<Term>> {
    *at += 1;
    let mut items = Vec::new();
    skip_ws(c, at);
    if c.get(*at) == Some(&close) {
        *at += 1;
        return Some(items);
    }
    loop {
        items.push(term(c, at)?);
        skip_ws(c, at);
        match *c.get(*at)? {
            ',' => *at += 1,
            ch if ch == close => {
                *at += 1;
                return Some(items);
            }
            _ => return None,
        }
    }
}

fn string(c: &[char], at: &mut usize) -> Option<String> {
    *at += 1;
    let mut out = String::new();
    loop {
        let ch = *c.get(*at)?;
        *at += 1;
        match ch {
            '"' => return Some(out),
            '\\' => {
                let e = *c.get(*at)?;
                *at += 1;
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    's' => ' ',
                    'e' => '\x1b',
                    other => other,
                });
            }
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(regexp: &str) -> PasswordRules {
        PasswordRules {
            iterations: 1,
            regexp: Some(regexp.into()),
            ..PasswordRules::default()
        }
    }

    fn reason(r: Result<PasswordHash, Denied>) -> Denied {
        r.unwrap_err()
    }

    /// users_db_test.exs "users password requirements".
    #[test]
    fn requirements_in_order_with_reasons() {
        let r = rules(
            r#"[{".{10,}"}, {"[A-Z]+", "Requirement 2."}, {"[a-z]+", ""}, {"\\d+", "Req 4."}, "[!.,()]+"]"#,
        );
        let bad = |m: &str| Denied::BadRequest(m.into());
        assert_eq!(reason(r.hash("funnybone")), bad(REQUIREMENT_ERROR));
        assert_eq!(
            reason(r.hash("funnnnnybone")),
            bad("Password does not conform to requirements. Requirement 2.")
        );
        assert_eq!(reason(r.hash("FUNNNNNYBONE")), bad(REQUIREMENT_ERROR));
        assert_eq!(
            reason(r.hash("funnnnnyBONE")),
            bad("Password does not conform to requirements. Req 4.")
        );
        assert_eq!(reason(r.hash("funnnnnyB0N3")), bad(REQUIREMENT_ERROR));
        assert!(r.hash("funnnnnyB0N3!").unwrap().verify("funnnnnyB0N3!"));
    }

    #[test]
    fn unusable_settings() {
        let server = Denied::Forbidden(SERVER_ERROR.into());
        assert_eq!(reason(rules(r#"{{".{10,}"}}"#).hash("x")), server);
        assert_eq!(reason(rules(r#"[{".{10,}"]"#).hash("x")), server);
        let bad_scheme = PasswordRules {
            scheme: "bcrypt".into(),
            ..PasswordRules::default()
        };
        assert_eq!(reason(bad_scheme.hash("x")), server);
        assert!(rules("[]").hash("x").is_ok());
    }

    #[test]
    fn simple_scheme() {
        let r = PasswordRules {
            scheme: "simple".into(),
            ..PasswordRules::default()
        };
        let h = r.hash("pw").unwrap();
        assert_eq!(h.user_doc_fields()["password_scheme"], "simple");
        assert!(h.verify("pw"));
    }
}
