//! The block store: blocks, commits, the hash index and the store's base and height.
//!
//! Invariant: `save_block` is one atomic `Synced` batch — meta, every part, the last commit,
//! the seen commit, the hash index entry and the height record — whatever the block's size.
//! Invariant: the in-memory height advances only after that write returned `Ok`; a failed
//! write poisons the store (every later call returns `Error::Poisoned`).
//! Invariant: blocks are contiguous: an empty store takes any first height ≥ 1, then only
//! height + 1; a rejected block writes nothing.
//! Invariant: a saved part set is the block's own encoding, byte for byte (checked before
//! anything is staged).

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};

use super::{Poison, get_record};
use crate::chain::{ChainBlock, ChainCommit};
use crate::codec::keys::{self, height_key, part_key};
use crate::db::{Batch, Db, Direction, Durability, KeyRange};
use crate::error::{CorruptReason, Error, Result};
use crate::types::{
    BlockMeta, BlockStoreState, CommitRecord, FlushRecord, Hash, HeightValue, PartRecord, PartSet,
    encode,
};

/// Blocks deleted per synced batch when pruning or rolling back. Why this bound: a batch's
/// size stays small (a 1 MiB block is ~16 parts) and one prune call cannot hold the writer
/// for long, while the fsync cost is amortized over many blocks.
pub const PRUNE_BATCH_BLOCKS: u64 = 256;

/// Checks that `parts` (complete) are `block`'s own encoding, byte for byte: a part set of
/// another block (or a damaged one) would be stored under this block's height and hash, and
/// reported as corruption only when read back. Costs one comparison: the encoding is taken
/// in pieces ([`ChainBlock::encode_in_pieces`]) and compared as it comes, never built.
fn check_parts_encode<B: ChainBlock>(block: &B, parts: &PartSet) -> Result<()> {
    let mut cmp = PartsComparison::new(parts);
    block.encode_in_pieces(&mut |piece| cmp.take(piece));
    match cmp.finish() {
        None => Ok(()),
        Some((offset, block_size)) => Err(Error::PartSetMismatch {
            height: block.height(),
            offset,
            block_size,
        }),
    }
}

/// A comparison of an encoding, taken in pieces, with a complete part set's bytes.
struct PartsComparison<'a> {
    parts: &'a PartSet,
    /// The part the next byte is compared in, and the offset in it.
    part: u32,
    in_part: usize,
    /// Encoding bytes taken so far.
    taken: u64,
    /// The first differing offset, once found.
    differs_at: Option<u64>,
}

impl<'a> PartsComparison<'a> {
    fn new(parts: &'a PartSet) -> Self {
        PartsComparison {
            parts,
            part: 0,
            in_part: 0,
            taken: 0,
            differs_at: None,
        }
    }

    fn current(&self) -> Option<&'a Bytes> {
        (self.part < self.parts.total()).then(|| {
            self.parts
                .part(self.part)
                .expect("invariant: checked after completeness")
        })
    }

    fn take(&mut self, mut piece: &[u8]) {
        let at = self.taken;
        self.taken += piece.len() as u64;
        if self.differs_at.is_some() {
            return;
        }
        let mut offset = at;
        while !piece.is_empty() {
            let Some(part) = self.current() else {
                // The encoding goes on past the parts.
                self.differs_at = Some(offset);
                return;
            };
            let want = &part[self.in_part..];
            let n = want.len().min(piece.len());
            if want[..n] != piece[..n] {
                let first = want[..n]
                    .iter()
                    .zip(&piece[..n])
                    .position(|(a, b)| a != b)
                    .expect("the slices differ");
                self.differs_at = Some(offset + first as u64);
                return;
            }
            self.in_part += n;
            offset += n as u64;
            piece = &piece[n..];
            if self.in_part == part.len() {
                self.part += 1;
                self.in_part = 0;
            }
        }
    }

    /// `None` when the encoding was the parts' bytes exactly; else the first differing
    /// offset and the encoding's length.
    fn finish(mut self) -> Option<(u64, u64)> {
        // Empty parts at the end are no bytes.
        while self.current().is_some_and(|p| p.len() == self.in_part) {
            self.part += 1;
            self.in_part = 0;
        }
        let short = self.current().is_some();
        match self.differs_at {
            Some(at) => Some((at, self.taken)),
            // The parts go on past the encoding.
            None if short => Some((self.taken, self.taken)),
            None => None,
        }
    }
}

