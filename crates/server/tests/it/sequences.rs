//! Update sequences are CouchDB's own encoding, which clients decode: `N-` and the URL-safe
//! base64 of `term_to_binary([{Node, [Begin, End], {Seq, UuidPrefix, Node}}], [compressed])`.
//! The expected terms are written out here byte by byte (not with Settee's encoder), as
//! CouchDB 3.5.2 writes them for a node called `nonode@nohost`.

use crate::common;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::replication::{bulk, replicate};
use common::Server;
use serde_json::{json, Value};
use std::io::Read;

const NODE: &str = "nonode@nohost";
const WHOLE: (u32, u32) = (0, u32::MAX);
const LOW: (u32, u32) = (0, 0x7fff_ffff);
const HIGH: (u32, u32) = (0x8000_0000, u32::MAX);
const MALFORMED: &str = "Malformed sequence supplied in 'since' parameter.";

/// A shard's state in a sequence.
enum At<'a> {
    Stamped(u64, &'a str),
    Bare(u64),
}

fn int(n: u64, out: &mut Vec<u8>) {
    if n < 256 {
        out.extend([97, n as u8]);
    } else if n <= i32::MAX as u64 {
        out.push(98);
        out.extend((n as u32).to_be_bytes());
    } else {
        out.extend([110, 4, 0]);
        out.extend((n as u32).to_le_bytes());
    }
}

fn atom(name: &str, out: &mut Vec<u8>) {
    out.push(100);
    out.extend((name.len() as u16).to_be_bytes());
    out.extend(name.as_bytes());
}

/// The term CouchDB writes for these shards (without the version byte).
fn term(shards: &[((u32, u32), At)]) -> Vec<u8> {
    let mut out = vec![108];
    out.extend((shards.len() as u32).to_be_bytes());
    for ((begin, end), at) in shards {
        out.extend([104, 3]);
        atom(NODE, &mut out);
        out.extend([108, 0, 0, 0, 2]);
        int(u64::from(*begin), &mut out);
        int(u64::from(*end), &mut out);
        out.push(106);
        match at {
            At::Stamped(seq, uuid) => {
                out.extend([104, 3]);
                int(*seq, &mut out);
                out.extend([109, 0, 0, 0, 7]);
                out.extend(uuid.as_bytes());
                atom(NODE, &mut out);
            }
            At::Bare(seq) => int(*seq, &mut out),
        }
    }
    out.push(106);
    out
}

/// A sequence's `N` and its term, inflated when compressed.
fn open(seq: &Value) -> (u64, Vec<u8>) {
    let text = seq
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {seq}"));
    let (n, opaque) = text.split_once('-').unwrap();
    let raw = URL_SAFE_NO_PAD.decode(opaque).unwrap();
    assert_eq!(raw[0], 131, "{text}");
    let body = if raw[1] == 80 {
        let size = u32::from_be_bytes(raw[2..6].try_into().unwrap()) as usize;
        let mut body = Vec::new();
        flate2::read::ZlibDecoder::new(&raw[6..])
            .read_to_end(&mut body)
            .unwrap();
        assert_eq!(body.len(), size);
        body
    } else {
        raw[1..].to_vec()
    };
    (n.parse().unwrap(), body)
}

/// The database's uuid prefix, as its `update_seq` carries it.
fn uuid_prefix(s: &Server, db: &str) -> String {
    let (_, body) = open(&s.get(&format!("/{db}")).json()["update_seq"]);
    let at = body
        .windows(5)
        .position(|w| w == [109, 0, 0, 0, 7])
        .expect("a 7-byte binary");
    let prefix = String::from_utf8(body[at + 5..at + 12].to_vec()).unwrap();
    assert!(
        prefix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{prefix}"
    );
    prefix
}

fn docs(s: &Server, db: &str, ids: &[&str]) {
    let docs: Vec<Value> = ids.iter().map(|id| json!({"_id": id})).collect();
    bulk(s, db, json!(docs), true);
}

