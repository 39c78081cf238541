//! URL rewriting by a design document's `rewrites` rules (`/{db}/_design/{ddoc}/_rewrite/…`),
//! as CouchDB 3.5's `chttpd_rewrite` does it, as pure functions: the array of rules
//! (`from`, `to`, `method`, `query`, `formats`) applied to a request's path and query
//! ([`apply_rules`]), and the paths a rewrite function's answer names ([`resolve`]).
//!
//! Rules are tried in order; the first whose method and `from` pattern match wins.
//! `from`/`to` segments are literals, `:name` variables or `*` (the rest of the path).
//! Variables bind from the matched path and from the request's query parameters (`key`,
//! `startkey`, `start_key`, `endkey`, `end_key` and `keys` read as JSON); a rule's `query`
//! values that are `:name` (or lists of them) take the bound value, through `formats`
//! (`int`, `bool`) when given. The new path is `to` with its variables filled in; every
//! binding not used by the rule's query, then the rule's query (in reverse, as CouchDB
//! folds them), become the new query string. The result is resolved against the design
//! document (`/{db}/_design/{ddoc}/` + target, `.` and `..` segments folded), so with
//! `secure_rewrites` a rule may climb at most two levels (to the database).

use serde_json::{Map, Value};

/// Why rules could not rewrite a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewriteError {
    /// No rule matched: CouchDB's `404 not_found` `missing`.
    NoMatch,
    /// A rule without `to`: CouchDB's `500 error` `invalid_rewrite_target`.
    InvalidTarget,
    /// A rule climbing more than two levels with `secure_rewrites` on:
    /// `500 insecure_rewrite_rule` `too many ../.. segments`.
    Insecure,
    /// A JSON-valued query parameter that is not JSON.
    BadJson(String),
}

/// One segment of a `from` or `to` pattern.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Var(String),
    /// `*`
    Rest,
}

struct Rule<'r> {
    method: Option<String>,
    from: Vec<Part>,
    to: Vec<Part>,
    query: Vec<(&'r String, &'r Value)>,
    formats: Option<&'r Map<String, Value>>,
}

/// Query parameters whose values CouchDB's rewriter reads (and writes) as JSON.
fn json_param(name: &str) -> bool {
    matches!(
        name,
        "key" | "startkey" | "start_key" | "endkey" | "end_key" | "keys"
    )
}

/// Applies the array `rules` to a request: `method`, the decoded path segments after
/// `_rewrite`, and its query parameters in order. Returns the path (and query string) the
/// request goes to, relative to the design document and not yet resolved (see [`resolve`]).
pub fn apply_rules(
    rules: &[Value],
    method: &str,
    path: &[String],
    query: &[(String, String)],
    secure: bool,
) -> Result<String, RewriteError> {
    // CouchDB builds every rule before trying any, so one bad rule fails every request.
    let rules = rules
        .iter()
        .filter_map(Value::as_object)
        .map(|r| make_rule(r, secure))
        .collect::<Result<Vec<_>, _>>()?;
    let mut params = Vec::with_capacity(query.len());
    for (k, v) in query {
        let value = if json_param(k) {
            serde_json::from_str(v).map_err(|_| RewriteError::BadJson(v.clone()))?
        } else {
            Value::String(v.clone())
        };
        params.push((k.clone(), value));
    }
    for rule in &rules {
        if rule.method.as_deref().is_some_and(|m| m != method) {
            continue;
        }
        let Some((rest, mut bindings)) = bind_path(&rule.from, path) else {
            continue;
        };
        bindings.extend(params.iter().cloned());
        let rule_query = rule_query(rule, &bindings);
        let mut fin: Vec<(String, Value)> = bindings
            .into_iter()
            .filter(|(k, _)| !rule_query.iter().any(|(q, _)| q == k))
            .collect();
        fin.extend(rule_query);
        let mut parts = Vec::new();
        for part in &rule.to {
            match part {
                Part::Rest => {
                    parts.extend(rest.iter().cloned());
                    break;
                }
                Part::Var(name) => parts.push(
                    lookup(&fin, name)
                        .map(text)
                        .unwrap_or_else(|| "undefined".into()),
                ),
                Part::Literal(s) => parts.push(s.clone()),
            }
        }
        let mut out = parts
            .iter()
            .map(|p| quote_plus(p))
            .collect::<Vec<_>>()
            .join("/");
        // CouchDB folds the bindings into the query string back to front.
        let qs: Vec<String> = fin
            .iter()
            .rev()
            .filter(|(k, _)| k != "*")
            .map(|(k, v)| {
                let v = if json_param(k) {
                    v.to_string()
                } else {
                    text(v)
                };
                format!("{}={}", quote_plus(k), quote_plus(&v))
            })
            .collect();
        if !qs.is_empty() {
            out.push('?');
            out.push_str(&qs.join("&"));
        }
        return Ok(out);
    }
    Err(RewriteError::NoMatch)
}

