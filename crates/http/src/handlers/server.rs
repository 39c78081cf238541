//! Server-wide endpoints: `/`, `/_up`, `/_uuids`, `/_all_dbs`, `/_dbs_info`,
//! `/_active_tasks`, `/_session`.

use super::{allow, blocking};
use crate::error::{ApiError, ApiResult};
use crate::handlers::database::db_info_json;
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use rand::Rng;
use serde_json::{json, Value};
use settee_auth::cookie::CookieOptions;

pub fn root(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    Ok(json(
        StatusCode::OK,
        &json!({
            "couchdb": "Welcome",
            "version": "3.5.2",
            "uuid": state.node.get_or("couchdb", "uuid", &state.config.server_uuid),
            "features": [],
            "vendor": {"name": "Settee", "version": env!("CARGO_PKG_VERSION")},
        }),
    ))
}

pub fn up(req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    Ok(json(StatusCode::OK, &json!({"status": "ok", "seeds": {}})))
}

/// CouchDB's default `sequential` uuid algorithm: a random 26-hex prefix and a 6-hex
/// suffix that grows by random steps, so ids from one server sort roughly by time.
pub struct UuidGen {
    prefix: String,
    suffix: u32,
}

impl UuidGen {
    pub fn new() -> UuidGen {
        UuidGen {
            prefix: new_prefix(),
            suffix: rand::thread_rng().gen_range(0..0x1000),
        }
    }

    pub fn next(&mut self) -> String {
        self.suffix += rand::thread_rng().gen_range(1..0xffe);
        if self.suffix >= 0xfff000 {
            self.prefix = new_prefix();
            self.suffix = rand::thread_rng().gen_range(0..0x1000);
        }
        format!("{}{:06x}", self.prefix, self.suffix)
    }
}

fn new_prefix() -> String {
    let bytes: [u8; 13] = rand::random();
    hex::encode(bytes)
}

pub fn uuids(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let count = req.params.uint("count")?.unwrap_or(1);
    let max = state
        .node
        .get_u64("uuids", "max_count", state.config.max_uuid_count as u64);
    if count > max {
        return Err(ApiError::bad_request(format!(
            "count parameter too large (max {max})"
        )));
    }
    let ids: Vec<String> = (0..count).map(|_| state.next_uuid()).collect();
    Ok(json(StatusCode::OK, &json!({"uuids": ids})))
}

/// Applies `startkey`/`endkey`/`descending`/`skip`/`limit` to a sorted list of names.
fn select_names(req: &Req, names: Vec<String>) -> ApiResult<Vec<String>> {
    let p = &req.params;
    let str_param = |ks: &[&str]| -> ApiResult<Option<String>> {
        match p.json_any(ks)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::QueryParse(format!(
                "`{}` must be a string",
                ks[0]
            ))),
        }
    };
    let start = str_param(&["startkey", "start_key"])?;
    let end = str_param(&["endkey", "end_key"])?;
    let descending = p.flag("descending")?;
    let inclusive_end = p.bool("inclusive_end")?.unwrap_or(true);
    let skip = p.uint("skip")?.unwrap_or(0) as usize;
    let limit = p.uint("limit")?.map_or(usize::MAX, |l| l as usize);
    let mut names = names;
    if descending {
        names.reverse();
    }
    let after_start = |n: &String| match &start {
        None => true,
        Some(s) if descending => n <= s,
        Some(s) => n >= s,
    };
    let before_end = |n: &String| match &end {
        None => true,
        Some(e) if descending => {
            if inclusive_end {
                n >= e
            } else {
                n > e
            }
        }
        Some(e) => {
            if inclusive_end {
                n <= e
            } else {
                n < e
            }
        }
    };
    Ok(names
        .into_iter()
        .filter(after_start)
        .take_while(before_end)
        .skip(skip)
        .take(limit)
        .collect())
}

pub fn all_dbs(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let names = select_names(req, state.couch.names())?;
    Ok(json(StatusCode::OK, &json!(names)))
}

