//! Test harness: starts the real `settee` binary on a temporary data directory and a free
//! port, and speaks HTTP to it.
#![allow(dead_code)]

pub mod cluster;
pub mod replication;

/// The members of CouchDB's request object for design functions, in
/// `chttpd_external:json_req_obj_fields/0`'s order.
pub const REQ_OBJ_FIELDS: [&str; 15] = [
    "info",
    "uuid",
    "id",
    "method",
    "requested_path",
    "path",
    "raw_path",
    "query",
    "headers",
    "body",
    "peer",
    "form",
    "cookie",
    "userCtx",
    "secObj",
];

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

pub const ADMIN: (&str, &str) = ("admin", "secret");

pub struct Server {
    pub url: String,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    child: std::sync::Mutex<Option<Child>>,
    agent: ureq::Agent,
}

pub struct BytesResp {
    pub status: u16,
    pub body: Vec<u8>,
}

/// An answer read off a socket by [`Server::send_raw`]: header names lower-cased.
pub struct RawResp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `Basic …` for the test admin.
fn basic_auth() -> String {
    basic(ADMIN.0, ADMIN.1)
}

/// An `Authorization: Basic …` value.
pub fn basic(name: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"))
    )
}

/// Forwards the server's stderr (to `log`, to the test's stderr with `SETTEE_TEST_STDERR`,
/// or nowhere) on a thread for the child's whole life, and returns the address from its
/// `listening on http://…` line, or what it printed if it exited first.
fn announced_addr(stderr: ChildStderr, log: Option<&Path>) -> Result<String, String> {
    let mut sink: Box<dyn Write + Send> = match log {
        Some(path) => Box::new(std::fs::File::create(path).unwrap()),
        None if std::env::var_os("SETTEE_TEST_STDERR").is_some() => Box::new(std::io::stderr()),
        None => Box::new(std::io::sink()),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(sink, "{line}");
            if let Some(addr) = line.split("listening on http://").nth(1) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(Ok(addr.trim().to_string()));
                }
            } else if tx.is_some() {
                seen.push_str(&line);
                seen.push('\n');
            }
        }
        if let Some(tx) = tx {
            let _ = tx.send(Err(seen));
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| Err("no `listening on` line within 60 s".into()))
}

