//! Every route Settee serves: the path grammar ([`settee_wire::path`]) gives an [`Endpoint`],
//! dispatched here by one exhaustive `match`.

use crate::error::ApiError;
use crate::handlers::design_fns;
use crate::handlers::{
    all_docs, attachments, bulk, changes, cluster_moves, cluster_setup, database, doc, mango, node,
    partition, reshard, rewrite, server, unavailable, utils, views,
};
use crate::{AppState, Req};
use axum::response::Response;
use settee_node::fabric::DbRef;
pub use settee_wire::path::{check_url_encoding, design_fn, parse, DbOp, Endpoint, NodeOp};

/// Whether CouchDB answers the endpoint from its node-local `couch_httpd` rather than
/// chttpd (see [`crate::reply::NodeLocal`]).
pub fn is_node_local(endpoint: &Endpoint) -> bool {
    matches!(
        endpoint,
        Endpoint::Session
            | Endpoint::Membership
            | Endpoint::Uuids
            | Endpoint::Reshard(_)
            | Endpoint::DbOp(_, DbOp::Shards(_))
            // CouchDB's `_nodes` database, behind its node-local interface.
            | Endpoint::Node(_, NodeOp::NodeDoc(_) | NodeOp::NodeDocs | NodeOp::NodesInfo)
    ) || own_welcome(endpoint)
}

/// `/_node/{this node's name}`, which CouchDB answers from its node-local interface.
fn own_welcome(endpoint: &Endpoint) -> bool {
    matches!(endpoint, Endpoint::Node(name, NodeOp::Info) if *name == settee_core::node::name())
}

/// Which refusals of a node-local endpoint couch_httpd answers itself (without a request
/// id): all of `_session`'s, the 405s of `_uuids` and `_reshard`; other errors go through
/// chttpd's error handling.
pub fn own_refusals(endpoint: &Endpoint) -> Option<fn(&ApiError) -> bool> {
    match endpoint {
        Endpoint::Session => Some(|_| true),
        _ if own_welcome(endpoint) => Some(|e| matches!(e, ApiError::MethodNotAllowed(_))),
        Endpoint::Uuids | Endpoint::Reshard(_) => {
            Some(|e| matches!(e, ApiError::MethodNotAllowed(_)))
        }
        _ => None,
    }
}

