//! How `_users` documents' new passwords are hashed and which passwords are accepted, as
//! `couch_users_db:save_doc/1` decides from `[chttpd_auth]`: `password_scheme`
//! (`pbkdf2`, or the deprecated `simple`), `pbkdf2_prf`, `iterations`, and
//! `password_regexp`, an Erlang term listing the regular expressions a new password must
//! all match, each optionally with a reason: `[".{10,}", {"[A-Z]"}, {"\\d", "Needs a
//! digit."}]`.

use crate::password::{PasswordHash, Prf, Scheme, DEFAULT_ITERATIONS};
use crate::Denied;
use serde_json::{Map, Value};

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
        self.hash_with_salt(password, None)
    }

    /// [`PasswordRules::hash`] keeping a salt (rehashing on login keeps the salt, so the
    /// user's session cookies stay valid).
    pub fn hash_with_salt(
        &self,
        password: &str,
        salt: Option<&str>,
    ) -> Result<PasswordHash, Denied> {
        let scheme = self
            .target()
            .ok_or_else(|| Denied::Forbidden(SERVER_ERROR.into()))?;
        self.check(password)?;
        Ok(PasswordHash::hashed(scheme, password, salt))
    }

    /// The scheme new passwords are hashed with; `None` when the settings name none.
    fn target(&self) -> Option<Scheme> {
        match self.scheme.as_str() {
            "simple" => Some(Scheme::Simple),
            "pbkdf2" => Some(Scheme::Pbkdf2 {
                prf: Prf::parse(self.prf.trim())?,
                iterations: self.iterations,
            }),
            _ => None,
        }
    }

    /// Whether a user document's stored hash is not what these settings would store, so
    /// that a successful login rehashes it (CouchDB 3.4+'s `upgrade_hash_on_auth`,
    /// `couch_password_hasher:needs_upgrade/1`): the scheme, the iterations and, for
    /// PBKDF2, the PRF must all match; a `simple` document has no iterations, so it never
    /// matches.
    pub fn needs_upgrade(&self, doc: &Map<String, Value>) -> bool {
        let same_scheme =
            doc.get("password_scheme").and_then(Value::as_str) == Some(self.scheme.as_str());
        let same_iterations =
            doc.get("iterations").and_then(Value::as_u64) == Some(u64::from(self.iterations));
        let same_prf = doc.get("pbkdf2_prf").and_then(Value::as_str) == Some(self.prf.trim());
        match self.scheme.as_str() {
            "simple" => !(same_scheme && same_iterations),
            "pbkdf2" => !(same_scheme && same_iterations && same_prf),
            _ => true,
        }
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
    fn upgrade_when_the_stored_hash_differs_from_the_settings() {
        let r = rules("[]");
        let doc = |v: serde_json::Value| v.as_object().unwrap().clone();
        let current = doc(
            serde_json::json!({"password_scheme": "pbkdf2", "pbkdf2_prf": "sha256", "iterations": 1}),
        );
        assert!(!r.needs_upgrade(&current));
        let sha1 = doc(serde_json::json!({"password_scheme": "pbkdf2", "iterations": 1}));
        assert!(r.needs_upgrade(&sha1));
        let more = doc(
            serde_json::json!({"password_scheme": "pbkdf2", "pbkdf2_prf": "sha256", "iterations": 2}),
        );
        assert!(r.needs_upgrade(&more));
        let simple = doc(serde_json::json!({"password_scheme": "simple", "password_sha": "x"}));
        assert!(r.needs_upgrade(&simple));
        let h = r.hash_with_salt("pw", Some("salty")).unwrap();
        assert_eq!(h.salt(), "salty");
        assert!(h.verify("pw"));
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
