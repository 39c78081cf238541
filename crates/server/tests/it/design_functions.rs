//! Show, list and update functions over real HTTP: responses of every shape, content
//! negotiation, ETags, the request object, view parameters through lists, streaming,
//! updates through the write path, and CouchDB's errors.

use crate::common;
use common::{Resp, Server};
use serde_json::{json, Value};

fn ddoc() -> Value {
    json!({
        "_id": "_design/app",
        "language": "javascript",
        "lib": {"greet": "exports.hello = function(n) { return 'Hello ' + n; };"},
        "shows": {
            "hello": "function(doc, req) { return 'Hello ' + (doc ? doc.name : 'nobody'); }",
            "obj": "function(doc, req) { return {code: 203, headers: {'X-Custom': 'yes', 'Content-Type': 'text/plain'}, body: 'plain'}; }",
            "json": "function(doc, req) { return {json: {id: doc && doc._id, rev: doc && doc._rev, q: req.query}}; }",
            "b64": "function(doc, req) { return {base64: 'aGVsbG8gYmluYXJ5', headers: {'Content-Type': 'image/png'}}; }",
            "empty": "function(doc, req) { }",
            "req": "function(doc, req) { return {json: req}; }",
            "this": "function(doc, req) { return this._id + ' ' + typeof this.shows.this; }",
            "lib": "function(doc, req) { return require('lib/greet').hello('lib'); }",
            "log": "function(doc, req) { log('show logged'); return 'logged'; }",
            "provides": "function(doc, req) { registerType('foo', 'application/foo', 'application/x-foo'); provides('html', function() { return '<p>' + (doc ? doc.name : '') + '</p>'; }); provides('xml', function() { return {body: '<xml/>'}; }); provides('foo', function() { return 'foofoo'; }); }",
            "missing_ok": "function(doc, req) { if (!doc) return {code: 404, body: 'no doc ' + req.id}; return 'found'; }",
            "throws": "function(doc, req) { throw new Error('show boom'); }",
            "throws_obj": "function(doc, req) { throw {error: 'teapot', reason: 'I am one'}; }",
            "bad_syntax": "function(doc, req) { return ",
            "bad_key": "function(doc, req) { return {bogus: 1}; }",
            "chunks": "function(doc, req) { start({headers: {'X-Start': 'a'}}); send('one '); send('two '); return 'three'; }"
        },
        "updates": {
            "bump": "function(doc, req) { if (!doc) { if (req.id) return [{_id: req.id, n: 1}, 'created ' + req.id]; return [null, 'no id']; } doc.n = (doc.n || 0) + 1; return [doc, 'n=' + doc.n]; }",
            "new": "function(doc, req) { return [{_id: req.uuid, made: true}, {json: {id: req.uuid}}]; }",
            "form": "function(doc, req) { doc.title = req.form.title; doc.body = req.body; return [doc, {code: 202, json: {form: req.form}}]; }",
            "code": "function(doc, req) { return [{_id: req.id, v: 1}, {code: 200, body: 'kept 200'}]; }",
            "none": "function(doc, req) { return [null, {body: 'nothing', headers: {'X-None': '1'}}]; }",
            "set": "function(doc, req) { doc.v = req.query.v; return [doc, 'set']; }",
            "stale": "function(doc, req) { return [{_id: req.id, _rev: '1-abc', v: 2}, 'stale']; }",
            "refused": "function(doc, req) { return [{_id: req.id, refuse: true}, 'should not']; }",
            "throws": "function(doc, req) { throw {error: 'nope', reason: 'update says no'}; }",
            "no_resp": "function(doc, req) { return [doc]; }"
        },
        "lists": {
            "simple": "function(head, req) { start({headers: {'Content-Type': 'text/plain'}}); send('head ' + JSON.stringify(head) + '\\n'); var row; while ((row = getRow())) { send(JSON.stringify(row) + '\\n'); } return 'tail\\n'; }",
            "keys": "function(head, req) { var row, ks = []; while ((row = getRow())) { ks.push(row.key); } return JSON.stringify(ks); }",
            "docs": "function(head, req) { var row, out = []; while ((row = getRow())) { out.push(row.doc ? row.doc.n : null); } send(JSON.stringify(out)); }",
            "count": "function(head, req) { var n = 0; while (getRow()) n++; return 'count=' + n; }",
            "coded": "function(head, req) { start({code: 201, headers: {'X-List': 'yes'}}); send('x'); }",
            "provides": "function(head, req) { provides('json', function() { send('['); var row, first = true; while ((row = getRow())) { send((first ? '' : ',') + JSON.stringify(row.key)); first = false; } return ']'; }); provides('html', function() { return '<ul></ul>'; }); }",
            "throws": "function(head, req) { throw new Error('list boom'); }",
            "throws_late": "function(head, req) { send('before'); getRow(); getRow(); throw {error: 'late', reason: 'after rows'}; }",
            "silent": "function(head, req) { }",
            "stream": "function(head, req) { var row; while ((row = getRow())) { send(row.key + ','); } }"
        },
        "views": {
            "by_n": {"map": "function(doc) { if (doc.n !== undefined) emit(doc.n, doc.n * 10); }"},
            "sum": {"map": "function(doc) { if (doc.n !== undefined) emit(doc.g, doc.n); }", "reduce": "_sum"}
        },
        "validate_doc_update": "function(newDoc, oldDoc, userCtx) { if (newDoc.refuse) throw {forbidden: 'refused by validation'}; }"
    })
}

