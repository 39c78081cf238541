//! The node's attachments on a real RocksDB, through the trait: uploads streamed into the
//! store with their `Content-MD5` checked, read back whole, by range and decompressed,
//! put into revisions and removed from them; and CouchDB's errors for a bad upload, a
//! missing revision, a missing attachment and a deletion without a revision.

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use settee_auth::UserCtx;
use settee_core::Rev;
use settee_node::att_read::Piece;
use settee_node::att_write::{edited, AttUpload, NewAttachment};
use settee_node::{Error, Fabric};

use crate::common;
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

/// An upload of `data` in two chunks.
fn upload(name: &str, content_type: &str, data: &[u8], rev: Option<Rev>) -> AttUpload<'static> {
    let (a, b) = data.split_at(data.len() / 2);
    let chunks = vec![Ok(Bytes::copy_from_slice(a)), Ok(Bytes::copy_from_slice(b))];
    AttUpload {
        name: name.into(),
        content_type: content_type.into(),
        gzipped: false,
        rev,
        content_md5: Some(md5_of(data)),
        w: None,
        body: futures_util::stream::iter(chunks).boxed(),
    }
}

/// `piece` of attachment `name` of `id`'s winner, read through the trait.
fn read(f: &dyn Fabric, id: &str, name: &str, piece: Option<Piece>) -> Vec<u8> {
    tokio::task::block_in_place(|| {
        let att = f.open_attachment("db", id, name, None)?;
        let piece = piece.unwrap_or(Piece::Stored(0..att.stored_length));
        let mut got = Vec::new();
        f.attachment_content("db", &att, piece, &mut |b| {
            got.extend_from_slice(b);
            true
        })?;
        Ok::<_, Error>(got)
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_are_stored_checked_read_and_removed() {
    let f = fixture();
    let user = UserCtx::default();
    let fabric = f.fabric();
    let up = upload("a.bin", TYPE, b"hello world", None);
    let r1 = fabric
        .upload_attachment("db", &user, "d", up)
        .await
        .unwrap()
        .rev
        .unwrap();
    assert_eq!(r1.pos, 1);
    assert_eq!(read(fabric, "d", "a.bin", None), b"hello world");
    let range = Some(Piece::Stored(6..11));
    assert_eq!(read(fabric, "d", "a.bin", range), b"world");
    let att = fabric.open_attachment("db", "d", "a.bin", None).unwrap();
    assert_eq!(
        (att.length, att.gzip, att.content_type.as_str()),
        (11, false, TYPE)
    );
    assert_eq!(att.etag(), format!("\"{}\"", md5_of(b"hello world")));

    // A compressible type is stored gzip-compressed and read back decompressed.
    let text = "settee ".repeat(200);
    let up = upload("b.txt", "text/plain", text.as_bytes(), Some(r1.clone()));
    let r2 = fabric
        .upload_attachment("db", &user, "d", up)
        .await
        .unwrap()
        .rev
        .unwrap();
    assert_eq!(r2.pos, 2);
    let att = fabric.open_attachment("db", "d", "b.txt", None).unwrap();
    assert!(att.gzip && att.stored_length < att.length, "{att:?}");
    assert!(!att.identity_length_unknown());
    let whole = Some(Piece::Decoded {
        skip: 0,
        count: att.length,
    });
    assert_eq!(read(fabric, "d", "b.txt", whole), text.as_bytes());
    let part = Some(Piece::Decoded { skip: 7, count: 6 });
    assert_eq!(read(fabric, "d", "b.txt", part), b"settee");
    // The first attachment stays, and an older revision still has only it.
    assert_eq!(read(fabric, "d", "a.bin", None), b"hello world");
    let old = fabric.open_attachment("db", "d", "b.txt", Some(&r1));
    assert!(matches!(old, Err(Error::Db(settee_db::Error::NotFound(_)))));

    // Removing one makes a revision without it.
    let r3 = fabric.delete_attachment("db", &user, "d", "a.bin", Some(r2.clone()), None);
    assert_eq!(r3.await.unwrap().rev.unwrap().pos, 3);
    let gone = fabric.open_attachment("db", "d", "a.bin", None);
    assert!(matches!(
        gone,
        Err(Error::Db(settee_db::Error::NotFound(_)))
    ));
    assert_eq!(
        read(fabric, "d", "b.txt", None).len() as u64,
        att.stored_length
    );

    // A wrong Content-MD5, a name CouchDB refuses and a broken body write nothing.
    let mut bad = upload("c", TYPE, b"data", Some(r2.clone()));
    bad.content_md5 = Some(md5_of(b"other"));
    let e = fabric.upload_attachment("db", &user, "d", bad).await;
    assert!(matches!(e, Err(Error::ContentMd5Mismatch)));
    let e = (fabric.upload_attachment("db", &user, "d", upload("_c", TYPE, b"x", None))).await;
    assert!(matches!(e, Err(Error::BadRequest(r)) if r.contains("prohibited character")));
    let mut broken = upload("c", TYPE, b"data", Some(r2));
    broken.body = futures_util::stream::iter(vec![Err(Error::bad_request("Incomplete"))]).boxed();
    let e = fabric.upload_attachment("db", &user, "d", broken).await;
    assert!(matches!(e, Err(Error::BadRequest(_))));
    assert_eq!(f.db.open_doc("d", None).unwrap().rev.pos, 3);
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
    let missing = (f.fabric())
        .delete_attachment("db", &user, "d", "nope", Some(r1), None)
        .await
        .unwrap_err();
    assert!(matches!(missing, Error::Db(settee_db::Error::NotFound(_))));
    let norev = (f.fabric())
        .delete_attachment("db", &user, "d", "a", None, None)
        .await
        .unwrap_err();
    assert!(matches!(norev, Error::Db(settee_db::Error::Conflict)));
}
