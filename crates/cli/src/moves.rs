//! `settee cluster move` and `settee cluster rebalance`: shard copies moved between the
//! members of a Settee cluster through `POST /_cluster/move` (Settee's own endpoint: a
//! CouchDB cluster moves shards by editing `_dbs` documents), with the move's progress read
//! from `_active_tasks` while it runs. The rebalance plan is a pure function of the
//! running members and the databases' `_shards`.

use crate::client::{enc, Client};
use crate::cluster::{self, ServerArgs};
use crate::{progress, Error};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct MoveArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The database.
    pub db: String,
    /// The range, as `_shards` names it (`00000000-7fffffff`).
    pub range: String,
    /// The node holding the copy now.
    pub from: String,
    /// The node to hold it instead.
    pub to: String,
}

#[derive(clap::Args, Debug)]
pub struct RebalanceArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Print the plan without moving anything.
    #[arg(long)]
    pub dry_run: bool,
}

/// One planned move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub db: String,
    pub range: String,
    pub from: String,
    pub to: String,
}

/// Each database's ranges and the nodes holding each, as `_shards` shows them.
pub type Layout = BTreeMap<String, BTreeMap<String, Vec<String>>>;

pub fn move_copy(args: &MoveArgs) -> Result<(), Error> {
    let client = cluster::server(&args.server)?;
    let step = Step {
        db: args.db.clone(),
        range: args.range.clone(),
        from: args.from.clone(),
        to: args.to.clone(),
    };
    run_move(&client, &step)
}

pub fn rebalance(args: &RebalanceArgs) -> Result<(), Error> {
    let client = cluster::server(&args.server)?;
    let running = cluster::membership(&client)?.0;
    let layout = layout(&client)?;
    let steps = plan(&running, &layout);
    let counts = |l: &Layout| copies_held(&running, l);
    println!("copies held now: {}", show_counts(&counts(&layout)));
    if steps.is_empty() {
        println!("balanced: nothing to move");
        return Ok(());
    }
    println!("plan: {} moves", steps.len());
    for s in &steps {
        println!("  {} {}  {} -> {}", s.db, s.range, s.from, s.to);
    }
    if args.dry_run {
        return Ok(());
    }
    for s in &steps {
        run_move(&client, s)?;
    }
    println!(
        "copies held now: {}",
        show_counts(&counts(&self::layout(&client)?))
    );
    Ok(())
}

/// Every clustered database's `_shards` (a database deleted since it was listed left
/// out). System databases (`_users`, `_replicator`) are whole on every Settee member, not
/// sharded: they are not moved.
fn layout(client: &Client) -> Result<Layout, Error> {
    let dbs: Vec<String> = serde_json::from_value(client.json("GET", "/_all_dbs", None)?)
        .map_err(|e| Error::Format(format!("_all_dbs: {e}")))?;
    let mut out = Layout::new();
    for db in dbs.into_iter().filter(|d| !d.starts_with('_')) {
        let path = format!("/{}/_shards", enc(&db));
        let (status, body) = client.send("GET", &path, None)?;
        if status == 404 {
            continue;
        }
        client.check("GET", &path, status, &body)?;
        let shards: Value =
            serde_json::from_slice(&body).map_err(|e| Error::Format(format!("GET {path}: {e}")))?;
        let ranges = (shards["shards"].as_object().into_iter().flatten())
            .map(|(range, nodes)| {
                let nodes = (nodes.as_array().into_iter().flatten())
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect();
                (range.clone(), nodes)
            })
            .collect();
        out.insert(db, ranges);
    }
    Ok(out)
}

/// The copies each running member holds.
fn copies_held(running: &[String], layout: &Layout) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = running.iter().map(|n| (n.clone(), 0)).collect();
    for nodes in layout.values().flat_map(|r| r.values()) {
        for n in nodes {
            if let Some(c) = counts.get_mut(n) {
                *c += 1;
            }
        }
    }
    counts
}

fn show_counts(counts: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = counts.iter().map(|(n, c)| format!("{n}={c}")).collect();
    parts.join(" ")
}

