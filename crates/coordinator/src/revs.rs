//! `_bulk_get`, `_revs_diff`, `_missing_revs` and `open_revs` on a clustered database: the
//! ids grouped by range, each group asked of its range's copies, the answers given in
//! request order.

use crate::copies::passed_over;
use crate::merge::{self, Reply};
use crate::{block_on, copy_error, copy_path, form_query, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::Rev;
use settee_db::RevsDiff;
use settee_node::read::{ReadOpts, Rendered, Revision};
use settee_node::write::{BulkGetItem, BulkGetOpts};
use settee_node::{Error, Result};
use std::collections::BTreeMap;

impl Coordinator {
    /// `_revs_diff`: each range's ids asked of one of its copies (the next when one does
    /// not answer; as this member, the client being authorized here), as CouchDB's `fabric_doc_missing_revs` takes the first copy's answer
    /// for each id; ids in request order.
    pub(crate) fn revs_diff_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        asked: Vec<(String, Vec<Rev>)>,
    ) -> Result<RevsDiff> {
        let groups = by_range(map, asked.iter().map(|(id, _)| Some(id.as_str())));
        let answers = self.one_copy_per_range(
            map,
            |range| {
                let ids = groups.get(range)?;
                let body: Map<String, Value> = (ids.iter())
                    .map(|i| {
                        let (id, revs) = &asked[*i];
                        let revs: Vec<String> = revs.iter().map(Rev::to_string).collect();
                        (id.clone(), json!(revs))
                    })
                    .collect();
                let path = format!("{}/_revs_diff", copy_path(map, db, range));
                Some(("POST", path, Some(Value::Object(body))))
            },
            None,
        )?;
        let mut found: Map<String, Value> = Map::new();
        for answer in answers {
            if let Value::Object(m) = answer.body {
                found.extend(m);
            }
        }
        let revs = |v: &Value| -> Vec<Rev> {
            (v.as_array().into_iter().flatten())
                .filter_map(|r| r.as_str().and_then(|r| Rev::parse(r).ok()))
                .collect()
        };
        Ok((asked.into_iter())
            .filter_map(|(id, _)| {
                let entry = found.get(&id)?;
                let missing = revs(&entry["missing"]);
                let ancestors = revs(&entry["possible_ancestors"]);
                Some((id, missing, ancestors))
            })
            .collect())
    }

    /// `_bulk_get`: each range's items asked of every copy of the range (with `revs` so
    /// that their histories combine), each item's revisions merged as CouchDB's
    /// `fabric_open_revs` merges the copies' rev trees; items in request order.
    pub(crate) fn bulk_get_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        items: &[Value],
        opts: BulkGetOpts,
        out: &mut dyn FnMut(BulkGetItem) -> bool,
    ) -> Result<()> {
        // `atts_since` travels in the items (a query's is refused, as CouchDB's).
        let mut params = vec![("revs", "true".to_string())];
        for (name, on) in [
            ("latest", opts.latest),
            ("attachments", opts.atts.inline),
            ("att_encoding_info", opts.atts.encoding_info),
        ] {
            if on {
                params.push((name, "true".into()));
            }
        }
        let query = form_query(&params);
        // An item without an id is the first range's to refuse.
        let groups = by_range(map, items.iter().map(|i| i["id"].as_str()));
        let mut answers: Vec<Option<Value>> = vec![None; items.len()];
        let asks = groups.iter().map(|(range, members)| {
            let copies = &map
                .by_range
                .iter()
                .find(|c| c.range == *range)
                .expect("a range")
                .nodes;
            let path = format!("{}/_bulk_get?{query}", copy_path(map, db, range));
            let body = json!({"docs": members.iter().map(|i| &items[*i]).collect::<Vec<_>>()});
            async move {
                let replies = join_all(copies.iter().map(|node| {
                    let (path, body) = (&path, &body);
                    async move { self.ask(node, "POST", path, Some(user), Some(body)).await }
                }))
                .await;
                (members, replies)
            }
        });
        for (members, replies) in block_on(join_all(asks)) {
            let answered: Vec<&Value> = (replies.iter())
                .filter_map(|r| match r {
                    Reply::Answered { status: 200, body } => Some(body),
                    _ => None,
                })
                .collect();
            if answered.is_empty() {
                return Err(no_copy(&replies));
            }
            for (k, i) in members.iter().enumerate() {
                let entries: Vec<&Value> = answered.iter().map(|b| &b["results"][k]).collect();
                let docs = merge::bulk_get_docs(&entries);
                answers[*i] = Some(json!({"id": entries[0]["id"], "docs": docs}));
            }
        }
        for answer in answers {
            let answer = answer.ok_or_else(|| Error::internal("a _bulk_get item unasked"))?;
            if !out(bulk_get_item(answer, opts.revs)) {
                break;
            }
        }
        Ok(())
    }
}

