//! The native path against QuickJS: for every function the subset accepts and every
//! document, a native answer must be exactly the engine's (the same rows, keys and values,
//! numbers printed the same), and a source the subset accepts must compile in the engine.
//! Functions come from a corpus of common shapes and from a generator of random
//! expressions printed with random parentheses (so that the two parsers' precedence is
//! compared too); documents are generated with the values that trip JavaScript's
//! conversions: numbers beyond 2^53, `-0`, exponents; numeric, blank, hex and non-ASCII
//! strings; missing members; prototype member names; index-like keys. Like stored
//! documents, they have unique member names at every level.

use proptest::prelude::*;
use serde_json::Value;
use settee_js::{Limits, ViewFns, ViewRuntime, ViewSource};
use settee_jsmap::{Fallback, MapFn};

fn engine(src: &str) -> ViewRuntime {
    ViewRuntime::new(
        &ViewFns {
            views: vec![ViewSource {
                name: "v".into(),
                map: src.into(),
                reduce: None,
            }],
            lib: None,
            dialect: Default::default(),
        },
        Limits::default(),
    )
    .unwrap_or_else(|e| panic!("the engine refuses a source the subset accepts: {src}: {e}"))
}

/// Maps `doc` both ways; `true` when the native path answered (and agreed).
fn agree(native: &MapFn, js: &mut ViewRuntime, src: &str, doc: &str) -> bool {
    serde_json::from_str::<Value>(doc).expect("test document");
    let Ok(rows) = native.map(doc) else {
        return false;
    };
    let mut by_engine = js.map_doc(doc).expect("engine call");
    let by_engine = by_engine.pop().expect("one view");
    let text = |rows: &[(Value, Value)]| serde_json::to_string(rows).expect("json");
    match by_engine {
        Ok(js_rows) => assert_eq!(
            text(&rows),
            text(&js_rows),
            "different rows\nfunction: {src}\ndocument: {doc}"
        ),
        Err(e) => panic!(
            "native mapped what the engine throws on ({e})\nfunction: {src}\ndocument: {doc}"
        ),
    }
    true
}

const CORPUS: &[&str] = &[
    "function(doc) { emit(doc._id, null); }",
    "function(doc) { emit(doc._id, 1) }",
    "function(doc) { emit(doc.a, doc.b); }",
    "function(doc) { emit([doc.a, doc.b], doc.n); }",
    "function (doc) {\n  if (doc.type == 'x') emit([doc.a, doc.n], 1)\n}",
    "function(doc) { if (doc.type === \"x\") { emit(doc.s, {a: doc.a, b: doc.b, c: undefined}); } }",
    "function(doc) { if (doc.type != 'x' && doc.n > 2) emit(doc.n); else emit(null, doc.type); }",
    "function(doc) {\n    if (doc.metadata && doc.metadata.createdAt) {\n        var parts = doc.metadata.createdAt.split(\"-\"),\n            year = parts[0],\n            month = parts[1];\n        emit([year, month], doc.score);\n    }\n}",
    "function(doc) { emit(doc.s + doc.n, doc.a + 1); }",
    "function(doc) { emit(doc.n - doc.a, -doc.s); }",
    "function(doc) { emit(typeof doc.a, typeof doc.nope); }",
    "function(doc) { emit(doc.a || doc.b, doc.a && doc.b); }",
    "function(doc) { emit(doc.a ? doc.b : doc.s, !doc.n); }",
    "function(doc) { emit(doc.tags[0], doc.tags.length); }",
    "function(doc) { emit(doc.s.length, doc.s[1]); }",
    "function(doc) { emit(doc.s.toLowerCase(), doc.s.toUpperCase()); }",
    "function(doc) { emit(doc[doc.s], doc[doc.n]); }",
    "function(doc) { emit(doc.metadata, doc.tags); }",
    "function(doc) { emit(doc.a < doc.b, doc.s >= doc.a); }",
    "function(doc) { emit(doc.a == doc.s, doc.n === doc.a); }",
    "function(doc) { emit(doc.s == doc.n, doc.b !== null); }",
    "function(doc) { let k = doc.a; const v = [k, doc.b]; emit(k, v); }",
    "function(doc) { var k; if (doc.a) k = doc.a; else k = doc.n; emit(k); }",
    "function named(doc) { if (!doc.type) return; emit(doc.type, 1); };",
    "function(doc) { emit(doc.constructor, doc.toString); }",
    "function(doc) { emit(doc['0'], doc['x y']); }",
    "function(doc) { emit(+doc.s, doc.s - 0); }",
    "function(doc) { emit(doc.n + '', '' + doc.a); }",
    "function(doc) { emit({x: doc.metadata, y: [doc.tags, doc.nope]}, [doc.nope]); }",
    "function(doc) { emit(doc.metadata.createdAt, doc.metadata.docType); }",
    "function(doc) { emit(doc.s < \"\\ue000\", doc.s > '\\ud83d\\ude00'); }",
];

fn documents() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(document(), 1..12)
}

