//! JWT authentication (`Authorization: Bearer <token>`), as CouchDB 3.4/3.5's
//! `couch_httpd_auth:jwt_authentication_handler/1` with `jwtf:decode/3` and
//! `jwtf_keystore:get/2`.
//!
//! - Algorithms: HS256/384/512 (`[jwt_keys] hmac:<kid>`, base64 secret), RS256/384/512
//!   (`rsa:<kid>`, PEM public key, SPKI or PKCS#1) and ES256/384/512 (`ec:<kid>`, PEM SPKI on
//!   P-256/P-384/P-521). PEM values may carry literal `\n` escapes, as ini files store them.
//!   A token without `kid` uses the `_default` key. ECDSA signatures are JWS `R || S`.
//! - `[jwt_auth] required_claims` (default `exp`): a list of names and `{name, "value"}`
//!   pairs, scanned the way CouchDB's regular expression does. `exp`/`nbf`/`iat`/`iss`/`kid`
//!   / `typ` behave as in `jwtf` (missing → 400 `Missing exp claim`, expired → 401
//!   `exp not in future`, future `nbf` → 401 `nbf not in past`, …). No leeway.
//! - The user name is `sub` (missing → 401 `Token missing sub claim.`, checked after the
//!   roles); roles come from `roles_claim_path` (dotted path, `\.` escapes a dot) if set,
//!   else the top-level claim `roles_claim_name` (default `_couchdb.roles`; absent → no
//!   roles). As `couch_httpd_auth:get_roles_claim/1` reads them: a list of strings, or a
//!   comma-separated string; a list holding anything else → 400 `Malformed token`; any
//!   other value (`null`, a number, a boolean, an object) → 500 `unknown_error` `badarg`
//!   (CouchDB hands it to `re:split`; matched, as the token is refused either way and
//!   CouchDB's answer is what its clients see). A path that does not resolve is
//!   `couch_util:get_nested_json_value/2`'s 404: `missing json key: K` for an absent
//!   member, `json_mismatch` where a step is not an object.
//! - Errors carry CouchDB's reasons: 400 for malformed tokens, unknown keys (`Unknown kid`)
//!   and bad signatures (`Bad signature`, `Bad HMAC`); 401 for time and `sub` failures.
//!
//! Deliberate differences, all on the side of refusing:
//! - `exp` and `nbf` are checked whenever present, even when not listed as required; a
//!   non-numeric `exp` is expired (Erlang's term order would let it pass).
//! - Required claims other than `jwtf`'s own (say `aud`) are enforced (`Missing aud claim`,
//!   `Invalid aud claim` — the value must equal, or be in an array claim), where CouchDB
//!   silently ignores them; a bare `iss` only requires presence.
//! - A non-string `sub` is 400 `Malformed token` (CouchDB makes it the user's name).
//! - Undecodable header or payload JSON is 400 `Malformed token`.
//! - `[jwt_auth] allowed_algorithms` (comma-separated; default all of the above) was not
//!   found in the CouchDB sources consulted, which accept every supported algorithm; with
//!   the key unset the behaviour is the same.
//! - HMAC comparison is constant-time.

use std::collections::BTreeMap;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::pkcs8::DecodePublicKey;
use rsa::signature::Verifier;
use rsa::RsaPublicKey;
use serde_json::{Map, Value};

use crate::cookie::{HashAlg, BASE64URL};
use crate::ini::{self, Section};
use crate::password::constant_time_eq;
use crate::{Denied, UserCtx};

/// The 500 reason when `required_claims` cannot be read.
pub const MISCONFIGURED_REASON: &str = "JWT is not configured correctly";

/// A signature algorithm of the `alg` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Alg {
    HS256,
    HS384,
    HS512,
    RS256,
    RS384,
    RS512,
    ES256,
    ES384,
    ES512,
}

const ALL_ALGS: [Alg; 9] = [
    Alg::HS256,
    Alg::HS384,
    Alg::HS512,
    Alg::RS256,
    Alg::RS384,
    Alg::RS512,
    Alg::ES256,
    Alg::ES384,
    Alg::ES512,
];

