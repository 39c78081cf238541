//! `settee bench`: the project's benchmark workloads (those of `bench/insert_read.py`)
//! against any CouchDB-compatible server. Phases, in order: bulk inserts of
//! `{_id: <random 32 hex>, foo: "bar"}`, the first build of a JS map + `_sum` view, reduce,
//! group and range queries on it, random single-document reads. Each phase shows a bar
//! with ETA; the results go to stdout as a table and to `--out-dir` as `results.json`,
//! `results.md` and `throughput.svg` (operations per second over the run's time).

use crate::client::{enc, Client, Target};
use crate::{plot, progress, Error};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The server, e.g. http://admin:secret@127.0.0.1:5984 (its whole path is the server's
    /// root; the database is --db).
    pub url: String,
    /// Credentials as NAME:PASSWORD (instead of those in the URL).
    #[arg(long, env = "SETTEE_USER")]
    pub user: Option<String>,
    /// Documents to insert.
    #[arg(long, default_value_t = 100_000)]
    pub docs: u64,
    /// Documents per `_bulk_docs` request.
    #[arg(long, default_value_t = 1000)]
    pub batch: u64,
    /// Concurrent clients for the inserts and the reads.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Random single-document reads.
    #[arg(long, default_value_t = 20_000)]
    pub reads: u64,
    /// How many times each view query runs.
    #[arg(long, default_value_t = 21)]
    pub query_repeats: u64,
    /// Where results.json, results.md and throughput.svg are written.
    #[arg(long, default_value = "bench-results")]
    pub out_dir: PathBuf,
    /// The database to benchmark in: deleted first, and at the end unless --keep.
    #[arg(long, default_value = "settee-bench")]
    pub db: String,
    /// Keep the database afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Skip the view build and the view queries.
    #[arg(long)]
    pub no_views: bool,
    /// Seed for document ids and the read order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One row of the results: a phase (or one query of the query phase).
pub struct Phase {
    pub name: String,
    /// What an operation is: docs, queries, reads.
    pub unit: &'static str,
    pub ops: u64,
    /// When the phase started, in seconds since the run started.
    pub start: f64,
    pub secs: f64,
    /// Per request, in milliseconds (a `_bulk_docs` request carries `batch` documents).
    pub latencies_ms: Vec<f64>,
    /// (seconds since the run started, operations completed then), for the plot.
    pub events: Vec<(f64, u64)>,
}

impl Phase {
    fn new(name: &str, unit: &'static str) -> Phase {
        Phase {
            name: name.to_string(),
            unit,
            ops: 0,
            start: 0.0,
            secs: 0.0,
            latencies_ms: Vec::new(),
            events: Vec::new(),
        }
    }

    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }

    /// The `q` quantile of the request latencies (nearest rank), if any were recorded.
    pub fn latency(&self, q: f64) -> Option<f64> {
        let mut v = self.latencies_ms.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[((v.len() - 1) as f64 * q).round() as usize])
    }
}

/// The shared state of one run: the client, the database path and the clock.
struct Run<'a> {
    client: &'a Client,
    db_path: String,
    t0: Instant,
}

impl Run<'_> {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

