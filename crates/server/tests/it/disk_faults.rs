//! Faults below the server, with the real binary over HTTP: `[disk_monitor]` refusing
//! writes, a file system that fills up (a small tmpfs), failed fsyncs and failed reads
//! (an `LD_PRELOAD` shim built here with the system C compiler).
//!
//! Outcomes only: every failed write gets a 5xx and is never acknowledged, every
//! acknowledged write is there after a restart, reads keep working, and writes work again
//! once the fault is gone. Tests that need `mount` (root) or a C compiler print a loud
//! `SKIPPED` line and pass without them.

use crate::common;

use common::Server;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmpfs mounted for one test, unmounted (lazily, so a server that still holds files
/// cannot keep it) when dropped, also when the test fails.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("!!!!! SKIPPED: cannot mount a tmpfs (needs root) !!!!!");
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount {size}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A document body of about `bytes` bytes that compresses poorly.
fn padded(bytes: usize) -> String {
    use rand::RngCore;
    let mut raw = vec![0u8; bytes / 2];
    rand::thread_rng().fill_bytes(&mut raw);
    json!({ "pad": hex::encode(raw) }).to_string()
}

/// Asserts a failed write's answer: a 5xx with CouchDB's error shape.
fn assert_clean_5xx(what: &str, status: u16, body: &str) {
    assert!(status >= 500, "{what}: expected a 5xx, got {status} {body}");
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{what}: {body}"));
    assert!(
        v["error"].is_string() && v["reason"].is_string(),
        "{what}: {body}"
    );
}

/// Polls `f` until it returns `Some`, for at most `limit` (a bound so a broken server
/// fails the test instead of hanging it, not a timing assertion).
fn eventually<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks that every acknowledged `(id, rev)` is the document's revision now.
fn assert_all_there(s: &Server, db: &str, acked: &[(String, String)]) {
    for (id, rev) in acked {
        let r = s.get(&format!("/{db}/{id}"));
        assert_eq!(r.status, 200, "acknowledged {id} lost: {}", r.text);
        assert_eq!(r.json()["_rev"], rev.as_str(), "{id}");
    }
}

// ---- [disk_monitor] ---------------------------------------------------------------------

const DISK_MONITOR_INI: &str =
    "[disk_monitor]\nenable = true\n\n[settee]\ndisk_check_interval = 50\n";

fn set_config(s: &Server, section: &str, key: &str, value: &str) {
    let r = s.put(
        &format!("/_node/_local/_config/{section}/{key}"),
        &json!(value).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

/// With a threshold of 0 any file system in use is "too full": CouchDB's answers follow.
#[test]
fn disk_monitor_refuses_interactive_work() {
    let s = Server::start_with_ini(DISK_MONITOR_INI);
    s.create_db("db");
    let ddoc = json!({"views": {"v": {"map": "function(d) { emit(d._id, 1); }"}}});
    assert_eq!(s.put("/db/_design/d", &ddoc.to_string()).status, 201);
    let a = s.put("/db/a", "{}").json();
    assert_eq!(s.get("/db/_design/d/_view/v").status, 200);
    s.create_db("strict");
    let vdu = json!({"validate_doc_update": "function() { throw({forbidden: 'no'}); }"});
    assert_eq!(s.put("/strict/_design/v", &vdu.to_string()).status, 201);

    set_config(
        &s,
        "disk_monitor",
        "interactive_database_writes_threshold",
        "0",
    );
    let refused = json!({"error": "insufficient_storage", "reason": "database_dir is too full"});
    let r = s.put("/db/b", "{}");
    assert_eq!((r.status, r.json()), (507, refused.clone()));
    let r = s.post("/db", "{}");
    assert_eq!((r.status, r.json()), (507, refused.clone()));
    let r = s.delete(&format!("/db/a?rev={}", a["rev"].as_str().unwrap()));
    assert_eq!((r.status, r.json()), (507, refused.clone()));
    let r = s.put("/db/_local/l", "{}");
    assert_eq!((r.status, r.json()), (507, refused.clone()));
    let r = s.req_bytes(
        "PUT",
        "/db/c/att.txt",
        b"hello".to_vec(),
        &[("content-type", "text/plain")],
    );
    assert_eq!(r.status, 507, "{}", String::from_utf8_lossy(&r.body));
    let inline = json!({"_attachments": {"a.txt": {"content_type": "text/plain", "data": "aGk="}}});
    let r = s.put("/db/i", &inline.to_string());
    assert_eq!((r.status, r.json()), (507, refused.clone()));
    // Refused before validation functions run, as CouchDB checks first.
    let r = s.put("/strict/x", "{}");
    assert_eq!((r.status, r.json()), (507, refused.clone()));
    // `_bulk_docs`: every document fails, each with the error.
    let r = s.post(
        "/db/_bulk_docs",
        r#"{"docs": [{"_id": "x"}, {"_id": "y"}]}"#,
    );
    assert!(r.status < 300, "{}", r.text);
    for row in r.json().as_array().unwrap() {
        assert_eq!(row["error"], "insufficient_storage", "{row}");
        assert_eq!(row["reason"], "database_dir is too full", "{row}");
    }
    // Replicated writes, reads, and database deletion still work.
    let replicated = json!({"docs": [{"_id": "r", "_rev": "1-abc"}], "new_edits": false});
    assert_eq!(
        s.post("/db/_bulk_docs", &replicated.to_string()).status,
        201
    );
    assert_eq!(s.get("/db/a").status, 200);
    assert_eq!(s.get("/db/_all_docs").json()["total_rows"], 3);
    s.create_db("gone");
    assert_eq!(s.delete("/gone").status, 200);

    // A stale view is not brought up to date past its threshold; a current one answers,
    // and so does a stale one asked for as it is.
    set_config(
        &s,
        "disk_monitor",
        "interactive_view_indexing_threshold",
        "0",
    );
    let r = s.get("/db/_design/d/_view/v");
    assert_eq!(
        (r.status, r.json()),
        (
            507,
            json!({"error": "insufficient_storage", "reason": "not enough room to update index"})
        )
    );
    let r = s.get("/db/_design/d/_view/v?update=false");
    assert_eq!((r.status, r.json()["total_rows"].clone()), (200, json!(1)));

    // Space back: everything works again, without a restart.
    set_config(
        &s,
        "disk_monitor",
        "interactive_database_writes_threshold",
        "90",
    );
    set_config(
        &s,
        "disk_monitor",
        "interactive_view_indexing_threshold",
        "90",
    );
    assert_eq!(s.put("/db/b", "{}").status, 201);
    assert_eq!(s.put("/db/_local/l", "{}").status, 201);
    assert_eq!(s.get("/db/_design/d/_view/v").json()["total_rows"], 3);

    // Disabled (CouchDB's default), nothing is refused whatever the thresholds.
    set_config(
        &s,
        "disk_monitor",
        "interactive_database_writes_threshold",
        "0",
    );
    set_config(&s, "disk_monitor", "enable", "false");
    assert_eq!(s.put("/db/c", "{}").status, 201);
}

/// The monitor measuring a real file system: a filler file pushes a small tmpfs past the
/// threshold, writes are refused; removing it lets them through again.
#[test]
fn disk_monitor_follows_the_file_system() {
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let ini = fs.path().join("settee.ini");
    std::fs::write(&ini, DISK_MONITOR_INI).unwrap();
    let data = fs.path().join("data");
    let s = Server::start_with(&data, &["--config", ini.to_str().unwrap()]);
    s.create_db("db");
    let first = s.put("/db/a", "{}");
    assert_eq!(first.status, 201, "{}", first.text);

    let filler = fs.path().join("filler");
    // Fill to the brim (the write of the filler itself stops at ENOSPC), then give back
    // 512 KiB: the monitor sees well over 90 % in use, and commits still have room.
    let _ = std::fs::write(&filler, vec![1u8; 16 << 20]);
    let len = std::fs::metadata(&filler).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap();
    f.set_len(len.saturating_sub(512 << 10)).unwrap();
    drop(f);
    let refused = eventually(Duration::from_secs(30), || {
        let r = s.put(&format!("/db/probe-{}", rand::random::<u32>()), "{}");
        (r.status != 201).then_some(r)
    })
    .expect("writes refused once the disk is past the threshold");
    assert_eq!(refused.status, 507, "{}", refused.text);
    assert_eq!(refused.json()["reason"], "database_dir is too full");
    assert_eq!(s.get("/db/a").status, 200);

    std::fs::remove_file(&filler).unwrap();
    let back = eventually(Duration::from_secs(30), || {
        let r = s.put("/db/after", "{}");
        (r.status == 201).then_some(r)
    });
    assert!(back.is_some(), "writes resume once space is back");
    s.stop();
}

// ---- a full file system, no monitor -----------------------------------------------------

/// One writer: single `PUT`s and `_bulk_docs` of 3 KB documents (ids starting with `tag`)
/// until 50 writes in a row failed. Every failure must be a 507 (a `_bulk_docs` that
/// failed at commit: any clean 5xx); returns the acknowledged `(id, rev)`s and the number
/// of refused requests.
fn fill(s: &Server, tag: &str) -> (Vec<(String, String)>, usize) {
    let mut acked = Vec::new();
    let (mut refused, mut in_a_row, mut i) = (0, 0, 0);
    while in_a_row < 50 && i < 20_000 {
        i += 1;
        if i % 5 == 0 {
            let docs: Vec<Value> = (0..4)
                .map(|k| {
                    let mut d: Value = serde_json::from_str(&padded(3000)).unwrap();
                    d["_id"] = json!(format!("{tag}b{i}-{k}"));
                    d
                })
                .collect();
            let r = s.post("/db/_bulk_docs", &json!({ "docs": docs }).to_string());
            if r.status == 201 {
                for row in r.json().as_array().unwrap() {
                    let id = row["id"].as_str().unwrap().to_string();
                    match row["rev"].as_str() {
                        Some(rev) => acked.push((id, rev.to_string())),
                        None => assert_eq!(row["error"], "insufficient_storage", "{row}"),
                    }
                }
                in_a_row = 0;
            } else {
                assert_clean_5xx("_bulk_docs", r.status, &r.text);
                refused += 1;
                in_a_row += 1;
            }
            continue;
        }
        let id = format!("{tag}d{i}");
        let r = s.put(&format!("/db/{id}"), &padded(3000));
        if r.status == 201 {
            acked.push((id, r.json()["rev"].as_str().unwrap().to_string()));
            in_a_row = 0;
        } else {
            assert_clean_5xx("PUT", r.status, &r.text);
            assert_eq!(r.status, 507, "{}", r.text);
            assert_eq!(r.json()["error"], "insufficient_storage");
            refused += 1;
            in_a_row += 1;
        }
    }
    (acked, refused)
}

/// Three writers at once until the disk is full (their commits share batches).
fn fill_concurrently(s: &Server) -> Vec<(String, String)> {
    let results: Vec<_> = std::thread::scope(|scope| {
        let writers: Vec<_> = ["x", "y", "z"]
            .into_iter()
            .map(|tag| scope.spawn(move || fill(s, tag)))
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let refused: usize = results.iter().map(|(_, r)| r).sum();
    let acked: Vec<_> = results.into_iter().flat_map(|(a, _)| a).collect();
    eprintln!(
        "full disk: {} writes acknowledged, {refused} refused",
        acked.len()
    );
    assert!(refused > 0, "the 16 MiB file system never filled");
    acked
}

/// Writes until the file system is full: failing writes get 507, reads keep working,
/// writes come back (without a restart) once the file system grows, and a restart finds
/// every acknowledged write.
#[test]
fn full_disk_refuses_cleanly_and_recovers() {
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let data = fs.path().join("data");
    let s = Server::start_in(&data);
    s.create_db("db");
    let mut acked = fill_concurrently(&s);
    // Reads keep working while full.
    assert_eq!(s.get("/db").status, 200);
    assert_all_there(&s, "db", &acked[acked.len().saturating_sub(20)..]);

    // More room: RocksDB resumes by itself once the free space covers a memtable.
    fs.resize("256m");
    let back = eventually(Duration::from_secs(60), || {
        let r = s.put("/db/after", "{}");
        (r.status == 201).then_some(r)
    })
    .expect("writes resume without a restart once space is back");
    acked.push(("after".into(), back.json()["rev"].as_str().unwrap().into()));
    // The failed commits left `_db_updates` as it was: one entry per database.
    let updates = s.get("/_db_updates").json();
    let names: Vec<&str> = updates["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["db_name"].as_str().unwrap())
        .collect();
    assert_eq!(names.iter().filter(|n| **n == "db").count(), 1, "{updates}");
    s.stop();

    let s = Server::start_in(&data);
    assert_all_there(&s, "db", &acked);
    assert_eq!(s.put("/db/later", "{}").status, 201);
    s.stop();
}

/// Killed while the disk is full: the next start cannot open the store (RocksDB's
/// recovery must write) and says so, instead of serving; with room again it starts and
/// every acknowledged write is there.
#[test]
fn crash_on_a_full_disk_loses_nothing() {
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let data = fs.path().join("data");
    let s = Server::start_in(&data);
    s.create_db("db");
    let acked = fill_concurrently(&s);
    s.kill9();

    let mut child = Command::new(env!("CARGO_BIN_EXE_settee"))
        .args(["serve", "--bind", "127.0.0.1:0", "--admin", "admin:secret"])
        .arg("--data-dir")
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = eventually(Duration::from_secs(60), || child.try_wait().unwrap());
    if ended.is_none() {
        let _ = child.kill();
    }
    let status = ended.expect("a start on a full disk ends instead of serving");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot open the data directory"),
        "{stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");

    fs.resize("256m");
    let s = Server::start_in(&data);
    assert_all_there(&s, "db", &acked);
    assert_eq!(s.put("/db/later", "{}").status, 201);
    s.stop();
}

// ---- failed fsyncs and reads (LD_PRELOAD shim) ------------------------------------------

/// `fdatasync`/`fsync` fail with EIO while `$SETTEE_FAULTS/sync` exists, `pread` while
/// `$SETTEE_FAULTS/read` does. RocksDB calls these libc functions directly (its WAL sync
/// and table reads), so interposing them puts the fault where a failing disk would.
const SHIM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static int armed(const char *name) {
    const char *dir = getenv("SETTEE_FAULTS");
    char path[PATH_MAX];
    if (!dir || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    return access(path, F_OK) == 0;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (armed("sync")) { errno = EIO; return -1; }
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (armed("sync")) { errno = EIO; return -1; }
    return real(fd);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real) real = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    if (armed("read")) { errno = EIO; return -1; }
    return real(fd, buf, n, off);
}
"#;

/// Builds the shim into `dir`; `None` (after a loud line) without a C compiler.
fn build_shim(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("faults.c");
    let lib = dir.join("faults.so");
    std::fs::write(&src, SHIM).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg("-ldl")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("!!!!! SKIPPED: cannot build the fault shim with `{cc}` !!!!!");
        return None;
    }
    Some(lib)
}

/// A server whose fsyncs and reads fail on demand.
struct Faulty {
    server: Server,
    faults: PathBuf,
}

impl Faulty {
    fn start(data: &Path, work: &Path, lib: &Path) -> Faulty {
        let faults = work.join("faults");
        std::fs::create_dir_all(&faults).unwrap();
        let env = [
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("SETTEE_FAULTS", faults.to_str().unwrap()),
        ];
        Faulty {
            server: Server::start_in_with_env(data, &[], &env),
            faults,
        }
    }

    fn arm(&self, fault: &str) {
        std::fs::write(self.faults.join(fault), "").unwrap();
    }

    fn clear(&self, fault: &str) {
        std::fs::remove_file(self.faults.join(fault)).unwrap();
    }
}

/// While fsync fails, no write is acknowledged (documents, `_bulk_docs`, `_local`,
/// attachments); reads go on. After the fault, writes stay refused (RocksDB keeps the
/// error: retrying an fsync that failed is not safe) until a restart, which finds every
/// acknowledged write. Then reads that fail below RocksDB get a 5xx, never a wrong answer.
#[test]
fn failed_fsync_and_reads() {
    let work = tempfile::tempdir().unwrap();
    let Some(lib) = build_shim(work.path()) else {
        return;
    };
    let data = work.path().join("data");
    let f = Faulty::start(&data, work.path(), &lib);
    let s = &f.server;
    s.create_db("db");
    let mut acked = Vec::new();
    // Bodies of 4 KB, over many table blocks: the blocks start-up reads into the cache
    // (`_users`, `_replicator`) cannot hold them all.
    for i in 0..20 {
        let r = s.put(&format!("/db/a{i}"), &padded(4000));
        assert_eq!(r.status, 201, "{}", r.text);
        acked.push((
            format!("a{i}"),
            r.json()["rev"].as_str().unwrap().to_string(),
        ));
    }

    f.arm("sync");
    let update = format!("/db/a0?rev={}", acked[0].1);
    let writes = [
        ("PUT", "/db/f1", "{}"),
        ("PUT", update.as_str(), "{}"),
        (
            "POST",
            "/db/_bulk_docs",
            r#"{"docs": [{"_id": "f2"}, {"_id": "f3"}]}"#,
        ),
        ("PUT", "/db/_local/f4", "{}"),
        ("POST", "/db", "{}"),
    ];
    for _ in 0..3 {
        for (method, path, body) in writes {
            let r = s.req(method, path, Some(body));
            assert_clean_5xx(&format!("{method} {path}"), r.status, &r.text);
        }
        let r = s.req_bytes("PUT", "/db/f5/x.txt", b"x".to_vec(), &[]);
        assert!(r.status >= 500, "attachment: {}", r.status);
    }
    assert_all_there(s, "db", &acked);
    f.clear("sync");
    // Refused until restart, or taken: never anything else.
    let r = s.put("/db/f6", "{}");
    assert!(
        r.status == 201 || r.status >= 500,
        "{} {}",
        r.status,
        r.text
    );
    if r.status == 201 {
        acked.push(("f6".into(), r.json()["rev"].as_str().unwrap().into()));
    }
    f.server.stop();

    // A restart finds every acknowledged write and takes writes again.
    let f = Faulty::start(&data, work.path(), &lib);
    let s = &f.server;
    assert_all_there(s, "db", &acked);
    assert_eq!(s.put("/db/b", "{}").status, 201);
    f.server.stop();

    // Read errors: a fresh process has nothing cached, so reads go to the table files.
    let f = Faulty::start(&data, work.path(), &lib);
    let s = &f.server;
    f.arm("read");
    let mut failed = 0;
    for (id, rev) in &acked {
        let r = s.get(&format!("/db/{id}"));
        if r.status == 200 {
            assert_eq!(r.json()["_rev"], rev.as_str(), "{id}: a wrong answer");
        } else {
            assert_clean_5xx(&format!("GET {id}"), r.status, &r.text);
            failed += 1;
        }
    }
    eprintln!(
        "read fault: {failed} of {} document reads failed",
        acked.len()
    );
    assert!(failed > 0, "no read reached the disk");
    let r = s.get("/db/_all_docs");
    assert!(r.status == 200 || r.status >= 500, "{}", r.status);
    f.clear("read");
    assert_all_there(s, "db", &acked);
    // A flush or compaction that hit the fault leaves RocksDB refusing writes until a
    // restart; writes that do not are taken at once.
    let r = s.put("/db/c", "{}");
    assert!(
        r.status == 201 || r.status >= 500,
        "{} {}",
        r.status,
        r.text
    );
    eprintln!("read fault cleared: a write answered {}", r.status);
    f.server.stop();
    let s = Server::start_in(&data);
    assert_all_there(&s, "db", &acked);
    assert_eq!(s.put("/db/d", "{}").status, 201);
    s.stop();
}
