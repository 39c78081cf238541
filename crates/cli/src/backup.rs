//! `settee backup`: a database to a file in couchbackup's format, resumable as couchbackup's
//! "full" mode is.
//!
//! Backup file: an optional first line of metadata (`{"name","version","mode","attachments"}`),
//! then one line per batch, each a JSON array of documents as `_bulk_get?revs=true` returns
//! them (`_rev`, `_revisions`, deleted leaves as `{"_deleted": true}`), with attachments
//! inline as base64 (`attachments=true`). A resumed backup appends
//! `{"marker":"@cloudant/couchbackup:resume"}` first, with no newline before it, so that a
//! line cut short by the interruption ends with the marker and restore skips it.
//!
//! Log file (couchbackup's): `:t batchN [{"id":..,"rev":..},..]` for every batch to fetch,
//! written while reading `_changes`; `:changes_complete <seq>` when the feed is exhausted;
//! `:d batchN` once batch N's line is in the backup file (written and synced first).
//! `--resume` fetches the `:t` batches with no `:d`; a batch written but not yet logged is
//! fetched again, which restore tolerates (`new_edits=false` writes are idempotent).
//!
//! Unlike couchbackup (which asks `_changes` for winners only), the feed is read with
//! `style=all_docs` and every leaf revision is fetched, so conflicts survive a round trip.

use crate::client::{enc, Client, Target};
use crate::{progress, Error};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// couchbackup's resume marker line.
pub const RESUME_MARKER: &str = r#"{"marker":"@cloudant/couchbackup:resume"}"#;

#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    /// The database: a URL (http://admin:secret@host:5984/db) or a name on --url.
    pub db: String,
    /// The backup file (created, or appended to with --resume).
    pub file: PathBuf,
    /// The server for a database given by name (credentials may be in it).
    #[arg(long, env = "COUCH_URL", default_value = "http://127.0.0.1:5984")]
    pub url: String,
    /// Credentials as NAME:PASSWORD (instead of those in the URL).
    #[arg(long, env = "SETTEE_USER")]
    pub user: Option<String>,
    /// The log of batches that --resume reads (couchbackup's format) [default: FILE.log].
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Continue an interrupted backup: fetch the batches its log does not mark done.
    #[arg(long)]
    pub resume: bool,
    /// Document revisions per batch (one line of the backup file).
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Concurrent `_bulk_get` requests.
    #[arg(long, default_value_t = 5)]
    pub parallelism: usize,
    /// Leave attachment contents out (stubs only), as couchbackup does by default; such a
    /// file restores only into a database that already holds those attachments.
    #[arg(long)]
    pub no_attachments: bool,
}

/// One line of a log file.
#[derive(Debug, PartialEq)]
pub enum LogLine {
    /// `:t batchN [...]`: the `_bulk_get` request's `docs` for batch N.
    Todo(u64, Value),
    /// `:d batchN`: batch N is in the backup file.
    Done(u64),
    /// `:changes_complete ...`: the `:t` lines are all there.
    ChangesComplete,
}

impl LogLine {
    /// Parses a line as couchbackup does: unknown or broken lines are `None` (ignored).
    pub fn parse(line: &str) -> Option<LogLine> {
        if line.starts_with(":changes_complete") {
            return Some(LogLine::ChangesComplete);
        }
        let todo = line.starts_with(":t ");
        let rest = line.strip_prefix(":t ").or(line.strip_prefix(":d "))?;
        let rest = rest.trim_start().strip_prefix("batch")?;
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let n = rest[..digits].parse::<u64>().ok()?;
        if !todo {
            return Some(LogLine::Done(n));
        }
        match serde_json::from_str(rest[digits..].trim()) {
            Ok(docs @ Value::Array(_)) => Some(LogLine::Todo(n, docs)),
            _ => None,
        }
    }
}

/// What a log file says, without the batches' contents (those are read again, one at a
/// time, while fetching, so memory does not grow with the database).
#[derive(Default, Debug)]
pub struct LogSummary {
    /// Batch → revisions in it.
    pub todo: BTreeMap<u64, usize>,
    pub done: BTreeSet<u64>,
    pub changes_complete: bool,
}

impl LogSummary {
    pub fn read(path: &Path) -> Result<LogSummary, Error> {
        let mut summary = LogSummary::default();
        for_each_line(path, |line| {
            summary.apply(line);
            true
        })?;
        Ok(summary)
    }

    fn apply(&mut self, line: LogLine) {
        match line {
            LogLine::Todo(n, docs) => {
                self.todo.insert(n, docs.as_array().map_or(0, Vec::len));
            }
            LogLine::Done(n) => {
                self.done.insert(n);
            }
            LogLine::ChangesComplete => self.changes_complete = true,
        }
    }

    /// Whether batch `n` still has to be fetched.
    pub fn is_pending(&self, n: u64) -> bool {
        self.todo.contains_key(&n) && !self.done.contains(&n)
    }

    /// Revisions still to fetch.
    pub fn pending_revisions(&self) -> u64 {
        let pending = self.todo.iter().filter(|(n, _)| !self.done.contains(n));
        pending.map(|(_, &count)| count as u64).sum()
    }
}