fn setup() -> Server {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/_design/app", &ddoc().to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let docs: Vec<Value> = (1..=10)
        .map(|n| json!({"_id": format!("d{n:02}"), "n": n, "g": n % 2, "name": format!("doc{n}")}))
        .collect();
    let r = s.post("/db/_bulk_docs", &json!({"docs": docs}).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    s
}

fn get_h(s: &Server, path: &str, headers: &[(&str, &str)]) -> Resp {
    s.req_with("GET", path, None, headers, true)
}

fn err(r: &Resp) -> (u16, String, String) {
    let j = r.json();
    (
        r.status,
        j["error"].as_str().unwrap_or_default().to_string(),
        j["reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn shows_render_every_response_shape() {
    let s = setup();
    let r = s.get("/db/_design/app/_show/hello/d01");
    assert_eq!((r.status, r.text.as_str()), (200, "Hello doc1"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    let r = s.get("/db/_design/app/_show/hello");
    assert_eq!((r.status, r.text.as_str()), (200, "Hello nobody"));
    let r = s.get("/db/_design/app/_show/obj");
    assert_eq!((r.status, r.text.as_str()), (203, "plain"));
    assert_eq!(r.header("x-custom"), Some("yes"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = s.get("/db/_design/app/_show/json/d02?a=b");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("content-security-policy"),
        None,
        "JSON goes without CSP"
    );
    assert_eq!(r.header("cache-control"), Some("must-revalidate"));
    let j = r.json();
    assert_eq!(
        (j["id"].as_str(), j["q"].clone()),
        (Some("d02"), json!({"a": "b"}))
    );
    assert!(j["rev"].as_str().unwrap().starts_with("1-"));
    let r = s.req_bytes("GET", "/db/_design/app/_show/b64", Vec::new(), &[]);
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"hello binary".as_slice())
    );
    let r = s.get("/db/_design/app/_show/empty");
    assert_eq!((r.status, r.text.as_str()), (200, ""));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let r = s.get("/db/_design/app/_show/this");
    assert_eq!(r.text, "_design/app function");
    let r = s.get("/db/_design/app/_show/lib");
    assert_eq!(r.text, "Hello lib");
    let r = s.get("/db/_design/app/_show/log");
    assert_eq!(r.text, "logged");
    let r = s.get("/db/_design/app/_show/chunks");
    assert_eq!(r.text, "one two three");
    // A missing document is null to the function, which may answer as it likes.
    let r = s.get("/db/_design/app/_show/missing_ok/nope");
    assert_eq!((r.status, r.text.as_str()), (404, "no doc nope"));
    // A deleted document is missing too.
    let rev = s.get("/db/d10").json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    s.delete(&format!("/db/d10?rev={rev}"));
    let r = s.get("/db/_design/app/_show/missing_ok/d10");
    assert_eq!(r.status, 404);
    // POST works too, and the body reaches the function.
    let r = s.post("/db/_design/app/_show/req", r#"{"x":1}"#);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body"], r#"{"x":1}"#);
    assert_eq!(r.json()["method"], "POST");
}

#[test]
fn shows_negotiate_types_by_accept_and_format() {
    let s = setup();
    let path = "/db/_design/app/_show/provides/d03";
    let r = get_h(&s, path, &[("accept", "*/*")]);
    let r2 = get_h(&s, path, &[("accept", "text/html")]);
    assert_eq!((r2.status, r2.text.as_str()), (200, "<p>doc3</p>"));
    assert_eq!(r2.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.status, 200);
    let r = get_h(&s, path, &[("accept", "application/xml")]);
    assert_eq!(r.text, "<xml/>");
    assert_eq!(r.header("content-type"), Some("application/xml"));
    let r = get_h(&s, path, &[("accept", "application/x-foo")]);
    assert_eq!(r.text, "foofoo");
    assert_eq!(r.header("content-type"), Some("application/x-foo"));
    let r = get_h(
        &s,
        &format!("{path}?format=xml"),
        &[("accept", "text/html")],
    );
    assert_eq!(r.text, "<xml/>");
    let r = get_h(&s, path, &[("accept", "image/png")]);
    let (status, error, reason) = err(&r);
    assert_eq!((status, error.as_str()), (406, "not_acceptable"));
    assert!(
        reason.starts_with("Content-Type image/png not supported, try one of:"),
        "{reason}"
    );
    assert_eq!(r.header("vary"), None);
}

#[test]
fn show_etags_and_304() {
    let s = setup();
    let r = get_h(
        &s,
        "/db/_design/app/_show/hello/d01",
        &[("accept", "text/html")],
    );
    let etag = r.header("etag").expect("an ETag").to_string();
    assert_eq!(r.header("vary"), Some("Accept"));
    let r = get_h(
        &s,
        "/db/_design/app/_show/hello/d01",
        &[("accept", "text/html"), ("if-none-match", &etag)],
    );
    assert_eq!((r.status, r.text.as_str()), (304, ""));
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    // Another Accept, another document revision, another user: another ETag.
    let other = get_h(
        &s,
        "/db/_design/app/_show/hello/d01",
        &[("accept", "text/plain")],
    );
    assert_ne!(other.header("etag"), Some(etag.as_str()));
    let doc = s.get("/db/d01").json();
    s.put("/db/d01", &doc.to_string());
    let r = get_h(
        &s,
        "/db/_design/app/_show/hello/d01",
        &[("accept", "text/html"), ("if-none-match", &etag)],
    );
    assert_eq!(r.status, 200);
    let anon = s.req_with(
        "GET",
        "/db/_design/app/_show/hello",
        None,
        &[("accept", "text/html")],
        false,
    );
    let admin = get_h(
        &s,
        "/db/_design/app/_show/hello",
        &[("accept", "text/html")],
    );
    assert_ne!(anon.header("etag"), admin.header("etag"));
}

#[test]
fn the_request_object() {
    let s = setup();
    s.put(
        "/db/_security",
        r#"{"members":{"roles":[]},"admins":{"names":["sec"]}}"#,
    );
    let r = s.req_with(
        "POST",
        "/db/_design/app/_show/req/d01?k=v&startkey=%5B1%5D",
        Some("a=1&b=two+words"),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("cookie", "c1=v1; c2=v2"),
            ("x-thing", "yes"),
        ],
        true,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let req = r.json();
    assert_eq!(req["id"], "d01");
    assert_eq!(req["method"], "POST");
    assert_eq!(
        req["path"],
        json!(["db", "_design", "app", "_show", "req", "d01"])
    );
    assert_eq!(req["requested_path"], req["path"]);
    assert_eq!(
        req["raw_path"],
        "/db/_design/app/_show/req/d01?k=v&startkey=%5B1%5D"
    );
    assert_eq!(req["query"], json!({"k": "v", "startkey": [1]}));
    assert_eq!(req["body"], "a=1&b=two+words");
    assert_eq!(req["form"], json!({"a": "1", "b": "two words"}));
    assert_eq!(req["cookie"], json!({"c1": "v1", "c2": "v2"}));
    assert_eq!(req["headers"]["X-Thing"], "yes");
    assert_eq!(req["userCtx"]["db"], "db");
    assert_eq!(req["userCtx"]["name"], "admin");
    assert!(req["userCtx"]["roles"]
        .as_array()
        .unwrap()
        .contains(&json!("_admin")));
    assert_eq!(req["secObj"]["admins"]["names"], json!(["sec"]));
    assert_eq!(req["info"]["db_name"], "db");
    assert_eq!(req["uuid"].as_str().map(str::len), Some(32));
    assert_eq!(req["peer"], "127.0.0.1");
    let keys: Vec<&str> = req
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, common::REQ_OBJ_FIELDS);
    // Without a body at all, `body` is "undefined".
    let raw = s.send_raw("GET", "/db/_design/app/_show/req", &[], None, true);
    let req: Value = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(req["body"], "undefined");
    assert_eq!(req["id"], Value::Null);
    assert_eq!(req["form"], json!({}));
}

#[test]
fn show_errors_as_couchdb() {
    let s = setup();
    let r = s.get("/db/_design/app/_show/throws");
    let (status, error, reason) = err(&r);
    assert_eq!((status, error.as_str()), (500, "render_error"));
    assert!(reason.contains("Error: show boom"), "{reason}");
    let r = s.get("/db/_design/app/_show/throws_obj");
    assert_eq!(err(&r), (500, "teapot".into(), "I am one".into()));
    let r = s.get("/db/_design/app/_show/throws/nope");
    assert_eq!(
        err(&r),
        (404, "not_found".into(), "document not found".into())
    );
    let r = s.get("/db/_design/app/_show/bad_syntax");
    assert_eq!(err(&r).0, 500);
    assert_eq!(err(&r).1, "compilation_error");
    let r = s.get("/db/_design/app/_show/nope");
    assert_eq!(
        err(&r),
        (404, "not_found".into(), "missing json key: nope".into())
    );
    let r = s.get("/db/_design/nope/_show/hello");
    assert_eq!(err(&r), (404, "not_found".into(), "missing".into()));
    let r = s.get("/db/_design/app/_show");
    assert_eq!(err(&r), (404, "show_error".into(), "Invalid path.".into()));
    let r = s.get("/db/_design/app/_show/bad_key");
    assert_eq!(
        (r.status, err(&r).1.as_str()),
        (500, "external_response_error")
    );
    // The shows that work still do.
    assert_eq!(s.get("/db/_design/app/_show/hello").text, "Hello nobody");
}

#[test]
fn updates_write_through_the_write_path() {
    let s = setup();
    // Creating, with the document id in the path.
    let r = s.post("/db/_design/app/_update/bump/fresh", "");
    assert_eq!((r.status, r.text.as_str()), (201, "created fresh"));
    let rev = r.header("x-couch-update-newrev").unwrap().to_string();
    assert!(rev.starts_with("1-"));
    assert_eq!(r.header("x-couch-id"), Some("fresh"));
    assert_eq!(s.get("/db/fresh").json()["n"], 1);
    // Modifying, with PUT too.
    let r = s.req("PUT", "/db/_design/app/_update/bump/fresh", Some(""));
    assert_eq!((r.status, r.text.as_str()), (201, "n=2"));
    assert!(r.header("x-couch-update-newrev").unwrap().starts_with("2-"));
    assert_eq!(s.get("/db/fresh").json()["n"], 2);
    // Query parameters.
    let r = s.post("/db/_design/app/_update/set/fresh?v=hello", "");
    assert_eq!(r.status, 201);
    assert_eq!(s.get("/db/fresh").json()["v"], "hello");
    // A new document named by req.uuid, answered as JSON.
    let r = s.post("/db/_design/app/_update/new", "");
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(s.get(&format!("/db/{id}")).json()["made"], true);
    // An id that needs encoding in X-Couch-Id (`couch_util:url_encode`: a space is %20,
    // as CouchDB 3.5.2 answers).
    let r = s.post("/db/_design/app/_update/bump/a%20b%2Fc", "");
    assert_eq!(r.status, 201);
    assert_eq!(r.header("x-couch-id"), Some("a%20b%2Fc"));
    // The function's code wins over 201.
    let r = s.post("/db/_design/app/_update/code/coded", "");
    assert_eq!((r.status, r.text.as_str()), (200, "kept 200"));
    assert!(r.header("x-couch-update-newrev").is_some());
    // No document: nothing written, 200.
    let r = s.post("/db/_design/app/_update/none/ghost", "");
    assert_eq!((r.status, r.text.as_str()), (200, "nothing"));
    assert_eq!(r.header("x-none"), Some("1"));
    assert_eq!(r.header("x-couch-update-newrev"), None);
    assert_eq!(s.get("/db/ghost").status, 404);
    let r = s.post("/db/_design/app/_update/bump", "");
    assert_eq!((r.status, r.text.as_str()), (200, "no id"));
}

#[test]
fn updates_take_forms_and_are_refused_as_writes_are() {
    let s = setup();
    let r = s.req_with(
        "POST",
        "/db/_design/app/_update/form/d01",
        Some("title=Hi+there&x=%2F"),
        &[("content-type", "application/x-www-form-urlencoded")],
        true,
    );
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["form"], json!({"title": "Hi there", "x": "/"}));
    let doc = s.get("/db/d01").json();
    assert_eq!(
        (doc["title"].as_str(), doc["body"].as_str()),
        (Some("Hi there"), Some("title=Hi+there&x=%2F"))
    );
    // Conflict: a stale revision.
    let r = s.post("/db/_design/app/_update/stale/d02", "");
    assert_eq!(
        err(&r),
        (409, "conflict".into(), "Document update conflict.".into())
    );
    // validate_doc_update refuses.
    let r = s.post("/db/_design/app/_update/refused/new1", "");
    assert_eq!(
        err(&r),
        (403, "forbidden".into(), "refused by validation".into())
    );
    assert_eq!(s.get("/db/new1").status, 404);
    // Errors from the function.
    let r = s.post("/db/_design/app/_update/throws/d01", "");
    assert_eq!(err(&r), (500, "nope".into(), "update says no".into()));
    let r = s.post("/db/_design/app/_update/no_resp/d01", "");
    assert_eq!(err(&r).1, "render_error");
    let r = s.get("/db/_design/app/_update/bump/d01");
    assert_eq!(
        err(&r),
        (
            405,
            "method_not_allowed".into(),
            "Update functions do not allow GET".into()
        )
    );
    let r = s.post("/db/_design/app/_update/nope/d01", "");
    assert_eq!(
        err(&r),
        (404, "not_found".into(), "missing json key: nope".into())
    );
    let r = s.post("/db/_design/app/_update", "");
    assert_eq!(
        err(&r),
        (404, "update_error".into(), "Invalid path.".into())
    );
    // Updates run as the requester: a member writes through one.
    s.add_user("bob", "pw", &[]);
    s.put("/db/_security", r#"{"members":{"names":["bob"]}}"#);
    let r = s.req_with(
        "POST",
        "/db/_design/app/_update/bump/d03",
        Some(""),
        &[("authorization", &common::basic("bob", "pw"))],
        false,
    );
    assert_eq!(r.status, 201, "members may write: {}", r.text);
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

#[test]
fn lists_over_views_with_parameters() {
    let s = setup();
    let r = s.get("/db/_design/app/_list/simple/by_n?limit=2");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let l = lines(&r.text);
    assert_eq!(l[0], r#"head {"total_rows":10,"offset":0}"#);
    assert_eq!(l[1], r#"{"id":"d01","key":1,"value":10}"#);
    assert_eq!(l[2], r#"{"id":"d02","key":2,"value":20}"#);
    assert_eq!(l[3], "tail");
    let keys = |path: &str| -> Value {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        serde_json::from_str(&r.text).unwrap()
    };
    assert_eq!(
        keys("/db/_design/app/_list/keys/by_n?startkey=8"),
        json!([8, 9, 10])
    );
    assert_eq!(
        keys("/db/_design/app/_list/keys/by_n?descending=true&limit=3"),
        json!([10, 9, 8])
    );
    assert_eq!(keys("/db/_design/app/_list/keys/by_n?key=4"), json!([4]));
    assert_eq!(
        keys("/db/_design/app/_list/keys/by_n?skip=8"),
        json!([9, 10])
    );
    assert_eq!(
        keys("/db/_design/app/_list/keys/sum?group=true"),
        json!([0, 1])
    );
    assert_eq!(keys("/db/_design/app/_list/keys/sum"), json!([null]));
    assert_eq!(
        keys("/db/_design/app/_list/keys/sum?reduce=false&endkey=0")
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        keys("/db/_design/app/_list/keys/by_n?keys=[3,1]"),
        json!([3, 1])
    );
    let r = s.post("/db/_design/app/_list/keys/by_n", r#"{"keys": [5, 2, 7]}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&r.text).unwrap(),
        json!([5, 2, 7])
    );
    let r = s.get("/db/_design/app/_list/docs/by_n?include_docs=true&limit=3");
    assert_eq!(r.text, "[1,2,3]");
    // The head of a reduce, and with update_seq.
    let r = s.get("/db/_design/app/_list/simple/sum?group=true");
    assert_eq!(lines(&r.text)[0], "head {}");
    let r = s.get("/db/_design/app/_list/simple/by_n?update_seq=true&limit=0");
    assert!(lines(&r.text)[0].contains("\"update_seq\""), "{}", r.text);
    // A bad parameter is the view's error.
    let r = s.get("/db/_design/app/_list/keys/by_n?limit=x");
    assert_eq!(err(&r).1, "query_parse_error");
}

#[test]
fn lists_from_another_design_document_and_all_docs() {
    let s = setup();
    let other = json!({"_id": "_design/other", "lists": {
        "ids": "function(head, req) { var row, ids = []; while ((row = getRow())) ids.push(row.id); return ids.join(','); }"
    }});
    assert_eq!(s.put("/db/_design/other", &other.to_string()).status, 201);
    let r = s.get("/db/_design/other/_list/ids/app/by_n?limit=3");
    assert_eq!((r.status, r.text.as_str()), (200, "d01,d02,d03"));
    let r = s.get("/db/_design/other/_list/ids/_all_docs?limit=3");
    assert_eq!(
        (r.status, r.text.as_str()),
        (200, "_design/app,_design/other,d01")
    );
    let r = s.get("/db/_design/other/_list/ids/_all_docs?startkey=%22d09%22");
    assert_eq!(r.text, "d09,d10");
    let r = s.get("/db/_design/other/_list/ids/app/nope");
    assert_eq!(
        err(&r),
        (404, "not_found".into(), "missing_named_view".into())
    );
    let r = s.get("/db/_design/other/_list/ids/nope/by_n");
    assert_eq!(err(&r), (404, "not_found".into(), "missing".into()));
    let r = s.get("/db/_design/other/_list/ids");
    assert_eq!(err(&r), (404, "list_error".into(), "Bad path.".into()));
}

#[test]
fn lists_codes_provides_and_errors() {
    let s = setup();
    let r = s.get("/db/_design/app/_list/coded/by_n");
    assert_eq!((r.status, r.text.as_str()), (201, "x"));
    assert_eq!(r.header("x-list"), Some("yes"));
    let r = get_h(
        &s,
        "/db/_design/app/_list/provides/by_n?limit=3",
        &[("accept", "application/json")],
    );
    assert_eq!((r.status, r.text.as_str()), (200, "[1,2,3]"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let r = get_h(
        &s,
        "/db/_design/app/_list/provides/by_n?format=html",
        &[("accept", "application/json")],
    );
    assert_eq!(r.text, "<ul></ul>");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let r = s.get("/db/_design/app/_list/count/by_n");
    assert_eq!(r.text, "count=10");
    // A list that sends nothing answers an empty 200.
    let r = s.get("/db/_design/app/_list/silent/by_n");
    assert_eq!((r.status, r.text.as_str()), (200, ""));
    let r = s.get("/db/_design/app/_list/throws/by_n");
    let (status, error, reason) = err(&r);
    assert_eq!((status, error.as_str()), (500, "render_error"));
    assert!(reason.contains("list boom"));
    // After the response started, the error is the last chunk, with its status, on a
    // line of its own (`chttpd:send_chunked_error`).
    let r = s.get("/db/_design/app/_list/throws_late/by_n");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text,
        "before\n{\"code\":500,\"error\":\"late\",\"reason\":\"after rows\"}\n"
    );
    let r = s.get("/db/_design/app/_list/nope/by_n");
    assert_eq!(
        err(&r),
        (404, "not_found".into(), "missing json key: nope".into())
    );
    let r = s.req("DELETE", "/db/_design/app/_list/keys/by_n", None);
    assert_eq!(r.status, 405);
}

#[test]
fn lists_stream_many_rows() {
    let s = setup();
    let docs: Vec<Value> = (0..5000)
        .map(|i| json!({"_id": format!("m{i:05}"), "n": 100 + i}))
        .collect();
    let r = s.post("/db/_bulk_docs", &json!({"docs": docs}).to_string());
    assert_eq!(r.status, 201);
    let r = s.get("/db/_design/app/_list/stream/by_n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let keys: Vec<&str> = r.text.trim_end_matches(',').split(',').collect();
    assert_eq!(keys.len(), 5010);
    assert_eq!(keys[0], "1");
    assert_eq!(keys[5009], "5099");
}

#[test]
fn log_reaches_the_server_log() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("stderr.log");
    let s = Server::start_logged(&tmp.path().join("data"), &[], &log);
    s.create_db("db");
    assert_eq!(s.put("/db/_design/app", &ddoc().to_string()).status, 201);
    assert_eq!(s.get("/db/_design/app/_show/log").text, "logged");
    // A render_error is logged too, as CouchDB's renderError logs it.
    assert_eq!(s.get("/db/_design/app/_show/throws").status, 500);
    let mut text = String::new();
    for _ in 0..50 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("show logged") && text.contains("show boom") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(text.contains("show logged"), "{text}");
    assert!(
        text.contains("function raised error: Error: show boom"),
        "{text}"
    );
}

#[test]
fn lists_send_no_etag() {
    // As 3.5.2's clustered list path: no ETag, no Vary, and If-None-Match never gives a 304.
    let s = setup();
    let path = "/db/_design/app/_list/keys/by_n?limit=3";
    let r = s.get(path);
    assert_eq!((r.header("etag"), r.header("vary")), (None, None));
    let again = get_h(&s, path, &[("if-none-match", "\"anything\"")]);
    assert_eq!((again.status, &again.text), (200, &r.text));
    let r = s.get("/db/_design/app/_list/keys/_all_docs?limit=1");
    assert_eq!(r.header("etag"), None);
}
