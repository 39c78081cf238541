//! CouchDB's view query arguments (its `#mrargs` record), shared by views and the
//! `_all_docs` family.
//!
//! Parameters are applied one at a time in the order given, so a later one overrides an
//! earlier one (`key=a&startkey=b` starts at `b` and ends at `a`). Query-string values are
//! text (JSON parameters are decoded); POST-body members arrive decoded. A POST body is
//! applied first and the query string on top of it, so the query string wins; each object
//! of a `queries` list is applied on top of the query string, so the query object wins.
//! Unknown parameters are ignored, as CouchDB ignores them.
//!
//! [`MrArgs::validate`] then makes CouchDB's checks in CouchDB's order, which decides the
//! error a client sees when several apply.

use crate::error::{Error, Result};
use crate::params::Params;
use serde_json::{Map, Value};

/// When a query brings the index up to date (`update`, or `stale`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    True,
    False,
    Lazy,
}

/// Whether the view is queried as a map or a reduce: a view with a reduce function is a
/// map view when `reduce=false`; `_all_docs` is always a map view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewType {
    Map,
    Red,
}

/// How reduce rows are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupLevel {
    Exact,
    Level(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct MrArgs {
    pub reduce: Option<bool>,
    pub start_key: Option<Value>,
    pub end_key: Option<Value>,
    /// As given: [`MrArgs::validate`] checks that it is an array.
    pub keys: Option<Value>,
    pub start_key_docid: Option<String>,
    pub end_key_docid: Option<String>,
    pub limit: Option<u64>,
    pub skip: u64,
    pub group: Option<bool>,
    pub group_level: Option<u64>,
    pub update: Update,
    pub descending: bool,
    pub inclusive_end: bool,
    pub include_docs: bool,
    pub attachments: bool,
    pub att_encoding_info: bool,
    pub update_seq: bool,
    pub conflicts: Option<bool>,
    pub partition: Option<String>,
}

impl Default for MrArgs {
    fn default() -> Self {
        MrArgs {
            reduce: None,
            start_key: None,
            end_key: None,
            keys: None,
            start_key_docid: None,
            end_key_docid: None,
            limit: None,
            skip: 0,
            group: None,
            group_level: None,
            update: Update::True,
            descending: false,
            inclusive_end: true,
            include_docs: false,
            attachments: false,
            att_encoding_info: false,
            update_seq: false,
            conflicts: None,
            partition: None,
        }
    }
}

/// A parameter's value: query-string text, or a decoded POST-body member.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    Text(&'a str),
    Json(&'a Value),
}

fn parse_error(msg: impl Into<String>) -> Error {
    Error::QueryParse(msg.into())
}

/// A value as Erlang's `~p` prints it in CouchDB's messages: text quoted, JSON as JSON.
fn shown(v: Val<'_>) -> String {
    match v {
        Val::Text(s) => quoted(s),
        Val::Json(Value::String(s)) => format!("<<{}>>", quoted(s)),
        Val::Json(j) => j.to_string(),
    }
}

fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// CouchDB's `parse_boolean`: `true`/`false` in any letter case, or a JSON boolean.
pub fn parse_boolean(v: Val<'_>) -> Result<bool> {
    let text: &str = match v {
        Val::Json(Value::Bool(b)) => return Ok(*b),
        Val::Json(Value::String(s)) => s,
        Val::Text(s) => s,
        Val::Json(_) => "",
    };
    if text.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if text.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        // A JSON string is turned into text before the check, so it shows as text.
        let raw = match v {
            Val::Json(Value::String(s)) => quoted(s),
            other => shown(other),
        };
        Err(parse_error(format!("Invalid boolean parameter: {raw}")))
    }
}

/// CouchDB's `parse_pos_int`: a non-negative integer (an Erlang integer is unbounded;
/// larger values than `u64` are clamped).
pub fn parse_pos_int(v: Val<'_>) -> Result<u64> {
    let int: Option<i128> = match v {
        Val::Text(s) => settee_core::etf::binary_to_integer(s),
        Val::Json(Value::Number(n)) if n.is_i64() || n.is_u64() => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Val::Json(_) => None,
    };
    match int {
        None => Err(parse_error(format!(
            "Invalid value for integer: {}",
            shown(v)
        ))),
        Some(n) if n < 0 => Err(parse_error(format!(
            "Invalid value for positive integer: {}",
            shown(v)
        ))),
        Some(n) => Ok(u64::try_from(n).unwrap_or(u64::MAX)),
    }
}

