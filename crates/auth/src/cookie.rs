//! The `AuthSession` cookie, as CouchDB 3.4/3.5 makes and checks it
//! (`couch_httpd_auth:cookie_authentication_handler/2`, `cookie_auth_cookie/3`,
//! `cookie_attributes/1`, `couch_secrets:verify/3`; attribute layout from
//! `mochiweb_cookies:cookie/3`).
//!
//! The value is base64url without padding of `name ":" HEX(issued) ":" MAC` where `HEX` is
//! uppercase hexadecimal Unix seconds and `MAC` is the *raw* (binary) HMAC, keyed with the
//! server secret followed by the user's password salt, over `name ":" HEX(issued)`. New
//! cookies use the first algorithm of `[chttpd_auth] hash_algorithms` (default
//! `sha256, sha`); any listed algorithm is accepted when checking.
//!
//! A cookie is valid while `now < issued + timeout`; once more than a tenth of the timeout
//! has passed (time left `< 0.9 × timeout`) CouchDB sends a fresh cookie with the response.
//!
//! Parsing splits at the first two colons, like CouchDB: a user name containing `:` cannot
//! round-trip, its cookies are simply never valid (CouchDB behaves the same).
//!
//! Deliberate differences: an empty or wholly unknown `hash_algorithms` list falls back to
//! the default instead of failing every request; only the SHA family is supported (`sha`,
//! `sha224`, `sha256`, `sha384`, `sha512`), other Erlang hash names are ignored as
//! unsupported ones are by CouchDB. Newer CouchDB (`couch_secrets`) also keeps recently
//! rotated secrets valid for one timeout; callers get that by calling [`Cookie::verify`]
//! once per secret.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, Engine, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, Mac};

use crate::ini::{self, Section};
use crate::password::constant_time_eq;

/// The cookie's name.
pub const COOKIE_NAME: &str = "AuthSession";
/// CouchDB's `[chttpd_auth] timeout` default, in seconds.
pub const DEFAULT_TIMEOUT: i64 = 600;
/// CouchDB's `[chttpd_auth] hash_algorithms` default.
pub const DEFAULT_HASH_ALGORITHMS: &str = "sha256, sha";
/// The 400 reason for a cookie that does not decode into three parts.
pub const MALFORMED_REASON: &str = "Malformed AuthSession cookie. Please clear your cookies.";

/// An HMAC hash function, named as in CouchDB's config (Erlang `crypto` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlg {
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlg {
    /// One Erlang hash name (`sha` is SHA-1); `None` for names this crate does not support.
    pub fn parse(name: &str) -> Option<HashAlg> {
        match name {
            "sha" => Some(HashAlg::Sha1),
            "sha224" => Some(HashAlg::Sha224),
            "sha256" => Some(HashAlg::Sha256),
            "sha384" => Some(HashAlg::Sha384),
            "sha512" => Some(HashAlg::Sha512),
            _ => None,
        }
    }

    /// A `hash_algorithms` value: comma-separated, unsupported names dropped, in order.
    /// Falls back to the default list when nothing usable remains.
    pub fn parse_list(value: &str) -> Vec<HashAlg> {
        let algs: Vec<HashAlg> = ini::split_list(value.trim())
            .iter()
            .filter_map(|name| HashAlg::parse(name))
            .collect();
        if algs.is_empty() {
            return vec![HashAlg::Sha256, HashAlg::Sha1];
        }
        algs
    }

    /// The MAC length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            HashAlg::Sha1 => 20,
            HashAlg::Sha224 => 28,
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
            HashAlg::Sha512 => 64,
        }
    }

    /// HMAC of `message` under `key`.
    pub fn hmac(self, key: &[u8], message: &[u8]) -> Vec<u8> {
        match self {
            HashAlg::Sha1 => mac::<Hmac<sha1::Sha1>>(key, message),
            HashAlg::Sha224 => mac::<Hmac<sha2::Sha224>>(key, message),
            HashAlg::Sha256 => mac::<Hmac<sha2::Sha256>>(key, message),
            HashAlg::Sha384 => mac::<Hmac<sha2::Sha384>>(key, message),
            HashAlg::Sha512 => mac::<Hmac<sha2::Sha512>>(key, message),
        }
    }
}

fn mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut m = <M as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
    m.update(message);
    m.finalize().into_bytes().to_vec()
}

/// base64url, no padding on output, padding optional and trailing bits tolerated on input
/// (CouchDB's `couch_util:encodeBase64Url` / `decodeBase64Url`).
pub(crate) const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Makes a cookie value for `name`, issued at `issued_secs`.
pub fn make(name: &str, secret: &[u8], user_salt: &[u8], issued_secs: u64, alg: HashAlg) -> String {
    let data = format!("{name}:{issued_secs:X}");
    let mut raw = data.clone().into_bytes();
    raw.push(b':');
    raw.extend(alg.hmac(&full_secret(secret, user_salt), data.as_bytes()));
    BASE64URL.encode(raw)
}

