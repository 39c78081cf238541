//! Views of a clustered database, as CouchDB's `fabric_view_map` and
//! `fabric_view_reduce`: the design document read once through the cluster and given to
//! one copy of every range, which queries its own index of it (built on first use, by
//! the design's signature, as any index); the copies' rows merged in the view's order,
//! reductions of equal keys reduced again here, `skip` and `limit` applied here.
//!
//! Each range is read from the same copy whichever member coordinates: a range's copies
//! in the map's order, turned by the range's number, so the ranges' indexes are built on
//! different members, in parallel, and every coordinator reads the one index built; the
//! other copies build theirs after the query answered ([`crate::builds`]).

use crate::copies::{offset, rows_of, total_rows, update_seq};
use crate::rereduce::{reduced_rows_by_keys, Rereduce};
use crate::{copy_path, enc_id, form_query, merge, Coordinator};
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_core::design::ViewGroupDef;
use settee_node::fabric::Out;
use settee_node::read::{ReadOpts, Rendered};
use settee_node::views::{ViewArgs, GIVEN_DESIGN, GIVEN_PARTIALS};
use settee_node::{Error, Result};
use settee_wire::mrargs::{MrArgs, Update};

/// The parameters every copy is given: the client's, but `skip` (applied here) and
/// `limit` (each copy gives `skip + limit`), `keys` going in the body, and `update_seq`
/// always (where each range's index stands, for [`Coordinator::build_others`]).
fn copy_params(a: &MrArgs) -> Vec<(&'static str, String)> {
    let mut p = Vec::new();
    let json = |v: &Value| v.to_string();
    if let Some(r) = a.reduce {
        p.push(("reduce", r.to_string()));
    }
    if let Some(k) = &a.start_key {
        p.push(("start_key", json(k)));
    }
    if let Some(k) = &a.end_key {
        p.push(("end_key", json(k)));
    }
    if let Some(id) = &a.start_key_docid {
        p.push(("start_key_doc_id", id.clone()));
    }
    if let Some(id) = &a.end_key_docid {
        p.push(("end_key_doc_id", id.clone()));
    }
    if let Some(limit) = a.limit {
        p.push(("limit", limit.saturating_add(a.skip).to_string()));
    }
    if let Some(g) = a.group {
        p.push(("group", g.to_string()));
    }
    if let Some(level) = a.group_level {
        p.push(("group_level", level.to_string()));
    }
    match a.update {
        Update::True => {}
        Update::False => p.push(("update", "false".into())),
        Update::Lazy => p.push(("update", "lazy".into())),
    }
    for (name, on) in [
        ("descending", a.descending),
        ("include_docs", a.include_docs),
        ("attachments", a.attachments),
        ("att_encoding_info", a.att_encoding_info),
        ("update_seq", true),
    ] {
        if on {
            p.push((name, "true".into()));
        }
    }
    if !a.inclusive_end {
        p.push(("inclusive_end", "false".into()));
    }
    if let Some(c) = a.conflicts {
        p.push(("conflicts", c.to_string()));
    }
    p
}

