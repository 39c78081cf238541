//! How a clustered view's reductions of equal keys, one per range, are reduced again at
//! the coordinator and finalized, as CouchDB's `fabric_view_reduce` does: the copies give
//! partial results (`settee_partials`, see `settee_node::views::GIVEN_PARTIALS`), so that
//! `_approx_count_distinct`'s registers are merged before they are counted and `_first`'s
//! and `_last`'s rows compared by key and document id; JavaScript reduces run in a runtime
//! here, other languages' through this member's query server, as a single node runs them.

use serde_json::Value;
use settee_core::design::ViewGroupDef;
use settee_core::reduce::Builtin;
use settee_node::{Error, Node, Result};
use settee_views::ReduceFailure;
use std::sync::Arc;

/// How a view's values reduce again at the coordinator.
pub(crate) enum Rereduce {
    /// A built-in reduce, in the view's collation (`raw`).
    Builtin {
        b: Builtin,
        raw: bool,
    },
    Js(Box<settee_js::ViewRuntime>),
    /// A reduce function of an external query server's language.
    External {
        node: Arc<Node>,
        language: String,
        source: String,
    },
}

impl Rereduce {
    /// The rereduce of view number `view` of `def`, if it has a reduce.
    pub(crate) fn of(
        node: &Arc<Node>,
        def: &ViewGroupDef,
        view: usize,
    ) -> Result<Option<Rereduce>> {
        let v = &def.views[view];
        let Some(src) = v.reduce.as_deref() else {
            return Ok(None);
        };
        if let Some(b) = Builtin::from_source(src) {
            let raw = def.raw(view);
            return Ok(Some(Rereduce::Builtin { b, raw }));
        }
        let Some(dialect) = settee_js::Dialect::of(Some(&def.language)) else {
            return Ok(Some(Rereduce::External {
                node: node.clone(),
                language: def.language.clone(),
                source: src.to_owned(),
            }));
        };
        let fns = settee_js::ViewFns {
            views: vec![settee_js::ViewSource {
                name: v.name.clone(),
                map: v.map.clone(),
                reduce: Some(src.to_owned()),
            }],
            lib: def.lib.clone(),
            dialect,
        };
        let rt = settee_js::ViewRuntime::new(&fns, Default::default())
            .map_err(|e| Error::Views(settee_views::Error::Js(e)))?;
        Ok(Some(Rereduce::Js(Box::new(rt))))
    }

    /// The value shown for a key whose ranges' partial results are `values`.
    pub(crate) fn run(&mut self, values: &[&Value]) -> Result<Value> {
        match self {
            Rereduce::Builtin { b, raw } => builtin(*b, *raw, values),
            Rereduce::Js(rt) => rt
                .rereduce(0, values)
                .map_err(|e| Error::Views(settee_views::Error::Js(e))),
            Rereduce::External {
                node,
                language,
                source,
            } => {
                let qs = &node.views.query_servers;
                let answer = (qs.checkout_any(language))
                    .and_then(|mut p| p.rereduce(&[source.as_str()], values));
                match answer {
                    Ok(mut results) => Ok(results.pop().unwrap_or(Value::Null)),
                    Err(e) => {
                        let (error, reason) = e.parts();
                        Err(Error::Views(settee_views::Error::Reduce(ReduceFailure {
                            error,
                            reason,
                        })))
                    }
                }
            }
        }
    }
}

/// The finalized reduction of built-in partials.
pub(crate) fn builtin(b: Builtin, raw: bool, partials: &[&Value]) -> Result<Value> {
    let combined = match b {
        Builtin::First | Builtin::Last => edge(partials, raw, b == Builtin::Last),
        _ => match b.rereduce(partials) {
            Ok(v) => v,
            // `_sum`'s error object is the reduction (see `settee_core::reduce`).
            Err(e) if e.is_row_value() => return Ok(e.to_json()),
            Err(e) => return Err(Error::bad_request(e.to_string())),
        },
    };
    Ok(match b {
        Builtin::First | Builtin::Last => match combined.as_array().map(Vec::as_slice) {
            Some([_, _, value]) => value.clone(),
            _ => Value::Null,
        },
        _ => b.finalize(&combined),
    })
}

/// Of `_first`'s (or `last`, `_last`'s) partials `[key, id, value]`, the one of the least
/// (greatest) key and then document id, as CouchDB's `less_json_ids` orders them.
fn edge(partials: &[&Value], raw: bool, last: bool) -> Value {
    let order = |a: &Value, b: &Value| {
        let keys = if raw {
            settee_core::collate::compare_raw(&a[0], &b[0])
        } else {
            settee_core::collate::compare(&a[0], &b[0])
        };
        let ids = || (a[1].as_str().unwrap_or_default()).cmp(b[1].as_str().unwrap_or_default());
        keys.then_with(ids)
    };
    let rows = partials
        .iter()
        .filter(|p| p.as_array().is_some_and(|a| a.len() == 3));
    let best = if last {
        rows.max_by(|a, b| order(a, b))
    } else {
        rows.min_by(|a, b| order(a, b))
    };
    best.map_or(Value::Array(Vec::new()), |v| (*v).clone())
}