/// The block store over any [`Db`], for the chain's block type `B`.
#[derive(Debug)]
pub struct BlockStore<B: ChainBlock> {
    db: Arc<dyn Db>,
    range: RwLock<BlockStoreState>,
    write_lock: Mutex<()>,
    poison: Poison,
    blocks: PhantomData<fn() -> B>,
}

impl<B: ChainBlock> BlockStore<B> {
    /// Opens the store, reading its base and height.
    pub fn open(db: Arc<dyn Db>) -> Result<Self> {
        let range = get_record::<BlockStoreState>(&*db, &keys::singleton(keys::BLOCK_STORE_STATE))?
            .unwrap_or_default();
        Ok(BlockStore {
            db,
            range: RwLock::new(range),
            write_lock: Mutex::new(()),
            poison: Poison::default(),
            blocks: PhantomData,
        })
    }

    /// The database under the store.
    pub fn db(&self) -> &Arc<dyn Db> {
        &self.db
    }

    /// Lowest stored height (0 when empty).
    pub fn base(&self) -> u64 {
        self.range.read().expect("range lock").base
    }

    /// Highest stored height (0 when empty).
    pub fn height(&self) -> u64 {
        self.range.read().expect("range lock").height
    }

    /// True once a write failed; only a restart clears it.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }

    fn name(&self) -> &str {
        self.db.name()
    }

