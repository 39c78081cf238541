//! Shard maps (CouchDB's `mem3` shard documents): which nodes hold a copy of each range of
//! a database. Pure: planning a new map is a function of `q`, `n`, the nodes and where the
//! rotation of the node list starts, so it is tested without etcd.

use serde::{Deserialize, Serialize};
use settee_core::shards;
use std::collections::BTreeMap;

/// The format of a stored map; a node refuses a map of another version.
pub const MAP_VERSION: u32 = 1;

/// Where a database's documents live: `q` ranges of the hash ring, each on `n` nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    pub version: u32,
    pub q: u32,
    pub n: u32,
    /// CouchDB's `placement` option as given (`zone:n,zone:n`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    #[serde(default)]
    pub partitioned: bool,
    /// Tells this database apart from an earlier or later one of the same name (and one
    /// creation from another).
    pub uuid: String,
    /// The copies of each range, ranges in ring order, nodes in the order chosen.
    pub by_range: Vec<Copies>,
    /// When the database was created (unix seconds): the suffix of its copies' names.
    #[serde(default)]
    pub created: u64,
}

/// The nodes holding one range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copies {
    /// `00000000-7fffffff`, as CouchDB names ranges.
    pub range: String,
    pub nodes: Vec<String>,
}

/// A node of the membership list, as planning sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    /// The node document's `zone`, for `placement`.
    pub zone: Option<String>,
}

/// Why a map cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No node may hold copies (CouchDB fails the creation then too).
    #[error("no nodes are available to hold the database's shards")]
    NoNodes,
    /// A `placement` zone with no node in it (CouchDB's `no_nodes_in_zone`).
    #[error("no nodes in zone {0}")]
    NoNodesInZone(String),
    /// A `placement` string that is not `zone:n[,zone:n…]` with `n` ≥ 1.
    #[error("invalid placement {0:?}")]
    BadPlacement(String),
    /// `q` must be at least 1.
    #[error("q must be a positive integer")]
    BadQ,
    /// An edit of a range the map does not have.
    #[error("the database has no range {0}")]
    UnknownRange(String),
    /// An edit that would leave a range without a node, or name one twice.
    #[error("{0}")]
    BadNodes(String),
}

/// Parses `placement` (`metro-dc-a:2,metro-dc-b:1`) into (zone, copies) pairs.
pub fn parse_placement(s: &str) -> Result<Vec<(String, u32)>, PlanError> {
    let bad = || PlanError::BadPlacement(s.to_owned());
    s.split(',')
        .map(|part| {
            let (zone, n) = part.split_once(':').ok_or_else(bad)?;
            let n: u32 = n.trim().parse().map_err(|_| bad())?;
            if zone.trim().is_empty() || n == 0 {
                return Err(bad());
            }
            Ok((zone.trim().to_owned(), n))
        })
        .collect()
}

