//! Which command runs each language, read CouchDB 3's way.

use std::collections::BTreeMap;

/// A query server's command line, split on spaces as CouchDB splits the value of
/// `COUCHDB_QUERY_SERVER_<LANG>` (no shell: no quoting, no variables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub program: String,
    pub args: Vec<String>,
}

impl Command {
    /// `None` for a blank line.
    pub fn parse(line: &str) -> Option<Command> {
        let mut words = line.split_whitespace().map(str::to_owned);
        Some(Command {
            program: words.next()?,
            args: words.collect(),
        })
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.program)?;
        for a in &self.args {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

/// Languages that run in-process, which no external server replaces.
const IN_PROCESS: [&str; 2] = ["javascript", "query"];

/// The configured external languages: lowercase name → command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Languages(pub BTreeMap<String, Command>);

impl Languages {
    /// The environment prefix CouchDB 3 reads: `COUCHDB_QUERY_SERVER_PYTHON=couchpy`
    /// configures `python`.
    pub const ENV_PREFIX: &'static str = "COUCHDB_QUERY_SERVER_";
    /// Erlang-native languages (`COUCHDB_NATIVE_QUERY_SERVER_<LANG>`, `[native_query_servers]`).
    pub const NATIVE_ENV_PREFIX: &'static str = "COUCHDB_NATIVE_QUERY_SERVER_";
    /// Settee's own Python query server (`pip install ./python`), a drop-in for couchpy.
    pub const DEFAULT_PYTHON: &'static str = "settee-query-server";

    /// Languages from, lowest precedence first: the default `python` command (when it is
    /// found on `env`'s `PATH`: otherwise `python` design documents answer
    /// `unknown_query_language`, as on a CouchDB without it), the ini section
    /// `[query_servers]`, the `COUCHDB_QUERY_SERVER_*` variables. `native` is
    /// `[native_query_servers]` plus the `COUCHDB_NATIVE_QUERY_SERVER_*` variables: the
    /// in-process languages need nothing, others are Erlang modules Settee cannot run
    /// and are ignored with a warning. JavaScript and `query` always run in-process.
    pub fn resolve(
        env: impl IntoIterator<Item = (String, String)>,
        ini: &[(String, String)],
        native: &[(String, String)],
    ) -> Languages {
        let mut langs = BTreeMap::new();
        let mut native: Vec<(String, String)> = native.to_vec();
        let mut from_env = Vec::new();
        for (k, v) in env {
            if k == "PATH" && on_path(&v, Self::DEFAULT_PYTHON) {
                if let Some(c) = Command::parse(Self::DEFAULT_PYTHON) {
                    langs.insert("python".to_owned(), c);
                }
            } else if let Some(lang) = k.strip_prefix(Self::NATIVE_ENV_PREFIX) {
                native.push((lang.to_lowercase(), v));
            } else if let Some(lang) = k.strip_prefix(Self::ENV_PREFIX) {
                from_env.push((lang.to_lowercase(), v));
            }
        }
        for (lang, line) in ini.iter().cloned().chain(from_env) {
            let lang = lang.to_lowercase();
            if IN_PROCESS.contains(&lang.as_str()) {
                tracing::info!(language = %lang, command = %line,
                    "query server ignored: Settee runs this language in-process");
                continue;
            }
            match Command::parse(&line) {
                Some(c) => {
                    langs.insert(lang, c);
                }
                None => {
                    langs.remove(&lang);
                }
            }
        }
        for (lang, module) in native {
            let lang = lang.to_lowercase();
            if !IN_PROCESS.contains(&lang.as_str()) {
                tracing::warn!(language = %lang, %module,
                    "native (Erlang) query servers are not supported; language ignored");
            }
        }
        Languages(langs)
    }
}

/// Whether `program` is a file in one of `path`'s directories.
fn on_path(path: &str, program: &str) -> bool {
    std::env::split_paths(path).any(|d| d.join(program).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: &str, b: &str) -> (String, String) {
        (a.into(), b.into())
    }

    #[test]
    fn commands_split_on_spaces() {
        let c = Command::parse(" /usr/bin/python3  /x/couchpy --debug").unwrap();
        assert_eq!(c.program, "/usr/bin/python3");
        assert_eq!(c.args, ["/x/couchpy", "--debug"]);
        assert_eq!(c.to_string(), "/usr/bin/python3 /x/couchpy --debug");
        assert_eq!(Command::parse("   "), None);
    }

    #[test]
    fn env_overrides_ini_overrides_the_default() {
        let langs = Languages::resolve(
            [
                s("COUCHDB_QUERY_SERVER_PYTHON", "couchpy"),
                s("COUCHDB_QUERY_SERVER_JAVASCRIPT", "couchjs main.js"),
                s(
                    "COUCHDB_NATIVE_QUERY_SERVER_ERLANG",
                    "{couch_native_process, start_link, []}",
                ),
                s("HOME", "/root"),
            ],
            &[s("Ruby", "ruby qs.rb"), s("python", "other")],
            &[s("query", "{mango_native_proc, start_link, []}")],
        );
        let names: Vec<&str> = langs.0.keys().map(String::as_str).collect();
        assert_eq!(names, ["python", "ruby"]);
        assert_eq!(langs.0["python"].program, "couchpy");
        assert_eq!(langs.0["ruby"].args, ["qs.rb"]);
        assert!(Languages::resolve([], &[], &[]).0.is_empty());
        let dir = std::env::temp_dir().join(format!("qs-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("settee-query-server"), "").unwrap();
        let path = format!("/nonexistent:{}", dir.display());
        let default = Languages::resolve([s("PATH", &path)], &[], &[]);
        assert_eq!(default.0["python"].program, "settee-query-server");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
