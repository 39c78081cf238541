//! Selector normalisation and matching, against CouchDB's documented and tested behaviour.

use proptest::prelude::*;
use serde_json::{json, Value};
use settee_mango::{normalize, Error, Selector};

fn norm(v: Value) -> Value {
    normalize(&v).unwrap()
}

fn err(v: Value) -> (u16, &'static str, String) {
    let e = Selector::parse(&v).unwrap_err();
    (e.status(), e.name(), e.to_string())
}

fn m(sel: Value, doc: Value) -> bool {
    Selector::parse(&sel).unwrap().matches(&doc)
}

#[test]
fn normal_forms() {
    assert_eq!(norm(json!({})), json!({}));
    assert_eq!(norm(json!({"a": 1})), json!({"a": {"$eq": 1}}));
    assert_eq!(
        norm(json!({"a": 1, "b": {"$gt": 2}})),
        json!({"$and": [{"a": {"$eq": 1}}, {"b": {"$gt": 2}}]})
    );
    assert_eq!(
        norm(json!({"a": {"b": {"$gt": 10}}})),
        json!({"a.b": {"$gt": 10}})
    );
    assert_eq!(
        norm(json!({"foo": {"$and": [{"$gt": 5}, {"$lt": 10}]}})),
        json!({"$and": [{"foo": {"$gt": 5}}, {"foo": {"$lt": 10}}]})
    );
    assert_eq!(
        norm(json!({"$not": {"foo": {"$gt": 10}}})),
        json!({"foo": {"$lte": 10}})
    );
    assert_eq!(
        norm(json!({"$not": {"$and": [{"foo": {"$gt": 10}}, {"foo": {"$lt": 5}}]}})),
        json!({"$or": [{"foo": {"$lte": 10}}, {"foo": {"$gte": 5}}]})
    );
    assert_eq!(
        norm(json!({"$nor": [{"a": 1}, {"b": {"$in": [1]}}]})),
        json!({"$and": [{"a": {"$ne": 1}}, {"b": {"$nin": [1]}}]})
    );
    assert_eq!(
        norm(json!({"a": {"$not": {"$exists": true}}})),
        json!({"a": {"$exists": false}})
    );
    assert_eq!(
        norm(json!({"a": {"$not": {"$size": 2}}})),
        json!({"a": {"$not": {"$size": 2}}})
    );
    assert_eq!(
        norm(json!({"a": {"$elemMatch": {"$gte": 80, "$lt": 85}}})),
        json!({"a": {"$elemMatch": {"$and": [{"": {"$gte": 80}}, {"": {"$lt": 85}}]}}})
    );
    assert_eq!(
        norm(json!({"a": {"$elemMatch": {"b": 1}}})),
        json!({"a": {"$elemMatch": {"b": {"$eq": 1}}}})
    );
    assert_eq!(norm(json!({"a": {}})), json!({"a": {"$eq": {}}}));
    assert_eq!(
        norm(json!({"$text": "x"})),
        json!({"$default": {"$text": "x"}})
    );
    assert_eq!(
        norm(json!({"a": {"$beginsWith": "W"}})),
        json!({"a": {"$beginsWith": "W"}})
    );
}

#[test]
fn errors_as_couchdb_words_them() {
    assert_eq!(
        err(json!({"a": {"$in": 5}})),
        (400, "bad_arg", "Bad argument for operator $in: 5".into())
    );
    assert_eq!(
        err(json!({"a": {"$exists": "yes"}})),
        (
            400,
            "bad_arg",
            "Bad argument for operator $exists: <<\"yes\">>".into()
        )
    );
    assert_eq!(
        err(json!({"$and": {"a": 1}})),
        (
            400,
            "bad_arg",
            "Bad argument for operator $and: {[{<<\"a\">>,1}]}".into()
        )
    );
    assert_eq!(
        err(json!({"a": {"$size": -1}})).2,
        "Bad argument for operator $size: -1"
    );
    assert_eq!(
        err(json!({"a": {"$size": 1.0}})).2,
        "Bad argument for operator $size: 1.0"
    );
    assert_eq!(
        err(json!({"a": {"$mod": [1]}})).2,
        "Bad argument for operator $mod: [1]"
    );
    assert_eq!(
        err(json!({"a": {"$regex": "("}})).2,
        "Bad argument for operator $regex: <<\"(\">>"
    );
    assert_eq!(
        err(json!({"a": {"$foo": 1}})),
        (400, "invalid_operator", "Invalid operator: $foo".into())
    );
    assert_eq!(
        err(json!({"a": {"$beginsWith": 1}})).2,
        "Invalid operator: $beginsWith"
    );
    assert_eq!(
        err(json!({"$where": "x"})),
        (400, "not_supported", "Unsupported operator: $where".into())
    );
    assert_eq!(
        err(json!({"$gt": 5})),
        (
            400,
            "invalid_selector",
            "One or more conditions is missing a field name.".into()
        )
    );
    assert_eq!(
        err(json!({"a": {"$default": 1}})),
        (
            400,
            "bad_field",
            "Invalid field normalization on selector: {[{<<\"$default\">>,1}]}".into()
        )
    );
    assert_eq!(
        err(json!({"a..b": 1})),
        (400, "invalid_field_name", "Invalid field name: a..b".into())
    );
    assert!(matches!(
        Selector::parse(&json!({"$not": {"$text": "x"}})),
        Err(Error::BadArg { .. })
    ));
}

