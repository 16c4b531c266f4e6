//! The demo application: a key-value state machine driven by the transactions in each block.
//!
//! Transactions (binary): `1 ‖ klen(u16) ‖ key ‖ value` sets a key; `2 ‖ klen ‖ key` deletes
//! one; `3 ‖ address(32) ‖ power(u64)` updates a validator; `4 ‖ max_bytes ‖ max_gas ‖
//! max_age` (u64 each) changes consensus params; `5 ‖ height(u64)` writes the halt height
//! param, which asks the node for a flush point. Anything else fails with code 1.
//!
//! App hash: `sha256(previous app hash ‖ height ‖ the block's writes in key order)`, a hash
//! chain that commits to every state change, so equal hashes mean equal states.
//!
//! Undo log: each commit of block h writes, in the same batch as its values and meta, an
//! undo record for h (the meta before h and the stored value each written key had before
//! h), and deletes the undo record of h − [`UNDO_RETENTION_BLOCKS`]. So the undo records
//! are durable exactly when the commit is (held and written at flush points with it), and
//! the app can roll its durable state back to any height down to
//! `durable height − UNDO_RETENTION_BLOCKS` ([`App::rollback_to`]) in one synced batch.
//!
//! Invariant: the undo records form one contiguous run of heights ending at the durable
//! height (or none): every commit adds the next one and a rollback removes the top ones.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::chain::DemoChain;
use super::types::{Block, BlockResults, ConsensusParams, TxResult, Validator};
use crate::app::{App, AppInfo};
use crate::codec::{Reader, RecordKind, Writer, keys};
use crate::db::{Batch, Db, Direction, Durability, KeyRange};
use crate::error::{CorruptReason, Error, Result};
use crate::holding::HoldingDb;
use crate::prefetch::{PrefetchPool, PrefetchSession, PrefetchSource, PrefetchStats};
use crate::types::{Hash, Record, decode, encode};

/// Key of the halt-height parameter in the app's key space.
pub const HALT_HEIGHT_KEY: &[u8] = b"param/halt_height";

/// How many blocks (unit: blocks, counted down from the app's durable height) the demo app
/// keeps undo records for: it can roll back to `height − UNDO_RETENTION_BLOCKS` at the
/// lowest.
///
/// Why this bound: a rollback is how an operator recovers from a bad block (an app-hash
/// mismatch or a bad upgrade) found soon after it was committed: a mismatch shows at the
/// next block, and CometBFT's own rollback goes back one height. Sixteen blocks leave a wide
/// margin for that while the undo log stays a fixed window (sixteen records, one deleted
/// per commit, each about the size of the block's writes' keys and prior values), never a
/// second copy of the history.
pub const UNDO_RETENTION_BLOCKS: u64 = 16;
const _: () = assert!(
    UNDO_RETENTION_BLOCKS >= 1,
    "a rollback of one block needs one undo record"
);

/// A demo-app transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tx {
    /// Set `key` to `value`.
    Set(Bytes, Bytes),
    /// Delete `key`.
    Delete(Bytes),
    /// Validator update (power 0 removes).
    Validator(Validator),
    /// New consensus params.
    Params(ConsensusParams),
    /// Write the halt height param.
    HaltAt(u64),
    /// Read `key` and add `delta` (wrapping) to the big-endian u64 in its value's first 8
    /// bytes, keeping the rest of the value; an absent key reads as the 8-byte value 0. A
    /// value shorter than 8 bytes fails the transaction (code 2, nothing written). The one
    /// transaction whose execution reads state: what prefetch warms.
    Add(Bytes, u64),
}