/// A reduce view's rows for a list of `keys` (grouped by exact key, as CouchDB requires
/// of a multi-key reduce): key after key in the list's order, each range's row of the
/// key (each range gives its rows in the same key order, a row only for a key it holds
/// rows of) reduced again into one, then `skip` rows dropped and at most `limit` kept.
pub(crate) fn reduced_rows_by_keys<E>(
    ranges: Vec<Vec<Value>>,
    keys: &[Value],
    same_key: impl Fn(&Value, &Value) -> std::cmp::Ordering,
    skip: u64,
    limit: Option<u64>,
    mut rereduce: impl FnMut(&[&Value]) -> std::result::Result<Value, E>,
) -> std::result::Result<Vec<Value>, E> {
    let mut heads: Vec<_> = ranges
        .into_iter()
        .map(|r| r.into_iter().peekable())
        .collect();
    let (mut skip, limit) = (skip, limit.unwrap_or(u64::MAX));
    let mut out = Vec::new();
    for key in keys {
        if out.len() as u64 >= limit {
            break;
        }
        let of_key: Vec<Value> = (heads.iter_mut())
            .filter_map(|h| h.next_if(|r| same_key(&r["key"], key).is_eq()))
            .collect();
        let Some(first) = of_key.first() else {
            continue;
        };
        if skip > 0 {
            skip -= 1;
            continue;
        }
        let values: Vec<&Value> = of_key.iter().map(|r| &r["value"]).collect();
        let value = rereduce(&values)?;
        out.push(serde_json::json!({"key": first["key"], "value": value}));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_and_last_compare_key_then_id() {
        let parts = [
            json!(["b", "a", 1]),
            json!(["a", "z", 2]),
            json!([]),
            json!(["a", "y", 3]),
        ];
        let refs: Vec<&Value> = parts.iter().collect();
        assert_eq!(builtin(Builtin::First, false, &refs).unwrap(), json!(3));
        assert_eq!(builtin(Builtin::Last, false, &refs).unwrap(), json!(1));
        // Collation, not bytes: lowercase before uppercase; raw, uppercase first.
        let parts = [json!(["B", "1", "upper"]), json!(["a", "2", "lower"])];
        let refs: Vec<&Value> = parts.iter().collect();
        assert_eq!(
            builtin(Builtin::First, false, &refs).unwrap(),
            json!("lower")
        );
        assert_eq!(
            builtin(Builtin::First, true, &refs).unwrap(),
            json!("upper")
        );
        assert_eq!(
            builtin(Builtin::First, false, &[&json!([])]).unwrap(),
            json!(null)
        );
    }

    #[test]
    fn keys_reduce_key_after_key() {
        let ranges = vec![
            vec![
                json!({"key": "b", "value": 1}),
                json!({"key": "a", "value": 2}),
            ],
            vec![
                json!({"key": "a", "value": 10}),
                json!({"key": "a", "value": 20}),
            ],
        ];
        let keys = [json!("b"), json!("a"), json!("c"), json!("a")];
        let sum = |v: &[&Value]| -> Result<Value> {
            Ok(json!(v.iter().map(|v| v.as_i64().unwrap()).sum::<i64>()))
        };
        let cmp = |a: &Value, b: &Value| settee_core::collate::compare(a, b);
        let rows = reduced_rows_by_keys(ranges.clone(), &keys, cmp, 0, None, sum).unwrap();
        assert_eq!(
            rows,
            [
                json!({"key": "b", "value": 1}),
                json!({"key": "a", "value": 12}),
                json!({"key": "a", "value": 20}),
            ]
        );
        let rows = reduced_rows_by_keys(ranges, &keys, cmp, 1, Some(1), sum).unwrap();
        assert_eq!(rows, [json!({"key": "a", "value": 12})]);
    }

    #[test]
    fn approx_count_distinct_merges_registers_before_counting() {
        let keys: Vec<Value> = (0..40).map(|i| json!(i)).collect();
        let rows = |r: std::ops::Range<usize>| -> Value {
            let kv: Vec<(&Value, &Value)> = keys[r].iter().map(|k| (k, &Value::Null)).collect();
            Builtin::ApproxCountDistinct.reduce(&kv).unwrap()
        };
        // Two ranges overlapping in 10 keys count as the 40 keys in one range do.
        let (a, b) = (rows(0..25), rows(15..40));
        let v = builtin(Builtin::ApproxCountDistinct, false, &[&a, &b]).unwrap();
        let whole = builtin(Builtin::ApproxCountDistinct, false, &[&rows(0..40)]).unwrap();
        assert_eq!(v, whole);
        assert!((38..=42).contains(&v.as_u64().unwrap()), "{v}");
    }
}
