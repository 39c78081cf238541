//! `_all_docs` and `_design_docs` on a clustered database, as CouchDB's
//! `fabric_view_all_docs`: without `keys`, one copy of every range asked for the same
//! range with `skip=0` and `limit=skip+limit`, their rows merged in id order and `skip`,
//! `limit` applied here; with `keys`, each key asked of its range's copy and the rows given
//! in the keys' order.

use crate::copies::{local_first, offset, rows_of, total_rows, update_seq, Ask, RangeAnswer};
use crate::{copy_path, form_query, merge, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_node::all_docs::{Namespace, Query};
use settee_node::fabric::Out;
use settee_node::Result;

impl Coordinator {
    pub(crate) fn all_docs_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        q: Query,
        ns: Namespace,
        out: Out<'_>,
    ) -> Result<()> {
        let endpoint = match ns {
            Namespace::All => "_all_docs",
            Namespace::Design => "_design_docs",
            Namespace::Local => "_local_docs",
        };
        // A partition's ids are all in one range: its copy's partition `_all_docs`.
        let partition = q.partition.as_deref().map(|p| {
            let range = map.copies_of(&format!("{p}:")).range.clone();
            (range, format!("_partition/{}/_all_docs", crate::enc(p)))
        });
        let endpoint = partition.as_ref().map_or(endpoint, |(_, e)| e.as_str());
        let only = partition.as_ref().map(|(r, _)| r.as_str());
        let (mut head, rows) = match &q.keys {
            None => self.all_docs_range(db, map, user, &q, endpoint, only)?,
            Some(keys) => {
                let keys = settee_node::all_docs::asked_keys(keys, &q, ns);
                self.all_docs_keys(db, map, user, &q, &keys, endpoint, only)?
            }
        };
        if ns == Namespace::Local {
            // Each copy keeps its own local documents; CouchDB counts none of them.
            head = String::from("{\"total_rows\":null,\"offset\":null");
            if q.update_seq {
                head.push_str(",\"update_seq\":null");
            }
        }
        crate::send_rows(&format!("{head},"), &rows, out);
        Ok(())
    }

    /// The rows of an id range: `(head without its rows, rows)`; `only` that range's
    /// (a partition's), which is given `skip` and `limit` as they are.
    fn all_docs_range(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        q: &Query,
        endpoint: &str,
        only: Option<&str>,
    ) -> Result<(String, Vec<Value>)> {
        let mut params = copy_params(q);
        // The range's bounds as ids; an upper bound that is no string (no id is below it)
        // is sent as `null`, which the copies read the same way.
        let (lower, upper) = if q.descending {
            ("end_key", "start_key")
        } else {
            ("start_key", "end_key")
        };
        let (first, last) = if q.descending {
            (&q.end, &q.start)
        } else {
            (&q.start, &q.end)
        };
        if let Some(id) = first {
            params.push((lower, json!(id).to_string()));
        }
        match last {
            _ if q.upper_before_all => params.push((upper, "null".into())),
            Some(id) => params.push((upper, json!(id).to_string())),
            None => {}
        }
        if !q.inclusive_end {
            params.push(("inclusive_end", "false".into()));
        }
        let skip = match only {
            Some(_) => {
                params.push(("skip", q.skip.to_string()));
                params.extend(q.limit.map(|l| ("limit", l.to_string())));
                0
            }
            None => {
                let limit = q.limit.map(|l| l.saturating_add(q.skip));
                params.extend(limit.map(|l| ("limit", l.to_string())));
                q.skip
            }
        };
        let query = form_query(&params);
        let answers = self.one_copy_per_range(
            map,
            |range| {
                let path = format!("{}/{endpoint}?{query}", copy_path(map, db, range));
                only.is_none_or(|r| r == range)
                    .then_some(("GET", path, None))
            },
            Some(user),
        )?;
        let total = total_rows(&answers);
        let offset = match only {
            Some(_) => answers
                .iter()
                .map(|a| a.body["offset"].as_u64().unwrap_or(0))
                .sum(),
            None => offset(&answers, total, q.skip),
        };
        let mut head = format!("{{\"total_rows\":{total},\"offset\":{offset}");
        if q.update_seq {
            head.push_str(&format!(",\"update_seq\":{}", json!(update_seq(&answers))));
        }
        let rows = answers.into_iter().map(|a| rows_of(a.body)).collect();
        let rows = merge::all_docs_rows(rows, q.descending, skip, q.limit);
        Ok((head, rows))
    }

    /// The rows of a list of keys (as [`settee_node::all_docs::asked_keys`] takes them),
    /// each key asked of its range (of range `only`, a partition's, when given).
    #[allow(clippy::too_many_arguments)]
    fn all_docs_keys(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        q: &Query,
        keys: &[Value],
        endpoint: &str,
        only: Option<&str>,
    ) -> Result<(String, Vec<Value>)> {
        // Each key goes to the range of the id a copy reads it as.
        let ranges: Vec<&str> = (map.by_range.iter())
            .map(|c| c.range.as_str())
            .filter(|r| only.is_none_or(|o| o == *r))
            .collect();
        let routes: Vec<usize> = (keys.iter())
            .map(|k| {
                let id = k.as_str().map_or_else(|| k.to_string(), str::to_owned);
                let range = only.unwrap_or(&map.copies_of(&id).range);
                ranges
                    .iter()
                    .position(|r| *r == range)
                    .expect("a range of the map")
            })
            .collect();
        let query = form_query(&copy_params(q));
        let answers = self.one_copy_per_range(
            map,
            |range| {
                let r = ranges.iter().position(|x| *x == range)?;
                let mine: Vec<&Value> = (keys.iter().zip(&routes))
                    .filter(|(_, to)| **to == r)
                    .map(|(k, _)| k)
                    .collect();
                let path = copy_path(map, db, range);
                if mine.is_empty() {
                    // Only its count, for `total_rows`.
                    Some(("GET", format!("{path}/{endpoint}?limit=0"), None))
                } else {
                    let path = format!("{path}/{endpoint}?{query}");
                    Some(("POST", path, Some(json!({ "keys": mine }))))
                }
            },
            Some(user),
        )?;
        let total = total_rows(&answers);
        let mut head = format!("{{\"total_rows\":{total},\"offset\":null");
        if q.update_seq {
            // As CouchDB's coordinator: no sequence with `keys`.
            head.push_str(",\"update_seq\":null");
        }
        let rows = answers.into_iter().map(|a| rows_of(a.body)).collect();
        let rows = merge::rows_by_keys(&routes, rows)
            .ok_or_else(|| unavailable("a copy answered fewer rows than keys".into()))?;
        Ok((head, rows))
    }

    /// Every range's `_design_docs?include_docs=true`, from one copy each (the database's
    /// design documents, whole).
    pub(crate) fn design_docs_of(&self, db: &str, map: &ShardMap) -> Result<Vec<RangeAnswer>> {
        let path = |range: &str| {
            let path = format!(
                "{}/_design_docs?include_docs=true",
                copy_path(map, db, range)
            );
            Some(("GET", path, None))
        };
        self.one_copy_per_range(map, path, None)
    }

    /// One answer per range `ask(range)` names a request for (method, target, body), in
    /// ring order: each range's copies asked in turn, this node's first
    /// ([`Coordinator::first_answer`]).
    pub(crate) fn one_copy_per_range(
        &self,
        map: &ShardMap,
        ask: impl Fn(&str) -> Option<(&'static str, String, Option<Value>)>,
        user: Option<&UserCtx>,
    ) -> Result<Vec<RangeAnswer>> {
        let asks = map.by_range.iter().filter_map(|copies| {
            let (method, target, body) = ask(&copies.range)?;
            let asks = (local_first(&copies.nodes).into_iter())
                .map(|node| Ask {
                    node,
                    method,
                    target: target.clone(),
                    body: body.clone(),
                })
                .collect();
            Some(async move {
                let (node, body) = self.first_answer(&copies.range, asks, user).await?;
                Ok(RangeAnswer {
                    range: copies.range.clone(),
                    node,
                    body,
                })
            })
        });
        crate::block_on(join_all(asks)).into_iter().collect()
    }
}

/// The parameters every copy is given as the client gave them (the range's bounds,
/// `skip` and `limit` aside).
fn copy_params(q: &Query) -> Vec<(&'static str, String)> {
    let mut params = Vec::new();
    for (name, on) in [
        ("descending", q.descending && q.keys.is_none()),
        ("include_docs", q.include_docs),
        ("conflicts", q.opts.conflicts),
        ("attachments", q.atts.inline),
        ("att_encoding_info", q.atts.encoding_info),
        ("update_seq", q.update_seq && q.keys.is_none()),
    ] {
        if on {
            params.push((name, "true".to_string()));
        }
    }
    params
}
