//! Document JSON text → one deep-frozen JS object, in a single pass.
//!
//! This is the hot path of view indexing. Parsing straight into QuickJS values (no
//! intermediate `serde_json::Value`, no per-value rquickjs wrappers) measured about twice
//! as fast as `serde_json` + building, and faster than QuickJS's own `JSON.parse` even
//! before the deep freeze that would follow it. Values are frozen as they are built:
//! members and elements are defined read-only and non-configurable, then the object or
//! array is made non-extensible (`Object.freeze` would make a second pass, and converts
//! each array twice).
//!
//! A document with a repeated member name (which `JSON.parse` resolves as "last one wins")
//! cannot be defined that way; [`DocError::Duplicate`] tells the caller to take the slow
//! path through `serde_json`, which resolves duplicates the same way.

use std::mem::ManuallyDrop;

use rquickjs::{qjs, Ctx, Exception, Value};

use crate::MAX_NESTING;

/// Why a document could not be turned into a JS value.
#[derive(Debug)]
pub(crate) enum DocError {
    /// Not JSON; the byte offset of the problem.
    Syntax(usize),
    /// A member name repeats within one object.
    Duplicate,
    /// QuickJS failed (out of memory, or nesting too deep: a pending exception).
    Js(rquickjs::Error),
}

/// Parses `text` into a deep-frozen JS value.
pub(crate) fn parse_frozen<'js>(ctx: &Ctx<'js>, text: &str) -> Result<Value<'js>, DocError> {
    let mut parser = Parser::new(ctx, text, 0);
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != parser.bytes.len() {
        return Err(DocError::Syntax(parser.pos));
    }
    // SAFETY: `value` is an owned value of this context; ownership moves to the wrapper.
    Ok(unsafe { Value::from_raw(ctx.clone(), value.into_raw()) })
}

/// Parses the value `text[start..end]`, a member of a top-level object, into a deep-frozen
/// JS value owned by the caller.
pub(crate) fn parse_member(
    ctx: &Ctx<'_>,
    text: &str,
    start: usize,
    end: usize,
) -> Result<qjs::JSValue, DocError> {
    let mut parser = Parser::new(ctx, text, start);
    let value = parser.value(1)?;
    if parser.pos != end {
        return Err(DocError::Syntax(parser.pos));
    }
    Ok(value.into_raw())
}

/// A top-level member found by [`scan_members`].
pub(crate) struct Span {
    /// The member's name, owned by the caller (free it with `JS_FreeAtom`).
    pub(crate) atom: qjs::JSAtom,
    /// The name as an array index, if it is one (JS lists those first, in numeric order).
    pub(crate) index: Option<u32>,
    /// Where the member's value text is.
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Finds the members of the object `text` without building their values, in the order JS
/// lists an object's own keys. A repeated name keeps its first position and takes the last
/// value, as `JSON.parse` does. `None` when the object has more than `max` members (or
/// `text` is not an object), so that the caller builds it eagerly instead. Member values
/// are only skipped, not checked: the text is a stored document, validated when written.
pub(crate) fn scan_members(
    ctx: &Ctx<'_>,
    text: &str,
    max: usize,
) -> Result<Option<Vec<Span>>, DocError> {
    let mut parser = Parser::new(ctx, text, 0);
    let mut spans: Vec<Span> = Vec::new();
    let scanned = parser.members(&mut spans, max).and_then(|whole| {
        parser.skip_ws();
        match parser.pos == parser.bytes.len() {
            true => Ok(whole),
            false if whole => Err(DocError::Syntax(parser.pos)),
            false => Ok(false),
        }
    });
    if !matches!(scanned, Ok(true)) {
        for span in &spans {
            parser.free_atom(span.atom);
        }
        return scanned.map(|_| None);
    }
    spans.sort_by_key(|s| s.index.map_or(u64::MAX, u64::from));
    Ok(Some(spans))
}

/// A canonical array index ("0", "17"; not "01" or "4294967295"), as JS orders keys.
fn array_index(name: &str) -> Option<u32> {
    if name.len() > 1 && name.starts_with('0') {
        return None;
    }
    name.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| name.parse::<u32>().ok())
        .flatten()
        .filter(|&i| i != u32::MAX)
}

