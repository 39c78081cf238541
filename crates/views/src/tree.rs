//! The reduce tree: a copy-on-write B+tree of view rows whose inner entries carry the row
//! count and the reduction of their subtree, as CouchDB's btree does. Range reductions,
//! `offset` and `total_rows` read O(log n) nodes instead of every row.
//!
//! Nodes are immutable values addressed by a [`NodeId`]; a change writes new nodes along
//! the modified paths and deletes the replaced ones, so a reader holding a snapshot of the
//! store sees one consistent tree. The tree knows nothing of RocksDB: it reads through
//! [`NodeRead`] and writes through [`NodeSink`], and reduces through [`Reducer`].
//!
//! Keys are opaque bytes in the order rows are kept (the index composes them from the
//! collated view key and the doc id); values are opaque row payloads; reductions are opaque
//! partial results that only the [`Reducer`] understands.

use settee_core::varint;
use std::ops::{Bound, ControlFlow};

pub type NodeId = u64;

/// Target encoded size of a node; nodes are cut when they reach it.
const NODE_BYTES: usize = 4096;
const LEAF: u8 = 1;
const INNER: u8 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// A row's bytes, borrowed: what leaves are encoded from and reducers read.
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// A row the tree can write: owned, or borrowed from where a bulk load keeps its rows (a
/// copy of each row there was a tenth of a fresh build's tree writing).
pub trait RowBytes {
    fn row(&self) -> RowRef<'_>;
}

impl RowBytes for Row {
    fn row(&self) -> RowRef<'_> {
        RowRef {
            key: &self.key,
            value: &self.value,
        }
    }
}

impl RowBytes for (std::borrow::Cow<'_, [u8]>, std::borrow::Cow<'_, [u8]>) {
    fn row(&self) -> RowRef<'_> {
        RowRef {
            key: &self.0,
            value: &self.1,
        }
    }
}

/// A pointer to a subtree: its last key, its node, its row count and its reduction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub last: Vec<u8>,
    pub child: NodeId,
    pub count: u64,
    pub red: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Leaf(Vec<Row>),
    Inner(Vec<Entry>),
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("view index node {0} is missing or corrupted")]
    Corrupted(NodeId),
    #[error(transparent)]
    Store(#[from] settee_storage::Error),
    #[error("{0}")]
    Reduce(String),
}

pub type Result<T> = std::result::Result<T, TreeError>;

pub trait NodeRead {
    fn node(&self, id: NodeId) -> Result<Node>;
}

