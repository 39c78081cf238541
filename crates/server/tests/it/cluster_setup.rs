//! `/_cluster_setup` as CouchDB 3.5.2's wizard (Fauxton's setup page) drives it, on the
//! members of a Settee cluster and on a single node, and the `settee cluster` client
//! commands (`status`, `add-node`) run as the real binary against the cluster.

use crate::common;
use common::cli::{admin_url, ok, settee};

use common::cluster::{eventually, membership, three_members, NAMES};
use common::{Resp, Server, ADMIN};
use serde_json::{json, Value};

fn setup(s: &Server, body: Value) -> Resp {
    s.post("/_cluster_setup", &body.to_string())
}

fn state(s: &Server) -> Value {
    let r = s.get("/_cluster_setup");
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["state"].clone()
}

/// Asserts a 400 `bad_request` with `reason`.
fn refused(r: &Resp, reason: &str) {
    assert_eq!(
        (r.status, r.json()),
        (400, json!({"error": "bad_request", "reason": reason})),
        "{}",
        r.text
    );
}

fn port(s: &Server) -> u16 {
    s.addr().rsplit_once(':').unwrap().1.parse().unwrap()
}

fn config(s: &Server, section: &str, key: &str) -> Value {
    s.get(&format!("/_node/_local/_config/{section}/{key}"))
        .json()
}

