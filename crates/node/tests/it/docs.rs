//! The node's document seam, through the operations trait on a real RocksDB: single and
//! bulk writes (new edits and replicated revisions, conflicts, local documents among
//! them, `all_or_nothing`), local documents, `_bulk_get` (leaves, `latest`, errors),
//! `_revs_diff`, `_purge` and `COPY`. A cluster coordinator offering the same operations must
//! pass the same checks.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_core::{parse_doc, Rev};
use settee_db::LocalUpdate;
use settee_node::write::{BulkAnswer, BulkDocs, BulkEntry, BulkGetItem, BulkGetOpts, WriteOpts};
use settee_node::{Error, Fabric};

use crate::common;
use common::fixture;

fn user() -> UserCtx {
    UserCtx::default()
}

fn bulk(body: Value) -> BulkDocs {
    let mut n = 0;
    BulkDocs::parse(body, || {
        n += 1;
        Ok(format!("uuid{n}"))
    })
    .unwrap()
}

fn entries(answer: BulkAnswer) -> Vec<BulkEntry> {
    match answer {
        BulkAnswer::Entries(e) => e,
        other => panic!("{other:?}"),
    }
}

fn written(e: &BulkEntry) -> (&str, Rev) {
    match e {
        BulkEntry::Written { id, rev } => (id, Rev::parse(rev).unwrap()),
        other => panic!("{other:?}"),
    }
}

fn bulk_get(fabric: &dyn Fabric, items: Value, opts: BulkGetOpts) -> Vec<BulkGetItem> {
    let mut out = Vec::new();
    let items = items.as_array().unwrap().clone();
    fabric
        .bulk_get("db", &user(), &items, opts, &mut |item| {
            out.push(item);
            true
        })
        .unwrap();
    out
}

