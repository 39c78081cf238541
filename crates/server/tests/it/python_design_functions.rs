//! Show, list and update functions of design documents in Python, run by Settee's own query
//! server (`settee-query-server`, `pip install ./python`) over real HTTP, as the JavaScript
//! ones are in `design_functions.rs`; and a scripted fake server's misbehaviour
//! (`crates/queryserver/tests/fixtures/fake_qs.py`) reaching a show.

use crate::common;
use common::Server;
use serde_json::{json, Value};

const FAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../queryserver/tests/fixtures/fake_qs.py"
);

const SETTEE_QS: &str = "settee-query-server";

/// A program's path, or `None` (and the reason printed) when it is not installed.
fn on_path(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!("SKIPPED: `{program}` is not on PATH (pip install ./python)");
    }
    found.map(|p| p.to_string_lossy().into_owned())
}

fn ddoc() -> Value {
    json!({
        "_id": "_design/py",
        "language": "python",
        "shows": {
            "hello": "def show(doc, req):\n    return 'Hello ' + (doc['name'] if doc else 'nobody')\n",
            "obj": "def show(doc, req):\n    return {'code': 203, 'headers': {'X-Custom': 'yes', 'Content-Type': 'text/plain'}, 'body': 'plain'}\n",
            "json": "def show(doc, req):\n    return {'json': {'id': doc and doc['_id'], 'rev': doc and doc['_rev'], 'q': req['query'], 'db': req['info']['db_name']}}\n",
            "raises": "def show(doc, req):\n    raise ValueError('show boom')\n",
            "named": "def show(doc, req):\n    raise QueryServerError('teapot', 'I am one')\n",
            "needs_doc": "def show(doc, req):\n    return doc['name']\n"
        },
        "updates": {
            "bump": "def update(doc, req):\n    if doc is None:\n        if req.get('id'):\n            return [{'_id': req['id'], 'n': 1}, 'created ' + req['id']]\n        return [None, {'body': 'no id', 'headers': {'X-None': '1'}}]\n    doc['n'] = doc.get('n', 0) + 1\n    return [doc, {'json': {'n': doc['n']}}]\n",
            "raises": "def update(doc, req):\n    raise KeyError('nope')\n",
            "refused": "def update(doc, req):\n    return [{'_id': req['id'], 'refuse': True}, 'should not']\n"
        },
        "lists": {
            "simple": "def list(head, req):\n    start({'headers': {'Content-Type': 'text/plain', 'X-List': 'py'}})\n    send('head %d %d\\n' % (head['total_rows'], head['offset']))\n    for row in rows():\n        send('%s=%s\\n' % (row['key'], row['value']))\n    return 'tail\\n'\n",
            "docs": "def list(head, req):\n    for row in rows():\n        send(row['doc']['name'] + ',')\n",
            "first": "def list(head, req):\n    row = get_row()\n    return 'first %s' % row['key']\n",
            "raises": "def list(head, req):\n    raise RuntimeError('list boom')\n",
            "raises_late": "def list(head, req):\n    send('before ')\n    get_row()\n    get_row()\n    raise QueryServerError('late', 'after rows')\n"
        },
        "validate_doc_update": "def validate(newdoc, olddoc, userctx, secobj):\n    if newdoc.get('refuse'):\n        raise Forbidden('refused by validation')\n",
        "views": {
            "by_n": {"map": "def fun(doc):\n    if 'n' in doc:\n        yield doc['n'], doc['n'] * 10\n"}
        }
    })
}