impl Alg {
    pub fn parse(name: &str) -> Option<Alg> {
        ALL_ALGS.into_iter().find(|a| a.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Alg::HS256 => "HS256",
            Alg::HS384 => "HS384",
            Alg::HS512 => "HS512",
            Alg::RS256 => "RS256",
            Alg::RS384 => "RS384",
            Alg::RS512 => "RS512",
            Alg::ES256 => "ES256",
            Alg::ES384 => "ES384",
            Alg::ES512 => "ES512",
        }
    }

    /// The `[jwt_keys]` key type prefix for this algorithm.
    fn kty(self) -> Kty {
        match self {
            Alg::HS256 | Alg::HS384 | Alg::HS512 => Kty::Hmac,
            Alg::RS256 | Alg::RS384 | Alg::RS512 => Kty::Rsa,
            Alg::ES256 | Alg::ES384 | Alg::ES512 => Kty::Ec,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kty {
    Hmac,
    Rsa,
    Ec,
}

impl Kty {
    fn parse(prefix: &str) -> Option<Kty> {
        match prefix {
            "hmac" => Some(Kty::Hmac),
            "rsa" => Some(Kty::Rsa),
            "ec" => Some(Kty::Ec),
            _ => None,
        }
    }
}

#[derive(Clone)]
enum VerifyKey {
    Hmac(Vec<u8>),
    Rsa(Box<RsaPublicKey>),
    P256(p256::ecdsa::VerifyingKey),
    P384(p384::ecdsa::VerifyingKey),
    P521(Box<p521::ecdsa::VerifyingKey>),
}

/// Names the key type only, so secrets never reach logs.
impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            VerifyKey::Hmac(_) => "Hmac",
            VerifyKey::Rsa(_) => "Rsa",
            VerifyKey::P256(_) => "P256",
            VerifyKey::P384(_) => "P384",
            VerifyKey::P521(_) => "P521",
        };
        f.write_str(kind)
    }
}

/// One entry of `required_claims`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequiredClaim {
    Present(String),
    Equals(String, String),
}

