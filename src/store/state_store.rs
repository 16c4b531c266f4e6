//! The state store: the consensus state at the last height, per-block results, and the
//! per-height history of the values a chain's state names ([`crate::ChainState::histories`]:
//! the demo chain's validator sets and consensus params).
//!
//! Invariant: saving results and saving state are separate calls, each one synced batch, so
//! the node orders them: results before the app commits, state after.
//! Invariant: a history entry for height h holds the value when it changed at h or h is a
//! checkpoint; otherwise it names the height where the value is stored. Loading walks back
//! at most one step.
//! Invariant: heights below the base (the `0x15` record; absent: 0) are pruned: every load
//! of one returns `Error::Pruned` without reading it. Results and history at or above the
//! base are never deleted by a prune, nor is the one entry per history slot below the base that the entry at the base points at (so every load at or above
//! the base answers what it answered before the prune).
//! Invariant: a prune writes the base first, in its own synced batch, then deletes below it
//! in synced batches of at most [`STATE_PRUNE_BATCH_HEIGHTS`] heights: a crash after any
//! batch leaves a store whose loads are those of the finished prune; records left below
//! the base are removed by the next prune (to the same height or higher).

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use super::{Poison, get_record};
use crate::chain::{Chain, ChainResults, ChainState, HistorySlot};
use crate::codec::keys::{self, height_key};
use crate::db::{Batch, Db, Direction, Durability, KeyRange};
use crate::error::{CorruptReason, Error, Result};
use crate::types::{HistoryEntry, ResultsRecord, StateRecord, StateStoreBase, encode};

/// Every this many heights every history value is stored in full even if unchanged.
/// Why: bounds how far back an entry can point, so pruning below a checkpoint never strands
/// a pointer, and a lookup reads at most two records.
pub const HISTORY_CHECKPOINT_INTERVAL: u64 = 1_000;

/// Heights whose records one synced batch of [`StateStore::prune`] deletes. Why this bound:
/// a height holds at most five keys here (results and four history slots), so a batch
/// deletes at most 5 120 keys of 9 bytes (~45 KiB of keys; values are not read) and one prune call
/// cannot hold the writer for long, while a prune of a million heights costs ~1 000 fsyncs.
pub const STATE_PRUNE_BATCH_HEIGHTS: u64 = 1_024;

const _: () = assert!(
    STATE_PRUNE_BATCH_HEIGHTS >= 1,
    "a prune batch must make progress"
);

/// What [`StateStore::prune`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct StatePruneReport {
    /// The store's base after the prune (= the retain height).
    pub base: u64,
    /// Records deleted (results and history entries).
    pub deleted: u64,
    /// Synced batches written (the base write included; 0 when there was nothing to do).
    pub batches: u64,
}

/// The height whose entry holds the value a pointer entry at `height` (in force since
/// `changed_at`) names: the last change, or a later checkpoint. Shared by loads and prune,
/// so prune keeps exactly what loads read.
fn stored_at(changed_at: u64, height: u64) -> u64 {
    let checkpoint = height / HISTORY_CHECKPOINT_INTERVAL * HISTORY_CHECKPOINT_INTERVAL;
    changed_at.max(checkpoint)
}

/// The key of history `slot` at `height`.
fn history_key(slot: HistorySlot, height: u64) -> [u8; 9] {
    height_key(keys::HISTORY_PREFIXES[slot.index() as usize], height)
}

/// The state store over any [`Db`], for chain `C`'s state and results.
#[derive(Debug)]
pub struct StateStore<C: Chain> {
    db: Arc<dyn Db>,
    poison: Poison,
    chain: PhantomData<fn() -> C>,
}

impl<C: Chain> StateStore<C> {
    /// Opens the store.
    pub fn open(db: Arc<dyn Db>) -> Self {
        StateStore {
            db,
            poison: Poison::default(),
            chain: PhantomData,
        }
    }

    /// The database under the store.
    pub fn db(&self) -> &Arc<dyn Db> {
        &self.db
    }

    fn name(&self) -> &str {
        self.db.name()
    }

    /// True once a write failed.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }

