//! The demo chain's rules and its [`Chain`] implementation: the genesis, how a block is
//! validated against the state before it, the next state, the events, and the demo types'
//! bytes as the seam stores them.
//!
//! Invariant: every decode reads its bytes whole (trailing bytes are corrupt), and a block's
//! transactions must hash to its header's data hash (`check_body`).
//! Invariant: the rules are pure: the same state and block give the same next state.

use bytes::Bytes;

use super::types::{Block, BlockResults, Commit, ConsensusParams, State, ValidatorSet, sha256};
use crate::chain::{
    Chain, ChainBlock, ChainCommit, ChainResults, ChainState, HistorySlot, HistoryValue,
    StoredHistory,
};
use crate::codec::{Reader, Writer};
use crate::error::{CorruptReason, Result};
use crate::node::{Event, EventKind};
use crate::store::StateStore;
use crate::types::{Hash, Record};

/// The history slot of the validator sets.
const VALIDATORS: HistorySlot = match HistorySlot::new(0) {
    Some(s) => s,
    None => panic!("slot 0 exists"),
};
/// The history slot of the consensus params.
const PARAMS: HistorySlot = match HistorySlot::new(1) {
    Some(s) => s,
    None => panic!("slot 1 exists"),
};

/// The demo chain's genesis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Genesis {
    /// The first height.
    pub initial_height: u64,
    /// The first validator set.
    pub validators: ValidatorSet,
    /// The first consensus params.
    pub consensus_params: ConsensusParams,
}

impl Genesis {
    /// The genesis hash: sha256 of the initial height, the validator set's hash and the
    /// consensus params' hash. Stored on a home's first open and checked on every later one.
    pub fn hash(&self) -> Hash {
        let mut bytes = Vec::with_capacity(8 + 64);
        bytes.extend_from_slice(&self.initial_height.to_be_bytes());
        bytes.extend_from_slice(&self.validators.hash());
        bytes.extend_from_slice(&self.consensus_params.hash());
        sha256(&bytes)
    }
}

/// The demo chain: its genesis and its header rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoChain {
    /// The genesis the chain starts from.
    pub genesis: Genesis,
}

impl DemoChain {
    /// The chain starting from `genesis`.
    pub fn new(genesis: Genesis) -> Self {
        DemoChain { genesis }
    }
}

fn to_bytes(encode: impl FnOnce(&mut Writer)) -> Bytes {
    let mut w = Writer::new();
    encode(&mut w);
    w.finish()
}

