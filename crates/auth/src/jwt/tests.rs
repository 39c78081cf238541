//! Tokens are signed here with test keys (`testdata/`, generated with `openssl genpkey`
//! for these tests only); three tokens signed by Python (`hmac`, `cryptography`) check
//! interoperability with an independent implementation.

use super::*;
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{RandomizedSigner, SignatureEncoding, Signer};
use serde_json::json;

const RSA_PRIVATE: &str = include_str!("testdata/rsa.pem");
const RSA_PUBLIC: &str = include_str!("testdata/rsa.pub");
const RSA_PUBLIC_PKCS1: &str = include_str!("testdata/rsa1.pub");
const P256_PRIVATE: &str = include_str!("testdata/ec-P-256.pem");
const P256_PUBLIC: &str = include_str!("testdata/ec-P-256.pub");
const P384_PRIVATE: &str = include_str!("testdata/ec-P-384.pem");
const P384_PUBLIC: &str = include_str!("testdata/ec-P-384.pub");
const P521_PRIVATE: &str = include_str!("testdata/ec-P-521.pem");
const P521_PUBLIC: &str = include_str!("testdata/ec-P-521.pub");

const NOW: u64 = 1_700_000_000;
const LATER: u64 = 4_102_444_800; // 2100-01-01

/// `{"sub":"bob","exp":4102444800,"_couchdb.roles":["a","b"]}` signed by Python.
const PY_HS256: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IiLCJleHAiOjQxMDI0NDQ4MDAsIl9jb3VjaGRiLnJvbGVzIjpbImEiLCJiIl19.u8yK301vkIuqtXxsTJUtYtLdIFTRraWsM-6FehW69ag";
const PY_RS256: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InIxIn0.eyJzdWIiOiJib2IiLCJleHAiOjQxMDI0NDQ4MDAsIl9jb3VjaGRiLnJvbGVzIjpbImEiLCJiIl19.Tc652161LStN947S2jmnkVabZ197yRouFu9TzID1xfzQtPJfV1gKhTi8NrQzT_ronYg48FMHymUIZxMOtZ8lLPuTCpBnxXdle37CdfNqpAU26FkJCpN2dqXHueMSldkfRsm1H8oEBpbyqC7Ry8rerxKSCyKhROmIbJOsNCS8hojW6LzI1mnUaoim324ckxx46iuWnu_SzIJAcNuWiCW_Yxp2n4sMiXcUlYbfYMh4OmcVZy2rqZ9IQ3Y4S1y6mIGdJTT-BKwAbUgcKwPRZDgS0p73ESsW1TLvm12nSfo_2le4VqM6QtX5diV9htbv6ifnEDlNWtMM24FciJ20Pm8mBA";
const PY_ES256: &str = "eyJhbGciOiJFUzI1NiIsImtpZCI6ImUxIn0.eyJzdWIiOiJib2IiLCJleHAiOjQxMDI0NDQ4MDAsIl9jb3VjaGRiLnJvbGVzIjpbImEiLCJiIl19.ik4RYN7P8jz9nq8yNs8uQU_wMqoP57-1QiydSZjo16LxW16qL3KUV41CeloMqvWHvy5om3MUaiaCkVjR5b95Eg";

use crate::ini::section;

const HMAC_SECRET: &[u8] = b"hello";
const HMAC_SECRET_B64: &str = "aGVsbG8=";

/// PEM as CouchDB stores it in an ini value: one line, `\n` escapes.
fn ini_pem(pem: &str) -> String {
    pem.trim_end().replace('\n', "\\n")
}

fn keys() -> Section {
    let mut s = section(&[("hmac:_default", HMAC_SECRET_B64), ("hmac:h2", "aGVsbG8")]);
    for (name, pem) in [
        ("rsa:r1", RSA_PUBLIC),
        ("rsa:pkcs1", RSA_PUBLIC_PKCS1),
        ("ec:e1", P256_PUBLIC),
        ("ec:e384", P384_PUBLIC),
        ("ec:e521", P521_PUBLIC),
        ("rsa:bad", "not a pem"),
        ("rsa:wrongtype", P256_PUBLIC),
        ("ec:wrongtype", RSA_PUBLIC),
        ("hmac:bad", "!!!"),
    ] {
        s.insert(name.to_string(), ini_pem(pem));
    }
    s
}

