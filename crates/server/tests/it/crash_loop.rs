//! Crash loop: the real server on one data directory, concurrent writers of every kind
//! (single PUTs, `_bulk_docs`, updates, deletes, attachments standalone, inline and in
//! multipart/related bodies, replicated `new_edits: false` writes, `_local` docs),
//! `kill -9` at a random moment, restart, and a check that nothing acknowledged was lost and
//! that every derived structure agrees with the documents.
//!
//! Small by default (CI); by hand at full size (see docs/reliability.md):
//!
//! ```text
//! CRASH_CYCLES=100 cargo test --release --locked -p settee --test crash_loop -- --nocapture
//! ```
//!
//! Knobs: `CRASH_CYCLES` (3), `CRASH_WRITERS` (4), `CRASH_RUN_MS` (longest run before the
//! kill, 1500), `CRASH_SEED` (random unless given; printed so a failure can be replayed as
//! far as thread timing allows).
//!
//! What counts as acknowledged: a `201 Created` or `200 OK` answer. `202 Accepted` (a
//! `batch=ok` write) is not a durability promise in CouchDB either, so the writers never
//! use `batch=ok` and a 202 would not be counted. A write whose answer was lost with the
//! connection is *pending*: after the restart its document may show the write or not, but
//! never anything else.
//!
//! The data checks itself: every document carries `check = "<id>:<n>"`, and every
//! attachment's name `a-<seed>-<len>` says what its bytes must be, so any document or
//! attachment found on disk can be verified without remembering it.

use crate::common;
use common::Server;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const DB: &str = "crash";
const DDOC: &str = "_design/crash";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// splitmix64: small, seedable, good enough to pick operations and attachment bytes.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The bytes of attachment `a-<seed>-<len>`.
fn att_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `(seed, len)` from an attachment name this test wrote.
fn parse_att_name(name: &str) -> Option<(u64, usize)> {
    let mut parts = name.strip_prefix("a-")?.split('-');
    let seed = parts.next()?.parse().ok()?;
    let len = parts.next()?.parse().ok()?;
    Some((seed, len))
}

fn item(id: &str, owner: &str, n: u64, pad: usize) -> Value {
    json!({"_id": id, "type": "item", "owner": owner, "n": n,
           "check": format!("{id}:{n}"), "pad": "p".repeat(pad)})
}

/// The design document at edit `v`: two views always, a third on odd versions; the
/// version is in the map source so every edit changes the index signature.
fn ddoc(v: u64) -> Value {
    let mut views = json!({
        "by_owner": {"map": format!("function(doc) {{ if (doc.type === 'item') emit(doc.owner, doc.n); }} // v{v}"),
                     "reduce": "_sum"},
        "by_n": {"map": format!("function(doc) {{ if (doc.type === 'item') emit(doc.n, null); }} // v{v}"),
                 "reduce": "_count"},
    });
    if v % 2 == 1 {
        views["odd"] = json!({"map": "function(doc) { if (doc.type === 'item' && doc.n % 2 === 1) emit([doc.owner, doc._id], doc.n); }"});
    }
    json!({"_id": DDOC, "v": v, "views": views})
}

/// What the test knows of one document: the last acknowledged revision, and whether a
/// write to it is in flight (sent, not answered).
#[derive(Clone, Debug, Default)]
struct Entry {
    acked: Option<String>,
    pending: bool,
}

/// A writer's view of one of its documents.
#[derive(Clone, Debug)]
struct Mine {
    id: String,
    rev: String,
    n: u64,
    deleted: bool,
}

#[derive(Default)]
struct Ledger {
    docs: Mutex<HashMap<String, Entry>>,
    /// `_local` doc id → (last acknowledged counter, pending).
    locals: Mutex<HashMap<String, (u64, bool)>>,
    acks: AtomicU64,
    /// 5xx answers seen while the server was up (each is a bug).
    errors: Mutex<Vec<String>>,
    /// (operation, status) → answers, so a run shows that every kind of write landed.
    tally: Mutex<BTreeMap<(String, u16), u64>>,
}