impl RequiredClaim {
    fn name(&self) -> &str {
        match self {
            RequiredClaim::Present(n) | RequiredClaim::Equals(n, _) => n,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum RolesSource {
    Name(String),
    Path(Vec<String>),
}

/// The `[jwt_auth]` and `[jwt_keys]` sections, parsed once.
#[derive(Clone, Debug)]
pub struct JwtConfig {
    required: Vec<RequiredClaim>,
    allowed: Vec<Alg>,
    roles: RolesSource,
    /// Keys by (type, kid); a key that does not parse keeps the reason CouchDB gives
    /// when a token needs it.
    keys: BTreeMap<(Kty, String), Result<VerifyKey, String>>,
}

/// The token in an `Authorization` header, if it is a bearer token.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    authorization.strip_prefix("Bearer ")
}

impl JwtConfig {
    /// Reads the sections; `Err` (CouchDB's 500 [`MISCONFIGURED_REASON`]) when
    /// `required_claims` is set but names nothing.
    pub fn from_sections(jwt_auth: &Section, jwt_keys: &Section) -> Result<JwtConfig, String> {
        Ok(JwtConfig {
            required: parse_required_claims(ini::get_or(jwt_auth, "required_claims", "exp"))?,
            allowed: parse_allowed(ini::get(jwt_auth, "allowed_algorithms")),
            roles: roles_source(jwt_auth),
            keys: parse_keys(jwt_keys),
        })
    }

    /// The claims every token must carry.
    pub fn required_claims(&self) -> &[RequiredClaim] {
        &self.required
    }

    /// Checks `token` at `now_secs` and names its user.
    pub fn authenticate(&self, token: &str, now_secs: u64) -> Result<UserCtx, Denied> {
        let [header_b64, payload_b64, signature_b64] = split(token)?;
        let header = decode_object(header_b64)?;
        let alg = self.check_header(&header)?;
        let payload = decode_object(payload_b64)?;
        self.check_payload(&payload, now_secs)?;
        let key = self.key(&header, alg)?;
        let message = &token[..header_b64.len() + 1 + payload_b64.len()];
        verify(alg, key, message.as_bytes(), signature_b64)?;
        let roles = self.roles(&payload)?;
        Ok(UserCtx::named(subject(&payload)?, roles))
    }

    fn check_header(&self, header: &Map<String, Value>) -> Result<Alg, Denied> {
        if self.requires("typ") {
            match header.get("typ") {
                None => return Err(bad_request("Missing typ header parameter")),
                Some(Value::String(t)) if t == "JWT" => {}
                Some(_) => return Err(bad_request("Invalid typ header parameter")),
            }
        }
        let name = header
            .get("alg")
            .ok_or_else(|| bad_request("Missing alg header parameter"))?;
        name.as_str()
            .and_then(Alg::parse)
            .filter(|alg| self.allowed.contains(alg))
            .ok_or_else(|| bad_request("Invalid alg header parameter"))
    }

    fn check_payload(&self, payload: &Map<String, Value>, now: u64) -> Result<(), Denied> {
        for claim in &self.required {
            check_required(claim, payload)?;
        }
        check_nbf(payload.get("nbf"), self.requires("nbf"), now)?;
        check_exp(payload.get("exp"), self.requires("exp"), now)
    }

    fn requires(&self, name: &str) -> bool {
        self.required.iter().any(|c| c.name() == name)
    }

    fn key(&self, header: &Map<String, Value>, alg: Alg) -> Result<&VerifyKey, Denied> {
        let kid = match header.get("kid") {
            None if self.requires("kid") => return Err(bad_request("Missing kid claim")),
            None => "_default",
            Some(Value::String(kid)) => kid.as_str(),
            Some(_) => return Err(bad_request("Unknown kid")),
        };
        match self.keys.get(&(alg.kty(), kid.to_string())) {
            None => Err(bad_request("Unknown kid")),
            Some(Err(reason)) => Err(bad_request(reason)),
            Some(Ok(key)) => Ok(key),
        }
    }

    fn roles(&self, payload: &Map<String, Value>) -> Result<Vec<String>, Denied> {
        let value = match &self.roles {
            RolesSource::Name(name) => match payload.get(name) {
                None => return Ok(Vec::new()),
                Some(v) => v,
            },
            RolesSource::Path(path) => nested(payload, path)?,
        };
        match value {
            Value::String(s) => Ok(ini::split_roles(s)),
            Value::Array(items) => items
                .iter()
                .map(|r| r.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(malformed),
            _ => Err(Denied::Crash(crate::BADARG.into())),
        }
    }
}

fn bad_request(reason: &str) -> Denied {
    Denied::BadRequest(reason.to_string())
}

fn unauthorized(reason: &str) -> Denied {
    Denied::Unauthorized(reason.to_string())
}

fn malformed() -> Denied {
    bad_request("Malformed token")
}

fn split(token: &str) -> Result<[&str; 3], Denied> {
    let parts: Vec<&str> = token.split('.').collect();
    <[&str; 3]>::try_from(parts).map_err(|_| malformed())
}

fn decode_object(part: &str) -> Result<Map<String, Value>, Denied> {
    let bytes = BASE64URL.decode(part).map_err(|_| malformed())?;
    match serde_json::from_slice(&bytes).map_err(|_| malformed())? {
        Value::Object(map) => Ok(map),
        _ => Err(bad_request("Not an object")),
    }
}

fn subject(payload: &Map<String, Value>) -> Result<&str, Denied> {
    match payload.get("sub") {
        None => Err(unauthorized("Token missing sub claim.")),
        Some(Value::String(sub)) => Ok(sub),
        Some(_) => Err(malformed()),
    }
}

/// `iss`, `iat` and claims outside `jwtf`'s list; `exp`, `nbf`, `typ`, `kid`, `alg` and
/// `sig` are checked elsewhere.
fn check_required(claim: &RequiredClaim, payload: &Map<String, Value>) -> Result<(), Denied> {
    let name = claim.name();
    if matches!(name, "exp" | "nbf" | "typ" | "kid" | "alg" | "sig") {
        return Ok(());
    }
    let value = payload
        .get(name)
        .ok_or_else(|| bad_request(&format!("Missing {name} claim")))?;
    let ok = match claim {
        RequiredClaim::Present(_) if name == "iat" => value.is_i64() || value.is_u64(),
        RequiredClaim::Present(_) => true,
        RequiredClaim::Equals(_, expected) => claim_matches(value, expected),
    };
    if ok {
        Ok(())
    } else {
        Err(bad_request(&format!("Invalid {name} claim")))
    }
}

fn claim_matches(value: &Value, expected: &str) -> bool {
    match value {
        Value::String(s) => s == expected,
        Value::Array(items) => items.iter().any(|v| v.as_str() == Some(expected)),
        _ => false,
    }
}

fn check_nbf(nbf: Option<&Value>, required: bool, now: u64) -> Result<(), Denied> {
    match nbf {
        None if required => Err(bad_request("Missing nbf claim")),
        None => Ok(()),
        Some(v) if v.as_f64().is_some_and(|t| t < now as f64) => Ok(()),
        Some(_) => Err(unauthorized("nbf not in past")),
    }
}

fn check_exp(exp: Option<&Value>, required: bool, now: u64) -> Result<(), Denied> {
    match exp {
        None if required => Err(bad_request("Missing exp claim")),
        None => Ok(()),
        Some(v) if v.as_f64().is_some_and(|t| t > now as f64) => Ok(()),
        Some(_) => Err(unauthorized("exp not in future")),
    }
}

/// The value at `path`, as `couch_util:get_nested_json_value/2` finds it: 404 `missing
/// json key: K` for an absent member, 404 `json_mismatch` where a step is not an object.
fn nested<'a>(payload: &'a Map<String, Value>, path: &[String]) -> Result<&'a Value, Denied> {
    let missing = |key: &str| Denied::NotFound(format!("missing json key: {key}"));
    let (first, rest) = path.split_first().expect("a path has a first step");
    let start = payload.get(first).ok_or_else(|| missing(first.as_str()))?;
    rest.iter().try_fold(start, |value, key| match value {
        Value::Object(map) => map.get(key).ok_or_else(|| missing(key.as_str())),
        _ => Err(Denied::NotFound("json_mismatch".into())),
    })
}

fn verify(alg: Alg, key: &VerifyKey, message: &[u8], signature_b64: &str) -> Result<(), Denied> {
    let reason = match alg.kty() {
        Kty::Hmac => "Bad HMAC",
        Kty::Rsa | Kty::Ec => "Bad signature",
    };
    let signature = BASE64URL
        .decode(signature_b64)
        .map_err(|_| bad_request(reason))?;
    if signature_ok(alg, key, message, &signature) {
        Ok(())
    } else {
        Err(bad_request(reason))
    }
}

fn signature_ok(alg: Alg, key: &VerifyKey, message: &[u8], sig: &[u8]) -> bool {
    match (alg, key) {
        (Alg::HS256, VerifyKey::Hmac(k)) => hmac_ok(HashAlg::Sha256, k, message, sig),
        (Alg::HS384, VerifyKey::Hmac(k)) => hmac_ok(HashAlg::Sha384, k, message, sig),
        (Alg::HS512, VerifyKey::Hmac(k)) => hmac_ok(HashAlg::Sha512, k, message, sig),
        (Alg::RS256, VerifyKey::Rsa(k)) => rsa_ok::<sha2::Sha256>(k, message, sig),
        (Alg::RS384, VerifyKey::Rsa(k)) => rsa_ok::<sha2::Sha384>(k, message, sig),
        (Alg::RS512, VerifyKey::Rsa(k)) => rsa_ok::<sha2::Sha512>(k, message, sig),
        (Alg::ES256, VerifyKey::P256(k)) => {
            ecdsa_ok(k, message, parse_ecdsa::<p256::ecdsa::Signature>(sig, 32))
        }
        (Alg::ES384, VerifyKey::P384(k)) => {
            ecdsa_ok(k, message, parse_ecdsa::<p384::ecdsa::Signature>(sig, 48))
        }
        (Alg::ES512, VerifyKey::P521(k)) => ecdsa_ok(
            k.as_ref(),
            message,
            parse_ecdsa::<p521::ecdsa::Signature>(sig, 66),
        ),
        _ => false,
    }
}

fn hmac_ok(hash: HashAlg, key: &[u8], message: &[u8], sig: &[u8]) -> bool {
    constant_time_eq(&hash.hmac(key, message), sig)
}

fn rsa_ok<D>(key: &RsaPublicKey, message: &[u8], sig: &[u8]) -> bool
where
    D: sha2::Digest + rsa::pkcs8::AssociatedOid,
{
    let Ok(signature) = rsa::pkcs1v15::Signature::try_from(sig) else {
        return false;
    };
    rsa::pkcs1v15::VerifyingKey::<D>::new(key.clone())
        .verify(message, &signature)
        .is_ok()
}

/// A JWS `R || S` signature of `2 × scalar_len` bytes; DER is tolerated as a fallback.
fn parse_ecdsa<S>(sig: &[u8], scalar_len: usize) -> Option<S>
where
    S: EcdsaSignature,
{
    if sig.len() == 2 * scalar_len {
        S::from_raw(sig)
    } else {
        S::from_der(sig)
    }
}

fn ecdsa_ok<K, S>(key: &K, message: &[u8], sig: Option<S>) -> bool
where
    K: Verifier<S>,
{
    sig.is_some_and(|s| key.verify(message, &s).is_ok())
}

trait EcdsaSignature: Sized {
    fn from_raw(bytes: &[u8]) -> Option<Self>;
    fn from_der(bytes: &[u8]) -> Option<Self>;
}

macro_rules! ecdsa_signature {
    ($curve:ident) => {
        impl EcdsaSignature for $curve::ecdsa::Signature {
            fn from_raw(bytes: &[u8]) -> Option<Self> {
                Self::from_slice(bytes).ok()
            }
            fn from_der(bytes: &[u8]) -> Option<Self> {
                Self::from_der(bytes).ok()
            }
        }
    };
}

ecdsa_signature!(p256);
ecdsa_signature!(p384);
ecdsa_signature!(p521);

/// Scans `required_claims` as CouchDB's
/// `([a-z]+)|{([a-z]+)\s*,\s*"([^"]+)"}` with global matching does: everything else in
/// the string is skipped.
pub fn parse_required_claims(value: &str) -> Result<Vec<RequiredClaim>, String> {
    let bytes = value.as_bytes();
    let mut claims = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some((claim, next)) = claim_at(bytes, i) {
            claims.push(claim);
            i = next;
        } else {
            i += 1;
        }
    }
    if claims.is_empty() && !value.is_empty() {
        return Err(MISCONFIGURED_REASON.to_string());
    }
    Ok(claims)
}

