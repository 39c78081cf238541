//! Request paths: CouchDB's `check_url_encoding` and the router's path grammar. Paths whose
//! escapes are well-formed parse or are refused with an error (never a panic), and a
//! database is never named by an empty segment.
#![no_main]

use libfuzzer_sys::fuzz_target;
use settee_wire::path::{check_url_encoding, parse};
use settee_wire::{DbOp, Endpoint};

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let (path, _query) = raw.split_once('?').unwrap_or((raw, ""));
    let checked = check_url_encoding(raw);
    let Ok(endpoint) = parse(path) else {
        return;
    };
    if checked.is_err() {
        return;
    }
    match &endpoint {
        Endpoint::Db(db)
        | Endpoint::DbOp(db, _)
        | Endpoint::Doc(db, _)
        | Endpoint::Attachment(db, _, _)
        | Endpoint::DbBadRequest(db, _)
        | Endpoint::DbUnimplemented(db, _) => assert!(!db.is_empty(), "{endpoint:?}"),
        _ => {}
    }
    if let Endpoint::Doc(_, id) = &endpoint {
        assert!(!id.is_empty(), "{endpoint:?}");
    }
    if let Endpoint::DbOp(_, DbOp::View(ddoc, view)) = &endpoint {
        assert!(!ddoc.is_empty() && !view.is_empty());
    }
    assert_eq!(parse(path).ok(), Some(endpoint), "parsing is deterministic");
});
