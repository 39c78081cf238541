//! The native Python path against `settee-query-server` (a real process, as a view build
//! runs it): for every function the subset accepts and every document, a native answer
//! must be exactly the process's (the same rows, keys and values, numbers printed the
//! same), and a source the subset accepts must compile in the process. Every function
//! ends by yielding a last row, so a document on which Python raised (the process then
//! answers no rows for the function, and logs) cannot pass for one that yields nothing.
//! Functions come from a corpus of common shapes and from a generator of random
//! expressions printed with random parentheses; documents are generated with the values
//! that trip Python's conversions: floats, `-0`, exponents, ints past 64 bits, bools
//! beside ints, strings with separators, non-ASCII text, missing members, lists and
//! dicts where strings are expected.

use proptest::prelude::*;
use serde_json::{json, Value};
use settee_pymap::MapFn;
use settee_queryserver::{Command, Process};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// One query-server process for the whole file (reset before each function).
static SERVER: LazyLock<Mutex<Process>> = LazyLock::new(|| {
    let cmd = Command::parse("settee-query-server").expect("command");
    Mutex::new(
        Process::spawn(&cmd, Duration::from_secs(60))
            .expect("settee-query-server on PATH (pip install ./python)"),
    )
});

const END: &str = "    yield '~end', 0\n";

/// Loads `src` into the process.
fn load(p: &mut Process, src: &str) {
    assert_eq!(p.prompt(&json!(["reset"])).expect("reset"), json!(true));
    let added = p.prompt(&json!(["add_fun", src]));
    assert_eq!(
        added.unwrap_or_else(|e| panic!(
            "the process refuses a source the subset accepts: {src}: {e}"
        )),
        json!(true)
    );
}

/// Maps `doc` both ways; `true` when the native path answered (and agreed). A function
/// that reads no `_` member answers the same on the stored body (the document without
/// them), which the indexer then gives it.
fn agree(native: &MapFn, p: &mut Process, src: &str, doc: &str) -> bool {
    let mut body: Value = serde_json::from_str(doc).expect("test document");
    let native_rows = native.map(doc);
    if native
        .reads()
        .is_some_and(|r| r.iter().all(|n| !n.starts_with('_')))
    {
        let m = body.as_object_mut().expect("an object");
        m.retain(|k, _| !k.starts_with('_'));
        assert_eq!(
            native.map(&body.to_string()),
            native_rows,
            "body only\n{src}\n{doc}"
        );
    }
    let Ok(rows) = native_rows else {
        return false;
    };
    let mut by_python = p.map_docs(&[doc.as_bytes()]).expect("map_doc");
    let by_python = by_python
        .pop()
        .and_then(|mut f| f.pop())
        .expect("one function");
    let text = |rows: &[(Value, Value)]| serde_json::to_string(rows).expect("json");
    assert_eq!(
        text(&rows),
        text(&by_python),
        "different rows\nfunction: {src}\ndocument: {doc}"
    );
    true
}

/// Runs `docs` through `src` both ways; how many the native path answered.
fn check(src: &str, docs: &[String]) -> Option<usize> {
    let native = MapFn::compile(src)?;
    let mut p = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    load(&mut p, src);
    Some(
        docs.iter()
            .filter(|d| agree(&native, &mut p, src, d))
            .count(),
    )
}