impl Ledger {
    fn pending(&self, ids: &[&str]) {
        let mut docs = self.docs.lock().unwrap();
        for id in ids {
            docs.entry(id.to_string()).or_default().pending = true;
        }
    }
    fn acked(&self, id: &str, rev: &str) {
        let mut docs = self.docs.lock().unwrap();
        let e = docs.entry(id.to_string()).or_default();
        e.acked = Some(rev.to_string());
        e.pending = false;
        self.acks.fetch_add(1, Ordering::Relaxed);
    }
    /// A definite refusal: the write did not happen.
    fn refused(&self, id: &str) {
        if let Some(e) = self.docs.lock().unwrap().get_mut(id) {
            e.pending = false;
        }
    }
    fn check_status(&self, what: &str, status: u16, text: &str) {
        *self
            .tally
            .lock()
            .unwrap()
            .entry((what.to_string(), status))
            .or_default() += 1;
        if status >= 500 {
            self.errors
                .lock()
                .unwrap()
                .push(format!("{what}: {status} {text}"));
        }
    }
}

/// One writer thread: a random mix of single PUTs, `_bulk_docs`, updates, deletes,
/// standalone attachments and `_local` docs on documents it owns, until the server dies.
fn writer(
    s: &Server,
    ledger: &Ledger,
    t: usize,
    mine: &mut Vec<Mine>,
    seq: &mut u64,
    rng: &mut Rng,
) {
    let owner = format!("w{t}");
    let db = format!("/{DB}");
    loop {
        let live: Vec<usize> = (0..mine.len()).filter(|&i| !mine[i].deleted).collect();
        let pick = |rng: &mut Rng| live[rng.below(live.len() as u64) as usize];
        let op = rng.below(100);
        if op < 20 || live.is_empty() {
            // a new document
            *seq += 1;
            let id = format!("{owner}-{seq}");
            ledger.pending(&[&id]);
            let body = item(&id, &owner, 0, rng.below(2000) as usize);
            let Ok(r) = s.try_req("PUT", &format!("{db}/{id}"), &body.to_string()) else {
                return;
            };
            ledger.check_status("PUT new", r.status, &r.text);
            if r.status == 201 {
                let rev = r.json()["rev"].as_str().unwrap().to_string();
                ledger.acked(&id, &rev);
                mine.push(Mine {
                    id,
                    rev,
                    n: 0,
                    deleted: false,
                });
            } else {
                ledger.refused(&id);
            }
        } else if op < 34 {
            // _bulk_docs: some new, some updates
            let batch = batch(&owner, seq, mine, &live, rng, 10, false);
            let docs: Vec<&Value> = batch.iter().map(|(d, _)| d).collect();
            let Ok(r) = send_batch(s, ledger, &batch, json!({"docs": docs})) else {
                return;
            };
            ledger.check_status("_bulk_docs", r.status, &r.text);
            // One row per document, in order: its new revision, or an error.
            let rows = if r.status == 201 { r.json() } else { json!([]) };
            let revs: Vec<Option<String>> = (0..batch.len())
                .map(|k| {
                    let row = &rows[k];
                    let rev = row["rev"].as_str().filter(|_| row.get("error").is_none());
                    rev.map(str::to_string)
                })
                .collect();
            record(ledger, mine, &batch, revs);
        } else if op < 48 {
            // update one
            let i = pick(rng);
            let m = mine[i].clone();
            ledger.pending(&[&m.id]);
            let mut d = item(&m.id, &owner, m.n + 1, rng.below(2000) as usize);
            d["_rev"] = json!(m.rev);
            let Ok(r) = s.try_req("PUT", &format!("{db}/{}", m.id), &d.to_string()) else {
                return;
            };
            ledger.check_status("PUT update", r.status, &r.text);
            if r.status == 201 {
                let rev = r.json()["rev"].as_str().unwrap().to_string();
                ledger.acked(&m.id, &rev);
                mine[i].rev = rev;
                mine[i].n += 1;
            } else {
                ledger.refused(&m.id);
            }
        } else if op < 56 {
            // delete one
            let i = pick(rng);
            let m = mine[i].clone();
            ledger.pending(&[&m.id]);
            let Ok(r) = s.try_req("DELETE", &format!("{db}/{}?rev={}", m.id, m.rev), "") else {
                return;
            };
            ledger.check_status("DELETE", r.status, &r.text);
            if r.status == 200 {
                let rev = r.json()["rev"].as_str().unwrap().to_string();
                ledger.acked(&m.id, &rev);
                mine[i].rev = rev;
                mine[i].deleted = true;
            } else {
                ledger.refused(&m.id);
            }
        } else if op < 66 {
            // a standalone attachment, up to 256 KiB
            let i = pick(rng);
            let m = mine[i].clone();
            let seed = rng.next() >> 1;
            let len = match rng.below(4) {
                0 => 0,
                1 => rng.below(100),
                2 => rng.below(8 * 1024),
                _ => rng.below(256 * 1024),
            } as usize;
            ledger.pending(&[&m.id]);
            let path = format!("{db}/{}/a-{seed}-{len}?rev={}", m.id, m.rev);
            let ct = [("content-type", "application/octet-stream")];
            let Ok(r) = s.try_req_bytes("PUT", &path, att_bytes(seed, len), &ct) else {
                return;
            };
            let text = String::from_utf8_lossy(&r.body).into_owned();
            ledger.check_status("PUT attachment", r.status, &text);
            if r.status == 201 {
                let v: Value = serde_json::from_str(&text).unwrap();
                let rev = v["rev"].as_str().unwrap().to_string();
                ledger.acked(&m.id, &rev);
                mine[i].rev = rev;
            } else {
                ledger.refused(&m.id);
            }
        } else if op < 80 {
            // an update carrying a new attachment inline (base64) or as a multipart/related
            // part, keeping the document's other attachments as stubs
            let i = pick(rng);
            let m = mine[i].clone();
            let Ok(cur) = s.try_req("GET", &format!("{db}/{}?rev={}", m.id, m.rev), "") else {
                return;
            };
            ledger.check_status("GET before attach", cur.status, &cur.text);
            if cur.status != 200 {
                continue;
            }
            let mut stubs = cur.json()["_attachments"].clone();
            if !stubs.is_object() {
                stubs = json!({});
            }
            let (seed, len) = (rng.next() >> 1, rng.below(64 * 1024) as usize);
            let name = format!("a-{seed}-{len}");
            let mut d = item(&m.id, &owner, m.n + 1, rng.below(500) as usize);
            d["_rev"] = json!(m.rev);
            ledger.pending(&[&m.id]);
            let sent = if op < 73 {
                use base64::Engine;
                let data = base64::engine::general_purpose::STANDARD.encode(att_bytes(seed, len));
                stubs[&name] = json!({"content_type": "application/octet-stream", "data": data});
                d["_attachments"] = stubs;
                s.try_req("PUT", &format!("{db}/{}", m.id), &d.to_string())
                    .map(|r| (r.status, r.text))
            } else {
                stubs[&name] = json!({"content_type": "application/octet-stream",
                                      "follows": true, "length": len});
                d["_attachments"] = stubs;
                let boundary = format!("b{seed:x}");
                let mut body = format!(
                    "--{boundary}\r\nContent-Type: application/json\r\n\r\n{d}\r\n--{boundary}\r\n\r\n"
                )
                .into_bytes();
                body.extend_from_slice(&att_bytes(seed, len));
                body.extend_from_slice(format!("\r\n--{boundary}--").as_bytes());
                let ct = format!("multipart/related; boundary=\"{boundary}\"");
                s.try_req_bytes(
                    "PUT",
                    &format!("{db}/{}", m.id),
                    body,
                    &[("content-type", &ct)],
                )
                .map(|r| (r.status, String::from_utf8_lossy(&r.body).into_owned()))
            };
            let Ok((status, text)) = sent else {
                return;
            };
            let what = if op < 73 {
                "PUT inline attachment"
            } else {
                "PUT multipart/related"
            };
            ledger.check_status(what, status, &text);
            if status == 201 {
                let v: Value = serde_json::from_str(&text).unwrap();
                let rev = v["rev"].as_str().unwrap().to_string();
                ledger.acked(&m.id, &rev);
                mine[i].rev = rev;
                mine[i].n += 1;
            } else {
                ledger.refused(&m.id);
            }
        } else if op < 88 {
            // replicated writes (`new_edits: false`): new documents at a given first
            // revision, and existing ones extended by a revision the server did not make
            let batch = batch(&owner, seq, mine, &live, rng, 4, true);
            let docs: Vec<&Value> = batch.iter().map(|(d, _)| d).collect();
            let body = json!({"docs": docs, "new_edits": false});
            let Ok(r) = send_batch(s, ledger, &batch, body) else {
                return;
            };
            ledger.check_status("_bulk_docs new_edits=false", r.status, &r.text);
            // Success is an empty list; only failures are listed.
            let failed: HashSet<String> = match r.status {
                201 => r
                    .json()
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|row| row["id"].as_str().map(str::to_string))
                    .collect(),
                _ => batch
                    .iter()
                    .map(|(d, _)| d["_id"].as_str().unwrap().to_string())
                    .collect(),
            };
            let revs = batch
                .iter()
                .map(|(d, _)| {
                    let id = d["_id"].as_str().unwrap();
                    (!failed.contains(id)).then(|| d["_rev"].as_str().unwrap().to_string())
                })
                .collect();
            record(ledger, mine, &batch, revs);
        } else {
            // this writer's _local doc
            let id = format!("_local/{owner}");
            let c = {
                let mut locals = ledger.locals.lock().unwrap();
                let e = locals.entry(id.clone()).or_insert((0, false));
                e.1 = true;
                e.0 + 1
            };
            // _local docs take no rev check in CouchDB; the counter orders them.
            let Ok(r) = s.try_req("PUT", &format!("{db}/{id}"), &json!({"c": c}).to_string())
            else {
                return;
            };
            ledger.check_status("PUT _local", r.status, &r.text);
            let mut locals = ledger.locals.lock().unwrap();
            let e = locals.get_mut(&id).unwrap();
            if r.status == 201 {
                *e = (c, false);
                ledger.acks.fetch_add(1, Ordering::Relaxed);
            } else {
                e.1 = false;
            }
        }
    }
}

