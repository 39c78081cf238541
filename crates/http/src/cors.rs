//! CORS as CouchDB's `chttpd_cors` does it: pure functions from the `[chttpd] enable_cors`
//! and `[cors]` settings plus a request's method and headers to the headers to send, and
//! [`ForRequest`], the hook `lib.rs` calls around every request.
//!
//! A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from an
//! accepted origin, for an allowed method and allowed headers, is answered `204` before
//! authentication; anything else falls through to normal handling with no CORS headers.
//! Other responses to an accepted origin carry `Access-Control-Allow-Origin` (always the
//! request's origin, never `*`), `Access-Control-Allow-Credentials` when configured, and
//! `Access-Control-Expose-Headers`.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use settee_node::config::NodeConfig;

const SUPPORTED_HEADERS: &[&str] = &[
    "accept",
    "accept-language",
    "authorization",
    "content-length",
    "content-range",
    "content-type",
    "destination",
    "expires",
    "if-match",
    "last-modified",
    "origin",
    "pragma",
    "x-couch-full-commit",
    "x-couch-id",
    "x-couch-persist",
    "x-couchdb-www-authenticate",
    "x-http-method-override",
    "x-requested-with",
    "x-couchdb-vhost-path",
];

const SUPPORTED_METHODS: &[&str] = &[
    "CONNECT", "COPY", "DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "TRACE",
];

/// The CORS "simple response headers", which browsers expose anyway; CouchDB lists the ones
/// a response has (`content-type` always first) ahead of the configured ones.
const SIMPLE_HEADERS: &[&str] = &[
    "content-type",
    "cache-control",
    "content-language",
    "expires",
    "last-modified",
    "pragma",
];

const COUCH_HEADERS: &[&str] = &[
    "accept-ranges",
    "etag",
    "server",
    "x-couch-request-id",
    "x-couch-update-newrev",
    "x-couchdb-body-time",
];

const DEFAULT_MAX_AGE: &str = "600";

/// The CORS settings in force for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// `[cors] origins`; `*` accepts every origin.
    pub origins: Vec<String>,
    /// `[cors] credentials`.
    pub credentials: bool,
    /// `[cors] methods`.
    pub methods: Vec<String>,
    /// `[cors] headers`, lower case.
    pub headers: Vec<String>,
    /// `[cors] exposed_headers`, lower case.
    pub exposed_headers: Vec<String>,
    /// `[cors] max_age`, sent as it is written.
    pub max_age: String,
}