fn full_secret(secret: &[u8], user_salt: &[u8]) -> Vec<u8> {
    [secret, user_salt].concat()
}

/// A decoded `AuthSession` cookie; nothing about it is trusted until [`Cookie::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cookie {
    pub name: String,
    /// The timestamp as sent: the MAC covers these exact characters.
    pub issued_hex: String,
    pub mac: Vec<u8>,
}

/// Where a cookie stands in its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieStatus {
    /// Valid; no new cookie needed.
    Valid,
    /// Valid, and more than 10% of the lifetime has passed: send a fresh cookie.
    Renew,
    /// Too old, or its timestamp is not hexadecimal: the request is anonymous.
    Expired,
}

/// Decodes a cookie value. `None` means CouchDB's 400 [`MALFORMED_REASON`]; note that
/// CouchDB ignores an *empty* `AuthSession` value, so callers skip those before parsing.
pub fn parse(value: &str) -> Option<Cookie> {
    let raw = BASE64URL.decode(value.trim()).ok()?;
    let mut parts = raw.splitn(3, |b| *b == b':');
    let (name, issued, mac) = (parts.next()?, parts.next()?, parts.next()?);
    Some(Cookie {
        name: String::from_utf8(name.to_vec()).ok()?,
        issued_hex: String::from_utf8(issued.to_vec()).ok()?,
        mac: mac.to_vec(),
    })
}

impl Cookie {
    /// The issue time, if the timestamp is hexadecimal.
    pub fn issued(&self) -> Option<u64> {
        u64::from_str_radix(&self.issued_hex, 16).ok()
    }

    /// Whether the MAC matches under any of `algs` (constant time per comparison).
    pub fn verify(&self, secret: &[u8], user_salt: &[u8], algs: &[HashAlg]) -> bool {
        let key = full_secret(secret, user_salt);
        let message = format!("{}:{}", self.name, self.issued_hex);
        algs.iter()
            .filter(|alg| alg.output_len() == self.mac.len())
            .any(|alg| constant_time_eq(&alg.hmac(&key, message.as_bytes()), &self.mac))
    }

    /// The cookie's standing at `now_secs` for a lifetime of `timeout_secs`.
    pub fn status(&self, now_secs: u64, timeout_secs: i64) -> CookieStatus {
        let Some(issued) = self.issued() else {
            return CookieStatus::Expired;
        };
        let time_left = issued as i128 + timeout_secs as i128 - now_secs as i128;
        if time_left <= 0 {
            CookieStatus::Expired
        } else if time_left * 10 < timeout_secs as i128 * 9 {
            CookieStatus::Renew
        } else {
            CookieStatus::Valid
        }
    }
}

/// `SameSite` attribute values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameSite {
    None,
    Lax,
    Strict,
}

/// The `[chttpd_auth]` settings that shape session cookies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CookieOptions {
    /// `secret`; cookie authentication is off while it is unset.
    pub secret: Option<String>,
    /// `timeout` in seconds (default 600).
    pub timeout: i64,
    /// `allow_persistent_cookies` (default true): adds `Expires` and `Max-Age`.
    pub persistent: bool,
    /// `cookie_domain` (default none).
    pub domain: Option<String>,
    /// `same_site` (`none`, `lax`, `strict`, any case; other values are ignored).
    pub same_site: Option<SameSite>,
    /// `hash_algorithms` (default `sha256, sha`): the first signs, all verify.
    pub hash_algorithms: Vec<HashAlg>,
}

impl Default for CookieOptions {
    fn default() -> Self {
        CookieOptions::from_section(&Section::new())
    }
}

impl CookieOptions {
    /// Reads the `[chttpd_auth]` section (callers merge in legacy `[couch_httpd_auth]`
    /// values first, as `chttpd_util:get_chttpd_auth_config` falls back to them).
    pub fn from_section(section: &Section) -> CookieOptions {
        CookieOptions {
            secret: ini::get(section, "secret").map(str::to_string),
            timeout: ini::get_int(section, "timeout", DEFAULT_TIMEOUT),
            persistent: ini::get_bool(section, "allow_persistent_cookies", true),
            domain: ini::get(section, "cookie_domain")
                .filter(|d| !d.is_empty())
                .map(str::to_string),
            same_site: parse_same_site(ini::get_or(section, "same_site", "")),
            hash_algorithms: HashAlg::parse_list(ini::get_or(
                section,
                "hash_algorithms",
                DEFAULT_HASH_ALGORITHMS,
            )),
        }
    }

