//! The node's `_changes` seam, run against the local node on a real RocksDB in a temporary
//! directory with the real JavaScript engine: every filter, where a feed ends (`last_seq`,
//! `pending`), the replicator's read and a longpoll through a [`FeedOut`]. A cluster
//! coordinator offering the same operations must pass the same checks.

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_core::SeqArg;
use settee_db::Database;
use settee_node::changes::{
    self, ChangesOpts, FeedOut, Filter, FilterSpec, Live, ReplicationFilter, ShownSeq,
};
use settee_node::design_filter::ReqInfo;
use settee_node::seqs;
use settee_node::Fabric;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use common::{fixture as node, write, Fixture};

/// Ten documents `d0`…`d9` (`n` their number, `even` on every other), then a design
/// document with a view emitting the even ones.
fn seed(db: &Arc<Database>) {
    write(
        db,
        (0..10)
            .map(|n| json!({"_id": format!("d{n}"), "n": n, "even": n % 2 == 0}))
            .collect(),
    );
    write(
        db,
        vec![json!({
            "_id": "_design/f",
            "views": {"even": {"map": "function(doc) { if (doc.even) emit(doc.n, null); }"}},
            "filters": {"small": "function(doc, req) { return doc.n < +req.query.below; }"}
        })],
    );
}

/// A normal feed: the ids of its rows, its `last_seq` and `pending`.
fn feed(db: &Database, o: &ChangesOpts) -> (Vec<String>, u64, u64) {
    let mut ids = Vec::new();
    let (last, pending) = changes::normal(db, o, &mut |_, row| {
        let row: Value = serde_json::from_slice(&row).unwrap();
        ids.push(row["id"].as_str().unwrap().to_string());
        true
    })
    .unwrap();
    (ids, last, pending)
}

