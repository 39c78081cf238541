//! Render functions of design documents: `_show/{func}[/{docid}]`, `_list/{func}/{view}`
//! (and `/{other ddoc}/{view}`, and over `_all_docs`), `_update/{func}[/{docid}]`. Each
//! parses its request, makes one call to the function (see `design_render`: in process for
//! JavaScript, else in the design document's language's query server) and renders its
//! answer; an update's document goes through the ordinary write path.

use super::{allow, blocking};
use crate::design_render::{external_response, list_response, showlist_csp};
use crate::error::{ApiError, ApiResult};
use crate::mrargs::MrArgs;
use crate::req::{etag_matches, require_json};
use crate::{AppState, Req};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use settee_node::fabric::DbRef;
use settee_node::list::ListCall;
use settee_node::render::{DesignDoc, FnCall, Shown};
use settee_node::Fabric;

/// What a path below `_design/{ddoc}/` asks of a render function.
pub use settee_wire::DesignFn;

/// Answers `fun` of `_design/{ddoc}`; the design document is read first, as CouchDB reads
/// it before it looks at the rest of the path.
pub async fn design_fn(
    state: AppState,
    db: DbRef,
    ddoc: String,
    fun: DesignFn,
    req: Req,
) -> ApiResult<Response> {
    let db = db.name;
    match fun {
        DesignFn::Show { name, doc } => show(state, db, ddoc, name, doc, req).await,
        DesignFn::List {
            name,
            view_ddoc,
            view,
        } => list(state, db, ddoc, name, view_ddoc, view, req).await,
        DesignFn::Update { name, doc } => update(state, db, ddoc, name, doc, req).await,
        DesignFn::BadPath(error, reason) => {
            let (fabric, user) = (state.fabric.clone(), req.user.clone());
            blocking(move || Ok(DesignDoc::open_via(&*fabric, &db, &user, &ddoc).map(drop)?))
                .await?;
            Err(ApiError::Named(
                StatusCode::NOT_FOUND,
                error.into(),
                reason.into(),
            ))
        }
    }
}

/// `_show/{func}[/{docid}]`, any method: the show's answer, with an ETag (304 when it
/// matches `If-None-Match`).
async fn show(
    state: AppState,
    db: String,
    ddoc: String,
    name: String,
    doc_id: Option<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let body = req.bytes().await?;
    let call = FnCall {
        req: crate::req_info::for_render(&req, &body, doc_id.clone()),
        ddoc,
        name,
        doc_id,
    };
    let accept = req.header("accept").map(str::to_owned);
    let headers = req.headers.clone();
    let node = state.fabric.clone();
    let shown = blocking(move || {
        let matches = |etag: &str| etag_matches(&headers, etag);
        Ok(Fabric::show(
            &*node,
            &db,
            &call,
            accept.as_deref(),
            &matches,
        )?)
    })
    .await?;
    match shown {
        Shown::NotModified(etag) => {
            let tag = HeaderValue::from_str(&etag).expect("etags are ASCII");
            Ok(crate::reply::not_modified(tag))
        }
        Shown::Answer(ext) => external_response(ext, &state),
    }
}

/// `_update/{func}[/{docid}]` (see [`settee_node::Node::update`]).
async fn update(
    state: AppState,
    db: String,
    ddoc: String,
    name: String,
    doc_id: Option<String>,
    mut req: Req,
) -> ApiResult<Response> {
    let body = req.bytes().await?;
    let call = FnCall {
        req: crate::req_info::for_render(&req, &body, doc_id.clone()),
        ddoc,
        name,
        doc_id,
    };
    // Any method but GET (and HEAD, which CouchDB takes for a GET); without `Allow`.
    let refused = matches!(req.method.as_str(), "GET" | "HEAD");
    let updated = Fabric::update(&*state.fabric, &db, &req.user, call, refused).await?;
    external_response(updated.response, &state)
}

/// `_list/{func}/{view}` and `_list/{func}/{ddoc}/{view}` (GET, or POST with `keys`): the
/// view's query parameters as for the view itself; the function's chunks stream.
async fn list(
    state: AppState,
    db: String,
    ddoc: String,
    name: String,
    view_ddoc: Option<String>,
    view: String,
    mut req: Req,
) -> ApiResult<Response> {
    // OPTIONS runs the list as GET does (`handle_view_list_req` matches it beside GET).
    if req.method != axum::http::Method::OPTIONS {
        allow(&req.method, "GET,POST,HEAD")?;
    }
    let (args, body) = if req.method == "POST" {
        require_json(&req.headers)?;
        let body = req.bytes().await?;
        (crate::req::args_of_body(&req, &body)?, body)
    } else {
        (MrArgs::from_query(&req.params)?, Default::default())
    };
    let call = ListCall {
        ddoc,
        name,
        view_ddoc,
        view,
        args,
        req: crate::req_info::for_render(&req, &body, None),
        csp: showlist_csp(&state),
    };
    let pieces = Fabric::list(&*state.fabric, &db, &req.user, call).await?;
    Ok(list_response(pieces).await)
}
