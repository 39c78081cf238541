//! The node's attachment writes on a real RocksDB: uploads streamed into the store with
//! their `Content-MD5` checked, an attachment put into a revision and removed from it,
//! and CouchDB's errors for a missing revision, a missing attachment and a deletion
//! without a revision.

use base64::Engine;
use settee_auth::UserCtx;
use settee_node::att_write::{edited, NewAttachment};
use settee_node::Error;

mod common;
use common::fixture;

const TYPE: &str = "application/octet-stream";

fn att<'a>(name: &str, content: &'a settee_docs::Written) -> NewAttachment<'a> {
    NewAttachment {
        name: name.into(),
        content_type: TYPE,
        content,
    }
}

fn md5_of(data: &[u8]) -> String {
    let digest: [u8; 16] = md5::Digest::finalize({
        let mut h = md5::Md5::default();
        md5::Digest::update(&mut h, data);
        h
    })
    .into();
    base64::engine::general_purpose::STANDARD.encode(digest)
}

fn content(db: &settee_db::Database, id: &str, name: &str) -> Vec<u8> {
    let doc = db.open_doc(id, None).unwrap();
    let chunks = settee_node::atts::stored_content(db, &doc.body, name).unwrap();
    chunks.map(|c| c.unwrap()).collect::<Vec<_>>().concat()
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_are_stored_checked_and_edited_into_revisions() {
    let f = fixture();
    let user = UserCtx::default();
    let mut up = f.node.upload(&f.db, TYPE, false);
    up.write(b"hello ").unwrap();
    up.write(b"world").unwrap();
    let written = up.finish(Some(&md5_of(b"hello world"))).unwrap();
    let base = edited(&f.db, "d", None).await.unwrap();
    let r1 = (f.node)
        .put_attachment(f.db.clone(), &user, "d", base, att("a.bin", &written))
        .await
        .unwrap();
    assert_eq!(r1.pos, 1);
    assert_eq!(content(&f.db, "d", "a.bin"), b"hello world");

    // A second attachment goes into the revision named; the first stays.
    let mut up = f.node.upload(&f.db, TYPE, false);
    up.write(b"two").unwrap();
    let written = up.finish(None).unwrap();
    let base = edited(&f.db, "d", Some(r1.clone())).await.unwrap();
    let r2 = (f.node)
        .put_attachment(f.db.clone(), &user, "d", base, att("b.bin", &written))
        .await
        .unwrap();
    assert_eq!(r2.pos, 2);
    assert_eq!(content(&f.db, "d", "a.bin"), b"hello world");
    assert_eq!(content(&f.db, "d", "b.bin"), b"two");

    // Removing one makes a revision without it.
    let r3 = (f.node)
        .delete_attachment(f.db.clone(), &user, "d", Some(r2.clone()), "a.bin")
        .await
        .unwrap();
    assert_eq!(r3.pos, 3);
    let doc = f.db.open_doc("d", None).unwrap();
    assert!(settee_node::atts::stored_content(&f.db, &doc.body, "a.bin").is_err());
    assert_eq!(content(&f.db, "d", "b.bin"), b"two");
}

#[tokio::test(flavor = "multi_thread")]
async fn attachment_changes_fail_as_couchdb_fails_them() {
    let f = fixture();
    let user = UserCtx::default();
    let mut up = f.node.upload(&f.db, TYPE, false);
    up.write(b"data").unwrap();
    assert!(matches!(
        up.finish(Some(&md5_of(b"other"))),
        Err(Error::ContentMd5Mismatch)
    ));
    let mut up = f.node.upload(&f.db, TYPE, false);
    up.write(b"data").unwrap();
    let written = up.finish(None).unwrap();
    let base = edited(&f.db, "d", None).await.unwrap();
    let r1 = (f.node)
        .put_attachment(f.db.clone(), &user, "d", base, att("a", &written))
        .await
        .unwrap();
    // A revision the document does not have: 409 missing_rev.
    let gone = settee_core::Rev::parse("9-abc").unwrap();
    assert!(matches!(
        edited(&f.db, "d", Some(gone)).await,
        Err(Error::MissingRev)
    ));
    // A new document where a live one exists: a conflict.
    assert!(matches!(
        edited(&f.db, "d", None).await,
        Err(Error::Db(settee_db::Error::Conflict))
    ));
    // Removing what is not there: 404; without a revision: a conflict, once found.
    let missing = (f.node)
        .delete_attachment(f.db.clone(), &user, "d", Some(r1), "nope")
        .await
        .unwrap_err();
    assert!(matches!(missing, Error::Db(settee_db::Error::NotFound(_))));
    let norev = (f.node)
        .delete_attachment(f.db.clone(), &user, "d", None, "a")
        .await
        .unwrap_err();
    assert!(matches!(norev, Error::Db(settee_db::Error::Conflict)));
}
