//! Revision trees. CouchDB keeps, per document, a tree of revisions whose leaves are the
//! live branches. Here the tree is a flat map from revision to node, each node naming its
//! parent id (its parent sits at `pos - 1`); a node whose parent was stemmed away, or never
//! seen, is a root. The flat shape makes merge a set union, which is why merge is trivially
//! idempotent and never loses a leaf.
//!
//! Only leaves keep a body pointer: when a leaf gains a child its body is released (CouchDB
//! keeps such bodies until compaction; Settee drops them at once, as if always compacted).

use crate::rev::{Rev, RevId};
use crate::varint;
use std::collections::{BTreeMap, HashSet};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    parent: Option<RevId>,
    deleted: bool,
    body: Option<u64>,
}

/// A leaf: a live branch head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub rev: Rev,
    pub deleted: bool,
    pub body: Option<u64>,
}

/// What `revs_info` reports for a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    Available,
    Deleted,
    Missing,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Available => "available",
            NodeStatus::Deleted => "deleted",
            NodeStatus::Missing => "missing",
        }
    }
}

/// A node of an encoded tree, read in place (`decode_winner`, `decode_leaves`).
struct RawNode<'a> {
    pos: u64,
    id: &'a [u8],
    parent: Option<&'a [u8]>,
    deleted: bool,
    body: Option<u64>,
}

impl<'a> RawNode<'a> {
    /// The nodes of an encoded tree of at most 16 nodes; `Some(None)` for a larger one,
    /// which is cheaper decoded whole; `None` on corrupt input.
    fn all(buf: &'a [u8]) -> Option<Option<Vec<RawNode<'a>>>> {
        let (&version, mut cur) = buf.split_first()?;
        if version != FORMAT_V1 {
            return None;
        }
        let count = varint::get(&mut cur)?;
        if count > 16 {
            return Some(None);
        }
        let mut nodes = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let pos = varint::get(&mut cur)?;
            let id = varint::get_bytes(&mut cur)?;
            let (&flags, rest) = cur.split_first()?;
            cur = rest;
            let parent = if flags & F_PARENT != 0 {
                Some(varint::get_bytes(&mut cur)?)
            } else {
                None
            };
            let body = if flags & F_BODY != 0 {
                Some(varint::get(&mut cur)?)
            } else {
                None
            };
            nodes.push(RawNode {
                pos,
                id,
                parent,
                deleted: flags & F_DELETED != 0,
                body,
            });
        }
        Some(Some(nodes))
    }

