//! The chain seam: what the engine asks of an embedder's block, commit, state and results
//! types (ADR 0009).
//!
//! The crash argument — one synced batch per block, the flush order, the flush record, the
//! handshake — depends only on heights, hashes and bytes. An embedder implements [`Chain`]
//! for its own types; [`crate::Node`], [`crate::store::BlockStore`] and [`crate::store::StateStore`] are
//! generic over it. The engine checks what its invariants need (contiguity, a part set equal
//! to the block's encoding, a commit's height and block hash, the app hash after replay) and
//! leaves every other rule of the chain to [`Chain::validate`].
//!
//! Invariant: `decode(encode(x)) == x` for every type an embedder plugs in, and `decode` of
//! any bytes returns a value or a [`CorruptReason`], never a panic (a corrupt record must be
//! reported, not crash the node).
//!
//! [`crate::demo`] is one implementation (a synthetic chain and a key-value app); the
//! `ledger_node` example is another, with its own encoding and hash function.

use std::fmt::Debug;

use bytes::Bytes;

use crate::error::CorruptReason;
pub use crate::types::HistorySlot;
use crate::types::{BLOCK_PART_SIZE_BYTES, Hash, PartSet};

/// A commit: what finalized the block at [`ChainCommit::height`].
pub trait ChainCommit: Clone + Debug + Send + Sync + 'static {
    /// The committed block's height (0 for the empty commit a chain's first block carries).
    fn height(&self) -> u64;
    /// The committed block's hash.
    fn block_hash(&self) -> Hash;
    /// The commit's bytes, as stored (the payload of a `COMMIT` record).
    fn encode(&self) -> Bytes;
    /// Decodes [`ChainCommit::encode`]'s bytes.
    fn decode(bytes: &[u8]) -> Result<Self, CorruptReason>;
}

/// A block: its height, hash and encoding, and the commit of the block before it.
pub trait ChainBlock: Clone + Debug + Send + Sync + 'static {
    /// The commit type this block carries.
    type Commit: ChainCommit;
    /// The block's height (≥ 1).
    fn height(&self) -> u64;
    /// The block's hash, by the chain's own hash function (32 bytes; a chain with a shorter
    /// hash pads it).
    fn hash(&self) -> Hash;
    /// The bytes the block's parts are cut from ([`crate::PartSet::from_bytes`]).
    fn encode(&self) -> Bytes;
    /// Hands [`ChainBlock::encode`]'s bytes to `out`, in order and in pieces of any size:
    /// what [`crate::store::BlockStore::save_block`] compares the part set with, byte for byte.
    /// The default hands over [`ChainBlock::encode`] whole. A block that can stream its
    /// encoding (a header, then each transaction where it lies) saves an allocation and a
    /// copy of the whole block on every save. The pieces' concatenation must be exactly
    /// [`ChainBlock::encode`] (a difference is refused as a part set of another block).
    fn encode_in_pieces(&self, out: &mut dyn FnMut(&[u8])) {
        out(&self.encode());
    }
    /// Decodes [`ChainBlock::encode`]'s bytes.
    fn decode(bytes: &[u8]) -> Result<Self, CorruptReason>;
    /// The commit of height − 1 this block carries, stored under height − 1 with the block.
    /// Its height must be this block's height − 1 (the engine refuses the block otherwise).
    fn last_commit(&self) -> &Self::Commit;
    /// The app hash after height − 1 that this block records: the handshake's replay checks
    /// the app against it.
    fn parent_app_hash(&self) -> Hash;
    /// The bytes kept in the block's meta record (e.g. its encoded header), readable
    /// without loading the parts ([`crate::records::BlockMeta::header`]).
    fn header_bytes(&self) -> Bytes;
    /// The block's transaction count (kept in the meta record; 0 for a chain without
    /// transactions).
    fn tx_count(&self) -> u32;
    /// Checks the parts of the block its hash does not cover (e.g. the transactions against
    /// a header's data hash). A stored block that fails it is reported as corrupt. The
    /// default accepts: right for a hash over the whole encoding.
    fn check_body(&self) -> Result<(), CorruptReason> {
        Ok(())
    }
}

/// A value whose history the state store keeps: in force from `changed_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryValue {
    /// Which history.
    pub slot: HistorySlot,
    /// The height from which `value` is in force.
    pub changed_at: u64,
    /// The value's bytes.
    pub value: Bytes,
}

