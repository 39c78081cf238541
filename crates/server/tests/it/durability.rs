//! A write acknowledged with 201/202-after-commit survives `kill -9`.

use crate::common;
use common::Server;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[test]
fn acknowledged_writes_survive_kill_9() {
    let mut s = Server::start();
    let s_ref = &s;
    s.create_db("db");
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let stop_at = Instant::now() + Duration::from_millis(1500);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (s, acked) = (s_ref, acked.clone());
            scope.spawn(move || {
                let mut i = 0;
                while Instant::now() < stop_at {
                    if t % 2 == 0 {
                        let id = format!("t{t}-{i}");
                        let Ok(r) = s.try_req("PUT", &format!("/db/{id}"), r#"{"v":1}"#) else {
                            break;
                        };
                        if r.status == 201 {
                            acked
                                .lock()
                                .unwrap()
                                .push((id, r.json()["rev"].as_str().unwrap().to_string()));
                        }
                    } else {
                        let docs: Vec<Value> = (0..50)
                            .map(|k| json!({"_id": format!("t{t}-{i}-{k}")}))
                            .collect();
                        let Ok(r) =
                            s.try_req("POST", "/db/_bulk_docs", &json!({"docs": docs}).to_string())
                        else {
                            break;
                        };
                        if r.status == 201 {
                            for row in r.json().as_array().unwrap() {
                                acked.lock().unwrap().push((
                                    row["id"].as_str().unwrap().into(),
                                    row["rev"].as_str().unwrap().into(),
                                ));
                            }
                        }
                    }
                    i += 1;
                }
            });
        }
        // kill while the writers are still going
        std::thread::sleep(Duration::from_millis(1000));
        s_ref.kill9();
    });
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 100,
        "enough writes were acknowledged to mean something: {}",
        acked.len()
    );
    let dir = s.take_dir();
    drop(s);
    let s2 = Server::start_in(dir.path());
    let keys: Vec<&str> = acked.iter().map(|(id, _)| id.as_str()).collect();
    let rows = s2
        .post("/db/_all_docs", &json!({"keys": keys}).to_string())
        .json();
    for (row, (id, rev)) in rows["rows"].as_array().unwrap().iter().zip(&acked) {
        assert_eq!(row["id"], json!(id), "acknowledged doc {id} lost: {row}");
        assert_eq!(row["value"]["rev"], json!(rev));
    }
    let info = s2.get("/db").json();
    assert!(info["doc_count"].as_u64().unwrap() >= acked.len() as u64);
}

#[test]
fn deleting_a_database_under_write_load() {
    let s = Server::start();
    s.create_db("db");
    let statuses = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for t in 0..3 {
            let (s, statuses) = (&s, &statuses);
            scope.spawn(move || {
                // Write until the database is gone (bounded, in case it never goes).
                for i in 0..5000 {
                    let docs: Vec<Value> = (0..200)
                        .map(|k| json!({"_id": format!("{t}-{i}-{k}")}))
                        .collect();
                    let r = s.post("/db/_bulk_docs", &json!({"docs": docs}).to_string());
                    statuses.lock().unwrap().push(r.status);
                    if r.status == 404 {
                        break;
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(s.delete("/db").status, 200);
    });
    let statuses = statuses.into_inner().unwrap();
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 404),
        "{statuses:?}"
    );
    assert!(statuses.contains(&404), "some writes came after the delete");
    assert_eq!(s.get("/db").status, 404);
    s.create_db("db");
    assert_eq!(
        s.get("/db").json()["doc_count"],
        0,
        "a re-created database starts empty"
    );
    assert_eq!(s.get("/db/_all_docs").json()["rows"], json!([]));
}
