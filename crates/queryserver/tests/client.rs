//! The client against scripted fake servers (`fixtures/fake_qs.py`, stdlib Python).

use serde_json::{json, Value};
use settee_queryserver::{
    Command, DdocRef, Error, Languages, Process, QueryServers, Settings, Setup,
};
use std::time::{Duration, Instant};

fn fake(extra: &[&str]) -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake_qs.py");
    let mut args = vec![script.to_owned()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Command {
        program: "python3".into(),
        args,
    }
}

fn servers(extra: &[&str], timeout_ms: u64, max: usize) -> QueryServers {
    let mut langs = Languages::default();
    langs.0.insert("fake".into(), fake(extra));
    QueryServers::new(
        langs,
        Settings {
            timeout: Duration::from_millis(timeout_ms),
            max_processes: max,
            reduce_limit: true,
            idle_limit: Duration::from_secs(300),
        },
    )
}

fn id_map() -> Setup {
    Setup::views(
        None,
        &[r#"[[doc["_id"], 1]]"#, r#"[[doc.get("n", 0), None]]"#],
    )
}

/// Whether a process still exists (a reaped child leaves no `/proc` entry).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn docs(n: usize, pad: usize) -> Vec<Vec<u8>> {
    let pad = "x".repeat(pad);
    (0..n)
        .map(|i| format!(r#"{{"_id":"d{i:05}","n":{i},"pad":"{pad}"}}"#).into_bytes())
        .collect()
}

#[test]
fn maps_a_pipelined_batch_and_reuses_the_loaded_process() {
    let qs = servers(&[], 5000, 4);
    let docs = docs(3000, 2000);
    let refs: Vec<&[u8]> = docs.iter().map(Vec::as_slice).collect();
    let pid = {
        let mut p = qs.checkout("fake", &id_map()).unwrap();
        let out = p.map_docs(&refs).unwrap();
        assert_eq!(out.len(), 3000);
        assert_eq!(
            out[7],
            [
                vec![(json!("d00007"), json!(1))],
                vec![(json!(7), Value::Null)]
            ]
        );
        p.pid()
    };
    assert_eq!(qs.counts("fake"), (1, 1));
    let mut p = qs.checkout("fake", &id_map()).unwrap();
    assert_eq!(p.pid(), pid, "the loaded process is reused");
    assert_eq!(p.map_docs(&refs[..2]).unwrap().len(), 2);
    // Another group's functions: a second process, since the cap allows it.
    let other = Setup::views(None, &["[]"]);
    let q = qs.checkout("fake", &other).unwrap();
    assert_ne!(q.pid(), pid);
    assert_eq!(qs.counts("fake"), (2, 0));
}

#[test]
fn reduces_and_rereduces() {
    let qs = servers(&[], 5000, 2);
    let mut p = qs.checkout_any("fake").unwrap();
    let (k1, k2, v1, v2) = (json!("a"), json!("b"), json!(1), json!(2));
    let got = p
        .reduce(
            &["sum(values)", "len(keys)"],
            &[(&k1, "x", &v1), (&k2, "y", &v2)],
        )
        .unwrap();
    assert_eq!(got, [json!(3), json!(2)]);
    assert_eq!(
        p.rereduce(&["sum(values)"], &[&v1, &v2]).unwrap(),
        [json!(3)]
    );
}

#[test]
fn log_lines_are_skipped() {
    let qs = servers(&["--log"], 5000, 1);
    let mut p = qs.checkout("fake", &id_map()).unwrap();
    let docs = docs(50, 10);
    let refs: Vec<&[u8]> = docs.iter().map(Vec::as_slice).collect();
    let out = p.map_docs(&refs).unwrap();
    assert_eq!(out.len(), 50);
    assert_eq!(out[49][1], [(json!(49), Value::Null)]);
}

#[test]
fn a_crash_mid_batch_is_reported_and_the_process_replaced() {
    let qs = servers(&[], 5000, 1);
    let mut batch = docs(100, 10);
    batch[60] = br#"{"_id":"boom","crash":true}"#.to_vec();
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let pid = {
        let mut p = qs.checkout("fake", &id_map()).unwrap();
        let pid = p.pid();
        assert_eq!(p.map_docs(&refs).unwrap_err(), Error::Exited(Some(3)));
        assert!(p.is_broken());
        pid
    };
    assert!(!alive(pid), "the crashed process was reaped");
    assert_eq!(qs.counts("fake"), (0, 0));
    let mut p = qs.checkout("fake", &id_map()).unwrap();
    assert_ne!(p.pid(), pid);
    assert_eq!(p.map_docs(&refs[..60]).unwrap().len(), 60);
    let (error, reason) = Error::Exited(Some(3)).parts();
    assert_eq!(
        (error.as_str(), reason.as_str()),
        ("os_process_error", "{exit_status,3}")
    );
}

#[test]
fn a_hung_process_times_out_and_is_killed() {
    let qs = servers(&[], 1000, 1);
    let mut batch = docs(10, 10);
    batch[3] = br#"{"_id":"stuck","hang":true}"#.to_vec();
    // Enough text after the hang to fill the pipe: the writer must not stay blocked.
    batch.extend(docs(200, 4000));
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let started = Instant::now();
    let pid = {
        let mut p = qs.checkout("fake", &id_map()).unwrap();
        let pid = p.pid();
        assert_eq!(p.map_docs(&refs).unwrap_err(), Error::Timeout);
        pid
    };
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(!alive(pid));
    assert_eq!(Error::Timeout.parts().1, "OS process timed out.");
    let mut p = qs.checkout("fake", &id_map()).unwrap();
    assert_eq!(p.map_docs(&refs[..3]).unwrap().len(), 3);
}

#[test]
fn slow_answers_within_the_timeout_are_fine() {
    let qs = servers(&[], 1000, 1);
    let batch: Vec<Vec<u8>> = (0..3)
        .map(|i| format!(r#"{{"_id":"s{i}","slow":true}}"#).into_bytes())
        .collect();
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let mut p = qs.checkout("fake", &id_map()).unwrap();
    // The deadline is per answer: 3 x 0.2 s in total is fine with 1 s each.
    assert_eq!(p.map_docs(&refs).unwrap().len(), 3);
}

#[test]
fn garbage_breaks_the_process() {
    let qs = servers(&[], 5000, 1);
    let batch = [br#"{"_id":"g","garbage":true}"#.to_vec()];
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let pid = {
        let mut p = qs.checkout("fake", &id_map()).unwrap();
        assert!(matches!(p.map_docs(&refs), Err(Error::Garbage(_))));
        p.pid()
    };
    assert!(!alive(pid));
    // A wrong-shaped answer is garbage too.
    let mut p = qs.checkout("fake", &Setup::views(None, &["5"])).unwrap();
    assert!(matches!(p.map_docs(&[b"{}"]), Err(Error::Garbage(_))));
}

#[test]
fn error_answers_keep_the_process_fatal_ones_do_not() {
    let qs = servers(&[], 5000, 1);
    let pid = {
        let mut p = qs.checkout_any("fake").unwrap();
        let err = p.prompt(&json!(["nonsense"])).unwrap_err();
        assert_eq!(
            err,
            Error::Server {
                error: "unknown_command".into(),
                reason: "nonsense".into()
            }
        );
        assert!(!p.is_broken() && err.process_survives());
        let (k, v) = (json!(1), json!({"fatal": true}));
        let err = p.reduce(&["sum(values)"], &[(&k, "a", &v)]).unwrap_err();
        assert!(matches!(err, Error::Fatal { ref error, .. } if error == "my_fatal"));
        assert!(p.is_broken());
        p.pid()
    };
    assert!(!alive(pid));
    assert_eq!(qs.counts("fake"), (0, 0));
}

#[test]
fn the_cap_makes_checkouts_wait_and_reload_drops_idle_processes() {
    let qs = std::sync::Arc::new(servers(&[], 5000, 2));
    let a = qs.checkout_any("fake").unwrap();
    let b = qs.checkout_any("fake").unwrap();
    let (pa, pb) = (a.pid(), b.pid());
    let qs2 = qs.clone();
    let waiter = std::thread::spawn(move || qs2.checkout_any("fake").unwrap().pid());
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "a third checkout waits at the cap");
    drop(a);
    assert_eq!(waiter.join().unwrap(), pa);
    assert_eq!(qs.counts("fake"), (2, 1));
    qs.reload();
    assert!(!alive(pa), "idle processes stop on reload");
    assert!(alive(pb), "busy ones finish their work");
    drop(b);
    assert!(!alive(pb), "and stop when returned");
    assert_eq!(qs.counts("fake"), (0, 0));
}

#[test]
fn unknown_languages_and_unstartable_commands_fail_cleanly() {
    let qs = servers(&[], 5000, 1);
    assert_eq!(
        qs.checkout_any("cobol").err().unwrap(),
        Error::UnknownLanguage("cobol".into())
    );
    let mut langs = Languages::default();
    langs
        .0
        .insert("nope".into(), Command::parse("/nonexistent/qs").unwrap());
    let qs = QueryServers::new(langs, Settings::default());
    assert!(matches!(qs.checkout_any("nope"), Err(Error::Spawn { .. })));
    assert_eq!(qs.counts("nope"), (0, 0), "the slot is given back");
}

#[test]
fn design_document_calls_teach_the_ddoc_once_per_revision() {
    let qs = servers(&[], 5000, 1);
    let body = json!({"_id": "_design/x", "_rev": "1-a", "tag": "one"});
    let d = DdocRef {
        id: "_design/x",
        rev: "1-a",
        body: &body,
    };
    let shown = qs
        .show(
            "fake",
            &d,
            "s",
            json!({"_id": "doc"}),
            json!({"method": "GET"}),
        )
        .unwrap();
    assert_eq!(
        shown,
        json!(["answer", "one", ["shows", "s"], [{"_id": "doc"}, {"method": "GET"}]])
    );
    let filtered = qs
        .filter("fake", &d, "f", &[json!({"_id": "a"})], json!({}))
        .unwrap();
    assert_eq!(filtered[2], json!(["filters", "f"]));
    assert_eq!(
        qs.validate("fake", &d, json!({}), Value::Null, json!({}), json!({}))
            .unwrap()[2],
        json!(["validate_doc_update"])
    );
    assert_eq!(
        qs.update("fake", &d, "u", Value::Null, json!({})).unwrap()[2],
        json!(["updates", "u"])
    );
    assert_eq!(
        qs.rewrite("fake", &d, json!({})).unwrap()[2],
        json!(["rewrites"])
    );
    assert_eq!(
        qs.view_filter("fake", &d, "v", &[]).unwrap()[2],
        json!(["views", "v", "map"])
    );
    let body2 = json!({"_id": "_design/x", "_rev": "2-b", "tag": "two"});
    let d2 = DdocRef {
        id: "_design/x",
        rev: "2-b",
        body: &body2,
    };
    assert_eq!(
        qs.show("fake", &d2, "s", Value::Null, json!({})).unwrap()[1],
        "two"
    );
    let (start, mut list) = qs
        .list("fake", &d2, "l", json!({"total_rows": 1}), json!({}))
        .unwrap();
    assert_eq!(start[2], json!(["lists", "l"]));
    assert_eq!(
        list.row(&json!({"id": "a"})).unwrap(),
        json!(["chunks", ["row {\"id\": \"a\"}"]])
    );
    assert_eq!(list.end().unwrap(), json!(["end", ["tail"]]));
    let err = qs
        .show(
            "fake",
            &d2,
            "s",
            json!({"error": true, "_id": "e"}),
            json!({}),
        )
        .unwrap_err();
    assert_eq!(err.parts(), ("my_error".into(), "bad doc e".into()));
    assert_eq!(qs.counts("fake"), (1, 1));
}

#[test]
fn no_child_outlives_its_process() {
    let dir = std::env::temp_dir().join(format!("qs-pids-{}", std::process::id()));
    let pidfile = dir.to_string_lossy().to_string();
    let _ = std::fs::remove_file(&dir);
    {
        let qs = servers(&["--pidfile", &pidfile], 5000, 3);
        let leases: Vec<_> = (0..3).map(|_| qs.checkout_any("fake").unwrap()).collect();
        drop(leases);
        let mut p =
            Process::spawn(&fake(&["--pidfile", &pidfile]), Duration::from_secs(5)).unwrap();
        assert_eq!(p.prompt(&json!(["reset", {}])).unwrap(), json!(true));
    }
    let pids: Vec<u32> = std::fs::read_to_string(&dir)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 4);
    for pid in pids {
        assert!(!alive(pid), "process {pid} was left behind");
    }
    let _ = std::fs::remove_file(&dir);
}

#[test]
fn processes_idle_past_the_limit_are_stopped() {
    let qs = servers(&[], 5000, 2);
    let pid = qs.checkout_any("fake").unwrap().pid();
    let mut settings = qs.settings();
    settings.idle_limit = Duration::from_millis(100);
    qs.set_settings(settings);
    std::thread::sleep(Duration::from_millis(300));
    let p = qs.checkout_any("fake").unwrap();
    assert_ne!(p.pid(), pid);
    assert!(!alive(pid));
    assert_eq!(qs.counts("fake"), (1, 0));
}

#[test]
fn a_list_left_mid_way_kills_its_process() {
    let qs = servers(&[], 5000, 1);
    let body = json!({"_id": "_design/x", "_rev": "1-a"});
    let d = DdocRef {
        id: "_design/x",
        rev: "1-a",
        body: &body,
    };
    // Ended: the process goes back to the pool.
    let (_, mut list) = qs.list("fake", &d, "l", json!({}), json!({})).unwrap();
    list.row(&json!({"id": "a"})).unwrap();
    list.end().unwrap();
    assert_eq!(qs.counts("fake"), (1, 1));
    // Dropped while the server waits for rows: it would read the next command as a row.
    let (_, mut list) = qs.list("fake", &d, "l", json!({}), json!({})).unwrap();
    list.row(&json!({"id": "a"})).unwrap();
    drop(list);
    assert_eq!(qs.counts("fake"), (0, 0));
    // The next call gets a new process.
    let (_, list) = qs.list("fake", &d, "l", json!({}), json!({})).unwrap();
    assert_eq!(list.end().unwrap(), json!(["end", ["tail"]]));
    assert_eq!(qs.counts("fake"), (1, 1));
}
