//! Every database has a uuid (its update sequences carry the first 7 digits): made at
//! creation, kept across restarts, another one for a database created again under the same
//! name, and given on open to a database written before uuids were kept.

use md5::{Digest, Md5};
use settee_db::{Config, Couch};
use settee_storage::{Cf, Read, Store, StoreOptions};
use std::path::Path;
use std::sync::Arc;

/// Opens the store again, waiting for background work that still holds the last one
/// (the compaction after a deletion) to let go of it.
fn open(dir: &Path) -> Arc<Couch> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Couch::open(
            &dir.join("store"),
            Config::default(),
            &StoreOptions::default(),
        ) {
            Ok(couch) => return couch,
            Err(e) if std::time::Instant::now() > deadline => panic!("{e:?}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[test]
fn made_at_creation_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let couch = open(dir.path());
    let a = couch
        .create("a", serde_json::json!({}))
        .unwrap()
        .props()
        .uuid;
    let b = couch
        .create("b", serde_json::json!({}))
        .unwrap()
        .props()
        .uuid;
    assert!(is_uuid(&a) && is_uuid(&b), "{a} {b}");
    assert_ne!(a, b);
    couch.delete("b").unwrap();
    let b2 = couch
        .create("b", serde_json::json!({}))
        .unwrap()
        .props()
        .uuid;
    assert_ne!(b, b2, "a database created again is another database");
    // Changing other properties keeps it.
    let db = couch.get("a").unwrap();
    db.set_props(|p| p.revs_limit = 7).unwrap();
    assert_eq!(db.props().uuid, a);
    drop((db, couch));
    let couch = open(dir.path());
    assert_eq!(couch.get("a").unwrap().props().uuid, a);
    assert_eq!(couch.get("b").unwrap().props().uuid, b2);
}

#[test]
fn older_databases_get_one_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let couch = open(dir.path());
    let id = couch.create("old", serde_json::json!({})).unwrap().id;
    drop(couch);
    // The properties as a Settee before uuids wrote them (`v` 2).
    {
        let store = Store::open(&dir.path().join("store"), &StoreOptions::default()).unwrap();
        let mut key = b"P".to_vec();
        key.extend_from_slice(&id.to_be_bytes());
        let v2 = br#"{"v":2,"revs_limit":1000,"purged_infos_limit":1000,"security":{}}"#;
        let mut batch = store.batch();
        batch.put(Cf::Meta, &key, v2);
        store.write(batch, true).unwrap();
    }
    let derived = hex::encode(Md5::digest(format!("settee-db-uuid/{id}/old")));
    let couch = open(dir.path());
    assert_eq!(couch.get("old").unwrap().props().uuid, derived);
    drop(couch);
    // Written back: the record now has it.
    let store = Store::open(&dir.path().join("store"), &StoreOptions::default()).unwrap();
    let mut key = b"P".to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    let raw = store.get(Cf::Meta, &key).unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        (v["v"].as_u64(), v["uuid"].as_str()),
        (Some(3), Some(derived.as_str()))
    );
}