/// An owned QuickJS value, freed on drop unless handed over with `into_raw`.
struct Owned {
    ctx: *mut qjs::JSContext,
    value: qjs::JSValue,
}

impl Owned {
    fn into_raw(self) -> qjs::JSValue {
        ManuallyDrop::new(self).value
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `value` is owned by this wrapper and belongs to `ctx`.
        unsafe { qjs::JS_FreeValue(self.ctx, self.value) }
    }
}

struct Parser<'a, 'js> {
    owner: &'a Ctx<'js>,
    ctx: *mut qjs::JSContext,
    bytes: &'a [u8],
    pos: usize,
    /// Decoded text of the last string that contained escapes.
    scratch: String,
}

/// Where the last parsed string's text is.
enum Text {
    /// `bytes[start..end]`, no escapes.
    Slice(usize, usize),
    /// `scratch`.
    Decoded,
    /// A fixed name.
    Literal(&'static str),
}

impl<'a, 'js> Parser<'a, 'js> {
    fn new(owner: &'a Ctx<'js>, text: &'a str, pos: usize) -> Self {
        Parser {
            owner,
            ctx: owner.as_raw().as_ptr(),
            bytes: text.as_bytes(),
            pos,
            scratch: String::new(),
        }
    }

    /// Collects the top-level members into `spans`; `false` if there are more than `max`
    /// or the text is not an object.
    fn members(&mut self, spans: &mut Vec<Span>, max: usize) -> Result<bool, DocError> {
        self.skip_ws();
        if !self.eat(b'{') {
            return Ok(false);
        }
        self.skip_ws();
        if self.eat(b'}') {
            return Ok(true);
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(DocError::Syntax(self.pos));
            }
            let key = self.string()?;
            let index = array_index(self.text_of(&key));
            let atom = self.new_atom(key)?;
            self.skip_ws();
            if !self.eat(b':') {
                self.free_atom(atom);
                return Err(DocError::Syntax(self.pos));
            }
            self.skip_ws();
            let start = self.pos;
            if let Err(e) = self.skip_value() {
                self.free_atom(atom);
                return Err(e);
            }
            let end = self.pos;
            if let Some(seen) = spans.iter_mut().find(|s| s.atom == atom) {
                self.free_atom(atom);
                (seen.start, seen.end) = (start, end);
            } else if spans.len() == max {
                self.free_atom(atom);
                return Ok(false);
            } else {
                spans.push(Span {
                    atom,
                    index,
                    start,
                    end,
                });
            }
            self.skip_ws();
            if self.eat(b'}') {
                return Ok(true);
            }
            if !self.eat(b',') {
                return Err(DocError::Syntax(self.pos));
            }
        }
    }

    /// Moves past one value without building it: strings by searching for their closing
    /// quote, containers by searching for their own kind of bracket outside strings (in
    /// valid JSON the other kind nests evenly inside), scalars up to the next delimiter.
    fn skip_value(&mut self) -> Result<(), DocError> {
        let (open, close) = match self.peek() {
            Some(b'"') => return self.skip_string(),
            Some(b'{') => (b'{', b'}'),
            Some(b'[') => (b'[', b']'),
            _ => return self.skip_scalar(),
        };
        self.pos += 1;
        let mut depth = 1usize;
        while depth > 0 {
            let rest = &self.bytes[self.pos..];
            let Some(i) = memchr::memchr3(b'"', open, close, rest) else {
                return Err(DocError::Syntax(self.bytes.len()));
            };
            self.pos += i;
            match rest[i] {
                b'"' => self.skip_string()?,
                b if b == open => {
                    depth += 1;
                    self.pos += 1;
                }
                _ => {
                    depth -= 1;
                    self.pos += 1;
                }
            }
        }
        Ok(())
    }

