//! CouchDB 3.5 fidelity of security, users, sessions and attachments (issue 10), over
//! real HTTP: each test states CouchDB's exact status, headers and body for a case of its
//! test suite (users_db_test, users_db_security_test, cookie_auth_test, proxyauth_test,
//! auth_cache_test, security_validation_test, attachments_test, attachment_names_test,
//! attachment_paths_test) or of its sources (couch_users_db, chttpd_db, couch_stream).

use crate::common;

use common::{basic, Server};
use serde_json::{json, Value};

/// Fast password hashing, a fixed cookie secret, proxy authentication enabled.
const FAST: &str = "[chttpd_auth]\niterations = 1\nsecret = s3cret\n";

const CFG: &str = "/_node/_local/_config";

fn err(r: &common::Resp) -> (u16, String, String) {
    let v = r.json();
    (
        r.status,
        v["error"].as_str().unwrap_or("").to_string(),
        v["reason"].as_str().unwrap_or("").to_string(),
    )
}

fn e(status: u16, error: &str, reason: &str) -> (u16, String, String) {
    (status, error.to_string(), reason.to_string())
}

fn set_config(s: &Server, section: &str, key: &str, value: &str) {
    let r = s.put(
        &format!("{CFG}/{section}/{key}"),
        &Value::String(value.into()).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

fn add_user_in(s: &Server, db: &str, name: &str, pw: &str, roles: &[&str]) -> String {
    let doc = json!({"name": name, "password": pw, "roles": roles, "type": "user"});
    let r = s.put(&format!("/{db}/org.couchdb.user:{name}"), &doc.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["rev"].as_str().unwrap().to_string()
}

fn session_as(s: &Server, name: &str, pw: &str) -> common::Resp {
    s.anon(
        "GET",
        "/_session",
        None,
        &[("authorization", &basic(name, pw))],
    )
}

/// A request written on a socket (the harness's client follows redirects and wants UTF-8
/// bodies): status, headers with lowercase names, body bytes.
type Raw = (u16, Vec<(String, String)>, Vec<u8>);

fn send_raw(s: &Server, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let r = s.send_raw(method, path, headers, Some(body), false);
    (r.status, r.headers, r.body)
}

/// A GET as admin whose body may be binary (gzip).
fn get_binary(s: &Server, path: &str, headers: &[(&str, &str)]) -> Raw {
    let auth = basic(common::ADMIN.0, common::ADMIN.1);
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    send_raw(s, "GET", path, &all, "")
}

fn raw_json(r: &Raw) -> Value {
    serde_json::from_slice(&r.2).unwrap()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

// ---------------------------------------------------------------- _users passwords

/// couch_users_db:save_doc: `password` becomes the PBKDF2 fields (scheme, prf,
/// iterations, derived_key, salt) appended after the document's own members; `password`
/// is removed; a `null` password stays as it is.
#[test]
fn user_passwords_are_hashed_as_couchdb_stores_them() {
    let s = Server::start_with_ini(FAST);
    add_user_in(&s, "_users", "tom", "mp3", &[]);
    let doc = s.get("/_users/org.couchdb.user:tom").json();
    assert_eq!(
        keys(&doc),
        [
            "_id",
            "_rev",
            "password_scheme",
            "pbkdf2_prf",
            "salt",
            "iterations",
            "derived_key",
            "name",
            "roles",
            "type"
        ],
    );
    assert_eq!(doc["password_scheme"], "pbkdf2");
    assert_eq!(doc["pbkdf2_prf"], "sha256");
    assert_eq!(doc["iterations"], 1);
    assert_eq!(doc["derived_key"].as_str().unwrap().len(), 64);
    assert_eq!(doc["salt"].as_str().unwrap().len(), 32);
    assert_eq!(
        session_as(&s, "tom", "mp3").json()["userCtx"]["name"],
        "tom"
    );

    // a new password replaces the hash fields in place, with a new salt
    let mut changed = doc.clone();
    changed["password"] = json!("couch");
    let r = s.put("/_users/org.couchdb.user:tom", &changed.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let doc2 = s.get("/_users/org.couchdb.user:tom").json();
    assert_eq!(keys(&doc2), keys(&doc));
    assert_ne!(doc2["salt"], doc["salt"]);
    assert_eq!(session_as(&s, "tom", "mp3").status, 401);
    assert_eq!(session_as(&s, "tom", "couch").status, 200);

    // null: nothing to hash, the member stays
    let null = json!({"name": "nil", "password": null, "roles": [], "type": "user"});
    let r = s.put("/_users/org.couchdb.user:nil", &null.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let doc = s.get("/_users/org.couchdb.user:nil").json();
    assert_eq!(doc["password"], Value::Null);
    assert!(doc.get("derived_key").is_none());
}

/// couch_password_hasher (CouchDB 3.4+, `upgrade_hash_on_auth` on by default): a login
/// with a user document hashed otherwise than the settings say rewrites it under them,
/// keeping the salt (so session cookies stay valid), in the background.
#[test]
fn password_hashes_are_upgraded_on_login() {
    let s = Server::start_with_ini(FAST);
    // as an old client library writes it: PBKDF2-SHA1, 10 iterations
    // (hashlib.pbkdf2_hmac("sha1", b"pw", b"salt", 10).hex())
    let legacy = json!({
        "name": "legacy", "roles": [], "type": "user", "password_scheme": "pbkdf2",
        "iterations": 10, "derived_key": "21666cdc0723a960de8307513199d3f1071c7f22", "salt": "salt"
    });
    let r = s.put("/_users/org.couchdb.user:legacy", &legacy.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(session_as(&s, "legacy", "pw").status, 200);
    let mut upgraded = Value::Null;
    for _ in 0..200 {
        upgraded = s.get("/_users/org.couchdb.user:legacy").json();
        if upgraded["_rev"].as_str().unwrap().starts_with("2-") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        keys(&upgraded),
        [
            "_id",
            "_rev",
            "password_scheme",
            "pbkdf2_prf",
            "salt",
            "iterations",
            "derived_key",
            "name",
            "roles",
            "type"
        ],
    );
    assert_eq!(upgraded["pbkdf2_prf"], "sha256");
    assert_eq!(upgraded["iterations"], 1);
    assert_eq!(upgraded["salt"], "salt");
    assert_eq!(upgraded["derived_key"].as_str().unwrap().len(), 64);
    assert_eq!(session_as(&s, "legacy", "pw").status, 200);
    assert_eq!(session_as(&s, "legacy", "px").status, 401);
}

/// `[chttpd_auth] password_scheme = simple` stores `password_sha` (SHA-1 of password and
/// salt) as CouchDB 1.x did, and such users log in; an unknown scheme cannot hash.
#[test]
fn password_schemes() {
    let s = Server::start_with_ini(FAST);
    set_config(&s, "chttpd_auth", "password_scheme", "simple");
    add_user_in(&s, "_users", "old", "timer", &[]);
    let doc = s.get("/_users/org.couchdb.user:old").json();
    assert_eq!(
        keys(&doc),
        [
            "_id",
            "_rev",
            "password_scheme",
            "salt",
            "password_sha",
            "name",
            "roles",
            "type"
        ],
    );
    assert_eq!(doc["password_scheme"], "simple");
    assert_eq!(doc["password_sha"].as_str().unwrap().len(), 40);
    assert_eq!(
        session_as(&s, "old", "timer").json()["userCtx"]["name"],
        "old"
    );
    assert_eq!(session_as(&s, "old", "timerx").status, 401);

    set_config(&s, "chttpd_auth", "password_scheme", "bcrypt");
    let doc = json!({"name": "b", "password": "x", "roles": [], "type": "user"});
    let r = s.put("/_users/org.couchdb.user:b", &doc.to_string());
    assert_eq!(
        err(&r),
        e(
            403,
            "forbidden",
            "Server cannot hash passwords at this time."
        )
    );
}

/// users_db_test.exs "users password requirements": `password_regexp`.
#[test]
fn password_requirements() {
    let s = Server::start_with_ini(FAST);
    set_config(
        &s,
        "couch_httpd_auth",
        "password_regexp",
        r#"[{".{10,}"}, {"[A-Z]+", "Requirement 2."}, {"[a-z]+", ""}, {"\\d+", "Req 4."}, "[!\.,\(\)]+"]"#,
    );
    let save = |pw: &str| {
        let doc = json!({"name": "jchris", "password": pw, "roles": [], "type": "user"});
        s.put("/_users/org.couchdb.user:jchris", &doc.to_string())
    };
    let req = "Password does not conform to requirements.";
    assert_eq!(err(&save("funnybone")), e(400, "bad_request", req));
    assert_eq!(
        err(&save("funnnnnybone")),
        e(400, "bad_request", &format!("{req} Requirement 2."))
    );
    assert_eq!(err(&save("FUNNNNNYBONE")), e(400, "bad_request", req));
    assert_eq!(
        err(&save("funnnnnyBONE")),
        e(400, "bad_request", &format!("{req} Req 4."))
    );
    assert_eq!(err(&save("funnnnnyB0N3")), e(400, "bad_request", req));
    assert_eq!(save("funnnnnyB0N3!").status, 201);

    let server = e(
        403,
        "forbidden",
        "Server cannot hash passwords at this time.",
    );
    set_config(&s, "couch_httpd_auth", "password_regexp", r#"{{".{10,}"}}"#);
    let joe = json!({"name": "joe_erlang", "password": "querty", "roles": [], "type": "user"});
    let r = s.put("/_users/org.couchdb.user:joe_erlang", &joe.to_string());
    assert_eq!(err(&r), server);
    set_config(&s, "couch_httpd_auth", "password_regexp", r#"[{".{10,}"]"#);
    let r = s.put("/_users/org.couchdb.user:joe_erlang", &joe.to_string());
    assert_eq!(err(&r), server);
}

// ---------------------------------------------------------------- the auth "cache"

/// auth_cache_test.exs as a client sees it: credentials come from
/// `[chttpd_auth] authentication_db`, a changed password takes effect at once, a deleted
/// user cannot log in; users_db_test.exs: `_:_` is no credentials at all.
#[test]
fn credentials_follow_the_authentication_db_at_once() {
    let s = Server::start_with_ini(FAST);
    s.create_db("auth");
    set_config(&s, "chttpd_auth", "authentication_db", "auth");
    let rev = add_user_in(&s, "auth", "fdmanana", "qwerty", &["dev"]);
    let r = session_as(&s, "fdmanana", "qwerty");
    assert_eq!(
        r.json(),
        json!({
            "ok": true,
            "userCtx": {"name": "fdmanana", "roles": ["dev"]},
            "info": {
                "authentication_handlers": ["cookie", "default"],
                "authenticated": "default",
                "authentication_db": "auth"
            }
        })
    );
    let doc = json!({"_rev": rev, "name": "fdmanana", "password": "foobar", "roles": ["dev"], "type": "user"});
    let r = s.put("/auth/org.couchdb.user:fdmanana", &doc.to_string());
    assert_eq!(r.status, 201);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    assert_eq!(
        err(&session_as(&s, "fdmanana", "qwerty")),
        e(401, "unauthorized", "Name or password is incorrect.")
    );
    assert_eq!(session_as(&s, "fdmanana", "foobar").status, 200);
    let r = s.delete(&format!("/auth/org.couchdb.user:fdmanana?rev={rev}"));
    assert_eq!(r.status, 200);
    assert_eq!(session_as(&s, "fdmanana", "foobar").status, 401);
    // users of `_users` are not users any more
    add_user_in(&s, "_users", "elsewhere", "pw", &[]);
    assert_eq!(session_as(&s, "elsewhere", "pw").status, 401);

    // couch_httpd_auth:basic_name_pw
    let auth = |value: &str| s.anon("GET", "/_session", None, &[("authorization", value)]);
    assert_eq!(
        err(&auth("Bearer abc")),
        e(400, "bad_request", "Authorization header is invalid")
    );
    assert_eq!(
        err(&auth("Basic !!!")),
        e(
            400,
            "bad_request",
            "Authorization header has invalid base64 value"
        )
    );
    assert_eq!(
        auth("Basic bm9jb2xvbg==").json()["userCtx"]["name"],
        Value::Null,
        "no colon"
    );
    let r = session_as(&s, "_", "_");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["userCtx"], json!({"name": null, "roles": []}));
    assert!(r.json()["info"].get("authenticated").is_none());
}

/// cookie_auth_test.exs `test_change_admin_fun`: a server admin who also has a user
/// document gets its roles after `_admin`; users_db_test.exs: a user document in conflict
/// cannot be used to log in.
#[test]
fn admin_roles_merge_and_conflicted_user_docs() {
    let s = Server::start_with_ini(FAST);
    add_user_in(&s, "_users", "jchris", "funnybone", &["foo"]);
    set_config(&s, "admins", "jchris", "funnybone");
    let r = session_as(&s, "jchris", "funnybone");
    assert_eq!(
        r.json()["userCtx"],
        json!({"name": "jchris", "roles": ["_admin", "foo"]})
    );

    add_user_in(&s, "_users", "conflicted", "pw", &[]);
    let doc = s.get("/_users/org.couchdb.user:conflicted").json();
    let mut other = doc.clone();
    other["_rev"] = json!("2-00000000000000000000000000000001");
    other["foo"] = json!("bar");
    let r = s.put(
        "/_users/org.couchdb.user:conflicted?new_edits=false",
        &other.to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let mut second = doc.clone();
    second["foo"] = json!("baz");
    let r = s.put("/_users/org.couchdb.user:conflicted", &second.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        err(&session_as(&s, "conflicted", "pw")),
        e(
            401,
            "unauthorized",
            "User document conflicts must be resolved before the document is used for authentication purposes."
        )
    );
    set_config(&s, "chttpd_auth", "allow_conflicted_user_docs", "true");
    assert_eq!(session_as(&s, "conflicted", "pw").status, 200);
}

/// couch_httpd_auth:verify_iterations: hashes outside `min_iterations`..`max_iterations`
/// cannot log in.
#[test]
fn iteration_bounds() {
    let s = Server::start_with_ini(FAST);
    add_user_in(&s, "_users", "few", "pw", &[]);
    set_config(&s, "chttpd_auth", "min_iterations", "2");
    assert_eq!(
        err(&session_as(&s, "few", "pw")),
        e(
            403,
            "forbidden",
            "Iteration count is too low for this server"
        )
    );
    set_config(&s, "chttpd_auth", "min_iterations", "1");
    set_config(&s, "chttpd_auth", "max_iterations", "0");
    assert_eq!(
        err(&session_as(&s, "few", "pw")),
        e(
            403,
            "forbidden",
            "Iteration count is too high for this server"
        )
    );
}

/// users_db_security_test.exs: `_changes` and `_all_docs` of `_users` are for server
/// admins (401 for anyone else, database admins included); its views for database
/// admins (403 for the others, even anonymous).
#[test]
fn users_db_listings_and_views() {
    let s = Server::start_with_ini(&format!(
        "{FAST}[couchdb]\nusers_db_security_editable = true\n"
    ));
    add_user_in(&s, "_users", "tom", "mp3", &[]);
    add_user_in(&s, "_users", "speedy", "test", &[]);
    let sec = json!({"admins": {"roles": [], "names": ["speedy"]}});
    assert_eq!(s.put("/_users/_security", &sec.to_string()).status, 200);
    let ddoc = json!({"views": {"test": {"map": "function(doc) { emit(doc._id, null); }"}}});
    assert_eq!(
        s.put("/_users/_design/user_db_auth", &ddoc.to_string())
            .status,
        201
    );
    let not_admin = e(401, "unauthorized", "You are not a server admin.");
    for path in ["/_users/_changes", "/_users/_all_docs"] {
        assert_eq!(err(&s.anon("GET", path, None, &[])), not_admin);
        assert_eq!(
            err(&s.as_user(("tom", "mp3"), "GET", path, None)),
            not_admin
        );
        assert_eq!(
            err(&s.as_user(("speedy", "test"), "GET", path, None)),
            not_admin
        );
        assert_eq!(s.get(path).status, 200);
    }
    let view = "/_users/_design/user_db_auth/_view/test";
    let ddocs_only = e(
        403,
        "forbidden",
        "Only administrators can view design docs in the users database.",
    );
    assert_eq!(err(&s.anon("GET", view, None, &[])), ddocs_only);
    assert_eq!(
        err(&s.as_user(("tom", "mp3"), "GET", view, None)),
        ddocs_only
    );
    let r = s.as_user(("speedy", "test"), "GET", view, None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["total_rows"], 2);
    assert_eq!(s.get(view).json()["total_rows"], 2);
}

// ---------------------------------------------------------------- security objects

/// chttpd_db:validate_security_can_be_edited: the authentication database's security
/// object is read-only unless `[couchdb] users_db_security_editable` is changed.
#[test]
fn users_db_security_editable() {
    let s = Server::start_with_ini(FAST);
    let locked = e(
        403,
        "forbidden",
        "You can't edit the security object of the user database.",
    );
    assert_eq!(err(&s.put("/_users/_security", "{}")), locked);
    s.create_db("auth");
    set_config(&s, "chttpd_auth", "authentication_db", "auth");
    assert_eq!(err(&s.put("/auth/_security", "{}")), locked);
    assert_eq!(
        s.put("/_users/_security", "{}").status,
        200,
        "no longer the auth db"
    );
    set_config(&s, "couchdb", "users_db_security_editable", "true");
    let r = s.put("/auth/_security", r#"{"admins":{"names":["speedy"]}}"#);
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
}

/// couch_db:validate_security_object, through chttpd_security_tests: 500 with the reason;
/// `admins` first, `readers` stands for `members` when that is absent.
#[test]
fn security_object_validation() {
    let s = Server::start_with_ini(FAST);
    s.create_db("db");
    let before = s.get("/db/_security").json();
    let put = |body: &str| err(&s.put("/db/_security", body));
    let names = e(500, "error", "names must be a JSON list of strings");
    let roles = e(500, "error", "roles must be a JSON list of strings");
    assert_eq!(
        put(r#"{"admins":{"names":[123]},"members":{"roles":["foo"]}}"#),
        names
    );
    assert_eq!(put(r#"{"admins":{"roles":[1]}}"#), roles);
    assert_eq!(put(r#"{"members":{"names":"bob"}}"#), names);
    assert_eq!(put(r#"{"readers":{"roles":[true]}}"#), roles);
    assert_eq!(
        put(r#"{"admins":["admin"],"members":["role_a"]}"#),
        e(
            500,
            "error",
            "admins or members must be a JSON list of strings"
        )
    );
    assert_eq!(put(r#"["foo"]"#), e(500, "error", "bad_request"));
    assert_eq!(s.get("/db/_security").json(), before, "nothing was stored");
}

/// 1.0-era security objects: `readers` are the members; members query views.
#[test]
fn readers_are_members() {
    let s = Server::start_with_ini(FAST);
    add_user_in(&s, "_users", "bob", "bobpw", &[]);
    add_user_in(&s, "_users", "eve", "evepw", &["staff"]);
    add_user_in(&s, "_users", "mallory", "pw", &[]);
    s.create_db("db");
    let ddoc = json!({"views": {"all": {"map": "function(doc) { emit(doc._id, null); }"}}});
    assert_eq!(s.put("/db/_design/d", &ddoc.to_string()).status, 201);
    assert_eq!(s.put("/db/x", "{}").status, 201);
    let sec = r#"{"readers":{"names":["bob"],"roles":["staff"]}}"#;
    assert_eq!(s.put("/db/_security", sec).status, 200);
    assert_eq!(
        s.get("/db/_security").json(),
        serde_json::from_str::<Value>(sec).unwrap()
    );
    for (name, pw) in [("bob", "bobpw"), ("eve", "evepw")] {
        let r = s.as_user((name, pw), "GET", "/db/_design/d/_view/all", None);
        assert_eq!(r.status, 200, "{name}: {}", r.text);
        assert_eq!(r.json()["total_rows"], 1);
        assert_eq!(s.as_user((name, pw), "GET", "/db/x", None).status, 200);
    }
    assert_eq!(
        err(&s.as_user(("mallory", "pw"), "GET", "/db/_design/d/_view/all", None)),
        e(403, "forbidden", "You are not allowed to access this db.")
    );
    assert_eq!(
        err(&s.anon("GET", "/db/x", None, &[])),
        e(
            401,
            "unauthorized",
            "You are not authorized to access this db."
        )
    );
}

// ---------------------------------------------------------------- validate_doc_update

/// security_validation_test.exs: users from a non-`_users` authentication database
/// (documents without `type`), `validate_doc_update` seeing `userCtx` and `secObj`, its
/// `forbidden` (403) and `unauthorized` (401) throws.
#[test]
fn author_checks_in_validate_doc_update() {
    let s = Server::start_with_ini(FAST);
    s.create_db("authdb");
    set_config(&s, "chttpd_auth", "authentication_db", "authdb");
    for (name, pw) in [("tom", "cat"), ("jerry", "mouse"), ("spike", "dog")] {
        let doc = json!({"_id": format!("org.couchdb.user:{name}"), "type": "user", "name": name, "roles": [], "password": pw});
        let r = s.post("/authdb", &doc.to_string());
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let (tom, jerry) = (("tom", "cat"), ("jerry", "mouse"));
    s.create_db("db");
    let sec = json!({"admin_override": false, "admins": {"names": ["jerry"]}});
    assert_eq!(s.put("/db/_security", &sec.to_string()).status, 200);
    // Saving with the wrong credentials; forcing a login
    let r = s.as_user(("spike", "cat"), "POST", "/db", Some(r#"{"foo":1}"#));
    assert_eq!(
        err(&r),
        e(401, "unauthorized", "Name or password is incorrect.")
    );
    let r = s.as_user(("spike", "cat"), "GET", "/_session?basic=true", None);
    assert_eq!(r.status, 401);
    let r = s.as_user(jerry, "GET", "/_session", None).json();
    assert_eq!(r["userCtx"], json!({"name": "jerry", "roles": []}));

    let vdu = r#"function (newDoc, oldDoc, userCtx, secObj) {
        if (secObj.admin_override) {
          if (userCtx.roles.indexOf('_admin') != -1) { return true; }
        }
        if (!newDoc._deleted && !newDoc.author) {
          throw {forbidden: "Documents must have an author field"};
        }
        if (oldDoc && oldDoc.author != userCtx.name) {
          throw {unauthorized: "You are '" + userCtx.name + "', not the author '" + oldDoc.author + "' of this document. You jerk."};
        }
        if (newDoc.check_ctx && userCtx.db != "db") {
          throw {forbidden: "userCtx.db is " + userCtx.db};
        }
      }"#;
    let ddoc = json!({"_id": "_design/test", "language": "javascript", "validate_doc_update": vdu});
    // a non-admin cannot save a design document, not even as a replicator
    let r = s.as_user(tom, "POST", "/db", Some(&ddoc.to_string()));
    assert_eq!(
        err(&r),
        e(403, "forbidden", "You are not a db or server admin.")
    );
    assert_eq!(s.post("/db", &ddoc.to_string()).status, 201);
    let mut replicated = ddoc.clone();
    replicated["_rev"] = json!("2-642e20f96624a0aae6025b4dba0c6fb2");
    let r = s.as_user(
        tom,
        "PUT",
        "/db/_design/test?new_edits=false",
        Some(&replicated.to_string()),
    );
    assert_eq!(
        err(&r),
        e(403, "forbidden", "You are not a db or server admin.")
    );

    let r = s.as_user(jerry, "PUT", "/db/test_doc", Some(r#"{"foo":1}"#));
    assert_eq!(
        err(&r),
        e(403, "forbidden", "Documents must have an author field")
    );
    let r = s.as_user(
        jerry,
        "PUT",
        "/db/test_doc",
        Some(r#"{"foo":1,"author":"jerry","check_ctx":true}"#),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let mut doc = s.get("/db/test_doc").json();
    let r = s.as_user(tom, "POST", "/db", Some(r#"{"foo":1}"#));
    assert_eq!(r.status, 403);
    // as admin with admin_override, the author changes to tom
    let sec = json!({"admin_override": true, "admins": {"names": ["jerry"]}});
    assert_eq!(s.put("/db/_security", &sec.to_string()).status, 200);
    doc["author"] = json!("tom");
    let r = s.put("/db/test_doc", &doc.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    doc["_rev"] = r.json()["rev"].clone();
    doc["foo"] = json!("asdf");
    let r = s.as_user(tom, "PUT", "/db/test_doc", Some(&doc.to_string()));
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    // jerry may not delete tom's document
    let r = s.as_user(jerry, "DELETE", &format!("/db/test_doc?rev={rev}"), None);
    assert_eq!(
        err(&r),
        e(
            401,
            "unauthorized",
            "You are 'jerry', not the author 'tom' of this document. You jerk."
        )
    );
}

// ---------------------------------------------------------------- proxy authentication

/// proxyauth_test.exs, with and without `proxy_use_secret`.
#[test]
fn proxy_authentication() {
    let s = Server::start_with_ini(&format!(
        "{FAST}[chttpd]\nauthentication_handlers = {{chttpd_auth, proxy_authentication_handler}}, {{chttpd_auth, cookie_authentication_handler}}, {{chttpd_auth, default_authentication_handler}}\n"
    ));
    s.create_db("users");
    set_config(&s, "chttpd_auth", "authentication_db", "users");
    add_user_in(&s, "users", "couch@apache.org", "test", &[]);
    let r = s.anon(
        "GET",
        "/_session",
        None,
        &[("authorization", "Basic Y291Y2hAYXBhY2hlLm9yZzp0ZXN0")],
    );
    assert_eq!(r.json()["userCtx"]["name"], "couch@apache.org");
    assert_eq!(r.json()["info"]["authenticated"], "default");

    let proxied = |headers: &[(&str, &str)]| s.anon("GET", "/_session", None, headers).json();
    let user = ("X-Auth-CouchDB-UserName", "couch@apache.org");
    let roles = ("X-Auth-CouchDB-Roles", "test");
    // without a secret the headers are trusted
    let r = proxied(&[user, roles]);
    assert_eq!(
        r["userCtx"],
        json!({"name": "couch@apache.org", "roles": ["test"]})
    );
    assert_eq!(r["info"]["authenticated"], "proxy");
    assert_eq!(
        r["info"]["authentication_handlers"],
        json!(["proxy", "cookie", "default"])
    );
    // with one, the token must be its HMAC of the name (SHA-1 as in the test suite)
    set_config(&s, "chttpd_auth", "proxy_use_secret", "true");
    // hmac.new(b"s3cret", b"couch@apache.org", hashlib.sha1).hexdigest()
    let token = "408172b31523d874f362aadaefffbd98577a0736";
    let r = proxied(&[user, roles, ("X-Auth-CouchDB-Token", token)]);
    assert_eq!(r["userCtx"]["name"], "couch@apache.org", "{r}");
    let r = proxied(&[user, roles, ("X-Auth-CouchDB-Token", "0badc0de")]);
    assert_eq!(r["userCtx"], json!({"name": null, "roles": []}));
    // No token while a secret is in use: CouchDB 3.5.2's 500 `badarg` (see
    // fidelity_auth.rs, `proxy_user_ctx_with_secret_and_configured_headers`).
    let r = s.anon("GET", "/_session", None, &[user, roles]);
    assert_eq!(err(&r), e(500, "unknown_error", "badarg"));
}

// ---------------------------------------------------------------- _session

/// couch_httpd_auth:handle_session_req: bodies of other types carry no username;
/// `next`/`fail` redirect to absolute URLs; logging out.
#[test]
fn session_requests() {
    let s = Server::start_with_ini(FAST);
    let doc =
        json!({"name": "Jason Davies", "password": "3.141592653589", "roles": [], "type": "user"});
    let r = s.put("/_users/org.couchdb.user:Jason%20Davies", &doc.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.req_with(
        "POST",
        "/_session",
        Some("name=x&password=y"),
        &[("content-type", "text/plain")],
        false,
    );
    assert_eq!(
        err(&r),
        e(400, "bad_request", "request body must contain a username")
    );
    let host = s.url.trim_start_matches("http://").to_string();
    let body = json!({"username": "Jason Davies", "password": "3.141592653589"}).to_string();
    let json_type = ("content-type", "application/json");
    let r = send_raw(&s, "POST", "/_session?next=/_up", &[json_type], &body);
    assert_eq!(r.0, 302);
    assert_eq!(
        header(&r.1, "location"),
        Some(format!("http://{host}/_up").as_str())
    );
    assert_eq!(
        raw_json(&r),
        json!({"ok": true, "name": "Jason Davies", "roles": []})
    );
    assert!(header(&r.1, "set-cookie")
        .unwrap()
        .starts_with("AuthSession="));

    let wrong = json!({"username": "Jason Davies", "password": "foobar"}).to_string();
    let r = send_raw(&s, "POST", "/_session?fail=/_up", &[json_type], &wrong);
    assert_eq!(r.0, 302);
    assert_eq!(
        header(&r.1, "location"),
        Some(format!("http://{host}/_up").as_str())
    );
    assert_eq!(
        raw_json(&r),
        json!({"error": "unauthorized", "reason": "Name or password is incorrect."})
    );
    let forwarded = [
        json_type,
        ("x-forwarded-host", "couch.example:443"),
        ("x-forwarded-proto", "https"),
    ];
    let r = send_raw(&s, "POST", "/_session?next=/_up", &forwarded, &body);
    assert_eq!(
        header(&r.1, "location"),
        Some("https://couch.example:443/_up")
    );
    let r = s.anon("POST", "/_session?next=_up", Some(&body), &[]);
    assert_eq!(err(&r), e(400, "bad_request", "path must begin with a /."));

    // form-encoded, with `name`
    let r = s.req_with(
        "POST",
        "/_session",
        Some("name=Jason+Davies&password=3.141592653589"),
        &[("content-type", "application/x-www-form-urlencoded")],
        false,
    );
    assert_eq!(r.status, 200, "{}", r.text);

    let r = send_raw(&s, "DELETE", "/_session?next=/_up", &[], "");
    assert_eq!(r.0, 302);
    assert_eq!(raw_json(&r), json!({"ok": true}));
    assert_eq!(
        header(&r.1, "location"),
        Some(format!("http://{host}/_up").as_str())
    );
    assert!(header(&r.1, "set-cookie")
        .unwrap()
        .starts_with("AuthSession=;"));
}

// ---------------------------------------------------------------- attachments

const LOREM: &str = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ";

/// couch_stream's gzip (Erlang zlib, `deflateInit(Z, 8, deflated, 31, 8, default)`): the
/// digest of a compressible attachment is the md5 of those exact bytes. The expected
/// values were computed independently with Python's zlib set up the same way.
#[test]
fn compressed_attachment_digests_match_couchdb() {
    let s = Server::start();
    s.create_db("db");
    let r = s.req_with(
        "PUT",
        "/db/bin_doc6/attachment.txt",
        Some(LOREM),
        &[("content-type", "text/plain;charset=utf-8")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let stub =
        &s.get("/db/bin_doc6?att_encoding_info=true").json()["_attachments"]["attachment.txt"];
    assert_eq!(
        *stub,
        json!({
            "content_type": "text/plain;charset=utf-8",
            "revpos": 1,
            "digest": "md5-YN87iUCmrmEkr1fotlZQ+w==",
            "length": 57,
            "stub": true,
            "encoding": "gzip",
            "encoded_length": 72
        })
    );
    // inline base64 data too
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(LOREM.repeat(11));
    let doc = json!({"_attachments": {"a.txt": {"content_type": "text/plain", "data": data}}});
    assert_eq!(s.put("/db/inline", &doc.to_string()).status, 201);
    let stub = &s.get("/db/inline").json()["_attachments"]["a.txt"];
    assert_eq!(stub["digest"], "md5-oHZnUr3YBDM9jwJKVM6t2g==");

    // served as stored to clients that accept gzip, with its md5; decoded to others
    let (status, h, body) = get_binary(
        &s,
        "/db/bin_doc6/attachment.txt",
        &[("accept-encoding", "gzip")],
    );
    assert_eq!((status, body.len()), (200, 72));
    assert_eq!(
        &body[..10],
        b"\x1f\x8b\x08\0\0\0\0\0\0\x03",
        "zlib's gzip header"
    );
    assert_eq!(header(&h, "etag"), Some("\"YN87iUCmrmEkr1fotlZQ+w==\""));
    // CouchDB 3.5.2 sends no Content-MD5: the digest is in the ETag.
    assert_eq!(header(&h, "content-md5"), None);
    assert_eq!(header(&h, "content-encoding"), Some("gzip"));
    assert_eq!(header(&h, "accept-ranges"), Some("none"));
    assert_eq!(header(&h, "content-length"), Some("72"));
    assert_eq!(header(&h, "content-security-policy"), Some("sandbox"));
    let r = s.get("/db/bin_doc6/attachment.txt");
    assert_eq!(r.text, LOREM);
    assert_eq!(r.header("content-md5"), None);
    assert_eq!(r.header("accept-ranges"), Some("none"));
    // no ranges of encoded content: the whole of it
    let r = s.req_with(
        "GET",
        "/db/bin_doc6/attachment.txt",
        None,
        &[("range", "bytes=0-4")],
        true,
    );
    assert_eq!((r.status, r.text.as_str()), (200, LOREM));

    // compression_level applies
    set_config(&s, "attachments", "compression_level", "1");
    let doc = json!({"_attachments": {"a.txt": {"content_type": "text/plain", "data": data}}});
    assert_eq!(s.put("/db/level1", &doc.to_string()).status, 201);
    let stub = &s.get("/db/level1").json()["_attachments"]["a.txt"];
    assert_eq!(stub["digest"], "md5-ar0J5b7Bxf8UhICkF3GLXQ==");
}

/// attachments_test.exs: identity attachments' ETag and Content-MD5 (the upload's md5).
#[test]
fn identity_attachment_headers() {
    let s = Server::start();
    s.create_db("db");
    let doc = json!({"_attachments": {"foo.txt": {"content_type": "application/octet-stream", "data": "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="}}});
    assert_eq!(s.put("/db/bin_doc", &doc.to_string()).status, 201);
    let r = s.get("/db/bin_doc/foo.txt");
    assert_eq!(r.text, "This is a base64 encoded text");
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.header("etag"), Some("\"aEI7pOYCRBLTRQvvqYrrJQ==\""));
    assert_eq!(r.header("content-md5"), None);
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("cache-control"), Some("must-revalidate"));
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    let digest = "MntvB0NYESObxH4VRDUycw==";
    let r = s.req_with(
        "PUT",
        "/db/bin_doc8/attachment.txt",
        Some("foo bar"),
        &[
            ("content-type", "application/octet-stream"),
            ("content-md5", digest),
        ],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        s.get("/db/bin_doc8/attachment.txt").header("etag"),
        Some(format!("\"{digest}\"").as_str())
    );
    set_config(&s, "csp", "attachments_enable", "false");
    assert_eq!(
        s.get("/db/bin_doc8/attachment.txt")
            .header("content-security-policy"),
        None
    );
}

/// chttpd_db:db_attachment_req for PUT and DELETE, in the corner cases of
/// attachments_test.exs and attachment_paths_test.exs.
#[test]
fn standalone_attachment_changes() {
    let s = Server::start();
    s.create_db("db");
    let doc = json!({"_attachments": {"foo.txt": {"content_type": "application/octet-stream", "data": "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="}}});
    let r = s.put("/db/bin_doc", &doc.to_string());
    let rev = r.json()["rev"].as_str().unwrap().to_string();

    let conflict = e(409, "conflict", "Document update conflict.");
    let missing_rev = e(409, "not_found", "missing_rev");
    assert_eq!(err(&s.delete("/db/bin_doc/foo.txt")), conflict);
    assert_eq!(
        err(&s.delete("/db/bin_doc/foo.txt?rev=4-garbage")),
        missing_rev
    );
    assert_eq!(
        err(&s.delete(&format!("/db/bin_doc/notexisting.txt?rev={rev}"))),
        e(404, "not_found", "Document is missing attachment")
    );
    assert_eq!(
        err(&s.delete("/db/bin_doc/notexisting.txt")),
        e(404, "not_found", "Document is missing attachment")
    );
    assert_eq!(
        err(&s.delete("/db/nodoc/foo.txt")),
        e(404, "not_found", "missing")
    );
    assert_eq!(
        err(&s.delete(&format!("/db/bin_doc/_foo.txt?rev={rev}"))),
        e(
            400,
            "bad_request",
            "Attachment name '_foo.txt' starts with prohibited character '_'"
        )
    );
    let r = s.delete(&format!("/db/bin_doc/foo.txt?rev={rev}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("location"), None);
    assert_eq!(r.header("etag"), None);
    let rev2 = r.json()["rev"].as_str().unwrap().to_string();
    assert!(rev2.starts_with("2-"));
    assert_eq!(r.json(), json!({"ok": true, "id": "bin_doc", "rev": rev2}));

    let put = |path: &str, body: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("content-type", "text/plain;charset=utf-8")];
        headers.extend_from_slice(extra);
        s.req_with("PUT", path, Some(body), &headers, true)
    };
    assert_eq!(err(&put("/db/bin_doc/attachment.txt", "x", &[])), conflict);
    assert_eq!(
        err(&put(
            "/db/bin_doc/attachment.txt?rev=1-adae8575ecea588919bd08eb020c708e",
            "x",
            &[]
        )),
        missing_rev
    );
    assert_eq!(
        err(&put(
            "/db/bin_doc/a.txt",
            "x",
            &[("content-encoding", "deflate")]
        )),
        e(
            415,
            "bad_content_type",
            "Only gzip and identity content-encodings are supported"
        )
    );
    let r = put("/db/_nonexistant/attachment.txt", "ATTACHMENT INFO", &[]);
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (400, json!("illegal_docid"))
    );
    let r = put(
        &format!("/db/bin_doc/foo2.txt?rev={rev2}"),
        "This is no base64 encoded text",
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.header("etag"), None);
    assert!(r
        .header("location")
        .unwrap()
        .ends_with("/db/bin_doc/foo2.txt"));
    let rev3 = r.json()["rev"].as_str().unwrap().to_string();
    assert_eq!(r.json(), json!({"ok": true, "id": "bin_doc", "rev": rev3}));
    // the newest attachment comes first, as CouchDB lists them
    let r = put(&format!("/db/bin_doc/bar.txt?rev={rev3}"), "bar", &[]);
    let names = keys(&s.get("/db/bin_doc").json()["_attachments"]);
    assert_eq!(names, ["bar.txt", "foo2.txt"]);
    let rev4 = r.json()["rev"].as_str().unwrap().to_string();

    // a deleted document: re-created without a rev; an edit naming its tombstone is a
    // conflict (couch_db_updater's merge_rev_tree only lets a new, undeleted doc of
    // revision depth 1 extend a deleted one)
    assert_eq!(s.delete(&format!("/db/bin_doc?rev={rev4}")).status, 200);
    let r = put("/db/bin_doc/new.txt", "again", &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(
        r.json()["rev"].as_str().unwrap().starts_with("6-"),
        "{}",
        r.text
    );
    let live = r.json()["rev"].as_str().unwrap().to_string();
    let r = s.delete(&format!("/db/bin_doc?rev={live}"));
    let dead_rev = r.json()["rev"].as_str().unwrap().to_string();
    let r = put(&format!("/db/bin_doc/ghost.txt?rev={dead_rev}"), "boo", &[]);
    assert_eq!(err(&r), e(409, "conflict", "Document update conflict."));
    assert_eq!(err(&s.get("/db/bin_doc")), e(404, "not_found", "deleted"));

    // gzip-encoded uploads are stored as sent
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(LOREM.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let r = s.req_bytes(
        "PUT",
        "/db/gz/lorem.txt",
        gz.clone(),
        &[("content-type", "text/plain"), ("content-encoding", "gzip")],
    );
    assert_eq!(r.status, 201);
    let stub = &s.get("/db/gz?att_encoding_info=true").json()["_attachments"]["lorem.txt"];
    assert_eq!(stub["length"], gz.len());
    assert_eq!(stub["encoded_length"], gz.len());
    assert_eq!(
        s.get("/db/gz/lorem.txt").text,
        LOREM,
        "decoded for the client"
    );
}

/// attachments_test.exs COUCHDB-809: a stub needs only `stub: true`; one that names a
/// later `revpos` than the stored attachment's is missing.
#[test]
fn stubs_need_only_stub_true() {
    let s = Server::start();
    s.create_db("db");
    let doc = json!({"_attachments": {"foo.txt": {"content_type": "text/plain", "data": "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="}}});
    let r = s.put("/db/stub_doc", &doc.to_string());
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let doc = json!({"_rev": rev, "_attachments": {"foo.txt": {"stub": true}}});
    let r = s.put(&format!("/db/stub_doc?rev={rev}"), &doc.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let stub = &s.get("/db/stub_doc").json()["_attachments"]["foo.txt"];
    assert_eq!(stub["revpos"], 1);
    assert_eq!(stub["content_type"], "text/plain");
    let doc = json!({"_rev": rev, "_attachments": {"foo.txt": {"stub": true, "revpos": 10}}});
    assert_eq!(
        err(&s.put(&format!("/db/stub_doc?rev={rev}"), &doc.to_string())),
        e(
            412,
            "missing_stub",
            "Invalid attachment stub in stub_doc for foo.txt"
        )
    );
}

/// attachments_test.exs "attachment via multipart/form-data" and chttpd_db's form POST.
#[test]
fn form_data_uploads() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/form_data_doc", r#"{"_id":"form-data-doc"}"#);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let host = s.url.trim_start_matches("http://").to_string();
    let referer = format!("http://{host}");
    let body = format!(
        "------TF\r\nContent-Disposition: form-data; name=\"_rev\"\r\n\r\n{rev}\r\n------TF\r\nContent-Disposition: form-data; name=\"_attachments\"; filename=\"file.txt\"\r\nContent-Type: text/plain\r\n\r\ncontents of file.txt\r\n\r\n------TF--"
    );
    let form = |referer: Option<&str>, ctype: &str, body: &str| {
        let mut headers = vec![("content-type", ctype)];
        if let Some(r) = referer {
            headers.push(("referer", r));
        }
        s.req_with("POST", "/db/form_data_doc", Some(body), &headers, true)
    };
    let ct = "multipart/form-data; boundary=----TF";
    assert_eq!(
        err(&form(None, ct, &body)),
        e(400, "bad_request", "Referer header required.")
    );
    assert_eq!(
        err(&form(Some("http://elsewhere.example"), ct, &body)),
        e(400, "bad_request", "Referer header must match host.")
    );
    assert_eq!(
        err(&form(Some(&referer), "application/json", "{}")),
        e(
            415,
            "bad_content_type",
            "Content-Type must be multipart/form-data"
        )
    );
    let r = form(Some(&referer), ct, &body);
    assert_eq!(r.status, 201, "{}", r.text);
    let new_rev = r.json()["rev"].as_str().unwrap().to_string();
    assert!(new_rev.starts_with("2-"));
    assert_eq!(r.header("etag"), Some(format!("\"{new_rev}\"").as_str()));
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "form_data_doc", "rev": new_rev})
    );
    let doc = s.get("/db/form_data_doc").json();
    assert_eq!(doc["_attachments"]["file.txt"]["length"], 22);
    assert_eq!(doc["_id"], "form_data_doc");
    assert_eq!(
        s.get("/db/form_data_doc/file.txt").text,
        "contents of file.txt\r\n"
    );

    // a `_doc` field gives the whole document
    let doc = json!({"_rev": new_rev, "title": "from a form"});
    let body = format!(
        "--B\r\nContent-Disposition: form-data; name=\"_doc\"\r\n\r\n{doc}\r\n--B\r\nContent-Disposition: form-data; name=\"_attachments\"; filename=\"b.txt\"\r\n\r\nbee\r\n--B--"
    );
    let r = form(Some(&referer), "multipart/form-data; boundary=B", &body);
    assert_eq!(r.status, 201, "{}", r.text);
    let doc = s.get("/db/form_data_doc").json();
    assert_eq!(doc["title"], "from a form");
    assert_eq!(keys(&doc["_attachments"]), ["b.txt"]);
    assert_eq!(
        doc["_attachments"]["b.txt"]["content_type"],
        "application/octet-stream"
    );
}

/// attachment_names_test.exs and attachment_paths_test.exs: names with non-ASCII
/// characters, slashes and `%2F`, in documents and design documents of a database whose
/// name has a slash; the `_` prefix is refused everywhere.
#[test]
fn attachment_names_and_paths() {
    let s = Server::start();
    s.create_db("db");
    let good = json!({"_id": "good_doc", "_attachments": {"Kолян.txt": {"content_type": "application/octet-stream", "data": "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="}}});
    assert_eq!(s.post("/db", &good.to_string()).status, 201);
    let r = s.get("/db/good_doc/K%D0%BE%D0%BB%D1%8F%D0%BD.txt");
    assert_eq!(r.text, "This is a base64 encoded text");
    assert_eq!(r.header("etag"), Some("\"aEI7pOYCRBLTRQvvqYrrJQ==\""));
    let underscore = json!({"_id": "bin_doc2", "_attachments": {"_foo.txt": {"content_type": "text/plain", "data": "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="}}});
    let prohibited = e(
        400,
        "bad_request",
        "Attachment name '_foo.txt' starts with prohibited character '_'",
    );
    assert_eq!(
        err(&s.put("/db/bin_doc2", &underscore.to_string())),
        prohibited
    );
    assert_eq!(err(&s.post("/db", &underscore.to_string())), prohibited);
    assert_eq!(s.get("/db/bin_doc2/_foo.txt").status, 404);
    let r = s.req_with(
        "PUT",
        "/db/bin_doc3/_foo.txt",
        Some("x"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(err(&r), prohibited);

    s.create_db("db%2Fwith_slashes");
    for id in ["bin_doc", "_design/bin_doc"] {
        let doc = json!({"_id": id, "_attachments": {
            "foo/bar.txt": {"content_type": "text/plain", "data": "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="},
            "foo%2Fbaz.txt": {"content_type": "text/plain", "data": "V2UgbGlrZSBwZXJjZW50IHR3byBGLg=="}
        }});
        let r = s.post("/db%2Fwith_slashes", &doc.to_string());
        assert_eq!(r.status, 201, "{}", r.text);
        let rev = r.json()["rev"].as_str().unwrap().to_string();
        let base = format!("/db%2Fwith_slashes/{id}");
        for path in ["foo/bar.txt", "foo%2Fbar.txt"] {
            let r = s.get(&format!("{base}/{path}"));
            assert_eq!(r.status, 200, "{id} {path}");
            assert_eq!(r.text, "This is a base64 encoded text");
            assert_eq!(r.header("content-type"), Some("text/plain"));
        }
        assert_eq!(s.get(&format!("{base}/foo/baz.txt")).status, 404);
        assert_eq!(
            s.get(&format!("{base}/foo%252Fbaz.txt")).text,
            "We like percent two F."
        );
        let put = |path: &str| {
            s.req_with(
                "PUT",
                path,
                Some("This is no base64 encoded text"),
                &[("content-type", "text/plain;charset=utf-8")],
                true,
            )
        };
        assert_eq!(
            err(&put(&format!("{base}/foo/attachment.txt"))),
            e(409, "conflict", "Document update conflict.")
        );
        let r = put(&format!("{base}/foo/bar2.txt?rev={rev}"));
        assert_eq!(r.status, 201, "{}", r.text);
        let encoded_id = id.replace('/', "%2F");
        let host = s.url.trim_start_matches("http://");
        assert_eq!(
            r.header("location"),
            Some(format!("http://{host}/db/with_slashes/{encoded_id}/foo%2Fbar2.txt").as_str())
        );
        let doc = s.get(&base).json();
        let att = &doc["_attachments"]["foo/bar2.txt"];
        assert_eq!(att["content_type"], "text/plain;charset=utf-8");
        assert_eq!(att["length"], 30);
        assert!(doc["_attachments"]["foo%2Fbaz.txt"].is_object());
    }
}

/// users_db_test.exs: the users database is born with `_design/_auth` and its validate
/// function (Settee's own statement of the rules, which behaves as the native checks
/// where it is copied); an edited copy in `_users` runs like any validate function.
#[test]
fn users_db_is_born_with_the_auth_ddoc() {
    let s = Server::start_with_ini(FAST);
    let ddoc = s.get("/_users/_design/_auth").json();
    assert_eq!(ddoc["language"], "javascript");
    let source = ddoc["validate_doc_update"].as_str().unwrap().to_string();
    assert!(source.starts_with("function"), "{source}");
    // the function holds the same rules where it runs
    s.create_db("copy");
    assert_eq!(s.put("/copy/_security", "{}").status, 200);
    let copied = json!({"language": "javascript", "validate_doc_update": source});
    assert_eq!(
        s.put("/copy/_design/_auth", &copied.to_string()).status,
        201
    );
    let put = |id: &str, doc: Value, admin: bool| {
        s.req_with(
            "PUT",
            &format!("/copy/{id}"),
            Some(&doc.to_string()),
            &[("content-type", "application/json")],
            admin,
        )
    };
    assert_eq!(
        err(&put("x", json!({"type": "x"}), true)),
        e(403, "forbidden", "doc.type must be user")
    );
    assert_eq!(
        err(&put(
            "org.couchdb.user:b",
            json!({"name": "c", "type": "user", "roles": []}),
            true
        )),
        e(
            403,
            "forbidden",
            "Doc ID must be of the form org.couchdb.user:name"
        )
    );
    assert_eq!(
        err(&put(
            "org.couchdb.user:a",
            json!({"name": "a", "type": "user", "roles": ["_x"]}),
            true
        )),
        e(
            403,
            "forbidden",
            "No system roles (starting with underscore) in users db."
        )
    );
    assert_eq!(
        err(&put(
            "org.couchdb.user:a",
            json!({"name": "a", "type": "user", "roles": ["r"]}),
            false
        )),
        e(403, "forbidden", "Only _admin may set roles")
    );
    let r = put(
        "org.couchdb.user:a",
        json!({"name": "a", "type": "user", "roles": []}),
        false,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = put(
        "org.couchdb.user:_a",
        json!({"name": "_a", "type": "user", "roles": []}),
        true,
    );
    assert_eq!(
        err(&r),
        e(403, "forbidden", "Username may not start with underscore.")
    );

    // edited in _users, it runs there
    let mut edited = ddoc.clone();
    edited["validate_doc_update"] =
        json!("function(newDoc) { if (newDoc.nick === 'no') { throw({forbidden: 'custom'}); } }");
    assert_eq!(
        s.put("/_users/_design/_auth", &edited.to_string()).status,
        201
    );
    let doc = json!({"name": "n", "password": "pw", "roles": [], "type": "user", "nick": "no"});
    assert_eq!(
        err(&s.put("/_users/org.couchdb.user:n", &doc.to_string())),
        e(403, "forbidden", "custom")
    );
}
