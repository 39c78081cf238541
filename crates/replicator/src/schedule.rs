//! The replication scheduler's decisions, as CouchDB 3's `couch_replicator_scheduler`
//! makes them, as pure functions over the jobs' histories and the limits: which jobs to
//! stop and start at each rescheduling, whether a job added now starts at once, how long
//! a crashed job waits, and what state `_scheduler/docs` shows. The caller owns the jobs
//! and applies the decisions (starts and stops tasks, records the events).
//!
//! Time is in microseconds since the Unix epoch, as CouchDB compares `os:timestamp()`s.

use std::time::Duration;

/// Microseconds since the Unix epoch.
pub type Micros = u64;

/// What happened to a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Started,
    Stopped,
    /// The job failed; the text is what `_scheduler` shows as its reason.
    Crashed(String),
}

impl EventKind {
    /// The event's `type` in `_scheduler/jobs` histories.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Added => "added",
            EventKind::Started => "started",
            EventKind::Stopped => "stopped",
            EventKind::Crashed(_) => "crashed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub at: Micros,
}

/// Adds an event at the head of a history (newest first) and keeps at most `max_history`
/// events (at least one).
pub fn record(history: &mut Vec<Event>, kind: EventKind, at: Micros, max_history: usize) {
    history.insert(0, Event { kind, at });
    history.truncate(max_history.max(1));
}

/// When the job last started (0 if it never did, or the event has left the history).
pub fn last_started(history: &[Event]) -> Micros {
    history
        .iter()
        .find(|e| e.kind == EventKind::Started)
        .map_or(0, |e| e.at)
}

fn latest_crash(history: &[Event]) -> Micros {
    history
        .iter()
        .find(|e| matches!(e.kind, EventKind::Crashed(_)))
        .map_or(0, |e| e.at)
}

/// The crashes in a row at the head of the history: each crash that came within
/// `threshold` of the event before it counts, and the streak ends at a crash that came
/// later than that (the job had been healthy) or at a stop after a start.
pub fn consecutive_crashes(history: &[Event], threshold: Duration) -> u32 {
    let limit = threshold.as_micros() as u64;
    let mut count = 0;
    let mut i = 0;
    while i < history.len() {
        match (&history[i].kind, history.get(i + 1)) {
            (EventKind::Crashed(_), Some(previous)) => {
                if history[i].at.saturating_sub(previous.at) > limit {
                    return count;
                }
                count += 1;
            }
            (EventKind::Stopped, Some(previous)) if previous.kind == EventKind::Started => {
                return count;
            }
            _ => {}
        }
        i += 1;
    }
    count
}

/// How long a job that crashed `crashes` times in a row waits before it may run again:
/// `base` doubling with each crash, at most 2^10 times `base` (CouchDB's base: 30 s).
pub fn backoff(crashes: u32, base: Duration) -> Duration {
    if crashes == 0 {
        return Duration::ZERO;
    }
    base.saturating_mul(1 << (crashes - 1).min(10))
}

/// The scheduler's settings (`[replicator]`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `max_jobs`: jobs running at once.
    pub max_jobs: usize,
    /// `max_churn`: running jobs stopped for rotation at one rescheduling.
    pub max_churn: usize,
    /// `health_threshold`: a crash this long after the previous event ends a streak.
    pub health_threshold: Duration,
    /// The first crash's backoff.
    pub backoff_base: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_jobs: 500,
            max_churn: 20,
            health_threshold: Duration::from_secs(120),
            backoff_base: Duration::from_secs(30),
        }
    }
}

/// Whether a job that does not run may start now: it never ran, it was stopped (not
/// crashed), or its backoff since the last crash is over.
pub fn may_start(history: &[Event], now: Micros, limits: &Limits) -> bool {
    match history {
        [Event {
            kind: EventKind::Added,
            ..
        }] => true,
        [Event {
            kind: EventKind::Stopped,
            ..
        }, ..] => true,
        _ => {
            let crashes = consecutive_crashes(history, limits.health_threshold);
            let wait = backoff(crashes, limits.backoff_base).as_micros() as u64;
            now.saturating_sub(latest_crash(history)) >= wait
        }
    }
}

/// What the scheduler needs to know of a job.
#[derive(Clone, Copy, Debug)]
pub struct JobView<'a> {
    pub id: &'a str,
    pub continuous: bool,
    pub running: bool,
    pub history: &'a [Event],
}