/// A server with a database `db` holding the Python design document and docs `d1`..`d5`
/// (`n` 1..5), or `None` when `settee-query-server` is not installed.
fn setup() -> Option<Server> {
    let command = on_path(SETTEE_QS)?;
    let s = Server::start_with_env_ini(&[("COUCHDB_QUERY_SERVER_PYTHON", &command)], "");
    s.create_db("db");
    let mut docs: Vec<Value> = (1..=5)
        .map(|i| json!({"_id": format!("d{i}"), "n": i, "name": format!("doc {i}")}))
        .collect();
    docs.push(ddoc());
    let r = s.post("/db/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    Some(s)
}

#[test]
fn python_shows() {
    let Some(s) = setup() else { return };
    let r = s.get("/db/_design/py/_show/hello/d1");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, "Hello doc 1");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let etag = r.header("etag").expect("a show has an ETag").to_owned();
    assert_eq!(r.header("vary"), Some("Accept"));
    let again = s.req_with(
        "GET",
        "/db/_design/py/_show/hello/d1",
        None,
        &[("if-none-match", &etag)],
        true,
    );
    assert_eq!(again.status, 304);

    let r = s.get("/db/_design/py/_show/hello");
    assert_eq!((r.status, r.text.as_str()), (200, "Hello nobody"));

    let r = s.get("/db/_design/py/_show/obj/d1");
    assert_eq!(r.status, 203, "{}", r.text);
    assert_eq!(r.text, "plain");
    assert_eq!(r.header("x-custom"), Some("yes"));
    assert_eq!(r.header("content-type"), Some("text/plain"));

    let r = s.get("/db/_design/py/_show/json/d2?a=b");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.json();
    assert_eq!(body["id"], "d2");
    assert!(body["rev"].as_str().unwrap().starts_with("1-"), "{body}");
    assert_eq!(body["q"], json!({"a": "b"}));
    assert_eq!(body["db"], "db");
}

#[test]
fn python_show_errors() {
    let Some(s) = setup() else { return };
    let r = s.get("/db/_design/py/_show/raises/d1");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "render_error");
    assert!(r.json()["reason"].as_str().unwrap().contains("show boom"));

    let r = s.get("/db/_design/py/_show/named/d1");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json(), json!({"error": "teapot", "reason": "I am one"}));

    let r = s.get("/db/_design/py/_show/nope/d1");
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json()["error"], "not_found");

    // A show failing on a missing document is CouchDB's 404.
    let r = s.get("/db/_design/py/_show/needs_doc/missing");
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json()["error"], "not_found");

    // The server survives its functions' errors.
    let r = s.get("/db/_design/py/_show/hello/d3");
    assert_eq!((r.status, r.text.as_str()), (200, "Hello doc 3"));
}

#[test]
fn python_updates() {
    let Some(s) = setup() else { return };
    // Creating.
    let r = s.req("PUT", "/db/_design/py/_update/bump/new1", Some(""));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.text, "created new1");
    let rev = r
        .header("x-couch-update-newrev")
        .expect("new rev")
        .to_owned();
    assert!(rev.starts_with("1-"), "{rev}");
    assert_eq!(r.header("x-couch-id"), Some("new1"));
    let doc = s.get("/db/new1").json();
    assert_eq!(
        (doc["n"].clone(), doc["_rev"].clone()),
        (json!(1), json!(rev))
    );

    // Modifying.
    let r = s.post("/db/_design/py/_update/bump/d1", "");
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json(), json!({"n": 2}));
    let rev = r.header("x-couch-update-newrev").unwrap();
    assert!(rev.starts_with("2-"), "{rev}");
    assert_eq!(s.get("/db/d1").json()["n"], 2);

    // A null document: nothing written, 200.
    let before = s.get("/db").json()["update_seq"].clone();
    let r = s.post("/db/_design/py/_update/bump", "");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, "no id");
    assert_eq!(r.header("x-none"), Some("1"));
    assert!(r.header("x-couch-update-newrev").is_none());
    assert_eq!(s.get("/db").json()["update_seq"], before);

    // The write path: the design document's (Python) validation refuses.
    let r = s.post("/db/_design/py/_update/refused/r1", "");
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"error": "forbidden", "reason": "refused by validation"})
    );
    assert_eq!(s.get("/db/r1").status, 404);

    // Errors.
    let r = s.get("/db/_design/py/_update/bump/d1");
    assert_eq!(r.status, 405, "{}", r.text);
    assert_eq!(r.json()["error"], "method_not_allowed");
    let r = s.post("/db/_design/py/_update/raises/d1", "");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "render_error");
    let r = s.post("/db/_design/py/_update/nope/d1", "");
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json()["error"], "not_found");
    assert_eq!(s.get("/db/d1").json()["n"], 2);
}