fn config(jwt_auth: &[(&str, &str)]) -> JwtConfig {
    JwtConfig::from_sections(&section(jwt_auth), &keys()).unwrap()
}

fn b64(value: &Value) -> String {
    BASE64URL.encode(serde_json::to_vec(value).unwrap())
}

fn sign(alg: Alg, message: &[u8]) -> Vec<u8> {
    match alg {
        Alg::HS256 => HashAlg::Sha256.hmac(HMAC_SECRET, message),
        Alg::HS384 => HashAlg::Sha384.hmac(HMAC_SECRET, message),
        Alg::HS512 => HashAlg::Sha512.hmac(HMAC_SECRET, message),
        Alg::RS256 => rsa_sign::<sha2::Sha256>(message),
        Alg::RS384 => rsa_sign::<sha2::Sha384>(message),
        Alg::RS512 => rsa_sign::<sha2::Sha512>(message),
        Alg::ES256 => {
            let key = p256::ecdsa::SigningKey::from_pkcs8_pem(P256_PRIVATE).unwrap();
            let sig: p256::ecdsa::Signature = key.sign(message);
            sig.to_bytes().to_vec()
        }
        Alg::ES384 => {
            let key = p384::ecdsa::SigningKey::from_pkcs8_pem(P384_PRIVATE).unwrap();
            let sig: p384::ecdsa::Signature = key.sign(message);
            sig.to_bytes().to_vec()
        }
        Alg::ES512 => {
            let secret = p521::SecretKey::from_pkcs8_pem(P521_PRIVATE).unwrap();
            let key = p521::ecdsa::SigningKey::from_slice(&secret.to_bytes()).unwrap();
            // p521 signs deterministically only with its `getrandom` feature; a random
            // nonce changes nothing for verification.
            let sig: p521::ecdsa::Signature = key.sign_with_rng(&mut rand::rngs::OsRng, message);
            sig.to_bytes().to_vec()
        }
    }
}

fn rsa_sign<D>(message: &[u8]) -> Vec<u8>
where
    D: sha2::Digest + rsa::pkcs8::AssociatedOid,
{
    let key = rsa::RsaPrivateKey::from_pkcs8_pem(RSA_PRIVATE).unwrap();
    rsa::pkcs1v15::SigningKey::<D>::new(key)
        .sign(message)
        .to_vec()
}

fn token(header: Value, claims: Value) -> String {
    let alg = Alg::parse(header["alg"].as_str().unwrap()).unwrap();
    let message = format!("{}.{}", b64(&header), b64(&claims));
    let sig = BASE64URL.encode(sign(alg, message.as_bytes()));
    format!("{message}.{sig}")
}

fn kid_for(alg: Alg) -> Option<&'static str> {
    match alg {
        Alg::HS256 | Alg::HS384 | Alg::HS512 => None,
        Alg::RS256 | Alg::RS384 | Alg::RS512 => Some("r1"),
        Alg::ES256 => Some("e1"),
        Alg::ES384 => Some("e384"),
        Alg::ES512 => Some("e521"),
    }
}

fn header_for(alg: Alg) -> Value {
    match kid_for(alg) {
        Some(kid) => json!({"alg": alg.name(), "typ": "JWT", "kid": kid}),
        None => json!({"alg": alg.name(), "typ": "JWT"}),
    }
}

fn bob() -> Value {
    json!({"sub": "bob", "exp": LATER, "_couchdb.roles": ["a", "b"]})
}

fn bob_ctx() -> UserCtx {
    UserCtx::named("bob", vec!["a".into(), "b".into()])
}

fn denied_400(reason: &str) -> Result<UserCtx, Denied> {
    Err(Denied::BadRequest(reason.to_string()))
}

fn denied_401(reason: &str) -> Result<UserCtx, Denied> {
    Err(Denied::Unauthorized(reason.to_string()))
}

