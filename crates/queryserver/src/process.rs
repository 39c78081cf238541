//! One query-server process: a child speaking CouchDB's line protocol over its stdin and
//! stdout (one JSON value per line each way).
//!
//! A reader thread per process drains stdout into a channel (the complete lines of each
//! read as one message: one wake-up per pipe read, not per answer), so the child never
//! blocks on a full stdout pipe and every answer can be awaited with a deadline
//! (`os_process_timeout`). A process that timed out, exited, answered garbage or said
//! `["fatal", ..]` is *broken*: it is killed and reaped at once and never prompted again.

use crate::{Command, Error, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Rows one map function emitted for one document.
pub type Emits = Vec<(Value, Value)>;

pub struct Process {
    command: Command,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<Vec<u8>>>,
    /// Lines received and not read yet.
    pending: std::collections::VecDeque<Vec<u8>>,
    timeout: Duration,
    broken: bool,
    /// The setup ([`crate::Setup::key`]) last loaded, if it is still in effect.
    pub(crate) loaded: Option<u64>,
    /// Design documents taught with `["ddoc", "new", ..]`: (id, rev).
    pub(crate) ddocs: Vec<(String, String)>,
    /// When the process last went back to its pool.
    pub(crate) returned: Instant,
}

/// One answer line, classified as CouchDB's `couch_os_process:readjson` does: by the
/// first element of an array (`log`, `error`, `fatal`), anything else is the answer.
enum Line {
    Log(String),
    Error(String, Value),
    Fatal(String, Value),
    Answer(Vec<u8>),
}

impl Process {
    /// Starts `command` with piped stdin/stdout (stderr is inherited, as CouchDB's are
    /// the server's).
    pub fn spawn(command: &Command, timeout: Duration) -> Result<Process> {
        let mut child = std::process::Command::new(&command.program)
            .args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::Spawn {
                command: command.to_string(),
                reason: e.to_string(),
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::Builder::new()
            .name("qs-reader".into())
            .spawn(move || {
                let mut r = BufReader::with_capacity(64 << 10, stdout);
                let mut partial = Vec::new();
                loop {
                    let buf = match r.fill_buf() {
                        Ok(b) if !b.is_empty() => b,
                        _ => return,
                    };
                    let n = buf.len();
                    let mut lines = Vec::new();
                    let mut rest = buf;
                    while let Some(i) = rest.iter().position(|&b| b == b'\n') {
                        partial.extend_from_slice(&rest[..=i]);
                        lines.push(std::mem::take(&mut partial));
                        rest = &rest[i + 1..];
                    }
                    partial.extend_from_slice(rest);
                    r.consume(n);
                    if !lines.is_empty() && tx.send(lines).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::Spawn {
                command: command.to_string(),
                reason: e.to_string(),
            })?;
        tracing::debug!(command = %command, pid = child.id(), "query server started");
        Ok(Process {
            command: command.clone(),
            child,
            stdin,
            lines,
            pending: Default::default(),
            timeout,
            broken: false,
            loaded: None,
            ddocs: Vec::new(),
            returned: Instant::now(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process failed and must not be used again.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends one command (JSON text without the newline) and returns its answer.
    pub fn prompt_raw(&mut self, command: &[u8]) -> Result<Value> {
        self.write_line(command)?;
        self.read_answer()
    }

    /// Sends one command and returns its answer.
    pub fn prompt(&mut self, command: &Value) -> Result<Value> {
        let line = serde_json::to_vec(command).expect("json");
        self.prompt_raw(&line)
    }

    /// Sends a command whose answer must be `true` (`reset`, `add_fun`, `add_lib`,
    /// `ddoc new`).
    pub fn prompt_true(&mut self, command: &[u8]) -> Result<()> {
        match self.prompt_raw(command)? {
            Value::Bool(true) => Ok(()),
            other => Err(self.garbage(format!("expected true, got {other}"))),
        }
    }

    /// Maps documents: writes one `["map_doc", doc]` line per document (the document's
    /// text spliced in as it is) from a writer thread while this thread reads the answers,
    /// so neither pipe can fill up and stall the other side.
    pub fn map_docs(&mut self, docs: &[&[u8]]) -> Result<Vec<Vec<Emits>>> {
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let stdin = self.stdin.take().ok_or(Error::Exited(None))?;
        let (answers, stdin) = std::thread::scope(|s| {
            let writer = s.spawn(move || -> (std::io::Result<()>, ChildStdin) {
                let mut stdin = stdin;
                let written = write_map_docs(&mut stdin, docs);
                (written, stdin)
            });
            let mut answers = Vec::with_capacity(docs.len());
            let mut failure = None;
            for _ in docs {
                match self.read_typed::<Vec<Emits>>() {
                    Ok(a) => answers.push(a),
                    Err(e) => {
                        // The stream is out of step now: kill the process so that the
                        // writer, if blocked on a full pipe, gets EPIPE and returns.
                        self.break_off();
                        failure = Some(e);
                        break;
                    }
                }
            }
            let (written, stdin) = writer.join().expect("map writer panicked");
            match (failure, written) {
                (Some(e), _) => (Err(e), stdin),
                (None, Err(e)) => {
                    self.break_off();
                    (Err(Error::Io(e.to_string())), stdin)
                }
                (None, Ok(())) => (Ok(answers), stdin),
            }
        });
        self.stdin = Some(stdin);
        answers
    }

    /// `["reduce", sources, [[[key, id], value], ..]]`: one result per source.
    pub fn reduce(
        &mut self,
        sources: &[&str],
        kvs: &[(&Value, &str, &Value)],
    ) -> Result<Vec<Value>> {
        let kvs: Vec<Value> = kvs
            .iter()
            .map(|(k, id, v)| serde_json::json!([[k, id], v]))
            .collect();
        self.reduction(serde_json::json!(["reduce", sources, kvs]), sources.len())
    }

    /// `["rereduce", sources, values]`: one result per source.
    pub fn rereduce(&mut self, sources: &[&str], values: &[&Value]) -> Result<Vec<Value>> {
        self.reduction(
            serde_json::json!(["rereduce", sources, values]),
            sources.len(),
        )
    }

    /// A reduction answer is `[true, [result per source]]`.
    fn reduction(&mut self, command: Value, n: usize) -> Result<Vec<Value>> {
        match self.prompt(&command)? {
            Value::Array(mut a) if a.len() == 2 && a[0] == Value::Bool(true) => match a.pop() {
                Some(Value::Array(results)) if results.len() == n => Ok(results),
                other => Err(self.garbage(format!("reduce results {other:?}"))),
            },
            other => Err(self.garbage(format!("reduce answer {other}"))),
        }
    }

    /// Reads one answer, deserialized as `T`.
    pub fn read_typed<T: DeserializeOwned>(&mut self) -> Result<T> {
        let line = self.read_command_line()?;
        serde_json::from_slice(&line).map_err(|e| {
            self.garbage(format!(
                "{e} in {}",
                String::from_utf8_lossy(&line[..line.len().min(200)])
            ))
        })
    }

    /// Reads one answer as a JSON value.
    pub fn read_answer(&mut self) -> Result<Value> {
        self.read_typed()
    }

    pub fn write_line(&mut self, line: &[u8]) -> Result<()> {
        if self.broken {
            return Err(Error::Exited(None));
        }
        let stdin = self.stdin.as_mut().ok_or(Error::Exited(None))?;
        let mut written = stdin.write_all(line);
        if written.is_ok() {
            written = stdin.write_all(b"\n").and_then(|()| stdin.flush());
        }
        written.map_err(|_| self.exited())
    }

    /// The next line that is an answer: logs are logged, errors returned.
    fn read_command_line(&mut self) -> Result<Vec<u8>> {
        loop {
            let raw = self.read_line()?;
            match classify(raw) {
                Ok(Line::Log(msg)) => {
                    tracing::info!(target: "settee_queryserver", pid = self.pid(), "{msg}")
                }
                Ok(Line::Answer(line)) => return Ok(line),
                Ok(Line::Error(error, reason)) => {
                    return Err(Error::Server {
                        error,
                        reason: reason_text(reason),
                    })
                }
                Ok(Line::Fatal(error, reason)) => {
                    let reason = reason_text(reason);
                    tracing::info!(pid = self.pid(), %error, %reason, "query server fatal error");
                    self.break_off();
                    return Err(Error::Fatal { error, reason });
                }
                Err(why) => return Err(self.garbage(why)),
            }
        }
    }

    fn read_line(&mut self) -> Result<Vec<u8>> {
        if self.broken {
            return Err(Error::Exited(None));
        }
        if let Some(line) = self.pending.pop_front() {
            return Ok(line);
        }
        match self.lines.recv_timeout(self.timeout) {
            Ok(lines) => {
                self.pending.extend(lines);
                Ok(self.pending.pop_front().expect("a message holds lines"))
            }
            Err(RecvTimeoutError::Timeout) => {
                tracing::error!(pid = self.pid(), command = %self.command,
                    timeout = ?self.timeout, "query server timed out; killed");
                self.break_off();
                Err(Error::Timeout)
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.exited()),
        }
    }

    /// The process closed its stdout (or stdin): it is reaped and its status reported.
    fn exited(&mut self) -> Error {
        self.broken = true;
        self.stdin = None;
        // Give a dying process a moment (up to 1 s) to be reaped with its real status.
        let mut status = None;
        for _ in 0..500 {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if status.is_none() {
            self.break_off();
            status = self.child.try_wait().ok().flatten();
        }
        let code = status.and_then(|s| s.code());
        tracing::error!(pid = self.pid(), command = %self.command, ?status, "query server exited");
        Error::Exited(code)
    }

    fn garbage(&mut self, why: String) -> Error {
        tracing::error!(pid = self.pid(), command = %self.command, %why,
            "query server answered garbage; killed");
        self.break_off();
        Error::Garbage(why)
    }

    /// Kills and reaps the process; it is broken from now on.
    pub(crate) fn break_off(&mut self) {
        self.broken = true;
        self.loaded = None;
        self.ddocs.clear();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Closing stdin first lets a well-behaved server exit on its own; it is killed
        // anyway, since nothing waits for it.
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_map_docs(out: &mut ChildStdin, docs: &[&[u8]]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(64 << 10);
    for doc in docs {
        buf.extend_from_slice(b"[\"map_doc\",");
        buf.extend_from_slice(doc);
        buf.extend_from_slice(b"]\n");
        if buf.len() >= 60 << 10 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)?;
    out.flush()
}

/// CouchDB prints a non-string reason as its JSON.
fn reason_text(reason: Value) -> String {
    match reason {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// Classifies one line by its first array element, parsing it whole only when it is a
/// command (`log`, `error`, `fatal`); an answer is returned as text.
fn classify(mut line: Vec<u8>) -> std::result::Result<Line, String> {
    while line.last().is_some_and(|b| b.is_ascii_whitespace()) {
        line.pop();
    }
    if line.is_empty() {
        return Err("an empty line".into());
    }
    let rest = trim_start(&line);
    let is_command = rest.strip_prefix(b"[").is_some_and(|r| {
        let r = trim_start(r);
        [&b"\"log\""[..], b"\"error\"", b"\"fatal\""]
            .iter()
            .any(|c| r.starts_with(c))
    });
    if !is_command {
        return Ok(Line::Answer(line));
    }
    let v: Value = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
    let Value::Array(mut parts) = v else {
        unreachable!("starts with [")
    };
    let name = parts[0].as_str().unwrap_or_default().to_owned();
    match (name.as_str(), parts.len()) {
        ("log", 2) => Ok(Line::Log(reason_text(parts.pop().expect("2")))),
        ("error", 3) | ("fatal", 3) => {
            let reason = parts.pop().expect("3");
            let id = match parts.pop().expect("2") {
                Value::String(s) => s,
                other => other.to_string(),
            };
            Ok(if name == "error" {
                Line::Error(id, reason)
            } else {
                Line::Fatal(id, reason)
            })
        }
        // `["error", ...]` of another length is an answer (a list emitting "error").
        _ => Ok(Line::Answer(line)),
    }
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cls(s: &str) -> std::result::Result<Line, String> {
        classify(s.as_bytes().to_vec())
    }

    #[test]
    fn lines_are_classified_by_their_first_element() {
        assert!(matches!(cls("[\"log\", \"hi\"]\n"), Ok(Line::Log(m)) if m == "hi"));
        assert!(
            matches!(cls("[\"error\",\"x\",\"y\"]"), Ok(Line::Error(e, r)) if e == "x" && r == "y")
        );
        assert!(
            matches!(cls(" [ \"fatal\",\"x\",{\"a\":1}]"), Ok(Line::Fatal(_, r)) if r["a"] == 1)
        );
        assert!(matches!(cls("[[[\"log\",1]]]"), Ok(Line::Answer(_))));
        assert!(matches!(cls("true\n"), Ok(Line::Answer(l)) if l == b"true"));
        assert!(matches!(cls("[\"error\"]"), Ok(Line::Answer(_))));
        assert!(cls("[\"log\", oops").is_err());
        assert!(cls("\n").is_err());
    }
}