impl Tx {
    /// The transaction's bytes.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Tx::Set(k, v) => {
                b.put_u8(1);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
                b.put_slice(v);
            }
            Tx::Delete(k) => {
                b.put_u8(2);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
            }
            Tx::Validator(v) => {
                b.put_u8(3);
                b.put_slice(&v.address);
                b.put_u64(v.power);
            }
            Tx::Params(p) => {
                b.put_u8(4);
                b.put_u64(p.block_max_bytes);
                b.put_u64(p.block_max_gas);
                b.put_u64(p.evidence_max_age_blocks);
            }
            Tx::HaltAt(h) => {
                b.put_u8(5);
                b.put_u64(*h);
            }
            Tx::Add(k, delta) => {
                b.put_u8(6);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
                b.put_u64(*delta);
            }
        }
        b.freeze()
    }

    /// Parses a transaction.
    pub fn decode(tx: &[u8]) -> Option<Tx> {
        let (&op, rest) = tx.split_first()?;
        let key_and_rest = |rest: &[u8]| -> Option<(Bytes, Bytes)> {
            let n = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
            let key = rest.get(2..2 + n)?;
            Some((
                Bytes::copy_from_slice(key),
                Bytes::copy_from_slice(&rest[2 + n..]),
            ))
        };
        let u64_at = |s: &[u8], i: usize| -> Option<u64> {
            Some(u64::from_be_bytes(s.get(i..i + 8)?.try_into().ok()?))
        };
        match op {
            1 => key_and_rest(rest).map(|(k, v)| Tx::Set(k, v)),
            2 => match key_and_rest(rest)? {
                (k, v) if v.is_empty() => Some(Tx::Delete(k)),
                _ => None,
            },
            3 if rest.len() == 40 => Some(Tx::Validator(Validator {
                address: rest[..32].try_into().ok()?,
                power: u64_at(rest, 32)?,
            })),
            4 if rest.len() == 24 => Some(Tx::Params(ConsensusParams {
                block_max_bytes: u64_at(rest, 0)?,
                block_max_gas: u64_at(rest, 8)?,
                evidence_max_age_blocks: u64_at(rest, 16)?,
            })),
            5 if rest.len() == 8 => Some(Tx::HaltAt(u64_at(rest, 0)?)),
            6 => match key_and_rest(rest)? {
                (k, d) if d.len() == 8 => Some(Tx::Add(k, u64_at(&d, 0)?)),
                _ => None,
            },
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AppMeta(AppInfo);

impl Record for AppMeta {
    const KIND: RecordKind = RecordKind::APP_META;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.0.height).hash(&self.0.app_hash);
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        Ok(AppMeta(AppInfo {
            height: r.u64()?,
            app_hash: r.hash()?,
        }))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct AppValue(Bytes);

impl Record for AppValue {
    const KIND: RecordKind = RecordKind::APP_VALUE;
    fn encode_payload(&self, w: &mut Writer) {
        w.raw(&self.0);
    }
    fn payload_slice(&self) -> Option<&[u8]> {
        Some(&self.0)
    }
    fn payload_size_hint(&self) -> usize {
        self.0.len()
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        Ok(AppValue(Bytes::copy_from_slice(r.rest())))
    }
}

/// The undo record of one block: the app's meta before it, and for each key the block wrote,
/// the stored record under that key before it (`None`: the key was absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct AppUndo {
    prev: AppInfo,
    entries: Vec<(Bytes, Option<Bytes>)>,
}

/// A commit made while holding, one of the last [`UNDO_RETENTION_BLOCKS`] since the flush
/// point: what its undo record needs, kept until the flush point writes the record.
///
/// Why the last ones only, with the window's values read as each commit begins: a window
/// used to keep every commit since its flush point (thousands of blocks), each with its
/// keys, data keys and records written, for the flush point to work out the kept commits'
/// old values from — ~240 B a write beyond the window's own bytes, ~50 MiB of the peak RSS
/// at 300k light blocks (`benches/compare/PERFORMANCE.md`, "The held commits: the last
/// sixteen"). The read costs what the read-back of the records it replaces did: one lookup
/// in the open window per key.
#[derive(Debug)]
struct HeldCommit {
    height: u64,
    prev: AppInfo,
    keys: CommitKeys,
    /// Per key of `keys`: the value the open window held for it when the commit began
    /// (`Some(None)`: the window deleted it), or `None` when the window had not written it
    /// (its value is then what it was before the window, read when the record is written).
    before_in_window: Vec<Option<Option<Bytes>>>,
}

/// The data keys one commit writes ([`data_key`]: a prefix byte, then the app key), back to
/// back in one buffer: one allocation per commit, not one per key and per data key (and,
/// once shared, one reference-count header each).
#[derive(Debug)]
struct CommitKeys {
    data_keys: Bytes,
    /// Per key, in the commit's order: the end of its data key in `data_keys` (it starts
    /// where the one before ends).
    ends: Vec<u32>,
}

impl CommitKeys {
    /// The data keys of the app keys `keys` (at most [`u32::MAX`] bytes in all).
    fn new<'a>(keys: impl Iterator<Item = &'a Bytes> + Clone) -> Self {
        let len: usize = keys.clone().map(|k| 1 + k.len()).sum();
        assert!(
            u32::try_from(len).is_ok(),
            "invariant: a block's data keys fit in {} bytes",
            u32::MAX
        );
        let mut data_keys = BytesMut::with_capacity(len);
        let mut ends = Vec::with_capacity(keys.clone().count());
        for k in keys {
            data_keys.put_u8(keys::APP_DATA);
            data_keys.put_slice(k);
            ends.push(data_keys.len() as u32);
        }
        CommitKeys {
            data_keys: data_keys.freeze(),
            ends,
        }
    }

    /// The number of keys.
    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Each data key's place in `data_keys`.
    fn ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let r = start..end as usize;
            start = end as usize;
            r
        })
    }

    /// Each data key, borrowed.
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.ranges().map(|r| &self.data_keys[r])
    }

    /// The data key at `r` (a slice of `data_keys`, no copy).
    fn data_key(&self, r: std::ops::Range<usize>) -> Bytes {
        self.data_keys.slice(r)
    }

    /// The app key of the data key at `r` (the data key without its prefix byte; no copy).
    fn app_key(&self, r: std::ops::Range<usize>) -> Bytes {
        self.data_keys.slice(r.start + 1..r.end)
    }
}

/// Smallest encoded entry: a 4-byte key length and a 1-byte flag.
const UNDO_ENTRY_BYTES_MIN: usize = 4 + 1;

impl Record for AppUndo {
    const KIND: RecordKind = RecordKind::APP_UNDO;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.prev.height).hash(&self.prev.app_hash);
        w.u32(
            u32::try_from(self.entries.len())
                .expect("invariant: fewer than 2^32 writes in a block"),
        );
        for (k, v) in &self.entries {
            w.bytes(k);
            match v {
                Some(v) => {
                    w.u8(1).bytes(v);
                }
                None => {
                    w.u8(0);
                }
            }
        }
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        let prev = AppInfo {
            height: r.u64()?,
            app_hash: r.hash()?,
        };
        let n = r.count(UNDO_ENTRY_BYTES_MIN)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let k = Bytes::copy_from_slice(r.bytes()?);
            let v = match r.u8()? {
                0 => None,
                1 => Some(Bytes::copy_from_slice(r.bytes()?)),
                _ => return Err(CorruptReason::Invalid("undo entry flag is not 0 or 1")),
            };
            entries.push((k, v));
        }
        Ok(AppUndo { prev, entries })
    }
}

fn undo_key(height: u64) -> [u8; 9] {
    keys::height_key(keys::APP_UNDO, height)
}

fn data_key(key: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(1 + key.len());
    k.put_u8(keys::APP_DATA);
    k.put_slice(key);
    k.freeze()
}

/// An executed, uncommitted block.
#[derive(Debug)]
struct Pending {
    height: u64,
    writes: BTreeMap<Bytes, Option<Bytes>>,
}

