//! Design functions through the operations trait, run by the real QuickJS on a real
//! RocksDB: a show's answer and its ETag (and the client's copy being current), an update
//! function writing its document (201 with the new revision and id) or answering alone,
//! CouchDB's refusals, a list over a view's and `_all_docs`' rows, and `_rewrite` by
//! rules and by function.

use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_core::rewrite::RewriteError;
use settee_node::design_filter::ReqInfo;
use settee_node::list::{External, ListCall, Piece};
use settee_node::render::{FnCall, Shown};
use settee_node::rewrite::{Failure, Rewrite, Rewrites};
use settee_node::Error;
use settee_wire::mrargs::MrArgs;

use crate::common;
use common::{fixture, write, Fixture};

fn node() -> Fixture {
    let f = fixture();
    write(
        &f.db,
        vec![
            json!({"_id": "a", "v": 1}),
            json!({"_id": "_design/f",
            "shows": {"s": "function(doc, req) { return {body: 'hello ' + (doc ? doc._id : 'none')}; }"},
            "views": {"v": {"map": "function(doc) { if (doc.v) emit(doc.v, null); }"}},
            "lists": {"ids": "function(head, req) { start({headers: {'X-List': 'yes'}}); var row; while (row = getRow()) send(row.id + ';'); return 'total ' + head.total_rows; }"},
            "updates": {
                "bump": "function(doc, req) { if (!doc) return [{_id: req.id, v: 0}, 'made']; doc.v += 1; return [doc, 'bumped']; }",
                "say": "function(doc, req) { return [null, {code: 202, body: 'nothing'}]; }"
            }}),
        ],
    );
    f
}

fn request(id: Option<&str>) -> ReqInfo {
    ReqInfo {
        method: "POST".into(),
        path: vec!["db".into(), "_design".into(), "f".into()],
        raw_path: "/db/_design/f".into(),
        query: Vec::new(),
        headers: Vec::new(),
        body: Value::String("undefined".into()),
        peer: "127.0.0.1".into(),
        cookie: Vec::new(),
        user: UserCtx::default(),
        id: id.map(String::from),
        form: Vec::new(),
    }
}

fn call(name: &str, id: Option<&str>) -> FnCall {
    FnCall {
        ddoc: "f".into(),
        name: name.into(),
        doc_id: id.map(String::from),
        req: request(id),
    }
}

