//! Design-document functions through `["ddoc", id, [kind, name..], args]`. The answers
//! are returned as the protocol shapes them (`["resp", ..]`, `[true, [..]]`, `1` or
//! `{"forbidden": ..}`, ...), the same shapes the in-process JavaScript renders, so one
//! caller handles both.

use crate::{Lease, QueryServers, Result};
use serde_json::{json, Value};

/// A design document as taught to servers: id, revision (a new revision is taught anew)
/// and body (the whole document JSON).
#[derive(Clone, Copy, Debug)]
pub struct DdocRef<'a> {
    pub id: &'a str,
    pub rev: &'a str,
    pub body: &'a Value,
}

impl QueryServers {
    /// One `ddoc` call: `path` is `["shows", name]`, `["validate_doc_update"]`, ...
    pub fn ddoc_call(
        &self,
        language: &str,
        ddoc: &DdocRef<'_>,
        path: &[&str],
        args: Value,
    ) -> Result<Value> {
        let mut lease = self.checkout_ddoc(language, ddoc)?;
        lease.prompt(&json!(["ddoc", ddoc.id, path, args]))
    }

    /// `["resp", {..}]` for the show `name` of `doc` (`null` when there is none).
    pub fn show(
        &self,
        lang: &str,
        d: &DdocRef<'_>,
        name: &str,
        doc: Value,
        req: Value,
    ) -> Result<Value> {
        self.ddoc_call(lang, d, &["shows", name], json!([doc, req]))
    }

    /// `["up", doc or null, {..}]` for the update handler `name`.
    pub fn update(
        &self,
        lang: &str,
        d: &DdocRef<'_>,
        name: &str,
        doc: Value,
        req: Value,
    ) -> Result<Value> {
        self.ddoc_call(lang, d, &["updates", name], json!([doc, req]))
    }

    /// `[true, [pass, ..]]`: whether each of `docs` passes the filter `name`.
    pub fn filter(
        &self,
        lang: &str,
        d: &DdocRef<'_>,
        name: &str,
        docs: &[Value],
        req: Value,
    ) -> Result<Value> {
        self.ddoc_call(lang, d, &["filters", name], json!([docs, req]))
    }

    /// `[true, [pass, ..]]`: whether view `name`'s map emits for each of `docs`
    /// (`_changes?filter=_view`).
    pub fn view_filter(
        &self,
        lang: &str,
        d: &DdocRef<'_>,
        name: &str,
        docs: &[Value],
    ) -> Result<Value> {
        self.ddoc_call(lang, d, &["views", name, "map"], json!([docs]))
    }

    /// `1` when the update passes, else the thrown `{"forbidden": ..}` or
    /// `{"unauthorized": ..}` (as an error, [`crate::Error::Server`]).
    pub fn validate(
        &self,
        lang: &str,
        d: &DdocRef<'_>,
        new: Value,
        old: Value,
        user_ctx: Value,
        sec_obj: Value,
    ) -> Result<Value> {
        self.ddoc_call(
            lang,
            d,
            &["validate_doc_update"],
            json!([new, old, user_ctx, sec_obj]),
        )
    }

    /// The rewritten request (`["ok", {..}]`) for `req`.
    pub fn rewrite(&self, lang: &str, d: &DdocRef<'_>, req: Value) -> Result<Value> {
        self.ddoc_call(lang, d, &["rewrites"], json!([req]))
    }

    /// Starts list `name`: the answer is `["start", chunks, headers]`; rows follow through
    /// the returned session.
    pub fn list(
        &self,
        lang: &str,
        d: &DdocRef<'_>,
        name: &str,
        head: Value,
        req: Value,
    ) -> Result<(Value, ListSession)> {
        let mut lease = self.checkout_ddoc(lang, d)?;
        let start = lease.prompt(&json!(["ddoc", d.id, ["lists", name], [head, req]]))?;
        Ok((
            start,
            ListSession {
                lease,
                running: true,
            },
        ))
    }
}

/// A list function running over a view's rows; the process is held until it ends. A
/// session dropped while its list still waits for rows (the caller gave up) kills the
/// process, which would otherwise read the next command as a row.
pub struct ListSession {
    lease: Lease,
    /// The server is inside the list function, waiting for `list_row` or `list_end`.
    running: bool,
}

impl ListSession {
    /// `["chunks", [..]]`, or `["end", [..]]` when the list stops early (the session is
    /// then over: drop it rather than calling [`ListSession::end`]).
    pub fn row(&mut self, row: &Value) -> Result<Value> {
        let answer = self.exchange(&json!(["list_row", row]))?;
        if answer.get(0).and_then(Value::as_str) == Some("end") {
            self.running = false;
        }
        Ok(answer)
    }

    /// `["end", [..]]`.
    pub fn end(mut self) -> Result<Value> {
        let answer = self.exchange(&json!(["list_end"]));
        self.running = false;
        answer
    }

    fn exchange(&mut self, command: &Value) -> Result<Value> {
        let answer = self.lease.prompt(command);
        // An error answer means the server left the list and waits for commands again.
        if answer.as_ref().is_err_and(crate::Error::process_survives) {
            self.running = false;
        }
        answer
    }
}

impl Drop for ListSession {
    fn drop(&mut self) {
        if self.running {
            self.lease.break_off();
        }
    }
}