#[test]
fn the_wizard_sets_up_a_three_member_cluster_and_the_cli_shows_and_grows_it() {
    let (_etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];

    // Members joined at their start: enabled, not finished.
    for n in &nodes {
        assert_eq!(state(n), "cluster_enabled");
    }

    // Server admins only, as CouchDB.
    let r = n1.anon("GET", "/_cluster_setup", None, &[]);
    assert_eq!(r.status, 401, "{}", r.text);
    let bob = r#"{"name": "bob", "password": "pw", "roles": [], "type": "user"}"#;
    assert_eq!(n1.put("/_users/org.couchdb.user:bob", bob).status, 201);
    for (method, body) in [
        ("GET", None),
        ("POST", Some(r#"{"action":"finish_cluster"}"#)),
    ] {
        let r = n1.as_user(("bob", "pw"), method, "/_cluster_setup", body);
        assert_eq!(
            (r.status, r.json()),
            (
                401,
                json!({"error": "unauthorized", "reason": "You are not a server admin."})
            ),
        );
    }

    // The request's shape, as CouchDB's setup_httpd checks it.
    refused(&setup(n1, json!({"action": "bogus"})), "Invalid Action'");
    refused(&setup(n1, json!({})), "Invalid Action'");
    refused(&n1.post("/_cluster_setup", "[]"), "Missing JSON body'");
    let r = n1.req_with(
        "POST",
        "/_cluster_setup",
        Some("{}"),
        &[("content-type", "text/plain")],
        true,
    );
    assert_eq!(r.status, 415, "{}", r.text);
    let r = n1.put("/_cluster_setup", "{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,POST")));
    let r = n1.get("/_cluster_setup?ensure_dbs_exist=nope");
    assert_eq!(r.status, 400, "{}", r.text);

    // add_node's refusals: missing host, wrong credentials, nothing listening, a node
    // named otherwise, a node of no cluster.
    let add = |n: &Server, at: &Server, extra: Value| {
        let mut body = json!({"action": "add_node", "host": "127.0.0.1", "port": port(at),
                              "username": ADMIN.0, "password": ADMIN.1, "singlenode": false});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        setup(n, body)
    };
    refused(
        &setup(n1, json!({"action": "add_node", "port": 5984})),
        "Add node failed. Missing host.",
    );
    refused(
        &add(n1, &nodes[1], json!({"password": "wrong"})),
        "Add node failed. Invalid admin credentials,",
    );
    refused(
        &add(n1, &nodes[1], json!({"username": "bob", "password": "pw"})),
        "Add node failed. Invalid admin credentials,",
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    refused(
        &add(n1, &nodes[1], json!({"port": closed_port})),
        "Add node failed. Invalid Host and/or Port.",
    );
    refused(
        &add(n1, &nodes[1], json!({"name": "other"})),
        &format!(
            "Add node failed. The node at 127.0.0.1:{} is settee2@127.0.0.1, not other@127.0.0.1",
            port(&nodes[1])
        ),
    );
    let single = Server::start();
    let r = add(n1, &single, json!({}));
    assert_eq!(r.status, 400, "{}", r.text);
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains("is not running in this cluster") && reason.contains("--cluster"),
        "{reason}"
    );
    // What a Settee member has no use for.
    refused(
        &setup(n1, json!({"action": "enable_single_node"})),
        "This node is a member of a cluster (it was started with --cluster): it cannot be set up as a single node",
    );
    let r = setup(n1, json!({"action": "receive_cookie", "cookie": "c"}));
    assert_eq!(r.status, 400, "{}", r.text);
    let r = setup(n1, json!({"action": "remove_node"}));
    assert_eq!(r.status, 501, "{}", r.text);

    // An admin and a cookie secret of the first member only, for finish_cluster to copy.
    let r = n1.put("/_node/_local/_config/admins/carol", r#""pw2""#);
    assert_eq!(r.status, 200, "{}", r.text);
    let r = nodes[2].as_user(("carol", "pw2"), "GET", "/_cluster_setup", None);
    assert_eq!(r.status, 401, "{}", r.text);

    // Fauxton's sequence, for each other node: enable_cluster here (its answer ignored by
    // Fauxton: CouchDB's on a node already enabled), enable_cluster of the remote node,
    // add_node; then finish_cluster.
    let local = json!({"action": "enable_cluster", "username": ADMIN.0, "password": ADMIN.1,
                       "bind_address": "0.0.0.0", "port": port(n1), "node_count": 3,
                       "singlenode": false});
    for other in &nodes[1..] {
        refused(&setup(n1, local.clone()), "Cluster is already enabled");
        let remote = json!({"action": "enable_cluster", "username": ADMIN.0,
                            "password": ADMIN.1, "bind_address": "0.0.0.0",
                            "port": port(other), "node_count": 3,
                            "remote_node": "127.0.0.1", "remote_current_user": ADMIN.0,
                            "remote_current_password": ADMIN.1});
        let r = setup(n1, remote);
        assert_eq!(
            (r.status, r.json()),
            (201, json!({"ok": true})),
            "{}",
            r.text
        );
        let r = add(n1, other, json!({}));
        assert_eq!(
            (r.status, r.json()),
            (201, json!({"ok": true})),
            "{}",
            r.text
        );
    }
    // Adding again changes nothing.
    assert_eq!(add(n1, &nodes[2], json!({})).status, 201);
    assert_eq!(membership(n1), (json!(NAMES), json!(NAMES)));
    // enable_cluster of a node in no cluster is refused, saying how it joins one.
    let r = setup(
        n1,
        json!({"action": "enable_cluster", "remote_node": "127.0.0.1", "port": port(&single),
               "remote_current_user": ADMIN.0, "remote_current_password": ADMIN.1,
               "username": ADMIN.0, "password": ADMIN.1, "node_count": 3}),
    );
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.json()["reason"].as_str().unwrap().contains("--cluster"));

    // A session cookie of the first member: each member hashed the admin's password with
    // a salt of its own and keeps a cookie secret of its own, so the others refuse it.
    let login = json!({"name": ADMIN.0, "password": ADMIN.1}).to_string();
    let r = n1.anon("POST", "/_session", Some(&login), &[]);
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let session_user = |n: &Server| {
        let r = n.anon("GET", "/_session", None, &[("cookie", &cookie)]);
        r.json()["userCtx"]["name"].clone()
    };
    assert_eq!(session_user(&nodes[1]), Value::Null);

    let r = setup(n1, json!({"action": "finish_cluster"}));
    assert_eq!(
        (r.status, r.json()),
        (201, json!({"ok": true})),
        "{}",
        r.text
    );
    for n in &nodes {
        eventually("cluster_finished on every member", || {
            state(n) == "cluster_finished"
        });
        // The first member's admins, uuid and cookie secret on every member.
        for (section, key) in [("couchdb", "uuid"), ("chttpd_auth", "secret")] {
            assert_eq!(config(n, section, key), config(n1, section, key));
        }
        let r = n.as_user(("carol", "pw2"), "GET", "/_cluster_setup", None);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(session_user(n), ADMIN.0);
    }
    assert_eq!(nodes[1].get("/").json()["uuid"], n1.get("/").json()["uuid"]);
    refused(
        &setup(&nodes[2], json!({"action": "finish_cluster"})),
        "Cluster is already finished",
    );
    // ensure_dbs_exist as CouchDB checks it; finish_cluster creates what is missing.
    let r = n1.get("/_cluster_setup?ensure_dbs_exist=%5B%22_users%22%2C%22wizard%22%5D");
    assert_eq!(r.json(), json!({"state": "cluster_enabled"}));
    let r = setup(
        n1,
        json!({"action": "finish_cluster", "ensure_dbs_exist": ["_users", "wizard"]}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = nodes[1].get("/_cluster_setup?ensure_dbs_exist=%5B%22_users%22%2C%22wizard%22%5D");
    assert_eq!(r.json(), json!({"state": "cluster_finished"}));
    let info = nodes[2].get("/wizard").json();
    assert_eq!(info["cluster"]["q"], 2, "{info}");
    // One copy of each range is a single node's set-up to CouchDB, and so is
    // `[couchdb] single_node`.
    for (section, key, value) in [("cluster", "n", "1"), ("couchdb", "single_node", "true")] {
        let path = format!("/_node/_local/_config/{section}/{key}");
        assert_eq!(n1.put(&path, &format!("\"{value}\"")).status, 200);
        assert_eq!(state(n1), "single_node_enabled");
        assert_eq!(n1.delete(&path).status, 200);
    }
    let r = n1.put("/_node/_local/_config/cluster/n", r#""1""#);
    assert_eq!(r.status, 200);
    let r = n1.get("/_cluster_setup?ensure_dbs_exist=%5B%22absent%22%5D");
    assert_eq!(r.json(), json!({"state": "single_node_disabled"}));
    assert_eq!(n1.delete("/_node/_local/_config/cluster/n").status, 200);
    assert_eq!(state(n1), "cluster_finished");

    // `settee cluster status`: members and where each database's ranges live.
    let url = admin_url(n1);
    let status: Value =
        serde_json::from_str(&ok(&["cluster", "status", "--url", &url, "--json"])).unwrap();
    assert_eq!(status["all_nodes"], json!(NAMES));
    assert_eq!(status["cluster_nodes"], json!(NAMES));
    let wizard = &status["dbs"]["wizard"];
    assert_eq!(
        (wizard["q"].clone(), wizard["n"].clone()),
        (json!(2), json!(3))
    );
    let shards = wizard["shards"].as_object().unwrap();
    assert_eq!(
        shards.keys().collect::<Vec<_>>(),
        ["00000000-7fffffff", "80000000-ffffffff"]
    );
    for copies in shards.values() {
        let mut copies: Vec<&str> = copies
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        copies.sort();
        assert_eq!(copies, NAMES);
    }
    let text = ok(&["cluster", "status", "--url", &url]);
    assert!(text.contains(": 3 nodes listed, 3 running\n"), "{text}");
    assert!(
        text.contains("  wizard  q=2 n=3\n    00000000-7fffffff  "),
        "{text}"
    );
    for name in NAMES {
        assert!(text.contains(&format!("  {name:<32} running\n")), "{text}");
    }

    // `settee cluster add-node`: by name (listed already, running), by host and port
    // (the wizard's add_node), and a node listed that never starts.
    let out = ok(&["cluster", "add-node", "--url", &url, NAMES[1]]);
    assert_eq!(
        out,
        format!("{0} is listed already\n{0} is running\n", NAMES[1])
    );
    let p3 = port(&nodes[2]).to_string();
    let out = ok(&[
        "cluster",
        "add-node",
        "--url",
        &url,
        "--host",
        "127.0.0.1",
        "--port",
        &p3,
    ]);
    assert_eq!(out, format!("{} added\n", NAMES[2]));
    let ps = port(&single).to_string();
    let out = settee(&[
        "cluster",
        "add-node",
        "--url",
        &url,
        "--host",
        "127.0.0.1",
        "--port",
        &ps,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not running in this cluster"), "{err}");
    let ghost = "settee4@127.0.0.1";
    let out = settee(&["cluster", "add-node", "--url", &url, ghost, "--wait", "1"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{ghost} listed\n")
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did not start running within 1 s"), "{err}");
    eventually("the new node listed", || {
        membership(&nodes[2]).1.as_array().unwrap().len() == 4
    });
    let text = ok(&["cluster", "status", "--url", &url]);
    assert!(text.contains(": 4 nodes listed, 3 running\n"), "{text}");
    assert!(
        text.contains(&format!("  {ghost:<32} not running\n")),
        "{text}"
    );
}

#[test]
fn a_single_node_keeps_its_answers() {
    let s = Server::start();
    assert_eq!(state(&s), "single_node_enabled");
    let r = setup(
        &s,
        json!({"action": "enable_cluster", "username": ADMIN.0, "password": ADMIN.1,
               "bind_address": "0.0.0.0", "node_count": 3}),
    );
    assert_eq!(r.status, 400, "{}", r.text);
    let reason = r.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains("--cluster") && reason.contains("SETTEE_CLUSTER_SECRET"),
        "{reason}"
    );
    refused(
        &setup(
            &s,
            json!({"action": "add_node", "host": "127.0.0.1", "port": 5984}),
        ),
        "Cluster is not enabled.",
    );
    // Its system databases exist from its start.
    refused(
        &setup(&s, json!({"action": "finish_cluster"})),
        "Cluster is already finished",
    );
    let r = setup(
        &s,
        json!({"action": "finish_cluster", "ensure_dbs_exist": ["made"]}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(s.get("/made").status, 200);
    let r = setup(&s, json!({"action": "enable_single_node"}));
    assert_eq!(r.status, 501, "{}", r.text);
    let r = s.get("/_cluster_setup?ensure_dbs_exist=%5B%22absent%22%5D");
    assert_eq!(r.json(), json!({"state": "single_node_enabled"}));

    // The CLI against a single node: itself, running; its databases q=1 n=1 here.
    let out = ok(&["cluster", "status", "--url", &admin_url(&s), "--json"]);
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["all_nodes"], status["cluster_nodes"]);
    assert_eq!(status["dbs"]["made"]["q"], 1, "{status}");
}
