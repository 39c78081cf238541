//! Scans over the id table through the public API, on a real RocksDB in a temporary
//! directory: the two-ended walk (`winners_in`) agrees with the one-way walk.

use serde_json::json;
use settee_db::{Config, Couch, Database};
use std::ops::ControlFlow;
use std::sync::Arc;

fn open() -> (tempfile::TempDir, Arc<Couch>) {
    let dir = tempfile::tempdir().unwrap();
    let couch = Couch::open(
        &dir.path().join("store"),
        Config::default(),
        &settee_storage::StoreOptions::default(),
    )
    .unwrap();
    (dir, couch)
}

fn write(db: &Arc<Database>, docs: Vec<serde_json::Value>) {
    let parsed = docs
        .into_iter()
        .map(|d| settee_core::parse_doc(d).unwrap())
        .collect();
    let rx = db.update_docs(parsed, true).unwrap();
    for r in rx.blocking_recv().unwrap().unwrap() {
        assert!(matches!(r, settee_db::UpdateResult::Ok { .. }));
    }
}

fn one_way(db: &Database, lower: &[u8], upper: Option<&[u8]>) -> Vec<(String, String)> {
    let snap = db.store().snapshot();
    let mut out = Vec::new();
    db.scan_winners_in(&snap, lower, upper, false, |d| {
        out.push((d.id, d.winner.rev.to_string()));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn both_ends(db: &Database, lower: &[u8], upper: Option<&[u8]>) -> Vec<(String, String)> {
    let snap = db.store().snapshot();
    db.winners_in(&snap, lower, upper)
        .unwrap()
        .into_iter()
        .map(|d| (d.id, d.winner.rev.to_string()))
        .collect()
}

#[test]
fn both_ends_walk_meets_without_gaps_or_repeats() {
    let (_dir, couch) = open();
    let db = couch.create("db", json!({})).unwrap();
    assert!(both_ends(&db, b"", None).is_empty());
    // Sizes around the walkers' publishing step (512), deletions sprinkled in.
    let mut written = 0;
    for n in [1usize, 2, 511, 513, 1500, 5000] {
        let docs = (written..n)
            .map(|i| json!({"_id": format!("{:08x}", (i as u64).wrapping_mul(0x9e37_79b9) as u32), "i": i}))
            .collect();
        write(&db, docs);
        written = n;
        let deleted: Vec<_> = one_way(&db, b"", None)
            .into_iter()
            .step_by(7)
            .take(3)
            .map(|(id, rev)| json!({"_id": id, "_rev": rev, "_deleted": true}))
            .collect();
        write(&db, deleted);
        let all = one_way(&db, b"", None);
        assert_eq!(both_ends(&db, b"", None), all, "{n} docs");
        let (lo, hi) = (b"4".as_slice(), b"c".as_slice());
        assert_eq!(
            both_ends(&db, lo, Some(hi)),
            one_way(&db, lo, Some(hi)),
            "{n} docs, a range"
        );
    }
}