impl Server {
    pub fn start() -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut s = Server::start_in(&dir);
        s._tmp = Some(tmp);
        s
    }

    /// Starts on an existing data directory (for restart tests).
    pub fn start_in(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    /// Starts with extra command-line arguments (e.g. `--config`).
    pub fn start_with(dir: &Path, extra: &[&str]) -> Server {
        Server::spawn(dir, extra, None, "127.0.0.1:0", &[])
    }

    /// Starts on an existing data directory at a given address: a restart that keeps the
    /// port (replication ids name a server by its address).
    pub fn start_at(dir: &Path, addr: &str) -> Server {
        Server::spawn(dir, &[], None, addr, &[])
    }

    /// Starts on an existing data directory with extra environment variables (a restart
    /// under `LD_PRELOAD`, say).
    pub fn start_in_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn(dir, extra, None, "127.0.0.1:0", env)
    }

    /// The `host:port` the server listens on.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// Starts with debug logging written to `log` (to check what the log contains).
    pub fn start_logged(dir: &Path, extra: &[&str], log: &Path) -> Server {
        Server::spawn(dir, extra, Some(log), "127.0.0.1:0", &[])
    }

    /// Starts the binary on `bind` (port 0: the kernel chooses, and the port is learnt from
    /// its `listening on` line, with no window in which another test can take it).
    /// Starts on a fresh directory with jemalloc returning freed pages to the system at
    /// once (`MALLOC_CONF`; the binary's own setting keeps them up to a second), so that
    /// [`Server::peak_rss_kb`] measures memory in use rather than memory just freed.
    pub fn start_measured() -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let env = [("MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")];
        let mut s = Server::spawn(tmp.path(), &[], None, "127.0.0.1:0", &env);
        s._tmp = Some(tmp);
        s
    }

    fn spawn(
        dir: &Path,
        extra: &[&str],
        log: Option<&Path>,
        bind: &str,
        env: &[(&str, &str)],
    ) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_settee"))
            .args(["serve", "--data-dir"])
            .arg(dir)
            .args(extra)
            .args([
                "--bind",
                bind,
                "--admin",
                &format!("{}:{}", ADMIN.0, ADMIN.1),
            ])
            .env("SETTEE_LOG", if log.is_some() { "debug" } else { "warn" })
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start settee");
        let addr = match announced_addr(child.stderr.take().expect("piped stderr"), log) {
            Ok(addr) => addr,
            Err(printed) => {
                let _ = child.kill();
                panic!("settee did not start:\n{printed}");
            }
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Server {
            url: format!("http://{addr}"),
            dir: dir.to_path_buf(),
            _tmp: None,
            child: std::sync::Mutex::new(Some(child)),
            agent,
        }
    }

    /// Starts on a fresh directory with extra environment variables (e.g. a
    /// `COUCHDB_QUERY_SERVER_<LANG>` command) and an ini file of this text (may be empty).
    pub fn start_with_env_ini(env: &[(&str, &str)], ini: &str) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("settee.ini");
        std::fs::write(&path, ini).unwrap();
        let data = tmp.path().join("data");
        let extra = ["--config", path.to_str().unwrap()];
        let mut s = Server::spawn(&data, &extra, None, "127.0.0.1:0", env);
        s._tmp = Some(tmp);
        s
    }

    /// Starts on a fresh directory with an ini file of this text passed as `--config`.
    pub fn start_with_ini(ini: &str) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("settee.ini");
        std::fs::write(&path, ini).unwrap();
        let data = tmp.path().join("data");
        let mut s = Server::start_with(&data, &["--config", path.to_str().unwrap()]);
        s._tmp = Some(tmp);
        s
    }

    /// A request with the given headers and no admin credentials.
    pub fn anon(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.req_with(method, path, body, &all, false)
    }

    /// A request as `name` with HTTP Basic credentials.
    pub fn as_user(
        &self,
        user: (&str, &str),
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Resp {
        let auth = basic(user.0, user.1);
        self.anon(method, path, body, &[("authorization", &auth)])
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().as_ref().expect("running").id()
    }

    /// A `/proc/<pid>/status` field of the server process, in KiB.
    fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/<pid>/status"))
    }

    /// The server process's peak resident memory so far (`VmHWM`), in KiB.
    pub fn peak_rss_kb(&self) -> u64 {
        self.status_kb("VmHWM:")
    }

    /// The server process's resident memory now (`VmRSS`), in KiB.
    pub fn rss_kb(&self) -> u64 {
        self.status_kb("VmRSS:")
    }

    /// Resets the server process's peak resident memory to what it uses now (Linux's
    /// `clear_refs` 5), so a later [`Server::peak_rss_kb`] measures from here.
    pub fn reset_peak_rss(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").unwrap();
    }

    /// Bytes the server process has read and written through system calls so far
    /// (`rchar`, `wchar` of `/proc/<pid>/io`: sockets and files alike).
    pub fn io_bytes(&self) -> (u64, u64) {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.pid())).unwrap();
        let field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc/<pid>/io"))
        };
        (field("rchar:"), field("wchar:"))
    }

    /// A request to `path` with `headers`, as the admin when `admin`.
    fn builder(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        admin: bool,
    ) -> ureq::http::request::Builder {
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.url, path));
        if admin {
            b = b.header("authorization", basic_auth());
        }
        // As CouchDB's clients (PouchDB, nano, couchdb-python) ask, unless a test says
        // otherwise: without it a document read with `attachments=true` comes back
        // `multipart/related`, as CouchDB answers any client that accepts `*/*`.
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("accept"))
        {
            b = b.header("accept", "application/json");
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b
    }

    /// A request as admin with a binary body; the response body as bytes.
    pub fn req_bytes(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> BytesResp {
        self.try_req_bytes(method, path, body, headers)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// [`Server::req_bytes`] that may fail at the transport level (the server was killed).
    pub fn try_req_bytes(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Result<BytesResp, ureq::Error> {
        let b = self.builder(method, path, headers, true);
        let mut resp = self.agent.run(b.body(body).unwrap())?;
        let mut out = Vec::new();
        resp.body_mut()
            .with_config()
            .limit(u64::MAX)
            .reader()
            .read_to_end(&mut out)?;
        Ok(BytesResp {
            status: resp.status().as_u16(),
            body: out,
        })
    }

    /// SIGTERM, and waits for the server to shut down cleanly.
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            // SAFETY: signalling our own child process, which has not been reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            c.wait().unwrap();
        }
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill9(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Takes the temp dir so the data outlives this server (for restarts).
    pub fn take_dir(&mut self) -> tempfile::TempDir {
        self._tmp.take().expect("owns its dir")
    }

    /// A request as admin. `body` is sent as JSON when given.
    pub fn req(&self, method: &str, path: &str, body: Option<&str>) -> Resp {
        self.req_with(
            method,
            path,
            body,
            &[("content-type", "application/json")],
            true,
        )
    }

    pub fn req_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
        admin: bool,
    ) -> Resp {
        self.try_req_with(method, path, body, headers, admin)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// A request as admin that may fail at the transport level (the server was killed).
    pub fn try_req(&self, method: &str, path: &str, body: &str) -> Result<Resp, ureq::Error> {
        self.try_req_with(
            method,
            path,
            Some(body),
            &[("content-type", "application/json")],
            true,
        )
    }

    fn try_req_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
        admin: bool,
    ) -> Result<Resp, ureq::Error> {
        let b = self.builder(method, path, headers, admin);
        let req = b.body(body.unwrap_or("").as_bytes().to_vec()).unwrap();
        let mut resp = self.agent.run(req)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let mut text = String::new();
        resp.body_mut().as_reader().read_to_string(&mut text)?;
        Ok(Resp {
            status,
            headers,
            text,
        })
    }

    /// A request written by hand on a TCP socket, for methods HTTP clients refuse (COPY),
    /// with a `Content-Length: 0` body; as admin.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
        let r = self.send_raw(method, path, headers, Some(""), true);
        Resp {
            status: r.status,
            headers: r.headers,
            text: String::from_utf8_lossy(&r.body).into_owned(),
        }
    }

    /// A request written by hand on a TCP socket (`Connection: close`), for what HTTP
    /// clients refuse or change: odd methods, no `Content-Length` (`body: None`), no
    /// redirects followed, binary bodies. As admin when `admin`; the whole answer.
    pub fn send_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
        admin: bool,
    ) -> RawResp {
        use std::io::Write;
        let host = self.url.trim_start_matches("http://");
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if admin {
            head.push_str(&format!("Authorization: {}\r\n", basic_auth()));
        }
        if let Some(body) = body {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(body.unwrap_or(""));
        let mut sock = std::net::TcpStream::connect(host).unwrap();
        sock.write_all(head.as_bytes()).unwrap();
        let mut all = Vec::new();
        sock.read_to_end(&mut all).unwrap();
        let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let (status, headers) = parse_head(&all[..end]);
        RawResp {
            status,
            headers,
            body: all[end + 4..].to_vec(),
        }
    }

    /// `line` (a request line, sent byte for byte), then `Host`, the admin's credentials
    /// and `extra` (whole header lines), then the blank line: one request's head.
    pub fn raw_head(&self, line: &[u8], extra: &str) -> Vec<u8> {
        let host = self.url.trim_start_matches("http://");
        let auth = basic_auth();
        [
            line,
            format!("\r\nHost: {host}\r\nAuthorization: {auth}\r\n{extra}\r\n").as_bytes(),
        ]
        .concat()
    }

    /// Writes `bytes` on a fresh connection and reads until the server closes it (or 20 s
    /// pass): everything it answered.
    pub fn exchange(&self, bytes: &[u8]) -> Vec<u8> {
        let host = self.url.trim_start_matches("http://");
        let mut sock = std::net::TcpStream::connect(host).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        sock.write_all(bytes).unwrap();
        let mut all = Vec::new();
        let mut buf = [0u8; 16384];
        loop {
            match sock.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
        all
    }

    pub fn get(&self, path: &str) -> Resp {
        self.req("GET", path, None)
    }
    pub fn put(&self, path: &str, body: &str) -> Resp {
        self.req("PUT", path, Some(body))
    }
    pub fn post(&self, path: &str, body: &str) -> Resp {
        self.req("POST", path, Some(body))
    }
    pub fn delete(&self, path: &str) -> Resp {
        self.req("DELETE", path, None)
    }

    /// Creates a database and asserts it worked.
    pub fn create_db(&self, name: &str) {
        let r = self.put(&format!("/{name}"), "");
        assert_eq!(r.status, 201, "{}", r.text);
    }

    /// Creates the user `name` in `_users` with these roles, and asserts it worked.
    pub fn add_user(&self, name: &str, password: &str, roles: &[&str]) {
        let doc = serde_json::json!({"name": name, "password": password, "roles": roles,
                                     "type": "user"});
        let r = self.put(
            &format!("/_users/org.couchdb.user:{name}"),
            &doc.to_string(),
        );
        assert_eq!(r.status, 201, "{}", r.text);
    }
}

/// A response head's status and headers (names lowercased).
fn parse_head(head: &[u8]) -> (u16, Vec<(String, String)>) {
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    (status, headers)
}

/// The answers in `all`, in order: bodies framed by `Content-Length` or chunked (decoded),
/// none after a `HEAD` is not told apart, so callers do not pipeline `HEAD`s.
pub fn split_responses(mut all: &[u8]) -> Vec<RawResp> {
    let mut out = Vec::new();
    while let Some(end) = all.windows(4).position(|w| w == b"\r\n\r\n") {
        let (status, headers) = parse_head(&all[..end]);
        all = &all[end + 4..];
        let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let eol = all.windows(2).position(|w| w == b"\r\n").unwrap();
                let size = std::str::from_utf8(&all[..eol]).unwrap();
                let size = usize::from_str_radix(size.split(';').next().unwrap(), 16).unwrap();
                all = &all[eol + 2..];
                if size == 0 {
                    all = &all[2..];
                    break;
                }
                body.extend_from_slice(&all[..size]);
                all = &all[size + 2..];
            }
        } else if let Some(n) = get("content-length") {
            let n: usize = n.parse().unwrap();
            body.extend_from_slice(&all[..n]);
            all = &all[n..];
        }
        out.push(RawResp {
            status,
            headers,
            body,
        });
    }
    out
}

impl RawResp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The `settee` client subcommands run as the real binary.
pub mod cli {
    use std::process::{Command, Output};

    /// Runs `settee args…`; stdin is closed and stderr is not a terminal, so no bars are
    /// drawn.
    pub fn settee(args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_settee"))
            .args(args)
            .env_remove("COUCH_URL")
            .env_remove("SETTEE_USER")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run settee")
    }

    /// Runs `settee args…` and asserts it succeeded; its stdout.
    pub fn ok(args: &[&str]) -> String {
        let out = settee(args);
        assert!(
            out.status.success(),
            "settee {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `s`'s URL with the test admin's credentials in it.
    pub fn admin_url(s: &super::Server) -> String {
        format!("http://{}:{}@{}", super::ADMIN.0, super::ADMIN.1, s.addr())
    }
}
