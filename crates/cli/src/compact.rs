//! `settee compact`: `POST /{db}/_compact` (and with `--views` `POST /{db}/_compact/{ddoc}`
//! for every design document), then waits until the server says it finished: no matching
//! `_active_tasks` entry and `compact_running` false in the database's (or the design
//! document's) info. A task's `progress` drives the bar when the server reports one.

use crate::client::{enc, Client, Target};
use crate::{progress, Error};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    /// The database: a URL (http://admin:secret@host:5984/db) or a name on --url.
    pub db: String,
    /// The server for a database given by name (credentials may be in it).
    #[arg(long, env = "COUCH_URL", default_value = "http://127.0.0.1:5984")]
    pub url: String,
    /// Credentials as NAME:PASSWORD (instead of those in the URL).
    #[arg(long, env = "SETTEE_USER")]
    pub user: Option<String>,
    /// Also compact the view indexes of every design document.
    #[arg(long)]
    pub views: bool,
    /// How often to ask whether compaction finished, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
}

/// One compaction to wait for: what `_active_tasks` calls it and where its info is.
struct Job {
    label: String,
    kind: &'static str,
    design_document: Option<String>,
    info_path: String,
}

pub fn run(args: &CompactArgs) -> Result<(), Error> {
    let target = Target::parse(&args.db, &args.url, args.user.as_deref())?;
    let db = target.db()?.to_string();
    let client = &target.client;
    let db_path = format!("/{}", enc(&db));
    client.json("GET", &db_path, None)?;
    client.json("POST", &format!("{db_path}/_compact"), Some(&json!({})))?;
    let mut jobs = vec![Job {
        label: db.clone(),
        kind: "database_compaction",
        design_document: None,
        info_path: db_path.clone(),
    }];
    if args.views {
        let ddocs = client.json("GET", &format!("{db_path}/_design_docs"), None)?;
        for row in ddocs["rows"].as_array().into_iter().flatten() {
            let Some(id) = row["id"].as_str() else {
                continue;
            };
            let name = id.trim_start_matches("_design/");
            client.json(
                "POST",
                &format!("{db_path}/_compact/{}", enc(name)),
                Some(&json!({})),
            )?;
            jobs.push(Job {
                label: format!("{db}/{id}"),
                kind: "view_compaction",
                design_document: Some(id.to_string()),
                info_path: format!("{db_path}/_design/{}/_info", enc(name)),
            });
        }
    }
    let poll = Duration::from_millis(args.poll_ms.max(10));
    for job in &jobs {
        let started = Instant::now();
        wait(client, &db, job, poll)?;
        eprintln!(
            "compacted {} in {:.2} s",
            job.label,
            started.elapsed().as_secs_f64()
        );
    }
    let info = client.json("GET", &db_path, None)?;
    println!(
        "{db}: compaction finished; sizes: file {} active {} external {}",
        info["sizes"]["file"], info["sizes"]["active"], info["sizes"]["external"]
    );
    Ok(())
}

fn wait(client: &Client, db: &str, job: &Job, poll: Duration) -> Result<(), Error> {
    let bar = progress::percent(job.kind, &job.label);
    loop {
        let tasks = client.json("GET", "/_active_tasks", None)?;
        let task = tasks.as_array().into_iter().flatten().find(|t| {
            t["type"] == job.kind
                && t["database"]
                    .as_str()
                    .is_some_and(|d| d == db || d.contains(&format!("/{db}.")))
                && job
                    .design_document
                    .as_ref()
                    .is_none_or(|d| t["design_document"].as_str().is_none_or(|td| td == d))
        });
        let running = match task {
            Some(t) => {
                bar.set_position(t["progress"].as_u64().unwrap_or(0));
                true
            }
            None => {
                let info = client.json("GET", &job.info_path, None)?;
                let running = info["compact_running"]
                    .as_bool()
                    .or(info["view_index"]["compact_running"].as_bool());
                running.unwrap_or(false)
            }
        };
        if !running {
            bar.finish_and_clear();
            return Ok(());
        }
        std::thread::sleep(poll);
    }
}
