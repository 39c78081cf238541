//! The replicator's endpoint seam: one conformance suite run on both implementations of
//! `Endpoint` — a database of this server called in process (`LocalDb`) and the same
//! server's database over HTTP (`Remote`) — which must pass the same checks and answer
//! every call with the same JSON.
//!
//! The server is real: a store on a temporary directory, served by the crate's own router
//! on a loopback port in this process, so both endpoints reach the same code below HTTP.

use serde_json::{json, Map, Value};
use settee_auth::password::PasswordHash;
use settee_auth::UserCtx;
use settee_http::node_config::{builtin_defaults, Sections};
use settee_http::{app, AppState, HttpConfig, NodeConfig};
use settee_node::replication::LocalDb;
use settee_replicator::remote::{Remote, RemoteSpec};
use settee_replicator::{Doc, Endpoint, Error, Fetch, Filter, Follows, Wait};
use std::sync::Arc;
use std::time::Duration;

const PASSWORD: &str = "conformance";

/// The protocol's JSON with attachments inline, as any endpoint hands it over.
const JSON: Fetch = Fetch {
    inline: true,
    stored: false,
};

/// Attachment stubs with their encoding, as the streamed path reads documents first.
const STUBS: Fetch = Fetch {
    inline: false,
    stored: false,
};

/// As stored, where the source can.
const STORED: Fetch = Fetch {
    inline: true,
    stored: true,
};

