//! A split job as stored in etcd and shown by `_reshard/jobs`, and the steps it goes
//! through: pure, so the rules (the steps' order and where a job resumes, the history's
//! entries, what the API shows) are tested without a cluster.

use serde_json::{json, Map, Value};
use settee_core::shards;

/// A job's state as CouchDB names it (`job_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    New,
    Running,
    Stopped,
    Failed,
    Completed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::New => "new",
            JobState::Running => "running",
            JobState::Stopped => "stopped",
            JobState::Failed => "failed",
            JobState::Completed => "completed",
        }
    }

    fn parse(s: &str) -> Option<JobState> {
        [
            JobState::New,
            JobState::Running,
            JobState::Stopped,
            JobState::Failed,
            JobState::Completed,
        ]
        .into_iter()
        .find(|j| j.as_str() == s)
    }

    /// Whether the job is done with, one way or the other.
    pub fn finished(self) -> bool {
        matches!(self, JobState::Failed | JobState::Completed)
    }
}

/// The steps of a split, in order (CouchDB's `split_state`s).
pub const STEPS: [&str; 11] = [
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

/// The position of step `name` in [`STEPS`].
pub fn step_index(name: &str) -> usize {
    STEPS.iter().position(|s| *s == name).unwrap_or(0)
}

/// The step a job stopped at `step` starts again from, as CouchDB's `STATE_RESTART`: the
/// initial copy from scratch, the copies' top-offs from the first one (each resumes from
/// its checkpoint), the steps after the map's edit from the wait for the old copy.
pub fn restart_step(step: &str) -> &'static str {
    match step {
        "new" | "initial_copy" => "initial_copy",
        "topoff1" | "build_indices" | "topoff2" | "copy_local_docs" => "topoff1",
        "update_shardmap" => "update_shardmap",
        "wait_source_close" | "topoff3" | "source_delete" => "wait_source_close",
        _ => "completed",
    }
}

/// The step after `step`.
pub fn next_step(step: &str) -> &'static str {
    STEPS[(step_index(step) + 1).min(STEPS.len() - 1)]
}

/// One split job: shard copy `shards/{range}/{db}.{created}` of member `node` cut in two.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitJob {
    pub id: String,
    pub db: String,
    /// The database's creation (its map's uuid): a job never touches a later database of
    /// the same name.
    pub uuid: String,
    pub created: u64,
    pub range: String,
    pub node: String,
    pub job_state: JobState,
    pub split_state: String,
    /// `state_info.reason`.
    pub reason: Option<String>,
    /// `state_info.error`: why the step failed last, while it is tried again.
    pub error: Option<String>,
    pub start_time: u64,
    pub update_time: u64,
    /// (unix seconds, type, detail), oldest first.
    pub history: Vec<(u64, String, Option<String>)>,
    /// Stopped by the cluster-wide switch rather than by its own `state`: such a job runs
    /// again when the switch does.
    pub stopped_by_switch: bool,
    /// The member that finished the job for its node while that node was down.
    pub taken_over_by: Option<String>,
}

/// The reason of jobs stopped by the cluster-wide switch, as CouchDB words it.
pub const SWITCHED_OFF: &str = "Shard splitting disabled";

impl SplitJob {
    /// A new job splitting `db`'s copy of `range` on `node`, at `now`: stopped at once if
    /// resharding is stopped cluster-wide.
    pub fn new(
        db: &str,
        map: &settee_cluster::ShardMap,
        range: &str,
        node: &str,
        now: u64,
        running: bool,
    ) -> SplitJob {
        let source = map.copy_name(db, range);
        let mut job = SplitJob {
            id: settee_cluster::map::split_job_id(&source, node),
            db: db.to_owned(),
            uuid: map.uuid.clone(),
            created: map.created,
            range: range.to_owned(),
            node: node.to_owned(),
            job_state: JobState::New,
            split_state: "new".into(),
            reason: None,
            error: None,
            start_time: now,
            update_time: now,
            history: Vec::new(),
            stopped_by_switch: false,
            taken_over_by: None,
        };
        job.record(now);
        if !running {
            job.stop(now, SWITCHED_OFF, true);
        }
        job
    }

