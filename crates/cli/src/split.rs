//! `settee cluster split`: a database's ranges split in two through CouchDB 3's resharding
//! API (`POST /_reshard/jobs`, then each job read until it ends), so it works on a CouchDB
//! cluster as on a Settee one.

use crate::client::enc;
use crate::cluster::{self, ServerArgs};
use crate::{progress, Error};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct SplitArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The database.
    pub db: String,
    /// Split only this range (as `_shards` names it, `00000000-7fffffff`); by default
    /// every range.
    #[arg(long)]
    pub range: Option<String>,
    /// How long to wait, in seconds, for the jobs to end (0: ask and do not wait).
    #[arg(long, default_value_t = 600)]
    pub wait: u64,
}

/// CouchDB's steps of a split job, in order (`split_state`).
const STEPS: [&str; 11] = [
    "new",
    "initial_copy",
    "topoff1",
    "build_indices",
    "topoff2",
    "copy_local_docs",
    "update_shardmap",
    "wait_source_close",
    "topoff3",
    "source_delete",
    "completed",
];

pub fn split(args: &SplitArgs) -> Result<(), Error> {
    let client = cluster::server(&args.server)?;
    let mut body = json!({"type": "split", "db": args.db});
    if let Some(r) = &args.range {
        body["range"] = json!(r);
    }
    let made = client.json("POST", "/_reshard/jobs", Some(&body))?;
    let ids: Vec<String> = (made.as_array().into_iter().flatten())
        .filter_map(|j| {
            let (id, node, shard) = (j["id"].as_str()?, &j["node"], &j["shard"]);
            println!("job {id}: {} on {}", shard.as_str()?, node.as_str()?);
            Some(id.to_owned())
        })
        .collect();
    if args.wait == 0 {
        return Ok(());
    }
    let bar = progress::bar("split", (ids.len() * (STEPS.len() - 1)) as u64, "steps");
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    loop {
        let mut done_steps = 0;
        let mut pending = 0;
        for id in &ids {
            let j = client.json("GET", &format!("/_reshard/jobs/{}", enc(id)), None)?;
            let step = j["split_state"].as_str().unwrap_or("new");
            done_steps += STEPS.iter().position(|s| *s == step).unwrap_or(0);
            match j["job_state"].as_str() {
                Some("completed") => {}
                Some("failed") => {
                    bar.finish_and_clear();
                    let reason = j["state_info"]["reason"].as_str().unwrap_or("");
                    return Err(Error::Format(format!("job {id} failed: {reason}")));
                }
                _ => pending += 1,
            }
        }
        bar.set_position(done_steps as u64);
        if pending == 0 {
            break;
        }
        if Instant::now() > deadline {
            bar.finish_and_clear();
            return Err(Error::Format(format!(
                "{pending} of {} jobs still running after {} s (see GET /_reshard/jobs)",
                ids.len(),
                args.wait
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bar.finish_and_clear();
    let shards = client.json("GET", &format!("/{}/_shards", enc(&args.db)), None)?;
    println!("split; {} now has these ranges:", args.db);
    for (range, nodes) in shards["shards"].as_object().into_iter().flatten() {
        let nodes: Vec<&str> = (nodes.as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        println!("  {range}  {}", nodes.join(" "));
    }
    Ok(())
}