#[test]
fn python_lists() {
    let Some(s) = setup() else { return };
    let r = s.get("/db/_design/py/_list/simple/by_n");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("x-list"), Some("py"));
    assert_eq!(r.header("etag"), None, "3.5.2 sends lists no ETag");
    assert_eq!(
        r.text, "head 5 0\n1=10\n2=20\n3=30\n4=40\n5=50\ntail\n",
        "{}",
        r.text
    );

    // View parameters shape the rows.
    let r = s.get("/db/_design/py/_list/simple/by_n?startkey=2&endkey=4&descending=false");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, "head 5 1\n2=20\n3=30\n4=40\ntail\n");
    let r = s.get("/db/_design/py/_list/simple/by_n?descending=true&limit=2");
    assert_eq!(r.text, "head 5 0\n5=50\n4=40\ntail\n");

    // A list stopping before the rows do; the process is fine for the next one.
    let r = s.get("/db/_design/py/_list/first/by_n?startkey=3");
    assert_eq!((r.status, r.text.as_str()), (200, "first 3"));
    let r = s.get("/db/_design/py/_list/simple/by_n?key=5");
    assert_eq!(r.text, "head 5 4\n5=50\ntail\n");

    // POST with keys, include_docs, and a JavaScript view of another design document.
    let r = s.post(
        "/db/_design/py/_list/docs/by_n?include_docs=true",
        r#"{"keys": [4, 2]}"#,
    );
    assert_eq!(
        (r.status, r.text.as_str()),
        (200, "doc 4,doc 2,"),
        "{}",
        r.text
    );
    let js = json!({"views": {"names": {"map": "function(doc) { if (doc.name) emit(doc.name, null); }"}}});
    let r = s.put("/db/_design/js", &js.to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.get("/db/_design/py/_list/first/js/names?descending=true");
    assert_eq!(
        (r.status, r.text.as_str()),
        (200, "first doc 5"),
        "{}",
        r.text
    );

    // Over _all_docs.
    let r = s.get("/db/_design/py/_list/first/_all_docs");
    assert_eq!((r.status, r.text.as_str()), (200, "first _design/js"));
}

#[test]
fn python_list_errors() {
    let Some(s) = setup() else { return };
    let r = s.get("/db/_design/py/_list/raises/by_n");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "render_error");
    assert!(r.text.contains("list boom"), "{}", r.text);

    let r = s.get("/db/_design/py/_list/nope/by_n");
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json()["error"], "not_found");

    // Failing once the response has started: the error is its last chunk, on a line of
    // its own with its status (`chttpd:send_chunked_error`).
    let r = s.get("/db/_design/py/_list/raises_late/by_n");
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.starts_with("before "), "{}", r.text);
    assert!(
        r.text
            .ends_with("\n{\"code\":500,\"error\":\"late\",\"reason\":\"after rows\"}\n"),
        "{}",
        r.text
    );

    // Every process is still good.
    for _ in 0..3 {
        let r = s.get("/db/_design/py/_list/simple/by_n?key=1");
        assert_eq!(r.text, "head 5 0\n1=10\ntail\n");
    }
}

#[test]
fn unknown_language_render_functions() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put(
        "/db/_design/cobol",
        &json!({"language": "cobol", "shows": {"s": "x"}, "updates": {"u": "x"}}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.get("/db/_design/cobol/_show/s");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "unknown_query_language");
    let r = s.post("/db/_design/cobol/_update/u", "");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "unknown_query_language");
}

/// The scripted fake server answers `ddoc` calls with its own shapes: an error answer is
/// the function's error, a crash or a hang a 500 (and the next call gets a new process), an
/// answer that is not `["resp", ..]` an `external_response_error`.
#[test]
fn fake_server_shows() {
    let s = Server::start_with_ini(&format!(
        "[query_servers]\nfake = python3 {FAKE}\n\n[couchdb]\nos_process_timeout = 1000\n"
    ));
    s.create_db("db");
    let docs = json!({"docs": [
        {"_id": "_design/f", "language": "fake", "shows": {"s": "anything"}},
        {"_id": "plain"},
        {"_id": "err", "error": true},
        {"_id": "crash", "crash": true},
        {"_id": "hang", "hang": true}
    ]});
    let r = s.post("/db/_bulk_docs", &docs.to_string());
    assert_eq!(r.status, 201, "{}", r.text);

    let r = s.get("/db/_design/f/_show/s/err");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"error": "my_error", "reason": "bad doc err"})
    );

    let r = s.get("/db/_design/f/_show/s/crash");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "os_process_error");

    let r = s.get("/db/_design/f/_show/s/hang");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "os_process_error");

    let r = s.get("/db/_design/f/_show/s/plain");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"], "external_response_error");
}
