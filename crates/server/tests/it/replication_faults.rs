//! Replication against misbehaving peers and crashes, with the real binary over HTTP: a
//! peer behind a fault-injecting TCP proxy (error statuses, dropped and cut connections,
//! silence), a peer that refuses the credentials or lacks the database, `kill -9` of either
//! side in the middle of a replication, and continuous replication across an outage.
//!
//! The proxy is plain std: a thread per connection and one request per connection (it
//! forwards with `Connection: close` and answers so), which lets it choose a fault for each
//! request by what its request line names. Faults that must land in the middle of a run
//! (a kill) are placed by holding one chosen request, never by sleeping.

use crate::common;
use common::replication::{replicate, seed, url, write_docs};
use common::{Server, ADMIN};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the proxy does with one request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// Passes the request to the upstream server and its answer back.
    Forward,
    /// Answers this status itself, with a CouchDB-style error body.
    Status(u16),
    /// Reads the request, then closes the connection without answering.
    Drop,
    /// Passes the request on, then closes the connection halfway through the answer: the
    /// upstream applied the request, the client never learns it did.
    Cut,
    /// Reads the request and never answers, keeping the connection open.
    Hang,
}

/// `fault` for the next `times` requests whose request line contains `pattern`.
struct Rule {
    pattern: String,
    fault: Fault,
    times: usize,
}

struct ProxyState {
    upstream: String,
    /// Checked in order; the first live rule that matches applies.
    rules: Vec<Rule>,
    /// For requests no rule takes.
    default: Fault,
    /// Every request line seen, with the fault applied to it.
    log: Vec<(String, Fault)>,
    /// Connections left unanswered ([`Fault::Hang`]).
    held: Vec<TcpStream>,
}

struct Proxy {
    /// `127.0.0.1:port`.
    addr: String,
    state: Arc<Mutex<ProxyState>>,
}