/// Calls `f` with each parsed line of a log until it returns false.
fn for_each_line(path: &Path, mut f: impl FnMut(LogLine) -> bool) -> Result<(), Error> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if let Some(parsed) = LogLine::parse(&line) {
            if !f(parsed) {
                break;
            }
        }
    }
    Ok(())
}

pub fn run(args: &BackupArgs) -> Result<(), Error> {
    if args.batch == 0 || args.parallelism == 0 {
        return Err(Error::Usage(
            "--batch and --parallelism must be positive".into(),
        ));
    }
    let target = Target::parse(&args.db, &args.url, args.user.as_deref())?;
    let db = target.db()?.to_string();
    let client = &target.client;
    let db_path = format!("/{}", enc(&db));
    client.json("GET", &db_path, None)?;
    let log_path = args.log.clone().unwrap_or_else(|| {
        let mut p = args.file.clone().into_os_string();
        p.push(".log");
        PathBuf::from(p)
    });

    let mut summary = None;
    if args.resume {
        if !log_path.exists() {
            return Err(Error::Usage(format!(
                "nothing to resume: no log file {}",
                log_path.display()
            )));
        }
        let s = LogSummary::read(&log_path)?;
        if s.changes_complete && !args.file.exists() {
            return Err(Error::Usage(format!(
                "cannot resume: {} is missing (its log says part of it was written)",
                args.file.display()
            )));
        }
        if s.changes_complete {
            summary = Some(s);
        } else {
            // Nothing was fetched before the feed was read to its end: start again.
            eprintln!("the log's _changes spool was incomplete: starting the backup afresh");
        }
    }
    let mut out = match summary {
        Some(_) => {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&args.file)
                .map_err(|e| Error::io(&args.file, e))?;
            f.write_all(format!("{RESUME_MARKER}\n").as_bytes())
                .map_err(|e| Error::io(&args.file, e))?;
            f
        }
        None => {
            let mut f = File::create(&args.file).map_err(|e| Error::io(&args.file, e))?;
            let meta = json!({"name": "settee", "version": env!("CARGO_PKG_VERSION"),
                "mode": "full", "attachments": !args.no_attachments});
            writeln!(f, "{meta}").map_err(|e| Error::io(&args.file, e))?;
            spool_changes(client, &db_path, &log_path, args.batch)?;
            summary = Some(LogSummary::read(&log_path)?);
            f
        }
    };
    let summary = summary.expect("summary");
    let mut log = OpenOptions::new()
        .append(true)
        .open(&log_path)
        .map_err(|e| Error::io(&log_path, e))?;
    let total = summary.pending_revisions();
    let bar = progress::bar("backup", total, "revs");
    let fetch_path = format!(
        "{db_path}/_bulk_get?revs=true{}",
        if args.no_attachments {
            ""
        } else {
            "&attachments=true"
        }
    );
    // The log is read again, batch by batch, into a bounded queue of requests; workers
    // fetch; this thread writes each answer as a line, syncs it, then logs `:d`.
    let (jobs_tx, jobs_rx) = std::sync::mpsc::sync_channel::<(u64, Value)>(args.parallelism);
    let jobs_rx = Mutex::new(jobs_rx);
    type Fetched = Result<(u64, usize, usize, String), Error>;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Fetched>(args.parallelism);
    let mut written = 0u64;
    let mut missing = 0usize;
    let result = std::thread::scope(|s| -> Result<(), Error> {
        let (summary, log_path) = (&summary, &log_path);
        let reader = s.spawn(move || {
            for_each_line(log_path, |line| match line {
                LogLine::Todo(n, docs) if summary.is_pending(n) => jobs_tx.send((n, docs)).is_ok(),
                _ => true,
            })
        });
        for _ in 0..args.parallelism {
            let tx = tx.clone();
            let (jobs_rx, fetch_path) = (&jobs_rx, &fetch_path);
            s.spawn(move || loop {
                let job = jobs_rx.lock().expect("jobs").recv();
                let Ok((n, docs)) = job else { break };
                let fetched = fetch(client, fetch_path, &docs)
                    .map(|(line, got, errors)| (n, got, errors, line));
                let failed = fetched.is_err();
                if tx.send(fetched).is_err() || failed {
                    break;
                }
            });
        }
        drop(tx);
        let mut outcome = Ok(());
        for fetched in &rx {
            let (n, got, errors, line) = match fetched {
                Ok(f) => f,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            };
            let logged = out
                .write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.sync_data())
                .map_err(|e| Error::io(&args.file, e))
                .and_then(|()| {
                    writeln!(log, ":d batch{n}")
                        .and_then(|()| log.flush())
                        .map_err(|e| Error::io(log_path, e))
                });
            if let Err(e) = logged {
                outcome = Err(e);
                break;
            }
            written += got as u64;
            missing += errors;
            bar.inc((got + errors) as u64);
        }
        // On an error, stop the workers and the reader before the scope joins them: the
        // workers' sends fail once `rx` is gone, and the reader's once the queue it feeds
        // is replaced by a closed one.
        drop(rx);
        if let Ok(mut jobs) = jobs_rx.lock() {
            *jobs = std::sync::mpsc::sync_channel(0).1;
        }
        let read = reader.join().expect("log reader");
        outcome.and(read)
    });
    bar.finish_and_clear();
    result?;
    if missing > 0 {
        eprintln!("{missing} revisions could not be fetched (removed since the feed was read?)");
    }
    println!(
        "backed up {written} document revisions of {db} to {}{}",
        args.file.display(),
        if args.resume { " (resumed)" } else { "" }
    );
    Ok(())
}

