//! The chain's data types and their record payloads.
//!
//! Invariant: `decode(encode(x)) == x` for every type, and `decode` of any bytes returns a
//! value or a `CorruptReason`, never a panic.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::codec::{Reader, RecordKind, Writer};
use crate::error::CorruptReason;

/// A 32-byte digest (sha256).
pub type Hash = [u8; 32];

/// Size of a block part, in bytes. Why: the reference node's part size (64 KiB), so blocks
/// split the same way; the last part of a block may be shorter.
pub const BLOCK_PART_SIZE_BYTES: usize = 64 * 1024;

/// The sha256 of `data`.
pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

/// The default payload capacity hint, in bytes: the fixed-size records (heights, bases, flush
/// records, hashes, history entries without a value) fit; a held record keeps its buffer's
/// whole capacity until its flush point, so the hint is kept small rather than generous.
const SMALL_PAYLOAD_HINT_BYTES: usize = 64;

/// Payload bytes per validator in a validator set's encoding (address 32, power 8), plus
/// slack for the set's own fields.
const VALIDATOR_HINT_BYTES: usize = 48;

/// A record type: its kind tag and payload codec.
pub trait Record: Sized {
    /// The kind tag stored in the frame.
    const KIND: RecordKind;
    /// Appends the payload.
    fn encode_payload(&self, w: &mut Writer);
    /// Reads the payload (the reader must be consumed fully by the caller's check).
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason>;

    /// The payload bytes.
    fn to_payload(&self) -> Bytes {
        let mut w = Writer::with_capacity(self.payload_size_hint());
        self.encode_payload(&mut w);
        w.finish()
    }
    /// The payload's expected length in bytes: a capacity hint for encoding (a wrong hint
    /// costs a reallocation, never a different encoding). The default suits small records.
    fn payload_size_hint(&self) -> usize {
        SMALL_PAYLOAD_HINT_BYTES
    }
    /// Decodes a whole payload, rejecting trailing bytes.
    fn from_payload(bytes: &[u8]) -> Result<Self, CorruptReason> {
        let mut r = Reader::new(bytes);
        let v = Self::decode_payload(&mut r)?;
        r.finish()?;
        Ok(v)
    }
}

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
    fn encode(&self, w: &mut Writer) {
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
    fn decode(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
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
        let size: usize = self.txs.iter().map(|t| t.len() + 4).sum();
        let mut w = Writer::with_capacity(size + 512);
        self.header.encode(&mut w);
        w.u32(self.txs.len() as u32);
        for tx in &self.txs {
            w.bytes(tx);
        }
        self.last_commit.encode_payload(&mut w);
        w.finish()
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

/// A block split into parts. Parts may arrive one by one; a store accepts only a complete set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartSet {
    total: u32,
    parts: Vec<Option<Bytes>>,
    have: u32,
}

impl PartSet {
    /// The complete part set of `block`, parts of [`BLOCK_PART_SIZE_BYTES`].
    pub fn from_block(block: &Block) -> Self {
        Self::from_bytes(&block.encode(), BLOCK_PART_SIZE_BYTES)
    }
    /// Splits `data` into parts of `part_size` bytes (at least one part).
    pub fn from_bytes(data: &Bytes, part_size: usize) -> Self {
        assert!(part_size > 0, "invariant: part size is positive");
        let mut parts = Vec::new();
        let mut off = 0;
        while off < data.len() || parts.is_empty() {
            let end = (off + part_size).min(data.len());
            parts.push(Some(data.slice(off..end)));
            off = end;
        }
        let total = parts.len() as u32;
        PartSet {
            total,
            parts,
            have: total,
        }
    }
    /// An empty set expecting `total` parts.
    pub fn with_total(total: u32) -> Self {
        PartSet {
            total,
            parts: vec![None; total as usize],
            have: 0,
        }
    }
    /// Adds part `index`; returns false if the index is out of range or already present.
    pub fn add_part(&mut self, index: u32, bytes: Bytes) -> bool {
        match self.parts.get_mut(index as usize) {
            Some(slot @ None) => {
                *slot = Some(bytes);
                self.have += 1;
                true
            }
            _ => false,
        }
    }
    /// Total parts expected.
    pub fn total(&self) -> u32 {
        self.total
    }
    /// Parts present.
    pub fn count(&self) -> u32 {
        self.have
    }
    /// True when every part is present.
    pub fn is_complete(&self) -> bool {
        self.have == self.total
    }
    /// Part `index`, if present.
    pub fn part(&self, index: u32) -> Option<&Bytes> {
        self.parts.get(index as usize)?.as_ref()
    }
    /// Total bytes of the parts present.
    pub fn byte_size(&self) -> u64 {
        self.parts.iter().flatten().map(|p| p.len() as u64).sum()
    }
}

/// What the block store keeps about a block besides its parts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockMeta {
    /// The block's hash.
    pub block_hash: Hash,
    /// The header.
    pub header: Header,
    /// Number of parts.
    pub part_count: u32,
    /// Encoded block size in bytes.
    pub block_size: u64,
    /// Number of transactions.
    pub tx_count: u32,
}