fn number() -> impl Strategy<Value = &'static str> {
    prop::sample::select(NUMBERS)
}

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "912",
    "1.5",
    "-2.25",
    "0.1",
    "1e21",
    "1e20",
    "1.5e-7",
    "0.000001",
    "9007199254740993",
    "12345678901234567890",
    "1E3",
    "5e-324",
    "1e308",
    "123456789.125",
    "-0.0",
    "3.0",
];

fn string() -> impl Strategy<Value = &'static str> {
    prop::sample::select(STRINGS)
}

const STRINGS: &[&str] = &[
    "",
    " ",
    "0",
    "12",
    " 3 ",
    "1e3",
    "0x10",
    "-0x10",
    "Infinity",
    "-Infinity",
    "-",
    "2016-03-04",
    "a-b-c",
    "-a-",
    "ABC",
    "Straße",
    "é",
    "😀",
    "\u{e000}",
    "x",
    "type",
    "length",
    "constructor",
    "toString",
    "0",
    "1",
    "x y",
    "a",
    "NaN",
    "1_0",
    "\t4\n",
    "\u{a0}5",
    "\u{180e}5",
    "\u{3000}7\u{feff}",
    "true",
    "null",
    "0b1",
    ".5",
    "5.",
];

fn json_text(v: String) -> String {
    serde_json::to_string(&v).expect("string")
}

fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number().prop_map(str::to_owned),
        string().prop_map(|s| json_text(s.to_owned())),
    ]
}

fn key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a",
        "b",
        "n",
        "s",
        "type",
        "tags",
        "metadata",
        "createdAt",
        "docType",
        "score",
        "0",
        "1",
        "x y",
        "constructor",
        "toString",
        "length",
        "é",
    ])
}

fn value() -> impl Strategy<Value = String> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key(), inner), 0..4).prop_map(|m| {
                let members: Vec<String> = m
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", json_text(k.to_owned())))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

fn document() -> impl Strategy<Value = String> {
    let usual = |k: &'static str| prop::option::of(value().prop_map(move |v| (k, v)));
    // `s` is mostly a string, for the functions that call its methods.
    let s = prop::option::of(
        prop_oneof![3 => string().prop_map(|s| json_text(s.to_owned())), 1 => value()]
            .prop_map(|v| ("s", v)),
    );
    (
        (
            usual("a"),
            usual("b"),
            usual("n"),
            s,
            usual("type"),
            usual("tags"),
        ),
        prop::collection::vec((key(), value()), 0..4),
        prop::option::of(prop::sample::select(vec!["2016-03-04", "1999-12", "x", ""])),
        prop::option::of(number()),
    )
        .prop_map(|((a, b, n, s, t, tags), extra, created, score)| {
            let mut parts = vec![r#""_id":"d1","_rev":"1-abc""#.to_owned()];
            let members = [a, b, n, s, t, tags].into_iter().flatten().chain(extra);
            parts.extend(members.map(|(k, v)| format!("{}:{v}", json_text(k.to_owned()))));
            if let Some(c) = created {
                parts.push(format!(
                    r#""metadata":{{"createdAt":"{c}","docType":"score"}}"#
                ));
            }
            if let Some(s) = score {
                parts.push(format!(r#""score":{s}"#));
            }
            // Stored bodies have unique member names at every level: so must these.
            let text = format!("{{{}}}", parts.join(","));
            serde_json::to_string(&serde_json::from_str::<Value>(&text).expect("json"))
                .expect("json")
        })
}

/// A random expression over the document and the variable `v`, with random parentheses.
fn expression() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        4 => key().prop_map(|k| if k.chars().all(|c| c.is_ascii_alphabetic()) {
            format!("doc.{k}")
        } else {
            format!("doc[{}]", json_text(k.to_owned()))
        }),
        1 => (key(), key()).prop_map(|(a, b)| format!("doc.{}.{}", ident(a), ident(b))),
        1 => (key(), 0..3u8).prop_map(|(a, i)| format!("doc.{}[{i}]", ident(a))),
        2 => number().prop_filter("a literal", |n| !n.starts_with('-')).prop_map(str::to_owned),
        2 => string().prop_map(|s| json_text(s.to_owned())),
        2 => prop::sample::select(vec!["null", "true", "false", "undefined", "v", "NaN", "doc"])
            .prop_map(str::to_owned),
    ];
    atom.prop_recursive(3, 10, 2, |inner| {
        let paren = |s: String, p: bool| if p { format!("({s})") } else { s };
        prop_oneof![
            (inner.clone(), inner.clone(), binop(), any::<(bool, bool)>()).prop_map(
                move |(a, b, op, (pa, pb))| format!("{} {op} {}", paren(a, pa), paren(b, pb))
            ),
            (
                prop::sample::select(vec!["!", "-", "+", "typeof "]),
                inner.clone(),
                any::<bool>()
            )
                .prop_map(move |(op, a, p)| format!("{op}{}", paren(a, p))),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(a, b, c)| format!("({a}) ? {b} : {c}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("[{a}, {b}]")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{{k: {a}, \"j\": {b}}}")),
            (
                inner.clone(),
                prop::sample::select(vec![
                    ".split(\"-\")",
                    ".toLowerCase()",
                    ".length",
                    "[0]",
                    ".a",
                    ".toUpperCase()",
                    ".split(v)"
                ])
            )
                .prop_map(|(a, m)| format!("({a}){m}")),
        ]
    })
}

fn ident(k: &str) -> &str {
    if k.chars().all(|c| c.is_ascii_alphabetic()) {
        k
    } else {
        "a"
    }
}

fn binop() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "==", "!=", "===", "!==", "<", ">", "<=", ">=", "+", "-", "&&", "||",
    ])
}

