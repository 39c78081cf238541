//! The document a map function receives, built lazily.
//!
//! Most map functions read a few members of a document (`emit(doc.type, doc.value)`), yet
//! building the whole document as JS values was most of the cost of indexing large
//! documents. A lazy document is an object of its own QuickJS class whose top-level members
//! are found by a quick scan of the JSON text (values skipped, not built) and built with
//! [`doc::parse_member`] — deep-frozen, as before — the first time they are read, then kept.
//!
//! To JavaScript it behaves as the eagerly built frozen object: its prototype is
//! `Object.prototype`; its own properties are the members in `JSON.parse` order (array
//! indices first), as enumerable, read-only, non-configurable data properties; it is not
//! extensible, so `Object.isFrozen` is true; writes are ignored (or throw in strict code),
//! and `JSON.stringify`, `for…in`, `Object.keys` and `hasOwnProperty` see every member.
//!
//! The text and member table live in one block allocated from the runtime's own heap, so
//! documents a map function keeps alive count against its memory limit. Documents with more
//! than [`MAX_LAZY_MEMBERS`] top-level members are built eagerly (lookups here are linear).

use std::ffi::c_int;
use std::ptr::NonNull;

use rquickjs::{qjs, Ctx, Value};
use serde_json::Value as Json;

use crate::doc::{self, DocError, Span};
use crate::from_json::Builder;

/// Above this many top-level members a document is built eagerly.
pub(crate) const MAX_LAZY_MEMBERS: usize = 32;

/// The lazy-document class of one runtime.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LazyDocs {
    pub(crate) class: qjs::JSClassID,
}

/// One member: its name, where its value's text is, and its value once built
/// (`JS_UNINITIALIZED` until then).
#[repr(C)]
struct Member {
    atom: qjs::JSAtom,
    start: u32,
    end: u32,
    value: qjs::JSValue,
}

/// The start of a document's block; `count` members and then `len` bytes of text follow.
#[repr(C)]
struct Header {
    count: usize,
    len: usize,
}

static EXOTIC: qjs::JSClassExoticMethods = qjs::JSClassExoticMethods {
    get_own_property: Some(get_own_property),
    get_own_property_names: Some(get_own_property_names),
    delete_property: Some(delete_property),
    define_own_property: Some(define_own_property),
    has_property: None,
    get_property: None,
    set_property: None,
};

impl LazyDocs {
    /// Registers the class in `ctx`'s runtime, with `Object.prototype` as its prototype.
    pub(crate) fn register(ctx: &Ctx<'_>) -> rquickjs::Result<LazyDocs> {
        let raw = ctx.as_raw().as_ptr();
        let def = qjs::JSClassDef {
            class_name: c"Object".as_ptr(),
            finalizer: Some(finalize),
            gc_mark: Some(mark),
            call: None,
            // QuickJS only reads through this pointer.
            exotic: std::ptr::addr_of!(EXOTIC).cast_mut(),
        };
        let mut class = 0;
        // SAFETY: the runtime is locked by the caller; the class definition is copied and
        // `EXOTIC` is static. `JS_SetClassProto` takes ownership of the prototype reference.
        unsafe {
            let rt = qjs::JS_GetRuntime(raw);
            qjs::JS_NewClassID(rt, &mut class);
            if qjs::JS_NewClass(rt, class, &def) != 0 {
                return Err(rquickjs::Error::Allocation);
            }
            let probe = qjs::JS_NewObject(raw);
            if qjs::JS_IsException(probe) {
                return Err(rquickjs::Error::Exception);
            }
            let proto = qjs::JS_GetPrototype(raw, probe);
            qjs::JS_FreeValue(raw, probe);
            qjs::JS_SetClassProto(raw, class, proto);
        }
        Ok(LazyDocs { class })
    }