fn claim_at(b: &[u8], i: usize) -> Option<(RequiredClaim, usize)> {
    let word_end = lowercase_run(b, i);
    if word_end > i {
        return Some((RequiredClaim::Present(text(b, i, word_end)), word_end));
    }
    if b[i] != b'{' {
        return None;
    }
    let key_end = lowercase_run(b, i + 1);
    if key_end == i + 1 {
        return None;
    }
    let mut j = skip_space(b, key_end);
    j = expect(b, j, b',')?;
    j = expect(b, skip_space(b, j), b'"')?;
    let value_end = j + b[j..].iter().position(|&c| c == b'"')?;
    if value_end == j {
        return None;
    }
    let end = expect(b, value_end + 1, b'}')?;
    let claim = RequiredClaim::Equals(text(b, i + 1, key_end), text(b, j, value_end));
    Some((claim, end))
}

fn lowercase_run(b: &[u8], start: usize) -> usize {
    start
        + b[start..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase())
            .count()
}

fn skip_space(b: &[u8], start: usize) -> usize {
    start
        + b[start..]
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count()
}

fn expect(b: &[u8], at: usize, want: u8) -> Option<usize> {
    (b.get(at) == Some(&want)).then_some(at + 1)
}

fn text(b: &[u8], start: usize, end: usize) -> String {
    String::from_utf8_lossy(&b[start..end]).into_owned()
}