/// Where a change writes. Reads through a sink see its own writes (a node written earlier
/// in the same change is readable).
pub trait NodeSink: NodeRead {
    fn put(&mut self, id: NodeId, bytes: Vec<u8>);
    fn delete(&mut self, id: NodeId);
    fn next_id(&mut self) -> NodeId;
    /// `rows` were written into a leaf (`added`), or were the rows of a leaf being
    /// rewritten (`!added`); a sink may keep the totals of live rows with it.
    fn leaf_rows(&mut self, _rows: &[RowRef<'_>], _added: bool) {}
}

/// Partial reductions: `reduce` of rows, `rereduce` of partials. A tree without a reduce
/// function uses [`NoReduce`] and stores empty reductions.
pub trait Reducer {
    fn reduce(&mut self, rows: &[RowRef<'_>]) -> Vec<u8>;
    fn rereduce(&mut self, parts: &[&[u8]]) -> Vec<u8>;
}

pub struct NoReduce;

impl Reducer for NoReduce {
    fn reduce(&mut self, _: &[RowRef<'_>]) -> Vec<u8> {
        Vec::new()
    }
    fn rereduce(&mut self, _: &[&[u8]]) -> Vec<u8> {
        Vec::new()
    }
}

// ---------------------------------------------------------------------------------------
// Node encoding

impl Node {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Node::Leaf(rows) => {
                let refs: Vec<RowRef<'_>> = rows.iter().map(Row::row).collect();
                encode_leaf(&refs)
            }
            Node::Inner(entries) => {
                let mut out = Vec::with_capacity(NODE_BYTES + 256);
                out.push(INNER);
                varint::put(&mut out, entries.len() as u64);
                for e in entries {
                    e.encode(&mut out);
                }
                out
            }
        }
    }

    pub fn decode(mut buf: &[u8]) -> Option<Node> {
        let (&kind, rest) = buf.split_first()?;
        buf = rest;
        let n = varint::get(&mut buf)? as usize;
        match kind {
            LEAF => {
                let mut rows = Vec::with_capacity(n);
                for _ in 0..n {
                    let key = varint::get_bytes(&mut buf)?.to_vec();
                    let value = varint::get_bytes(&mut buf)?.to_vec();
                    rows.push(Row { key, value });
                }
                Some(Node::Leaf(rows))
            }
            INNER => {
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push(Entry::decode(&mut buf)?);
                }
                Some(Node::Inner(entries))
            }
            _ => None,
        }
    }
}

/// A leaf's bytes, as [`Node::encode`] writes a [`Node::Leaf`].
fn encode_leaf(rows: &[RowRef<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(NODE_BYTES + 256);
    out.push(LEAF);
    varint::put(&mut out, rows.len() as u64);
    for r in rows {
        varint::put_bytes(&mut out, r.key);
        varint::put_bytes(&mut out, r.value);
    }
    out
}

impl Entry {
    pub fn encode(&self, out: &mut Vec<u8>) {
        varint::put_bytes(out, &self.last);
        varint::put(out, self.child);
        varint::put(out, self.count);
        varint::put_bytes(out, &self.red);
    }

    pub fn decode(buf: &mut &[u8]) -> Option<Entry> {
        Some(Entry {
            last: varint::get_bytes(buf)?.to_vec(),
            child: varint::get(buf)?,
            count: varint::get(buf)?,
            red: varint::get_bytes(buf)?.to_vec(),
        })
    }

    fn size(&self) -> usize {
        self.last.len() + self.red.len() + 16
    }
}

// ---------------------------------------------------------------------------------------
// Writing

/// One change: insert or replace (`Some`) or delete (`None`) the row with this key.
pub type Op = (Vec<u8>, Option<Vec<u8>>);

/// Applies `ops` (sorted by key, keys unique) to the tree under `root`, returning the new
/// root. Deleting an absent key is a no-op.
pub fn modify(
    sink: &mut dyn NodeSink,
    red: &mut dyn Reducer,
    root: Option<&Entry>,
    ops: &[Op],
) -> Result<Option<Entry>> {
    if ops.is_empty() {
        return Ok(root.cloned());
    }
    let mut entries = match root {
        None => {
            let rows: Vec<Row> = ops
                .iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| row(k, v)))
                .collect();
            write_leaves(sink, red, rows)
        }
        Some(r) => modify_node(sink, red, r.child, ops)?,
    };
    while entries.len() > 1 {
        entries = write_inners(sink, red, entries);
    }
    let Some(mut top) = entries.pop() else {
        return Ok(None);
    };
    // A root with a single child is replaced by the child, so deletions shrink the height.
    while let Node::Inner(mut es) = sink.node(top.child)? {
        if es.len() != 1 {
            break;
        }
        sink.delete(top.child);
        top = es.pop().expect("one entry");
    }
    Ok(Some(top))
}

/// Builds a tree from rows already sorted by unique key (an initial index build).
pub fn build<R: RowBytes>(
    sink: &mut dyn NodeSink,
    red: &mut dyn Reducer,
    rows: impl IntoIterator<Item = R>,
) -> Option<Entry> {
    let mut entries = write_leaves(sink, red, rows);
    while entries.len() > 1 {
        entries = write_inners(sink, red, entries);
    }
    entries.pop()
}

fn row(k: &[u8], v: &[u8]) -> Row {
    Row {
        key: k.to_vec(),
        value: v.to_vec(),
    }
}

fn modify_node(
    sink: &mut dyn NodeSink,
    red: &mut dyn Reducer,
    id: NodeId,
    ops: &[Op],
) -> Result<Vec<Entry>> {
    let node = sink.node(id)?;
    sink.delete(id);
    match node {
        Node::Leaf(rows) => {
            let refs: Vec<RowRef<'_>> = rows.iter().map(Row::row).collect();
            sink.leaf_rows(&refs, false);
            Ok(write_leaves(sink, red, merge_rows(rows, ops)))
        }
        Node::Inner(entries) => {
            let mut out = Vec::with_capacity(entries.len() + 2);
            let mut rest = ops;
            let last_index = entries.len() - 1;
            for (i, e) in entries.into_iter().enumerate() {
                let take = if i == last_index {
                    rest.len()
                } else {
                    rest.partition_point(|(k, _)| k.as_slice() <= e.last.as_slice())
                };
                let (mine, tail) = rest.split_at(take);
                rest = tail;
                if mine.is_empty() {
                    out.push(e);
                } else {
                    out.extend(modify_node(sink, red, e.child, mine)?);
                }
            }
            Ok(write_inners(sink, red, out))
        }
    }
}

fn merge_rows(rows: Vec<Row>, ops: &[Op]) -> Vec<Row> {
    let mut out = Vec::with_capacity(rows.len() + ops.len());
    let mut ops = ops.iter().peekable();
    for r in rows {
        while let Some((k, v)) = ops.next_if(|(k, _)| k.as_slice() < r.key.as_slice()) {
            if let Some(v) = v {
                out.push(row(k, v));
            }
        }
        match ops.next_if(|(k, _)| k.as_slice() == r.key.as_slice()) {
            Some((k, Some(v))) => out.push(row(k, v)),
            Some((_, None)) => {}
            None => out.push(r),
        }
    }
    out.extend(ops.filter_map(|(k, v)| v.as_ref().map(|v| row(k, v))));
    out
}

/// Splits `items` into runs of about `NODE_BYTES`, handing each to `emit` as soon as the
/// next one starts (a short last run joins the one before it), so a caller streaming rows
/// never holds more than two runs.
///
/// Every run but the last holds at least two items, however large they are, so a level
/// of inner nodes always has fewer entries than the level below: with entries of
/// `NODE_BYTES` or more each (keys of a few KiB), one item per run would give as many
/// parents as children and `modify`'s loop would add levels for ever.
fn chunks<T>(
    items: impl IntoIterator<Item = T>,
    size: impl Fn(&T) -> usize,
    mut emit: impl FnMut(Vec<T>),
) {
    let mut held: Option<Vec<T>> = None;
    let mut cur = Vec::new();
    let mut bytes = 0;
    for it in items {
        bytes += size(&it);
        cur.push(it);
        if bytes >= NODE_BYTES && cur.len() >= 2 {
            if let Some(prev) = held.replace(std::mem::take(&mut cur)) {
                emit(prev);
            }
            bytes = 0;
        }
    }
    match held {
        Some(mut prev) if !cur.is_empty() && bytes < NODE_BYTES / 2 => {
            prev.extend(cur);
            emit(prev);
        }
        Some(prev) => {
            emit(prev);
            if !cur.is_empty() {
                emit(cur);
            }
        }
        None if !cur.is_empty() => emit(cur),
        None => {}
    }
}

fn write_leaves<R: RowBytes>(
    sink: &mut dyn NodeSink,
    red: &mut dyn Reducer,
    rows: impl IntoIterator<Item = R>,
) -> Vec<Entry> {
    let mut entries = Vec::new();
    chunks(
        rows,
        |r| r.row().key.len() + r.row().value.len() + 4,
        |rows| {
            let refs: Vec<RowRef<'_>> = rows.iter().map(R::row).collect();
            let reduction = red.reduce(&refs);
            let id = sink.next_id();
            entries.push(Entry {
                last: refs.last().expect("chunks are not empty").key.to_vec(),
                child: id,
                count: rows.len() as u64,
                red: reduction,
            });
            sink.leaf_rows(&refs, true);
            sink.put(id, encode_leaf(&refs));
        },
    );
    entries
}

fn write_inners(sink: &mut dyn NodeSink, red: &mut dyn Reducer, entries: Vec<Entry>) -> Vec<Entry> {
    let mut out = Vec::new();
    chunks(entries, Entry::size, |es| {
        let parts: Vec<&[u8]> = es.iter().map(|e| e.red.as_slice()).collect();
        let reduction = red.rereduce(&parts);
        let id = sink.next_id();
        out.push(Entry {
            last: es.last().expect("chunks are not empty").last.clone(),
            child: id,
            count: es.iter().map(|e| e.count).sum(),
            red: reduction,
        });
        sink.put(id, Node::Inner(es).encode());
    });
    out
}

// ---------------------------------------------------------------------------------------
// Reading

/// A key range over tree keys.
#[derive(Clone, Debug)]
pub struct Range {
    pub lo: Bound<Vec<u8>>,
    pub hi: Bound<Vec<u8>>,
}

impl Range {
    pub fn all() -> Range {
        Range {
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
        }
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        self.above_lo(k) && self.below_hi(k)
    }

