//! A clustered database's maintenance: `_purge` (each id's revisions purged on every copy
//! of its range, merged as CouchDB's `fabric_doc_purge`, an id none of whose copies
//! purged it answered with an error entry of its own), `_revs_limit` and
//! `_purged_infos_limit` (set on every copy, read from one), `_compact`,
//! `_compact/{ddoc}` and `_view_cleanup` (asked of every copy, answered at once as
//! CouchDB casts them), and a design document's `_info` (one copy of each range's index
//! information, combined as `fabric_group_info`).

use crate::copies::{local_first, Ask};
use crate::merge::{self, Reply};
use crate::{copy_error, copy_path, enc, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::Rev;
use settee_node::dbs::Limit;
use settee_node::fabric::Purged;
use settee_node::views::GIVEN_DESIGN;
use settee_node::{Error, Result};
use std::collections::BTreeMap;

/// A limit's endpoint.
fn limit_path(which: Limit) -> &'static str {
    match which {
        Limit::Revs => "_revs_limit",
        Limit::PurgedInfos => "_purged_infos_limit",
    }
}

/// One id's purge from its copies' replies (each copy's purged revisions, or its
/// failure), as `fabric_doc_purge` formats it: every revision any copy purged, once, in
/// order; agreed when at least `w` copies answered and all alike.
pub(crate) fn purged_id(
    replies: &[std::result::Result<Vec<Rev>, Reply>],
    w: usize,
) -> Option<(Vec<Rev>, bool)> {
    let ok: Vec<&Vec<Rev>> = replies.iter().filter_map(|r| r.as_ref().ok()).collect();
    if ok.is_empty() {
        return None;
    }
    let mut all: Vec<Rev> = ok.iter().flat_map(|r| r.iter().cloned()).collect();
    all.sort();
    all.dedup();
    let sorted = |r: &Vec<Rev>| {
        let mut r = r.clone();
        r.sort();
        r.dedup();
        r
    };
    let agreed = ok.len() >= w && ok.iter().all(|r| sorted(r) == sorted(ok[0]));
    Some((all, agreed))
}

