//! This node's name, as CouchDB's Erlang node name (`name@host`): shown in `_membership`,
//! `/_node/{name}/…`, `_shards`, `_active_tasks`, the log and update sequences. Set once at
//! startup (`--node-name`, `[settee] node_name`); a node started without one is
//! `nonode@nohost`, as an Erlang node without distribution calls itself.

use std::sync::OnceLock;

pub const DEFAULT_NAME: &str = "nonode@nohost";

static NAME: OnceLock<String> = OnceLock::new();

/// The node's name.
pub fn name() -> &'static str {
    NAME.get().map_or(DEFAULT_NAME, String::as_str)
}

/// Names the node; the first call wins (the name never changes while the node runs).
pub fn set_name(name: &str) -> Result<(), String> {
    check_name(name)?;
    let _ = NAME.set(name.to_string());
    Ok(())
}

/// A name is `name@host`, both parts non-empty, with no `/` (it is a path segment) and no
/// whitespace or control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = match name.split_once('@') {
        Some((n, h)) => {
            !n.is_empty()
                && !h.is_empty()
                && !h.contains('@')
                && !name
                    .chars()
                    .any(|c| c == '/' || c.is_whitespace() || c.is_control())
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("bad node name {name:?}: expected name@host"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("couchdb@127.0.0.1").is_ok());
        assert!(check_name("node1@host.example").is_ok());
        for bad in ["", "x", "@h", "n@", "a@b@c", "a b@h", "a/b@h"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
