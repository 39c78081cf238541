//! The rules of the authentication database (`_users`), as CouchDB applies them through
//! `couch_users_db` (password hashing before a write, who may read which document) and the
//! validation function of its `_design/_auth` document. Settee applies them natively, with
//! CouchDB's reasons: [`before_update`] on every write to a users database,
//! [`validate`] on those to a users database holding Settee's `_design/_auth`, before any
//! design document's own `validate_doc_update`.

use crate::password::PasswordHash;
use crate::password_rules::PasswordRules;
use crate::security::SecurityObject;
use crate::{Denied, UserCtx};
use serde_json::{Map, Value};

/// The authentication database.
pub const USERS_DB: &str = "_users";
/// User documents' ids are this prefix and the user name.
pub const PREFIX: &str = "org.couchdb.user:";

/// The design document an authentication database is born with, as in CouchDB (whose
/// auth cache creates it): clients and replicas see the rules as a `validate_doc_update`
/// function.
pub const AUTH_DDOC_ID: &str = "_design/_auth";

/// Settee's own JavaScript statement of the rules [`prepare_write`] applies natively, with
/// the same reasons in the same order. Settee does not run it where it is stored
/// unchanged (the native checks are the same); an edited copy runs like any other.
pub const AUTH_VALIDATE_JS: &str = r#"function (newDoc, oldDoc, userCtx, secObj) {
  // Settee: the rules of user documents (also enforced natively by the server).
  function forbid(reason) { throw ({forbidden: reason}); }
  function isAdmin() {
    if (userCtx.roles.indexOf('_admin') !== -1) { return true; }
    var admins = (secObj && secObj.admins) || {};
    if ((admins.names || []).indexOf(userCtx.name) !== -1) { return true; }
    var roles = admins.roles || [];
    return userCtx.roles.some(function (r) { return roles.indexOf(r) !== -1; });
  }
  if (newDoc._deleted === true) {
    if (isAdmin() || (oldDoc && userCtx.name === oldDoc.name)) { return; }
    forbid('Only admins may delete other user docs.');
  }
  if (newDoc.type !== 'user') { forbid('doc.type must be user'); }
  if (!newDoc.name) { forbid('doc.name is required'); }
  if (!newDoc.roles) { forbid('doc.roles must exist'); }
  if (!Array.isArray(newDoc.roles)) { forbid('doc.roles must be an array'); }
  newDoc.roles.forEach(function (r) {
    if (typeof r !== 'string') { forbid('doc.roles can only contain strings'); }
  });
  if (newDoc._id !== 'org.couchdb.user:' + newDoc.name) {
    forbid('Doc ID must be of the form org.couchdb.user:name');
  }
  if (oldDoc && oldDoc.name !== newDoc.name) { forbid('Usernames can not be changed.'); }
  if (newDoc.password_sha && !newDoc.salt) {
    forbid('Users with password_sha must have a salt.See /_utils/script/couch.js for example code.');
  }
  var scheme = newDoc.password_scheme;
  if (scheme && ['simple', 'pbkdf2', 'bcrypt'].indexOf(scheme) === -1) {
    forbid('Password scheme `' + scheme + '` not supported.');
  }
  if (scheme === 'pbkdf2') {
    if (typeof newDoc.iterations !== 'number') { forbid('iterations must be a number.'); }
    if (typeof newDoc.derived_key !== 'string') { forbid('derived_key must be a string.'); }
  }
  if (!isAdmin()) {
    if (oldDoc) {
      if (userCtx.name !== newDoc.name) { forbid('You may only update your own user document.'); }
      var was = JSON.stringify(oldDoc.roles.slice().sort());
      var is = JSON.stringify(newDoc.roles.slice().sort());
      if (was !== is) { forbid('Only _admin may edit roles'); }
    } else if (newDoc.roles.length > 0) {
      forbid('Only _admin may set roles');
    }
  }
  newDoc.roles.forEach(function (r) {
    if (r.charAt(0) === '_') { forbid('No system roles (starting with underscore) in users db.'); }
  });
  var name = '' + newDoc.name;
  if (name.charAt(0) === '_') { forbid('Username may not start with underscore.'); }
  if (name.indexOf(':') !== -1) { forbid('Character `:` is not allowed in usernames.'); }
}"#;

