//! The node's `_all_docs` seam, run against the local node on a real RocksDB in a
//! temporary directory: ranges, `skip`/`limit` with CouchDB's offset, `keys` with missing
//! and deleted ids, `include_docs`, and the design and local namespaces. A cluster
//! coordinator offering the same operations must pass the same checks.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_node::all_docs::{Namespace, Query};
use settee_wire::mrargs::MrArgs;
use settee_wire::Params;

use crate::common;
use common::{answer, fixture, write, Fixture};

/// `a`…`e`, `_design/x`, a deleted `gone` and a local document.
fn node() -> Fixture {
    let f = fixture();
    let mut docs: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| json!({"_id": id, "v": id}))
        .collect();
    docs.push(json!({"_id": "_design/x", "views": {}}));
    docs.push(json!({"_id": "gone", "_deleted": true}));
    write(&f.db, docs);
    let local = settee_db::LocalUpdate {
        id: "_local/cp".into(),
        rev: None,
        deleted: false,
        body: b"{\"n\":1}".to_vec(),
    };
    f.db.update_local(local)
        .unwrap()
        .blocking_recv()
        .unwrap()
        .unwrap();
    f
}

fn list(f: &Fixture, ns: Namespace, query: &str) -> Value {
    let args = MrArgs::from_query(&Params::parse(Some(query))).unwrap();
    let q = Query::from_args(args).unwrap();
    answer(|out| f.fabric().all_docs("db", &UserCtx::default(), q, ns, out)).unwrap()
}

fn ids(answer: &Value) -> Vec<&str> {
    answer["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect()
}

#[test]
fn ranges_skip_limit_and_the_offset() {
    let f = node();
    let all = list(&f, Namespace::All, "");
    assert_eq!(all["total_rows"], 6);
    let info = f.fabric().db_info("db").unwrap();
    assert_eq!(
        (info["doc_count"].clone(), info["doc_del_count"].clone()),
        (json!(6), json!(1))
    );
    assert!(matches!(
        f.fabric().db_info("nope"),
        Err(settee_node::Error::Db(settee_db::Error::DbNotFound))
    ));
    assert_eq!(ids(&all), ["_design/x", "a", "b", "c", "d", "e"]);
    let page = list(&f, Namespace::All, "startkey=\"b\"&skip=1&limit=2");
    assert_eq!(
        (page["offset"].clone(), ids(&page)),
        (json!(3), vec!["c", "d"])
    );
    let back = list(
        &f,
        Namespace::All,
        "descending=true&endkey=\"c\"&inclusive_end=false",
    );
    assert_eq!(ids(&back), ["e", "d"]);
    let design = list(&f, Namespace::Design, "");
    assert_eq!(
        (design["total_rows"].clone(), ids(&design)),
        (json!(1), vec!["_design/x"])
    );
}

#[test]
fn keys_and_documents() {
    let f = node();
    let keyed = list(
        &f,
        Namespace::All,
        "keys=[\"c\",\"nope\",\"gone\"]&include_docs=true",
    );
    let rows = keyed["rows"].as_array().unwrap();
    assert_eq!(rows[0]["doc"]["v"], "c");
    assert_eq!(rows[1], json!({"key": "nope", "error": "not_found"}));
    assert_eq!(rows[2]["value"]["deleted"], true);
    assert_eq!(rows[2]["doc"], Value::Null);
    assert_eq!(keyed["offset"], Value::Null);
    let local = list(&f, Namespace::Local, "include_docs=true");
    assert_eq!(local["rows"][0]["id"], "_local/cp");
    assert_eq!(
        local["rows"][0]["doc"],
        json!({"_id": "_local/cp", "_rev": "0-1", "n": 1})
    );
}

#[test]
fn a_partition_query_on_an_unpartitioned_range_is_refused() {
    let args = MrArgs::from_query(&Params::parse(Some("partition=p"))).unwrap();
    let refused = Query::from_args(args);
    assert!(matches!(refused, Err(settee_node::Error::QueryParse(_))));
}
