//! JavaScript values → `serde_json::Value`, with `JSON.stringify` semantics.
//!
//! Plain objects and arrays are walked directly (much faster than stringifying and
//! re-parsing); anything exotic (Date, boxed primitives, Map, Proxy, BigInt, ...) goes
//! through QuickJS's own `JSON.stringify` so its rules apply exactly.

use rquickjs::atom::PredefinedAtom;
use rquickjs::object::Filter;
use rquickjs::{qjs, Array, Ctx, Exception, Object, Type, Value};
use serde_json::{Map, Value as Json};
use settee_jsmap::number::to_json as number;

use crate::monitor::Monitor;
use crate::MAX_NESTING;

/// QuickJS class ids of the object kinds walked directly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Classes {
    plain: qjs::JSClassID,
    array: qjs::JSClassID,
    /// Lazily built documents ([`crate::lazy`]), which behave as frozen plain objects.
    lazy: Option<qjs::JSClassID>,
}

impl Classes {
    /// Learns the class ids from live objects rather than hard-coding engine internals.
    pub(crate) fn probe(ctx: &Ctx<'_>) -> rquickjs::Result<Classes> {
        let plain = Object::new(ctx.clone())?;
        let array = Array::new(ctx.clone())?;
        Ok(Classes {
            plain: class_of(plain.as_value()),
            array: class_of(array.as_value()),
            lazy: None,
        })
    }

    /// Also walks lazily built documents of class `lazy` as plain objects.
    pub(crate) fn with_lazy(self, lazy: qjs::JSClassID) -> Classes {
        Classes {
            lazy: Some(lazy),
            ..self
        }
    }

    fn is_plain(&self, class: qjs::JSClassID) -> bool {
        class == self.plain || Some(class) == self.lazy
    }
}

fn class_of(v: &Value<'_>) -> qjs::JSClassID {
    // SAFETY: reads the class id of a live value; no ownership changes.
    unsafe { qjs::JS_GetClassID(v.as_raw()) }
}

/// Converts JS values to JSON, charging the output against the call's memory budget (the
/// converted rows live outside QuickJS's heap, so its limit cannot see them).
pub(crate) struct Converter<'m> {
    pub(crate) classes: Classes,
    pub(crate) monitor: &'m Monitor,
}

/// The property name `toJSON` receives, built only when a `toJSON` method exists.
#[derive(Clone, Copy)]
enum Key<'a> {
    Index(usize),
    Name(&'a str),
}

impl Key<'_> {
    fn text(self) -> String {
        match self {
            Key::Index(i) => i.to_string(),
            Key::Name(name) => name.to_owned(),
        }
    }
}

/// Fixed cost charged per converted value, roughly a `serde_json::Value` and its slot.
const VALUE_COST: usize = 32;

