//! Resharding on a cluster (CouchDB 3's `_reshard`): a range split in two on every copy
//! while clients write, the API's answers and refusals as CouchDB 3.5.2 gives them, the
//! cluster-wide switch and a job's own state, and a job of a member that went down taken
//! over by another.

use crate::common;
use common::cli::{admin_url, ok, settee};
use common::cluster::{
    changes_ids_since, enc, eventually, keep_writing, member, membership, shards, three_members,
    NAMES,
};
use common::{Resp, Server};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

fn refused(r: Resp, status: u16, error: &str, reason: &str) {
    assert_eq!(
        (
            r.status,
            r.json()["error"].as_str(),
            r.json()["reason"].as_str()
        ),
        (status, Some(error), Some(reason)),
        "{}",
        r.text
    );
}

fn jobs(s: &Server) -> Vec<Value> {
    let r = s.get("/_reshard/jobs");
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["offset"], 0);
    let jobs = v["jobs"].as_array().unwrap().clone();
    assert_eq!(v["total_rows"], jobs.len());
    jobs
}

/// Every job of `db` completed.
fn all_completed(s: &Server, db: &str, count: usize) -> bool {
    let of_db: Vec<Value> = (jobs(s).into_iter())
        .filter(|j| j["source"].as_str().unwrap().contains(&format!("/{db}.")))
        .collect();
    of_db.len() == count && of_db.iter().all(|j| j["job_state"] == "completed")
}

