//! Writes to the databases every member keeps whole (`settee_cluster::EVERYWHERE`:
//! `_users`, `_replicator`) reach every running member before they are answered. A
//! clustered CouchDB's `_users` is a sharded database written at quorum, so a user created
//! through one node logs in through any other at once; Settee's are each member's own,
//! pushed by internal replication, which alone would leave a moment (its round) where
//! another member does not know the user yet.
//!
//! So once this member has written documents of such a database, it sends them, every
//! leaf with its history (as `open_revs=all&revs=true`, attachments inline), to every
//! other running member as a replicated write (`new_edits: false`), at once, and waits for
//! their answers up to [`SPREAD_WAIT`]. A member that does not take them in time is
//! caught up by internal replication as before; the client's answer is this member's.

use crate::merge::Reply;
use crate::Coordinator;
use futures_util::future::join_all;
use serde_json::{json, Value};
use settee_auth::UserCtx;
use settee_cluster::EVERYWHERE;
use settee_node::read::{ReadOpts, Revision};
use settee_node::Fabric;
use std::time::Duration;

/// How long a write waits for the other members to take it.
const SPREAD_WAIT: Duration = Duration::from_secs(5);

impl Coordinator {
    /// Sends documents `ids` of `db`, as this member holds them now, to every other
    /// running member, when `db` is one every member keeps whole and this member is in a
    /// cluster (see the module's documentation).
    pub(crate) async fn spread<'i>(&self, db: &str, ids: impl Iterator<Item = &'i str>) {
        let Some(cluster) = self.node.cluster() else {
            return;
        };
        if !EVERYWHERE.contains(&db) {
            return;
        }
        let me = settee_core::node::name();
        let others: Vec<String> = (cluster.members().into_iter())
            .map(|m| m.name)
            .filter(|n| n != me)
            .collect();
        if others.is_empty() {
            return;
        }
        let ids: Vec<String> = ids.map(str::to_owned).collect();
        let (node, name) = (self.node.clone(), db.to_owned());
        let docs = settee_node::blocking::<_, settee_node::Error>(move || {
            let admin = UserCtx::server_admin();
            let mut opts = ReadOpts::default();
            opts.doc.revs = true;
            opts.atts.inline = true;
            let mut docs = Vec::new();
            for id in &ids {
                for leaf in Fabric::open_revs(&node, &name, &admin, id, "all", &opts)? {
                    if let Revision::Json { ok: true, body } = leaf {
                        docs.push(serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null));
                    }
                }
            }
            Ok(docs)
        })
        .await;
        let docs = match docs {
            Ok(docs) if !docs.is_empty() => docs,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(%db, "reading written documents to send to the members: {e}");
                return;
            }
        };
        let body = json!({"new_edits": false, "docs": docs});
        // The name as it is (`_users`, `_replicator`): members take cluster credentials
        // for these paths (see `settee_http::auth`), not for an encoded one.
        let target = format!("/{db}/_bulk_docs");
        let sends = others.iter().map(|member| {
            let (body, target) = (&body, &target);
            async move {
                let sent = self.ask(member, "POST", target, None, Some(body));
                match tokio::time::timeout(SPREAD_WAIT, sent).await {
                    Ok(Reply::Answered { status: 201, .. }) => {}
                    other => tracing::warn!(%db, %member,
                        answer = ?other.ok(), "a write not taken by a member at once; \
                        internal replication brings it"),
                }
            }
        });
        join_all(sends).await;
    }
}