pub async fn dispatch(state: AppState, endpoint: Endpoint, req: Req) -> Result<Response, ApiError> {
    match endpoint {
        Endpoint::Root => server::root(&state, &req),
        Endpoint::Up => server::up(&state, &req),
        Endpoint::Uuids => server::uuids(&state, &req),
        Endpoint::AllDbs(extra) => server::all_dbs(&state, &req, extra),
        Endpoint::DbsInfo(extra) => server::dbs_info(&state, req, extra).await,
        Endpoint::DbUpdates => changes::db_updates(&state, req).await,
        Endpoint::ActiveTasks => server::active_tasks(&state, &req),
        Endpoint::Session => server::session(&state, req).await,
        Endpoint::Membership => node::membership(&state, &req),
        Endpoint::Node(name, op) => node::node(&state, &name, op, req).await,
        Endpoint::Db(db) => database::db(&state, &db, req).await,
        Endpoint::DbOp(db, op) => {
            let handle = state.fabric.open_db(&db)?;
            match op {
                DbOp::AllDocs => {
                    all_docs::all_docs(&state, handle, req, all_docs::Namespace::All).await
                }
                DbOp::DesignDocs => {
                    all_docs::all_docs(&state, handle, req, all_docs::Namespace::Design).await
                }
                DbOp::LocalDocs => {
                    all_docs::all_docs(&state, handle, req, all_docs::Namespace::Local).await
                }
                DbOp::AllDocsQueries => {
                    all_docs::queries(&state, handle, req, all_docs::Namespace::All).await
                }
                DbOp::DesignDocsQueries => {
                    all_docs::queries(&state, handle, req, all_docs::Namespace::Design).await
                }
                DbOp::LocalDocsQueries => {
                    all_docs::queries(&state, handle, req, all_docs::Namespace::Local).await
                }
                DbOp::BulkDocs => bulk::bulk_docs(&state, handle, req).await,
                DbOp::BulkGet => bulk::bulk_get(&state, handle, req).await,
                DbOp::Changes => changes::changes(state, handle, req).await,
                DbOp::Compact => database::compact(&state, handle, &req),
                DbOp::EnsureFullCommit => database::ensure_full_commit(&state, &req),
                DbOp::RevsLimit => {
                    database::revs_limit(&state, handle, req, database::Limit::Revs).await
                }
                DbOp::PurgedInfosLimit => {
                    database::revs_limit(&state, handle, req, database::Limit::PurgedInfos).await
                }
                DbOp::Purge => bulk::purge(&state, handle, req).await,
                DbOp::RevsDiff => bulk::revs_diff(&state, handle, req, false).await,
                DbOp::MissingRevs => bulk::revs_diff(&state, handle, req, true).await,
                DbOp::Security => database::security(&state, handle, req).await,
                DbOp::ViewCleanup => views::view_cleanup(state, handle, req).await,
                DbOp::TempView => views::temp_view(req).await,
                DbOp::Partition(segs) => partition(&state, handle, segs, req).await,
                DbOp::Shards(id) => database::shards(&state, &handle, id.as_deref(), &req),
                DbOp::SyncShards => database::sync_shards(&req),
                DbOp::View(ddoc, view) => views::view(state, handle, ddoc, view, req).await,
                DbOp::ViewQueries(ddoc, view) => {
                    views::view_queries(state, handle, ddoc, view, req).await
                }
                DbOp::DesignInfo(ddoc) => views::design_info(state, handle, ddoc, req).await,
                DbOp::CompactDesign(ddoc) => views::compact_design(state, handle, ddoc, req).await,
                DbOp::Find => mango::find(state, handle, req, false, None).await,
                DbOp::Explain => mango::find(state, handle, req, true, None).await,
                DbOp::Index(rest) => mango::index(state, handle, rest, req).await,
                DbOp::Rewrite(ddoc, path) => {
                    rewrite::rewrite(&state, handle, ddoc, path, req).await
                }
                DbOp::DesignFn(ddoc, f) => design_fns::design_fn(state, handle, ddoc, f, req).await,
            }
        }
        // A form upload (`multipart/form-data`), local documents' too.
        Endpoint::Doc(db, id) if req.method == "POST" => {
            attachments::form(&state, state.fabric.open_db(&db)?, id, req).await
        }
        Endpoint::Doc(db, id) => doc::doc(&state, state.fabric.open_db(&db)?, id, req).await,
        Endpoint::NotUtf8(name) => doc::not_utf8(&state, name, &req).await,
        Endpoint::Attachment(db, id, name) => {
            attachments::attachment(&state, state.fabric.open_db(&db)?, id, name, req).await
        }
        Endpoint::DbBadRequest(db, reason) => {
            state.fabric.open_db(&db)?;
            Err(ApiError::bad_request(reason))
        }
        Endpoint::DbUnimplemented(_, what) => Err(ApiError::NotImplemented(format!(
            "{what} are not supported by this Settee version"
        ))),
        Endpoint::Favicon => utils::favicon(&state, req).await,
        Endpoint::Utils(file) => utils::utils(&state, req, file).await,
        Endpoint::Replicate(false) => crate::handlers::replicate::replicate(&state, req).await,
        Endpoint::Replicate(true) => unavailable::replicate(req, true).await,
        Endpoint::Scheduler(rest) => {
            crate::handlers::scheduler::scheduler(&state, &req, &rest).await
        }
        Endpoint::Reshard(rest) => reshard::reshard(&state, req, &rest).await,
        Endpoint::ClusterSetup => cluster_setup::cluster_setup(&state, req).await,
        Endpoint::Cluster(rest) => cluster_moves::cluster(&state, &rest, req).await,
        Endpoint::SearchAnalyze => unavailable::search_analyze(req).await,
        Endpoint::NouveauAnalyze => unavailable::nouveau_analyze(&req),
        Endpoint::ReloadQueryServers => unavailable::reload_query_servers(&state, &req),
        Endpoint::UnknownServer(segs) => unavailable::unknown(&req, &segs),
    }
}

