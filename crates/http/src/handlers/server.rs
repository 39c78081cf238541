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

pub fn root(state: &AppState, req: &Req) -> ApiResult<Response> {
    allow(&req.method, "GET,HEAD")?;
    Ok(json(
        StatusCode::OK,
        &json!({
            "couchdb": "Welcome",
            "version": "3.5.2",
            "uuid": state.config.server_uuid,
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
    let count = req.params.uint("count")?.unwrap_or(1) as usize;
    if count > state.config.max_uuid_count {
        return Err(ApiError::bad_request(format!(
            "count parameter too large (max {})",
            state.config.max_uuid_count
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

pub fn session(req: &Req) -> ApiResult<Response> {
    match req.method.as_str() {
        "GET" | "HEAD" => {
            let (name, roles) = (json!(req.user.name), json!(req.user.roles));
            let mut info = json!({"authentication_handlers": ["default"]});
            if req.user.name.is_some() {
                info["authenticated"] = json!("default");
            }
            Ok(json(StatusCode::OK, &json!({"ok": true, "userCtx": {"name": name, "roles": roles}, "info": info})))
        }
        "POST" | "DELETE" => Err(ApiError::NotImplemented(
            "cookie sessions are not supported by this Settee version; use HTTP Basic authentication".into(),
        )),
        _ => Err(ApiError::MethodNotAllowed("GET,HEAD,POST,DELETE")),
    }
}
