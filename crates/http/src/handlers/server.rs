//! Server-wide endpoints: `/`, `/_up`, `/_uuids`, `/_all_dbs`, `/_dbs_info`,
//! `/_active_tasks`, `/_session`.

use super::{allow, blocking};
use crate::error::{ApiError, ApiResult};
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use settee_node::dbs::{NameKey, NameRange};
use settee_node::Fabric;

/// What `GET /` lists under `features`: only what Settee really provides (CouchDB's
/// `config:features()`). JavaScript runs on QuickJS (CouchDB 3.4+ advertises `quickjs`
/// when that engine is available). Not listed: `access-ready` (per-document `_access`),
/// `partitioned`, `pluggable-storage-engines`, `reshard`, `scheduler` (the replicator),
/// `search`, `nouveau`.
pub const FEATURES: &[&str] = &["quickjs"];

pub fn root(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let mut body = json!({
        "couchdb": "Welcome",
        "version": "3.5.2",
        "git_sha": env!("SETTEE_GIT_SHA"),
        "uuid": state.config.get_or("couchdb", "uuid", &state.http.server_uuid),
        "features": FEATURES,
    });
    state.add_vendor(&mut body);
    Ok(json(StatusCode::OK, &body))
}

/// `GET /_up`: `404` with the mode while `[couchdb] maintenance_mode` is `true` or
/// `nolb` (so a load balancer takes the node out), else ok; a single node has no seeds.
pub fn up(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    Ok(
        match state.config.get("couchdb", "maintenance_mode").as_deref() {
            Some("true") => json(
                StatusCode::NOT_FOUND,
                &json!({"status": "maintenance_mode"}),
            ),
            Some("nolb") => json(StatusCode::NOT_FOUND, &json!({"status": "nolb"})),
            _ => json(StatusCode::OK, &json!({"seeds": {}, "status": "ok"})),
        },
    )
}

/// An integer as Erlang's `list_to_integer/1` reads it (optional sign, decimal digits),
/// saturating instead of growing a bignum; `None` where Erlang raises `badarg`.
fn erlang_integer(s: &str) -> Option<i128> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = digits.bytes().fold(0i128, |n, d| {
        n.saturating_mul(10).saturating_add((d - b'0') as i128)
    });
    Some(if neg { -n } else { n })
}