/// A `_bulk_docs` batch of one writer: 1 to `most` new documents, then edits of up to
/// `most` distinct live ones, each with the index in `mine` it edits (`usize::MAX` for new
/// ones). `replicated` batches carry revisions the writer made up (for `new_edits: false`):
/// new documents at generation 1, edits one generation past the current revision.
fn batch(
    owner: &str,
    seq: &mut u64,
    mine: &[Mine],
    live: &[usize],
    rng: &mut Rng,
    most: u64,
    replicated: bool,
) -> Vec<(Value, usize)> {
    let mut out = Vec::new();
    let made_up = |rng: &mut Rng, d: &mut Value, gen: u64, parent: Option<&str>| {
        let hash = format!("{:016x}{:016x}", rng.next(), rng.next());
        d["_rev"] = json!(format!("{gen}-{hash}"));
        let ids: Vec<&str> = std::iter::once(hash.as_str()).chain(parent).collect();
        d["_revisions"] = json!({"start": gen, "ids": ids});
    };
    for _ in 0..1 + rng.below(most) {
        *seq += 1;
        let id = format!("{owner}-{seq}");
        let mut d = item(&id, owner, 0, rng.below(500) as usize);
        if replicated {
            made_up(rng, &mut d, 1, None);
        }
        out.push((d, usize::MAX));
    }
    let mut seen = HashSet::new();
    for _ in 0..rng.below(most) {
        let i = live[rng.below(live.len() as u64) as usize];
        if !seen.insert(i) {
            continue;
        }
        let m = &mine[i];
        let mut d = item(&m.id, owner, m.n + 1, rng.below(500) as usize);
        if replicated {
            let (gen, parent) = m.rev.split_once('-').unwrap();
            made_up(rng, &mut d, gen.parse::<u64>().unwrap() + 1, Some(parent));
        } else {
            d["_rev"] = json!(m.rev);
        }
        out.push((d, i));
    }
    out
}