    fn write(&self, batch: &Batch) -> Result<()> {
        self.poison.check(self.name())?;
        if let Err(e) = self.db.write(batch, Durability::Synced) {
            self.poison.set(&e);
            return Err(e);
        }
        Ok(())
    }

    fn corrupt(&self, key: &[u8], reason: CorruptReason) -> Error {
        Error::Corrupt {
            db: self.name().to_string(),
            key: key.to_vec(),
            height: keys::height_of(key),
            reason,
        }
    }

    /// The saved state.
    pub fn load_state(&self) -> Result<Option<C::State>> {
        self.poison.check(self.name())?;
        let k = keys::singleton(keys::STATE);
        match get_record::<StateRecord>(&*self.db, &k)? {
            None => Ok(None),
            Some(r) => C::State::decode(&r.0)
                .map(Some)
                .map_err(|reason| self.corrupt(&k, reason)),
        }
    }

    /// The saved state's height (0 when none is saved).
    pub fn height(&self) -> Result<u64> {
        Ok(self.load_state()?.map_or(0, |s| s.height()))
    }

    /// Saves `state` with the history entries for the next height, in one synced batch.
    ///
    /// `Ok`: durable (at the next flush point when holding). `Err`: may or may not be
    /// durable; the store is poisoned.
    pub fn save_state(&self, state: &C::State) -> Result<()> {
        let mut batch = Batch::new();
        self.stage_state(&mut batch, state);
        self.write(&batch)
    }

    pub(crate) fn stage_state(&self, batch: &mut Batch, state: &C::State) {
        let next = state.height() + 1;
        let initial = state.initial_height();
        let k = keys::singleton(keys::STATE);
        batch.put(
            Bytes::copy_from_slice(&k),
            encode(&k, &StateRecord(state.encode())),
        );
        for h in state.histories() {
            // The value itself at a change, the chain's first height and every checkpoint;
            // elsewhere a pointer to where it is stored (loads walk back at most one step).
            let full = h.changed_at == next
                || next == initial
                || next.is_multiple_of(HISTORY_CHECKPOINT_INTERVAL);
            let entry = HistoryEntry {
                changed_at: h.changed_at,
                value: full.then_some(h.value),
            };
            let k = history_key(h.slot, next);
            batch.put(Bytes::copy_from_slice(&k), entry.encode(h.slot, &k));
        }
    }

    /// Saves the genesis `state` and the genesis hash together, in one synced batch: a home
    /// never has one without the other.
    pub fn save_genesis(&self, state: &C::State, genesis_hash: &crate::types::Hash) -> Result<()> {
        let mut batch = Batch::new();
        self.stage_state(&mut batch, state);
        let k = keys::singleton(keys::GENESIS);
        batch.put(
            Bytes::copy_from_slice(&k),
            encode(&k, &crate::types::GenesisHash(*genesis_hash)),
        );
        self.write(&batch)
    }

    /// Saves the genesis hash alone (a home created before the record existed).
    pub fn save_genesis_hash(&self, genesis_hash: &crate::types::Hash) -> Result<()> {
        let k = keys::singleton(keys::GENESIS);
        let mut batch = Batch::new();
        batch.put(
            Bytes::copy_from_slice(&k),
            encode(&k, &crate::types::GenesisHash(*genesis_hash)),
        );
        self.write(&batch)
    }

    /// The genesis hash stored on the home's first open, if any.
    pub fn load_genesis_hash(&self) -> Result<Option<crate::types::Hash>> {
        self.poison.check(self.name())?;
        Ok(
            get_record::<crate::types::GenesisHash>(&*self.db, &keys::singleton(keys::GENESIS))?
                .map(|g| g.0),
        )
    }

    /// Saves the results of block `height` (one synced batch).
    pub fn save_results(&self, height: u64, results: &C::Results) -> Result<()> {
        let k = height_key(keys::RESULTS, height);
        let mut batch = Batch::new();
        batch.put(
            Bytes::copy_from_slice(&k),
            encode(&k, &ResultsRecord(results.encode())),
        );
        self.write(&batch)
    }