impl Proxy {
    /// A proxy in front of `upstream` that forwards everything.
    fn start(upstream: &Server) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(Mutex::new(ProxyState {
            upstream: upstream.addr().to_string(),
            rules: Vec::new(),
            default: Fault::Forward,
            log: Vec::new(),
            held: Vec::new(),
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let state = shared.clone();
                std::thread::spawn(move || serve(conn, state));
            }
        });
        Proxy { addr, state }
    }

    fn set_default(&self, fault: Fault) {
        self.state.lock().unwrap().default = fault;
    }

    fn set_upstream(&self, upstream: &Server) {
        self.state.lock().unwrap().upstream = upstream.addr().to_string();
    }

    fn rule(&self, pattern: &str, fault: Fault, times: usize) {
        self.state.lock().unwrap().rules.push(Rule {
            pattern: pattern.to_string(),
            fault,
            times,
        });
    }

    fn log(&self) -> Vec<(String, Fault)> {
        self.state.lock().unwrap().log.clone()
    }

    /// How many requests got `fault`.
    fn count(&self, fault: Fault) -> usize {
        self.log().iter().filter(|(_, f)| *f == fault).count()
    }

    /// The admin URL of database `db` through this proxy.
    fn url(&self, db: &str) -> String {
        format!("http://{}:{}@{}/{db}", ADMIN.0, ADMIN.1, self.addr)
    }

    /// The URL replication errors name (no credentials, trailing `/`).
    fn shown(&self, db: &str) -> String {
        format!("http://{}/{db}/", self.addr)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads a head (up to the blank line) and whatever followed it in the same reads.
fn read_head(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            return Some((head, buf[end + 4..].to_vec()));
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A whole request: its head and its `Content-Length` body.
fn read_request(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let (head, mut body) = read_head(s)?;
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut chunk = [0u8; 16384];
    while body.len() < len {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    Some((head, body))
}

/// `head` (without its blank line) with `Connection: close` in place of any `Connection`.
fn closing(head: &str) -> String {
    let mut out: Vec<&str> = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    out.push("Connection: close");
    out.join("\r\n") + "\r\n\r\n"
}

fn serve(mut client: TcpStream, state: Arc<Mutex<ProxyState>>) {
    let Some((head, body)) = read_request(&mut client) else {
        return;
    };
    let line = head.lines().next().unwrap_or("").to_string();
    let (fault, upstream) = {
        let mut st = state.lock().unwrap();
        let fault = match st
            .rules
            .iter_mut()
            .find(|r| r.times > 0 && line.contains(&r.pattern))
        {
            Some(rule) => {
                rule.times -= 1;
                rule.fault
            }
            None => st.default,
        };
        st.log.push((line, fault));
        (fault, st.upstream.clone())
    };
    match fault {
        Fault::Forward | Fault::Cut => {
            let _ = forward(&mut client, &upstream, &head, &body, fault == Fault::Cut);
        }
        Fault::Status(code) => {
            let body = json!({"error": "unknown_error", "reason": "injected by the test proxy"})
                .to_string();
            let _ = write!(
                client,
                "HTTP/1.1 {code} Injected\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Fault::Drop => {}
        Fault::Hang => {
            state.lock().unwrap().held.push(client);
            return;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// Sends the request upstream and streams the answer back (a longpoll feed arrives when
/// it arrives); with `cut`, only the first half of the answer.
fn forward(
    client: &mut TcpStream,
    upstream: &str,
    head: &str,
    body: &[u8],
    cut: bool,
) -> std::io::Result<()> {
    let mut up = TcpStream::connect(upstream)?;
    up.write_all(closing(head).as_bytes())?;
    up.write_all(body)?;
    if cut {
        let mut all = Vec::new();
        up.read_to_end(&mut all)?;
        return client.write_all(&all[..all.len() / 2]);
    }
    let Some((resp_head, rest)) = read_head(&mut up) else {
        return Ok(());
    };
    client.write_all(closing(&resp_head).as_bytes())?;
    client.write_all(&rest)?;
    let mut chunk = [0u8; 16384];
    loop {
        match up.read(&mut chunk)? {
            0 => return Ok(()),
            n => client.write_all(&chunk[..n])?,
        }
    }
}

// ---- helpers -------------------------------------------------------------------------

/// What replication must carry over exactly: every document's leaf revisions and deleted
/// flag (`_changes?style=all_docs`), and every live document's body with its conflicts and
/// attachments.
fn contents(s: &Server, db: &str) -> (BTreeMap<String, (Vec<String>, bool)>, Value) {
    let changes = s.get(&format!("/{db}/_changes?style=all_docs")).json();
    let mut leaves = BTreeMap::new();
    for row in changes["results"].as_array().unwrap() {
        let mut revs: Vec<String> = row["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["rev"].as_str().unwrap().to_string())
            .collect();
        revs.sort();
        let deleted = row["deleted"] == true;
        leaves.insert(row["id"].as_str().unwrap().to_string(), (revs, deleted));
    }
    let docs = s
        .get(&format!(
            "/{db}/_all_docs?include_docs=true&conflicts=true&attachments=true"
        ))
        .json();
    (leaves, docs["rows"].clone())
}

fn assert_same(a: &Server, adb: &str, b: &Server, bdb: &str) {
    let (left, right) = (contents(a, adb), contents(b, bdb));
    assert_eq!(left.0.len(), right.0.len(), "document counts differ");
    assert!(left == right, "{adb} and {bdb} differ");
}

/// Polls `done` every 20 ms for up to a minute (a generous bound, not a timing claim).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The replication checkpoint `db` of `s` holds (there is one replication per test).
fn checkpoint(s: &Server, db: &str) -> Option<Value> {
    let rows = s
        .get(&format!("/{db}/_local_docs?include_docs=true"))
        .json();
    rows["rows"]
        .as_array()?
        .iter()
        .find(|r| r["doc"]["history"].is_array())
        .map(|r| r["doc"].clone())
}

/// A replication failure as `_replicate` answers it: `{"error", "reason"}` and nothing else.
fn assert_error(status: u16, body: &Value, want_status: u16, mentions: &str) {
    assert_eq!(status, want_status, "{body}");
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["error", "reason"], "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains(mentions), "{reason} should name {mentions}");
}

/// The server answers and runs no replication.
fn assert_healthy(s: &Server) {
    assert_eq!(s.get("/").status, 200);
    let tasks = s.get("/_active_tasks").json();
    assert!(
        tasks
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["type"] != "replication"),
        "{tasks}"
    );
}

// ---- misbehaving peers ---------------------------------------------------------------

#[test]
fn error_statuses_are_retried_and_the_replication_completes() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 120);
    b.create_db("db");
    let proxy = Proxy::start(&b);
    proxy.rule("", Fault::Status(500), 2);
    proxy.rule("POST /db/_revs_diff", Fault::Status(503), 1);
    proxy.rule("POST /db/_bulk_docs", Fault::Status(429), 1);
    proxy.rule("PUT /db/_local/", Fault::Status(500), 1);
    let body = json!({"source": "db", "target": proxy.url("db"), "worker_batch_size": 25});
    let (status, r) = replicate(&a, body.clone());
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["history"][0]["doc_write_failures"], 0, "{r}");
    assert_same(&a, "db", &b, "db");
    assert_eq!(proxy.count(Fault::Status(500)), 3, "{:?}", proxy.log());
    assert_eq!(proxy.count(Fault::Status(503)), 1);
    assert_eq!(proxy.count(Fault::Status(429)), 1);
    // Both sides recorded the same checkpoint: nothing left to do.
    let (status, again) = replicate(&a, body);
    assert_eq!(
        (status, &again["no_changes"]),
        (200, &json!(true)),
        "{again}"
    );
}

#[test]
fn a_peer_that_always_fails_fails_the_replication_cleanly() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 10);
    b.create_db("db");
    let proxy = Proxy::start(&b);
    proxy.set_default(Fault::Status(500));
    let body = json!({"source": "db", "target": proxy.url("db"), "retries_per_request": 2});
    let (status, r) = replicate(&a, body.clone());
    assert_error(status, &r, 500, &proxy.shown("db"));
    // CouchDB's start error for a status, printed as its term.
    let term = format!(r#"{{http_error_code,500,<<"GET {}">>}}"#, proxy.shown("db"));
    assert_eq!(r, json!({"error": "error", "reason": term}));
    // The first request and two retries, then nothing more.
    let log = proxy.log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(
        log.iter().all(|(l, _)| l.starts_with("GET /db/ ")),
        "{log:?}"
    );
    assert_healthy(&a);
    // Once the peer recovers, the same replication runs.
    proxy.set_default(Fault::Forward);
    let (status, r) = replicate(&a, body);
    assert_eq!(status, 200, "{r}");
    assert_same(&a, "db", &b, "db");
}

#[test]
fn dropped_and_cut_connections_are_retried_and_the_replication_completes() {
    // b pulls from a through the proxy: the source's reads and its checkpoint are remote.
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 120);
    b.create_db("db");
    let proxy = Proxy::start(&a);
    proxy.rule("", Fault::Drop, 2);
    proxy.rule("/db/_changes", Fault::Drop, 1);
    proxy.rule("/db/_changes", Fault::Cut, 1);
    proxy.rule("POST /db/_bulk_get", Fault::Cut, 1);
    // The checkpoint's write reaches the source but its answer is lost, twice: the retries
    // write it again (a `_local` write takes any `_rev`, as in CouchDB).
    proxy.rule("PUT /db/_local/", Fault::Cut, 2);
    let body = json!({"source": proxy.url("db"), "target": "db", "worker_batch_size": 25});
    let (status, r) = replicate(&b, body.clone());
    assert_eq!(status, 200, "{r}");
    assert_same(&a, "db", &b, "db");
    assert_eq!(proxy.count(Fault::Drop), 3, "{:?}", proxy.log());
    assert_eq!(proxy.count(Fault::Cut), 4, "{:?}", proxy.log());
    let (on_a, on_b) = (checkpoint(&a, "db").unwrap(), checkpoint(&b, "db").unwrap());
    assert_eq!(on_a["session_id"], on_b["session_id"]);
    assert_eq!(on_a["source_last_seq"], on_b["source_last_seq"]);
    let (status, again) = replicate(&b, body);
    assert_eq!(
        (status, &again["no_changes"]),
        (200, &json!(true)),
        "{again}"
    );
}

#[test]
fn a_silent_peer_times_out_and_fails_the_replication() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 10);
    b.create_db("db");
    let proxy = Proxy::start(&b);
    proxy.set_default(Fault::Hang);
    let (status, r) = replicate(
        &a,
        json!({"source": "db", "target": proxy.url("db"),
               "connection_timeout": 1000, "retries_per_request": 1}),
    );
    assert_error(status, &r, 500, &proxy.shown("db"));
    assert_eq!(proxy.log().len(), 2, "{:?}", proxy.log());
    assert_healthy(&a);
}

#[test]
fn a_peer_refusing_the_credentials_fails_at_once() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 3);
    b.create_db("db");
    let proxy = Proxy::start(&b);
    let wrong = format!("http://{}:wrong@{}/db", ADMIN.0, proxy.addr);
    let reason = format!(
        "unauthorized to access or create database {}",
        proxy.shown("db")
    );
    for (source, target) in [(json!("db"), json!(wrong)), (json!(wrong), json!("db"))] {
        let before = proxy.log().len();
        let (status, r) = replicate(&a, json!({"source": source, "target": target}));
        assert_eq!(
            (status, r),
            (401, json!({"error": "unauthorized", "reason": reason}))
        );
        // Not retried.
        assert_eq!(proxy.log().len(), before + 1, "{:?}", proxy.log());
    }
    // A user the peer knows but keeps out of the database (new databases are admin-only):
    // 403 `forbidden`, whose reason is the database's URL alone.
    let bob = json!({"name": "bob", "password": "bobpw", "roles": [], "type": "user"});
    for s in [&a, &b] {
        let r = s.put("/_users/org.couchdb.user:bob", &bob.to_string());
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let as_bob = format!("http://bob:bobpw@{}/db", proxy.addr);
    let before = proxy.log().len();
    let (status, r) = replicate(&a, json!({"source": "db", "target": as_bob}));
    assert_eq!(
        (status, r),
        (
            403,
            json!({"error": "forbidden", "reason": proxy.shown("db")})
        )
    );
    assert_eq!(proxy.log().len(), before + 1, "{:?}", proxy.log());
    // The same through a URL of the server itself (read in process).
    let own = format!("http://bob:bobpw@{}/db", a.addr());
    let (status, r) = replicate(&a, json!({"source": own, "target": "db"}));
    assert_eq!((status, &r["error"]), (403, &json!("forbidden")), "{r}");
    // Credentials leave the URL when CouchDB 3.2+ parses a replication.
    assert_eq!(r["reason"], format!("http://{}/db/", a.addr()));
    assert_healthy(&a);
}

