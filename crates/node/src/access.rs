//! Authorization: who may call which endpoint, as CouchDB 3 decides it. Server-wide
//! endpoints need a server admin unless CouchDB lets anyone in; database endpoints need a
//! member of the database (its `_security` `members`, everyone when that is empty) or, for
//! administrative operations, a database admin. Per-document rules (design documents need
//! a database admin, the `_users` rules, `validate_doc_update`) are applied to each
//! document by the write path (`settee_docs`).
//!
//! Operations are named by the request grammar's [`Endpoint`] (`settee_wire`), which every
//! caller (HTTP, a cluster coordinator) reads its requests into.

use crate::{Error, Node, Result};
use settee_auth::security::{denied, SecurityObject};
use settee_auth::users::USERS_DB;
use settee_auth::UserCtx;
use settee_wire::path::{DbOp, Endpoint, NotUtf8};

/// What an endpoint requires of the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Anyone,
    ServerAdmin,
    Member,
    DbAdmin,
    /// A database admin, where CouchDB's `require_db_admin` answers everyone else with a
    /// 401 (`_compact`, `_view_cleanup`).
    DbAdminOr401,
    /// A member; in system databases (`_users`) an admin, as CouchDB keeps their listings
    /// (`_all_docs`, `_changes`, views, …) to admins.
    MemberListing,
}

fn need(endpoint: &Endpoint, method: &str, node: &crate::NodeConfig) -> Need {
    use Need::*;
    let read = matches!(method, "GET" | "HEAD");
    match endpoint {
        Endpoint::Root | Endpoint::Up | Endpoint::Uuids | Endpoint::Session => Anyone,
        Endpoint::AllDbs(_) | Endpoint::DbsInfo(_) => {
            if node.get_bool("chttpd", "admin_only_all_dbs", true) {
                ServerAdmin
            } else {
                Anyone
            }
        }
        // CouchDB's chttpd_auth_request: `_`-paths need a server admin, except these
        // exact paths (and Fauxton's files for reading).
        Endpoint::Favicon | Endpoint::Replicate(false) => Anyone,
        Endpoint::Utils(_) if read => Anyone,
        Endpoint::UnknownServer(segs) if segs.len() == 1 && segs[0] == "_stats" => Anyone,
        Endpoint::UnknownServer(_)
        | Endpoint::Utils(_)
        | Endpoint::Replicate(true)
        | Endpoint::Scheduler(_)
        | Endpoint::Reshard(_)
        | Endpoint::ClusterSetup
        | Endpoint::Cluster(_)
        | Endpoint::SearchAnalyze
        | Endpoint::NouveauAnalyze
        | Endpoint::ReloadQueryServers => ServerAdmin,
        Endpoint::DbUpdates | Endpoint::ActiveTasks | Endpoint::Membership | Endpoint::Node(..) => {
            ServerAdmin
        }
        Endpoint::Db(_) => match method {
            "PUT" | "DELETE" => ServerAdmin,
            _ => Member,
        },
        Endpoint::Doc(..)
        | Endpoint::Attachment(..)
        | Endpoint::NotUtf8(..)
        | Endpoint::DbBadRequest(..)
        | Endpoint::DbUnimplemented(..) => Member,
        Endpoint::DbOp(_, op) => match op {
            DbOp::Compact | DbOp::CompactDesign(_) | DbOp::ViewCleanup => DbAdminOr401,
            DbOp::Purge => DbAdmin,
            DbOp::Security | DbOp::RevsLimit | DbOp::PurgedInfosLimit if !read => DbAdmin,
            DbOp::AllDocs
            | DbOp::AllDocsQueries
            | DbOp::DesignDocs
            | DbOp::DesignDocsQueries
            | DbOp::LocalDocs
            | DbOp::LocalDocsQueries
            | DbOp::Changes
            | DbOp::BulkGet
            | DbOp::View(..)
            | DbOp::ViewQueries(..)
            | DbOp::DesignInfo(_) => MemberListing,
            DbOp::Rewrite(..) => Member,
            _ => Member,
        },
    }
}

/// Refuses the request unless its user may call the endpoint. Database endpoints of a
/// database that does not exist fall through to the handler's 404 only for those allowed
/// to create it (server admins); others get the same 404 from here.
pub fn authorize(node: &Node, endpoint: &Endpoint, method: &str, user: &UserCtx) -> Result<()> {
    authorize_with(node, endpoint, method, user, |db| security_of(node, db))
}

