//! `_find` bookmarks, which clients hand back verbatim: base64url of a (possibly
//! zlib-compressed) Erlang term. The input is taken both as the bookmark text and as the
//! term's bytes (encoded here, so the fuzzer reaches the term reader). A bookmark that
//! decodes encodes to one that decodes to the same bookmark.
#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use settee_mango::bookmark::Bookmark;

fn check(text: &str) {
    if let Ok(b) = Bookmark::decode(text) {
        let again = b.encode();
        assert_eq!(Bookmark::decode(&again).as_ref().ok(), Some(&b), "{again}");
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check(text);
    }
    check(&URL_SAFE_NO_PAD.encode(data));
});
