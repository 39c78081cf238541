//! Show, list and update functions: the query-server protocol's answers, content
//! negotiation, and CouchDB's errors.

use serde_json::{json, Value};
use settee_js::{Limits, ListIo, Rejection, RenderSource, Renderer};

const DDOC_ID: &str = "_design/r";

fn renderer(ddoc: Value) -> Renderer {
    let source = RenderSource {
        ddoc_id: DDOC_ID.into(),
        ddoc,
    };
    Renderer::new(&source, Limits::default()).expect("environment builds")
}

fn req() -> Value {
    json!({
        "method": "GET",
        "path": ["db", "_design", "r", "_show", "s"],
        "query": {},
        "headers": {},
        "userCtx": {"db": "db", "name": null, "roles": []}
    })
}

fn show(fun: &str, doc: Value, req: Value) -> Result<Value, Rejection> {
    let mut r = renderer(json!({"_id": DDOC_ID, "shows": {"s": fun}}));
    r.show("s", &doc, &req)
}

fn assert_error(r: Result<Value, Rejection>, error: &str) -> Value {
    match r {
        Err(Rejection::Error { error: e, reason }) if e == error => reason,
        other => panic!("expected {error}, got {other:?}"),
    }
}

#[test]
fn shows_answer_resp() {
    let out = show(
        "function(doc, req) { return 'hi ' + doc.n; }",
        json!({"n": 1}),
        req(),
    );
    assert_eq!(out.unwrap(), json!(["resp", {"body": "hi 1"}]));
    let out = show(
        "function(doc, req) { return {code: 201, headers: {'X-A': 'b'}, json: {a: this._id}}; }",
        Value::Null,
        req(),
    );
    assert_eq!(
        out.unwrap(),
        json!(["resp", {"code": 201, "headers": {"X-A": "b"}, "json": {"a": DDOC_ID}}])
    );
    // Nothing returned is an empty response; send() chunks join the body.
    let out = show(
        "function(doc, req) { send('a'); send('b'); return 'c'; }",
        Value::Null,
        req(),
    );
    assert_eq!(
        out.unwrap(),
        json!(["resp", {"body": "abc", "headers": {}}])
    );
    let out = show("function(doc, req) {}", Value::Null, req());
    assert_eq!(out.unwrap(), json!(["resp", {}]));
}

#[test]
fn shows_negotiate_content_types() {
    let fun = r#"function(doc, req) {
        registerType('foo', 'application/foo', 'application/x-foo');
        provides('html', function() { return '<p>html</p>'; });
        provides('json', function() { return {json: {j: 1}}; });
        provides('foo', function() { return 'foo'; });
    }"#;
    let with = |accept: Option<&str>, format: Option<&str>| {
        let mut req = req();
        if let Some(a) = accept {
            req["headers"]["Accept"] = json!(a);
        }
        if let Some(f) = format {
            req["query"]["format"] = json!(f);
        }
        show(fun, Value::Null, req)
    };
    let html = with(None, None).unwrap();
    assert_eq!(html[1]["body"], "<p>html</p>");
    assert_eq!(
        html[1]["headers"]["Content-Type"],
        "text/html; charset=utf-8"
    );
    let foo = with(Some("application/x-foo"), None).unwrap();
    assert_eq!(foo[1]["body"], "foo");
    assert_eq!(foo[1]["headers"]["Content-Type"], "application/x-foo");
    let json = with(Some("text/html;q=0.5, application/json"), None).unwrap();
    assert_eq!(json[1]["headers"]["Content-Type"], "application/json");
    let by_format = with(Some("text/html"), Some("foo")).unwrap();
    assert_eq!(by_format[1]["headers"]["Content-Type"], "application/foo");
    let reason = assert_error(with(Some("image/png"), None), "not_acceptable");
    assert!(reason
        .as_str()
        .unwrap()
        .starts_with("Content-Type image/png not supported"));
}

