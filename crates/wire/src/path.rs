//! CouchDB's path grammar (`_design/`, `_local/`, `%2F` in database names, attachment
//! names containing `/`), parsed into [`Endpoint`]; `settee-http`'s router dispatches it by
//! one exhaustive `match`.

use crate::error::{Error, Result};
use percent_encoding::percent_decode_str;

/// Bytes `couch_util:url_encode` escapes: all but ASCII letters, digits and `_ . - :`.
const COUCH_ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b':');

/// `couch_util:url_encode`: every other byte of the UTF-8 text as `%XX` (uppercase), as
/// CouchDB encodes a path part it writes (a `Location`, a replication endpoint's URL).
pub fn url_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, COUCH_ESCAPED).to_string()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Root,
    Up,
    Uuids,
    /// `/_all_dbs`; `true` when more path segments follow.
    AllDbs(bool),
    /// `/_dbs_info`; `true` when more path segments follow.
    DbsInfo(bool),
    DbUpdates,
    ActiveTasks,
    Session,
    Membership,
    /// `/_node/{node-name}/…`
    Node(String, NodeOp),
    Db(String),
    DbOp(String, DbOp),
    Doc(String, String),
    /// `/{db}/{docid}/{attname…}` (the name may contain `/`).
    Attachment(String, String, String),
    /// A path CouchDB refuses inside a database (`/{db}/_local`, `/{db}/_local/{id}/…`):
    /// 400 with this reason, after the database's access check.
    DbBadRequest(String, &'static str),
    /// Attachments and design-document functions are later work; answered with 501.
    DbUnimplemented(String, &'static str),
    /// `/favicon.ico`
    Favicon,
    /// `/_utils` (Fauxton); `true` for a file path below it.
    Utils(bool),
    /// `/_replicate`; `true` when more path segments follow.
    Replicate(bool),
    /// `/_scheduler/…` (the segments after `_scheduler`).
    Scheduler(Vec<String>),
    /// `/_reshard/…` (the segments after `_reshard`).
    Reshard(Vec<String>),
    ClusterSetup,
    /// `/_cluster/…` (the segments after `_cluster`): Settee's own cluster operations
    /// (`move`: a shard copy to another member).
    Cluster(Vec<String>),
    SearchAnalyze,
    NouveauAnalyze,
    ReloadQueryServers,
    /// A document id or attachment name that is not UTF-8 once decoded: nothing by that
    /// name can exist, so CouchDB answers as for a missing one (and refuses to create it).
    NotUtf8(NotUtf8),
    /// Any other `/_…` path: CouchDB takes it for a database name (`/_config`, `/_stats`,
    /// `/_restart`, … were removed in 2.0 and 3.0); the path's segments.
    UnknownServer(Vec<String>),
}

/// Which name of a path is not UTF-8 (see [`Endpoint::NotUtf8`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotUtf8 {
    /// A document's id, in this database.
    Doc(String),
    /// An attachment's path: the database and, when the document id is UTF-8, the id (the
    /// attachment name is not).
    Attachment(String, Option<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbOp {
    AllDocs,
    AllDocsQueries,
    DesignDocs,
    DesignDocsQueries,
    LocalDocs,
    LocalDocsQueries,
    BulkDocs,
    BulkGet,
    Changes,
    Compact,
    EnsureFullCommit,
    RevsLimit,
    Purge,
    PurgedInfosLimit,
    RevsDiff,
    MissingRevs,
    Security,
    ViewCleanup,
    TempView,
    /// `_design/{ddoc}/_view/{view}`
    View(String, String),
    /// `_design/{ddoc}/_view/{view}/queries`
    ViewQueries(String, String),
    /// `_design/{ddoc}/_info`
    DesignInfo(String),
    /// `_compact/{ddoc}`
    CompactDesign(String),
    /// `_find` (and any path below it, as CouchDB routes it)
    Find,
    /// `_explain` (and below)
    Explain,
    /// `_index/…`: the segments after `_index`
    Index(Vec<String>),
    /// `_design/{ddoc}/_rewrite/…`: the design document, and the segments after `_rewrite`
    Rewrite(String, Vec<String>),
    /// `_design/{ddoc}/_show|_list|_update/…`
    DesignFn(String, DesignFn),
    /// `_partition/…`: the segments after `_partition`
    Partition(Vec<String>),
    /// `_shards` or `_shards/{docid}`
    Shards(Option<String>),
    /// `_sync_shards`
    SyncShards,
}

/// What is asked of `/_node/{node-name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOp {
    /// `/_node` alone.
    Incomplete,
    /// `/_node/{node-name}`
    Info,
    /// `_config`
    Config,
    /// `_config/_reload`
    Reload,
    /// `_config/{section}`
    Section(String),
    /// `_config/{section}/{key}`
    Key(String, String),
    /// `_stats/{path…}`: the segments after `_stats`
    Stats(Vec<String>),
    /// `_system`
    System,
    /// `_prometheus`
    Prometheus,
    /// `_versions`
    Versions,
    /// `_nodes` (or `_nodes/`): the membership list as a database
    NodesInfo,
    /// `_nodes/_all_docs`: the membership list's documents
    NodeDocs,
    /// `_nodes/{node-name}`: one node's document in the membership list
    NodeDoc(String),
    /// `_settee/ddocs_changed/{db}` (POST): Settee's own, between cluster members: the
    /// design documents of clustered database `db` changed (see the coordinator's
    /// `ddocs`).
    DesignsChanged(String),
    /// Compaction scheduling and restarts: later work (501 for the `method` CouchDB
    /// serves, 405 for others).
    Unimplemented(&'static str, &'static str),
    Missing,
}

const SYSTEM_DBS: &[&str] = &["_users", "_replicator", "_global_changes"];

fn decode(seg: &str) -> Option<String> {
    percent_decode_str(seg)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// CouchDB's `check_url_encoding` over the raw path and query: every `%` starts a
/// two-hex-digit escape.
pub fn check_url_encoding(raw: &str) -> Result<()> {
    let b = raw.as_bytes();
    let bad = b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if bad {
        return Err(Error::bad_request("invalid_url_encoding"));
    }
    Ok(())
}

/// Parses a raw path. As CouchDB's `string:tokens(Path, "/")`, empty segments are dropped
/// (`/db/doc/` is the document). A database name that is not UTF-8 once decoded is taken
/// with replacement characters (no such database can exist); a document id or attachment
/// name is [`Endpoint::NotUtf8`]; any other such segment is refused.
pub fn parse(path: &str) -> Result<Endpoint> {
    let all: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if all[0] == "_utils" {
        // CouchDB tells `/_utils` (redirected) from `/_utils/…` (Fauxton's files) by the
        // raw path.
        return Ok(Endpoint::Utils(all.len() > 1));
    }
    let raw: Vec<&str> = all.into_iter().filter(|s| !s.is_empty()).collect();
    let mut segs = Vec::with_capacity(raw.len());
    let mut bad = Vec::new();
    for (i, seg) in raw.iter().enumerate() {
        segs.push(decode(seg).unwrap_or_else(|| {
            bad.push(i);
            percent_decode_str(seg).decode_utf8_lossy().into_owned()
        }));
    }
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let server = raw.first().is_none_or(|first| is_server_path(first));
    let endpoint = match segs.as_slice() {
        _ if server => parse_server(&segs),
        [db] => Endpoint::Db(db.to_string()),
        [db, rest @ ..] => parse_in_db(db, rest),
        [] => Endpoint::Root,
    };
    let Some(&first_bad) = bad.first() else {
        return Ok(endpoint);
    };
    // The segments the document id takes (`_design/x` and `_local/x` take two).
    let id_end = if matches!(raw.get(1), Some(&"_design") | Some(&"_local")) {
        3
    } else {
        2
    };
    let in_id = |i: usize| (1..id_end).contains(&i);
    Ok(match endpoint {
        _ if server => return Err(Error::bad_request("invalid UTF-8 in path")),
        // No database has a name with U+FFFD in it, nor can be created with one: the
        // name as decoded with replacement characters is missing (CouchDB's refusal of
        // a `PUT` shows it so too).
        _ if first_bad == 0 => endpoint,
        Endpoint::Doc(db, _) => Endpoint::NotUtf8(NotUtf8::Doc(db)),
        Endpoint::Attachment(db, _, _) if bad.iter().any(|&i| in_id(i)) => {
            Endpoint::NotUtf8(NotUtf8::Attachment(db, None))
        }
        Endpoint::Attachment(db, id, _) => Endpoint::NotUtf8(NotUtf8::Attachment(db, Some(id))),
        _ if in_id(first_bad) => {
            return Err(
                settee_core::Error::IllegalDocId("Document id must be valid UTF-8".into()).into(),
            )
        }
        _ => return Err(Error::bad_request("Attachment name is not UTF-8 encoded")),
    })
}

/// Whether a path's first (raw) segment names a server resource rather than a database.
fn is_server_path(first: &str) -> bool {
    let first = percent_decode_str(first).decode_utf8_lossy();
    first.is_empty()
        || first == "favicon.ico"
        || (first.starts_with('_') && !SYSTEM_DBS.contains(&first.as_ref()))
}

fn parse_server(segs: &[&str]) -> Endpoint {
    let owned = |rest: &[&str]| rest.iter().map(|s| s.to_string()).collect();
    match segs {
        [] => Endpoint::Root,
        ["favicon.ico", ..] => Endpoint::Favicon,
        ["_up", ..] => Endpoint::Up,
        ["_uuids", ..] => Endpoint::Uuids,
        ["_all_dbs", rest @ ..] => Endpoint::AllDbs(!rest.is_empty()),
        ["_dbs_info", rest @ ..] => Endpoint::DbsInfo(!rest.is_empty()),
        ["_db_updates"] => Endpoint::DbUpdates,
        ["_active_tasks", ..] => Endpoint::ActiveTasks,
        ["_session", ..] => Endpoint::Session,
        ["_membership"] => Endpoint::Membership,
        ["_node"] => Endpoint::Node(String::new(), NodeOp::Incomplete),
        ["_node", node, rest @ ..] => Endpoint::Node(node.to_string(), parse_node(rest)),
        ["_replicate", rest @ ..] => Endpoint::Replicate(!rest.is_empty()),
        ["_scheduler", rest @ ..] => Endpoint::Scheduler(owned(rest)),
        ["_reshard", rest @ ..] => Endpoint::Reshard(owned(rest)),
        ["_cluster_setup", ..] => Endpoint::ClusterSetup,
        ["_cluster", rest @ ..] => Endpoint::Cluster(owned(rest)),
        ["_search_analyze", ..] => Endpoint::SearchAnalyze,
        ["_nouveau_analyze", ..] => Endpoint::NouveauAnalyze,
        ["_reload_query_servers", ..] => Endpoint::ReloadQueryServers,
        other => Endpoint::UnknownServer(owned(other)),
    }
}

fn parse_node(rest: &[&str]) -> NodeOp {
    use NodeOp::Unimplemented as U;
    match rest {
        [] => NodeOp::Info,
        ["_config"] => NodeOp::Config,
        ["_config", "_reload"] => NodeOp::Reload,
        ["_config", section] => NodeOp::Section(section.to_string()),
        ["_config", section, key] => NodeOp::Key(section.to_string(), key.to_string()),
        ["_stats", rest @ ..] => NodeOp::Stats(rest.iter().map(|s| s.to_string()).collect()),
        ["_system"] => NodeOp::System,
        ["_prometheus"] => NodeOp::Prometheus,
        ["_versions"] => NodeOp::Versions,
        ["_nodes"] | ["_nodes", ""] => NodeOp::NodesInfo,
        ["_nodes", "_all_docs"] => NodeOp::NodeDocs,
        ["_nodes", name] => NodeOp::NodeDoc(name.to_string()),
        ["_settee", "ddocs_changed", db] => NodeOp::DesignsChanged(db.to_string()),
        ["_smoosh", "status"] => U("compaction scheduling (_smoosh)", "GET"),
        ["_restart"] => U("_restart", "POST"),
        _ => NodeOp::Missing,
    }
}

fn parse_in_db(db: &str, rest: &[&str]) -> Endpoint {
    let db = db.to_string();
    let op = |op| Endpoint::DbOp(db.clone(), op);
    match rest {
        ["_all_docs"] => op(DbOp::AllDocs),
        ["_all_docs", "queries"] => op(DbOp::AllDocsQueries),
        ["_design_docs"] => op(DbOp::DesignDocs),
        ["_design_docs", "queries"] => op(DbOp::DesignDocsQueries),
        ["_local_docs"] => op(DbOp::LocalDocs),
        ["_local_docs", "queries"] => op(DbOp::LocalDocsQueries),
        ["_bulk_docs"] => op(DbOp::BulkDocs),
        ["_bulk_get"] => op(DbOp::BulkGet),
        ["_changes"] => op(DbOp::Changes),
        ["_compact"] => op(DbOp::Compact),
        ["_compact", ddoc] => op(DbOp::CompactDesign(ddoc.to_string())),
        ["_ensure_full_commit"] => op(DbOp::EnsureFullCommit),
        ["_revs_limit"] => op(DbOp::RevsLimit),
        ["_purge"] => op(DbOp::Purge),
        ["_purged_infos_limit"] => op(DbOp::PurgedInfosLimit),
        ["_revs_diff"] => op(DbOp::RevsDiff),
        ["_missing_revs"] => op(DbOp::MissingRevs),
        ["_security"] => op(DbOp::Security),
        ["_view_cleanup"] => op(DbOp::ViewCleanup),
        ["_find", ..] => op(DbOp::Find),
        ["_explain", ..] => op(DbOp::Explain),
        ["_index", rest @ ..] => op(DbOp::Index(rest.iter().map(|s| s.to_string()).collect())),
        ["_temp_view"] => op(DbOp::TempView),
        ["_shards"] => op(DbOp::Shards(None)),
        ["_shards", id @ ..] => op(DbOp::Shards(Some(id.join("/")))),
        ["_sync_shards"] => op(DbOp::SyncShards),
        ["_partition", rest @ ..] => op(DbOp::Partition(
            rest.iter().map(|s| s.to_string()).collect(),
        )),
        ["_design", ddoc] => Endpoint::Doc(db, format!("_design/{ddoc}")),
        ["_design", ddoc, "_view", view] => op(DbOp::View(ddoc.to_string(), view.to_string())),
        ["_design", ddoc, "_view", view, "queries"] => {
            op(DbOp::ViewQueries(ddoc.to_string(), view.to_string()))
        }
        ["_design", ddoc, "_info"] => op(DbOp::DesignInfo(ddoc.to_string())),
        ["_design", ddoc, "_rewrite", rest @ ..] => op(DbOp::Rewrite(
            ddoc.to_string(),
            rest.iter().map(|s| s.to_string()).collect(),
        )),
        ["_design", ddoc, f, rest @ ..] if matches!(*f, "_show" | "_list" | "_update") => {
            op(DbOp::DesignFn(ddoc.to_string(), design_fn(f, rest)))
        }
        ["_design", _ddoc, f, ..] if f.starts_with('_') => {
            Endpoint::DbUnimplemented(db.clone(), "design document functions")
        }
        ["_design", ddoc, att @ ..] => {
            Endpoint::Attachment(db.clone(), format!("_design/{ddoc}"), att.join("/"))
        }
        ["_local"] | ["_local/"] => {
            Endpoint::DbBadRequest(db.clone(), "Invalid _local document id.")
        }
        ["_local", id] => Endpoint::Doc(db, format!("_local/{id}")),
        ["_local", _, ..] => {
            Endpoint::DbBadRequest(db.clone(), "_local documents do not accept attachments.")
        }
        [id] => Endpoint::Doc(db, id.to_string()),
        [id, att @ ..] => Endpoint::Attachment(db.clone(), id.to_string(), att.join("/")),
        [] => Endpoint::Db(db),
    }
}

/// What `_design/{ddoc}/_show|_list|_update/…` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesignFn {
    Show {
        name: String,
        doc: Option<String>,
    },
    List {
        name: String,
        /// The design document of the view, when not the list's own.
        view_ddoc: Option<String>,
        view: String,
    },
    Update {
        name: String,
        doc: Option<String>,
    },
    /// A path naming no function: CouchDB's 404 with this error and reason.
    BadPath(&'static str, &'static str),
}

/// A render function's path after `_show`, `_list` or `_update`.
pub fn design_fn(kind: &str, rest: &[&str]) -> DesignFn {
    let owned = |s: &str| s.to_string();
    match (kind, rest) {
        ("_show", [name]) => DesignFn::Show {
            name: owned(name),
            doc: None,
        },
        ("_show", [name, doc @ ..]) => DesignFn::Show {
            name: owned(name),
            doc: Some(doc.join("/")),
        },
        ("_update", [name]) => DesignFn::Update {
            name: owned(name),
            doc: None,
        },
        ("_update", [name, doc @ ..]) => DesignFn::Update {
            name: owned(name),
            doc: Some(doc.join("/")),
        },
        ("_list", [name, view]) => DesignFn::List {
            name: owned(name),
            view_ddoc: None,
            view: owned(view),
        },
        ("_list", [name, ddoc, view]) => DesignFn::List {
            name: owned(name),
            view_ddoc: Some(owned(ddoc)),
            view: owned(view),
        },
        ("_show", _) => DesignFn::BadPath("show_error", "Invalid path."),
        ("_update", _) => DesignFn::BadPath("update_error", "Invalid path."),
        _ => DesignFn::BadPath("list_error", "Bad path."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_segments_and_local_ids_as_couchdb() {
        assert_eq!(
            parse("/db//doc/").unwrap(),
            Endpoint::Doc("db".into(), "doc".into())
        );
        for p in ["/db/_local", "/db/_local/", "/db/_local%2F"] {
            assert_eq!(
                parse(p).unwrap(),
                Endpoint::DbBadRequest("db".into(), "Invalid _local document id."),
                "{p}"
            );
        }
        assert!(matches!(
            parse("/db/_local/a/b").unwrap(),
            Endpoint::DbBadRequest(_, "_local documents do not accept attachments.")
        ));
        assert_eq!(
            parse("/db/a+b").unwrap(),
            Endpoint::Doc("db".into(), "a+b".into())
        );
        assert_eq!(
            parse("/db/%FF").unwrap(),
            Endpoint::NotUtf8(NotUtf8::Doc("db".into()))
        );
        assert_eq!(
            parse("/%FF/x").unwrap(),
            Endpoint::Doc("\u{FFFD}".into(), "x".into())
        );
        assert_eq!(
            parse("/db/_design/%FF/a").unwrap(),
            Endpoint::NotUtf8(NotUtf8::Attachment("db".into(), None))
        );
        assert_eq!(
            parse("/db/d/a/%FF").unwrap(),
            Endpoint::NotUtf8(NotUtf8::Attachment("db".into(), Some("d".into())))
        );
        assert_eq!(
            parse("/_x%FF").unwrap_err(),
            Error::bad_request("invalid UTF-8 in path")
        );
    }

    #[test]
    fn url_encoding_is_checked() {
        assert!(check_url_encoding("/db/a%20b?x=%2F").is_ok());
        for bad in ["/db/a%2", "/db/%zz", "/db/x?k=%"] {
            assert_eq!(
                check_url_encoding(bad).unwrap_err(),
                Error::bad_request("invalid_url_encoding")
            );
        }
    }

    #[test]
    fn paths() {
        assert_eq!(parse("/").unwrap(), Endpoint::Root);
        assert_eq!(parse("/a%2Fb").unwrap(), Endpoint::Db("a/b".into()));
        assert_eq!(
            parse("/db/_design/x").unwrap(),
            Endpoint::Doc("db".into(), "_design/x".into())
        );
        assert_eq!(
            parse("/db/_design%2Fx").unwrap(),
            Endpoint::Doc("db".into(), "_design/x".into())
        );
        assert_eq!(
            parse("/db/_local/x").unwrap(),
            Endpoint::Doc("db".into(), "_local/x".into())
        );
        assert_eq!(
            parse("/db/a%20b").unwrap(),
            Endpoint::Doc("db".into(), "a b".into())
        );
        assert_eq!(
            parse("/_users/_all_docs").unwrap(),
            Endpoint::DbOp("_users".into(), DbOp::AllDocs)
        );
        assert_eq!(
            parse("/db/_partition/p%3Ax/_all_docs").unwrap(),
            Endpoint::DbOp(
                "db".into(),
                DbOp::Partition(vec!["p:x".into(), "_all_docs".into()])
            )
        );
        assert_eq!(
            parse("/db/_partition").unwrap(),
            Endpoint::DbOp("db".into(), DbOp::Partition(vec![]))
        );
        assert_eq!(
            parse("/db/doc/a/b.txt").unwrap(),
            Endpoint::Attachment("db".into(), "doc".into(), "a/b.txt".into())
        );
        assert_eq!(
            parse("/db/_design/d/logo.png").unwrap(),
            Endpoint::Attachment("db".into(), "_design/d".into(), "logo.png".into())
        );
        assert_eq!(
            parse("/db/_design/d/_rewrite/a/b%2Fc").unwrap(),
            Endpoint::DbOp(
                "db".into(),
                DbOp::Rewrite("d".into(), vec!["a".into(), "b/c".into()])
            )
        );
        assert!(matches!(
            parse("/db/_design/d/_search/x").unwrap(),
            Endpoint::DbUnimplemented(..)
        ));
        assert_eq!(
            parse("/db/_design/d/_show/x/a%2Fb/c").unwrap(),
            Endpoint::DbOp(
                "db".into(),
                DbOp::DesignFn(
                    "d".into(),
                    DesignFn::Show {
                        name: "x".into(),
                        doc: Some("a/b/c".into())
                    }
                )
            )
        );
        assert_eq!(
            parse("/db/_design/d/_list/l/o/v").unwrap(),
            Endpoint::DbOp(
                "db".into(),
                DbOp::DesignFn(
                    "d".into(),
                    DesignFn::List {
                        name: "l".into(),
                        view_ddoc: Some("o".into()),
                        view: "v".into()
                    }
                )
            )
        );
        assert_eq!(
            parse("/_foo").unwrap(),
            Endpoint::UnknownServer(vec!["_foo".into()])
        );
        assert_eq!(
            parse("/_config/a/").unwrap(),
            Endpoint::UnknownServer(vec!["_config".into(), "a".into()])
        );
        assert_eq!(parse("/_all_dbs/").unwrap(), Endpoint::AllDbs(false));
        assert_eq!(parse("/_all_dbs/x").unwrap(), Endpoint::AllDbs(true));
        assert_eq!(parse("/_utils").unwrap(), Endpoint::Utils(false));
        assert_eq!(parse("/_utils/").unwrap(), Endpoint::Utils(true));
        assert_eq!(parse("/_utils/index.html").unwrap(), Endpoint::Utils(true));
        assert_eq!(
            parse("/_scheduler/docs/_replicator").unwrap(),
            Endpoint::Scheduler(vec!["docs".into(), "_replicator".into()])
        );
        assert_eq!(
            parse("/_node/_local/_config/").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::Config)
        );
        assert_eq!(
            parse("/_node/_local/_restart").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::Unimplemented("_restart", "POST"))
        );
        assert_eq!(
            parse("/_node/_local/_stats/couchdb/request_time").unwrap(),
            Endpoint::Node(
                "_local".into(),
                NodeOp::Stats(vec!["couchdb".into(), "request_time".into()])
            )
        );
        assert_eq!(parse("/favicon.ico").unwrap(), Endpoint::Favicon);
        assert_eq!(
            parse("/_replicator/_all_docs").unwrap(),
            Endpoint::DbOp("_replicator".into(), DbOp::AllDocs)
        );
        assert_eq!(
            parse("/_node/_local/_config/a%2Fb/k").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::Key("a/b".into(), "k".into()))
        );
        assert_eq!(
            parse("/_node/_local/_config/_reload").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::Reload)
        );
        assert_eq!(
            parse("/_node/n/_config/s/k/x").unwrap(),
            Endpoint::Node("n".into(), NodeOp::Missing)
        );
        assert_eq!(
            parse("/_node/_local/_nodes/a%40h").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::NodeDoc("a@h".into()))
        );
        assert_eq!(
            parse("/_node/_local/_settee/ddocs_changed/a%2Fb").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::DesignsChanged("a/b".into()))
        );
        assert_eq!(
            parse("/_node/_local/_nodes/_all_docs").unwrap(),
            Endpoint::Node("_local".into(), NodeOp::NodeDocs)
        );
        for path in ["/_node/_local/_nodes", "/_node/_local/_nodes/"] {
            assert_eq!(
                parse(path).unwrap(),
                Endpoint::Node("_local".into(), NodeOp::NodesInfo)
            );
        }
        assert_eq!(
            parse("/_node").unwrap(),
            Endpoint::Node(String::new(), NodeOp::Incomplete)
        );
    }
}