fn make_rule(rule: &Map<String, Value>, secure: bool) -> Result<Rule<'_>, RewriteError> {
    let to = match rule.get("to") {
        None => return Err(RewriteError::InvalidTarget),
        Some(to) => parse_pattern(&text(to), secure)?,
    };
    let from = match rule.get("from") {
        None => vec![Part::Rest],
        Some(from) => parse_pattern(&text(from), secure)?,
    };
    let method = rule.get("method").map(text).filter(|m| m != "*");
    let query = match rule.get("query") {
        Some(Value::Object(q)) => q.iter().collect(),
        _ => Vec::new(),
    };
    let formats = rule.get("formats").and_then(Value::as_object);
    Ok(Rule {
        method,
        from,
        to,
        query,
        formats,
    })
}

/// Segments of a pattern; empty ones are dropped. A third `..` is refused when `secure`.
fn parse_pattern(pattern: &str, secure: bool) -> Result<Vec<Part>, RewriteError> {
    let mut dotdots = 0;
    let mut parts = Vec::new();
    for seg in pattern.split('/').filter(|s| !s.is_empty()) {
        parts.push(match seg {
            "*" => Part::Rest,
            ".." => {
                if dotdots == 2 && secure {
                    return Err(RewriteError::Insecure);
                }
                dotdots += 1;
                Part::Literal(seg.into())
            }
            _ => match seg.strip_prefix(':') {
                Some(var) => Part::Var(var.into()),
                None => Part::Literal(seg.into()),
            },
        });
    }
    Ok(parts)
}

/// Variables and their values, in the order CouchDB looks them up.
type Bindings = Vec<(String, Value)>;

/// Matches `pattern` against `path`: the unmatched rest (after a final `*`) and the
/// variables bound, the last bound first (as CouchDB accumulates them). A `*` before the
/// end binds one segment to the name `*`, as CouchDB's matcher treats it.
fn bind_path(pattern: &[Part], path: &[String]) -> Option<(Vec<String>, Bindings)> {
    let mut bindings = Vec::new();
    for (i, part) in pattern.iter().enumerate() {
        if *part == Part::Rest && i + 1 == pattern.len() {
            bindings.reverse();
            return Some((path[i..].to_vec(), bindings));
        }
        let seg = path.get(i)?;
        match part {
            Part::Var(name) => bindings.push((name.clone(), Value::String(seg.clone()))),
            Part::Rest => bindings.push(("*".into(), Value::String(seg.clone()))),
            Part::Literal(lit) if lit == seg => {}
            Part::Literal(_) => return None,
        }
    }
    bindings.reverse();
    (pattern.len() == path.len()).then(|| (Vec::new(), bindings))
}

/// The rule's `query` with its variables replaced, last member first.
fn rule_query(rule: &Rule<'_>, bindings: &[(String, Value)]) -> Vec<(String, Value)> {
    let var = |value: &str, name: &str| -> Value {
        let bound = lookup(bindings, name)
            .cloned()
            .unwrap_or_else(|| Value::String(value.into()));
        match rule
            .formats
            .and_then(|f| f.get(name))
            .and_then(Value::as_str)
        {
            Some(format) => apply_format(format, bound),
            None => bound,
        }
    };
    let replace = |v: &Value| -> Value {
        match v {
            Value::String(s) if s == "*" => var(s, s),
            Value::String(s) => match s.strip_prefix(':') {
                Some(name) => var(s, name),
                None => v.clone(),
            },
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(
                        |item| match item.as_str().and_then(|s| s.strip_prefix(':')) {
                            Some(name) => var(item.as_str().unwrap_or_default(), name),
                            None => item.clone(),
                        },
                    )
                    .collect(),
            ),
            other => other.clone(),
        }
    };
    rule.query
        .iter()
        .rev()
        .map(|(k, v)| ((*k).clone(), replace(v)))
        .collect()
}

fn lookup<'b>(bindings: &'b [(String, Value)], name: &str) -> Option<&'b Value> {
    bindings.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// `formats`: `int` and `bool` convert text that reads as such; anything else is kept.
fn apply_format(format: &str, value: Value) -> Value {
    let Value::String(s) = &value else {
        return value;
    };
    match format {
        "int" => s.parse::<i64>().map(Value::from).unwrap_or(value),
        "bool" => match s.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => value,
        },
        _ => value,
    }
}

/// A value as path or query text: strings as they are, a list as its members' texts run
/// together (CouchDB's `iolist_to_binary`), anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(text).collect(),
        other => other.to_string(),
    }
}

