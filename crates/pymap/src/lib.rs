//! Python map functions run without a Python process.
//!
//! A view in Python goes through a query-server process: each document is written to a
//! pipe as JSON, decoded into Python values, mapped, and its rows encoded and read back.
//! For the common few-line map functions (test some members, build a key, `yield` it)
//! that traffic costs far more than the function. [`MapFn::compile`] recognises such
//! functions (a subset of Python described in `parse.rs`) and [`MapFn::map`] runs one
//! over the document's JSON text with Python's semantics, reading the members it needs in
//! place, as `settee-jsmap` does for JavaScript.
//!
//! The contract is exactness, not coverage: a source outside the subset is refused
//! (`None`), and a document on which the function would raise, or do anything the
//! evaluator does not model (floats, comparing containers, bools as numbers, …), returns
//! [`Fallback`]; the caller then maps that document in the query server, which also logs
//! the exception as before. Where the answer is given, it is the query server's: the same
//! rows, keys and values, in the same order, as `crates/views/tests/native_py.rs` checks
//! against `settee-query-server` on generated documents and functions. Only `yield` is
//! in the subset, not the `emit` that Settee's query server adds, so the answer is also
//! couchpy's.
//!
//! Pure: no I/O, no process; `Send + Sync`.

mod eval;
mod lex;
mod parse;

use serde_json::Value;

/// The (key, value) rows one map call yielded, in order.
pub type Rows = Vec<(Value, Value)>;

/// This document needs the query server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback;

/// A map function in the subset.
#[derive(Debug, Clone)]
pub struct MapFn {
    f: parse::Function,
    reads: Option<Vec<String>>,
}

impl MapFn {
    /// The function of `source` (a `def fun(doc): ...`), if it is in the subset.
    pub fn compile(source: &str) -> Option<MapFn> {
        let tokens = lex::lex(source)?;
        let f = parse::parse(&tokens)?;
        let reads = parse::doc_reads(&f);
        Some(MapFn { f, reads })
    }

    /// The document's members the function reads (sorted), or `None` when it needs the
    /// whole document. [`MapFn::map`] may be given the text of any object that has these
    /// members as the document has them (the stored body, without the `_` members the
    /// indexer adds, when none of them is read).
    pub fn reads(&self) -> Option<&[String]> {
        self.reads.as_deref()
    }

    /// The rows the function yields for `doc`, the JSON text of the document as the query
    /// server is sent it, or [`Fallback`] when only the query server can say. The text
    /// must be a stored document's: valid JSON whose member names are unique at every
    /// level.
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

    const SEED: &str = "def map(doc):
    if 'metadata' in doc and 'createdAt' in doc['metadata']:
        created_at = doc['metadata']['createdAt']
        year, month, _ = created_at.split('-')
        yield [year, month], doc['score']
# a0
";

    #[test]
    fn runs_the_seed_benchmark_function() {
        let doc = json!({"_id": "a", "metadata": {"createdAt": "2016-03-04"}, "score": 7});
        assert_eq!(rows(SEED, doc), Ok(vec![(json!(["2016", "03"]), json!(7))]));
        assert_eq!(rows(SEED, json!({"_id": "b"})), Ok(vec![]));
        // Python raises on these: the query server decides (and logs).
        for doc in [
            json!({"metadata": {"createdAt": "2016-03"}, "score": 1}),
            json!({"metadata": {"createdAt": "2016-03-04"}}),
            json!({"metadata": {"createdAt": 5}, "score": 1}),
            json!({"metadata": 5}),
        ] {
            assert_eq!(rows(SEED, doc.clone()), Err(Fallback), "{doc}");
        }
        // A float is written back by Python, maybe differently: the query server decides.
        let doc = json!({"metadata": {"createdAt": "2016-03-04"}, "score": 1.5});
        assert_eq!(rows(SEED, doc), Err(Fallback));
        // `in` on a string is a substring test.
        let doc = json!({"metadata": "xcreatedAtx", "score": 1});
        assert_eq!(rows(SEED, doc), Err(Fallback)); // then `str['createdAt']` raises
    }

