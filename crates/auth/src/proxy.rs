//! Proxy authentication, as CouchDB 3.5's `couch_httpd_auth:proxy_auth_user/1`.
//!
//! A trusted proxy names the user in `X-Auth-CouchDB-UserName` (an empty value is the
//! user `""`) and the roles in `X-Auth-CouchDB-Roles` (split at commas, whitespace around
//! commas dropped, trailing empty items removed; an empty header is one empty role). The
//! header names come from `[chttpd_auth] x_auth_username`, `x_auth_roles` and
//! `x_auth_token`, read on every request. With `proxy_use_secret = true` (default `false`)
//! and a `secret` set, `X-Auth-CouchDB-Token` must be the hex HMAC (either case) of the
//! user name keyed with the secret, under one of `hash_algorithms` (default `sha256, sha`;
//! the token's length picks the candidates, as `couch_secrets:verify/4`). With
//! `proxy_use_secret = true` but no secret, CouchDB accepts the headers without a token,
//! and so does this module.
//!
//! A wrong token means this handler does not authenticate, and the next handler runs
//! (`Ok(None)`). A token that is missing or not hex, while a secret is in use, is
//! CouchDB's 500 `unknown_error` `badarg` on every request (it passes `undefined` on to
//! `couch_secrets:verify/2`): [`Denied::Crash`], so that a proxy that forgot the token
//! fails as loudly as it does with CouchDB instead of its users becoming anonymous.

use crate::cookie::{HashAlg, DEFAULT_HASH_ALGORITHMS};
use crate::ini::{self, Section};
use crate::password::constant_time_eq;
use crate::{Denied, UserCtx, BADARG};

/// `[chttpd_auth]` settings for proxy authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    pub username_header: String,
    pub roles_header: String,
    pub token_header: String,
    /// `proxy_use_secret` (default false).
    pub use_secret: bool,
    /// `secret`.
    pub secret: Option<String>,
    /// `hash_algorithms`: any of them may have made the token.
    pub hash_algorithms: Vec<HashAlg>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig::from_section(&Section::new())
    }
}

impl ProxyConfig {
    /// Reads the `[chttpd_auth]` section (with legacy `[couch_httpd_auth]` values merged in
    /// by the caller).
    pub fn from_section(section: &Section) -> ProxyConfig {
        ProxyConfig {
            username_header: header_name(section, "x_auth_username", "X-Auth-CouchDB-UserName"),
            roles_header: header_name(section, "x_auth_roles", "X-Auth-CouchDB-Roles"),
            token_header: header_name(section, "x_auth_token", "X-Auth-CouchDB-Token"),
            use_secret: ini::get_bool(section, "proxy_use_secret", false),
            secret: ini::get(section, "secret").map(str::to_string),
            hash_algorithms: HashAlg::parse_list(ini::get_or(
                section,
                "hash_algorithms",
                DEFAULT_HASH_ALGORITHMS,
            )),
        }
    }