fn function() -> impl Strategy<Value = String> {
    (expression(), expression(), expression(), 0..3u8).prop_map(|(a, b, c, shape)| match shape {
        0 => format!("function(doc) {{ emit({a}, {b}); }}"),
        1 => format!(
            "function(doc) {{\n  var v = {c}\n  if ({a}) emit(v, {b})\n  else {{ emit({b}) }}\n}}"
        ),
        _ => format!("function(doc) {{ let v = {c}; emit([{a}, v], {b}); return; }}"),
    })
}

/// A document with every member the corpus reads, each of a type its function can take:
/// every corpus function is answered natively on it.
const FULL_DOC: &str = r#"{"_id":"d1","_rev":"1-abc","a":1,"b":"x","n":2,"s":"Ab-c","type":"x","tags":["t",1],"constructor":1,"toString":"s","0":0,"x y":3,"metadata":{"createdAt":"2016-03-04","docType":"score"},"score":5}"#;

#[test]
fn the_corpus_is_in_the_subset_and_agrees() {
    for src in CORPUS {
        let native = MapFn::compile(src).unwrap_or_else(|| panic!("not in the subset: {src}"));
        assert!(
            agree(&native, &mut engine(src), src, FULL_DOC),
            "the native path left the full document to the engine: {src}"
        );
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
        runner
            .run(&documents(), |docs| {
                let mut js = engine(src);
                for d in &docs {
                    agree(&native, &mut js, src, d);
                }
                Ok(())
            })
            .unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn generated_functions_agree(src in function(), docs in documents()) {
        if let Some(native) = MapFn::compile(&src) {
            let mut js = engine(&src);
            let mut n = 0;
            // About one in ten documents is answered natively; the rest throw, or meet
            // what is left to the engine, in these random expressions.
            for d in &docs {
                n += agree(&native, &mut js, &src, d) as usize;
            }
            prop_assert!(n <= docs.len());
        }
    }
}

/// Every member of `Object.prototype` (as QuickJS has it) read from a document lacking it
/// is left to the engine or answered as the engine does.
#[test]
fn prototype_members_are_left_to_the_engine() {
    let mut js =
        engine("function(doc) { emit(Object.getOwnPropertyNames(Object.prototype), null); }");
    let rows = js
        .map_doc(r#"{"_id":"x"}"#)
        .unwrap()
        .pop()
        .unwrap()
        .unwrap();
    let names = rows[0].0.as_array().unwrap().clone();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        let name = name.as_str().unwrap();
        let src = format!(
            "function(doc) {{ emit(doc[{}], typeof doc[{0}]); }}",
            json_text(name.to_owned())
        );
        let native = MapFn::compile(&src).unwrap();
        assert_eq!(native.map(r#"{"_id":"x"}"#), Err(Fallback), "{name}");
        if name != "__proto__" {
            let doc = format!(r#"{{"_id":"x",{}:[1]}}"#, json_text(name.to_owned()));
            assert!(agree(&native, &mut engine(&src), &src, &doc), "{name}");
        }
    }
}

/// Every pair of the generators' numbers, strings and other values through every operator
/// and conversion, one document per pair.
#[test]
fn operators_agree_on_every_pair_of_values() {
    let src = "function(doc) { var a = doc.a, b = doc.b;
        emit([a == b, a != b, a === b, a !== b, a < b, a > b, a <= b, a >= b],
             [a + b, a - b, -a, +a, !a, typeof a, a && b, a || b, a ? 1 : 2, [a], {a: a}]); }";
    let native = MapFn::compile(src).expect("in the subset");
    let mut js = engine(src);
    let mut values: Vec<String> = ["null", "true", "false", "[]", "[1]", "{}"]
        .map(str::to_owned)
        .to_vec();
    values.extend(NUMBERS.iter().map(|n| n.to_string()));
    values.extend(STRINGS.iter().map(|s| json_text(s.to_string())));
    let mut answered = 0;
    for a in &values {
        for b in &values {
            let doc = format!(r#"{{"_id":"d","a":{a},"b":{b}}}"#);
            answered += agree(&native, &mut js, src, &doc) as usize;
        }
    }
    assert!(answered > values.len() * values.len() / 2, "{answered}");
}
