//! Built-in reduce functions through the public API: CouchDB's documented examples, its
//! error names and messages, and properties of reduce / rereduce.

use proptest::prelude::*;
use serde_json::{json, Value};
use settee_core::reduce::{Builtin, ReduceError};

const SUM_REASON: &str = "The _sum function requires that map values be numbers, arrays of \
    numbers, or objects. Objects cannot be mixed with other data structures. Objects can be \
    arbitrarily nested, provided that the values for all fields are themselves numbers, \
    arrays of numbers, or objects.";

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("test JSON")
}

/// Reduces `values` as rows with `null` keys.
fn reduce(builtin: Builtin, values: &[Value]) -> Result<Value, ReduceError> {
    let key = Value::Null;
    let rows: Vec<(&Value, &Value)> = values.iter().map(|v| (&key, v)).collect();
    builtin.reduce(&rows)
}

/// Reduces each chunk, then rereduces the partials, keeping `_sum`'s error objects as
/// partials the way CouchDB does.
fn reduce_chunked(builtin: Builtin, chunks: &[&[Value]]) -> Result<Value, ReduceError> {
    let mut partials = Vec::new();
    // A view's reduce tree never reduces an empty node.
    for chunk in chunks.iter().filter(|c| !c.is_empty()) {
        match reduce(builtin, chunk) {
            Ok(partial) => partials.push(partial),
            Err(e) if e.is_row_value() => partials.push(e.to_json()),
            Err(e) => return Err(e),
        }
    }
    builtin.rereduce(&partials.iter().collect::<Vec<_>>())
}

fn distinct(keys: &[Value]) -> u64 {
    let rows: Vec<(&Value, &Value)> = keys.iter().map(|k| (k, &Value::Null)).collect();
    let builtin = Builtin::ApproxCountDistinct;
    builtin
        .finalize(&builtin.reduce(&rows).unwrap())
        .as_u64()
        .unwrap()
}

fn sketch(keys: impl IntoIterator<Item = Value>) -> Value {
    let keys: Vec<Value> = keys.into_iter().collect();
    let rows: Vec<(&Value, &Value)> = keys.iter().map(|k| (k, &Value::Null)).collect();
    Builtin::ApproxCountDistinct.reduce(&rows).unwrap()
}

// ---------------------------------------------------------------------------------------
// Names

#[test]
fn sources_name_builtins_by_prefix() {
    let cases = [
        ("_sum", Some(Builtin::Sum)),
        ("_sum\n", Some(Builtin::Sum)),
        ("_summary", Some(Builtin::Sum)),
        ("_count", Some(Builtin::Count)),
        ("_stats", Some(Builtin::Stats)),
        ("_approx_count_distinct", Some(Builtin::ApproxCountDistinct)),
        ("_top_3", Some(Builtin::Top(3))),
        ("_top_01", Some(Builtin::Top(1))),
        ("_bottom_100", Some(Builtin::Bottom(100))),
        ("_first", Some(Builtin::First)),
        ("_firstly", Some(Builtin::First)),
        ("_last", Some(Builtin::Last)),
        ("_top_0", None),
        ("_top_x", None),
        (" _sum", None),
        ("_foo", None),
        ("function (keys, values) { return sum(values); }", None),
    ];
    for (src, expected) in cases {
        assert_eq!(Builtin::from_source(src), expected, "{src:?}");
    }
    assert!(Builtin::is_reserved("_foo"));
    assert!(!Builtin::is_reserved("function () {}"));
    for builtin in [
        Builtin::Sum,
        Builtin::Count,
        Builtin::Stats,
        Builtin::ApproxCountDistinct,
        Builtin::Top(7),
        Builtin::Bottom(1),
        Builtin::First,
        Builtin::Last,
    ] {
        assert_eq!(Builtin::from_source(&builtin.name()), Some(builtin));
    }
    // The reasons CouchDB 3.5.2 gives when it refuses to save such a design document.
    let reason = |src: &str| Builtin::parse(src).unwrap_err();
    assert_eq!(reason("_top_0"), "rank value must be between 1 and 100");
    assert_eq!(
        reason("_bottom_101"),
        "rank value must be between 1 and 100"
    );
    assert_eq!(reason("_top_-1"), "rank value must be between 1 and 100");
    assert_eq!(reason("_top_x"), "invalid rank reducer");
    assert_eq!(reason("_bottom_"), "invalid rank reducer");
    assert_eq!(reason("_top_3x"), "invalid rank reducer");
    assert_eq!(reason("_foo"), "`_foo` is not a supported reduce function.");
}

