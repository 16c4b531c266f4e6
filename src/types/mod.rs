//! The engine's own records and the chain-agnostic types the stores keep: part sets, block
//! metas, history entries, the flush record and the stores' bookkeeping.
//!
//! Invariant: `decode(encode(x)) == x` for every type, and `decode` of any bytes returns a
//! value or a `CorruptReason`, never a panic.

use bytes::Bytes;

use crate::codec::{Reader, RecordKind, Writer};
use crate::error::CorruptReason;

/// A 32-byte digest: block hashes, app hashes, the genesis id (the chain chooses the hash
/// function).
pub type Hash = [u8; 32];

/// One of the per-height histories the state store keeps for a state (e.g. its validator
/// sets), by slot. The state store keeps [`HistorySlot::COUNT`] slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HistorySlot(u8);

impl HistorySlot {
    /// Slots the state store keeps. Why four: the reference chain keeps two histories
    /// (validators, consensus params); two more leave room without a format change.
    pub const COUNT: u8 = 4;

    /// Slot `index` (`None` at or above [`HistorySlot::COUNT`]).
    pub const fn new(index: u8) -> Option<HistorySlot> {
        if index < Self::COUNT {
            Some(HistorySlot(index))
        } else {
            None
        }
    }

    /// The slot's index.
    pub const fn index(self) -> u8 {
        self.0
    }

    /// Every slot, in order.
    pub fn all() -> impl Iterator<Item = HistorySlot> {
        (0..Self::COUNT).map(HistorySlot)
    }
}

/// Size of a block part, in bytes. Why: the reference node's part size (64 KiB), so blocks
/// split the same way; the last part of a block may be shorter.
pub const BLOCK_PART_SIZE_BYTES: usize = 64 * 1024;

/// The default payload capacity hint, in bytes: the fixed-size records (heights, bases, flush
/// records, hashes, history entries without a value) fit; a held record keeps its buffer's
/// whole capacity until its flush point, so the hint is kept small rather than generous.
const SMALL_PAYLOAD_HINT_BYTES: usize = 64;

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
    /// The payload, when it is exactly one byte string the record holds (a block part,
    /// an app's raw value): it is then framed by [`crate::codec::encode_record`], one copy
    /// placed to run at full speed. It must be the bytes [`Record::encode_payload`] writes.
    /// The default is `None` (the payload is written by [`Record::encode_payload`]).
    fn payload_slice(&self) -> Option<&[u8]> {
        None
    }
    /// Decodes a whole payload, rejecting trailing bytes.
    fn from_payload(bytes: &[u8]) -> Result<Self, CorruptReason> {
        let mut r = Reader::new(bytes);
        let v = Self::decode_payload(&mut r)?;
        r.finish()?;
        Ok(v)
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
    /// The chain's header bytes ([`ChainBlock::header_bytes`](crate::ChainBlock::header_bytes)).
    #[serde(skip)]
    pub header: Bytes,
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
        // The hash, the header with its length, part count, block size, tx count.
        32 + 4 + self.header.len() + 4 + 8 + 4
    }
    fn encode_payload(&self, w: &mut Writer) {
        w.hash(&self.block_hash).bytes(&self.header);
        w.u32(self.part_count)
            .u64(self.block_size)
            .u32(self.tx_count);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(BlockMeta {
            block_hash: r.hash()?,
            header: Bytes::copy_from_slice(r.bytes()?),
            part_count: r.u32()?,
            block_size: r.u64()?,
            tx_count: r.u32()?,
        })
    }
}

/// A history entry for height h: the height from which the value is in force, and the value
/// itself when stored here (at a change or a checkpoint); otherwise it is stored at
/// `changed_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The height from which the value is in force.
    pub changed_at: u64,
    /// The value's bytes, when stored in this entry.
    pub value: Option<Bytes>,
}