    /// The user the proxy headers name, or `None` when there is no user-name header or the
    /// token does not check out; `Err` (CouchDB's 500 `badarg`) when a secret is in use
    /// and the token is missing or not hex. `header` looks a request header up by name
    /// (case-insensitively, as HTTP headers are).
    pub fn authenticate(
        &self,
        header: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<UserCtx>, Denied> {
        let Some(name) = header(&self.username_header) else {
            return Ok(None);
        };
        if !self.token_ok(&name, header(&self.token_header).as_deref())? {
            return Ok(None);
        }
        let roles = header(&self.roles_header)
            .map(|r| ini::split_roles(&r))
            .unwrap_or_default();
        Ok(Some(UserCtx::named(&name, roles)))
    }

    fn token_ok(&self, name: &str, sent: Option<&str>) -> Result<bool, Denied> {
        let secret = match (&self.secret, self.use_secret) {
            (Some(secret), true) => secret,
            _ => return Ok(true),
        };
        let mac = sent
            .and_then(|t| hex::decode(t).ok())
            .ok_or_else(|| Denied::Crash(BADARG.into()))?;
        Ok(self.hash_algorithms.iter().any(|alg| {
            let expected = alg.hmac(secret.as_bytes(), name.as_bytes());
            constant_time_eq(&expected, &mac)
        }))
    }
}

fn header_name(section: &Section, key: &str, default: &str) -> String {
    ini::get_or(section, key, default).to_string()
}

/// The `X-Auth-CouchDB-Token` a proxy sends for `name`: lowercase hex HMAC.
pub fn token(secret: &str, name: &str, alg: HashAlg) -> String {
    hex::encode(alg.hmac(secret.as_bytes(), name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::ini::section;

    fn headers(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        move |name: &str| map.get(&name.to_ascii_lowercase()).cloned()
    }

    fn secured() -> ProxyConfig {
        ProxyConfig::from_section(&section(&[
            ("proxy_use_secret", "true"),
            ("secret", "s3cr3t"),
        ]))
    }

    // Known answers: hmac.new(b"s3cr3t", b"proxyuser", hashlib.sha256 / sha1).hexdigest()
    const SHA256_TOKEN: &str = "28568bd99a1780b8615fb38943b6506e44f01f6c7634e339d0457c7632ca701f";
    const SHA1_TOKEN: &str = "9ce38949b9ce0ce655998246cf5a88d0a9335326";

    #[test]
    fn token_matches_known_answers() {
        assert_eq!(token("s3cr3t", "proxyuser", HashAlg::Sha256), SHA256_TOKEN);
        assert_eq!(token("s3cr3t", "proxyuser", HashAlg::Sha1), SHA1_TOKEN);
    }

    #[test]
    fn defaults() {
        let cfg = ProxyConfig::default();
        assert_eq!(cfg.username_header, "X-Auth-CouchDB-UserName");
        assert_eq!(cfg.roles_header, "X-Auth-CouchDB-Roles");
        assert_eq!(cfg.token_header, "X-Auth-CouchDB-Token");
        assert!(!cfg.use_secret);
        assert_eq!(cfg.hash_algorithms, vec![HashAlg::Sha256, HashAlg::Sha1]);
    }

    #[test]
    fn no_user_header_means_not_proxy_authenticated() {
        let cfg = ProxyConfig::default();
        assert_eq!(
            cfg.authenticate(headers(&[("X-Auth-CouchDB-Roles", "a")])),
            Ok(None)
        );
    }

    #[test]
    fn without_secret_the_headers_are_trusted() {
        let cfg = ProxyConfig::default();
        let got = cfg
            .authenticate(headers(&[
                ("x-auth-couchdb-username", "bob"),
                ("X-Auth-CouchDB-Roles", "a, b ,c,"),
            ]))
            .unwrap();
        assert_eq!(
            got,
            Some(UserCtx::named(
                "bob",
                vec!["a".into(), "b".into(), "c".into()]
            ))
        );
    }

    #[test]
    fn missing_roles_header_means_no_roles() {
        let got = ProxyConfig::default()
            .authenticate(headers(&[("X-Auth-CouchDB-UserName", "bob")]))
            .unwrap();
        assert_eq!(got, Some(UserCtx::named("bob", vec![])));
    }

    #[test]
    fn secret_requires_a_token_under_any_listed_algorithm() {
        let cfg = secured();
        for tok in [SHA256_TOKEN, SHA1_TOKEN] {
            let got = cfg.authenticate(headers(&[
                ("X-Auth-CouchDB-UserName", "proxyuser"),
                ("X-Auth-CouchDB-Token", tok),
            ]));
            assert_eq!(got, Ok(Some(UserCtx::named("proxyuser", vec![]))));
        }
    }

    #[test]
    fn uppercase_hex_is_the_same_token() {
        let upper = SHA256_TOKEN.to_ascii_uppercase();
        let got = secured().authenticate(headers(&[
            ("X-Auth-CouchDB-UserName", "proxyuser"),
            ("X-Auth-CouchDB-Token", &upper),
        ]));
        assert_eq!(got, Ok(Some(UserCtx::named("proxyuser", vec![]))));
    }

    #[test]
    fn wrong_tokens_fall_through() {
        for tok in ["deadbeef", "00112233", ""] {
            let pairs = [
                ("X-Auth-CouchDB-UserName", "proxyuser"),
                ("X-Auth-CouchDB-Token", tok),
            ];
            assert_eq!(secured().authenticate(headers(&pairs)), Ok(None), "{tok}");
        }
    }

    #[test]
    fn missing_or_non_hex_tokens_are_couchdbs_badarg() {
        let crash = Err(Denied::Crash("badarg".into()));
        for tok in [None, Some("zz"), Some("abc")] {
            let mut pairs = vec![("X-Auth-CouchDB-UserName", "proxyuser")];
            if let Some(t) = tok {
                pairs.push(("X-Auth-CouchDB-Token", t));
            }
            assert_eq!(secured().authenticate(headers(&pairs)), crash, "{tok:?}");
        }
    }

    #[test]
    fn empty_headers() {
        let got = ProxyConfig::default().authenticate(headers(&[
            ("X-Auth-CouchDB-UserName", ""),
            ("X-Auth-CouchDB-Roles", ""),
        ]));
        assert_eq!(got, Ok(Some(UserCtx::named("", vec![String::new()]))));
        let got = ProxyConfig::default().authenticate(headers(&[
            ("X-Auth-CouchDB-UserName", "a"),
            ("X-Auth-CouchDB-Roles", "a, b ,c,,_admin"),
        ]));
        let roles = ["a", "b", "c", "", "_admin"].map(String::from).to_vec();
        assert_eq!(got, Ok(Some(UserCtx::named("a", roles))));
    }

    #[test]
    fn algorithms_not_listed_are_refused() {
        let cfg = ProxyConfig::from_section(&section(&[
            ("proxy_use_secret", "true"),
            ("secret", "s3cr3t"),
            ("hash_algorithms", "sha256"),
        ]));
        let got = cfg.authenticate(headers(&[
            ("X-Auth-CouchDB-UserName", "proxyuser"),
            ("X-Auth-CouchDB-Token", SHA1_TOKEN),
        ]));
        assert_eq!(got, Ok(None));
    }

    #[test]
    fn use_secret_without_secret_trusts_headers() {
        let cfg = ProxyConfig::from_section(&section(&[("proxy_use_secret", "true")]));
        let got = cfg.authenticate(headers(&[("X-Auth-CouchDB-UserName", "bob")]));
        assert_eq!(got, Ok(Some(UserCtx::named("bob", vec![]))));
    }

    #[test]
    fn header_names_are_configurable() {
        let cfg = ProxyConfig::from_section(&section(&[
            ("x_auth_username", "X-User"),
            ("x_auth_roles", "X-Roles"),
        ]));
        let got = cfg.authenticate(headers(&[("X-User", "carol"), ("X-Roles", "r1")]));
        assert_eq!(got, Ok(Some(UserCtx::named("carol", vec!["r1".into()]))));
    }
}
