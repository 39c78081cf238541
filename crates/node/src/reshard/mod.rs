//! Resharding (CouchDB 3's `_reshard`): splitting a range of a clustered database in two.
//!
//! A job splits one shard copy (`shards/{range}/{db}.{suffix}` on one member), as in
//! CouchDB, and goes through CouchDB's steps ([`job::STEPS`]). Settee's map holds no
//! overlapping ranges, so a range is split on all its copies together: asking for a split
//! makes a job for every copy of each range selected, and the map replaces the range by
//! its halves once every copy's job has made its halves (the `update_shardmap` step, one
//! guarded etcd transaction: `Cluster::split_range`).
//!
//! Jobs and the cluster-wide switch live in etcd (`{prefix}/reshard/job/{id}`,
//! `{prefix}/reshard/state`), so every member answers `_reshard` alike; [`run`] is the
//! part that does the work, on the member holding each job's claim.

pub mod job;
pub mod run;

use crate::{Error, Node, Result};
use job::{JobState, SplitJob, Switch};
use serde_json::{json, Value};
use settee_cluster::{Cluster, Created};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The switch's record.
const SWITCH: &str = "state";

/// The `[reshard]` settings read (CouchDB 3.5.2's names and defaults), each where and
/// when CouchDB reads it: at each request or step, so that a change takes effect at once.
pub(crate) mod settings {
    use crate::config::NodeConfig;

    /// `max_jobs`: how many jobs a member's copies may have (any state).
    pub fn max_jobs(config: &NodeConfig) -> u64 {
        config.get_u64("reshard", "max_jobs", MAX_JOBS)
    }

    /// `max_jobs` when not set (or not a number).
    pub const MAX_JOBS: u64 = 48;

    /// `max_history`: how many entries a job's history keeps.
    pub fn max_history(config: &NodeConfig) -> usize {
        config.get_u64("reshard", "max_history", 20) as usize
    }

    /// `require_node_param`, `require_range_param`.
    pub fn required(config: &NodeConfig) -> (bool, bool) {
        (
            config.get_bool("reshard", "require_node_param", false),
            config.get_bool("reshard", "require_range_param", false),
        )
    }

    /// `max_retries`: how many times a failing step is tried again.
    pub fn max_retries(config: &NodeConfig) -> u64 {
        config.get_u64("reshard", "max_retries", 5)
    }

    /// `retry_interval_sec`: the pause before a failing step is tried again.
    pub fn retry_interval(config: &NodeConfig) -> std::time::Duration {
        std::time::Duration::from_secs(config.get_u64("reshard", "retry_interval_sec", 10))
    }

    /// `delete_source`: whether a split copy is deleted once its halves replace it (read
    /// from `[mem3_reshard]`, where CouchDB 3.5.2 reads it, though its `default.ini` lists
    /// it under `[reshard]`).
    pub fn delete_source(config: &NodeConfig) -> bool {
        config.get_bool("mem3_reshard", "delete_source", true)
    }

    /// `index_max_retries`: how many times a failing index build is tried again.
    pub fn index_max_retries(config: &NodeConfig) -> u64 {
        config.get_u64("reshard", "index_max_retries", 5)
    }

    /// `index_retry_interval_sec`: the pause before a failing index build is tried again.
    pub fn index_retry_interval(config: &NodeConfig) -> std::time::Duration {
        std::time::Duration::from_secs(config.get_u64("reshard", "index_retry_interval_sec", 10))
    }
}

