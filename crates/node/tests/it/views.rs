//! The node's view-query seam, run against the local node on a real RocksDB in a temporary
//! directory with the real JavaScript engine: arguments checked against the view as
//! CouchDB checks them, rows and reductions rendered as CouchDB's, `include_docs`. A
//! cluster coordinator offering the same operations must pass the same checks.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_wire::mrargs::MrArgs;
use settee_wire::Params;

use crate::common;
use common::{answer, fixture, write, Fixture};

/// Six documents `d0`…`d5` tagged `low` or `high`, and `_design/v` with a view emitting
/// `[tag, n]` reduced with `_sum`.
fn node() -> Fixture {
    let f = fixture();
    let mut docs: Vec<Value> = (0..6)
        .map(|n| json!({"_id": format!("d{n}"), "n": n, "tag": if n < 3 { "low" } else { "high" }}))
        .collect();
    docs.push(json!({
        "_id": "_design/v",
        "views": {"by_tag": {
            "map": "function(doc) { if (doc.tag) emit([doc.tag, doc.n], doc.n); }",
            "reduce": "_sum"
        }}
    }));
    write(&f.db, docs);
    f
}

/// A query of `_design/v/_view/by_tag`, its answer parsed.
fn try_query(f: &Fixture, view: &str, q: &str) -> settee_node::Result<Value> {
    let args = MrArgs::from_query(&Params::parse(Some(q)))?;
    answer(|out| {
        f.fabric()
            .query_view("db", &UserCtx::default(), "v", view, args, out)
    })
}

fn query(f: &Fixture, q: &str) -> Value {
    try_query(f, "by_tag", q).unwrap()
}

#[test]
fn rows_and_reductions() {
    let f = node();
    let rows = query(
        &f,
        "reduce=false&startkey=[\"high\"]&endkey=[\"high\",{}]&limit=2",
    );
    assert_eq!(rows["total_rows"], 6);
    assert_eq!(rows["offset"], 0);
    assert_eq!(
        rows["rows"],
        json!([
            {"id": "d3", "key": ["high", 3], "value": 3},
            {"id": "d4", "key": ["high", 4], "value": 4}
        ])
    );
    assert_eq!(query(&f, "")["rows"], json!([{"key": null, "value": 15}]));
    assert_eq!(
        query(&f, "group_level=1")["rows"],
        json!([{"key": ["high"], "value": 12}, {"key": ["low"], "value": 3}])
    );
    let docs = query(&f, "reduce=false&include_docs=true&descending=true&limit=1");
    assert_eq!(docs["rows"][0]["id"], "d2");
    assert_eq!(docs["rows"][0]["doc"]["n"], 2);
}

#[test]
fn arguments_are_checked_as_couchdb_checks_them() {
    let f = node();
    // The grammar's own check (`validate_args`), then the view's.
    let e = try_query(&f, "by_tag", "include_docs=true").unwrap_err();
    assert!(
        matches!(&e, settee_node::Error::Wire(settee_wire::Error::QueryParse(r)) if r.contains("include_docs")),
        "{e:?}"
    );
    let e = try_query(&f, "by_tag", "partition=p").unwrap_err();
    assert!(matches!(e, settee_node::Error::QueryParse(_)), "{e:?}");
    let missing = try_query(&f, "nope", "");
    assert!(matches!(&missing, Err(settee_node::Error::NotFound(r)) if r == "missing_named_view"));
}

#[test]
fn several_queries_index_information_compaction_and_cleanup() {
    let f = node();
    let fabric = f.fabric();
    let queries = [
        json!({"reduce": false, "limit": 1}),
        json!({"group_level": 1}),
    ];
    let mut bodies = vec![Vec::new(); 2];
    let user = UserCtx::default();
    fabric
        .view_queries(
            "db",
            &user,
            "v",
            "by_tag",
            MrArgs::default(),
            &queries,
            &mut |i, b| {
                bodies[i].extend_from_slice(b);
                true
            },
        )
        .unwrap();
    let first: Value = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(first["rows"].as_array().unwrap().len(), 1);
    let second: Value = serde_json::from_slice(&bodies[1]).unwrap();
    let groups = json!([{"key": ["high"], "value": 12}, {"key": ["low"], "value": 3}]);
    assert_eq!(second["rows"], groups);
    // Every query is checked before any runs.
    let bad = [json!({"limit": 1}), json!("not an object")];
    let mut called = false;
    let e = fabric.view_queries(
        "db",
        &user,
        "v",
        "by_tag",
        MrArgs::default(),
        &bad,
        &mut |_, _| {
            called = true;
            true
        },
    );
    assert!(matches!(e, Err(settee_node::Error::BadRequest(_))) && !called);

    let info = fabric.design_info("db", "v").unwrap();
    assert_eq!(info["name"], "v");
    assert_eq!(info["view_index"]["language"], "javascript");
    assert_eq!(info["view_index"]["updates_pending"]["total"], 0);
    fabric.compact_design("db", "v").unwrap();
    assert!(fabric.compact_design("db", "nope").is_err());
    // The compaction runs on a thread of its own: the test waits for it rather than end
    // with it still writing.
    let running =
        || fabric.design_info("db", "v").unwrap()["view_index"]["compact_running"] == true;
    while running() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    fabric.view_cleanup("db").unwrap();
    // The index a design document uses is kept.
    assert_eq!(query(&f, "reduce=false")["total_rows"], 6);
}
