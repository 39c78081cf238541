//! Tokens of the Python subset this crate reads, with Python's layout: the source is
//! normalised as the query server normalises it (byte-order mark, CRLF, common
//! indentation, blank lines at the ends), logical lines end in `Newline`, and indentation
//! changes become `Indent` and `Dedent`. Anything outside the subset (tabs in
//! indentation, backslash continuations, non-ASCII names, floats, prefixed or
//! triple-quoted strings, unusual escapes, operators the subset lacks) fails the whole
//! source, which then runs in the query server: refusing is always safe, misreading never
//! is.

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Name(String),
    Int(i64),
    Str(String),
    Op(&'static str),
    Newline,
    Indent,
    Dedent,
}

/// Longest first, so that `==` is not read as `=` twice.
const OPS: &[&str] = &[
    "==", "!=", "<=", ">=", "(", ")", "[", "]", ",", ":", ".", "<", ">", "=", "-",
];

/// Python's keywords: never names.
pub(crate) const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// The source as the query server compiles it: no byte-order mark, `\n` line ends, the
/// indentation every non-blank line shares removed, and no blank lines at either end
/// (Python's `textwrap.dedent` and `strip("\n")`). `None` for what this reading does
/// not model: tabs, form feeds or other whitespace in indentation, or a bare `\r`.
fn normalise(src: &str) -> Option<String> {
    let src = src
        .strip_prefix('\u{feff}')
        .unwrap_or(src)
        .replace("\r\n", "\n");
    if src.contains('\r') {
        return None;
    }
    let lines: Vec<&str> = src.split('\n').collect();
    let mut margin: Option<usize> = None;
    for line in &lines {
        let body = line.trim_start_matches(|c: char| c.is_whitespace());
        let indent = &line[..line.len() - body.len()];
        if indent.bytes().any(|c| c != b' ') {
            return None;
        }
        if !body.is_empty() {
            margin = Some(margin.map_or(indent.len(), |m| m.min(indent.len())));
        }
    }
    let margin = margin.unwrap_or(0);
    let out: Vec<&str> = lines
        .iter()
        .map(|l| if l.len() >= margin { &l[margin..] } else { "" })
        .collect();
    Some(out.join("\n").trim_matches('\n').to_owned())
}

pub(crate) fn lex(src: &str) -> Option<Vec<Tok>> {
    let src = normalise(src)?;
    let mut out = Vec::new();
    let mut indents = vec![0usize];
    // Open brackets: a line end inside them does not end the logical line.
    let mut depth = 0usize;
    for line in src.split('\n') {
        let b = line.as_bytes();
        let mut i = 0;
        if depth == 0 {
            let indent = b.iter().take_while(|&&c| c == b' ').count();
            let rest = &line[indent..];
            if rest.is_empty() || rest.starts_with('#') {
                continue; // blank and comment lines leave indentation alone
            }
            let top = *indents.last().expect("never empty");
            if indent > top {
                indents.push(indent);
                out.push(Tok::Indent);
            }
            while indent < *indents.last().expect("never empty") {
                indents.pop();
                out.push(Tok::Dedent);
            }
            if indent != *indents.last().expect("never empty") {
                return None; // dedent to a level never opened
            }
            i = indent;
        }
        while i < b.len() {
            let c = b[i];
            match c {
                b' ' => i += 1,
                b'#' => break,
                b'\'' | b'"' => {
                    let (s, next) = string(line, i)?;
                    out.push(Tok::Str(s));
                    i = next;
                }
                b'0'..=b'9' => {
                    let end = i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                    // Leading zeros, floats, exponents, other bases, `_` separators and
                    // suffixes are outside the subset.
                    if (c == b'0' && end - i > 1)
                        || b.get(end)
                            .is_some_and(|&n| n.is_ascii_alphanumeric() || n == b'.' || n == b'_')
                    {
                        return None;
                    }
                    out.push(Tok::Int(line[i..end].parse().ok()?));
                    i = end;
                }
                c if c.is_ascii_alphabetic() || c == b'_' => {
                    let end = i + b[i..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                        .count();
                    if b.get(end).is_some_and(|c| !c.is_ascii()) {
                        return None;
                    }
                    out.push(Tok::Name(line[i..end].to_owned()));
                    i = end;
                }
                _ => {
                    let op = OPS.iter().find(|op| line[i..].starts_with(**op))?;
                    match *op {
                        "(" | "[" => depth += 1,
                        ")" | "]" => depth = depth.checked_sub(1)?,
                        _ => {}
                    }
                    out.push(Tok::Op(op));
                    i += op.len();
                }
            }
        }
        if depth == 0 && out.last().is_some_and(|t| *t != Tok::Newline) {
            out.push(Tok::Newline);
        }
    }
    if depth != 0 {
        return None;
    }
    out.extend(std::iter::repeat_n(Tok::Dedent, indents.len() - 1));
    Some(out)
}

/// A one-line string literal at `i` (its quote) and the index after it; only the
/// escapes `\\ \' \" \n \t \r`.
fn string(line: &str, i: usize) -> Option<(String, usize)> {
    let b = line.as_bytes();
    let quote = b[i];
    if b.get(i + 1) == Some(&quote) && b.get(i + 2) == Some(&quote) {
        return None; // triple-quoted
    }
    let mut s = String::new();
    let mut j = i + 1;
    loop {
        let rest = line.get(j..)?;
        let c = rest.chars().next()?;
        match c {
            '\\' => {
                let e = rest[1..].chars().next()?;
                s.push(match e {
                    '\\' | '\'' | '"' => e,
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    _ => return None,
                });
                j += 2;
            }
            c if c as u32 == quote as u32 => return Some((s, j + 1)),
            c => {
                s.push(c);
                j += c.len_utf8();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_lines_as_python_does() {
        let src = "\u{feff}  def f(doc):\r\n      # note\r\n      if ('a' in\r\n   doc):\r\n\r\n          yield doc['a'], 1 # x\r\n      return\r\n  # end\r\n";
        use Tok::*;
        let name = |s: &str| Name(s.into());
        assert_eq!(
            lex(src).unwrap(),
            vec![
                name("def"),
                name("f"),
                Op("("),
                name("doc"),
                Op(")"),
                Op(":"),
                Newline,
                Indent,
                name("if"),
                Op("("),
                Str("a".into()),
                name("in"),
                name("doc"),
                Op(")"),
                Op(":"),
                Newline,
                Indent,
                name("yield"),
                name("doc"),
                Op("["),
                Str("a".into()),
                Op("]"),
                Op(","),
                Int(1),
                Newline,
                Dedent,
                name("return"),
                Newline,
                Dedent,
            ]
        );
    }

    #[test]
    fn refuses_what_it_does_not_model() {
        for src in [
            "def f(doc):\n\tyield 1, 2",
            "def f(doc):\n    yield 1.5, 2",
            "def f(doc):\n    yield 01, 2",
            "def f(doc):\n    yield 1e3, 2",
            "def f(doc):\n    yield 1_0, 2",
            "def f(doc):\n    yield '''a''', 2",
            "def f(doc):\n    yield '\\x41', 2",
            "def f(doc):\n    yield 'a\n', 2",
            "def f(doc):\n    x = 1 + \\\n 2",
            "def f(doc):\n    yield doc[0 * 1], 2",
            "def f(doc):\n        yield 1, 2\n    yield 2, 3",
            "def f(doc):\n    yield (1, 2",
            "def f(doc):\n    yield café, 1",
        ] {
            assert!(lex(src).is_none(), "{src:?}");
        }
    }
}