/// Posts a batch to `_bulk_docs`, its documents pending until the answer is recorded.
fn send_batch(
    s: &Server,
    ledger: &Ledger,
    batch: &[(Value, usize)],
    body: Value,
) -> Result<common::Resp, ureq::Error> {
    let ids: Vec<&str> = batch
        .iter()
        .map(|(d, _)| d["_id"].as_str().unwrap())
        .collect();
    ledger.pending(&ids);
    s.try_req("POST", &format!("/{DB}/_bulk_docs"), &body.to_string())
}

/// Records a batch's outcome: each document's acknowledged revision, or `None` if it was
/// refused.
fn record(
    ledger: &Ledger,
    mine: &mut Vec<Mine>,
    batch: &[(Value, usize)],
    revs: Vec<Option<String>>,
) {
    for ((d, i), rev) in batch.iter().zip(revs) {
        let id = d["_id"].as_str().unwrap();
        let Some(rev) = rev else {
            ledger.refused(id);
            continue;
        };
        ledger.acked(id, &rev);
        let n = d["n"].as_u64().unwrap();
        if *i == usize::MAX {
            mine.push(Mine {
                id: id.into(),
                rev,
                n,
                deleted: false,
            });
        } else {
            mine[*i].rev = rev;
            mine[*i].n = n;
        }
    }
}