/// The consensus state after a block.
pub trait ChainState: Clone + Debug + Send + Sync + 'static {
    /// The last block applied (`initial_height() − 1` before the first block).
    fn height(&self) -> u64;
    /// The chain's first height (≥ 1).
    fn initial_height(&self) -> u64;
    /// The app hash after [`ChainState::height`].
    fn app_hash(&self) -> Hash;
    /// The state's bytes, as stored (the payload of the `STATE` record).
    fn encode(&self) -> Bytes;
    /// Decodes [`ChainState::encode`]'s bytes.
    fn decode(bytes: &[u8]) -> Result<Self, CorruptReason>;
    /// What each history slot holds, by slot index (errors name it, e.g. a pruned load).
    /// Default: "history slot N".
    fn history_names() -> [&'static str; HistorySlot::COUNT as usize] {
        [
            "history slot 0",
            "history slot 1",
            "history slot 2",
            "history slot 3",
        ]
    }
    /// The values in force at `height() + 1` whose per-height history the state store keeps
    /// (at most one per slot). Default: none.
    fn histories(&self) -> Vec<HistoryValue> {
        Vec::new()
    }
}

/// What executing a block produced; saved before the app commits, so a crash after the
/// commit can rebuild the state from it.
pub trait ChainResults: Clone + Debug + Send + Sync + 'static {
    /// The results' bytes, as stored (the payload of a `BLOCK_RESULTS` record).
    fn encode(&self) -> Bytes;
    /// Decodes [`ChainResults::encode`]'s bytes.
    fn decode(bytes: &[u8]) -> Result<Self, CorruptReason>;
}

/// The history a chain reads to rebuild a past state (rollback): the stores' loads.
pub trait StoredHistory<C: Chain + ?Sized> {
    /// The block at `height`, if stored.
    fn block(&self, height: u64) -> crate::Result<Option<C::Block>>;
    /// The results of block `height`, if stored.
    fn results(&self, height: u64) -> crate::Result<Option<C::Results>>;
    /// The value of history `slot` in force at `height` and the height it changed at.
    fn history(&self, slot: HistorySlot, height: u64) -> crate::Result<Option<(u64, Bytes)>>;
}

/// A chain: its types and its rules.
///
/// The engine calls [`Chain::validate`] before a block is saved or applied, then the app's
/// `execute_block` and `commit`, then [`Chain::next_state`] with the results and the app
/// hash; a block that fails validation is refused with [`crate::Error::InvalidBlock`]
/// before anything is written.
pub trait Chain: Send + Sync + 'static {
    /// The block type.
    type Block: ChainBlock<Commit = Self::Commit>;
    /// The commit type.
    type Commit: ChainCommit;
    /// The consensus state.
    type State: ChainState;
    /// What executing a block produces.
    type Results: ChainResults;

    /// A 32-byte identity of the chain's genesis: stored on a home's first open and checked
    /// on every later one ([`crate::Error::GenesisMismatch`] names both).
    fn genesis_id(&self) -> Hash;

    /// The state before the first block, given the app's hash before it.
    fn genesis_state(&self, app_hash: Hash) -> Self::State;

    /// The chain's rules for `block` on `state` (the engine has already checked that the
    /// height is the state's next one). `Err(reason)`: the block is refused, nothing
    /// written.
    fn validate(&self, state: &Self::State, block: &Self::Block) -> Result<(), String>;

    /// The state after `block`, given its results and the app hash the app committed.
    /// Must return a state at `block.height()` with that app hash.
    fn next_state(
        &self,
        state: &Self::State,
        block: &Self::Block,
        results: &Self::Results,
        app_hash: Hash,
    ) -> Self::State;

    /// The events `block` fires once durable, in order. Default: none.
    fn events(&self, block: &Self::Block, results: &Self::Results) -> Vec<Event> {
        let _ = (block, results);
        Vec::new()
    }

    /// Rebuilds the state after block `height` (below `current`'s height) from what the
    /// stores keep, for a rollback. `Ok(Err(reason))`: it cannot (the rollback is refused
    /// with the reason, nothing written). The default cannot.
    fn rebuild_state(
        &self,
        current: &Self::State,
        height: u64,
        stored: &dyn StoredHistory<Self>,
    ) -> crate::Result<Result<Self::State, String>> {
        let _ = (current, stored);
        Ok(Err(format!(
            "this chain cannot rebuild a past state (height {height})"
        )))
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum EventKind {
    /// A block was committed.
    NewBlock {
        /// Its hash.
        hash: crate::types::Hash,
        /// Its transaction count.
        tx_count: u32,
    },
    /// A transaction was executed.
    Tx {
        /// Its index in the block.
        index: u32,
        /// Its result code.
        code: u32,
    },
}

/// An event, identified by (height, kind).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    /// The block's height.
    pub height: u64,
    /// What happened.
    pub kind: EventKind,
}

/// A block's parts: the seam's block type meets the stored part set here, so the records
/// (`types`) need not know the seam.
impl PartSet {
    /// The complete part set of `block`'s encoding, parts of [`BLOCK_PART_SIZE_BYTES`].
    pub fn from_block<B: ChainBlock>(block: &B) -> Self {
        Self::from_bytes(&block.encode(), BLOCK_PART_SIZE_BYTES)
    }
}
