//! `settee restore`: a backup file (written by `settee backup` or couchbackup) into a
//! database, one `_bulk_docs` per line, with `new_edits=false` when the documents carry
//! their revisions so that ids, revision histories, conflicts and deletions come back as
//! they were. Lines are read as couchbackup's restore reads them: a metadata first line,
//! resume markers, and (in files from before couchbackup wrote metadata) broken lines left
//! by interrupted backups are skipped.

use crate::backup::RESUME_MARKER;
use crate::client::{enc, Target};
use crate::{progress, Error};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Mutex;

#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The backup file.
    pub file: PathBuf,
    /// The database (created if missing): a URL (http://admin:secret@host:5984/db) or a name
    /// on --url.
    pub db: String,
    /// The server for a database given by name (credentials may be in it).
    #[arg(long, env = "COUCH_URL", default_value = "http://127.0.0.1:5984")]
    pub url: String,
    /// Credentials as NAME:PASSWORD (instead of those in the URL).
    #[arg(long, env = "SETTEE_USER")]
    pub user: Option<String>,
    /// Concurrent `_bulk_docs` requests.
    #[arg(long, default_value_t = 5)]
    pub parallelism: usize,
}

/// What one line of a backup file is.
#[derive(Debug, PartialEq)]
pub enum Line {
    Docs(Vec<Value>),
    Skip,
}

/// The line reader's state: whether a metadata line said which version wrote the file.
#[derive(Default)]
pub struct Reader {
    has_metadata: bool,
    line_number: u64,
}

impl Reader {
    pub fn line(&mut self, text: &str) -> Result<Line, Error> {
        self.line_number += 1;
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() || text == RESUME_MARKER {
            return Ok(Line::Skip);
        }
        let parsed: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            // A line an interruption cut short, closed by the resume marker appended after it.
            Err(_) if text.ends_with(RESUME_MARKER) => return Ok(Line::Skip),
            // Files without metadata predate the marker: any broken line may be a resume point.
            Err(_) if !self.has_metadata => return Ok(Line::Skip),
            Err(e) => {
                return Err(Error::Format(format!(
                    "line {} of the backup file is not JSON: {e}",
                    self.line_number
                )))
            }
        };
        match parsed {
            Value::Array(docs) => Ok(Line::Docs(docs)),
            Value::Object(o) if self.line_number == 1 && o.contains_key("mode") => {
                self.has_metadata = true;
                Ok(Line::Skip)
            }
            Value::Object(o) if o.contains_key("marker") => Ok(Line::Skip),
            _ => Err(Error::Format(format!(
                "line {} of the backup file is not an array of documents",
                self.line_number
            ))),
        }
    }
}