/// A normal feed through the operations trait, with the filter `spec` names.
async fn through(f: &Fixture, o: &ChangesOpts, spec: FilterSpec) -> (Vec<String>, u64, u64) {
    let (fabric, user) = (f.fabric(), UserCtx::default());
    let o = fabric
        .changes_filter("db", &user, spec, o.clone(), Box::new(request))
        .await
        .unwrap();
    let mut ids = Vec::new();
    let end = tokio::task::block_in_place(|| {
        fabric.changes("db", &o, &mut |_, row| {
            let row: Value = serde_json::from_slice(row).unwrap();
            ids.push(row["id"].as_str().unwrap().to_string());
            true
        })
    })
    .unwrap();
    let ShownSeq::Node(last) = end.last_seq else {
        panic!("a node's feed ends at its own counter: {:?}", end.last_seq)
    };
    (ids, last, end.pending)
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn request() -> ReqInfo {
    ReqInfo::for_replication(
        "db",
        "f/small",
        &serde_json::Map::from_iter([("below".to_string(), json!(3))]),
        &json!(0),
        None,
        &settee_auth::UserCtx::default(),
    )
}

async fn resolved(f: &Fixture, spec: FilterSpec) -> ChangesOpts {
    let mut o = ChangesOpts::new(seqs(&f.db));
    o.filter = f
        .node
        .changes_filter(&f.db, spec, &mut o, request)
        .await
        .unwrap();
    o
}

#[tokio::test(flavor = "multi_thread")]
async fn every_change_then_the_end_of_the_feed() {
    let f = node();
    seed(&f.db);
    let mut o = ChangesOpts::new(seqs(&f.db));
    let (every, last, pending) = through(&f, &o, FilterSpec::None).await;
    assert_eq!(every.len(), 11);
    assert_eq!((last, pending), (11, 0));
    o.limit = Some(4);
    assert_eq!(
        through(&f, &o, FilterSpec::None).await,
        (ids(&["d0", "d1", "d2", "d3"]), 4, 7)
    );
    o.since = SeqArg::Seq(9);
    assert_eq!(
        through(&f, &o, FilterSpec::None).await,
        (ids(&["d9", "_design/f"]), 11, 0)
    );
    o.since = SeqArg::Now;
    assert_eq!(through(&f, &o, FilterSpec::None).await, (vec![], 11, 0));
    let mut o = ChangesOpts::new(seqs(&f.db));
    o.descending = true;
    o.limit = Some(2);
    assert_eq!(
        through(&f, &o, FilterSpec::None).await,
        (ids(&["_design/f", "d9"]), 10, 9)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn doc_ids_looked_up_or_scanned_agree() {
    let f = node();
    seed(&f.db);
    let wanted: HashSet<String> = ["d7", "d2", "nope"].map(String::from).into();
    let looked_up = resolved(&f, FilterSpec::DocIds(wanted.clone())).await;
    assert!(matches!(
        looked_up.filter,
        Filter::DocIds { lookup: true, .. }
    ));
    f.node
        .config
        .set_transient("couchdb", "changes_doc_ids_optimization_threshold", "1");
    let scanned = resolved(&f, FilterSpec::DocIds(wanted)).await;
    assert!(matches!(
        scanned.filter,
        Filter::DocIds { lookup: false, .. }
    ));
    let (rows, last, _) = feed(&f.db, &looked_up);
    assert_eq!(rows, ids(&["d2", "d7"]));
    assert_eq!(last, 11);
    assert_eq!(feed(&f.db, &scanned).0, rows);
}

#[tokio::test(flavor = "multi_thread")]
async fn design_selector_view_and_function_filters() {
    let f = node();
    seed(&f.db);
    let o = ChangesOpts::new(seqs(&f.db));
    assert_eq!(
        through(&f, &o, FilterSpec::Design).await.0,
        ids(&["_design/f"])
    );
    let selector = FilterSpec::Selector(json!({"n": {"$gt": 7}}));
    assert_eq!(through(&f, &o, selector).await.0, ids(&["d8", "d9"]));
    let view = FilterSpec::View("f".into(), "even".into());
    assert_eq!(
        through(&f, &o, view).await.0,
        ids(&["d0", "d2", "d4", "d6", "d8"])
    );
    // The function reads `req.query.below` (3) from the request it is told about.
    let function = FilterSpec::Function("f".into(), "small".into());
    assert_eq!(through(&f, &o, function).await.0, ids(&["d0", "d1", "d2"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn filters_name_what_is_missing() {
    let f = node();
    seed(&f.db);
    let mut o = ChangesOpts::new(seqs(&f.db));
    let missing = f
        .node
        .changes_filter(
            &f.db,
            FilterSpec::View("f".into(), "odd".into()),
            &mut o,
            request,
        )
        .await;
    assert!(
        matches!(&missing, Err(settee_node::Error::NotFound(r)) if r == "missing json key: odd"),
        "{missing:?}"
    );
    let params = settee_wire::Params::parse(Some("view=justone"));
    let bad = FilterSpec::parse(Some("_view"), &params, false, None);
    assert!(matches!(bad, Err(settee_node::Error::BadRequest(_))));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_replicators_read_waits_for_a_first_change() {
    let f = node();
    seed(&f.db);
    let (rows, last) = f
        .node
        .changes_for_replication(f.db.clone(), 0, 3, ReplicationFilter::All, None)
        .await
        .unwrap();
    assert_eq!((rows.len(), last), (3, 3));
    let db = f.db.clone();
    let writer = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(200));
        write(&db, vec![json!({"_id": "late"})]);
    });
    let (rows, last) = f
        .node
        .changes_for_replication(
            f.db.clone(),
            11,
            10,
            ReplicationFilter::Named {
                name: "_doc_ids".into(),
                query_params: serde_json::Map::from_iter([(
                    "doc_ids".to_string(),
                    json!(r#"["late"]"#),
                )]),
                user: Default::default(),
            },
            Some(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    writer.await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], "late");
    assert_eq!(last, 12);
}

/// A [`FeedOut`] that keeps what it is given.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<String>>>);

impl FeedOut for Kept {
    fn row(&mut self, _seq: Option<ShownSeq>, row: &[u8]) -> bool {
        let row: Value = serde_json::from_slice(row).unwrap();
        self.0
            .lock()
            .unwrap()
            .push(row["id"].as_str().unwrap().into());
        true
    }
    fn is_open(&self) -> bool {
        true
    }
    fn waiting(&mut self) -> BoxFuture<'_, ()> {
        self.0.lock().unwrap().push("(waiting)".into());
        Box::pin(std::future::ready(()))
    }
    fn beat(&mut self) -> BoxFuture<'_, ()> {
        self.0.lock().unwrap().push("(beat)".into());
        Box::pin(std::future::ready(()))
    }
    fn gone(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
    fn end(self: Box<Self>, end: settee_node::Result<(ShownSeq, u64)>) -> BoxFuture<'static, ()> {
        let said = match end {
            Ok((ShownSeq::Node(last), pending)) => format!("(end {last} {pending})"),
            Ok((packed, _)) => panic!("a node's feed ends at its own counter: {packed:?}"),
            Err(e) => format!("(error {e})"),
        };
        self.0.lock().unwrap().push(said);
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_longpoll_waits_for_the_next_change() {
    let f = node();
    seed(&f.db);
    let mut o = ChangesOpts::new(seqs(&f.db));
    o.since = SeqArg::Now;
    let kept = Kept::default();
    let (node, out) = (f.node.clone(), Box::new(kept.clone()));
    let live = Live {
        longpoll: true,
        max_duration: None,
    };
    let feed = tokio::spawn(async move { node.live_changes("db", o, live, out).await });
    // The write comes once the feed has found nothing and waits.
    while !kept.0.lock().unwrap().iter().any(|k| k == "(waiting)") {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    write(&f.db, vec![json!({"_id": "new"})]);
    feed.await.unwrap();
    let seen = kept.0.lock().unwrap().clone();
    assert_eq!(seen, ["(waiting)", "(beat)", "new", "(end 12 0)"]);

    // A continuous feed with a limit ends once it has sent that many rows; one of a
    // database that is not there ends with its error.
    let mut o = ChangesOpts::new(seqs(&f.db));
    o.limit = Some(3);
    let kept = Kept::default();
    let fabric = f.fabric();
    let out = Box::new(kept.clone());
    fabric
        .live_changes("db", o.clone(), Live::default(), out)
        .await;
    let seen = kept.0.lock().unwrap().clone();
    assert_eq!(seen, ["d0", "d1", "d2", "(end 3 9)"]);
    let kept = Kept::default();
    let out = Box::new(kept.clone());
    fabric.live_changes("nope", o, Live::default(), out).await;
    let seen = kept.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].starts_with("(error"), "{seen:?}");
}

/// The query string as CouchDB reads it: names folded and later values winning, the
/// switches only `true` turns on, timing capped by `changes_timeout`, and the first bad
/// parameter as the error.
#[test]
fn query_strings_are_folded_and_checked_in_order() {
    let f = node();
    let params = |q: &str| settee_wire::Params::parse(Some(q));
    let parse = |q: &str| {
        let (all, folded) = changes::fold_params(&params(q));
        ChangesOpts::parse(&all, &folded, Duration::from_secs(30), seqs(&f.db))
    };
    let o =
        parse("LIMIT=5&limit=2&descending=true&descending=false&heartbeat=true&timeout=99999999")
            .unwrap();
    assert_eq!(o.limit, Some(2), "a later value replaces an earlier one");
    assert!(o.descending, "a switch stays on once on");
    assert_eq!(o.heartbeat, Some(Duration::from_secs(30)));
    assert_eq!(
        o.timeout,
        Duration::from_secs(30),
        "capped by changes_timeout"
    );
    let (_, folded) = changes::fold_params(&params("last-event-id=3"));
    assert_eq!(folded.get("since"), Some("3"));
    let reason = |q: &str| match parse(q).unwrap_err() {
        settee_node::Error::BadRequest(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reason("heartbeat=-1&style=nope"),
        "The heartbeat value should be a positive integer (in milliseconds)."
    );
    assert_eq!(
        reason("style=nope"),
        "Invalid `style` parameter: use main_only or all_docs"
    );
    assert_eq!(reason("seq_interval=0"), "invalid_seq_interval");
}