pub fn run(args: &BenchArgs) -> Result<(), Error> {
    if args.docs == 0 || args.batch == 0 || args.concurrency == 0 {
        return Err(Error::Usage(
            "--docs, --batch and --concurrency must be positive".into(),
        ));
    }
    let client = &Target::server(&args.url, args.user.as_deref())?;
    let run = Run {
        client,
        db_path: format!("/{}", enc(&args.db)),
        t0: Instant::now(),
    };
    let (status, body) = client.send("DELETE", &run.db_path, None)?;
    if status != 404 {
        client.check("DELETE", &run.db_path, status, &body)?;
    }
    client.ensure_db(&args.db)?;
    eprintln!(
        "settee bench: {} docs ({} per _bulk_docs, {} clients) on {}/{}",
        args.docs,
        args.batch,
        args.concurrency,
        client.root(),
        args.db
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let ids: Vec<String> = (0..args.docs)
        .map(|_| format!("{:032x}", rng.gen::<u128>()))
        .collect();
    let mut phases = vec![insert(&run, args, &ids)?];
    let info = client.json("GET", &run.db_path, None)?;
    if info["doc_count"].as_u64() != Some(args.docs) {
        return Err(Error::Format(format!(
            "after the inserts doc_count is {}, not {}",
            info["doc_count"], args.docs
        )));
    }
    if !args.no_views {
        phases.push(view_build(&run, args.docs, &args.db)?);
        phases.extend(queries(&run, args.query_repeats)?);
    }
    if args.reads > 0 {
        phases.push(reads(&run, args, &ids, &mut rng)?);
    }
    if !args.keep {
        client.json("DELETE", &run.db_path, None)?;
    }

    let table = render_table(&phases);
    println!("{table}");
    write_results(args, client.root(), &phases, &table)
}

/// `_bulk_docs` of `batch` documents each, from `concurrency` clients.
fn insert(run: &Run, args: &BenchArgs, ids: &[String]) -> Result<Phase, Error> {
    let batches: Vec<&[String]> = ids.chunks(args.batch as usize).collect();
    let bar = progress::bar("insert", ids.len() as u64, "docs");
    let path = format!("{}/_bulk_docs", run.db_path);
    let phase = Phase::new("insert (_bulk_docs)", "docs");
    timed_parallel(run, args.concurrency, &batches, phase, &bar, |batch| {
        let docs: Vec<Value> = batch
            .iter()
            .map(|id| json!({"_id": id, "foo": "bar"}))
            .collect();
        let body = serde_json::to_vec(&json!({ "docs": docs })).expect("JSON");
        let (status, out) = run.client.send("POST", &path, Some(&body))?;
        run.client.check("POST", &path, status, &out)?;
        Ok(batch.len() as u64)
    })
}

/// Runs `op` on every item from `concurrency` clients, timing each call; `op` answers how
/// many of the phase's units (documents, reads) the call covered.
fn timed_parallel<T: Sync>(
    run: &Run,
    concurrency: usize,
    items: &[T],
    mut phase: Phase,
    bar: &indicatif::ProgressBar,
    op: impl Fn(&T) -> Result<u64, Error> + Sync,
) -> Result<Phase, Error> {
    let next = AtomicU64::new(0);
    let timings = Mutex::new(Vec::new());
    let start = run.now();
    let result: Result<(), Error> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                s.spawn(|| -> Result<(), Error> {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        let Some(item) = items.get(i) else { break };
                        let t = Instant::now();
                        let units = op(item)?;
                        mine.push((t.elapsed().as_secs_f64() * 1e3, run.now(), units));
                        bar.inc(units);
                    }
                    timings.lock().expect("timings").extend(mine);
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("bench worker"))
    });
    bar.finish_and_clear();
    result?;
    for (ms, at, units) in timings.into_inner().expect("timings") {
        phase.latencies_ms.push(ms);
        phase.events.push((at, units));
        phase.ops += units;
    }
    phase.secs = run.now() - start;
    phase.start = start;
    Ok(phase)
}

/// The first query of a new view builds its index; its progress is read from
/// `_active_tasks` (the indexer's `changes_done`) while the query waits.
fn view_build(run: &Run, docs: u64, db: &str) -> Result<Phase, Error> {
    let ddoc = json!({"views": {"by_prefix": {
        "map": "function(doc) { emit([doc._id.charAt(0), doc._id.charAt(1)], 1); }",
        "reduce": "_sum"}}});
    run.client.json(
        "PUT",
        &format!("{}/_design/bench", run.db_path),
        Some(&ddoc),
    )?;
    let bar = progress::bar("view build", docs, "docs");
    let mut phase = Phase::new("view build (JS map, _sum)", "docs");
    let start = run.now();
    let view = format!("{}/_design/bench/_view/by_prefix?limit=1", run.db_path);
    let answer = std::thread::scope(|s| {
        let query = s.spawn(|| run.client.json("GET", &view, None));
        let mut seen = 0;
        while !query.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let Ok(tasks) = run.client.json("GET", "/_active_tasks", None) else {
                continue;
            };
            // CouchDB runs one indexer per shard: their progress adds up.
            let ours = tasks.as_array().into_iter().flatten().filter(|t| {
                t["type"] == "indexer"
                    && t["design_document"] == "_design/bench"
                    && t["database"].as_str().is_some_and(|d| d.contains(db))
            });
            let done: Option<u64> = ours
                .filter_map(|t| t["changes_done"].as_u64())
                .reduce(|a, b| a + b);
            if let Some(done) = done.filter(|&d| d > seen) {
                phase.events.push((run.now(), done - seen));
                seen = done;
                bar.set_position(done);
            }
        }
        let answer = query.join().expect("view query");
        if seen < docs {
            phase.events.push((run.now(), docs - seen));
        }
        answer
    })?;
    bar.finish_and_clear();
    phase.secs = run.now() - start;
    phase.start = start;
    phase.ops = docs;
    phase.latencies_ms.push(phase.secs * 1e3);
    if answer["rows"][0]["value"].as_u64() != Some(docs) {
        return Err(Error::Format(format!(
            "the view's full reduce is {}, not {docs}",
            answer["rows"][0]["value"]
        )));
    }
    Ok(phase)
}

/// Queries that read the stored reductions, and one page of map rows.
const QUERIES: [(&str, &str); 5] = [
    ("full reduce", ""),
    ("group_level=1", "?group_level=1"),
    ("group=true&limit=16", "?group=true&limit=16"),
    (
        "range reduce",
        "?startkey=%5B%223%22%5D&endkey=%5B%227%22,%7B%7D%5D",
    ),
    (
        "map rows limit=10",
        "?reduce=false&limit=10&startkey=%5B%228%22%5D",
    ),
];