/// The ids in `_all_docs` of `s`.
fn all_ids(s: &Server, db: &str) -> BTreeSet<String> {
    let r = s.get(&format!("/{db}/_all_docs"));
    assert_eq!(r.status, 200, "{}", r.text);
    (r.json()["rows"].as_array().unwrap().iter())
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_range_splits_on_every_copy_while_clients_write() {
    let (_etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];
    assert_eq!(n1.put("/split?q=2&n=2", "").status, 201);
    let docs: Vec<Value> = (0..60)
        .map(|i| json!({"_id": format!("d{i:03}"), "v": i}))
        .collect();
    let r = n1.post("/split/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let mut acked: BTreeSet<String> = (0..60).map(|i| format!("d{i:03}")).collect();
    // A conflicted document, a deleted one, one with an attachment, a local one.
    let branches = json!({"new_edits": false, "docs": [
        {"_id": "conflicted", "_rev": "1-aaaa", "side": "a"},
        {"_id": "conflicted", "_rev": "1-bbbb", "side": "b"},
    ]});
    assert_eq!(
        n1.post("/split/_bulk_docs", &branches.to_string()).status,
        201
    );
    acked.insert("conflicted".into());
    let rev = n1.put("/split/gone", "{}").json()["rev"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(n1.delete(&format!("/split/gone?rev={rev}")).status, 200);
    let att =
        json!({"_attachments": {"a.txt": {"content_type": "text/plain", "data": "aGVsbG8="}}});
    assert_eq!(n1.put("/split/withatt", &att.to_string()).status, 201);
    acked.insert("withatt".into());
    assert_eq!(n1.put("/split/_local/mine", r#"{"kept": 1}"#).status, 201);

    // The API before any job, and its refusals (CouchDB 3.5.2's words).
    assert_eq!(
        n1.get("/_reshard").text.trim_end(),
        r#"{"state":"running","state_reason":null,"completed":0,"failed":0,"running":0,"stopped":0,"total":0}"#
    );
    assert_eq!(
        n1.get("/_reshard/state").text.trim_end(),
        r#"{"state":"running","reason":null}"#
    );
    assert_eq!(
        n1.get("/_reshard/jobs").text.trim_end(),
        r#"{"total_rows":0,"offset":0,"jobs":[]}"#
    );
    let post = |body: Value| n1.post("/_reshard/jobs", &body.to_string());
    refused(
        post(json!({"type": "merge", "db": "split"})),
        400,
        "bad_request",
        "`job type must be `split`",
    );
    refused(
        post(json!({"type": "split", "db": "nope"})),
        400,
        "bad_request",
        "Invalid `db`",
    );
    refused(
        post(json!({"type": "split"})),
        400,
        "bad_request",
        "Must specify at least `db` or `shard`",
    );
    refused(
        post(json!({"type": "split", "db": "split", "range": "zz"})),
        400,
        "bad_request",
        "Invalid `range`",
    );
    refused(
        post(json!({"type": "split", "db": "split", "node": "x@y"})),
        400,
        "bad_request",
        "`node` is not a valid node name",
    );
    refused(
        post(json!({"type": "split", "db": "split", "range": "00000000-3fffffff"})),
        404,
        "not_found",
        "missing",
    );
    refused(
        post(json!([])),
        400,
        "bad_request",
        "Request body must be a JSON object",
    );
    refused(n1.get("/_reshard/jobs/nope"), 404, "not_found", "missing");
    refused(
        n1.delete("/_reshard/jobs/nope"),
        404,
        "not_found",
        "missing",
    );
    refused(
        n1.put("/_reshard/state", "{}"),
        400,
        "bad_request",
        "Expected a `state` field",
    );
    refused(
        n1.put("/_reshard/jobs/nope/state", r#"{"state": "x"}"#),
        400,
        "bad_request",
        "State field not `running` or `stopped`",
    );
    refused(n1.get("/_reshard/x"), 404, "not_found", "missing");
    let r = n1.req("DELETE", "/_reshard", None);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,HEAD")));
    let anon = n1.anon("GET", "/_reshard", None, &[]);
    assert_eq!(anon.status, 401, "{}", anon.text);

    // A writer on every member keeps going while the first range splits, and the split
    // shows in its members' `_active_tasks`.
    let before = shards(n1, "split");
    let (range, holders) = before.as_object().unwrap().iter().next().unwrap();
    let (range, holders) = (range.clone(), holders.clone());
    // A document of the range purged before: its purge goes with it into its half.
    let (lo, hi) = settee_core::shards::parse_range(&range).unwrap();
    let purged = (0..)
        .map(|i| format!("purged{i}"))
        .find(|id| (lo..=hi).contains(&settee_core::shards::hash(id, false)))
        .unwrap();
    let rev = n1.put(&format!("/split/{purged}"), "{}").json()["rev"].clone();
    let r = n1.post("/split/_purge", &json!({ &purged: [rev] }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let stop = AtomicBool::new(false);
    let written = Mutex::new(Vec::<String>::new());
    let seen_task = AtomicBool::new(false);
    let created = std::thread::scope(|scope| {
        let writer = scope.spawn(|| keep_writing(&nodes, "split", 5000, &stop, &written));
        let watcher = scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                for n in &nodes {
                    let tasks = n.get("/_active_tasks").json();
                    if (tasks.as_array().unwrap().iter())
                        .any(|t| t["type"] == "shard_split" && t["database"] == "split")
                    {
                        seen_task.store(true, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
        });
        // Some writes land before the split begins.
        eventually("writes before the split", || {
            written.lock().unwrap().len() > 20
        });
        let created = post(json!({"type": "split", "db": "split", "range": range}));
        eventually("both copies' jobs completed", || {
            all_completed(n1, "split", 2)
        });
        // And some after the map names the halves.
        let after = written.lock().unwrap().len() + 20;
        eventually("writes after the split", || {
            written.lock().unwrap().len() > after
        });
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        watcher.join().unwrap();
        created
    });
    assert_eq!(created.status, 201, "{}", created.text);
    let created = created.json();
    let created = created.as_array().unwrap();
    assert_eq!(created.len(), 2);
    let source = created[0]["shard"].as_str().unwrap().to_owned();
    assert!(source.starts_with(&format!("shards/{range}/split.")));
    for (entry, node) in created.iter().zip(holders.as_array().unwrap()) {
        let keys: Vec<&String> = entry.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["ok", "id", "node", "shard"]);
        assert_eq!(entry["node"], *node);
        assert_eq!(entry["shard"], source);
        assert!(entry["id"].as_str().unwrap().starts_with("001-"));
    }
    assert!(
        seen_task.load(Ordering::Relaxed),
        "no shard_split task seen"
    );
    let during = written.into_inner().unwrap();
    acked.extend(during);

    // The map: the range replaced by its halves, on the same members, everywhere.
    let halves: Vec<String> = {
        let (b, e) = range.split_once('-').unwrap();
        let (b, e) = (
            u64::from_str_radix(b, 16).unwrap(),
            u64::from_str_radix(e, 16).unwrap(),
        );
        let len = e - b + 1;
        let mid = b + len / 2;
        vec![
            format!("{b:08x}-{:08x}", mid - 1),
            format!("{mid:08x}-{e:08x}"),
        ]
    };
    for n in &nodes {
        let now = shards(n, "split");
        assert_eq!(now.as_object().unwrap().len(), 3, "{now}");
        for h in &halves {
            assert_eq!(now[h], holders, "{now}");
        }
        assert!(now.get(&range).is_none());
        assert_eq!(n.get("/split").json()["cluster"]["q"], 3);
    }
    // Each member that held the copy holds the halves and no longer the copy.
    for holder in holders.as_array().unwrap() {
        let i = NAMES.iter().position(|n| *n == holder).unwrap();
        assert_eq!(nodes[i].get(&format!("/{}", enc(&source))).status, 404);
        for h in &halves {
            let half = source.replace(&range, h);
            assert_eq!(nodes[i].get(&format!("/{}", enc(&half))).status, 200);
        }
    }

    // The purge is in the half of its document on each member holding it.
    let half_of_purged = halves
        .iter()
        .find(|h| {
            let (b, e) = settee_core::shards::parse_range(h).unwrap();
            (b..=e).contains(&settee_core::shards::hash(&purged, false))
        })
        .unwrap();
    for holder in holders.as_array().unwrap() {
        let i = NAMES.iter().position(|n| *n == holder).unwrap();
        let half = source.replace(&range, half_of_purged);
        let info = nodes[i].get(&format!("/{}", enc(&half))).json();
        let purge_seq = info["purge_seq"].as_str().unwrap();
        let counted: u64 = purge_seq.split('-').next().unwrap().parse().unwrap();
        assert_eq!(counted, 1, "{info}");
    }

    // Nothing acknowledged was lost, and every document is as it was.
    for n in &nodes {
        refused(
            n.get(&format!("/split/{purged}")),
            404,
            "not_found",
            "missing",
        );
        assert_eq!(all_ids(n, "split"), acked);
        let c = n.get("/split/conflicted?conflicts=true").json();
        assert_eq!(c["_conflicts"].as_array().map(Vec::len), Some(1), "{c}");
        refused(n.get("/split/gone"), 404, "not_found", "deleted");
        let a = n.get("/split/withatt/a.txt");
        assert_eq!((a.status, a.text.as_str()), (200, "hello"));
        assert_eq!(n.get("/split/_local/mine").json()["kept"], 1);
        assert_eq!(
            n.get("/split").json()["doc_count"],
            acked.len(),
            "doc_count on a member"
        );
    }

    // The jobs as CouchDB shows them: every step in the history, on every member alike.
    let all = jobs(n1);
    assert_eq!(all, jobs(&nodes[2]));
    let j = &all[0];
    let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "id",
            "type",
            "source",
            "target",
            "job_state",
            "split_state",
            "state_info",
            "node",
            "start_time",
            "update_time",
            "history"
        ]
    );
    assert_eq!(j["type"], "split");
    assert_eq!(j["split_state"], "completed");
    assert_eq!(j["state_info"], json!({}));
    let targets: Vec<String> = halves.iter().map(|h| source.replace(&range, h)).collect();
    assert_eq!(j["target"], json!(targets));
    let steps: Vec<(String, Value)> = (j["history"].as_array().unwrap().iter())
        .map(|h| (h["type"].as_str().unwrap().to_owned(), h["detail"].clone()))
        .collect();
    let mut expected = vec![("new".to_owned(), Value::Null)];
    for s in [
        "initial_copy",
        "topoff1",
        "build_indices",
        "topoff2",
        "copy_local_docs",
        "update_shardmap",
        "wait_source_close",
        "topoff3",
        "source_delete",
    ] {
        expected.push(("running".into(), json!(s)));
    }
    expected.push(("completed".into(), Value::Null));
    assert_eq!(steps, expected);
    let id = j["id"].as_str().unwrap();
    assert_eq!(n1.get(&format!("/_reshard/jobs/{id}")).json(), *j);
    assert_eq!(
        nodes[1]
            .get(&format!("/_reshard/jobs/{id}/state"))
            .text
            .trim_end(),
        r#"{"state":"completed","reason":null}"#
    );
    assert_eq!(
        n1.get("/_reshard").text.trim_end(),
        r#"{"state":"running","state_reason":null,"completed":2,"failed":0,"running":0,"stopped":0,"total":2}"#
    );
    // The split copy is no longer there to split again.
    refused(
        post(json!({"type": "split", "shard": source})),
        404,
        "not_found",
        "missing",
    );
    let r = nodes[2].delete(&format!("/_reshard/jobs/{id}"));
    assert_eq!((r.status, r.text.trim_end()), (200, r#"{"ok":true}"#));
    eventually("the job forgotten everywhere", || {
        n1.get(&format!("/_reshard/jobs/{id}")).status == 404
    });

    // A partitioned database splits by partition: a partition stays whole in one half.
    assert_eq!(n1.put("/parts?q=1&n=3&partitioned=true", "").status, 201);
    let docs: Vec<Value> = (0..40)
        .map(|i| json!({"_id": format!("p{}:d{i:02}", i % 4)}))
        .collect();
    let r = n1.post("/parts/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let r = post(json!({"type": "split", "db": "parts"}));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json().as_array().unwrap().len(), 3);
    eventually("the partitioned split completed", || {
        all_completed(n1, "parts", 3)
    });
    for n in &nodes {
        assert_eq!(shards(n, "parts").as_object().unwrap().len(), 2);
        for p in 0..4 {
            let r = n.get(&format!("/parts/_partition/p{p}/_all_docs"));
            assert_eq!(r.json()["rows"].as_array().unwrap().len(), 10, "{}", r.text);
        }
    }
}

#[test]
fn jobs_stop_and_resume_and_a_down_members_job_is_taken_over() {
    let (etcd, dirs, mut nodes) = three_members();
    let n1 = &nodes[0];
    assert_eq!(n1.put("/held?q=1&n=3", "").status, 201);
    let docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("d{i:02}")}))
        .collect();
    assert_eq!(
        n1.post("/held/_bulk_docs", &json!({ "docs": docs }).to_string())
            .status,
        201
    );
    let ids: BTreeSet<String> = (0..30).map(|i| format!("d{i:02}")).collect();

    // Switched off, jobs are made stopped.
    let r = n1.put("/_reshard/state", r#"{"state": "stopped"}"#);
    assert_eq!((r.status, r.text.trim_end()), (200, r#"{"ok":true}"#));
    assert_eq!(
        nodes[1].get("/_reshard/state").text.trim_end(),
        r#"{"state":"stopped","reason":"Cluster-wide resharding stopped by the user"}"#
    );
    let r = n1.post("/_reshard/jobs", r#"{"type": "split", "db": "held"}"#);
    assert_eq!(r.status, 201, "{}", r.text);
    let made: Vec<String> = (r.json().as_array().unwrap().iter())
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(made.len(), 3);
    // The same copies again: each job exists already (CouchDB's 500 when none is made).
    let again = n1.post("/_reshard/jobs", r#"{"type": "split", "db": "held"}"#);
    assert_eq!(again.status, 500, "{}", again.text);
    assert_eq!(again.json()[0]["error"], "job_already_exists");
    for j in jobs(n1) {
        assert_eq!(j["job_state"], "stopped");
        assert_eq!(j["state_info"]["reason"], "Shard splitting disabled");
    }
    assert_eq!(
        n1.get("/_reshard").text.trim_end(),
        r#"{"state":"stopped","state_reason":"Cluster-wide resharding stopped by the user","completed":0,"failed":0,"running":0,"stopped":3,"total":3}"#
    );
    // One job stopped by its own state stays stopped when the switch is turned back on.
    let own = &made[0];
    let r = n1.put(
        &format!("/_reshard/jobs/{own}/state"),
        r#"{"state": "stopped", "reason": "mine"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let job_node = |id: &str| {
        n1.get(&format!("/_reshard/jobs/{id}")).json()["node"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // The member of another job stops: its job is taken over once the switch is on.
    let down = job_node(&made[1]);
    let down_i = NAMES.iter().position(|n| *n == down).unwrap();
    let alive = (0..3).find(|i| *i != down_i).unwrap();
    nodes[down_i].stop();
    eventually("the member no longer running", || {
        membership(&nodes[alive]).0.as_array().unwrap().len() == 2
    });
    let r = nodes[alive].put("/_reshard/state", r#"{"state": "running"}"#);
    assert_eq!(r.status, 200, "{}", r.text);
    let state = |id: &str| {
        nodes[alive]
            .get(&format!("/_reshard/jobs/{id}/state"))
            .json()
    };
    assert_eq!(state(own), json!({"state": "stopped", "reason": "mine"}));
    // The others wait for it at the map's edit.
    eventually("the running jobs waiting for the stopped one", || {
        (made.iter().filter(|id| *id != own)).all(|id| {
            let j = nodes[alive].get(&format!("/_reshard/jobs/{id}")).json();
            j["split_state"] == "update_shardmap"
        })
    });
    assert_eq!(
        shards(&nodes[alive], "held").as_object().unwrap().len(),
        1,
        "the map is edited only once every copy has its halves"
    );
    let r = nodes[alive].put(
        &format!("/_reshard/jobs/{own}/state"),
        r#"{"state": "running"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    eventually("every job completed", || {
        all_completed(&nodes[alive], "held", 3)
    });
    let shards_now = shards(&nodes[alive], "held");
    assert_eq!(shards_now.as_object().unwrap().len(), 2);
    for holders in shards_now.as_object().unwrap().values() {
        assert_eq!(holders.as_array().unwrap().len(), 3);
    }
    assert_eq!(all_ids(&nodes[alive], "held"), ids);

    // The member comes back: its old copy goes, and internal replication gives it the
    // halves, filled.
    let source = jobs(&nodes[alive])
        .into_iter()
        .find(|j| j["node"] == down.as_str())
        .unwrap();
    nodes[down_i] = member(&etcd, &down, dirs[down_i].path());
    let back = &nodes[down_i];
    eventually("the old copy deleted on its return", || {
        back.get(&format!("/{}", enc(source["source"].as_str().unwrap())))
            .status
            == 404
    });
    for half in source["target"].as_array().unwrap() {
        eventually("a half made on the returned member", || {
            let r = back.get(&format!("/{}", enc(half.as_str().unwrap())));
            r.status == 200
        });
    }
    eventually("the returned member's halves filled", || {
        let total: u64 = (source["target"].as_array().unwrap().iter())
            .map(|h| {
                back.get(&format!("/{}", enc(h.as_str().unwrap()))).json()["doc_count"]
                    .as_u64()
                    .unwrap_or(0)
            })
            .sum();
        total == 30
    });
    assert_eq!(all_ids(back, "held"), ids);

    // `settee cluster split` asks for a split and waits for its jobs.
    let half = source["target"][0]
        .as_str()
        .unwrap()
        .split('/')
        .nth(1)
        .unwrap();
    let url = admin_url(back);
    let out = ok(&["cluster", "split", "--url", &url, "held", "--range", half]);
    assert!(out.contains("split; held now has these ranges:"), "{out}");
    let now = shards(back, "held");
    assert_eq!(now.as_object().unwrap().len(), 3, "{now}");
    assert!(now.get(half).is_none());
    assert_eq!(all_ids(&nodes[0], "held"), ids);
    let failed = settee(&["cluster", "split", "--url", &url, "nope"]);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("Invalid `db`"));
}

/// Sets `[reshard] key` on member `s`.
fn set(s: &Server, key: &str, value: &str) {
    let r = s.put(
        &format!("/_node/_local/_config/reshard/{key}"),
        &json!(value).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

/// The answer's entry for member `node`'s copy.
fn entry_of(answer: &Value, node: &str) -> Value {
    (answer.as_array().unwrap().iter())
        .find(|e| e["node"] == node)
        .unwrap_or_else(|| panic!("no entry of {node}: {answer}"))
        .clone()
}

/// `build_indices` builds, on both halves, the index of every design document with
/// views (a Mango json index's too), before the map names them: once the split is done,
/// queries that must not build (`update=false`, `update: false`) find every row. With
/// `[mem3_reshard] delete_source = false` (where CouchDB reads it) the split copy stays.
#[test]
fn a_split_builds_the_halves_indexes() {
    let (_etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];
    let secs = || {
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
            .unwrap()
            .as_secs()
    };
    let t0 = secs();
    assert_eq!(n1.put("/idx?q=1&n=1", "").status, 201);
    let holder = shards(n1, "idx")["00000000-ffffffff"][0].clone();
    let holder = &nodes[NAMES.iter().position(|n| *n == holder).unwrap()];
    let copy = (t0..=secs())
        .map(|t| format!("/{}", enc(&format!("shards/00000000-ffffffff/idx.{t}"))))
        .find(|c| holder.get(c).status == 200)
        .expect("the copy");
    let r = holder.put(
        "/_node/_local/_config/mem3_reshard/delete_source",
        r#""false""#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let docs: Vec<Value> = (0..50)
        .map(|i| json!({"_id": format!("d{i:02}"), "v": i}))
        .collect();
    let r = n1.post("/idx/_bulk_docs", &json!({ "docs": docs }).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let ddoc = json!({"views": {"by_v": {"map": "function(doc) { emit(doc.v, null); }"}}});
    assert_eq!(n1.put("/idx/_design/v", &ddoc.to_string()).status, 201);
    let index = json!({"index": {"fields": ["v"]}, "ddoc": "by-v", "name": "v"});
    assert_eq!(n1.post("/idx/_index", &index.to_string()).status, 200);
    let before = n1.get("/idx/_changes").json();
    assert_eq!(before["results"].as_array().map(Vec::len), Some(52));
    let before = before["last_seq"].as_str().unwrap().to_owned();

    let r = n1.post(
        "/_reshard/jobs",
        &json!({"type": "split", "db": "idx"}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    eventually("the split completed", || all_completed(n1, "idx", 1));
    assert_eq!(shards(n1, "idx").as_object().unwrap().len(), 2);
    let r = holder.get(&copy);
    assert_eq!(
        (r.status, &r.json()["doc_count"]),
        (200, &json!(52)),
        "{}",
        r.text
    );

    let r = n1.get("/idx/_design/v/_view/by_v?update=false");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["rows"].as_array().map(Vec::len),
        Some(50),
        "{}",
        r.text
    );
    let q =
        json!({"selector": {"v": {"$gte": 0}}, "use_index": "by-v", "limit": 100, "update": false});
    let r = n1.post("/idx/_find", &q.to_string());
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["docs"].as_array().map(Vec::len),
        Some(50),
        "{}",
        r.text
    );

    // A feed read up to before the split resumes on the halves where the split's copies
    // into them vouch (CouchDB's `find_split_target_seq`): only what came since, on any
    // member.
    assert_eq!(n1.put("/idx/after", "{}").status, 201);
    for n in &nodes {
        assert_eq!(changes_ids_since(n, "idx", &before), ["after"]);
    }

    // The database deleted: its completed job is forgotten, as CouchDB's.
    assert_eq!(n1.delete("/idx").status, 200);
    eventually("the completed job forgotten", || {
        (jobs(&nodes[1]).iter()).all(|j| j["source"].as_str().is_none_or(|s| !s.contains("/idx.")))
    });
}

#[test]
fn reshard_settings_are_read_as_couchdb_reads_them() {
    let (_etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];
    assert_eq!(
        n1.get("/_node/_local/_config/reshard").json(),
        json!({"max_jobs": "48", "max_history": "20", "max_retries": "5",
               "retry_interval_sec": "10", "require_node_param": "false",
               "require_range_param": "false"})
    );
    assert_eq!(n1.put("/lim?q=2&n=3", "").status, 201);
    let ranges: Vec<String> = shards(n1, "lim")
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    // Jobs are made stopped while the switch is off, and run once it is on.
    assert_eq!(
        n1.put("/_reshard/state", r#"{"state": "stopped"}"#).status,
        200
    );
    let post = |s: &Server, body: Value| s.post("/_reshard/jobs", &body.to_string());

    // Required parameters: the coordinating member's settings, checked in CouchDB's order.
    set(n1, "require_node_param", "true");
    set(n1, "require_range_param", "true");
    let range = &ranges[0];
    for (body, reason) in [
        (json!({"db": "lim"}), "`node` prameter is required"),
        (
            json!({"db": "lim", "range": range}),
            "`node` prameter is required",
        ),
        (
            json!({"db": "lim", "node": NAMES[0]}),
            "`range` prameter is required",
        ),
        (
            json!({"shard": format!("shards/{range}/lim.1")}),
            "`node` prameter is required",
        ),
    ] {
        let mut body = body;
        body["type"] = json!("split");
        refused(post(n1, body), 400, "bad_request", reason);
    }
    set(n1, "require_range_param", "false");
    refused(
        post(n1, json!({"type": "split", "db": "lim"})),
        400,
        "bad_request",
        "`node` prameter is required",
    );

    // `max_jobs` is the setting of the member holding the copy, read at each request;
    // `node` asks for that member's copy only.
    set(&nodes[1], "max_jobs", "1");
    let asked =
        |range: &str| json!({"type": "split", "db": "lim", "node": NAMES[1], "range": range});
    let r = post(n1, asked(&ranges[0]));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json().as_array().unwrap().len(), 1, "{}", r.text);
    assert_eq!(entry_of(&r.json(), NAMES[1])["ok"], true, "{}", r.text);
    let r = post(n1, asked(&ranges[1]));
    assert_eq!(r.status, 500, "{}", r.text);
    let answer = r.json();
    let shard = format!(
        "shards/{}/lim.{}",
        ranges[1],
        entry_of(&answer, NAMES[1])["shard"]
            .as_str()
            .unwrap()
            .rsplit('.')
            .next()
            .unwrap()
    );
    assert_eq!(
        answer,
        json!([{"error": "max_jobs_exceeded", "node": NAMES[1], "shard": shard}])
    );
    // Raised, it lets the job be made.
    set(&nodes[1], "max_jobs", "2");
    let r = post(n1, asked(&ranges[1]));
    assert_eq!(r.status, 201, "{}", r.text);
    // Without `node`, every copy: those that have their job are said to (202).
    let r = post(&nodes[2], json!({"type": "split", "db": "lim"}));
    assert_eq!(r.status, 202, "{}", r.text);
    let answer = r.json();
    let errors: Vec<&Value> = (answer.as_array().unwrap().iter())
        .filter(|e| e.get("error").is_some())
        .collect();
    assert_eq!(answer.as_array().unwrap().len(), 6, "{answer}");
    assert_eq!(errors.len(), 2, "{answer}");
    assert!(
        errors
            .iter()
            .all(|e| e["error"] == "job_already_exists" && e["node"] == NAMES[1]),
        "{answer}"
    );
    // None made: 500; a copy that has its job is said to, even on a member at its limit.
    // The coordinating member's own `require_node_param` (unset) applies.
    let r = post(&nodes[2], json!({"type": "split", "db": "lim"}));
    assert_eq!(r.status, 500, "{}", r.text);
    let answer = r.json();
    assert_eq!(answer.as_array().unwrap().len(), 6, "{answer}");
    assert_eq!(
        (answer.as_array().unwrap().iter())
            .filter(|e| e["error"] == "job_already_exists")
            .count(),
        6,
        "{answer}"
    );

    // `max_history`: the history keeps the newest entries, on every member that edits it.
    for n in &nodes {
        set(n, "max_history", "3");
        set(n, "retry_interval_sec", "0");
    }
    assert_eq!(
        n1.put("/_reshard/state", r#"{"state": "running"}"#).status,
        200
    );
    eventually("the splits completed", || all_completed(n1, "lim", 6));
    for j in jobs(n1) {
        let steps: Vec<(&str, &Value)> = (j["history"].as_array().unwrap().iter())
            .map(|h| (h["type"].as_str().unwrap(), &h["detail"]))
            .collect();
        assert_eq!(
            steps,
            [
                ("running", &json!("topoff3")),
                ("running", &json!("source_delete")),
                ("completed", &Value::Null)
            ],
            "{j}"
        );
    }

    // `max_retries` and `retry_interval_sec` (0, above): a step failing is tried again
    // that many times, then the job fails (with the defaults, after a minute).
    assert_eq!(n1.put("/gone?q=1&n=3", "").status, 201);
    assert_eq!(
        n1.put("/_reshard/state", r#"{"state": "stopped"}"#).status,
        200
    );
    set(&nodes[1], "max_jobs", "3");
    let r = post(&nodes[1], json!({"type": "split", "db": "gone"}));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(n1.delete("/gone").status, 200);
    for n in &nodes {
        set(n, "max_retries", "1");
    }
    assert_eq!(
        n1.put("/_reshard/state", r#"{"state": "running"}"#).status,
        200
    );
    eventually("the jobs of the deleted database failed", || {
        let of_gone: Vec<Value> = (jobs(n1).into_iter())
            .filter(|j| j["source"].as_str().unwrap().contains("/gone."))
            .collect();
        of_gone.len() == 3 && of_gone.iter().all(|j| j["job_state"] == "failed")
    });
}

/// Splitting one member's copies at a time, as CouchDB's `node` parameter asks: each
/// member's jobs wait for the range's other copies' at `update_shardmap`, and the range is
/// split once, when every copy has its halves; nothing written is lost.
#[test]
fn a_split_asked_node_by_node_splits_each_range_once() {
    let (_etcd, _dirs, nodes) = three_members();
    let n1 = &nodes[0];
    assert_eq!(n1.put("/pn?q=1&n=3", "").status, 201);
    let docs: Vec<Value> = (0..40).map(|i| json!({"_id": format!("d{i}")})).collect();
    let r = n1.post("/pn/_bulk_docs", &json!({"docs": docs}).to_string());
    assert_eq!(r.status, 201, "{}", r.text);
    let post = |s: &Server, node: &str| {
        let body = json!({"type": "split", "db": "pn", "node": node});
        s.post("/_reshard/jobs", &body.to_string())
    };
    let r = post(n1, NAMES[0]);
    assert_eq!(r.status, 201, "{}", r.text);
    let answer = r.json();
    assert_eq!(answer.as_array().unwrap().len(), 1, "{answer}");
    assert_eq!(answer[0]["node"], NAMES[0]);
    // The first member's job gets as far as the map's edit and waits there.
    let state = |s: &Server| {
        let j = (jobs(s).into_iter())
            .find(|j| j["node"] == NAMES[0])
            .expect("the first member's job");
        (j["job_state"].clone(), j["split_state"].clone())
    };
    eventually("the first copy's job waiting for the others", || {
        state(&nodes[1]) == (json!("running"), json!("update_shardmap"))
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(
        state(&nodes[2]),
        (json!("running"), json!("update_shardmap"))
    );
    assert_eq!(shards(n1, "pn").as_object().unwrap().len(), 1);
    // It says what it waits for.
    let others = format!("on {}, {} (", NAMES[1], NAMES[2]);
    eventually("the waiting job naming the members it waits for", || {
        let waiting = (jobs(&nodes[2]).into_iter())
            .find(|j| j["node"] == NAMES[0])
            .unwrap();
        let reason = waiting["state_info"]["reason"].as_str().unwrap_or_default();
        reason.contains(&others)
    });
    for (s, node) in [(&nodes[1], NAMES[1]), (&nodes[2], NAMES[2])] {
        let r = post(s, node);
        assert_eq!(r.status, 201, "{}", r.text);
    }
    eventually("the three jobs completed", || all_completed(n1, "pn", 3));
    for j in jobs(n1) {
        assert_eq!(j["state_info"], json!({}), "{j}");
    }
    let map = shards(&nodes[1], "pn");
    let ranges: Vec<&String> = map.as_object().unwrap().keys().collect();
    assert_eq!(ranges, ["00000000-7fffffff", "80000000-ffffffff"], "{map}");
    for n in &nodes {
        assert_eq!(all_ids(n, "pn").len(), 40);
    }
}

/// `max_jobs` holds under requests made at once: asked on two members at the same time
/// for two copies of a member with room for one job more, one job is made.
#[test]
fn max_jobs_holds_for_requests_made_at_once() {
    let (_etcd, _dirs, nodes) = three_members();
    let stopped = nodes[0].put("/_reshard/state", r#"{"state": "stopped"}"#);
    assert_eq!(stopped.status, 200, "{}", stopped.text);
    assert_eq!(nodes[0].put("/race?q=8&n=3", "").status, 201);
    let ranges: Vec<String> = (shards(&nodes[0], "race").as_object().unwrap().keys())
        .cloned()
        .collect();
    for (k, pair) in ranges.chunks(2).enumerate() {
        set(&nodes[1], "max_jobs", &(k + 1).to_string());
        let answers: Vec<Resp> = std::thread::scope(|scope| {
            let asks: Vec<_> = [(&nodes[0], &pair[0]), (&nodes[2], &pair[1])]
                .into_iter()
                .map(|(s, range)| {
                    let body = json!({"type": "split", "db": "race", "node": NAMES[1],
                                      "range": range});
                    scope.spawn(move || s.post("/_reshard/jobs", &body.to_string()))
                })
                .collect();
            asks.into_iter().map(|a| a.join().unwrap()).collect()
        });
        let mut statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
        statuses.sort();
        assert_eq!(
            statuses,
            [201, 500],
            "{:?}",
            answers.iter().map(|r| &r.text).collect::<Vec<_>>()
        );
        let refused = answers.iter().find(|r| r.status == 500).unwrap().json();
        assert_eq!(refused[0]["error"], "max_jobs_exceeded", "{refused}");
    }
    assert_eq!(jobs(&nodes[2]).len(), 4);
}
