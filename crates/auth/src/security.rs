//! Database security objects (`/{db}/_security`) and the access they grant, as CouchDB's
//! `couch_db:is_admin`/`is_member`: server admins (role `_admin`) are admins of every
//! database; a database admin is named in `admins.names` or holds a role in
//! `admins.roles`; a member is an admin, or named/holding a role in `members` — and when
//! `members` lists neither names nor roles, everyone is a member (a public database).

use crate::{Denied, UserCtx};
use serde_json::{json, Value};

/// One side (`admins` or `members`) of a security object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub names: Vec<String>,
    pub roles: Vec<String>,
}

impl Access {
    fn from_json(v: Option<&Value>) -> Access {
        let list = |field: &str| -> Vec<String> {
            v.and_then(|v| v.get(field))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        Access {
            names: list("names"),
            roles: list("roles"),
        }
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty() && self.roles.is_empty()
    }

    fn admits(&self, ctx: &UserCtx) -> bool {
        ctx.name.as_ref().is_some_and(|n| self.names.contains(n))
            || ctx.roles.iter().any(|r| self.roles.contains(r))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityObject {
    pub admins: Access,
    pub members: Access,
}

impl SecurityObject {
    /// Reads a stored security object (`readers` is the pre-1.2 name of `members`).
    pub fn from_json(v: &Value) -> SecurityObject {
        SecurityObject {
            admins: Access::from_json(v.get("admins")),
            members: Access::from_json(v.get("members").or_else(|| v.get("readers"))),
        }
    }

    pub fn is_admin(&self, ctx: &UserCtx) -> bool {
        ctx.is_server_admin() || self.admins.admits(ctx)
    }

    pub fn is_member(&self, ctx: &UserCtx) -> bool {
        self.is_admin(ctx) || self.members.is_empty() || self.members.admits(ctx)
    }

    /// Anonymous users get `unauthorized` (401), known users `forbidden` (403).
    pub fn check_admin(&self, ctx: &UserCtx) -> Result<(), Denied> {
        if self.is_admin(ctx) {
            return Ok(());
        }
        Err(denied(ctx, "You are not a db or server admin."))
    }

    pub fn check_member(&self, ctx: &UserCtx) -> Result<(), Denied> {
        if self.is_member(ctx) {
            return Ok(());
        }
        Err(match ctx.name {
            None => Denied::Unauthorized("You are not authorized to access this db.".into()),
            Some(_) => Denied::Forbidden("You are not allowed to access this db.".into()),
        })
    }
}

/// `unauthorized` for anonymous requests, `forbidden` for authenticated ones.
pub fn denied(ctx: &UserCtx, reason: &str) -> Denied {
    match ctx.name {
        None => Denied::Unauthorized(reason.into()),
        Some(_) => Denied::Forbidden(reason.into()),
    }
}

/// Checks a security object a client sends, with CouchDB's reasons (`couch_db:
/// validate_security_object/1`): an object (else `bad_request`, as `set_security/2`
/// throws); `admins`, then `members` (or, without it, the 1.0-era `readers`), each an
/// object whose `names` and `roles` are lists of strings.
pub fn validate(v: &Value) -> Result<(), String> {
    let obj = v.as_object().ok_or("bad_request")?;
    let members = obj.get("members").or_else(|| obj.get("readers"));
    for section in [obj.get("admins"), members].into_iter().flatten() {
        let s = section
            .as_object()
            .ok_or("admins or members must be a JSON list of strings")?;
        for field in ["names", "roles"] {
            let Some(list) = s.get(field) else { continue };
            if !list
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string))
            {
                return Err(format!("{field} must be a JSON list of strings"));
            }
        }
    }
    Ok(())
}

/// The security object CouchDB 3 gives new databases under `[couchdb] default_security`:
/// `admin_only` (the default, also `admin_local` on a single node) restricts everything to
/// admins; `everyone` leaves the database public.
pub fn default_for(setting: Option<&str>) -> Value {
    match setting.map(str::trim) {
        Some("everyone") => json!({}),
        _ => admin_only(),
    }
}

pub fn admin_only() -> Value {
    json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, roles: &[&str]) -> UserCtx {
        UserCtx::named(name, roles.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn public_and_restricted() {
        let anon = UserCtx::anonymous();
        let public = SecurityObject::from_json(&json!({}));
        assert!(public.is_member(&anon));
        assert!(!public.is_admin(&anon));
        let sec = SecurityObject::from_json(&json!({
            "admins": {"names": ["ann"]},
            "members": {"roles": ["staff"]}
        }));
        assert!(sec.is_admin(&user("ann", &[])));
        assert!(sec.is_member(&user("ann", &[])));
        assert!(sec.is_member(&user("bob", &["staff"])));
        assert!(!sec.is_admin(&user("bob", &["staff"])));
        assert_eq!(
            sec.check_member(&user("eve", &[])),
            Err(Denied::Forbidden(
                "You are not allowed to access this db.".into()
            ))
        );
        assert_eq!(
            sec.check_member(&anon),
            Err(Denied::Unauthorized(
                "You are not authorized to access this db.".into()
            ))
        );
        assert!(sec.is_admin(&user("root", &["_admin"])));
    }

    #[test]
    fn admin_only_default() {
        let sec = SecurityObject::from_json(&default_for(None));
        assert!(!sec.is_member(&user("bob", &["staff"])));
        assert!(sec.is_member(&user("root", &["_admin"])));
        assert_eq!(default_for(Some("everyone")), json!({}));
    }

    #[test]
    fn readers_is_the_old_members() {
        let sec = SecurityObject::from_json(&json!({"readers": {"names": ["bob"]}}));
        assert!(sec.is_member(&user("bob", &[])));
        assert!(!sec.is_member(&user("eve", &[])));
    }

    #[test]
    fn validation() {
        assert!(validate(&json!({"admins": {"names": ["a"]}})).is_ok());
        assert_eq!(
            validate(&json!({"members": {"roles": [1]}})).unwrap_err(),
            "roles must be a JSON list of strings"
        );
        assert!(validate(&json!([])).is_err());
        assert_eq!(
            validate(&json!({"readers": {"names": [1]}})).unwrap_err(),
            "names must be a JSON list of strings",
            "readers stand for members"
        );
        assert!(validate(&json!({"members": {}, "readers": {"names": [1]}})).is_ok());
        assert_eq!(
            validate(&json!({"admins": ["a"]})).unwrap_err(),
            "admins or members must be a JSON list of strings"
        );
        assert_eq!(
            validate(&json!({"admins": {"names": [1]}, "members": {"roles": [1]}})).unwrap_err(),
            "names must be a JSON list of strings",
            "admins first"
        );
    }
}
