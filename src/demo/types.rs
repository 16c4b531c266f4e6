//! The demo chain's types: header, block, commit, validators, params, results, state.
//!
//! Invariant: `decode(encode(x)) == x` for every type, and `decode` of any bytes returns a
//! value or a `CorruptReason`, never a panic.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::codec::{Reader, RecordKind, Writer};
use crate::error::CorruptReason;
use crate::types::{Hash, Record};

/// The sha256 of `data`.
pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

/// Payload bytes per validator in a validator set's encoding (address 32, power 8), plus
/// slack for the set's own fields.
const VALIDATOR_HINT_BYTES: usize = 48;

/// Bytes a small encoding is expected to take (a capacity hint only).
const SMALL_HINT_BYTES: usize = 64;

/// Bytes of an encoded [`Header`]: height and time (8 each) and six 32-byte hashes (a
/// capacity hint only).
const HEADER_ENCODED_BYTES: usize = 8 + 8 + 6 * 32;

/// A block header.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Header {
    /// The block's height (≥ 1).
    pub height: u64,
    /// Block time, milliseconds since the epoch.
    pub time_ms: u64,
    /// Hash of the previous block (zero for the first block).
    pub last_block_hash: Hash,
    /// Hash of the transactions.
    pub data_hash: Hash,
    /// Hash of the validator set that signs this block.
    pub validators_hash: Hash,
    /// Hash of the consensus params in force.
    pub consensus_params_hash: Hash,
    /// The app hash after the previous block.
    pub app_hash: Hash,
    /// Hash of the previous block's results.
    pub last_results_hash: Hash,
}

impl Header {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.height).u64(self.time_ms);
        for h in [
            &self.last_block_hash,
            &self.data_hash,
            &self.validators_hash,
            &self.consensus_params_hash,
            &self.app_hash,
            &self.last_results_hash,
        ] {
            w.hash(h);
        }
    }
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(Header {
            height: r.u64()?,
            time_ms: r.u64()?,
            last_block_hash: r.hash()?,
            data_hash: r.hash()?,
            validators_hash: r.hash()?,
            consensus_params_hash: r.hash()?,
            app_hash: r.hash()?,
            last_results_hash: r.hash()?,
        })
    }
    /// Decodes a header from its encoding (a block meta's [`crate::records::BlockMeta::header`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CorruptReason> {
        let mut r = Reader::new(bytes);
        let h = Header::decode(&mut r)?;
        r.finish()?;
        Ok(h)
    }
    /// The block hash: sha256 of the encoded header.
    pub fn hash(&self) -> Hash {
        let mut w = Writer::with_capacity(16 + 6 * 32);
        self.encode(&mut w);
        sha256(w.as_slice())
    }
}

/// A commit: the signatures that finalized the block at `height`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Commit {
    /// The committed block's height (0: the empty commit of a chain's first block).
    pub height: u64,
    /// The round it was committed in.
    pub round: u32,
    /// The committed block's hash.
    pub block_hash: Hash,
    /// Opaque signatures, one per validator.
    #[serde(skip)]
    pub signatures: Vec<Bytes>,
}

impl Record for Commit {
    const KIND: RecordKind = RecordKind::COMMIT;
    fn payload_size_hint(&self) -> usize {
        64 + self.signatures.iter().map(|s| 4 + s.len()).sum::<usize>()
    }
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.height).u32(self.round).hash(&self.block_hash);
        w.u32(self.signatures.len() as u32);
        for s in &self.signatures {
            w.bytes(s);
        }
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        let height = r.u64()?;
        let round = r.u32()?;
        let block_hash = r.hash()?;
        let n = r.count(4)?;
        let mut signatures = Vec::with_capacity(n);
        for _ in 0..n {
            signatures.push(Bytes::copy_from_slice(r.bytes()?));
        }
        Ok(Commit {
            height,
            round,
            block_hash,
            signatures,
        })
    }
}

/// A block: header, transactions, and the commit of the previous block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Block {
    /// The header.
    pub header: Header,
    /// The transactions.
    pub txs: Vec<Bytes>,
    /// The commit for height − 1 (height 0 and no signatures for a chain's first block).
    pub last_commit: Commit,
}