/// Common shapes; each ends with the last row ([`END`], indented as its body is).
const CORPUS: &[&str] = &[
    "def map(doc):\n    if 'metadata' in doc and 'createdAt' in doc['metadata']:\n        created_at = doc['metadata']['createdAt']\n        year, month, _ = created_at.split('-')\n        yield [year, month], doc['score']\n# a0\n    yield '~end', 0\n",
    "def fun(doc):\n    yield doc['_id'], doc.get('n')\n    yield '~end', 0\n",
    "def fun(doc):\n    yield doc['_id'], None\n    yield '~end', 0\n",
    "def fun(doc):\n    if doc.get('type') == 'x':\n        yield [doc.get('a'), doc.get('n')], 1\n    yield '~end', 0\n",
    "def fun(doc):\n    if 'tags' in doc:\n        yield doc['tags'][0], doc['tags']\n    yield '~end', 0\n",
    "def fun(doc):\n    if doc.get('type') != 'x' and doc.get('n', 0) > 2:\n        yield doc['n'], doc.get('b')\n    elif doc.get('a') is None:\n        yield None, doc.get('type')\n    else:\n        pass\n    yield '~end', 0\n",
    "def fun(doc):\n    k = doc.get('a') or doc.get('b')\n    if not k:\n        yield '~end', 1\n        return\n    yield k, [doc.get('s'), doc.get('metadata')]\n    yield '~end', 0\n",
    "    def fun(d):\n        yield (d['_id'], d['_rev']), (d.get('s') < 'm', d.get('n') is not None)\n        yield '~end', 0\n",
];

/// A document with every member the corpus reads, each of a type its function takes.
const FULL_DOC: &str = r#"{"_id":"d1","_rev":"1-abc","a":1,"b":"x","n":3,"s":"Ab-c","type":"y","tags":["t",1],"metadata":{"createdAt":"2016-03-04","docType":"score"},"score":5}"#;

#[test]
fn the_corpus_is_in_the_subset_and_agrees() {
    for src in CORPUS {
        let full = check(src, &[FULL_DOC.to_owned()]);
        assert_eq!(
            full,
            Some(1),
            "not in the subset, or the full document fell back: {src}"
        );
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(48));
        runner
            .run(&documents(), |docs| {
                check(src, &docs);
                Ok(())
            })
            .unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn generated_functions_agree(src in function(), docs in documents()) {
        // About a third of the documents are answered natively; on the rest Python
        // raises, or meets what is left to it, in these random expressions.
        let n = check(&src, &docs);
        prop_assert!(n.is_some(), "the generator writes only sources in the subset");
    }
}

fn documents() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(document(), 1..10)
}

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "5000",
    "1.5",
    "1.0",
    "-2.25",
    "0.1",
    "1e2",
    "1E3",
    "-0.0",
    "9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "12345678901234567890123",
];

const STRINGS: &[&str] = &[
    "",
    " ",
    "a",
    "m",
    "0",
    "2016-03-04",
    "1999-12",
    "a-b-c",
    "-",
    "x-",
    "é-ü",
    "😀-1",
    "createdAt",
    "metadata",
    "x",
    "None",
    "True",
    "say \"hi\"",
    "tab\t",
    "Straße",
];

const KEYS: &[&str] = &[
    "a",
    "b",
    "k",
    "n",
    "s",
    "t",
    "type",
    "tags",
    "metadata",
    "createdAt",
    "score",
    "0",
    "é",
];

fn json_text(s: &str) -> String {
    serde_json::to_string(s).expect("string")
}

fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        prop::sample::select(NUMBERS).prop_map(str::to_owned),
        prop::sample::select(STRINGS).prop_map(json_text),
    ]
}

fn value() -> impl Strategy<Value = String> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..4)
                .prop_map(|m| format!("{{{}}}", unique_members(m).join(","))),
        ]
    })
}

/// `"name":value` texts, the first of each name kept: stored bodies have unique member
/// names at every level, so must these.
fn unique_members(members: Vec<(&str, String)>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    (members.into_iter())
        .filter(|(k, _)| seen.insert(*k))
        .map(|(k, v)| format!("{}:{v}", json_text(k)))
        .collect()
}