    /// The results of block `height`; `Err(Error::Pruned)` below the base.
    pub fn load_results(&self, height: u64) -> Result<Option<C::Results>> {
        self.poison.check(self.name())?;
        self.check_not_pruned("results", height)?;
        let k = height_key(keys::RESULTS, height);
        match get_record::<ResultsRecord>(&*self.db, &k)? {
            None => Ok(None),
            Some(r) => C::Results::decode(&r.0)
                .map(Some)
                .map_err(|reason| self.corrupt(&k, reason)),
        }
    }

    /// The store's base: the lowest height whose results and history it answers for
    /// (0 when nothing was ever pruned).
    pub fn base(&self) -> Result<u64> {
        self.poison.check(self.name())?;
        Ok(
            get_record::<StateStoreBase>(&*self.db, &keys::singleton(keys::STATE_STORE_BASE))?
                .map_or(0, |b| b.base),
        )
    }

    /// `Err(Error::Pruned)` when `height` is below the base.
    fn check_not_pruned(&self, what: &'static str, height: u64) -> Result<()> {
        let base = self.base()?;
        if height < base {
            return Err(Error::Pruned {
                db: self.name().to_string(),
                what,
                height,
                base,
            });
        }
        Ok(())
    }

    fn get_history(&self, slot: HistorySlot, key: &[u8]) -> Result<Option<HistoryEntry>> {
        match self.db.get(key)? {
            None => Ok(None),
            Some(bytes) => HistoryEntry::decode(slot, key, &bytes)
                .map(Some)
                .map_err(|reason| self.corrupt(key, reason)),
        }
    }

    /// The value of history `slot` in force at `height`, with the height it changed at;
    /// `Err(Error::Pruned)` below the base.
    pub fn load_history(&self, slot: HistorySlot, height: u64) -> Result<Option<(u64, Bytes)>> {
        self.poison.check(self.name())?;
        self.check_not_pruned(C::State::history_names()[slot.index() as usize], height)?;
        let k = history_key(slot, height);
        let Some(entry) = self.get_history(slot, &k)? else {
            return Ok(None);
        };
        if let Some(v) = entry.value {
            return Ok(Some((entry.changed_at, v)));
        }
        // Walk back to where the value is stored: the last change, or a later checkpoint.
        let at = stored_at(entry.changed_at, height);
        match self.get_history(slot, &history_key(slot, at))? {
            Some(HistoryEntry { value: Some(v), .. }) if at < height => {
                Ok(Some((entry.changed_at, v)))
            }
            _ => Err(self.corrupt(
                &k,
                CorruptReason::Invalid("history entry points at a height with no stored value"),
            )),
        }
    }

    /// [`StateStore::load_history`], decoded by `decode` (a value that does not decode is
    /// reported as corruption of the entry at `height`).
    pub fn load_history_as<T>(
        &self,
        slot: HistorySlot,
        height: u64,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, CorruptReason>,
    ) -> Result<Option<(u64, T)>> {
        match self.load_history(slot, height)? {
            None => Ok(None),
            Some((changed_at, bytes)) => decode(&bytes)
                .map(|v| Some((changed_at, v)))
                .map_err(|reason| self.corrupt(&history_key(slot, height), reason)),
        }
    }

    /// Removes the history and results above the state's height (up to `old_height`) and
    /// saves `state`, with its history entries for the next height, in one synced batch.
    /// Refused (`Error::Rollback`, nothing written) when the state's next height is below
    /// the base: its history would be pruned.
    pub fn rollback_to(&self, state: &C::State, old_height: u64) -> Result<()> {
        let h = state.height();
        self.check_rollback_base(h)?;
        let mut batch = Batch::new();
        Self::stage_removal_above(&mut batch, h, old_height);
        self.stage_state(&mut batch, state);
        self.write(&batch)
    }

    /// `Err(Error::Rollback)` when the state's history at `h + 1` is pruned.
    fn check_rollback_base(&self, h: u64) -> Result<()> {
        let base = self.base()?;
        if h.saturating_add(1) < base {
            return Err(Error::Rollback(format!(
                "cannot roll the state back to {h}: the state store is pruned below {base}"
            )));
        }
        Ok(())
    }