/// A server on a loopback port with the admin `admin`; its state and address.
async fn server(dir: &std::path::Path) -> (AppState, std::net::SocketAddr) {
    let couch = settee_db::Couch::open(
        &dir.join("store"),
        settee_db::Config::default(),
        &settee_storage::StoreOptions::default(),
    )
    .expect("store");
    let mut sections = Sections::new();
    sections
        .entry("admins".into())
        .or_default()
        .insert("admin".into(), PasswordHash::new(PASSWORD, 10).stored());
    let node = NodeConfig::in_memory(sections);
    node.set_defaults(builtin_defaults());
    let mut views = settee_views::Config::default();
    settee_http::register_query_language(&mut views.native);
    let node = settee_node::Node::new(couch, settee_views::Views::new(views), Arc::new(node));
    let state = AppState::new(Arc::new(node), HttpConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    state.set_local_addr(addr);
    let router = app(state.clone());
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (state, addr)
}

fn admin() -> UserCtx {
    UserCtx {
        name: Some("admin".into()),
        roles: vec!["_admin".into()],
    }
}

fn remote(addr: std::net::SocketAddr, db: &str) -> Remote {
    Remote::new(&RemoteSpec {
        url: format!("http://admin:{PASSWORD}@{addr}/{db}"),
        headers: Map::new(),
        basic: None,
        timeout: Duration::from_secs(30),
        retries: 1,
        connections: 4,
    })
    .expect("remote")
}

const R1: &str = "1-11111111111111111111111111111111";
const R1B: &str = "1-22222222222222222222222222222222";
const R2: &str = "2-33333333333333333333333333333333";
const DEL: &str = "2-44444444444444444444444444444444";

fn revisions(rev: &str, parents: &[&str]) -> Value {
    let (pos, id) = rev.split_once('-').unwrap();
    let mut ids = vec![id.to_string()];
    ids.extend(
        parents
            .iter()
            .map(|p| p.split_once('-').unwrap().1.to_string()),
    );
    json!({"start": pos.parse::<u64>().unwrap(), "ids": ids})
}

fn json_docs(docs: Vec<Value>) -> Vec<Doc> {
    docs.into_iter().map(Doc::Json).collect()
}

/// The revisions the suite reads back: a conflict's other leaf, an edit, a deletion and a
/// document with attachments.
fn wanted() -> Vec<(String, String)> {
    vec![
        ("a".into(), R1B.into()),
        ("b".into(), R2.into()),
        ("c".into(), DEL.into()),
        ("d".into(), R1.into()),
    ]
}

/// What every endpoint must do, step by step; returns every answer, for comparing two
/// endpoints' transcripts.
async fn suite<E: Endpoint>(e: &E) -> Vec<Value> {
    let mut t = Vec::new();

    // A database that does not exist is `DbNotFound`, until created (twice is fine).
    assert!(matches!(e.info().await, Err(Error::DbNotFound(_))));
    e.create(&Map::new()).await.expect("create");
    e.create(&Map::new()).await.expect("create again");
    t.push(e.info().await.expect("info").update_seq);

    // Local documents: absent, written, read back, replaced by naming their _rev.
    assert_eq!(e.get_local("_local/ckpt").await.unwrap(), None);
    let rev = e
        .put_local("_local/ckpt", json!({"session_id": "s1", "history": []}))
        .await
        .unwrap();
    assert_eq!(rev, "0-1");
    let got = e.get_local("_local/ckpt").await.unwrap().expect("written");
    assert_eq!(got["_rev"], "0-1");
    assert_eq!(got["session_id"], "s1");
    let rev = e
        .put_local(
            "_local/ckpt",
            json!({"_rev": "0-1", "session_id": "s2", "history": []}),
        )
        .await
        .unwrap();
    assert_eq!(rev, "0-2");
    t.push(e.get_local("_local/ckpt").await.unwrap().unwrap());

    // Replicated revisions: a conflict, an edit, a deletion, a binary attachment, and a
    // validation function that refuses some documents.
    let failures = e
        .bulk_docs(json_docs(vec![
            json!({"_id": "_design/v", "_rev": R1, "_revisions": revisions(R1, &[]),
                   "validate_doc_update":
                       "function(doc) { if (doc.bad) throw({forbidden: 'no bad docs'}); }"}),
            json!({"_id": "a", "_rev": R1, "_revisions": revisions(R1, &[]), "n": 1}),
            json!({"_id": "a", "_rev": R1B, "_revisions": revisions(R1B, &[]), "n": 2}),
            json!({"_id": "b", "_rev": R2, "_revisions": revisions(R2, &[R1]), "n": 3}),
            json!({"_id": "c", "_rev": DEL, "_revisions": revisions(DEL, &[R1]),
                   "_deleted": true}),
            json!({"_id": "d", "_rev": R1, "_revisions": revisions(R1, &[]),
                   "_attachments": {"bin": {"content_type": "application/octet-stream",
                                            "revpos": 1, "data": "AAEC/w=="},
                                    "txt": {"content_type": "text/plain",
                                            "revpos": 1, "data": "aGVsbG8gaGVsbG8gaGVsbG8="}}}),
        ]))
        .await
        .expect("bulk_docs");
    assert_eq!(failures, vec![]);
    let failures = e
        .bulk_docs(json_docs(vec![
            json!({"_id": "e", "_rev": R1, "_revisions": revisions(R1, &[]), "bad": true}),
            json!({"_id": "f", "_rev": R1, "_revisions": revisions(R1, &[]), "bad": false}),
        ]))
        .await
        .expect("bulk_docs");
    assert_eq!(failures.len(), 1);
    assert_eq!(
        (failures[0].id.as_str(), failures[0].error.as_str()),
        ("e", "forbidden")
    );
    assert_eq!(failures[0].reason, "no bad docs");
    // Writing the same revisions again changes nothing.
    let failures = e
        .bulk_docs(vec![Doc::Json(
            json!({"_id": "a", "_rev": R1, "_revisions": revisions(R1, &[]), "n": 1}),
        )])
        .await
        .unwrap();
    assert_eq!(failures, vec![]);
    t.push(e.info().await.unwrap().update_seq);

    // Changes: every leaf of every document, deletions flagged, in seq order; in pieces.
    let all = e
        .changes(&json!(0), 100, &Filter::All, Wait::No)
        .await
        .unwrap();
    let ids: Vec<&str> = all.rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["_design/v", "a", "b", "c", "d", "f"]);
    let a = &all.rows[1];
    let mut leaves = a.revs.clone();
    leaves.sort();
    assert_eq!(leaves, [R1, R1B]);
    assert!(all.rows[3].deleted && !all.rows[2].deleted);
    t.push(json!(all
        .rows
        .iter()
        .map(|r| json!([r.seq, r.id, r.revs, r.deleted]))
        .collect::<Vec<_>>()));
    t.push(all.last_seq.clone());
    let first = e
        .changes(&json!(0), 2, &Filter::All, Wait::No)
        .await
        .unwrap();
    assert_eq!(first.rows.len(), 2);
    let rest = e
        .changes(&first.last_seq, 100, &Filter::All, Wait::No)
        .await
        .unwrap();
    assert_eq!(rest.rows.len(), 4);
    assert_eq!(rest.last_seq, all.last_seq);
    let none = e
        .changes(&all.last_seq, 100, &Filter::All, Wait::No)
        .await
        .unwrap();
    assert!(none.rows.is_empty());

    // Filtered changes.
    let by_id = e
        .changes(
            &json!(0),
            100,
            &Filter::DocIds(vec!["b".into(), "zz".into()]),
            Wait::No,
        )
        .await
        .unwrap();
    assert_eq!(
        by_id.rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    let by_sel = e
        .changes(
            &json!(0),
            100,
            &Filter::Selector(json!({"n": {"$gte": 2}})),
            Wait::No,
        )
        .await
        .unwrap();
    let mut sel: Vec<(String, Vec<String>)> = by_sel
        .rows
        .iter()
        .map(|r| (r.id.clone(), r.revs.clone()))
        .collect();
    sel.sort();
    assert_eq!(sel[0].0, "a");
    assert_eq!(sel[1].0, "b");
    t.push(json!(sel));

    // A wait that ends without a change.
    let waited = e
        .changes(&all.last_seq, 100, &Filter::All, Wait::UpTo(200))
        .await
        .unwrap();
    assert!(waited.rows.is_empty());

    // What the target lacks.
    let mut missing = e
        .revs_diff(vec![
            ("a".into(), vec![R1.into(), R2.into()]),
            ("b".into(), vec![R2.into()]),
            ("new".into(), vec![R1.into()]),
        ])
        .await
        .unwrap();
    missing.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(missing.len(), 2);
    assert_eq!(
        (missing[0].id.as_str(), &missing[0].revs),
        ("a", &vec![R2.to_string()])
    );
    assert_eq!(missing[1].id, "new");
    t.push(json!(missing
        .iter()
        .map(|m| json!([m.id, m.revs, m.possible_ancestors]))
        .collect::<Vec<_>>()));

    // Documents at revisions, with their history and attachments inline.
    let docs: Vec<Value> = e
        .bulk_get(wanted(), JSON)
        .await
        .unwrap()
        .into_iter()
        .map(Doc::into_json)
        .collect();
    assert_eq!(docs.len(), 4);
    assert_eq!(docs[0]["n"], 2);
    assert_eq!(docs[1]["_revisions"], revisions(R2, &[R1]));
    assert_eq!(docs[2]["_deleted"], true);
    assert_eq!(docs[3]["_attachments"]["bin"]["data"], "AAEC/w==");
    assert_eq!(
        docs[3]["_attachments"]["txt"]["data"],
        "aGVsbG8gaGVsbG8gaGVsbG8="
    );
    t.push(json!(docs));

    // The streamed path: stubs with their encoding, content as stored (the text
    // attachment is stored gzip-encoded), and a revision written with content that follows.
    let stubs = e
        .bulk_get(vec![("d".into(), R1.into())], STUBS)
        .await
        .unwrap();
    let stubs = stubs.into_iter().next().unwrap().into_json();
    let atts = &stubs["_attachments"];
    assert_eq!(atts["bin"]["stub"], true);
    assert_eq!(atts["txt"]["encoding"], "gzip");
    t.push(stubs.clone());
    let bin = content(e.attachment("d", R1, "bin", false).await.unwrap()).await;
    assert_eq!(bin, [0, 1, 2, 255]);
    let txt = content(e.attachment("d", R1, "txt", true).await.unwrap()).await;
    assert_eq!(
        txt.len() as u64,
        atts["txt"]["encoded_length"].as_u64().unwrap()
    );
    let mut gunzip = flate2::read::GzDecoder::new(&txt[..]);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut gunzip, &mut text).unwrap();
    assert_eq!(text, "hello hello hello");
    let follows = |data: &'static [u8]| Follows {
        name: "big".into(),
        length: data.len() as u64,
        content: Box::pin(futures_util::stream::iter(
            data.chunks(3).map(|c| Ok(bytes::Bytes::from_static(c))),
        )),
    };
    let doc = json!({"_id": "g", "_rev": R1, "_revisions": revisions(R1, &[]),
                     "_attachments": {"big": {"content_type": "application/octet-stream",
                                              "revpos": 1, "length": 10, "follows": true}}});
    let refused = e
        .put_streamed(doc.clone(), vec![follows(b"0123456789")])
        .await
        .unwrap();
    assert_eq!(refused, None);
    let g = e
        .bulk_get(vec![("g".into(), R1.into())], JSON)
        .await
        .unwrap();
    let g = g.into_iter().next().unwrap().into_json();
    assert_eq!(g["_attachments"]["big"]["data"], "MDEyMzQ1Njc4OQ==");
    t.push(g);
    // A validation function's refusal is the document's, not the call's.
    let mut bad = doc;
    bad["_id"] = json!("h");
    bad["bad"] = json!(true);
    let refused = e
        .put_streamed(bad, vec![follows(b"0123456789")])
        .await
        .unwrap();
    assert_eq!(refused.map(|f| f.error), Some("forbidden".to_string()));
    t
}