/// Moves that leave every running member holding about as many copies as any other (at
/// most one apart where the copies allow it): again and again a copy from the member
/// holding most to the one holding fewest that has no copy of that range. Copies on
/// members not running are left where they are. Deterministic: ties go by name.
pub fn plan(running: &[String], layout: &Layout) -> Vec<Step> {
    let mut layout = layout.clone();
    let mut counts = copies_held(running, &layout);
    let mut steps = Vec::new();
    loop {
        let mut by_load: Vec<(&String, &usize)> = counts.iter().collect();
        by_load.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)));
        let found = (by_load.iter().rev()).find_map(|(from, held)| {
            let targets = by_load.iter().filter(|(_, c)| **c + 1 < **held);
            targets.into_iter().find_map(|(to, _)| {
                let copy = (layout.iter()).find_map(|(db, ranges)| {
                    (ranges.iter())
                        .find(|(_, nodes)| nodes.contains(from) && !nodes.contains(to))
                        .map(|(range, _)| (db.clone(), range.clone()))
                });
                copy.map(|(db, range)| Step {
                    db,
                    range,
                    from: (*from).clone(),
                    to: (*to).clone(),
                })
            })
        });
        let Some(step) = found else {
            return steps;
        };
        let nodes = (layout.get_mut(&step.db))
            .and_then(|r| r.get_mut(&step.range))
            .expect("planned from the layout");
        for n in nodes.iter_mut().filter(|n| **n == step.from) {
            n.clone_from(&step.to);
        }
        *counts.get_mut(&step.from).expect("running") -= 1;
        *counts.get_mut(&step.to).expect("running") += 1;
        steps.push(step);
    }
}

/// One move, its progress shown from `_active_tasks` while the member asked runs it.
fn run_move(client: &Client, step: &Step) -> Result<(), Error> {
    let what = format!("{} {} {} -> {}", step.db, step.range, step.from, step.to);
    let body = json!({"db": step.db, "range": step.range, "from": step.from, "to": step.to});
    let mover = client.clone();
    let asked = std::thread::spawn(move || mover.json("POST", "/_cluster/move", Some(&body)));
    let bar = progress::percent("move", &what);
    while !asked.is_finished() {
        if let Ok(tasks) = client.json("GET", "/_active_tasks", None) {
            let mine = (tasks.as_array().into_iter().flatten()).find(|t| {
                t["type"] == "shard_move" && t["database"] == step.db && t["range"] == step.range
            });
            if let Some(t) = mine {
                bar.set_position(t["progress"].as_u64().unwrap_or(0));
                let phase = t["phase"].as_str().unwrap_or("");
                bar.set_message(format!("{what}: {}", phase.replace('_', " ")));
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bar.finish_and_clear();
    let moved = asked
        .join()
        .map_err(|_| Error::Format("the move's request failed".into()))??;
    let nodes: Vec<&str> = (moved["shards"][&step.range]
        .as_array()
        .into_iter()
        .flatten())
    .filter_map(Value::as_str)
    .collect();
    println!("moved {what}; {} is now on {}", step.range, nodes.join(" "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// A database's ranges, each with its nodes.
    type Ranges<'a> = &'a [(&'a str, &'a [&'a str])];

    fn layout(dbs: &[(&str, Ranges<'_>)]) -> Layout {
        (dbs.iter())
            .map(|(db, ranges)| {
                let ranges = (ranges.iter())
                    .map(|(r, n)| (r.to_string(), s(n)))
                    .collect();
                (db.to_string(), ranges)
            })
            .collect()
    }

    #[test]
    fn a_new_member_gets_copies_until_all_hold_about_as_many() {
        let l = layout(&[
            ("a", &[("0-7", &["n1", "n2"]), ("8-f", &["n2", "n3"])]),
            ("b", &[("0-7", &["n3", "n1"]), ("8-f", &["n1", "n2"])]),
        ]);
        let running = s(&["n1", "n2", "n3", "n4"]);
        let steps = plan(&running, &l);
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert!(steps.iter().all(|st| st.to == "n4"));
        // Applied, every member holds two copies and no range has a node twice.
        let mut after = l.clone();
        for st in &steps {
            let nodes = after.get_mut(&st.db).unwrap().get_mut(&st.range).unwrap();
            let i = nodes.iter().position(|n| *n == st.from).unwrap();
            nodes[i] = st.to.clone();
            let mut d = nodes.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), nodes.len());
        }
        assert!(copies_held(&running, &after).values().all(|c| *c == 2));
        assert_eq!(plan(&running, &after), vec![]);
    }

    #[test]
    fn nothing_moves_when_balanced_or_when_no_copy_can() {
        let running = s(&["n1", "n2"]);
        let l = layout(&[("a", &[("0-7", &["n1", "n2"]), ("8-f", &["n2", "n1"])])]);
        assert_eq!(plan(&running, &l), vec![]);
        // n3 is not running: its copies stay, and it gets none.
        let l = layout(&[("a", &[("0-f", &["n1", "n3"])])]);
        assert_eq!(plan(&running, &l), vec![]);
        // n1 holds three, n2 none: one moves, leaving two and one.
        let l = layout(&[
            ("a", &[("0-f", &["n1"])]),
            ("b", &[("0-f", &["n1"])]),
            ("c", &[("0-f", &["n1"])]),
        ]);
        let steps = plan(&running, &l);
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert_eq!((steps[0].db.as_str(), steps[0].to.as_str()), ("a", "n2"));
    }
}