    /// Stages the deletion of the results above `h` and the history above `h + 1`, up to
    /// `old_height` (whose history reaches `old_height + 1`).
    fn stage_removal_above(batch: &mut Batch, h: u64, old_height: u64) {
        for x in h + 1..=old_height {
            batch.delete(Bytes::copy_from_slice(&height_key(keys::RESULTS, x)));
        }
        for x in h + 2..=old_height + 1 {
            for slot in HistorySlot::all() {
                batch.delete(Bytes::copy_from_slice(&history_key(slot, x)));
            }
        }
    }

    /// The saved state's bytes, undecoded.
    pub(crate) fn load_state_bytes(&self) -> Result<Option<Bytes>> {
        self.poison.check(self.name())?;
        Ok(get_record::<StateRecord>(&*self.db, &keys::singleton(keys::STATE))?.map(|r| r.0))
    }

    /// Removes the results and history above `height` (up to `old_height`) and saves the
    /// state at `height` (its bytes, `state`), in one synced batch. Used by rollback. The
    /// history entries at `height + 1` stay: they were saved with the state at `height` when
    /// it was first saved. Refused (`Error::Rollback`, nothing written) when `height + 1` is
    /// below the base: its history would be pruned.
    pub(crate) fn rollback_to_bytes(&self, h: u64, state: &Bytes, old_height: u64) -> Result<()> {
        self.check_rollback_base(h)?;
        let mut batch = Batch::new();
        Self::stage_removal_above(&mut batch, h, old_height);
        let k = keys::singleton(keys::STATE);
        batch.put(
            Bytes::copy_from_slice(&k),
            encode(&k, &StateRecord(state.clone())),
        );
        self.write(&batch)
    }

    /// Removes the results and history (every slot) of every height below
    /// `retain_height`, keeping what loads at `retain_height` and above read: afterwards every
    /// load at or above `retain_height` answers exactly what it answered before, and every
    /// load below it returns `Error::Pruned`. The embedder chooses `retain_height` (e.g. the
    /// lowest height its evidence handling still needs validator sets for); a node reaches
    /// this through [`crate::Node::state_store`].
    ///
    /// Below `retain_height` one entry per history slot may stay: the one the
    /// entry at `retain_height` points at (its last change, or the checkpoint before it).
    /// They are no longer loadable by height and go with a later prune past the next change
    /// or checkpoint.
    ///
    /// Order: the base record is raised first, in its own synced batch; then the records
    /// below it go, lowest first, in synced batches of at most
    /// [`STATE_PRUNE_BATCH_HEIGHTS`] heights. A crash after any batch leaves a store that
    /// loads as the finished prune would; the next prune to the same height (or higher)
    /// removes what is left.
    ///
    /// `retain_height` must be at least 1, at least the current base and at most the state
    /// height: otherwise `Error::InvalidRetainHeight` and nothing is written. A retain height
    /// equal to the base finishes an interrupted prune (and writes nothing when nothing is
    /// left).
    ///
    /// `Ok`: the base and every deletion are durable (when the database holds writes, they
    /// join its window and are durable at the next flush point, in its one batch). `Err`
    /// from the database: the prune stopped after some number of its batches, the one in
    /// flight may or may not be durable, and the store is poisoned; every such store loads
    /// either as before the prune (base not raised) or as after it.
    pub fn prune(&self, retain_height: u64) -> Result<StatePruneReport> {
        self.poison.check(self.name())?;
        let base = self.base()?;
        let state_height = self.height()?;
        if retain_height == 0 || retain_height < base || retain_height > state_height {
            return Err(Error::InvalidRetainHeight {
                db: self.name().to_string(),
                retain_height,
                base,
                height: state_height,
            });
        }
        // What loads at retain_height and above read below it: at most one entry each.
        let mut keep: Vec<[u8; 9]> = Vec::new();
        for slot in HistorySlot::all() {
            keep.extend(self.kept_below(slot, retain_height)?);
        }
        let mut report = StatePruneReport {
            base: retain_height,
            ..StatePruneReport::default()
        };
        if retain_height > base {
            let k = keys::singleton(keys::STATE_STORE_BASE);
            let mut batch = Batch::new();
            batch.put(
                Bytes::copy_from_slice(&k),
                encode(
                    &k,
                    &StateStoreBase {
                        base: retain_height,
                    },
                ),
            );
            // The base goes first: from here every load below it says "pruned" without
            // reading, so the deletions may stop after any batch. Written after (or with
            // only the last of) them, a crash would leave heights at or above the base
            // whose records are gone.
            self.write(&batch)?;
            report.batches += 1;
        }
        const PREFIXES: [u8; 1 + keys::HISTORY_PREFIXES.len()] = [
            keys::RESULTS,
            keys::HISTORY_PREFIXES[0],
            keys::HISTORY_PREFIXES[1],
            keys::HISTORY_PREFIXES[2],
            keys::HISTORY_PREFIXES[3],
        ];
        while let Some(low) = self.lowest_below(&PREFIXES, retain_height, &keep)? {
            let end = low
                .saturating_add(STATE_PRUNE_BATCH_HEIGHTS)
                .min(retain_height);
            let mut batch = Batch::new();
            for prefix in PREFIXES {
                let range = KeyRange::between(
                    Bytes::copy_from_slice(&height_key(prefix, low)),
                    Bytes::copy_from_slice(&height_key(prefix, end)),
                );
                for item in self.db.range(range, Direction::Forward)? {
                    let (k, _) = item?;
                    // The entries loads at or above the base still read stay.
                    if keep.iter().any(|kept| kept[..] == k[..]) {
                        continue;
                    }
                    batch.delete(k);
                }
            }
            assert!(
                !batch.is_empty(),
                "invariant: the lowest record below the retain height ({low}) is in the batch"
            );
            report.deleted += batch.len() as u64;
            self.write(&batch)?;
            report.batches += 1;
        }
        Ok(report)
    }