/// Plans a new database's map as CouchDB's `mem3:choose_shards` does: each range is
/// repeated `n` times and the copies dealt in turn to the nodes (sorted by name, then
/// rotated to start at `rotate`, which CouchDB picks at random so databases spread evenly).
/// `n` is at most the number of nodes. With `placement`, each zone gets its own number of
/// copies of every range, dealt among the nodes of that zone.
pub fn plan(
    q: u32,
    n: u32,
    placement: Option<&str>,
    partitioned: bool,
    nodes: &[Candidate],
    rotate: usize,
    uuid: &str,
) -> Result<ShardMap, PlanError> {
    if q == 0 {
        return Err(PlanError::BadQ);
    }
    let ranges = shards::ranges(q);
    let mut by_range: Vec<Vec<String>> = vec![Vec::new(); ranges.len()];
    let groups: Vec<(Vec<&Candidate>, u32)> = match placement {
        None => vec![(nodes.iter().collect(), n)],
        Some(p) => parse_placement(p)?
            .into_iter()
            .map(|(zone, copies)| {
                let in_zone: Vec<&Candidate> = nodes
                    .iter()
                    .filter(|c| c.zone.as_deref() == Some(zone.as_str()))
                    .collect();
                if in_zone.is_empty() {
                    Err(PlanError::NoNodesInZone(zone))
                } else {
                    Ok((in_zone, copies))
                }
            })
            .collect::<Result<_, _>>()?,
    };
    for (mut group, copies) in groups {
        if group.is_empty() {
            return Err(PlanError::NoNodes);
        }
        group.sort_by(|a, b| a.name.cmp(&b.name));
        group.dedup_by(|a, b| a.name == b.name);
        let len = group.len();
        group.rotate_left(rotate % len);
        let copies = (copies.max(1) as usize).min(group.len());
        let mut deal = group.iter().cycle();
        for nodes in by_range.iter_mut() {
            for _ in 0..copies {
                nodes.push(deal.next().expect("cycle").name.clone());
            }
        }
    }
    let n = by_range.first().map_or(0, |c| c.len() as u32);
    Ok(ShardMap {
        version: MAP_VERSION,
        q,
        n,
        placement: placement.map(str::to_owned),
        partitioned,
        uuid: uuid.to_owned(),
        by_range: ranges
            .into_iter()
            .zip(by_range)
            .map(|(r, nodes)| Copies {
                range: shards::range_name(r),
                nodes,
            })
            .collect(),
        created: 0,
    })
}

impl ShardMap {
    /// The database name of `db`'s copy of `range` (`shards/{range}/{db}.{created}`).
    pub fn copy_name(&self, db: &str, range: &str) -> String {
        settee_core::shard_name(range, db, self.created)
    }

    /// The copies of the range holding document `id` (ranges by their names: a split
    /// leaves them of unequal widths).
    pub fn copies_of(&self, id: &str) -> &Copies {
        self.copies_finder()(id)
    }

    /// [`Self::copies_of`] for many documents: the ranges' names read once.
    pub fn copies_finder<'a>(&'a self) -> impl Fn(&str) -> &'a Copies + 'a {
        let bounds: Vec<(u32, u32)> = (self.by_range.iter())
            .map(|c| shards::parse_range(&c.range).unwrap_or((1, 0)))
            .collect();
        move |id| {
            let h = shards::hash(id, self.partitioned);
            let i = (bounds.iter())
                .position(|(s, e)| (s..=e).contains(&&h))
                .expect("the ranges cover the ring");
            &self.by_range[i]
        }
    }

    /// This map with `range` replaced by its two halves ([`shards::split_range`]), each
    /// held by the nodes that held `range`; `q` counts the ranges then, as CouchDB's does.
    pub fn with_range_split(&self, range: &str) -> Result<ShardMap, PlanError> {
        let i = (self.by_range.iter())
            .position(|c| c.range == range)
            .ok_or_else(|| PlanError::UnknownRange(range.to_owned()))?;
        let halves = (shards::parse_range(range))
            .and_then(shards::split_range)
            .ok_or_else(|| PlanError::BadNodes(format!("range {range} cannot be split")))?;
        let mut edited = self.clone();
        let nodes = edited.by_range[i].nodes.clone();
        edited.by_range.splice(
            i..=i,
            halves.map(|h| Copies {
                range: shards::range_name(h),
                nodes: nodes.clone(),
            }),
        );
        edited.q = edited.by_range.len() as u32;
        Ok(edited)
    }

    /// Each node's ranges (CouchDB's `by_node`), nodes by name.
    pub fn by_node(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for c in &self.by_range {
            for node in &c.nodes {
                out.entry(node.as_str()).or_default().push(c.range.as_str());
            }
        }
        out
    }

    /// This map with `range` held by `nodes` (in that order), all else unchanged (`n` stays
    /// the database's: a range holds one copy more while a copy moves).
    pub fn with_range_nodes(&self, range: &str, nodes: Vec<String>) -> Result<ShardMap, PlanError> {
        if nodes.is_empty() {
            return Err(PlanError::BadNodes(format!("range {range} needs a node")));
        }
        if let Some(twice) =
            (nodes.iter().enumerate()).find_map(|(i, n)| nodes[..i].contains(n).then_some(n))
        {
            return Err(PlanError::BadNodes(format!(
                "{twice} would hold range {range} twice"
            )));
        }
        let mut edited = self.clone();
        let copies = (edited.by_range.iter_mut())
            .find(|c| c.range == range)
            .ok_or_else(|| PlanError::UnknownRange(range.to_owned()))?;
        copies.nodes = nodes;
        Ok(edited)
    }

    /// Whether `node` holds any copy.
    pub fn holds(&self, node: &str) -> bool {
        self.by_range
            .iter()
            .any(|c| c.nodes.iter().any(|n| n == node))
    }
}