impl Block {
    /// The block's height.
    pub fn height(&self) -> u64 {
        self.header.height
    }
    /// The block's hash.
    pub fn hash(&self) -> Hash {
        self.header.hash()
    }
    /// The data hash of a transaction list.
    pub fn data_hash_of(txs: &[Bytes]) -> Hash {
        let mut h = Sha256::new();
        for tx in txs {
            h.update((tx.len() as u64).to_be_bytes());
            h.update(tx);
        }
        h.finalize().into()
    }
    /// The block's canonical encoding (split into parts for storage).
    pub fn encode(&self) -> Bytes {
        // One layout: the pieces of [`Block::encode_in_pieces`], gathered.
        let size: usize = self.txs.iter().map(|t| t.len() + 4).sum();
        let mut w = Writer::with_capacity(size + 512);
        self.encode_in_pieces(&mut |p| {
            w.raw(p);
        });
        w.finish()
    }
    /// [`Block::encode`]'s bytes handed to `out` in pieces, without building them: the
    /// header and the transaction count, then each transaction's length and the
    /// transaction where it lies, then the last commit.
    pub fn encode_in_pieces(&self, out: &mut dyn FnMut(&[u8])) {
        let mut w = Writer::with_capacity(HEADER_ENCODED_BYTES + 4);
        self.header.encode(&mut w);
        w.u32(self.txs.len() as u32);
        out(w.as_slice());
        for tx in &self.txs {
            let len = u32::try_from(tx.len()).expect("invariant: a field is shorter than 4 GiB");
            out(&len.to_be_bytes());
            out(tx);
        }
        let mut w = Writer::new();
        self.last_commit.encode_payload(&mut w);
        out(w.as_slice());
    }
    /// Decodes a block from its canonical encoding.
    pub fn decode(bytes: &[u8]) -> Result<Self, CorruptReason> {
        let mut r = Reader::new(bytes);
        let header = Header::decode(&mut r)?;
        let n = r.count(4)?;
        let mut txs = Vec::with_capacity(n);
        for _ in 0..n {
            txs.push(Bytes::copy_from_slice(r.bytes()?));
        }
        let last_commit = Commit::decode_payload(&mut r)?;
        r.finish()?;
        Ok(Block {
            header,
            txs,
            last_commit,
        })
    }
}

/// A validator: its address and voting power.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Validator {
    /// The validator's address (its key's hash).
    pub address: Hash,
    /// Voting power; 0 in an update removes the validator.
    pub power: u64,
}

/// A validator set, sorted by address.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct ValidatorSet {
    /// The validators, sorted by address, each with power > 0.
    pub validators: Vec<Validator>,
}

impl ValidatorSet {
    /// A set from `validators` (sorted, zero-power entries dropped).
    pub fn new(mut validators: Vec<Validator>) -> Self {
        validators.retain(|v| v.power > 0);
        validators.sort();
        validators.dedup_by(|a, b| a.address == b.address);
        ValidatorSet { validators }
    }
    /// The set after `updates` (power 0 removes; otherwise insert or replace).
    pub fn apply_updates(&self, updates: &[Validator]) -> Self {
        let mut map: std::collections::BTreeMap<Hash, u64> = self
            .validators
            .iter()
            .map(|v| (v.address, v.power))
            .collect();
        for u in updates {
            if u.power == 0 {
                map.remove(&u.address);
            } else {
                map.insert(u.address, u.power);
            }
        }
        ValidatorSet {
            validators: map
                .into_iter()
                .map(|(address, power)| Validator { address, power })
                .collect(),
        }
    }
    /// The set's hash.
    pub fn hash(&self) -> Hash {
        let mut w = Writer::new();
        self.encode(&mut w);
        sha256(w.as_slice())
    }
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.validators.len() as u32);
        for v in &self.validators {
            w.hash(&v.address).u64(v.power);
        }
    }
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        let n = r.count(40)?;
        let mut validators = Vec::with_capacity(n);
        for _ in 0..n {
            validators.push(Validator {
                address: r.hash()?,
                power: r.u64()?,
            });
        }
        Ok(ValidatorSet { validators })
    }
}

fn encode_updates(w: &mut Writer, updates: &[Validator]) {
    w.u32(updates.len() as u32);
    for v in updates {
        w.hash(&v.address).u64(v.power);
    }
}