pub fn run(args: &RestoreArgs) -> Result<(), Error> {
    let target = Target::parse(&args.db, &args.url, args.user.as_deref())?;
    let db = target.db()?.to_string();
    let client = &target.client;
    let file = File::open(&args.file).map_err(|e| Error::io(&args.file, e))?;
    let size = file.metadata().map_err(|e| Error::io(&args.file, e))?.len();
    if client.ensure_db(&db)? {
        eprintln!("created database {db}");
    }
    let path = format!("/{}/_bulk_docs", enc(&db));
    let bar = progress::bar("restore", size, "bytes");
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Value>>(args.parallelism.max(1));
    let rx = Mutex::new(rx);
    let restored = Mutex::new(0u64);
    let result = std::thread::scope(|s| -> Result<(), Error> {
        let workers: Vec<_> = (0..args.parallelism.max(1))
            .map(|_| {
                s.spawn(|| -> Result<(), Error> {
                    loop {
                        let Ok(docs) = rx.lock().expect("queue").recv() else {
                            return Ok(());
                        };
                        let n = docs.len() as u64;
                        write_batch(client, &path, docs)?;
                        *restored.lock().expect("count") += n;
                    }
                })
            })
            .collect();
        let mut reader = Reader::default();
        let mut input = BufReader::new(file);
        let mut text = String::new();
        let read: Result<(), Error> = loop {
            text.clear();
            match input.read_line(&mut text) {
                Ok(0) => break Ok(()),
                Ok(n) => bar.inc(n as u64),
                Err(e) => break Err(Error::io(&args.file, e)),
            }
            match reader.line(&text) {
                Ok(Line::Docs(docs)) if !docs.is_empty() => {
                    if tx.send(docs).is_err() {
                        break Ok(()); // every worker stopped: its error is reported below
                    }
                }
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        drop(tx);
        let mut first_error = read.err();
        for w in workers {
            if let Err(e) = w.join().expect("restore worker") {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    });
    bar.finish_and_clear();
    result?;
    println!(
        "restored {} document revisions into {db}",
        restored.into_inner().expect("count")
    );
    Ok(())
}

/// One `_bulk_docs`; with `new_edits=false` when the documents carry `_rev` (as
/// couchbackup decides, by the first document). Any per-document error fails the restore.
fn write_batch(client: &crate::Client, path: &str, mut docs: Vec<Value>) -> Result<(), Error> {
    docs.iter_mut().for_each(couchbackup_attachments);
    let replicated = docs.first().is_some_and(|d| d.get("_rev").is_some());
    let body = if replicated {
        json!({"docs": docs, "new_edits": false})
    } else {
        json!({ "docs": docs })
    };
    let body = serde_json::to_vec(&body).expect("JSON");
    let (status, out) = client.send_idempotent("POST", path, Some(&body))?;
    client.check("POST", path, status, &out)?;
    let answer: Value = serde_json::from_slice(&out)
        .map_err(|e| Error::Format(format!("_bulk_docs answered with bad JSON: {e}")))?;
    let failed: Vec<&Value> = answer
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r.get("error").is_some())
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(Error::Format(format!(
            "{} documents were not restored, e.g. {first}",
            failed.len()
        ))),
    }
}

/// couchbackup's `--attachments` files name an attachment's type `contentType` (its SDK's
/// spelling); CouchDB's is `content_type`.
fn couchbackup_attachments(doc: &mut Value) {
    let Some(atts) = doc.get_mut("_attachments").and_then(Value::as_object_mut) else {
        return;
    };
    for att in atts.values_mut().filter_map(Value::as_object_mut) {
        if !att.contains_key("content_type") {
            if let Some(t) = att.remove("contentType") {
                att.insert("content_type".into(), t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_as_couchbackup_reads_them() {
        let mut r = Reader::default();
        let meta = r#"{"name":"couchbackup","version":"2.10.0","mode":"full"}"#;
        assert_eq!(r.line(meta).unwrap(), Line::Skip);
        assert_eq!(
            r.line("[{\"_id\":\"a\",\"_rev\":\"1-x\"}]\n").unwrap(),
            Line::Docs(vec![json!({"_id": "a", "_rev": "1-x"})])
        );
        assert_eq!(r.line("\n").unwrap(), Line::Skip);
        assert_eq!(r.line(RESUME_MARKER).unwrap(), Line::Skip);
        let cut = format!("[{{\"_id\":\"b\",\"_re{RESUME_MARKER}");
        assert_eq!(r.line(&cut).unwrap(), Line::Skip);
        assert!(
            r.line("[{\"_id\":").is_err(),
            "broken line in a full backup"
        );
        assert!(r.line(meta).is_err(), "metadata after line 1");
        assert!(r.line("{\"foo\":1}").is_err());

        let mut doc = json!({"_id": "a", "_attachments": {"x": {"contentType": "text/plain", "data": ""},
            "y": {"content_type": "image/png", "data": ""}}});
        couchbackup_attachments(&mut doc);
        assert_eq!(
            doc["_attachments"]["x"],
            json!({"data": "", "content_type": "text/plain"})
        );
        assert_eq!(doc["_attachments"]["y"]["content_type"], "image/png");

        // Without metadata (couchbackup before 2.10) broken lines are skipped.
        let mut old = Reader::default();
        assert_eq!(old.line("[{\"_id\":").unwrap(), Line::Skip);
        assert_eq!(old.line("[]").unwrap(), Line::Docs(vec![]));
    }
}