/// The id CouchDB gives the job splitting shard copy `copy` on `node` (`mem3_reshard`'s
/// `job_id`): `001-` and the hex SHA-256 of the copy's name followed by the node's.
pub fn split_job_id(copy: &str, node: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(copy.as_bytes())
        .chain_update(node.as_bytes())
        .finalize();
    format!("001-{}", hex::encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> Vec<Candidate> {
        names
            .iter()
            .map(|n| Candidate {
                name: n.to_string(),
                zone: None,
            })
            .collect()
    }

    fn layout(m: &ShardMap) -> Vec<(String, Vec<String>)> {
        m.by_range
            .iter()
            .map(|c| (c.range.clone(), c.nodes.clone()))
            .collect()
    }

    #[test]
    fn copies_are_dealt_in_turn_as_mem3_does() {
        let m = plan(
            2,
            3,
            None,
            false,
            &nodes(&["c@h", "a@h", "b@h", "d@h"]),
            0,
            "u",
        )
        .unwrap();
        assert_eq!(m.n, 3);
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            layout(&m),
            [
                ("00000000-7fffffff".into(), s(&["a@h", "b@h", "c@h"])),
                ("80000000-ffffffff".into(), s(&["d@h", "a@h", "b@h"])),
            ]
        );
        let rotated = plan(
            2,
            3,
            None,
            false,
            &nodes(&["a@h", "b@h", "c@h", "d@h"]),
            1,
            "u",
        )
        .unwrap();
        assert_eq!(rotated.by_range[0].nodes, s(&["b@h", "c@h", "d@h"]));
        assert_eq!(
            rotated.by_node().keys().copied().collect::<Vec<_>>(),
            ["a@h", "b@h", "c@h", "d@h"]
        );
    }

    #[test]
    fn n_is_capped_by_the_nodes_and_every_range_has_distinct_copies() {
        for count in 1..6 {
            let names: Vec<String> = (0..count).map(|i| format!("n{i}@h")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            for q in 1..9 {
                for rotate in 0..count {
                    let m = plan(q, 3, None, false, &nodes(&refs), rotate, "u").unwrap();
                    assert_eq!(m.by_range.len(), q as usize);
                    for c in &m.by_range {
                        let mut d = c.nodes.clone();
                        d.sort();
                        d.dedup();
                        assert_eq!(d.len(), 3.min(count), "{c:?}");
                    }
                }
            }
        }
        assert_eq!(
            plan(2, 3, None, false, &[], 0, "u"),
            Err(PlanError::NoNodes)
        );
        assert_eq!(
            plan(0, 3, None, false, &nodes(&["a@h"]), 0, "u"),
            Err(PlanError::BadQ)
        );
    }

    #[test]
    fn split_jobs_are_named_as_couchdb_names_them() {
        // As CouchDB 3.5.2 named its job splitting this copy on this node.
        assert_eq!(
            split_job_id(
                "shards/00000000-ffffffff/rdb.1795993950",
                "couchdb-5995@127.0.0.1"
            ),
            "001-e632ff3e01086409ef4f7d6465a1cf61b8d98416c32875af10d7fd09a86ea3d0"
        );
    }

    #[test]
    fn a_split_range_becomes_two_held_by_the_same_nodes() {
        let m = plan(2, 2, None, false, &nodes(&["a@h", "b@h"]), 0, "u").unwrap();
        let split = m.with_range_split("80000000-ffffffff").unwrap();
        assert_eq!(split.q, 3);
        let ranges: Vec<&str> = split.by_range.iter().map(|c| c.range.as_str()).collect();
        assert_eq!(
            ranges,
            [
                "00000000-7fffffff",
                "80000000-bfffffff",
                "c0000000-ffffffff"
            ]
        );
        assert_eq!(split.by_range[1].nodes, m.by_range[1].nodes);
        assert_eq!(split.by_range[2].nodes, m.by_range[1].nodes);
        // Documents are found in ranges of unequal widths.
        for i in 0..200 {
            let id = format!("doc{i}");
            let h = shards::hash(&id, false);
            let held = shards::parse_range(&split.copies_of(&id).range).unwrap();
            assert!((held.0..=held.1).contains(&h), "{id}");
        }
        assert_eq!(
            m.with_range_split("00000000-3fffffff"),
            Err(PlanError::UnknownRange("00000000-3fffffff".into()))
        );
    }

    #[test]
    fn placement_deals_each_zone_its_copies() {
        let mut ns = nodes(&["a@h", "b@h", "c@h"]);
        ns[0].zone = Some("x".into());
        ns[1].zone = Some("y".into());
        ns[2].zone = Some("y".into());
        let m = plan(1, 3, Some("x:1,y:2"), false, &ns, 0, "u").unwrap();
        assert_eq!(m.by_range[0].nodes, ["a@h", "b@h", "c@h"]);
        assert_eq!(m.n, 3);
        assert_eq!(
            plan(1, 3, Some("z:1"), false, &ns, 0, "u"),
            Err(PlanError::NoNodesInZone("z".into()))
        );
        assert!(matches!(
            plan(1, 3, Some("x"), false, &ns, 0, "u"),
            Err(PlanError::BadPlacement(_))
        ));
    }

    #[test]
    fn a_range_edit_changes_that_range_alone() {
        let m = plan(2, 2, None, false, &nodes(&["a@h", "b@h", "c@h"]), 0, "u").unwrap();
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let moved = m
            .with_range_nodes("00000000-7fffffff", s(&["b@h", "c@h"]))
            .unwrap();
        assert_eq!(moved.by_range[0].nodes, ["b@h", "c@h"]);
        assert_eq!(
            (moved.by_range[1].clone(), moved.n, &moved.uuid),
            (m.by_range[1].clone(), 2, &m.uuid)
        );
        assert_eq!(
            m.with_range_nodes("00000000-ffffffff", s(&["a@h"])),
            Err(PlanError::UnknownRange("00000000-ffffffff".into()))
        );
        assert!(matches!(
            m.with_range_nodes("00000000-7fffffff", vec![]),
            Err(PlanError::BadNodes(_))
        ));
        assert!(matches!(
            m.with_range_nodes("00000000-7fffffff", s(&["a@h", "b@h", "a@h"])),
            Err(PlanError::BadNodes(_))
        ));
    }

    #[test]
    fn documents_go_to_the_range_of_their_hash() {
        let m = plan(2, 1, None, true, &nodes(&["a@h", "b@h"]), 0, "u").unwrap();
        // CRC-32 of "foo" is 0x8c736521: the second range.
        assert_eq!(m.copies_of("foo:x").range, "80000000-ffffffff");
        assert_eq!(m.copies_of("foo:x"), m.copies_of("foo:y"));
        assert!(m.holds("a@h") && !m.holds("z@h"));
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<ShardMap>(&text).unwrap(), m);
    }
}
