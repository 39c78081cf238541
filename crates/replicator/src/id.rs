//! Replication ids: the name of a replication's checkpoints, computed as CouchDB 3 computes
//! them (version 4) so that a replication moved between CouchDB and Settee finds its
//! checkpoints and resumes. Pure.
//!
//! The id is the hex MD5 of an Erlang term, `term_to_binary([ServerUuid, Source, Target |
//! FilterParts])`, where an endpoint is `{remote, User, Host, Port, Path, Headers,
//! undefined}`: the basic-auth user name (never the password), the host, the port (`default`
//! for 80, 443 and 5984), the path with a trailing `/`, and the extra headers sorted by name
//! without a Basic `Authorization`; then the filter's parts, `winning_revs_only` and
//! `since_seq`. `+continuous` and `+create_target` extend the id; the
//! checkpoints are named by the base id alone.

use serde_json::{Map, Value};
use settee_core::etf;

/// `replication_id_version` of the ids made here.
pub const VERSION: u64 = 4;

/// An endpoint as its replication id sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointId {
    pub user: Option<String>,
    pub host: String,
    /// `None`: the scheme's default port (or 5984).
    pub port: Option<u16>,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl EndpointId {
    /// From a URL (credentials allowed), the endpoint's `headers` and its `auth.basic`
    /// user; `None` if the URL does not parse.
    pub fn new(
        url: &str,
        headers: &Map<String, Value>,
        basic_user: Option<&str>,
    ) -> Option<EndpointId> {
        let u = reqwest::Url::parse(url).ok()?;
        let scheme_default = matches!(
            (u.scheme(), u.port_or_known_default()),
            ("http", Some(80)) | ("http", Some(5984)) | ("https", Some(443))
        );
        let url_user = (!u.username().is_empty()).then(|| {
            percent_encoding::percent_decode_str(u.username())
                .decode_utf8_lossy()
                .into_owned()
        });
        let mut sorted: Vec<(String, String)> = Vec::new();
        let mut header_user = None;
        for (name, value) in headers {
            let Some(value) = value.as_str() else {
                continue;
            };
            if name.eq_ignore_ascii_case("authorization") {
                if let Some(user) = basic_user_of(value) {
                    header_user = Some(user);
                    continue;
                }
            }
            if !sorted.iter().any(|(n, _)| n == name) {
                sorted.push((name.clone(), value.to_string()));
            }
        }
        sorted.sort();
        let mut path = u.path().to_string();
        if !path.ends_with('/') && u.query().is_none() {
            path.push('/');
        }
        Some(EndpointId {
            user: basic_user.map(String::from).or(url_user).or(header_user),
            host: u.host_str()?.to_string(),
            port: if scheme_default {
                None
            } else {
                u.port_or_known_default()
            },
            path,
            headers: sorted,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        etf::small_tuple(7, out);
        etf::atom("remote", out);
        match &self.user {
            Some(u) => string(u, out),
            None => etf::atom("undefined", out),
        }
        string(&self.host, out);
        match self.port {
            Some(p) => etf::integer(i64::from(p), out),
            None => etf::atom("default", out),
        }
        string(&self.path, out);
        if self.headers.is_empty() {
            etf::nil(out);
        } else {
            etf::list_header(self.headers.len(), out);
            for (n, v) in &self.headers {
                etf::small_tuple(2, out);
                string(n, out);
                string(v, out);
            }
            etf::nil(out);
        }
        etf::atom("undefined", out);
    }
}

/// The user of a `Basic` authorization header value.
fn basic_user_of(value: &str) -> Option<String> {
    use base64::Engine as _;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    Some(text.split_once(':')?.0.to_string())
}

/// An Erlang string (a list of characters): `STRING_EXT` for Latin-1 text, `[]` when empty.
fn string(s: &str, out: &mut Vec<u8>) {
    let chars: Vec<u32> = s.chars().map(u32::from).collect();
    if chars.is_empty() {
        etf::nil(out);
    } else if chars.iter().all(|&c| c < 256) && chars.len() <= usize::from(u16::MAX) {
        let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
        etf::byte_list(&bytes, out);
    } else {
        etf::list_header(chars.len(), out);
        for c in chars {
            etf::integer(i64::from(c), out);
        }
        etf::nil(out);
    }
}

/// What a replication's filter adds to its id.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterId {
    None,
    /// A built-in filter (`_view`, …) or a design filter's source code, with `query_params`.
    Named {
        code: String,
        query_params: Map<String, Value>,
    },
    /// `doc_ids`, sorted and without repeats.
    DocIds(Vec<String>),
    /// The normalised selector, its object keys sorted.
    Selector(Value),
}

/// Object keys sorted at every level (CouchDB's `ejsort`).
fn sorted_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted_keys).collect()),
        other => other.clone(),
    }
}

