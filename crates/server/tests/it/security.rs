//! Security over real HTTP: no admin party, users in `_users`, per-database security
//! objects, sessions, JWT, proxy authentication, lockout and `validate_doc_update`.

use crate::common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::{basic, Server};
use serde_json::{json, Value};
use settee_auth::cookie::{self, HashAlg};

/// Fast password hashing for tests, and a fixed cookie secret.
const FAST: &str = "[chttpd_auth]\niterations = 1000\nsecret = s3cret\n";

const BOB: (&str, &str) = ("bob", "bobpw");
const EVE: (&str, &str) = ("eve", "evepw");

fn add_user(s: &Server, (name, pw): (&str, &str), roles: &[&str]) {
    s.add_user(name, pw, roles);
}

fn err(r: &common::Resp) -> (u16, String, String) {
    let v = r.json();
    (
        r.status,
        v["error"].as_str().unwrap_or("").to_string(),
        v["reason"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn no_admin_party() {
    let s = Server::start();
    s.create_db("db");
    s.put("/db/secret", r#"{"code":"swordfish"}"#);
    assert_eq!(s.anon("GET", "/", None, &[]).status, 200);
    assert_eq!(s.anon("GET", "/_up", None, &[]).status, 200);
    assert_eq!(
        err(&s.anon("GET", "/db", None, &[])),
        (
            401,
            "unauthorized".into(),
            "You are not authorized to access this db.".into()
        )
    );
    assert_eq!(
        err(&s.anon("GET", "/_all_dbs", None, &[])),
        (
            401,
            "unauthorized".into(),
            "You are not a server admin.".into()
        )
    );
    assert_eq!(s.anon("PUT", "/newdb", None, &[]).status, 401);
    let me = s.anon("GET", "/_session", None, &[]).json();
    assert_eq!(me["userCtx"], json!({"name": null, "roles": []}));
    assert_eq!(
        me["info"]["authentication_handlers"],
        json!(["cookie", "default"])
    );
    assert!(me["info"].get("authenticated").is_none());
    // wrong admin password
    let r = s.as_user(("admin", "nope"), "GET", "/db", None);
    assert_eq!(
        err(&r),
        (
            401,
            "unauthorized".into(),
            "Name or password is incorrect.".into()
        )
    );
    // no WWW-Authenticate unless asked for (it makes browsers prompt)
    assert!(r.header("www-authenticate").is_none());
    let r = s.anon(
        "GET",
        "/db",
        None,
        &[("x-couchdb-www-authenticate", "Cookie")],
    );
    assert_eq!(r.header("www-authenticate"), Some("Cookie"));
}

/// Every route of an admin-only database refuses an anonymous client, and none returns
/// the document's content.
#[test]
fn no_route_leaks_an_admin_only_database() {
    let s = Server::start();
    s.create_db("db");
    s.put("/db/secret", r#"{"code":"swordfish"}"#);
    s.put(
        "/db/_design/d",
        r#"{"views":{"v":{"map":"function(d){emit(d.code, d.code)}"}}}"#,
    );
    s.put("/db/_local/l", r#"{"code":"swordfish"}"#);
    let gets = [
        "/db",
        "/db/secret",
        "/db/secret?revs=true&open_revs=all",
        "/db/_local/l",
        "/db/_all_docs?include_docs=true",
        "/db/_design_docs",
        "/db/_local_docs",
        "/db/_changes?include_docs=true",
        "/db/_changes?feed=longpoll&include_docs=true&since=0",
        "/db/_design/d",
        "/db/_design/d/_view/v",
        "/db/_design/d/_info",
        "/db/_security",
        "/db/_revs_limit",
        "/db/secret/att",
        "/_all_dbs",
        "/_dbs_info",
        "/_active_tasks",
        "/_db_updates",
    ];
    for path in gets {
        let r = s.anon("GET", path, None, &[]);
        assert!(r.status == 401, "GET {path}: {} {}", r.status, r.text);
        assert!(
            !r.text.contains("swordfish"),
            "GET {path} leaked: {}",
            r.text
        );
    }
    let posts = [
        ("/db/_all_docs", r#"{"keys":["secret"]}"#),
        ("/db/_bulk_get", r#"{"docs":[{"id":"secret"}]}"#),
        ("/db/_revs_diff", r#"{"secret":["1-x"]}"#),
        ("/db/_missing_revs", r#"{"secret":["1-x"]}"#),
        ("/db/_design/d/_view/v", r#"{"keys":["swordfish"]}"#),
        ("/db/_design/d/_view/v/queries", r#"{"queries":[{}]}"#),
        ("/db/_all_docs/queries", r#"{"queries":[{}]}"#),
        ("/db/_changes", r#"{"doc_ids":["secret"]}"#),
        ("/db/_temp_view", r#"{"map":"function(d){emit(d.code)}"}"#),
        ("/db/_bulk_docs", r#"{"docs":[{"_id":"x"}]}"#),
        ("/db", r#"{"_id":"y"}"#),
        ("/db/_compact", ""),
        ("/db/_view_cleanup", ""),
        ("/db/_purge", r#"{"secret":["1-x"]}"#),
        ("/db/_ensure_full_commit", ""),
        ("/_dbs_info", r#"{"keys":["db"]}"#),
    ];
    for (path, body) in posts {
        let r = s.anon("POST", path, Some(body), &[]);
        assert_eq!(r.status, 401, "POST {path}: {}", r.text);
        assert!(
            !r.text.contains("swordfish"),
            "POST {path} leaked: {}",
            r.text
        );
    }
    for (method, path) in [
        ("PUT", "/db/x"),
        ("PUT", "/db/_security"),
        ("PUT", "/db/_local/x"),
        ("DELETE", "/db/secret"),
        ("DELETE", "/db"),
    ] {
        let r = s.anon(method, path, Some("{}"), &[]);
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
    }
    // nothing was written or lost
    assert_eq!(s.get("/db").json()["doc_count"], 2);
}

#[test]
fn members_and_db_admins() {
    let s = Server::start_with_ini(FAST);
    add_user(&s, BOB, &["staff"]);
    add_user(&s, EVE, &[]);
    add_user(&s, ("ann", "annpw"), &[]);
    s.create_db("db");
    // the user document holds a hash, never the password
    let doc = s.get("/_users/org.couchdb.user:bob").json();
    assert!(doc.get("password").is_none(), "{doc}");
    assert_eq!(doc["password_scheme"], "pbkdf2");
    assert_eq!(doc["iterations"], 1000);
    assert!(!s.get("/_users/org.couchdb.user:bob").text.contains("bobpw"));

    // new databases are admin-only (CouchDB 3's default_security)
    assert_eq!(
        err(&s.as_user(BOB, "GET", "/db", None)),
        (
            403,
            "forbidden".into(),
            "You are not allowed to access this db.".into()
        )
    );
    let sec = json!({"admins": {"names": ["ann"], "roles": []}, "members": {"names": [], "roles": ["staff"]}});
    assert_eq!(s.put("/db/_security", &sec.to_string()).status, 200);

    // a member reads and writes documents, but not design documents or the security object
    assert_eq!(s.as_user(BOB, "GET", "/db", None).status, 200);
    let r = s.as_user(BOB, "PUT", "/db/doc", Some(r#"{"a":1}"#));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.as_user(BOB, "GET", "/db/doc", None).json()["a"], 1);
    assert_eq!(
        s.as_user(BOB, "GET", "/db/_all_docs", None).json()["total_rows"],
        1
    );
    assert_eq!(
        s.as_user(BOB, "GET", "/db/_changes", None).json()["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        err(&s.as_user(BOB, "PUT", "/db/_design/x", Some("{}"))),
        (
            403,
            "forbidden".into(),
            "You are not a db or server admin.".into()
        )
    );
    let r = s.as_user(
        BOB,
        "POST",
        "/db/_bulk_docs",
        Some(r#"{"docs":[{"_id":"ok1"},{"_id":"_design/y"}]}"#),
    );
    let rows = r.json();
    assert_eq!(rows[0]["ok"], true);
    assert_eq!(rows[1]["error"], "forbidden");
    assert_eq!(rows[1]["id"], "_design/y");
    assert_eq!(
        s.as_user(BOB, "PUT", "/db/_security", Some("{}")).status,
        403
    );
    // CouchDB's require_db_admin / require_admin: a 401 even for a logged-in user
    assert_eq!(
        err(&s.as_user(BOB, "POST", "/db/_compact", Some(""))),
        (
            401,
            "unauthorized".into(),
            "You are not a server or db admin.".into()
        )
    );
    assert_eq!(s.as_user(BOB, "DELETE", "/db", None).status, 401);
    assert_eq!(s.as_user(BOB, "GET", "/_all_dbs", None).status, 401);

    // a db admin writes design documents and the security object, but cannot delete
    let ann = ("ann", "annpw");
    assert_eq!(
        s.as_user(ann, "PUT", "/db/_design/x", Some("{}")).status,
        201
    );
    assert_eq!(s.as_user(ann, "POST", "/db/_compact", Some("")).status, 202);
    assert_eq!(s.as_user(ann, "DELETE", "/db", None).status, 401);

    // a user outside the object gets nothing, on any route
    for path in [
        "/db",
        "/db/doc",
        "/db/_all_docs",
        "/db/_changes",
        "/db/_design/x",
    ] {
        assert_eq!(s.as_user(EVE, "GET", path, None).status, 403, "{path}");
    }
    assert_eq!(
        s.as_user(
            EVE,
            "POST",
            "/db/_bulk_get",
            Some(r#"{"docs":[{"id":"doc"}]}"#)
        )
        .status,
        403
    );
    assert_eq!(
        s.as_user(EVE, "POST", "/db/_revs_diff", Some(r#"{"doc":["1-a"]}"#))
            .status,
        403
    );
    // a public database (empty members) lets everyone read and write documents
    assert_eq!(s.put("/db/_security", "{}").status, 200);
    assert_eq!(s.anon("GET", "/db/doc", None, &[]).status, 200);
    assert_eq!(
        s.anon("PUT", "/db/anon", Some("{}"), &[]).status,
        201,
        "anonymous writes to a public db"
    );
    assert_eq!(s.anon("PUT", "/db/_design/z", Some("{}"), &[]).status, 401);
}

#[test]
fn users_database_rules() {
    let s = Server::start_with_ini(&format!(
        "{FAST}[couchdb]\nusers_db_security_editable = false\n"
    ));
    assert_eq!(
        err(&s.put("/_users/_security", "{}")),
        (
            403,
            "forbidden".into(),
            "You can't edit the security object of the user database.".into()
        )
    );
    // admin-only by default: no anonymous sign-up
    let signup = json!({"_id": "org.couchdb.user:bob", "name": "bob", "password": "bobpw", "roles": [], "type": "user"});
    assert_eq!(
        s.anon(
            "PUT",
            "/_users/org.couchdb.user:bob",
            Some(&signup.to_string()),
            &[]
        )
        .status,
        401
    );

    let s = Server::start_with_ini(&format!(
        "{FAST}[couchdb]\nusers_db_security_editable = true\n"
    ));
    assert_eq!(s.put("/_users/_security", "{}").status, 200);
    // open sign-up, as CouchDB with a public _users
    let path = "/_users/org.couchdb.user:bob";
    let r = s.anon("PUT", path, Some(&signup.to_string()), &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    let mut with_roles = signup.clone();
    with_roles["_id"] = json!("org.couchdb.user:mal");
    with_roles["name"] = json!("mal");
    with_roles["roles"] = json!(["boss"]);
    assert_eq!(
        err(&s.anon(
            "PUT",
            "/_users/org.couchdb.user:mal",
            Some(&with_roles.to_string()),
            &[]
        )),
        (403, "forbidden".into(), "Only _admin may set roles".into())
    );
    let bad = json!({"name": "x", "roles": [], "type": "admin"});
    assert_eq!(
        err(&s.anon(
            "PUT",
            "/_users/org.couchdb.user:x",
            Some(&bad.to_string()),
            &[]
        ))
        .2,
        "doc.type must be user"
    );
    add_user(&s, EVE, &[]);
    // users read their own document and no one else's
    let own = s.as_user(BOB, "GET", path, None);
    assert_eq!(own.status, 200);
    assert!(own.json().get("derived_key").is_some());
    assert_eq!(s.as_user(EVE, "GET", path, None).status, 404);
    assert_eq!(s.anon("GET", path, None, &[]).status, 404);
    // server admins only, 401 even for a named user (chttpd_auth_request)
    assert_eq!(s.as_user(BOB, "GET", "/_users/_all_docs", None).status, 401);
    assert_eq!(s.as_user(BOB, "GET", "/_users/_changes", None).status, 401);
    // a user may change their password but not grant themselves roles
    let mut doc = own.json();
    doc["roles"] = json!(["boss"]);
    assert_eq!(
        err(&s.as_user(BOB, "PUT", path, Some(&doc.to_string()))),
        (403, "forbidden".into(), "Only _admin may edit roles".into())
    );
    doc["roles"] = json!([]);
    doc["password"] = json!("newpw");
    let r = s.as_user(BOB, "PUT", path, Some(&doc.to_string()));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        s.as_user(BOB, "GET", path, None).status,
        401,
        "old password"
    );
    assert_eq!(s.as_user(("bob", "newpw"), "GET", path, None).status, 200);
    // another user's document is not theirs to touch
    let eve_doc = s.get("/_users/org.couchdb.user:eve").json();
    let r = s.as_user(
        ("bob", "newpw"),
        "PUT",
        "/_users/org.couchdb.user:eve",
        Some(&eve_doc.to_string()),
    );
    assert_eq!(r.status, 404, "{}", r.text);
    // public fields
    let r = s.put("/_users/org.couchdb.user:eve", &{
        let mut d = eve_doc.clone();
        d["city"] = json!("Oslo");
        d.to_string()
    });
    assert_eq!(r.status, 201);
    let s2 = &s;
    assert_eq!(
        s2.as_user(
            ("bob", "newpw"),
            "GET",
            "/_users/org.couchdb.user:eve",
            None
        )
        .status,
        404
    );
    // only admins see or write the design documents of _users
    assert_eq!(
        s.as_user(("bob", "newpw"), "GET", "/_users/_design/x", None)
            .status,
        404,
        "missing either way"
    );
}

fn login(s: &Server, user: (&str, &str)) -> (u16, Option<String>, Value) {
    let body = json!({"name": user.0, "password": user.1}).to_string();
    let r = s.anon("POST", "/_session", Some(&body), &[]);
    let cookie = r
        .header("set-cookie")
        .map(|c| c.split(';').next().unwrap().to_string());
    (r.status, cookie, r.json())
}

#[test]
fn cookie_sessions() {
    let s = Server::start_with_ini(FAST);
    add_user(&s, BOB, &["staff"]);
    let (status, cookie, body) = login(&s, BOB);
    assert_eq!(status, 200);
    assert_eq!(body, json!({"ok": true, "name": "bob", "roles": ["staff"]}));
    let cookie = cookie.unwrap();
    assert!(cookie.starts_with("AuthSession="), "{cookie}");
    let me = s
        .anon("GET", "/_session", None, &[("cookie", &cookie)])
        .json();
    assert_eq!(me["userCtx"], json!({"name": "bob", "roles": ["staff"]}));
    assert_eq!(me["info"]["authenticated"], "cookie");

    // form login too
    let r = s.req_with(
        "POST",
        "/_session",
        Some("name=bob&password=bobpw"),
        &[("content-type", "application/x-www-form-urlencoded")],
        false,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let full = r.header("set-cookie").unwrap();
    assert!(
        full.contains("Path=/") && full.contains("HttpOnly"),
        "{full}"
    );

    // wrong password: 401 and a cleared cookie
    let (status, cleared, body) = login(&s, ("bob", "wrong"));
    assert_eq!(status, 401);
    assert_eq!(body["reason"], "Name or password is incorrect.");
    assert_eq!(cleared.as_deref(), Some("AuthSession="));

    // a forged cookie (another user's name, same signature) is not a session
    let value = cookie.trim_start_matches("AuthSession=");
    let raw = URL_SAFE_NO_PAD.decode(value).unwrap();
    let mut forged = b"admin".to_vec();
    forged.extend_from_slice(&raw[3..]);
    let forged = format!("AuthSession={}", URL_SAFE_NO_PAD.encode(forged));
    let me = s
        .anon("GET", "/_session", None, &[("cookie", &forged)])
        .json();
    assert_eq!(me["userCtx"]["name"], Value::Null);
    // garbage is CouchDB's 400
    let r = s.anon("GET", "/_session", None, &[("cookie", "AuthSession=%%%")]);
    assert_eq!(r.status, 400, "{}", r.text);

    // an expired cookie, signed correctly, is not a session either
    let salt = s.get("/_users/org.couchdb.user:bob").json()["salt"]
        .as_str()
        .unwrap()
        .to_string();
    let old = cookie::make(
        "bob",
        b"s3cret",
        salt.as_bytes(),
        1_000_000,
        HashAlg::Sha256,
    );
    let me = s
        .anon(
            "GET",
            "/_session",
            None,
            &[("cookie", &format!("AuthSession={old}"))],
        )
        .json();
    assert_eq!(me["userCtx"]["name"], Value::Null);
    // while a fresh one made the same way is, proving the format
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let fresh = cookie::make("bob", b"s3cret", salt.as_bytes(), now, HashAlg::Sha256);
    let me = s
        .anon(
            "GET",
            "/_session",
            None,
            &[("cookie", &format!("AuthSession={fresh}"))],
        )
        .json();
    assert_eq!(me["userCtx"]["name"], "bob");
    // a cookie close to its end is renewed
    let aging = cookie::make(
        "bob",
        b"s3cret",
        salt.as_bytes(),
        now - 590,
        HashAlg::Sha256,
    );
    let r = s.anon(
        "GET",
        "/_session",
        None,
        &[("cookie", &format!("AuthSession={aging}"))],
    );
    assert_eq!(r.json()["userCtx"]["name"], "bob");
    assert!(r
        .header("set-cookie")
        .is_some_and(|c| c.starts_with("AuthSession=")));

    // logout clears the cookie
    let r = s.anon("DELETE", "/_session", None, &[("cookie", &cookie)]);
    assert_eq!(r.json(), json!({"ok": true}));
    assert!(r.header("set-cookie").unwrap().starts_with("AuthSession=;"));
    // a password change ends existing sessions (the salt signs the cookie)
    let mut doc = s.get("/_users/org.couchdb.user:bob").json();
    doc["password"] = json!("other");
    assert_eq!(
        s.put("/_users/org.couchdb.user:bob", &doc.to_string())
            .status,
        201
    );
    let me = s
        .anon("GET", "/_session", None, &[("cookie", &cookie)])
        .json();
    assert_eq!(me["userCtx"]["name"], Value::Null);
    // admins from the config log in the same way
    let (status, _, body) = login(&s, common::ADMIN);
    assert_eq!(status, 200);
    assert_eq!(body["roles"], json!(["_admin"]));
}

#[test]
fn lockout_after_repeated_failures() {
    let s = Server::start_with_ini(FAST);
    add_user(&s, BOB, &[]);
    for _ in 0..5 {
        assert_eq!(
            s.as_user(("bob", "wrong"), "GET", "/_session", None).status,
            401
        );
    }
    let r = s.as_user(BOB, "GET", "/_session", None);
    assert_eq!(
        err(&r),
        (
            403,
            "forbidden".into(),
            "Account is temporarily locked due to multiple authentication failures".into()
        )
    );
    let (status, _, _) = login(&s, BOB);
    assert_eq!(status, 403);
    // other users are unaffected
    assert_eq!(s.get("/_session").status, 200);
    // names that do not exist are counted too: guessing cannot tell them apart by the answer
    for _ in 0..5 {
        assert_eq!(
            s.as_user(("nobody", "x"), "GET", "/_session", None).status,
            401
        );
    }
    assert_eq!(
        s.as_user(("nobody", "x"), "GET", "/_session", None).status,
        403
    );
}

fn hs256(secret: &[u8], claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let input = format!("{header}.{payload}");
    let sig = HashAlg::Sha256.hmac(secret, input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

#[test]
fn jwt_and_proxy_authentication() {
    let key = URL_SAFE_NO_PAD.encode(b"jwt-secret");
    let key =
        base64::engine::general_purpose::STANDARD.encode(URL_SAFE_NO_PAD.decode(&key).unwrap());
    let s = Server::start_with_ini(&format!(
        "{FAST}proxy_use_secret = true\n\
         [chttpd]\nauthentication_handlers = {{chttpd_auth, jwt_authentication_handler}}, \
         {{chttpd_auth, proxy_authentication_handler}}, {{chttpd_auth, cookie_authentication_handler}}, \
         {{chttpd_auth, default_authentication_handler}}\n\
         [jwt_keys]\nhmac:_default = {key}\n"
    ));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({"sub": "jane", "exp": now + 60, "_couchdb.roles": ["staff"]});
    let token = hs256(b"jwt-secret", &claims);
    let auth = format!("Bearer {token}");
    let r = s.anon("GET", "/_session", None, &[("authorization", &auth)]);
    assert_eq!(r.status, 200, "{}", r.text);
    let me = r.json();
    assert_eq!(me["userCtx"], json!({"name": "jane", "roles": ["staff"]}));
    assert_eq!(me["info"]["authenticated"], "jwt");
    assert_eq!(
        me["info"]["authentication_handlers"],
        json!(["jwt", "proxy", "cookie", "default"])
    );
    // bad signature, expired
    let forged = hs256(b"other", &claims);
    let r = s.anon(
        "GET",
        "/_session",
        None,
        &[("authorization", &format!("Bearer {forged}"))],
    );
    assert!(r.status == 400 || r.status == 401, "{}", r.text);
    assert_ne!(r.json()["userCtx"]["name"], "jane");
    let expired = hs256(b"jwt-secret", &json!({"sub": "jane", "exp": now - 10}));
    let r = s.anon(
        "GET",
        "/_session",
        None,
        &[("authorization", &format!("Bearer {expired}"))],
    );
    assert_eq!(r.status, 401, "{}", r.text);
    // the JWT user is a member where the security object names them
    s.create_db("db");
    s.put(
        "/db/_security",
        r#"{"members":{"names":["jane"]},"admins":{}}"#,
    );
    assert_eq!(
        s.anon("GET", "/db", None, &[("authorization", &auth)])
            .status,
        200
    );

    // proxy authentication with the secret's token
    let token = settee_auth::proxy::token("s3cret", "pat", HashAlg::Sha256);
    let headers = [
        ("x-auth-couchdb-username", "pat"),
        ("x-auth-couchdb-roles", "a, b"),
        ("x-auth-couchdb-token", token.as_str()),
    ];
    let me = s.anon("GET", "/_session", None, &headers).json();
    assert_eq!(me["userCtx"], json!({"name": "pat", "roles": ["a", "b"]}));
    assert_eq!(me["info"]["authenticated"], "proxy");
    let wrong = [
        ("x-auth-couchdb-username", "pat"),
        ("x-auth-couchdb-roles", "_admin"),
        ("x-auth-couchdb-token", "0000"),
    ];
    let me = s.anon("GET", "/_session", None, &wrong).json();
    assert_eq!(
        me["userCtx"]["name"],
        Value::Null,
        "a wrong token is ignored"
    );
    // Basic still works after them
    assert_eq!(
        s.anon(
            "GET",
            "/_all_dbs",
            None,
            &[("authorization", &basic(common::ADMIN.0, common::ADMIN.1))]
        )
        .status,
        200
    );
}

#[test]
fn require_valid_user() {
    let s = Server::start_with_ini("[chttpd]\nrequire_valid_user = true\n");
    let r = s.anon("GET", "/", None, &[]);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"server\""));
    assert_eq!(s.get("/").status, 200);
}

/// `users_db_public = true` with `public_fields` set lets members list `_users`, seeing
/// only the public fields of every document (their own too, and `_id`/`_rev` only when
/// listed, as CouchDB's `_all_docs`); single reads of others' documents show the public
/// fields whatever that setting says.
#[test]
fn users_db_public_lists_public_fields() {
    let s = Server::start_with_ini(&format!(
        "{FAST}users_db_public = true\npublic_fields = name, nick, _id\n[couchdb]\nusers_db_security_editable = true\n"
    ));
    assert_eq!(s.put("/_users/_security", "{}").status, 200);
    for (name, pw) in [BOB, EVE] {
        let doc = json!({"name": name, "password": pw, "roles": ["r"], "type": "user", "nick": format!("{name}!")});
        let r = s.put(
            &format!("/_users/org.couchdb.user:{name}"),
            &doc.to_string(),
        );
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let listed = s.as_user(BOB, "GET", "/_users/_all_docs?include_docs=true", None);
    assert_eq!(listed.status, 200, "{}", listed.text);
    let docs: Vec<Value> = listed.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["id"].as_str().unwrap().starts_with("org.couchdb.user:"))
        .map(|r| r["doc"].clone())
        .collect();
    assert_eq!(docs.len(), 2);
    for doc in &docs {
        let mut keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["_id", "name", "nick"], "{doc}");
    }
    let queried = s.as_user(
        EVE,
        "POST",
        "/_users/_all_docs/queries",
        Some(r#"{"queries":[{"include_docs":true,"keys":["org.couchdb.user:bob"]}]}"#),
    );
    assert_eq!(queried.status, 200, "{}", queried.text);
    let doc = &queried.json()["results"][0]["rows"][0]["doc"];
    assert_eq!(doc["nick"], "bob!");
    assert!(
        doc.get("derived_key").is_none() && doc.get("roles").is_none(),
        "{doc}"
    );
    let other = s
        .as_user(EVE, "GET", "/_users/org.couchdb.user:bob", None)
        .json();
    assert_eq!(
        (other["name"].as_str(), other.get("salt")),
        (Some("bob"), None)
    );
    // Other listings stay admin-only.
    assert_eq!(s.as_user(BOB, "GET", "/_users/_changes", None).status, 401);
    assert_eq!(
        s.as_user(BOB, "GET", "/_users/_local_docs", None).status,
        403
    );
    // Admins see everything.
    let all = s.get("/_users/_all_docs?include_docs=true&key=%22org.couchdb.user:bob%22");
    assert!(all.json()["rows"][0]["doc"].get("derived_key").is_some());
    // Without public_fields the setting lets no one list.
    let s = Server::start_with_ini(&format!(
        "{FAST}users_db_public = true\n[couchdb]\nusers_db_security_editable = true\n"
    ));
    assert_eq!(s.put("/_users/_security", "{}").status, 200);
    add_user(&s, BOB, &[]);
    assert_eq!(s.as_user(BOB, "GET", "/_users/_all_docs", None).status, 401);
    // CouchDB 2's section name works too.
    let s = Server::start_with_ini(&format!(
        "{FAST}[couch_httpd_auth]\nusers_db_public = true\npublic_fields = name\n[couchdb]\nusers_db_security_editable = true\n"
    ));
    assert_eq!(s.put("/_users/_security", "{}").status, 200);
    add_user(&s, BOB, &[]);
    let r = s.as_user(BOB, "GET", "/_users/_all_docs?include_docs=true", None);
    assert_eq!(r.status, 200, "{}", r.text);
    let bob = r.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["id"] == "org.couchdb.user:bob")
        .unwrap()["doc"]
        .clone();
    assert_eq!(bob, json!({"name": "bob"}));
}

const VDU: &str = r#"function(newDoc, oldDoc, userCtx, secObj) {
  if (newDoc._deleted) { return; }
  if (!newDoc.type) { throw({forbidden: 'doc.type is required'}); }
  if (newDoc.type === 'locked' && userCtx.roles.indexOf('_admin') === -1) {
    throw({unauthorized: 'only admins write locked docs'});
  }
  if (oldDoc && oldDoc.owner && oldDoc.owner !== userCtx.name && userCtx.roles.indexOf('_admin') === -1) {
    throw({forbidden: 'not yours: ' + oldDoc.owner});
  }
  if (newDoc.db_check && userCtx.db !== 'db') { throw({forbidden: 'wrong db'}); }
  if (newDoc.sec_check && secObj.members.names.indexOf(userCtx.name) === -1) {
    throw({forbidden: 'not in secObj'});
  }
}"#;

/// Compiled validate functions are reused across requests only while the design documents
/// stay the same: an edit, a new design document or a deletion applies to the next write.
#[test]
fn edited_validate_functions_apply_to_the_next_write() {
    let s = Server::start_with_ini(FAST);
    s.create_db("db");
    let refuse = |t: &str| {
        json!({"validate_doc_update": format!(
            "function(d) {{ if (d.type === '{t}') throw({{forbidden: 'no {t}'}}); }}"
        )})
    };
    let write = |n: usize, t: &str| s.put(&format!("/db/d{n}"), &json!({"type": t}).to_string());
    let r = s.put("/db/_design/v", &refuse("a").to_string());
    assert_eq!(r.status, 201);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    for n in 0..4 {
        assert_eq!(write(n, "a").status, 403);
        assert_eq!(write(10 + n, "b").status, 201);
    }
    let mut edited = refuse("b");
    edited["_rev"] = json!(rev);
    let r = s.put("/db/_design/v", &edited.to_string());
    assert_eq!(r.status, 201);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    for n in 0..4 {
        assert_eq!(write(20 + n, "a").status, 201);
        assert_eq!(write(30 + n, "b").status, 403);
    }
    assert_eq!(s.put("/db/_design/w", &refuse("c").to_string()).status, 201);
    assert_eq!(write(40, "c").status, 403);
    assert_eq!(s.delete(&format!("/db/_design/v?rev={rev}")).status, 200);
    assert_eq!(write(41, "b").status, 201);
    assert_eq!(write(42, "c").status, 403);
}

#[test]
fn validate_doc_update_runs_on_every_write() {
    let s = Server::start_with_ini(FAST);
    add_user(&s, BOB, &[]);
    s.create_db("db");
    s.put("/db/_security", r#"{"members":{"names":["bob"]}}"#);
    let ddoc = json!({"validate_doc_update": VDU});
    assert_eq!(s.put("/db/_design/v", &ddoc.to_string()).status, 201);

    let r = s.as_user(BOB, "PUT", "/db/a", Some("{}"));
    assert_eq!(
        err(&r),
        (403, "forbidden".into(), "doc.type is required".into())
    );
    let r = s.as_user(BOB, "PUT", "/db/a", Some(r#"{"type":"locked"}"#));
    assert_eq!(
        err(&r),
        (
            401,
            "unauthorized".into(),
            "only admins write locked docs".into()
        )
    );
    assert_eq!(s.put("/db/a", r#"{"type":"locked"}"#).status, 201, "admin");
    let r = s.as_user(
        BOB,
        "PUT",
        "/db/b",
        Some(r#"{"type":"t","owner":"bob","db_check":1,"sec_check":1}"#),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    // oldDoc is the revision being replaced
    let r = s.put("/db/c", r#"{"type":"t","owner":"ann"}"#);
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let r = s.as_user(
        BOB,
        "PUT",
        "/db/c",
        Some(&json!({"_rev": rev, "type": "t"}).to_string()),
    );
    assert_eq!(err(&r).2, "not yours: ann");
    // in bulk, per document; replicated writes are validated too
    let r = s.as_user(
        BOB,
        "POST",
        "/db/_bulk_docs",
        Some(r#"{"docs":[{"_id":"d1","type":"t"},{"_id":"d2"},{"_id":"d3","type":"locked"}]}"#),
    );
    let rows = r.json();
    assert_eq!(rows[0]["ok"], true, "{rows}");
    assert_eq!(
        rows[1],
        json!({"id": "d2", "error": "forbidden", "reason": "doc.type is required"})
    );
    assert_eq!(rows[2]["error"], "unauthorized");
    let r = s.as_user(
        BOB,
        "POST",
        "/db/_bulk_docs",
        Some(r#"{"new_edits":false,"docs":[{"_id":"r1","_rev":"1-abc"}]}"#),
    );
    assert_eq!(r.json()[0]["error"], "forbidden", "{}", r.text);
    assert_eq!(s.get("/db/r1").status, 404);
    assert_eq!(s.get("/db/d2").status, 404);
    // a second design document's function must pass too
    let ddoc2 = json!({"validate_doc_update": "function(n){ if (n.type === 'banned') throw({forbidden: 'banned'}); }"});
    assert_eq!(s.put("/db/_design/w", &ddoc2.to_string()).status, 201);
    let r = s.as_user(BOB, "PUT", "/db/e", Some(r#"{"type":"banned"}"#));
    assert_eq!(err(&r).2, "banned");
    // an endless validation function is stopped; the server stays healthy
    let slow =
        json!({"validate_doc_update": "function(n){ if (n.type === 'slow') while(true){} }"});
    assert_eq!(s.put("/db/_design/z", &slow.to_string()).status, 201);
    let r = s.as_user(BOB, "PUT", "/db/f", Some(r#"{"type":"slow"}"#));
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(
        s.as_user(BOB, "PUT", "/db/g", Some(r#"{"type":"t"}"#))
            .status,
        201
    );
}

#[test]
fn passwords_never_reach_logs_or_responses() {
    let tmp = tempfile::tempdir().unwrap();
    let ini = tmp.path().join("settee.ini");
    std::fs::write(&ini, FAST).unwrap();
    let log = tmp.path().join("stderr.log");
    let data = tmp.path().join("data");
    let s = Server::start_logged(&data, &["--config", ini.to_str().unwrap()], &log);
    let secrets = [
        "Us3rPassw0rd",
        "Wr0ngPassw0rd",
        "Adm1nPassw0rd",
        "N3wPassw0rd",
    ];
    add_user(&s, ("carol", secrets[0]), &[]);
    let mut texts = vec![s.get("/_users/org.couchdb.user:carol").text];
    texts.push(
        s.as_user(("carol", secrets[1]), "GET", "/_session", None)
            .text,
    );
    texts.push(login(&s, ("carol", secrets[1])).2.to_string());
    texts.push(login(&s, ("carol", secrets[0])).2.to_string());
    let r = s.put(
        "/_node/_local/_config/admins/root",
        &json!(secrets[2]).to_string(),
    );
    texts.push(r.text);
    texts.push(s.get("/_node/_local/_config/admins/root").text);
    texts.push(s.get("/_node/_local/_config").text);
    let mut doc = s.get("/_users/org.couchdb.user:carol").json();
    doc["password"] = json!(secrets[3]);
    texts.push(
        s.put("/_users/org.couchdb.user:carol", &doc.to_string())
            .text,
    );
    texts.push(s.get("/_users/_all_docs?include_docs=true").text);
    texts.push(s.get("/_users/_changes?include_docs=true").text);
    drop(s);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("authentication failed"),
        "the log is live: {logged}"
    );
    for secret in secrets {
        assert!(!logged.contains(secret), "{secret} logged");
        for t in &texts {
            assert!(!t.contains(secret), "{secret} in a response: {t}");
        }
    }
    let local = std::fs::read_to_string(data.join("local.ini")).unwrap();
    assert!(!local.contains(secrets[2]), "the config stores a hash");
}
