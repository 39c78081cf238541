//! JavaScript map functions run without a JavaScript engine.
//!
//! Most map functions are a few lines: read some members, test them, build a key, `emit`.
//! Running them in QuickJS costs more in building the document as JavaScript values, and
//! in calls across the engine's boundary, than in the function itself. [`MapFn::compile`]
//! recognises such functions (a subset of JavaScript described in `parse.rs`) and
//! [`MapFn::map`] runs one over the document's JSON text with JavaScript's semantics,
//! reading the members it needs in place.
//!
//! The contract is exactness, not coverage: a source outside the subset is refused
//! (`None`), and a document on which the function would do anything the evaluator does not
//! model (throw, compare objects by identity, convert one to a string, read a prototype's
//! member, map case beyond ASCII, …) returns [`Fallback`]; the caller then runs the engine
//! for that document. Where the answer is given, it is the engine's: the same rows, keys
//! and values, in the same order, as `crates/views/tests/native_js.rs` checks against
//! QuickJS on generated documents and functions.
//!
//! Pure: no I/O, no engine; `Send + Sync`.

mod eval;
mod lex;
pub mod number;
mod parse;

use serde_json::Value;

/// The (key, value) rows one map call emitted, in emit order.
pub type Rows = Vec<(Value, Value)>;

/// This document needs the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback;

/// A map function in the subset.
#[derive(Debug, Clone)]
pub struct MapFn {
    f: parse::Function,
    reads: Option<Vec<String>>,
}

impl MapFn {
    /// The function of `source` (CouchDB's `function(doc) { ... }` form), if it is in the
    /// subset.
    pub fn compile(source: &str) -> Option<MapFn> {
        let tokens = lex::lex(source)?;
        let f = parse::parse(&tokens)?;
        let reads = parse::doc_reads(&f);
        Some(MapFn { f, reads })
    }

    /// The document's top-level members the function reads (sorted), or `None` when it
    /// needs the whole document. [`MapFn::map`] may be given the text of any object that
    /// has these members as the document has them (the stored body, without the `_`
    /// members the indexer adds, when none of them is read).
    pub fn reads(&self) -> Option<&[String]> {
        self.reads.as_deref()
    }

    /// The rows the function emits for `doc`, the JSON text of the document as a map
    /// function sees it (see [`MapFn::reads`]), or [`Fallback`] when only the engine can
    /// say. The text must be a stored document's: valid JSON whose member names are unique
    /// at every level.
    pub fn map(&self, doc: &str) -> Result<Rows, Fallback> {
        eval::run(&self.f, doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(src: &str, doc: Value) -> Result<Rows, Fallback> {
        MapFn::compile(src)
            .expect("in the subset")
            .map(&doc.to_string())
    }

    #[test]
    fn runs_the_seed_benchmark_function() {
        let src = r#"function(doc) {
            if (doc.metadata && doc.metadata.createdAt) {
                var parts = doc.metadata.createdAt.split("-"),
                    year = parts[0],
                    month = parts[1];
                emit([year, month], doc.score);
            }
        }"#;
        let doc = json!({"_id": "a", "metadata": {"createdAt": "2016-03-04"}, "score": 7});
        assert_eq!(rows(src, doc), Ok(vec![(json!(["2016", "03"]), json!(7))]));
        assert_eq!(rows(src, json!({"_id": "b"})), Ok(vec![]));
        // `split` of a number throws: the engine decides.
        assert_eq!(
            rows(src, json!({"metadata": {"createdAt": 5}})),
            Err(Fallback)
        );
    }

    #[test]
    fn knows_which_members_it_reads() {
        let reads = |src: &str| MapFn::compile(src).unwrap().reads().map(<[String]>::to_vec);
        assert_eq!(
            reads("function(d) { if (d.b) emit([d['a'], d[0]], d.b.c.length); }"),
            Some(vec!["0".to_owned(), "a".to_owned(), "b".to_owned()])
        );
        assert_eq!(reads("function(d) { emit(d._id, d); }"), None);
        assert_eq!(reads("function(d) { emit(d[d.k], 1); }"), None);
        assert_eq!(reads("function(d) { if (d) emit(1); }"), None);
        assert_eq!(reads("function(d) { emit(1); }"), Some(vec![]));
    }

    #[test]
    fn refuses_sources_outside_the_subset() {
        for src in [
            "function(doc) { emit(doc._id, null); } foo",
            "function(doc) { log(doc); }",
            "function(doc) { for (var i in doc) emit(i, 1); }",
            "function(doc) { emit(x, 1); }",
            "function(doc) { emit(y, 1); { let y = 1; } }",
            "function(doc) { let y = y; }",
            "function(doc) { const y = 1; y = 2; }",
            "function(doc) { var doc = 1; }",
            "function(doc) { if (doc) let x = 1; }",
            "function(doc) { emit(doc.a, 1) emit(doc.b, 2) }",
            "function(doc) { emit({1: doc.a}, 1) }",
            "function(doc) { emit({__proto__: doc.a}, 1) }",
            "function(doc) { doc.a.foo(); }",
            "function(emit) { emit(1); }",
            "function emit(doc) { emit(1); }",
            "function(doc) { emit(this, 1); }",
            "function(doc, req) { emit(1); }",
            "(function(doc) { emit(1); })",
        ] {
            assert!(MapFn::compile(src).is_none(), "{src}");
        }
    }

    #[test]
    fn reads_variables_as_javascript_scopes_them() {
        let src = "function(doc) { emit(v, 1); var v = doc.a; emit(v, 2); if (v) { let w = v + 1; emit(w) } }";
        assert_eq!(
            rows(src, json!({"a": 1})),
            Ok(vec![
                (json!(null), json!(1)),
                (json!(1), json!(2)),
                (json!(2), json!(null))
            ])
        );
        let src = "function(doc) {\n var k\n if (doc.a) k = 'a'\n else k = doc.b\n emit(k)\n return\n emit(2) }";
        assert_eq!(
            rows(src, json!({"b": "x"})),
            Ok(vec![(json!("x"), json!(null))])
        );
    }
}
