//! Tokens of the JavaScript subset this crate reads. Anything outside it (regular
//! expressions, templates, non-ASCII identifiers, operators the subset lacks, legacy
//! octal numbers, unusual string escapes) fails the whole source, which then runs in the
//! engine: refusing is always safe, misreading never is.

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    Num(f64),
    Str(String),
    Punct(&'static str),
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    /// A line terminator precedes the token (automatic semicolon insertion looks at it).
    pub(crate) newline_before: bool,
}

/// Longest first, so that `===` is not read as `==` and `=`.
const PUNCTS: &[&str] = &[
    "===", "!==", "==", "!=", "<=", ">=", "&&", "||", "{", "}", "(", ")", "[", "]", ";", ",", "?",
    ":", "<", ">", "!", "=", "+", "-", ".",
];

/// Operators that start like a supported one but are not in the subset.
const REFUSED: &[&str] = &[
    "++", "--", "+=", "-=", "=>", "?.", "??", "...", "<<", ">>", "**", "&&=", "||=",
];

pub(crate) fn lex(src: &str) -> Option<Vec<Token>> {
    // U+2028 and U+2029 end a `//` comment in JavaScript; the scan below would not see them.
    if src.contains(['\u{2028}', '\u{2029}']) {
        return None;
    }
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut newline = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' | b'\r' => {
                newline = true;
                i += 1;
            }
            b' ' | b'\t' | 0x0b | 0x0c => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/")? + i + 2;
                newline |= src[i..end].contains(['\n', '\r']);
                i = end + 2;
            }
            b'"' | b'\'' => {
                let (s, next) = string(src, i)?;
                push(&mut out, Tok::Str(s), &mut newline);
                i = next;
            }
            b'0'..=b'9' => {
                let (n, next) = number(b, i)?;
                push(&mut out, Tok::Num(n), &mut newline);
                i = next;
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let (n, next) = number(b, i)?;
                push(&mut out, Tok::Num(n), &mut newline);
                i = next;
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$')
                {
                    i += 1;
                }
                if b.get(i) == Some(&b'\\') {
                    return None;
                }
                push(&mut out, Tok::Ident(src[start..i].to_owned()), &mut newline);
            }
            _ => {
                let rest = &src[i..];
                if REFUSED.iter().any(|r| rest.starts_with(r)) {
                    return None;
                }
                let p = PUNCTS.iter().find(|p| rest.starts_with(**p))?;
                push(&mut out, Tok::Punct(p), &mut newline);
                i += p.len();
            }
        }
    }
    // Source that is not ASCII outside strings and comments (Unicode spaces, line
    // separators, identifiers) was refused above: a non-ASCII byte matches no arm.
    Some(out)
}

fn push(out: &mut Vec<Token>, tok: Tok, newline: &mut bool) {
    out.push(Token {
        tok,
        newline_before: std::mem::take(newline),
    });
}

/// A decimal number literal: `0`, `12`, `1.5`, `.5`, `5.`, with an optional exponent. Legacy
/// octal (`012`), hex/octal/binary prefixes, separators and BigInts are refused.
fn number(b: &[u8], start: usize) -> Option<(f64, usize)> {
    let mut i = start;
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - s
    };
    let int = digits(&mut i);
    if int > 1 && b[start] == b'0' {
        return None;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        digits(&mut i);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return None;
        }
    }
    // A number may not run into an identifier or another number (`1x`, `0b1`, `1_0`, `1n`).
    if b.get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$' || *c == b'\\')
    {
        return None;
    }
    let text = std::str::from_utf8(&b[start..i]).ok()?;
    Some((text.parse().ok()?, i))
}

/// A string literal starting at `start` (its quote): its value and the index after it.
fn string(src: &str, start: usize) -> Option<(String, usize)> {
    let quote = src.as_bytes()[start] as char;
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c == quote => return Some((out, start + 1 + at + 1)),
            '\n' | '\r' => return None,
            '\\' => {
                let (_, e) = chars.next()?;
                let plain = match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'v' => '\u{b}',
                    '\\' | '\'' | '"' | '/' => e,
                    'u' => {
                        let unit = hex4(&mut chars)?;
                        if (0xD800..0xDC00).contains(&unit) {
                            // A high surrogate must be followed by `\u` and a low one.
                            let (_, b) = chars.next()?;
                            let (_, u) = chars.next()?;
                            if b != '\\' || u != 'u' {
                                return None;
                            }
                            let low = hex4(&mut chars)?;
                            if !(0xDC00..0xE000).contains(&low) {
                                return None;
                            }
                            char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                        } else {
                            char::from_u32(unit)?
                        }
                    }
                    _ => return None,
                };
                out.push(plain);
            }
            c => out.push(c),
        }
    }
    None
}

fn hex4(chars: &mut std::str::CharIndices<'_>) -> Option<u32> {
    let mut v = 0;
    for _ in 0..4 {
        v = v * 16 + chars.next()?.1.to_digit(16)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Option<Vec<Tok>> {
        lex(src).map(|t| t.into_iter().map(|t| t.tok).collect())
    }

    #[test]
    fn reads_the_subset() {
        assert_eq!(
            toks("a.b === 'x\\u00e9\\n' // c\n/* d */ 1.5e3").unwrap(),
            vec![
                Tok::Ident("a".into()),
                Tok::Punct("."),
                Tok::Ident("b".into()),
                Tok::Punct("==="),
                Tok::Str("xé\n".into()),
                Tok::Num(1500.0),
            ]
        );
        let t = lex("a\n/* x\n */ b c").unwrap();
        assert!(t[1].newline_before && !t[2].newline_before);
        assert_eq!(
            toks("\"\\ud83d\\ude00\"").unwrap(),
            vec![Tok::Str("😀".into())]
        );
    }

    #[test]
    fn refuses_what_is_outside_it() {
        for src in [
            "a++",
            "a += 1",
            "x => x",
            "a?.b",
            "a ?? b",
            "/re/",
            "a / b",
            "a * b",
            "`t`",
            "012",
            "0x1",
            "1n",
            "1_000",
            "'\\x41'",
            "'\\ud800'",
            "'a\nb'",
            "é",
            "a\u{2028}b",
            "a & b",
            "a | b",
            "'\\1'",
            "1e",
            "a\\u0062",
        ] {
            assert!(lex(src).is_none(), "{src}");
        }
    }
}