#[test]
fn a_missing_peer_database_is_db_not_found_unless_created() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 3);
    let proxy = Proxy::start(&b);
    let (status, r) = replicate(&a, json!({"source": "db", "target": proxy.url("nosuch")}));
    assert_eq!(
        (status, r),
        (
            500,
            json!({"error": "db_not_found", "reason": format!("could not open {}", proxy.shown("nosuch"))})
        )
    );
    assert_eq!(b.get("/nosuch").status, 404);
    let (status, r) = replicate(
        &a,
        json!({"source": "db", "target": proxy.url("nosuch"), "create_target": true}),
    );
    assert_eq!(status, 200, "{r}");
    assert_same(&a, "db", &b, "nosuch");
}

// ---- crashes -------------------------------------------------------------------------

/// Options that make a run copy `batch` documents at a time, one batch after another, and
/// checkpoint after every batch; a proxy in front of the target holds the `n`-th
/// `_bulk_docs`, so the run is known to be in its middle, with `n - 1` batches copied and
/// checkpointed.
fn hold_mid_run(proxy: &Proxy, n: usize) -> Value {
    proxy.rule("POST /db/_bulk_docs", Fault::Forward, n - 1);
    proxy.rule("POST /db/_bulk_docs", Fault::Hang, 1);
    json!({"worker_batch_size": 20, "worker_processes": 1, "checkpoint_interval": 0})
}