#[test]
fn comparisons_use_view_collation_and_raw_order_for_ids() {
    let doc = json!({"_id": "B", "name": "b", "n": 3, "f": 3.0, "nul": null});
    assert!(m(json!({"n": 3.0}), doc.clone()));
    assert!(m(json!({"f": 3}), doc.clone()));
    // View collation: "a" < "A" < "b" < "B"; raw (ids): "B" < "a".
    assert!(m(json!({"name": {"$lt": "B"}}), doc.clone()));
    assert!(m(json!({"name": {"$gt": "A"}}), doc.clone()));
    assert!(!m(json!({"_id": {"$gt": "a"}}), doc.clone()));
    assert!(m(json!({"_id": {"$lt": "a"}}), doc.clone()));
    // Types order: null < false < true < numbers < strings < arrays < objects.
    assert!(m(json!({"n": {"$gt": true}}), doc.clone()));
    assert!(m(json!({"n": {"$lt": "0"}}), doc.clone()));
    assert!(m(json!({"nul": {"$lt": false}}), doc.clone()));
    assert!(m(json!({"name": {"$lt": []}}), doc.clone()));
    assert!(!m(json!({"missing": {"$ne": 1}}), doc.clone()));
    assert!(m(json!({"missing": {"$exists": false}}), doc.clone()));
    // De Morgan turns this into `$or` of `$exists: false` (true) and `$ne` (false).
    assert!(m(
        json!({"missing": {"$not": {"$exists": true, "$eq": 1}}}),
        doc.clone()
    ));
    assert!(!m(json!({"missing": {"$not": {"$size": 1}}}), doc.clone()));
    assert!(!m(json!({"n": {"$exists": false}}), doc));
}

#[test]
fn array_and_object_operators() {
    let doc = json!({"tags": ["a", "b", 3], "scores": [80, 90], "m": {"k1": 1, "x": 2},
                     "nested": [{"v": 1}, {"v": 5}], "e": []});
    assert!(m(json!({"tags": {"$in": ["b", "z"]}}), doc.clone()));
    assert!(m(json!({"tags": {"$in": [3.0]}}), doc.clone()));
    assert!(!m(json!({"tags": {"$in": []}}), doc.clone()));
    assert!(m(json!({"tags": {"$nin": []}}), doc.clone()));
    assert!(!m(json!({"tags": {"$nin": ["a"]}}), doc.clone()));
    assert!(m(json!({"tags": {"$all": ["a", 3]}}), doc.clone()));
    assert!(
        !m(json!({"tags": {"$all": ["a", 3.0]}}), doc.clone()),
        "$all members are exact"
    );
    assert!(
        m(json!({"tags": {"$all": [["a", "b", 3.0]]}}), doc.clone()),
        "[list] == value"
    );
    assert!(!m(json!({"tags": {"$all": []}}), doc.clone()));
    assert!(m(json!({"tags": {"$size": 3}}), doc.clone()));
    assert!(m(json!({"e": {"$size": 0}}), doc.clone()));
    assert!(m(
        json!({"scores": {"$elemMatch": {"$gte": 85, "$lt": 95}}}),
        doc.clone()
    ));
    assert!(!m(
        json!({"scores": {"$elemMatch": {"$gte": 95}}}),
        doc.clone()
    ));
    assert!(m(
        json!({"nested": {"$elemMatch": {"v": {"$gt": 4}}}}),
        doc.clone()
    ));
    assert!(m(
        json!({"scores": {"$allMatch": {"$gt": 50}}}),
        doc.clone()
    ));
    assert!(
        !m(json!({"e": {"$allMatch": {"$gt": 50}}}), doc.clone()),
        "empty arrays never allMatch"
    );
    assert!(m(
        json!({"m": {"$keyMapMatch": {"$eq": "k1"}}}),
        doc.clone()
    ));
    assert!(!m(
        json!({"m": {"$keyMapMatch": {"$eq": "k2"}}}),
        doc.clone()
    ));
    assert!(m(json!({"nested.1.v": 5}), doc.clone()));
    assert!(m(json!({"tags.0": "a"}), doc.clone()));
    assert!(
        !m(json!({"tags.9": {"$exists": false}}), doc),
        "a bad path never matches"
    );
}

