//! How members prove themselves to each other (as Erlang nodes do with their cookie): a
//! request one member makes of another carries [`HEADER`]: `{from-node} {unix-seconds}
//! {hex HMAC-SHA256}[ {user}]`, the MAC over the method, the path with its query, the time,
//! the sending node and the user, keyed by the cluster's secret. `user` (hex of the user's
//! JSON, `{"name", "roles"}`) is the client a coordinator acts for: the receiving member
//! applies that user's rights, not a member's. Pure: the caller supplies the clock.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header a member's request to another member carries.
pub const HEADER: &str = "x-settee-cluster-auth";

/// How far apart two members' clocks (and a request's flight) may be.
pub const MAX_SKEW_SECS: u64 = 60;

fn mac(secret: &str, from: &str, user: &str, method: &str, path: &str, time: u64) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    for part in [method, path, &time.to_string(), from, user] {
        mac.update(part.as_bytes());
        mac.update(b"\n");
    }
    mac
}

/// The header's value for a request of `method` on `path` (with its query) sent by `from`
/// at `now` (unix seconds), as the member itself.
pub fn sign(secret: &str, from: &str, method: &str, path: &str, now: u64) -> String {
    sign_for(secret, from, None, method, path, now)
}

/// [`sign`], on behalf of `user` (its JSON) when given.
pub fn sign_for(
    secret: &str,
    from: &str,
    user: Option<&str>,
    method: &str,
    path: &str,
    now: u64,
) -> String {
    let user = user.map(|u| hex::encode(u.as_bytes())).unwrap_or_default();
    let tag = mac(secret, from, &user, method, path, now)
        .finalize()
        .into_bytes();
    let value = format!("{from} {now} {}", hex::encode(tag));
    if user.is_empty() {
        value
    } else {
        format!("{value} {user}")
    }
}

/// A verified request's sender and the user it acts for (its JSON), if any.
#[derive(Debug, PartialEq, Eq)]
pub struct Signed {
    pub from: String,
    pub user: Option<String>,
}

/// Who sent `value`, if it proves a request of `method` on `path` made within
/// [`MAX_SKEW_SECS`] of `now` by a holder of `secret`.
pub fn verify(secret: &str, value: &str, method: &str, path: &str, now: u64) -> Option<Signed> {
    let mut parts = value.split(' ');
    let (from, time, tag) = (parts.next()?, parts.next()?, parts.next()?);
    let user = parts.next().unwrap_or_default();
    if parts.next().is_some() {
        return None;
    }
    let time: u64 = time.parse().ok()?;
    if time.abs_diff(now) > MAX_SKEW_SECS {
        return None;
    }
    let tag = hex::decode(tag).ok()?;
    mac(secret, from, user, method, path, time)
        .verify_slice(&tag)
        .ok()?;
    let user = match user {
        "" => None,
        u => Some(String::from_utf8(hex::decode(u).ok()?).ok()?),
    };
    Some(Signed {
        from: from.to_owned(),
        user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_request_verifies_only_as_signed() {
        let v = sign("s", "a@h", "GET", "/_node/_local/_stats?x=1", 1000);
        assert_eq!(
            verify("s", &v, "GET", "/_node/_local/_stats?x=1", 1030),
            Some(Signed {
                from: "a@h".into(),
                user: None
            })
        );
        // On behalf of a user: the user is signed too.
        let u = r#"{"name":"bob","roles":["r"]}"#;
        let v2 = sign_for("s", "a@h", Some(u), "GET", "/shards%2Fx/d", 1000);
        assert_eq!(
            verify("s", &v2, "GET", "/shards%2Fx/d", 1000).and_then(|s| s.user),
            Some(u.to_owned())
        );
        let other = hex::encode(r#"{"name":"bob","roles":["_admin"]}"#);
        let mut parts: Vec<&str> = v2.split(' ').collect();
        parts[3] = &other;
        assert_eq!(
            verify("s", &parts.join(" "), "GET", "/shards%2Fx/d", 1000),
            None
        );
        assert_eq!(
            verify("t", &v, "GET", "/_node/_local/_stats?x=1", 1000),
            None
        );
        assert_eq!(
            verify("s", &v, "PUT", "/_node/_local/_stats?x=1", 1000),
            None
        );
        assert_eq!(verify("s", &v, "GET", "/_node/_local/_stats", 1000), None);
        assert_eq!(
            verify("s", &v, "GET", "/_node/_local/_stats?x=1", 1061),
            None
        );
        let forged = v.replacen("a@h", "b@h", 1);
        assert_eq!(
            verify("s", &forged, "GET", "/_node/_local/_stats?x=1", 1000),
            None
        );
        assert_eq!(verify("s", "garbage", "GET", "/", 1000), None);
        assert_eq!(verify("s", "a@h 1000 zz", "GET", "/", 1000), None);
    }
}