fn decode_updates(r: &mut Reader<'_>) -> Result<Vec<Validator>, CorruptReason> {
    let n = r.count(40)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(Validator {
            address: r.hash()?,
            power: r.u64()?,
        });
    }
    Ok(out)
}

/// Consensus parameters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConsensusParams {
    /// Largest block, in bytes.
    pub block_max_bytes: u64,
    /// Largest total gas of a block.
    pub block_max_gas: u64,
    /// Oldest evidence accepted, in blocks.
    pub evidence_max_age_blocks: u64,
}

impl Default for ConsensusParams {
    fn default() -> Self {
        ConsensusParams {
            block_max_bytes: 22 * 1024 * 1024,
            block_max_gas: 10_000_000,
            evidence_max_age_blocks: 100_000,
        }
    }
}

impl ConsensusParams {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.block_max_bytes)
            .u64(self.block_max_gas)
            .u64(self.evidence_max_age_blocks);
    }
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(ConsensusParams {
            block_max_bytes: r.u64()?,
            block_max_gas: r.u64()?,
            evidence_max_age_blocks: r.u64()?,
        })
    }
    /// The params' hash.
    pub fn hash(&self) -> Hash {
        let mut w = Writer::new();
        self.encode(&mut w);
        sha256(w.as_slice())
    }
}

/// The result of one transaction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TxResult {
    /// 0 for success.
    pub code: u32,
    /// Result data.
    #[serde(skip)]
    pub data: Bytes,
}

/// What executing a block produced; saved before the app commits so the state can be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct BlockResults {
    /// One result per transaction.
    pub tx_results: Vec<TxResult>,
    /// Validator updates for the next height.
    pub validator_updates: Vec<Validator>,
    /// New consensus params, if changed.
    pub param_updates: Option<ConsensusParams>,
}

impl BlockResults {
    /// The results' hash (goes into the next header).
    pub fn hash(&self) -> Hash {
        sha256(&self.to_payload())
    }
}

impl Record for BlockResults {
    const KIND: RecordKind = RecordKind::BLOCK_RESULTS;
    fn payload_size_hint(&self) -> usize {
        SMALL_HINT_BYTES
            + self
                .tx_results
                .iter()
                .map(|t| 8 + t.data.len())
                .sum::<usize>()
    }
    fn encode_payload(&self, w: &mut Writer) {
        w.u32(self.tx_results.len() as u32);
        for t in &self.tx_results {
            w.u32(t.code).bytes(&t.data);
        }
        encode_updates(w, &self.validator_updates);
        match &self.param_updates {
            None => {
                w.u8(0);
            }
            Some(p) => {
                w.u8(1);
                p.encode(w);
            }
        }
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        let n = r.count(8)?;
        let mut tx_results = Vec::with_capacity(n);
        for _ in 0..n {
            tx_results.push(TxResult {
                code: r.u32()?,
                data: Bytes::copy_from_slice(r.bytes()?),
            });
        }
        let validator_updates = decode_updates(r)?;
        let param_updates = match r.u8()? {
            0 => None,
            1 => Some(ConsensusParams::decode(r)?),
            _ => return Err(CorruptReason::Invalid("param update flag")),
        };
        Ok(BlockResults {
            tx_results,
            validator_updates,
            param_updates,
        })
    }
}

/// The consensus state after the block at `last_block_height`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// The chain's first height.
    pub initial_height: u64,
    /// The last block applied (initial_height − 1 before the first block).
    pub last_block_height: u64,
    /// Its hash.
    pub last_block_hash: Hash,
    /// Its time.
    pub last_block_time_ms: u64,
    /// Validators for `last_block_height + 1`.
    pub validators: ValidatorSet,
    /// Validators of `last_block_height`.
    pub last_validators: ValidatorSet,
    /// The height from which `validators` is in force.
    pub last_height_validators_changed: u64,
    /// Params for `last_block_height + 1`.
    pub consensus_params: ConsensusParams,
    /// The height from which `consensus_params` are in force.
    pub last_height_params_changed: u64,
    /// Hash of the last block's results.
    pub last_results_hash: Hash,
    /// The app hash after `last_block_height`.
    pub app_hash: Hash,
}

