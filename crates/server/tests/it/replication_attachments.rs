//! Replication of documents with large attachments, with the real binary: their content
//! streams from the source to the target (one document at a time, in chunks), whichever
//! side the replicating server is on, so its memory stays far below an attachment's size;
//! an edit of such a document does not send the content again; and a target's refusal of
//! one (a `validate_doc_update`, `attachment_too_large`) is counted, not fatal.

use crate::common;
use common::replication::{replicate, url};
use common::Server;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SIZE: usize = 64 << 20;

/// What a replication of these may add to a server's peak memory, above what it held
/// before: three quarters of one attachment, so that one held whole (64 MiB) still fails.
/// What it does add, whatever the attachments' size, is mostly the storage engine's on
/// the writing side (two 8 MiB memtables of the `atts` family and flush buffers: ~20 MiB,
/// as for a plain upload); the streamed path itself holds a few 64 KiB chunks per
/// document. Servers run with jemalloc returning freed pages at once
/// ([`Server::start_measured`]). On a quiet machine each direction adds 3–22 MiB; with
/// the disk and both cores busy (CI runs four test threads) flushes lag and a pull was
/// seen adding 35 MiB.
const RSS_BUDGET_MB: u64 = 48;

/// What an edit's replication may make the target write (its WAL: documents and
/// checkpoints): far less than an attachment, whose content it must not receive again —
/// received content is written before its digest is found to be stored already, and even
/// compressed in the WAL it would be several MiB.
const EDIT_WRITE_BUDGET: u64 = 1 << 20;

/// Compressible content: numbered lines of text.
fn text(seed: u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 128);
    let mut i = 0u64;
    while out.len() < size {
        out.extend_from_slice(
            format!("{seed}:{i:010} all work and no play makes jack a dull boy\n").as_bytes(),
        );
        i += 1;
    }
    out.truncate(size);
    out
}

/// Incompressible content: xorshift64 output.
fn noise(seed: u64, size: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(size + 8);
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size);
    out
}

fn md5_b64(data: &[u8]) -> String {
    use base64::Engine;
    use md5::Digest as _;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(data))
}

/// A document made by uploading one attachment, and what its content is.
struct Uploaded {
    doc: &'static str,
    name: &'static str,
    md5: String,
    len: usize,
}

/// Uploads `data` as attachment `name` of a new document `doc` of `db`.
fn upload(
    s: &Server,
    db: &str,
    doc: &'static str,
    name: &'static str,
    ct: &str,
    data: Vec<u8>,
) -> Uploaded {
    let (md5, len) = (md5_b64(&data), data.len());
    let r = s.req_bytes(
        "PUT",
        &format!("/{db}/{doc}/{name}"),
        data,
        &[("content-type", ct)],
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    Uploaded {
        doc,
        name,
        md5,
        len,
    }
}

/// An attachment's stub with its encoding (`att_encoding_info=true`).
fn stub(s: &Server, db: &str, doc: &str, name: &str) -> Value {
    let d = s.get(&format!("/{db}/{doc}?att_encoding_info=true")).json();
    d["_attachments"][name].clone()
}

/// The target holds the source's revision of every document with the same attachments:
/// the same stubs (digest, length, revpos, encoding and encoded length: the same stored
/// bytes) and the same content.
fn check_copy(src: (&Server, &str), dst: (&Server, &str), uploaded: &[Uploaded]) {
    for u in uploaded {
        let (a, b) = (
            src.0.get(&format!("/{}/{}", src.1, u.doc)).json(),
            dst.0.get(&format!("/{}/{}", dst.1, u.doc)).json(),
        );
        assert_eq!(a["_rev"], b["_rev"], "{}", u.doc);
        let (sa, sb) = (
            stub(src.0, src.1, u.doc, u.name),
            stub(dst.0, dst.1, u.doc, u.name),
        );
        assert_eq!(sa, sb, "{}: the stubs differ", u.doc);
        let r = dst.0.req_bytes(
            "GET",
            &format!("/{}/{}/{}", dst.1, u.doc, u.name),
            Vec::new(),
            &[],
        );
        assert_eq!(r.status, 200, "{}", u.doc);
        assert_eq!(r.body.len(), u.len, "{}: content length", u.doc);
        assert_eq!(md5_b64(&r.body), u.md5, "{}: content", u.doc);
    }
}

/// What a one-shot replication's session did: docs read, written, refused (the history's
/// counters go on from the previous session's, as CouchDB's do).
fn counts(r: &Value) -> (u64, u64, u64) {
    let n = |i: usize, k: &str| r["history"][i][k].as_u64();
    let count = |k: &str| n(0, k).unwrap_or_else(|| panic!("{k} in {r}")) - n(1, k).unwrap_or(0);
    (
        count("docs_read"),
        count("docs_written"),
        count("doc_write_failures"),
    )
}

/// Runs a replication on `runner` and measures how far the peak resident memory of each
/// of `watched` rose above its resident memory just before (MiB), once each has finished
/// the flushes and compactions of what came before.
fn replicate_watched(runner: &Server, body: Value, watched: &[&Server]) -> (Value, Vec<u64>) {
    let before: Vec<u64> = watched
        .iter()
        .map(|s| {
            quiet(s);
            s.reset_peak_rss();
            s.rss_kb()
        })
        .collect();
    let (status, r) = replicate(runner, body);
    assert_eq!(status, 200, "{r}");
    let grew = watched
        .iter()
        .zip(before)
        .map(|(s, b)| s.peak_rss_kb().saturating_sub(b) / 1024)
        .collect();
    (r, grew)
}

/// Waits until the server has stopped writing (background flushes and compactions after
/// large writes; the idle flush comes 2 s after the last write), so that what it writes
/// next can be measured.
fn quiet(s: &Server) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = s.io_bytes().1;
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = s.io_bytes().1;
        if now - last < 64 << 10 {
            return;
        }
        assert!(Instant::now() < deadline, "the server never went quiet");
        last = now;
    }
}