/// The demo key-value application over a [`HoldingDb`].
#[derive(Debug)]
pub struct KvApp<D: Db> {
    db: Arc<HoldingDb<D>>,
    committed: AppInfo,
    pending: Option<Pending>,
    /// While holding: the last [`UNDO_RETENTION_BLOCKS`] commits since the last flush point,
    /// whose undo records are not written yet (see [`KvApp::write_window_undo`]). Empty when
    /// not holding.
    undo_owed: VecDeque<HeldCommit>,
    halt_height: Option<u64>,
    flush_requested: bool,
    /// With prefetch on: two sessions, block heights alternating between them, so the next
    /// block's keys are fetched while this block reads its own (see [`App::prefetch`]),
    /// and when to use them.
    prefetch: Option<Prefetch>,
}

/// Reads slower than this, per key, averaged over recent blocks, mean the state is not in
/// memory and prefetch pays (unit: nanoseconds). Why: a read served from memory walks
/// redb's B-tree in a few microseconds on this machine class, one that goes to storage
/// takes 100 µs or more (`compare prefetch`: 256 cold reads in 31–44 ms); 30 µs sits
/// between with a wide margin. Below it, prefetch would only move reads onto other threads
/// that compete with the block loop and the flush thread for the same cores.
pub const PREFETCH_COLD_READ_NANOS: u64 = 30_000;
/// While prefetch pays, one block in this many is executed without it, to keep measuring
/// what a read costs without it (so a state that became warm turns prefetch off). Why 16:
/// a probe block costs its cold reads once; one in 16 keeps that under ~6 % of blocks.
pub const PREFETCH_PROBE_EVERY_BLOCKS: u64 = 16;

/// The demo app's prefetch: its sessions and the measurement that decides whether to use
/// them.
#[derive(Debug)]
struct Prefetch {
    sessions: [PrefetchSession; 2],
    /// Average nanoseconds of a read execution made itself (a session miss, or a block
    /// executed without prefetch); `None` until one was measured.
    read_nanos: Option<u64>,
    /// This block's reads made by execution itself: (nanoseconds, reads).
    block_reads: (u64, u64),
    /// Prefetch every block, measured or not ([`KvApp::with_prefetch_always`]).
    always: bool,
}

impl Prefetch {
    /// Whether to prefetch block `h`: while the state reads slowly (or nothing is measured
    /// yet), except one probe block in [`PREFETCH_PROBE_EVERY_BLOCKS`].
    fn pays_for(&self, h: u64) -> bool {
        if self.always {
            return true;
        }
        let cold = self
            .read_nanos
            .is_none_or(|n| n >= PREFETCH_COLD_READ_NANOS);
        cold && !h.is_multiple_of(PREFETCH_PROBE_EVERY_BLOCKS)
    }

    /// Folds this block's reads into the average (weight 1/4: a few blocks turn it).
    fn end_block(&mut self) {
        let (nanos, reads) = std::mem::take(&mut self.block_reads);
        if let Some(mean) = nanos.checked_div(reads) {
            self.read_nanos = Some(match self.read_nanos {
                None => mean,
                Some(avg) => (3 * avg + mean) / 4,
            });
        }
    }
}

/// The result code of an [`Tx::Add`] whose value is shorter than 8 bytes.
const CODE_ADD_SHORT_VALUE: u32 = 2;

impl<D: Db> KvApp<D> {
    /// Opens the app over `db`, reading its committed height and hash.
    pub fn open(db: Arc<HoldingDb<D>>) -> Result<Self> {
        let committed = Self::read_meta(&*db, false)?;
        let halt_height = match db.get(&data_key(HALT_HEIGHT_KEY))? {
            Some(v) => Some(Self::decode_value(&*db, HALT_HEIGHT_KEY, &v).and_then(|v| {
                v.as_ref()
                    .try_into()
                    .map(u64::from_be_bytes)
                    .map_err(|_| Error::InvalidInput("halt height param is not 8 bytes".into()))
            })?),
            None => None,
        };
        Ok(KvApp {
            db,
            committed,
            pending: None,
            undo_owed: VecDeque::new(),
            halt_height,
            flush_requested: false,
            prefetch: None,
        })
    }

    /// Turns prefetch on: [`App::prefetch`] queues the keys the next block's
    /// [`Tx::Add`]s read on a session of `pool`, and execution reads that session first
    /// (a prefetched value is used only if nothing wrote its key since it was read).
    /// Without a free session slot in the pool the app works as without prefetch.
    ///
    /// Prefetch is used while the state reads slowly — reads execution makes itself average
    /// [`PREFETCH_COLD_READ_NANOS`] or more — and skipped while it reads from memory, where
    /// it would only compete for the cores (one block in [`PREFETCH_PROBE_EVERY_BLOCKS`]
    /// runs without it, to keep measuring).
    pub fn with_prefetch(self, pool: &PrefetchPool) -> Self
    where
        D: 'static,
    {
        self.with_prefetch_policy(pool, false)
    }

    /// As [`KvApp::with_prefetch`], prefetching every block whatever reads cost (tests of
    /// the prefetch path itself, and measuring it).
    pub fn with_prefetch_always(self, pool: &PrefetchPool) -> Self
    where
        D: 'static,
    {
        self.with_prefetch_policy(pool, true)
    }

    fn with_prefetch_policy(mut self, pool: &PrefetchPool, always: bool) -> Self
    where
        D: 'static,
    {
        let source = self.db.clone() as Arc<dyn PrefetchSource>;
        self.prefetch = Some(Prefetch {
            sessions: [pool.session(source.clone()), pool.session(source)],
            read_nanos: None,
            block_reads: (0, 0),
            always,
        });
        self
    }

    /// The prefetch sessions' counters added up (zero without prefetch).
    pub fn prefetch_stats(&self) -> Vec<PrefetchStats> {
        self.prefetch.as_ref().map_or(Vec::new(), |p| {
            p.sessions.iter().map(|s| s.stats()).collect()
        })
    }