/// `_top_N`, `_bottom_N`, `_first` and `_last` as CouchDB 3.5.2 answers them (values of the
/// rows asked for in the reference: 1, 5, 3, 5, "s", [1] under keys x, x, y, y, y, x).
#[test]
fn rank_and_edge_reducers() {
    let values = [
        json!(1),
        json!(5),
        json!(3),
        json!(5),
        json!("s"),
        json!([1]),
    ];
    let keys = [
        json!("x"),
        json!("x"),
        json!("y"),
        json!("y"),
        json!("y"),
        json!("x"),
    ];
    let rows: Vec<(&serde_json::Value, &serde_json::Value)> = keys.iter().zip(&values).collect();
    let top = Builtin::Top(3).reduce(&rows).unwrap();
    assert_eq!(top, json!([[1], "s", 5]));
    assert_eq!(Builtin::Bottom(2).reduce(&rows).unwrap(), json!([1, 3]));
    // Rereducing partials of halves gives the same as reducing the whole.
    let a = Builtin::Top(3).reduce(&rows[..3]).unwrap();
    let b = Builtin::Top(3).reduce(&rows[3..]).unwrap();
    assert_eq!(Builtin::Top(3).rereduce(&[&a, &b]).unwrap(), top);
    assert_eq!(Builtin::Top(3).finalize(&top), top);
    // Index order: key, then id (here the order given).
    let first = Builtin::First.reduce(&rows[..2]).unwrap();
    let last = Builtin::Last.reduce(&rows[4..]).unwrap();
    assert_eq!(Builtin::First.finalize(&first), json!(1));
    assert_eq!(Builtin::Last.finalize(&last), json!([1]));
    let empty = Builtin::Last.reduce(&[]).unwrap();
    let both = Builtin::Last.rereduce(&[&first, &last, &empty]).unwrap();
    assert_eq!(Builtin::Last.finalize(&both), json!([1]));
    let both = Builtin::First.rereduce(&[&empty, &last, &first]).unwrap();
    assert_eq!(Builtin::First.finalize(&both), json!([1]));
}

// ---------------------------------------------------------------------------------------
// Documented behaviour

#[test]
fn sum_of_documented_array_example() {
    // The `_sum` example of CouchDB's design document guide.
    let all = [
        json!(2),
        json!([3, 5, 7]),
        json!([0, 0, 0, 42]),
        json!(1),
        json!(3),
    ];
    assert_eq!(reduce(Builtin::Sum, &all).unwrap(), json!([9, 5, 7, 42]));
    assert_eq!(reduce(Builtin::Sum, &all[..2]).unwrap(), json!([5, 5, 7]));
    assert_eq!(
        reduce(Builtin::Sum, &all[2..3]).unwrap(),
        json!([0, 0, 0, 42])
    );
    assert_eq!(reduce(Builtin::Sum, &all[3..]).unwrap(), json!(4));
    assert_eq!(
        reduce_chunked(Builtin::Sum, &[&all[..2], &all[2..3], &all[3..]]).unwrap(),
        json!([9, 5, 7, 42])
    );
}

#[test]
fn sum_of_nested_objects() {
    let x = json!({"a": 1, "b": [1, 2], "c": {"d": 3}, "g": 1});
    let y = json!({"a": 2, "b": 3, "c": {"e": 5}, "f": 1, "g": 1});
    let z = json!({"a": 3, "b": [4, 2], "c": {"d": 3, "e": 5}, "f": 1, "g": 2});
    assert_eq!(reduce(Builtin::Sum, &[x.clone(), y.clone()]).unwrap(), z);
    assert_eq!(reduce(Builtin::Sum, &[y, x]).unwrap(), z);
    // A single object passes through unchecked, members in their order.
    let one = json!({"z": "text", "a": 1});
    assert_eq!(
        reduce(Builtin::Sum, std::slice::from_ref(&one)).unwrap(),
        one
    );
}