fn header<'a>(ext: &'a External, name: &str) -> Option<&'a str> {
    ext.headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_show_answers_with_an_etag_and_honours_a_current_copy() {
    let f = node();
    let fabric = f.fabric();
    let shown = fabric
        .show("db", &call("s", Some("a")), None, &|_| false)
        .unwrap();
    let Shown::Answer(ext) = shown else {
        panic!("{shown:?}")
    };
    assert_eq!((ext.code, ext.body.as_slice()), (200, &b"hello a"[..]));
    assert_eq!(header(&ext, "Vary"), Some("Accept"));
    let etag = header(&ext, "ETag").unwrap().to_string();
    let again = fabric
        .show("db", &call("s", Some("a")), None, &|t| t == etag)
        .unwrap();
    assert!(matches!(again, Shown::NotModified(t) if t == etag));
    // A missing document is null to the function; a missing function is CouchDB's 404.
    let Shown::Answer(none) = fabric
        .show("db", &call("s", Some("zz")), None, &|_| false)
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(none.body, b"hello none");
    assert!(matches!(
        fabric.show("db", &call("nope", None), None, &|_| false),
        Err(Error::NotFound(r)) if r == "missing json key: nope"
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_writes_its_document_or_answers_alone() {
    let f = node();
    let fabric = f.fabric();
    let user = UserCtx::default();
    let made = fabric
        .update("db", &user, call("bump", Some("new one")), false)
        .await
        .unwrap();
    assert_eq!(made.response.code, 201);
    let (id, rev) = made.written.unwrap();
    let rev = rev.unwrap();
    assert_eq!(id, "new one");
    // `couch_util:url_encode`: a space is `%20`.
    assert_eq!(header(&made.response, "X-Couch-Id"), Some("new%20one"));
    assert_eq!(
        header(&made.response, "X-Couch-Update-NewRev"),
        Some(rev.to_string().as_str())
    );
    assert_eq!(made.response.body, b"made");
    let bumped = fabric
        .update("db", &user, call("bump", Some("a")), false)
        .await
        .unwrap();
    assert_eq!(bumped.response.body, b"bumped");
    assert_eq!(f.db.open_doc("a", None).unwrap().rev.pos, 2);
    let said = fabric
        .update("db", &user, call("say", None), false)
        .await
        .unwrap();
    assert_eq!((said.response.code, said.written.is_none()), (202, true));
    let refused = fabric
        .update("db", &user, call("say", None), true)
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::UpdateByGet));
}

#[test]
fn rewrites_by_rules_and_by_function() {
    let f = node();
    write(
        &f.db,
        vec![
            json!({"_id": "_design/rules", "rewrites": [
                {"from": "/doc/:id", "to": "../../:id", "method": "GET"}
            ]}),
            json!({"_id": "_design/climb", "rewrites": [{"from": "/up", "to": "../../../x"}]}),
            json!({"_id": "_design/fn", "rewrites":
                "function(req) { if (req.path[4] == 'mine') return {code: 418, headers: {'X-Tea': 'yes'}, body: 'tea'}; if (req.path[4] == 'bad') return {path: 7}; return {path: '../../' + req.path[4], query: {q: '1 2'}, method: 'PUT'}; }"}),
        ],
    );
    let node = &f.node;
    let Rewrites::Rules(rules) = node.rewrites(&f.db, "rules").unwrap() else {
        panic!("rules")
    };
    let seg = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let to = node
        .rewrite_by_rules(("db", "rules"), &rules, "GET", &seg(&["doc", "a b"]), &[])
        .unwrap();
    // The bindings go along as query parameters, as in CouchDB.
    assert_eq!(to, "/db/a+b?id=a+b");
    let missing = node.rewrite_by_rules(("db", "rules"), &rules, "POST", &seg(&["doc", "a"]), &[]);
    assert!(matches!(
        missing,
        Err(Error::Rewrite(Failure::Rules(RewriteError::NoMatch)))
    ));
    let Rewrites::Rules(climb) = node.rewrites(&f.db, "climb").unwrap() else {
        panic!("rules")
    };
    let insecure = node.rewrite_by_rules(("db", "climb"), &climb, "GET", &seg(&["up"]), &[]);
    assert!(matches!(
        insecure,
        Err(Error::Rewrite(Failure::Rules(RewriteError::Insecure)))
    ));

    let Rewrites::Function { design, body } = node.rewrites(&f.db, "fn").unwrap() else {
        panic!("a function")
    };
    let req =
        |last: &str| json!({"path": ["db", "_design", "fn", "_rewrite", last], "method": "GET"});
    let by_fn =
        |last: &str| node.rewrite_by_function(&f.db, "fn", (&design, &body), req(last), &[]);
    let expected = Rewrite::Route {
        method: Some("PUT".into()),
        location: "/db/a?q=1+2".into(),
        headers: Vec::new(),
        body: None,
    };
    assert_eq!(by_fn("a").unwrap(), expected);
    let own = Rewrite::Respond {
        code: 418,
        headers: vec![("X-Tea".into(), "yes".into())],
        body: Some("tea".into()),
    };
    assert_eq!(by_fn("mine").unwrap(), own);
    assert!(matches!(by_fn("bad"), Err(Error::Rewrite(Failure::BadAnswer(r))) if r == "bad path"));
    // A design document without rewrites has an invalid path.
    let none = node.rewrites(&f.db, "f");
    assert!(matches!(none, Err(Error::Rewrite(Failure::InvalidPath))));
}

/// A list's pieces: its head, then its body.
async fn pieces(
    mut rx: tokio::sync::mpsc::Receiver<Piece>,
) -> (u16, Vec<(String, String)>, String) {
    let Some(Piece::Head(code, headers)) = rx.recv().await else {
        panic!("a head first")
    };
    let mut body = Vec::new();
    while let Some(piece) = rx.recv().await {
        match piece {
            Piece::Data(b) => body.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    (code, headers, String::from_utf8(body).unwrap())
}

fn list_call(name: &str, view: &str) -> ListCall {
    ListCall {
        ddoc: "f".into(),
        name: name.into(),
        view_ddoc: None,
        view: view.into(),
        args: MrArgs::default(),
        req: request(None),
        csp: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_list_streams_a_views_rows_or_all_docs() {
    let f = node();
    write(&f.db, vec![json!({"_id": "b", "v": 2})]);
    let (fabric, user) = (f.fabric(), UserCtx::default());
    let rx = fabric
        .list("db", &user, list_call("ids", "v"))
        .await
        .unwrap();
    let (code, headers, body) = pieces(rx).await;
    assert_eq!(code, 200);
    assert!(
        headers.contains(&("X-List".into(), "yes".into())),
        "{headers:?}"
    );
    assert_eq!(body, "a;b;total 2");
    let rx = fabric.list("db", &user, list_call("ids", "_all_docs"));
    let (_, _, body) = pieces(rx.await.unwrap()).await;
    assert_eq!(body, "_design/f;a;b;total 3");
    // A missing function or view fails before the list starts.
    let e = fabric
        .list("db", &user, list_call("nope", "v"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
    let e = fabric
        .list("db", &user, list_call("ids", "nope"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Views(_) | Error::NotFound(_)), "{e:?}");
}