    #[test]
    fn follows_python_semantics() {
        let src = "def f(doc):
    k = doc.get('k', 'none')
    if k is None: yield 'null', 1
    elif not k:
        yield 'falsy', [k]
    else:
        yield (k, doc.get('v'))
    if doc.get('t') == 'a' or doc.get('n') != 2 and 'x' not in doc:
        yield 'cond', doc.get('n')
        return
    pass
    yield 'end', [doc['l'][-1], 'abc'[1], -3 < 2]
";
        let r = |doc: Value| rows(src, doc);
        assert_eq!(
            r(json!({"k": null, "t": "a"})),
            Ok(vec![
                (json!("null"), json!(1)),
                (json!("cond"), json!(null))
            ])
        );
        assert_eq!(
            r(json!({"k": "", "n": 2, "l": [1, {"a": [2]}]})),
            Ok(vec![
                (json!("falsy"), json!([""])),
                (json!("end"), json!([{"a": [2]}, "b", true]))
            ])
        );
        assert_eq!(
            r(json!({"k": [0], "v": {"w": 1}})),
            Ok(vec![
                (json!([0]), json!({"w": 1})),
                (json!("cond"), json!(null))
            ])
        );
        assert_eq!(
            r(json!({})),
            Ok(vec![
                (json!("none"), json!(null)),
                (json!("cond"), json!(null))
            ])
        );
        // `True == 1`, floats inside an emitted dict, `-0`: left to Python.
        assert_eq!(
            r(json!({"k": 1, "n": true, "x": 1, "l": [1]})),
            Err(Fallback)
        );
        assert_eq!(r(json!({"k": 1, "v": {"w": 1.0}})), Err(Fallback));
        assert_eq!(
            rows(src, serde_json::from_str(r#"{"k": 1, "v": [-0]}"#).unwrap()),
            Err(Fallback)
        );
        // The local is unbound when the branch that assigns it did not run.
        let src = "def f(d):\n    if d.get('a'):\n        x = 1\n    yield 'x', x\n";
        assert_eq!(rows(src, json!({"a": 1})), Ok(vec![(json!("x"), json!(1))]));
        assert_eq!(rows(src, json!({})), Err(Fallback));
    }

    #[test]
    fn refuses_documents_a_python_decoder_reads_otherwise() {
        let f = MapFn::compile("def f(doc):\n    yield 1, 2\n").unwrap();
        assert_eq!(f.map(r#"{"a": "\ud83d\ude00"}"#), Err(Fallback));
        assert_eq!(f.map(r#"{"a": 1e400}"#), Err(Fallback));
        assert_eq!(
            f.map(r#"{"a": "1e400", "b": [true, false, null]}"#),
            Ok(vec![(json!(1), json!(2))])
        );
    }

    #[test]
    fn reads_sources_as_the_query_server_normalises_them() {
        // A comment's indentation does not count, but it does for the common margin.
        let src = "  # c\n      def f(doc):\n          yield 1, 2\n  # d\n      yield 3, 4";
        assert!(MapFn::compile(src).is_none());
        let src = "\u{feff}\r\n    # c\r\n    def f(doc):\r\n\r\n        yield 1, 2\r\n      # d\r\n        yield 3, 4\r\n";
        assert_eq!(
            rows(src, json!({})),
            Ok(vec![(json!(1), json!(2)), (json!(3), json!(4))])
        );
    }

    #[test]
    fn knows_which_members_it_reads() {
        let reads = |src: &str| MapFn::compile(src).unwrap().reads().map(<[String]>::to_vec);
        let names = |n: &[&str]| Some(n.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(reads(SEED), names(&["metadata", "score"]));
        assert_eq!(
            reads("def f(d):\n    if 'b' not in d and d.get('a', d['c']):\n        yield d['_id'], 1\n"),
            names(&["_id", "a", "b", "c"])
        );
        for src in [
            "def f(d):\n    yield d, 1\n",
            "def f(d):\n    if d:\n        yield 1, 1\n",
            "def f(d):\n    yield d[d['k']], 1\n",
            "def f(d):\n    yield d.get(d['k']), 1\n",
            "def f(d):\n    yield d['a'] in d, 1\n",
            "def f(d):\n    d = 1\n    yield d['a'], 1\n",
            "def f(d):\n    x, d = 1, 2\n    yield 1, 1\n",
            "def f(d):\n    yield d is None, 1\n",
        ] {
            assert_eq!(reads(src), None, "{src}");
        }
    }

    proptest::proptest! {
        /// Sources are client input: any soup of the subset's tokens, and any text, is
        /// compiled or refused without a panic, and so is any document mapped.
        #[test]
        fn never_panics(
            words in proptest::collection::vec(proptest::sample::select(vec![
                "def", "f", "(", "doc", ")", ":", "\n", "    ", "  ", "yield", "if", "elif",
                "else", "return", "pass", "=", ",", "[", "]", "'a'", "\"-\"", "0", "-1", "in",
                "not", "is", "None", "and", "or", "==", "<", ".get", ".split", "x", "#", "é",
                "\t", "\\", "1.5", "'''",
            ]), 0..40),
            text in ".{0,60}",
            doc in proptest::sample::select(vec![
                r#"{"a": [1, -0, 1e999, "\ud800", {"b": "x-y"}], "x": "é-1", "n": -9223372036854775808}"#,
                r#"{"a": "a-b", "0": 1, "x": [[[]]], "doc": null}"#,
                "{}", "[1]", "{\"a\":", "",
            ]),
        ) {
            let src = words.join(" ").replace(" \n ", "\n");
            for s in [src.as_str(), text.as_str()] {
                if let Some(f) = MapFn::compile(s) {
                    let _ = f.map(doc);
                }
            }
        }
    }

    #[test]
    fn refuses_sources_outside_the_subset() {
        for src in [
            "def f(doc):\n    emit(doc['a'], 1)\n",
            "def f(doc):\n    yield len(doc), 1\n",
            "def f(doc):\n    yield doc.keys(), 1\n",
            "def f(doc):\n    yield doc['a'].lower(), 1\n",
            "def f(doc):\n    yield doc['a'].split(), 1\n",
            "def f(doc):\n    yield doc['a'].split('-', 1), 1\n",
            "def f(doc):\n    for k in doc:\n        yield k, 1\n",
            "def f(doc):\n    yield {'a': 1}, 1\n",
            "def f(doc):\n    return [(1, 2)]\n",
            "def f(doc):\n    doc['a'] = 1\n",
            "def f(doc):\n    a = b = 1\n",
            "def f(doc):\n    if 1 < doc['a'] < 3: yield 1, 2\n",
            "def f(doc):\n    yield doc['a'] is 1, 2\n",
            "def f(doc):\n    yield 'a' 'b', 2\n",
            "def f(doc):\n    yield x, 1\n",
            "def f(doc, req):\n    yield 1, 2\n",
            "def f(doc=None):\n    yield 1, 2\n",
            "import re\ndef f(doc):\n    yield 1, 2\n",
            "def g(doc):\n    yield 1, 2\ndef f(doc):\n    yield 1, 2\n",
            "lambda doc: [(1, 2)]",
            "def f(doc):\n    yield 1, 2\n    x = doc['a'] if doc else 1\n",
            "  # c\n    def f(doc):\n      yield 1, 2\n",
            "def f(doc):\n    yield doc['a'][:2], 1\n",
        ] {
            assert!(MapFn::compile(src).is_none(), "{src:?}");
        }
    }
}