#[test]
fn sum_keeps_integers_exact_and_floats_float() {
    assert_eq!(
        reduce(Builtin::Sum, &[json!(1), json!(2)])
            .unwrap()
            .to_string(),
        "3"
    );
    let halves = [parse("1.5"), parse("1.5")];
    assert_eq!(reduce(Builtin::Sum, &halves).unwrap().to_string(), "3.0");
    assert_eq!(
        reduce(Builtin::Sum, &[json!(1), parse("2.0")])
            .unwrap()
            .to_string(),
        "3.0"
    );
    assert_eq!(
        reduce(Builtin::Sum, &[parse("1e3")]).unwrap().to_string(),
        "1000.0"
    );
    let big = [json!(9007199254740993u64), json!(9007199254740993u64)];
    assert_eq!(
        reduce(Builtin::Sum, &big).unwrap().to_string(),
        "18014398509481986"
    );
    let huge = [json!(u64::MAX), json!(u64::MAX)];
    assert_eq!(
        reduce(Builtin::Sum, &huge).unwrap().to_string(),
        "36893488147419103230"
    );
    assert_eq!(
        reduce(Builtin::Sum, &[parse("1e20"), parse("1e20")])
            .unwrap()
            .to_string(),
        "200000000000000000000.0"
    );
    assert_eq!(
        reduce(Builtin::Sum, &[parse("1e21"), parse("1e21")])
            .unwrap()
            .to_string(),
        "2e+21"
    );
}

#[test]
fn count_counts_any_values_and_rereduce_adds() {
    let values = [json!(null), json!("x"), json!({"a": 1}), json!([1])];
    assert_eq!(reduce(Builtin::Count, &values).unwrap(), json!(4));
    assert_eq!(
        reduce_chunked(Builtin::Count, &[&values[..1], &values[1..]]).unwrap(),
        json!(4)
    );
    assert_eq!(
        Builtin::Count.rereduce(&[&json!(3), &json!(4)]).unwrap(),
        json!(7)
    );
}

#[test]
fn stats_of_numbers_arrays_and_preaggregates() {
    let stats = |sum, count, min, max, sumsqr| json!({"sum": sum, "count": count, "min": min, "max": max, "sumsqr": sumsqr});
    let nums = [json!(1), json!(2), json!(3), json!(4)];
    let result = reduce(Builtin::Stats, &nums).unwrap();
    assert_eq!(result, stats(10, 4, 1, 4, 30));
    let keys: Vec<&str> = result
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["sum", "count", "min", "max", "sumsqr"]);
    assert_eq!(
        reduce(Builtin::Stats, &[json!(2)]).unwrap(),
        stats(2, 1, 2, 2, 4)
    );
    assert_eq!(
        reduce(Builtin::Stats, &[json!([1, 2])]).unwrap(),
        json!([stats(1, 1, 1, 1, 1), stats(2, 1, 2, 2, 4)])
    );
    let pre = json!({"sumsqr": 40, "extra": "ignored", "sum": 10, "count": 3, "min": 1, "max": 5});
    assert_eq!(
        reduce(Builtin::Stats, &[json!(2), pre]).unwrap(),
        stats(12, 4, 1, 5, 44)
    );
    assert_eq!(
        reduce(Builtin::Stats, &[parse("1.5")]).unwrap().to_string(),
        r#"{"sum":1.5,"count":1,"min":1.5,"max":1.5,"sumsqr":2.25}"#
    );
    let chunks: [&[Value]; 2] = [&nums[..1], &nums[1..]];
    assert_eq!(
        reduce_chunked(Builtin::Stats, &chunks).unwrap(),
        stats(10, 4, 1, 4, 30)
    );
}

#[test]
fn no_rows_reduce_to_zeros() {
    assert_eq!(reduce(Builtin::Sum, &[]).unwrap(), json!(0));
    assert_eq!(reduce(Builtin::Count, &[]).unwrap(), json!(0));
    assert_eq!(
        reduce(Builtin::Stats, &[]).unwrap(),
        json!({"sum": 0, "count": 0, "min": 0, "max": 0, "sumsqr": 0})
    );
    assert_eq!(distinct(&[]), 0);
}

