//! [`RunWriter`]: writes one run, op by op, in strictly increasing key order — each block
//! to the file when it reaches its size, then the meta and the footer — and sizes the run's
//! bloom filter.
//!
//! Invariant: a writer refuses every call after its first error: a run it did not
//! [`finish`](RunWriter::finish) with `Ok` is incomplete and must not be listed.
//! Invariant: nothing is synced here; `finish` only starts the writeback, the run's owner
//! syncs it.

use bytes::Bytes;

use super::bloom::{BLOOM_BITS_PER_KEY, Bloom, foldable_bits, key_hashes};
use super::format::{self, BLOCK_LEN_BYTES, BlockRef, Footer, RUN_HEADER_BYTES};
use crate::error::{Error, Result};
use crate::fs::FsFile;

/// Body bytes after which a block is closed. Why 16 KiB: a point read costs one `pread`
/// of one block, and the block index keeps one key per block in memory — about 0.6 MiB
/// per million ops of the app's shape (40-byte keys, 148-byte values: ~11,600 blocks of
/// ~56 bytes of index each), beside the bloom filter's 1.2–2.5 MiB, ADR 0014.
pub const RUN_BLOCK_BYTES: usize = 16 * 1024;
/// The largest bound on a run's keys for which [`RunWriter::reserve_keys`] builds the
/// filter as keys come: 2^26 keys, a filter of at most 2^30 bits (128 MiB) before it is
/// folded. Why: the app's state at 300k light blocks is ~1M keys; a bound far past any
/// real run's is more likely a caller's overflow, and the writer then keeps each key's
/// hashes instead, sized by the keys actually pushed.
const BLOOM_PRESIZED_KEYS_MAX: u64 = 1 << 26;

/// What [`RunWriter::finish`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunMeta {
    /// The run's id, as its header holds it.
    pub(crate) id: u64,
    /// Ops in the run (puts and tombstones).
    pub(crate) ops: u64,
    /// The file's length.
    pub(crate) bytes: u64,
}

/// Writes one run, op by op, in strictly increasing key order. Nothing is synced.
pub(crate) struct RunWriter {
    file: Box<dyn FsFile>,
    /// For errors: the keyspace and run.
    name: String,
    id: u64,
    /// The open block: [`BLOCK_LEN_BYTES`] for its length (filled in when it closes), then
    /// its body.
    block: Vec<u8>,
    block_first_key: Option<Bytes>,
    /// Where the open block will be written.
    at: u64,
    /// Body bytes after which a block closes ([`RUN_BLOCK_BYTES`] but in tests).
    block_bytes: usize,
    /// The blocks written, for the meta's block index.
    index: Vec<BlockRef>,
    /// The run's keys, for its filter: their two base hashes each until the writer knows
    /// a bound on its keys ([`RunWriter::reserve_keys`]), then the filter itself.
    filter_keys: FilterKeys,
    /// Ops pushed.
    ops: u64,
    /// The last key pushed (reused: no allocation per op); `None` before the first.
    last_key: Option<Vec<u8>>,
    /// Set by the first failure: the writer refuses everything after it.
    failed: bool,
}

/// What a [`RunWriter`] keeps of its keys for the run's bloom filter.
enum FilterKeys {
    /// Each key's two base hashes (8 bytes a key), until a bound is known: the filter is
    /// sized from the keys' count when the run finishes ([`Bloom::with_keys`]).
    Hashes(Vec<(u32, u32)>),
    /// The filter itself, sized for `bound` keys, folded down at the finish.
    Filter { bloom: Bloom, bound: u64 },
}

