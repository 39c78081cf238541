//! Documents, rows and sequences as CouchDB renders them.

use serde_json::{json, Value};
use settee_core::{DocJson, Rev, RevTree, SeqCodec};
use settee_db::{Database, DocInfo, OpenDoc};

/// What a document read should include besides the body, and for whom.
#[derive(Clone, Debug, Default)]
pub struct DocOpts {
    pub revs: bool,
    pub revs_info: bool,
    pub conflicts: bool,
    pub deleted_conflicts: bool,
    pub local_seq: bool,
    /// The database's `_revs_limit`: `_revisions` never lists more ids, as CouchDB cuts
    /// every revision path it reads to it (before compaction stems the tree).
    pub revs_limit: Option<usize>,
    /// A reader of a replicator database from whom other users' credentials are hidden
    /// (`replicator_read`).
    pub reader: Option<std::sync::Arc<crate::replicator_read::Reader>>,
}

impl DocOpts {
    /// Whether the body carries fields that can change while the revision does not.
    pub fn has_meta(&self) -> bool {
        self.revs_info || self.conflicts || self.deleted_conflicts || self.local_seq
    }
}

pub fn revs_json(rev: &Rev, tree: &RevTree, limit: Option<usize>) -> Value {
    let ids: Vec<String> = tree
        .ancestry(rev)
        .iter()
        .take(limit.unwrap_or(usize::MAX).max(1))
        .map(|i| i.to_string())
        .collect();
    json!({"start": rev.pos, "ids": ids})
}

fn revs_info_json(rev: &Rev, tree: &RevTree) -> Value {
    let list: Vec<Value> = tree
        .ancestry(rev)
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let r = Rev::new(rev.pos - i as u64, id);
            let status = tree.status(&r).map_or("missing", |s| s.as_str());
            json!({"rev": r.to_string(), "status": status})
        })
        .collect();
    Value::Array(list)
}

/// Non-winning leaves: live ones (`deleted == false`) or deleted ones.
pub fn other_leaves(tree: &RevTree, except: &Rev, deleted: bool) -> Vec<String> {
    tree.leaves()
        .into_iter()
        .filter(|l| l.deleted == deleted && &l.rev != except)
        .map(|l| l.rev.to_string())
        .collect()
}

pub fn doc_json(doc: &OpenDoc, opts: &DocOpts) -> Vec<u8> {
    doc_json_with(doc, opts, None)
}

/// [`doc_json`] with `_attachments` replaced (for attachments rendered inline).
pub fn doc_json_with(doc: &OpenDoc, opts: &DocOpts, atts: Option<Vec<u8>>) -> Vec<u8> {
    match opts
        .reader
        .as_deref()
        .and_then(|r| crate::replicator_read::after_read(doc, r))
    {
        Some(shown) => render_doc(doc, &shown.body, &shown.rev, opts, atts),
        None => render_doc(doc, &doc.body, &doc.rev, opts, atts),
    }
}

/// A document's JSON with `body` and the revision `shown` (the stored ones, or those
/// CouchDB's `after_doc_read` made up); metadata comes from the stored revision.
fn render_doc(
    doc: &OpenDoc,
    body: &[u8],
    shown: &Rev,
    opts: &DocOpts,
    atts: Option<Vec<u8>>,
) -> Vec<u8> {
    let mut j = DocJson::new(&doc.id, Some(&shown.to_string()), body);
    if atts.is_some() {
        j.set_attachments(atts);
    }
    if doc.deleted {
        j.member("_deleted", &Value::Bool(true));
    }
    let tree = &doc.info.tree;
    if opts.revs {
        let mut revs = revs_json(&doc.rev, tree, opts.revs_limit);
        if shown != &doc.rev {
            revs["ids"][0] = json!(shown.id.to_string());
        }
        j.member("_revisions", &revs);
    }
    if opts.revs_info {
        j.member("_revs_info", &revs_info_json(&doc.rev, tree));
    }
    if opts.local_seq {
        j.member("_local_seq", &json!(doc.info.seq));
    }
    if opts.conflicts {
        let c = other_leaves(tree, &doc.rev, false);
        if !c.is_empty() {
            j.member("_conflicts", &json!(c));
        }
    }
    if opts.deleted_conflicts {
        let c = other_leaves(tree, &doc.rev, true);
        if !c.is_empty() {
            j.member("_deleted_conflicts", &json!(c));
        }
    }
    j.finish()
}

/// The winning revision of a stored document (for `include_docs` rows), with `_attachments`
/// replaced when `atts` is given (attachments rendered inline).
pub fn winner_json_with(
    id: &str,
    info: &DocInfo,
    body: &[u8],
    opts: &DocOpts,
    atts: Option<Vec<u8>>,
) -> Vec<u8> {
    let w = info.tree.winner().expect("stored docs have a winner");
    let doc = OpenDoc {
        id: id.to_string(),
        rev: w.rev,
        deleted: w.deleted,
        body: body.to_vec(),
        info: info.clone(),
    };
    doc_json_with(&doc, opts, atts)
}

/// Appends `,"doc":<doc>` (or `null`) to a rendered JSON object.
pub fn with_doc(mut row: Vec<u8>, doc: Option<Vec<u8>>) -> Vec<u8> {
    row.pop();
    row.extend_from_slice(b",\"doc\":");
    row.extend_from_slice(doc.as_deref().unwrap_or(b"null"));
    row.push(b'}');
    row
}

/// How `db`'s update sequences are written and read on this node.
pub fn seqs(db: &Database) -> SeqCodec {
    db.seq_codec(settee_core::node::name())
}

/// A local document as CouchDB renders it (`_rev` is `0-N`).
pub fn local_json(d: &settee_db::LocalDoc) -> Vec<u8> {
    DocJson::new(&d.id, Some(&format!("0-{}", d.rev)), &d.body).finish()
}

/// A rendered or stored document parsed (stored text is valid JSON; failing that is an
/// internal error).
pub fn parse_json(text: &[u8]) -> crate::Result<Value> {
    serde_json::from_slice(text).map_err(|_| crate::Error::internal("stored body"))
}
