//! The state store: the consensus state at the last height, per-block results, and the
//! validator-set and consensus-params history.
//!
//! Invariant: saving results and saving state are separate calls, each one synced batch, so
//! the node orders them: results before the app commits, state after.
//! Invariant: a history entry for height h holds the value when it changed at h or h is a
//! checkpoint; otherwise it names the height where the value is stored. Loading walks back
//! at most one step.

use std::sync::Arc;

use bytes::Bytes;

use super::{Poison, get_record};
use crate::codec::keys::{self, height_key};
use crate::db::{Batch, Db, Durability};
use crate::error::{CorruptReason, Error, Result};
use crate::types::{
    BlockResults, ConsensusParams, HistoryEntry, Record, State, ValidatorSet, encode,
};

/// Every this many heights the full validator set and params are stored even if unchanged.
/// Why: bounds how far back an entry can point, so pruning below a checkpoint never strands
/// a pointer, and a lookup reads at most two records.
pub const HISTORY_CHECKPOINT_INTERVAL: u64 = 1_000;

/// The state store over any [`Db`].
#[derive(Debug)]
pub struct StateStore {
    db: Arc<dyn Db>,
    poison: Poison,
}

impl StateStore {
    /// Opens the store.
    pub fn open(db: Arc<dyn Db>) -> Self {
        StateStore {
            db,
            poison: Poison::default(),
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

    /// The saved state.
    pub fn load_state(&self) -> Result<Option<State>> {
        self.poison.check(self.name())?;
        get_record(&*self.db, &keys::singleton(keys::STATE))
    }

    /// The saved state's height (0 when none is saved).
    pub fn height(&self) -> Result<u64> {
        Ok(self.load_state()?.map_or(0, |s| s.last_block_height))
    }

    fn history_entry<T: Clone>(
        value: &T,
        changed_at: u64,
        height: u64,
        initial: u64,
    ) -> HistoryEntry<T> {
        let full = changed_at == height
            || height == initial
            || height.is_multiple_of(HISTORY_CHECKPOINT_INTERVAL);
        HistoryEntry {
            changed_at,
            value: full.then(|| value.clone()),
        }
    }

    /// Saves `state` with the history entries for the next height, in one synced batch.
    ///
    /// `Ok`: durable (at the next flush point when holding). `Err`: may or may not be
    /// durable; the store is poisoned.
    pub fn save_state(&self, state: &State) -> Result<()> {
        let mut batch = Batch::new();
        self.stage_state(&mut batch, state);
        self.write(&batch)
    }

    pub(crate) fn stage_state(&self, batch: &mut Batch, state: &State) {
        let next = state.last_block_height + 1;
        let k = keys::singleton(keys::STATE);
        batch.put(Bytes::copy_from_slice(&k), encode(&k, state));
        let k = height_key(keys::VALIDATORS, next);
        let e = Self::history_entry(
            &state.validators,
            state.last_height_validators_changed,
            next,
            state.initial_height,
        );
        batch.put(Bytes::copy_from_slice(&k), encode(&k, &e));
        let k = height_key(keys::PARAMS, next);
        let e = Self::history_entry(
            &state.consensus_params,
            state.last_height_params_changed,
            next,
            state.initial_height,
        );
        batch.put(Bytes::copy_from_slice(&k), encode(&k, &e));
    }

    /// Saves the genesis `state` and the genesis hash together, in one synced batch: a home
    /// never has one without the other.
    pub fn save_genesis(&self, state: &State, genesis_hash: &crate::types::Hash) -> Result<()> {
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
    pub fn save_results(&self, height: u64, results: &BlockResults) -> Result<()> {
        let k = height_key(keys::RESULTS, height);
        let mut batch = Batch::new();
        batch.put(Bytes::copy_from_slice(&k), encode(&k, results));
        self.write(&batch)
    }

    /// The results of block `height`.
    pub fn load_results(&self, height: u64) -> Result<Option<BlockResults>> {
        self.poison.check(self.name())?;
        get_record(&*self.db, &height_key(keys::RESULTS, height))
    }

    fn load_history<T>(&self, prefix: u8, height: u64) -> Result<Option<(u64, T)>>
    where
        HistoryEntry<T>: Record,
    {
        self.poison.check(self.name())?;
        let k = height_key(prefix, height);
        let Some(entry) = get_record::<HistoryEntry<T>>(&*self.db, &k)? else {
            return Ok(None);
        };
        if let Some(v) = entry.value {
            return Ok(Some((entry.changed_at, v)));
        }
        // Walk back to where the value is stored: the last change, or a later checkpoint.
        let checkpoint = height / HISTORY_CHECKPOINT_INTERVAL * HISTORY_CHECKPOINT_INTERVAL;
        let at = entry.changed_at.max(checkpoint);
        let k2 = height_key(prefix, at);
        match get_record::<HistoryEntry<T>>(&*self.db, &k2)? {
            Some(HistoryEntry { value: Some(v), .. }) if at < height => {
                Ok(Some((entry.changed_at, v)))
            }
            _ => Err(Error::Corrupt {
                db: self.name().to_string(),
                key: k.to_vec(),
                height: Some(height),
                reason: CorruptReason::Invalid(
                    "history entry points at a height with no stored value",
                ),
            }),
        }
    }

    /// The validator set in force at `height`, with the height it changed at.
    pub fn load_validators(&self, height: u64) -> Result<Option<(u64, ValidatorSet)>> {
        self.load_history(keys::VALIDATORS, height)
    }

    /// The consensus params in force at `height`, with the height they changed at.
    pub fn load_consensus_params(&self, height: u64) -> Result<Option<(u64, ConsensusParams)>> {
        self.load_history(keys::PARAMS, height)
    }

    /// Removes the history and results above `height` and saves `state` (which must be at
    /// `height`), in one synced batch. Used by rollback.
    pub fn rollback_to(&self, state: &State, old_height: u64) -> Result<()> {
        let h = state.last_block_height;
        let mut batch = Batch::new();
        for x in h + 1..=old_height {
            batch.delete(Bytes::copy_from_slice(&height_key(keys::RESULTS, x)));
        }
        for x in h + 2..=old_height + 1 {
            batch.delete(Bytes::copy_from_slice(&height_key(keys::VALIDATORS, x)));
            batch.delete(Bytes::copy_from_slice(&height_key(keys::PARAMS, x)));
        }
        self.stage_state(&mut batch, state);
        self.write(&batch)
    }
}
