//! Databases through the operations trait on a real RocksDB: creating one (with
//! `[cluster] q`, partitioned or not, and the system databases that cannot be), its
//! security object (checked, and not editable on the authentication database), and
//! deleting it.

use serde_json::json;
use settee_node::dbs::CreateDb;
use settee_node::Error;

mod common;
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
    };
    fabric.create_db("parts", opts).unwrap();
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
        Err(Error::InvalidSecurity(_))
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