/// A stream's bytes.
async fn content(c: settee_replicator::Content) -> Vec<u8> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut c = c;
    while let Some(chunk) = c.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_and_remote_endpoints_conform_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (state, addr) = server(dir.path()).await;
    let local = state.replicator.local_db("local", admin(), "local".into());
    let over_http = remote(addr, "remote");
    let a = suite(&local).await;
    let b = suite(&over_http).await;
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(
            seq_numbers(x),
            seq_numbers(y),
            "step {i} differs between the local and the remote endpoint"
        );
    }
}

/// A value with every update sequence (`N-` and an opaque term naming the database's own
/// uuid) replaced by its `N`: the two databases are different ones.
fn seq_numbers(v: &Value) -> Value {
    match v {
        Value::String(s) => match s.split_once("-g") {
            Some((n, _)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                Value::String(n.to_string())
            }
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(seq_numbers).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), seq_numbers(x))).collect())
        }
        _ => v.clone(),
    }
}

/// A database's documents at [`wanted`] revisions and its change rows.
async fn contents(db: &LocalDb) -> (Vec<Doc>, Vec<Value>) {
    let docs = db.bulk_get(wanted(), JSON).await.unwrap();
    let changes = db
        .changes(&json!(0), 100, &Filter::All, Wait::No)
        .await
        .unwrap();
    let rows = changes
        .rows
        .iter()
        .map(|r| json!([r.id, r.revs, r.deleted]))
        .collect();
    (docs, rows)
}

