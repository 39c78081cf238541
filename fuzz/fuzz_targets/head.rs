//! The request head gate (`settee_wire::head`): whatever a client sends, the gate never
//! panics, gives the same bytes and the same refusal however the input is cut into reads,
//! grows the stream by at most the encoding of its bytes and the version and
//! `Connection: close` each HTTP/0.9 request line gains, and passes its own output
//! through unchanged (so it only ever encodes what hyper would refuse, and its framing does
//! not drift).
#![no_main]

use libfuzzer_sys::fuzz_target;
use settee_wire::head::Gate;

fuzz_target!(|data: &[u8]| {
    // The first byte chooses the read size for the cut run.
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let mut whole = Vec::new();
    let refusal = Gate::new().feed(input, &mut whole);
    let mut gate = Gate::new();
    let mut cut_out = Vec::new();
    let mut cut_refusal = None;
    for piece in input.chunks(usize::from(cut) + 1) {
        if let Some(r) = gate.feed(piece, &mut cut_out) {
            assert!(cut_refusal.is_none(), "one refusal");
            cut_refusal = Some(r);
        }
    }
    assert_eq!(whole, cut_out, "the same bytes however the input is cut");
    assert_eq!(refusal, cut_refusal);
    // Percent-encoding triples a byte; an HTTP/0.9 request line gains at most 28 bytes
    // (` HTTP/1.1` and a `Connection: close` line), and the shortest one (`G /` and a
    // bare line feed) is 4 bytes long.
    assert!(whole.len() <= 3 * input.len() + 28 * (input.len() / 4));
    // Lines short enough that encoding cannot push them over the line limits.
    if refusal.is_none() && input.len() <= 2700 {
        let mut again = Vec::new();
        assert_eq!(Gate::new().feed(&whole, &mut again), None);
        assert_eq!(again, whole, "the gate's output passes it unchanged");
    }
});