    fn above_lo(&self, k: &[u8]) -> bool {
        match &self.lo {
            Bound::Unbounded => true,
            Bound::Included(l) => k >= l.as_slice(),
            Bound::Excluded(l) => k > l.as_slice(),
        }
    }

    fn below_hi(&self, k: &[u8]) -> bool {
        match &self.hi {
            Bound::Unbounded => true,
            Bound::Included(h) => k <= h.as_slice(),
            Bound::Excluded(h) => k < h.as_slice(),
        }
    }

    /// Whether every key in `(after, last]` lies in the range (`after = None`: from the
    /// start of the tree).
    fn covers(&self, after: Option<&[u8]>, last: &[u8]) -> bool {
        let lo_ok = match (&self.lo, after) {
            (Bound::Unbounded, _) => true,
            (_, None) => false,
            (Bound::Included(l), Some(a)) => a >= l.as_slice(),
            (Bound::Excluded(l), Some(a)) => a >= l.as_slice(),
        };
        lo_ok && self.below_hi(last)
    }

    /// Whether some key in `(after, last]` may lie in the range.
    fn overlaps(&self, after: Option<&[u8]>, last: &[u8]) -> bool {
        let below = match (&self.hi, after) {
            (Bound::Unbounded, _) | (_, None) => true,
            (Bound::Included(h) | Bound::Excluded(h), Some(a)) => a < h.as_slice(),
        };
        below && self.above_lo(last)
    }

