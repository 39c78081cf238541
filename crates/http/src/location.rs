//! URLs Settee writes into `Location` headers, as CouchDB builds them: the path parts are
//! encoded with `couch_util:url_encode` and prefixed with `chttpd:absolute_uri`'s scheme
//! and host, which honour a proxy's forwarding headers (their names are configurable).

use crate::Req;
use axum::http::HeaderValue;
use settee_node::config::NodeConfig;

pub use settee_wire::url_encode;

/// A `[chttpd]` setting, falling back to `[httpd]` (`chttpd_util:get_chttpd_config`).
fn chttpd_config(node: &NodeConfig, key: &str, default: &str) -> String {
    node.get("chttpd", key)
        .or_else(|| node.get("httpd", key))
        .unwrap_or_else(|| default.to_string())
}

/// `scheme://host` + `path`, as `chttpd:absolute_uri`: the host from the header named by
/// `x_forwarded_host` (default `X-Forwarded-Host`), else `Host`; `https` when the
/// `x_forwarded_ssl` header is `on` or the `x_forwarded_proto` header is `https`.
pub fn absolute_uri(node: &NodeConfig, req: &Req, path: &str) -> Option<HeaderValue> {
    let x_host = chttpd_config(node, "x_forwarded_host", "X-Forwarded-Host");
    let host = req.header(&x_host).or_else(|| req.header("host"))?;
    let x_ssl = chttpd_config(node, "x_forwarded_ssl", "X-Forwarded-Ssl");
    let x_proto = chttpd_config(node, "x_forwarded_proto", "X-Forwarded-Proto");
    let https = req.header(&x_ssl) == Some("on") || req.header(&x_proto) == Some("https");
    let scheme = if https { "https" } else { "http" };
    HeaderValue::from_str(&format!("{scheme}://{host}{path}")).ok()
}

/// `/{db}/{docid}` with both parts encoded (documents created or copied).
pub fn doc_path(db: &str, id: &str) -> String {
    format!("/{}/{}", url_encode(db), url_encode(id))
}

/// The `Location` of a document: `/{db}/{docid}` encoded as CouchDB encodes it.
pub fn doc_location(config: &NodeConfig, req: &Req, db: &str, id: &str) -> Option<HeaderValue> {
    absolute_uri(config, req, &doc_path(db, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_as_couch_util() {
        assert_eq!(url_encode("a_b.c-d:e"), "a_b.c-d:e");
        assert_eq!(url_encode("_design/x y+z~"), "_design%2Fx%20y%2Bz%7E");
        assert_eq!(url_encode("docid\n"), "docid%0A");
        assert_eq!(url_encode("é"), "%C3%A9");
        assert_eq!(doc_path("a/b", "%0A"), "/a%2Fb/%250A");
    }
}
