//! Reading one document (`GET /{db}/{docid}`) and its revisions (`open_revs`), for a
//! user: `_users` documents filtered for those who are not its admins, `_replicator`
//! credentials hidden, attachments inline or as the parts of a multipart response.

use crate::atts::{AttOpts, AttRender, Part};
use crate::docjson::{doc_json_with, DocOpts};
use crate::{Error, Node, Result};
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_core::Rev;
use settee_db::{Database, DocInfo};

/// How a document is read.
#[derive(Clone, Debug, Default)]
pub struct ReadOpts {
    /// What the JSON carries besides the body (`revs`, `conflicts`, …); the database's
    /// `revs_limit` and the reader are the node's to set.
    pub doc: DocOpts,
    pub atts: AttOpts,
    /// `rev=`: that revision rather than the winner.
    pub rev: Option<Rev>,
    /// `latest=true`: the winner whatever `rev` names (CouchDB's `chttpd_db:db_doc_req`,
    /// since apache/couchdb#3362); with `open_revs`, each revision's newest leaves.
    pub latest: bool,
    /// The client accepts a multipart answer (`multipart/related` for a document,
    /// `multipart/mixed` for `open_revs`): attachments then go as parts.
    pub multipart: bool,
    /// `r`: how many copies must have answered with the winner before the answer (the
    /// others are repaired first). `None`: a majority; one copy always suffices on a
    /// single node.
    pub r: Option<u32>,
}

/// A document read.
#[derive(Debug)]
pub struct Read {
    pub rev: Rev,
    /// The document has meta fields (`conflicts`, `revs_info`, `local_seq`), which change
    /// without its revision changing: CouchDB sends no `ETag` then.
    pub has_meta: bool,
    pub body: Rendered,
}

/// A document's JSON, or its JSON and the attachments to send as parts after it.
#[derive(Debug)]
pub enum Rendered {
    Json(Vec<u8>),
    Multipart { doc: Vec<u8>, parts: Vec<Part> },
}

/// One revision asked for by `open_revs`.
#[derive(Debug)]
pub enum Revision {
    /// A document (`ok`) or a `{"missing": rev}` error, as JSON.
    Json { ok: bool, body: Vec<u8> },
    /// A document with attachments sent as parts (a nested `multipart/related`).
    Related { doc: Vec<u8>, parts: Vec<Part> },
}

impl Revision {
    /// A revision found, as `open_revs` sends it: a nested `multipart/related` when some
    /// attachment's content follows, else its JSON alone — also when every attachment
    /// stays a stub (`atts_since`), as CouchDB's `couch_doc:len_doc_to_multi_part_stream`
    /// answers `application/json` when it has no attachment to send.
    pub fn found(body: Rendered) -> Revision {
        match body {
            Rendered::Multipart { doc, parts } if !parts.is_empty() => {
                Revision::Related { doc, parts }
            }
            Rendered::Multipart { doc, .. } | Rendered::Json(doc) => Revision::Json {
                ok: true,
                body: doc,
            },
        }
    }
}