fn with(mut body: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[test]
fn kill9_of_the_replicating_server_resumes_from_its_checkpoint() {
    let mut a = Server::start();
    let b = Server::start();
    a.create_db("db");
    b.create_db("db");
    let proxy = Proxy::start(&b);
    write_docs(&a, "db", "first", 3000);
    let base = json!({"source": "db", "target": proxy.url("db")});
    let (status, first) = replicate(&a, base.clone());
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["history"][0]["docs_written"], 3000);

    write_docs(&a, "db", "second", 3000);
    let body = with(base.clone(), hold_mid_run(&proxy, 6));
    let killed = std::thread::scope(|scope| {
        let run = scope.spawn(|| a.try_req("POST", "/_replicate", &body.to_string()));
        wait_until("the held _bulk_docs", || proxy.count(Fault::Hang) == 1);
        a.kill9();
        run.join().unwrap()
    });
    assert!(killed.is_err(), "the killed run answered");
    // Five batches were copied and checkpointed on both sides before the kill.
    let saved = checkpoint(&b, "db").expect("a checkpoint on the target");
    assert_ne!(saved["session_id"], first["session_id"]);
    assert!(saved["source_last_seq"]
        .as_str()
        .unwrap()
        .starts_with("3100-"));

    let addr = a.addr().to_string();
    let dir = a.take_dir();
    drop(a);
    let a = Server::start_at(dir.path(), &addr);
    let (status, last) = replicate(&a, base);
    assert_eq!(status, 200, "{last}");
    let h = &last["history"];
    assert_eq!(h[0]["start_last_seq"], saved["source_last_seq"], "{last}");
    // The counters go on from the interrupted session's: 3000 + 100, then 2900 more.
    assert_eq!(
        (h[0]["docs_read"].as_u64(), h[0]["docs_written"].as_u64()),
        (Some(6000), Some(6000)),
        "{last}"
    );
    assert_eq!(h.as_array().unwrap().len(), 3, "{last}");
    assert_eq!(h[1]["session_id"], saved["session_id"]);
    assert_eq!(h[2]["session_id"], first["session_id"]);
    assert_same(&a, "db", &b, "db");
}

