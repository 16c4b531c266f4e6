//! Sorted run files (ADR 0014, step 1 of its plan): an immutable file of ops in strictly
//! increasing key order — the newest op per key of one or more apply steps, a delete kept as
//! a tombstone — read by key with a bloom filter and a block index, or in key order either
//! way, and merged newest-first into a new run.
//!
//! Layout (little-endian):
//! * header (32 bytes): `magic "FPR1" ‖ version u8 ‖ 3 zero bytes ‖ id u64 ‖ 12 zero bytes ‖
//!   crc32 of the 28 bytes before it`;
//! * blocks, one after another: `body_len u32 ‖ body ‖ crc32(body)`; a body is ops, each
//!   `tag u8 (1 put, 2 delete) ‖ key_len u32 ‖ key [‖ value_len u32 ‖ value]`, keys strictly
//!   increasing across the whole run;
//! * meta: `block_count u32`, per block `offset u64 ‖ framed_len u32 ‖ first_key_len u32 ‖
//!   first_key`, then the bloom filter `hashes u8 ‖ bit_bytes u32 ‖ bits` (at least 10
//!   bits a key; a reader takes its size from `bit_bytes`);
//! * footer (32 bytes): `meta_offset u64 ‖ op_count u64 ‖ meta_len u32 ‖ crc32(meta) u32 ‖
//!   footer_crc32 u32 (of the 24 bytes before it) ‖ magic "FPRE"`.
//!
//! Invariant: opening and reading never panic on any bytes; a run whose checks fail is
//! [`Error::Corrupt`] naming the run (and the key being read), never wrong bytes.
//! Invariant: this module does no syncing: a run is durable when its owner syncs it
//! (ADR 0014: before a manifest lists it).
//!
//! The engine (`engine.rs`) writes one run per apply step of a keyspace indexed by runs,
//! syncs it before a checkpoint's manifest lists it, and reads the listed runs newest first
//! ([`MergedRuns`] for ranges).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Bound;

use bytes::Bytes;

use crate::db::{Direction, KeyRange};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::FsFile;

/// The file name of run `id`: 20 decimal digits and `.run`.
pub(super) fn run_file_name(id: u64) -> String {
    format!("{id:020}.run")
}

/// The run magic: "FlushPoint Run", format 1.
pub(crate) const RUN_MAGIC: [u8; 4] = *b"FPR1";
/// The magic closing a run's footer: a file cut before its footer ends is not a run.
pub(crate) const RUN_FOOTER_MAGIC: [u8; 4] = *b"FPRE";
/// The run format version this build writes and reads.
pub(crate) const RUN_VERSION: u8 = 1;
/// Bytes of a run header.
pub(crate) const RUN_HEADER_BYTES: usize = 32;
/// Bytes of a run footer.
pub(crate) const RUN_FOOTER_BYTES: usize = 32;
/// Body bytes after which a block is closed. Why 16 KiB: a point read costs one `pread`
/// of one block, and the block index keeps one key per block in memory — about 0.6 MiB
/// per million ops of the app's shape (40-byte keys, 148-byte values: ~11,600 blocks of
/// ~56 bytes of index each), beside the bloom filter's 1.2–2.5 MiB, ADR 0014.
pub const RUN_BLOCK_BYTES: usize = 16 * 1024;
/// Bloom filter bits per key. Why 10: with [`BLOOM_HASHES`] hashes, a key a run does not
/// hold passes its filter ~1 % of the time, so a read of a key in none of `n` runs costs
/// about `n / 100` block reads.
pub(crate) const BLOOM_BITS_PER_KEY: u64 = 10;
/// The largest bound on a run's keys for which [`RunWriter::reserve_keys`] builds the
/// filter as keys come: 2^26 keys, a filter of at most 2^30 bits (128 MiB) before it is
/// folded. Why: the app's state at 300k light blocks is ~1M keys; a bound far past any
/// real run's is more likely a caller's overflow, and the writer then keeps each key's
/// hashes instead, sized by the keys actually pushed.
pub(crate) const BLOOM_PRESIZED_KEYS_MAX: u64 = 1 << 26;
/// Hashes per key in the bloom filter (the optimum for 10 bits a key is ~7).
pub(crate) const BLOOM_HASHES: u8 = 7;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
/// The shortest framed block: `body_len`, one op (a delete of the empty key: tag and
/// `key_len`), the crc32. A block holds at least one op.
const MIN_FRAMED_BLOCK_BYTES: u32 = BLOCK_LEN_BYTES as u32 + 1 + 4 + 4;
/// Bytes of a block's length, before its body.
const BLOCK_LEN_BYTES: usize = 4;

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

/// An op of a run: `Some(value)` a put, `None` a tombstone.
pub(crate) type RunOp = (Bytes, Option<Bytes>);

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

/// The bit count of a filter to be folded ([`Bloom::fold_for`]) that holds at least `want`
/// bits: `q · 2^f`, `q` odd and at least ~1,000, `f ≥ 3` (whole bytes at every fold).
///
/// Why not a power of two: the two base hashes are crc32s of the same key from two seeds,
/// and crc32 is affine, so for keys of one length `h1 ^ h2` is one constant. Modulo a power
/// of two `h2` is then a function of `h1`, every probe of a key follows from `h1 mod m`,
/// and an absent key passes ~8–10 % of the time instead of ~1 % (measured by a review of
/// the first version, which used powers of two). A large odd factor mixes in every bit of
/// the hashes (`tests::a_bounded_run_passes_few_absent_keys_of_one_length`).
fn foldable_bits(want: u64) -> u64 {
    let want = want.max(64);
    let f = (u64::BITS - want.leading_zeros()).saturating_sub(11).max(3);
    let q = want.div_ceil(1 << f) | 1;
    q << f
}

/// A bloom filter over a run's keys: `hashes` probes by double hashing of two crc32s.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bloom {
    hashes: u8,
    bits: Vec<u8>,
}

