//! Documents and revision semantics over real HTTP.

use crate::common;
use common::Server;
use serde_json::{json, Value};

fn rev_of(v: &Value) -> String {
    v["rev"].as_str().unwrap().to_string()
}

#[test]
fn create_read_update_delete() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/doc", r#"{"z":1,"a":{"b":[1,2.50,"x"]}}"#);
    assert_eq!(r.status, 201);
    let rev1 = rev_of(&r.json());
    assert!(rev1.starts_with("1-") && rev1.len() == 34);
    assert_eq!(r.header("etag"), Some(format!("\"{rev1}\"").as_str()));
    assert!(r.header("location").unwrap().ends_with("/db/doc"));
    let got = s.get("/db/doc");
    assert_eq!(
        got.text,
        format!(r#"{{"_id":"doc","_rev":"{rev1}","z":1,"a":{{"b":[1,2.50,"x"]}}}}"#) + "\n",
        "field order and number text kept, and CouchDB's closing newline"
    );
    // 304 with If-None-Match
    let nm = s.req_with(
        "GET",
        "/db/doc",
        None,
        &[("if-none-match", &format!("\"{rev1}\""))],
        true,
    );
    assert_eq!(nm.status, 304);
    // update needs the current rev
    let c = s.put("/db/doc", r#"{"z":2}"#);
    assert_eq!(c.status, 409);
    assert_eq!(
        c.json(),
        json!({"error": "conflict", "reason": "Document update conflict."})
    );
    let r2 = s.put("/db/doc", &format!(r#"{{"_rev":"{rev1}","z":2}}"#));
    assert_eq!(r2.status, 201);
    let rev2 = rev_of(&r2.json());
    assert!(rev2.starts_with("2-"));
    // rev via query string and If-Match
    let r3 = s.put(&format!("/db/doc?rev={rev2}"), r#"{"z":3}"#);
    assert_eq!(r3.status, 201);
    let rev3 = rev_of(&r3.json());
    let mismatch = s.put(
        &format!("/db/doc?rev={rev2}"),
        &format!(r#"{{"_rev":"{rev3}"}}"#),
    );
    assert_eq!(mismatch.status, 400);
    // old revisions stay readable until compaction
    assert_eq!(s.get(&format!("/db/doc?rev={rev1}")).json()["z"], 1);
    let info = s.get("/db/doc?revs_info=true");
    assert_eq!(
        info.header("etag"),
        None,
        "no ETag on bodies with meta fields"
    );
    let info = info.json();
    assert_eq!(
        info["_revs_info"][0],
        json!({"rev": rev3, "status": "available"})
    );
    assert_eq!(
        info["_revs_info"][2],
        json!({"rev": rev1, "status": "available"})
    );
    let revs = s.get("/db/doc?revs=true").json();
    assert_eq!(revs["_revisions"]["start"], 3);
    assert_eq!(revs["_revisions"]["ids"].as_array().unwrap().len(), 3);
    // delete
    assert_eq!(s.delete("/db/doc").status, 409, "DELETE without rev");
    let d = s.delete(&format!("/db/doc?rev={rev3}"));
    assert_eq!(d.status, 200);
    let rev4 = rev_of(&d.json());
    let gone = s.get("/db/doc");
    assert_eq!(gone.status, 404);
    assert_eq!(
        gone.json(),
        json!({"error": "not_found", "reason": "deleted"})
    );
    let old = s.get(&format!("/db/doc?rev={rev4}")).json();
    assert_eq!(old["_deleted"], true);
    assert_eq!(
        s.get("/db/missing").json(),
        json!({"error": "not_found", "reason": "missing"})
    );
    // recreate after delete extends the deleted branch
    let again = s.put("/db/doc", r#"{"back":true}"#);
    assert_eq!(again.status, 201);
    assert!(rev_of(&again.json()).starts_with("5-"));
    let info = s.get("/db").json();
    assert_eq!(info["doc_count"], 1);
    assert_eq!(info["doc_del_count"], 0);
}

#[test]
fn revision_ids_are_deterministic() {
    let s = Server::start();
    s.create_db("a");
    s.create_db("b");
    let ra = rev_of(&s.put("/a/d", r#"{"x":1}"#).json());
    let rb = rev_of(&s.put("/b/d", r#"{"x":1}"#).json());
    assert_eq!(ra, rb, "same parent and content give the same rev");
    let rc = rev_of(&s.put("/b/e", r#"{"x":2}"#).json());
    assert_ne!(ra, rc);
}

#[test]
fn ids_and_bodies_are_validated() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/_bad", "{}");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "illegal_docid", "reason": "Only reserved document ids may start with underscore."})
    );
    assert_eq!(s.put("/db/x", "[1]").json()["error"], "bad_request");
    assert_eq!(
        s.put("/db/x", r#"{"_foo":1}"#).json()["error"],
        "doc_validation"
    );
    assert_eq!(
        s.put("/db/x", r#"{"_rev":"bogus"}"#).json()["reason"],
        "Invalid rev format"
    );
    assert_eq!(
        s.put("/db/x", "{\"a\":").json()["reason"],
        "invalid UTF-8 JSON"
    );
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(8_000_100));
    let r = s.put("/db/big", &big);
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"], "document_too_large");
    assert_eq!(s.get("/db").json()["doc_count"], 0, "nothing was written");
    // design docs are ordinary docs with their own namespace
    assert_eq!(s.put("/db/_design/d", r#"{"views":{}}"#).status, 201);
    assert_eq!(s.get("/db/_design/d").json()["_id"], "_design/d");
    // CouchDB redirects a read of `_design%2Fd` to the unescaped path
    let r = s.raw("GET", "/db/_design%2Fd", &[]);
    assert_eq!(r.status, 301);
    assert!(r.header("location").unwrap().ends_with("/db/_design/d"));
}

#[test]
fn post_batch_and_copy() {
    let s = Server::start();
    s.create_db("db");
    let r = s.post("/db", r#"{"a":1}"#);
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);
    assert_eq!(s.get(&format!("/db/{id}")).json()["a"], 1);
    let b = s.put("/db/batched?batch=ok", r#"{"b":1}"#);
    assert_eq!(b.status, 202);
    assert_eq!(b.json(), json!({"ok": true, "id": "batched"}));
    let mut found = false;
    for _ in 0..100 {
        if s.get("/db/batched").status == 200 {
            found = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(found, "batch=ok write lands");
    let c = s.raw("COPY", "/db/batched", &[("Destination", "copied")]);
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(s.get("/db/copied").json()["b"], 1);
    let c = s.raw("COPY", "/db/batched", &[]);
    assert_eq!(c.status, 400);
}

#[test]
fn replicated_conflicts_and_the_winner() {
    let s = Server::start();
    s.create_db("db");
    let a = "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let docs = json!({"new_edits": false, "docs": [
        {"_id": "d", "_rev": a, "v": "root"},
        {"_id": "d", "_revisions": {"start": 2, "ids": ["bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}, "v": "b"},
        {"_id": "d", "_revisions": {"start": 2, "ids": ["cccccccccccccccccccccccccccccccc", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}, "v": "c"},
    ]});
    let r = s.post("/db/_bulk_docs", &docs.to_string());
    assert_eq!(r.status, 201);
    assert_eq!(r.json(), json!([]), "new_edits=false reports only failures");
    let d = s.get("/db/d?conflicts=true").json();
    assert_eq!(
        d["_rev"], "2-cccccccccccccccccccccccccccccccc",
        "higher rev id wins at equal depth"
    );
    assert_eq!(d["v"], "c");
    assert_eq!(
        d["_conflicts"],
        json!(["2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"])
    );
    // replaying the same revisions changes nothing
    let seq_before = s.get("/db").json()["update_seq"].clone();
    s.post("/db/_bulk_docs", &docs.to_string());
    assert_eq!(s.get("/db").json()["update_seq"], seq_before);
    // open_revs
    let all = s.get("/db/d?open_revs=all").json();
    assert_eq!(all.as_array().unwrap().len(), 2);
    let some = s.get("/db/d?open_revs=%5B%222-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb%22,%223-dddddddddddddddddddddddddddddddd%22%5D").json();
    assert_eq!(some[0]["ok"]["v"], "b");
    assert_eq!(
        some[1],
        json!({"missing": "3-dddddddddddddddddddddddddddddddd"})
    );
    let mp = s.req_with(
        "GET",
        "/db/d?open_revs=all",
        None,
        &[("accept", "multipart/mixed")],
        true,
    );
    assert!(mp
        .header("content-type")
        .unwrap()
        .starts_with("multipart/mixed; boundary="));
    assert_eq!(mp.text.matches("Content-Type: application/json").count(), 2);
    // deleting the winner makes the other branch win
    let del = s
        .delete("/db/d?rev=2-cccccccccccccccccccccccccccccccc")
        .json();
    assert!(rev_of(&del).starts_with("3-"));
    let d = s.get("/db/d?deleted_conflicts=true&meta=true").json();
    assert_eq!(d["_rev"], "2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    assert_eq!(d["_deleted_conflicts"].as_array().unwrap().len(), 1);
    // updating a non-leaf is a conflict
    let r = s.put("/db/d", &format!(r#"{{"_rev":"{a}"}}"#));
    assert_eq!(r.status, 409);
    // new_edits=false on PUT
    let r = s.put(
        "/db/e?new_edits=false",
        r#"{"_rev":"7-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee","x":1}"#,
    );
    assert_eq!(r.status, 201);
    assert_eq!(
        s.get("/db/e").json()["_rev"],
        "7-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
    );
}

#[test]
fn revs_limit_stems_history() {
    let s = Server::start();
    s.create_db("db");
    assert_eq!(s.get("/db/_revs_limit").json(), json!(1000));
    assert_eq!(s.put("/db/_revs_limit", "3").json(), json!({"ok": true}));
    // CouchDB 3.5.2 crashes on a limit that is not an integer (500 function_clause).
    assert_eq!(s.put("/db/_revs_limit", "\"x\"").status, 500);
    assert_eq!(s.get("/db/_revs_limit").json(), json!(3));
    let mut rev = rev_of(&s.put("/db/d", "{}").json());
    for i in 0..5 {
        rev = rev_of(
            &s.put(&format!("/db/d?rev={rev}"), &format!(r#"{{"i":{i}}}"#))
                .json(),
        );
    }
    let d = s.get("/db/d?revs=true").json();
    assert_eq!(d["_revisions"]["start"], 6);
    assert_eq!(d["_revisions"]["ids"].as_array().unwrap().len(), 3);
}

#[test]
fn local_documents() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/_local/cp", r#"{"seq":1}"#);
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "_local/cp", "rev": "0-1"})
    );
    // No MVCC on local documents (as CouchDB): a write without `_rev` is revision 0-1 again.
    assert_eq!(s.put("/db/_local/cp", r#"{"seq":2}"#).json()["rev"], "0-1");
    let r = s.put("/db/_local/cp", r#"{"_rev":"0-1","seq":2}"#);
    assert_eq!(r.json()["rev"], "0-2");
    assert_eq!(
        s.get("/db/_local/cp").json(),
        json!({"_id": "_local/cp", "_rev": "0-2", "seq": 2})
    );
    let list = s.get("/db/_local_docs").json();
    assert_eq!(list["rows"][0]["id"], "_local/cp");
    let info = s.get("/db").json();
    assert_eq!(info["doc_count"], 0, "local docs are not counted");
    assert_eq!(
        s.get("/db/_changes").json()["results"],
        json!([]),
        "nor in changes"
    );
    assert_eq!(s.delete("/db/_local/cp?rev=0-2").status, 200);
    assert_eq!(s.get("/db/_local/cp").status, 404);
}

#[test]
fn security_and_props() {
    let s = Server::start();
    s.create_db("db");
    // CouchDB 3's default_security = admin_only
    assert_eq!(
        s.get("/db/_security").json(),
        json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
    );
    let sec =
        json!({"admins": {"names": ["a"], "roles": []}, "members": {"names": [], "roles": ["r"]}});
    assert_eq!(s.put("/db/_security", &sec.to_string()).status, 200);
    assert_eq!(s.get("/db/_security").json(), sec);
    // CouchDB answers 500 with couch_db's reason (chttpd_security_tests)
    assert_eq!(
        s.put("/db/_security", r#"{"admins":{"names":"a"}}"#).status,
        500
    );
    assert_eq!(s.put("/db/_purged_infos_limit", "10").status, 200);
    assert_eq!(s.get("/db/_purged_infos_limit").json(), json!(10));
    let r = s.post("/db/_ensure_full_commit", "");
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["ok"], true);
    let r = s.post("/db/_compact", "");
    assert_eq!(r.status, 202);
}

#[test]
fn compaction_drops_superseded_bodies() {
    let s = Server::start();
    s.create_db("db");
    let r1 = rev_of(&s.put("/db/d", r#"{"v":1}"#).json());
    s.put(&format!("/db/d?rev={r1}"), r#"{"v":2}"#);
    assert_eq!(s.get(&format!("/db/d?rev={r1}")).status, 200);
    assert_eq!(s.post("/db/_compact", "").status, 202);
    let mut gone = false;
    for _ in 0..200 {
        if !s.get("/db").json()["compact_running"].as_bool().unwrap()
            && s.get(&format!("/db/d?rev={r1}")).status == 404
        {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(gone, "old body removed by compaction");
    let info = s.get("/db/d?revs_info=true").json();
    assert_eq!(info["_revs_info"][1]["status"], "missing");
    assert_eq!(s.get("/db/d").json()["v"], 2);
}

/// `w` and `r` on a single node, as CouchDB 3.5.2's single node answers them: one copy, so
/// a `w` above one is accepted but not met (202, `accepted` entries); `r` reads as usual;
/// a `w` that is no positive integer means the default.
#[test]
fn write_and_read_quorums_on_one_copy() {
    let s = Server::start();
    s.create_db("db");
    let r = s.put("/db/a?w=2", "{}");
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"ok": true, "id": "a", "rev": "1-967a00dff5e02add41819138abb3284d"})
    );
    for (id, w) in [("b", "1"), ("c", "x"), ("d", "0")] {
        assert_eq!(s.put(&format!("/db/{id}?w={w}"), "{}").status, 201, "w={w}");
    }
    assert_eq!(s.post("/db?w=3", r#"{"_id": "p"}"#).status, 202);
    let r = s.post("/db/_bulk_docs?w=3", r#"{"docs": [{"_id": "q"}]}"#);
    assert_eq!(r.status, 202);
    assert_eq!(
        r.json(),
        json!([{"ok": true, "id": "q", "rev": "1-967a00dff5e02add41819138abb3284d", "accepted": true}])
    );
    // The body's `w` (a number) counts too.
    let r = s.post("/db/_bulk_docs", r#"{"w": 2, "docs": [{"_id": "q2"}]}"#);
    assert_eq!((r.status, &r.json()[0]["accepted"]), (202, &json!(true)));
    assert_eq!(
        s.post("/db/_bulk_docs?w=1", r#"{"docs": [{"_id": "q3"}]}"#)
            .status,
        201
    );
    let r = s.get("/db/a?r=2");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["_id"], "a");
    let r = s.delete("/db/a?w=2&rev=1-967a00dff5e02add41819138abb3284d");
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["rev"], "2-eec205a9d413992850a6e32678485900");
    // Attachments: an upload is accepted with its Location; a deletion stays 200.
    let r = s.req_with(
        "PUT",
        "/db/att/f.txt?w=2",
        Some("hi"),
        &[("Content-Type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 202, "{}", r.text);
    assert!(r
        .header("location")
        .is_some_and(|l| l.ends_with("/db/att/f.txt")));
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    let r = s.delete(&format!("/db/att/f.txt?w=2&rev={rev}"));
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s.put("/db/_local/x?w=2", "{}");
    assert_eq!(
        (r.status, r.json()),
        (202, json!({"ok": true, "id": "_local/x", "rev": "0-1"}))
    );
}