/// Bytes a server wrote (`wchar`: files, not sockets) while `run` ran, after waiting for
/// it to go quiet.
fn written_during<T>(s: &Server, run: impl FnOnce() -> T) -> (T, u64) {
    quiet(s);
    let before = s.io_bytes().1;
    let out = run();
    (out, s.io_bytes().1 - before)
}

/// Three 64 MiB attachments — compressible, incompressible, and compressible text the
/// server stores gzip-encoded — replicated local → local, local → remote (push) and
/// remote → local (pull), the replicating server's peak memory staying under
/// [`RSS_BUDGET_MB`] above its level before (the pushed-to server's too); then an edit of
/// each document replicates in all three directions without sending the content again.
#[test]
fn large_attachments_stream_in_every_direction() {
    let a = Server::start_measured();
    let b = Server::start_measured();
    a.create_db("src");
    let uploaded = vec![
        upload(
            &a,
            "src",
            "plain",
            "plain.bin",
            "application/octet-stream",
            text(1, SIZE),
        ),
        upload(
            &a,
            "src",
            "noise",
            "noise.bin",
            "application/octet-stream",
            noise(2, SIZE),
        ),
        upload(&a, "src", "text", "log.txt", "text/plain", text(3, SIZE)),
    ];
    let gz = stub(&a, "src", "text", "log.txt");
    assert_eq!(gz["encoding"], "gzip", "{gz}");
    assert!(
        gz["encoded_length"].as_u64().unwrap() < SIZE as u64 / 4,
        "{gz}"
    );

    let (r, grew) = replicate_watched(
        &a,
        json!({"source": "src", "target": "local", "create_target": true}),
        &[&a],
    );
    eprintln!("local → local: peak RSS +{} MiB", grew[0]);
    assert_eq!(counts(&r), (3, 3, 0), "{r}");
    check_copy((&a, "src"), (&a, "local"), &uploaded);
    let local_grew = grew;

    let (r, grew) = replicate_watched(
        &a,
        json!({"source": "src", "target": url(&b, "pushed"), "create_target": true}),
        &[&a, &b],
    );
    eprintln!("push: peak RSS +{} MiB (target +{} MiB)", grew[0], grew[1]);
    assert_eq!(counts(&r), (3, 3, 0), "{r}");
    check_copy((&a, "src"), (&b, "pushed"), &uploaded);
    let push_grew = grew;

    let (r, grew) = replicate_watched(
        &a,
        json!({"source": url(&b, "pushed"), "target": "pulled", "create_target": true}),
        &[&a],
    );
    eprintln!("pull: peak RSS +{} MiB", grew[0]);
    assert_eq!(counts(&r), (3, 3, 0), "{r}");
    check_copy((&b, "pushed"), (&a, "pulled"), &uploaded);

    // Checked once all ran, so that the log shows every number.
    for (what, mb) in [
        ("local → local", local_grew[0]),
        ("push (replicating)", push_grew[0]),
        ("push (target)", push_grew[1]),
        ("pull", grew[0]),
    ] {
        assert!(mb < RSS_BUDGET_MB, "{what}: peak RSS grew {mb} MiB");
    }

    // An edit: a new revision with the attachments as stubs.
    for u in &uploaded {
        let mut d = a.get(&format!("/src/{}", u.doc)).json();
        d["edited"] = json!(true);
        let r = a.put(&format!("/src/{}", u.doc), &d.to_string());
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let edited = |s: &Server, db: &str| {
        for u in &uploaded {
            let d = s.get(&format!("/{db}/{}", u.doc)).json();
            assert_eq!(d["edited"], true, "{db}/{}: {d}", u.doc);
            assert!(d["_rev"].as_str().unwrap().starts_with("2-"), "{d}");
            // Still the attachment of revision 1, not one sent again with revision 2.
            assert_eq!(d["_attachments"][u.name]["revpos"], 1, "{d}");
        }
    };
    // Replicated by `a` each way: (source, as named), (target, as named).
    let directions = [
        (
            "local → local",
            (&a, "src"),
            json!("src"),
            (&a, "local"),
            json!("local"),
        ),
        (
            "push",
            (&a, "src"),
            json!("src"),
            (&b, "pushed"),
            json!(url(&b, "pushed")),
        ),
        (
            "pull",
            (&b, "pushed"),
            json!(url(&b, "pushed")),
            (&a, "pulled"),
            json!("pulled"),
        ),
    ];
    for (what, from, source, to, target) in directions {
        let ((status, r), wrote) = written_during(to.0, || {
            replicate(&a, json!({"source": source, "target": target}))
        });
        assert_eq!(status, 200, "{r}");
        assert_eq!(counts(&r), (3, 3, 0), "{what}: {r}");
        eprintln!("edit, {what}: the target wrote {wrote} bytes");
        assert!(
            wrote < EDIT_WRITE_BUDGET,
            "{what}: the edit wrote {wrote} bytes"
        );
        edited(to.0, to.1);
        check_copy(from, to, &uploaded);
    }
}

/// Documents with attachments above the inline limit that the target refuses — its
/// `validate_doc_update` forbids one, another exceeds its `max_attachment_size` — count in
/// `doc_write_failures`, on a remote target and on a local one, and the rest is written:
/// a document with a large and a small (gzip-stored) attachment, and a design document
/// whose attachment's name has a `/`.
#[test]
fn refused_streamed_documents_are_counted() {
    let a = Server::start();
    let b = Server::start_with_ini("[couchdb]\nmax_attachment_size = 2097152\n");
    a.create_db("src");
    let octets = "application/octet-stream";
    let fine = upload(&a, "src", "fine", "a.bin", octets, noise(4, 1 << 20));
    let rev = a.get("/src/fine").json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    let small = text(7, 1000);
    let r = a.req_bytes(
        "PUT",
        &format!("/src/fine/small.txt?rev={rev}"),
        small.clone(),
        &[("content-type", "text/plain")],
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let small = Uploaded {
        doc: "fine",
        name: "small.txt",
        md5: md5_b64(&small),
        len: small.len(),
    };
    let design = upload(
        &a,
        "src",
        "_design/big",
        "lib/blob.bin",
        octets,
        noise(8, 1 << 20),
    );
    upload(&a, "src", "huge", "a.bin", octets, noise(5, 3 << 20));
    upload(&a, "src", "forbidden", "a.bin", octets, noise(6, 1 << 20));
    let mut d = a.get("/src/forbidden").json();
    d["bad"] = json!(true);
    assert_eq!(a.put("/src/forbidden", &d.to_string()).status, 201);
    let written = [fine, small, design];
    let vdu = json!({"validate_doc_update": "function(n){ if (n.bad) throw({forbidden: 'no bad docs'}); }"});
    for (s, db) in [(&b, "dst"), (&a, "dst"), (&b, "pdst")] {
        s.create_db(db);
        let r = s.put(&format!("/{db}/_design/v"), &vdu.to_string());
        assert_eq!(r.status, 201, "{}", r.text);
    }

    // Remote target: the VDU's 403 and the 413.
    let (status, r) = replicate(&a, json!({"source": "src", "target": url(&b, "dst")}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(counts(&r), (4, 2, 2), "{r}");
    check_copy((&a, "src"), (&b, "dst"), &written);
    assert_eq!(b.get("/dst/huge").status, 404);
    assert_eq!(b.get("/dst/forbidden").status, 404);

    // Local target: the VDU (no size limit on this server).
    let (status, r) = replicate(&a, json!({"source": "src", "target": "dst"}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(counts(&r), (4, 3, 1), "{r}");
    check_copy((&a, "src"), (&a, "dst"), &written);
    assert_eq!(a.get("/dst/huge").status, 200);
    assert_eq!(a.get("/dst/forbidden").status, 404);

    // Local target pulling from a remote source: both refusals on this side.
    let (status, r) = replicate(&b, json!({"source": url(&a, "src"), "target": "pdst"}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(counts(&r), (4, 2, 2), "{r}");
    check_copy((&a, "src"), (&b, "pdst"), &written);
    assert_eq!(b.get("/pdst/huge").status, 404);
}