impl Coordinator {
    /// `_design/{ddoc}/_view/{view}` of a clustered database.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn view_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        ddoc: &str,
        view: &str,
        args: MrArgs,
        out: Out<'_>,
    ) -> Result<()> {
        let design = self.design(db, map, user, ddoc)?;
        let def = ViewGroupDef::from_ddoc(&design).map_err(|e| Error::Views(e.into()))?;
        let n = (def.views.iter().position(|v| v.name == view))
            .ok_or_else(|| Error::NotFound("missing_named_view".into()))?;
        // The node's checks of the arguments, before any copy is asked: its errors.
        ViewArgs::for_def(args.clone(), &def, n, map.partitioned, &self.node.config)?;
        // A partition's rows all live in its range (documents are placed by partition):
        // that range's copy answers alone, through its own partition path.
        let partition = args.partition.clone();
        let only = (partition.as_ref()).map(|p| map.copies_of(&format!("{p}:")).range.clone());
        let raw = def.views[n].raw_collation;
        let reducing = def.views[n].reduce.is_some() && args.reduce != Some(false);
        let mut rereduce = if reducing {
            Rereduce::of(&self.node, &def, n)?
        } else {
            None
        };

        let mut body = Map::new();
        body.insert(GIVEN_DESIGN.into(), Value::Object(design));
        if reducing {
            // Partial results, reduced again across ranges and finalized here.
            body.insert(GIVEN_PARTIALS.into(), Value::Bool(true));
        }
        if let Some(keys) = &args.keys {
            body.insert("keys".into(), keys.clone());
        }
        let body = Value::Object(body);
        let path = |range: &str| {
            let under = match &partition {
                Some(p) => format!("/_partition/{}", crate::enc(p)),
                None => String::new(),
            };
            format!(
                "{}{under}/{}/_view/{}",
                copy_path(map, db, range),
                enc_id(&format!("_design/{ddoc}")),
                crate::enc(view),
            )
        };
        let query = form_query(&copy_params(&args));
        let answers = self.each_range_turned(
            map,
            only.as_deref(),
            |r| format!("{}?{query}", path(r)),
            &body,
        )?;
        if args.update != Update::False {
            // The other copies build theirs: no rows, no reduction.
            let build = if def.views[n].reduce.is_some() {
                "limit=0&reduce=false"
            } else {
                "limit=0"
            };
            let index = format!("{db}\0{ddoc}\0{}", body[GIVEN_DESIGN]["_rev"]);
            self.build_others(
                map,
                &index,
                &answers,
                |r| format!("{}?{build}", path(r)),
                || json!({ GIVEN_DESIGN: body[GIVEN_DESIGN] }),
            );
        }

        let cmp_keys = move |a: &Value, b: &Value| {
            if raw {
                settee_core::collate::compare_raw(a, b)
            } else {
                settee_core::collate::compare(a, b)
            }
        };
        let mut head = String::from("{");
        if !reducing {
            let total = total_rows(&answers);
            let offset = offset(&answers, total, args.skip);
            head.push_str(&format!("\"total_rows\":{total},\"offset\":{offset},"));
        }
        if args.update_seq {
            head.push_str(&format!("\"update_seq\":{},", json!(update_seq(&answers))));
        }
        let rows: Vec<Vec<Value>> = answers.into_iter().map(|a| rows_of(a.body)).collect();
        let descending = args.descending;
        let order = move |a: &Value, b: &Value| {
            let o = cmp_keys(&a["key"], &b["key"])
                .then_with(|| id_of(a).as_bytes().cmp(id_of(b).as_bytes()));
            if descending {
                o.reverse()
            } else {
                o
            }
        };
        let rows = match (&mut rereduce, &args.keys) {
            (Some(r), Some(Value::Array(keys))) => {
                let (skip, limit) = (args.skip, args.limit);
                reduced_rows_by_keys(rows, keys, cmp_keys, skip, limit, |v| r.run(v))?
            }
            (Some(r), _) => merge::reduced_rows(rows, order, args.skip, args.limit, |v| r.run(v))?,
            (None, Some(Value::Array(keys))) => {
                merge::rows_in_key_order(rows, keys, cmp_keys, order, args.skip, args.limit)
            }
            (None, _) => merge::merge_sorted(rows, order, args.skip, args.limit),
        };
        crate::send_rows(&head, &rows, out);
        Ok(())
    }

    /// The body of `_design/{ddoc}`, read through the cluster.
    pub(crate) fn design(
        &self,
        db: &str,
        map: &ShardMap,
        user: &UserCtx,
        ddoc: &str,
    ) -> Result<Map<String, Value>> {
        let read = self.read_clustered(
            db,
            map,
            user,
            &format!("_design/{ddoc}"),
            &ReadOpts::default(),
        )?;
        let text = match &read.body {
            Rendered::Json(text) => text,
            Rendered::Multipart { doc, .. } => doc,
        };
        match serde_json::from_slice(text) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(Error::internal("a design document's body")),
        }
    }
}

fn id_of(row: &Value) -> &str {
    row["id"].as_str().unwrap_or_default()
}
