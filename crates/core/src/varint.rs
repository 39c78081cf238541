//! LEB128 unsigned varints, used by the on-disk value formats (see docs/design.md).

pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one varint from the front of `buf`, advancing it. `None` on truncated or
/// overlong input.
pub fn get(buf: &mut &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

/// Reads a varint-length-prefixed byte string.
pub fn get_bytes<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = get(buf)? as usize;
    if buf.len() < len {
        return None;
    }
    let (head, tail) = buf.split_at(len);
    *buf = tail;
    Some(head)
}

pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(v: u64) {
            let mut out = Vec::new();
            put(&mut out, v);
            let mut s = &out[..];
            prop_assert_eq!(get(&mut s), Some(v));
            prop_assert!(s.is_empty());
        }
    }
}
