//! CouchDB's `after_doc_read` for replicator databases (`couch_replicator_docs`): it
//! runs on every document read from `_replicator` (or `…/_replicator`), so a reader who
//! is neither an admin of the database nor the document's `owner` sees the endpoints
//! without their credentials — a URL's `user:password@` removed, an endpoint object's
//! `headers` and `auth` dropped (its `url` is left as it is, as CouchDB leaves it) — and,
//! since the body changed, a revision made up from it (same position, a new hash).
//! Design documents are shown as stored.
//!
//! The hook is the renderer (`docjson::doc_json_with`), which every read path uses; the
//! reader rides in `DocOpts::reader`, set by [`reader`] where the options are made.

use serde_json::{Map, Value};
use settee_auth::security::SecurityObject;
use settee_auth::UserCtx;
use settee_core::{Rev, RevId};
use settee_db::{Database, OpenDoc};
use std::sync::Arc;

/// A reader from whom other users' replication credentials are hidden.
#[derive(Debug, PartialEq)]
pub struct Reader {
    name: Option<String>,
}

/// Whether CouchDB treats the database as a replicator database.
fn is_replicator_db(name: &str) -> bool {
    name == crate::REPLICATOR_DB || name.ends_with("/_replicator")
}

/// The reader to hide others' credentials from, `None` when documents are shown as
/// stored (another database, or an admin of this one).
pub fn reader(db: &Database, user: &UserCtx) -> Option<Arc<Reader>> {
    if !is_replicator_db(&db.name) || user.is_server_admin() {
        return None;
    }
    if SecurityObject::from_json(&db.props().security).is_admin(user) {
        return None;
    }
    Some(Arc::new(Reader {
        name: user.name.clone(),
    }))
}

/// A document as a reader sees it when it differs from the stored one: its stored bytes
/// and the revision shown.
pub struct Shown {
    pub body: Vec<u8>,
    pub rev: Rev,
}

/// The document as `reader` sees it, or `None` if it is shown as stored.
pub fn after_read(doc: &OpenDoc, reader: &Reader) -> Option<Shown> {
    if doc.id.starts_with("_design/") {
        return None;
    }
    let (json, atts) = settee_core::split_stored(&doc.body);
    let mut body: Map<String, Value> = serde_json::from_slice(json).ok()?;
    let owner = body.get("owner");
    let owned = match (&reader.name, owner) {
        (Some(name), Some(Value::String(o))) => o == name,
        (None, Some(Value::Null)) => true,
        _ => false,
    };
    if owned {
        return None;
    }
    for field in ["source", "target"] {
        if let Some(v) = body.get_mut(field) {
            strip_credentials(v);
        }
    }
    let text = serde_json::to_vec(&body).expect("json");
    let stored = settee_core::join_stored(&text, atts);
    // The made-up revision: CouchDB's new revision id of the stripped body over the
    // revision's parent.
    let ancestry = doc.info.tree.ancestry(&doc.rev);
    let parent = match ancestry.get(1) {
        Some(id) if doc.rev.pos > 1 => Some(Rev::new(doc.rev.pos - 1, id.clone())),
        _ => None,
    };
    let id: RevId = settee_core::new_rev_id(parent.as_ref(), doc.deleted, &stored);
    Some(Shown {
        body: stored,
        rev: Rev::new(doc.rev.pos, id),
    })
}

/// CouchDB's `strip_credentials`: a URL loses its `user:password@` (only when both are
/// there), an endpoint object its `headers` and `auth`.
fn strip_credentials(v: &mut Value) {
    match v {
        Value::String(url) => {
            if let Some(stripped) = strip_userinfo(url) {
                *url = stripped;
            }
        }
        Value::Object(o) => {
            o.shift_remove("headers");
            o.shift_remove("auth");
        }
        _ => {}
    }
}

/// The first `http(s)://user:password@rest` in `url` as `http(s)://rest` (what CouchDB's
/// pattern `http(s)?://(?:[^:]+):[^@]+@(.*)$` replaces), or `None` if there is none.
fn strip_userinfo(url: &str) -> Option<String> {
    let mut from = 0;
    while let Some(at) = url[from..].find("http").map(|i| from + i) {
        from = at + 4;
        let rest = &url[at + 4..];
        let (secure, rest) = match rest.strip_prefix('s') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let Some(rest) = rest.strip_prefix("://") else {
            continue;
        };
        let user = rest.find(':').unwrap_or(rest.len());
        if user == 0 || user == rest.len() {
            continue;
        }
        let after_user = &rest[user + 1..];
        let password = after_user.find('@').unwrap_or(after_user.len());
        if password == 0 || password == after_user.len() {
            continue;
        }
        let tail = &after_user[password + 1..];
        if tail.contains('\n') {
            continue;
        }
        let scheme = if secure { "https" } else { "http" };
        return Some(format!("{}{scheme}://{tail}", &url[..at]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn urls_lose_user_and_password() {
        let cases = [
            (
                "https://foo:bar@remote_server/database",
                Some("https://remote_server/database"),
            ),
            ("http://u:p@host:5984/db", Some("http://host:5984/db")),
            ("http://host:5984/db", None),
            // A user without a password is left alone, as CouchDB's pattern leaves it.
            ("http://u@host/db", None),
            ("http://u:p:q@host/db", Some("http://host/db")),
            ("db", None),
        ];
        for (url, expected) in cases {
            assert_eq!(strip_userinfo(url).as_deref(), expected, "{url}");
        }
    }

    #[test]
    fn endpoint_objects_lose_headers_and_auth_but_keep_their_url() {
        let mut v = json!({"url": "http://u:p@h/db", "headers": {"Authorization": "Basic x"},
                           "auth": {"basic": {"username": "u", "password": "p"}}, "other": 1});
        strip_credentials(&mut v);
        assert_eq!(v, json!({"url": "http://u:p@h/db", "other": 1}));
    }
}