impl Coordinator {
    /// `GET /{db}/{id}?open_revs=…` (as `fabric_open_revs`): every copy of the id's range
    /// asked for the same revisions (with their histories), the revisions any copy found
    /// kept once each — for `all`, the leaves of the merged trees ([`merge::bulk_get_docs`])
    /// — then `{"missing": rev}` for each asked revision no copy has. A multipart client's
    /// revisions with attachments are then each read from one copy with their attachments
    /// as parts ([`Coordinator::read_related`], as the single-document read does), so that
    /// they go as a node sends its own: nested `multipart/related`, content as stored.
    pub(crate) fn open_revs_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        id: &str,
        wanted: &str,
        opts: &ReadOpts,
    ) -> Result<Vec<Revision>> {
        // No meta fields, also in the revisions read with their attachments.
        let opts = &ReadOpts {
            doc: settee_node::read::open_revs_opts(opts.doc.clone()),
            ..opts.clone()
        };
        let d = &opts.doc;
        // A multipart client's attachments come from one copy once the revisions are
        // known; stubs until then.
        let related = opts.multipart;
        let mut params = vec![("open_revs", wanted.to_owned()), ("revs", "true".into())];
        params.extend(crate::atts::since_param(&opts.atts).filter(|_| !related));
        for (name, on) in [
            ("latest", opts.latest),
            ("attachments", opts.atts.inline && !related),
            ("att_encoding_info", opts.atts.encoding_info),
        ] {
            if on {
                params.push((name, "true".into()));
            }
        }
        let query = form_query(&params);
        let copies = Self::doc_copies(map, db, id);
        let replies = block_on(join_all(copies.iter().map(|(node, path)| {
            let target = format!("{path}?{query}");
            async move { self.ask(node, "GET", &target, Some(user), None).await }
        })));
        let answered: Vec<Value> = (replies.iter())
            .filter_map(|r| match r {
                Reply::Answered { status: 200, body } => Some(json!({ "docs": body })),
                _ => None,
            })
            .collect();
        if answered.is_empty() {
            return Err(no_copy(&replies));
        }
        let answered: Vec<&Value> = answered.iter().collect();
        let entries = merge::open_revs_sorted(if wanted == "all" {
            merge::bulk_get_docs(&answered)
        } else {
            merge::open_revs_entries(&answered)
        });
        let reads = (entries.into_iter()).map(|entry| {
            let copies = &copies;
            async move {
                let doc = match open_revs_entry(entry, d.revs) {
                    Ok(doc) => doc,
                    Err(missing) => return Ok(missing),
                };
                let rev = doc["_rev"].as_str().and_then(|r| Rev::parse(r).ok());
                let body = match rev {
                    Some(rev) if related && doc.get("_attachments").is_some() => {
                        self.read_related(copies, user, &rev, opts).await?
                    }
                    _ => Rendered::Json(serde_json::to_vec(&doc).expect("json")),
                };
                Ok(Revision::found(body))
            }
        });
        block_on(join_all(reads)).into_iter().collect()
    }
}

/// A merged `open_revs` entry: the revision found (without the `_revisions` the copies
/// were asked for, unless the client asked too), or the error entry to send as it is
/// (`{"missing": rev}`).
fn open_revs_entry(entry: Value, revs: bool) -> std::result::Result<Value, Revision> {
    let error = |v: &Value| Revision::Json {
        ok: false,
        body: serde_json::to_vec(v).expect("json"),
    };
    match entry {
        Value::Object(mut m) => match m.shift_remove("ok") {
            Some(mut doc) => {
                if let (false, Value::Object(doc)) = (revs, &mut doc) {
                    doc.shift_remove("_revisions");
                }
                Ok(doc)
            }
            None => Err(error(&Value::Object(m))),
        },
        other => Err(error(&other)),
    }
}

/// Positions of `ids` by the range holding each (`None`: the first range's).
fn by_range<'a>(
    map: &ShardMap,
    ids: impl Iterator<Item = Option<&'a str>>,
) -> BTreeMap<String, Vec<usize>> {
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, id) in ids.enumerate() {
        let range = match id {
            Some(id) => map.copies_of(id).range.clone(),
            None => map.by_range[0].range.clone(),
        };
        groups.entry(range).or_default().push(i);
    }
    groups
}

/// The error when no copy of a range answered 200: a copy's refusal when one refused
/// (the client's to hear), else the range is unavailable.
fn no_copy(replies: &[Reply]) -> Error {
    for r in replies {
        if let Reply::Answered { status, body } = r {
            if !passed_over(*status, body) {
                return copy_error(*status, body);
            }
        }
    }
    unavailable(format!("no copy answered: {replies:?}"))
}

/// A merged `{"id","docs"}` entry as the node's item: found revisions (without the
/// `_revisions` the copies were asked for, unless the client asked too), or the error.
fn bulk_get_item(answer: Value, revs: bool) -> BulkGetItem {
    let id = answer["id"].as_str().map(str::to_owned);
    let docs = answer["docs"].as_array().cloned().unwrap_or_default();
    if let Some(e) = docs.iter().find_map(|d| d.get("error")) {
        let error = settee_js::Rejection::Error {
            error: e["error"].as_str().unwrap_or("unknown_error").to_owned(),
            reason: e["reason"].clone(),
        };
        return BulkGetItem {
            id,
            docs: Err((e["rev"].clone(), Error::Rejected(error))),
        };
    }
    let docs = (docs.into_iter())
        .filter_map(|d| match d {
            Value::Object(mut m) => m.shift_remove("ok"),
            _ => None,
        })
        .map(|mut doc| {
            if let (false, Value::Object(m)) = (revs, &mut doc) {
                m.shift_remove("_revisions");
            }
            serde_json::to_vec(&doc).expect("json")
        })
        .collect();
    BulkGetItem { id, docs: Ok(docs) }
}