/// [`authorize`], with the databases' security objects from `security` (a coordinator
/// finds a clustered database's elsewhere than in this node's databases).
pub fn authorize_with(
    node: &Node,
    endpoint: &Endpoint,
    method: &str,
    user: &UserCtx,
    security: impl Fn(&str) -> Result<SecurityObject>,
) -> Result<()> {
    if node.config.get_bool("chttpd", "require_valid_user", false)
        && user.name.is_none()
        && !(matches!(endpoint, Endpoint::Session) && method == "POST")
    {
        return Err(Error::Unauthorized("Authentication required.".into()));
    }
    let need = need(endpoint, method, &node.config);
    match need {
        Need::Anyone => Ok(()),
        Need::ServerAdmin if user.is_server_admin() => Ok(()),
        // `verify_is_server_admin` throws `unauthorized` whoever asks: a 401 even for a
        // logged-in user.
        Need::ServerAdmin => Err(Error::Unauthorized("You are not a server admin.".into())),
        Need::Member | Need::DbAdmin | Need::DbAdminOr401 | Need::MemberListing => {
            let Some(db) = endpoint_db(endpoint) else {
                return Ok(());
            };
            if user.is_server_admin() {
                return Ok(());
            }
            let sec = security(db)?;
            match need {
                // chttpd_auth_request checks membership first for every database path
                // but the few `require_*admin` ones.
                Need::DbAdmin => {
                    sec.check_member(user)?;
                    sec.check_admin(user)?
                }
                Need::DbAdminOr401 => sec
                    .check_admin(user)
                    .map_err(|_| Error::Unauthorized("You are not a server or db admin.".into()))?,
                Need::MemberListing
                    if is_system_db(db) && users_listing_public(endpoint, &node.config) =>
                {
                    sec.check_member(user)?
                }
                // chttpd_auth_request: `_all_docs` and `_changes` of `_users` (and of
                // `_replicator`) are for server admins (401 even for a named user or a
                // database admin) ...
                Need::MemberListing
                    if (is_system_db(db) || db == crate::REPLICATOR_DB)
                        && matches!(
                            endpoint,
                            Endpoint::DbOp(_, DbOp::AllDocs | DbOp::AllDocsQueries | DbOp::Changes)
                        ) =>
                {
                    return Err(Error::Unauthorized("You are not a server admin.".into()));
                }
                // ... and its design documents, so its views, for database admins
                // (couch_users_db:after_doc_read).
                Need::MemberListing
                    if is_system_db(db)
                        && matches!(
                            endpoint,
                            Endpoint::DbOp(_, DbOp::View(..) | DbOp::ViewQueries(..))
                        ) =>
                {
                    sec.check_admin(user).map_err(|_| {
                        Error::Forbidden(
                            "Only administrators can view design docs in the users database."
                                .into(),
                        )
                    })?
                }
                Need::MemberListing if is_system_db(db) => sec.check_admin(user).map_err(|_| {
                    denied(
                        user,
                        "Only admins can access this endpoint of system databases.",
                    )
                })?,
                _ => sec.check_member(user)?,
            }
            Ok(())
        }
    }
}

fn endpoint_db(endpoint: &Endpoint) -> Option<&str> {
    match endpoint {
        Endpoint::Db(db)
        | Endpoint::DbOp(db, _)
        | Endpoint::Doc(db, _)
        | Endpoint::Attachment(db, ..)
        | Endpoint::DbBadRequest(db, _)
        | Endpoint::NotUtf8(NotUtf8::Doc(db) | NotUtf8::Attachment(db, _))
        | Endpoint::DbUnimplemented(db, _) => Some(db),
        _ => None,
    }
}

pub fn is_system_db(name: &str) -> bool {
    name == USERS_DB
}

/// For a reader of `_users` who is not its admin: the security object and the public
/// fields (`[chttpd_auth] public_fields`) that `users::filter_read` needs.
pub fn users_reader(
    config: &crate::NodeConfig,
    db: &settee_db::Database,
    user: &UserCtx,
) -> Option<(SecurityObject, Vec<String>)> {
    if !is_system_db(&db.name) {
        return None;
    }
    let sec = SecurityObject::from_json(&db.props().security);
    if sec.is_admin(user) {
        return None;
    }
    Some((sec, public_fields(config).unwrap_or_default()))
}

/// A `[chttpd_auth]` setting, or CouchDB 2's `[couch_httpd_auth]` one.
fn auth_setting(node: &crate::NodeConfig, key: &str) -> Option<String> {
    node.get("chttpd_auth", key)
        .or_else(|| node.get("couch_httpd_auth", key))
}

/// The user-document fields anyone may read (`public_fields`, comma-separated), and
/// whether the setting exists at all.
pub fn public_fields(node: &crate::NodeConfig) -> Option<Vec<String>> {
    let fields = auth_setting(node, "public_fields")?;
    Some(
        fields
            .split(',')
            .map(|f| f.trim().to_string())
            .filter(|f| !f.is_empty())
            .collect(),
    )
}

/// Whether members who are not admins may list `_users` through `_all_docs` (and
/// `_design_docs`): CouchDB allows it when `users_db_public = true` and `public_fields`
/// is set, and then shows each document's public fields only.
fn users_listing_public(endpoint: &Endpoint, config: &crate::NodeConfig) -> bool {
    let listing = matches!(
        endpoint,
        Endpoint::DbOp(
            _,
            DbOp::AllDocs | DbOp::AllDocsQueries | DbOp::DesignDocs | DbOp::DesignDocsQueries
        )
    );
    listing
        && auth_setting(config, "users_db_public")
            .as_deref()
            .map(str::trim)
            == Some("true")
        && public_fields(config).is_some()
}

/// The security object of an existing database (404 `not_found` if it does not exist).
pub fn security_of(node: &Node, db: &str) -> Result<SecurityObject> {
    let db = node.couch.get(db)?;
    Ok(SecurityObject::from_json(&db.props().security))
}
