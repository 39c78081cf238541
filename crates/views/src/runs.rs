//! The rows of a bulk load (a fresh index's first round): packed in memory, spilled as
//! sorted runs to unnamed files beside the database when they outgrow a bound, and merged
//! back in key order for the bottom-up tree build. The runs are the build's only copy of
//! those rows; the files vanish when dropped (or with the process).

use crate::tree::Row;
use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

/// Rows packed: their bytes in blocks of `BLOCK` (never reallocated), one small index entry
/// per row. About 120 bytes per typical row instead of ~200 as two `Vec`s each.
#[derive(Default)]
struct RowBuffer {
    blocks: Vec<Vec<u8>>,
    /// (block, offset, key length, value length)
    index: Vec<(u32, u32, u32, u32)>,
}

impl RowBuffer {
    const BLOCK: usize = 1 << 20;

    fn push(&mut self, key: &[u8], value: &[u8]) {
        let len = key.len() + value.len();
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= len);
        if !fits {
            self.blocks.push(Vec::with_capacity(Self::BLOCK.max(len)));
        }
        let block = self.blocks.len() - 1;
        let b = &mut self.blocks[block];
        let offset = b.len();
        b.extend_from_slice(key);
        b.extend_from_slice(value);
        self.index.push((
            block as u32,
            offset as u32,
            key.len() as u32,
            value.len() as u32,
        ));
    }

    /// Memory held (allocated, not only used).
    fn bytes(&self) -> usize {
        let blocks: usize = self.blocks.iter().map(Vec::capacity).sum();
        blocks + self.index.capacity() * std::mem::size_of::<(u32, u32, u32, u32)>()
    }

    fn slices<'a>(
        blocks: &'a [Vec<u8>],
        &(b, o, k, v): &(u32, u32, u32, u32),
    ) -> (&'a [u8], &'a [u8]) {
        let (o, k, v) = (o as usize, k as usize, v as usize);
        let bytes = &blocks[b as usize][o..o + k + v];
        bytes.split_at(k)
    }

    /// Puts the index in key order.
    fn sort(&mut self) {
        let blocks = &self.blocks;
        (self.index)
            .sort_unstable_by(|a, b| Self::slices(blocks, a).0.cmp(Self::slices(blocks, b).0));
    }

    /// The rows in key order, as (key, value) slices.
    fn sorted(&mut self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.sort();
        let blocks = &self.blocks;
        self.index.iter().map(move |e| Self::slices(blocks, e))
    }
}

/// A row read back in key order: borrowed from memory, or owned when it came from a run.
pub(crate) type SortedRow<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// One view's rows of a bulk load: those in memory and the runs spilled so far.
#[derive(Default)]
pub(crate) struct BulkRows {
    memory: RowBuffer,
    runs: Vec<File>,
}

impl BulkRows {
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.memory.push(key, value)
    }

    /// Bytes held in memory.
    pub(crate) fn bytes(&self) -> usize {
        self.memory.bytes()
    }

    /// Writes the rows in memory as one sorted run to an unnamed file in `dir` and frees
    /// them. A run is lengths then bytes per row: `u32` key length, `u32` value length
    /// (little-endian), key, value.
    pub(crate) fn spill(&mut self, dir: &Path) -> io::Result<()> {
        if self.memory.index.is_empty() {
            return Ok(());
        }
        let mut memory = std::mem::take(&mut self.memory);
        let mut file = tempfile::tempfile_in(dir)?;
        let mut w = BufWriter::with_capacity(1 << 16, &mut file);
        for (k, v) in memory.sorted() {
            w.write_all(&(k.len() as u32).to_le_bytes())?;
            w.write_all(&(v.len() as u32).to_le_bytes())?;
            w.write_all(k)?;
            w.write_all(v)?;
        }
        w.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.rewind()?;
        self.runs.push(file);
        Ok(())
    }

    /// All rows in key order (keys are unique). Reading a run back can fail: the rows then
    /// end early and the error is left in `failed`, for the caller to check after use.
    pub(crate) fn sorted<'a>(
        &'a mut self,
        failed: &'a Cell<Option<io::Error>>,
    ) -> Box<dyn Iterator<Item = SortedRow<'a>> + 'a> {
        let runs = std::mem::take(&mut self.runs);
        let memory = self.memory.sorted();
        if runs.is_empty() {
            return Box::new(memory.map(|(k, v)| (Cow::Borrowed(k), Cow::Borrowed(v))));
        }
        let mut sources: Vec<Box<dyn Iterator<Item = io::Result<Row>> + 'a>> = runs
            .into_iter()
            .map(|f| Box::new(RunReader(BufReader::with_capacity(1 << 16, f))) as Box<_>)
            .collect();
        sources.push(Box::new(memory.map(|(k, v)| {
            Ok(Row {
                key: k.to_vec(),
                value: v.to_vec(),
            })
        })));
        let mut merge = Merge {
            sources,
            heads: BinaryHeap::new(),
        };
        for i in 0..merge.sources.len() {
            if let Err(e) = merge.advance(i) {
                failed.set(Some(e));
                return Box::new(std::iter::empty());
            }
        }
        Box::new(std::iter::from_fn(move || match merge.next()? {
            Ok(row) => Some((Cow::Owned(row.key), Cow::Owned(row.value))),
            Err(e) => {
                failed.set(Some(e));
                None
            }
        }))
    }
}