fn whole<T>(
    bytes: &[u8],
    decode: impl FnOnce(&mut Reader<'_>) -> std::result::Result<T, CorruptReason>,
) -> std::result::Result<T, CorruptReason> {
    let mut r = Reader::new(bytes);
    let v = decode(&mut r)?;
    r.finish()?;
    Ok(v)
}

impl ChainCommit for Commit {
    fn height(&self) -> u64 {
        self.height
    }
    fn block_hash(&self) -> Hash {
        self.block_hash
    }
    fn encode(&self) -> Bytes {
        self.to_payload()
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        Commit::from_payload(bytes)
    }
}

impl ChainBlock for Block {
    type Commit = Commit;
    fn height(&self) -> u64 {
        self.header.height
    }
    fn hash(&self) -> Hash {
        self.header.hash()
    }
    fn encode(&self) -> Bytes {
        Block::encode(self)
    }
    fn encode_in_pieces(&self, out: &mut dyn FnMut(&[u8])) {
        Block::encode_in_pieces(self, out)
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        Block::decode(bytes)
    }
    fn last_commit(&self) -> &Commit {
        &self.last_commit
    }
    fn parent_app_hash(&self) -> Hash {
        self.header.app_hash
    }
    fn header_bytes(&self) -> Bytes {
        to_bytes(|w| self.header.encode(w))
    }
    fn tx_count(&self) -> u32 {
        self.txs.len() as u32
    }
    fn check_body(&self) -> std::result::Result<(), CorruptReason> {
        // The block hash covers the header only; the header's data hash covers the
        // transactions.
        if self.header.data_hash != Block::data_hash_of(&self.txs) {
            return Err(CorruptReason::Invalid(
                "transactions do not hash to the header's data hash",
            ));
        }
        Ok(())
    }
}

impl ChainState for State {
    fn height(&self) -> u64 {
        self.last_block_height
    }
    fn initial_height(&self) -> u64 {
        self.initial_height
    }
    fn app_hash(&self) -> Hash {
        self.app_hash
    }
    fn encode(&self) -> Bytes {
        self.to_payload()
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        State::from_payload(bytes)
    }
    fn history_names() -> [&'static str; HistorySlot::COUNT as usize] {
        ["validators", "consensus params", "unused", "unused"]
    }
    fn histories(&self) -> Vec<HistoryValue> {
        vec![
            HistoryValue {
                slot: VALIDATORS,
                changed_at: self.last_height_validators_changed,
                value: to_bytes(|w| self.validators.encode(w)),
            },
            HistoryValue {
                slot: PARAMS,
                changed_at: self.last_height_params_changed,
                value: to_bytes(|w| self.consensus_params.encode(w)),
            },
        ]
    }
}

impl ChainResults for BlockResults {
    fn encode(&self) -> Bytes {
        self.to_payload()
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        BlockResults::from_payload(bytes)
    }
}

/// The demo chain's typed history loads on its state store.
pub trait DemoHistory {
    /// The validator set in force at `height`, with the height it changed at;
    /// `Err(Error::Pruned)` below the store's base.
    fn load_validators(&self, height: u64) -> Result<Option<(u64, ValidatorSet)>>;
    /// The consensus params in force at `height`, with the height they changed at;
    /// `Err(Error::Pruned)` below the store's base.
    fn load_consensus_params(&self, height: u64) -> Result<Option<(u64, ConsensusParams)>>;
}

impl DemoHistory for StateStore<DemoChain> {
    fn load_validators(&self, height: u64) -> Result<Option<(u64, ValidatorSet)>> {
        self.load_history_as(VALIDATORS, height, |b| whole(b, ValidatorSet::decode))
    }
    fn load_consensus_params(&self, height: u64) -> Result<Option<(u64, ConsensusParams)>> {
        self.load_history_as(PARAMS, height, |b| whole(b, ConsensusParams::decode))
    }
}

fn history_of<T>(
    stored: &dyn StoredHistory<DemoChain>,
    slot: HistorySlot,
    height: u64,
    decode: impl FnOnce(&mut Reader<'_>) -> std::result::Result<T, CorruptReason>,
) -> Result<Option<(u64, T)>> {
    match stored.history(slot, height)? {
        None => Ok(None),
        Some((at, bytes)) => match whole(&bytes, decode) {
            Ok(v) => Ok(Some((at, v))),
            Err(reason) => Err(crate::Error::Corrupt {
                db: "state".into(),
                key: crate::codec::keys::height_key(
                    crate::codec::keys::HISTORY_PREFIXES[slot.index() as usize],
                    height,
                )
                .to_vec(),
                height: Some(height),
                reason,
            }),
        },
    }
}

impl Chain for DemoChain {
    type Block = Block;
    type Commit = Commit;
    type State = State;
    type Results = BlockResults;

    fn genesis_id(&self) -> Hash {
        self.genesis.hash()
    }

    fn genesis_state(&self, app_hash: Hash) -> State {
        State::genesis(
            self.genesis.initial_height,
            self.genesis.validators.clone(),
            self.genesis.consensus_params.clone(),
            app_hash,
        )
    }

    fn validate(&self, s: &State, block: &Block) -> std::result::Result<(), String> {
        let bad = |reason: &str| Err(reason.to_string());
        if block.header.last_block_hash != s.last_block_hash {
            return bad("last block hash differs");
        }
        if block.header.app_hash != s.app_hash {
            return bad("app hash differs from the app's after the previous block");
        }
        if block.header.validators_hash != s.validators.hash() {
            return bad("validators hash differs");
        }
        if block.header.consensus_params_hash != s.consensus_params.hash() {
            return bad("consensus params hash differs");
        }
        if block.header.last_results_hash != s.last_results_hash {
            return bad("last results hash differs");
        }
        if block.header.data_hash != Block::data_hash_of(&block.txs) {
            return bad("data hash does not match the transactions");
        }
        Ok(())
    }

    fn next_state(
        &self,
        state: &State,
        block: &Block,
        results: &BlockResults,
        app_hash: Hash,
    ) -> State {
        state.next(block, results, app_hash)
    }

    fn events(&self, block: &Block, results: &BlockResults) -> Vec<Event> {
        let h = block.height();
        let mut ev = Vec::with_capacity(1 + results.tx_results.len());
        ev.push(Event {
            height: h,
            kind: EventKind::NewBlock {
                hash: block.hash(),
                tx_count: block.txs.len() as u32,
            },
        });
        for (i, r) in results.tx_results.iter().enumerate() {
            ev.push(Event {
                height: h,
                kind: EventKind::Tx {
                    index: i as u32,
                    code: r.code,
                },
            });
        }
        ev
    }

    fn rebuild_state(
        &self,
        cur: &State,
        h: u64,
        stored: &dyn StoredHistory<Self>,
    ) -> Result<std::result::Result<State, String>> {
        let missing = |what: String| Ok(Err(format!("{what} is not stored")));
        let Some(next) = stored.block(h + 1)? else {
            return missing(format!("block {}", h + 1));
        };
        let Some((vals_changed, validators)) =
            history_of(stored, VALIDATORS, h + 1, ValidatorSet::decode)?
        else {
            return missing(format!("the validators for height {}", h + 1));
        };
        let Some((params_changed, params)) =
            history_of(stored, PARAMS, h + 1, ConsensusParams::decode)?
        else {
            return missing(format!("the consensus params for height {}", h + 1));
        };
        let state = if h + 1 == cur.initial_height {
            State::genesis(cur.initial_height, validators, params, next.header.app_hash)
        } else {
            let Some(block) = stored.block(h)? else {
                return missing(format!("block {h}"));
            };
            let Some((_, last_validators)) =
                history_of(stored, VALIDATORS, h, ValidatorSet::decode)?
            else {
                return missing(format!("the validators for height {h}"));
            };
            let Some(results) = stored.results(h)? else {
                return missing(format!("the results of block {h}"));
            };
            State {
                initial_height: cur.initial_height,
                last_block_height: h,
                last_block_hash: block.hash(),
                last_block_time_ms: block.header.time_ms,
                validators,
                last_validators,
                last_height_validators_changed: vals_changed,
                consensus_params: params,
                last_height_params_changed: params_changed,
                last_results_hash: results.hash(),
                app_hash: next.header.app_hash,
            }
        };
        // Block h+1's header commits to the state it was built on: check every field it
        // covers.
        let hd = &next.header;
        if hd.last_block_hash != state.last_block_hash
            || hd.validators_hash != state.validators.hash()
            || hd.consensus_params_hash != state.consensus_params.hash()
            || hd.last_results_hash != state.last_results_hash
        {
            return Ok(Err(format!(
                "the state rebuilt at height {h} does not match block {}'s header",
                h + 1
            )));
        }
        Ok(Ok(state))
    }
}