/// `GET /_uuids?count=N`, with the cache-busting headers CouchDB sends.
pub fn uuids(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET")?;
    let max = state
        .config
        .get_u64("uuids", "max_count", state.http.max_uuid_count as u64);
    let positive = || ApiError::bad_request("count must be a positive integer");
    let count = match req.params.get("count") {
        None => 1,
        Some(v) => match erlang_integer(v).ok_or_else(positive)? {
            n if n > max as i128 => return Err(ApiError::bad_request("count parameter too large")),
            n if n < 0 => return Err(positive()),
            n => n as usize,
        },
    };
    let ids = state.uuids(count)?;
    let etag = settee_core::uuids::etag_of_strings(&ids);
    let mut resp = if crate::req::etag_matches(&req.headers, &etag) {
        let mut r = Response::new(axum::body::Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = json(StatusCode::OK, &json!({ "uuids": ids }));
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(
            header::EXPIRES,
            HeaderValue::from_static("Mon, 01 Jan 1990 00:00:00 GMT"),
        );
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        r
    };
    resp.headers_mut()
        .insert(header::ETAG, HeaderValue::from_str(&etag).expect("ascii"));
    Ok(resp)
}

/// `startkey`/`endkey` (or `key`), `inclusive_end`, `descending`, `skip` and `limit`
/// of `/_all_dbs` and `GET /_dbs_info`.
fn name_range(req: &Req) -> ApiResult<NameRange> {
    let p = &req.params;
    if p.get("keys").is_some() {
        return Err(ApiError::bad_request(
            "`keys` is not supported by /_all_dbs and /_dbs_info in this Settee version",
        ));
    }
    let key = p.json("key")?.map(NameKey::of);
    let start = p.json_any(&["startkey", "start_key"])?.map(NameKey::of);
    let end = p.json_any(&["endkey", "end_key"])?.map(NameKey::of);
    let (start, end) = match key {
        Some(k) => (Some(k.clone()), Some(k)),
        None => (start, end),
    };
    Ok(NameRange {
        start,
        end,
        descending: p.flag("descending")?,
        inclusive_end: p.bool("inclusive_end")?.unwrap_or(true),
        skip: p.uint("skip")?.unwrap_or(0) as usize,
        limit: p.uint("limit")?.map_or(usize::MAX, |l| l as usize),
    })
}

/// CouchDB serves `/_all_dbs/…` with the `/_all_dbs` handler, which then fails on its
/// first row (after starting a `200` response) because the path is not `/_all_dbs`; the
/// nearest well-formed answer is the `not_found` CouchDB gives unknown sub-paths.
fn no_sub_path(extra: bool) -> ApiResult<()> {
    if extra {
        return Err(ApiError::NotFound("missing".into()));
    }
    Ok(())
}

pub fn all_dbs(state: &AppState, req: &Req, extra: bool) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    no_sub_path(extra)?;
    let names = Fabric::all_dbs(&*state.fabric, &name_range(req)?)?;
    // As chttpd_misc: an ETag of the list, and a 304 when it still matches.
    let body = serde_json::to_vec(&names).expect("json");
    let etag = settee_node::render::make_etag(&body);
    let tag = HeaderValue::from_str(&etag).expect("etags are ASCII");
    if crate::req::etag_matches(&req.headers, &etag) {
        return Ok(crate::reply::not_modified(tag));
    }
    let mut resp = crate::reply::json_bytes(StatusCode::OK, body);
    resp.headers_mut().insert(header::ETAG, tag);
    Ok(resp)
}

pub async fn dbs_info(state: &AppState, mut req: Req, extra: bool) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let names: Vec<Value> = if req.method == Method::POST {
        crate::req::require_json(&req.headers)?;
        let body = req.json().await?;
        let Value::Object(body) = body else {
            return Err(ApiError::bad_request("Request body must be a JSON object"));
        };
        let keys = match body.get("keys") {
            None => return Err(ApiError::bad_request("`keys` member must exist.")),
            Some(Value::Array(keys)) => keys.clone(),
            Some(_) => return Err(ApiError::bad_request("`keys` member must be an array.")),
        };
        let max = state
            .config
            .get_u64("chttpd", "max_db_number_for_dbs_info_req", 100);
        if keys.len() as u64 > max {
            return Err(ApiError::bad_request("too_many_keys"));
        }
        keys
    } else {
        no_sub_path(extra)?;
        let names = Fabric::all_dbs(&*state.fabric, &name_range(&req)?)?;
        names.into_iter().map(Value::String).collect()
    };
    let node = state.fabric.clone();
    let out = blocking(move || Ok(Fabric::dbs_info(&*node, names)?)).await?;
    Ok(json(StatusCode::OK, &Value::Array(out)))
}

pub fn active_tasks(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let mut tasks = state.active_tasks();
    tasks.extend(state.replicator.tasks());
    Ok(json(StatusCode::OK, &Value::Array(tasks)))
}

