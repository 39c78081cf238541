//! How members prove themselves to each other (as Erlang nodes do with their cookie): a
//! request one member makes of another on a client's behalf carries
//! [`HEADER`]: `{from-node} {unix-seconds} {hex HMAC-SHA256}`, the MAC over the method,
//! the path with its query, the time and the sending node, keyed by the cluster's secret.
//! Pure: the caller supplies the clock.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header a member's request to another member carries.
pub const HEADER: &str = "x-settee-cluster-auth";

/// How far apart two members' clocks (and a request's flight) may be.
pub const MAX_SKEW_SECS: u64 = 60;

fn mac(secret: &str, from: &str, method: &str, path: &str, time: u64) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    for part in [method, path, &time.to_string(), from] {
        mac.update(part.as_bytes());
        mac.update(b"\n");
    }
    mac
}

/// The header's value for a request of `method` on `path` (with its query) sent by `from`
/// at `now` (unix seconds).
pub fn sign(secret: &str, from: &str, method: &str, path: &str, now: u64) -> String {
    let tag = mac(secret, from, method, path, now).finalize().into_bytes();
    format!("{from} {now} {}", hex::encode(tag))
}

/// The sending node, if `value` proves a request of `method` on `path` made within
/// [`MAX_SKEW_SECS`] of `now` by a holder of `secret`.
pub fn verify(secret: &str, value: &str, method: &str, path: &str, now: u64) -> Option<String> {
    let mut parts = value.split(' ');
    let (from, time, tag) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let time: u64 = time.parse().ok()?;
    if time.abs_diff(now) > MAX_SKEW_SECS {
        return None;
    }
    let tag = hex::decode(tag).ok()?;
    mac(secret, from, method, path, time)
        .verify_slice(&tag)
        .ok()
        .map(|()| from.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_request_verifies_only_as_signed() {
        let v = sign("s", "a@h", "GET", "/_node/_local/_stats?x=1", 1000);
        assert_eq!(
            verify("s", &v, "GET", "/_node/_local/_stats?x=1", 1030),
            Some("a@h".into())
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
