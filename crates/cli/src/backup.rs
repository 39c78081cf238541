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
use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// Leave attachment contents out (stubs only), as couchbackup does by default.
    #[arg(long)]
    pub no_attachments: bool,
}

/// What a log file says: the batches to fetch, those done, and whether `_changes` was read
/// to its end.
#[derive(Default, Debug)]
pub struct LogSummary {
    pub todo: BTreeMap<u64, Value>,
    pub done: BTreeSet<u64>,
    pub changes_complete: bool,
}

impl LogSummary {
    /// Reads a log as couchbackup does: unknown or broken lines are ignored.
    pub fn read(path: &Path) -> Result<LogSummary, Error> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut summary = LogSummary::default();
        for line in BufReader::new(file).lines() {
            let line = line.map_err(|e| Error::io(path, e))?;
            summary.apply(&line);
        }
        Ok(summary)
    }

    fn apply(&mut self, line: &str) {
        if line.starts_with(":changes_complete") {
            self.changes_complete = true;
            return;
        }
        let (command, rest) = match line.strip_prefix(":t ").or(line.strip_prefix(":d ")) {
            Some(rest) => (&line[1..2], rest.trim_start()),
            None => return,
        };
        let Some(rest) = rest.strip_prefix("batch") else {
            return;
        };
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let Ok(n) = rest[..digits].parse::<u64>() else {
            return;
        };
        match command {
            "d" => {
                self.done.insert(n);
            }
            _ => {
                if let Ok(docs @ Value::Array(_)) = serde_json::from_str(rest[digits..].trim()) {
                    self.todo.insert(n, docs);
                }
            }
        }
    }

    /// Batches to fetch, in order.
    pub fn pending(&self) -> Vec<(u64, &Value)> {
        self.todo
            .iter()
            .filter(|(n, _)| !self.done.contains(n))
            .map(|(n, d)| (*n, d))
            .collect()
    }
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
    let pending = summary.pending();
    let total: u64 = pending
        .iter()
        .map(|(_, d)| d.as_array().map_or(0, Vec::len) as u64)
        .sum();
    let bar = progress::bar("backup", total, "revs");
    let fetch_path = format!(
        "{db_path}/_bulk_get?revs=true{}",
        if args.no_attachments {
            ""
        } else {
            "&attachments=true"
        }
    );
    let next = AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(u64, usize, usize, String), Error>>(
        args.parallelism,
    );
    let mut written = 0u64;
    let mut missing = 0usize;
    let result = std::thread::scope(|s| -> Result<(), Error> {
        for _ in 0..args.parallelism {
            let tx = tx.clone();
            let (pending, next, fetch_path) = (&pending, &next, &fetch_path);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((n, docs)) = pending.get(i) else {
                    break;
                };
                let fetched = fetch(client, fetch_path, docs)
                    .map(|(line, got, errors)| (*n, got, errors, line));
                let failed = fetched.is_err();
                if tx.send(fetched).is_err() || failed {
                    break;
                }
            });
        }
        drop(tx);
        for fetched in rx {
            let (n, got, errors, line) = fetched?;
            out.write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.sync_data())
                .map_err(|e| Error::io(&args.file, e))?;
            writeln!(log, ":d batch{n}")
                .and_then(|()| log.flush())
                .map_err(|e| Error::io(&log_path, e))?;
            written += got as u64;
            missing += errors;
            bar.inc((got + errors) as u64);
        }
        Ok(())
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
    let (status, out) = client.send("POST", path, Some(&body))?;
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
    fn log_summary_reads_couchbackups_lines() {
        let mut s = LogSummary::default();
        for line in [
            r#":t batch0 [{"id":"a"},{"id":"b"}]"#,
            r#":t batch1 [{"id":"c","rev":"1-x"}]"#,
            r#":t batch2 [{"id":"d"}"#, // cut short: ignored
            ":d batch0",
            "garbage",
        ] {
            s.apply(line);
        }
        assert!(!s.changes_complete);
        let pending = s.pending();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].0, 1);
        assert_eq!(pending[0].1[0]["rev"], "1-x");
        s.apply(":changes_complete 7-g1AAAA");
        assert!(s.changes_complete);
        s.apply(":d batch1");
        assert!(s.pending().is_empty());
    }
}