    pub fn is_empty(&self) -> bool {
        match (&self.lo, &self.hi) {
            (Bound::Included(l), Bound::Included(h)) => l > h,
            (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(h))
            | (Bound::Excluded(l), Bound::Included(h)) => l >= h,
            _ => false,
        }
    }
}

/// Calls `f` for each row in `range`, ascending or descending, until it breaks.
pub fn fold(
    read: &dyn NodeRead,
    root: Option<&Entry>,
    range: &Range,
    descending: bool,
    f: &mut dyn FnMut(&Row) -> ControlFlow<()>,
) -> Result<ControlFlow<()>> {
    fold_skipping(read, root, range, descending, &mut 0, f)
}

/// [`fold`] after passing over the first `*skip` rows of the range (decremented as rows are
/// passed): whole subtrees inside the range are passed over by their stored row counts, so
/// skipping costs O(log n) node reads, not O(skip).
pub fn fold_skipping(
    read: &dyn NodeRead,
    root: Option<&Entry>,
    range: &Range,
    descending: bool,
    skip: &mut u64,
    f: &mut dyn FnMut(&Row) -> ControlFlow<()>,
) -> Result<ControlFlow<()>> {
    match root {
        Some(r) if !range.is_empty() => fold_node(read, r.child, range, descending, skip, f),
        _ => Ok(ControlFlow::Continue(())),
    }
}

fn fold_node(
    read: &dyn NodeRead,
    id: NodeId,
    range: &Range,
    descending: bool,
    skip: &mut u64,
    f: &mut dyn FnMut(&Row) -> ControlFlow<()>,
) -> Result<ControlFlow<()>> {
    match read.node(id)? {
        Node::Leaf(rows) => {
            let mut visit = |r: &Row| {
                if !range.contains(&r.key) {
                    ControlFlow::Continue(())
                } else if *skip > 0 {
                    *skip -= 1;
                    ControlFlow::Continue(())
                } else {
                    f(r)
                }
            };
            let flow = if descending {
                rows.iter().rev().try_for_each(&mut visit)
            } else {
                rows.iter().try_for_each(&mut visit)
            };
            Ok(flow)
        }
        Node::Inner(entries) => {
            let spans = child_spans(&entries);
            let mut visit = |(after, e): (Option<&[u8]>, &Entry)| -> Result<ControlFlow<()>> {
                if *skip >= e.count && range.covers(after, &e.last) {
                    *skip -= e.count;
                    Ok(ControlFlow::Continue(()))
                } else if range.overlaps(after, &e.last) {
                    fold_node(read, e.child, range, descending, skip, f)
                } else {
                    Ok(ControlFlow::Continue(()))
                }
            };
            let order: Box<dyn Iterator<Item = _>> = if descending {
                Box::new(spans.into_iter().rev())
            } else {
                Box::new(spans.into_iter())
            };
            for span in order {
                if visit(span)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        }
    }
}

/// Each child with the last key of the child before it (`None` for the first).
fn child_spans(entries: &[Entry]) -> Vec<(Option<&[u8]>, &Entry)> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i.checked_sub(1).map(|p| entries[p].last.as_slice()), e))
        .collect()
}