    /// Stages block `block` with its parts and seen commit into `batch` and returns the new
    /// range; checks contiguity and completeness first (nothing is staged on error).
    fn stage_block(
        &self,
        batch: &mut Batch,
        block: &B,
        parts: &PartSet,
        seen_commit: &B::Commit,
    ) -> Result<BlockStoreState> {
        let cur = *self.range.read().expect("range lock");
        let h = block.height();
        let expected = if cur.height == 0 {
            h.max(1)
        } else {
            // Bad input must not panic: a store at u64::MAX has no next height.
            cur.height.checked_add(1).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "cannot save block {h}: the block store is at the last height {}",
                    cur.height
                ))
            })?
        };
        if h != expected || h == 0 {
            return Err(Error::NonContiguous { expected, got: h });
        }
        if !parts.is_complete() || parts.total() == 0 {
            return Err(Error::IncompletePartSet {
                height: h,
                have: parts.count(),
                total: parts.total(),
            });
        }
        check_parts_encode(block, parts)?;
        let hash = block.hash();
        if seen_commit.height() != h || seen_commit.block_hash() != hash {
            return Err(Error::InvalidInput(format!(
                "seen commit for height {} does not commit block {h}",
                seen_commit.height()
            )));
        }
        let last_commit = block.last_commit();
        if last_commit.height().checked_add(1) != Some(h) {
            return Err(Error::InvalidInput(format!(
                "block {h} carries a last commit for height {}",
                last_commit.height()
            )));
        }
        let meta = BlockMeta {
            block_hash: hash,
            header: block.header_bytes(),
            part_count: parts.total(),
            block_size: parts.byte_size(),
            tx_count: block.tx_count(),
        };
        let k = height_key(keys::BLOCK_META, h);
        batch.put(Bytes::copy_from_slice(&k), encode(&k, &meta));
        for i in 0..parts.total() {
            let k = part_key(h, i);
            let part = parts
                .part(i)
                .expect("invariant: a complete part set has every part");
            batch.put(
                Bytes::copy_from_slice(&k),
                encode(&k, &PartRecord(part.clone())),
            );
        }
        // The commit of block h−1 travels in block h and is stored under h−1.
        if h > 1 {
            let k = height_key(keys::BLOCK_COMMIT, h - 1);
            batch.put(
                Bytes::copy_from_slice(&k),
                encode(&k, &CommitRecord(last_commit.encode())),
            );
        }
        let k = height_key(keys::SEEN_COMMIT, h);
        batch.put(
            Bytes::copy_from_slice(&k),
            encode(&k, &CommitRecord(seen_commit.encode())),
        );
        let k = keys::hash_key(&hash);
        batch.put(Bytes::copy_from_slice(&k), encode(&k, &HeightValue(h)));
        let next = BlockStoreState {
            base: if cur.base == 0 { h } else { cur.base },
            height: h,
        };
        let k = keys::singleton(keys::BLOCK_STORE_STATE);
        batch.put(Bytes::copy_from_slice(&k), encode(&k, &next));
        Ok(next)
    }

    /// Saves `block`, its complete part set and the seen commit for its height, in one
    /// atomic batch written `Synced`.
    ///
    /// `Ok`: the whole block is durable (when the database holds writes, durable at its
    /// next flush point) and `height()` returns the block's height.
    /// `Err` from a bad block (gap, repeat, incomplete parts, mismatched commit): nothing
    /// was written. `Err` from the database: the block may or may not be durable; the store
    /// is poisoned.
    pub fn save_block(&self, block: &B, parts: &PartSet, seen_commit: &B::Commit) -> Result<()> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.name())?;
        let mut batch = Batch::new();
        let next = self.stage_block(&mut batch, block, parts, seen_commit)?;
        if let Err(e) = self.db.write(&batch, Durability::Synced) {
            self.poison.set(&e);
            return Err(e);
        }
        // Only now, with the batch acknowledged, may readers see the new height.
        *self.range.write().expect("range lock") = next;
        Ok(())
    }

    /// Writes the flush record {from, to} (one `Synced` write; when the database holds
    /// writes, it joins the window the flush point writes).
    pub fn save_flush_record(&self, record: &FlushRecord) -> Result<()> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.name())?;
        if record.from >= record.to {
            return Err(Error::InvalidInput(format!(
                "a flush record spans at least one block, got {record}"
            )));
        }
        let k = keys::singleton(keys::FLUSH_RECORD);
        let mut batch = Batch::new();
        batch.put(Bytes::copy_from_slice(&k), encode(&k, record));
        self.write(&batch)
    }

    /// The last flush record written.
    pub fn load_flush_record(&self) -> Result<Option<FlushRecord>> {
        self.poison.check(self.name())?;
        get_record(&*self.db, &keys::singleton(keys::FLUSH_RECORD))
    }

    fn write(&self, batch: &Batch) -> Result<()> {
        if let Err(e) = self.db.write(batch, Durability::Synced) {
            self.poison.set(&e);
            return Err(e);
        }
        Ok(())
    }

    /// True for heights below the base: pruned, even if an interrupted prune left their
    /// records on disk (the next prune removes them).
    fn pruned(&self, height: u64) -> bool {
        height < self.base()
    }

    fn read_meta(&self, height: u64) -> Result<Option<BlockMeta>> {
        self.poison.check(self.name())?;
        get_record(&*self.db, &height_key(keys::BLOCK_META, height))
    }

    /// The meta of block `height` (`None` below the base).
    pub fn load_block_meta(&self, height: u64) -> Result<Option<BlockMeta>> {
        if self.pruned(height) {
            return Ok(None);
        }
        self.read_meta(height)
    }

    /// Part `index` of block `height` (`None` below the base).
    pub fn load_block_part(&self, height: u64, index: u32) -> Result<Option<Bytes>> {
        self.poison.check(self.name())?;
        if self.pruned(height) {
            return Ok(None);
        }
        Ok(get_record::<PartRecord>(&*self.db, &part_key(height, index))?.map(|p| p.0))
    }

    /// The whole block at `height`. A block whose meta is stored but a part is missing or
    /// does not decode is reported as corruption.
    pub fn load_block(&self, height: u64) -> Result<Option<B>> {
        let Some(meta) = self.load_block_meta(height)? else {
            return Ok(None);
        };
        let mut buf = BytesMut::with_capacity(meta.block_size as usize);
        for i in 0..meta.part_count {
            match self.load_block_part(height, i)? {
                Some(p) => buf.extend_from_slice(&p),
                None => {
                    return Err(self.corrupt(
                        &part_key(height, i),
                        Some(height),
                        CorruptReason::Invalid("a part of a stored block is missing"),
                    ));
                }
            }
        }
        let k = height_key(keys::BLOCK_META, height);
        let block = B::decode(&buf).map_err(|r| self.corrupt(&k, Some(height), r))?;
        if block.hash() != meta.block_hash {
            return Err(self.corrupt(
                &k,
                Some(height),
                CorruptReason::Invalid("parts do not hash to the stored block hash"),
            ));
        }
        // What the hash does not cover (e.g. transactions under a header's data hash): a
        // part rewritten with a valid crc is still caught.
        block
            .check_body()
            .map_err(|r| self.corrupt(&part_key(height, 0), Some(height), r))?;
        Ok(Some(block))
    }

    fn corrupt(&self, key: &[u8], height: Option<u64>, reason: CorruptReason) -> Error {
        Error::Corrupt {
            db: self.name().to_string(),
            key: key.to_vec(),
            height,
            reason,
        }
    }

    /// The canonical commit for `height` (stored with block `height + 1`): `None` below the
    /// base, as for every record of a pruned height. A finished prune to `r` deletes the
    /// commit of `r − 1` with block `r − 1`'s records, so an interrupted one, which may have
    /// left it, reads the same (CometBFT's `LoadBlockCommit(base − 1)` after a prune).
    pub fn load_block_commit(&self, height: u64) -> Result<Option<B::Commit>> {
        self.poison.check(self.name())?;
        if self.pruned(height) {
            return Ok(None);
        }
        self.read_commit(&height_key(keys::BLOCK_COMMIT, height))
    }

    fn read_commit(&self, key: &[u8]) -> Result<Option<B::Commit>> {
        let Some(record) = get_record::<CommitRecord>(&*self.db, key)? else {
            return Ok(None);
        };
        B::Commit::decode(&record.0)
            .map(Some)
            .map_err(|r| self.corrupt(key, keys::height_of(key), r))
    }

    /// The commit this node saw for `height`.
    pub fn load_seen_commit(&self, height: u64) -> Result<Option<B::Commit>> {
        self.poison.check(self.name())?;
        if self.pruned(height) {
            return Ok(None);
        }
        self.read_commit(&height_key(keys::SEEN_COMMIT, height))
    }

    /// The height of the block with `hash`.
    pub fn height_by_hash(&self, hash: &Hash) -> Result<Option<u64>> {
        self.poison.check(self.name())?;
        Ok(get_record::<HeightValue>(&*self.db, &keys::hash_key(hash))?
            .map(|h| h.0)
            .filter(|h| !self.pruned(*h)))
    }

    /// The meta of the block with `hash`.
    pub fn load_block_meta_by_hash(&self, hash: &Hash) -> Result<Option<BlockMeta>> {
        match self.height_by_hash(hash)? {
            Some(h) => self.load_block_meta(h),
            None => Ok(None),
        }
    }

    /// The block with `hash`.
    pub fn load_block_by_hash(&self, hash: &Hash) -> Result<Option<B>> {
        match self.height_by_hash(hash)? {
            Some(h) => self.load_block(h),
            None => Ok(None),
        }
    }

    /// Stages the deletion of block `height` (meta, parts, commits, hash index).
    fn stage_delete(&self, batch: &mut Batch, height: u64) -> Result<()> {
        let meta = self.read_meta(height)?;
        let part_count = meta.as_ref().map_or(0, |m| m.part_count);
        batch.delete(Bytes::copy_from_slice(&height_key(
            keys::BLOCK_META,
            height,
        )));
        for i in 0..part_count {
            batch.delete(Bytes::copy_from_slice(&part_key(height, i)));
        }
        batch.delete(Bytes::copy_from_slice(&height_key(
            keys::BLOCK_COMMIT,
            height,
        )));
        batch.delete(Bytes::copy_from_slice(&height_key(
            keys::SEEN_COMMIT,
            height,
        )));
        if let Some(m) = meta {
            batch.delete(Bytes::copy_from_slice(&keys::hash_key(&m.block_hash)));
        }
        Ok(())
    }

    /// The highest height any block record (meta, part, canonical or seen commit) is
    /// stored at; `None` when there is none.
    pub fn highest_stored_height(&self) -> Result<Option<u64>> {
        let mut highest = None;
        for prefix in [
            keys::BLOCK_META,
            keys::BLOCK_PART,
            keys::BLOCK_COMMIT,
            keys::SEEN_COMMIT,
        ] {
            let r = KeyRange::prefix(&[prefix]);
            if let Some(item) = self.db.range(r, Direction::Reverse)?.next() {
                let (k, _) = item?;
                highest = highest.max(keys::height_of(&k));
            }
        }
        Ok(highest)
    }

    /// The lowest height with a stored meta (pruning may have left blocks below `base`).
    fn lowest_stored(&self) -> Result<Option<u64>> {
        let r = KeyRange::prefix(&[keys::BLOCK_META]);
        match self.db.range(r, Direction::Forward)?.next() {
            Some(Ok((k, _))) => Ok(keys::height_of(&k)),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    /// Removes every block below `retain_height`; returns how many were removed.
    ///
    /// `retain_height` must be at least the base (at the base, blocks an interrupted prune
    /// left below it are removed) and at most the height: otherwise
    /// [`Error::InvalidRetainHeight`], nothing written (CometBFT refuses a prune below the
    /// base, as [`crate::store::StateStore::prune`] does).
    ///
    /// The base is raised first, in its own synced write, so a crash midway leaves a store
    /// whose base and height are right; blocks below the base left by such a crash are
    /// removed by the next prune. Blocks go in synced batches of [`PRUNE_BATCH_BLOCKS`].
    pub fn prune(&self, retain_height: u64) -> Result<u64> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.name())?;
        let cur = *self.range.read().expect("range lock");
        if retain_height == 0 || retain_height < cur.base || retain_height > cur.height {
            return Err(Error::InvalidRetainHeight {
                db: self.name().to_string(),
                retain_height,
                base: cur.base,
                height: cur.height,
            });
        }
        if retain_height > cur.base {
            let next = BlockStoreState {
                base: retain_height,
                height: cur.height,
            };
            let k = keys::singleton(keys::BLOCK_STORE_STATE);
            let mut batch = Batch::new();
            batch.put(Bytes::copy_from_slice(&k), encode(&k, &next));
            // The base goes first: readers and a restart must never look for pruned blocks.
            self.write(&batch)?;
            *self.range.write().expect("range lock") = next;
        }
        let Some(mut low) = self.lowest_stored()? else {
            return Ok(0);
        };
        let mut pruned = 0;
        while low < retain_height {
            let end = (low + PRUNE_BATCH_BLOCKS).min(retain_height);
            let mut batch = Batch::new();
            // The commit of low−1 was saved with block `low` (for a store's first block it
            // is the only record below it); it goes with it, or it would never be removed.
            batch.delete(Bytes::copy_from_slice(&height_key(
                keys::BLOCK_COMMIT,
                low.saturating_sub(1),
            )));
            for h in low..end {
                self.stage_delete(&mut batch, h)?;
            }
            self.write(&batch)?;
            pruned += end - low;
            low = end;
        }
        Ok(pruned)
    }

    /// Removes every block above `height` (top down, in synced batches, each lowering the
    /// height record with its deletions, so a crash midway leaves a consistent store), and a
    /// flush record that reaches above it. Returns how many blocks were removed.
    pub fn rollback_to(&self, height: u64) -> Result<u64> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.name())?;
        let cur = *self.range.read().expect("range lock");
        if height >= cur.height {
            return Ok(0);
        }
        if height < cur.base.saturating_sub(1) {
            return Err(Error::Rollback(format!(
                "height {height} is below the block store's base {}",
                cur.base
            )));
        }
        let mut top = cur.height;
        let mut removed = 0;
        while top > height {
            let low = top.saturating_sub(PRUNE_BATCH_BLOCKS).max(height);
            let mut batch = Batch::new();
            for h in (low + 1..=top).rev() {
                self.stage_delete(&mut batch, h)?;
            }
            // The commit of `low` was saved with block low+1; it goes with it.
            batch.delete(Bytes::copy_from_slice(&height_key(keys::BLOCK_COMMIT, low)));
            // Below the base (low == base − 1, possibly 0) no block is left: the store is
            // empty. Writing {base, low} instead would store base > height, which every later
            // open reports as corruption.
            let next = if low < cur.base {
                BlockStoreState::default()
            } else {
                BlockStoreState {
                    base: cur.base,
                    height: low,
                }
            };
            let k = keys::singleton(keys::BLOCK_STORE_STATE);
            if next == BlockStoreState::default() {
                batch.delete(Bytes::copy_from_slice(&k));
            } else {
                batch.put(Bytes::copy_from_slice(&k), encode(&k, &next));
            }
            if let Some(rec) = self.load_flush_record()?
                && rec.to > low
            {
                batch.delete(Bytes::copy_from_slice(&keys::singleton(keys::FLUSH_RECORD)));
            }
            self.write(&batch)?;
            *self.range.write().expect("range lock") = next;
            removed += top - low;
            top = low;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{QuickCheck, TestResult};

    /// The oracle, written apart from [`PartsComparison`]: both sides whole, compared at
    /// once. `None` when equal, else the first differing offset (where the shorter one
    /// ends, for a prefix) and the encoding's length.
    fn oracle(encoding: &[u8], parts: &[u8]) -> Option<(u64, u64)> {
        if encoding == parts {
            return None;
        }
        let first = encoding
            .iter()
            .zip(parts)
            .position(|(a, b)| a != b)
            .unwrap_or(encoding.len().min(parts.len()));
        Some((first as u64, encoding.len() as u64))
    }

    /// Cuts `bytes` at the given points (each taken modulo the length, sorted).
    fn cut(bytes: &[u8], points: &[u16]) -> Vec<Vec<u8>> {
        let mut at: Vec<usize> = points
            .iter()
            .map(|&p| {
                if bytes.is_empty() {
                    0
                } else {
                    p as usize % (bytes.len() + 1)
                }
            })
            .collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
    }

    fn compare(pieces: &[Vec<u8>], parts: &PartSet) -> Option<(u64, u64)> {
        let mut cmp = PartsComparison::new(parts);
        for p in pieces {
            cmp.take(p);
        }
        cmp.finish()
    }

    #[test]
    fn a_comparison_in_pieces_agrees_with_the_whole_comparison() {
        fn prop(
            encoding: Vec<u8>,
            edit: Option<(u16, u8)>,
            drop_tail: u8,
            piece_cuts: Vec<u16>,
            part_cuts: Vec<u16>,
        ) -> TestResult {
            let mut parts_bytes = encoding.clone();
            if let Some((at, x)) = edit {
                if parts_bytes.is_empty() {
                    parts_bytes.push(x);
                } else {
                    let i = at as usize % parts_bytes.len();
                    parts_bytes[i] ^= x;
                }
            }
            let keep = parts_bytes.len().saturating_sub(drop_tail as usize % 3);
            parts_bytes.truncate(keep);
            let cut_parts = cut(&parts_bytes, &part_cuts);
            let mut set = PartSet::with_total(cut_parts.len() as u32);
            for (i, p) in cut_parts.iter().enumerate() {
                set.add_part(i as u32, Bytes::copy_from_slice(p));
            }
            let got = compare(&cut(&encoding, &piece_cuts), &set);
            TestResult::from_bool(got == oracle(&encoding, &parts_bytes))
        }
        QuickCheck::new().tests(2_000).quickcheck(
            prop as fn(Vec<u8>, Option<(u16, u8)>, u8, Vec<u16>, Vec<u16>) -> TestResult,
        );
    }

    /// Negative control: the oracle and the comparison tell a differing byte, a longer
    /// encoding and shorter parts apart from equal bytes.
    #[test]
    fn the_comparison_rejects_each_kind_of_difference() {
        let parts = PartSet::from_bytes(&Bytes::from_static(b"abcdefgh"), 3);
        let whole = |s: &[u8]| vec![s.to_vec()];
        assert_eq!(compare(&whole(b"abcdefgh"), &parts), None);
        assert_eq!(compare(&cut(b"abcdefgh", &[1, 4, 4, 7]), &parts), None);
        assert_eq!(compare(&whole(b"abcdXfgh"), &parts), Some((4, 8)));
        assert_eq!(compare(&whole(b"abcdefghi"), &parts), Some((8, 9)));
        assert_eq!(compare(&whole(b"abcdefg"), &parts), Some((7, 7)));
        assert_eq!(oracle(b"abcdXfgh", b"abcdefgh"), Some((4, 8)));
    }

    /// The demo block's pieces are its encoding, for blocks of every profile.
    #[test]
    fn the_demo_blocks_pieces_are_its_encoding() {
        use crate::demo::{ChainSpec, Profile};
        for profile in [Profile::Light, Profile::Mixed, Profile::Heavy] {
            let spec = ChainSpec::new(5, profile);
            let genesis = spec.genesis();
            let state = crate::demo::State::genesis(
                genesis.initial_height,
                genesis.validators,
                genesis.consensus_params,
                [0; 32],
            );
            let (block, parts, _) = spec.next_block(&state);
            let mut pieces = Vec::new();
            ChainBlock::encode_in_pieces(&block, &mut |p| pieces.extend_from_slice(p));
            assert_eq!(pieces, ChainBlock::encode(&block).to_vec(), "{profile:?}");
            assert!(check_parts_encode(&block, &parts).is_ok());
            // Another block's parts, and the block's own with one byte flipped, are refused
            // with the first differing offset (the whole comparison, written apart, says
            // where).
            let (other, other_parts, _) = ChainSpec::new(6, profile).next_block(&state);
            let own = ChainBlock::encode(&block);
            let theirs = ChainBlock::encode(&other);
            let first = own
                .iter()
                .zip(theirs.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(own.len().min(theirs.len())) as u64;
            match check_parts_encode(&block, &other_parts) {
                Err(Error::PartSetMismatch {
                    height: 1,
                    offset,
                    block_size,
                }) => assert_eq!(
                    (offset, block_size),
                    (first, own.len() as u64),
                    "{profile:?}"
                ),
                other => panic!("{profile:?}: {other:?}"),
            }
            let mut flipped = own.to_vec();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 1;
            let flipped =
                PartSet::from_bytes(&Bytes::from(flipped), crate::types::BLOCK_PART_SIZE_BYTES);
            assert!(matches!(
                check_parts_encode(&block, &flipped),
                Err(Error::PartSetMismatch { offset, .. }) if offset == mid as u64
            ));
        }
    }
}
