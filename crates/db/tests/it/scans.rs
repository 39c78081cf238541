//! Scans over the id table through the public API, on a real RocksDB in a temporary
//! directory: the two-ended walk (`winners_in`) agrees with the one-way walk, and pages in
//! seq order (`leaves_by_seq_in`) agree with the changes feed.

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

/// (seq, id, leaves) of every change, from the changes feed.
fn feed(db: &Database) -> Vec<(u64, String, Vec<settee_core::Leaf>)> {
    let snap = db.store().snapshot();
    let mut out = Vec::new();
    db.changes_in(&snap, 0, false, false, |c| {
        out.push((c.seq, c.id, c.info.tree.leaves()));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// The same, read in `pages` pages of at most `max` documents, as a view build reads them.
fn paged(db: &Database, pages: u64, max: usize) -> Vec<(u64, String, Vec<settee_core::Leaf>)> {
    let snap = db.store().snapshot();
    let mut out: Vec<(u64, String, Vec<settee_core::Leaf>)> = Vec::new();
    db.pages_by_seq_in(&snap, pages, max, |page| {
        assert!(page.len() <= max);
        assert!(page
            .first()
            .is_none_or(|d| out.last().is_none_or(|l| l.0 < d.seq)));
        out.extend(page.into_iter().map(|d| (d.seq, d.id, d.leaves)));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn pages_in_seq_order_match_the_changes_feed() {
    let (_dir, couch) = open();
    let db = couch.create("db", json!({})).unwrap();
    assert!(paged(&db, 3, 10).is_empty());
    let ids: Vec<String> = (0..3000u64)
        .map(|i| format!("{:08x}", i.wrapping_mul(0x9e37_79b9) as u32))
        .collect();
    for chunk in ids.chunks(500) {
        write(&db, chunk.iter().map(|id| json!({"_id": id})).collect());
    }
    // Later seqs for some documents (updates and deletions, out of id order) and a
    // conflict, so seqs are neither dense nor in id order.
    let revs: std::collections::HashMap<String, String> =
        one_way(&db, b"", None).into_iter().collect();
    let edits = (ids.iter().step_by(5))
        .enumerate()
        .map(|(n, id)| json!({"_id": id, "_rev": revs[id], "_deleted": n % 3 == 0}))
        .collect();
    write(&db, edits);
    let conflict = settee_core::parse_doc(json!({"_id": ids[1], "_rev": "1-abc", "x": 1})).unwrap();
    let rx = db.update_docs(vec![conflict], false).unwrap();
    rx.blocking_recv().unwrap().unwrap();
    let all = feed(&db);
    assert_eq!(all.len(), ids.len());
    // One page of everything, even shares, shares cut short by `max`, one document a page.
    for (pages, max) in [(1, usize::MAX), (4, 2000), (6, 150), (72, 7), (1, 1)] {
        assert_eq!(paged(&db, pages, max), all, "{pages} pages, max {max}");
    }
}
