//! Moving through JSON text without building values: past white space, a string, or a
//! whole value. For readers that want a few members of a stored document (Mango's
//! `lazy`, the native map functions' `raw`): the text is valid JSON, and text that is not
//! answers `None`, never a panic.

/// The index of the first byte at or after `i` that is not JSON white space.
pub fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end of the string whose opening quote is at `i`, and whether it holds an escape.
pub fn skip_string(b: &[u8], i: usize) -> Option<(usize, bool)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    // Most strings (member names above all) are short: look at them byte by byte before
    // handing a long one to memchr.
    for (at, &c) in b.get(j..)?.iter().take(24).enumerate() {
        match c {
            b'"' => return Some((j + at + 1, false)),
            b'\\' => break,
            _ => {}
        }
    }
    let mut escaped = false;
    loop {
        let rest = b.get(j..)?;
        let at = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[at] == b'"' {
            return Some((j + at + 1, escaped));
        }
        escaped = true;
        j += at + 2;
    }
}

/// The end of the value starting at `i`: containers by counting their own kind of bracket
/// outside strings (the other kind nests evenly inside valid JSON).
pub fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    let (open, close) = match b.get(i)? {
        b'"' => return skip_string(b, i).map(|(end, _)| end),
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') | None
            ) {
                j += 1;
            }
            return (j > i).then_some(j);
        }
    };
    let mut j = i + 1;
    let mut depth = 1usize;
    while depth > 0 {
        let rest = b.get(j..)?;
        let at = memchr::memchr3(b'"', open, close, rest)?;
        j += at;
        match rest[at] {
            b'"' => j = skip_string(b, j)?.0,
            c if c == open => {
                depth += 1;
                j += 1;
            }
            _ => {
                depth -= 1;
                j += 1;
            }
        }
    }
    Some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_strings_and_values() {
        let b = br#"  "a\"b" , {"x": [1, "]}\"", {"y": "}"}]} -1.5e3]"#;
        assert_eq!(ws(b, 0), 2);
        assert_eq!(skip_string(b, 2), Some((8, true)));
        assert_eq!(skip_string(br#""plain""#, 0), Some((7, false)));
        assert_eq!(skip_value(b, 11), Some(41));
        assert_eq!(skip_value(b, 42), Some(48));
        assert_eq!(skip_value(br#"["a]"#, 0), None);
        assert_eq!(skip_string(b"x", 0), None);
    }
}