/// What an authentication database's [`AUTH_DDOC_ID`] must become, as CouchDB's auth
/// cache ensures it when it starts watching the database: `existing` (its JSON, `None`
/// when there is none) with its validate function restored, or a new one (a JavaScript
/// design document holding only the function); `None` when it holds the function
/// already.
pub fn auth_ddoc_update(existing: Option<Map<String, Value>>) -> Option<Map<String, Value>> {
    let validate = Value::from(AUTH_VALIDATE_JS);
    match existing {
        Some(body) if body.get("validate_doc_update") == Some(&validate) => None,
        Some(mut body) => {
            body.insert("validate_doc_update".into(), validate);
            Some(body)
        }
        None => Some(Map::from_iter([
            ("language".into(), "javascript".into()),
            ("validate_doc_update".into(), validate),
        ])),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsersError {
    /// A user who is not an admin touched another user's document (CouchDB answers 404).
    NotFound,
    Denied(Denied),
}

fn forbidden(reason: impl Into<String>) -> UsersError {
    UsersError::Denied(Denied::Forbidden(reason.into()))
}

/// The user name a document id stands for.
pub fn doc_name(id: &str) -> Option<&str> {
    id.strip_prefix(PREFIX)
}

/// A write about to happen to `_users`.
pub struct UserWrite<'a> {
    pub id: &'a str,
    pub deleted: bool,
    /// The revision being replaced, if any (absent for new and re-created documents).
    pub old: Option<&'a Map<String, Value>>,
    pub ctx: &'a UserCtx,
    pub sec: &'a SecurityObject,
    /// How a new `password` is checked and hashed.
    pub rules: &'a PasswordRules,
}

/// What CouchDB's `couch_users_db:before_doc_update/3` does to every write to a users
/// database, whatever its design documents: a user who is not an admin may write only
/// their own document (another's is a 404; anonymous users may write any, to sign up), and
/// a plaintext `password` is replaced by its hash (the plaintext is never stored). A
/// `null` password is left as it is. Design and local documents are not user documents;
/// the caller applies the ordinary rules to them.
pub fn before_update(w: &UserWrite, body: &mut Map<String, Value>) -> Result<(), UsersError> {
    let admin = w.sec.is_admin(w.ctx);
    if !admin && w.ctx.name.is_some() && w.ctx.name.as_deref() != doc_name(w.id) {
        return Err(UsersError::NotFound);
    }
    if let Some(Value::String(pw)) = body.get("password") {
        // `preserve_salt: true` (a hash upgrade) keeps the document's salt.
        let keep = body.get("preserve_salt") == Some(&Value::Bool(true));
        let salt = body.get("salt").and_then(Value::as_str).filter(|_| keep);
        let hash = w
            .rules
            .hash_with_salt(pw, salt)
            .map_err(UsersError::Denied)?;
        set_hash(body, &hash);
    }
    Ok(())
}

/// The rules of the authentication database's `_design/_auth` validation function
/// ([`AUTH_VALIDATE_JS`]), natively, with CouchDB's reasons in its order. CouchDB applies
/// them only where that design document exists (its auth cache creates it in the
/// database it watches); a users database without one takes any document.
pub fn validate(w: &UserWrite, body: &Map<String, Value>) -> Result<(), UsersError> {
    let admin = w.sec.is_admin(w.ctx);
    if w.deleted {
        let old_name = w.old.and_then(|o| o.get("name")).and_then(Value::as_str);
        if admin || (w.ctx.name.is_some() && w.ctx.name.as_deref() == old_name) {
            return Ok(());
        }
        return Err(forbidden("Only admins may delete other user docs."));
    }
    validate_shape(w.id, body, w.old)?;
    if !admin {
        validate_roles_change(w.ctx, body, w.old)?;
    }
    validate_names(body)
}

/// [`before_update`] then [`validate`]: a write to a users database with its
/// `_design/_auth`.
pub fn prepare_write(w: &UserWrite, body: &mut Map<String, Value>) -> Result<(), UsersError> {
    before_update(w, body)?;
    validate(w, body)
}

/// The members a new hash replaces (`couch_users_db:remove_password_fields/1`).
const PASSWORD_FIELDS: [&str; 8] = [
    "derived_key",
    "iterations",
    "password",
    "password_scheme",
    "password_sha",
    "preserve_salt",
    "pbkdf2_prf",
    "salt",
];

/// Stores a hash in a user document as CouchDB 3.5's `couch_users_db:save_doc/1` does:
/// every password member (`password`, `preserve_salt` and the old hash's) goes, and the
/// new hash's members come first, in CouchDB's order.
pub fn set_hash(body: &mut Map<String, Value>, hash: &PasswordHash) {
    let rest = std::mem::take(body);
    body.extend(hash.user_doc_fields());
    body.extend(
        rest.into_iter()
            .filter(|(k, _)| !PASSWORD_FIELDS.contains(&k.as_str())),
    );
}

/// A document's `roles` (its strings; none if it has no list).
pub fn roles(doc: &Map<String, Value>) -> Vec<String> {
    doc.get("roles")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The name as JavaScript's `'' + name` would print it, for the id check.
fn name_text(name: &Value) -> String {
    match name {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(_) => true,
    }
}

fn validate_shape(
    id: &str,
    doc: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Result<(), UsersError> {
    if doc.get("type").and_then(Value::as_str) != Some("user") {
        return Err(forbidden("doc.type must be user"));
    }
    if !truthy(doc.get("name")) {
        return Err(forbidden("doc.name is required"));
    }
    if !truthy(doc.get("roles")) {
        return Err(forbidden("doc.roles must exist"));
    }
    let Some(roles) = doc.get("roles").and_then(Value::as_array) else {
        return Err(forbidden("doc.roles must be an array"));
    };
    if !roles.iter().all(Value::is_string) {
        return Err(forbidden("doc.roles can only contain strings"));
    }
    if id != format!("{PREFIX}{}", name_text(&doc["name"])) {
        return Err(forbidden(
            "Doc ID must be of the form org.couchdb.user:name",
        ));
    }
    if old.is_some_and(|o| o.get("name") != doc.get("name")) {
        return Err(forbidden("Usernames can not be changed."));
    }
    if truthy(doc.get("password_sha")) && !truthy(doc.get("salt")) {
        return Err(forbidden(
            "Users with password_sha must have a salt.See /_utils/script/couch.js for example code.",
        ));
    }
    validate_scheme(doc)
}

fn validate_scheme(doc: &Map<String, Value>) -> Result<(), UsersError> {
    let scheme = doc.get("password_scheme");
    if truthy(scheme) {
        let s = scheme.and_then(Value::as_str).unwrap_or("");
        if !["simple", "pbkdf2", "bcrypt"].contains(&s) {
            return Err(forbidden(format!(
                "Password scheme `{}` not supported.",
                scheme.map(name_text).unwrap_or_default()
            )));
        }
    }
    if scheme.and_then(Value::as_str) == Some("pbkdf2") {
        if !doc.get("iterations").is_some_and(Value::is_number) {
            return Err(forbidden("iterations must be a number."));
        }
        if !doc.get("derived_key").is_some_and(Value::is_string) {
            return Err(forbidden("derived_key must be a string."));
        }
    }
    Ok(())
}

fn validate_roles_change(
    ctx: &UserCtx,
    doc: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Result<(), UsersError> {
    let mut new_roles = roles(doc);
    match old {
        Some(old) => {
            if ctx.name.as_ref().map(|n| Value::String(n.clone())).as_ref() != doc.get("name") {
                return Err(forbidden("You may only update your own user document."));
            }
            let mut old_roles = roles(old);
            old_roles.sort();
            new_roles.sort();
            if old_roles != new_roles {
                return Err(forbidden("Only _admin may edit roles"));
            }
            Ok(())
        }
        None if !new_roles.is_empty() => Err(forbidden("Only _admin may set roles")),
        None => Ok(()),
    }
}

fn validate_names(doc: &Map<String, Value>) -> Result<(), UsersError> {
    if roles(doc).iter().any(|r| r.starts_with('_')) {
        return Err(forbidden(
            "No system roles (starting with underscore) in users db.",
        ));
    }
    let name = name_text(&doc["name"]);
    if name.starts_with('_') {
        return Err(forbidden("Username may not start with underscore."));
    }
    if name.contains(':') {
        return Err(forbidden("Character `:` is not allowed in usernames."));
    }
    Ok(())
}

/// What a reader may see of a `_users` document: admins and the user see it whole;
/// others see only `public_fields` (`[chttpd_auth] public_fields`), and nothing (404) when
/// none of them is set. Design documents are for admins only.
pub fn filter_read(
    id: &str,
    body: Map<String, Value>,
    ctx: &UserCtx,
    sec: &SecurityObject,
    public_fields: &[&str],
) -> Result<Map<String, Value>, UsersError> {
    let admin = sec.is_admin(ctx);
    if id.starts_with("_design/") {
        if admin {
            return Ok(body);
        }
        return Err(forbidden(
            "Only administrators can view design docs in the users database.",
        ));
    }
    if admin || (ctx.name.is_some() && ctx.name.as_deref() == doc_name(id)) {
        return Ok(body);
    }
    let kept: Map<String, Value> = body
        .into_iter()
        .filter(|(k, _)| public_fields.contains(&k.as_str()))
        .collect();
    if kept.is_empty() {
        return Err(UsersError::NotFound);
    }
    Ok(kept)
}

/// A user as authentication needs it: roles and password hash (CouchDB looks at neither
/// `type` nor anything else: the validation of writes keeps user documents well formed).
/// `None` when the document has no usable hash.
pub fn credentials(doc: &Map<String, Value>) -> Option<(Vec<String>, PasswordHash)> {
    Some((roles(doc), PasswordHash::from_user_doc(doc)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!(),
        }
    }

    fn write(
        id: &str,
        body: Value,
        old: Option<Value>,
        ctx: &UserCtx,
    ) -> Result<Map<String, Value>, UsersError> {
        let old = old.map(obj);
        let sec = SecurityObject::default();
        let rules = PasswordRules {
            iterations: 5,
            ..PasswordRules::default()
        };
        let w = UserWrite {
            id,
            deleted: false,
            old: old.as_ref(),
            ctx,
            sec: &sec,
            rules: &rules,
        };
        let mut b = obj(body);
        prepare_write(&w, &mut b).map(|()| b)
    }

    fn user_doc(name: &str, roles: &[&str]) -> Value {
        json!({"_id": format!("{PREFIX}{name}"), "name": name, "type": "user", "roles": roles, "password": "pw"})
    }

    #[test]
    fn signup_hashes_the_password() {
        let doc = write(
            "org.couchdb.user:bob",
            user_doc("bob", &[]),
            None,
            &UserCtx::anonymous(),
        )
        .unwrap();
        assert!(doc.get("password").is_none());
        let (roles, hash) = credentials(&doc).unwrap();
        assert!(roles.is_empty());
        assert!(hash.verify("pw"));
        assert_eq!(doc["password_scheme"], "pbkdf2");
        let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "password_scheme",
                "pbkdf2_prf",
                "salt",
                "iterations",
                "derived_key",
                "_id",
                "name",
                "type",
                "roles",
            ],
            "hash fields come first (CouchDB 3.5.2), the others keep their order, password goes"
        );
        let again = write(
            "org.couchdb.user:bob",
            Value::Object(doc.clone())
                .as_object()
                .map(|d| {
                    let mut d = d.clone();
                    d.insert("password".into(), "new".into());
                    Value::Object(d)
                })
                .unwrap(),
            None,
            &UserCtx::anonymous(),
        )
        .unwrap();
        let keys2: Vec<&str> = again.keys().map(String::as_str).collect();
        assert_eq!(keys2, keys, "the old hash fields are replaced");
        assert_ne!(again["salt"], doc["salt"], "a new password gets a new salt");
        let mut keep = again.clone();
        keep.insert("password".into(), "third".into());
        keep.insert("preserve_salt".into(), true.into());
        let kept = write(
            "org.couchdb.user:bob",
            Value::Object(keep),
            None,
            &UserCtx::anonymous(),
        )
        .unwrap();
        assert_eq!(kept["salt"], again["salt"], "preserve_salt keeps it");
        assert!(kept.get("preserve_salt").is_none());
        assert!(credentials(&kept).unwrap().1.verify("third"));
        let null = json!({"_id": "org.couchdb.user:bob", "name": "bob", "type": "user", "roles": [], "password": null});
        let kept = write("org.couchdb.user:bob", null, None, &UserCtx::anonymous()).unwrap();
        assert_eq!(
            kept["password"],
            Value::Null,
            "a null password is left alone"
        );
    }

    #[test]
    fn rules() {
        let anon = UserCtx::anonymous();
        let bob = UserCtx::named("bob", vec![]);
        let admin = UserCtx::named("root", vec!["_admin".into()]);
        let err = |r: Result<Map<String, Value>, UsersError>| match r.unwrap_err() {
            UsersError::Denied(Denied::Forbidden(m)) => m,
            e => panic!("{e:?}"),
        };
        let id = "org.couchdb.user:bob";
        assert_eq!(
            err(write(id, user_doc("bob", &["boss"]), None, &anon)),
            "Only _admin may set roles"
        );
        assert!(write(id, user_doc("bob", &["boss"]), None, &admin).is_ok());
        assert_eq!(
            err(write(id, user_doc("bob", &["_x"]), None, &admin)),
            "No system roles (starting with underscore) in users db."
        );
        assert_eq!(
            err(write(id, json!({"name": "bob", "roles": []}), None, &anon)),
            "doc.type must be user"
        );
        assert_eq!(
            err(write(
                "org.couchdb.user:bo",
                user_doc("bob", &[]),
                None,
                &anon
            )),
            "Doc ID must be of the form org.couchdb.user:name"
        );
        let old = user_doc("bob", &["a"]);
        assert_eq!(
            err(write(
                id,
                user_doc("bob", &["a", "b"]),
                Some(old.clone()),
                &bob
            )),
            "Only _admin may edit roles"
        );
        assert!(write(id, user_doc("bob", &["a"]), Some(old.clone()), &bob).is_ok());
        assert_eq!(
            write(
                id,
                user_doc("bob", &["a"]),
                Some(old),
                &UserCtx::named("eve", vec![])
            ),
            Err(UsersError::NotFound)
        );
        assert_eq!(
            err(write(
                "org.couchdb.user:_x",
                user_doc("_x", &[]),
                None,
                &anon
            )),
            "Username may not start with underscore."
        );
    }

    #[test]
    fn reads() {
        let sec = SecurityObject::default();
        let body = obj(json!({"name": "bob", "type": "user", "roles": []}));
        let id = "org.couchdb.user:bob";
        let bob = UserCtx::named("bob", vec![]);
        let eve = UserCtx::named("eve", vec![]);
        assert!(filter_read(id, body.clone(), &bob, &sec, &[]).is_ok());
        assert_eq!(
            filter_read(id, body.clone(), &eve, &sec, &[]),
            Err(UsersError::NotFound)
        );
        let seen = filter_read(id, body, &eve, &sec, &["name"]).unwrap();
        assert_eq!(Value::Object(seen), json!({"name": "bob"}));
    }

    #[test]
    fn the_auth_design_document_gets_its_validate_function_back() {
        let fresh = auth_ddoc_update(None).unwrap();
        assert_eq!(
            Value::Object(fresh.clone()),
            json!({"language": "javascript", "validate_doc_update": AUTH_VALIDATE_JS})
        );
        assert_eq!(auth_ddoc_update(Some(fresh)), None);
        let edited = json!({"_id": AUTH_DDOC_ID, "validate_doc_update": "function() {}",
                            "views": {}});
        let Value::Object(edited) = edited else {
            unreachable!()
        };
        let back = auth_ddoc_update(Some(edited)).unwrap();
        assert_eq!(
            Value::Object(back),
            json!({"_id": AUTH_DDOC_ID, "validate_doc_update": AUTH_VALIDATE_JS, "views": {}})
        );
    }
}