fn json_of(doc: &[u8]) -> Value {
    serde_json::from_slice(doc).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_writes_keep_their_places_and_name_their_failures() {
    let f = fixture();
    let fabric = f.fabric();
    let first = entries(
        fabric
            .bulk_docs(
                "db",
                &user(),
                bulk(
                    json!({"docs": [{"_id": "a", "v": 1}, {"v": 2}, {"_id": "_local/l", "v": 3}]}),
                ),
            )
            .await
            .unwrap(),
    );
    assert_eq!(first.len(), 3);
    let (id, a1) = written(&first[0]);
    assert_eq!((id, a1.pos), ("a", 1));
    assert_eq!(written(&first[1]).0, "uuid1", "an id from the node's uuids");
    match &first[2] {
        BulkEntry::Written { id, rev } => {
            assert_eq!((id.as_str(), rev.as_str()), ("_local/l", "0-1"))
        }
        other => panic!("{other:?}"),
    }
    // A stale revision conflicts; the others in the request are still written, in order.
    let second = entries(
        fabric
            .bulk_docs(
                "db",
                &user(),
                bulk(json!({"docs": [{"_id": "b"}, {"_id": "a"}, {"_id": "_local/l", "_rev": "9-x"}]})),
            )
            .await
            .unwrap(),
    );
    assert_eq!(written(&second[0]).0, "b");
    match &second[1] {
        BulkEntry::Failed {
            id,
            rev: None,
            error: Error::Docs(_) | Error::Db(_),
        } => {
            assert_eq!(id, "a")
        }
        other => panic!("a conflict: {other:?}"),
    }
    assert!(
        matches!(&second[2], BulkEntry::Failed { error: Error::BadRequest(r), .. } if r == "Invalid rev format"),
        "{:?}",
        second[2]
    );
    // Replicated revisions: written ones have no entry; a failure names the revision.
    let replicated = entries(
        fabric
            .bulk_docs(
                "db",
                &user(),
                bulk(json!({"new_edits": false, "docs": [
                    {"_id": "a", "_rev": "2-aa", "_revisions": {"start": 2, "ids": ["aa", a1.id.to_string()]}},
                    {"_id": "c", "_rev": "1-cc"},
                ]})),
            )
            .await
            .unwrap(),
    );
    assert!(replicated.is_empty(), "{replicated:?}");
    let info = f.db.open_doc("a", None).unwrap();
    assert_eq!(info.rev.to_string(), "2-aa");
    // `all_or_nothing` is refused as CouchDB 3 refuses it, naming each revision.
    let refused = fabric
        .bulk_docs(
            "db",
            &user(),
            bulk(json!({"all_or_nothing": true, "docs": [{"_id": "x"}, {"_id": "y", "_rev": "1-ab"}]})),
        )
        .await
        .unwrap();
    match refused {
        BulkAnswer::AllOrNothingRefused(docs) => assert_eq!(
            docs,
            vec![
                (Some("x".into()), "0-".into()),
                (Some("y".into()), "1-ab".into())
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert!(f.db.open_doc("x", None).is_err(), "nothing written");
}

#[test]
fn bulk_bodies_are_checked_before_anything_is_written() {
    let parse = |body: Value| BulkDocs::parse(body, || Ok("u".into())).unwrap_err();
    let reason = |e: Error| match e {
        Error::BadRequest(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reason(parse(json!({}))),
        "POST body must include `docs` parameter."
    );
    assert_eq!(
        reason(parse(json!({"docs": {}}))),
        "`docs` parameter must be an array."
    );
    assert!(
        reason(parse(json!({"new_edits": false, "docs": [{"_id": "a"}]}))).contains("new_edits")
    );
    assert_eq!(
        reason(parse(json!({"new_edits": "no", "docs": []}))),
        "`new_edits` parameter must be a boolean."
    );
    assert!(matches!(
        parse(json!({"docs": [{"_id": "_bad"}]})),
        Error::Core(settee_core::Error::IllegalDocId(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn single_writes_and_local_documents() {
    let f = fixture();
    let fabric = f.fabric();
    let doc = parse_doc(json!({"_id": "d", "v": 1})).unwrap();
    let rev = fabric
        .update_doc("db", &user(), doc, WriteOpts::default())
        .await
        .unwrap()
        .rev
        .unwrap();
    assert_eq!(rev.pos, 1);
    let stale = parse_doc(json!({"_id": "d", "v": 2})).unwrap();
    let conflict = fabric
        .update_doc("db", &user(), stale, WriteOpts::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            conflict,
            Error::Docs(settee_docs::Error::Db(settee_db::Error::Conflict))
        ),
        "{conflict:?}"
    );
    // Local documents: no revision tree and no MVCC, revisions `0-N`; a stale revision
    // writes `0-N+1` of the one given, as CouchDB's do.
    let put = |rev: Option<u64>, body: &[u8]| LocalUpdate {
        id: "_local/cp".into(),
        rev,
        deleted: false,
        body: body.to_vec(),
    };
    assert_eq!(
        fabric
            .put_local("db", put(None, b"{\"n\":1}"), false)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        fabric
            .put_local("db", put(Some(1), b"{\"n\":2}"), false)
            .await
            .unwrap(),
        Some(2)
    );
    assert_eq!(
        fabric
            .put_local("db", put(Some(1), b"{\"n\":3}"), false)
            .await
            .unwrap(),
        Some(2)
    );
    let local = fabric.open_local("db", "_local/cp").unwrap();
    assert_eq!((local.rev, local.body.as_slice()), (2, &b"{\"n\":3}"[..]));
    assert!(matches!(
        fabric.open_local("db", "_local/none"),
        Err(Error::NotFound(r)) if r == "missing"
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_get_reads_leaves_latest_revisions_and_errors() {
    let f = fixture();
    let fabric = f.fabric();
    let first = entries(
        fabric
            .bulk_docs("db", &user(), bulk(json!({"docs": [{"_id": "a", "v": 1}]})))
            .await
            .unwrap(),
    );
    let (_, a1) = written(&first[0]);
    let next = parse_doc(json!({"_id": "a", "_rev": a1.to_string(), "v": 2})).unwrap();
    let a2 = fabric
        .update_doc("db", &user(), next, WriteOpts::default())
        .await
        .unwrap()
        .rev
        .unwrap();
    let items = json!([
        {"id": "a", "rev": a1.to_string()},
        {"id": "a"},
        {"id": "nope"},
        {"rev": "1-x"},
        {"id": "a", "rev": "bad"},
    ]);
    let plain = bulk_get(fabric, items.clone(), BulkGetOpts::default());
    assert_eq!(plain.len(), 5);
    let docs = plain[0].docs.as_ref().unwrap();
    assert_eq!(json_of(&docs[0])["v"], 1, "the revision asked for");
    let leaves = plain[1].docs.as_ref().unwrap();
    assert_eq!(
        json_of(&leaves[0])["_rev"],
        a2.to_string(),
        "without a rev: the leaves"
    );
    match &plain[2].docs {
        Err((rev, Error::Db(settee_db::Error::NotFound(_)))) => assert_eq!(rev, "undefined"),
        other => panic!("{other:?}"),
    }
    assert_eq!(plain[3].id, None);
    assert!(
        matches!(&plain[3].docs, Err((Value::Null, Error::BadRequest(r))) if r == "document id missed")
    );
    assert!(matches!(&plain[4].docs, Err((rev, Error::BadRequest(_))) if rev == "bad"));
    let latest = bulk_get(
        fabric,
        json!([{"id": "a", "rev": a1.to_string()}]),
        BulkGetOpts {
            latest: true,
            revs: true,
            ..Default::default()
        },
    );
    let doc = json_of(&latest[0].docs.as_ref().unwrap()[0]);
    assert_eq!(doc["_rev"], a2.to_string(), "latest: the newest leaf");
    assert_eq!(doc["_revisions"]["start"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn revs_diff_and_purge() {
    let f = fixture();
    let fabric = f.fabric();
    let first = entries(
        fabric
            .bulk_docs(
                "db",
                &user(),
                bulk(json!({"docs": [{"_id": "a"}, {"_id": "b"}]})),
            )
            .await
            .unwrap(),
    );
    let (_, a1) = written(&first[0]);
    let (_, b1) = written(&first[1]);
    let missing = Rev::parse("2-ffff").unwrap();
    let diff = fabric
        .revs_diff("db", vec![("a".into(), vec![a1.clone(), missing.clone()])])
        .unwrap();
    assert_eq!(diff.len(), 1);
    let (id, missing_revs, ancestors) = &diff[0];
    assert_eq!((id.as_str(), missing_revs.clone()), ("a", vec![missing]));
    assert_eq!(ancestors, &vec![a1.clone()]);
    // Purge answers every id asked for, in order; `_local` ids have nothing to purge.
    let purged = fabric
        .purge(
            "db",
            vec![
                ("b".into(), vec![b1.clone()]),
                ("_local/x".into(), vec![]),
                ("a".into(), vec![Rev::parse("1-0000").unwrap()]),
            ],
            None,
        )
        .await
        .unwrap()
        .ids;
    assert_eq!(
        purged,
        vec![
            ("b".to_string(), vec![b1]),
            ("_local/x".to_string(), vec![]),
            ("a".to_string(), vec![]),
        ]
    );
    assert!(f.db.open_doc("b", None).is_err());
    assert!(f.db.open_doc("a", None).is_ok());
    f.node
        .config
        .set("purge", "max_document_id_number", "1")
        .unwrap();
    let refused = fabric
        .purge("db", vec![("a".into(), vec![]), ("c".into(), vec![])], None)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::BadRequest(r) if r == "Exceeded maximum number of documents.")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn documents_and_their_revisions_are_read() {
    use settee_node::read::{ReadOpts, Rendered, Revision};
    let f = fixture();
    let fabric = f.fabric();
    let first = entries(
        fabric
            .bulk_docs("db", &user(), bulk(json!({"docs": [{"_id": "a", "v": 1}]})))
            .await
            .unwrap(),
    );
    let (_, a1) = written(&first[0]);
    // A conflicting branch, as a replicator would bring it.
    fabric
        .bulk_docs(
            "db",
            &user(),
            bulk(json!({"new_edits": false, "docs": [{"_id": "a", "_rev": "1-ffff", "v": 9}]})),
        )
        .await
        .unwrap();
    let winner = a1.clone().max(Rev::parse("1-ffff").unwrap());
    let json = |r: settee_node::read::Read| match r.body {
        Rendered::Json(b) => json_of(&b),
        other => panic!("{other:?}"),
    };
    let read = fabric
        .open_doc("db", &user(), "a", &ReadOpts::default())
        .unwrap();
    assert_eq!((read.rev.clone(), read.has_meta), (winner.clone(), false));
    assert_eq!(json(read)["_rev"], winner.to_string());
    let opts = ReadOpts {
        rev: Some(a1.clone()),
        ..Default::default()
    };
    let doc = json(fabric.open_doc("db", &user(), "a", &opts).unwrap());
    assert_eq!(doc["_rev"], a1.to_string(), "the revision asked for");
    let mut opts = ReadOpts::default();
    opts.doc.conflicts = true;
    let read = fabric.open_doc("db", &user(), "a", &opts).unwrap();
    assert!(
        read.has_meta,
        "conflicts change without the revision: no ETag"
    );
    assert_eq!(json(read)["_conflicts"].as_array().unwrap().len(), 1);
    assert!(matches!(
        fabric.open_doc("db", &user(), "nope", &ReadOpts::default()),
        Err(Error::Db(settee_db::Error::NotFound(_)))
    ));
    // open_revs: every leaf, or those named (a missing one as `missing`).
    let all = fabric
        .open_revs("db", &user(), "a", "all", &ReadOpts::default())
        .unwrap();
    assert_eq!(all.len(), 2);
    let named = fabric
        .open_revs(
            "db",
            &user(),
            "a",
            r#"["1-ffff","2-0000"]"#,
            &ReadOpts::default(),
        )
        .unwrap();
    match &named[..] {
        [Revision::Json { ok: true, body }, Revision::Json {
            ok: false,
            body: missing,
        }] => {
            assert_eq!(json_of(body)["v"], 9);
            assert_eq!(json_of(missing), json!({"missing": "2-0000"}));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fabric.open_revs("db", &user(), "a", "[1]", &ReadOpts::default()),
        Err(Error::BadRequest(r)) if r == "Invalid rev format"
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn copies_go_to_new_documents_revisions_and_local_documents() {
    let f = fixture();
    let fabric = f.fabric();
    let answer = fabric
        .bulk_docs(
            "db",
            &user(),
            bulk(json!({"docs": [{"_id": "a", "v": 1}, {"_id": "b"}]})),
        )
        .await
        .unwrap();
    let written: Vec<Rev> = entries(answer).iter().map(|e| written(e).1).collect();
    let someone = user();
    let copy = |source: (&'static str, Option<Rev>), dest: (&'static str, Option<Rev>)| {
        let copied = fabric.copy_doc("db", &someone, source, dest);
        async move { copied.await.map(|c| c.rev) }
    };
    // To a new document, and over an existing one at the revision named.
    let c = copy(("a", None), ("c", None)).await.unwrap();
    assert!(c.starts_with("1-"), "{c}");
    let read = fabric
        .open_doc("db", &user(), "c", &Default::default())
        .unwrap();
    let settee_node::read::Rendered::Json(body) = read.body else {
        panic!("json")
    };
    assert_eq!(json_of(&body)["v"], 1);
    let over = copy(
        ("a", Some(written[0].clone())),
        ("b", Some(written[1].clone())),
    );
    assert!(over.await.unwrap().starts_with("2-"));
    let stale = copy(("a", None), ("b", Some(written[1].clone()))).await;
    assert!(
        matches!(stale, Err(Error::Docs(_) | Error::Db(_))),
        "{stale:?}"
    );
    // To and from local documents; a local destination's revision is `0-N`.
    assert_eq!(copy(("a", None), ("_local/l", None)).await.unwrap(), "0-1");
    let next = copy(("a", None), ("_local/l", Some(Rev::parse("0-1").unwrap())));
    assert_eq!(next.await.unwrap(), "0-2");
    let bad = copy(("a", None), ("_local/l", Some(written[0].clone()))).await;
    assert!(matches!(bad, Err(Error::Bare(r)) if r == "Invalid rev format"));
    let back = copy(("_local/l", None), ("d", None)).await.unwrap();
    assert!(back.starts_with("1-"));
    let missing = copy(("nope", None), ("e", None)).await;
    assert!(matches!(
        missing,
        Err(Error::Db(settee_db::Error::NotFound(_)))
    ));
}
