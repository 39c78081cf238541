//! The HTTP client every command shares: a server root, optional Basic credentials, and a
//! pooled blocking agent (cheap to clone; clones share connections, one per thread).

use crate::Error;
use base64::Engine;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;
use std::time::Duration;

/// Everything but CouchDB's unreserved characters is escaped in a path segment, so a
/// database name with `/` or `+` and any document id survive the trip.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// Percent-encodes one path segment (a database name, a document id).
pub fn enc(segment: &str) -> String {
    utf8_percent_encode(segment, SEGMENT).to_string()
}

#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    /// `scheme://host[:port][/prefix]`, no credentials, no trailing slash.
    root: String,
    auth: Option<String>,
}

/// A server and, when the argument named one, a database on it.
pub struct Target {
    pub client: Client,
    pub db: Option<String>,
}

impl Target {
    /// `arg` is a URL, `http[s]://[name:password@]host[:port][/prefix][/db]` (the last path
    /// segment, percent-decoded, is the database), or without a scheme a database name on
    /// `server`. `user` (`NAME:PASSWORD`) overrides credentials in either URL.
    pub fn parse(arg: &str, server: &str, user: Option<&str>) -> Result<Target, Error> {
        let (url, db_name) = if arg.contains("://") {
            (arg.to_string(), None)
        } else {
            (server.to_string(), Some(arg.to_string()))
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| Error::Usage(format!("not a URL: {url}")))?;
        if scheme != "http" && scheme != "https" {
            return Err(Error::Usage(format!("unsupported scheme in {url}")));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let path = path
            .split(['?', '#'])
            .next()
            .unwrap_or("")
            .trim_matches('/');
        let (prefix, db) = match (db_name, path.rsplit_once('/')) {
            (Some(db), _) => (path.to_string(), Some(db)),
            (None, Some((prefix, last))) => (prefix.to_string(), Some(decode(last)?)),
            (None, None) if path.is_empty() => (String::new(), None),
            (None, None) => (String::new(), Some(decode(path)?)),
        };
        let mut root = format!("{scheme}://{host}");
        if !prefix.is_empty() {
            root.push('/');
            root.push_str(&prefix);
        }
        let credentials = match (user, userinfo) {
            (Some(u), _) => Some(u.to_string()),
            (None, Some(info)) => Some(decode(info)?),
            (None, None) => None,
        };
        if let Some(c) = &credentials {
            if !c.contains(':') {
                return Err(Error::Usage("credentials must be NAME:PASSWORD".into()));
            }
        }
        let client = Client::new(root, credentials.as_deref());
        Ok(Target { client, db })
    }

    /// A server alone: every segment of the URL's path is part of its root.
    pub fn server(url: &str, user: Option<&str>) -> Result<Client, Error> {
        Target::parse("", url, user).map(|t| t.client)
    }

    /// The database, or a usage error naming what was expected.
    pub fn db(&self) -> Result<&str, Error> {
        self.db
            .as_deref()
            .filter(|d| !d.is_empty())
            .ok_or_else(|| Error::Usage("a database is needed: http://host:port/db".into()))
    }
}

fn decode(s: &str) -> Result<String, Error> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::Usage(format!("bad percent-encoding in {s}")))
}

