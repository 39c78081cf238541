//! Query strings: `Params::parse`, every typed getter, view-query arguments (`MrArgs` from
//! the query, validated as a map and as a reduce view) and attachment options. Parameters
//! survive being encoded again, and the arguments are the same whether a query string is
//! read alone or applied over an empty POST body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Map;
use settee_wire::mrargs::{MrArgs, ViewType};
use settee_wire::{AttOpts, Params};

fuzz_target!(|data: &[u8]| {
    let Ok(q) = std::str::from_utf8(data) else {
        return;
    };
    let p = Params::parse(Some(q));
    let again = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(p.pairs())
        .finish();
    assert_eq!(Params::parse(Some(&again)), p, "re-encoded as {again:?}");
    for (k, _) in p.pairs() {
        let _ = (p.bool(k), p.flag(k), p.uint(k), p.json(k), p.is_true(k));
    }
    let _ = p.json_any(&["startkey", "start_key"]);
    let _ = AttOpts::from_params(&p);
    let args = MrArgs::from_query(&p);
    for view in [true, false] {
        assert_eq!(args, MrArgs::from_body_and_query(&Map::new(), &p, view));
    }
    // `_all_docs` passes its `keys` beforehand; only `keys` may then differ.
    let keys = p.get("keys").and_then(|k| serde_json::from_str(k).ok());
    if let (Ok(a), Ok(b)) = (&args, MrArgs::from_query_with_keys(keys, &p)) {
        assert_eq!(
            MrArgs {
                keys: None,
                ..a.clone()
            },
            MrArgs { keys: None, ..b }
        );
    }
    if let Ok(mut args) = args {
        for t in [ViewType::Map, ViewType::Red] {
            let _ = args.validate(t);
        }
        let _ = args.for_query_object(&Map::new());
        let _ = settee_wire::mrargs::apply_limit(&mut args.limit, 1000);
        let _ = args.key_list();
    }
});