#[test]
fn approx_count_distinct_counts_keys_exactly_when_few() {
    let keys = [
        json!("a"),
        json!("b"),
        json!("a"),
        json!([1, "x"]),
        json!({"k": null}),
        json!(null),
        json!("b"),
    ];
    assert_eq!(distinct(&keys), 5);
    // Keys that collate equal count once, whatever the number's spelling.
    assert_eq!(
        distinct(&[json!(1), parse("1.0"), parse("1e0"), json!(2)]),
        2
    );
    let partial = sketch(keys.iter().cloned());
    assert!(
        partial.is_string(),
        "the partial is an internal string: {partial}"
    );
}

#[test]
fn approx_count_distinct_gives_couchdbs_estimates() {
    // CouchDB 3.x's own estimates for these keys (SHA-1 of the Erlang term, precision 11),
    // computed with its algorithm on Erlang/OTP.
    let ints = |n: i64| (0..n).map(|i| json!(i)).collect::<Vec<_>>();
    let docs = |n: u64| {
        (0..n)
            .map(|i| json!(format!("doc-{i}")))
            .collect::<Vec<_>>()
    };
    assert_eq!(distinct(&ints(500)), 512);
    assert_eq!(distinct(&ints(6000)), 5898);
    assert_eq!(distinct(&docs(10_000)), 9941);
    assert_eq!(distinct(&docs(100_000)), 105_184);
}

#[test]
fn approx_count_distinct_errs_about_two_percent_at_scale() {
    // Precision 11 has a standard error of 1.04 / sqrt(2048) ≈ 2.3%: one key set may be
    // off by 5% (see `doc-` above), the typical error stays under 3%.
    for n in [10_000u64, 100_000] {
        let sets = if n == 10_000 { 12 } else { 4 };
        let errors: Vec<f64> = (0..sets)
            .map(|set| {
                let keys: Vec<Value> = (0..n).map(|i| json!([set, i])).collect();
                (distinct(&keys) as f64 - n as f64) / n as f64
            })
            .collect();
        let rms = (errors.iter().map(|e| e * e).sum::<f64>() / errors.len() as f64).sqrt();
        assert!(rms < 0.03, "{n} keys: errors {errors:?}");
        assert!(
            errors.iter().all(|e| e.abs() < 0.075),
            "{n} keys: errors {errors:?}"
        );
    }
}

#[test]
fn approx_count_distinct_rereduce_merges_sketches() {
    let left = sketch((0..3000).map(|i| json!(i)));
    let right = sketch((2000..6000).map(|i| json!(i)));
    let all = sketch((0..6000).map(|i| json!(i)));
    let builtin = Builtin::ApproxCountDistinct;
    assert_eq!(builtin.rereduce(&[&left, &right]).unwrap(), all);
    assert_eq!(builtin.rereduce(&[&right, &left]).unwrap(), all);
    assert_eq!(builtin.rereduce(&[&all]).unwrap(), all);
    // Few registers set: the sparse form; many: the dense one. Both read back unchanged.
    let few = sketch((0..10).map(|i| json!(i)));
    assert!(few.as_str().unwrap().starts_with('S') && all.as_str().unwrap().starts_with('D'));
    assert_eq!(builtin.rereduce(&[&few]).unwrap(), few);
    assert_eq!(builtin.rereduce(&[]).unwrap(), sketch([]));
    assert_eq!(builtin.finalize(&few), json!(10));
    let err = builtin.rereduce(&[&json!(12)]).unwrap_err();
    assert_eq!(err.error, "invalid_reduction");
    for junk in [
        json!("not a sketch"),
        json!("é"),
        json!("S!"),
        json!("DAAA"),
        json!(null),
    ] {
        assert_eq!(builtin.finalize(&junk), Value::Null, "{junk}");
    }
}

// ---------------------------------------------------------------------------------------
// Errors

#[test]
fn sum_of_non_numbers_is_a_builtin_reduce_error_row_value() {
    let err = reduce(Builtin::Sum, &[json!(1), json!("abc")]).unwrap_err();
    assert_eq!(err.error, "builtin_reduce_error");
    assert_eq!(err.reason, SUM_REASON);
    assert_eq!(err.caused_by, Some(json!("abc")));
    assert!(err.is_row_value());
    assert_eq!(
        err.to_json(),
        json!({"error": "builtin_reduce_error", "reason": SUM_REASON, "caused_by": "abc"})
    );
    let err = reduce(Builtin::Sum, &[json!(null)]).unwrap_err();
    assert_eq!(err.caused_by, Some(Value::Null));
}

