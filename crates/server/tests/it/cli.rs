//! The client subcommands (`settee bench`, `compact`, `backup`, `restore`, `completions`),
//! run as the real binary against a real server over HTTP.

use crate::common;
use common::cli::{ok, settee};
use common::{Server, ADMIN};
use serde_json::{json, Value};
use std::path::Path;

/// The server's URL with the admin's credentials in it, plus `path`.
fn url(s: &Server, path: &str) -> String {
    format!("http://{}:{}@{}{path}", ADMIN.0, ADMIN.1, s.addr())
}

#[test]
fn bench_prints_its_table_and_writes_results_and_a_plot() {
    let s = Server::start();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("results");
    let stdout = ok(&[
        "bench",
        &url(&s, ""),
        "--docs",
        "3000",
        "--batch",
        "250",
        "--concurrency",
        "2",
        "--reads",
        "500",
        "--query-repeats",
        "3",
        "--out-dir",
        dir.to_str().unwrap(),
    ]);
    let phases = [
        "insert (_bulk_docs)",
        "view build (JS map, _sum)",
        "query: full reduce",
        "query: group_level=1",
        "query: group=true&limit=16",
        "query: range reduce",
        "query: map rows limit=10",
        "random reads (GET /db/id)",
    ];
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(lines.len(), 2 + phases.len(), "{stdout}");
    assert!(lines[0].contains("ops/s") && lines[0].contains("p99 ms"));
    for (line, phase) in lines[2..].iter().zip(phases) {
        assert!(line.starts_with(&format!("| {phase} ")), "{line}");
    }
    assert!(lines[2].contains(" 3000 "), "{}", lines[2]);

    let results: Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let got: Vec<&str> = results["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(got, phases);
    for p in results["phases"].as_array().unwrap() {
        assert!(p["ops"].as_u64().unwrap() > 0, "{p}");
        assert!(p["ops_per_sec"].as_f64().unwrap() > 0.0, "{p}");
    }
    assert_eq!(results["docs"], 3000);
    assert!(!results["server"].as_str().unwrap().contains(ADMIN.1));
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap();
    assert!(md.contains(lines[2]), "{md}");

    let svg = std::fs::read_to_string(dir.join("throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(
        svg.matches("<polyline").count() >= phases.len(),
        "a line per phase"
    );
    assert!(svg.contains("insert (_bulk_docs) (docs/s)"));
    // The benchmark's database is gone afterwards.
    assert_eq!(s.get("/settee-bench").status, 404);
}

/// A database with every kind of thing a backup must keep: documents with several
/// revisions, a conflict, deleted documents, a design document, attachments (text and
/// binary), and enough plain documents to span several batches.
fn fill_source(s: &Server, db: &str) -> Vec<u8> {
    s.create_db(db);
    let r = s.put(&format!("/{db}/multi"), r#"{"v":1}"#).json();
    let r = s
        .put(
            &format!("/{db}/multi?rev={}", r["rev"].as_str().unwrap()),
            r#"{"v":2}"#,
        )
        .json();
    let r = s
        .put(
            &format!("/{db}/multi?rev={}", r["rev"].as_str().unwrap()),
            r#"{"v":3}"#,
        )
        .json();
    assert_eq!(r["ok"], true);
    // A conflicting branch from another replica.
    let conflict = json!({"new_edits": false, "docs": [{"_id": "multi", "_rev": "3-0123456789abcdef0123456789abcdef",
        "v": "theirs", "_revisions": {"start": 3, "ids": ["0123456789abcdef0123456789abcdef", "aaaa", "bbbb"]}}]});
    assert_eq!(
        s.post(&format!("/{db}/_bulk_docs"), &conflict.to_string())
            .status,
        201
    );
    let r = s.put(&format!("/{db}/gone"), r#"{"v":1}"#).json();
    let del = s.delete(&format!("/{db}/gone?rev={}", r["rev"].as_str().unwrap()));
    assert_eq!(del.status, 200);
    let ddoc =
        json!({"views": {"by_v": {"map": "function(d) { emit(d.v, 1); }", "reduce": "_count"}}});
    assert_eq!(
        s.put(&format!("/{db}/_design/app"), &ddoc.to_string())
            .status,
        201
    );
    let binary: Vec<u8> = (0..70_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&binary);
    let att = json!({"kind": "files", "_attachments": {
        "notes.txt": {"content_type": "text/plain", "data": base64::engine::general_purpose::STANDARD.encode("hello ".repeat(500))},
        "blob.bin": {"content_type": "application/octet-stream", "data": b64}}});
    assert_eq!(s.put(&format!("/{db}/files"), &att.to_string()).status, 201);
    let docs: Vec<Value> = (0..450)
        .map(|i| json!({"_id": format!("doc{i:04}"), "n": i}))
        .collect();
    let r = s.post(
        &format!("/{db}/_bulk_docs"),
        &json!({ "docs": docs }).to_string(),
    );
    assert_eq!(r.status, 201);
    binary
}

/// Every document of `db` as the server shows it with all its revisions: the leaves per
/// id (from `_changes?style=all_docs`), and each leaf with its history and attachments.
fn snapshot(s: &Server, db: &str) -> Vec<(String, Vec<Value>)> {
    let changes = s.get(&format!("/{db}/_changes?style=all_docs")).json();
    let mut out = Vec::new();
    for c in changes["results"].as_array().unwrap() {
        let id = c["id"].as_str().unwrap().to_string();
        let mut leaves = Vec::new();
        let mut revs: Vec<&str> = c["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["rev"].as_str().unwrap())
            .collect();
        revs.sort();
        for rev in revs {
            let path = format!("/{db}/{id}?rev={rev}&revs=true&attachments=true");
            let doc = s.get(&path);
            assert_eq!(doc.status, 200, "{path}: {}", doc.text);
            leaves.push(doc.json());
        }
        out.push((id, leaves));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn backup_then_restore_gives_identical_documents_revisions_and_attachments() {
    let s = Server::start();
    let binary = fill_source(&s, "src");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("src.jsonl");
    let stdout = ok(&[
        "backup",
        &url(&s, "/src"),
        file.to_str().unwrap(),
        "--batch",
        "100",
    ]);
    assert!(
        stdout.contains("backed up 455 document revisions"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["mode"], "full");
    assert_eq!(first["attachments"], true);
    // Each further line is a JSON array of documents with their revisions.
    for line in text.lines().skip(1) {
        let docs: Vec<Value> = serde_json::from_str(line).unwrap();
        assert!(docs.len() <= 100);
        assert!(docs
            .iter()
            .all(|d| d["_rev"].is_string() && d["_revisions"].is_object()));
    }
    let log = std::fs::read_to_string(tmp.path().join("src.jsonl.log")).unwrap();
    assert!(log.contains(":changes_complete "), "{log}");
    assert_eq!(log.matches(":t batch").count(), 5);
    assert_eq!(log.matches(":d batch").count(), 5);

    // Restore with the database named on --url, credentials by flag.
    let server = format!("http://{}", s.addr());
    let user = format!("{}:{}", ADMIN.0, ADMIN.1);
    let stdout = ok(&[
        "restore",
        file.to_str().unwrap(),
        "dst",
        "--url",
        &server,
        "--user",
        &user,
    ]);
    assert!(
        stdout.contains("restored 455 document revisions into dst"),
        "{stdout}"
    );

    // Without attachment contents: stubs, and the metadata says so.
    let stubs_file = tmp.path().join("stubs.txt");
    ok(&[
        "backup",
        &url(&s, "/src"),
        stubs_file.to_str().unwrap(),
        "--no-attachments",
    ]);
    let text = std::fs::read_to_string(&stubs_file).unwrap();
    assert!(text.starts_with(r#"{"name":"settee","#) && text.contains(r#""attachments":false"#));
    assert!(text.contains(r#""stub":true"#) && !text.contains(r#""data":"#));

    let (a, b) = (snapshot(&s, "src"), snapshot(&s, "dst"));
    assert_eq!(a.len(), 454);
    assert_eq!(a, b);
    let multi = &b.iter().find(|(id, _)| id == "multi").unwrap().1;
    assert_eq!(multi.len(), 2, "both branches of the conflict");
    let winner = s.get("/dst/multi?conflicts=true").json();
    assert_eq!(winner["_rev"], s.get("/src/multi").json()["_rev"]);
    assert_eq!(
        winner["_conflicts"],
        json!(["3-0123456789abcdef0123456789abcdef"])
    );
    let gone = &b.iter().find(|(id, _)| id == "gone").unwrap().1;
    assert_eq!(gone[0]["_deleted"], true);
    assert_eq!(s.get("/dst/gone").status, 404);
    assert_eq!(
        s.get("/dst/_design/app").json()["views"]["by_v"]["reduce"],
        "_count"
    );
    let view = s.get("/dst/_design/app/_view/by_v").json();
    assert_eq!(
        view["rows"][0]["value"], 452,
        "the view works on the restored data"
    );

    let blob = s.req_bytes("GET", "/dst/files/blob.bin", Vec::new(), &[]);
    assert_eq!(blob.status, 200);
    assert_eq!(blob.body, binary);
    let stubs = |db: &str| s.get(&format!("/{db}/files")).json()["_attachments"].clone();
    assert_eq!(stubs("src"), stubs("dst"));
    assert_eq!(s.get("/dst/files/notes.txt").text, "hello ".repeat(500));
    let info = |db: &str| {
        let i = s.get(&format!("/{db}")).json();
        (i["doc_count"].clone(), i["doc_del_count"].clone())
    };
    assert_eq!(info("src"), info("dst"));
}

/// Cuts a finished backup back to what an interruption after `keep` batches leaves: those
/// lines whole, the next one half written, and the log's `:d` lines for the rest gone.
fn interrupt(file: &Path, log: &Path, keep: usize) {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut cut: String = lines[..=keep].iter().map(|l| format!("{l}\n")).collect();
    let half = lines[keep + 1];
    cut.push_str(&half[..half.len() / 2]);
    std::fs::write(file, cut).unwrap();
    let log_text = std::fs::read_to_string(log).unwrap();
    let mut done = 0;
    let kept: String = log_text
        .lines()
        .filter(|l| {
            if l.starts_with(":d ") {
                done += 1;
                done <= keep
            } else {
                true
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(log, kept).unwrap();
}

#[test]
fn an_interrupted_backup_resumes_from_its_log() {
    let s = Server::start();
    fill_source(&s, "src");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("b.txt");
    let log = tmp.path().join("b.log");
    let (f, l) = (file.to_str().unwrap(), log.to_str().unwrap());
    ok(&[
        "backup",
        &url(&s, "/src"),
        f,
        "--log",
        l,
        "--batch",
        "50",
        "--parallelism",
        "1",
    ]);
    interrupt(&file, &log, 4);

    // Restoring the cut file fails: its last line is broken and nothing marks a resume.
    let cut = settee(&["restore", f, &url(&s, "/partial")]);
    assert!(!cut.status.success());
    assert!(String::from_utf8_lossy(&cut.stderr).contains("not JSON"));

    let stdout = ok(&[
        "backup",
        &url(&s, "/src"),
        f,
        "--log",
        l,
        "--resume",
        "--batch",
        "50",
    ]);
    assert!(stdout.contains("(resumed)"), "{stdout}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&format!(
            "{}\n",
            r#"{"marker":"@cloudant/couchbackup:resume"}"#
        )),
        "the cut line is closed by couchbackup's resume marker"
    );
    let log_text = std::fs::read_to_string(&log).unwrap();
    let todo = log_text.matches(":t batch").count();
    assert_eq!(todo, 10);
    assert_eq!(
        log_text.matches(":d batch").count(),
        todo,
        "every batch done once"
    );

    ok(&["restore", f, &url(&s, "/dst")]);
    assert_eq!(snapshot(&s, "src"), snapshot(&s, "dst"));

    // A log whose `_changes` spool never finished: nothing was fetched, so the resumed
    // backup starts afresh.
    let spooled = std::fs::read_to_string(&log).unwrap();
    let cut: String = spooled.lines().take(3).map(|l| format!("{l}\n")).collect();
    std::fs::write(&log, cut).unwrap();
    std::fs::write(&file, "").unwrap();
    let stdout = ok(&[
        "backup",
        &url(&s, "/src"),
        f,
        "--log",
        l,
        "--resume",
        "--batch",
        "50",
    ]);
    assert!(
        stdout.contains("backed up 455 document revisions"),
        "{stdout}"
    );
    ok(&["restore", f, &url(&s, "/dst2")]);
    assert_eq!(snapshot(&s, "src"), snapshot(&s, "dst2"));

    // Nor without the backup file a finished spool was fetched into.
    let elsewhere = tmp.path().join("moved.txt");
    let moved = settee(&[
        "backup",
        &url(&s, "/src"),
        elsewhere.to_str().unwrap(),
        "--log",
        l,
        "--resume",
    ]);
    assert!(!moved.status.success());
    assert!(String::from_utf8_lossy(&moved.stderr).contains("is missing"));

    // Nothing to resume without a log.
    let none = settee(&[
        "backup",
        &url(&s, "/src"),
        f,
        "--log",
        "/nonexistent/x.log",
        "--resume",
    ]);
    assert!(!none.status.success());
}

#[test]
fn restore_reads_files_written_by_couchbackup() {
    let s = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    // couchbackup 2.10+: metadata, batches from `_bulk_get?revs=true`, a resume marker
    // after a line an interruption cut short.
    let new = tmp.path().join("new.txt");
    let lines = [
        r#"{"name":"@cloudant/couchbackup","version":"2.11.1","mode":"full","attachments":false}"#,
        r#"[{"_id":"a","_rev":"2-bb","v":2,"_revisions":{"start":2,"ids":["bb","aa"]}},{"_id":"b","_rev":"1-cc","_revisions":{"start":1,"ids":["cc"]}}]"#,
        r#"[{"_id":"c","_rev":"1-dd","_revisions":{"st{"marker":"@cloudant/couchbackup:resume"}"#,
        r#"[{"_id":"c","_rev":"1-dd","_revisions":{"start":1,"ids":["dd"]}},{"_id":"x","_rev":"2-ee","_deleted":true,"_revisions":{"start":2,"ids":["ee","ff"]}}]"#,
        "",
    ];
    std::fs::write(&new, lines.join("\n")).unwrap();
    let stdout = ok(&["restore", new.to_str().unwrap(), &url(&s, "/fromnew")]);
    assert!(stdout.contains("restored 4 document revisions"), "{stdout}");
    // couchbackup 2.11.12 `--attachments` (written against Settee through a proxy that
    // un-gzips its request bodies): inline data, the type as `contentType`.
    let atts = tmp.path().join("atts.txt");
    let lines = [
        r#"{"name":"@cloudant/couchbackup","version":"2.11.12","mode":"full","attachments":true}"#,
        r#"[{"_attachments":{"t.txt":{"contentType":"text/plain","data":"aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=","digest":"md5-CzDfAHx884e72GgEVUS6Ug==","revpos":1},"b.bin":{"contentType":"application/octet-stream","data":"AAECAwQFBgcICQ==","digest":"md5-xWvVSA9uVBPLYqCtlmZhOg==","revpos":1}},"_id":"att","_rev":"1-7a6abe76c5449930a7a77b1f4639ac7e","_revisions":{"ids":["7a6abe76c5449930a7a77b1f4639ac7e"],"start":1}}]"#,
    ];
    std::fs::write(&atts, lines.join("\n")).unwrap();
    ok(&["restore", atts.to_str().unwrap(), &url(&s, "/fromatts")]);
    let doc = s.get("/fromatts/att").json();
    assert_eq!(doc["_rev"], "1-7a6abe76c5449930a7a77b1f4639ac7e");
    assert_eq!(doc["_attachments"]["t.txt"]["content_type"], "text/plain");
    assert_eq!(
        doc["_attachments"]["t.txt"]["digest"],
        "md5-CzDfAHx884e72GgEVUS6Ug=="
    );
    assert_eq!(
        s.get("/fromatts/att/t.txt").text,
        "hello world hello world hello world"
    );
    let bin = s.req_bytes("GET", "/fromatts/att/b.bin", Vec::new(), &[]);
    assert_eq!(bin.body, (0..10).collect::<Vec<u8>>());
    let a = s.get("/fromnew/a?revs=true").json();
    assert_eq!(a["_rev"], "2-bb");
    assert_eq!(a["_revisions"], json!({"start": 2, "ids": ["bb", "aa"]}));
    assert_eq!(s.get("/fromnew/c").json()["_rev"], "1-dd");
    assert_eq!(s.get("/fromnew/x?rev=2-ee").json()["_deleted"], true);

    // Before 2.10: no metadata, and a broken line is taken for a resume point.
    let old = tmp.path().join("old.txt");
    let lines = [
        r#"[{"_id":"p","_rev":"1-aa","_revisions":{"start":1,"ids":["aa"]}}]"#,
        r#"[{"_id":"q","_rev":"#,
        r#"[{"_id":"q","_rev":"1-bb","_revisions":{"start":1,"ids":["bb"]}}]"#,
    ];
    std::fs::write(&old, lines.join("\n")).unwrap();
    ok(&["restore", old.to_str().unwrap(), &url(&s, "/fromold")]);
    assert_eq!(s.get("/fromold").json()["doc_count"], 2);
    assert_eq!(s.get("/fromold/q").json()["_rev"], "1-bb");
}

#[test]
fn compact_waits_for_database_and_view_compaction() {
    let s = Server::start();
    s.create_db("c");
    for i in 0..20 {
        let id = format!("/c/d{i}");
        let r = s.put(&id, r#"{"v":1}"#).json();
        s.put(
            &format!("{id}?rev={}", r["rev"].as_str().unwrap()),
            r#"{"v":2}"#,
        );
    }
    let ddoc = json!({"views": {"v": {"map": "function(d) { emit(d.v, null); }"}}});
    s.put("/c/_design/d", &ddoc.to_string());
    assert_eq!(s.get("/c/_design/d/_view/v?limit=1").status, 200);
    let stdout = ok(&["compact", &url(&s, "/c"), "--views"]);
    assert!(stdout.contains("c: compaction finished"), "{stdout}");
    assert_eq!(s.get("/c").json()["compact_running"], false);
    assert_eq!(
        s.get("/c/_design/d/_info").json()["view_index"]["compact_running"],
        false
    );
    assert_eq!(s.get("/c/d3").json()["v"], 2);

    let missing = settee(&["compact", &url(&s, "/nope")]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404"));
    let no_db = settee(&["compact", &url(&s, "")]);
    assert!(!no_db.status.success());
}

#[test]
fn completions_print_a_script_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = ok(&["completions", shell]);
        assert!(script.contains("settee"), "{shell}");
        for sub in ["serve", "bench", "compact", "backup", "restore"] {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
    }
    assert!(ok(&["completions", "bash"]).contains("--resume"));
    assert!(!settee(&["completions", "tcsh"]).status.success());
}