    /// The key of the entry below `retain_height` that loads at `retain_height` and above
    /// read (the value the entry at `retain_height` points at), if any. Checks that the
    /// entry at `retain_height` loads, so a prune never starts over a broken history.
    fn kept_below(&self, slot: HistorySlot, retain_height: u64) -> Result<Option<[u8; 9]>> {
        self.load_history(slot, retain_height)?;
        let k = history_key(slot, retain_height);
        Ok(match self.get_history(slot, &k)? {
            Some(HistoryEntry {
                value: None,
                changed_at,
            }) => {
                let at = stored_at(changed_at, retain_height);
                (at < retain_height).then(|| history_key(slot, at))
            }
            // A full entry (or none: the chain starts above) needs nothing below it.
            _ => None,
        })
    }

    /// The lowest height below `retain_height` holding a record under one of `prefixes`,
    /// other than the kept entries.
    fn lowest_below(
        &self,
        prefixes: &[u8],
        retain_height: u64,
        keep: &[[u8; 9]],
    ) -> Result<Option<u64>> {
        let mut lowest: Option<u64> = None;
        for &prefix in prefixes {
            let range = KeyRange::between(
                Bytes::copy_from_slice(&height_key(prefix, 0)),
                Bytes::copy_from_slice(&height_key(prefix, retain_height)),
            );
            for item in self.db.range(range, Direction::Forward)? {
                let (k, _) = item?;
                if keep.iter().any(|kept| kept[..] == k[..]) {
                    continue;
                }
                if let Some(h) = keys::height_of(&k) {
                    lowest = Some(lowest.map_or(h, |l| l.min(h)));
                }
                break;
            }
        }
        Ok(lowest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::ChainState;
    use crate::db::MemoryDb;
    use crate::demo::{ConsensusParams, DemoChain, State, ValidatorSet};

    /// The undecoded state a finishing rollback compares with its intent's: none on a new
    /// store, then exactly the bytes of the state saved last (a mutation run found nothing
    /// checking it: the rollback's rerun rewrote the state either way).
    #[test]
    fn the_state_bytes_are_those_of_the_state_saved_last() {
        let store = StateStore::<DemoChain>::open(Arc::new(MemoryDb::new("state")));
        assert_eq!(store.load_state_bytes().unwrap(), None);
        let mut state = State::genesis(
            3,
            ValidatorSet::default(),
            ConsensusParams::default(),
            [7; 32],
        );
        store.save_state(&state).unwrap();
        assert_eq!(store.load_state_bytes().unwrap(), Some(state.encode()));
        state.app_hash = [8; 32];
        store.save_state(&state).unwrap();
        assert_eq!(store.load_state_bytes().unwrap(), Some(state.encode()));
    }
}
