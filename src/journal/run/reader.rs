//! [`Run`]: an open run. Opening checks the header, the footer, the block index and the
//! bloom filter, and keeps the index and the filter in memory; a point read ([`Run::get`])
//! is one filter probe and, on a maybe, one block read; a block is read and checked each
//! time it is needed (there is no block cache).
//!
//! Invariant: opening and reading never panic on any bytes; a run whose checks fail is
//! [`Error::Corrupt`] naming the run (and the key being read), never wrong bytes.
//! Invariant: a run is never written through a `Run`; [`Run::sync_data`] is its owner's
//! call.

use bytes::Bytes;

use super::bloom::Bloom;
use super::format::{
    self, BlockRef, Footer, RUN_FOOTER_BYTES, RUN_HEADER_BYTES, RunOp, crc_matches, run_file_name,
};
use super::iter::RunIter;
use crate::db::{Direction, KeyRange};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::FsFile;

/// What a run says of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The run holds no op on the key: an older source answers.
    Absent,
    /// The key's value.
    Put(Bytes),
    /// The key was deleted: no older source answers.
    Deleted,
}

/// An open run: its block index and bloom filter in memory, its blocks read on demand.
pub(crate) struct Run {
    file: Box<dyn FsFile>,
    name: String,
    id: u64,
    ops: u64,
    /// The file's length.
    bytes: u64,
    pub(super) blocks: Vec<BlockRef>,
    pub(super) bloom: Bloom,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("name", &self.name)
            .field("ops", &self.ops)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

/// The error for run `name`'s bytes failing a check, while reading `key` (empty at open).
fn corrupt_error(name: &str, key: &[u8], reason: CorruptReason) -> Error {
    Error::Corrupt {
        db: name.to_string(),
        key: key.to_vec(),
        height: None,
        reason,
    }
}

impl Run {
    /// Opens run `id` in `file` and checks its header, footer, block index and filter.
    /// `Err(Corrupt)` names the run: a file cut anywhere, or any changed byte of those
    /// parts, is refused here; a changed byte in a block is found when the block is read.
    pub(crate) fn open(file: Box<dyn FsFile>, name: &str, id: u64) -> Result<Run> {
        // The keyspace, the run and its file (under the journal's `runs/`), for errors.
        let name = format!("{name} run {id} (runs/{name}/{})", run_file_name(id));
        let corrupt = |reason| corrupt_error(&name, &[], reason);
        let io = |op| {
            let name = name.clone();
            move |e| Error::storage(&name, op, e)
        };
        let len = file.len().map_err(io("stat run"))?;
        if len < (RUN_HEADER_BYTES + RUN_FOOTER_BYTES) as u64 {
            return Err(corrupt(CorruptReason::Truncated {
                needed: RUN_HEADER_BYTES + RUN_FOOTER_BYTES - len as usize,
            }));
        }
        let mut header = [0u8; RUN_HEADER_BYTES];
        file.read_at(0, &mut header)
            .map_err(io("read run header"))?;
        format::check_header(&header, id).map_err(corrupt)?;
        let mut footer = [0u8; RUN_FOOTER_BYTES];
        file.read_at(len - RUN_FOOTER_BYTES as u64, &mut footer)
            .map_err(io("read run footer"))?;
        let Footer {
            meta_offset,
            ops,
            meta_len,
            meta_crc,
        } = format::decode_footer(&footer).map_err(corrupt)?;
        if meta_offset < RUN_HEADER_BYTES as u64
            || meta_offset.checked_add(u64::from(meta_len)) != Some(len - RUN_FOOTER_BYTES as u64)
        {
            return Err(corrupt(CorruptReason::Invalid(
                "run: the footer's meta does not end at the footer",
            )));
        }
        let mut meta = vec![0u8; meta_len as usize];
        file.read_at(meta_offset, &mut meta)
            .map_err(io("read run meta"))?;
        crc_matches(meta_crc, &meta).map_err(corrupt)?;
        let (blocks, bloom) = format::parse_meta(&meta, meta_offset).map_err(corrupt)?;
        if (blocks.is_empty()) != (ops == 0) {
            return Err(corrupt(CorruptReason::Invalid(
                "run: blocks without ops, or ops without blocks",
            )));
        }
        Ok(Run {
            file,
            name,
            id,
            ops,
            bytes: len,
            blocks,
            bloom,
        })
    }