#[test]
fn show_errors_as_couchdb() {
    let reason = assert_error(
        show(
            "function(doc, req) { throw new Error('boom'); }",
            json!({}),
            req(),
        ),
        "render_error",
    );
    assert!(reason.as_str().unwrap().contains("Error: boom"), "{reason}");
    let reason = assert_error(
        show(
            "function(doc, req) { throw {error: 'teapot', reason: 'short'}; }",
            json!({}),
            req(),
        ),
        "teapot",
    );
    assert_eq!(reason, "short");
    assert_error(
        show("function(doc, req) { return 5; }", json!({}), req()),
        "render_error",
    );
    // A failing show of a missing document (the path names one) is not_found.
    let mut doc_req = req();
    doc_req["path"] = json!(["db", "_design", "r", "_show", "s", "missing"]);
    let reason = assert_error(
        show("function(doc, req) { return doc.x; }", Value::Null, doc_req),
        "not_found",
    );
    assert_eq!(reason, "document not found");
    let reason = assert_error(
        show("function(doc, req) { ", json!({}), req()),
        "compilation_error",
    );
    assert!(reason.is_string());
    let mut r = renderer(json!({"_id": DDOC_ID, "shows": {}}));
    let reason = assert_error(r.show("nope", &Value::Null, &req()), "not_found");
    assert_eq!(
        reason,
        "missing shows function nope on design doc _design/r"
    );
}

#[test]
fn updates_answer_up() {
    let mut r = renderer(json!({"_id": DDOC_ID, "updates": {
        "u": "function(doc, req) { doc = doc || {_id: req.id}; doc.n = (doc.n || 0) + 1; return [doc, 'n=' + doc.n]; }",
        "none": "function(doc, req) { return [null, {code: 202, body: 'no'}]; }",
        "bad": "function(doc, req) { return [doc]; }",
        "lib": "function(doc, req) { return [null, require('lib/x').v]; }"
    }, "lib": {"x": "exports.v = 'from lib';"}}));
    let mut post = req();
    post["method"] = json!("POST");
    post["id"] = json!("d");
    let up = r.update("u", &Value::Null, &post).unwrap();
    assert_eq!(up, json!(["up", {"_id": "d", "n": 1}, {"body": "n=1"}]));
    let up = r.update("u", &json!({"_id": "d", "n": 4}), &post).unwrap();
    assert_eq!(up[1]["n"], 5);
    let up = r.update("none", &Value::Null, &post).unwrap();
    assert_eq!(up, json!(["up", null, {"code": 202, "body": "no"}]));
    let up = r.update("lib", &Value::Null, &post).unwrap();
    assert_eq!(up[2]["body"], "from lib");
    assert_error(r.update("bad", &Value::Null, &post), "render_error");
    let mut r = renderer(
        json!({"_id": DDOC_ID, "updates": {"u": "function(doc, req) { return [null, 'x']; }"}}),
    );
    let reason = assert_error(r.update("u", &Value::Null, &req()), "method_not_allowed");
    assert_eq!(reason, "Update functions do not allow GET");
}

/// Rows to give, and everything the list answered.
struct Rows {
    rows: Vec<Value>,
    sent: Vec<Value>,
}

impl ListIo for Rows {
    fn next_row(&mut self) -> Option<Value> {
        (!self.rows.is_empty()).then(|| self.rows.remove(0))
    }
    fn send(&mut self, message: Value) {
        self.sent.push(message);
    }
}

#[test]
fn lists_answer_start_chunks_end() {
    let fun = r#"function(head, req) {
        start({code: 200, headers: {'Content-Type': 'text/plain'}});
        send('total=' + head.total_rows + '\n');
        var row;
        while ((row = getRow())) { send(row.key + '=' + row.value + '\n'); }
        return 'tail';
    }"#;
    let mut r = renderer(json!({"_id": DDOC_ID, "lists": {"l": fun}}));
    let rows = (0..3).map(|i| json!({"id": i.to_string(), "key": i, "value": i * 10}));
    let mut io = Rows {
        rows: rows.collect(),
        sent: Vec::new(),
    };
    let end = r
        .list("l", &json!({"total_rows": 3, "offset": 0}), &req(), &mut io)
        .unwrap();
    assert_eq!(
        io.sent,
        vec![
            json!(["start", ["total=3\n"], {"code": 200, "headers": {"Content-Type": "text/plain"}}]),
            json!(["chunks", ["0=0\n"]]),
            json!(["chunks", ["1=10\n"]]),
            json!(["chunks", ["2=20\n"]]),
        ]
    );
    assert_eq!(end, json!(["end", ["tail"]]));
    // A list that never asks for a row still starts, and reads one.
    let mut r =
        renderer(json!({"_id": DDOC_ID, "lists": {"l": "function(head, req) { send('x'); }"}}));
    let mut io = Rows {
        rows: vec![json!({"key": 1})],
        sent: Vec::new(),
    };
    let end = r.list("l", &json!({}), &req(), &mut io).unwrap();
    assert_eq!(io.sent, vec![json!(["start", ["x"], {"headers": {}}])]);
    assert_eq!(end, json!(["end", []]));
}

