//! The node's view-query seam, run against the local node on a real RocksDB in a temporary
//! directory with the real JavaScript engine: arguments checked against the view as
//! CouchDB checks them, rows and reductions rendered as CouchDB's, `include_docs`. A
//! cluster coordinator offering the same operations must pass the same checks.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_wire::mrargs::MrArgs;
use settee_wire::Params;

mod common;
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
