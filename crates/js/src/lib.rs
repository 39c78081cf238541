//! CouchDB's JavaScript view-server environment, embedded in-process with QuickJS.
//!
//! CouchDB runs design-document functions in an external `couchjs` process that speaks a
//! line protocol. Settee runs the same functions in-process: a [`ViewRuntime`] owns one
//! QuickJS runtime and context holding the compiled map and reduce functions of one design
//! document's views, and is driven by plain Rust calls ([`ViewRuntime::map_doc`],
//! [`ViewRuntime::reduce`], [`ViewRuntime::rereduce`]). A [`Validator`] does the same for
//! the `validate_doc_update` functions of a database's design documents
//! ([`Validator::validate`]), mapping what they throw to CouchDB's verdicts ([`Rejection`]),
//! and a [`FilterFn`] for one filter function ([`FilterFn::filter`]), whose errors are the
//! same `{error, reason}` terms. A [`Renderer`] runs a design document's show, list and
//! update functions ([`Renderer::show`], [`Renderer::list`], [`Renderer::update`]) in
//! CouchDB's render environment, answering with the query-server protocol's shapes.
//!
//! # The environment
//!
//! Function sources use CouchDB's bare expression form (`function(doc) { ... }`, optionally
//! named, with comments or a trailing `;`). The global scope offers what CouchDB's sandbox
//! offers to views: `emit(key, value)`, `log(message)`, `sum(values)`, `isArray(x)`,
//! `toJSON(x)` (= `JSON.stringify`), `JSON`, and `require(path)` for CommonJS modules stored
//! under the design document's `views.lib` (`require('views/lib/foo')`; `./` and `../`
//! inside modules resolve against the module's own path; modules are cached per runtime).
//! The intrinsics are CouchDB's (base objects, `eval`, `JSON`, `RegExp`, `Map`/`Set`,
//! `Date`) plus `Promise`, without which QuickJS leaks — and then aborts on — `async`
//! code. Promise jobs run before a call returns. There is no module loader, no `std`/`os`,
//! no file system, network or timers. All views of a runtime share one global scope.
//!
//! Validate functions see the same globals, with `require` resolving against the whole
//! design document (`require('lib/x')`) and `this` bound to the design document, as in
//! CouchDB; all functions of a [`Validator`] share one global scope, but each design
//! document has its own `require` and module cache. Their arguments are plain, mutable
//! objects (CouchDB does not freeze them), built afresh for every function. Filter
//! functions see the same: `this` and `require`'s root are the design document, and the
//! documents and request object they get are plain objects.
//!
//! Documents are deep-frozen before the map functions see them, as CouchDB does
//! (`Couch.recursivelySeal` → `Object.freeze`): one document object is shared by every
//! view, and a map function's writes to it are silently ignored (or throw a `TypeError` in
//! strict-mode code or from mutating methods such as `push`), so no view can affect another.
//! The document's top-level members are built only when first read (see `lazy.rs`); the
//! text given to [`ViewRuntime::map_doc`] must be a stored, already validated document: its
//! outline is checked at once, a member's value when it is read.
//! Emitted keys and values are converted with `JSON.stringify` semantics after the map
//! function returns, as CouchDB does; integral numbers come out as JSON integers.
//!
//! # Limits
//!
//! Every `map_doc`, `reduce` and `rereduce` call, every validate function, every `filter`
//! call (and construction, which runs the sources' top-level code) gets a deadline of now +
//! [`Limits::timeout`] and a memory limit of
//! [`Limits::memory_limit`], both enforced from QuickJS's interrupt handler, which raises an
//! exception user code cannot catch ([`JsError::Timeout`], [`JsError::OutOfMemory`]). The
//! memory limit counts the runtime's heap and the call's converted output; single
//! allocations that would take the heap past twice the limit are refused outright. The
//! JavaScript stack is capped at [`JS_STACK_LIMIT`], so runaway recursion throws a
//! `RangeError` that fails only that map call, and nesting is capped at [`MAX_NESTING`].
//! After `Timeout`, `OutOfMemory` or `Internal` the caller should drop the runtime and build
//! a new one; the process itself is never at risk.
//!
//! # Threading contract
//!
//! A [`ViewRuntime`] (like a [`Validator`] or a [`FilterFn`]) is neither `Send` nor `Sync`: create it on the thread that uses it and
//! keep one per worker thread (runtimes share nothing, cost ~0.5 ms and ~100 KB to create).
//! The calling thread needs at least 2 MiB of stack (Rust's default for spawned threads):
//! up to [`JS_STACK_LIMIT`] of it for JavaScript, the rest for the conversions.

mod coffee;
mod compile;
mod doc;
mod env;
mod error;
mod filter;
mod from_json;
mod guard;
mod language;
mod lazy;
mod monitor;
mod render;
mod runtime;
mod script;
mod to_json;
mod validate;

use std::time::Duration;

pub use error::JsError;
pub use filter::{FilterFn, FilterSource};
pub use language::{lookup_name, Dialect};
pub use render::{InfoSource, ListIo, RenderKind, RenderSource, Renderer};
pub use runtime::{MapResult, ViewRuntime};
pub use validate::{Rejection, ValidateSource, Validator};

/// Most bytes of native stack that JavaScript code may use before it gets a `RangeError`.
pub const JS_STACK_LIMIT: usize = 1024 * 1024;

/// Deepest nesting of arrays and objects accepted in documents and produced by conversions.
pub const MAX_NESTING: usize = 512;

/// Resource limits of one [`ViewRuntime`], [`Validator`] or [`FilterFn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Wall-clock budget of one call into JavaScript.
    pub timeout: Duration,
    /// Bytes the runtime's heap, plus one call's converted output, may use (0 = no limit).
    pub memory_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(5),
            memory_limit: 64 * 1024 * 1024,
        }
    }
}

/// The sources of one view of a design document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewSource {
    /// The view's name, used in error messages.
    pub name: String,
    /// The map function's source.
    pub map: String,
    /// The reduce function's source, only when it is JavaScript (built-ins such as `_sum`
    /// are the caller's business).
    pub reduce: Option<String>,
}

/// Everything a [`ViewRuntime`] compiles: the views of one design document.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ViewFns {
    /// The views, in the order results are reported.
    pub views: Vec<ViewSource>,
    /// The design document's `views.lib` object, for `require()`.
    pub lib: Option<serde_json::Value>,
    /// The language of the map and reduce sources (`views.lib` modules are JavaScript,
    /// as in CouchDB).
    pub dialect: Dialect,
}