impl Node {
    /// Reads document `id` of `db` for `user`.
    pub fn read_doc(
        &self,
        db: &Database,
        user: &UserCtx,
        id: &str,
        opts: &ReadOpts,
    ) -> Result<Read> {
        let doc_opts = reader_opts(db, user, &opts.doc);
        let rev = if opts.latest { None } else { opts.rev.as_ref() };
        let mut doc = db.open_doc(id, rev)?;
        let users_view = crate::access::users_reader(&self.config, db, user);
        let since = since_pos(&opts.atts, &doc);
        let multipart = opts
            .multipart
            .then(|| opts.atts.multipart_stubs(&doc.body, since))
            .flatten();
        // Attachment content is read here only for JSON; multipart parts stream later.
        let inline = match &multipart {
            Some(_) => None,
            None => opts.atts.render(db, &doc.body, since)?,
        };
        let body = match users_view {
            // Users reading others' `_users` documents see no attachments at all.
            Some((sec, public)) => {
                let (body, atts) = settee_core::split_stored(&doc.body);
                let atts = atts.map(<[u8]>::to_vec);
                let body: Map<String, Value> = serde_json::from_slice(body).unwrap_or_default();
                let whole = body.len();
                let public: Vec<&str> = public.iter().map(String::as_str).collect();
                let kept = settee_auth::users::filter_read(&doc.id, body, user, &sec, &public)
                    .map_err(|e| match e {
                        settee_auth::users::UsersError::NotFound => {
                            Error::Db(settee_db::Error::NotFound("missing"))
                        }
                        settee_auth::users::UsersError::Denied(d) => d.into(),
                    })?;
                // Only a reader who sees the whole document sees its attachments' stubs.
                let atts = atts.filter(|_| kept.len() == whole);
                doc.body = settee_core::join_stored(
                    &serde_json::to_vec(&kept).expect("json"),
                    atts.as_deref(),
                );
                Rendered::Json(doc_json_with(&doc, &doc_opts, None))
            }
            None => match multipart {
                Some((stubs, parts)) => Rendered::Multipart {
                    doc: doc_json_with(&doc, &doc_opts, Some(stubs)),
                    parts,
                },
                None => Rendered::Json(doc_json_with(&doc, &doc_opts, inline)),
            },
        };
        Ok(Read {
            rev: doc.rev,
            has_meta: doc_opts.has_meta(),
            body,
        })
    }

    /// `open_revs` of document `id` for `user`: the revisions `wanted` names (`all`, or a
    /// JSON list), each a document or a `missing` entry. A multipart client gets every
    /// revision with its attachments (`attachments` is implied; `atts_since` still
    /// applies).
    pub fn open_revs(
        &self,
        db: &Database,
        user: &UserCtx,
        id: &str,
        wanted: &str,
        opts: &ReadOpts,
    ) -> Result<Vec<Revision>> {
        if crate::access::users_reader(&self.config, db, user).is_some() {
            return Err(Error::Forbidden(
                "Only admins can read revisions of other users' documents.".into(),
            ));
        }
        let wanted = parse_open_revs(wanted)?;
        let doc_opts = open_revs_opts(reader_opts(db, user, &opts.doc));
        let mut atts = opts.atts.clone();
        atts.inline |= opts.multipart;
        let wanted = match (wanted, opts.latest) {
            (Some(revs), true) => match db.doc_info(id)? {
                Some(info) => Some(with_latest(&info, revs)),
                None => Some(revs),
            },
            (w, _) => w,
        };
        couch_order(db.open_revs(id, wanted.as_deref())?)
            .iter()
            .map(|(rev, doc)| match doc {
                Some(d) => {
                    let since = since_pos(&atts, d);
                    let multipart = (opts.multipart)
                        .then(|| atts.multipart_stubs(&d.body, since))
                        .flatten();
                    Ok(Revision::found(match multipart {
                        Some((stubs, parts)) => Rendered::Multipart {
                            doc: doc_json_with(d, &doc_opts, Some(stubs)),
                            parts,
                        },
                        None => Rendered::Json(doc_json_with(
                            d,
                            &doc_opts,
                            atts.render(db, &d.body, since)?,
                        )),
                    }))
                }
                None => Ok(Revision::Json {
                    ok: false,
                    body: serde_json::to_vec(&json!({"missing": rev.to_string()})).expect("json"),
                }),
            })
            .collect()
    }
}

/// `open_revs` entries in the order CouchDB answers them (its `fabric_doc_open_revs`
/// sorts the replies it merged, as Erlang terms): the revisions found, by position then
/// id (ids of 32 hex digits as their 16 bytes, as [`Rev`] orders them), then the missing
/// ones in the same order; each revision once.
pub fn couch_order<T>(mut entries: Vec<(Rev, Option<T>)>) -> Vec<(Rev, Option<T>)> {
    entries.sort_by(|(a, x), (b, y)| (x.is_none(), a).cmp(&(y.is_none(), b)));
    entries.dedup_by(|(a, _), (b, _)| a == b);
    entries
}

