//! The node's Mango seam, run against the local node on a real RocksDB in a temporary
//! directory: planning (and its errors), a `_find` over `_all_docs` with skip, limit and a
//! bookmark to resume from, and one over a json index built by the native `query`
//! language. A cluster coordinator offering the same operations must pass the same checks.

use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_mango::opts::{FindOpts, IndexOpts};

mod common;
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

#[test]
fn a_json_index_serves_its_sort() {
    let f = node();
    let Value::Object(body) = json!({"index": {"fields": ["n"]}, "ddoc": "by-n", "name": "n"})
    else {
        unreachable!()
    };
    let creation =
        settee_mango::index::create(&IndexOpts::parse(&body).unwrap(), |_| None).unwrap();
    let mut ddoc: Map<String, Value> = creation.body.unwrap();
    ddoc.insert("_id".into(), json!(creation.ddoc_id));
    let rx =
        f.db.update_docs(
            vec![settee_core::parse_doc(Value::Object(ddoc)).unwrap()],
            true,
        )
        .unwrap();
    assert!(rx.blocking_recv().unwrap().is_ok());
    let o = opts(json!({"selector": {"n": {"$gt": 6}}, "sort": [{"n": "desc"}]}));
    let plan = f.node.plan_find(&f.db, &o, true).unwrap();
    assert_eq!(plan.index.as_ref().unwrap().name, "n");
    let explained = settee_node::find::explain(&f.db, &o, &plan);
    assert_eq!(explained["index"]["ddoc"], "_design/by-n");
    assert_eq!(ids(&find(&f, &o)), ["d9", "d8", "d7"]);
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