fn parse_allowed(value: Option<&str>) -> Vec<Alg> {
    match value {
        None | Some("") => ALL_ALGS.to_vec(),
        Some(list) => ini::split_list(list)
            .iter()
            .filter_map(|name| Alg::parse(name))
            .collect(),
    }
}

fn roles_source(jwt_auth: &Section) -> RolesSource {
    match ini::get(jwt_auth, "roles_claim_path").filter(|p| !p.is_empty()) {
        Some(path) => RolesSource::Path(split_claim_path(path)),
        None => RolesSource::Name(
            ini::get_or(jwt_auth, "roles_claim_name", "_couchdb.roles").to_string(),
        ),
    }
}

/// `a.b\.c.d` → `["a", "b.c", "d"]`.
pub fn split_claim_path(path: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                chars.next();
                parts.last_mut().expect("never empty").push('.');
            }
            '.' => parts.push(String::new()),
            c => parts.last_mut().expect("never empty").push(c),
        }
    }
    parts
}

fn parse_keys(jwt_keys: &Section) -> BTreeMap<(Kty, String), Result<VerifyKey, String>> {
    jwt_keys
        .iter()
        .filter_map(|(name, value)| {
            let (prefix, kid) = name.trim().split_once(':')?;
            let kty = Kty::parse(prefix)?;
            Some(((kty, kid.to_string()), parse_key(kty, value.trim())))
        })
        .collect()
}