    /// The lazy document for `text`, or `None` if it should be built eagerly (too many
    /// members, too long, or not an object).
    pub(crate) fn build<'js>(
        &self,
        ctx: &Ctx<'js>,
        text: &str,
    ) -> Result<Option<Value<'js>>, DocError> {
        if u32::try_from(text.len()).is_err() {
            return Ok(None);
        }
        let Some(spans) = doc::scan_members(ctx, text, MAX_LAZY_MEMBERS)? else {
            return Ok(None);
        };
        let raw = ctx.as_raw().as_ptr();
        // SAFETY: `alloc_block` takes the atoms; the object takes the block (freed by its
        // finalizer), and its ownership then moves into the returned `Value`.
        unsafe {
            let block = alloc_block(raw, text, spans)?;
            let obj = qjs::JS_NewObjectClass(raw, self.class);
            if qjs::JS_IsException(obj) {
                free_block(qjs::JS_GetRuntime(raw), block);
                return Err(DocError::Js(rquickjs::Error::Exception));
            }
            qjs::JS_SetOpaque(obj, block.as_ptr().cast());
            let value = Value::from_raw(ctx.clone(), obj);
            if qjs::JS_PreventExtensions(raw, obj) < 0 {
                return Err(DocError::Js(rquickjs::Error::Exception));
            }
            Ok(Some(value))
        }
    }
}

/// Allocates a document's block from the runtime's heap and fills it; takes the atoms.
unsafe fn alloc_block(
    ctx: *mut qjs::JSContext,
    text: &str,
    spans: Vec<Span>,
) -> Result<NonNull<Header>, DocError> {
    let size = size_of::<Header>() + spans.len() * size_of::<Member>() + text.len();
    // SAFETY (whole function): the block is sized for the header, members and text, and
    // js_malloc returns memory aligned for any of them.
    unsafe {
        let Some(block) = NonNull::new(qjs::js_malloc(ctx, size as _).cast::<Header>()) else {
            for span in &spans {
                qjs::JS_FreeAtom(ctx, span.atom);
            }
            return Err(DocError::Js(rquickjs::Error::Exception));
        };
        block.write(Header {
            count: spans.len(),
            len: text.len(),
        });
        let members = members_of(block);
        for (i, span) in spans.into_iter().enumerate() {
            members.add(i).write(Member {
                atom: span.atom,
                start: span.start as u32,
                end: span.end as u32,
                value: qjs::JS_MKVAL(qjs::JS_TAG_UNINITIALIZED, 0),
            });
        }
        std::ptr::copy_nonoverlapping(text.as_ptr(), text_of(block), text.len());
        Ok(block)
    }
}

unsafe fn free_block(rt: *mut qjs::JSRuntime, block: NonNull<Header>) {
    // SAFETY: the block was filled by `alloc_block` and is freed once.
    unsafe {
        let members = members_of(block);
        for i in 0..block.as_ref().count {
            let m = members.add(i);
            qjs::JS_FreeAtomRT(rt, (*m).atom);
            qjs::JS_FreeValueRT(rt, (*m).value);
        }
        qjs::js_free_rt(rt, block.as_ptr().cast());
    }
}

unsafe fn members_of(block: NonNull<Header>) -> *mut Member {
    // SAFETY: the members follow the header inside the block.
    unsafe { block.as_ptr().add(1).cast::<Member>() }
}

unsafe fn text_of(block: NonNull<Header>) -> *mut u8 {
    // SAFETY: the text follows the members inside the block.
    unsafe { members_of(block).add(block.as_ref().count).cast::<u8>() }
}

/// The block of a lazy document.
unsafe fn block_of(obj: qjs::JSValue) -> Option<NonNull<Header>> {
    // SAFETY: `obj` is a live object of the lazy class (the only class with these hooks).
    NonNull::new(unsafe { qjs::JS_GetOpaque(obj, qjs::JS_GetClassID(obj)) }.cast())
}