/// A JSON parameter: decoded text, or the body member itself.
pub fn parse_json(v: Val<'_>) -> Result<Value> {
    match v {
        Val::Json(j) => Ok(j.clone()),
        Val::Text(s) => crate::params::decode_param_json(s),
    }
}

/// CouchDB's `couch_util:to_binary`: text as it is, a JSON string's content, other JSON
/// as its text.
fn to_binary(v: Val<'_>) -> String {
    match v {
        Val::Text(s) => s.to_owned(),
        Val::Json(Value::String(s)) => s.clone(),
        Val::Json(j) => j.to_string(),
    }
}

/// Whether the value is exactly the string `s` (text or JSON string).
fn is_str(v: Val<'_>, s: &str) -> bool {
    match v {
        Val::Text(t) => t == s,
        Val::Json(Value::String(t)) => t == s,
        Val::Json(_) => false,
    }
}

/// Whether the value is the flag `b`: its text (`true`, `false`) or a JSON boolean, as
/// `stable` and `update` take them (not in other letter cases, unlike `parse_boolean`).
fn is_flag(v: Val<'_>, b: bool) -> bool {
    matches!(v, Val::Json(Value::Bool(x)) if *x == b) || is_str(v, if b { "true" } else { "false" })
}

impl MrArgs {
    /// Arguments from the query string alone (a view's `GET`, the base of `queries`).
    pub fn from_query(p: &Params) -> Result<MrArgs> {
        Self::from_query_with_keys(None, p)
    }

    /// CouchDB's `parse_params(Props, Keys)`: `keys` starts as the request's own (which
    /// `_all_docs` passes whatever its length), then each parameter applies in order.
    pub fn from_query_with_keys(keys: Option<Value>, p: &Params) -> Result<MrArgs> {
        let mut a = MrArgs {
            keys,
            ..MrArgs::default()
        };
        a.apply_query(p)?;
        Ok(a)
    }

    /// A POST body's members, then the query string on top (CouchDB's
    /// `parse_body_and_query`): `keys` starts as the body's; a view then queries one key in
    /// it as `key` (`treat_single_keys_as_key`), `_all_docs` keeps it as a list.
    pub fn from_body_and_query(
        body: &Map<String, Value>,
        p: &Params,
        view: bool,
    ) -> Result<MrArgs> {
        let mut a = MrArgs {
            keys: body.get("keys").cloned(),
            ..MrArgs::default()
        };
        a.apply_object(body)?;
        if view && matches!(&a.keys, Some(Value::Array(k)) if k.len() == 1) {
            a.keys = None;
        }
        a.apply_query(p)?;
        Ok(a)
    }

    /// One object of a `queries` list over these (query-string) arguments: `keys`, `group`
    /// and `group_level` start unset, everything else as the query string set it.
    pub fn for_query_object(&self, q: &Map<String, Value>) -> Result<MrArgs> {
        let mut a = MrArgs {
            keys: None,
            group: None,
            group_level: None,
            ..self.clone()
        };
        a.apply_object(q)?;
        Ok(a)
    }

    fn apply_query(&mut self, p: &Params) -> Result<()> {
        for (k, v) in p.pairs() {
            self.apply(k, Val::Text(v))?;
        }
        Ok(())
    }

    fn apply_object(&mut self, o: &Map<String, Value>) -> Result<()> {
        for (k, v) in o {
            self.apply(k, Val::Json(v))?;
        }
        Ok(())
    }