/// The inputs of a replication id.
pub struct IdInput<'a> {
    pub server_uuid: &'a str,
    pub source: &'a EndpointId,
    pub target: &'a EndpointId,
    pub filter: &'a FilterId,
    pub winning_revs_only: bool,
    /// `since_seq`, as given: a replication from another seq is another replication.
    pub since_seq: Option<&'a Value>,
    pub continuous: bool,
    pub create_target: bool,
}

/// The replication id: (base id, `+continuous`/`+create_target` extension).
pub fn replication_id(input: &IdInput<'_>) -> (String, String) {
    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }
    let mut parts = vec![
        enc(|out| etf::binary(input.server_uuid.as_bytes(), out)),
        enc(|out| input.source.encode(out)),
        enc(|out| input.target.encode(out)),
    ];
    match input.filter {
        FilterId::None => {}
        FilterId::Named { code, query_params } => {
            parts.push(enc(|out| etf::binary(code.as_bytes(), out)));
            parts.push(enc(|out| {
                etf::value(&Value::Object(query_params.clone()), out)
            }));
        }
        FilterId::DocIds(ids) => {
            let ids = ids.iter().map(|i| Value::String(i.clone())).collect();
            parts.push(enc(|out| etf::value(&Value::Array(ids), out)));
        }
        FilterId::Selector(s) => {
            let s = settee_mango::selector::normalize(s).unwrap_or_else(|_| s.clone());
            parts.push(enc(|out| etf::value(&sorted_keys(&s), out)));
        }
    }
    if input.winning_revs_only {
        parts.push(enc(|out| etf::atom("winning_revs_only", out)));
    }
    if let Some(since) = input.since_seq {
        parts.push(enc(|out| etf::value(since, out)));
    }
    let mut term = vec![131u8];
    etf::list_header(parts.len(), &mut term);
    term.extend(parts.concat());
    etf::nil(&mut term);
    let base = hex::encode(<md5::Md5 as md5::Digest>::digest(&term));
    let mut ext = String::new();
    if input.continuous {
        ext.push_str("+continuous");
    }
    if input.create_target {
        ext.push_str("+create_target");
    }
    (base, ext)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CouchDB's own reference id (couch_replicator_ids' "calculated on CouchDB 3.x" test),
    /// whose server uuid is the Erlang string "somefixedid".
    #[test]
    fn matches_couchdb_3() {
        let src = EndpointId::new("http://adm:pass@127.0.0.1/abc", &Map::new(), None).unwrap();
        let tgt = EndpointId::new("http://adm:pass@127.0.0.1/xyz", &Map::new(), None).unwrap();
        assert_eq!(src.user.as_deref(), Some("adm"));
        assert_eq!(src.path, "/abc/");
        let mut term = vec![131u8];
        etf::list_header(3, &mut term);
        string("somefixedid", &mut term);
        src.encode(&mut term);
        tgt.encode(&mut term);
        etf::nil(&mut term);
        let base = hex::encode(<md5::Md5 as md5::Digest>::digest(&term));
        assert_eq!(base, "ff71e1208f93ba054eb60e7ca8683fe4");
    }

    #[test]
    fn credentials_and_default_ports() {
        let a = EndpointId::new("http://u:secret@h:5984/db", &Map::new(), None).unwrap();
        let b = EndpointId::new("http://h/db/", &Map::new(), Some("u")).unwrap();
        assert_eq!(a, b);
        let mut headers = Map::new();
        headers.insert("Authorization".into(), Value::String("Basic dTpw".into()));
        headers.insert("X-B".into(), Value::String("2".into()));
        let c = EndpointId::new("https://h:6984/db", &headers, None).unwrap();
        assert_eq!(c.user.as_deref(), Some("u"));
        assert_eq!(c.port, Some(6984));
        assert_eq!(c.headers, vec![("X-B".to_string(), "2".to_string())]);
        let input = |continuous, create_target| IdInput {
            server_uuid: "x",
            source: &a,
            target: &c,
            filter: &FilterId::None,
            winning_revs_only: false,
            since_seq: None,
            continuous,
            create_target,
        };
        let (base, ext) = replication_id(&input(true, true));
        assert_eq!(ext, "+continuous+create_target");
        assert_eq!(
            replication_id(&input(false, false)),
            (base.clone(), String::new())
        );
        let since = Value::from(3);
        let from_3 = IdInput {
            since_seq: Some(&since),
            ..input(false, false)
        };
        assert_ne!(replication_id(&from_3).0, base);
    }
}