impl Client {
    /// `credentials` is `NAME:PASSWORD` for HTTP Basic.
    pub fn new(root: String, credentials: Option<&str>) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .max_idle_connections_per_host(64)
            .build()
            .into();
        let auth = credentials.map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(c)
            )
        });
        Client {
            agent,
            root: root.trim_end_matches('/').to_string(),
            auth,
        }
    }

    /// The server's URL, without credentials (safe to print and record).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The Basic credentials, `NAME:PASSWORD`, when there are some.
    pub fn credentials(&self) -> Option<String> {
        let encoded = self.auth.as_deref()?.strip_prefix("Basic ")?;
        let bytes = (base64::engine::general_purpose::STANDARD.decode(encoded)).ok()?;
        String::from_utf8(bytes).ok()
    }

    /// One request; `path` starts with `/`. Any status comes back as `Ok`.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), Error> {
        let url = format!("{}{path}", self.root);
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Accept", "application/json");
        if let Some(auth) = &self.auth {
            req = req.header("Authorization", auth);
        }
        let transport = |e: ureq::Error| Error::Transport {
            url: url.clone(),
            source: Box::new(e),
        };
        let built = |e: ureq::http::Error| Error::Usage(format!("{url}: {e}"));
        let mut resp = match body {
            Some(bytes) => self.agent.run(
                req.header("Content-Type", "application/json")
                    .body(bytes)
                    .map_err(built)?,
            ),
            None => self.agent.run(req.body(()).map_err(built)?),
        }
        .map_err(transport)?;
        let status = resp.status().as_u16();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_vec()
            .map_err(transport)?;
        Ok((status, bytes))
    }

    /// [`Client::send`] for idempotent requests (a `_bulk_get`, a `new_edits=false`
    /// `_bulk_docs`), tried up to four times over about 3.5 s while the connection fails or
    /// the server answers 429 or 5xx, as couchbackup retries its requests.
    pub fn send_idempotent(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), Error> {
        let mut wait = Duration::from_millis(500);
        for _ in 0..3 {
            match self.send(method, path, body) {
                Ok((status, out)) if status != 429 && status < 500 => return Ok((status, out)),
                Ok(_) | Err(Error::Transport { .. }) => {}
                Err(e) => return Err(e),
            }
            std::thread::sleep(wait);
            wait *= 2;
        }
        self.send(method, path, body)
    }

    /// A request whose answer must be a success with a JSON body.
    pub fn json(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Error> {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("JSON"));
        let (status, out) = self.send(method, path, bytes.as_deref())?;
        self.check(method, path, status, &out)?;
        serde_json::from_slice(&out)
            .map_err(|e| Error::Format(format!("{method} {path}: answer is not JSON: {e}")))
    }

    /// An error for a status of 400 or more, with the server's body.
    pub fn check(&self, method: &str, path: &str, status: u16, body: &[u8]) -> Result<(), Error> {
        if status < 400 {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(body).trim().to_string();
        text.truncate(500);
        Err(Error::Status {
            method: method.to_string(),
            url: format!("{}{path}", self.root),
            status,
            body: text,
        })
    }

    /// Creates `db` unless it exists (asking first, so that a user who may write to it but
    /// not create databases can use it); true when this call created it.
    pub fn ensure_db(&self, db: &str) -> Result<bool, Error> {
        let path = format!("/{}", enc(db));
        let (status, body) = self.send("GET", &path, None)?;
        if status != 404 {
            return self.check("GET", &path, status, &body).map(|()| false);
        }
        let (status, body) = self.send("PUT", &path, None)?;
        match status {
            412 => Ok(false),
            _ => self.check("PUT", &path, status, &body).map(|()| true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_server_database_and_credentials() {
        let t = Target::parse("http://ad%40min:p%3Aw@h:5984/my%2Fdb", "x", None).unwrap();
        assert_eq!(t.client.root(), "http://h:5984");
        assert_eq!(t.db.as_deref(), Some("my/db"));
        assert_eq!(t.client.credentials().as_deref(), Some("ad@min:p:w"));
        let auth = t.client.auth.unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim_start_matches("Basic "))
            .unwrap();
        assert_eq!(decoded, b"ad@min:p:w");

        let t = Target::parse("https://h/couch/db/", "x", Some("a:b")).unwrap();
        assert_eq!(t.client.root(), "https://h/couch");
        assert_eq!(t.db.as_deref(), Some("db"));

        let t = Target::parse("http://h:1", "x", None).unwrap();
        assert!(t.db.is_none() && t.client.auth.is_none());

        let t = Target::parse("animals", "http://u:p@127.0.0.1:5984/", None).unwrap();
        assert_eq!(t.client.root(), "http://127.0.0.1:5984");
        assert_eq!(t.db.as_deref(), Some("animals"));

        let c = Target::server("http://u:p@h:1/couch/", None).unwrap();
        assert_eq!(c.root(), "http://h:1/couch");
        assert!(c.auth.is_some());

        assert!(Target::parse("ftp://h/db", "x", None).is_err());
        assert!(Target::parse("http://h/db", "x", Some("nocolon")).is_err());
        assert_eq!(enc("_design/a b+c"), "_design%2Fa%20b%2Bc");
    }
}