#[test]
fn scalar_operators() {
    let doc = json!({"n": 7, "f": 7.0, "s": "Warsaw", "b": true, "o": {}, "neg": -7});
    assert!(m(json!({"n": {"$mod": [3, 1]}}), doc.clone()));
    assert!(
        !m(json!({"f": {"$mod": [3, 1]}}), doc.clone()),
        "$mod needs an integer"
    );
    assert!(
        m(json!({"neg": {"$mod": [3, -1]}}), doc.clone()),
        "rem keeps the dividend's sign"
    );
    assert!(m(json!({"s": {"$regex": "^W.r"}}), doc.clone()));
    assert!(
        m(json!({"s": {"$regex": "sa(?=w)"}}), doc.clone()),
        "PCRE lookahead"
    );
    assert!(!m(json!({"n": {"$regex": "7"}}), doc.clone()));
    assert!(m(json!({"s": {"$beginsWith": "War"}}), doc.clone()));
    assert!(!m(json!({"s": {"$beginsWith": "war"}}), doc.clone()));
    for (field, t) in [
        ("n", "number"),
        ("s", "string"),
        ("b", "boolean"),
        ("o", "object"),
    ] {
        assert!(m(json!({field: {"$type": t}}), doc.clone()), "{field}");
    }
    assert!(m(json!({"$or": []}), doc.clone()));
    assert!(m(json!({"$and": []}), doc.clone()));
    assert!(m(json!({"\\$odd": {"$exists": false}}), doc));
    assert!(m(json!({"\\$odd": 1}), json!({"$odd": 1})));
    assert!(m(json!({"a\\.b": 1}), json!({"a.b": 1})));
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(|n| json!(n)),
        (-5i64..5).prop_map(|n| json!(n as f64 + 0.5)),
        "[a-cA-C]{0,2}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec(("[ab]", inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn condition() -> impl Strategy<Value = Value> {
    let op = prop::sample::select(vec!["$eq", "$ne", "$lt", "$lte", "$gt", "$gte"]);
    prop_oneof![
        (op, value()).prop_map(|(op, v)| json!({op: v})),
        prop::collection::vec(value(), 0..3).prop_map(|vs| json!({"$in": vs})),
        prop::collection::vec(value(), 0..3).prop_map(|vs| json!({"$nin": vs})),
        any::<bool>().prop_map(|b| json!({"$exists": b})),
        (0i64..3).prop_map(|n| json!({"$size": n})),
    ]
}

fn selector() -> impl Strategy<Value = Value> {
    let leaf =
        (prop::sample::select(vec!["a", "b", "a.b"]), condition()).prop_map(|(f, c)| json!({f: c}));
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"$and": v})),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"$or": v})),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"$nor": v})),
            inner.prop_map(|v| json!({"$not": v})),
        ]
    })
}

fn doc() -> impl Strategy<Value = Value> {
    (prop::option::of(value()), prop::option::of(value())).prop_map(|(a, b)| {
        let mut d = serde_json::Map::new();
        if let Some(a) = a {
            d.insert("a".into(), a);
        }
        if let Some(b) = b {
            d.insert("b".into(), b);
        }
        Value::Object(d)
    })
}

proptest! {
    /// Normalisation accepts its own output and leaves it as it is.
    #[test]
    fn normalisation_is_idempotent(sel in selector()) {
        let once = normalize(&sel).unwrap();
        prop_assert_eq!(normalize(&once).unwrap(), once);
    }

    /// `$and` and `$or` are the conjunction and disjunction of their parts, and `$nor` the
    /// negation of `$or` when every path a condition names resolves (a missing field or a
    /// path through a scalar fails both a condition and its negation in CouchDB).
    #[test]
    fn boolean_operators_agree(a in selector(), b in selector(), d in doc()) {
        let both = m(json!({"$and": [a.clone(), b.clone()]}), d.clone());
        prop_assert_eq!(both, m(a.clone(), d.clone()) && m(b.clone(), d.clone()));
        let either = m(json!({"$or": [a.clone(), b.clone()]}), d.clone());
        prop_assert_eq!(either, m(a.clone(), d.clone()) || m(b.clone(), d.clone()));
        let present = d.get("a").and_then(|a| a.get("b")).is_some() && d.get("b").is_some();
        if present {
            let neither = m(json!({"$nor": [a.clone(), b.clone()]}), d.clone());
            prop_assert_eq!(neither, !either);
        }
    }
}