    /// The copy being split.
    pub fn source(&self) -> String {
        settee_core::shard_name(&self.range, &self.db, self.created)
    }

    /// The ranges of the two halves (none for a range of one position).
    pub fn target_ranges(&self) -> Option<[String; 2]> {
        let halves = shards::split_range(shards::parse_range(&self.range)?)?;
        Some(halves.map(shards::range_name))
    }

    /// The copies the source is cut into.
    pub fn targets(&self) -> Vec<String> {
        (self.target_ranges().into_iter().flatten())
            .map(|r| settee_core::shard_name(&r, &self.db, self.created))
            .collect()
    }

    /// Adds the history entry of the job's state now, as CouchDB's `update_history`: the
    /// detail of a running job is its step, a stopped or failed job's its reason; an entry
    /// of the same type and detail as the last only moves the last one's time. The history
    /// is trimmed where the job is stored ([`SplitJob::trim_history`]).
    fn record(&mut self, now: u64) {
        let kind = self.job_state.as_str().to_owned();
        let detail = match self.job_state {
            JobState::Running => Some(self.split_state.clone()),
            JobState::Stopped | JobState::Failed => self.reason.clone(),
            JobState::New | JobState::Completed => None,
        };
        match self.history.last_mut() {
            Some(last) if last.1 == kind && (detail.is_none() || last.2 == detail) => {
                last.0 = now;
            }
            _ => self.history.push((now, kind, detail)),
        }
        self.update_time = now;
    }

    /// Keeps the newest `max` history entries (`[reshard] max_history`), as CouchDB trims
    /// at each entry: trimming once after entries are added keeps the same ones.
    pub fn trim_history(&mut self, max: usize) {
        let extra = self.history.len().saturating_sub(max);
        self.history.drain(..extra);
    }

    /// The job runs step `step` from `now`.
    pub fn run_step(&mut self, step: &str, now: u64) {
        self.split_state = step.to_owned();
        if step == "completed" {
            self.job_state = JobState::Completed;
        } else {
            self.job_state = JobState::Running;
        }
        self.reason = None;
        self.error = None;
        self.stopped_by_switch = false;
        self.record(now);
    }

    /// The job's step failed with `error` and is tried again (CouchDB's `retry_state`).
    pub fn retrying(&mut self, error: &str) {
        self.error = Some(error.to_owned());
    }

    /// The job waits at `update_shardmap` for the jobs of the range's copies on `members`
    /// (none: it waits no more): said in `state_info.reason` meanwhile.
    pub fn waiting_for(&mut self, members: &[String]) {
        self.reason = waiting_reason(members);
    }

    /// The job stops (`switch`: because resharding stopped cluster-wide).
    pub fn stop(&mut self, now: u64, reason: &str, switch: bool) {
        self.job_state = JobState::Stopped;
        self.reason = Some(reason.to_owned());
        self.stopped_by_switch = switch;
        self.record(now);
    }

    /// The job failed at its step.
    pub fn fail(&mut self, now: u64, reason: &str) {
        self.job_state = JobState::Failed;
        self.reason = Some(reason.to_owned());
        self.record(now);
    }

    /// A stopped job asked to run again: it goes on from where its step restarts.
    pub fn resume(&mut self, now: u64) {
        let step = restart_step(&self.split_state);
        self.run_step(step, now);
    }

    /// The job as `GET /_reshard/jobs/{id}` shows it (CouchDB's members, in its order).
    pub fn to_json(&self) -> Value {
        let iso = settee_core::dates::iso8601;
        let mut state_info = Map::new();
        if let Some(e) = &self.error {
            state_info.insert("error".into(), json!(e));
        }
        if let Some(r) = &self.reason {
            state_info.insert("reason".into(), json!(r));
        }
        json!({
            "id": self.id,
            "type": "split",
            "source": self.source(),
            "target": self.targets(),
            "job_state": self.job_state.as_str(),
            "split_state": self.split_state,
            "state_info": state_info,
            "node": self.node,
            "start_time": iso(self.start_time),
            "update_time": iso(self.update_time),
            "history": (self.history.iter())
                .map(|(t, kind, detail)| json!({"timestamp": iso(*t), "type": kind, "detail": detail}))
                .collect::<Vec<_>>(),
        })
    }