    /// Reads data key `dk` for execution: the block's own earlier writes, then the
    /// prefetch session of height `h`, then the database (held writes included).
    fn read_for_execution(
        &mut self,
        h: u64,
        writes: &BTreeMap<Bytes, Option<Bytes>>,
        key: &Bytes,
    ) -> Result<Option<Bytes>> {
        if let Some(w) = writes.get(key) {
            return Ok(w.clone());
        }
        let dk = data_key(key);
        let stored = match &mut self.prefetch {
            Some(p) => match p.sessions[(h % 2) as usize].lookup(&dk) {
                Some(v) => v,
                None => {
                    // A read execution makes itself: measured, to decide whether to
                    // prefetch.
                    let started = std::time::Instant::now();
                    let v = self.db.get(&dk)?;
                    p.block_reads.0 += started.elapsed().as_nanos() as u64;
                    p.block_reads.1 += 1;
                    v
                }
            },
            None => self.db.get(&dk)?,
        };
        match stored {
            Some(v) => Ok(Some(Self::decode_value(&self.db, key, &v)?)),
            None => Ok(None),
        }
    }

    /// Sets a halt height from configuration (a flush point is taken there).
    pub fn set_halt_height(&mut self, height: Option<u64>) {
        self.halt_height = height;
    }

    /// The app's database.
    pub fn db(&self) -> &Arc<HoldingDb<D>> {
        &self.db
    }

    fn read_meta(db: &HoldingDb<D>, durable: bool) -> Result<AppInfo> {
        let k = keys::singleton(keys::APP_META);
        let v = if durable {
            db.get_durable(&k)?
        } else {
            db.get(&k)?
        };
        match v {
            None => Ok(AppInfo::default()),
            Some(v) => decode::<AppMeta>(&k, &v)
                .map(|m| m.0)
                .map_err(|reason| Error::Corrupt {
                    db: db.name().to_string(),
                    key: k.to_vec(),
                    height: None,
                    reason,
                }),
        }
    }

    fn decode_value(db: &HoldingDb<D>, key: &[u8], v: &[u8]) -> Result<Bytes> {
        let k = data_key(key);
        decode::<AppValue>(&k, v)
            .map(|v| v.0)
            .map_err(|reason| Error::Corrupt {
                db: db.name().to_string(),
                key: k.to_vec(),
                height: None,
                reason,
            })
    }

    fn corrupt(db: &HoldingDb<D>, key: &[u8], reason: CorruptReason) -> Error {
        Error::Corrupt {
            db: db.name().to_string(),
            key: key.to_vec(),
            height: keys::height_of(key),
            reason,
        }
    }

    /// The durable undo records' heights, highest first, while they run contiguously down
    /// from `top`.
    fn durable_undo_run(&self, top: u64) -> Result<u64> {
        let mut lowest = top + 1;
        let range = KeyRange::between(
            Bytes::copy_from_slice(&undo_key(0)),
            Bytes::copy_from_slice(&undo_key(top + 1)),
        );
        for item in self.db.range_durable(range, Direction::Reverse)? {
            let (k, _) = item?;
            match keys::height_of(&k) {
                Some(h) if h + 1 == lowest => lowest = h,
                _ => break,
            }
        }
        Ok(lowest)
    }

    /// Reads `key` as of the last commit (held writes included).
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.db.get(&data_key(key))? {
            Some(v) => Ok(Some(Self::decode_value(&self.db, key, &v)?)),
            None => Ok(None),
        }
    }
}

impl<D: Db> KvApp<D> {
    /// Writes, held, the undo records the commits since the last flush point owe: those of
    /// the last [`UNDO_RETENTION_BLOCKS`] of them, the ones `undo_owed` keeps (the earlier
    /// ones' records would be deleted by later commits of the same window). A key's record
    /// before height `h` is what the open window held for it when commit `h` began, else
    /// what it was before the window (the frozen window in flight, then the disk) — read
    /// here, once for all of them.
    ///
    /// Crash: none on its own — the records join the open overlay, and the flush point
    /// writes them in the same synced batch as the commits they undo.
    fn write_window_undo(&mut self) -> Result<()> {
        if self.undo_owed.is_empty() {
            return Ok(());
        }
        let owed = std::mem::take(&mut self.undo_owed);
        debug_assert!(
            owed.len() <= UNDO_RETENTION_BLOCKS as usize,
            "invariant: at most {UNDO_RETENTION_BLOCKS} held commits are kept"
        );
        // Keys the window had not written when their commit began: as they stood before it.
        let unread: Vec<&[u8]> = owed
            .iter()
            .flat_map(|c| c.keys.iter().zip(&c.before_in_window))
            .filter(|(_, before)| before.is_none())
            .map(|(dk, _)| dk)
            .collect();
        let mut read = self.db.get_many_below_open(&unread)?.into_iter();
        let mut batch = Batch::with_capacity(owed.len());
        for c in &owed {
            let entries = c
                .keys
                .ranges()
                .zip(&c.before_in_window)
                .map(|(r, before)| {
                    let old = match before {
                        Some(in_window) => in_window.clone(),
                        None => read
                            .next()
                            .expect("invariant: one value read per key the window had not"),
                    };
                    (c.keys.app_key(r), old)
                })
                .collect();
            let uk = undo_key(c.height);
            let undo = AppUndo {
                prev: c.prev,
                entries,
            };
            batch.put(Bytes::copy_from_slice(&uk), encode(&uk, &undo));
        }
        debug_assert!(read.next().is_none(), "invariant: every value read is used");
        self.db.write(&batch, Durability::Synced)
    }
}