fn ids(changes: &Value) -> Vec<String> {
    changes["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_place_shows_couchdb_sequences() {
    let s = Server::start();
    s.create_db("db");
    let empty = s.get("/db").json();
    let p = uuid_prefix(&s, "db");
    assert_eq!(
        open(&empty["update_seq"]),
        (0, term(&[(WHOLE, At::Stamped(0, &p))]))
    );
    docs(&s, "db", &["a", "b", "c"]);
    s.put(
        "/db/_design/d",
        r#"{"views":{"v":{"map":"function(d){emit(d._id)}"}}}"#,
    );
    let info = s.get("/db").json();
    assert_eq!(
        open(&info["update_seq"]),
        (4, term(&[(WHOLE, At::Stamped(4, &p))]))
    );
    assert!(info["update_seq"].as_str().unwrap().starts_with("4-g1AAAA"));
    // A purge_seq is small enough to stay uncompressed, as CouchDB's.
    assert_eq!(
        info["purge_seq"].as_str().unwrap(),
        format!(
            "0-{}",
            URL_SAFE_NO_PAD.encode([&[131][..], &term(&[(WHOLE, At::Bare(0))])].concat())
        )
    );

    let changes = s.get("/db/_changes").json();
    for (i, row) in changes["results"].as_array().unwrap().iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(open(&row["seq"]), (n, term(&[(WHOLE, At::Stamped(n, &p))])));
    }
    assert_eq!(
        changes["last_seq"], info["update_seq"],
        "one shard: the same string"
    );

    let dbs = s.get("/_dbs_info").json();
    let listed = dbs
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["key"] == "db")
        .unwrap();
    assert_eq!(listed["info"]["update_seq"], info["update_seq"], "{dbs}");
    let dbs = s.post("/_dbs_info", r#"{"keys":["db"]}"#).json();
    assert_eq!(dbs[0]["info"]["update_seq"], info["update_seq"], "{dbs}");

    // `_all_docs` and views: bare integers, as CouchDB's index sequences have no uuid.
    let bare = (4, term(&[(WHOLE, At::Bare(4))]));
    let all = s.get("/db/_all_docs?update_seq=true&limit=0").json();
    assert_eq!(open(&all["update_seq"]), bare);
    let view = s
        .get("/db/_design/d/_view/v?update_seq=true&limit=0")
        .json();
    assert_eq!(open(&view["update_seq"]), bare);

    // `_db_updates`: the event stream's own uuid.
    let ups = s.get("/_db_updates").json();
    let last = &ups["last_seq"];
    let (n, body) = open(last);
    let at = body
        .windows(5)
        .position(|w| w == [109, 0, 0, 0, 7])
        .unwrap();
    let events_prefix = std::str::from_utf8(&body[at + 5..at + 12])
        .unwrap()
        .to_string();
    assert_eq!(body, term(&[(WHOLE, At::Stamped(n, &events_prefix))]));
    for row in ups["results"].as_array().unwrap() {
        assert!(open(&row["seq"]).0 <= n);
    }
    let later = s.get(&format!("/_db_updates?since={}", last.as_str().unwrap()));
    assert_eq!(later.status, 200, "{}", later.text);
    assert_eq!(later.json()["results"], json!([]));
    let bad = s.get("/_db_updates?since=1");
    assert_eq!(bad.status, 400, "{}", bad.text);
}

#[test]
fn more_than_one_range_keeps_the_seq_on_the_first() {
    let s = Server::start();
    let r = s.put("/q2?q=2", "");
    assert_eq!(r.status, 201, "{}", r.text);
    docs(&s, "q2", &["a", "b", "c"]);
    let p = uuid_prefix(&s, "q2");
    let info = s.get("/q2").json();
    // The info lists the last range first, as CouchDB's does.
    assert_eq!(
        open(&info["update_seq"]),
        (
            3,
            term(&[(HIGH, At::Stamped(0, &p)), (LOW, At::Stamped(3, &p))])
        )
    );
    assert_eq!(
        open(&info["purge_seq"]),
        (0, term(&[(HIGH, At::Bare(0)), (LOW, At::Bare(0))]))
    );
    let changes = s.get("/q2/_changes").json();
    assert_eq!(
        open(&changes["last_seq"]),
        (
            3,
            term(&[(LOW, At::Stamped(3, &p)), (HIGH, At::Stamped(0, &p))])
        )
    );
    let first = changes["results"][0]["seq"].as_str().unwrap().to_string();
    assert_eq!(
        ids(&s.get(&format!("/q2/_changes?since={first}")).json()).len(),
        2
    );
    let update_seq = info["update_seq"].as_str().unwrap();
    assert_eq!(
        ids(&s.get(&format!("/q2/_changes?since={update_seq}")).json()),
        Vec::<String>::new()
    );
    // A sequence of another ring (q=1) has no range this database knows: from the start.
    s.create_db("q1");
    docs(&s, "q1", &["x"]);
    let other = s.get("/q1").json()["update_seq"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        ids(&s.get(&format!("/q2/_changes?since={other}")).json()).len(),
        3
    );
}