/// `open_revs`'s value: `all` (`None`) or a JSON list of revisions.
fn parse_open_revs(raw: &str) -> Result<Option<Vec<Rev>>> {
    if raw == "all" {
        return Ok(None);
    }
    let v: Value =
        serde_json::from_str(raw).map_err(|_| Error::bad_request("invalid UTF-8 JSON"))?;
    let list = v
        .as_array()
        .ok_or_else(|| Error::bad_request("Invalid rev format"))?;
    list.iter()
        .map(|r| {
            r.as_str()
                .ok_or_else(|| Error::bad_request("Invalid rev format"))
                .and_then(|s| Ok(Rev::parse(s)?))
        })
        .collect::<Result<_>>()
        .map(Some)
}

/// `opts` with the database's `revs_limit` and the reader whose credentials are hidden.
fn reader_opts(db: &Database, user: &UserCtx, opts: &DocOpts) -> DocOpts {
    DocOpts {
        revs_limit: Some(db.props().revs_limit as usize),
        reader: crate::replicator_read::reader(db, user),
        ..opts.clone()
    }
}

/// What `open_revs` documents carry: their body, `_revisions` and attachments but none
/// of the meta fields (`_conflicts`, `_deleted_conflicts`, `_revs_info`, `_local_seq`),
/// which CouchDB's `couch_db:open_doc_revs` never fills in whatever the options.
pub fn open_revs_opts(opts: DocOpts) -> DocOpts {
    DocOpts {
        conflicts: false,
        deleted_conflicts: false,
        revs_info: false,
        local_seq: false,
        ..opts
    }
}

/// The position up to which `doc`'s attachments stay stubs under `atts_since`: that of
/// the newest revision given in its own history ([`AttOpts::since_pos`]).
pub(crate) fn since_pos(atts: &AttOpts, doc: &settee_db::OpenDoc) -> u64 {
    if atts.since.is_empty() {
        return 0;
    }
    atts.since_pos(&doc.rev, &doc.info.tree.ancestry(&doc.rev))
}

/// Each revision asked for replaced by its newest descendant leaves (kept when it has
/// none), without repeats.
fn with_latest(info: &DocInfo, revs: Vec<Rev>) -> Vec<Rev> {
    let mut out: Vec<Rev> = Vec::new();
    for r in revs {
        let leaves = latest_leaves(info, &r);
        if leaves.is_empty() {
            out.push(r);
        }
        out.extend(
            leaves
                .into_iter()
                .filter(|l| !out.contains(l))
                .collect::<Vec<_>>(),
        );
    }
    out
}

/// Latest leaves descending from `rev` (itself if it is a leaf).
pub(crate) fn latest_leaves(info: &DocInfo, rev: &Rev) -> Vec<Rev> {
    info.tree
        .leaves()
        .into_iter()
        .map(|l| l.rev)
        .filter(|l| {
            l.pos >= rev.pos
                && info.tree.ancestry(l).get((l.pos - rev.pos) as usize) == Some(&rev.id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(s: &str) -> Rev {
        Rev::parse(s).unwrap()
    }

    #[test]
    fn couch_order_found_by_rev_then_missing_once_each() {
        let hex = "93a5f13d4ef2a4d1e83d2bbbc3b57eef";
        let entries = vec![
            (rev("2-zzzz"), Some(1)),
            (rev("1-aaaa"), Some(2)),
            (rev("9-x"), None),
            (rev(&format!("2-{hex}")), Some(3)),
            (rev("2-cccc"), Some(4)),
            (rev("3-nope"), None),
            (rev("2-cccc"), Some(4)),
            (rev("9-x"), None),
        ];
        let order: Vec<String> = (couch_order(entries).iter())
            .map(|(r, _)| r.to_string())
            .collect();
        let want = [
            "1-aaaa".to_string(),
            "2-cccc".into(),
            "2-zzzz".into(),
            format!("2-{hex}"),
            "3-nope".into(),
            "9-x".into(),
        ];
        assert_eq!(order, want);
    }
}