impl<D: Db + 'static> App<DemoChain> for KvApp<D> {
    fn committed(&self) -> Result<AppInfo> {
        Ok(self.committed)
    }

    fn durable(&self) -> Result<AppInfo> {
        Self::read_meta(&self.db, true)
    }

    fn execute_block(&mut self, block: &Block) -> Result<BlockResults> {
        let h = block.height();
        if self.committed.height != 0 && h != self.committed.height + 1 {
            return Err(Error::InvalidInput(format!(
                "app at height {} cannot execute block {h}",
                self.committed.height
            )));
        }
        let mut writes: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
        let mut results = BlockResults::default();
        for tx in &block.txs {
            let code = match Tx::decode(tx) {
                Some(Tx::Set(k, v)) => {
                    writes.insert(k, Some(v));
                    0
                }
                Some(Tx::Delete(k)) => {
                    writes.insert(k, None);
                    0
                }
                Some(Tx::Validator(v)) => {
                    results.validator_updates.push(v);
                    0
                }
                Some(Tx::Params(p)) => {
                    results.param_updates = Some(p);
                    0
                }
                Some(Tx::HaltAt(at)) => {
                    writes.insert(
                        Bytes::from_static(HALT_HEIGHT_KEY),
                        Some(Bytes::copy_from_slice(&at.to_be_bytes())),
                    );
                    0
                }
                Some(Tx::Add(k, delta)) => {
                    let old = self
                        .read_for_execution(h, &writes, &k)?
                        .unwrap_or_else(|| Bytes::from_static(&[0; 8]));
                    match old.get(..8) {
                        Some(head) => {
                            let n = u64::from_be_bytes(head.try_into().expect("8 bytes"))
                                .wrapping_add(delta);
                            let mut v = BytesMut::with_capacity(old.len());
                            v.put_u64(n);
                            v.put_slice(&old[8..]);
                            writes.insert(k, Some(v.freeze()));
                            0
                        }
                        None => CODE_ADD_SHORT_VALUE,
                    }
                }
                None => 1,
            };
            results.tx_results.push(TxResult {
                code,
                data: Bytes::new(),
            });
        }
        if let Some(p) = &mut self.prefetch {
            p.end_block();
        }
        self.pending = Some(Pending { height: h, writes });
        Ok(results)
    }

    fn commit(&mut self) -> Result<AppInfo> {
        let p = self
            .pending
            .take()
            .ok_or_else(|| Error::InvalidInput("commit without an executed block".into()))?;
        let mut hasher = Sha256::new();
        hasher.update(self.committed.app_hash);
        hasher.update(p.height.to_be_bytes());
        let mut batch = Batch::with_capacity(p.writes.len() + 3);
        let keys = CommitKeys::new(p.writes.keys());
        for ((k, v), r) in p.writes.iter().zip(keys.ranges()) {
            hasher.update((k.len() as u64).to_be_bytes());
            hasher.update(k);
            let dk = keys.data_key(r);
            debug_assert_eq!(dk, data_key(k), "invariant: the data key of {k:?}");
            match v {
                Some(v) => {
                    hasher.update([1]);
                    hasher.update((v.len() as u64).to_be_bytes());
                    hasher.update(v);
                    let rec = encode(&dk, &AppValue(v.clone()));
                    batch.put(dk, rec);
                }
                None => {
                    hasher.update([0]);
                    batch.delete(dk);
                }
            }
        }
        let app_hash: Hash = hasher.finalize().into();
        let info = AppInfo {
            height: p.height,
            app_hash,
        };
        let mk = keys::singleton(keys::APP_META);
        batch.put(Bytes::copy_from_slice(&mk), encode(&mk, &AppMeta(info)));
        let prev = self.committed;
        let data_keys: Vec<&[u8]> = keys.iter().collect();
        let held = if self.db.is_holding() {
            // Held: the undo record is owed, written by `write_window_undo` before the flush
            // point takes the window — in the same window, so the commit is still never
            // durable without it. Only the last UNDO_RETENTION_BLOCKS commits of a window
            // keep theirs, so reading the old values per commit from below the window would
            // mostly be wasted: what the window holds for the keys is read now (no disk
            // read; the window's own copies, no new ones), the rest when the record is
            // written.
            Some(self.db.get_many_open(&data_keys)?)
        } else {
            // The stored records as of the previous commit, read in one snapshot: what the
            // undo record restores. It goes in the commit's own batch: a commit is never
            // durable without the record that undoes it, nor the record without the commit.
            let before = self.db.get_many(&data_keys)?;
            let undo = AppUndo {
                prev,
                entries: keys
                    .ranges()
                    .zip(before)
                    .map(|(r, old)| (keys.app_key(r), old))
                    .collect(),
            };
            let uk = undo_key(p.height);
            batch.put(Bytes::copy_from_slice(&uk), encode(&uk, &undo));
            None
        };
        drop(data_keys);
        if p.height > UNDO_RETENTION_BLOCKS {
            batch.delete(Bytes::copy_from_slice(&undo_key(
                p.height - UNDO_RETENTION_BLOCKS,
            )));
        }
        self.db.write(&batch, Durability::Synced)?;
        drop(batch);
        if let Some(before_in_window) = held {
            debug_assert_eq!(before_in_window.len(), keys.len(), "invariant: one per key");
            // Only the last UNDO_RETENTION_BLOCKS commits owe a record at the flush point:
            // an older one's would be deleted in the same window (by the commit above).
            if self.undo_owed.len() == UNDO_RETENTION_BLOCKS as usize {
                self.undo_owed.pop_front();
            }
            self.undo_owed.push_back(HeldCommit {
                height: p.height,
                prev,
                keys,
                before_in_window,
            });
        }
        if let Some(Some(v)) = p.writes.get(HALT_HEIGHT_KEY) {
            let at = u64::from_be_bytes(v.as_ref().try_into().unwrap_or([0; 8]));
            self.halt_height = Some(at);
            // The halt param must be on disk before the node acts on it: ask for a flush point.
            self.flush_requested = true;
        }
        self.committed = info;
        Ok(info)
    }

    fn hold(&mut self) -> Result<bool> {
        self.db.hold()?;
        Ok(true)
    }

    fn stop_holding(&mut self) -> Result<()> {
        if !self.undo_owed.is_empty() {
            return Err(Error::InvalidInput(format!(
                "stop_holding with {} held commits not yet taken by a flush point",
                self.undo_owed.len()
            )));
        }
        self.db.stop_holding()
    }

    fn write_held(&mut self) -> Result<()> {
        self.write_window_undo()?;
        self.db.write_held().map(|_| ())
    }

    fn prepare_flush(&mut self) -> Result<()> {
        self.write_window_undo()
    }

    fn held_bytes(&self) -> u64 {
        self.db.held_bytes()
    }

    fn prefetch(&mut self, next: &Block) -> Result<()> {
        let Some(p) = &self.prefetch else {
            return Ok(());
        };
        let session = &p.sessions[(next.height() % 2) as usize];
        // The session last served block `next − 2`: its observations are done with.
        session.clear();
        if !p.pays_for(next.height()) {
            return Ok(());
        }
        let keys: Vec<Bytes> = next
            .txs
            .iter()
            .filter_map(|tx| match Tx::decode(tx) {
                Some(Tx::Add(k, _)) => Some(data_key(&k)),
                _ => None,
            })
            .collect();
        if !keys.is_empty() {
            // Refused (no slot, over budget): execution reads the database as without.
            session.submit(keys);
        }
        Ok(())
    }

    fn held_store(&self) -> Option<Arc<dyn crate::holding::HeldStore>> {
        Some(self.db.clone())
    }

    fn halt_height(&self) -> Option<u64> {
        self.halt_height
    }

    fn take_flush_request(&mut self) -> bool {
        std::mem::take(&mut self.flush_requested)
    }

    fn query(&self, key: &[u8]) -> Result<Option<Bytes>> {
        if Self::read_meta(&self.db, true)?.height == 0 {
            return Err(Error::NotYetDurable {
                what: "an app query",
            });
        }
        match self.db.get_durable(&data_key(key))? {
            Some(v) => Ok(Some(Self::decode_value(&self.db, key, &v)?)),
            None => Ok(None),
        }
    }

    /// The lowest height the undo records reach: `durable height − UNDO_RETENTION_BLOCKS`
    /// on a home that has committed that many blocks (less on a younger one, or right after
    /// a rollback).
    fn rollback_floor(&self) -> Result<Option<u64>> {
        let top = Self::read_meta(&self.db, true)?.height;
        Ok(Some(self.durable_undo_run(top)?.saturating_sub(1)))
    }

    /// Applies the undo records of `durable height` down to `height + 1` (each key gets the
    /// record it had before the lowest of them), deletes those records and writes the meta
    /// as it was at `height`, all in one synced batch.
    fn rollback_to(&mut self, height: u64) -> Result<AppInfo> {
        if self.db.is_holding() || self.pending.is_some() {
            return Err(Error::InvalidInput(
                "the app cannot roll back while it holds or has executed a block".into(),
            ));
        }
        let durable = Self::read_meta(&self.db, true)?;
        if height > durable.height {
            return Err(Error::InvalidInput(format!(
                "the app cannot roll forward: asked for {height}, durable at {}",
                durable.height
            )));
        }
        if height == durable.height {
            return Ok(durable);
        }
        let lowest = self.durable_undo_run(durable.height)?.saturating_sub(1);
        if height < lowest {
            return Err(Error::AppCannotRollBack {
                to: height,
                app_height: durable.height,
                lowest: Some(lowest),
            });
        }
        // Highest first, so each key ends with the record it had before block height + 1.
        let mut restore: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
        let mut batch = Batch::new();
        let mut prev = durable;
        for h in (height + 1..=durable.height).rev() {
            let uk = undo_key(h);
            let v = self.db.get_durable(&uk)?.ok_or_else(|| Error::NotFound {
                db: self.db.name().to_string(),
                what: format!("undo record of block {h}"),
            })?;
            let undo = decode::<AppUndo>(&uk, &v).map_err(|r| Self::corrupt(&self.db, &uk, r))?;
            if undo.prev.height >= h {
                return Err(Self::corrupt(
                    &self.db,
                    &uk,
                    CorruptReason::Invalid("undo record's previous height is not below its block"),
                ));
            }
            for (k, old) in undo.entries {
                restore.insert(data_key(&k), old);
            }
            batch.delete(Bytes::copy_from_slice(&uk));
            prev = undo.prev;
        }
        for (dk, old) in restore {
            match old {
                Some(rec) => batch.put(dk, rec),
                None => batch.delete(dk),
            };
        }
        let mk = keys::singleton(keys::APP_META);
        if prev.height == 0 {
            batch.delete(Bytes::copy_from_slice(&mk));
        } else {
            batch.put(Bytes::copy_from_slice(&mk), encode(&mk, &AppMeta(prev)));
        }
        self.db.write(&batch, Durability::Synced)?;
        self.committed = prev;
        self.halt_height = match self.db.get(&data_key(HALT_HEIGHT_KEY))? {
            Some(v) => Self::decode_value(&self.db, HALT_HEIGHT_KEY, &v)?
                .as_ref()
                .try_into()
                .map(u64::from_be_bytes)
                .ok(),
            None => None,
        };
        Ok(prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The app value's slice path encodes the bytes its `encode_payload` frames.
    #[test]
    fn an_app_values_slice_path_is_its_payload_path() {
        for len in [0, 5, crate::codec::PLACED_COPY_FROM_BYTES + 3] {
            let v = AppValue(Bytes::from(vec![0x3c; len]));
            let by_writer = crate::codec::encode_record_with(b"k", AppValue::KIND, len, |w| {
                v.encode_payload(w)
            });
            assert_eq!(crate::types::encode(b"k", &v), by_writer, "{len} bytes");
        }
    }
    use crate::db::{MemoryDb, collect_range};
    use crate::demo::Header;

    /// Blocks that set, overwrite and delete a small key space, so undo records carry prior
    /// values as well as absences.
    fn block(h: u64) -> Block {
        let key = |i: u64| Bytes::from(format!("k{}", (h * 7 + i) % 11));
        let mut txs = vec![
            Tx::Set(key(0), Bytes::from(format!("v{h}"))).encode(),
            Tx::Set(key(1), Bytes::from(format!("w{h}"))).encode(),
        ];
        if h.is_multiple_of(3) {
            txs.push(Tx::Delete(key(2)).encode());
        }
        if h == 5 {
            txs.push(Tx::HaltAt(1_000).encode());
        }
        Block {
            header: Header {
                height: h,
                ..Header::default()
            },
            txs,
            ..Block::default()
        }
    }

    type Snapshot = (AppInfo, BTreeMap<Bytes, Bytes>);

    /// The app's info and its data keys (undo records and meta excluded).
    fn snapshot(app: &KvApp<MemoryDb>) -> Snapshot {
        let data = collect_range(
            &**app.db(),
            KeyRange::prefix(&[keys::APP_DATA]),
            Direction::Forward,
        )
        .unwrap()
        .into_iter()
        .collect();
        (app.committed().unwrap(), data)
    }

    /// Commits blocks 1..=n, returning the snapshot after each height (index = height).
    /// Blocks 4..=9 are held (as in block sync) and written at flush points after 6 and 9,
    /// so undo records go through the overlay too.
    fn committed(n: u64) -> (KvApp<MemoryDb>, Vec<Snapshot>) {
        let mut app = KvApp::open(Arc::new(HoldingDb::new(MemoryDb::new("app")))).unwrap();
        let mut snaps = vec![snapshot(&app)];
        for h in 1..=n {
            if h == 4 {
                assert!(app.hold().unwrap());
            }
            app.execute_block(&block(h)).unwrap();
            app.commit().unwrap();
            if h == 6 || h == 9 {
                app.write_held().unwrap();
            }
            if h == 9 {
                app.stop_holding().unwrap();
            }
            snaps.push(snapshot(&app));
        }
        if (4..9).contains(&n) {
            app.write_held().unwrap();
            app.stop_holding().unwrap();
        }
        assert_eq!(app.durable().unwrap(), app.committed().unwrap());
        (app, snaps)
    }

    const N: u64 = UNDO_RETENTION_BLOCKS + 5;

    /// Commits 1..=n: 1 and 2 durable (their undo records read per commit), then held in
    /// two long windows — 3..=split frozen and left in flight while split+1..=n commits —
    /// so the undo records window 2 owes find old values among its own earlier commits
    /// (beyond the kept run), in the frozen window and on disk.
    fn committed_in_long_windows(n: u64, split: u64) -> (KvApp<MemoryDb>, Vec<Snapshot>) {
        assert!(
            n - split > UNDO_RETENTION_BLOCKS,
            "window 2 outgrows the kept run"
        );
        let mut app = KvApp::open(Arc::new(HoldingDb::new(MemoryDb::new("app")))).unwrap();
        let mut snaps = vec![snapshot(&app)];
        for h in 1..=n {
            if h == 3 {
                assert!(app.hold().unwrap());
            }
            app.execute_block(&block(h)).unwrap();
            app.commit().unwrap();
            if h == split {
                app.prepare_flush().unwrap();
                app.db.freeze().unwrap();
            }
            snaps.push(snapshot(&app));
        }
        // As the node does: the app prepares the next window while the first is in flight.
        app.prepare_flush().unwrap();
        app.db.write_frozen().unwrap();
        app.write_held().unwrap();
        app.stop_holding().unwrap();
        assert_eq!(app.durable().unwrap(), app.committed().unwrap());
        (app, snaps)
    }

    /// A long held window keeps the last [`UNDO_RETENTION_BLOCKS`] commits only, and each
    /// keeps, per key, the value the window held before it — the window's own copy (the same
    /// memory) — or nothing when the window had not written the key. The oracle is this
    /// test's own list of the keys each earlier block of the window wrote (from the blocks'
    /// transactions), and the values read through the app before each commit. Before, every
    /// commit of a window kept its keys and records until the flush point (~43 MiB of peak
    /// RSS at 300k light blocks), and the length check failed.
    #[test]
    fn a_held_window_keeps_its_last_commits_with_the_windows_values_before_them() {
        let mut app = KvApp::open(Arc::new(HoldingDb::new(MemoryDb::new("app")))).unwrap();
        let blocks = 3 * UNDO_RETENTION_BLOCKS;
        // Outside the window: written and made durable before holding.
        app.execute_block(&block(1)).unwrap();
        app.commit().unwrap();
        assert!(app.hold().unwrap());
        let mut written_in_window: std::collections::HashSet<Bytes> = Default::default();
        let (mut in_window, mut not_in_window) = (0, 0);
        for h in 2..=blocks {
            let b = block(h);
            let keys: Vec<Bytes> = b
                .txs
                .iter()
                .filter_map(|tx| match Tx::decode(tx) {
                    Some(Tx::Set(k, _) | Tx::Delete(k)) => Some(k),
                    Some(Tx::HaltAt(_)) => Some(Bytes::from_static(HALT_HEIGHT_KEY)),
                    _ => None,
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let read_before: Vec<Option<Bytes>> = keys
                .iter()
                .map(|k| app.db.get(&data_key(k)).unwrap())
                .collect();
            app.execute_block(&b).unwrap();
            app.commit().unwrap();
            let kept = (h - 1).min(UNDO_RETENTION_BLOCKS) as usize;
            assert_eq!(app.undo_owed.len(), kept, "height {h}: commits kept");
            let owed = app.undo_owed.back().expect("a held commit owes its undo");
            assert_eq!(owed.height, h);
            let owed_keys: Vec<&[u8]> = owed.keys.iter().collect();
            let want_keys: Vec<Bytes> = keys.iter().map(|k| data_key(k)).collect();
            assert_eq!(owed_keys, want_keys, "height {h}: the data keys");
            for ((k, read), before) in keys.iter().zip(read_before).zip(&owed.before_in_window) {
                if written_in_window.contains(k) {
                    in_window += 1;
                    let before = before.as_ref().unwrap_or_else(|| {
                        panic!("height {h}: {k:?} was written in the window, nothing kept")
                    });
                    assert_eq!(before, &read, "height {h}: {k:?}");
                    if let (Some(before), Some(read)) = (before, &read) {
                        assert_eq!(before.as_ptr(), read.as_ptr(), "height {h}: a copy kept");
                    }
                } else {
                    not_in_window += 1;
                    assert_eq!(before, &None, "height {h}: {k:?} is not in the window");
                }
            }
            written_in_window.extend(keys);
        }
        assert!(
            in_window > 0 && not_in_window > 0,
            "the blocks exercise both cases: {in_window} in the window, {not_in_window} not"
        );
    }

    #[test]
    fn undo_owed_by_long_held_windows_rolls_back_to_every_height_in_the_window_exactly() {
        let (n, split) = (2 * UNDO_RETENTION_BLOCKS + 10, 20);
        for to in n - UNDO_RETENTION_BLOCKS..=n {
            let (mut app, snaps) = committed_in_long_windows(n, split);
            assert_eq!(
                app.rollback_floor().unwrap(),
                Some(n - UNDO_RETENTION_BLOCKS)
            );
            let info = app.rollback_to(to).unwrap();
            assert_eq!(info, snaps[to as usize].0, "rollback to {to}: info");
            assert_eq!(snapshot(&app), snaps[to as usize], "rollback to {to}");
        }
    }

    #[test]
    fn a_long_held_window_writes_exactly_the_kept_undo_records() {
        let n = 2 * UNDO_RETENTION_BLOCKS + 10;
        let (app, _) = committed_in_long_windows(n, 20);
        let heights: Vec<u64> = collect_range(
            &**app.db(),
            KeyRange::prefix(&[keys::APP_UNDO]),
            Direction::Forward,
        )
        .unwrap()
        .iter()
        .map(|(k, _)| u64::from_be_bytes(k[1..9].try_into().unwrap()))
        .collect();
        let want: Vec<u64> = (n - UNDO_RETENTION_BLOCKS + 1..=n).collect();
        assert_eq!(heights, want);
    }

    #[test]
    fn undo_log_rolls_back_to_every_height_in_the_window_exactly() {
        for to in N - UNDO_RETENTION_BLOCKS..=N {
            let (mut app, snaps) = committed(N);
            assert_eq!(
                app.rollback_floor().unwrap(),
                Some(N - UNDO_RETENTION_BLOCKS)
            );
            let info = app.rollback_to(to).unwrap();
            assert_eq!(info, snaps[to as usize].0, "rollback to {to}: info");
            assert_eq!(snapshot(&app), snaps[to as usize], "rollback to {to}");
            assert_eq!(app.committed().unwrap(), info);
            assert_eq!(app.halt_height(), (to >= 5).then_some(1_000));
            // A rerun is a no-op, and re-executing the blocks reaches the same hashes.
            assert_eq!(app.rollback_to(to).unwrap(), info);
            for h in to + 1..=N {
                app.execute_block(&block(h)).unwrap();
                app.commit().unwrap();
                assert_eq!(snapshot(&app), snaps[h as usize], "replay of {h}");
            }
        }
    }

    #[test]
    fn undo_log_keeps_exactly_the_window_and_refuses_below_it_naming_the_heights() {
        let (mut app, snaps) = committed(N);
        let undo = collect_range(
            &**app.db(),
            KeyRange::prefix(&[keys::APP_UNDO]),
            Direction::Forward,
        )
        .unwrap();
        assert_eq!(undo.len() as u64, UNDO_RETENTION_BLOCKS);
        let to = N - UNDO_RETENTION_BLOCKS - 1;
        match app.rollback_to(to) {
            Err(Error::AppCannotRollBack {
                to: t,
                app_height,
                lowest,
            }) => {
                assert_eq!(
                    (t, app_height, lowest),
                    (to, N, Some(N - UNDO_RETENTION_BLOCKS))
                );
            }
            other => panic!("expected AppCannotRollBack, got {other:?}"),
        }
        assert_eq!(snapshot(&app), snaps[N as usize], "a refusal wrote nothing");
        // Not while holding: held commits have no durable undo records yet.
        app.hold().unwrap();
        assert!(matches!(
            app.rollback_to(N - 1),
            Err(Error::InvalidInput(_))
        ));
        app.stop_holding().unwrap();
        // A young app rolls back to 0, the empty app.
        let (mut young, snaps) = committed(3);
        assert_eq!(young.rollback_floor().unwrap(), Some(0));
        young.rollback_to(0).unwrap();
        assert_eq!(snapshot(&young), snaps[0]);
    }

    #[test]
    fn a_corrupt_undo_record_is_reported_not_applied() {
        let (mut app, snaps) = committed(4);
        let k = undo_key(4);
        let mut b = Batch::new();
        b.put(Bytes::copy_from_slice(&k), Bytes::from_static(b"garbage!"));
        app.db().write(&b, Durability::Synced).unwrap();
        assert!(matches!(
            app.rollback_to(2),
            Err(Error::Corrupt {
                height: Some(4),
                ..
            })
        ));
        assert_eq!(snapshot(&app).1, snaps[4].1, "nothing was applied");
    }
}