    /// The run's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Ops in the run.
    pub(crate) fn ops(&self) -> u64 {
        self.ops
    }

    /// Reads and checks block `i`, returning its ops in key order; `key` is the key being
    /// read, for the error (empty when iterating).
    pub(super) fn block(&self, i: usize, key: &[u8]) -> Result<Vec<RunOp>> {
        let b = &self.blocks[i];
        let mut framed = vec![0u8; b.len as usize];
        self.file
            .read_at(b.offset, &mut framed)
            .map_err(|e| Error::storage(&self.name, "read run block", e))?;
        let ops = format::decode_block(&framed, &b.first_key)
            .map_err(|r| corrupt_error(&self.name, key, r))?;
        // Every key of block i lies below block i + 1's first key (the index was checked
        // to increase; a block's own order is checked by `decode_block`).
        if let (Some(next), Some((last, _))) = (self.blocks.get(i + 1), ops.last())
            && last >= &next.first_key
        {
            return Err(corrupt_error(
                &self.name,
                key,
                CorruptReason::Invalid("run: blocks overlap"),
            ));
        }
        Ok(ops)
    }

    /// The block that would hold `key`: the last whose first key is ≤ `key`.
    pub(super) fn block_for(&self, key: &[u8]) -> Option<usize> {
        self.blocks
            .partition_point(|b| &b.first_key[..] <= key)
            .checked_sub(1)
    }

    /// What the run says of `key`: one filter probe, and on a maybe one block read.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Lookup> {
        if !self.bloom.may_contain(key) {
            return Ok(Lookup::Absent);
        }
        let Some(i) = self.block_for(key) else {
            return Ok(Lookup::Absent);
        };
        let ops = self.block(i, key)?;
        Ok(match ops.binary_search_by(|(k, _)| k[..].cmp(key)) {
            Ok(at) => match &ops[at].1 {
                Some(v) => Lookup::Put(v.clone()),
                None => Lookup::Deleted,
            },
            Err(_) => Lookup::Absent,
        })
    }

    /// The run's ops in `range`, tombstones included, in `direction`'s key order; a block
    /// is read when the iteration reaches it.
    pub(crate) fn iter(&self, range: &KeyRange, direction: Direction) -> RunIter<&Run> {
        RunIter::new(self, range, direction)
    }

    /// Syncs the run's file (`sync_data`): its bytes are durable when this returns `Ok`.
    pub(crate) fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Bytes of the run's file.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::fs::SimFs;
    use crate::journal::run::RUN_BLOCK_BYTES;
    use crate::journal::run::test_support::{
        Spec, check_run, file, key, lookup_of, model, range_of, reopen, write, write_in,
    };