#[test]
fn sum_blames_what_couchdb_blames() {
    // Arrays: the accumulator's tail from the first bad position.
    let err = reduce(Builtin::Sum, &[json!([1, 2, 3]), json!([1, "a", 3])]).unwrap_err();
    assert_eq!(err.caused_by, Some(json!([2, 3])));
    // A number after an object: the number.
    let err = reduce(Builtin::Sum, &[json!({"a": 1}), json!(5)]).unwrap_err();
    assert_eq!(err.caused_by, Some(json!(5)));
    // Objects: the first bad member in name order.
    let err = reduce(
        Builtin::Sum,
        &[json!({"b": 1, "a": 2}), json!({"b": "x", "a": "y"})],
    )
    .unwrap_err();
    assert_eq!(err.caused_by, Some(json!("y")));
    // An array element past the other array's end is not checked.
    assert_eq!(
        reduce(Builtin::Sum, &[json!([1]), json!([1, "a"])]).unwrap(),
        json!([2, "a"])
    );
}

#[test]
fn sum_error_objects_propagate_through_rereduce() {
    let err = reduce(Builtin::Sum, &[json!("abc")]).unwrap_err();
    let stored = err.to_json();
    let again = Builtin::Sum
        .rereduce(&[&json!(3), &stored, &json!(4)])
        .unwrap_err();
    assert_eq!(again, err);
}

#[test]
fn sum_crashes_where_couchdb_crashes() {
    // An object meeting a non-zero number: Erlang `case_clause`, not a row value.
    let err = reduce(Builtin::Sum, &[json!(5), json!({"a": 1})]).unwrap_err();
    assert_eq!(
        (err.error.as_str(), err.reason.as_str()),
        ("case_clause", "5")
    );
    assert!(!err.is_row_value());
    let err = reduce(Builtin::Sum, &[json!({"error": "other"})]).unwrap_err();
    assert_eq!(err.error, "case_clause");
    let err = reduce(Builtin::Sum, &[parse("1e308"), parse("1e308")]).unwrap_err();
    assert_eq!(
        (err.error.as_str(), err.reason.as_str()),
        ("unknown_error", "badarith")
    );
    // Values CouchDB could never decode pass through without a panic.
    let passed = reduce(Builtin::Sum, &[parse("[1, 1e400]")]).unwrap();
    assert_eq!(passed[0], json!(1));
    assert!(passed[1].is_number());
    assert_eq!(
        reduce(Builtin::Sum, &[parse("1e400")]).unwrap_err().reason,
        "badarith"
    );
    // An integer zero accumulator is replaced by an object, as in CouchDB.
    assert_eq!(
        reduce(Builtin::Sum, &[json!(1), json!(-1), json!({"a": 1})]).unwrap(),
        json!({"a": 1})
    );
}

#[test]
fn stats_errors_carry_couchdb_messages() {
    let cases: [(&[Value], &str); 6] = [
        (&[json!("abc")], "non-numeric _stats input: <<97,98,99>>"),
        (&[json!([1, null])], "non-numeric _stats input: null"),
        (
            &[json!(1), json!("abc")],
            "The _stats function requires that map values be numbers or arrays of numbers, not '<<\"abc\">>'",
        ),
        (
            &[json!(1), json!(true)],
            "The _stats function requires that map values be numbers or arrays of numbers, not 'true'",
        ),
        (&[json!({"sum": 1})], "user _stats input missing required field count ([{<<\"sum\">>,1}])"),
        (
            &[json!({"sum": null, "count": 1, "min": 1, "max": 1, "sumsqr": 1})],
            "non-numeric _stats input received for sum: null",
        ),
    ];
    for (values, reason) in cases {
        let err = reduce(Builtin::Stats, values).unwrap_err();
        assert_eq!(
            (err.error.as_str(), err.reason.as_str()),
            ("invalid_value", reason)
        );
        assert_eq!(err.caused_by, None);
        assert!(!err.is_row_value());
    }
}

