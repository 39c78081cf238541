//! `COPY /db/doc` and its `Destination` header as CouchDB 3.5.2 reads it (notes §4): the
//! refusals, `?rev=` parsing (and the 500s CouchDB's pattern matches give), local and
//! design destinations, unquoting (`+`, `%XX`, raw UTF-8) and the `Location` it answers.

use crate::common;
use common::{RawResp, Server};
use serde_json::{json, Value};

fn copy(s: &Server, source: &str, dest: Option<&str>) -> RawResp {
    let headers: Vec<(&str, &str)> = dest.map(|d| ("Destination", d)).into_iter().collect();
    s.send_raw("COPY", source, &headers, None, true)
}

fn answer(r: &RawResp) -> (u16, Value) {
    (r.status, r.json())
}

fn error(status: u16, error: &str, reason: &str) -> (u16, Value) {
    (status, json!({"error": error, "reason": reason}))
}

#[test]
fn destination_refusals_and_rev_parsing() {
    let s = Server::start();
    s.create_db("db");
    s.put("/db/a", r#"{"v":1}"#);
    let b_rev = s.put("/db/b", r#"{"v":2}"#).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let cases: &[(Option<&str>, (u16, Value))] = &[
        (
            None,
            error(
                400,
                "bad_request",
                "Destination header is mandatory for COPY.",
            ),
        ),
        (
            Some(""),
            error(400, "illegal_docid", "Document id must not be empty"),
        ),
        (
            Some("new1?rev=bad"),
            error(400, "bad_request", "Invalid rev format"),
        ),
        (
            Some("b"),
            error(409, "conflict", "Document update conflict."),
        ),
        (
            Some("b?rev=1-0000"),
            error(409, "conflict", "Document update conflict."),
        ),
        (
            Some("_bad"),
            error(
                400,
                "illegal_docid",
                "Only reserved document ids may start with underscore.",
            ),
        ),
        (
            Some("http://127.0.0.1:5984/db/full"),
            error(400, "bad_request", "Destination URL must be relative."),
        ),
        (
            Some("https://x/y"),
            error(400, "bad_request", "Destination URL must be relative."),
        ),
        (
            Some("?rev=1-abc"),
            error(400, "illegal_docid", "Document id must not be empty"),
        ),
        (
            Some("q%C3"),
            error(400, "illegal_docid", "Document id must be valid UTF-8"),
        ),
        (
            Some("_local/x?rev=1-abc"),
            error(500, "error", "Invalid rev format"),
        ),
    ];
    for (dest, want) in cases {
        assert_eq!(&answer(&copy(&s, "/db/a", *dest)), want, "{dest:?}");
    }
    // CouchDB's pattern matches on the `?` and `=` parts crash: 500 with the stack hash.
    for (dest, reason, hash) in [
        ("zz?foo", "foo", 3_889_971_851u32),
        ("zz?", "", 3_889_971_851),
        ("zz?rev=1-abc&batch=ok", "rev1-abc&batchok", 3_889_971_851),
        ("a?b?c", "abc", 3_015_477_523),
    ] {
        let r = copy(&s, "/db/a", Some(dest));
        assert_eq!(
            answer(&r),
            (
                500,
                json!({"error": "badmatch", "reason": reason, "ref": hash})
            ),
            "{dest}"
        );
        assert_eq!(r.header("x-couch-stack-hash"), Some(&*hash.to_string()));
    }
    // The key's name is not looked at.
    let r = copy(&s, "/db/a", Some(&format!("b?foo={b_rev}")));
    assert_eq!(r.status, 201);
    assert!(r.json()["rev"].as_str().unwrap().starts_with("2-"));
    // The source side.
    assert_eq!(
        answer(&copy(&s, "/db/nope", Some("x1"))),
        error(404, "not_found", "missing")
    );
    assert_eq!(
        answer(&copy(&s, "/db/a?rev=1-0000", Some("x2"))),
        error(404, "not_found", "missing")
    );
}

#[test]
fn destinations_unquoted_and_located() {
    let s = Server::start();
    s.create_db("db");
    let rev = s.put("/db/a", r#"{"v":1}"#).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let host = s.url.clone();
    for (dest, id, location) in [
        ("new%20two", "new two", "/db/new%20two"),
        ("a+b+c", "a b c", "/db/a%20b%20c"),
        ("new%2Fthree", "new/three", "/db/new%2Fthree"),
        ("%zz", "%zz", "/db/%25zz"),
        ("éé", "éé", "/db/%C3%A9%C3%A9"),
        ("HTTPS://x/y", "HTTPS://x/y", "/db/HTTPS:%2F%2Fx%2Fy"),
        ("/db/slash", "/db/slash", "/db/%2Fdb%2Fslash"),
        ("_design/y", "_design/y", "/db/_design%2Fy"),
    ] {
        let r = copy(&s, "/db/a", Some(dest));
        assert_eq!(
            answer(&r),
            (201, json!({"ok": true, "id": id, "rev": rev})),
            "{dest}"
        );
        assert_eq!(
            r.header("location"),
            Some(&*format!("{host}{location}")),
            "{dest}"
        );
        assert_eq!(r.header("etag"), Some(&*format!("\"{rev}\"")));
        // (`/db/_design%2Fy` is a redirect to `/db/_design/y` in CouchDB.)
        let got = s.get(&format!(
            "/db/{}",
            location[4..].replace("_design%2F", "_design/")
        ));
        assert_eq!(got.json()["v"], 1, "{dest}: {}", got.text);
    }
    // A design document once, then it exists.
    assert_eq!(copy(&s, "/db/a", Some("_design/y")).status, 409);
    // Local documents take no rev and do not conflict; the ETag is their revision.
    for _ in 0..2 {
        let r = copy(&s, "/db/a", Some("_local/x"));
        assert_eq!(
            answer(&r),
            (201, json!({"ok": true, "id": "_local/x", "rev": "0-1"}))
        );
        assert_eq!(r.header("etag"), Some("\"0-1\""));
        assert_eq!(
            r.header("location"),
            Some(&*format!("{host}/db/_local%2Fx"))
        );
    }
    let r = copy(&s, "/db/a", Some("_local/x?rev=0-1"));
    assert_eq!(r.json()["rev"], "0-2");
    // COPY from a local document.
    let r = copy(&s, "/db/_local/x", Some("from-local"));
    assert_eq!(r.status, 201);
    assert_eq!(s.get("/db/from-local").json()["v"], 1);
}
