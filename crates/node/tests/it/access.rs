//! The node's access decisions, run against the local node: who may call which operation,
//! as CouchDB 3 decides it, so that every caller (HTTP, a cluster coordinator) gets the
//! same answer.

use serde_json::json;
use settee_auth::UserCtx;
use settee_node::Error;
use settee_wire::path::{DbOp, Endpoint};

use crate::common;
use common::fixture;

fn user(name: &str, roles: &[&str]) -> UserCtx {
    UserCtx {
        name: Some(name.into()),
        roles: roles.iter().map(|r| r.to_string()).collect(),
    }
}

#[test]
fn members_admins_and_everyone_else() {
    let f = fixture();
    let db = f
        .node
        .couch
        .create(
            "secret",
            json!({"members": {"names": ["bob"]}, "admins": {"roles": ["boss"]}}),
        )
        .unwrap();
    let doc = Endpoint::Doc(db.name.clone(), "x".into());
    let compact = Endpoint::DbOp(db.name.clone(), DbOp::Compact);
    let admin = user("root", &["_admin"]);
    let bob = user("bob", &[]);
    let boss = user("eve", &["boss"]);
    let anonymous = UserCtx::default();
    assert!(f.fabric().authorize(&doc, "GET", &bob).is_ok());
    assert!(f.fabric().authorize(&doc, "GET", &admin).is_ok());
    assert!(matches!(
        f.fabric().authorize(&doc, "GET", &anonymous),
        Err(Error::Denied(settee_auth::Denied::Unauthorized(_)))
    ));
    // `_compact` is for database admins, and answers others 401.
    assert!(f.fabric().authorize(&compact, "POST", &boss).is_ok());
    assert!(matches!(
        f.fabric().authorize(&compact, "POST", &bob),
        Err(Error::Unauthorized(r)) if r == "You are not a server or db admin."
    ));
    // Server-wide operations need a server admin, whoever asks.
    assert!(matches!(
        f.fabric().authorize(&Endpoint::ActiveTasks, "GET", &bob),
        Err(Error::Unauthorized(_))
    ));
}

#[test]
fn require_valid_user_keeps_out_anonymous_requests() {
    let f = fixture();
    assert!(f
        .fabric()
        .authorize(&Endpoint::Root, "GET", &UserCtx::default())
        .is_ok());
    f.node
        .config
        .set_transient("chttpd", "require_valid_user", "true");
    assert!(matches!(
        f.fabric().authorize(&Endpoint::Root, "GET", &UserCtx::default()),
        Err(Error::Unauthorized(r)) if r == "Authentication required."
    ));
    // But one may still log in.
    assert!(f
        .fabric()
        .authorize(&Endpoint::Session, "POST", &UserCtx::default())
        .is_ok());
}