/// Reads `_changes?style=all_docs` to its end, writing a `:t` line per `batch` leaf
/// revisions, then `:changes_complete`.
fn spool_changes(
    client: &Client,
    db_path: &str,
    log_path: &Path,
    batch: usize,
) -> Result<(), Error> {
    const PAGE: usize = 10_000;
    let mut log = File::create(log_path).map_err(|e| Error::io(log_path, e))?;
    let spinner = progress::spinner("changes");
    let mut since = Value::from(0);
    let mut buffer: Vec<Value> = Vec::new();
    let mut batches = 0u64;
    let mut seen = 0u64;
    let mut flush = |buffer: &mut Vec<Value>, all: bool| -> Result<(), Error> {
        while buffer.len() >= batch || (all && !buffer.is_empty()) {
            let docs: Vec<Value> = buffer.drain(..batch.min(buffer.len())).collect();
            writeln!(log, ":t batch{batches} {}", Value::Array(docs))
                .map_err(|e| Error::io(log_path, e))?;
            batches += 1;
        }
        Ok(())
    };
    loop {
        let since_param = match &since {
            Value::String(s) => enc(s),
            other => enc(&other.to_string()),
        };
        let page = client.json(
            "GET",
            &format!("{db_path}/_changes?style=all_docs&limit={PAGE}&since={since_param}"),
            None,
        )?;
        let results = page["results"].as_array().cloned().unwrap_or_default();
        for change in &results {
            let Some(id) = change["id"].as_str() else {
                continue;
            };
            for rev in change["changes"].as_array().into_iter().flatten() {
                if let Some(rev) = rev["rev"].as_str() {
                    buffer.push(json!({"id": id, "rev": rev}));
                    seen += 1;
                }
            }
        }
        flush(&mut buffer, false)?;
        spinner.set_message(format!("{seen} revisions to fetch"));
        since = page["last_seq"].clone();
        if results.len() < PAGE {
            break;
        }
    }
    flush(&mut buffer, true)?;
    let seq = match &since {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    writeln!(log, ":changes_complete {seq}")
        .and_then(|()| log.sync_data())
        .map_err(|e| Error::io(log_path, e))?;
    spinner.finish_and_clear();
    Ok(())
}

/// One `_bulk_get`: the backup line (a JSON array of the revisions found), how many were
/// found, and how many came back as errors.
fn fetch(client: &Client, path: &str, docs: &Value) -> Result<(String, usize, usize), Error> {
    let body = serde_json::to_vec(&json!({ "docs": docs })).expect("JSON");
    let (status, out) = client.send_idempotent("POST", path, Some(&body))?;
    client.check("POST", path, status, &out)?;
    let answer: Value = serde_json::from_slice(&out)
        .map_err(|e| Error::Format(format!("_bulk_get answered with bad JSON: {e}")))?;
    let mut found = Vec::new();
    let mut errors = 0;
    for result in answer["results"].as_array().into_iter().flatten() {
        for doc in result["docs"].as_array().into_iter().flatten() {
            match doc.get("ok") {
                Some(ok) => found.push(ok.clone()),
                None => errors += 1,
            }
        }
    }
    let n = found.len();
    Ok((Value::Array(found).to_string(), n, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_read_as_couchbackup_reads_them() {
        let mut s = LogSummary::default();
        assert_eq!(
            LogLine::parse(r#":t batch1 [{"id":"c","rev":"1-x"}]"#),
            Some(LogLine::Todo(
                1,
                serde_json::json!([{"id": "c", "rev": "1-x"}])
            ))
        );
        for line in [
            r#":t batch0 [{"id":"a"},{"id":"b"}]"#,
            r#":t batch1 [{"id":"c","rev":"1-x"}]"#,
            r#":t batch2 [{"id":"d"}"#, // cut short: ignored
            ":d batch0",
            "garbage",
            ":d batchX",
        ] {
            if let Some(l) = LogLine::parse(line) {
                s.apply(l);
            }
        }
        assert!(!s.changes_complete);
        assert!(!s.is_pending(0) && s.is_pending(1) && !s.is_pending(2));
        assert_eq!(s.pending_revisions(), 1);
        s.apply(LogLine::parse(":changes_complete 7-g1AAAA").unwrap());
        assert!(s.changes_complete);
        s.apply(LogLine::parse(":d batch1").unwrap());
        assert_eq!(s.pending_revisions(), 0);
    }
}