    /// Applies one parameter (CouchDB's `parse_param`).
    pub fn apply(&mut self, k: &str, v: Val<'_>) -> Result<()> {
        match k {
            "reduce" => self.reduce = Some(parse_boolean(v)?),
            "key" => {
                let key = parse_json(v)?;
                self.start_key = Some(key.clone());
                self.end_key = Some(key);
            }
            // One key in `keys` is a `key` (the list itself stays only where the request
            // passed it beforehand: `from_query_with_keys`, `from_body_and_query`).
            "keys" => match parse_json(v)? {
                Value::Array(mut one) if one.len() == 1 => {
                    let key = one.pop();
                    self.start_key = key.clone();
                    self.end_key = key;
                }
                other => self.keys = Some(other),
            },
            "startkey" | "start_key" => self.start_key = Some(parse_json(v)?),
            "endkey" | "end_key" => self.end_key = Some(parse_json(v)?),
            "startkey_docid" | "start_key_doc_id" => self.start_key_docid = Some(to_binary(v)),
            "endkey_docid" | "end_key_doc_id" => self.end_key_docid = Some(to_binary(v)),
            "limit" => self.limit = Some(parse_pos_int(v)?),
            "stale" if is_str(v, "ok") => self.update = Update::False,
            "stale" if is_str(v, "update_after") => self.update = Update::Lazy,
            "stale" => return Err(parse_error("Invalid value for `stale`.")),
            "stable" if is_flag(v, true) || is_flag(v, false) => {}
            "stable" => return Err(parse_error("Invalid value for `stable`.")),
            "update" if is_flag(v, true) => self.update = Update::True,
            "update" if is_flag(v, false) => self.update = Update::False,
            "update" if is_str(v, "lazy") => self.update = Update::Lazy,
            "update" => return Err(parse_error("Invalid value for `update`.")),
            "descending" => self.descending = parse_boolean(v)?,
            "skip" => self.skip = parse_pos_int(v)?,
            "group" => self.group = Some(parse_boolean(v)?),
            "group_level" => self.group_level = Some(parse_pos_int(v)?),
            "inclusive_end" => self.inclusive_end = parse_boolean(v)?,
            "include_docs" => self.include_docs = parse_boolean(v)?,
            // Once asked for, these options stay on (CouchDB adds them to a list).
            "attachments" => self.attachments |= parse_boolean(v)?,
            "att_encoding_info" => self.att_encoding_info |= parse_boolean(v)?,
            "update_seq" => self.update_seq = parse_boolean(v)?,
            "conflicts" => self.conflicts = Some(parse_boolean(v)?),
            "sorted" => {
                parse_boolean(v)?;
            }
            "partition" => self.partition = Some(to_binary(v)),
            _ => {}
        }
        Ok(())
    }

    /// CouchDB's `determine_group_level`: `None` for no grouping.
    fn group_level(&self) -> Result<Option<GroupLevel>> {
        Ok(match (self.group, self.group_level) {
            (None | Some(false), None) => None,
            (Some(false), Some(l)) if l > 0 => {
                return Err(parse_error(
                    "Can't specify group=false and group_level>0 at the same time",
                ))
            }
            (Some(true), None) => Some(GroupLevel::Exact),
            (_, Some(0)) => None,
            (_, Some(l)) => Some(GroupLevel::Level(l)),
        })
    }

    /// CouchDB's `validate_args`, for a view queried as `view_type`; returns the grouping.
    pub fn validate(&self, view_type: ViewType) -> Result<Option<GroupLevel>> {
        let level = self.group_level()?;
        if view_type == ViewType::Map && self.reduce == Some(true) {
            return Err(parse_error("Reduce is invalid for map-only views."));
        }
        if view_type == ViewType::Red
            && level != Some(GroupLevel::Exact)
            && matches!(self.keys, Some(Value::Array(_)))
        {
            return Err(parse_error(
                "Multi-key fetches for reduce views must use `group=true`",
            ));
        }
        match &self.keys {
            None | Some(Value::Array(_)) => {}
            Some(_) => return Err(parse_error("`keys` must be an array of strings.")),
        }
        // A one-key list may stand beside that key as its own range (see `apply`).
        let compatible = match &self.keys {
            Some(Value::Array(k)) => match k.as_slice() {
                [] => true,
                [only] => {
                    (self.start_key.as_ref(), self.end_key.as_ref()) == (Some(only), Some(only))
                        || (self.start_key.is_none() && self.end_key.is_none())
                }
                _ => self.start_key.is_none() && self.end_key.is_none(),
            },
            _ => true,
        };
        if !compatible {
            return Err(parse_error(
                "`keys` is incompatible with `key`, `start_key` and `end_key`",
            ));
        }
        if view_type == ViewType::Map && level.is_some() {
            return Err(parse_error("Invalid use of grouping on a map view."));
        }
        if view_type == ViewType::Red && self.include_docs {
            return Err(parse_error("`include_docs` is invalid for reduce"));
        }
        if view_type == ViewType::Red && self.conflicts.is_some() {
            return Err(parse_error("`conflicts` is invalid for reduce views."));
        }
        Ok(level)
    }