#[test]
fn lists_with_provides() {
    let fun = r#"function(head, req) {
        provides('json', function() {
            send('['); var row, first = true;
            while ((row = getRow())) { send((first ? '' : ',') + JSON.stringify(row.key)); first = false; }
            return ']';
        });
        provides('text', function() { return 'text'; });
    }"#;
    let mut r = renderer(json!({"_id": DDOC_ID, "lists": {"l": fun}}));
    let mut io = Rows {
        rows: vec![json!({"key": "a"}), json!({"key": "b"})],
        sent: Vec::new(),
    };
    let end = r.list("l", &json!({}), &req(), &mut io).unwrap();
    assert_eq!(
        io.sent[0],
        json!(["start", ["["], {"headers": {"Content-Type": "application/json"}}])
    );
    let mut text: Vec<String> = Vec::new();
    for m in io.sent.iter().chain(std::iter::once(&end)) {
        for c in m[1].as_array().unwrap() {
            text.push(c.as_str().unwrap().to_owned());
        }
    }
    assert_eq!(text.concat(), r#"["a","b"]"#);
}

#[test]
fn a_renderer_survives_user_errors_and_keeps_compiled_functions() {
    let mut r = renderer(json!({"_id": DDOC_ID, "shows": {
        "ok": "function(doc, req) { return typeof this.shows.ok; }",
        "bad": "function(doc, req) { throw 'x'; }"
    }}));
    assert_eq!(
        r.show("ok", &Value::Null, &req()).unwrap()[1]["body"],
        "function"
    );
    assert_error(r.show("bad", &Value::Null, &req()), "render_error");
    assert_eq!(
        r.show("ok", &Value::Null, &req()).unwrap()[1]["body"],
        "function"
    );
}

#[test]
fn req_info_is_read_only_when_a_function_reads_it() {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut r = renderer(json!({"_id": DDOC_ID, "shows": {
        "reads": "function(doc, req) { return req.info.db_name + ' ' + JSON.stringify(Object.keys(req)); }",
        "ignores": "function(doc, req) { return 'no'; }",
        "sets": "function(doc, req) { req.info = 'mine'; return req.info; }"
    }}));
    let calls = Rc::new(Cell::new(0));
    let counted = Rc::clone(&calls);
    r.set_info_source(Some(Box::new(move || {
        counted.set(counted.get() + 1);
        json!({"db_name": "db"})
    })));
    // The request object as the HTTP layer gives it: `info` first, left null.
    let mut with_info = json!({"info": null});
    with_info
        .as_object_mut()
        .unwrap()
        .extend(req().as_object().unwrap().clone());
    let out = r.show("ignores", &Value::Null, &with_info).unwrap();
    assert_eq!((out[1]["body"].as_str(), calls.get()), (Some("no"), 0));
    let out = r.show("reads", &Value::Null, &with_info).unwrap();
    let body = out[1]["body"].as_str().unwrap();
    assert!(body.starts_with("db [\"info\",\"method\""), "{body}");
    assert_eq!(calls.get(), 1);
    let out = r.show("sets", &Value::Null, &with_info).unwrap();
    assert_eq!((out[1]["body"].as_str(), calls.get()), (Some("mine"), 1));
    // Without a source, `info` is as given.
    r.set_info_source(None);
    let out = r.show("sets", &Value::Null, &with_info).unwrap();
    assert_eq!(out[1]["body"], "mine");
}

#[test]
fn a_list_gets_a_fresh_deadline_per_row() {
    use std::time::Duration;
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let source = RenderSource {
        ddoc_id: DDOC_ID.into(),
        ddoc: json!({"_id": DDOC_ID, "lists": {
            "slow": "function(head, req) { var row; while ((row = getRow())) { var t = Date.now(); while (Date.now() - t < 100) {} } return 'done'; }",
            "stuck": "function(head, req) { getRow(); while (true) {} }"
        }}),
    };
    let mut r = Renderer::new(&source, limits).unwrap();
    // Ten rows of 100 ms each: a second in all, but never 300 ms between two rows.
    let mut io = Rows {
        rows: (0..10).map(|i| json!({"key": i})).collect(),
        sent: Vec::new(),
    };
    let end = r.list("slow", &json!({}), &req(), &mut io).unwrap();
    assert_eq!(end, json!(["end", ["done"]]));
    let mut io = Rows {
        rows: vec![json!({"key": 1})],
        sent: Vec::new(),
    };
    match r.list("stuck", &json!({}), &req(), &mut io) {
        Err(Rejection::Failed(settee_js::JsError::Timeout)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
}