#[test]
fn every_algorithm_round_trips() {
    let cfg = config(&[]);
    for alg in ALL_ALGS {
        let t = token(header_for(alg), bob());
        assert_eq!(cfg.authenticate(&t, NOW), Ok(bob_ctx()), "{alg:?}");
    }
}

#[test]
fn tokens_signed_by_python_verify() {
    let cfg = config(&[]);
    for t in [PY_HS256, PY_RS256, PY_ES256] {
        assert_eq!(cfg.authenticate(t, NOW), Ok(bob_ctx()));
    }
}

#[test]
fn pkcs1_rsa_keys_are_accepted() {
    let t = token(json!({"alg": "RS256", "kid": "pkcs1"}), bob());
    assert_eq!(config(&[]).authenticate(&t, NOW), Ok(bob_ctx()));
}

#[test]
fn der_ecdsa_signatures_are_tolerated() {
    let message = format!("{}.{}", b64(&header_for(Alg::ES256)), b64(&bob()));
    let key = p256::ecdsa::SigningKey::from_pkcs8_pem(P256_PRIVATE).unwrap();
    let sig: p256::ecdsa::Signature = key.sign(message.as_bytes());
    let t = format!("{message}.{}", BASE64URL.encode(sig.to_der().as_bytes()));
    assert_eq!(config(&[]).authenticate(&t, NOW), Ok(bob_ctx()));
}

#[test]
fn wrong_signatures_are_refused() {
    let cfg = config(&[]);
    for alg in ALL_ALGS {
        let good = token(header_for(alg), bob());
        let forged = token(header_for(alg), json!({"sub": "mallory", "exp": LATER}));
        let (head, _) = forged.rsplit_once('.').unwrap();
        let (_, sig) = good.rsplit_once('.').unwrap();
        let reason = if alg.name().starts_with("HS") {
            "Bad HMAC"
        } else {
            "Bad signature"
        };
        assert_eq!(
            cfg.authenticate(&format!("{head}.{sig}"), NOW),
            denied_400(reason)
        );
    }
}

#[test]
fn key_of_the_wrong_curve_is_a_bad_signature() {
    let t = token(json!({"alg": "ES256", "kid": "e384"}), bob());
    assert_eq!(
        config(&[]).authenticate(&t, NOW),
        denied_400("Bad signature")
    );
}

#[test]
fn alg_header_is_checked() {
    let cfg = config(&[]);
    let body = b64(&bob());
    let none = format!("{}.{body}.", b64(&json!({"alg": "none"})));
    assert_eq!(
        cfg.authenticate(&none, NOW),
        denied_400("Invalid alg header parameter")
    );
    let missing = format!("{}.{body}.", b64(&json!({"typ": "JWT"})));
    assert_eq!(
        cfg.authenticate(&missing, NOW),
        denied_400("Missing alg header parameter")
    );
}

#[test]
fn allowed_algorithms_restricts_alg() {
    let cfg = config(&[("allowed_algorithms", "RS256, ES256")]);
    let t = token(header_for(Alg::HS256), bob());
    assert_eq!(
        cfg.authenticate(&t, NOW),
        denied_400("Invalid alg header parameter")
    );
    let t = token(header_for(Alg::RS256), bob());
    assert_eq!(cfg.authenticate(&t, NOW), Ok(bob_ctx()));
}

#[test]
fn hs_token_cannot_use_an_rsa_key_as_secret() {
    // alg confusion: an HS256 token naming the RSA key's kid finds no hmac:r1 key.
    let t = token(json!({"alg": "HS256", "kid": "r1"}), bob());
    assert_eq!(config(&[]).authenticate(&t, NOW), denied_400("Unknown kid"));
}

#[test]
fn key_errors_carry_couchdb_reasons() {
    let cfg = config(&[]);
    let cases = [
        (json!({"alg": "RS256", "kid": "nope"}), "Unknown kid"),
        (json!({"alg": "RS256", "kid": "bad"}), "Not a valid key"),
        (
            json!({"alg": "RS256", "kid": "wrongtype"}),
            "not an RSA public key",
        ),
        (
            json!({"alg": "ES256", "kid": "wrongtype"}),
            "not an EC public key",
        ),
        (json!({"alg": "HS256", "kid": "bad"}), "Not a valid key"),
    ];
    for (header, reason) in cases {
        let t = format!("{}.{}.AAAA", b64(&header), b64(&bob()));
        assert_eq!(cfg.authenticate(&t, NOW), denied_400(reason), "{header}");
    }
}