/// The member named `prop`, if any.
unsafe fn find(obj: qjs::JSValue, prop: qjs::JSAtom) -> Option<*mut Member> {
    // SAFETY: the block outlives this call (the caller holds `obj`).
    unsafe {
        let block = block_of(obj)?;
        let members = members_of(block);
        (0..block.as_ref().count)
            .map(|i| members.add(i))
            .find(|&m| (*m).atom == prop)
    }
}

/// The member's value, built and kept on first use; borrowed (not duplicated).
unsafe fn member_value(
    ctx: *mut qjs::JSContext,
    obj: qjs::JSValue,
    member: *mut Member,
) -> Result<qjs::JSValue, ()> {
    // SAFETY: `member` points into the block of `obj`, which the caller holds; no Rust
    // reference into the block lives across the calls into QuickJS.
    unsafe {
        if !qjs::JS_IsUninitialized((*member).value) {
            return Ok((*member).value);
        }
        let block = block_of(obj).ok_or(())?;
        let len = block.as_ref().len;
        let bytes = std::slice::from_raw_parts(text_of(block), len);
        let text = std::str::from_utf8_unchecked(bytes);
        let (start, end) = ((*member).start as usize, (*member).end as usize);
        let js = Ctx::from_raw(NonNull::new(ctx).ok_or(())?);
        let value = match doc::parse_member(&js, text, start, end) {
            Ok(value) => value,
            Err(DocError::Duplicate) => build_slowly(&js, &text[start..end])?,
            Err(DocError::Syntax(at)) => {
                let msg = format!("stored document is not valid JSON (at byte {at})");
                rquickjs::Exception::throw_internal(&js, &msg);
                return Err(());
            }
            Err(DocError::Js(_)) => return Err(()),
        };
        (*member).value = value;
        Ok(value)
    }
}

/// A member with repeated names inside: serde_json resolves them as `JSON.parse` does.
fn build_slowly(ctx: &Ctx<'_>, text: &str) -> Result<qjs::JSValue, ()> {
    let json: Json = serde_json::from_str(text).map_err(|e| {
        let msg = format!("stored document is not valid JSON: {e}");
        rquickjs::Exception::throw_internal(ctx, &msg);
    })?;
    let value = Builder::new(ctx, true).value(&json).map_err(|_| ())?;
    // SAFETY: a new reference for the caller; `value` drops its own.
    Ok(unsafe { qjs::JS_DupValue(ctx.as_raw().as_ptr(), value.as_raw()) })
}

unsafe extern "C" fn get_own_property(
    ctx: *mut qjs::JSContext,
    desc: *mut qjs::JSPropertyDescriptor,
    obj: qjs::JSValue,
    prop: qjs::JSAtom,
) -> c_int {
    // SAFETY: called by QuickJS with a live lazy document and, if non-null, a descriptor
    // for us to fill (the caller frees its values).
    unsafe {
        let Some(member) = find(obj, prop) else {
            return 0;
        };
        if desc.is_null() {
            return 1;
        }
        let Ok(value) = member_value(ctx, obj, member) else {
            return -1;
        };
        let undefined = qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0);
        desc.write(qjs::JSPropertyDescriptor {
            flags: qjs::JS_PROP_ENUMERABLE as c_int,
            value: qjs::JS_DupValue(ctx, value),
            getter: undefined,
            setter: undefined,
        });
        1
    }
}

unsafe extern "C" fn get_own_property_names(
    ctx: *mut qjs::JSContext,
    ptab: *mut *mut qjs::JSPropertyEnum,
    plen: *mut u32,
    obj: qjs::JSValue,
) -> c_int {
    // SAFETY: called by QuickJS with a live lazy document; the table is allocated from the
    // runtime's heap and, with the duplicated atoms, owned by the caller.
    unsafe {
        let Some(block) = block_of(obj) else {
            (*ptab, *plen) = (std::ptr::null_mut(), 0);
            return 0;
        };
        let count = block.as_ref().count;
        let size = size_of::<qjs::JSPropertyEnum>() * count.max(1);
        let tab = qjs::js_malloc(ctx, size as _).cast::<qjs::JSPropertyEnum>();
        if tab.is_null() {
            return -1;
        }
        let members = members_of(block);
        for i in 0..count {
            tab.add(i).write(qjs::JSPropertyEnum {
                is_enumerable: true,
                atom: qjs::JS_DupAtom(ctx, (*members.add(i)).atom),
            });
        }
        (*ptab, *plen) = (tab, count as u32);
        0
    }
}

