//! `_replicate` answers and checkpoint histories counted and ordered as CouchDB 3.5.2's
//! (measured on the reference: `notes/data-level.md` §2), whichever way the runner reaches
//! the two databases: by bare names, by URLs naming itself (in process), by URLs of other
//! servers (remote to remote), and pushing or pulling between two servers.

use crate::common;
use common::replication::{bulk, replicate, url};
use common::Server;
use serde_json::{json, Value};

/// How the runner names a database: bare (its own), or by URL.
#[derive(Clone, Copy)]
enum Naming {
    Bare,
    Url,
}

/// One setting of the scenarios: who runs the replications, where the source and the
/// targets live, how the runner names them, and a prefix for database names.
struct Ends<'a> {
    runner: &'a Server,
    src: &'a Server,
    dst: &'a Server,
    naming: Naming,
    prefix: &'a str,
}

impl Ends<'_> {
    fn name(&self, s: &Server, db: &str) -> Value {
        match self.naming {
            Naming::Bare => json!(format!("{}{db}", self.prefix)),
            Naming::Url => json!(url(s, &format!("{}{db}", self.prefix))),
        }
    }

    fn db(&self, db: &str) -> String {
        format!("{}{db}", self.prefix)
    }

    /// Replicates the source to target `db` with `extra` options; the answer (200).
    fn replicate(&self, db: &str, extra: Value) -> Value {
        let mut body =
            json!({"source": self.name(self.src, "src"), "target": self.name(self.dst, db)});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, r) = replicate(self.runner, body);
        assert_eq!(status, 200, "{r}");
        r
    }
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

const ENTRY_KEYS: [&str; 13] = [
    "session_id",
    "start_time",
    "end_time",
    "start_last_seq",
    "end_last_seq",
    "recorded_seq",
    "missing_checked",
    "missing_found",
    "docs_read",
    "docs_written",
    "doc_write_failures",
    "bulk_get_docs",
    "bulk_get_attempts",
];

/// A history entry's counters, in `ENTRY_KEYS` order.
fn counts(entry: &Value) -> [u64; 7] {
    let n = |k: &str| {
        entry[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {entry}"))
    };
    [
        n("missing_checked"),
        n("missing_found"),
        n("docs_read"),
        n("docs_written"),
        n("doc_write_failures"),
        n("bulk_get_docs"),
        n("bulk_get_attempts"),
    ]
}

/// `Fri, 27 Nov 2026 05:30:44 GMT` (RFC 1123, as `httpd_util:rfc1123_date` writes it).
fn assert_rfc1123(t: &Value) {
    let t = t.as_str().unwrap_or_else(|| panic!("{t}"));
    let b = t.as_bytes();
    let ok = t.len() == 29
        && t.ends_with(" GMT")
        && b[3] == b','
        && [4, 7, 11, 16].iter().all(|&i| b[i] == b' ')
        && b[19] == b':'
        && b[22] == b':'
        && ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].contains(&&t[..3]);
    assert!(ok, "not RFC 1123: {t}");
}

/// The seq of document `id`'s last change in `db` of `s`.
fn seq_of(s: &Server, db: &str, id: &str) -> Value {
    let changes = s.get(&format!("/{db}/_changes")).json();
    changes["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {changes}"))["seq"]
        .clone()
}

/// A first session's answer: CouchDB's members in order, the entry's too, `start_last_seq`
/// the integer 0, one session id, the seqs, and these counters.
fn assert_first(r: &Value, seq: &Value, expected: [u64; 7]) {
    let h = &r["history"][0];
    assert_eq!(keys(h), ENTRY_KEYS, "{r}");
    assert_eq!(counts(h), expected, "{r}");
    assert_eq!(h["start_last_seq"], json!(0), "{r}");
    assert_eq!(h["session_id"], r["session_id"]);
    assert_eq!(r["session_id"].as_str().map(str::len), Some(32), "{r}");
    assert_eq!(&r["source_last_seq"], seq, "{r}");
    assert_eq!(&h["end_last_seq"], seq, "{r}");
    assert_eq!(&h["recorded_seq"], seq, "{r}");
    assert_rfc1123(&h["start_time"]);
    assert_rfc1123(&h["end_time"]);
    assert_eq!(r["history"].as_array().unwrap().len(), 1, "{r}");
}