/// The design-document editor: edits the design doc (a new index signature each time) and
/// queries its views, so index builds are in flight when the kill comes.
fn designer(s: &Server, ledger: &Ledger, v: &mut u64, rev: &mut Option<String>, rng: &mut Rng) {
    loop {
        let mut d = ddoc(*v + 1);
        if let Some(r) = rev.as_ref() {
            d["_rev"] = json!(r);
        }
        ledger.pending(&[DDOC]);
        let Ok(r) = s.try_req("PUT", &format!("/{DB}/{DDOC}"), &d.to_string()) else {
            return;
        };
        ledger.check_status("PUT ddoc", r.status, &r.text);
        if r.status == 201 {
            let new = r.json()["rev"].as_str().unwrap().to_string();
            ledger.acked(DDOC, &new);
            *rev = Some(new);
            *v += 1;
        } else {
            ledger.refused(DDOC);
        }
        for _ in 0..1 + rng.below(3) {
            let view = ["by_owner", "by_n"][rng.below(2) as usize];
            let q = ["?limit=5", "?reduce=false&limit=3", "?group=true", ""][rng.below(4) as usize];
            let Ok(r) = s.try_req("GET", &format!("/{DB}/{DDOC}/_view/{view}{q}"), "") else {
                return;
            };
            ledger.check_status("GET view", r.status, &r.text);
        }
    }
}

/// Database and view compaction, view cleanup, now and then.
fn compactor(s: &Server, ledger: &Ledger, rng: &mut Rng, dead: &AtomicBool) {
    while !dead.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50 + rng.below(300)));
        let path = match rng.below(3) {
            0 => format!("/{DB}/_compact"),
            1 => format!("/{DB}/_compact/crash"),
            _ => format!("/{DB}/_view_cleanup"),
        };
        let Ok(r) = s.try_req("POST", &path, "{}") else {
            return;
        };
        // 404: the design doc may not exist yet
        ledger.check_status(&path, r.status, &r.text);
    }
}

/// What the server holds after a restart, read through its public API.
struct Found {
    /// id → (winning rev, deleted), from `_changes?style=all_docs`.
    changes: HashMap<String, (String, bool)>,
    /// id → live document, from `_all_docs?include_docs=true`.
    docs: BTreeMap<String, Value>,
}