unsafe extern "C" fn delete_property(
    _ctx: *mut qjs::JSContext,
    obj: qjs::JSValue,
    prop: qjs::JSAtom,
) -> c_int {
    // SAFETY: called by QuickJS with a live lazy document. Members are non-configurable.
    c_int::from(unsafe { find(obj, prop) }.is_none())
}

/// `Object.defineProperty` and friends: only a definition that changes nothing succeeds
/// (as on a frozen object, so `Object.freeze(doc)` is fine); anything else is refused.
unsafe extern "C" fn define_own_property(
    ctx: *mut qjs::JSContext,
    obj: qjs::JSValue,
    prop: qjs::JSAtom,
    val: qjs::JSValue,
    _getter: qjs::JSValue,
    _setter: qjs::JSValue,
    flags: c_int,
) -> c_int {
    // SAFETY: called by QuickJS with a live lazy document.
    unsafe {
        let refusal = match find(obj, prop) {
            None => c"object is not extensible",
            Some(member) => match unchanged(ctx, obj, member, val, flags as u32) {
                Ok(true) => return 1,
                Ok(false) => c"property is not configurable",
                Err(()) => return -1,
            },
        };
        if flags as u32 & (qjs::JS_PROP_THROW | qjs::JS_PROP_THROW_STRICT) != 0 {
            qjs::JS_ThrowTypeError(ctx, refusal.as_ptr());
            return -1;
        }
        0
    }
}

/// Whether a definition with `flags` (and `val`) leaves a read-only, non-configurable,
/// enumerable data member as it is.
unsafe fn unchanged(
    ctx: *mut qjs::JSContext,
    obj: qjs::JSValue,
    member: *mut Member,
    val: qjs::JSValue,
    flags: u32,
) -> Result<bool, ()> {
    let has = |bit: u32| flags & bit != 0;
    if has(qjs::JS_PROP_HAS_GET | qjs::JS_PROP_HAS_SET)
        || (has(qjs::JS_PROP_HAS_CONFIGURABLE) && has(qjs::JS_PROP_CONFIGURABLE))
        || (has(qjs::JS_PROP_HAS_ENUMERABLE) && !has(qjs::JS_PROP_ENUMERABLE))
        || (has(qjs::JS_PROP_HAS_WRITABLE) && has(qjs::JS_PROP_WRITABLE))
    {
        return Ok(false);
    }
    if !has(qjs::JS_PROP_HAS_VALUE) {
        return Ok(true);
    }
    // SAFETY: as in `member_value`.
    unsafe {
        let current = member_value(ctx, obj, member)?;
        Ok(qjs::JS_IsSameValue(ctx, val, current))
    }
}

unsafe extern "C" fn finalize(rt: *mut qjs::JSRuntime, obj: qjs::JSValue) {
    // SAFETY: the object is being freed; its block is freed exactly once, here.
    unsafe {
        if let Some(block) = block_of(obj) {
            free_block(rt, block);
        }
    }
}

unsafe extern "C" fn mark(rt: *mut qjs::JSRuntime, obj: qjs::JSValue, mark_func: qjs::JS_MarkFunc) {
    // SAFETY: the object is live; its built members are values it holds.
    unsafe {
        let Some(block) = block_of(obj) else {
            return;
        };
        let members = members_of(block);
        for i in 0..block.as_ref().count {
            qjs::JS_MarkValue(rt, (*members.add(i)).value, mark_func);
        }
    }
}