impl Record for BlockMeta {
    const KIND: RecordKind = RecordKind::BLOCK_META;
    fn payload_size_hint(&self) -> usize {
        // The block hash, a header of about a dozen hashes and numbers, the part fields.
        512
    }
    fn encode_payload(&self, w: &mut Writer) {
        w.hash(&self.block_hash);
        self.header.encode(w);
        w.u32(self.part_count)
            .u64(self.block_size)
            .u32(self.tx_count);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(BlockMeta {
            block_hash: r.hash()?,
            header: Header::decode(r)?,
            part_count: r.u32()?,
            block_size: r.u64()?,
            tx_count: r.u32()?,
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
    fn encode(&self, w: &mut Writer) {
        w.u32(self.validators.len() as u32);
        for v in &self.validators {
            w.hash(&v.address).u64(v.power);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
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
    fn encode(&self, w: &mut Writer) {
        w.u64(self.block_max_bytes)
            .u64(self.block_max_gas)
            .u64(self.evidence_max_age_blocks);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
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
        SMALL_PAYLOAD_HINT_BYTES
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
        assert!(initial_height >= 1, "invariant: heights start at 1");
        State {
            initial_height,
            last_block_height: initial_height - 1,
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

/// A history entry for height h: the height from which the value is in force, and the value
/// itself when stored here (at a change or a checkpoint); otherwise it is stored at
/// `changed_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry<T> {
    /// The height from which the value is in force.
    pub changed_at: u64,
    /// The value, when stored in this entry.
    pub value: Option<T>,
}

macro_rules! history_record {
    ($t:ty, $kind:expr) => {
        impl Record for HistoryEntry<$t> {
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
                Ok(HistoryEntry { changed_at, value })
            }
        }
    };
}

history_record!(ValidatorSet, RecordKind::VALIDATORS_INFO);
history_record!(ConsensusParams, RecordKind::PARAMS_INFO);

/// The record of the last flush point the block store wrote: blocks `from+1..=to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FlushRecord {
    /// The height all three databases were at before the flush point (F).
    pub from: u64,
    /// The height the flush point writes up to (F′).
    pub to: u64,
}

impl std::fmt::Display for FlushRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{{from {}, to {}}}", self.from, self.to)
    }
}

impl Record for FlushRecord {
    const KIND: RecordKind = RecordKind::FLUSH_RECORD;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.from).u64(self.to);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        let from = r.u64()?;
        let to = r.u64()?;
        if from >= to {
            return Err(CorruptReason::Invalid("flush record from ≥ to"));
        }
        Ok(FlushRecord { from, to })
    }
}

/// The block store's range: blocks `base..=height` are stored (both 0 when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct BlockStoreState {
    /// Lowest stored height.
    pub base: u64,
    /// Highest stored height.
    pub height: u64,
}

impl Record for BlockStoreState {
    const KIND: RecordKind = RecordKind::BLOCK_STORE_STATE;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.base).u64(self.height);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        let base = r.u64()?;
        let height = r.u64()?;
        if base > height || (base == 0) != (height == 0) {
            return Err(CorruptReason::Invalid("block store base above height"));
        }
        Ok(BlockStoreState { base, height })
    }
}

/// The genesis hash a home was created with (the state store's `0x14` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenesisHash(pub Hash);

impl Record for GenesisHash {
    const KIND: RecordKind = RecordKind::GENESIS_HASH;
    fn encode_payload(&self, w: &mut Writer) {
        w.hash(&self.0);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(GenesisHash(r.hash()?))
    }
}

/// The state store's base (the `0x15` record): results and history of heights below `base`
/// are pruned; loads of them return [`crate::Error::Pruned`]. Absent: nothing is pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateStoreBase {
    /// The lowest height whose results and history the store answers for (≥ 1).
    pub base: u64,
}

impl Record for StateStoreBase {
    const KIND: RecordKind = RecordKind::STATE_STORE_BASE;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.base);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        let base = r.u64()?;
        if base == 0 {
            return Err(CorruptReason::Invalid("state store base 0"));
        }
        Ok(StateStoreBase { base })
    }
}

/// A height value (the hash index's payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeightValue(pub u64);

impl Record for HeightValue {
    const KIND: RecordKind = RecordKind::HASH_INDEX;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.0);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(HeightValue(r.u64()?))
    }
}

/// Raw part bytes as a record payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRecord(pub Bytes);

impl Record for PartRecord {
    const KIND: RecordKind = RecordKind::BLOCK_PART;
    fn encode_payload(&self, w: &mut Writer) {
        w.raw(&self.0);
    }
    fn payload_size_hint(&self) -> usize {
        self.0.len()
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(PartRecord(Bytes::copy_from_slice(r.rest())))
    }
}

/// Encodes a record stored under `key`.
pub fn encode<T: Record>(key: &[u8], value: &T) -> Bytes {
    crate::codec::encode_record_with(key, T::KIND, value.payload_size_hint(), |w| {
        value.encode_payload(w)
    })
}

/// Decodes a record stored under `key`.
pub fn decode<T: Record>(key: &[u8], bytes: &[u8]) -> Result<T, CorruptReason> {
    T::from_payload(crate::codec::decode_record(key, T::KIND, bytes)?)
}
