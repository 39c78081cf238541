//! The endpoints a replication uses, through the operations trait on a real RocksDB: a
//! replicator's loop written against `Fabric` alone (`_changes` with `style=all_docs`,
//! `_revs_diff`, `_bulk_get` with `revs`, `_bulk_docs` with `new_edits: false`, a `_local`
//! checkpoint) copies revisions, conflicts and deletions between two databases, resumes
//! from its checkpoint, and then finds nothing left to copy. A cluster coordinator
//! offering the same operations must pass the same checks.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_core::{Rev, SeqArg};
use settee_node::changes::{ChangesOpts, FilterSpec};
use settee_node::dbs::CreateDb;
use settee_node::read::{ReadOpts, Rendered};
use settee_node::write::{local_update, BulkAnswer, BulkDocs, BulkEntry, BulkGetOpts};
use settee_node::{Error, Fabric};
use std::collections::BTreeMap;

use crate::common;
use common::{fixture, Fixture};

const CHECKPOINT: &str = "_local/checkpoint";

fn user() -> UserCtx {
    UserCtx::default()
}

/// Writes `docs` to `db` as new edits: each one's new revision.
async fn edit(fabric: &dyn Fabric, db: &str, docs: Value) -> Vec<Rev> {
    let body = json!({ "docs": docs });
    let req = BulkDocs::parse(body, || unreachable!("ids given")).unwrap();
    let answer = fabric.bulk_docs(db, &user(), req).await.unwrap();
    let BulkAnswer::Entries(entries) = answer else {
        panic!("{answer:?}")
    };
    (entries.into_iter())
        .map(|e| match e {
            BulkEntry::Written { rev, .. } => Rev::parse(&rev).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// One pass of a replication from `source` to `target`, from the target's checkpoint:
/// how many revisions it copied.
async fn replicate(f: &Fixture, source: &str, target: &str) -> usize {
    let fabric = f.fabric();
    let codec = settee_node::seqs(&f.node.couch.get(source).unwrap());
    let since = match fabric.open_local(target, CHECKPOINT) {
        Ok(doc) => {
            let body = serde_json::from_slice::<Value>(&doc.body).unwrap();
            codec
                .since(body["source_last_seq"].as_str().unwrap())
                .unwrap()
        }
        Err(Error::NotFound(_)) => SeqArg::Seq(0),
        Err(e) => panic!("{e:?}"),
    };
    // The source's changes: every leaf of each changed document.
    let mut o = ChangesOpts::new(codec.clone());
    o.since = since;
    o.all_docs_style = true;
    let no_request = Box::new(|| unreachable!("no filter function"));
    let o = (fabric.changes_filter(source, &user(), FilterSpec::None, o, no_request))
        .await
        .unwrap();
    let mut changed: Vec<(String, Vec<Rev>)> = Vec::new();
    let end = tokio::task::block_in_place(|| {
        fabric.changes(source, &o, &mut |_, row| {
            let row: Value = serde_json::from_slice(row).unwrap();
            let revs = row["changes"].as_array().unwrap().iter();
            let revs = revs.map(|c| Rev::parse(c["rev"].as_str().unwrap()).unwrap());
            changed.push((row["id"].as_str().unwrap().into(), revs.collect()));
            true
        })
    })
    .unwrap();
    // What the target lacks, read from the source with its history.
    let missing = fabric.revs_diff(target, changed).unwrap();
    let items: Vec<Value> = (missing.iter())
        .flat_map(|(id, revs, _)| {
            revs.iter()
                .map(move |r| json!({"id": id, "rev": r.to_string()}))
        })
        .collect();
    let opts = BulkGetOpts {
        revs: true,
        ..Default::default()
    };
    let mut docs = Vec::new();
    tokio::task::block_in_place(|| {
        fabric.bulk_get(source, &user(), &items, opts, &mut |item| {
            for doc in item.docs.expect("every revision asked for is there") {
                docs.push(serde_json::from_slice::<Value>(&doc).unwrap());
            }
            true
        })
    })
    .unwrap();
    let copied = docs.len();
    if copied > 0 {
        let body = json!({"docs": docs, "new_edits": false});
        let req = BulkDocs::parse(body, || unreachable!("ids given")).unwrap();
        let answer = fabric.bulk_docs(target, &user(), req).await.unwrap();
        let BulkAnswer::Entries(entries) = answer else {
            panic!("{answer:?}")
        };
        assert!(
            (entries.iter()).all(|e| matches!(e, BulkEntry::Written { .. })),
            "{entries:?}"
        );
    }
    // The checkpoint: the source's sequence the target holds everything up to.
    let (mut update, _) = local_update(
        CHECKPOINT,
        json!({"source_last_seq": end.last_seq.render(&codec)}),
    )
    .unwrap();
    update.rev = fabric.open_local(target, CHECKPOINT).ok().map(|d| d.rev);
    fabric.put_local(target, update, false).await.unwrap();
    copied
}

/// Every document of `db` as `open_revs=all` reads it: id → each leaf's JSON by revision.
fn leaves(
    fabric: &dyn Fabric,
    db: &str,
    ids: &[&str],
) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut opts = ReadOpts::default();
    opts.doc.revs = true;
    ids.iter()
        .map(|id| {
            let revs = fabric.open_revs(db, &user(), id, "all", &opts).unwrap();
            let revs = revs.into_iter().map(|r| {
                let settee_node::read::Revision::Json { ok: true, body } = r else {
                    panic!("{r:?}")
                };
                let doc: Value = serde_json::from_slice(&body).unwrap();
                (doc["_rev"].as_str().unwrap().to_string(), doc)
            });
            (id.to_string(), revs.collect())
        })
        .collect()
}

fn winner(fabric: &dyn Fabric, db: &str, id: &str) -> Value {
    let mut opts = ReadOpts::default();
    opts.doc.conflicts = true;
    let read = fabric.open_doc(db, &user(), id, &opts).unwrap();
    let Rendered::Json(body) = read.body else {
        panic!("json")
    };
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replication_through_the_trait_copies_every_leaf_and_resumes() {
    let f = fixture();
    let fabric = f.fabric();
    for db in ["source", "target"] {
        fabric.create_db(db, CreateDb::default()).unwrap();
    }
    // a: edited twice; b: deleted; c: two branches (a conflict made by a replicated write).
    let first = edit(
        fabric,
        "source",
        json!([{"_id": "a", "v": 1}, {"_id": "b", "v": 1}, {"_id": "c", "v": 1}]),
    )
    .await;
    let a2 = edit(
        fabric,
        "source",
        json!([{"_id": "a", "_rev": first[0].to_string(), "v": 2},
               {"_id": "b", "_rev": first[1].to_string(), "_deleted": true}]),
    )
    .await;
    let c1 = &first[2];
    edit(
        fabric,
        "source",
        json!([{"_id": "c", "_rev": c1.to_string(), "v": 2}]),
    )
    .await;
    let c1_id = c1.to_string().split_once('-').unwrap().1.to_string();
    let other = "f".repeat(32);
    let branch = json!({"docs": [{"_id": "c", "v": "other",
        "_revisions": {"start": 2, "ids": [other, c1_id]}}], "new_edits": false});
    let req = BulkDocs::parse(branch, || unreachable!()).unwrap();
    fabric.bulk_docs("source", &user(), req).await.unwrap();

    // a's, b's and both of c's leaves.
    assert_eq!(replicate(&f, "source", "target").await, 4);
    let ids = ["a", "b", "c"];
    assert_eq!(
        leaves(fabric, "target", &ids),
        leaves(fabric, "source", &ids)
    );
    let c = winner(fabric, "target", "c");
    assert_eq!(c, winner(fabric, "source", "c"));
    assert_eq!(c["_conflicts"].as_array().unwrap().len(), 1);
    assert_eq!(winner(fabric, "target", "a")["_rev"], a2[0].to_string());
    assert!(fabric
        .open_doc("target", &user(), "b", &ReadOpts::default())
        .is_err());

    // From the checkpoint nothing is left; a new edit is all the next pass copies.
    let checkpoint = fabric.open_local("target", CHECKPOINT).unwrap();
    assert_eq!(checkpoint.rev, 1);
    assert_eq!(replicate(&f, "source", "target").await, 0);
    assert_eq!(fabric.open_local("target", CHECKPOINT).unwrap().rev, 2);
    edit(
        fabric,
        "source",
        json!([{"_id": "d", "v": 1}, {"_id": "a", "_rev": a2[0].to_string(), "v": 3}]),
    )
    .await;
    assert_eq!(replicate(&f, "source", "target").await, 2);
    let ids = ["a", "b", "c", "d"];
    assert_eq!(
        leaves(fabric, "target", &ids),
        leaves(fabric, "source", &ids)
    );
}
