//! Which copy of a range answers a request that one copy can answer (listings, feeds,
//! views, Mango), and in what order its copies are tried.

use crate::merge::{self, Reply};
use crate::{copy_error, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::Value;
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_node::{Error, Result};

/// One range's copy's answer.
pub(crate) struct RangeAnswer {
    pub range: String,
    pub node: String,
    pub body: Value,
}

/// A request of one copy: its member, method, target and JSON body.
pub(crate) struct Ask {
    pub node: String,
    pub method: &'static str,
    pub target: String,
    pub body: Option<Value>,
}

impl Coordinator {
    /// The first of `asks` (copies of `range`, tried in turn) to answer 200: its member and
    /// body. A copy that is down, fails, or lacks its database is passed over; any other
    /// refusal is the client's answer.
    pub(crate) async fn first_answer(
        &self,
        range: &str,
        asks: Vec<Ask>,
        user: Option<&UserCtx>,
    ) -> Result<(String, Value)> {
        let mut failures = Vec::new();
        // The failure every copy answered with, if each did (a filter function that
        // throws fails on every copy alike): the client's answer.
        let mut common = Some(None);
        // Whether every copy timed out: then the client's answer is `timeout`.
        let mut timed_out = true;
        for a in asks {
            match (self.ask(&a.node, a.method, &a.target, user, a.body.as_ref())).await {
                Reply::Answered { status: 200, body } => return Ok((a.node, body)),
                Reply::Answered { status, body } if !passed_over(status, &body) => {
                    return Err(copy_error(status, &body))
                }
                Reply::Answered { status, body } if status >= 500 && body["error"].is_string() => {
                    failures.push(format!("{}: {status} {body}", a.node));
                    common = common.map(|_| Some((status, body)));
                    timed_out = false;
                }
                Reply::TimedOut(why) => {
                    failures.push(format!("{}: {why}", a.node));
                    common = None;
                }
                other => {
                    timed_out = false;
                    failures.push(format!("{}: {other:?}", a.node));
                    common = None;
                }
            }
        }
        if let Some(Some((status, body))) = common {
            return Err(copy_error(status, &body));
        }
        if timed_out && !failures.is_empty() {
            return Err(Error::PeerTimeout(failures.join("; ")));
        }
        Err(unavailable(format!(
            "no copy of range {range} answered ({})",
            failures.join("; ")
        )))
    }

    /// One answer per range (`only` that one, if any) to `POST target(range)` with `body`,
    /// asked as this member of range `i`'s copies [`turned`] by `i` (where its indexes
    /// are read), as [`Coordinator::first_answer`] takes it.
    pub(crate) fn each_range_turned(
        &self,
        map: &ShardMap,
        only: Option<&str>,
        target: impl Fn(&str) -> String,
        body: &Value,
    ) -> Result<Vec<RangeAnswer>> {
        let ranges =
            (map.by_range.iter().enumerate()).filter(|(_, c)| only.is_none_or(|r| r == c.range));
        let asks = ranges.map(|(i, copies)| {
            let target = target(&copies.range);
            let asks = (turned(&copies.nodes, i).into_iter())
                .map(|node| Ask {
                    node,
                    method: "POST",
                    target: target.clone(),
                    body: Some(body.clone()),
                })
                .collect();
            async move {
                let (node, body) = self.first_answer(&copies.range, asks, None).await?;
                Ok(RangeAnswer {
                    range: copies.range.clone(),
                    node,
                    body,
                })
            }
        });
        crate::block_on(join_all(asks)).into_iter().collect()
    }
}

/// A listing's rows in a copy's answer.
pub(crate) fn rows_of(body: Value) -> Vec<Value> {
    match body {
        Value::Object(mut m) => match m.shift_remove("rows") {
            Some(Value::Array(rows)) => rows,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The clustered sequence of the copies' `update_seq`s, bare, as an index shows it.
pub(crate) fn update_seq(answers: &[RangeAnswer]) -> String {
    let parts: Vec<(&str, &str, &Value)> = (answers.iter())
        .map(|a| (a.range.as_str(), a.node.as_str(), &a.body["update_seq"]))
        .collect();
    merge::clustered_seq(&parts, false)
}

/// The ranges' `total_rows`, summed.
pub(crate) fn total_rows(answers: &[RangeAnswer]) -> u64 {
    (answers.iter())
        .map(|a| a.body["total_rows"].as_u64().unwrap_or(0))
        .sum()
}

/// A listing's `offset` from its copies' (see [`merge::all_docs_offset`]).
pub(crate) fn offset(answers: &[RangeAnswer], total: u64, skip: u64) -> u64 {
    let offsets: Vec<u64> = (answers.iter())
        .map(|a| a.body["offset"].as_u64().unwrap_or(0))
        .collect();
    merge::all_docs_offset(total, &offsets, skip)
}

/// Whether a copy's answer means asking another copy: a failure of its own (5xx), or its
/// database missing (its creation failed; CouchDB would create it on the spot).
pub(crate) fn passed_over(status: u16, body: &Value) -> bool {
    status >= 500 || (status == 404 && body["reason"] == "Database does not exist.")
}

/// A range's copies, this node's first (no network hop), then in the map's order.
pub(crate) fn local_first(nodes: &[String]) -> Vec<String> {
    let me = settee_core::node::name();
    let mut order: Vec<String> = nodes.iter().filter(|n| *n == me).cloned().collect();
    order.extend(nodes.iter().filter(|n| *n != me).cloned());
    order
}

/// Range `i`'s copies in the map's order turned by `i`: where an index of range `i` (a
/// view's, a Mango index's) is read, so that the ranges' indexes are built on different
/// members, in parallel, and every coordinator reads the one index built.
pub(crate) fn turned(nodes: &[String], i: usize) -> Vec<String> {
    let mut order = nodes.to_vec();
    if !order.is_empty() {
        order.rotate_left(i % nodes.len());
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_their_copies_turned_by_their_number() {
        let nodes: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(turned(&nodes, 0), ["a", "b", "c"]);
        assert_eq!(turned(&nodes, 1), ["b", "c", "a"]);
        assert_eq!(turned(&nodes, 5), ["c", "a", "b"]);
        assert!(turned(&[], 3).is_empty());
    }
}
