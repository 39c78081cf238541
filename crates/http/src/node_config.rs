//! The node's live configuration, as CouchDB's `/_node/_local/_config` shows it: ini
//! sections layered read-only files first, then `<data-dir>/local.ini`, which is the one
//! file changes are written to. Handlers read it on every request, so a change made through
//! the API takes effect at once for every setting read here.

use ini::Ini;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

pub type Section = BTreeMap<String, String>;
pub type Sections = BTreeMap<String, Section>;

pub struct NodeConfig {
    /// Where changes are persisted (`None`: in memory only, for tests).
    local_path: Option<PathBuf>,
    state: RwLock<State>,
}

struct State {
    /// Values from the read-only files, later files winning.
    base: Sections,
    /// The writable layer, as persisted.
    local: Sections,
    /// Values set for this run only (command-line admins, hashes of plaintext passwords
    /// found in read-only files); they win over both files.
    transient: Sections,
}

impl State {
    fn get(&self, section: &str, key: &str) -> Option<&String> {
        [&self.transient, &self.local, &self.base]
            .into_iter()
            .find_map(|s| s.get(section).and_then(|m| m.get(key)))
    }

    fn merged(&self) -> Sections {
        let mut all = self.base.clone();
        merge(&mut all, self.local.clone());
        merge(&mut all, self.transient.clone());
        all
    }
}

fn read_ini(path: &Path) -> Result<Sections, String> {
    let ini =
        Ini::load_from_file(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(to_sections(&ini))
}

fn to_sections(ini: &Ini) -> Sections {
    let mut out = Sections::new();
    for (name, props) in ini.iter() {
        let Some(name) = name else { continue };
        let section = out.entry(name.to_string()).or_default();
        for (k, v) in props.iter() {
            section.insert(k.to_string(), v.to_string());
        }
    }
    out
}

impl NodeConfig {
    /// Reads `files` (read-only, in order) and then `local` (created when first written).
    pub fn load(files: &[PathBuf], local: PathBuf) -> Result<NodeConfig, String> {
        let mut base = Sections::new();
        for f in files {
            merge(&mut base, read_ini(f)?);
        }
        let local_sections = if local.exists() {
            read_ini(&local)?
        } else {
            Sections::new()
        };
        Ok(NodeConfig {
            local_path: Some(local),
            state: RwLock::new(State {
                base,
                local: local_sections,
                transient: Sections::new(),
            }),
        })
    }

    /// A configuration that is never persisted.
    pub fn in_memory(sections: Sections) -> NodeConfig {
        NodeConfig {
            local_path: None,
            state: RwLock::new(State {
                base: Sections::new(),
                local: sections,
                transient: Sections::new(),
            }),
        }
    }

    pub fn get(&self, section: &str, key: &str) -> Option<String> {
        self.state.read().unwrap().get(section, key).cloned()
    }

    pub fn get_or(&self, section: &str, key: &str, default: &str) -> String {
        self.get(section, key)
            .unwrap_or_else(|| default.to_string())
    }

    /// `true`/`false` values; anything else (or nothing) is `default`.
    pub fn get_bool(&self, section: &str, key: &str, default: bool) -> bool {
        match self.get(section, key).as_deref().map(str::trim) {
            Some("true") => true,
            Some("false") => false,
            _ => default,
        }
    }

    /// Integer values; unparsable ones are `default`.
    pub fn get_u64(&self, section: &str, key: &str, default: u64) -> u64 {
        self.get(section, key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    }

    pub fn section(&self, section: &str) -> Section {
        self.state
            .read()
            .unwrap()
            .merged()
            .remove(section)
            .unwrap_or_default()
    }

    pub fn all(&self) -> Sections {
        self.state.read().unwrap().merged()
    }

    /// Sets a value in the writable layer and persists it; returns the previous value.
    pub fn set(&self, section: &str, key: &str, value: &str) -> Result<Option<String>, String> {
        let mut state = self.state.write().unwrap();
        let old = state.get(section, key).cloned();
        let mut local = state.local.clone();
        local
            .entry(section.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
        self.persist(&local)?;
        state.local = local;
        Ok(old)
    }

    /// Sets a value for this run only, never persisted.
    pub fn set_transient(&self, section: &str, key: &str, value: &str) {
        let mut state = self.state.write().unwrap();
        state
            .transient
            .entry(section.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
    }

    /// Removes a value from the writable layer and persists that; returns the value it had.
    /// (A value that only a read-only file sets cannot be removed.)
    pub fn delete(&self, section: &str, key: &str) -> Result<Option<String>, String> {
        let mut state = self.state.write().unwrap();
        let old = state.get(section, key).cloned();
        let mut local = state.local.clone();
        if let Some(s) = local.get_mut(section) {
            s.remove(key);
            if s.is_empty() {
                local.remove(section);
            }
        }
        self.persist(&local)?;
        state.local = local;
        Ok(old)
    }

    fn persist(&self, local: &Sections) -> Result<(), String> {
        let Some(path) = &self.local_path else {
            return Ok(());
        };
        let mut ini = Ini::new();
        for (name, section) in local {
            for (k, v) in section {
                ini.with_section(Some(name.as_str()))
                    .set(k.as_str(), v.as_str());
            }
        }
        let tmp = path.with_extension("ini.tmp");
        ini.write_to_file(&tmp)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

fn merge(into: &mut Sections, from: Sections) {
    for (name, section) in from {
        into.entry(name).or_default().extend(section);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_and_persistence() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.ini");
        std::fs::write(&base, "[a]\nx = 1\ny = 2\n").unwrap();
        let local = dir.path().join("local.ini");
        std::fs::write(&local, "[a]\ny = 3\n").unwrap();
        let c = NodeConfig::load(std::slice::from_ref(&base), local.clone()).unwrap();
        assert_eq!(c.get("a", "x").as_deref(), Some("1"));
        assert_eq!(c.get("a", "y").as_deref(), Some("3"));
        assert_eq!(c.set("b", "z", "4").unwrap(), None);
        assert_eq!(c.delete("a", "y").unwrap().as_deref(), Some("3"));
        assert_eq!(c.get("a", "y").as_deref(), Some("2"));
        let again = NodeConfig::load(&[base], local).unwrap();
        assert_eq!(again.get("b", "z").as_deref(), Some("4"));
        assert_eq!(again.section("a").len(), 2);
    }
}