fn job_key(id: &str) -> String {
    format!("job/{id}")
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The jobs as etcd holds them (this member's copy of it), by id.
pub fn jobs(cluster: &Cluster) -> Vec<SplitJob> {
    (cluster.reshard_records().into_iter())
        .filter(|(k, _, _)| k.starts_with("job/"))
        .filter_map(|(_, v, _)| SplitJob::from_stored(&v))
        .collect()
}

/// One job and its record's modification revision.
pub fn job(cluster: &Cluster, id: &str) -> Option<(SplitJob, i64)> {
    let (v, m) = cluster.reshard_record(&job_key(id))?;
    Some((SplitJob::from_stored(&v)?, m))
}

/// The completed jobs of database `db` (of creation `uuid`) forgotten once it is deleted,
/// as CouchDB's `mem3_reshard` forgets them; jobs that had not finished stay, to fail and
/// be read.
pub async fn forget_completed(cluster: &Cluster, db: &str, uuid: &str) -> Result<()> {
    let done = (jobs(cluster).into_iter())
        .filter(|j| j.db == db && j.uuid == uuid && j.job_state == JobState::Completed);
    for j in done {
        cluster.delete_reshard(&job_key(&j.id)).await?;
    }
    Ok(())
}

/// The cluster-wide switch.
pub fn switch(cluster: &Cluster) -> Switch {
    Switch::from_stored(cluster.reshard_record(SWITCH).as_ref().map(|(v, _)| &v[..]))
}

/// Edits job `id` with `edit` (which says whether it changed anything) in a transaction
/// conditional on the record as read, again on a conflict: the job as stored (its history
/// trimmed to `max_history` entries), `None` when there is no such job.
pub async fn update_job(
    cluster: &Cluster,
    id: &str,
    max_history: usize,
    mut edit: impl FnMut(&mut SplitJob) -> bool,
) -> Result<Option<SplitJob>> {
    for _ in 0..20 {
        let Some((mut j, modified)) = job(cluster, id) else {
            return Ok(None);
        };
        if !edit(&mut j) {
            return Ok(Some(j));
        }
        j.trim_history(max_history);
        if cluster
            .put_reshard(&job_key(id), &j.stored(), modified)
            .await?
        {
            return Ok(Some(j));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(settee_cluster::Error::Conflict.into())
}

fn not_found() -> Error {
    Error::NotFound("missing".into())
}

/// The splits this member runs now (`_active_tasks`' `shard_split` entries).
#[derive(Default)]
pub struct Splits(Mutex<BTreeMap<String, Running>>);

struct Running {
    db: String,
    source: String,
    targets: Vec<String>,
    pid: u64,
    started_on: u64,
    updated_on: u64,
    step: String,
    done: u64,
    total: u64,
}

impl Splits {
    /// Registers job `j` as running here; false if it runs here already.
    pub(crate) fn start(&self, j: &SplitJob) -> bool {
        static PIDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut running = self.0.lock().unwrap();
        if running.contains_key(&j.id) {
            return false;
        }
        let now = now_secs();
        running.insert(
            j.id.clone(),
            Running {
                db: j.db.clone(),
                source: j.source(),
                targets: j.targets(),
                pid: PIDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
                started_on: now,
                updated_on: now,
                step: j.split_state.clone(),
                done: 0,
                total: 0,
            },
        );
        true
    }

    pub(crate) fn update(&self, id: &str, step: &str, done: u64, total: u64) {
        if let Some(r) = self.0.lock().unwrap().get_mut(id) {
            (r.step, r.done, r.total, r.updated_on) = (step.to_owned(), done, total, now_secs());
        }
    }

    pub(crate) fn finish(&self, id: &str) {
        self.0.lock().unwrap().remove(id);
    }

    /// `_active_tasks` entries (Settee's: CouchDB 3.5 lists no resharding tasks there):
    /// `phase` is the job's step, `changes_done`/`total_changes` the source's changes
    /// copied in the current copy step.
    pub fn list(&self) -> Vec<Value> {
        let running = self.0.lock().unwrap();
        (running.iter())
            .map(|(id, r)| {
                let progress = match r.total {
                    0 => 0,
                    t => (r.done * 100 / t).min(100),
                };
                json!({
                    "type": "shard_split",
                    "node": settee_core::node::name(),
                    "pid": format!("<0.{}.3>", r.pid),
                    "job_id": id,
                    "database": r.db,
                    "source": r.source,
                    "targets": r.targets,
                    "phase": r.step,
                    "changes_done": r.done,
                    "total_changes": r.total,
                    "progress": progress,
                    "process_status": "running",
                    "started_on": r.started_on,
                    "updated_on": r.updated_on,
                })
            })
            .collect()
    }
}

/// A `PUT …/state` body's `state` and `reason`.
fn parse_state(body: &Value) -> Result<(bool, Option<String>)> {
    let Some(body) = body.as_object() else {
        return Err(Error::BadRequest(
            "Request body must be a JSON object".into(),
        ));
    };
    let reason = body.get("reason").map(|r| match r {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    match body.get("state") {
        None => Err(Error::BadRequest("Expected a `state` field".into())),
        Some(s) if s == "running" => Ok((true, reason)),
        Some(s) if s == "stopped" => Ok((false, reason)),
        Some(_) => Err(Error::BadRequest(
            "State field not `running` or `stopped`".into(),
        )),
    }
}

impl Node {
    /// `[reshard] max_jobs` of member `node`, asked of it (CouchDB reads it where the copy
    /// is); this member's own when `node` is this one, is not running or does not answer.
    async fn max_jobs_of(&self, cluster: &Cluster, node: &str) -> u64 {
        if node != cluster.config().node {
            let target = "/_node/_local/_config/reshard/max_jobs";
            let asked = self.forward(node, "GET", target, None, Default::default());
            match asked.await {
                Ok(Some(f)) if f.status == 200 => {
                    let value: Option<String> = serde_json::from_slice(&f.body).ok();
                    return (value.and_then(|v| v.trim().parse().ok()))
                        .unwrap_or(settings::MAX_JOBS);
                }
                Ok(Some(f)) if f.status == 404 => return settings::MAX_JOBS,
                Ok(_) | Err(_) => {}
            }
        }
        settings::max_jobs(&self.config)
    }

    fn reshard_cluster(&self) -> Result<&Arc<Cluster>> {
        self.cluster().ok_or(Error::NotClustered)
    }

    /// `GET /_reshard`.
    pub fn reshard_summary(&self) -> Result<Value> {
        let c = self.reshard_cluster()?;
        Ok(job::summary(&switch(c), &jobs(c)))
    }

    /// `GET /_reshard/state`.
    pub fn reshard_state(&self) -> Result<Value> {
        let s = switch(self.reshard_cluster()?);
        let state = if s.running { "running" } else { "stopped" };
        let reason = if s.running { None } else { s.reason };
        Ok(json!({"state": state, "reason": reason}))
    }

    /// `PUT /_reshard/state`: the switch turned; jobs it stopped run again when it is
    /// turned back on.
    pub async fn set_reshard_state(&self, body: &Value) -> Result<Value> {
        let c = self.reshard_cluster()?;
        let (running, reason) = parse_state(body)?;
        let reason = match (running, reason) {
            (true, _) => None,
            (false, r) => {
                Some(r.unwrap_or_else(|| "Cluster-wide resharding stopped by the user".into()))
            }
        };
        let value = Switch { running, reason }.stored();
        loop {
            let modified = c.reshard_record(SWITCH).map_or(0, |(_, m)| m);
            if c.put_reshard(SWITCH, &value, modified).await? {
                break;
            }
        }
        let now = now_secs();
        for j in jobs(c) {
            let turn = |j: &mut SplitJob| match j.job_state {
                JobState::New | JobState::Running if !running => {
                    j.stop(now, job::SWITCHED_OFF, true);
                    true
                }
                JobState::Stopped if running && j.stopped_by_switch => {
                    j.resume(now);
                    true
                }
                _ => false,
            };
            update_job(c, &j.id, settings::max_history(&self.config), turn).await?;
        }
        Ok(json!({"ok": true}))
    }

    /// `GET /_reshard/jobs`.
    pub fn reshard_jobs(&self) -> Result<Value> {
        let all = jobs(self.reshard_cluster()?);
        Ok(json!({
            "total_rows": all.len(),
            "offset": 0,
            "jobs": all.iter().map(SplitJob::to_json).collect::<Vec<_>>(),
        }))
    }

    /// `POST /_reshard/jobs`: a job for every copy of each range selected (only `node`'s
    /// copy, given `node`). The status (201 all made, 202 some, 500 none) and one entry
    /// per copy, as CouchDB answers.
    pub async fn create_reshard_jobs(&self, body: &Value) -> Result<(u16, Value)> {
        let c = self.reshard_cluster()?;
        let Some(body) = body.as_object() else {
            return Err(Error::BadRequest(
                "Request body must be a JSON object".into(),
            ));
        };
        let members: Vec<String> = c.members().into_iter().map(|m| m.name).collect();
        let listed: Vec<String> = c.nodes().into_iter().map(|d| d.name).collect();
        let known = |n: &str| {
            (
                listed.iter().any(|l| l == n),
                members.iter().any(|m| m == n),
            )
        };
        let ask = job::parse_ask(body, known, |d| c.db(d).is_some()).map_err(Error::BadRequest)?;
        let (need_node, need_range) = settings::required(&self.config);
        job::check_required(&ask, need_node, need_range).map_err(Error::BadRequest)?;
        let db = match (&ask.db, &ask.shard) {
            (Some(db), _) => db.clone(),
            (None, Some(shard)) => job::db_of_shard(shard).ok_or_else(not_found)?.to_owned(),
            (None, None) => unreachable!("parse_ask requires one"),
        };
        let map = c.db(&db).ok_or_else(not_found)?;
        let ranges = job::pick_ranges(&ask, &db, &map);
        if ranges.is_empty() {
            return Err(not_found());
        }
        let running = switch(c).running;
        let mut answers = Vec::new();
        // Each member's `[reshard] max_jobs` (CouchDB's `start_job`: a member refuses a
        // job when it has `max_jobs` already, in any state, by its own setting).
        let mut limits: BTreeMap<String, u64> = BTreeMap::new();
        let now = now_secs();
        for range in ranges {
            let nodes = &(map.by_range.iter())
                .find(|r| r.range == range)
                .expect("picked")
                .nodes;
            let asked = |n: &&String| ask.node.as_ref().is_none_or(|a| a == *n);
            for node in nodes.iter().filter(asked) {
                let mut j = SplitJob::new(&db, &map, &range, node, now, running);
                let shard = j.source();
                let refused = |e: String| json!({"error": e, "node": node, "shard": shard});
                if let Some(bounds) = settee_core::shards::parse_range(&range) {
                    if j.target_ranges().is_none() {
                        let e = format!(
                            "{{shard_range_cannot_be_split,[{},{}],2}}",
                            bounds.0, bounds.1
                        );
                        answers.push((false, refused(e)));
                        continue;
                    }
                }
                if job(c, &j.id).is_some() {
                    answers.push((false, refused("job_already_exists".into())));
                    continue;
                }
                if !limits.contains_key(node) {
                    let limit = self.max_jobs_of(c, node).await;
                    limits.insert(node.clone(), limit);
                }
                let limit = limits[node];
                j.trim_history(settings::max_history(&self.config));
                // Counted and made in one step: concurrent requests cannot both take the
                // member's last place.
                let of_node = |v: &[u8]| SplitJob::from_stored(v).is_some_and(|s| s.node == *node);
                let made = c
                    .create_reshard_within(
                        &job_key(&j.id),
                        &j.stored(),
                        "job/",
                        (node, limit),
                        of_node,
                    )
                    .await?;
                answers.push(match made {
                    Created::Made => (
                        true,
                        json!({"ok": true, "id": j.id, "node": node, "shard": shard}),
                    ),
                    Created::Exists => (false, refused("job_already_exists".into())),
                    Created::Full => (false, refused("max_jobs_exceeded".into())),
                });
            }
        }
        let made = answers.iter().filter(|(ok, _)| *ok).count();
        let status = match made {
            0 => 500,
            n if n == answers.len() => 201,
            _ => 202,
        };
        Ok((
            status,
            Value::Array(answers.into_iter().map(|(_, a)| a).collect()),
        ))
    }

    /// `GET /_reshard/jobs/{id}`.
    pub fn reshard_job(&self, id: &str) -> Result<Value> {
        let (j, _) = job(self.reshard_cluster()?, id).ok_or_else(not_found)?;
        Ok(j.to_json())
    }

    /// `DELETE /_reshard/jobs/{id}`: the job forgotten; if it runs, its member stops it
    /// (and drops its halves, if the map does not name them yet).
    pub async fn delete_reshard_job(&self, id: &str) -> Result<Value> {
        let c = self.reshard_cluster()?;
        job(c, id).ok_or_else(not_found)?;
        if !c.delete_reshard(&job_key(id)).await? {
            return Err(not_found());
        }
        Ok(json!({"ok": true}))
    }

    /// `GET /_reshard/jobs/{id}/state`.
    pub fn reshard_job_state(&self, id: &str) -> Result<Value> {
        let (j, _) = job(self.reshard_cluster()?, id).ok_or_else(not_found)?;
        Ok(json!({"state": j.job_state.as_str(), "reason": j.reason}))
    }

    /// `PUT /_reshard/jobs/{id}/state`: a job stopped, or a stopped one run again (from
    /// where its step restarts). A finished job stays as it is.
    pub async fn set_reshard_job_state(&self, id: &str, body: &Value) -> Result<Value> {
        let c = self.reshard_cluster()?;
        let (running, reason) = parse_state(body)?;
        let now = now_secs();
        let switched_on = switch(c).running;
        let edit = |j: &mut SplitJob| match j.job_state {
            // A job the switch stopped, stopped by its own state too, stays stopped when
            // the switch is turned on again.
            JobState::New | JobState::Running | JobState::Stopped if !running => {
                j.stop(now, reason.as_deref().unwrap_or("Stopped by user"), false);
                true
            }
            JobState::Stopped if running && switched_on => {
                j.resume(now);
                true
            }
            JobState::Stopped if running => {
                j.stop(now, job::SWITCHED_OFF, true);
                true
            }
            _ => false,
        };
        (update_job(c, id, settings::max_history(&self.config), edit).await?)
            .ok_or_else(not_found)?;
        Ok(json!({"ok": true}))
    }
}