/// Checks everything the server says against itself and against the ledger; returns the
/// number of acknowledged documents checked. Panics on the first disagreement.
fn verify(s: &Server, ledger: &Ledger, cycle: u64, rng: &mut Rng) -> (u64, Found) {
    let info = s.get(&format!("/{DB}")).json();
    let all = s.get(&format!("/{DB}/_all_docs?include_docs=true")).json();
    let changes = s.get(&format!("/{DB}/_changes?style=all_docs")).json();
    let mut found = Found {
        changes: HashMap::new(),
        docs: BTreeMap::new(),
    };
    for row in changes["results"].as_array().unwrap() {
        let id = row["id"].as_str().unwrap().to_string();
        let leaves = row["changes"].as_array().unwrap();
        assert_eq!(leaves.len(), 1, "cycle {cycle}: {id} has conflicts: {row}");
        let rev = leaves[0]["rev"].as_str().unwrap().to_string();
        let deleted = row["deleted"] == json!(true);
        let dup = found.changes.insert(id.clone(), (rev, deleted));
        assert!(dup.is_none(), "cycle {cycle}: {id} twice in _changes");
    }
    for row in all["rows"].as_array().unwrap() {
        let id = row["id"].as_str().unwrap().to_string();
        let doc = row["doc"].clone();
        assert_eq!(doc["_rev"], row["value"]["rev"], "cycle {cycle}: {row}");
        let (rev, deleted) = found
            .changes
            .get(&id)
            .unwrap_or_else(|| panic!("cycle {cycle}: {id} in _all_docs, not in _changes"));
        assert!(!deleted, "cycle {cycle}: deleted {id} in _all_docs");
        assert_eq!(
            doc["_rev"],
            json!(rev),
            "cycle {cycle}: _all_docs and _changes disagree on {id}"
        );
        found.docs.insert(id, doc);
    }
    let live = found.changes.values().filter(|(_, d)| !d).count();
    let dead = found.changes.len() - live;
    assert_eq!(
        live,
        found.docs.len(),
        "cycle {cycle}: live docs in _changes vs _all_docs"
    );
    assert_eq!(
        all["total_rows"],
        json!(live),
        "cycle {cycle}: _all_docs total_rows"
    );
    assert_eq!(
        info["doc_count"],
        json!(live),
        "cycle {cycle}: doc_count: {info}"
    );
    assert_eq!(
        info["doc_del_count"],
        json!(dead),
        "cycle {cycle}: doc_del_count: {info}"
    );
    assert_eq!(
        info["update_seq"], changes["last_seq"],
        "cycle {cycle}: update_seq vs _changes last_seq"
    );

    // Every document is whole: its body checks itself, its attachments are all there.
    let mut atts = Vec::new();
    for (id, doc) in &found.docs {
        if id.starts_with("_design/") {
            continue;
        }
        let n = doc["n"]
            .as_u64()
            .unwrap_or_else(|| panic!("cycle {cycle}: {doc}"));
        assert_eq!(
            doc["check"],
            json!(format!("{id}:{n}")),
            "cycle {cycle}: torn {doc}"
        );
        if let Some(map) = doc["_attachments"].as_object() {
            for (name, stub) in map {
                let (seed, len) = parse_att_name(name).unwrap();
                assert_eq!(
                    stub["length"],
                    json!(len),
                    "cycle {cycle}: {id}/{name}: {stub}"
                );
                atts.push((id.clone(), name.clone(), seed, len));
            }
        }
    }
    // Bytes of a sample of attachments (all of them in small runs).
    let sample = 200;
    for k in 0..atts.len().min(sample) {
        let j = if atts.len() <= sample {
            k
        } else {
            rng.below(atts.len() as u64) as usize
        };
        let (id, name, seed, len) = &atts[j];
        let r = s.req_bytes("GET", &format!("/{DB}/{id}/{name}"), Vec::new(), &[]);
        assert_eq!(r.status, 200, "cycle {cycle}: {id}/{name}");
        assert!(
            r.body == att_bytes(*seed, *len),
            "cycle {cycle}: {id}/{name} bytes differ ({} of {len})",
            r.body.len()
        );
    }

    // Every acknowledged write is there: its revision, or a descendant if a later write
    // was in flight.
    let docs = ledger.docs.lock().unwrap().clone();
    let mut checked = 0;
    for (id, e) in &docs {
        let Some(acked) = &e.acked else { continue };
        checked += 1;
        let (rev, _) = found
            .changes
            .get(id)
            .unwrap_or_else(|| panic!("cycle {cycle}: acknowledged {id} {acked} lost"));
        if rev == acked {
            continue;
        }
        assert!(
            e.pending,
            "cycle {cycle}: {id} is at {rev}, acknowledged {acked}, nothing in flight"
        );
        let r = s.get(&format!("/{DB}/{id}?rev={rev}&revs=true")).json();
        let revs = &r["_revisions"];
        let start = revs["start"].as_u64().unwrap();
        let ancestors: Vec<String> = revs["ids"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, h)| format!("{}-{}", start - i as u64, h.as_str().unwrap()))
            .collect();
        assert!(
            ancestors.contains(acked),
            "cycle {cycle}: {id} at {rev} does not descend from acknowledged {acked}: {ancestors:?}"
        );
    }
    let locals = ledger.locals.lock().unwrap().clone();
    for (id, (c, pending)) in &locals {
        if *c == 0 {
            continue;
        }
        checked += 1;
        let r = s.get(&format!("/{DB}/{id}"));
        assert_eq!(r.status, 200, "cycle {cycle}: {id} lost: {}", r.text);
        let got = r.json()["c"].as_u64().unwrap();
        assert!(
            got == *c || (*pending && got == c + 1),
            "cycle {cycle}: {id} c={got}, acknowledged {c}"
        );
        ledger
            .locals
            .lock()
            .unwrap()
            .insert(id.clone(), (got, false));
    }

    verify_views(s, &found, cycle);
    (checked, found)
}