    /// The stored form (etcd's `reshard/job/{id}`).
    pub fn stored(&self) -> Vec<u8> {
        let v = json!({
            "id": self.id,
            "db": self.db,
            "uuid": self.uuid,
            "created": self.created,
            "range": self.range,
            "node": self.node,
            "job_state": self.job_state.as_str(),
            "split_state": self.split_state,
            "reason": self.reason,
            "error": self.error,
            "start_time": self.start_time,
            "update_time": self.update_time,
            "history": self.history,
            "stopped_by_switch": self.stopped_by_switch,
            "taken_over_by": self.taken_over_by,
        });
        serde_json::to_vec(&v).expect("json")
    }

    /// A stored job; `None` if unreadable.
    pub fn from_stored(bytes: &[u8]) -> Option<SplitJob> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        let history = (v.get("history")?.as_array()?.iter())
            .map(|e| {
                let e = e.as_array()?;
                Some((
                    e.first()?.as_u64()?,
                    e.get(1)?.as_str()?.to_owned(),
                    e.get(2).and_then(Value::as_str).map(str::to_owned),
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(SplitJob {
            id: s("id")?,
            db: s("db")?,
            uuid: s("uuid")?,
            created: n("created")?,
            range: s("range")?,
            node: s("node")?,
            job_state: JobState::parse(&s("job_state")?)?,
            split_state: s("split_state")?,
            reason: s("reason"),
            error: s("error"),
            start_time: n("start_time")?,
            update_time: n("update_time")?,
            history,
            stopped_by_switch: v.get("stopped_by_switch") == Some(&Value::Bool(true)),
            taken_over_by: s("taken_over_by"),
        })
    }
}

/// The cluster-wide switch (`_reshard/state`), as stored (`reshard/state`).
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    pub running: bool,
    pub reason: Option<String>,
}

impl Switch {
    pub fn stored(&self) -> Vec<u8> {
        let state = if self.running { "running" } else { "stopped" };
        serde_json::to_vec(&json!({"state": state, "reason": self.reason})).expect("json")
    }

    /// The stored switch; running when absent or unreadable (CouchDB's default).
    pub fn from_stored(bytes: Option<&[u8]>) -> Switch {
        let v: Value = bytes
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        Switch {
            running: v.get("state").and_then(Value::as_str) != Some("stopped"),
            reason: v.get("reason").and_then(Value::as_str).map(str::to_owned),
        }
    }
}

/// `GET /_reshard`: the switch and the jobs counted by state (running jobs count as
/// stopped while the switch is off, as CouchDB counts them; `new` ones only in `total`).
pub fn summary(switch: &Switch, jobs: &[SplitJob]) -> Value {
    let count = |s: JobState| {
        (jobs.iter())
            .filter(|j| {
                let shown = match j.job_state {
                    JobState::Running if !switch.running => JobState::Stopped,
                    other => other,
                };
                shown == s
            })
            .count()
    };
    json!({
        "state": if switch.running { "running" } else { "stopped" },
        "state_reason": switch.reason,
        "completed": count(JobState::Completed),
        "failed": count(JobState::Failed),
        "running": count(JobState::Running),
        "stopped": count(JobState::Stopped),
        "total": jobs.len(),
    })
}

/// What a `POST /_reshard/jobs` body asks for: which copies to split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub node: Option<String>,
    pub shard: Option<String>,
    pub db: Option<String>,
    pub range: Option<(u32, u32)>,
}

/// Reads a `POST /_reshard/jobs` body's fields in CouchDB's order (`node`, `shard`, `db`,
/// `range`, then `type`), with its refusals; `node_known` tells whether a name is a node
/// of the membership list and whether it runs, `db_exists` whether a clustered database
/// has that name.
pub fn parse_ask(
    body: &Map<String, Value>,
    node_known: impl Fn(&str) -> (bool, bool),
    db_exists: impl Fn(&str) -> bool,
) -> Result<Ask, String> {
    let node = match body.get("node") {
        None => None,
        Some(Value::String(n)) => match node_known(n) {
            (true, true) => Some(n.clone()),
            (true, false) => return Err("Not connected to `node`".into()),
            (false, _) => return Err("`node` is not a valid node name".into()),
        },
        Some(_) => return Err("Invalid `node`".into()),
    };
    let shard = match body.get("shard") {
        None => None,
        Some(Value::String(s)) => {
            let b = s.as_bytes();
            let ok = s.starts_with("shards/")
                && b.len() > 25
                && b[15] == b'-'
                && b[24] == b'/'
                && s.is_char_boundary(15)
                && s.is_char_boundary(25);
            if !ok {
                return Err("`shard` is invalid".into());
            }
            Some(s.clone())
        }
        Some(_) => return Err("Invalid `shard`".into()),
    };
    let db = match body.get("db") {
        None => None,
        Some(Value::String(d)) if db_exists(d) => Some(d.clone()),
        Some(_) => return Err("Invalid `db`".into()),
    };
    let range = match body.get("range") {
        None => None,
        Some(Value::String(r)) => {
            let bounds = (r.len() == 17)
                .then(|| r.split_once('-'))
                .flatten()
                .and_then(|(b, e)| {
                    Some((
                        u32::from_str_radix(b, 16).ok()?,
                        u32::from_str_radix(e, 16).ok()?,
                    ))
                });
            match bounds {
                Some((b, e)) if b < e => Some((b, e)),
                _ => return Err("Invalid `range`".into()),
            }
        }
        Some(_) => return Err("Invalid `range`".into()),
    };
    if body.get("type") != Some(&json!("split")) {
        return Err("`job type must be `split`".into());
    }
    match (&db, &shard) {
        (None, None) => Err("Must specify at least `db` or `shard`".into()),
        (Some(_), Some(_)) => Err("`db` and `shard` are mutually exclusive".into()),
        _ => Ok(Ask {
            node,
            shard,
            db,
            range,
        }),
    }
}

/// `[reshard] require_node_param` and `require_range_param` applied to an ask, as
/// CouchDB's `pick_shards` applies them: `node` is required unless given, `range` only
/// with `db` and unless given (a `shard` names its range); `node` is looked at first.
/// The reasons keep CouchDB's spelling ("prameter").
pub fn check_required(ask: &Ask, node: bool, range: bool) -> Result<(), String> {
    if node && ask.node.is_none() {
        return Err("`node` prameter is required".into());
    }
    if range && ask.db.is_some() && ask.range.is_none() {
        return Err("`range` prameter is required".into());
    }
    Ok(())
}

/// What [`SplitJob::waiting_for`] makes `state_info.reason`.
pub fn waiting_reason(members: &[String]) -> Option<String> {
    (!members.is_empty()).then(|| {
        format!(
            "waiting for the split jobs of this range's copies on {} (a range is split on \
             every member holding it at once)",
            members.join(", ")
        )
    })
}

/// The ranges of `map` (database `db`) an ask selects: with `node`, the ranges that node
/// holds (a job is made for its copy of each only).
pub fn pick_ranges(ask: &Ask, db: &str, map: &settee_cluster::ShardMap) -> Vec<String> {
    (map.by_range.iter())
        .filter(|c| {
            ask.range
                .is_none_or(|r| shards::parse_range(&c.range) == Some(r))
        })
        .filter(|c| ask.node.as_ref().is_none_or(|n| c.nodes.contains(n)))
        .filter(|c| (ask.shard.as_ref()).is_none_or(|s| *s == map.copy_name(db, &c.range)))
        .map(|c| c.range.clone())
        .collect()
}

/// The database a shard copy's name belongs to (`shards/{range}/{db}.{suffix}`).
pub fn db_of_shard(shard: &str) -> Option<&str> {
    let rest = shard.strip_prefix("shards/")?.split_once('/')?.1;
    Some(rest.rsplit_once('.')?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use settee_cluster::map::{plan, Candidate};

    fn map() -> settee_cluster::ShardMap {
        let nodes: Vec<Candidate> = ["a@h", "b@h", "c@h"]
            .iter()
            .map(|n| Candidate {
                name: n.to_string(),
                zone: None,
            })
            .collect();
        let mut m = plan(2, 2, None, false, &nodes, 0, "u1").unwrap();
        m.created = 1700000000;
        m
    }

    #[test]
    fn a_job_goes_through_couchdbs_steps_and_history() {
        let m = map();
        let mut j = SplitJob::new("db", &m, "00000000-7fffffff", "a@h", 10, true);
        assert_eq!(j.source(), "shards/00000000-7fffffff/db.1700000000");
        assert_eq!(
            j.targets(),
            [
                "shards/00000000-3fffffff/db.1700000000",
                "shards/40000000-7fffffff/db.1700000000"
            ]
        );
        let mut step = "new";
        while step != "completed" {
            step = next_step(step);
            j.run_step(step, 11);
            if step == "topoff1" {
                // A failing step shows its error while it is tried again, until it moves on.
                j.retrying("disk full");
                assert_eq!(j.to_json()["state_info"], json!({"error": "disk full"}));
                assert_eq!(SplitJob::from_stored(&j.stored()), Some(j.clone()));
            }
            if step == "update_shardmap" {
                // Waiting for the range's other copies' jobs says so, until it moves on.
                j.waiting_for(&["b@h".into(), "c@h".into()]);
                let reason = j.to_json()["state_info"]["reason"].clone();
                assert!(reason.as_str().unwrap().contains("on b@h, c@h"), "{reason}");
                assert_eq!(SplitJob::from_stored(&j.stored()), Some(j.clone()));
                j.waiting_for(&[]);
                assert_eq!(j.to_json()["state_info"], json!({}));
                j.waiting_for(&["c@h".into()]);
            }
        }
        assert_eq!(j.to_json()["state_info"], json!({}));
        assert_eq!(j.job_state, JobState::Completed);
        let v = j.to_json();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
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
        let h = v["history"].as_array().unwrap();
        assert_eq!(h.len(), 11);
        assert_eq!(
            h[0],
            json!({"timestamp": "1970-01-01T00:00:10Z", "type": "new", "detail": null})
        );
        assert_eq!(h[1]["detail"], "initial_copy");
        assert_eq!(
            h[10],
            json!({"timestamp": "1970-01-01T00:00:11Z", "type": "completed", "detail": null})
        );
        assert_eq!(SplitJob::from_stored(&j.stored()), Some(j));
    }

    #[test]
    fn stopped_jobs_resume_where_couchdb_restarts_them() {
        let m = map();
        let mut j = SplitJob::new("db", &m, "00000000-7fffffff", "a@h", 1, false);
        assert_eq!(j.job_state, JobState::Stopped);
        assert_eq!(j.reason.as_deref(), Some(SWITCHED_OFF));
        assert!(j.stopped_by_switch);
        j.resume(2);
        assert_eq!(
            (j.job_state, j.split_state.as_str()),
            (JobState::Running, "initial_copy")
        );
        j.run_step("copy_local_docs", 3);
        j.stop(4, "Stopped by user", false);
        j.stop(5, "Stopped by user", false);
        assert_eq!(
            j.history.last(),
            Some(&(5, "stopped".into(), Some("Stopped by user".into())))
        );
        j.resume(6);
        assert_eq!(j.split_state, "topoff1");
        assert_eq!(restart_step("topoff3"), "wait_source_close");
        assert_eq!(restart_step("update_shardmap"), "update_shardmap");
        assert_eq!(j.reason, None);
    }

    #[test]
    fn asks_are_read_in_couchdbs_order_with_its_refusals() {
        let known = |n: &str| (n.ends_with("@h"), n != "down@h");
        let exists = |d: &str| d == "db";
        let ask = |v: Value| parse_ask(v.as_object().unwrap(), known, exists);
        assert_eq!(
            ask(json!({"type": "merge", "db": "nope"})),
            Err("Invalid `db`".into())
        );
        assert_eq!(
            ask(json!({"db": "db"})),
            Err("`job type must be `split`".into())
        );
        assert_eq!(
            ask(json!({"type": "split"})),
            Err("Must specify at least `db` or `shard`".into())
        );
        assert_eq!(
            ask(json!({"type": "split", "db": "db", "shard": "shards/00000000-7fffffff/db.1"})),
            Err("`db` and `shard` are mutually exclusive".into())
        );
        for (v, e) in [
            (json!({"node": 5}), "Invalid `node`"),
            (json!({"node": "x"}), "`node` is not a valid node name"),
            (json!({"node": "down@h"}), "Not connected to `node`"),
            (json!({"shard": "shards/bad"}), "`shard` is invalid"),
            (json!({"shard": 1}), "Invalid `shard`"),
            (json!({"range": "zz"}), "Invalid `range`"),
            (json!({"range": "ffffffff-00000000"}), "Invalid `range`"),
        ] {
            let mut body = v.as_object().unwrap().clone();
            body.insert("type".into(), json!("split"));
            body.insert("db".into(), json!("db"));
            assert_eq!(parse_ask(&body, known, exists), Err(e.into()), "{v}");
        }
        let m = map();
        let a = ask(json!({"type": "split", "db": "db", "range": "80000000-ffffffff"})).unwrap();
        assert_eq!(pick_ranges(&a, "db", &m), ["80000000-ffffffff"]);
        let a = ask(json!({"type": "split", "db": "db", "node": "c@h"})).unwrap();
        assert_eq!(pick_ranges(&a, "db", &m), ["80000000-ffffffff"]);
        let a = ask(json!({"type": "split", "shard": "shards/00000000-7fffffff/db.1700000000"}))
            .unwrap();
        assert_eq!(pick_ranges(&a, "db", &m), ["00000000-7fffffff"]);
        assert_eq!(
            db_of_shard("shards/00000000-7fffffff/a.b/c.17"),
            Some("a.b/c")
        );
    }

    #[test]
    fn the_history_keeps_the_newest_entries() {
        let m = map();
        let mut j = SplitJob::new("db", &m, "00000000-7fffffff", "a@h", 1, true);
        for (t, step) in ["initial_copy", "topoff1", "build_indices"]
            .iter()
            .enumerate()
        {
            j.run_step(step, 2 + t as u64);
        }
        let mut kept = j.clone();
        kept.trim_history(20);
        assert_eq!(kept, j);
        j.trim_history(2);
        let details: Vec<_> = j.history.iter().map(|h| h.2.as_deref()).collect();
        assert_eq!(details, [Some("topoff1"), Some("build_indices")]);
        j.trim_history(0);
        assert_eq!(j.to_json()["history"], json!([]));
    }

    #[test]
    fn required_parameters_are_checked_as_couchdb_picks_shards() {
        let known = |_: &str| (true, true);
        let ask = |v: Value| parse_ask(v.as_object().unwrap(), known, |_| true).unwrap();
        let db = ask(json!({"type": "split", "db": "db"}));
        let node = ask(json!({"type": "split", "db": "db", "node": "a@h"}));
        let range = ask(json!({"type": "split", "db": "db", "range": "00000000-7fffffff"}));
        let shard = ask(json!({"type": "split", "shard": "shards/00000000-7fffffff/db.1"}));
        let need_node = Err("`node` prameter is required".to_owned());
        let need_range = Err("`range` prameter is required".to_owned());
        for a in [&db, &node, &range, &shard] {
            assert_eq!(check_required(a, false, false), Ok(()));
        }
        assert_eq!(check_required(&db, true, true), need_node);
        assert_eq!(check_required(&db, false, true), need_range);
        assert_eq!(check_required(&node, true, true), need_range);
        assert_eq!(check_required(&range, true, true), need_node);
        assert_eq!(check_required(&range, false, true), Ok(()));
        assert_eq!(check_required(&shard, false, true), Ok(()));
        assert_eq!(check_required(&shard, true, false), need_node);
    }

    #[test]
    fn the_summary_counts_as_couchdb_does() {
        let m = map();
        let mut a = SplitJob::new("db", &m, "00000000-7fffffff", "a@h", 1, true);
        a.run_step("topoff1", 2);
        let b = SplitJob::new("db", &m, "80000000-ffffffff", "a@h", 1, true);
        let on = Switch {
            running: true,
            reason: None,
        };
        assert_eq!(
            summary(&on, &[a.clone(), b.clone()]).to_string(),
            r#"{"state":"running","state_reason":null,"completed":0,"failed":0,"running":1,"stopped":0,"total":2}"#
        );
        let off = Switch {
            running: false,
            reason: Some("why".into()),
        };
        assert_eq!(summary(&off, &[a, b])["stopped"], 1);
        assert_eq!(Switch::from_stored(Some(&off.stored())), off);
        assert!(Switch::from_stored(None).running);
    }
}