#[test]
fn since_is_read_as_couchdb_reads_it() {
    let s = Server::start();
    s.create_db("db");
    docs(&s, "db", &["a", "b", "c"]);
    let rows = s.get("/db/_changes").json();
    let seq1 = rows["results"][0]["seq"].as_str().unwrap().to_string();
    let since = |v: &str| s.get(&format!("/db/_changes?since={v}"));
    let after = |v: &str| {
        let r = since(v);
        assert_eq!(r.status, 200, "{v}: {}", r.text);
        ids(&r.json())
    };
    assert_eq!(after("0").len(), 3);
    assert_eq!(after(&seq1), ["b", "c"]);
    assert_eq!(after(&format!("%22{seq1}%22")), ["b", "c"], "quoted");
    let (_, opaque) = seq1.split_once('-').unwrap();
    assert_eq!(
        after(&format!("999-{opaque}")),
        ["b", "c"],
        "the prefix is ignored"
    );
    assert_eq!(after(opaque), ["b", "c"], "the opaque part alone");
    let now = since("now").json();
    assert_eq!(ids(&now), Vec::<String>::new());
    assert_eq!(now["last_seq"], s.get("/db").json()["update_seq"]);
    // The bare form (a purge_seq) counts as is.
    let purge = s.get("/db").json()["purge_seq"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(after(&purge).len(), 3);

    // What does not decode is refused: bare integers but 0, text, and the sequences an
    // older Settee wrote (`N-g1AAAA` and the base64 of `settee\0\0` and N).
    let mut old = b"settee\0\0".to_vec();
    old.extend(1u64.to_be_bytes());
    let old = format!("1-g1AAAA{}", URL_SAFE_NO_PAD.encode(old));
    for bad in ["2", "-1", "abc", "1-xyz", "", &old] {
        let r = since(bad);
        assert_eq!(r.status, 400, "{bad:?}: {}", r.text);
        assert_eq!(
            r.json(),
            json!({"error": "bad_request", "reason": MALFORMED}),
            "{bad:?}"
        );
    }

    // A database deleted and created again has another uuid: its old sequences rewind.
    let before = s.get("/db").json()["update_seq"]
        .as_str()
        .unwrap()
        .to_string();
    let p = uuid_prefix(&s, "db");
    s.delete("/db");
    s.create_db("db");
    docs(&s, "db", &["x", "y", "z", "w"]);
    assert_ne!(uuid_prefix(&s, "db"), p);
    // (One request's documents take their sequences in id order.)
    assert_eq!(after(&before), ["w", "x", "y", "z"]);
}

#[test]
fn an_older_settee_checkpoint_restarts_the_replication_from_the_start() {
    let s = Server::start();
    s.create_db("src");
    docs(&s, "src", &["a", "b"]);
    let (status, first) = replicate(
        &s,
        json!({"source": "src", "target": "dst", "create_target": true}),
    );
    assert_eq!(status, 200, "{first}");
    let (_, end) = open(&first["source_last_seq"]);
    assert_eq!(
        end,
        term(&[(WHOLE, At::Stamped(2, &uuid_prefix(&s, "src")))])
    );
    // The checkpoints as an older Settee left them, on both sides.
    let local = s.get("/src/_local_docs").json()["rows"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut old = b"settee\0\0".to_vec();
    old.extend(2u64.to_be_bytes());
    let old = format!("2-g1AAAA{}", URL_SAFE_NO_PAD.encode(old));
    for db in ["src", "dst"] {
        let mut doc = s.get(&format!("/{db}/{local}")).json();
        doc["source_last_seq"] = json!(old);
        doc["history"][0]["recorded_seq"] = json!(old);
        let r = s.put(&format!("/{db}/{local}"), &doc.to_string());
        assert_eq!(r.status, 201, "{}", r.text);
    }
    docs(&s, "src", &["c"]);
    let (status, again) = replicate(&s, json!({"source": "src", "target": "dst"}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["history"][0]["start_last_seq"], 0, "{again}");
    assert_eq!(open(&again["source_last_seq"]).0, 3);
    assert_eq!(s.get("/dst").json()["doc_count"], 3);
}