/// Between two databases of this server, revisions without attachments move as stored
/// (`Doc::Stored`), and arrive exactly as the protocol's JSON would have brought them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_revisions_move_between_local_databases_as_json_would() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = server(dir.path()).await;
    let source = state
        .replicator
        .local_db("source", admin(), "source".into());
    suite(&source).await;
    assert!(source.takes_stored());
    let stored = source.bulk_get(wanted(), STORED).await.unwrap();
    let kinds: Vec<bool> = stored.iter().map(|d| matches!(d, Doc::Stored(_))).collect();
    assert_eq!(
        kinds,
        [true, true, true, false],
        "attachments travel as JSON"
    );
    let json = source.bulk_get(wanted(), JSON).await.unwrap();
    for (s, j) in stored.iter().zip(&json) {
        assert_eq!(s.clone().into_json(), j.clone().into_json());
    }
    let (by_stored, by_json) = (
        state
            .replicator
            .local_db("by-stored", admin(), "by-stored".into()),
        state
            .replicator
            .local_db("by-json", admin(), "by-json".into()),
    );
    for (target, docs) in [(&by_stored, stored), (&by_json, json)] {
        target.create(&Map::new()).await.unwrap();
        assert_eq!(target.bulk_docs(docs).await.unwrap(), vec![]);
    }
    assert_eq!(contents(&by_stored).await, contents(&by_json).await);
}

/// A user who is not a member of the database is refused alike: 401 without a name, 403
/// with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_refuse_non_members_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (state, addr) = server(dir.path()).await;
    state
        .replicator
        .local_db("private", admin(), "private".into())
        .create(&Map::new())
        .await
        .unwrap();
    let anonymous = state
        .replicator
        .local_db("private", UserCtx::default(), "private".into());
    let over_http = Remote::new(&RemoteSpec {
        url: format!("http://{addr}/private"),
        headers: Map::new(),
        basic: None,
        timeout: Duration::from_secs(30),
        retries: 1,
        connections: 1,
    })
    .unwrap();
    for result in [anonymous.info().await, over_http.info().await] {
        assert!(
            matches!(result, Err(Error::Unauthorized { status: 401, .. })),
            "{result:?}"
        );
    }
}
