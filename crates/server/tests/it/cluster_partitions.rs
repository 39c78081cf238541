//! Partitions of a clustered database: a partition's documents all live in one range (they
//! are placed by the partition), so that range's copy answers for it, on every member.

use crate::common;

use common::cluster::three_members;
use serde_json::json;

#[test]
fn a_partitions_info_is_its_ranges_on_every_member() {
    let (_etcd, _dirs, nodes) = three_members();
    let r = nodes[0].put("/pt?q=4&n=2&partitioned=true", "");
    assert_eq!(r.status, 201, "{}", r.text);
    let docs: Vec<_> = (0..6)
        .map(|i| json!({"_id": format!("p:{i}"), "v": i}))
        .chain([json!({"_id": "q:0"})])
        .collect();
    let r = nodes[1].post("/pt/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let del = nodes[1].get("/pt/p:5").json()["_rev"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(nodes[2].delete(&format!("/pt/p:5?rev={del}")).status, 200);

    for n in &nodes {
        let info = n.get("/pt/_partition/p").json();
        let keys: Vec<&str> = info
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "db_name",
                "sizes",
                "partition",
                "doc_count",
                "doc_del_count"
            ]
        );
        assert_eq!(info["db_name"], "pt");
        assert_eq!(info["partition"], "p");
        assert_eq!(
            (&info["doc_count"], &info["doc_del_count"]),
            (&json!(5), &json!(1))
        );
        assert!(info["sizes"]["external"].as_u64().unwrap() > 0, "{info}");
        assert_eq!(n.get("/pt/_partition/q").json()["doc_count"], 1);
        let none = n.get("/pt/_partition/none").json();
        assert_eq!(
            (&none["doc_count"], &none["doc_del_count"]),
            (&json!(0), &json!(0))
        );
    }
    // The node's refusals come first, as on a node.
    assert_eq!(nodes[0].get("/pt/_partition/_bad").status, 400);
    assert_eq!(nodes[0].put("/plain", "").status, 201);
    let r = nodes[0].get("/plain/_partition/p");
    assert_eq!(r.status, 400, "{}", r.text);
}

/// A partition's view query on a clustered database answers as a single node's: only the
/// partition's range is asked, through its copy's own partition path.
#[test]
fn a_partitions_view_answers_as_on_a_single_node() {
    let (_etcd, _dirs, nodes) = three_members();
    let single = common::Server::start();
    let ddoc = json!({"_id": "_design/d", "views": {
        "v": {"map": "function(d) { if (d.n) emit(d.n, d.n); }", "reduce": "_sum"}}});
    let docs: Vec<_> = (0..8)
        .map(|i| json!({"_id": format!("{}:{i}", ["p", "q"][i % 2]), "n": i}))
        .chain([ddoc])
        .collect();
    let docs = json!({ "docs": docs }).to_string();
    assert_eq!(nodes[0].put("/pv?q=4&n=2&partitioned=true", "").status, 201);
    assert_eq!(single.put("/pv?partitioned=true", "").status, 201);
    assert_eq!(nodes[1].post("/pv/_bulk_docs", &docs).status, 201);
    assert_eq!(single.post("/pv/_bulk_docs", &docs).status, 201);
    let queries = [
        "/pv/_partition/p/_design/d/_view/v?reduce=false",
        "/pv/_partition/q/_design/d/_view/v?reduce=false&descending=true&limit=2",
        "/pv/_partition/q/_design/d/_view/v?reduce=false&include_docs=true&skip=1",
        "/pv/_partition/p/_design/d/_view/v",
        "/pv/_partition/q/_design/d/_view/v?group=true",
        "/pv/_partition/none/_design/d/_view/v?reduce=false",
        "/pv/_design/d/_view/v",
    ];
    for q in queries {
        let want = single.get(q);
        for n in &nodes {
            let got = n.get(q);
            // `total_rows` and `offset` are the partition's range's copy's, as a clustered
            // CouchDB's are its shard's; rows, reductions and refusals are the node's.
            let (mut got, mut want) = (got.json(), want.json());
            for v in [&mut got, &mut want] {
                if let Some(o) = v.as_object_mut() {
                    o.remove("total_rows");
                    o.remove("offset");
                }
            }
            assert_eq!(got, want, "{q}");
        }
        assert_eq!(nodes[2].get(q).status, want.status, "{q}");
    }
}