/// A design document's index information from one copy of each range (`answers`, each a
/// copy's `_info`), as CouchDB's `fabric_group_info` merges the copies that completed its
/// ring (one per range, the first to answer): pending updates, counts and sizes summed,
/// flags of any copy, the first copy's signature and language. Each range's copy is the
/// one its index is read from, so `minimum`, `preferred` and `total` are that copy's
/// pending updates, summed.
pub(crate) fn group_info(name: &Value, answers: &[&Value]) -> Value {
    let infos: Vec<&Value> = answers.iter().map(|b| &b["view_index"]).collect();
    let pending: u64 = (infos.iter())
        .map(|i| i["updates_pending"]["total"].as_u64().unwrap_or(0))
        .sum();
    let (minimum, preferred, total) = (pending, pending, pending);
    let sum = |k: &str| -> u64 { infos.iter().map(|i| i[k].as_u64().unwrap_or(0)).sum() };
    let any = |k: &str| infos.iter().any(|i| i[k] == true);
    let first = |k: &str| infos.first().map_or(Value::Null, |i| i[k].clone());
    let size = |k: &str| -> u64 {
        (infos.iter())
            .map(|i| i["sizes"][k].as_u64().unwrap_or(0))
            .sum()
    };
    let mut collators: Vec<String> = (infos.iter())
        .flat_map(|i| {
            i["collator_versions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    collators.sort();
    collators.dedup();
    json!({
        "name": name,
        "view_index": {
            "updates_pending": {"minimum": minimum, "preferred": preferred, "total": total},
            "waiting_commit": any("waiting_commit"),
            "waiting_clients": sum("waiting_clients"),
            "updater_running": any("updater_running"),
            "update_seq": sum("update_seq"),
            "sizes": {"file": size("file"), "external": size("external"), "active": size("active")},
            "signature": first("signature"),
            "purge_seq": sum("purge_seq"),
            "language": first("language"),
            "compact_running": any("compact_running"),
            "collator_versions": collators,
        }
    })
}

impl Coordinator {
    /// `_purge` on a clustered database: the node's limits checked here, over the whole
    /// request; each range's ids to every copy of the range at once.
    pub(crate) async fn purge_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        asked: Vec<(String, Vec<Rev>)>,
        w: Option<u32>,
    ) -> Result<Purged> {
        let config = &self.node.config;
        if asked.len() as u64 > config.get_u64("purge", "max_document_id_number", 100) {
            return Err(Error::bad_request("Exceeded maximum number of documents."));
        }
        let revs: usize = asked.iter().map(|(_, r)| r.len()).sum();
        if revs as u64 > config.get_u64("purge", "max_revisions_number", 1000) {
            return Err(Error::bad_request("Exceeded maximum number of revisions."));
        }
        let local = |id: &str| id.starts_with("_local/");
        if map.partitioned
            && (asked.iter())
                .any(|(id, _)| !local(id) && !id.starts_with("_design/") && !id.contains(':'))
        {
            return Err(settee_core::Error::IllegalDocId(
                "Doc id must be of form partition:id".into(),
            )
            .into());
        }
        // Ids by range (local documents have no revisions to purge).
        let mut by_range: BTreeMap<&str, (&[String], Vec<usize>)> = BTreeMap::new();
        for (i, (id, _)) in asked.iter().enumerate() {
            if !local(id) {
                let copies = map.copies_of(id);
                (by_range.entry(&copies.range))
                    .or_insert_with(|| (&copies.nodes, Vec::new()))
                    .1
                    .push(i);
            }
        }
        let ranges = join_all(by_range.iter().map(|(range, (nodes, ids))| {
            let body: Map<String, Value> = (ids.iter())
                .map(|i| {
                    let revs: Vec<String> = asked[*i].1.iter().map(Rev::to_string).collect();
                    (asked[*i].0.clone(), json!(revs))
                })
                .collect();
            let body = bytes::Bytes::from(Value::Object(body).to_string());
            let path = format!("{}/_purge", copy_path(map, db, range));
            let asks = (nodes.iter())
                .map(|n| (n.clone(), "POST", path.clone(), Some(body.clone())))
                .collect();
            let w = merge::quorum_or(w, nodes.len());
            let decided = move |r: &[Option<Reply>]| {
                let ok = (r.iter().flatten())
                    .filter(|r| matches!(r, Reply::Answered { status, .. } if (200..300).contains(status)))
                    .count();
                ok >= w || r.iter().all(Option::is_some)
            };
            self.ask_until(asks, None, decided)
        }))
        .await;
        let mut out: Vec<(String, Vec<Rev>)> = asked
            .iter()
            .map(|(id, _)| (id.clone(), Vec::new()))
            .collect();
        let (mut accepted, mut failed) = (false, BTreeMap::new());
        for ((nodes, ids), replies) in by_range.values().zip(ranges) {
            let replies: Vec<Reply> = replies.into_iter().flatten().collect();
            let w = merge::quorum_or(w, nodes.len());
            for i in ids {
                let id = &asked[*i].0;
                let each: Vec<std::result::Result<Vec<Rev>, Reply>> = (replies.iter())
                    .map(|r| match r {
                        Reply::Answered { status, body } if (200..300).contains(status) => {
                            let revs = body["purged"][id].as_array().cloned().unwrap_or_default();
                            Ok(revs
                                .iter()
                                .filter_map(|r| Rev::parse(r.as_str()?).ok())
                                .collect())
                        }
                        other => Err(other.clone()),
                    })
                    .collect();
                let Some((revs, agreed)) = purged_id(&each, w) else {
                    // A copy's 400 fails the request, as a worker's `bad_request` fails
                    // CouchDB's; any other failure of every copy is this id's own entry
                    // (a worker's exit or node down: `{error, internal_server_error}`).
                    let refusal = merge::first_refusal(&replies).filter(|(s, _)| *s == 400);
                    if let Some((status, body)) = refusal {
                        return Err(copy_error(status, body));
                    }
                    // `timeout` only when every copy timed out, as `fabric_doc_purge`
                    // takes the least of its copies' errors.
                    tracing::warn!(db, id = %id, "no copy purged the id");
                    let all_timed_out = replies.iter().all(|r| matches!(r, Reply::TimedOut(_)));
                    let reason = if all_timed_out {
                        "timeout"
                    } else {
                        "internal_server_error"
                    };
                    failed.insert(*i, ("error".into(), reason.into()));
                    continue;
                };
                accepted |= !agreed;
                out[*i].1 = revs;
            }
        }
        // A purged design document changes what validates writes.
        let purged = out.iter().filter(|(_, revs)| !revs.is_empty());
        self.after_write(db, purged.map(|(id, _)| id.as_str()))
            .await;
        Ok(Purged {
            ids: out,
            accepted,
            failed,
        })
    }

    /// A limit read from one copy (the first range's, this member's first).
    pub(crate) fn get_limit_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        which: Limit,
    ) -> Result<u64> {
        let copies =
            (map.by_range.first()).ok_or_else(|| unavailable(format!("{db} has no ranges")))?;
        let target = format!(
            "{}/{}",
            copy_path(map, db, &copies.range),
            limit_path(which)
        );
        let asks = (local_first(&copies.nodes).into_iter())
            .map(|node| Ask {
                node,
                method: "GET",
                target: target.clone(),
                body: None,
            })
            .collect();
        // Asked outside a blocking thread too (`GET /{db}/_revs_limit`).
        let (_, body) = tokio::task::block_in_place(|| {
            crate::block_on(self.first_answer(&copies.range, asks, None))
        })?;
        body.as_u64()
            .ok_or_else(|| Error::internal(format!("a copy's {}: {body}", limit_path(which))))
    }

    /// A limit set on every copy: done when every copy took it (as `fabric_db_meta`).
    pub(crate) fn set_limit_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        which: Limit,
        n: u64,
    ) -> Result<()> {
        let replies = self.each_copy(db, map, "PUT", limit_path(which), Some(json!(n)));
        for (_, reply) in replies.iter().flatten() {
            match reply {
                Reply::Answered { status: 200, .. } => {}
                Reply::Answered { status, body } => return Err(copy_error(*status, body)),
                Reply::Unreachable(why) => return Err(unavailable(why.clone())),
                Reply::TimedOut(why) => return Err(Error::PeerTimeout(why.clone())),
            }
        }
        Ok(())
    }

    /// `_compact`, `_view_cleanup`: asked of every copy in the background, answered at
    /// once whatever they say (CouchDB casts them to its shards); refusals and silences
    /// are logged.
    pub(crate) fn every_copy_cast(
        &self,
        db: &str,
        map: &ShardMap,
        what: &'static str,
    ) -> Result<()> {
        let asks: Vec<(String, String)> = (map.by_range.iter())
            .flat_map(|c| {
                let path = format!("{}/{what}", copy_path(map, db, &c.range));
                c.nodes.iter().map(move |n| (n.clone(), path.clone()))
            })
            .collect();
        let node = self.node.clone();
        tokio::runtime::Handle::current().spawn(async move {
            let body = Some(bytes::Bytes::from_static(b"{}"));
            let sent = (asks.iter()).map(|(member, path)| {
                let node = &node;
                let body = body.clone();
                async move {
                    let answer = node.peer_json(member, "POST", path, None, body).await;
                    (member, path, crate::reply_of(member, answer))
                }
            });
            for (member, path, reply) in join_all(sent).await {
                if !matches!(
                    reply,
                    Reply::Answered {
                        status: 200..=202,
                        ..
                    }
                ) {
                    tracing::warn!(%member, %path, ?reply, "a shard copy's maintenance");
                }
            }
        });
        Ok(())
    }

    /// `_compact/{ddoc}`: asked of every copy; a design document no copy has is 404.
    pub(crate) fn compact_design_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        ddoc: &str,
    ) -> Result<()> {
        let what = format!("_compact/{}", enc(ddoc));
        let replies = self
            .each_copy(db, map, "POST", &what, Some(json!({})))
            .concat();
        if (replies.iter()).any(|(_, r)| {
            matches!(
                r,
                Reply::Answered {
                    status: 200..=202,
                    ..
                }
            )
        }) {
            return Ok(());
        }
        let replies: Vec<Reply> = replies.into_iter().map(|(_, r)| r).collect();
        match merge::first_refusal(&replies) {
            Some((status, body)) => Err(copy_error(status, body)),
            None => Err(unavailable(format!("no copy of {db} compacted {ddoc}"))),
        }
    }

    /// `GET /{db}/_design/{ddoc}/_info`: one copy's of each range — the one its index is
    /// read from, else the next to answer — combined ([`group_info`]).
    pub(crate) fn design_info_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        ddoc: &str,
    ) -> Result<Value> {
        // The copies are given the design document (a range's copies need not hold it),
        // read as CouchDB's `fabric_group_info` opens it, as an admin.
        let admin = UserCtx::server_admin();
        let design = self.design(db, map, &admin, ddoc)?;
        let what = format!("_design/{}/_info", enc(ddoc));
        let body = json!({ GIVEN_DESIGN: design });
        let target = |range: &str| format!("{}/{what}", copy_path(map, db, range));
        let answers = self.each_range_turned(map, None, target, &body)?;
        let bodies: Vec<&Value> = answers.iter().map(|a| &a.body).collect();
        let name = bodies.first().map_or(Value::Null, |b| b["name"].clone());
        Ok(group_info(&name, &bodies))
    }

    /// `method` of `{copy}/{what}` asked of every copy of every range at once: per range
    /// (in the map's order), each copy's member and reply.
    fn each_copy(
        &self,
        db: &str,
        map: &ShardMap,
        method: &'static str,
        what: &str,
        body: Option<Value>,
    ) -> Vec<Vec<(String, Reply)>> {
        let ranges = map.by_range.iter().map(|c| {
            let path = format!("{}/{what}", copy_path(map, db, &c.range));
            let body = body.as_ref();
            join_all(c.nodes.iter().map(move |n| {
                let path = path.clone();
                async move { (n.clone(), self.ask(n, method, &path, None, body).await) }
            }))
        });
        crate::block_on(join_all(ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(s: &str) -> Rev {
        Rev::parse(s).unwrap()
    }

    #[test]
    fn an_id_purged_is_every_revision_any_copy_purged_agreed_at_the_quorum() {
        let (a, b) = (rev("1-aa"), rev("2-bb"));
        let down = || Err(Reply::Unreachable("down".into()));
        let same = [
            Ok(vec![b.clone(), a.clone()]),
            Ok(vec![a.clone(), b.clone()]),
            down(),
        ];
        assert_eq!(
            purged_id(&same, 2),
            Some((vec![a.clone(), b.clone()], true))
        );
        assert_eq!(
            purged_id(&same, 3),
            Some((vec![a.clone(), b.clone()], false))
        );
        let differ = [Ok(vec![a.clone()]), Ok(vec![a.clone(), b.clone()])];
        assert_eq!(purged_id(&differ, 2), Some((vec![a, b], false)));
        assert_eq!(purged_id(&[down(), down()], 1), None);
    }

    #[test]
    fn index_information_sums_one_copy_of_each_range() {
        let info = |pending: u64, seq: u64, running: bool| {
            json!({"name": "d", "view_index": {
                "updates_pending": {"minimum": pending, "preferred": pending, "total": pending},
                "waiting_commit": false, "waiting_clients": 0, "updater_running": running,
                "update_seq": seq, "sizes": {"file": 10, "external": 2, "active": 3},
                "signature": "abc", "purge_seq": 0, "language": "javascript",
                "compact_running": false, "collator_versions": ["153.112"]}})
        };
        let (a, b, c) = (info(2, 5, false), info(0, 7, true), info(4, 1, false));
        let got = group_info(&json!("d"), &[&a, &b, &c]);
        let v = &got["view_index"];
        assert_eq!(
            v["updates_pending"],
            json!({"minimum": 6, "preferred": 6, "total": 6})
        );
        assert_eq!(
            (v["update_seq"].clone(), v["updater_running"].clone()),
            (json!(13), json!(true))
        );
        assert_eq!(v["sizes"], json!({"file": 30, "external": 6, "active": 9}));
        assert_eq!(v["collator_versions"], json!(["153.112"]));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "updates_pending");
        assert_eq!(keys[10], "collator_versions");
    }
}