#[test]
fn unpadded_hmac_keys_are_accepted() {
    let t = token(json!({"alg": "HS256", "kid": "h2"}), bob());
    assert_eq!(config(&[]).authenticate(&t, NOW), Ok(bob_ctx()));
}

#[test]
fn exp_is_required_by_default_and_checked() {
    let cfg = config(&[]);
    let h = header_for(Alg::HS256);
    let no_exp = token(h.clone(), json!({"sub": "bob"}));
    assert_eq!(
        cfg.authenticate(&no_exp, NOW),
        denied_400("Missing exp claim")
    );
    let expired = token(h.clone(), json!({"sub": "bob", "exp": NOW}));
    assert_eq!(
        cfg.authenticate(&expired, NOW),
        denied_401("exp not in future")
    );
    let fresh = token(h, json!({"sub": "bob", "exp": NOW + 1}));
    assert_eq!(
        cfg.authenticate(&fresh, NOW),
        Ok(UserCtx::named("bob", vec![]))
    );
}

#[test]
fn empty_required_claims_does_not_require_exp_but_checks_it() {
    let cfg = config(&[("required_claims", "")]);
    let h = header_for(Alg::HS256);
    let no_exp = token(h.clone(), json!({"sub": "bob"}));
    assert!(cfg.authenticate(&no_exp, NOW).is_ok());
    let expired = token(h, json!({"sub": "bob", "exp": 5}));
    assert_eq!(
        cfg.authenticate(&expired, NOW),
        denied_401("exp not in future")
    );
}

#[test]
fn nbf_in_future_is_refused() {
    let cfg = config(&[]);
    let h = header_for(Alg::HS256);
    let early = token(h.clone(), json!({"sub": "bob", "exp": LATER, "nbf": NOW}));
    assert_eq!(cfg.authenticate(&early, NOW), denied_401("nbf not in past"));
    let ok = token(h, json!({"sub": "bob", "exp": LATER, "nbf": NOW - 1}));
    assert!(cfg.authenticate(&ok, NOW).is_ok());
    let cfg = config(&[("required_claims", "exp, nbf")]);
    let t = token(header_for(Alg::HS256), bob());
    assert_eq!(cfg.authenticate(&t, NOW), denied_400("Missing nbf claim"));
}

#[test]
fn missing_sub_is_unauthorized() {
    let t = token(header_for(Alg::HS256), json!({"exp": LATER}));
    assert_eq!(
        config(&[]).authenticate(&t, NOW),
        denied_401("Token missing sub claim.")
    );
}

