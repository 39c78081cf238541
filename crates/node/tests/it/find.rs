//! The node's Mango seam, run against the local node on a real RocksDB in a temporary
//! directory: planning (and its errors), a `_find` over `_all_docs` with skip, limit and a
//! bookmark to resume from, and a json index created, explained, used (built by the
//! native `query` language) and deleted through the trait. A cluster coordinator offering the same operations must pass the same checks.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_mango::opts::{FindOpts, IndexOpts};
use settee_node::mango_index::{BulkDeleted, Created};

use crate::common;
use common::{answer, fixture, write, Fixture};

/// Ten documents `d0`…`d9` (`n` their number, `kind` even or odd).
fn node() -> Fixture {
    let f = fixture();
    let docs = (0..10)
        .map(|n| json!({"_id": format!("d{n}"), "n": n, "kind": if n % 2 == 0 { "even" } else { "odd" }}))
        .collect();
    write(&f.db, docs);
    f
}

fn opts(body: Value) -> FindOpts {
    let Value::Object(body) = body else {
        panic!("an object")
    };
    FindOpts::parse(&body, 25).unwrap()
}

/// A `_find`'s answer, parsed.
fn find(f: &Fixture, o: &FindOpts) -> Value {
    answer(|out| f.fabric().find("db", &UserCtx::default(), o, out)).unwrap()
}

fn ids(answer: &Value) -> Vec<&str> {
    answer["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap())
        .collect()
}

#[test]
fn all_docs_with_skip_limit_and_a_bookmark() {
    let f = node();
    let first = find(
        &f,
        &opts(
            json!({"selector": {"n": {"$gte": 3}}, "skip": 1, "limit": 3, "execution_stats": true}),
        ),
    );
    assert_eq!(ids(&first), ["d4", "d5", "d6"]);
    assert_eq!(first["execution_stats"]["results_returned"], 3);
    // The unindexed query says so.
    assert!(first["warning"]
        .as_str()
        .unwrap()
        .contains("No matching index found"));
    let bookmark = first["bookmark"].clone();
    let rest = find(
        &f,
        &opts(json!({"selector": {"n": {"$gte": 3}}, "limit": 3, "bookmark": bookmark})),
    );
    assert_eq!(ids(&rest), ["d7", "d8", "d9"]);
    let projected = find(
        &f,
        &opts(json!({"selector": {"kind": "odd", "n": {"$lt": 4}}, "fields": ["n"]})),
    );
    assert_eq!(projected["docs"], json!([{"n": 1}, {"n": 3}]));
}

fn index_opts(body: Value) -> IndexOpts {
    let Value::Object(body) = body else {
        panic!("an object")
    };
    IndexOpts::parse(&body).unwrap()
}

fn names(f: &Fixture) -> Vec<String> {
    let all = f.fabric().indexes("db").unwrap();
    all.into_iter().map(|i| i.name).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_index_is_created_serves_its_sort_and_is_deleted() {
    let f = node();
    let admin = UserCtx {
        name: Some("root".into()),
        roles: vec!["_admin".into()],
    };
    let asked = json!({"index": {"fields": ["n"]}, "ddoc": "by-n", "name": "n"});
    let made = f
        .fabric()
        .create_index("db", &admin, index_opts(asked.clone()))
        .await
        .unwrap();
    let expected = Created {
        id: "_design/by-n".into(),
        name: "n".into(),
        created: true,
    };
    assert_eq!(made, expected);
    // The same index again exists already.
    let again = f.fabric().create_index("db", &admin, index_opts(asked));
    assert!(!again.await.unwrap().created);
    assert_eq!(names(&f), ["_all_docs", "n"]);

    let o = opts(json!({"selector": {"n": {"$gt": 6}}, "sort": [{"n": "desc"}]}));
    let explained = tokio::task::block_in_place(|| f.fabric().explain("db", &o)).unwrap();
    assert_eq!(explained["index"]["ddoc"], "_design/by-n");
    assert_eq!(explained["index"]["name"], "n");
    assert_eq!(
        ids(&tokio::task::block_in_place(|| find(&f, &o))),
        ["d9", "d8", "d7"]
    );

    // Only database admins write design documents.
    let bob = UserCtx {
        name: Some("bob".into()),
        roles: Vec::new(),
    };
    let other = index_opts(json!({"index": {"fields": ["kind"]}}));
    let e = f
        .fabric()
        .create_index("db", &bob, other)
        .await
        .unwrap_err();
    assert!(e.is_refusal(), "{e:?}");
    let e = f.fabric().delete_index("db", &bob, "by-n", Some("n")).await;
    assert!(e.unwrap_err().is_refusal());

    let gone = f.fabric().delete_index("db", &admin, "by-n", Some("other"));
    assert!(!gone.await.unwrap());
    let gone = f
        .fabric()
        .delete_index("db", &admin, "_design/by-n", Some("n"));
    assert!(gone.await.unwrap());
    assert_eq!(names(&f), ["_all_docs"]);
    let asked = vec!["by-n".to_string(), "_design/none".to_string()];
    let bulk = f.fabric().bulk_delete_indexes("db", &admin, asked).await;
    let expected = BulkDeleted {
        success: Vec::new(),
        fail: vec!["_design/none".into(), "_design/by-n".into()],
    };
    assert_eq!(bulk.unwrap(), expected);
}

#[test]
fn planning_errors_are_couchdbs() {
    let f = node();
    // No index serves a sort on `n` yet.
    let sorted = opts(json!({"selector": {"n": {"$gt": 0}}, "sort": ["n"]}));
    let e = f.node.plan_find(&f.db, &sorted, false).unwrap_err();
    assert!(matches!(e, settee_node::Error::Mango(_)), "{e:?}");
    let mut partitioned = opts(json!({"selector": {}}));
    partitioned.partition = "p".into();
    let e = f.node.plan_find(&f.db, &partitioned, false).unwrap_err();
    assert!(
        matches!(&e, settee_node::Error::BadRequest(r) if r.contains("`partition` parameter")),
        "{e:?}"
    );
}