    /// The algorithm new cookies are signed with.
    pub fn signing_alg(&self) -> HashAlg {
        self.hash_algorithms[0]
    }

    /// The `Set-Cookie` value carrying `value`; `https` adds `Secure` (CouchDB sets it when
    /// the request came over TLS).
    pub fn set_cookie(&self, value: &str, now_secs: u64, https: bool) -> String {
        let mut out = format!("{COOKIE_NAME}={value}; Version=1");
        if self.persistent {
            let age = self.timeout.max(0);
            let expires = cookie_date(now_secs.saturating_add(age as u64));
            out.push_str(&format!("; Expires={expires}; Max-Age={age}"));
        }
        if https {
            out.push_str("; Secure");
        }
        if let Some(domain) = &self.domain {
            out.push_str(&format!("; Domain={domain}"));
        }
        out.push_str("; Path=/; HttpOnly");
        out.push_str(same_site_attr(self.same_site));
        out
    }

    /// The `Set-Cookie` value that clears the session (logout, failed login): an empty
    /// value with the same attributes.
    pub fn clear_cookie(&self, now_secs: u64, https: bool) -> String {
        self.set_cookie("", now_secs, https)
    }
}

fn parse_same_site(value: &str) -> Option<SameSite> {
    match value.to_ascii_lowercase().as_str() {
        "none" => Some(SameSite::None),
        "lax" => Some(SameSite::Lax),
        "strict" => Some(SameSite::Strict),
        _ => None,
    }
}

fn same_site_attr(same_site: Option<SameSite>) -> &'static str {
    match same_site {
        None => "",
        Some(SameSite::None) => "; SameSite=None",
        Some(SameSite::Lax) => "; SameSite=Lax",
        Some(SameSite::Strict) => "; SameSite=Strict",
    }
}