fn parse_key(kty: Kty, value: &str) -> Result<VerifyKey, String> {
    match kty {
        Kty::Hmac => hmac_key(value),
        Kty::Rsa => rsa_key(&unescape_pem(value)),
        Kty::Ec => ec_key(&unescape_pem(value)),
    }
}

const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

fn hmac_key(value: &str) -> Result<VerifyKey, String> {
    BASE64_LENIENT
        .decode(value)
        .map(VerifyKey::Hmac)
        .map_err(|_| "Not a valid key".to_string())
}

fn unescape_pem(value: &str) -> String {
    value.replace("\\n", "\n")
}

fn is_pem(value: &str) -> bool {
    value.contains("-----BEGIN ")
}

fn rsa_key(pem: &str) -> Result<VerifyKey, String> {
    if !is_pem(pem) {
        return Err("Not a valid key".to_string());
    }
    RsaPublicKey::from_public_key_pem(pem)
        .or_else(|_| RsaPublicKey::from_pkcs1_pem(pem))
        .map(|k| VerifyKey::Rsa(Box::new(k)))
        .map_err(|_| "not an RSA public key".to_string())
}

fn ec_key(pem: &str) -> Result<VerifyKey, String> {
    if !is_pem(pem) {
        return Err("Not a valid key".to_string());
    }
    if let Ok(k) = p256::PublicKey::from_public_key_pem(pem) {
        return Ok(VerifyKey::P256(k.into()));
    }
    if let Ok(k) = p384::PublicKey::from_public_key_pem(pem) {
        return Ok(VerifyKey::P384(k.into()));
    }
    p521::PublicKey::from_public_key_pem(pem)
        .ok()
        .and_then(|k| p521::ecdsa::VerifyingKey::from_affine(*k.as_affine()).ok())
        .map(|k| VerifyKey::P521(Box::new(k)))
        .ok_or_else(|| "not an EC public key".to_string())
}

#[cfg(test)]
mod tests;