/// Jobs to stop (in this order), then jobs to start. A job may be in both: CouchDB stops
/// it and starts it again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub stop: Vec<String>,
    pub start: Vec<String>,
}

/// Whether a job just added starts at once: only while the jobs, it included, number
/// fewer than `max_jobs` (otherwise it waits for the next rescheduling).
pub fn starts_when_added(total_jobs: usize, running: usize, max_jobs: usize) -> bool {
    total_jobs < max_jobs && running < max_jobs
}

/// The `count` waiting jobs that may start now, those that started longest ago (or never)
/// first. `running` marks the jobs that run.
fn pending_jobs(
    jobs: &[JobView<'_>],
    running: &dyn Fn(usize) -> bool,
    count: usize,
    now: Micros,
    limits: &Limits,
) -> Vec<usize> {
    let mut ready: Vec<usize> = (0..jobs.len())
        .filter(|&i| !running(i) && may_start(jobs[i].history, now, limits))
        .collect();
    ready.sort_by_key(|&i| (last_started(jobs[i].history), jobs[i].id));
    ready.truncate(count);
    ready
}

/// Up to `count` running jobs of one kind, those that started longest ago first.
fn longest_running(
    jobs: &[JobView<'_>],
    running: &dyn Fn(usize) -> bool,
    continuous: bool,
    count: usize,
) -> Vec<usize> {
    let mut found: Vec<usize> = (0..jobs.len())
        .filter(|&i| running(i) && jobs[i].continuous == continuous)
        .collect();
    found.sort_by_key(|&i| (last_started(jobs[i].history), jobs[i].id));
    found.truncate(count);
    found
}

/// One rescheduling (every `[replicator] interval`): first stop the jobs that run beyond
/// `max_jobs` (continuous ones first, longest running first); then, when jobs wait, stop
/// up to `max_churn` (less what was just stopped) of the longest-running continuous jobs
/// — one-shot jobs are never rotated out — and fill every free slot with the waiting jobs
/// that may start, those that last started longest ago (or never) first. Starts are not
/// limited by `max_churn`. Jobs just stopped may start again in the same round.
pub fn reschedule(jobs: &[JobView<'_>], limits: &Limits, now: Micros) -> Plan {
    let mut runs: Vec<bool> = jobs.iter().map(|j| j.running).collect();
    let mut stopped = Vec::new();
    let count = |runs: &[bool]| runs.iter().filter(|&&r| r).count();
    let mut stop = |runs: &mut Vec<bool>, continuous: bool, n: usize| {
        let picked = longest_running(jobs, &|i| runs[i], continuous, n);
        for &i in &picked {
            runs[i] = false;
            stopped.push(i);
        }
        picked.len()
    };
    let excess = count(&runs).saturating_sub(limits.max_jobs);
    let continuous_stopped = stop(&mut runs, true, excess);
    stop(&mut runs, false, excess - continuous_stopped);

    let running = count(&runs);
    let pending = jobs.len() - running;
    let churn = limits.max_churn.saturating_sub(excess);
    if running <= limits.max_jobs {
        let slots = limits.max_jobs - running;
        let rotate = pending.saturating_sub(slots).min(running).min(churn);
        stop(&mut runs, true, rotate);
    }
    let free = limits.max_jobs.saturating_sub(count(&runs));
    let start = pending_jobs(jobs, &|i| runs[i], free, now, limits);
    Plan {
        stop: stopped.iter().map(|&i| jobs[i].id.to_string()).collect(),
        start: start.iter().map(|&i| jobs[i].id.to_string()).collect(),
    }
}

/// After a job crashed, while the jobs number fewer than `max_jobs`: the waiting jobs
/// that may fill the free slots now.
pub fn start_pending(jobs: &[JobView<'_>], limits: &Limits, now: Micros) -> Vec<String> {
    if jobs.len() >= limits.max_jobs {
        return Vec::new();
    }
    let running = jobs.iter().filter(|j| j.running).count();
    if running >= limits.max_jobs || running == jobs.len() {
        return Vec::new();
    }
    pending_jobs(
        jobs,
        &|i| jobs[i].running,
        limits.max_jobs - running,
        now,
        limits,
    )
    .into_iter()
    .map(|i| jobs[i].id.to_string())
    .collect()
}

/// A scheduled job's state as `_scheduler/docs` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState<'a> {
    Running,
    Pending,
    /// The latest crash's reason.
    Crashing(&'a str),
}

/// A job's state and its error count (the crashes in a row): running if it runs, crashing
/// if its latest event is a crash or it crashed lately, pending otherwise.
pub fn job_state<'a>(
    running: bool,
    history: &'a [Event],
    threshold: Duration,
) -> (JobState<'a>, u32) {
    let crashes = consecutive_crashes(history, threshold);
    let latest_reason = || {
        history.iter().find_map(|e| match &e.kind {
            EventKind::Crashed(r) => Some(r.as_str()),
            _ => None,
        })
    };
    let state = match (running, &history.first().map(|e| &e.kind)) {
        (true, _) => JobState::Running,
        (false, Some(EventKind::Crashed(r))) => JobState::Crashing(r),
        (false, _) if crashes > 0 => JobState::Crashing(latest_reason().unwrap_or("")),
        (false, _) => JobState::Pending,
    };
    (state, crashes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    fn ev(kind: EventKind, secs: u64) -> Event {
        Event { kind, at: secs * S }
    }
    fn added(t: u64) -> Event {
        ev(EventKind::Added, t)
    }
    fn started(t: u64) -> Event {
        ev(EventKind::Started, t)
    }
    fn stopped(t: u64) -> Event {
        ev(EventKind::Stopped, t)
    }
    fn crashed(t: u64) -> Event {
        ev(EventKind::Crashed("boom".into()), t)
    }

    fn threshold() -> Duration {
        Duration::from_secs(120)
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_two_to_the_tenth() {
        let base = Duration::from_secs(30);
        let expected = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1024];
        for (n, factor) in expected.iter().enumerate() {
            assert_eq!(backoff(n as u32, base), base * *factor, "{n} crashes");
        }
    }

    #[test]
    fn crash_streaks() {
        let cases: Vec<(u32, Vec<Event>)> = vec![
            (0, vec![]),
            (0, vec![added(0)]),
            (0, vec![stopped(0)]),
            (0, vec![crashed(0)]),
            (1, vec![crashed(0), added(0)]),
            (1, vec![crashed(0), crashed(0)]),
            (1, vec![crashed(0), stopped(0)]),
            (3, vec![crashed(0), crashed(0), crashed(0), added(0)]),
            (2, vec![crashed(0), crashed(0), stopped(0)]),
            (1, vec![crashed(0), started(0), added(0)]),
            (2, vec![crashed(3), started(2), crashed(1), started(0)]),
            (0, vec![stopped(3), started(2), crashed(1), started(0)]),
            (1, vec![crashed(3), started(2), stopped(1), started(0)]),
            // Healthy for longer than the threshold: the streak ends.
            (0, vec![crashed(999), started(0)]),
            (
                1,
                vec![crashed(999), started(998), crashed(997), started(0)],
            ),
        ];
        for (expected, history) in cases {
            assert_eq!(
                consecutive_crashes(&history, threshold()),
                expected,
                "{history:?}"
            );
        }
        let ten = Duration::from_secs(10);
        assert_eq!(consecutive_crashes(&[crashed(11), started(0)], ten), 0);
        assert_eq!(consecutive_crashes(&[crashed(10), started(0)], ten), 1);
    }

    #[test]
    fn last_start_is_the_newest_started_event() {
        assert_eq!(last_started(&[added(0)]), 0);
        assert_eq!(last_started(&[crashed(1)]), 0);
        assert_eq!(last_started(&[added(0), started(1)]), S);
        assert_eq!(last_started(&[crashed(3), started(2), started(1)]), 2 * S);
    }

    #[test]
    fn history_keeps_the_newest_events() {
        let mut h = Vec::new();
        for t in 0..5 {
            record(&mut h, EventKind::Started, t, 3);
        }
        assert_eq!(h.iter().map(|e| e.at).collect::<Vec<_>>(), vec![4, 3, 2]);
    }

    #[test]
    fn a_crashed_job_waits_out_its_backoff() {
        let limits = Limits::default();
        let history = [crashed(100), started(99), added(0)];
        assert!(!may_start(&history, 129 * S, &limits));
        assert!(may_start(&history, 130 * S, &limits));
        // Two crashes in a row: 60 s.
        let history = [crashed(100), started(99), crashed(90), started(89)];
        assert!(!may_start(&history, 159 * S, &limits));
        assert!(may_start(&history, 160 * S, &limits));
        assert!(may_start(&[added(0)], 0, &limits));
        assert!(may_start(&[stopped(5), started(1)], 5 * S, &limits));
    }

    /// Jobs as CouchDB's tests name them: `(number, continuous, running)`, each having
    /// started (or, if it never ran, been added) at `number` seconds.
    struct Jobs {
        ids: Vec<String>,
        histories: Vec<Vec<Event>>,
        kinds: Vec<(bool, bool)>,
    }

    impl Jobs {
        fn new(spec: &[(u64, bool, bool)]) -> Jobs {
            Jobs {
                ids: spec.iter().map(|(n, ..)| n.to_string()).collect(),
                histories: spec
                    .iter()
                    .map(|&(n, _, _)| vec![started(n), added(0)])
                    .collect(),
                kinds: spec.iter().map(|&(_, c, r)| (c, r)).collect(),
            }
        }

        fn views(&self) -> Vec<JobView<'_>> {
            (0..self.ids.len())
                .map(|i| JobView {
                    id: &self.ids[i],
                    continuous: self.kinds[i].0,
                    running: self.kinds[i].1,
                    history: &self.histories[i],
                })
                .collect()
        }

        /// Applies a rescheduling; the jobs running afterwards, sorted.
        fn reschedule(&mut self, max_jobs: usize, max_churn: usize) -> Vec<u64> {
            let limits = Limits {
                max_jobs,
                max_churn,
                ..Limits::default()
            };
            let now = 1000 * S;
            let plan = reschedule(&self.views(), &limits, now);
            for id in &plan.stop {
                let i = self.ids.iter().position(|x| x == id).unwrap();
                self.kinds[i].1 = false;
                record(&mut self.histories[i], EventKind::Stopped, now, 20);
            }
            for id in &plan.start {
                let i = self.ids.iter().position(|x| x == id).unwrap();
                assert!(!self.kinds[i].1, "{id} started twice");
                self.kinds[i].1 = true;
                record(&mut self.histories[i], EventKind::Started, now, 20);
            }
            self.running()
        }

        fn running(&self) -> Vec<u64> {
            let mut r: Vec<u64> = (0..self.ids.len())
                .filter(|&i| self.kinds[i].1)
                .map(|i| self.ids[i].parse().unwrap())
                .collect();
            r.sort();
            r
        }
    }

    const C: bool = true; // continuous
    const O: bool = false; // one-shot
    const R: bool = true; // running
    const P: bool = false; // waiting

    #[test]
    fn waiting_jobs_fill_free_slots_whatever_max_churn() {
        assert_eq!(Jobs::new(&[(1, O, P)]).reschedule(500, 20), vec![1]);
        assert_eq!(Jobs::new(&[(1, O, P)]).reschedule(0, 20), Vec::<u64>::new());
        assert_eq!(
            Jobs::new(&[(1, O, P), (2, O, P)]).reschedule(1, 20),
            vec![1]
        );
        assert_eq!(
            Jobs::new(&[(1, O, P), (2, O, P)]).reschedule(500, 0),
            vec![1, 2]
        );
    }

    #[test]
    fn jobs_beyond_max_jobs_stop_continuous_first() {
        let mut j = Jobs::new(&[(1, O, R), (2, O, R)]);
        assert_eq!(j.reschedule(1, 20), vec![2]);
        assert_eq!(j.reschedule(0, 20), Vec::<u64>::new());
        let mut j = Jobs::new(&[(1, C, R), (2, C, R)]);
        assert_eq!(j.reschedule(1, 20).len(), 1);
        let mut j = Jobs::new(&[(1, C, R), (2, O, R), (3, C, R)]);
        // 1 goes for the excess, then 3 for rotation, and 1 (waiting longest) returns.
        assert_eq!(j.reschedule(2, 20), vec![1, 2]);
        assert_eq!(j.reschedule(1, 20), vec![2]);
        assert_eq!(j.reschedule(0, 20), Vec::<u64>::new());
    }

    #[test]
    fn rotation_stops_the_longest_running_and_starts_the_longest_waiting() {
        let mut j = Jobs::new(&[(7, C, R), (4, C, R), (5, C, R)]);
        assert_eq!(j.reschedule(2, 1), vec![5, 7]);
        let mut j = Jobs::new(&[(7, C, P), (2, C, P), (5, C, P)]);
        assert_eq!(j.reschedule(1, 20), vec![2]);
        // 2 started last: it is the one rotated out.
        assert_eq!(j.reschedule(2, 20), vec![5, 7]);
        let mut j = Jobs::new(&[(7, C, R), (2, C, P), (5, C, P)]);
        assert_eq!(j.reschedule(2, 2), vec![2, 5]);
    }

    #[test]
    fn no_rotation_while_slots_are_free_or_nothing_waits() {
        let mut j = Jobs::new(&[(1, C, R), (2, C, R)]);
        let plan = reschedule(&j.views(), &Limits::default(), 0);
        assert_eq!(plan, Plan::default());
        assert_eq!(j.reschedule(2, 2), vec![1, 2]);
        assert_eq!(
            Jobs::new(&[(1, C, P), (2, C, R)]).reschedule(2, 2),
            vec![1, 2]
        );
    }

    #[test]
    fn max_churn_bounds_rotation() {
        let mut j = Jobs::new(&[(1, C, P), (2, C, R), (3, C, P), (4, C, R)]);
        assert_eq!(j.reschedule(2, 1), vec![1, 4]);
        let mut j = Jobs::new(&[(1, C, P), (2, C, R), (3, C, P), (4, C, R), (5, C, R)]);
        assert_eq!(j.reschedule(3, 20), vec![1, 2, 5]);
        let mut j = Jobs::new(&[(1, C, P), (2, C, P), (3, C, P), (4, C, R), (5, C, R)]);
        assert_eq!(j.reschedule(2, 20), vec![1, 2]);
    }

    #[test]
    fn one_shot_jobs_are_not_rotated_out_and_get_no_priority() {
        assert_eq!(
            Jobs::new(&[(1, O, R), (2, C, P)]).reschedule(1, 20),
            vec![1]
        );
        assert_eq!(
            Jobs::new(&[(1, C, P), (2, O, R), (3, C, R)]).reschedule(2, 20),
            vec![1, 2]
        );
        assert_eq!(
            Jobs::new(&[(1, C, P), (2, O, P), (3, C, R)]).reschedule(1, 20),
            vec![1]
        );
        // One-shot jobs can hold every slot.
        assert_eq!(
            Jobs::new(&[(1, O, R), (2, O, R), (3, O, P), (4, C, P)]).reschedule(2, 20),
            vec![1, 2]
        );
        // Trimming the excess still leaves room for rotation.
        assert_eq!(
            Jobs::new(&[(1, C, P), (2, C, R), (3, C, R)]).reschedule(1, 20),
            vec![1]
        );
    }

    #[test]
    fn crashed_jobs_wait_out_their_backoff_before_starting() {
        let ids = ["1", "2", "3"];
        let histories = [
            vec![crashed(1000), started(999), added(0)],
            vec![added(2)],
            vec![added(3)],
        ];
        let views: Vec<JobView<'_>> = (0..3)
            .map(|i| JobView {
                id: ids[i],
                continuous: false,
                running: false,
                history: &histories[i],
            })
            .collect();
        let limits = Limits {
            max_jobs: 1,
            ..Limits::default()
        };
        assert_eq!(reschedule(&views, &limits, 1000 * S).start, vec!["2"]);
        // After a crash, waiting jobs start only while the jobs number fewer than
        // max_jobs.
        let limits = Limits {
            max_jobs: 3,
            ..Limits::default()
        };
        assert!(start_pending(&views, &limits, 1000 * S).is_empty());
        let limits = Limits {
            max_jobs: 4,
            ..Limits::default()
        };
        assert_eq!(start_pending(&views, &limits, 1000 * S), vec!["2", "3"]);
        assert_eq!(start_pending(&views, &limits, 1030 * S).len(), 3);
    }

    #[test]
    fn a_new_job_starts_only_below_max_jobs() {
        assert!(starts_when_added(1, 0, 500));
        // The new job counts: with max_jobs = 2 and one running, it waits.
        assert!(!starts_when_added(2, 1, 2));
        assert!(!starts_when_added(1, 0, 0));
    }

    #[test]
    fn states_as_scheduler_docs_show_them() {
        let t = threshold();
        assert_eq!(job_state(true, &[added(0)], t), (JobState::Running, 0));
        assert_eq!(
            job_state(false, &[stopped(20), started(10), added(0)], t),
            (JobState::Pending, 0)
        );
        // Crashed after running longer than the threshold: crashing, no streak.
        assert_eq!(
            job_state(false, &[crashed(121), started(0)], t),
            (JobState::Crashing("boom"), 0)
        );
        assert_eq!(
            job_state(false, &[crashed(4), started(3), crashed(2), started(1)], t),
            (JobState::Crashing("boom"), 2)
        );
    }
}