/// `Wdy, DD-Mon-YYYY HH:MM:SS GMT`, the RFC 2109 date mochiweb writes in `Expires`.
fn cookie_date(unix_secs: u64) -> String {
    use settee_core::dates::{utc, MONTHS};
    let t = utc(unix_secs);
    format!(
        "{}, {:02}-{}-{:04} {:02}:{:02}:{:02} GMT",
        t.weekday,
        t.day,
        MONTHS[(t.month - 1) as usize],
        t.year,
        t.hour,
        t.minute,
        t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUED: u64 = 1_700_000_000; // 0x6553F100

    use crate::ini::section;

    // Known answers from Python: base64.urlsafe_b64encode(data + b":" +
    // hmac.new(b"s3cr3tabc", data, alg).digest()).rstrip(b"=") with data = b"admin:6553F100".
    #[test]
    fn make_matches_known_answers() {
        assert_eq!(
            make("admin", b"s3cr3t", b"abc", ISSUED, HashAlg::Sha256),
            "YWRtaW46NjU1M0YxMDA6Dnp9XqiwcRlfuSyIQrRyeMY0cNlw4449_aYa3IkbXRs"
        );
        assert_eq!(
            make("admin", b"s3cr3t", b"abc", ISSUED, HashAlg::Sha1),
            "YWRtaW46NjU1M0YxMDA62C4Z2nMIE_vJhlVxVv4G0rWbU74"
        );
    }

    #[test]
    fn parse_and_verify_round_trip() {
        let value = make("bob", b"secret", b"salt", ISSUED, HashAlg::Sha256);
        let cookie = parse(&value).unwrap();
        assert_eq!(cookie.name, "bob");
        assert_eq!(cookie.issued_hex, "6553F100");
        assert_eq!(cookie.issued(), Some(ISSUED));
        let algs = HashAlg::parse_list(DEFAULT_HASH_ALGORITHMS);
        assert!(cookie.verify(b"secret", b"salt", &algs));
        assert!(!cookie.verify(b"secret", b"other salt", &algs));
        assert!(!cookie.verify(b"other", b"salt", &algs));
        assert!(!cookie.verify(b"secret", b"salt", &[HashAlg::Sha1]));
    }

    #[test]
    fn old_sha1_cookies_verify_while_sha_is_listed() {
        let cookie = parse(&make("bob", b"k", b"", ISSUED, HashAlg::Sha1)).unwrap();
        assert!(cookie.verify(b"k", b"", &HashAlg::parse_list("sha256, sha")));
        assert!(!cookie.verify(b"k", b"", &HashAlg::parse_list("sha256")));
    }

    #[test]
    fn mac_may_contain_colons_and_padding_is_optional() {
        // Splitting stops after two colons, so a binary MAC containing ':' survives.
        let raw = b"u:1:\x3a\x00\x3a".to_vec();
        let cookie = parse(&base64::engine::general_purpose::URL_SAFE.encode(raw)).unwrap();
        assert_eq!(cookie.mac, b"\x3a\x00\x3a");
    }

    #[test]
    fn names_with_colons_split_at_the_first_colon() {
        let cookie = parse(&make("a:b", b"k", b"", ISSUED, HashAlg::Sha256)).unwrap();
        assert_eq!(cookie.name, "a");
        assert_eq!(cookie.issued_hex, "b");
        assert!(!cookie.verify(b"k", b"", &[HashAlg::Sha256]));
    }

    #[test]
    fn malformed_values_are_rejected() {
        assert_eq!(parse("!!!"), None);
        assert_eq!(parse(&BASE64URL.encode("no-colons")), None);
        assert_eq!(parse(&BASE64URL.encode("one:colon")), None);
        assert!(parse(&BASE64URL.encode("a:zz:mac")).is_some());
    }

    #[test]
    fn status_follows_timeout_and_renewal_window() {
        let cookie = parse(&make("bob", b"k", b"", ISSUED, HashAlg::Sha256)).unwrap();
        assert_eq!(cookie.status(ISSUED, 600), CookieStatus::Valid);
        assert_eq!(cookie.status(ISSUED + 60, 600), CookieStatus::Valid);
        assert_eq!(cookie.status(ISSUED + 61, 600), CookieStatus::Renew);
        assert_eq!(cookie.status(ISSUED + 599, 600), CookieStatus::Renew);
        assert_eq!(cookie.status(ISSUED + 600, 600), CookieStatus::Expired);
        assert_eq!(cookie.status(ISSUED, 0), CookieStatus::Expired);
    }

    #[test]
    fn non_hex_timestamps_are_expired() {
        let cookie = parse(&BASE64URL.encode("bob:nothex:mac")).unwrap();
        assert_eq!(cookie.status(0, 600), CookieStatus::Expired);
    }

    #[test]
    fn hash_algorithm_lists() {
        assert_eq!(
            HashAlg::parse_list(" sha512 , md5,sha "),
            vec![HashAlg::Sha512, HashAlg::Sha1]
        );
        assert_eq!(
            HashAlg::parse_list("blake2"),
            vec![HashAlg::Sha256, HashAlg::Sha1]
        );
        assert_eq!(HashAlg::parse("sha224"), Some(HashAlg::Sha224));
        assert_eq!(HashAlg::parse("SHA256"), None);
    }

    #[test]
    fn defaults_follow_couchdb() {
        let opts = CookieOptions::default();
        assert_eq!(opts.secret, None);
        assert_eq!(opts.timeout, 600);
        assert!(opts.persistent);
        assert_eq!(opts.domain, None);
        assert_eq!(opts.same_site, None);
        assert_eq!(opts.signing_alg(), HashAlg::Sha256);
    }

    #[test]
    fn set_cookie_with_defaults_is_persistent() {
        let opts = CookieOptions::default();
        assert_eq!(
            opts.set_cookie("abc", ISSUED, false),
            "AuthSession=abc; Version=1; Expires=Tue, 14-Nov-2023 22:23:20 GMT; \
             Max-Age=600; Path=/; HttpOnly"
        );
    }

    #[test]
    fn set_cookie_attribute_order_matches_mochiweb() {
        let opts = CookieOptions::from_section(&section(&[
            ("allow_persistent_cookies", "false"),
            ("cookie_domain", " example.com "),
            ("same_site", "Strict"),
            ("secret", "s"),
        ]));
        assert_eq!(opts.secret.as_deref(), Some("s"));
        assert_eq!(
            opts.set_cookie("abc", ISSUED, true),
            "AuthSession=abc; Version=1; Secure; Domain=example.com; Path=/; HttpOnly; \
             SameSite=Strict"
        );
        assert_eq!(
            opts.clear_cookie(ISSUED, false),
            "AuthSession=; Version=1; Domain=example.com; Path=/; HttpOnly; SameSite=Strict"
        );
    }

    #[test]
    fn invalid_same_site_is_ignored() {
        let opts = CookieOptions::from_section(&section(&[("same_site", "sometimes")]));
        assert_eq!(opts.same_site, None);
        let opts = CookieOptions::from_section(&section(&[("same_site", "none")]));
        assert_eq!(opts.same_site, Some(SameSite::None));
    }

    #[test]
    fn cookie_dates() {
        assert_eq!(cookie_date(0), "Thu, 01-Jan-1970 00:00:00 GMT");
        assert_eq!(cookie_date(951_868_800), "Wed, 01-Mar-2000 00:00:00 GMT");
        assert_eq!(cookie_date(1_700_000_600), "Tue, 14-Nov-2023 22:23:20 GMT");
    }
}