// ---- /{db}/_partition/{partition}/… ---------------------------------------------------

fn not_partitioned() -> ApiError {
    ApiError::bad_request("database is not partitioned")
}

async fn partition(
    state: &AppState,
    db: DbRef,
    segs: Vec<String>,
    req: Req,
) -> crate::error::ApiResult<Response> {
    let partitioned = db.partitioned;
    match segs.as_slice() {
        [] => Err(ApiError::bad_request("invalid_partition_req")),
        [p] if matches!(req.method.as_str(), "GET" | "HEAD") => {
            settee_core::validate_partition(p)?;
            if !partitioned {
                return Err(not_partitioned());
            }
            partition::info(state, db, p.clone()).await
        }
        [p] if req.method == "POST" && p.starts_with('_') => {
            Err(settee_core::Error::IllegalPartition(
                "Partition must not start with an underscore".into(),
            )
            .into())
        }
        [_] => Err(ApiError::MethodNotAllowed("GET")),
        [p, rest @ ..] => {
            if !partitioned {
                return Err(not_partitioned());
            }
            settee_core::validate_partition(p)?;
            if req.params.get("partition").is_some_and(|q| q != p) {
                return Err(ApiError::bad_request(
                    "Conflicting value for `partition` in query string",
                ));
            }
            match rest {
                [op] if op == "_all_docs" => {
                    settee_metrics::global().partition_all_docs_requests.inc();
                    all_docs::partition_all_docs(state, db, req, p).await
                }
                [op, q] if op == "_all_docs" && q == "queries" => {
                    all_docs::partition_queries(state, db, req, p).await
                }
                [op] if op == "_find" || op == "_explain" => {
                    let explain = op == "_explain";
                    mango::find(state.clone(), db, req, explain, Some(p.clone())).await
                }
                [op, index @ ..] if op == "_index" => {
                    mango::index(state.clone(), db, index.to_vec(), req).await
                }
                [d, ddoc, f, fun @ ..] if d == "_design" => {
                    design(state, db, p, ddoc.clone(), f, fun, req).await
                }
                _ => Err(ApiError::NotFound("missing".into())),
            }
        }
    }
}

/// `_partition/{p}/_design/{ddoc}/…`: views and lists read the partition; shows, updates
/// and `_info` are the design document's own (`chttpd_db:handle_partition_req` passes the
/// partition only to view queries).
async fn design(
    state: &AppState,
    db: DbRef,
    partition: &str,
    ddoc: String,
    f: &str,
    fun: &[String],
    mut req: Req,
) -> crate::error::ApiResult<Response> {
    let fun_path: Vec<&str> = fun.iter().map(String::as_str).collect();
    match (f, fun_path.as_slice()) {
        ("_view", [view]) => {
            req.params.set("partition", partition);
            views::view(state.clone(), db, ddoc, view.to_string(), req).await
        }
        ("_list", _) => {
            req.params.set("partition", partition);
            let f = design_fn(f, &fun_path);
            design_fns::design_fn(state.clone(), db, ddoc, f, req).await
        }
        ("_show" | "_update", _) => {
            let f = design_fn(f, &fun_path);
            design_fns::design_fn(state.clone(), db, ddoc, f, req).await
        }
        ("_info", []) => views::design_info(state.clone(), db, ddoc, req).await,
        _ => Err(ApiError::NotFound("missing".into())),
    }
}