/// The checkpoint document of `db` named by the answer's history: `_id`, `_rev`, then the
/// answer without `ok`.
fn assert_checkpoint(s: &Server, db: &str, r: &Value, rev: &str) {
    let rows = s.get(&format!("/{db}/_local_docs")).json();
    let found: Vec<Value> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            s.get(&format!("/{db}/{}", row["id"].as_str().unwrap()))
                .json()
        })
        .filter(|d| d["session_id"] == r["session_id"])
        .collect();
    assert_eq!(found.len(), 1, "{rows} {r}");
    let doc = &found[0];
    assert_eq!(keys(doc)[..2], ["_id", "_rev"], "{doc}");
    assert_eq!(doc["_rev"], rev, "{doc}");
    let mut body = doc.as_object().unwrap().clone();
    body.shift_remove("_id");
    body.shift_remove("_rev");
    let mut answer = r.as_object().unwrap().clone();
    answer.shift_remove("ok");
    answer.shift_remove("no_changes");
    assert_eq!(Value::Object(body), Value::Object(answer));
}

fn ids(s: &Server, db: &str) -> Vec<String> {
    let all = s.get(&format!("/{db}/_all_docs")).json();
    all["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{all}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

/// The reference's scenarios, with the numbers CouchDB 3.5.2 answered.
fn scenarios(e: &Ends) {
    let (src, dst) = (e.src, e.dst);
    let sdb = e.db("src");
    src.create_db(&sdb);
    bulk(
        src,
        &sdb,
        json!([
            {"_id": "a", "type": "x"},
            {"_id": "b", "type": "y"},
            {"_id": "c", "type": "x"},
            {"_id": "d", "type": "y"},
            {"_id": "_design/f", "filters": {"onlyx": "function(doc, req) { return doc.type == \"x\"; }"}},
        ]),
        true,
    );
    let last = src.get(&format!("/{sdb}")).json()["update_seq"].clone();

    // a) Everything, into a new target: the design document is never `_bulk_get`'s.
    let full = e.replicate("tgt", json!({"create_target": true}));
    assert_eq!(
        keys(&full),
        [
            "ok",
            "session_id",
            "source_last_seq",
            "replication_id_version",
            "history"
        ]
    );
    assert_eq!(full["replication_id_version"], 4);
    assert_first(&full, &last, [5, 5, 5, 5, 0, 4, 4]);
    assert_checkpoint(src, &sdb, &full, "0-1");
    assert_checkpoint(dst, &e.db("tgt"), &full, "0-1");

    // b) Again, nothing new: `no_changes` and the checkpoint as it was, not rewritten.
    let again = e.replicate("tgt", json!({}));
    let mut expected = full.as_object().unwrap().clone();
    expected.shift_insert(1, "no_changes".into(), json!(true));
    assert_eq!(again, Value::Object(expected));
    assert_eq!(
        keys(&again),
        [
            "ok",
            "no_changes",
            "session_id",
            "source_last_seq",
            "replication_id_version",
            "history"
        ]
    );
    assert_checkpoint(src, &sdb, &full, "0-1");

    // c) One more document: the counters go on from the last session's.
    bulk(src, &sdb, json!([{"_id": "e", "type": "x"}]), true);
    let inc = e.replicate("tgt", json!({}));
    let h = inc["history"].as_array().unwrap();
    assert_eq!(h.len(), 2, "{inc}");
    assert_eq!(counts(&h[0]), [6, 6, 6, 6, 0, 5, 5], "{inc}");
    assert_eq!(h[0]["start_last_seq"], full["source_last_seq"]);
    assert_eq!(h[0]["end_last_seq"], seq_of(src, &sdb, "e"));
    assert_eq!(h[1], full["history"][0]);
    assert_ne!(inc["session_id"], full["session_id"]);
    assert_checkpoint(src, &sdb, &inc, "0-2");
    assert_checkpoint(dst, &e.db("tgt"), &inc, "0-2");

    // d) `doc_ids` (one missing): CouchDB 1.0's extra members, and the seq of the last
    // change it copied, not the database's.
    let by_ids = e.replicate(
        "ids",
        json!({"create_target": true, "doc_ids": ["a", "c", "zzz"]}),
    );
    assert_eq!(
        keys(&by_ids),
        [
            "ok",
            "session_id",
            "source_last_seq",
            "replication_id_version",
            "start_time",
            "end_time",
            "docs_read",
            "docs_written",
            "doc_write_failures",
            "history"
        ]
    );
    assert_first(&by_ids, &seq_of(src, &sdb, "c"), [2, 2, 2, 2, 0, 2, 2]);
    let h = &by_ids["history"][0];
    assert_eq!(by_ids["start_time"], h["start_time"]);
    assert_eq!(by_ids["end_time"], h["end_time"]);
    assert_eq!(
        (
            &by_ids["docs_read"],
            &by_ids["docs_written"],
            &by_ids["doc_write_failures"]
        ),
        (&json!(2), &json!(2), &json!(0))
    );
    assert_eq!(ids(dst, &e.db("ids")), ["a", "c"]);
    let again = e.replicate("ids", json!({"doc_ids": ["a", "c", "zzz"]}));
    assert_eq!(again["no_changes"], true, "{again}");
    assert_eq!(again["docs_written"], 2, "{again}");
    assert_checkpoint(dst, &e.db("ids"), &by_ids, "0-1");

    // e) A JavaScript filter: a, c and e (not the design document).
    let filtered = e.replicate("flt", json!({"create_target": true, "filter": "f/onlyx"}));
    assert_eq!(keys(&filtered).len(), 5, "{filtered}");
    assert_first(&filtered, &seq_of(src, &sdb, "e"), [3, 3, 3, 3, 0, 3, 3]);
    assert_eq!(ids(dst, &e.db("flt")), ["a", "c", "e"]);

    // f) A selector: b and d; the last copied is d, before e.
    let selected = e.replicate(
        "sel",
        json!({"create_target": true, "selector": {"type": "y"}}),
    );
    assert_first(&selected, &seq_of(src, &sdb, "d"), [2, 2, 2, 2, 0, 2, 2]);
    assert_eq!(ids(dst, &e.db("sel")), ["b", "d"]);
    // Nothing matches: no changes, no checkpoint, no history.
    let none = e.replicate(
        "none",
        json!({"create_target": true, "selector": {"type": "nope"}}),
    );
    assert_eq!(none, json!({"ok": true, "no_changes": true}));
    assert_eq!(ids(dst, &e.db("none")), Vec::<String>::new());

    // g) A target holding `a` already and another revision of `b`.
    let t2 = e.db("tgt2");
    dst.create_db(&t2);
    let a = src.get(&format!("/{sdb}/a?revs=true")).json();
    bulk(dst, &t2, json!([a]), false);
    let r = dst.put(&format!("/{t2}/b"), &json!({"other": true}).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let other_rev = r.json()["rev"].clone();
    let partial = e.replicate("tgt2", json!({}));
    assert_first(&partial, &seq_of(src, &sdb, "e"), [6, 5, 5, 5, 0, 4, 4]);
    let b = dst.get(&format!("/{t2}/b?conflicts=true")).json();
    let b_src = src.get(&format!("/{sdb}/b")).json();
    let mut revs = vec![b["_rev"].clone(), b["_conflicts"][0].clone()];
    revs.sort_by_key(|r| r.as_str().unwrap().to_string());
    let mut want = vec![other_rev, b_src["_rev"].clone()];
    want.sort_by_key(|r| r.as_str().unwrap().to_string());
    assert_eq!(revs, want, "{b}");

    // h) A gzip-stored attachment: tried in `_bulk_get`, fetched alone, and stored on the
    // target as it is on the source (`encoding`, `encoded_length`, digest).
    let r = src.req_with(
        "PUT",
        &format!("/{sdb}/withatt/file.txt"),
        Some(&"hello world ".repeat(200)),
        &[("Content-Type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let att = e.replicate("tgt", json!({}));
    let h = &att["history"][0];
    assert_eq!(counts(h), [7, 7, 7, 7, 0, 5, 6], "{att}");
    assert_eq!(att["history"].as_array().unwrap().len(), 3, "{att}");
    let stub = |s: &Server, db: &str| {
        s.get(&format!("/{db}/withatt?att_encoding_info=true"))
            .json()["_attachments"]["file.txt"]
            .clone()
    };
    let on_src = stub(src, &sdb);
    assert_eq!(on_src["encoding"], "gzip", "{on_src}");
    assert_eq!(stub(dst, &e.db("tgt")), on_src);
    let r = dst.get(&format!("/{}/withatt/file.txt", e.db("tgt")));
    assert_eq!(r.text, "hello world ".repeat(200));
}

#[test]
fn local_to_local_by_bare_name() {
    let s = Server::start();
    scenarios(&Ends {
        runner: &s,
        src: &s,
        dst: &s,
        naming: Naming::Bare,
        prefix: "",
    });
}

#[test]
fn local_to_local_by_own_url() {
    let s = Server::start();
    scenarios(&Ends {
        runner: &s,
        src: &s,
        dst: &s,
        naming: Naming::Url,
        prefix: "",
    });
}

#[test]
fn remote_to_remote() {
    let (runner, a, b) = (Server::start(), Server::start(), Server::start());
    scenarios(&Ends {
        runner: &runner,
        src: &a,
        dst: &b,
        naming: Naming::Url,
        prefix: "",
    });
}

#[test]
fn push_and_pull() {
    let (a, b) = (Server::start(), Server::start());
    // a pushes to b, then b pulls from a (each naming the other by URL).
    scenarios(&Ends {
        runner: &a,
        src: &a,
        dst: &b,
        naming: Naming::Url,
        prefix: "push_",
    });
    scenarios(&Ends {
        runner: &b,
        src: &a,
        dst: &b,
        naming: Naming::Url,
        prefix: "pull_",
    });
}

/// `create_target` with each kind of filter creates the target and copies only what the
/// filter passes, between databases of one server and to another server.
#[test]
fn create_target_with_filters() {
    let (a, b) = (Server::start(), Server::start());
    a.create_db("src");
    bulk(
        &a,
        "src",
        json!([
            {"_id": "a", "type": "x"},
            {"_id": "b", "type": "y"},
            {"_id": "_design/f", "filters": {"onlyx": "function(doc, req) { return doc.type == req.query.t; }"}},
        ]),
        true,
    );
    let filters: [(&str, Value); 3] = [
        ("ids", json!({"doc_ids": ["a"]})),
        (
            "js",
            json!({"filter": "f/onlyx", "query_params": {"t": "x"}}),
        ),
        ("sel", json!({"selector": {"type": "x"}})),
    ];
    let src_on_a = json!(url(&a, "src"));
    for (name, filter) in filters {
        // (runner, source, target, where the target is): local, push, pull.
        let ends = [
            (&a, json!("src"), json!(format!("l_{name}")), &a),
            (
                &a,
                json!("src"),
                json!(url(&b, &format!("push_{name}"))),
                &b,
            ),
            (&b, src_on_a.clone(), json!(format!("pull_{name}")), &b),
        ];
        for (runner, source, target, on) in ends {
            let db = target
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string();
            let mut body = json!({"source": source, "target": target, "create_target": true});
            body.as_object_mut()
                .unwrap()
                .extend(filter.as_object().unwrap().clone());
            let (status, r) = replicate(runner, body);
            assert_eq!(status, 200, "{name} {db}: {r}");
            assert_eq!(counts(&r["history"][0])[3], 1, "{name} {db}: {r}");
            assert_eq!(ids(on, &db), ["a"], "{name} {db}");
        }
    }
}