    /// The keys of a multi-key query (after [`MrArgs::validate`]).
    pub fn key_list(&self) -> Option<Vec<Value>> {
        match &self.keys {
            Some(Value::Array(k)) => Some(k.clone()),
            _ => None,
        }
    }
}

/// CouchDB's `couch_mrview_util:apply_limit`: no limit given means `max`; a larger one is
/// refused.
pub fn apply_limit(limit: &mut Option<u64>, max: u64) -> Result<()> {
    match *limit {
        Some(l) if l > max => Err(parse_error(format!(
            "Limit is too large, must not exceed {max}"
        ))),
        Some(_) => Ok(()),
        None => {
            *limit = Some(max);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Result<MrArgs> {
        MrArgs::from_query(&Params::parse(Some(s)))
    }

    fn reason(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::QueryParse(r)) => r,
            Err(e) => panic!("expected a query_parse_error, got {e:?}"),
            Ok(v) => panic!("expected an error, got {v:?}"),
        }
    }

    #[test]
    fn booleans_ignore_letter_case_and_name_the_bad_value() {
        assert!(q("descending=True").unwrap().descending);
        assert!(q("include_docs=TRUE").unwrap().include_docs);
        assert!(!q("inclusive_end=False").unwrap().inclusive_end);
        assert_eq!(
            reason(q("descending=yes")),
            r#"Invalid boolean parameter: "yes""#
        );
        let body = json!({"descending": "nope"});
        assert_eq!(
            reason(MrArgs::from_body_and_query(
                body.as_object().unwrap(),
                &Params::default(),
                true
            )),
            r#"Invalid boolean parameter: "nope""#
        );
    }

    #[test]
    fn integers_as_couchdb_parses_them() {
        assert_eq!(q("limit=%2B3").unwrap().limit, Some(3));
        assert_eq!(
            reason(q("limit=abc")),
            r#"Invalid value for integer: "abc""#
        );
        assert_eq!(
            reason(q("skip=-1")),
            r#"Invalid value for positive integer: "-1""#
        );
        assert_eq!(
            reason(q("limit=1.5")),
            r#"Invalid value for integer: "1.5""#
        );
        assert_eq!(
            q("limit=99999999999999999999999").unwrap().limit,
            Some(u64::MAX)
        );
    }

    #[test]
    fn later_parameters_override_earlier_ones() {
        let a = q("key=\"a\"&startkey=\"b\"").unwrap();
        assert_eq!(
            (a.start_key, a.end_key),
            (Some(json!("b")), Some(json!("a")))
        );
        let a = q("startkey=\"b\"&key=\"a\"").unwrap();
        assert_eq!(
            (a.start_key, a.end_key),
            (Some(json!("a")), Some(json!("a")))
        );
        assert_eq!(q("limit=1&limit=2").unwrap().limit, Some(2));
    }

    #[test]
    fn doc_id_aliases() {
        let a = q("start_key_doc_id=a&end_key_doc_id=b").unwrap();
        assert_eq!(a.start_key_docid.as_deref(), Some("a"));
        assert_eq!(a.end_key_docid.as_deref(), Some("b"));
        let a = q("start_key_docid=a").unwrap();
        assert_eq!(a.start_key_docid, None, "not one of CouchDB's spellings");
    }

    #[test]
    fn query_string_wins_over_the_body() {
        let body = json!({"limit": 5, "descending": true, "keys": ["x"]});
        let a = MrArgs::from_body_and_query(
            body.as_object().unwrap(),
            &Params::parse(Some("limit=1")),
            false,
        )
        .unwrap();
        assert_eq!(a.limit, Some(1));
        assert!(a.descending);
        assert_eq!(a.keys, Some(json!(["x"])));
    }

    #[test]
    fn query_objects_win_over_the_query_string_and_reset_grouping() {
        let base = q("limit=1&skip=2&group=true&keys=[1]").unwrap();
        let o = json!({"limit": 3});
        let a = base.for_query_object(o.as_object().unwrap()).unwrap();
        assert_eq!((a.limit, a.skip, a.group, a.keys), (Some(3), 2, None, None));
    }

    #[test]
    fn stale_stable_and_update() {
        assert_eq!(q("stale=ok").unwrap().update, Update::False);
        assert_eq!(q("stale=update_after").unwrap().update, Update::Lazy);
        assert_eq!(reason(q("stale=false")), "Invalid value for `stale`.");
        assert_eq!(reason(q("stable=yes")), "Invalid value for `stable`.");
        assert_eq!(q("update=lazy").unwrap().update, Update::Lazy);
        assert_eq!(reason(q("update=True")), "Invalid value for `update`.");
        // A POST body's JSON booleans, as couch_mrview_http takes them.
        let body = json!({"stable": true, "update": false, "descending": true});
        let a = MrArgs::from_body_and_query(body.as_object().unwrap(), &Params::parse(None), true)
            .unwrap();
        assert_eq!((a.update, a.descending), (Update::False, true));
        let body = json!({"update": true, "stable": false});
        let a = MrArgs::from_body_and_query(body.as_object().unwrap(), &Params::parse(None), true)
            .unwrap();
        assert_eq!(a.update, Update::True);
        let body = json!({"stable": 1});
        let r = MrArgs::from_body_and_query(body.as_object().unwrap(), &Params::parse(None), true);
        assert_eq!(reason(r), "Invalid value for `stable`.");
    }

    #[test]
    fn validation_order_and_texts() {
        let v = |s: &str, t| reason(q(s).unwrap().validate(t));
        assert_eq!(
            v("group=false&group_level=1&reduce=true", ViewType::Map),
            "Can't specify group=false and group_level>0 at the same time"
        );
        assert_eq!(
            v("reduce=true", ViewType::Map),
            "Reduce is invalid for map-only views."
        );
        assert_eq!(
            v("keys=[1,2]", ViewType::Red),
            "Multi-key fetches for reduce views must use `group=true`"
        );
        assert_eq!(
            v("keys=1", ViewType::Map),
            "`keys` must be an array of strings."
        );
        assert_eq!(
            v("keys=[1,2]&startkey=1", ViewType::Map),
            "`keys` is incompatible with `key`, `start_key` and `end_key`"
        );
        assert!(q("keys=[]&startkey=1")
            .unwrap()
            .validate(ViewType::Map)
            .is_ok());
        assert_eq!(
            v("group_level=2", ViewType::Map),
            "Invalid use of grouping on a map view."
        );
        assert_eq!(
            v("include_docs=true", ViewType::Red),
            "`include_docs` is invalid for reduce"
        );
        assert_eq!(
            v("conflicts=false", ViewType::Red),
            "`conflicts` is invalid for reduce views."
        );
        assert_eq!(
            q("group_level=0").unwrap().validate(ViewType::Map).unwrap(),
            None
        );
    }

    #[test]
    fn one_key_in_keys_is_a_key() {
        // As a parameter, one key in `keys` sets the range; a later one moves it.
        let a = q("keys=[\"a\"]&startkey=\"b\"").unwrap();
        assert_eq!(
            (a.start_key, a.end_key, a.keys),
            (Some(json!("b")), Some(json!("a")), None)
        );
        let a = q("keys=[\"a\",\"b\"]").unwrap();
        assert_eq!(a.keys, Some(json!(["a", "b"])));
        // `_all_docs` passes its `keys` first: the list stays, beside its own range.
        let all = |s: &str| {
            let p = Params::parse(Some(s));
            let keys = p.get("keys").map(|k| serde_json::from_str(k).unwrap());
            MrArgs::from_query_with_keys(keys, &p).unwrap()
        };
        let a = all("key=\"c\"&keys=[\"a\"]");
        assert_eq!(a.keys, Some(json!(["a"])));
        assert!(a.validate(ViewType::Map).is_ok());
        assert_eq!(
            reason(all("keys=[\"a\"]&key=\"c\"").validate(ViewType::Map)),
            "`keys` is incompatible with `key`, `start_key` and `end_key`"
        );
        // A view's body: one key is a key; `_all_docs`'s keeps its list.
        let body = json!({"keys": ["b"]});
        let body = body.as_object().unwrap();
        let a = MrArgs::from_body_and_query(body, &Params::parse(None), true).unwrap();
        assert_eq!((a.keys, a.start_key), (None, Some(json!("b"))));
        let a = MrArgs::from_body_and_query(body, &Params::parse(None), false).unwrap();
        assert_eq!(
            (a.keys, a.start_key),
            (Some(json!(["b"])), Some(json!("b")))
        );
    }
}