impl State {
    /// The state before the chain's first block.
    pub fn genesis(
        initial_height: u64,
        validators: ValidatorSet,
        consensus_params: ConsensusParams,
        app_hash: Hash,
    ) -> Self {
        // An initial height of 0 gives a state the node refuses (heights start at 1).
        State {
            initial_height,
            last_block_height: initial_height.saturating_sub(1),
            last_block_hash: [0; 32],
            last_block_time_ms: 0,
            last_validators: ValidatorSet::default(),
            validators,
            last_height_validators_changed: initial_height,
            consensus_params,
            last_height_params_changed: initial_height,
            last_results_hash: [0; 32],
            app_hash,
        }
    }

    /// The state after `block`, given its results and the app hash the app committed.
    /// Validator and param updates take effect at the next height.
    pub fn next(&self, block: &Block, results: &BlockResults, app_hash: Hash) -> State {
        let h = block.height();
        debug_assert_eq!(
            h,
            self.last_block_height + 1,
            "invariant: state advances by one"
        );
        let mut s = self.clone();
        s.last_block_height = h;
        s.last_block_hash = block.hash();
        s.last_block_time_ms = block.header.time_ms;
        s.last_validators = self.validators.clone();
        if !results.validator_updates.is_empty() {
            s.validators = self.validators.apply_updates(&results.validator_updates);
            s.last_height_validators_changed = h + 1;
        }
        if let Some(p) = &results.param_updates {
            s.consensus_params = p.clone();
            s.last_height_params_changed = h + 1;
        }
        s.last_results_hash = results.hash();
        s.app_hash = app_hash;
        s
    }
}

impl Record for State {
    const KIND: RecordKind = RecordKind::STATE;
    fn payload_size_hint(&self) -> usize {
        // Fixed fields (5 heights, 3 hashes, params) and the two validator sets.
        256 + VALIDATOR_HINT_BYTES
            * (self.validators.validators.len() + self.last_validators.validators.len())
    }
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.initial_height)
            .u64(self.last_block_height)
            .hash(&self.last_block_hash)
            .u64(self.last_block_time_ms);
        self.validators.encode(w);
        self.last_validators.encode(w);
        w.u64(self.last_height_validators_changed);
        self.consensus_params.encode(w);
        w.u64(self.last_height_params_changed)
            .hash(&self.last_results_hash)
            .hash(&self.app_hash);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(State {
            initial_height: r.u64()?,
            last_block_height: r.u64()?,
            last_block_hash: r.hash()?,
            last_block_time_ms: r.u64()?,
            validators: ValidatorSet::decode(r)?,
            last_validators: ValidatorSet::decode(r)?,
            last_height_validators_changed: r.u64()?,
            consensus_params: ConsensusParams::decode(r)?,
            last_height_params_changed: r.u64()?,
            last_results_hash: r.hash()?,
            app_hash: r.hash()?,
        })
    }
}

/// A state store history entry with the demo chain's value decoded: the record the state
/// store keeps under slot 0 (validator sets) and slot 1 (consensus params), byte for byte
/// ([`crate::records::HistoryEntry`] is the engine's undecoded view). For fuzzing and inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedHistoryEntry<T> {
    /// The height from which the value is in force.
    pub changed_at: u64,
    /// The value, when stored in this entry.
    pub value: Option<T>,
}

macro_rules! history_record {
    ($t:ty, $kind:expr) => {
        impl Record for TypedHistoryEntry<$t> {
            const KIND: RecordKind = $kind;
            fn encode_payload(&self, w: &mut Writer) {
                w.u64(self.changed_at);
                match &self.value {
                    Some(v) => {
                        w.u8(1);
                        v.encode(w);
                    }
                    None => {
                        w.u8(0);
                    }
                }
            }
            fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
                let changed_at = r.u64()?;
                let value = match r.u8()? {
                    1 => Some(<$t>::decode(r)?),
                    0 => None,
                    _ => return Err(CorruptReason::Invalid("history entry flag")),
                };
                Ok(TypedHistoryEntry { changed_at, value })
            }
        }
    };
}

history_record!(ValidatorSet, RecordKind::VALIDATORS_INFO);
history_record!(ConsensusParams, RecordKind::PARAMS_INFO);