fn document() -> impl Strategy<Value = String> {
    // `s` is mostly a string, for the functions that split it.
    let s = prop_oneof![3 => prop::sample::select(STRINGS).prop_map(json_text), 1 => value()];
    let created = prop::sample::select(vec!["2016-03-04", "1999-12", "x", ""]);
    // Most names the functions read are there, so that most documents get past them.
    let members =
        prop::collection::vec(prop::option::weighted(0.7, value()), KEYS.len()).prop_map(|v| {
            KEYS.iter()
                .copied()
                .zip(v)
                .filter_map(|(k, v)| Some((k, v?)))
                .collect::<Vec<_>>()
        });
    (
        members,
        prop::option::of(s),
        prop::option::of(created),
        prop::option::of(prop::sample::select(NUMBERS)),
    )
        .prop_map(|(members, s, created, score)| {
            let mut all = vec![
                ("_id", "\"d1\"".to_owned()),
                ("_rev", "\"1-abc\"".to_owned()),
            ];
            all.extend(s.map(|s| ("s", s)));
            all.extend(created.map(|c| {
                (
                    "metadata",
                    format!(r#"{{"createdAt":"{c}","docType":"score"}}"#),
                )
            }));
            all.extend(score.map(|n| ("score", n.to_owned())));
            all.extend(members);
            // Numbers stay as written (the point of some of them).
            format!("{{{}}}", unique_members(all).join(","))
        })
}

/// A random expression over the document and the local `v`, with random parentheses.
fn expression() -> impl Strategy<Value = String> {
    let key = || prop::sample::select(KEYS).prop_map(json_text);
    let atom = prop_oneof![
        3 => key().prop_map(|k| format!("doc[{k}]")),
        4 => key().prop_map(|k| format!("doc.get({k})")),
        1 => (key(), leaf_literal()).prop_map(|(k, d)| format!("doc.get({k}, {d})")),
        1 => (key(), -2..3i8).prop_map(|(k, i)| format!("doc[{k}][{i}]")),
        1 => (key(), key()).prop_map(|(a, b)| format!("doc[{a}][{b}]")),
        2 => leaf_literal(),
        2 => Just("v".to_owned()),
        1 => Just("doc".to_owned()),
    ];
    atom.prop_recursive(3, 10, 2, |inner| {
        let paren = |s: String, p: bool| if p { format!("({s})") } else { s };
        prop_oneof![
            (
                inner.clone(),
                inner.clone(),
                prop::sample::select(vec!["==", "!=", "<", ">", "<=", ">=", "in", "not in"])
            )
                .prop_map(|(a, b, op)| format!("({a}) {op} ({b})")),
            (
                inner.clone(),
                inner.clone(),
                prop::sample::select(vec!["and", "or"]),
                any::<(bool, bool)>()
            )
                .prop_map(move |(a, b, op, (pa, pb))| format!(
                    "{} {op} {}",
                    paren(a, pa),
                    paren(b, pb)
                )),
            (inner.clone(), any::<bool>()).prop_map(move |(a, p)| format!("not {}", paren(a, p))),
            (inner.clone(), any::<bool>())
                .prop_map(|(a, not)| format!("({a}) is {}None", if not { "not " } else { "" })),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("[{a}, {b}]")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}, {b})")),
            (
                inner.clone(),
                prop::sample::select(vec![
                    ".split('-')",
                    "[0]",
                    "[-1]",
                    "['a']",
                    ".get('a')",
                    ".split(v)"
                ])
            )
                .prop_map(|(a, m)| format!("({a}){m}")),
        ]
    })
}

fn leaf_literal() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["None", "True", "False", "0", "1", "-1", "2"])
            .prop_map(str::to_owned),
        prop::sample::select(STRINGS).prop_map(|s| {
            // A Python literal of the subset: the escapes it has are JSON's too.
            json_text(s).replace('\t', "\\t")
        }),
    ]
}

fn function() -> impl Strategy<Value = String> {
    (expression(), expression(), expression(), 0..4u8).prop_map(|(a, b, c, shape)| {
        let body = match shape {
            0 => format!("    v = None\n    yield {a}, {b}\n"),
            1 => format!(
                "    v = {c}\n    if {a}:\n        yield v, {b}\n    elif {b}:\n        yield 'b', v\n    else:\n        yield {a}, None\n"
            ),
            2 => format!(
                "    v = {c}\n    if {a}:\n        yield 'ret', v\n        return\n    yield [{a}, v], {b}\n"
            ),
            _ => format!("    v, w = {c}, {a}\n    k, = [w]\n    yield [k, v], ({b})\n"),
        };
        format!("def fun(doc):\n{body}{END}")
    })
}
