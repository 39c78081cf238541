//! The node's view-query seam, run against the local node on a real RocksDB in a temporary
//! directory with the real JavaScript engine: arguments checked against the view as
//! CouchDB checks them, rows and reductions rendered as CouchDB's, `include_docs`. A
//! cluster coordinator offering the same operations must pass the same checks.

use serde_json::{json, Value};
use settee_node::views::{run, ViewArgs};
use settee_wire::mrargs::MrArgs;
use settee_wire::Params;

mod common;
use common::{fixture, write, Fixture};

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

fn args(f: &Fixture, query: &str) -> settee_node::Result<ViewArgs> {
    let (g, n) = f.node.view_group(&f.db, "v", "by_tag")?;
    let a = MrArgs::from_query(&Params::parse(Some(query)))?;
    ViewArgs::for_view(a, &g, n, &f.node.config)
}

fn query(f: &Fixture, q: &str) -> Value {
    let (g, n) = f.node.view_group(&f.db, "v", "by_tag").unwrap();
    let a = args(f, q).unwrap();
    let mut body = Vec::new();
    run(&f.node.views, &f.db, &g, n, &a, &mut |b| {
        body.extend_from_slice(b);
        true
    })
    .unwrap();
    serde_json::from_slice(&body).unwrap()
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
    let e = args(&f, "include_docs=true").unwrap_err();
    assert!(
        matches!(&e, settee_node::Error::Wire(settee_wire::Error::QueryParse(r)) if r.contains("include_docs")),
        "{e:?}"
    );
    let e = args(&f, "partition=p").unwrap_err();
    assert!(matches!(e, settee_node::Error::QueryParse(_)), "{e:?}");
    let missing = f.node.view_group(&f.db, "v", "nope");
    assert!(matches!(&missing, Err(settee_node::Error::NotFound(r)) if r == "missing_named_view"));
}
