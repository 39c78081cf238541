//! Storage conformance: what the rest of Settee relies on from the storage seam.

use settee_storage::{db_range, key_in_db, seq_key, Cf, Read, Store, StoreOptions};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    (dir, store)
}

#[test]
fn batches_are_atomic_and_visible_after_write() {
    let (_d, s) = open();
    let mut b = s.batch();
    b.put(Cf::Docs, &key_in_db(1, b"a"), b"1");
    b.put(Cf::Seqs, &seq_key(1, 1), b"a");
    assert_eq!(s.get(Cf::Docs, &key_in_db(1, b"a")).unwrap(), None);
    s.write(b, true).unwrap();
    assert_eq!(
        s.get(Cf::Docs, &key_in_db(1, b"a")).unwrap().as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(
        s.get(Cf::Seqs, &seq_key(1, 1)).unwrap().as_deref(),
        Some(&b"a"[..])
    );
}

#[test]
fn ranges_stay_inside_bounds_both_ways() {
    let (_d, s) = open();
    let mut b = s.batch();
    for db in 1..=3u64 {
        for seq in 1..=5u64 {
            b.put(Cf::Seqs, &seq_key(db, seq), &[db as u8, seq as u8]);
        }
    }
    s.write(b, false).unwrap();
    let (lo, hi) = db_range(2);
    let fwd: Vec<_> = s
        .range(Cf::Seqs, &lo, &hi, false)
        .map(|r| r.unwrap().1.to_vec())
        .collect();
    assert_eq!(fwd, (1..=5).map(|q| vec![2u8, q]).collect::<Vec<_>>());
    let rev: Vec<_> = s
        .range(Cf::Seqs, &lo, &hi, true)
        .map(|r| r.unwrap().1.to_vec())
        .collect();
    assert_eq!(rev, (1..=5).rev().map(|q| vec![2u8, q]).collect::<Vec<_>>());
    let mid: Vec<_> = s
        .range(Cf::Seqs, &seq_key(2, 3), &hi, false)
        .map(|r| r.unwrap().1.to_vec())
        .collect();
    assert_eq!(mid.len(), 3);
}

#[test]
fn snapshots_do_not_see_later_writes() {
    let (_d, s) = open();
    let mut b = s.batch();
    b.put(Cf::Docs, &key_in_db(1, b"a"), b"old");
    s.write(b, false).unwrap();
    let snap = s.snapshot();
    let mut b = s.batch();
    b.put(Cf::Docs, &key_in_db(1, b"a"), b"new");
    b.put(Cf::Docs, &key_in_db(1, b"b"), b"new");
    s.write(b, false).unwrap();
    assert_eq!(
        snap.get(Cf::Docs, &key_in_db(1, b"a")).unwrap().as_deref(),
        Some(&b"old"[..])
    );
    let (lo, hi) = db_range(1);
    assert_eq!(snap.range(Cf::Docs, &lo, &hi, false).count(), 1);
    assert_eq!(s.range(Cf::Docs, &lo, &hi, false).count(), 2);
    let got = snap
        .multi_get(Cf::Docs, &[key_in_db(1, b"a"), key_in_db(1, b"b")])
        .unwrap();
    assert_eq!(got, vec![Some(b"old".to_vec()), None]);
}

#[test]
fn range_delete_empties_one_database_only() {
    let (_d, s) = open();
    let mut b = s.batch();
    for db in 1..=2u64 {
        b.put(Cf::Docs, &key_in_db(db, b"x"), b"v");
    }
    s.write(b, false).unwrap();
    let (lo, hi) = db_range(1);
    let mut b = s.batch();
    b.delete_range(Cf::Docs, &lo, &hi);
    s.write(b, true).unwrap();
    assert_eq!(s.get(Cf::Docs, &key_in_db(1, b"x")).unwrap(), None);
    assert!(s.get(Cf::Docs, &key_in_db(2, b"x")).unwrap().is_some());
}

#[test]
fn data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = s.batch();
        b.put(Cf::Meta, b"k", b"v");
        s.write(b, true).unwrap();
    }
    let s = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    assert_eq!(s.get(Cf::Meta, b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn scans_and_lookups_of_sorted_keys_agree() {
    let (_d, s) = open();
    let mut b = s.batch();
    for seq in (2..=40u64).step_by(2) {
        b.put(Cf::Bodies, &seq_key(1, seq), &seq.to_be_bytes());
    }
    b.put(Cf::Bodies, &seq_key(2, 1), b"other db");
    s.write(b, false).unwrap();
    let snap = s.snapshot();
    // present, absent between present ones, absent past the last one, another db's key
    let wanted: Vec<Vec<u8>> = [2u64, 3, 4, 10, 11, 40, 41]
        .iter()
        .map(|&q| seq_key(1, q).to_vec())
        .chain([seq_key(2, 1).to_vec()])
        .collect();
    let show = |v: Vec<Option<settee_storage::Pinned<'_>>>| -> Vec<Option<Vec<u8>>> {
        v.into_iter().map(|p| p.map(|p| p.to_vec())).collect()
    };
    let scanned = show(snap.scan_values(Cf::Bodies, &wanted, true).unwrap());
    let looked_up = show(snap.multi_get_pinned(Cf::Bodies, &wanted, true).unwrap());
    assert_eq!(scanned, looked_up);
    assert_eq!(
        scanned.iter().filter(|v| v.is_some()).count(),
        5,
        "{scanned:?}"
    );
    assert!(snap.scan_values(Cf::Bodies, &[], true).unwrap().is_empty());
}

#[test]
fn ingested_files_hold_their_entries_durably_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: u32| key_in_db(7, &i.to_be_bytes());
    {
        let s = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = s.batch();
        b.put(Cf::Views, &key(5), b"old");
        s.write(b, false).unwrap();
        let mut f = s.sst_writer(Cf::Views).unwrap();
        for i in 0..1000u32 {
            f.put(&key(i), format!("v{i}").as_bytes()).unwrap();
        }
        // Keys must ascend: a writer refuses one below the last.
        let mut bad = s.sst_writer(Cf::Views).unwrap();
        bad.put(&key(2), b"x").unwrap();
        assert!(bad.put(&key(1), b"y").is_err());
        drop(bad);
        // An empty writer is skipped.
        let empty = s.sst_writer(Cf::Docs).unwrap();
        s.ingest(vec![f, empty]).unwrap();
        // The ingested entry is newer than the one written before.
        assert_eq!(
            s.get(Cf::Views, &key(5)).unwrap().as_deref(),
            Some(&b"v5"[..])
        );
        // A later write wins over an ingested entry.
        let mut b = s.batch();
        b.put(Cf::Views, &key(6), b"new");
        s.write(b, true).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path().join("ingest"))
                .unwrap()
                .count(),
            0
        );
        // A file never ingested (a crash in the middle of a build) is removed at open.
        let mut left = s.sst_writer(Cf::Views).unwrap();
        left.put(&key(2000), b"z").unwrap();
        std::mem::forget(left);
    }
    let s = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path().join("ingest"))
            .unwrap()
            .count(),
        0
    );
    let (lo, hi) = db_range(7);
    let all: Vec<_> = s
        .range(Cf::Views, &lo, &hi, false)
        .map(|r| r.unwrap().1.to_vec())
        .collect();
    assert_eq!(all.len(), 1000);
    assert_eq!(all[6], b"new");
    assert_eq!(all[999], b"v999");
}