#[test]
fn kill9_of_the_target_fails_the_replication_then_a_new_run_completes() {
    let a = Server::start();
    let mut b = Server::start();
    a.create_db("db");
    b.create_db("db");
    write_docs(&a, "db", "doc", 4000);
    let proxy = Proxy::start(&b);
    let body = json!({"source": "db", "target": proxy.url("db")});
    let held = with(
        with(body.clone(), hold_mid_run(&proxy, 6)),
        json!({"connection_timeout": 2000, "retries_per_request": 2}),
    );
    let (status, r) = std::thread::scope(|scope| {
        let run = scope.spawn(|| replicate(&a, held));
        wait_until("the held _bulk_docs", || proxy.count(Fault::Hang) == 1);
        b.kill9();
        run.join().unwrap()
    });
    assert_error(status, &r, 500, &proxy.shown("db"));
    assert_healthy(&a);

    let dir = b.take_dir();
    drop(b);
    let b = Server::start_in(dir.path());
    proxy.set_upstream(&b);
    let (status, last) = replicate(&a, body);
    assert_eq!(status, 200, "{last}");
    let h = &last["history"][0];
    assert!(
        h["start_last_seq"].as_str().unwrap().starts_with("100-"),
        "{last}"
    );
    // The counters go on from the checkpointed session's: 100 + 3900.
    assert_eq!(h["docs_written"], 4000, "{last}");
    assert_same(&a, "db", &b, "db");
}