impl RunWriter {
    /// Starts run `id` in `file` (empty; the caller created it), writing its header.
    /// `name` says whose run it is in errors.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the engine sizes its blocks from its options (`with_block_bytes`)"
        )
    )]
    pub(crate) fn create(file: Box<dyn FsFile>, name: &str, id: u64) -> Result<Self> {
        Self::with_block_bytes(file, name, id, RUN_BLOCK_BYTES)
    }

    /// As [`RunWriter::create`], closing blocks past `block_bytes` (at least 1): tests use
    /// small blocks to make many of them.
    pub(crate) fn with_block_bytes(
        file: Box<dyn FsFile>,
        name: &str,
        id: u64,
        block_bytes: usize,
    ) -> Result<Self> {
        let header = format::encode_header(id);
        let name = format!("{name} run {id}");
        file.write_at(0, &header)
            .map_err(|e| Error::storage(&name, "write run header", e))?;
        Ok(RunWriter {
            file,
            name,
            id,
            block: {
                let mut block = Vec::with_capacity(block_bytes.min(RUN_BLOCK_BYTES) + 1024);
                format::start_block(&mut block);
                block
            },
            block_first_key: None,
            at: RUN_HEADER_BYTES as u64,
            block_bytes: block_bytes.max(1),
            index: Vec::new(),
            filter_keys: FilterKeys::Hashes(Vec::new()),
            ops: 0,
            last_key: None,
            failed: false,
        })
    }

    /// Tells the writer it will take at most `keys` more keys (the caller's bound: a step's
    /// ops, a merge's inputs' ops): its filter is then built as keys come, sized for the
    /// bound (at least [`BLOOM_BITS_PER_KEY`] bits a key, an odd number times a power of
    /// two: [`foldable_bits`]) and folded in halves down to the keys pushed when the run
    /// finishes. Memory: ≤ 2.5 bytes a bound key instead of 8 for each key's hashes (a
    /// merge's output at 300k light blocks is ~1M keys). Once the filter is sized, a later
    /// call changes nothing: the first bound stands.
    pub(crate) fn reserve_keys(&mut self, keys: usize) {
        let FilterKeys::Hashes(hashes) = &mut self.filter_keys else {
            return;
        };
        let bound = (hashes.len() as u64).saturating_add(keys as u64);
        if bound > BLOOM_PRESIZED_KEYS_MAX {
            return;
        }
        let mut bloom = Bloom::empty(foldable_bits(bound * BLOOM_BITS_PER_KEY));
        for h in hashes.drain(..) {
            bloom.insert(h);
        }
        self.filter_keys = FilterKeys::Filter { bloom, bound };
    }

    /// Adds an op: `Some(value)` a put, `None` a tombstone. `Err(InvalidInput)` when `key`
    /// is not above the last key pushed, or a key or value is 4 GiB or more; after any
    /// error the writer refuses every call (the run is incomplete and must not be listed).
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.push_split(key, value.map(|v| (&[][..], v)))
    }

    /// [`RunWriter::push`] with a value given in two pieces, `head` then `tail`, stored as
    /// one value (their concatenation). Why: a separating keyspace stores a short value
    /// after a one-byte tag (ADR 0016); given whole, every such value would be allocated
    /// and copied once more before this copy.
    pub(crate) fn push_split(&mut self, key: &[u8], value: Option<(&[u8], &[u8])>) -> Result<()> {
        if self.failed {
            return Err(self.failed_earlier());
        }
        let in_order = self.last_key.as_ref().is_none_or(|last| key > &last[..]);
        let key_len = u32::try_from(key.len());
        let value_len = value.map(|(head, tail)| u32::try_from(head.len() + tail.len()));
        let (Ok(_), true, Ok(_)) = (key_len, in_order, value_len.transpose()) else {
            self.failed = true;
            return Err(Error::InvalidInput(format!(
                "{}: ops must come in strictly increasing key order, keys and values under 4 GiB",
                self.name
            )));
        };
        if self.block_first_key.is_none() {
            self.block_first_key = Some(Bytes::copy_from_slice(key));
        }
        format::encode_op(&mut self.block, key, value);
        match &mut self.filter_keys {
            FilterKeys::Hashes(hashes) => hashes.push(key_hashes(key)),
            FilterKeys::Filter { bloom, bound } => {
                debug_assert!(self.ops < *bound, "more keys than the bound reserved");
                bloom.insert(key_hashes(key));
            }
        }
        self.ops += 1;
        let last = self.last_key.get_or_insert_with(Vec::new);
        last.clear();
        last.extend_from_slice(key);
        if self.block.len() - BLOCK_LEN_BYTES >= self.block_bytes {
            self.close_block()?;
        }
        Ok(())
    }

    /// Writes the open block, framed in the buffer it was built in (its length, reserved
    /// before the body, filled in and its crc32 appended): no copy of a block is made.
    fn close_block(&mut self) -> Result<()> {
        let Some(first_key) = self.block_first_key.take() else {
            return Ok(());
        };
        let body_len = u32::try_from(self.block.len() - BLOCK_LEN_BYTES)
            .map_err(|_| self.block_too_large())?;
        format::seal_block(&mut self.block, body_len);
        let framed_len = u32::try_from(self.block.len()).map_err(|_| self.block_too_large())?;
        if let Err(e) = self.file.write_at(self.at, &self.block) {
            self.failed = true;
            return Err(Error::storage(&self.name, "write run block", e));
        }
        self.index.push(BlockRef {
            offset: self.at,
            len: framed_len,
            first_key,
        });
        self.at += u64::from(framed_len);
        format::start_block(&mut self.block);
        Ok(())
    }

    /// Writes the last block, the meta and the footer. The run is complete, not synced.
    pub(crate) fn finish(mut self) -> Result<RunMeta> {
        if self.failed {
            return Err(self.failed_earlier());
        }
        self.close_block()?;
        let ops = self.ops;
        let bloom = match std::mem::replace(&mut self.filter_keys, FilterKeys::Hashes(Vec::new())) {
            FilterKeys::Hashes(hashes) => Bloom::with_keys(hashes.into_iter()),
            FilterKeys::Filter { mut bloom, .. } => {
                bloom.fold_for(ops);
                bloom
            }
        };
        let mut meta = format::encode_meta(&self.index, &bloom);
        let meta_len = u32::try_from(meta.len()).map_err(|_| {
            Error::InvalidInput(format!("{}: a run's meta of 4 GiB or more", self.name))
        })?;
        let footer = format::encode_footer(&Footer {
            meta_offset: self.at,
            ops,
            meta_len,
            meta_crc: crc32fast::hash(&meta),
        });
        meta.extend_from_slice(&footer);
        self.file
            .write_at(self.at, &meta)
            .map_err(|e| Error::storage(&self.name, "write run meta", e))?;
        // The checkpoint that lists the run syncs it; its bytes start for the disk now, so
        // that sync finds them written and takes less of the applier's time. A failure is
        // a failed write: the run is not listed.
        self.file
            .start_writeback()
            .map_err(|e| Error::storage(&self.name, "start run writeback", e))?;
        Ok(RunMeta {
            id: self.id,
            ops,
            bytes: self.at + meta.len() as u64,
        })
    }

    /// The error of every call after the writer's first failure.
    fn failed_earlier(&self) -> Error {
        Error::InvalidInput(format!("{}: the run's writer failed earlier", self.name))
    }

    /// A block of 4 GiB or more: the writer fails.
    fn block_too_large(&mut self) -> Error {
        self.failed = true;
        Error::InvalidInput(format!("{}: a block of 4 GiB or more", self.name))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::fs::SimFs;
    use crate::journal::run::reader::{Lookup, Run};
    use crate::journal::run::test_support::{file, reopen, write, write_in};

    #[test]
    fn out_of_order_keys_are_refused_and_the_writer_stays_refused() {
        let fs = SimFs::new();
        let mut w = RunWriter::create(file(&fs, "a.run"), "ks", 1).unwrap();
        w.push(b"b", Some(b"1")).unwrap();
        assert!(matches!(w.push(b"b", None), Err(Error::InvalidInput(_))));
        assert!(matches!(w.push(b"c", None), Err(Error::InvalidInput(_))));
        assert!(matches!(w.finish(), Err(Error::InvalidInput(_))));
        let mut w = RunWriter::create(file(&fs, "b.run"), "ks", 1).unwrap();
        w.push(b"b", Some(b"1")).unwrap();
        assert!(matches!(w.push(b"a", None), Err(Error::InvalidInput(_))));
    }

    /// A block closes at the first op that brings it to its size, not before: 61-byte ops
    /// in 256-byte blocks make blocks of 5 ops (305 bytes), and the default size holds
    /// them all in one.
    #[test]
    fn a_block_closes_once_it_reaches_its_size() {
        let fs = SimFs::new();
        let m: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..100u16)
            .map(|n| (n.to_be_bytes().to_vec(), Some(vec![7; 50])))
            .collect();
        assert_eq!(write_in(&fs, "a.run", 1, &m, 256).blocks.len(), 20);
        assert_eq!(write_in(&fs, "b.run", 2, &m, 305).blocks.len(), 20);
        assert_eq!(write_in(&fs, "c.run", 3, &m, 306).blocks.len(), 17);
        assert_eq!(write(&fs, "d.run", 4, &m).blocks.len(), 1);
    }

    /// Keys of one length, from a generator, under a bound: an absent key passes ~1 % of
    /// the time, as without a bound. (A power-of-two filter passes 8–10 % of such keys, see
    /// [`foldable_bits`]; consecutive integers as keys would not show it.)
    #[test]
    fn a_bounded_run_passes_few_absent_keys_of_one_length() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut key = || {
            let mut k = Vec::with_capacity(40);
            while k.len() < 40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                k.extend_from_slice(&x.to_le_bytes());
            }
            k.truncate(40);
            k
        };
        let present: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
            (0..20_000).map(|_| (key(), Some(vec![1]))).collect();
        let absent: Vec<Vec<u8>> = (0..100_000).map(|_| key()).collect();
        let fs = SimFs::new();
        for (name, bound) in [
            ("a.run", Some(100_000)),
            ("b.run", Some(20_000)),
            ("c.run", None),
        ] {
            let mut w = RunWriter::create(file(&fs, name), "ks", 1).unwrap();
            if let Some(b) = bound {
                w.reserve_keys(b);
            }
            for (k, v) in &present {
                w.push(k, v.as_deref()).unwrap();
            }
            w.finish().unwrap();
            let run = Run::open(reopen(&fs, name), "ks", 1).unwrap();
            assert!(present.keys().all(|k| run.bloom.may_contain(k)));
            let passed = absent.iter().filter(|k| run.bloom.may_contain(k)).count();
            assert!(
                passed < 2_000,
                "bound {bound:?}: {passed} of 100,000 absent keys passed"
            );
        }
    }

    /// A writer told a bound far above the keys it gets writes a run whose filter passes
    /// every key and few absent ones, at the folded size; without a bound, at 10 bits a key.
    #[test]
    fn a_run_written_under_a_bound_filters_as_one_written_without() {
        let fs = SimFs::new();
        let m: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..20_000u32)
            .map(|n| (n.to_be_bytes().to_vec(), Some(vec![1; 8])))
            .collect();
        let mut w = RunWriter::create(file(&fs, "a.run"), "ks", 1).unwrap();
        w.reserve_keys(100_000);
        for (k, v) in &m {
            w.push(k, v.as_deref()).unwrap();
        }
        assert_eq!(w.finish().unwrap().ops, 20_000);
        let bounded = Run::open(reopen(&fs, "a.run"), "ks", 1).unwrap();
        let unbounded = write(&fs, "b.run", 2, &m);
        assert_eq!(
            bounded.bloom.bits.len() * 8,
            250_240,
            "1,000,960 bits halved twice"
        );
        assert_eq!(unbounded.bloom.bits.len() * 8, 200_000);
        for run in [&bounded, &unbounded] {
            assert!(m.keys().all(|k| run.bloom.may_contain(k)));
            let passed = (20_000..120_000u32)
                .filter(|n| run.bloom.may_contain(&n.to_be_bytes()))
                .count();
            assert!(passed < 2_000, "{passed} of 100,000 absent keys passed");
            assert_eq!(
                run.get(&7u32.to_be_bytes()).unwrap(),
                Lookup::Put(Bytes::from(vec![1; 8]))
            );
        }
    }
}