/// The two base hashes of `key` (crc32 from two seeds; the second forced odd, so the
/// probes step through every bit).
fn key_hashes(key: &[u8]) -> (u32, u32) {
    let mut a = crc32fast::Hasher::new_with_initial(0x5bd1_e995);
    a.update(key);
    let mut b = crc32fast::Hasher::new_with_initial(0x1b87_3593);
    b.update(key);
    (a.finalize(), b.finalize() | 1)
}

impl Bloom {
    fn with_keys(hashes: impl ExactSizeIterator<Item = (u32, u32)>) -> Self {
        let bit_count = (hashes.len() as u64 * BLOOM_BITS_PER_KEY).max(64);
        let mut bloom = Bloom::empty(bit_count.next_multiple_of(8));
        hashes.for_each(|h| bloom.insert(h));
        bloom
    }

    /// An empty filter of `bit_count` bits (a multiple of 8).
    fn empty(bit_count: u64) -> Self {
        debug_assert_eq!(bit_count % 8, 0);
        Bloom {
            hashes: BLOOM_HASHES,
            bits: vec![0; (bit_count / 8) as usize],
        }
    }

    fn insert(&mut self, h: (u32, u32)) {
        let bit_count = self.bits.len() as u64 * 8;
        for bit in probes(self.hashes, bit_count, h) {
            self.bits[(bit / 8) as usize] |= 1 << (bit % 8);
        }
    }

    /// Halves the filter while the half keeps at least [`BLOOM_BITS_PER_KEY`] bits for
    /// each of `keys` keys (and 64 bits) and a whole number of bytes, OR-ing the upper half
    /// onto the lower. Exact: a probe lands on `p mod m`, and for an even `m`,
    /// `(p mod m) mod m/2 = p mod m/2`, so the folded filter is the one built at `m/2`.
    fn fold_for(&mut self, keys: u64) {
        let want_bits = keys.saturating_mul(BLOOM_BITS_PER_KEY).max(64);
        while self.bits.len().is_multiple_of(2) && (self.bits.len() as u64 / 2) * 8 >= want_bits {
            let half = self.bits.len() / 2;
            let (low, high) = self.bits.split_at_mut(half);
            for (l, h) in low.iter_mut().zip(high.iter()) {
                *l |= *h;
            }
            self.bits.truncate(half);
        }
    }

    fn may_contain(&self, key: &[u8]) -> bool {
        probes(self.hashes, self.bits.len() as u64 * 8, key_hashes(key))
            .all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }
}

