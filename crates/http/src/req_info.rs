//! The request a design function is told about (CouchDB's `chttpd_external:json_req_obj`),
//! read from an HTTP request into the node's [`ReqInfo`].

use crate::Req;
use serde_json::Value;
use settee_node::design_filter::ReqInfo;

/// The request `_changes` is answering; `body` is a POST's JSON body.
pub fn of_request(req: &Req, body: Option<&Value>) -> ReqInfo {
    let path = req
        .uri
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let raw_path = req
        .uri
        .path_and_query()
        .map_or_else(|| req.uri.path().to_string(), |p| p.as_str().to_string());
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in &req.headers {
        let name = title_case(name.as_str());
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            None => headers.push((name, value)),
        }
    }
    let sized = req.headers.contains_key(axum::http::header::CONTENT_LENGTH)
        || req
            .headers
            .contains_key(axum::http::header::TRANSFER_ENCODING);
    let body = match body {
        Some(json) => json.clone(),
        None if sized => Value::String(String::new()),
        None => Value::String("undefined".into()),
    };
    ReqInfo {
        method: req.method.to_string(),
        path,
        raw_path,
        query: req
            .params
            .pairs()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        headers,
        body,
        peer: req.peer.clone(),
        cookie: req.header("cookie").map(parse_cookies).unwrap_or_default(),
        user: req.user.clone(),
        id: None,
        form: Vec::new(),
    }
}

/// The request a show, list or update function answers (`chttpd_external:json_req_obj`):
/// the body as text (`"undefined"` when the request has none), decoded as a form when
/// it is one, and the document id the path names.
pub fn for_render(req: &Req, body: &[u8], id: Option<String>) -> ReqInfo {
    let text =
        (!body.is_empty()).then(|| Value::String(String::from_utf8_lossy(body).into_owned()));
    let mut info = of_request(req, text.as_ref());
    info.id = id;
    let form = req.header("content-type").is_some_and(|ct| {
        ct.to_ascii_lowercase()
            .starts_with("application/x-www-form-urlencoded")
    });
    if form && (req.method == "POST" || req.method == "PUT") {
        info.form = form_urlencoded::parse(body).into_owned().collect();
    }
    info
}

/// `content-type` → `Content-Type`.
fn title_case(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A `Cookie` header's pairs (`mochiweb_cookies:parse_cookie`): `;`- or `,`-separated
/// `name=value`, quoted values unquoted.
fn parse_cookies(header: &str) -> Vec<(String, String)> {
    header
        .split([';', ','])
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let name = name.trim();
            if name.is_empty() || name.starts_with('$') {
                return None;
            }
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            Some((name.to_string(), value.to_string()))
        })
        .collect()
}
