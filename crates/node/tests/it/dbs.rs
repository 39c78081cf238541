//! Databases through the operations trait on a real RocksDB: listing them by name range
//! (`_all_dbs`) and describing them by name (`_dbs_info`), creating one (with
//! `[cluster] q`, partitioned or not, and the system databases that cannot be), its
//! security object (checked, and not editable on the authentication database), and
//! deleting it.

use serde_json::json;
use settee_node::dbs::{CreateDb, Limit, NameKey, NameRange};
use settee_node::Error;

use crate::common;
use common::fixture;

#[test]
fn databases_are_created_secured_and_deleted() {
    let f = fixture();
    let fabric = f.fabric();
    f.node.config.set("cluster", "q", "4").unwrap();
    fabric.create_db("plain", CreateDb::default()).unwrap();
    assert_eq!(
        f.node.couch.get("plain").unwrap().props().q,
        4,
        "[cluster] q"
    );
    let opts = CreateDb {
        q: Some(2),
        partitioned: true,
        ..Default::default()
    };
    fabric.create_db("parts", opts.clone()).unwrap();
    let props = f.node.couch.get("parts").unwrap().props();
    assert_eq!((props.q, props.partitioned), (2, true));
    assert!(matches!(
        fabric.create_db("plain", CreateDb::default()),
        Err(Error::Db(settee_db::Error::DbExists))
    ));
    assert!(matches!(
        fabric.create_db("a/_users", opts),
        Err(Error::BadRequest(r)) if r == "Cannot partition a system database"
    ));

    let sec =
        json!({"members": {"names": ["bob"], "roles": []}, "admins": {"names": [], "roles": []}});
    fabric.set_security("plain", sec.clone()).unwrap();
    assert_eq!(fabric.get_security("plain").unwrap(), sec);
    assert!(matches!(
        fabric.set_security("plain", json!({"members": {"names": "bob"}})),
        Err(Error::Bare(_))
    ));
    fabric.create_db("_users", CreateDb::default()).unwrap();
    assert!(
        f.node
            .couch
            .get("_users")
            .unwrap()
            .open_doc("_design/_auth", None)
            .is_ok(),
        "the authentication database is born with _design/_auth"
    );
    assert!(matches!(
        fabric.set_security("_users", sec),
        Err(Error::Forbidden(_))
    ));

    fabric.delete_db("plain").unwrap();
    assert!(matches!(
        fabric.get_security("plain"),
        Err(Error::Db(settee_db::Error::DbNotFound))
    ));
}

#[test]
fn databases_are_listed_by_range_and_described_by_name() {
    let f = fixture();
    let fabric = f.fabric();
    for name in ["apple", "banana", "cherry"] {
        fabric.create_db(name, CreateDb::default()).unwrap();
    }
    let all = |range: NameRange| fabric.all_dbs(&range).unwrap();
    assert_eq!(
        all(NameRange::default()),
        ["apple", "banana", "cherry", "db"]
    );
    let name = |n: &str| Some(NameKey::Name(n.into()));
    let range = NameRange {
        start: name("b"),
        end: name("cherry"),
        inclusive_end: false,
        ..NameRange::default()
    };
    assert_eq!(all(range), ["banana"]);
    let range = NameRange {
        start: name("cherry"),
        descending: true,
        skip: 1,
        limit: 1,
        ..NameRange::default()
    };
    assert_eq!(all(range), ["banana"]);
    // A key that is no string sorts before every name, as an Erlang term does.
    let range = NameRange {
        end: Some(NameKey::NonString),
        ..NameRange::default()
    };
    assert!(all(range).is_empty());

    let info = fabric
        .dbs_info(vec![json!("banana"), json!("nope"), json!(7)])
        .unwrap();
    assert_eq!(info[0]["key"], "banana");
    assert_eq!(info[0]["info"]["db_name"], "banana");
    assert_eq!(info[1], json!({"key": "nope", "error": "not_found"}));
    assert_eq!(info[2], json!({"key": 7, "error": "not_found"}));
}

#[test]
fn shards_limits_and_compaction() {
    let f = fixture();
    let fabric = f.fabric();
    let opts = CreateDb {
        q: Some(2),
        partitioned: true,
        ..Default::default()
    };
    fabric.create_db("parts", opts).unwrap();
    let shards = fabric.shards("parts", None).unwrap();
    let ranges: Vec<&String> = shards["shards"].as_object().unwrap().keys().collect();
    assert_eq!(ranges, ["00000000-7fffffff", "80000000-ffffffff"]);
    let one = fabric.shards("parts", Some("p:doc")).unwrap();
    assert_eq!(one["nodes"], json!([settee_core::node::name()]));
    // A partitioned database's ids name their partition.
    assert!(fabric.shards("parts", Some("nopartition")).is_err());

    assert_eq!(fabric.get_limit("db", Limit::Revs).unwrap(), 1000);
    fabric.set_limit("db", Limit::Revs, 7).unwrap();
    assert_eq!(fabric.get_limit("db", Limit::Revs).unwrap(), 7);
    fabric.set_limit("db", Limit::PurgedInfos, 50).unwrap();
    assert_eq!(fabric.get_limit("db", Limit::PurgedInfos).unwrap(), 50);
    assert!(fabric.compact_db("nope").is_err());
    fabric.compact_db("db").unwrap();
    // The compaction runs on a thread of its own: wait for it to end.
    while f
        .node
        .active_tasks()
        .iter()
        .any(|t| t["type"] == "database_compaction")
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