fn queries(run: &Run, repeats: u64) -> Result<Vec<Phase>, Error> {
    let bar = progress::bar("view queries", repeats * QUERIES.len() as u64, "queries");
    let view = format!("{}/_design/bench/_view/by_prefix", run.db_path);
    let mut phases = Vec::new();
    for (name, q) in QUERIES {
        let mut phase = Phase::new(&format!("query: {name}"), "queries");
        let start = run.now();
        for _ in 0..repeats {
            let t = Instant::now();
            run.client.json("GET", &format!("{view}{q}"), None)?;
            phase.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
            phase.events.push((run.now(), 1));
            bar.inc(1);
        }
        phase.ops = repeats;
        phase.secs = run.now() - start;
        phase.start = start;
        phases.push(phase);
    }
    bar.finish_and_clear();
    Ok(phases)
}

/// `GET /{db}/{id}` of random inserted ids from `concurrency` clients.
fn reads(run: &Run, args: &BenchArgs, ids: &[String], rng: &mut impl Rng) -> Result<Phase, Error> {
    let order: Vec<usize> = (0..args.reads)
        .map(|_| rng.gen_range(0..ids.len()))
        .collect();
    let bar = progress::bar("random reads", args.reads, "reads");
    let phase = Phase::new("random reads (GET /db/id)", "reads");
    timed_parallel(run, args.concurrency, &order, phase, &bar, |&k| {
        let path = format!("{}/{}", run.db_path, ids[k]);
        let (status, out) = run.client.send("GET", &path, None)?;
        run.client.check("GET", &path, status, &out)?;
        Ok(1)
    })
}

const HEADER: [&str; 8] = [
    "phase", "ops", "unit", "seconds", "ops/s", "p50 ms", "p99 ms", "max ms",
];

fn cells(p: &Phase) -> [String; 8] {
    let ms = |q: f64| p.latency(q).map_or("-".into(), |v| format!("{v:.2}"));
    [
        p.name.clone(),
        p.ops.to_string(),
        p.unit.to_string(),
        format!("{:.3}", p.secs),
        format!("{:.0}", p.rate()),
        ms(0.5),
        ms(0.99),
        ms(1.0),
    ]
}

/// The results as a Markdown table (which also reads well on a terminal).
pub fn render_table(phases: &[Phase]) -> String {
    let rows: Vec<[String; 8]> = phases.iter().map(cells).collect();
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([HEADER[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: &[String]| {
        let padded: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| match i {
                0 | 2 => format!("{c:<w$}", w = widths[i]),
                _ => format!("{c:>w$}", w = widths[i]),
            })
            .collect();
        format!("| {} |", padded.join(" | "))
    };
    let mut out = vec![line(&HEADER.map(String::from))];
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, w)| match i {
            0 | 2 => "-".repeat(w + 2),
            _ => format!("{}:", "-".repeat(w + 1)),
        })
        .collect();
    out.push(format!("|{}|", rule.join("|")));
    out.extend(rows.iter().map(|r| line(r)));
    out.join("\n")
}

fn write_results(args: &BenchArgs, root: &str, phases: &[Phase], table: &str) -> Result<(), Error> {
    let dir = &args.out_dir;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let date = utc_now();
    let results = json!({
        "date": date,
        "server": root,
        "docs": args.docs,
        "batch": args.batch,
        "concurrency": args.concurrency,
        "reads": args.reads,
        "query_repeats": args.query_repeats,
        "phases": phases.iter().map(|p| json!({
            "name": p.name, "unit": p.unit, "ops": p.ops, "seconds": p.secs,
            "ops_per_sec": p.rate(), "p50_ms": p.latency(0.5), "p99_ms": p.latency(0.99),
            "max_ms": p.latency(1.0),
        })).collect::<Vec<_>>(),
    });
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))
    };
    write(
        "results.json",
        &serde_json::to_vec_pretty(&results).expect("JSON"),
    )?;
    let md = format!(
        "# settee bench, {date}\n\n{} docs, {} per `_bulk_docs`, {} clients, {} reads, against {root}\n\n{table}\n",
        args.docs, args.batch, args.concurrency, args.reads
    );
    write("results.md", md.as_bytes())?;
    let svg = dir.join("throughput.svg");
    plot::throughput(&svg, phases)?;
    eprintln!(
        "wrote {}, {} and {}",
        dir.join("results.json").display(),
        dir.join("results.md").display(),
        svg.display()
    );
    Ok(())
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ` (civil date from days since the epoch, as in
/// Howard Hinnant's `civil_from_days`).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_a_row_per_phase_and_quantiles() {
        let mut p = Phase::new("reads", "reads");
        p.ops = 4;
        p.secs = 2.0;
        p.latencies_ms = vec![4.0, 1.0, 3.0, 2.0];
        assert_eq!(p.rate(), 2.0);
        assert_eq!(p.latency(0.5), Some(3.0));
        assert_eq!(p.latency(1.0), Some(4.0));
        let t = render_table(&[p, Phase::new("empty", "docs")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].starts_with("| reads "));
        assert!(lines[3].contains(" - "), "no latencies: {}", lines[3]);
        assert!(lines.iter().all(|l| l.len() == lines[0].len()));
    }

    #[test]
    fn utc_date_is_well_formed() {
        let d = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }
}