/// The partial reductions covering exactly the rows in `range`, and their row count.
/// Whole subtrees inside the range contribute their stored reduction; only the rows of
/// the (at most two per level) boundary leaves are reduced here.
pub fn reduce_range(
    read: &dyn NodeRead,
    root: Option<&Entry>,
    range: &Range,
    red: &mut dyn Reducer,
) -> Result<(Vec<Vec<u8>>, u64)> {
    let mut parts = Vec::new();
    let mut count = 0;
    if let Some(r) = root {
        if !range.is_empty() {
            if range.covers(None, &r.last) {
                parts.push(r.red.clone());
                count = r.count;
            } else {
                reduce_node(read, r.child, None, range, red, &mut parts, &mut count)?;
            }
        }
    }
    Ok((parts, count))
}

fn reduce_node(
    read: &dyn NodeRead,
    id: NodeId,
    node_after: Option<&[u8]>,
    range: &Range,
    red: &mut dyn Reducer,
    parts: &mut Vec<Vec<u8>>,
    count: &mut u64,
) -> Result<()> {
    match read.node(id)? {
        Node::Leaf(rows) => {
            let inside: Vec<RowRef<'_>> = (rows.iter())
                .filter(|r| range.contains(&r.key))
                .map(Row::row)
                .collect();
            if !inside.is_empty() {
                *count += inside.len() as u64;
                parts.push(red.reduce(&inside));
            }
        }
        Node::Inner(entries) => {
            for (i, e) in entries.iter().enumerate() {
                let after = match i {
                    0 => node_after,
                    _ => Some(entries[i - 1].last.as_slice()),
                };
                if range.covers(after, &e.last) {
                    parts.push(e.red.clone());
                    *count += e.count;
                } else if range.overlaps(after, &e.last) {
                    reduce_node(read, e.child, after, range, red, parts, count)?;
                }
            }
        }
    }
    Ok(())
}