#[test]
fn stats_messages_break_lines_as_erlang_does() {
    // `~p` starts at column 84, past the 80-column line, so Erlang breaks the list.
    let err = reduce(Builtin::Stats, &[json!(1), json!([1, 2])]).unwrap_err();
    let expected = format!(
        "The _stats function requires that map values be numbers or arrays of numbers, not '[1,\n{}2]'",
        " ".repeat(84)
    );
    assert_eq!(err.reason, expected);
    // A number after arrays is blamed as the statistics tuple it became.
    let err = reduce(Builtin::Stats, &[json!([1]), json!(3)]).unwrap_err();
    assert!(err.reason.ends_with(&format!(
        "not '{{3,\n{pad}1,\n{pad}3,\n{pad}3,\n{pad}9}}'",
        pad = " ".repeat(84)
    )));
}

#[test]
fn stats_arrays_must_keep_their_length() {
    let err = reduce(Builtin::Stats, &[json!([1, 2]), json!([1])]).unwrap_err();
    assert_eq!(
        (err.error.as_str(), err.reason.as_str()),
        ("unknown_error", "function_clause")
    );
}

// ---------------------------------------------------------------------------------------
// Properties

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![-1000i64..1000, any::<i64>().prop_map(|i| i >> 8)]
}

fn sum_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        int().prop_map(|i| json!(i)),
        prop::collection::vec(int(), 0..5).prop_map(|v| json!(v)),
    ]
}

/// Objects whose members keep one shape per name (CouchDB cannot add an object to a
/// number, nor in general regroup mixed shapes).
fn object_value() -> impl Strategy<Value = Value> {
    let nested = prop::collection::btree_map("[xy]", int(), 0..3);
    (
        prop::option::of(int()),
        prop::option::of(prop::collection::vec(int(), 0..4)),
        prop::option::of(nested),
    )
        .prop_map(|(a, c, d)| {
            let mut obj = serde_json::Map::new();
            a.map(|a| obj.insert("a".into(), json!(a)));
            c.map(|c| obj.insert("c".into(), json!(c)));
            d.map(|d| obj.insert("d".into(), json!(d)));
            Value::Object(obj)
        })
}

fn stats_value(width: usize) -> impl Strategy<Value = Value> {
    let number = int().prop_map(|i| json!(i));
    let preaggregate = (int(), 1i64..100, int(), int(), int())
        .prop_map(|(sum, count, a, b, sumsqr)| json!({"sum": sum, "count": count, "min": a.min(b), "max": a.max(b), "sumsqr": sumsqr}));
    let scalar = prop_oneof![3 => number, 1 => preaggregate];
    prop_oneof![
        scalar.clone(),
        prop::collection::vec(scalar, width..=width).prop_map(|v| json!(v)),
    ]
}

/// Values and cut points that split them into chunks (empty chunks included).
fn split<T: std::fmt::Debug + Clone>(
    values: impl Strategy<Value = Vec<T>>,
) -> impl Strategy<Value = (Vec<T>, Vec<usize>)> {
    values.prop_flat_map(|values| {
        let len = values.len();
        (Just(values), prop::collection::vec(0..=len, 0..5))
    })
}

fn chunks<T>(values: &[T], cuts: &[usize]) -> Vec<Vec<T>>
where
    T: Clone,
{
    let mut cuts = cuts.to_vec();
    cuts.push(0);
    cuts.push(values.len());
    cuts.sort_unstable();
    cuts.windows(2)
        .map(|w| values[w[0]..w[1]].to_vec())
        .collect()
}

fn rereduce_in_chunks(
    builtin: Builtin,
    values: &[Value],
    cuts: &[usize],
) -> Result<Value, ReduceError> {
    let parts = chunks(values, cuts);
    let refs: Vec<&[Value]> = parts.iter().map(Vec::as_slice).collect();
    reduce_chunked(builtin, &refs)
}

