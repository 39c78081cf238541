//! A clustered database's local documents (`_local/…`: replication checkpoints): placed by
//! their whole id as documents are, kept on every copy of that range and never replicated,
//! so each copy counts its own revisions, as CouchDB's shards do. Writes go to every copy
//! (done when one took it; the newest revision any copy gave is the answer), reads ask
//! every copy and the newest revision wins.

use crate::merge::{self, Reply};
use crate::{copy_error, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::{json, Value};
use settee_cluster::ShardMap;
use settee_db::{LocalDoc, LocalUpdate};
use settee_node::{Error, Result};

/// The `N` of a copy's `0-N` answer.
fn local_rev(v: &Value) -> Option<u64> {
    v.as_str()?.strip_prefix("0-")?.parse().ok()
}

/// The copies' common refusal, or 503 when none answered.
fn refusal(replies: &[Reply]) -> Error {
    match merge::first_refusal(replies) {
        Some((status, body)) => copy_error(status, body),
        None => unavailable("no copy of the local document's range answered".into()),
    }
}

impl Coordinator {
    /// Writes (or deletes) a local document on every copy of its range: its new `N`.
    pub(crate) async fn put_local_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        update: LocalUpdate,
    ) -> Result<u64> {
        let copies = Self::doc_copies(map, db, &update.id);
        let rev = update.rev.map(|n| format!("0-{n}"));
        let (method, query, body) = if update.deleted {
            let query = rev.map(|r| format!("?rev={r}")).unwrap_or_default();
            ("DELETE", query, None)
        } else {
            let mut body: Value = serde_json::from_slice(&update.body)
                .map_err(|e| Error::internal(format!("a local document's body: {e}")))?;
            if let (Some(r), Some(o)) = (rev, body.as_object_mut()) {
                o.insert("_rev".into(), json!(r));
            }
            ("PUT", String::new(), Some(body))
        };
        let replies = join_all(copies.iter().map(|(node, path)| {
            let (target, body) = (format!("{path}{query}"), body.as_ref());
            async move { self.ask(node, method, &target, None, body).await }
        }))
        .await;
        let written = (replies.iter()).filter_map(|r| match r {
            Reply::Answered { status, body } if (200..300).contains(status) => {
                local_rev(&body["rev"])
            }
            _ => None,
        });
        written.max().ok_or_else(|| refusal(&replies))
    }

    /// A local document from the copy with its newest revision.
    pub(crate) async fn open_local_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        id: &str,
    ) -> Result<LocalDoc> {
        let copies = Self::doc_copies(map, db, id);
        let replies =
            join_all((copies.iter()).map(|(node, path)| self.ask(node, "GET", path, None, None)))
                .await;
        let newest = (replies.iter())
            .filter_map(|r| match r {
                Reply::Answered { status: 200, body } => Some((local_rev(&body["_rev"])?, body)),
                _ => None,
            })
            .max_by_key(|(n, _)| *n);
        let Some((rev, body)) = newest else {
            return Err(refusal(&replies));
        };
        let mut body = body.clone();
        if let Some(o) = body.as_object_mut() {
            o.shift_remove("_id");
            o.shift_remove("_rev");
        }
        Ok(LocalDoc {
            id: id.to_string(),
            rev,
            body: body.to_string().into_bytes(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_revisions_are_read_from_their_text() {
        assert_eq!(local_rev(&json!("0-12")), Some(12));
        assert_eq!(local_rev(&json!("1-ab")), None);
        assert_eq!(local_rev(&json!(3)), None);
        let e = refusal(&[Reply::Unreachable("down".into())]);
        assert!(matches!(e, Error::MembersUnavailable(_)), "{e:?}");
    }
}
