//! The attachment store through the public API, on a real RocksDB in a temporary directory.

use settee_db::{Config, Couch, Error, ATT_CHUNK};
use std::collections::HashSet;

fn open() -> (tempfile::TempDir, std::sync::Arc<Couch>) {
    let dir = tempfile::tempdir().unwrap();
    let couch = Couch::open(
        &dir.path().join("store"),
        Config::default(),
        &settee_storage::StoreOptions::default(),
    )
    .unwrap();
    (dir, couch)
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn md5(data: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(data).into()
}

fn read_all(db: &settee_db::Database, digest: &[u8; 16], range: std::ops::Range<u64>) -> Vec<u8> {
    db.attachment_chunks(digest, range)
        .unwrap()
        .expect("stored")
        .map(|c| c.unwrap())
        .collect::<Vec<_>>()
        .concat()
}

#[test]
fn streamed_write_and_ranged_reads() {
    let (_dir, couch) = open();
    let db = couch.create("db", serde_json::json!({})).unwrap();
    let data = bytes(3 * ATT_CHUNK + 123, 1);
    let mut w = db.attachment_writer(u64::MAX);
    for piece in data.chunks(10_000) {
        w.write(piece).unwrap();
    }
    let stored = w.finish().unwrap();
    assert_eq!(stored.length, data.len() as u64);
    assert_eq!(stored.digest, md5(&data));
    assert_eq!(
        db.attachment_length(&stored.digest).unwrap(),
        Some(data.len() as u64)
    );
    let n = data.len() as u64;
    assert_eq!(read_all(&db, &stored.digest, 0..n), data);
    for (a, b) in [
        (0, 1),
        (5, ATT_CHUNK as u64 + 7),
        (ATT_CHUNK as u64, 2 * ATT_CHUNK as u64),
        (n - 3, n),
        (n - 3, n + 100),
    ] {
        let want = &data[a as usize..b.min(n) as usize];
        assert_eq!(read_all(&db, &stored.digest, a..b), want, "{a}..{b}");
    }
    assert!(read_all(&db, &stored.digest, n..n + 5).is_empty());
    let empty = db.attachment_writer(10).finish().unwrap();
    assert_eq!(empty.length, 0);
    assert!(read_all(&db, &empty.digest, 0..0).is_empty());
}

#[test]
fn identical_content_is_stored_once_and_reclaimed_when_unreferenced() {
    let (_dir, couch) = open();
    let db = couch.create("db", serde_json::json!({})).unwrap();
    let a = bytes(2 * ATT_CHUNK, 2);
    let b = bytes(1000, 3);
    let write = |data: &[u8]| {
        let mut w = db.attachment_writer(u64::MAX);
        w.write(data).unwrap();
        w.finish().unwrap()
    };
    let a1 = write(&a);
    let a2 = write(&a);
    assert_eq!(a1, a2);
    let bd = write(&b);
    // an interrupted upload: chunks, no record
    let mut dangling = db.attachment_writer(u64::MAX);
    dangling.write(&bytes(ATT_CHUNK + 5, 4)).unwrap();
    drop(dangling);

    let live: HashSet<[u8; 16]> = [a1.digest].into_iter().collect();
    assert_eq!(
        db.reclaim_attachments(&live).unwrap(),
        0,
        "fresh uploads may not be referenced yet: kept for an hour"
    );
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2 * 3600;
    let freed = db.reclaim_attachments_at(&live, later).unwrap();
    // b's chunk, a's duplicate was never kept, and the dangling upload's first chunk
    assert_eq!(freed, 1000 + ATT_CHUNK as u64);
    assert_eq!(read_all(&db, &a1.digest, 0..u64::MAX), a);
    assert!(db.attachment_chunks(&bd.digest, 0..10).unwrap().is_none());
    assert_eq!(
        db.reclaim_attachments(&live).unwrap(),
        0,
        "nothing left to reclaim"
    );
}

#[test]
fn size_limit_and_database_deletion() {
    let (_dir, couch) = open();
    let db = couch.create("db", serde_json::json!({})).unwrap();
    let mut w = db.attachment_writer(100);
    w.write(&[0; 60]).unwrap();
    assert!(matches!(w.write(&[0; 60]), Err(Error::AttachmentTooLarge)));
    let mut w = db.attachment_writer(u64::MAX);
    w.write(b"hello").unwrap();
    let d = w.finish().unwrap();
    couch.delete("db").unwrap();
    let db = couch.create("db", serde_json::json!({})).unwrap();
    assert!(
        db.attachment_chunks(&d.digest, 0..5).unwrap().is_none(),
        "deleted with the database"
    );
}

#[test]
fn compaction_finds_what_kept_revisions_refer_to() {
    use settee_core::{join_stored, ParsedDoc};
    let (_dir, couch) = open();
    let db = couch.create("db", serde_json::json!({})).unwrap();
    let mut w = db.attachment_writer(u64::MAX);
    w.write(b"hello world").unwrap();
    let stored = w.finish().unwrap();
    use base64::Engine;
    let digest = format!(
        "md5-{}",
        base64::engine::general_purpose::STANDARD.encode(stored.digest)
    );
    let stubs = serde_json::json!({"a.txt": {"content_type": "text/plain", "revpos": 1, "digest": digest, "length": 11, "stub": true}});
    let write = |revs: Option<(u64, Vec<settee_core::RevId>)>, atts: Option<&serde_json::Value>| {
        let body = join_stored(
            b"{}",
            atts.map(|a| serde_json::to_vec(a).unwrap()).as_deref(),
        );
        let doc = ParsedDoc {
            id: Some("d".into()),
            revs,
            deleted: false,
            body,
            atts: None,
            body_term: None,
        };
        let res = db
            .update_docs(vec![doc], true)
            .unwrap()
            .blocking_recv()
            .unwrap()
            .unwrap();
        match &res[0] {
            settee_db::UpdateResult::Ok { rev: Some(r), .. } => r.clone(),
            other => panic!("{other:?}"),
        }
    };
    let r1 = write(None, Some(&stubs));
    assert_eq!(
        db.live_attachments().unwrap(),
        [stored.digest].into_iter().collect()
    );
    write(Some((r1.pos, vec![r1.id.clone()])), None);
    // the superseded revision still counts until compaction drops its body
    assert!(db.live_attachments().unwrap().contains(&stored.digest));
    db.compact().unwrap();
    assert!(db.live_attachments().unwrap().is_empty());
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2 * 3600;
    assert_eq!(
        db.reclaim_attachments_at(&HashSet::new(), later).unwrap(),
        11
    );
}