/// `/_session`: who am I (`GET`), log in with a session cookie (`POST`), log out
/// (`DELETE`).
pub async fn session(state: &AppState, mut req: Req) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => {
            if req.user.name.is_none() && req.params.get("basic") == Some("true") {
                return Err(ApiError::unauthorized("Please login."));
            }
            let mut info = serde_json::Map::new();
            info.insert(
                "authentication_handlers".into(),
                json!(crate::auth::handler_names(&state.config)),
            );
            if let Some(handler) = req.authenticated_by {
                info.insert("authenticated".into(), json!(handler));
            }
            if let Some(db) = state.config.get("chttpd_auth", "authentication_db") {
                info.insert("authentication_db".into(), json!(db));
            }
            let user = json!({"name": req.user.name, "roles": req.user.roles});
            Ok(json(
                StatusCode::OK,
                &json!({"ok": true, "userCtx": user, "info": info}),
            ))
        }
        "POST" => login(state, &mut req).await,
        "DELETE" => {
            let clear = state.cleared_session_cookie();
            Ok(with_cookie(
                session_reply(state, &req, "next", json!({"ok": true}))?,
                &clear,
            ))
        }
        _ => Err(ApiError::MethodNotAllowed("GET,HEAD,POST,DELETE")),
    }
}

async fn login(state: &AppState, req: &mut Req) -> ApiResult<Response> {
    let ctype = req
        .header("content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let body = req.bytes().await?;
    let form: Vec<(String, String)> = if ctype.starts_with("application/x-www-form-urlencoded") {
        form_urlencoded::parse(&body).into_owned().collect()
    } else if ctype.starts_with("application/json") {
        match crate::req::parse_json(&body)? {
            Value::Object(m) => m
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => (k, s),
                    other => (k, other.to_string()),
                })
                .collect(),
            _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
        }
    } else {
        // CouchDB reads no fields from other bodies, so the username is missing.
        Vec::new()
    };
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let name = match (field("name"), field("username")) {
        (None, None) => {
            return Err(ApiError::bad_request(
                "request body must contain a username",
            ))
        }
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_request(
                "request body contains different usernames",
            ))
        }
        (Some(a), _) | (None, Some(a)) => a,
    };
    let password = field("password").unwrap_or_default();
    let (node, peer, name2) = (state.node.clone(), req.peer.clone(), name.clone());
    let user = blocking(move || Ok(node.login(&name2, &password, &peer)?)).await?;
    let Some((user, salt)) = user else {
        tracing::warn!(user = %name, peer = %req.peer, "authentication failed");
        let clear = state.cleared_session_cookie();
        let body = json!({"error": "unauthorized", "reason": "Name or password is incorrect."});
        let mut resp = with_cookie(session_reply(state, req, "fail", body)?, &clear);
        if resp.status() == StatusCode::OK {
            *resp.status_mut() = StatusCode::UNAUTHORIZED;
        }
        return Ok(resp);
    };
    let cookie = state.session_cookie(&name, &salt)?;
    let body = json!({"ok": true, "name": name, "roles": user.roles});
    Ok(with_cookie(
        session_reply(state, req, "next", body)?,
        &cookie,
    ))
}

/// 200 with `body`, or a 302 to the `redirect` parameter (`next`/`fail`) when given,
/// made absolute as CouchDB's `absolute_uri` does.
fn session_reply(state: &AppState, req: &Req, redirect: &str, body: Value) -> ApiResult<Response> {
    let Some(to) = req.params.get(redirect) else {
        return Ok(json(StatusCode::OK, &body));
    };
    if !to.starts_with('/') {
        return Err(ApiError::bad_request("path must begin with a /."));
    }
    let mut resp = json(StatusCode::FOUND, &body);
    if let Some(v) = crate::location::absolute_uri(&state.config, req, to) {
        resp.headers_mut().insert(axum::http::header::LOCATION, v);
    }
    Ok(resp)
}

/// Adds `Set-Cookie` as the first header, where CouchDB puts it (couchdb-python's
/// `Server.login` reads the first header).
fn with_cookie(mut resp: Response, cookie: &str) -> Response {
    let Ok(v) = axum::http::HeaderValue::from_str(cookie) else {
        return resp;
    };
    let rest = std::mem::take(resp.headers_mut());
    let h = resp.headers_mut();
    h.insert(axum::http::header::SET_COOKIE, v);
    for (name, value) in &rest {
        h.append(name, value.clone());
    }
    resp
}