/// Every view of the current design document holds exactly the rows its map function
/// gives for the documents, and its reduction agrees.
fn verify_views(s: &Server, found: &Found, cycle: u64) {
    let Some(dd) = found.docs.get(DDOC) else {
        return;
    };
    let items: Vec<&Value> = found
        .docs
        .values()
        .filter(|d| d["type"] == "item")
        .collect();
    for (name, _) in dd["views"].as_object().unwrap() {
        let mut want: Vec<(String, String, String)> = items
            .iter()
            .filter_map(|d| {
                let (id, n) = (d["_id"].clone(), d["n"].as_u64().unwrap());
                let (k, v) = match name.as_str() {
                    "by_owner" => (d["owner"].clone(), json!(n)),
                    "by_n" => (json!(n), Value::Null),
                    "odd" if n % 2 == 1 => (json!([d["owner"], id]), json!(n)),
                    "odd" => return None,
                    other => panic!("unknown view {other}"),
                };
                Some((
                    id.as_str().unwrap().to_string(),
                    k.to_string(),
                    v.to_string(),
                ))
            })
            .collect();
        let q = if name == "odd" { "" } else { "?reduce=false" };
        let r = s.get(&format!("/{DB}/{DDOC}/_view/{name}{q}"));
        assert_eq!(r.status, 200, "cycle {cycle}: view {name}: {}", r.text);
        let r = r.json();
        let mut got: Vec<(String, String, String)> = r["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                (
                    row["id"].as_str().unwrap().to_string(),
                    row["key"].to_string(),
                    row["value"].to_string(),
                )
            })
            .collect();
        want.sort();
        got.sort();
        assert!(
            got == want,
            "cycle {cycle}: view {name} has {} rows, the documents give {}",
            got.len(),
            want.len()
        );
        let reduced = s.get(&format!("/{DB}/{DDOC}/_view/{name}")).json();
        let value = reduced["rows"].get(0).map(|row| row["value"].clone());
        match name.as_str() {
            "by_owner" => {
                let sum: u64 = items.iter().map(|d| d["n"].as_u64().unwrap()).sum();
                assert_eq!(value.unwrap_or(json!(0)), json!(sum), "cycle {cycle}: _sum");
            }
            "by_n" => {
                assert_eq!(
                    value.unwrap_or(json!(0)),
                    json!(items.len()),
                    "cycle {cycle}: _count"
                );
            }
            _ => {}
        }
    }
}

/// Rebuilds each writer's state from what the server holds, and forgets what was pending.
fn resync(ledger: &Ledger, found: &Found, writers: usize) -> Vec<Vec<Mine>> {
    let mut mine = vec![Vec::new(); writers];
    let mut docs = ledger.docs.lock().unwrap();
    docs.clear();
    for (id, (rev, deleted)) in &found.changes {
        docs.insert(
            id.clone(),
            Entry {
                acked: Some(rev.clone()),
                pending: false,
            },
        );
        let Some(t) = id
            .strip_prefix('w')
            .and_then(|r| r.split('-').next())
            .and_then(|t| t.parse::<usize>().ok())
        else {
            continue;
        };
        if t < writers {
            let n = found
                .docs
                .get(id)
                .and_then(|d| d["n"].as_u64())
                .unwrap_or(0);
            mine[t].push(Mine {
                id: id.clone(),
                rev: rev.clone(),
                n,
                deleted: *deleted,
            });
        }
    }
    drop(docs);
    // A _local write in flight may have landed.
    for (_, e) in ledger.locals.lock().unwrap().iter_mut() {
        e.1 = false;
    }
    mine
}