    /// Moves past a number or literal, up to the next delimiter.
    fn skip_scalar(&mut self) -> Result<(), DocError> {
        let start = self.pos;
        while !matches!(
            self.peek(),
            Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') | None
        ) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(DocError::Syntax(self.pos));
        }
        Ok(())
    }

    /// Moves past a string literal (at its opening quote): the first bytes one by one
    /// (most strings are short), the rest of a long one by `memchr`.
    fn skip_string(&mut self) -> Result<(), DocError> {
        self.pos += 1;
        let near = self.bytes.len().min(self.pos + 24);
        while self.pos < near {
            match self.bytes[self.pos] {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
        loop {
            // An escape at the very end leaves `pos` past the text.
            let rest = self
                .bytes
                .get(self.pos..)
                .ok_or(DocError::Syntax(self.bytes.len()))?;
            match memchr::memchr2(b'"', b'\\', rest) {
                Some(i) if rest[i] == b'"' => {
                    self.pos += i + 1;
                    return Ok(());
                }
                Some(i) => self.pos += i + 2,
                None => return Err(DocError::Syntax(self.bytes.len())),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Owned, DocError> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => {
                let text = self.string()?;
                self.new_string(text)
            }
            Some(b't') => self.literal(b"true", qjs::JS_MKVAL(qjs::JS_TAG_BOOL, 1)),
            Some(b'f') => self.literal(b"false", qjs::JS_MKVAL(qjs::JS_TAG_BOOL, 0)),
            Some(b'n') => self.literal(b"null", qjs::JS_MKVAL(qjs::JS_TAG_NULL, 0)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(DocError::Syntax(self.pos)),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Owned, DocError> {
        self.check_depth(depth)?;
        self.pos += 1;
        // SAFETY: plain allocation; the result is checked and then owned.
        let object = self.own(unsafe { qjs::JS_NewObject(self.ctx) })?;
        self.skip_ws();
        if self.eat(b'}') {
            return self.seal(object);
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(DocError::Syntax(self.pos));
            }
            let key = self.string()?;
            let atom = self.new_atom(key)?;
            self.skip_ws();
            if !self.eat(b':') {
                self.free_atom(atom);
                return Err(DocError::Syntax(self.pos));
            }
            let member = self.value(depth);
            let defined = member.and_then(|member| self.define(&object, atom, member));
            self.free_atom(atom);
            defined?;
            self.skip_ws();
            if self.eat(b'}') {
                return self.seal(object);
            }
            if !self.eat(b',') {
                return Err(DocError::Syntax(self.pos));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Owned, DocError> {
        self.check_depth(depth)?;
        self.pos += 1;
        let mut items: Vec<Owned> = Vec::new();
        self.skip_ws();
        if !self.eat(b']') {
            loop {
                items.push(self.value(depth)?);
                self.skip_ws();
                if self.eat(b']') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(DocError::Syntax(self.pos));
                }
            }
        }
        self.frozen_array(items)
    }

    /// Defines each element read-only up front, then makes `length` read-only and the array
    /// non-extensible: what `Object.freeze` leaves behind, without its second pass over
    /// the elements.
    fn frozen_array(&self, items: Vec<Owned>) -> Result<Owned, DocError> {
        // SAFETY: plain allocation; the result is checked and then owned.
        let array = self.own(unsafe { qjs::JS_NewArray(self.ctx) })?;
        let flags = (qjs::JS_PROP_ENUMERABLE | qjs::JS_PROP_THROW) as i32;
        for (i, item) in items.into_iter().enumerate() {
            // SAFETY: takes ownership of the item's value.
            let res = unsafe {
                qjs::JS_DefinePropertyValueUint32(
                    self.ctx,
                    array.value,
                    i as u32,
                    item.into_raw(),
                    flags,
                )
            };
            if res < 0 {
                return Err(DocError::Js(rquickjs::Error::Exception));
            }
        }
        let undefined = qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0);
        let length_flags = (qjs::JS_PROP_HAS_WRITABLE | qjs::JS_PROP_THROW) as i32;
        let length = self.new_atom(Text::Literal("length"))?;
        // SAFETY: redefines the array's own `length` as read-only; no ownership changes.
        let res = unsafe {
            qjs::JS_DefineProperty(
                self.ctx,
                array.value,
                length,
                undefined,
                undefined,
                undefined,
                length_flags,
            )
        };
        self.free_atom(length);
        if res < 0 {
            return Err(DocError::Js(rquickjs::Error::Exception));
        }
        self.seal(array)
    }

    /// Defines a read-only, non-configurable, enumerable member.
    fn define(&self, object: &Owned, atom: qjs::JSAtom, member: Owned) -> Result<(), DocError> {
        let flags = (qjs::JS_PROP_ENUMERABLE | qjs::JS_PROP_THROW) as i32;
        // SAFETY: JS_DefinePropertyValue takes ownership of the member's value.
        let res = unsafe {
            qjs::JS_DefinePropertyValue(self.ctx, object.value, atom, member.into_raw(), flags)
        };
        if res >= 0 {
            return Ok(());
        }
        // The only way defining a data member on a fresh ordinary object fails, other than
        // memory, is a repeated name meeting its non-configurable first definition.
        // SAFETY: reads the object's own property table.
        let exists =
            unsafe { qjs::JS_GetOwnProperty(self.ctx, std::ptr::null_mut(), object.value, atom) };
        if exists > 0 {
            // SAFETY: drops the pending TypeError; the caller takes the slow path.
            unsafe { qjs::JS_FreeValue(self.ctx, qjs::JS_GetException(self.ctx)) };
            return Err(DocError::Duplicate);
        }
        Err(DocError::Js(rquickjs::Error::Exception))
    }

    fn seal(&self, object: Owned) -> Result<Owned, DocError> {
        // SAFETY: `object` is a live ordinary object of this context.
        if unsafe { qjs::JS_PreventExtensions(self.ctx, object.value) } < 0 {
            return Err(DocError::Js(rquickjs::Error::Exception));
        }
        Ok(object)
    }

    fn number(&mut self) -> Result<Owned, DocError> {
        let start = self.pos;
        self.eat(b'-');
        let int_start = self.pos;
        if !self.eat(b'0') && self.digits() == 0 {
            return Err(DocError::Syntax(self.pos));
        }
        let integral = !matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        if integral {
            return self.integer(start, self.pos - int_start);
        }
        if self.eat(b'.') && self.digits() == 0 {
            return Err(DocError::Syntax(self.pos));
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if self.digits() == 0 {
                return Err(DocError::Syntax(self.pos));
            }
        }
        Ok(self.float(start))
    }

    /// An integer literal: a QuickJS int when it fits in 32 bits, a double otherwise.
    fn integer(&mut self, start: usize, digits: usize) -> Result<Owned, DocError> {
        let text = self.text(start, self.pos);
        if digits <= 9 {
            let n: i32 = text.parse().map_err(|_| DocError::Syntax(start))?;
            if n != 0 || !text.starts_with('-') {
                return Ok(self.plain(qjs::JS_MKVAL(qjs::JS_TAG_INT, n)));
            }
        }
        Ok(self.float(start))
    }

    fn float(&self, start: usize) -> Owned {
        let text = self.text(start, self.pos);
        let f: f64 = text.parse().unwrap_or(f64::NAN);
        self.plain(qjs::JS_NewFloat64(f))
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Scans a string literal (at its opening quote) and says where its text is.
    fn string(&mut self) -> Result<Text, DocError> {
        self.pos += 1;
        let start = self.pos;
        loop {
            match self.bytes.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Text::Slice(start, self.pos - 1));
                }
                Some(b'\\') => return self.escaped_string(start),
                Some(0..=0x1f) | None => return Err(DocError::Syntax(self.pos)),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// The rest of a string literal that contains escapes, decoded into `scratch`.
    fn escaped_string(&mut self, start: usize) -> Result<Text, DocError> {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.push_str(self.text(start, self.pos));
        loop {
            let run = self.pos;
            while !matches!(
                self.bytes.get(self.pos),
                Some(b'"' | b'\\' | 0..=0x1f) | None
            ) {
                self.pos += 1;
            }
            out.push_str(self.text(run, self.pos));
            match self.bytes.get(self.pos) {
                Some(b'"') => break,
                Some(b'\\') => self.escape(&mut out)?,
                _ => return Err(DocError::Syntax(self.pos)),
            }
        }
        self.pos += 1;
        self.scratch = out;
        Ok(Text::Decoded)
    }

    fn escape(&mut self, out: &mut String) -> Result<(), DocError> {
        let at = self.pos;
        self.pos += 2;
        let c = match self.bytes.get(at + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => self.unicode_escape()?,
            _ => return Err(DocError::Syntax(at)),
        };
        out.push(c);
        Ok(())
    }

    /// `\uXXXX`, pairing surrogates; a lone surrogate becomes U+FFFD (Rust strings cannot
    /// hold one, and serde_json rejects such documents anyway).
    fn unicode_escape(&mut self) -> Result<char, DocError> {
        let first = self.hex4()?;
        if !(0xD800..0xDC00).contains(&first) {
            return Ok(char::from_u32(first).unwrap_or('\u{FFFD}'));
        }
        if self.bytes.get(self.pos) != Some(&b'\\') || self.bytes.get(self.pos + 1) != Some(&b'u') {
            return Ok('\u{FFFD}');
        }
        let saved = self.pos;
        self.pos += 2;
        let second = self.hex4()?;
        if !(0xDC00..0xE000).contains(&second) {
            self.pos = saved;
            return Ok('\u{FFFD}');
        }
        let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
        Ok(char::from_u32(code).unwrap_or('\u{FFFD}'))
    }

    fn hex4(&mut self) -> Result<u32, DocError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or(DocError::Syntax(self.pos))?;
        let text = std::str::from_utf8(digits).map_err(|_| DocError::Syntax(self.pos))?;
        let code = u32::from_str_radix(text, 16).map_err(|_| DocError::Syntax(self.pos))?;
        self.pos += 4;
        Ok(code)
    }

    fn text_of(&self, text: &Text) -> &str {
        match *text {
            Text::Slice(start, end) => self.text(start, end),
            Text::Decoded => &self.scratch,
            Text::Literal(name) => name,
        }
    }

    /// `bytes[start..end]` as text; only called on boundaries next to ASCII delimiters.
    fn text(&self, start: usize, end: usize) -> &'a str {
        // SAFETY: the input came from a `&str` and both ends sit next to ASCII bytes, which
        // are never inside a multi-byte UTF-8 sequence.
        unsafe { std::str::from_utf8_unchecked(&self.bytes[start..end]) }
    }

    fn new_string(&self, text: Text) -> Result<Owned, DocError> {
        let s = self.text_of(&text);
        // SAFETY: QuickJS copies the UTF-8 bytes; the result is checked and owned.
        self.own(unsafe { qjs::JS_NewStringLen(self.ctx, s.as_ptr().cast(), s.len() as _) })
    }

    fn new_atom(&self, text: Text) -> Result<qjs::JSAtom, DocError> {
        let s = self.text_of(&text);
        // SAFETY: QuickJS copies the UTF-8 bytes into its atom table.
        let atom = unsafe { qjs::JS_NewAtomLen(self.ctx, s.as_ptr().cast(), s.len() as _) };
        if atom == qjs::JS_ATOM_NULL {
            return Err(DocError::Js(rquickjs::Error::Exception));
        }
        Ok(atom)
    }

    fn free_atom(&self, atom: qjs::JSAtom) {
        // SAFETY: `atom` came from JS_NewAtomLen and is freed once.
        unsafe { qjs::JS_FreeAtom(self.ctx, atom) }
    }

    fn literal(&mut self, word: &[u8], value: qjs::JSValue) -> Result<Owned, DocError> {
        if !self.bytes[self.pos..].starts_with(word) {
            return Err(DocError::Syntax(self.pos));
        }
        self.pos += word.len();
        Ok(self.plain(value))
    }

    /// Wraps a value that needs no freeing (numbers, booleans, null).
    fn plain(&self, value: qjs::JSValue) -> Owned {
        Owned {
            ctx: self.ctx,
            value,
        }
    }

    /// Takes ownership of a freshly created value, or reports the pending exception.
    fn own(&self, value: qjs::JSValue) -> Result<Owned, DocError> {
        // SAFETY: only inspects the tag.
        if unsafe { qjs::JS_IsException(value) } {
            return Err(DocError::Js(rquickjs::Error::Exception));
        }
        Ok(Owned {
            ctx: self.ctx,
            value,
        })
    }

    fn check_depth(&self, depth: usize) -> Result<(), DocError> {
        if depth <= MAX_NESTING {
            return Ok(());
        }
        let msg = format!("document nested deeper than {MAX_NESTING} levels");
        Err(DocError::Js(Exception::throw_range(self.owner, &msg)))
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            return true;
        }
        false
    }
}