impl Converter<'_> {
    /// Converts `value` as `JSON.stringify` would convert it inside an array: values that
    /// JSON cannot hold (undefined, functions, symbols) become `null`.
    pub(crate) fn to_json(&self, value: &Value<'_>) -> rquickjs::Result<Json> {
        Ok(self.convert(value, Key::Name(""), 0)?.unwrap_or(Json::Null))
    }

    /// `None` means "omitted" (undefined, function, symbol).
    fn convert(&self, v: &Value<'_>, key: Key<'_>, depth: usize) -> rquickjs::Result<Option<Json>> {
        self.charge(v, VALUE_COST)?;
        let json = match v.type_of() {
            Type::Uninitialized | Type::Undefined | Type::Symbol => return Ok(None),
            Type::Function | Type::Constructor => return Ok(None),
            Type::Null => Json::Null,
            Type::Bool => Json::Bool(v.as_bool().unwrap_or(false)),
            Type::Int => Json::Number(v.as_int().unwrap_or(0).into()),
            Type::Float => number(v.as_float().unwrap_or(f64::NAN)),
            Type::String => {
                let text = rust_string(v)?;
                self.charge(v, text.len())?;
                Json::String(text)
            }
            Type::Array | Type::Object | Type::Exception | Type::Promise | Type::Proxy => {
                return self.convert_object(v, key, depth)
            }
            _ => return self.exotic(v),
        };
        Ok(Some(json))
    }

    fn convert_object(
        &self,
        v: &Value<'_>,
        key: Key<'_>,
        depth: usize,
    ) -> rquickjs::Result<Option<Json>> {
        if depth >= MAX_NESTING {
            let msg = format!("cyclic object value or nesting deeper than {MAX_NESTING} levels");
            return Err(Exception::throw_type(v.ctx(), &msg));
        }
        let class = class_of(v);
        if !self.classes.is_plain(class) && class != self.classes.array {
            return self.exotic(v);
        }
        let obj = v.as_object().expect("object-typed value");
        let to_json_fn: Value = obj.get(PredefinedAtom::ToJSON)?;
        if let Some(f) = to_json_fn.as_function() {
            let replaced: Value = f.call((rquickjs::function::This(obj.clone()), key.text()))?;
            return self.convert(&replaced, key, depth + 1);
        }
        if class == self.classes.array {
            return self.convert_array(obj, depth).map(Some);
        }
        self.convert_members(obj, depth).map(Some)
    }

    fn convert_array(&self, obj: &Object<'_>, depth: usize) -> rquickjs::Result<Json> {
        let array = obj.as_array().expect("array-class object");
        let mut out = Vec::with_capacity(array.len());
        for i in 0..array.len() {
            let item: Value = array.get(i)?;
            out.push(
                self.convert(&item, Key::Index(i), depth + 1)?
                    .unwrap_or(Json::Null),
            );
        }
        Ok(Json::Array(out))
    }

    fn convert_members(&self, obj: &Object<'_>, depth: usize) -> rquickjs::Result<Json> {
        let mut out = Map::new();
        for prop in obj.own_props::<rquickjs::Atom, Value>(Filter::new().string().enum_only()) {
            let (atom, item) = prop?;
            let key = atom.to_string()?;
            self.charge(&item, key.len())?;
            if let Some(json) = self.convert(&item, Key::Name(&key), depth + 1)? {
                out.insert(key, json);
            }
        }
        Ok(Json::Object(out))
    }

    fn exotic(&self, v: &Value<'_>) -> rquickjs::Result<Option<Json>> {
        let json = stringify_exotic(v)?;
        if let Some(json) = &json {
            self.charge(v, json.to_string().len())?;
        }
        Ok(json)
    }

    /// Fails the call as out of memory once the converted output exceeds the budget.
    fn charge(&self, v: &Value<'_>, bytes: usize) -> rquickjs::Result<()> {
        if self.monitor.charge_output(bytes) {
            return Ok(());
        }
        Err(Exception::throw_internal(
            v.ctx(),
            "out of memory: converted output too large",
        ))
    }
}

/// Lets QuickJS's `JSON.stringify` handle the value, then parses its output.
fn stringify_exotic(v: &Value<'_>) -> rquickjs::Result<Option<Json>> {
    let ctx = v.ctx();
    let Some(text) = ctx.json_stringify(v.clone())? else {
        return Ok(None);
    };
    let text = text.to_string()?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Exception::throw_type(ctx, &format!("value cannot be converted to JSON: {e}")))
}

/// The UTF-8 form of a JS string value; lone surrogates become U+FFFD.
pub(crate) fn rust_string(v: &Value<'_>) -> rquickjs::Result<String> {
    let mut len: qjs::size_t = 0;
    let ctx = v.ctx().as_raw().as_ptr();
    // SAFETY: `v` is a live value; on success the returned buffer is valid for `len` bytes
    // until freed, and it is freed exactly once below. On failure an exception is pending.
    unsafe {
        let ptr = qjs::JS_ToCStringLen2(ctx, &mut len, v.as_raw(), false);
        if ptr.is_null() {
            return Err(rquickjs::Error::Exception);
        }
        let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize);
        let text = String::from_utf8_lossy(bytes).into_owned();
        qjs::JS_FreeCString(ctx, ptr);
        Ok(text)
    }
}