impl HistoryEntry {
    /// The record kind of slot `slot`'s entries: the first two are the kinds the demo
    /// chain's validator and params histories had before the seam, so its homes read alike.
    pub fn kind_of(slot: HistorySlot) -> RecordKind {
        const KINDS: [RecordKind; HistorySlot::COUNT as usize] = [
            RecordKind::VALIDATORS_INFO,
            RecordKind::PARAMS_INFO,
            RecordKind::HISTORY_2,
            RecordKind::HISTORY_3,
        ];
        KINDS[slot.index() as usize]
    }

    /// Encodes the entry as a record of `slot` under `key`.
    pub fn encode(&self, slot: HistorySlot, key: &[u8]) -> Bytes {
        let hint = 9 + self.value.as_ref().map_or(0, |v| v.len());
        crate::codec::encode_record_with(key, Self::kind_of(slot), hint, |w| {
            w.u64(self.changed_at);
            match &self.value {
                // Not length-prefixed: the value is the rest of the payload.
                Some(v) => {
                    w.u8(1).raw(v);
                }
                None => {
                    w.u8(0);
                }
            }
        })
    }

    /// Decodes a record of `slot` stored under `key`.
    pub fn decode(slot: HistorySlot, key: &[u8], bytes: &[u8]) -> Result<Self, CorruptReason> {
        let mut r = Reader::new(crate::codec::decode_record(
            key,
            Self::kind_of(slot),
            bytes,
        )?);
        let changed_at = r.u64()?;
        let value = match r.u8()? {
            1 => Some(Bytes::copy_from_slice(r.rest())),
            0 => None,
            _ => return Err(CorruptReason::Invalid("history entry flag")),
        };
        r.finish()?;
        Ok(HistoryEntry { changed_at, value })
    }
}

/// Defines a record whose payload is an embedder's encoded bytes, under one kind.
macro_rules! bytes_record {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(pub Bytes);

        impl Record for $name {
            const KIND: RecordKind = $kind;
            fn encode_payload(&self, w: &mut Writer) {
                w.raw(&self.0);
            }
            fn payload_size_hint(&self) -> usize {
                self.0.len()
            }
            fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
                Ok($name(Bytes::copy_from_slice(r.rest())))
            }
        }
    };
}

bytes_record!(
    /// A commit's bytes ([`crate::ChainCommit::encode`]).
    CommitRecord,
    RecordKind::COMMIT
);
bytes_record!(
    /// A state's bytes ([`crate::ChainState::encode`]).
    StateRecord,
    RecordKind::STATE
);
bytes_record!(
    /// A block's results' bytes ([`crate::ChainResults::encode`]).
    ResultsRecord,
    RecordKind::BLOCK_RESULTS
);

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
    fn payload_slice(&self) -> Option<&[u8]> {
        Some(&self.0)
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
    if let Some(payload) = value.payload_slice() {
        return crate::codec::encode_record(key, T::KIND, payload);
    }
    crate::codec::encode_record_with(key, T::KIND, value.payload_size_hint(), |w| {
        value.encode_payload(w)
    })
}

/// Decodes a record stored under `key`.
pub fn decode<T: Record>(key: &[u8], bytes: &[u8]) -> Result<T, CorruptReason> {
    T::from_payload(crate::codec::decode_record(key, T::KIND, bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record that gives its payload as a slice encodes to the bytes its
    /// `encode_payload` frames (the slice is not another payload).
    #[test]
    fn a_part_records_slice_path_is_its_payload_path() {
        for len in [0, 9, crate::codec::PLACED_COPY_FROM_BYTES, 70_000] {
            let part = PartRecord(Bytes::from(vec![0xa5; len]));
            let k = b"part";
            let by_writer = crate::codec::encode_record_with(k, PartRecord::KIND, len, |w| {
                part.encode_payload(w)
            });
            assert_eq!(encode(k, &part), by_writer, "{len} bytes");
            assert_eq!(decode::<PartRecord>(k, &by_writer).unwrap(), part);
        }
    }
}