/// Number of rows with a key below `lo` (the `offset` of a range starting there).
pub fn rows_before(read: &dyn NodeRead, root: Option<&Entry>, lo: &Bound<Vec<u8>>) -> Result<u64> {
    let Some(r) = root else { return Ok(0) };
    let below = Range {
        lo: Bound::Unbounded,
        hi: match lo {
            Bound::Unbounded => return Ok(0),
            Bound::Included(k) => Bound::Excluded(k.clone()),
            Bound::Excluded(k) => Bound::Included(k.clone()),
        },
    };
    Ok(reduce_range(read, Some(r), &below, &mut NoReduce)?.1)
}

/// Number of rows with a key above `hi` (the `offset` of a descending range).
pub fn rows_after(read: &dyn NodeRead, root: Option<&Entry>, hi: &Bound<Vec<u8>>) -> Result<u64> {
    let Some(r) = root else { return Ok(0) };
    let above = Range {
        lo: match hi {
            Bound::Unbounded => return Ok(0),
            Bound::Included(k) => Bound::Excluded(k.clone()),
            Bound::Excluded(k) => Bound::Included(k.clone()),
        },
        hi: Bound::Unbounded,
    };
    Ok(reduce_range(read, Some(r), &above, &mut NoReduce)?.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{BTreeMap, HashMap};

    /// An in-memory node store: the tree's own conformance harness.
    #[derive(Default)]
    pub struct Mem {
        nodes: RefCell<HashMap<NodeId, Vec<u8>>>,
    }

    impl NodeRead for Mem {
        fn node(&self, id: NodeId) -> Result<Node> {
            let nodes = self.nodes.borrow();
            let bytes = nodes.get(&id).ok_or(TreeError::Corrupted(id))?;
            Node::decode(bytes).ok_or(TreeError::Corrupted(id))
        }
    }

    /// Writes go straight into the map: deletes of replaced nodes happen after reads of
    /// them in `modify`, so applying them immediately is safe here.
    struct MemSink<'a>(&'a Mem, NodeId);

    impl NodeRead for MemSink<'_> {
        fn node(&self, id: NodeId) -> Result<Node> {
            self.0.node(id)
        }
    }

    impl NodeSink for MemSink<'_> {
        fn put(&mut self, id: NodeId, bytes: Vec<u8>) {
            self.0.nodes.borrow_mut().insert(id, bytes);
        }
        fn delete(&mut self, id: NodeId) {
            self.0.nodes.borrow_mut().remove(&id);
        }
        fn next_id(&mut self) -> NodeId {
            self.1 += 1;
            self.1
        }
    }

    /// Sum of u64 values, as 8-byte partials.
    struct Sum;

    impl Reducer for Sum {
        fn reduce(&mut self, rows: &[RowRef<'_>]) -> Vec<u8> {
            let s: u64 = rows
                .iter()
                .map(|r| u64::from_be_bytes(r.value[..8].try_into().unwrap()))
                .sum();
            s.to_be_bytes().to_vec()
        }
        fn rereduce(&mut self, parts: &[&[u8]]) -> Vec<u8> {
            let s: u64 = parts
                .iter()
                .map(|p| u64::from_be_bytes((*p).try_into().unwrap()))
                .sum();
            s.to_be_bytes().to_vec()
        }
    }

    fn key(i: u32) -> Vec<u8> {
        // Padding makes nodes hold a few dozen rows, so trees get several levels.
        let mut k = i.to_be_bytes().to_vec();
        k.extend_from_slice(&[7u8; 40]);
        k
    }

    fn val(i: u32) -> Vec<u8> {
        let mut v = u64::from(i).to_be_bytes().to_vec();
        v.extend_from_slice(&[1u8; 30]);
        v
    }

    fn total(parts: &[Vec<u8>]) -> u64 {
        parts
            .iter()
            .map(|p| u64::from_be_bytes(p.as_slice().try_into().unwrap()))
            .sum()
    }

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u32) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) % u64::from(n)) as u32
        }
    }

    fn check(mem: &Mem, root: Option<&Entry>, model: &BTreeMap<u32, u64>, rng: &mut Lcg) {
        // Full scan equals the model.
        let mut seen = Vec::new();
        let _ = fold(mem, root, &Range::all(), false, &mut |r| {
            seen.push(u32::from_be_bytes(r.key[..4].try_into().unwrap()));
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(seen, model.keys().copied().collect::<Vec<_>>());
        assert_eq!(root.map_or(0, |r| r.count), model.len() as u64);
        // Random ranges: reduction and count equal a naive fold.
        for _ in 0..30 {
            let (a, b) = (rng.next(3000), rng.next(3000));
            let (a, b) = (a.min(b), a.max(b));
            let range = Range {
                lo: Bound::Included(key(a)),
                hi: if rng.next(2) == 0 {
                    Bound::Excluded(key(b))
                } else {
                    Bound::Included(key(b))
                },
            };
            let expect: Vec<(&u32, &u64)> = model
                .iter()
                .filter(|(k, _)| range.contains(&key(**k)))
                .collect();
            let (parts, count) = reduce_range(mem, root, &range, &mut Sum).unwrap();
            assert_eq!(count, expect.len() as u64);
            assert_eq!(total(&parts), expect.iter().map(|(_, v)| **v).sum::<u64>());
            let before = rows_before(mem, root, &range.lo).unwrap();
            assert_eq!(before, model.keys().filter(|k| **k < a).count() as u64);
            let mut desc = Vec::new();
            let _ = fold(mem, root, &range, true, &mut |r| {
                desc.push(u32::from_be_bytes(r.key[..4].try_into().unwrap()));
                ControlFlow::Continue(())
            })
            .unwrap();
            let mut asc: Vec<u32> = expect.iter().map(|(k, _)| **k).collect();
            asc.reverse();
            assert_eq!(desc, asc);
            // Skipping by subtree counts equals dropping rows one by one.
            let n = rng.next(expect.len() as u32 + 2);
            let descending = rng.next(2) == 0;
            let mut skip = u64::from(n);
            let mut got = Vec::new();
            let _ = fold_skipping(mem, root, &range, descending, &mut skip, &mut |r| {
                got.push(u32::from_be_bytes(r.key[..4].try_into().unwrap()));
                ControlFlow::Continue(())
            })
            .unwrap();
            let mut want: Vec<u32> = expect.iter().map(|(k, _)| **k).collect();
            if descending {
                want.reverse();
            }
            let dropped = want.len().min(n as usize);
            assert_eq!(got, want[dropped..].to_vec());
            assert_eq!(skip, u64::from(n) - dropped as u64, "what is left to skip");
        }
    }

    #[test]
    fn random_modifications_match_a_model() {
        let mem = Mem::default();
        let mut sink = MemSink(&mem, 0);
        let mut rng = Lcg(42);
        let mut model = BTreeMap::new();
        let initial: Vec<Row> = (0..1000u32)
            .map(|i| i * 3)
            .inspect(|i| {
                model.insert(*i, u64::from(*i));
            })
            .map(|i| Row {
                key: key(i),
                value: val(i),
            })
            .collect();
        let mut root = build(&mut sink, &mut Sum, initial);
        check(&mem, root.as_ref(), &model, &mut rng);
        for round in 0..40 {
            let mut ops: BTreeMap<u32, Option<u32>> = BTreeMap::new();
            let n = if round % 10 == 9 {
                900
            } else {
                1 + rng.next(60)
            };
            for _ in 0..n {
                let k = rng.next(3000);
                let insert = rng.next(3) > 0 || round >= 30;
                ops.insert(k, insert.then(|| rng.next(100_000)));
            }
            if round >= 30 {
                // Delete nearly everything, then check the tree shrinks.
                for k in model.keys() {
                    ops.insert(*k, None);
                }
            }
            for (k, v) in &ops {
                match v {
                    Some(v) => model.insert(*k, u64::from(*v)),
                    None => model.remove(k),
                };
            }
            let ops: Vec<Op> = ops.into_iter().map(|(k, v)| (key(k), v.map(val))).collect();
            root = modify(&mut sink, &mut Sum, root.as_ref(), &ops).unwrap();
            check(&mem, root.as_ref(), &model, &mut rng);
            // No node leaks: every stored node is reachable from the root.
            let reachable = count_nodes(&mem, root.as_ref());
            assert_eq!(reachable, mem.nodes.borrow().len(), "round {round}");
        }
    }

    fn count_nodes(mem: &Mem, root: Option<&Entry>) -> usize {
        fn walk(mem: &Mem, id: NodeId) -> usize {
            match mem.node(id).unwrap() {
                Node::Leaf(_) => 1,
                Node::Inner(es) => 1 + es.iter().map(|e| walk(mem, e.child)).sum::<usize>(),
            }
        }
        root.map_or(0, |r| walk(mem, r.child))
    }

    /// Keys larger than a node (a document id of 60,000 characters emitted as a key)
    /// still make a tree, through builds and modifications: `modify` used to add levels
    /// for ever once two entries of an inner level each filled a node.
    #[test]
    fn keys_larger_than_a_node() {
        // Key `i`: its number, padded to a length that depends on it (some over a node).
        let big = |i: u32| {
            let mut k = i.to_be_bytes().to_vec();
            k.resize([10, NODE_BYTES, 5 * NODE_BYTES][i as usize % 3], b'x');
            k
        };
        let mem = Mem::default();
        let mut sink = MemSink(&mem, 0);
        let mut rng = Lcg(7);
        let mut model = BTreeMap::new();
        // keys 2, 5, 8: all of them larger than a node
        let rows: Vec<Row> = (0..3u32)
            .map(|i| {
                model.insert(i * 3 + 2, u64::from(i));
                Row {
                    key: big(i * 3 + 2),
                    value: val(i),
                }
            })
            .collect();
        let mut root = build(&mut sink, &mut Sum, rows);
        for round in 0..30u32 {
            let mut ops: BTreeMap<u32, Option<u32>> = BTreeMap::new();
            for _ in 0..1 + rng.next(5) {
                let k = rng.next(40);
                ops.insert(k, (rng.next(4) > 0).then_some(k + round));
            }
            for (k, v) in &ops {
                match v {
                    Some(v) => model.insert(*k, u64::from(*v)),
                    None => model.remove(k),
                };
            }
            let ops: Vec<Op> = ops.into_iter().map(|(k, v)| (big(k), v.map(val))).collect();
            root = modify(&mut sink, &mut Sum, root.as_ref(), &ops).unwrap();
            assert_eq!(count_nodes(&mem, root.as_ref()), mem.nodes.borrow().len());
            let (parts, n) = reduce_range(&mem, root.as_ref(), &Range::all(), &mut Sum).unwrap();
            assert_eq!(n, model.len() as u64, "round {round}");
            assert_eq!(total(&parts), model.values().sum::<u64>(), "round {round}");
        }
    }

    #[test]
    fn empty_ranges_and_empty_trees() {
        let mem = Mem::default();
        let mut sink = MemSink(&mem, 0);
        assert_eq!(build(&mut sink, &mut Sum, Vec::<Row>::new()), None);
        let root = build(
            &mut sink,
            &mut Sum,
            vec![Row {
                key: key(5),
                value: val(5),
            }],
        );
        let r = Range {
            lo: Bound::Included(key(6)),
            hi: Bound::Included(key(4)),
        };
        assert!(r.is_empty());
        let (parts, n) = reduce_range(&mem, root.as_ref(), &r, &mut Sum).unwrap();
        assert!(parts.is_empty() && n == 0);
    }
}