pub type Headers = Vec<(&'static str, String)>;

/// CouchDB's list splitting: commas with optional spaces around them.
fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn lower(list: Vec<String>) -> Vec<String> {
    list.into_iter().map(|s| s.to_ascii_lowercase()).collect()
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

impl Cors {
    /// The settings, or `None` when `[chttpd] enable_cors` is not `true`.
    pub fn from_config(node: &NodeConfig) -> Option<Cors> {
        if !node.get_bool("chttpd", "enable_cors", false) {
            return None;
        }
        let list = |key: &str| node.get("cors", key).map(|v| split(&v));
        Some(Cors {
            origins: list("origins").unwrap_or_default(),
            credentials: node.get("cors", "credentials").as_deref() == Some("true"),
            methods: list("methods").unwrap_or_else(|| owned(SUPPORTED_METHODS)),
            headers: lower(list("headers").unwrap_or_else(|| owned(SUPPORTED_HEADERS))),
            exposed_headers: lower(list("exposed_headers").unwrap_or_else(|| owned(COUCH_HEADERS))),
            max_age: node.get_or("cors", "max_age", DEFAULT_MAX_AGE),
        })
    }

    /// Origins match case-sensitively, as the CORS specification says.
    fn accepts(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o == "*" || o == origin)
    }

    /// Never for the literal origin `*`: credentials need a named origin.
    fn with_credentials(&self, origin: &str, mut headers: Headers) -> Headers {
        if self.credentials && origin != "*" {
            headers.push(("access-control-allow-credentials", "true".into()));
        }
        headers
    }

    /// The headers of a `204` answer to a preflight request, or `None` when the request
    /// is not a preflight this configuration accepts (it is then handled as usual).
    pub fn preflight(&self, method: &Method, request: &HeaderMap) -> Option<Headers> {
        if method != Method::OPTIONS {
            return None;
        }
        let origin = header(request, "origin")?;
        let wanted = header(request, "access-control-request-method")?;
        if !self.accepts(origin) || !self.methods.iter().any(|m| m == wanted) {
            return None;
        }
        let asked = header(request, "access-control-request-headers").unwrap_or("");
        let all_allowed = lower(split(asked)).iter().all(|h| self.headers.contains(h));
        if !all_allowed {
            return None;
        }
        let headers = vec![
            ("access-control-allow-origin", origin.to_string()),
            ("access-control-max-age", self.max_age.clone()),
            ("access-control-allow-methods", self.methods.join(", ")),
        ];
        let mut headers = self.with_credentials(origin, headers);
        headers.push(("access-control-allow-headers", asked.to_string()));
        Some(headers)
    }

    /// The headers to add to an ordinary response for a request from `origin`.
    pub fn response_headers(&self, origin: &str, response: &HeaderMap) -> Headers {
        if !self.accepts(origin) {
            return Vec::new();
        }
        let headers = vec![("access-control-allow-origin", origin.to_string())];
        let mut headers = self.with_credentials(origin, headers);
        let mut exposed: Vec<&str> = SIMPLE_HEADERS
            .iter()
            .copied()
            .filter(|h| *h == "content-type" || response.contains_key(*h))
            .collect();
        exposed.extend(self.exposed_headers.iter().map(String::as_str));
        headers.push(("access-control-expose-headers", exposed.join(", ")));
        headers
    }
}

/// The CORS settings and origin of one request, when CORS is enabled and the request has
/// an `Origin` (the hook `lib.rs` calls).
pub struct ForRequest {
    cors: Cors,
    origin: String,
}

impl ForRequest {
    pub fn new(node: &NodeConfig, request: &HeaderMap) -> Option<ForRequest> {
        let origin = header(request, header::ORIGIN.as_str())?.to_string();
        Some(ForRequest {
            cors: Cors::from_config(node)?,
            origin,
        })
    }

    /// The `204` answer to an accepted preflight request.
    pub fn preflight(&self, method: &Method, request: &HeaderMap) -> Option<Response> {
        let headers = self.cors.preflight(method, request)?;
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::NO_CONTENT;
        add(&mut resp, headers);
        Some(resp)
    }

    /// Adds the CORS headers to an ordinary response.
    pub fn decorate(&self, resp: &mut Response) {
        let headers = self.cors.response_headers(&self.origin, resp.headers());
        add(resp, headers);
    }
}

fn add(resp: &mut Response, headers: Headers) {
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(name, v);
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use settee_node::config::{NodeConfig, Sections};

    fn cors(settings: &[(&str, &str, &str)]) -> Option<Cors> {
        let mut sections = Sections::new();
        for (s, k, v) in settings {
            sections
                .entry(s.to_string())
                .or_default()
                .insert(k.to_string(), v.to_string());
        }
        Cors::from_config(&NodeConfig::in_memory(sections))
    }

    fn enabled(origins: &str) -> Cors {
        cors(&[
            ("chttpd", "enable_cors", "true"),
            ("cors", "origins", origins),
        ])
        .unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn get<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
        h.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    const ORIGIN: &str = "http://example.com";

    fn preflight_from(origin: &str, method: &str) -> HeaderMap {
        headers(&[
            ("origin", origin),
            ("access-control-request-method", method),
        ])
    }

    #[test]
    fn disabled_unless_enable_cors() {
        assert_eq!(cors(&[("cors", "origins", "*")]), None);
        assert_eq!(
            cors(&[("chttpd", "enable_cors", "false"), ("cors", "origins", "*")]),
            None
        );
    }

    #[test]
    fn preflight_for_listed_origin() {
        let c = enabled("http://other.org, http://example.com");
        let h = c
            .preflight(&Method::OPTIONS, &preflight_from(ORIGIN, "GET"))
            .unwrap();
        assert_eq!(get(&h, "access-control-allow-origin"), Some(ORIGIN));
        assert_eq!(
            get(&h, "access-control-allow-methods"),
            Some("CONNECT, COPY, DELETE, GET, HEAD, OPTIONS, POST, PUT, TRACE")
        );
        assert_eq!(get(&h, "access-control-max-age"), Some("600"));
        assert_eq!(get(&h, "access-control-allow-headers"), Some(""));
        assert_eq!(get(&h, "access-control-allow-credentials"), None);
    }

    #[test]
    fn not_a_preflight() {
        let c = enabled(ORIGIN);
        let req = preflight_from(ORIGIN, "GET");
        assert_eq!(c.preflight(&Method::GET, &req), None, "not OPTIONS");
        let no_method = headers(&[("origin", ORIGIN)]);
        assert_eq!(c.preflight(&Method::OPTIONS, &no_method), None);
        let other = preflight_from("http://evil.com", "GET");
        assert_eq!(c.preflight(&Method::OPTIONS, &other), None, "origin");
        let case = preflight_from("http://EXAMPLE.com", "GET");
        assert_eq!(c.preflight(&Method::OPTIONS, &case), None, "case-sensitive");
        let method = preflight_from(ORIGIN, "PATCH");
        assert_eq!(c.preflight(&Method::OPTIONS, &method), None, "method");
        assert_eq!(
            enabled("").preflight(&Method::OPTIONS, &req),
            None,
            "no origins"
        );
    }

    #[test]
    fn requested_headers_must_all_be_allowed() {
        let c = enabled("*");
        let mut req = preflight_from(ORIGIN, "POST");
        req.insert(
            "access-control-request-headers",
            HeaderValue::from_static("Accept-Language, Content-Type"),
        );
        let h = c.preflight(&Method::OPTIONS, &req).unwrap();
        assert_eq!(
            get(&h, "access-control-allow-headers"),
            Some("Accept-Language, Content-Type")
        );
        req.insert(
            "access-control-request-headers",
            HeaderValue::from_static("content-type, x-not-allowed"),
        );
        assert_eq!(c.preflight(&Method::OPTIONS, &req), None);
    }

    #[test]
    fn custom_lists() {
        let c = cors(&[
            ("chttpd", "enable_cors", "true"),
            ("cors", "origins", "*"),
            ("cors", "methods", "GET,POST"),
            ("cors", "headers", "X-Extra, Content-Type"),
            ("cors", "max_age", "42"),
            ("cors", "exposed_headers", "ETag, X-Mine"),
        ])
        .unwrap();
        let mut req = preflight_from(ORIGIN, "POST");
        req.insert(
            "access-control-request-headers",
            HeaderValue::from_static("x-extra"),
        );
        let h = c.preflight(&Method::OPTIONS, &req).unwrap();
        assert_eq!(get(&h, "access-control-allow-methods"), Some("GET, POST"));
        assert_eq!(get(&h, "access-control-max-age"), Some("42"));
        assert_eq!(
            c.preflight(&Method::OPTIONS, &preflight_from(ORIGIN, "DELETE")),
            None
        );
        let r = c.response_headers(ORIGIN, &HeaderMap::new());
        assert_eq!(
            get(&r, "access-control-expose-headers"),
            Some("content-type, etag, x-mine")
        );
    }

    #[test]
    fn credentials_echo_the_origin_never_star() {
        let c = cors(&[
            ("chttpd", "enable_cors", "true"),
            ("cors", "origins", "*"),
            ("cors", "credentials", "true"),
        ])
        .unwrap();
        let h = c
            .preflight(&Method::OPTIONS, &preflight_from(ORIGIN, "GET"))
            .unwrap();
        assert_eq!(get(&h, "access-control-allow-origin"), Some(ORIGIN));
        assert_eq!(get(&h, "access-control-allow-credentials"), Some("true"));
        let r = c.response_headers(ORIGIN, &HeaderMap::new());
        assert_eq!(get(&r, "access-control-allow-origin"), Some(ORIGIN));
        assert_eq!(get(&r, "access-control-allow-credentials"), Some("true"));
        let star = c.response_headers("*", &HeaderMap::new());
        assert_eq!(get(&star, "access-control-allow-origin"), Some("*"));
        assert_eq!(get(&star, "access-control-allow-credentials"), None);
    }

    #[test]
    fn ordinary_responses() {
        let c = enabled(ORIGIN);
        let resp = headers(&[
            ("cache-control", "must-revalidate"),
            ("content-type", "application/json"),
            ("server", "x"),
        ]);
        let h = c.response_headers(ORIGIN, &resp);
        assert_eq!(get(&h, "access-control-allow-origin"), Some(ORIGIN));
        assert_eq!(
            get(&h, "access-control-expose-headers"),
            Some(
                "content-type, cache-control, accept-ranges, etag, server, \
                 x-couch-request-id, x-couch-update-newrev, x-couchdb-body-time"
            )
        );
        assert!(c.response_headers("http://evil.com", &resp).is_empty());
    }
}