/// The bits a key's hashes `(h1, h2)` set in a filter of `bit_count` bits:
/// `h1 + i·h2 mod bit_count` for `i` in `0..hashes` (double hashing; the format's rule).
///
/// Stepped rather than divided: `(h1 + i·h2) mod m = ((h1 mod m) + i·(h2 mod m)) mod m`, so
/// each probe adds `h2 mod m` to the last and wraps at most once (both are below `m`). Two
/// divisions a key instead of `hashes`: a merge inserts every key of its output, and a
/// 64-bit division was most of an insert's time.
fn probes(hashes: u8, bit_count: u64, (h1, h2): (u32, u32)) -> impl Iterator<Item = u64> {
    let step = u64::from(h2) % bit_count;
    let mut bit = u64::from(h1) % bit_count;
    (0..hashes).map(move |_| {
        let this = bit;
        bit += step;
        if bit >= bit_count {
            bit -= bit_count;
        }
        debug_assert!(bit < bit_count, "invariant: a probe lies in the filter");
        this
    })
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
    /// Per block written: offset, framed length, first key.
    index: Vec<(u64, u32, Bytes)>,
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
    #[cfg_attr(not(test), expect(dead_code, reason = "ADR 0014 step 3: merges"))]
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
        let mut header = Vec::with_capacity(RUN_HEADER_BYTES);
        header.extend_from_slice(&RUN_MAGIC);
        header.push(RUN_VERSION);
        header.extend_from_slice(&[0; 3]);
        header.extend_from_slice(&id.to_le_bytes());
        header.extend_from_slice(&[0; 12]);
        let crc = crc32fast::hash(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(header.len(), RUN_HEADER_BYTES);
        let name = format!("{name} run {id}");
        file.write_at(0, &header)
            .map_err(|e| Error::storage(&name, "write run header", e))?;
        Ok(RunWriter {
            file,
            name,
            id,
            block: {
                let mut block = Vec::with_capacity(block_bytes.min(RUN_BLOCK_BYTES) + 1024);
                block.extend_from_slice(&[0; BLOCK_LEN_BYTES]);
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
    /// finishes. Memory: ≤ 2.5 bytes a bound key
    /// instead of 8 for each key's hashes (a merge at 300k light blocks held 17 MiB of
    /// them at the sync's peak, `benches/compare/PERFORMANCE.md`, sixteenth session).
    /// Once the filter is sized, a later call changes nothing: the first bound stands.
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
    /// after a one-byte tag (ADR 0016); built whole, every such value was allocated and
    /// copied once more before this copy (11 % of the applier thread's time at light block
    /// sync, `benches/compare/PERFORMANCE.md`, twenty-fifth session).
    pub(crate) fn push_split(&mut self, key: &[u8], value: Option<(&[u8], &[u8])>) -> Result<()> {
        if self.failed {
            return Err(Error::InvalidInput(format!(
                "{}: the run's writer failed earlier",
                self.name
            )));
        }
        let in_order = self.last_key.as_ref().is_none_or(|last| key > &last[..]);
        let key_len = u32::try_from(key.len());
        let value_len = value.map(|(head, tail)| u32::try_from(head.len() + tail.len()));
        let (Ok(key_len), true, Ok(value_len)) = (key_len, in_order, value_len.transpose()) else {
            self.failed = true;
            return Err(Error::InvalidInput(format!(
                "{}: ops must come in strictly increasing key order, keys and values under 4 GiB",
                self.name
            )));
        };
        if self.block_first_key.is_none() {
            self.block_first_key = Some(Bytes::copy_from_slice(key));
        }
        self.block
            .push(if value.is_some() { OP_PUT } else { OP_DELETE });
        self.block.extend_from_slice(&key_len.to_le_bytes());
        self.block.extend_from_slice(key);
        if let (Some((head, tail)), Some(n)) = (value, value_len) {
            self.block.extend_from_slice(&n.to_le_bytes());
            self.block.extend_from_slice(head);
            self.block.extend_from_slice(tail);
        }
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

    /// Writes the open block, framed: its length, already in place before the body, is
    /// filled in and its crc32 appended, so the block goes to the file from the buffer it
    /// was built in (framed in a copy, it cost the merger thread 12 % of its time).
    fn close_block(&mut self) -> Result<()> {
        let Some(first_key) = self.block_first_key.take() else {
            return Ok(());
        };
        let body_len = u32::try_from(self.block.len() - BLOCK_LEN_BYTES).map_err(|_| {
            self.failed = true;
            Error::InvalidInput(format!("{}: a block of 4 GiB or more", self.name))
        })?;
        let crc = crc32fast::hash(&self.block[BLOCK_LEN_BYTES..]);
        self.block[..BLOCK_LEN_BYTES].copy_from_slice(&body_len.to_le_bytes());
        self.block.extend_from_slice(&crc.to_le_bytes());
        let framed_len = u32::try_from(self.block.len()).map_err(|_| {
            self.failed = true;
            Error::InvalidInput(format!("{}: a block of 4 GiB or more", self.name))
        })?;
        if let Err(e) = self.file.write_at(self.at, &self.block) {
            self.failed = true;
            return Err(Error::storage(&self.name, "write run block", e));
        }
        self.index.push((self.at, framed_len, first_key));
        self.at += u64::from(framed_len);
        self.block.clear();
        self.block.extend_from_slice(&[0; BLOCK_LEN_BYTES]);
        Ok(())
    }

    /// Writes the last block, the meta and the footer. The run is complete, not synced.
    pub(crate) fn finish(mut self) -> Result<RunMeta> {
        if self.failed {
            return Err(Error::InvalidInput(format!(
                "{}: the run's writer failed earlier",
                self.name
            )));
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
        let mut meta = Vec::new();
        meta.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        for (offset, len, first_key) in &self.index {
            meta.extend_from_slice(&offset.to_le_bytes());
            meta.extend_from_slice(&len.to_le_bytes());
            meta.extend_from_slice(&(first_key.len() as u32).to_le_bytes());
            meta.extend_from_slice(first_key);
        }
        meta.push(bloom.hashes);
        meta.extend_from_slice(&(bloom.bits.len() as u32).to_le_bytes());
        meta.extend_from_slice(&bloom.bits);
        let meta_len = u32::try_from(meta.len()).map_err(|_| {
            Error::InvalidInput(format!("{}: a run's meta of 4 GiB or more", self.name))
        })?;
        let mut footer = Vec::with_capacity(RUN_FOOTER_BYTES);
        footer.extend_from_slice(&self.at.to_le_bytes());
        footer.extend_from_slice(&ops.to_le_bytes());
        footer.extend_from_slice(&meta_len.to_le_bytes());
        footer.extend_from_slice(&crc32fast::hash(&meta).to_le_bytes());
        let footer_crc = crc32fast::hash(&footer);
        footer.extend_from_slice(&footer_crc.to_le_bytes());
        footer.extend_from_slice(&RUN_FOOTER_MAGIC);
        debug_assert_eq!(footer.len(), RUN_FOOTER_BYTES);
        meta.extend_from_slice(&footer);
        self.file
            .write_at(self.at, &meta)
            .map_err(|e| Error::storage(&self.name, "write run meta", e))?;
        // The checkpoint that lists the run syncs it; its bytes start for the disk now, so
        // that sync finds them written (measured: the checkpoint's run syncs took 0.04–0.13
        // s of a window's 0.3 s, on the applier's thread, twenty-fifth session). A failure
        // is a failed write: the run is not listed.
        self.file
            .start_writeback()
            .map_err(|e| Error::storage(&self.name, "start run writeback", e))?;
        Ok(RunMeta {
            id: self.id,
            ops,
            bytes: self.at + meta.len() as u64,
        })
    }
}

/// One block of a run, as its index holds it.
#[derive(Debug, Clone)]
struct BlockRef {
    offset: u64,
    len: u32,
    first_key: Bytes,
}

/// An open run: its block index and bloom filter in memory, its blocks read on demand.
pub(crate) struct Run {
    file: Box<dyn FsFile>,
    name: String,
    id: u64,
    ops: u64,
    /// The file's length.
    bytes: u64,
    blocks: Vec<BlockRef>,
    bloom: Bloom,
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

/// Reads little-endian fields from a slice, failing (never panicking) past its end.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], CorruptReason> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(CorruptReason::Invalid("run: length overflow"))?;
        let s = self.b.get(self.at..end).ok_or(CorruptReason::Truncated {
            needed: end.saturating_sub(self.b.len()),
        })?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> std::result::Result<u8, CorruptReason> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> std::result::Result<u32, CorruptReason> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> std::result::Result<u64, CorruptReason> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Checks a stored crc32 against bytes.
fn crc_matches(stored: u32, bytes: &[u8]) -> std::result::Result<(), CorruptReason> {
    let computed = crc32fast::hash(bytes);
    if stored == computed {
        Ok(())
    } else {
        Err(CorruptReason::Checksum { stored, computed })
    }
}

impl Run {
    /// Opens run `id` in `file` and checks its header, footer, block index and filter.
    /// `Err(Corrupt)` names the run: a file cut anywhere, or any changed byte of those
    /// parts, is refused here; a changed byte in a block is found when the block is read.
    pub(crate) fn open(file: Box<dyn FsFile>, name: &str, id: u64) -> Result<Run> {
        // The keyspace, the run and its file (under the journal's `runs/`), for errors.
        let name = format!("{name} run {id} (runs/{name}/{})", run_file_name(id));
        let corrupt = |reason| Error::Corrupt {
            db: name.clone(),
            key: Vec::new(),
            height: None,
            reason,
        };
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
        crc_matches(le_u32(&header, 28), &header[..28]).map_err(corrupt)?;
        if header[..4] != RUN_MAGIC {
            return Err(corrupt(CorruptReason::Invalid("run: magic")));
        }
        if header[4] != RUN_VERSION {
            return Err(corrupt(CorruptReason::UnknownVersion(header[4])));
        }
        let stored_id = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        if stored_id != id {
            return Err(corrupt(CorruptReason::Invalid(
                "run: the header names another id",
            )));
        }
        let mut footer = [0u8; RUN_FOOTER_BYTES];
        file.read_at(len - RUN_FOOTER_BYTES as u64, &mut footer)
            .map_err(io("read run footer"))?;
        if footer[28..] != RUN_FOOTER_MAGIC {
            return Err(corrupt(CorruptReason::Invalid("run: footer magic")));
        }
        crc_matches(le_u32(&footer, 24), &footer[..24]).map_err(corrupt)?;
        let mut f = Fields {
            b: &footer[..24],
            at: 0,
        };
        let (meta_offset, ops, meta_len, meta_crc) =
            (|| Ok::<_, CorruptReason>((f.u64()?, f.u64()?, f.u32()?, f.u32()?)))()
                .map_err(corrupt)?;
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
        let (blocks, bloom) = parse_meta(&meta, meta_offset).map_err(corrupt)?;
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

    fn corrupt(&self, key: &[u8], reason: CorruptReason) -> Error {
        Error::Corrupt {
            db: self.name.clone(),
            key: key.to_vec(),
            height: None,
            reason,
        }
    }

    /// Reads and checks block `i`, returning its ops in key order.
    fn block(&self, i: usize, key: &[u8]) -> Result<Vec<RunOp>> {
        let b = &self.blocks[i];
        let mut framed = vec![0u8; b.len as usize];
        self.file
            .read_at(b.offset, &mut framed)
            .map_err(|e| Error::storage(&self.name, "read run block", e))?;
        let ops = decode_block(&framed, &b.first_key).map_err(|r| self.corrupt(key, r))?;
        // Every key of block i lies below block i + 1's first key (the index was checked
        // to increase; a block's own order is checked by `decode_block`).
        if let (Some(next), Some((last, _))) = (self.blocks.get(i + 1), ops.last())
            && last >= &next.first_key
        {
            return Err(self.corrupt(key, CorruptReason::Invalid("run: blocks overlap")));
        }
        Ok(ops)
    }

    /// The block that would hold `key`: the last whose first key is ≤ `key`.
    fn block_for(&self, key: &[u8]) -> Option<usize> {
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

/// Parses a run's meta: the block index (offsets within `[header, meta_offset)`, in order
/// and without gaps; first keys strictly increasing) and the bloom filter.
fn parse_meta(
    meta: &[u8],
    meta_offset: u64,
) -> std::result::Result<(Vec<BlockRef>, Bloom), CorruptReason> {
    let mut f = Fields { b: meta, at: 0 };
    let count = f.u32()?;
    let mut blocks: Vec<BlockRef> = Vec::new();
    let mut expected_offset = RUN_HEADER_BYTES as u64;
    for _ in 0..count {
        let offset = f.u64()?;
        let len = f.u32()?;
        let key_len = f.u32()? as usize;
        let first_key = Bytes::copy_from_slice(f.take(key_len)?);
        if offset != expected_offset {
            return Err(CorruptReason::Invalid("run: the block index has a gap"));
        }
        if len < MIN_FRAMED_BLOCK_BYTES {
            return Err(CorruptReason::Invalid("run: a block too short for an op"));
        }
        expected_offset = offset + u64::from(len);
        if blocks.last().is_some_and(|b| b.first_key >= first_key) {
            return Err(CorruptReason::Invalid("run: block keys out of order"));
        }
        blocks.push(BlockRef {
            offset,
            len,
            first_key,
        });
    }
    if expected_offset != meta_offset {
        return Err(CorruptReason::Invalid(
            "run: the blocks do not end where the meta begins",
        ));
    }
    let hashes = f.u8()?;
    let bit_bytes = f.u32()? as usize;
    let bits = f.take(bit_bytes)?.to_vec();
    if hashes == 0 || bits.is_empty() || !f.done() {
        return Err(CorruptReason::Invalid("run: bloom filter"));
    }
    Ok((blocks, Bloom { hashes, bits }))
}

/// Decodes one framed block: its crc32, then its ops, keys strictly increasing from
/// `first_key`.
fn decode_block(framed: &[u8], first_key: &[u8]) -> std::result::Result<Vec<RunOp>, CorruptReason> {
    let mut f = Fields { b: framed, at: 0 };
    let body_len = f.u32()? as usize;
    let body = f.take(body_len)?;
    let stored = f.u32()?;
    if !f.done() {
        return Err(CorruptReason::Trailing(framed.len() - f.at));
    }
    crc_matches(stored, body)?;
    let body = Bytes::copy_from_slice(body);
    let mut f = Fields { b: &body, at: 0 };
    let mut ops: Vec<RunOp> = Vec::new();
    while !f.done() {
        let tag = f.u8()?;
        let key_len = f.u32()? as usize;
        let key_at = f.at;
        f.take(key_len)?;
        let key = body.slice(key_at..key_at + key_len);
        let value = match tag {
            OP_PUT => {
                let value_len = f.u32()? as usize;
                let value_at = f.at;
                f.take(value_len)?;
                Some(body.slice(value_at..value_at + value_len))
            }
            OP_DELETE => None,
            _ => return Err(CorruptReason::Invalid("run: op tag")),
        };
        let in_order = match ops.last() {
            None => key[..] == *first_key,
            Some((last, _)) => key > *last,
        };
        if !in_order {
            return Err(CorruptReason::Invalid("run: keys out of order in a block"));
        }
        ops.push((key, value));
    }
    if ops.is_empty() {
        return Err(CorruptReason::Invalid("run: an empty block"));
    }
    Ok(ops)
}

/// A run's ops in a range, block by block (see [`Run::iter`]); `R` is how the run is held
/// (borrowed, or an `Arc` for an iterator that outlives the caller's borrow). After an
/// error it ends.
pub(crate) struct RunIter<R> {
    run: R,
    range: KeyRange,
    direction: Direction,
    /// The blocks not yet read: `next_block..end_block`.
    next_block: usize,
    end_block: usize,
    ops: std::vec::IntoIter<RunOp>,
    failed: bool,
}

impl<R: std::ops::Deref<Target = Run>> RunIter<R> {
    /// The ops of `run` in `range`, in `direction`'s key order.
    pub(crate) fn new(run: R, range: &KeyRange, direction: Direction) -> Self {
        let first = match &range.start {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => run.block_for(k).unwrap_or(0),
        };
        let last = match &range.end {
            Bound::Unbounded => run.blocks.len(),
            Bound::Included(k) | Bound::Excluded(k) => run.block_for(k).map_or(0, |i| i + 1),
        };
        RunIter {
            run,
            range: range.clone(),
            direction,
            next_block: first,
            end_block: last.max(first),
            ops: Vec::new().into_iter(),
            failed: false,
        }
    }
}

impl<R: std::ops::Deref<Target = Run>> Iterator for RunIter<R> {
    type Item = Result<RunOp>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            let op = match self.direction {
                Direction::Forward => self.ops.next(),
                Direction::Reverse => self.ops.next_back(),
            };
            if let Some(op) = op {
                if self.range.contains(&op.0) {
                    return Some(Ok(op));
                }
                continue;
            }
            if self.next_block >= self.end_block {
                return None;
            }
            let i = match self.direction {
                Direction::Forward => {
                    self.next_block += 1;
                    self.next_block - 1
                }
                Direction::Reverse => {
                    self.end_block -= 1;
                    self.end_block
                }
            };
            match self.run.block(i, &[]) {
                Ok(ops) => self.ops = ops.into_iter(),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One input of a merge: its cursor, its age (0 the newest) and the merge's direction.
struct Head {
    op: RunOp,
    age: usize,
    reverse: bool,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// A max-heap pops the first key in the merge's direction first (the smallest forward,
    /// the largest in reverse), and of equal keys the newest input.
    fn cmp(&self, other: &Self) -> Ordering {
        let by_key = if self.reverse {
            self.op.0.cmp(&other.op.0)
        } else {
            other.op.0.cmp(&self.op.0)
        };
        by_key.then(other.age.cmp(&self.age))
    }
}

/// Several runs' ops merged, newest first: each key once, with its newest op, in the
/// iteration's order. Tombstones are yielded or left out (`keep_tombstones`). After an
/// error it ends.
pub(crate) struct MergedRuns<R> {
    iters: Vec<RunIter<R>>,
    heap: BinaryHeap<Head>,
    reverse: bool,
    keep_tombstones: bool,
    last: Option<Bytes>,
    /// An error from filling the heap, returned first.
    failed: Option<Error>,
    done: bool,
}

impl<R: std::ops::Deref<Target = Run>> MergedRuns<R> {
    /// Merges `iters` (newest first), all in `direction`.
    pub(crate) fn new(
        mut iters: Vec<RunIter<R>>,
        direction: Direction,
        keep_tombstones: bool,
    ) -> Self {
        let reverse = direction == Direction::Reverse;
        debug_assert!(
            iters.iter().all(|it| it.direction == direction),
            "invariant: a merge's inputs run in its direction"
        );
        let mut heap = BinaryHeap::with_capacity(iters.len());
        let mut failed = None;
        for (age, it) in iters.iter_mut().enumerate() {
            match it.next() {
                Some(Ok(op)) => heap.push(Head { op, age, reverse }),
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => {}
            }
        }
        MergedRuns {
            iters,
            heap,
            reverse,
            keep_tombstones,
            last: None,
            failed,
            done: false,
        }
    }
}

impl MergedRuns<std::sync::Arc<Run>> {
    /// Merges the ops of `runs` (newest first) in `range`, all in `direction`; the
    /// iterator holds the runs (their files stay readable while it lives).
    pub(crate) fn over(
        runs: &[std::sync::Arc<Run>],
        range: &KeyRange,
        direction: Direction,
        keep_tombstones: bool,
    ) -> Self {
        let iters = runs
            .iter()
            .map(|r| RunIter::new(r.clone(), range, direction))
            .collect();
        MergedRuns::new(iters, direction, keep_tombstones)
    }
}

impl<R: std::ops::Deref<Target = Run>> Iterator for MergedRuns<R> {
    type Item = Result<RunOp>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Some(Err(e));
        }
        while let Some(Head { op, age, .. }) = self.heap.pop() {
            match self.iters[age].next() {
                Some(Ok(next)) => self.heap.push(Head {
                    op: next,
                    age,
                    reverse: self.reverse,
                }),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {}
            }
            // The newest op of a key pops first; older ones of the same key are skipped.
            if self.last.as_ref() == Some(&op.0) {
                continue;
            }
            self.last = Some(op.0.clone());
            if op.1.is_some() || self.keep_tombstones {
                return Some(Ok(op));
            }
        }
        self.done = true;
        None
    }
}

/// Merges `runs` (newest first) into `out`: each key once, with its newest op. With
/// `drop_tombstones` (only for a merge whose output is the oldest run: nothing older can
/// hold a key a tombstone must hide) deletes are left out.
#[cfg_attr(not(test), expect(dead_code, reason = "ADR 0014 step 3: merges"))]
pub(crate) fn merge(runs: &[&Run], mut out: RunWriter, drop_tombstones: bool) -> Result<RunMeta> {
    let iters = runs
        .iter()
        .map(|r| r.iter(&KeyRange::all(), Direction::Forward))
        .collect();
    for op in MergedRuns::new(iters, Direction::Forward, !drop_tombstones) {
        let (k, v) = op?;
        out.push(&k, v.as_deref())?;
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::fs::{FileSystem, OpenMode, SimFs};

    fn file(fs: &SimFs, name: &str) -> Box<dyn FsFile> {
        fs.create_dir_all(Path::new("/r")).unwrap();
        fs.open_file(&Path::new("/r").join(name), OpenMode::CreateTruncate)
            .unwrap()
    }

    fn reopen(fs: &SimFs, name: &str) -> Box<dyn FsFile> {
        fs.open_file(&Path::new("/r").join(name), OpenMode::Existing)
            .unwrap()
    }

    /// Writes `ops` (any order, later wins) as run `id`, sorted; returns it opened.
    fn write(fs: &SimFs, name: &str, id: u64, ops: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Run {
        write_in(fs, name, id, ops, RUN_BLOCK_BYTES)
    }

    fn write_in(
        fs: &SimFs,
        name: &str,
        id: u64,
        ops: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        block_bytes: usize,
    ) -> Run {
        let mut w = RunWriter::with_block_bytes(file(fs, name), "ks", id, block_bytes).unwrap();
        for (k, v) in ops {
            w.push(k, v.as_deref()).unwrap();
        }
        let meta = w.finish().unwrap();
        assert_eq!(meta.ops, ops.len() as u64);
        let run = Run::open(reopen(fs, name), "ks", id).unwrap();
        assert_eq!(meta.bytes, reopen(fs, name).len().unwrap());
        run
    }

    /// Keys of many lengths (to cross blocks) from small numbers.
    fn key(n: u16) -> Vec<u8> {
        let mut k = n.to_be_bytes().to_vec();
        k.resize(2 + (n as usize % 7) * 300, n as u8);
        k
    }

    type Spec = Vec<(u16, Option<u8>)>;

    fn model(spec: &Spec) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        spec.iter()
            .map(|(k, v)| (key(*k % 512), v.map(|v| vec![v; v as usize * 97 % 5000])))
            .collect()
    }

    fn lookup_of(m: &BTreeMap<Vec<u8>, Option<Vec<u8>>>, k: &[u8]) -> Lookup {
        match m.get(k) {
            None => Lookup::Absent,
            Some(None) => Lookup::Deleted,
            Some(Some(v)) => Lookup::Put(Bytes::copy_from_slice(v)),
        }
    }

    fn range_of(a: u16, b: u16, kind: u8) -> KeyRange {
        let (a, b) = (key(a % 512), key(b % 512));
        let b_ = |k: Vec<u8>, inc: bool| {
            if inc {
                Bound::Included(Bytes::from(k))
            } else {
                Bound::Excluded(Bytes::from(k))
            }
        };
        match kind % 5 {
            0 => KeyRange::all(),
            1 => KeyRange {
                start: b_(a, true),
                end: Bound::Unbounded,
            },
            2 => KeyRange {
                start: Bound::Unbounded,
                end: b_(b, kind.is_multiple_of(2)),
            },
            3 => KeyRange {
                start: b_(a, false),
                end: b_(b, true),
            },
            _ => KeyRange {
                start: b_(a, true),
                end: b_(b, false),
            },
        }
    }

    /// Checks a run against its model: every key's lookup (and keys it never held), and a
    /// range both ways. `Err` says what differs.
    fn check_run(
        run: &Run,
        m: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        range: &KeyRange,
    ) -> std::result::Result<(), String> {
        for n in 0..600u16 {
            let k = key(n);
            let got = run.get(&k).map_err(|e| e.to_string())?;
            if got != lookup_of(m, &k) {
                return Err(format!("get {n}: {got:?}"));
            }
        }
        let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = m
            .iter()
            .filter(|(k, _)| range.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for direction in [Direction::Forward, Direction::Reverse] {
            let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = run
                .iter(range, direction)
                .map(|r| r.map(|(k, v)| (k.to_vec(), v.map(|v| v.to_vec()))))
                .collect::<Result<_>>()
                .map_err(|e| e.to_string())?;
            let mut want = want.clone();
            if direction == Direction::Reverse {
                want.reverse();
            }
            if got != want {
                return Err(format!(
                    "{direction:?} range: {} ops, want {}",
                    got.len(),
                    want.len()
                ));
            }
        }
        Ok(())
    }

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
    fn a_merge_keeps_each_keys_newest_op_and_drops_tombstones_only_when_asked() {
        fn prop(newer: Spec, older: Spec, oldest: Spec, drop: bool) -> TestResult {
            let fs = SimFs::new();
            let specs = [newer, older, oldest];
            let runs: Vec<Run> = specs
                .iter()
                .enumerate()
                .map(|(i, s)| write(&fs, &format!("{i}.run"), i as u64, &model(s)))
                .collect();
            // The oracle: the oldest run's ops, overwritten by each newer run's.
            let mut want = BTreeMap::new();
            for s in specs.iter().rev() {
                want.extend(model(s));
            }
            if drop {
                want.retain(|_, v| v.is_some());
            }
            let out = RunWriter::create(file(&fs, "m.run"), "ks", 9).unwrap();
            let refs: Vec<&Run> = runs.iter().collect();
            let meta = merge(&refs, out, drop).unwrap();
            let merged = Run::open(reopen(&fs, "m.run"), "ks", 9).unwrap();
            TestResult::from_bool(
                meta.ops == want.len() as u64
                    && check_run(&merged, &want, &KeyRange::all()).is_ok(),
            )
        }
        QuickCheck::new()
            .tests(200)
            .quickcheck(prop as fn(Spec, Spec, Spec, bool) -> TestResult);
    }

    #[test]
    fn the_merge_check_rejects_an_older_op_winning() {
        let fs = SimFs::new();
        let newer = model(&vec![(1, Some(1)), (2, None)]);
        let older = model(&vec![(1, Some(2)), (2, Some(2)), (3, Some(3))]);
        let a = write(&fs, "a.run", 1, &newer);
        let b = write(&fs, "b.run", 2, &older);
        // Inputs in the wrong order: the older run's ops win.
        let out = RunWriter::create(file(&fs, "m.run"), "ks", 3).unwrap();
        merge(&[&b, &a], out, false).unwrap();
        let merged = Run::open(reopen(&fs, "m.run"), "ks", 3).unwrap();
        let mut want = older.clone();
        want.extend(newer);
        assert!(check_run(&merged, &want, &KeyRange::all()).is_err());
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

    /// A run as the module's layout describes it, encoded here and not by [`RunWriter`]:
    /// an independent encoder, so a test can build files the writer never writes. Its
    /// bloom filter passes every key (all bits set).
    struct Raw {
        /// Framed blocks: `body_len ‖ body ‖ crc32(body)`, and any bytes a test adds.
        blocks: Vec<Vec<u8>>,
        /// Per block: offset, framed length, first key.
        index: Vec<(u64, u32, Vec<u8>)>,
        hashes: u8,
        bits: Vec<u8>,
        /// Bytes after the bloom filter, inside the meta.
        meta_tail: Vec<u8>,
    }

    fn raw_op(body: &mut Vec<u8>, k: &[u8], v: Option<&[u8]>) {
        body.push(if v.is_some() { 1 } else { 2 });
        body.extend_from_slice(&(k.len() as u32).to_le_bytes());
        body.extend_from_slice(k);
        if let Some(v) = v {
            body.extend_from_slice(&(v.len() as u32).to_le_bytes());
            body.extend_from_slice(v);
        }
    }

    fn raw_frame(body: &[u8]) -> Vec<u8> {
        let mut b = (body.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(body);
        b.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        b
    }

    impl Raw {
        fn new(blocks: &[&[RawOp<'_>]]) -> Raw {
            let mut raw = Raw {
                blocks: Vec::new(),
                index: Vec::new(),
                hashes: 7,
                bits: vec![0xff; 8],
                meta_tail: Vec::new(),
            };
            for ops in blocks {
                let mut body = Vec::new();
                for (k, v) in *ops {
                    raw_op(&mut body, k, *v);
                }
                raw.blocks.push(raw_frame(&body));
                raw.index.push((0, 0, ops[0].0.to_vec()));
            }
            raw.place();
            raw
        }

        /// Sets each index entry's offset and length from the blocks as they are now.
        fn place(&mut self) {
            let mut at = 32u64;
            for (b, e) in self.blocks.iter().zip(&mut self.index) {
                (e.0, e.1) = (at, b.len() as u32);
                at += b.len() as u64;
            }
        }

        fn bytes(&self, id: u64, op_count: u64) -> Vec<u8> {
            let mut out = b"FPR1".to_vec();
            out.push(1);
            out.extend_from_slice(&[0; 3]);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&[0; 12]);
            let crc = crc32fast::hash(&out);
            out.extend_from_slice(&crc.to_le_bytes());
            for b in &self.blocks {
                out.extend_from_slice(b);
            }
            let meta_offset = out.len() as u64;
            let mut meta = (self.index.len() as u32).to_le_bytes().to_vec();
            for (offset, len, key) in &self.index {
                meta.extend_from_slice(&offset.to_le_bytes());
                meta.extend_from_slice(&len.to_le_bytes());
                meta.extend_from_slice(&(key.len() as u32).to_le_bytes());
                meta.extend_from_slice(key);
            }
            meta.push(self.hashes);
            meta.extend_from_slice(&(self.bits.len() as u32).to_le_bytes());
            meta.extend_from_slice(&self.bits);
            meta.extend_from_slice(&self.meta_tail);
            let mut footer = meta_offset.to_le_bytes().to_vec();
            footer.extend_from_slice(&op_count.to_le_bytes());
            footer.extend_from_slice(&(meta.len() as u32).to_le_bytes());
            footer.extend_from_slice(&crc32fast::hash(&meta).to_le_bytes());
            let crc = crc32fast::hash(&footer);
            footer.extend_from_slice(&crc.to_le_bytes());
            footer.extend_from_slice(b"FPRE");
            out.extend_from_slice(&meta);
            out.extend_from_slice(&footer);
            out
        }

        fn open(&self, fs: &SimFs) -> Result<Run> {
            let ops = self.blocks.len() as u64;
            file(fs, "raw.run")
                .write_at(0, &self.bytes(11, ops))
                .unwrap();
            Run::open(reopen(fs, "raw.run"), "ks", 11)
        }
    }

    /// A key and `Some(value)` (a put) or `None` (a delete), for [`Raw::new`].
    type RawOp<'a> = (&'a [u8], Option<&'a [u8]>);

    const EMPTY: &[u8] = b"";

    /// The raw encoder and the reader agree, down to a block of the shortest length (one
    /// delete of the empty key: 13 bytes framed).
    #[test]
    fn a_run_encoded_from_the_layout_opens_and_reads() {
        let fs = SimFs::new();
        let raw = Raw::new(&[
            &[(EMPTY, None)],
            &[(b"a", Some(b"1")), (b"b", None)],
            &[(b"c", Some(b""))],
        ]);
        assert_eq!(raw.blocks[0].len(), 13);
        let run = raw.open(&fs).unwrap();
        assert_eq!(run.get(b"").unwrap(), Lookup::Deleted);
        assert_eq!(
            run.get(b"a").unwrap(),
            Lookup::Put(Bytes::from_static(b"1"))
        );
        assert_eq!(run.get(b"b").unwrap(), Lookup::Deleted);
        assert_eq!(run.get(b"c").unwrap(), Lookup::Put(Bytes::new()));
        assert_eq!(run.get(b"bb").unwrap(), Lookup::Absent);
        let keys: Vec<Bytes> = run
            .iter(&KeyRange::all(), Direction::Reverse)
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(keys, [&b"c"[..], b"b", b"a", b""]);
    }

    /// Files whose checksums all hold but whose layout is broken are refused at open, each
    /// by its own check.
    #[test]
    fn a_run_with_a_broken_layout_is_refused_at_open() {
        let fs = SimFs::new();
        let good = || Raw::new(&[&[(b"a", Some(b"1"))], &[(b"c", None)]]);
        assert!(good().open(&fs).is_ok());
        let refused = |raw: Raw, why: &str| match raw.open(&fs) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{why}: {other:?}"),
        };
        let mut r = good();
        r.index[1].0 += 1;
        refused(r, "a gap in the index");
        // A block of 12 bytes (a body of 4 that is no op), the index consistent with it.
        let mut r = good();
        r.blocks[0] = raw_frame(b"abcd");
        r.place();
        refused(r, "a block too short for an op");
        let mut r = Raw::new(&[&[(b"c", Some(b"1"))], &[(b"a", None)]]);
        r.place();
        refused(r, "first keys out of order");
        let mut r = good();
        r.index.pop();
        refused(r, "blocks not ending at the meta");
        let mut r = good();
        r.hashes = 0;
        refused(r, "a filter of no hashes");
        let mut r = good();
        r.bits.clear();
        refused(r, "a filter of no bits");
        let mut r = good();
        r.meta_tail = vec![0];
        refused(r, "bytes after the filter");
    }

    /// A block whose checksum holds but whose ops repeat a key, or whose index length
    /// runs past its crc32, is refused when read, naming why.
    #[test]
    fn a_block_with_a_repeated_key_or_trailing_bytes_is_refused_when_read() {
        let fs = SimFs::new();
        let run = Raw::new(&[&[(b"a", Some(b"1")), (b"a", Some(b"2"))]])
            .open(&fs)
            .unwrap();
        assert!(matches!(run.get(b"a"), Err(Error::Corrupt { .. })));
        let mut r = Raw::new(&[&[(b"a", Some(b"1"))]]);
        r.blocks[0].extend_from_slice(&[0; 4]);
        r.place();
        let run = r.open(&fs).unwrap();
        match run.get(b"a") {
            Err(Error::Corrupt { reason, .. }) => assert_eq!(reason, CorruptReason::Trailing(4)),
            other => panic!("{other:?}"),
        }
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

    #[test]
    fn an_empty_run_opens_and_holds_nothing() {
        let fs = SimFs::new();
        let run = write(&fs, "a.run", 3, &BTreeMap::new());
        assert_eq!((run.id(), run.ops()), (3, 0));
        assert_eq!(run.get(b"x").unwrap(), Lookup::Absent);
        assert_eq!(run.iter(&KeyRange::all(), Direction::Reverse).count(), 0);
    }

    /// A filter built for a bound and folded down is bit for bit the filter built at the
    /// folded size (a fold that dropped the upper half, or kept the wrong bits, differs),
    /// and it is folded as far as whole bytes and 10 bits a key allow.
    #[test]
    fn a_folded_filter_is_the_filter_built_at_its_size() {
        for (keys, bound) in [
            (0u32, 0u64),
            (5, 5),
            (1_000, 1_000),
            (1_000, 64_000),
            (3_000, 3_001),
            (20_000, 100_000),
        ] {
            let hashes: Vec<(u32, u32)> = (0..keys).map(|n| key_hashes(&n.to_le_bytes())).collect();
            let mut folded = Bloom::empty(foldable_bits(bound * BLOOM_BITS_PER_KEY));
            hashes.iter().for_each(|h| folded.insert(*h));
            folded.fold_for(u64::from(keys));
            let bits = folded.bits.len() as u64 * 8;
            let want = (u64::from(keys) * BLOOM_BITS_PER_KEY).max(64);
            assert!(
                bits >= want,
                "{keys} keys under a bound of {bound}: {bits} bits"
            );
            assert!(
                !bits.is_multiple_of(16) || bits / 2 < want,
                "{keys} keys under a bound of {bound}: {bits} bits could fold again"
            );
            let mut direct = Bloom::empty(bits);
            hashes.iter().for_each(|h| direct.insert(*h));
            assert_eq!(folded, direct, "{keys} keys under a bound of {bound}");
        }
        // By hand: 100,000 keys' bound is 1,000,000 bits → 1,955 · 2^9 = 1,000,960; 20,000
        // keys want 200,000: halved twice, to 250,240.
        assert_eq!(foldable_bits(1_000_000), 1_000_960);
    }

    /// Keys of one length, from a generator, under a bound: an absent key passes ~1 % of
    /// the time, as without a bound. (A power-of-two filter passed 8–10 % of such keys:
    /// see [`foldable_bits`]; consecutive integers as keys hid it.)
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

    #[test]
    fn the_bloom_filter_passes_few_absent_keys() {
        let keys: Vec<Vec<u8>> = (0..20_000u32).map(|n| n.to_be_bytes().to_vec()).collect();
        let bloom = Bloom::with_keys(
            keys.iter()
                .map(|k| key_hashes(k))
                .collect::<Vec<_>>()
                .into_iter(),
        );
        assert!(keys.iter().all(|k| bloom.may_contain(k)));
        let passed = (20_000..120_000u32)
            .filter(|n| bloom.may_contain(&n.to_be_bytes()))
            .count();
        // ~1 % expected at 10 bits a key; 2 % is the bound a broken filter would pass.
        assert!(passed < 2_000, "{passed} of 100,000 absent keys passed");
    }
    /// The stepped probes are the format's rule, `h1 + i·h2 mod m` for `i` in `0..hashes`
    /// (written here from the rule, not from `probes`): a filter an earlier build wrote
    /// answers the same.
    #[test]
    fn bloom_probes_follow_the_formats_double_hashing() {
        fn rule(hashes: u8, m: u64, (h1, h2): (u32, u32)) -> Vec<u64> {
            (0..u64::from(hashes))
                .map(|i| (u64::from(h1) + i * u64::from(h2)) % m)
                .collect()
        }
        fn prop(hashes: u8, m: u64, h1: u32, h2: u32) -> bool {
            let m = m.max(1);
            probes(hashes, m, (h1, h2)).collect::<Vec<_>>() == rule(hashes, m, (h1, h2))
        }
        QuickCheck::new()
            .tests(20_000)
            .quickcheck(prop as fn(u8, u64, u32, u32) -> bool);
        // Small filters, where the steps wrap most, and the extremes of the hashes.
        for m in 1..=300u64 {
            for h in [(0, 1), (u32::MAX, u32::MAX), (7, 0x8000_0001), (299, 300)] {
                assert_eq!(
                    probes(BLOOM_HASHES, m, h).collect::<Vec<_>>(),
                    rule(BLOOM_HASHES, m, h)
                );
            }
        }
    }
}
