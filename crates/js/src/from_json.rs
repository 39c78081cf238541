//! `serde_json::Value` → JavaScript values, optionally deep-frozen.
//!
//! Frozen objects get their members defined read-only and non-configurable up front and are
//! then made non-extensible, which is what `Object.freeze` leaves behind but without its
//! second pass over the properties.

use rquickjs::object::Property;
use rquickjs::{qjs, Array, Ctx, Exception, Object, Value};
use serde_json::{Map, Number, Value as Json};

use crate::MAX_NESTING;

/// Builds JS values from JSON; `frozen` deep-freezes every object and array.
pub(crate) struct Builder<'js> {
    ctx: Ctx<'js>,
    frozen: bool,
}

impl<'js> Builder<'js> {
    pub(crate) fn new(ctx: &Ctx<'js>, frozen: bool) -> Self {
        Builder {
            ctx: ctx.clone(),
            frozen,
        }
    }

    pub(crate) fn value(&self, json: &Json) -> rquickjs::Result<Value<'js>> {
        self.nested(json, 0)
    }

    fn nested(&self, json: &Json, depth: usize) -> rquickjs::Result<Value<'js>> {
        let ctx = self.ctx.clone();
        Ok(match json {
            Json::Null => Value::new_null(ctx),
            Json::Bool(b) => Value::new_bool(ctx, *b),
            Json::Number(n) => js_number(&ctx, n),
            Json::String(s) => rquickjs::String::from_str(ctx, s)?.into_value(),
            Json::Array(items) => self.array(items, depth + 1)?,
            Json::Object(members) => self.object(members, depth + 1)?,
        })
    }

    fn array(&self, items: &[Json], depth: usize) -> rquickjs::Result<Value<'js>> {
        self.check_depth(depth)?;
        let array = Array::new(self.ctx.clone())?;
        for (i, item) in items.iter().enumerate() {
            array.set(i, self.nested(item, depth)?)?;
        }
        self.seal_array(array)
    }

    fn object(&self, members: &Map<String, Json>, depth: usize) -> rquickjs::Result<Value<'js>> {
        self.check_depth(depth)?;
        let object = Object::new(self.ctx.clone())?;
        for (key, item) in members {
            self.define(&object, key.as_str(), self.nested(item, depth)?)?;
        }
        self.seal_object(object)
    }

    /// Defines a data member the way `JSON.parse` does (never invoking `__proto__` setters).
    pub(crate) fn define(
        &self,
        object: &Object<'js>,
        key: &str,
        value: Value<'js>,
    ) -> rquickjs::Result<()> {
        let property = Property::from(value).enumerable();
        if self.frozen {
            object.prop(key, property)
        } else {
            object.prop(key, property.writable().configurable())
        }
    }

    pub(crate) fn seal_object(&self, object: Object<'js>) -> rquickjs::Result<Value<'js>> {
        if self.frozen {
            // SAFETY: `object` is a live ordinary object; the call has no ownership effects.
            let res =
                unsafe { qjs::JS_PreventExtensions(self.ctx.as_raw().as_ptr(), object.as_raw()) };
            if res < 0 {
                return Err(rquickjs::Error::Exception);
            }
        }
        Ok(object.into_value())
    }

    pub(crate) fn seal_array(&self, array: Array<'js>) -> rquickjs::Result<Value<'js>> {
        if self.frozen {
            // SAFETY: `array` is a live array; the call has no ownership effects.
            let res = unsafe { qjs::JS_FreezeObject(self.ctx.as_raw().as_ptr(), array.as_raw()) };
            if res < 0 {
                return Err(rquickjs::Error::Exception);
            }
        }
        Ok(array.into_value())
    }

    pub(crate) fn check_depth(&self, depth: usize) -> rquickjs::Result<()> {
        if depth > MAX_NESTING {
            let msg = format!("document nested deeper than {MAX_NESTING} levels");
            return Err(Exception::throw_range(&self.ctx, &msg));
        }
        Ok(())
    }
}

/// A JSON number as a JS number (integers that fit in 32 bits use QuickJS's int tag).
fn js_number<'js>(ctx: &Ctx<'js>, n: &Number) -> Value<'js> {
    if let Some(i) = n.as_i64() {
        return match i32::try_from(i) {
            Ok(small) => Value::new_int(ctx.clone(), small),
            Err(_) => Value::new_float(ctx.clone(), i as f64),
        };
    }
    Value::new_float(ctx.clone(), n.as_f64().unwrap_or(f64::NAN))
}