#[test]
fn a_one_shot_replication_outlives_a_caller_that_leaves() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 50);
    b.create_db("db");
    let proxy = Proxy::start(&b);
    proxy.rule("POST /db/_revs_diff", Fault::Hang, 1);
    let body =
        json!({"source": "db", "target": proxy.url("db"), "connection_timeout": 2000}).to_string();
    // The caller sends its request, then hangs up while the replication is held.
    let mut caller = TcpStream::connect(a.addr()).unwrap();
    write!(
        caller,
        "POST /_replicate HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        a.addr(),
        common::basic(ADMIN.0, ADMIN.1),
        body.len()
    )
    .unwrap();
    wait_until("the held _revs_diff", || proxy.count(Fault::Hang) == 1);
    assert!(replication_running(&a));
    drop(caller);
    // As CouchDB's scheduler does, the job runs on (the held request times out and is
    // retried) to its end, and then leaves `_active_tasks`.
    wait_until("the replication to end", || !replication_running(&a));
    assert_same(&a, "db", &b, "db");
    assert!(checkpoint(&b, "db").is_some());
}

// ---- continuous replication ----------------------------------------------------------

fn replication_running(s: &Server) -> bool {
    s.get("/_active_tasks")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["type"] == "replication")
}

#[test]
fn continuous_replication_carries_writes_made_during_a_target_outage() {
    let a = Server::start();
    let b = Server::start();
    a.create_db("db");
    b.create_db("db");
    let proxy = Proxy::start(&b);
    let body = json!({"source": "db", "target": proxy.url("db"), "continuous": true});
    let (status, r) = replicate(&a, body.clone());
    assert_eq!(status, 202, "{r}");
    write_docs(&a, "db", "before", 10);
    wait_until("the first writes on the target", || {
        b.get("/db/before-00009").status == 200
    });

    // The target is unreachable: connections close unanswered.
    proxy.set_default(Fault::Drop);
    write_docs(&a, "db", "during", 20);
    wait_until("the replicator to meet the outage", || {
        proxy.count(Fault::Drop) >= 2
    });
    assert_eq!(b.get("/db/during-00000").status, 404);
    proxy.set_default(Fault::Forward);
    wait_until("the outage's writes on the target", || {
        b.get("/db/during-00019").status == 200
    });
    write_docs(&a, "db", "after", 5);
    wait_until("later writes on the target", || {
        b.get("/db/after-00004").status == 200
    });
    assert!(replication_running(&a));
    assert_same(&a, "db", &b, "db");
    let cancel = a.post(
        "/_replicate",
        &with(body, json!({"cancel": true})).to_string(),
    );
    assert_eq!(cancel.status, 200, "{}", cancel.text);
}

#[test]
fn continuous_replication_stops_cleanly_when_the_peer_stays_down() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "db", 5);
    b.create_db("db");
    let proxy = Proxy::start(&b);
    proxy.set_default(Fault::Drop);
    let body = json!({"source": "db", "target": proxy.url("db"), "continuous": true,
                      "retries_per_request": 1});
    let (status, r) = replicate(&a, body);
    assert_eq!(status, 202, "{r}");
    // Its retries spent, the job ends (as a `_replicate` job does in CouchDB) and leaves
    // the task list; the server carries on.
    wait_until("the job to end", || !replication_running(&a));
    assert_eq!(proxy.log().len(), 2, "{:?}", proxy.log());
    assert_healthy(&a);
}

#[test]
fn continuous_pull_stays_up_when_idle_longer_than_the_connection_timeout() {
    let a = Server::start();
    let b = Server::start();
    a.create_db("db");
    b.create_db("db");
    let body = json!({"source": url(&a, "db"), "target": "db", "continuous": true,
                      "connection_timeout": 1500, "retries_per_request": 2});
    let (status, r) = replicate(&b, body.clone());
    assert_eq!(status, 202, "{r}");
    write_docs(&a, "db", "first", 1);
    wait_until("the first write on the target", || {
        b.get("/db/first-00000").status == 200
    });
    // Longer than the timeout and its retries: waiting for changes is not a stall.
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        replication_running(&b),
        "the replication stopped while idle"
    );
    write_docs(&a, "db", "later", 1);
    wait_until("a write after the idle time", || {
        b.get("/db/later-00000").status == 200
    });
    let cancel = b.post(
        "/_replicate",
        &with(body, json!({"cancel": true})).to_string(),
    );
    assert_eq!(cancel.status, 200, "{}", cancel.text);
}
