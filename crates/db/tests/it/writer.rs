//! The per-database writer ends its thread when idle and starts again on the next write;
//! writes racing that hand-over are all committed.

use settee_db::{Config, Couch, Database, UpdateResult};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open(idle: Duration) -> (tempfile::TempDir, Arc<Couch>) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        writer_idle: idle,
        ..Config::default()
    };
    let couch = Couch::open(
        &dir.path().join("store"),
        config,
        &settee_storage::StoreOptions::default(),
    )
    .unwrap();
    (dir, couch)
}

fn put(db: &Arc<Database>, id: &str) {
    let doc = settee_core::parse_doc(serde_json::json!({"_id": id})).unwrap();
    let rx = db.update_docs(vec![doc], true).unwrap();
    let results = rx.blocking_recv().unwrap().unwrap();
    assert!(matches!(results[0], UpdateResult::Ok { .. }), "{results:?}");
}

fn wait_idle(db: &Database) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.writer_running() {
        assert!(Instant::now() < deadline, "the writer never went idle");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn idle_writer_ends_and_restarts() {
    let (_dir, couch) = open(Duration::from_millis(30));
    let db = couch.create("db", serde_json::json!({})).unwrap();
    assert!(!db.writer_running());
    put(&db, "a");
    assert!(db.writer_running());
    wait_idle(&db);
    put(&db, "b");
    wait_idle(&db);
    assert_eq!(db.stats().doc_count, 2);
}

#[test]
fn writes_racing_the_idle_hand_over_all_land() {
    let (_dir, couch) = open(Duration::from_millis(2));
    let db = couch.create("db", serde_json::json!({})).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    put(&db, &format!("{t}-{i}"));
                    // Around the idle timeout, so writers end and start throughout.
                    std::thread::sleep(Duration::from_micros(500 * (i % 7)));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(db.stats().doc_count, 600);
}