#[test]
fn crash_loop() {
    let cycles = env_u64("CRASH_CYCLES", 3);
    let writers = env_u64("CRASH_WRITERS", 4) as usize;
    let run_ms = env_u64("CRASH_RUN_MS", 1500);
    let seed = env_u64(
        "CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    eprintln!("crash_loop: CRASH_SEED={seed} cycles={cycles} writers={writers} run_ms={run_ms}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::default();
    let started = Instant::now();
    {
        let s = Server::start_in(dir.path());
        s.create_db(DB);
    }
    let mut mine: Vec<Vec<Mine>> = vec![Vec::new(); writers];
    let mut seqs: Vec<u64> = vec![0; writers];
    let (mut ddoc_v, mut ddoc_rev) = (0u64, None::<String>);
    let (mut total_checked, mut total_acks) = (0u64, 0u64);
    for cycle in 1..=cycles {
        let s = Server::start_in(dir.path());
        let acks_before = ledger.acks.load(Ordering::Relaxed);
        let kill_after = Duration::from_millis(rng.below(run_ms) + 1);
        let dead = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (t, (mine, seq)) in mine.iter_mut().zip(seqs.iter_mut()).enumerate() {
                let (s, ledger) = (&s, &ledger);
                let mut rng = Rng(rng.next());
                scope.spawn(move || writer(s, ledger, t, mine, seq, &mut rng));
            }
            let (s, ledger, v, rev) = (&s, &ledger, &mut ddoc_v, &mut ddoc_rev);
            let mut r1 = Rng(rng.next());
            scope.spawn(move || designer(s, ledger, v, rev, &mut r1));
            let dead = &dead;
            let mut r2 = Rng(rng.next());
            scope.spawn(move || compactor(s, ledger, &mut r2, dead));
            std::thread::sleep(kill_after);
            s.kill9();
            dead.store(true, Ordering::Relaxed);
        });
        drop(s);
        let errors = ledger.errors.lock().unwrap().clone();
        assert!(
            errors.is_empty(),
            "cycle {cycle}: 5xx answers while up: {errors:#?}"
        );
        let acks = ledger.acks.load(Ordering::Relaxed) - acks_before;
        total_acks += acks;

        let s = Server::start_in(dir.path());
        let (checked, found) = verify(&s, &ledger, cycle, &mut rng);
        total_checked += checked;
        mine = resync(&ledger, &found, writers);
        if let Some(d) = found.docs.get(DDOC) {
            ddoc_v = d["v"].as_u64().unwrap();
            ddoc_rev = Some(d["_rev"].as_str().unwrap().to_string());
        }
        // The server takes writes again.
        let r = s.put(&format!("/{DB}/after-{cycle}"), r#"{"ok":true}"#);
        assert_eq!(r.status, 201, "cycle {cycle}: {}", r.text);
        let r = s.delete(&format!(
            "/{DB}/after-{cycle}?rev={}",
            r.json()["rev"].as_str().unwrap()
        ));
        assert_eq!(r.status, 200, "cycle {cycle}: {}", r.text);
        ledger
            .docs
            .lock()
            .unwrap()
            .remove(&format!("after-{cycle}"));
        eprintln!(
            "cycle {cycle}: killed after {} ms, {acks} acknowledged writes this cycle, {checked} documents checked, {} documents",
            kill_after.as_millis(),
            found.docs.len()
        );
        s.stop();
    }
    eprintln!(
        "crash_loop: {cycles} cycles, {total_acks} acknowledged writes, {total_checked} acknowledged document states checked, 0 lost, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(total_acks > 0, "the writers got nothing acknowledged");
    let tally = ledger.tally.lock().unwrap();
    eprintln!("crash_loop: answers by operation and status: {tally:?}");
    // With this many writes, a kind of write never acknowledged is a broken path, not luck.
    if total_acks >= 1000 {
        for what in [
            "PUT new",
            "_bulk_docs",
            "PUT update",
            "DELETE",
            "PUT attachment",
            "PUT inline attachment",
            "PUT multipart/related",
            "_bulk_docs new_edits=false",
            "PUT _local",
            "PUT ddoc",
        ] {
            assert!(
                tally
                    .iter()
                    .any(|((w, st), _)| w == what && (200..300).contains(st)),
                "no {what} was acknowledged: {tally:?}"
            );
        }
    }
}
