//! `COPY /{db}/{docid}`: a revision's body and attachments written under another id, or
//! a local document's body copied; either to a local document (which keeps no
//! attachments) or to a document, new or at the revision the destination names.

use crate::fabric::Fabric;
use crate::{blocking, Error, Node, Result};
use settee_auth::UserCtx;
use settee_core::{ParsedDoc, Rev};
use settee_db::LocalUpdate;
use std::sync::Arc;

impl Node {
    /// Copies revision `rev` (the winner without one) of document `id` (a local
    /// document's body when `id` is `_local/…`) to `dest` at `dest_rev`, as `user`: the
    /// copy's revision (`0-N` for a local destination).
    pub async fn copy_doc(
        self: &Arc<Self>,
        db: &str,
        user: &UserCtx,
        (id, rev): (&str, Option<Rev>),
        (dest, dest_rev): (&str, Option<Rev>),
    ) -> Result<String> {
        let (node, name, id) = (self.clone(), db.to_string(), id.to_string());
        // The stored bytes carry the source's attachment stubs: a copy keeps them.
        let body = blocking::<_, Error>(move || {
            if id.starts_with("_local/") {
                return Ok(node.open_local(&name, &id)?.body);
            }
            Ok(node.couch.get(&name)?.open_doc(&id, rev.as_ref())?.body)
        })
        .await?;
        if dest.starts_with("_local/") {
            // CouchDB's local-document write throws a bare `{error, …}` for any other
            // generation than 0.
            let rev = match dest_rev {
                None => None,
                Some(r) if r.pos == 0 => Some(crate::write::local_rev_number(&r.to_string())?),
                Some(_) => return Err(Error::Bare("Invalid rev format".into())),
            };
            let update = LocalUpdate {
                id: dest.to_string(),
                rev,
                deleted: false,
                body: settee_core::split_stored(&body).0.to_vec(),
            };
            let n = Fabric::put_local(self, db, update, false).await?;
            return Ok(format!("0-{}", n.unwrap_or_default()));
        }
        let doc = ParsedDoc {
            id: Some(dest.to_string()),
            revs: dest_rev.map(|r| (r.pos, vec![r.id])),
            deleted: false,
            body,
            atts: None,
            body_term: None,
        };
        let written = Fabric::update_doc(self, db, user, doc, Default::default()).await?;
        Ok(written.rev.map(|r| r.to_string()).unwrap_or_default())
    }
}