    fn is_leaf(&self, nodes: &[RawNode<'_>]) -> bool {
        !nodes
            .iter()
            .any(|c| c.pos == self.pos + 1 && c.parent == Some(self.id))
    }

    /// Winner order: live before deleted, then higher pos, then higher id (as `leaves`).
    fn order(&self) -> (bool, u64, &'a [u8]) {
        (!self.deleted, self.pos, self.id)
    }

    fn leaf(&self) -> Leaf {
        Leaf {
            rev: Rev::new(self.pos, RevId::from_bytes(self.id)),
            deleted: self.deleted,
            body: self.body,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevTree {
    nodes: BTreeMap<Rev, Node>,
}

const FORMAT_V1: u8 = 1;
const F_DELETED: u8 = 1;
const F_PARENT: u8 = 2;
const F_BODY: u8 = 4;

impl RevTree {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn contains(&self, rev: &Rev) -> bool {
        self.nodes.contains_key(rev)
    }

    /// Every (pos, id) that some node names as its parent, i.e. every non-leaf.
    fn parents(&self) -> HashSet<(u64, &RevId)> {
        self.nodes
            .iter()
            .filter_map(|(r, n)| n.parent.as_ref().map(|p| (r.pos - 1, p)))
            .collect()
    }

    /// Leaves in CouchDB's winner order: live before deleted, then higher pos, then higher id.
    pub fn leaves(&self) -> Vec<Leaf> {
        let parents = self.parents();
        let mut leaves: Vec<Leaf> = self
            .nodes
            .iter()
            .filter(|(r, _)| !parents.contains(&(r.pos, &r.id)))
            .map(|(r, n)| Leaf {
                rev: r.clone(),
                deleted: n.deleted,
                body: n.body,
            })
            .collect();
        leaves.sort_by(|a, b| (!b.deleted, &b.rev).cmp(&(!a.deleted, &a.rev)));
        leaves
    }

    /// Leaves in the order CouchDB's `couch_key_tree:get_all_leafs` lists them (`_bulk_get`
    /// of a document without a revision): tree by tree, the trees by their roots from the
    /// greatest (position, then id) down, each walked depth first with children by id.
    pub fn leaves_in_tree_order(&self) -> Vec<Leaf> {
        let mut children: BTreeMap<&Rev, Vec<&Rev>> = BTreeMap::new();
        let mut roots: Vec<&Rev> = Vec::new();
        // `nodes` iterates by position then id: children come in id order.
        for (rev, node) in &self.nodes {
            let parent = (node.parent.as_ref())
                .and_then(|p| self.nodes.get_key_value(&Rev::new(rev.pos - 1, p.clone())));
            match parent {
                Some((p, _)) => children.entry(p).or_default().push(rev),
                None => roots.push(rev),
            }
        }
        let mut out = Vec::new();
        // A stack of revisions still to walk, the next on top.
        let mut stack: Vec<&Rev> = roots;
        while let Some(rev) = stack.pop() {
            match children.get(rev) {
                Some(kids) => stack.extend(kids.iter().rev()),
                None => {
                    let n = &self.nodes[rev];
                    out.push(Leaf {
                        rev: rev.clone(),
                        deleted: n.deleted,
                        body: n.body,
                    });
                }
            }
        }
        out
    }

    pub fn winner(&self) -> Option<Leaf> {
        self.leaves().into_iter().next()
    }

    pub fn leaf(&self, rev: &Rev) -> Option<Leaf> {
        self.leaves().into_iter().find(|l| &l.rev == rev)
    }

    pub fn status(&self, rev: &Rev) -> Option<NodeStatus> {
        self.nodes.get(rev).map(|n| match (n.deleted, n.body) {
            (true, _) => NodeStatus::Deleted,
            (false, Some(_)) => NodeStatus::Available,
            (false, None) => NodeStatus::Missing,
        })
    }

    /// Body pointer of a revision, if that revision still has its body.
    pub fn body(&self, rev: &Rev) -> Option<(u64, bool)> {
        self.nodes
            .get(rev)
            .and_then(|n| n.body.map(|b| (b, n.deleted)))
    }

    /// Ids from `rev` back to the oldest known ancestor (newest first).
    pub fn ancestry(&self, rev: &Rev) -> Vec<RevId> {
        let mut out = Vec::new();
        let mut cur = Some(rev.clone());
        while let Some(r) = cur {
            let Some(node) = self.nodes.get(&r) else {
                break;
            };
            cur = node.parent.as_ref().map(|p| Rev::new(r.pos - 1, p.clone()));
            out.push(r.id);
        }
        out
    }

    /// Merges a path into the tree: `path[0]` is the new leaf at `pos`, each next id its
    /// parent. Returns false (and changes nothing but missing ancestry) if the leaf was
    /// already known. Callers must ensure `pos >= path.len()`.
    pub fn add_path(&mut self, pos: u64, path: &[RevId], deleted: bool, body: Option<u64>) -> bool {
        debug_assert!(!path.is_empty() && pos as usize >= path.len());
        let mut leaf_is_new = false;
        for (i, id) in path.iter().enumerate() {
            let rev = Rev::new(pos - i as u64, id.clone());
            let parent = path.get(i + 1).cloned();
            match self.nodes.get_mut(&rev) {
                Some(node) => {
                    if node.parent.is_none() {
                        node.parent = parent;
                    }
                }
                None => {
                    let leaf = i == 0;
                    leaf_is_new |= leaf;
                    let node = Node {
                        parent,
                        deleted: leaf && deleted,
                        body: if leaf { body } else { None },
                    };
                    self.nodes.insert(rev, node);
                }
            }
        }
        leaf_is_new
    }

    /// Releases the bodies of revisions that are no longer leaves; returns their pointers.
    pub fn prune_bodies(&mut self) -> Vec<u64> {
        let inner: HashSet<Rev> = self
            .parents()
            .into_iter()
            .map(|(pos, id)| Rev::new(pos, id.clone()))
            .collect();
        let mut freed = Vec::new();
        for (rev, node) in self.nodes.iter_mut() {
            if inner.contains(rev) {
                freed.extend(node.body.take());
            }
        }
        freed
    }

    /// The parent of `rev`, if it is still in the tree.
    fn parent(&self, rev: &Rev) -> Option<Rev> {
        let p = self.nodes.get(rev)?.parent.as_ref()?;
        let p = Rev::new(rev.pos - 1, p.clone());
        self.nodes.contains_key(&p).then_some(p)
    }

    /// Drops every node not in `keep`; kept nodes whose parent went become roots.
    /// Returns the body pointers of dropped nodes.
    fn retain_only(&mut self, keep: &HashSet<Rev>) -> Vec<u64> {
        let mut freed = Vec::new();
        self.nodes.retain(|r, n| {
            let kept = keep.contains(r);
            if !kept {
                freed.extend(n.body);
            }
            kept
        });
        for (r, n) in self.nodes.iter_mut() {
            if n.parent
                .as_ref()
                .is_some_and(|p| !keep.contains(&Rev::new(r.pos - 1, p.clone())))
            {
                n.parent = None;
            }
        }
        freed
    }

    /// Keeps at most `limit` revisions on each leaf's path (CouchDB's `_revs_limit`);
    /// returns body pointers of removed nodes. Leaves are never removed.
    pub fn stem(&mut self, limit: usize) -> Vec<u64> {
        let mut keep: HashSet<Rev> = HashSet::new();
        for leaf in self.leaves() {
            let mut cur = Some(leaf.rev);
            for _ in 0..limit.max(1) {
                let Some(r) = cur else { break };
                cur = self.parent(&r);
                keep.insert(r);
            }
        }
        self.retain_only(&keep)
    }

    /// Removes leaves (CouchDB's `_purge`) together with every ancestor no other leaf needs.
    /// Returns the leaves actually removed and the body pointers freed.
    pub fn purge(&mut self, revs: &[Rev]) -> (Vec<Rev>, Vec<u64>) {
        let (gone, remaining): (Vec<Leaf>, Vec<Leaf>) = self
            .leaves()
            .into_iter()
            .partition(|l| revs.contains(&l.rev));
        let mut keep: HashSet<Rev> = HashSet::new();
        for leaf in remaining {
            let mut cur = Some(leaf.rev);
            while let Some(r) = cur {
                cur = self.parent(&r);
                keep.insert(r);
            }
        }
        let freed = self.retain_only(&keep);
        (gone.into_iter().map(|l| l.rev).collect(), freed)
    }

    /// Revisions from `revs` that the tree does not know.
    pub fn missing<'a>(&self, revs: impl IntoIterator<Item = &'a Rev>) -> Vec<Rev> {
        revs.into_iter()
            .filter(|r| !self.nodes.contains_key(r))
            .cloned()
            .collect()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(FORMAT_V1);
        varint::put(out, self.nodes.len() as u64);
        for (rev, node) in &self.nodes {
            varint::put(out, rev.pos);
            varint::put_bytes(out, rev.id.as_bytes());
            let flags = (if node.deleted { F_DELETED } else { 0 })
                | (if node.parent.is_some() { F_PARENT } else { 0 })
                | (if node.body.is_some() { F_BODY } else { 0 });
            out.push(flags);
            if let Some(p) = &node.parent {
                varint::put_bytes(out, p.as_bytes());
            }
            if let Some(b) = node.body {
                varint::put(out, b);
            }
        }
    }

    /// The winning leaf of an encoded tree (what `decode` then `winner` gives), read
    /// without building the tree: a scan over many documents wants only the winner.
    /// `None` on corrupt input.
    pub fn decode_winner(buf: &[u8]) -> Option<Option<Leaf>> {
        let Some(nodes) = RawNode::all(buf)? else {
            let mut whole = buf;
            return Some(Self::decode(&mut whole)?.winner());
        };
        let best = (nodes.iter())
            .filter(|n| n.is_leaf(&nodes))
            .max_by(|a, b| a.order().cmp(&b.order()));
        Some(best.map(RawNode::leaf))
    }

    /// The leaves of an encoded tree, winner first (what `decode` then `leaves` gives),
    /// read without building the tree. `None` on corrupt input.
    pub fn decode_leaves(buf: &[u8]) -> Option<Vec<Leaf>> {
        let Some(nodes) = RawNode::all(buf)? else {
            let mut whole = buf;
            return Some(Self::decode(&mut whole)?.leaves());
        };
        let mut leaves: Vec<&RawNode<'_>> = nodes.iter().filter(|n| n.is_leaf(&nodes)).collect();
        leaves.sort_by(|a, b| b.order().cmp(&a.order()));
        Some(leaves.into_iter().map(RawNode::leaf).collect())
    }

    /// Decodes from the front of `buf`, advancing it. `None` on corrupt input.
    pub fn decode(buf: &mut &[u8]) -> Option<Self> {
        let (&version, rest) = buf.split_first()?;
        if version != FORMAT_V1 {
            return None;
        }
        *buf = rest;
        let count = varint::get(buf)?;
        let mut nodes = BTreeMap::new();
        for _ in 0..count {
            let pos = varint::get(buf)?;
            let id = RevId::from_bytes(varint::get_bytes(buf)?);
            let (&flags, rest) = buf.split_first()?;
            *buf = rest;
            let parent = if flags & F_PARENT != 0 {
                Some(RevId::from_bytes(varint::get_bytes(buf)?))
            } else {
                None
            };
            let body = if flags & F_BODY != 0 {
                Some(varint::get(buf)?)
            } else {
                None
            };
            nodes.insert(
                Rev::new(pos, id),
                Node {
                    parent,
                    deleted: flags & F_DELETED != 0,
                    body,
                },
            );
        }
        Some(RevTree { nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(s: &str) -> RevId {
        RevId::parse(s).unwrap()
    }
    fn rev(s: &str) -> Rev {
        Rev::parse(s).unwrap()
    }

    #[test]
    fn linear_history_and_winner() {
        let mut t = RevTree::new();
        assert!(t.add_path(1, &[id("a")], false, Some(1)));
        assert!(t.add_path(2, &[id("b"), id("a")], false, Some(2)));
        assert_eq!(t.prune_bodies(), vec![1]);
        let w = t.winner().unwrap();
        assert_eq!(w.rev, rev("2-b"));
        assert_eq!(t.leaves().len(), 1);
        assert_eq!(t.ancestry(&rev("2-b")), vec![id("b"), id("a")]);
        assert_eq!(t.status(&rev("1-a")), Some(NodeStatus::Missing));
        assert_eq!(t.status(&rev("2-b")), Some(NodeStatus::Available));
    }

    #[test]
    fn winner_prefers_live_then_pos_then_id() {
        let mut t = RevTree::new();
        t.add_path(1, &[id("a")], false, Some(1));
        t.add_path(2, &[id("x"), id("a")], false, Some(2));
        t.add_path(2, &[id("y"), id("a")], false, Some(3));
        assert_eq!(t.winner().unwrap().rev, rev("2-y"));
        t.add_path(3, &[id("z"), id("y"), id("a")], true, Some(4));
        assert_eq!(
            t.winner().unwrap().rev,
            rev("2-x"),
            "a deleted leaf never beats a live one"
        );
        t.add_path(3, &[id("w"), id("x"), id("a")], true, Some(5));
        assert_eq!(
            t.winner().unwrap().rev,
            rev("3-z"),
            "all deleted: highest wins"
        );
    }

    #[test]
    fn leaves_in_tree_order_walks_trees_latest_root_first_children_by_id() {
        let mut t = RevTree::new();
        let hex = "93a5f13d4ef2a4d1e83d2bbbc3b57eef";
        let low = "1a5f13d4ef2a4d1e83d2bbbc3b57eefe";
        t.add_path(1, &[id("aaaa")], false, Some(1));
        t.add_path(3, &[id("bbbb"), id("b2"), id("aaaa")], false, Some(2));
        t.add_path(2, &[id("zzzz"), id("aaaa")], false, Some(3));
        t.add_path(2, &[id("cccc"), id("aaaa")], false, Some(4));
        t.add_path(
            5,
            &[id("0000"), id("q4"), id("q3"), id("q2"), id("q1")],
            false,
            None,
        );
        t.add_path(2, &[id("dddd"), id("aaaa")], true, Some(5));
        t.add_path(2, &[id(hex), id("aaaa")], false, Some(6));
        t.add_path(2, &[id(low), id("aaaa")], false, Some(7));
        let order: Vec<String> = (t.leaves_in_tree_order().iter())
            .map(|l| l.rev.to_string())
            .collect();
        // Ids of 32 hex digits compare as their 16 bytes (0x1a… < "b2" < … < "zzzz" < 0x93…);
        // the tree rooted at 1-q1 comes before the one rooted at 1-aaaa.
        let want = [
            "5-0000".to_string(),
            format!("2-{low}"),
            "3-bbbb".into(),
            "2-cccc".into(),
            "2-dddd".into(),
            "2-zzzz".into(),
            format!("2-{hex}"),
        ];
        assert_eq!(order, want);
        let deleted: Vec<bool> = t.leaves_in_tree_order().iter().map(|l| l.deleted).collect();
        assert_eq!(deleted, [false, false, false, false, true, false, false]);
    }

    #[test]
    fn stemming_keeps_leaves_and_makes_roots() {
        let mut t = RevTree::new();
        let path: Vec<RevId> = (1..=10).rev().map(|i| id(&format!("r{i}"))).collect();
        t.add_path(10, &path, false, Some(10));
        t.stem(3);
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.ancestry(&rev("10-r10")),
            vec![id("r10"), id("r9"), id("r8")]
        );
        assert_eq!(t.leaves().len(), 1);
    }

    #[test]
    fn encode_roundtrip() {
        let mut t = RevTree::new();
        t.add_path(
            2,
            &[id("0123456789abcdef0123456789abcdef"), id("b")],
            true,
            Some(7),
        );
        t.add_path(1, &[id("c")], false, Some(3));
        let mut out = Vec::new();
        t.encode(&mut out);
        let mut s = &out[..];
        assert_eq!(RevTree::decode(&mut s), Some(t));
        assert!(s.is_empty());
    }

    #[test]
    fn purge_removes_branch_up_to_fork() {
        let mut t = RevTree::new();
        t.add_path(2, &[id("x"), id("a")], false, Some(2));
        t.add_path(3, &[id("z"), id("y"), id("a")], false, Some(3));
        let (gone, freed) = t.purge(&[rev("3-z"), rev("9-nope")]);
        assert_eq!(gone, vec![rev("3-z")]);
        assert_eq!(freed, vec![3]);
        assert_eq!(t.len(), 2, "2-y goes with 3-z; 1-a stays for 2-x");
        let (gone, _) = t.purge(&[rev("2-x")]);
        assert_eq!(gone.len(), 1);
        assert!(t.is_empty());
    }

    /// A random path: a window of a lineage drawn from a small alphabet, so paths overlap
    /// and branch. The id at pos k spells the lineage's first k choices, so an id determines
    /// its ancestry, as a real revision hash does.
    fn arb_path() -> impl Strategy<Value = (u64, Vec<RevId>, bool)> {
        (
            prop::collection::vec(0u8..3, 1..8),
            any::<prop::sample::Index>(),
            any::<bool>(),
        )
            .prop_map(|(choices, skip, del)| {
                let n = choices.len();
                let first = skip.index(n); // oldest pos kept in this window is first+1
                let path = (first..n)
                    .rev()
                    .map(|k| {
                        let s: String =
                            choices[..=k].iter().map(|c| char::from(b'a' + c)).collect();
                        RevId::from_bytes(s.as_bytes())
                    })
                    .collect();
                (n as u64, path, del)
            })
    }

    fn leaf_set(t: &RevTree) -> Vec<Rev> {
        let mut v: Vec<Rev> = t.leaves().into_iter().map(|l| l.rev).collect();
        v.sort();
        v
    }

    proptest! {
        #[test]
        fn merge_is_idempotent_and_order_free(paths in prop::collection::vec(arb_path(), 1..10)) {
            let mut a = RevTree::new();
            for (pos, p, d) in &paths { a.add_path(*pos, p, *d, Some(*pos)); }
            let once = a.clone();
            for (pos, p, d) in &paths { prop_assert!(!a.add_path(*pos, p, *d, Some(*pos))); }
            prop_assert_eq!(leaf_set(&a), leaf_set(&once));
            let mut b = RevTree::new();
            for (pos, p, d) in paths.iter().rev() { b.add_path(*pos, p, *d, Some(*pos)); }
            prop_assert_eq!(leaf_set(&a), leaf_set(&b));
        }

        #[test]
        fn merge_loses_no_leaf(paths in prop::collection::vec(arb_path(), 1..10)) {
            let mut t = RevTree::new();
            for (pos, p, d) in &paths {
                t.add_path(*pos, p, *d, Some(*pos));
                let leaf = Rev::new(*pos, p[0].clone());
                prop_assert!(t.contains(&leaf));
            }
            // every added leaf is either still a leaf or an ancestor of one
            let leaves = t.leaves();
            for (pos, p, _) in &paths {
                let r = Rev::new(*pos, p[0].clone());
                let covered = leaves.iter().any(|l| {
                    l.rev.pos >= r.pos && t.ancestry(&l.rev).get((l.rev.pos - r.pos) as usize) == Some(&r.id)
                });
                prop_assert!(covered, "{:?} lost", r);
            }
        }

        #[test]
        fn leaves_in_tree_order_lists_every_leaf_once(paths in prop::collection::vec(arb_path(), 1..10)) {
            let mut t = RevTree::new();
            for (pos, path, del) in &paths {
                t.add_path(*pos, path, *del, Some(1));
            }
            let mut walked: Vec<Rev> = t.leaves_in_tree_order().into_iter().map(|l| l.rev).collect();
            walked.sort();
            prop_assert_eq!(walked, leaf_set(&t));
        }

        #[test]
        fn stemming_keeps_all_leaves_and_winner(paths in prop::collection::vec(arb_path(), 1..10), limit in 1usize..5) {
            let mut t = RevTree::new();
            for (pos, p, d) in &paths { t.add_path(*pos, p, *d, Some(*pos)); }
            let leaves = leaf_set(&t);
            let winner = t.winner();
            t.stem(limit);
            prop_assert_eq!(leaf_set(&t), leaves);
            prop_assert_eq!(t.winner(), winner);
        }

        #[test]
        fn encoding_roundtrips(paths in prop::collection::vec(arb_path(), 0..10)) {
            let mut t = RevTree::new();
            for (pos, p, d) in &paths { t.add_path(*pos, p, *d, Some(*pos)); }
            let mut out = Vec::new();
            t.encode(&mut out);
            let mut s = &out[..];
            prop_assert_eq!(RevTree::decode(&mut s), Some(t));
        }

        #[test]
        fn decode_winner_agrees_with_decode(paths in prop::collection::vec(arb_path(), 0..30)) {
            let mut t = RevTree::new();
            for (pos, p, d) in &paths { t.add_path(*pos, p, *d, Some(*pos)); }
            let mut out = Vec::new();
            t.encode(&mut out);
            prop_assert_eq!(RevTree::decode_winner(&out), Some(t.winner()));
            prop_assert_eq!(RevTree::decode_leaves(&out), Some(t.leaves()));
        }
    }
}