    #[test]
    fn a_run_reads_back_as_its_ops_by_key_and_by_range_both_ways() {
        fn prop(spec: Spec, a: u16, b: u16, kind: u8) -> TestResult {
            let fs = SimFs::new();
            let m = model(&spec);
            // Blocks from one op each to 16 KiB.
            let block_bytes = [1, 300, 4096, RUN_BLOCK_BYTES][kind as usize % 4];
            let run = write_in(&fs, "a.run", 7, &m, block_bytes);
            TestResult::from_bool(check_run(&run, &m, &range_of(a, b, kind)).is_ok())
        }
        QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(Spec, u16, u16, u8) -> TestResult);
    }

    #[test]
    fn the_run_check_rejects_a_wrong_value_a_lost_tombstone_and_a_missing_key() {
        let fs = SimFs::new();
        let spec: Spec = (0..200)
            .map(|n| (n, (n % 5 != 0).then_some(n as u8)))
            .collect();
        let m = model(&spec);
        let run = write(&fs, "a.run", 1, &m);
        assert_eq!(check_run(&run, &m, &KeyRange::all()), Ok(()));
        let mut wrong = m.clone();
        wrong.insert(key(3), Some(b"other".to_vec()));
        assert!(check_run(&run, &wrong, &KeyRange::all()).is_err());
        let mut lost = m.clone();
        lost.remove(&key(5));
        assert!(check_run(&run, &lost, &KeyRange::all()).is_err());
        let mut extra = m.clone();
        extra.insert(key(400), None);
        assert!(check_run(&run, &extra, &KeyRange::all()).is_err());
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused_or_answered_right_never_wrong() {
        let fs = SimFs::new();
        // Small blocks, short keys, a tombstone in four: every byte of the file is flipped,
        // so it is kept small.
        let m: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..24u8)
            .map(|n| (vec![b'k', n * 2], (n % 4 != 0).then(|| vec![n; 60])))
            .collect();
        let run = write_in(&fs, "a.run", 5, &m, 256);
        assert!(run.blocks.len() >= 4, "the test needs several blocks");
        let mut bytes = vec![0u8; reopen(&fs, "a.run").len().unwrap() as usize];
        reopen(&fs, "a.run").read_at(0, &mut bytes).unwrap();
        let keys: Vec<Vec<u8>> = (0..50u8).map(|n| vec![b'k', n]).collect();
        let try_bytes = |b: &[u8]| {
            let f = file(&fs, "x.run");
            f.write_at(0, b).unwrap();
            match Run::open(reopen(&fs, "x.run"), "ks", 5) {
                Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "{e}"),
                Ok(run) => {
                    // Opened: every answer is right, or the read is refused.
                    for k in &keys {
                        match run.get(k) {
                            Ok(got) => assert_eq!(got, lookup_of(&m, k)),
                            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "{e}"),
                        }
                    }
                    for r in run.iter(&KeyRange::all(), Direction::Forward) {
                        match r {
                            Ok((k, v)) => assert_eq!(
                                lookup_of(&m, &k),
                                v.map_or(Lookup::Deleted, Lookup::Put)
                            ),
                            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "{e}"),
                        }
                    }
                }
            }
        };
        // A flip in the header, the meta (the block index and the bloom filter) or the
        // footer is refused at open; one in a block, when the block is read.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 1 << (i % 8);
            try_bytes(&b);
        }
        for cut in 0..bytes.len() {
            let f = file(&fs, "x.run");
            f.write_at(0, &bytes[..cut]).unwrap();
            assert!(
                matches!(
                    Run::open(reopen(&fs, "x.run"), "ks", 5),
                    Err(Error::Corrupt { .. })
                ),
                "cut {cut}"
            );
        }
        // The run opened under another id is refused.
        let f = file(&fs, "y.run");
        f.write_at(0, &bytes).unwrap();
        assert!(matches!(
            Run::open(reopen(&fs, "y.run"), "ks", 6),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn any_bytes_open_as_a_run_or_are_refused_without_a_panic() {
        fn prop(bytes: Vec<u8>, splice: Vec<u8>, at: usize) -> bool {
            let fs = SimFs::new();
            // Arbitrary bytes, and a valid run with arbitrary bytes written over it.
            let spec: Spec = (0..30).map(|n| (n * 17, Some(n as u8))).collect();
            write(&fs, "v.run", 1, &model(&spec));
            for whole in [false, true] {
                let f = file(&fs, "x.run");
                if whole {
                    let mut b = vec![0u8; reopen(&fs, "v.run").len().unwrap() as usize];
                    reopen(&fs, "v.run").read_at(0, &mut b).unwrap();
                    let at = at % b.len();
                    let end = (at + splice.len()).min(b.len());
                    b[at..end].copy_from_slice(&splice[..end - at]);
                    f.write_at(0, &b).unwrap();
                } else {
                    f.write_at(0, &bytes).unwrap();
                }
                if let Ok(run) = Run::open(reopen(&fs, "x.run"), "ks", 1) {
                    for n in (0..600).step_by(11) {
                        let _ = run.get(&key(n));
                    }
                    let _ = run.iter(&KeyRange::all(), Direction::Reverse).count();
                }
            }
            true
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(Vec<u8>, Vec<u8>, usize) -> bool);
    }

    #[test]
    fn an_empty_run_opens_and_holds_nothing() {
        let fs = SimFs::new();
        let run = write(&fs, "a.run", 3, &BTreeMap::new());
        assert_eq!((run.id(), run.ops()), (3, 0));
        assert_eq!(run.get(b"x").unwrap(), Lookup::Absent);
        assert_eq!(run.iter(&KeyRange::all(), Direction::Reverse).count(), 0);
    }
}