#[test]
fn required_claims_are_enforced() {
    let cfg = config(&[("required_claims", r#"exp, iat, {iss, "https://issuer"}"#)]);
    let h = header_for(Alg::HS256);
    let cases = [
        (
            json!({"sub": "b", "exp": LATER, "iss": "https://issuer"}),
            "Missing iat claim",
        ),
        (
            json!({"sub": "b", "exp": LATER, "iat": "x", "iss": "https://issuer"}),
            "Invalid iat claim",
        ),
        (
            json!({"sub": "b", "exp": LATER, "iat": 1}),
            "Missing iss claim",
        ),
        (
            json!({"sub": "b", "exp": LATER, "iat": 1, "iss": "other"}),
            "Invalid iss claim",
        ),
    ];
    for (claims, reason) in cases {
        let t = token(h.clone(), claims.clone());
        assert_eq!(cfg.authenticate(&t, NOW), denied_400(reason), "{claims}");
    }
    let t = token(
        h,
        json!({"sub": "b", "exp": LATER, "iat": 1, "iss": "https://issuer"}),
    );
    assert!(cfg.authenticate(&t, NOW).is_ok());
}

#[test]
fn other_required_claims_are_enforced_too() {
    let cfg = config(&[("required_claims", r#"exp, {aud, "couch"}"#)]);
    let h = header_for(Alg::HS256);
    let t = token(h.clone(), bob());
    assert_eq!(cfg.authenticate(&t, NOW), denied_400("Missing aud claim"));
    let t = token(
        h.clone(),
        json!({"sub": "bob", "exp": LATER, "aud": ["x", "couch"]}),
    );
    assert!(cfg.authenticate(&t, NOW).is_ok());
    let t = token(h, json!({"sub": "bob", "exp": LATER, "aud": "x"}));
    assert_eq!(cfg.authenticate(&t, NOW), denied_400("Invalid aud claim"));
}

#[test]
fn typ_and_kid_requirements() {
    let cfg = config(&[("required_claims", "exp, typ, kid")]);
    let t = token(json!({"alg": "HS256", "kid": "_default"}), bob());
    assert_eq!(
        cfg.authenticate(&t, NOW),
        denied_400("Missing typ header parameter")
    );
    let t = token(
        json!({"alg": "HS256", "typ": "JOSE", "kid": "_default"}),
        bob(),
    );
    assert_eq!(
        cfg.authenticate(&t, NOW),
        denied_400("Invalid typ header parameter")
    );
    let t = token(json!({"alg": "HS256", "typ": "JWT"}), bob());
    assert_eq!(cfg.authenticate(&t, NOW), denied_400("Missing kid claim"));
    let t = token(
        json!({"alg": "HS256", "typ": "JWT", "kid": "_default"}),
        bob(),
    );
    assert!(cfg.authenticate(&t, NOW).is_ok());
}

#[test]
fn required_claims_parse_like_couchdb_regex() {
    use RequiredClaim::*;
    let got = parse_required_claims(r#"exp, iat ,{iss, "IssuerNameHere"}, {aud,"a b"}"#);
    assert_eq!(
        got,
        Ok(vec![
            Present("exp".into()),
            Present("iat".into()),
            Equals("iss".into(), "IssuerNameHere".into()),
            Equals("aud".into(), "a b".into()),
        ])
    );
    assert_eq!(parse_required_claims(""), Ok(vec![]));
    assert_eq!(
        parse_required_claims("1, 2"),
        Err(MISCONFIGURED_REASON.to_string())
    );
    assert!(JwtConfig::from_sections(&section(&[("required_claims", "42")]), &keys()).is_err());
}

#[test]
fn roles_from_claim_name() {
    let cfg = config(&[("roles_claim_name", "https://example.com/roles")]);
    let claims = json!({"sub": "bob", "exp": LATER, "https://example.com/roles": ["x"]});
    let t = token(header_for(Alg::HS256), claims);
    assert_eq!(
        cfg.authenticate(&t, NOW),
        Ok(UserCtx::named("bob", vec!["x".into()]))
    );
}

#[test]
fn roles_from_claim_path() {
    let cfg = config(&[(
        "roles_claim_path",
        r"resource_access.security\.settings.account.roles",
    )]);
    let claims = json!({"sub": "bob", "exp": LATER, "resource_access":
        {"security.settings": {"account": {"roles": ["manage", "view"]}}}});
    let t = token(header_for(Alg::HS256), claims);
    let want = UserCtx::named("bob", vec!["manage".into(), "view".into()]);
    assert_eq!(cfg.authenticate(&t, NOW), Ok(want));
    // The path wins over the name; an unresolved path is CouchDB's 404.
    let t = token(header_for(Alg::HS256), bob());
    assert_eq!(
        cfg.authenticate(&t, NOW),
        Err(Denied::NotFound("missing json key: resource_access".into()))
    );
}

/// The answers of CouchDB 3.5.2 measured with `roles_claim_path = a.b.roles`.
#[test]
fn roles_claim_path_with_bad_input_answers_as_couchdb() {
    let cfg = config(&[("roles_claim_path", "a.b.roles")]);
    let at = |claims: Value| {
        let mut c = json!({"sub": "jo", "exp": LATER});
        c.as_object_mut()
            .unwrap()
            .extend(claims.as_object().unwrap().clone());
        cfg.authenticate(&token(header_for(Alg::HS256), c), NOW)
    };
    let not_found = |r: &str| Err(Denied::NotFound(r.into()));
    let crash = Err(Denied::Crash("badarg".into()));
    let roles = |r: &[&str]| {
        Ok(UserCtx::named(
            "jo",
            r.iter().map(|s| s.to_string()).collect(),
        ))
    };
    assert_eq!(
        at(json!({"a": {"b": {"roles": ["r1", "r2"]}}})),
        roles(&["r1", "r2"])
    );
    assert_eq!(
        at(json!({"a": {"b": {"roles": "r1,r2"}}})),
        roles(&["r1", "r2"])
    );
    assert_eq!(at(json!({"a": {"b": {"roles": ""}}})), roles(&[""]));
    assert_eq!(at(json!({"a": {"b": {"roles": 7}}})), crash);
    assert_eq!(at(json!({"a": {"b": {"roles": null}}})), crash);
    assert_eq!(at(json!({"a": {"b": {"roles": {"x": 1}}}})), crash);
    assert_eq!(
        at(json!({"a": {"b": {"roles": [7]}}})),
        denied_400("Malformed token")
    );
    assert_eq!(at(json!({})), not_found("missing json key: a"));
    assert_eq!(at(json!({"a": {"c": 1}})), not_found("missing json key: b"));
    assert_eq!(at(json!({"a": {"b": [1]}})), not_found("json_mismatch"));
    assert_eq!(at(json!({"a": "str"})), not_found("json_mismatch"));
    assert_eq!(at(json!({"a": null})), not_found("json_mismatch"));
    // The roles are read before `sub` is looked for.
    let t = token(header_for(Alg::HS256), json!({"exp": LATER}));
    assert_eq!(cfg.authenticate(&t, NOW), not_found("missing json key: a"));
}

#[test]
fn roles_may_be_a_comma_separated_string() {
    let claims = json!({"sub": "bob", "exp": LATER, "_couchdb.roles": "a, b"});
    let t = token(header_for(Alg::HS256), claims);
    assert_eq!(config(&[]).authenticate(&t, NOW), Ok(bob_ctx()));
}

#[test]
fn roles_that_are_not_strings_are_malformed_or_couchdbs_badarg() {
    let cfg = config(&[]);
    let with = |roles: Value| {
        let claims = json!({"sub": "bob", "exp": LATER, "_couchdb.roles": roles});
        cfg.authenticate(&token(header_for(Alg::HS256), claims), NOW)
    };
    for roles in [json!(["a", 1]), json!([1, 2])] {
        assert_eq!(with(roles), denied_400("Malformed token"));
    }
    for roles in [json!(3), json!({"a": "b"}), json!(null), json!(true)] {
        assert_eq!(with(roles), Err(Denied::Crash("badarg".into())));
    }
}

#[test]
fn malformed_tokens() {
    let cfg = config(&[]);
    assert_eq!(cfg.authenticate("a.b", NOW), denied_400("Malformed token"));
    assert_eq!(
        cfg.authenticate("a.b.c.d", NOW),
        denied_400("Malformed token")
    );
    assert_eq!(
        cfg.authenticate("!.b.c", NOW),
        denied_400("Malformed token")
    );
    let array_header = format!("{}.{}.x", b64(&json!([1])), b64(&bob()));
    assert_eq!(
        cfg.authenticate(&array_header, NOW),
        denied_400("Not an object")
    );
}

#[test]
fn claim_paths_split_on_unescaped_dots() {
    assert_eq!(split_claim_path("a.b\\.c.d"), vec!["a", "b.c", "d"]);
    assert_eq!(split_claim_path("_couchdb\\.roles"), vec!["_couchdb.roles"]);
    assert_eq!(split_claim_path("a\\b"), vec!["a\\b"]);
}

#[test]
fn bearer_prefix() {
    assert_eq!(bearer_token("Bearer abc"), Some("abc"));
    assert_eq!(bearer_token("Basic abc"), None);
    assert_eq!(bearer_token("bearer abc"), None);
}