/// mochiweb's `quote_plus`: letters, digits and `.-~_` are kept, a space is `+`, every
/// other byte `%XX`.
pub fn quote_plus(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'~' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The absolute path a rewrite target names: `target` (a path with an optional query
/// string) under the design document `/{db}/_design/{ddoc}` (names already URL-encoded),
/// with empty and `.` segments dropped and each `..` removing the segment before it.
pub fn resolve(db: &str, ddoc: &str, target: &str) -> String {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let joined = format!("/{db}/_design/{ddoc}/{path}");
    let mut segs: Vec<&str> = Vec::new();
    for seg in joined.split('/').filter(|s| !s.is_empty()) {
        match seg {
            "." => {}
            ".." if segs.last().is_some_and(|s| *s != "..") => {
                segs.pop();
            }
            _ => segs.push(seg),
        }
    }
    let mut out = format!("/{}", segs.join("/"));
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn rw(
        rules: Value,
        method: &str,
        path: &[&str],
        q: &[(&str, &str)],
    ) -> Result<String, RewriteError> {
        let query: Vec<(String, String)> = q
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        apply_rules(
            rules.as_array().unwrap(),
            method,
            &strings(path),
            &query,
            true,
        )
    }

    #[test]
    fn literal_variable_and_rest_rules() {
        let rules = json!([
            {"from": "foo", "to": "foo.txt"},
            {"from": "hello/:id", "to": "_show/welcome/:id"},
            {"from": "/welcome/*", "to": "_show/welcome/*"},
            {"from": "simpleForm/basicView", "to": "_list/simpleForm/basicView"},
            {"from": "post", "to": "_update/u", "method": "POST"},
            {"from": "*", "to": "../../*"}
        ]);
        assert_eq!(rw(rules.clone(), "GET", &["foo"], &[]).unwrap(), "foo.txt");
        assert_eq!(
            rw(rules.clone(), "GET", &["hello", "a b"], &[]).unwrap(),
            "_show/welcome/a+b?id=a+b"
        );
        assert_eq!(
            rw(rules.clone(), "GET", &["welcome", "x", "y"], &[]).unwrap(),
            "_show/welcome/x/y"
        );
        assert_eq!(
            rw(
                rules.clone(),
                "GET",
                &["simpleForm", "basicView"],
                &[("limit", "2")]
            )
            .unwrap(),
            "_list/simpleForm/basicView?limit=2"
        );
        // The method decides: a GET of `post` falls through to the catch-all.
        assert_eq!(
            rw(rules.clone(), "POST", &["post"], &[]).unwrap(),
            "_update/u"
        );
        assert_eq!(
            rw(rules.clone(), "GET", &["post"], &[]).unwrap(),
            "../../post"
        );
        assert_eq!(rw(rules, "GET", &[], &[]).unwrap(), "../..");
    }

    #[test]
    fn query_variables_json_params_and_formats() {
        let rules = json!([
            {"from": "/by/:type/:n", "to": "_view/v",
             "query": {"key": ":type", "limit": ":n", "descending": ":desc", "k2": [":type", "x"]},
             "formats": {"n": "int", "desc": "bool"}}
        ]);
        let out = rw(
            rules,
            "GET",
            &["by", "cat", "5"],
            &[("desc", "TRUE"), ("startkey", "\"a\"")],
        )
        .unwrap();
        // The rule's query in order, then every other binding, last bound first; a list
        // runs together.
        assert_eq!(
            out,
            "_view/v?key=%22cat%22&limit=5&descending=true&k2=catx&startkey=%22a%22&desc=TRUE&type=cat&n=5"
        );
    }

    #[test]
    fn no_match_bad_target_insecure_and_bad_json() {
        let rules = json!([{"from": "a", "to": "b"}]);
        assert_eq!(
            rw(rules.clone(), "GET", &["c"], &[]),
            Err(RewriteError::NoMatch)
        );
        assert_eq!(
            rw(rules.clone(), "GET", &["a", "b"], &[]),
            Err(RewriteError::NoMatch)
        );
        assert_eq!(
            rw(rules, "GET", &["a"], &[("key", "nope")]),
            Err(RewriteError::BadJson("nope".into()))
        );
        assert_eq!(
            rw(json!([{"from": "a"}]), "GET", &["a"], &[]),
            Err(RewriteError::InvalidTarget)
        );
        assert_eq!(
            rw(
                json!([{"from": "a", "to": "../../../x"}]),
                "GET",
                &["a"],
                &[]
            ),
            Err(RewriteError::Insecure)
        );
        let insecure = json!([{"from": "a", "to": "../../../x"}]);
        let open = apply_rules(
            insecure.as_array().unwrap(),
            "GET",
            &strings(&["a"]),
            &[],
            false,
        );
        assert_eq!(open.unwrap(), "../../../x");
        // Entries that are not objects are skipped.
        assert_eq!(
            rw(json!([1, {"to": "z"}]), "GET", &["q"], &[]).unwrap(),
            "z"
        );
    }

    #[test]
    fn resolves_against_the_design_document() {
        assert_eq!(resolve("db", "d", "_show/x"), "/db/_design/d/_show/x");
        assert_eq!(
            resolve("db", "d", "/_show/x?a=1"),
            "/db/_design/d/_show/x?a=1"
        );
        assert_eq!(resolve("db", "d", "../../_all_docs"), "/db/_all_docs");
        assert_eq!(resolve("db", "d", "../.."), "/db");
        assert_eq!(resolve("db", "d", "./a/./b/../c"), "/db/_design/d/a/c");
        assert_eq!(resolve("db", "d", "../../../../../x"), "/../../x");
        assert_eq!(quote_plus("a b/c~d"), "a+b%2Fc~d");
    }
}