/// Numbers equal within a relative tolerance, structure equal.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| close(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| k1 == k2 && close(v1, v2))
        }
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sum_rereduce_equals_reduce((values, cuts) in split(prop::collection::vec(sum_value(), 0..40))) {
        let all = reduce(Builtin::Sum, &values).unwrap();
        prop_assert_eq!(rereduce_in_chunks(Builtin::Sum, &values, &cuts).unwrap(), all);
    }

    #[test]
    fn sum_of_objects_rereduce_equals_reduce((values, cuts) in split(prop::collection::vec(object_value(), 0..20))) {
        let all = reduce(Builtin::Sum, &values);
        prop_assert_eq!(rereduce_in_chunks(Builtin::Sum, &values, &cuts), all);
    }

    #[test]
    fn sum_of_floats_rereduce_is_close((values, cuts) in split(prop::collection::vec(-1e6f64..1e6, 0..40))) {
        let values: Vec<Value> = values.into_iter().map(|f| json!(f)).collect();
        let all = reduce(Builtin::Sum, &values).unwrap();
        let chunked = rereduce_in_chunks(Builtin::Sum, &values, &cuts).unwrap();
        prop_assert!(close(&all, &chunked), "{} vs {}", all, chunked);
    }

    #[test]
    fn count_rereduce_equals_reduce((values, cuts) in split(prop::collection::vec(sum_value(), 0..40))) {
        let all = reduce(Builtin::Count, &values).unwrap();
        prop_assert_eq!(&all, &json!(values.len()));
        prop_assert_eq!(rereduce_in_chunks(Builtin::Count, &values, &cuts).unwrap(), all);
    }

    #[test]
    fn stats_rereduce_equals_reduce(
        (values, cuts) in (1usize..4).prop_flat_map(|w| split(prop::collection::vec(stats_value(w), 0..30)))
    ) {
        // Rows must all be arrays or all scalars; keep the longest uniform prefix.
        let arrays = values.first().is_some_and(Value::is_array);
        let values: Vec<Value> = values.into_iter().take_while(|v| v.is_array() == arrays).collect();
        let cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(values.len())).collect();
        let all = reduce(Builtin::Stats, &values).unwrap();
        prop_assert_eq!(rereduce_in_chunks(Builtin::Stats, &values, &cuts).unwrap(), all);
    }

    #[test]
    fn stats_of_floats_rereduce_is_close((values, cuts) in split(prop::collection::vec(-1e6f64..1e6, 1..40))) {
        let values: Vec<Value> = values.into_iter().map(|f| json!(f)).collect();
        let all = reduce(Builtin::Stats, &values).unwrap();
        let chunked = rereduce_in_chunks(Builtin::Stats, &values, &cuts).unwrap();
        prop_assert!(close(&all, &chunked), "{} vs {}", all, chunked);
    }

    #[test]
    fn reduce_never_panics(values in prop::collection::vec(any_json(), 0..8), cuts in prop::collection::vec(0usize..8, 0..3)) {
        let cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(values.len())).collect();
        for builtin in [Builtin::Sum, Builtin::Count, Builtin::Stats, Builtin::ApproxCountDistinct] {
            let _ = reduce(builtin, &values);
            let _ = rereduce_in_chunks(builtin, &values, &cuts);
        }
    }

    #[test]
    fn distinct_merge_is_order_independent(
        groups in prop::collection::vec(prop::collection::vec(any_json(), 0..300), 1..5),
        seed in any::<u64>(),
    ) {
        let builtin = Builtin::ApproxCountDistinct;
        let partials: Vec<Value> = groups.iter().map(|g| sketch(g.iter().cloned())).collect();
        let merged = builtin.rereduce(&partials.iter().collect::<Vec<_>>()).unwrap();
        let mut shuffled: Vec<&Value> = partials.iter().collect();
        shuffled.rotate_left((seed as usize) % partials.len());
        shuffled.reverse();
        prop_assert_eq!(&builtin.rereduce(&shuffled).unwrap(), &merged);
        prop_assert_eq!(&builtin.rereduce(&[&merged, &merged]).unwrap(), &merged);
        prop_assert_eq!(&merged, &sketch(groups.into_iter().flatten()));
    }

    #[test]
    fn distinct_is_near_exact_for_small_counts(keys in prop::collection::btree_set("[a-z0-9]{1,12}", 0..200)) {
        // Linear counting's standard error is about n / 64 keys here; allow eight of them plus
        // a few keys, since two keys can share a register at any n (seen: 5 keys → 3; CouchDB's
        // own sketch gives the same estimate for the same keys).
        let keys: Vec<Value> = keys.into_iter().map(Value::from).collect();
        let n = keys.len() as f64;
        let estimate = distinct(&keys) as f64;
        prop_assert!((estimate - n).abs() <= 4.0 + n / 8.0, "{} keys estimated as {}", n, estimate);
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        int().prop_map(|i| json!(i)),
        (-1e3f64..1e3).prop_map(|f| json!(f)),
        "[a-c\u{e9}\u{20ac}]{0,3}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-c]", inner, 0..3).prop_map(|m| json!(m)),
        ]
    })
}