pub async fn dbs_info(state: &AppState, mut req: Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD,POST")?;
    let names = if req.method == Method::POST {
        crate::req::require_json(&req.headers)?;
        let body = req.json().await?;
        let keys = body
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| ApiError::bad_request("`keys` member must exist."))?;
        if keys.len() > 100 {
            return Err(ApiError::bad_request(
                "`keys` member must be less than or equal to 100",
            ));
        }
        keys.iter()
            .map(|k| {
                k.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::bad_request("`keys` must be strings"))
            })
            .collect::<ApiResult<Vec<String>>>()?
    } else {
        select_names(&req, state.couch.names())?
    };
    let state = state.clone();
    let out = blocking(move || {
        Ok(names
            .into_iter()
            .map(|name| match state.couch.get(&name) {
                Ok(db) => json!({"key": name, "info": db_info_json(&state, &db)}),
                Err(_) => json!({"key": name, "error": "not_found"}),
            })
            .collect::<Vec<Value>>())
    })
    .await?;
    Ok(json(StatusCode::OK, &Value::Array(out)))
}

pub fn active_tasks(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    let mut tasks = match state.tasks.list() {
        Value::Array(a) => a,
        _ => Vec::new(),
    };
    tasks.extend(state.views.tasks.list());
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
                json!(crate::auth::handler_names(&state.node)),
            );
            if let Some(handler) = req.authenticated_by {
                info.insert("authenticated".into(), json!(handler));
            }
            if let Some(db) = state.node.get("chttpd_auth", "authentication_db") {
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
            let opts = CookieOptions::from_section(&crate::auth::auth_section(&state.node));
            let clear = opts.clear_cookie(crate::auth::now_secs(), false);
            Ok(with_cookie(
                session_reply(&req, "next", json!({"ok": true})),
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
        return Err(ApiError::BadContentType(
            "Content-Type must be 'application/x-www-form-urlencoded' or 'application/json'",
        ));
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
    let (state2, peer) = (state.clone(), req.peer.clone());
    let name2 = name.clone();
    let user = blocking(move || {
        state2
            .auth
            .login(&name2, &password, &peer, &state2.node, &state2.couch)
    })
    .await?;
    let opts = CookieOptions::from_section(&crate::auth::auth_section(&state.node));
    let now = crate::auth::now_secs();
    let Some((user, salt)) = user else {
        tracing::warn!(user = %name, peer = %req.peer, "authentication failed");
        let clear = opts.clear_cookie(now, false);
        let body = json!({"error": "unauthorized", "reason": "Name or password is incorrect."});
        let mut resp = with_cookie(session_reply(req, "fail", body), &clear);
        if resp.status() == StatusCode::OK {
            *resp.status_mut() = StatusCode::UNAUTHORIZED;
        }
        return Ok(resp);
    };
    let secret = session_secret(state)?;
    let cookie = crate::auth::session_cookie_header(&opts, &name, &secret, salt.as_bytes(), now);
    let body = json!({"ok": true, "name": name, "roles": user.roles});
    Ok(with_cookie(session_reply(req, "next", body), &cookie))
}

/// `[chttpd_auth] secret`, created (and persisted) on first use as CouchDB does.
fn session_secret(state: &AppState) -> ApiResult<String> {
    let section = crate::auth::auth_section(&state.node);
    if let Some(s) = section.get("secret").filter(|s| !s.is_empty()) {
        return Ok(s.clone());
    }
    let secret = hex::encode(rand::random::<[u8; 16]>());
    state.node.set("chttpd_auth", "secret", &secret)?;
    Ok(secret)
}

/// 200 with `body`, or a 302 to the `redirect` parameter (`next`/`fail`) when given.
fn session_reply(req: &Req, redirect: &str, body: Value) -> Response {
    match req.params.get(redirect) {
        Some(to) => {
            let mut resp = json(StatusCode::FOUND, &body);
            if let Ok(v) = axum::http::HeaderValue::from_str(to) {
                resp.headers_mut().insert(axum::http::header::LOCATION, v);
            }
            resp
        }
        None => json(StatusCode::OK, &body),
    }
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