/// Rows read back from a run.
struct RunReader(BufReader<File>);

impl Iterator for RunReader {
    type Item = io::Result<Row>;

    fn next(&mut self) -> Option<io::Result<Row>> {
        match self.0.fill_buf() {
            Ok([]) => return None,
            Err(e) => return Some(Err(e)),
            Ok(_) => {}
        }
        let mut lengths = [0u8; 8];
        if let Err(e) = self.0.read_exact(&mut lengths) {
            return Some(Err(e));
        }
        let len = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
        let mut key = vec![0; len(&lengths[..4])];
        let mut value = vec![0; len(&lengths[4..])];
        let read = (self.0.read_exact(&mut key)).and_then(|()| self.0.read_exact(&mut value));
        Some(read.map(|()| Row { key, value }))
    }
}

/// A source's next row in the merge's heap: (key, source, value), least key first.
type Head = Reverse<(Vec<u8>, usize, Vec<u8>)>;

/// A k-way merge of sorted sources: the heap holds each source's next row.
struct Merge<'a> {
    sources: Vec<Box<dyn Iterator<Item = io::Result<Row>> + 'a>>,
    heads: BinaryHeap<Head>,
}

impl Merge<'_> {
    fn advance(&mut self, source: usize) -> io::Result<()> {
        if let Some(row) = self.sources[source].next().transpose()? {
            self.heads.push(Reverse((row.key, source, row.value)));
        }
        Ok(())
    }

    fn next(&mut self) -> Option<io::Result<Row>> {
        let Reverse((key, source, value)) = self.heads.pop()?;
        Some(self.advance(source).map(|()| Row { key, value }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows with scattered keys, one bigger than a block.
    fn rows() -> Vec<Row> {
        let big = vec![7u8; RowBuffer::BLOCK + 10];
        (0..5000u32)
            .rev()
            .map(|i| Row {
                key: format!("k{:05}", (i * 7919) % 5000).into_bytes(),
                value: if i == 1234 {
                    big.clone()
                } else {
                    i.to_be_bytes().to_vec()
                },
            })
            .collect()
    }

    fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        rows
    }

    fn read_back(buf: &mut BulkRows, failed: &Cell<Option<io::Error>>) -> Vec<Row> {
        (buf.sorted(failed))
            .map(|(k, v)| Row {
                key: k.into_owned(),
                value: v.into_owned(),
            })
            .collect()
    }

    #[test]
    fn memory_rows_come_back_in_key_order() {
        let mut buf = BulkRows::default();
        for r in rows() {
            buf.push(&r.key, &r.value);
        }
        assert!(
            buf.memory.blocks.len() > 1,
            "the big row took its own block"
        );
        let failed = Cell::new(None);
        let got = read_back(&mut buf, &failed);
        assert!(failed.take().is_none());
        assert_eq!(got, sorted(rows()));
    }

    #[test]
    fn spilled_runs_merge_back_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        for spill_every in [1, 7, 1000, 4999, 5000] {
            let mut buf = BulkRows::default();
            for (i, r) in rows().into_iter().enumerate() {
                buf.push(&r.key, &r.value);
                if (i + 1) % spill_every == 0 {
                    buf.spill(dir.path()).unwrap();
                    assert_eq!(buf.bytes(), 0);
                }
            }
            let failed = Cell::new(None);
            let got = read_back(&mut buf, &failed);
            assert!(failed.take().is_none());
            assert_eq!(got, sorted(rows()), "spilling every {spill_every} rows");
        }
        // The runs were unnamed files: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_truncated_run_is_an_error_not_fewer_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = BulkRows::default();
        for r in rows().into_iter().take(100) {
            buf.push(&r.key, &r.value);
        }
        buf.spill(dir.path()).unwrap();
        let len = buf.runs[0].metadata().unwrap().len();
        // Cut inside the last row's value, then inside the first row's lengths: the rows
        // before the cut may come, the error must.
        for (cut, most) in [(3, 99), (len - 5, 0)] {
            buf.runs[0].set_len(len - cut).unwrap();
            let failed = Cell::new(None);
            let mut run = BulkRows {
                memory: RowBuffer::default(),
                runs: vec![buf.runs[0].try_clone().unwrap()],
            };
            buf.runs[0].rewind().unwrap();
            assert!(run.sorted(&failed).count() <= most);
            let e = failed.take().expect("the short read is reported");
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }
}
