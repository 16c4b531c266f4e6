//! A second chain for flushpoint's seam: a token ledger with its own block encoding
//! (little-endian, magic `LDG1`), its own hash function (FNV-1a in four 64-bit lanes, no
//! sha256) and its own app (account balances). It shares nothing with `flushpoint::demo`.
//!
//! Used by the `ledger_node` example and, through `#[path]` in `tests/support/mod.rs`, by the
//! tests: `tests/crash/second_chain.rs` runs the engine's crash and fsync checks on both
//! chains.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use flushpoint::codec::{RecordKind, decode_record, encode_record};
use flushpoint::{
    App, AppInfo, Batch, Chain, ChainBlock, ChainCommit, ChainResults, ChainState, CorruptReason,
    Db, Durability, Error, Event, EventKind, Hash, HeldStore, HoldingDb, PartSet, Result,
};

/// Accounts on the ledger.
pub const ACCOUNTS: u8 = 8;
/// Each account's balance at genesis.
pub const GENESIS_BALANCE: u64 = 1_000_000;

/// The ledger's hash: FNV-1a over the bytes in four lanes with different offsets, 32 bytes.
pub fn ledger_hash(data: &[u8]) -> Hash {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut lanes = [
        0xcbf2_9ce4_8422_2325u64,
        0x8422_2325_cbf2_9ce4,
        0x9ce4_cbf2_2325_8422,
        0x2325_8422_9ce4_cbf2,
    ];
    for (i, b) in data.iter().enumerate() {
        let lane = &mut lanes[i % 4];
        *lane ^= u64::from(*b);
        *lane = lane.wrapping_mul(PRIME);
    }
    // Mix every lane into every output word, so a change anywhere changes all 32 bytes.
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut x = lanes[i] ^ (data.len() as u64);
        for l in lanes {
            x = (x ^ l).wrapping_mul(PRIME).rotate_left(29);
        }
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    out
}

/// A little-endian reader over a slice.
struct Le<'a>(&'a [u8]);

impl<'a> Le<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], CorruptReason> {
        if self.0.len() < n {
            return Err(CorruptReason::Invalid("ledger encoding is short"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u64(&mut self) -> std::result::Result<u64, CorruptReason> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn u16(&mut self) -> std::result::Result<u16, CorruptReason> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u8(&mut self) -> std::result::Result<u8, CorruptReason> {
        Ok(self.take(1)?[0])
    }
    fn hash(&mut self) -> std::result::Result<Hash, CorruptReason> {
        Ok(self.take(32)?.try_into().expect("32 bytes"))
    }
    fn end(self) -> std::result::Result<(), CorruptReason> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(CorruptReason::Invalid("ledger encoding has trailing bytes"))
        }
    }
}

/// A ledger commit: the height and hash it finalizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerCommit {
    /// The committed height.
    pub height: u64,
    /// The committed block's hash.
    pub block_hash: Hash,
}

impl LedgerCommit {
    fn put(&self, b: &mut BytesMut) {
        b.put_u64_le(self.height);
        b.put_slice(&self.block_hash);
    }
    fn get(r: &mut Le<'_>) -> std::result::Result<Self, CorruptReason> {
        Ok(LedgerCommit {
            height: r.u64()?,
            block_hash: r.hash()?,
        })
    }
}

impl ChainCommit for LedgerCommit {
    fn height(&self) -> u64 {
        self.height
    }
    fn block_hash(&self) -> Hash {
        self.block_hash
    }
    fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(40);
        self.put(&mut b);
        b.freeze()
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        let mut r = Le(bytes);
        let c = LedgerCommit::get(&mut r)?;
        r.end()?;
        Ok(c)
    }
}

/// A transfer of `amount` from one account to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The paying account.
    pub from: u8,
    /// The paid account.
    pub to: u8,
    /// The amount.
    pub amount: u64,
}

/// A ledger block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerBlock {
    /// Its height.
    pub height: u64,
    /// The previous block's hash (zero for the first).
    pub prev_hash: Hash,
    /// The app hash after the previous block.
    pub app_hash: Hash,
    /// The transfers.
    pub transfers: Vec<Transfer>,
    /// The commit of the previous block.
    pub last_commit: LedgerCommit,
}

const BLOCK_MAGIC: &[u8; 4] = b"LDG1";

impl ChainBlock for LedgerBlock {
    type Commit = LedgerCommit;
    fn height(&self) -> u64 {
        self.height
    }
    fn hash(&self) -> Hash {
        // The hash covers the whole encoding: the default `check_body` is right.
        ledger_hash(&ChainBlock::encode(self))
    }
    fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(4 + 8 + 64 + 2 + self.transfers.len() * 10 + 40);
        b.put_slice(BLOCK_MAGIC);
        b.put_u64_le(self.height);
        b.put_slice(&self.prev_hash);
        b.put_slice(&self.app_hash);
        b.put_u16_le(self.transfers.len() as u16);
        for t in &self.transfers {
            b.put_u8(t.from);
            b.put_u8(t.to);
            b.put_u64_le(t.amount);
        }
        self.last_commit.put(&mut b);
        b.freeze()
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        let mut r = Le(bytes);
        if r.take(4)? != BLOCK_MAGIC {
            return Err(CorruptReason::Invalid("not a ledger block"));
        }
        let height = r.u64()?;
        let prev_hash = r.hash()?;
        let app_hash = r.hash()?;
        let n = r.u16()? as usize;
        let mut transfers = Vec::with_capacity(n.min(bytes.len() / 10));
        for _ in 0..n {
            transfers.push(Transfer {
                from: r.u8()?,
                to: r.u8()?,
                amount: r.u64()?,
            });
        }
        let last_commit = LedgerCommit::get(&mut r)?;
        r.end()?;
        Ok(LedgerBlock {
            height,
            prev_hash,
            app_hash,
            transfers,
            last_commit,
        })
    }
    fn last_commit(&self) -> &LedgerCommit {
        &self.last_commit
    }
    fn parent_app_hash(&self) -> Hash {
        self.app_hash
    }
    fn header_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(72);
        b.put_u64_le(self.height);
        b.put_slice(&self.prev_hash);
        b.put_slice(&self.app_hash);
        b.freeze()
    }
    fn tx_count(&self) -> u32 {
        self.transfers.len() as u32
    }
}

/// The ledger's consensus state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerState {
    /// The first height.
    pub initial_height: u64,
    /// The last block applied.
    pub height: u64,
    /// Its hash.
    pub last_block_hash: Hash,
    /// The app hash after it.
    pub app_hash: Hash,
}

impl ChainState for LedgerState {
    fn height(&self) -> u64 {
        self.height
    }
    fn initial_height(&self) -> u64 {
        self.initial_height
    }
    fn app_hash(&self) -> Hash {
        self.app_hash
    }
    fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(80);
        b.put_u64_le(self.initial_height);
        b.put_u64_le(self.height);
        b.put_slice(&self.last_block_hash);
        b.put_slice(&self.app_hash);
        b.freeze()
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        let mut r = Le(bytes);
        let s = LedgerState {
            initial_height: r.u64()?,
            height: r.u64()?,
            last_block_hash: r.hash()?,
            app_hash: r.hash()?,
        };
        r.end()?;
        Ok(s)
    }
}

/// One code per transfer: 0 applied, 1 refused (insufficient balance or bad account).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LedgerResults(pub Vec<u8>);

impl ChainResults for LedgerResults {
    fn encode(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0)
    }
    fn decode(bytes: &[u8]) -> std::result::Result<Self, CorruptReason> {
        if bytes.iter().any(|c| *c > 1) {
            return Err(CorruptReason::Invalid("ledger result code above 1"));
        }
        Ok(LedgerResults(bytes.to_vec()))
    }
}

/// The ledger chain: its genesis is the seed its block generator uses.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The seed (part of the genesis id).
    pub seed: u64,
}

impl Chain for Ledger {
    type Block = LedgerBlock;
    type Commit = LedgerCommit;
    type State = LedgerState;
    type Results = LedgerResults;

    fn genesis_id(&self) -> Hash {
        let mut b = b"ledger genesis".to_vec();
        b.extend_from_slice(&self.seed.to_le_bytes());
        b.push(ACCOUNTS);
        b.extend_from_slice(&GENESIS_BALANCE.to_le_bytes());
        ledger_hash(&b)
    }
    fn genesis_state(&self, app_hash: Hash) -> LedgerState {
        LedgerState {
            initial_height: 1,
            height: 0,
            last_block_hash: [0; 32],
            app_hash,
        }
    }
    fn validate(
        &self,
        state: &LedgerState,
        block: &LedgerBlock,
    ) -> std::result::Result<(), String> {
        if block.prev_hash != state.last_block_hash {
            return Err("previous hash differs".into());
        }
        if block.app_hash != state.app_hash {
            return Err("app hash differs".into());
        }
        if block
            .transfers
            .iter()
            .any(|t| t.from >= ACCOUNTS || t.to >= ACCOUNTS)
        {
            return Err("a transfer names an account that does not exist".into());
        }
        Ok(())
    }
    fn next_state(
        &self,
        state: &LedgerState,
        block: &LedgerBlock,
        _results: &LedgerResults,
        app_hash: Hash,
    ) -> LedgerState {
        LedgerState {
            initial_height: state.initial_height,
            height: block.height,
            last_block_hash: block.hash(),
            app_hash,
        }
    }
    fn events(&self, block: &LedgerBlock, results: &LedgerResults) -> Vec<Event> {
        let mut ev = vec![Event {
            height: block.height,
            kind: EventKind::NewBlock {
                hash: block.hash(),
                tx_count: block.transfers.len() as u32,
            },
        }];
        ev.extend(results.0.iter().enumerate().map(|(i, c)| Event {
            height: block.height,
            kind: EventKind::Tx {
                index: i as u32,
                code: u32::from(*c),
            },
        }));
        ev
    }
}

/// splitmix64, the ledger's own: an embedder's chain builds without flushpoint's `demo`
/// and `testkit` features, the only places the library exposes its generator.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Ledger {
    /// Block `state.height + 1` (a pure function of the seed, the height and the state),
    /// its part set and its seen commit.
    pub fn next_block(&self, state: &LedgerState) -> (LedgerBlock, PartSet, LedgerCommit) {
        let h = state.height + 1;
        let n = 3 + splitmix(self.seed ^ h) % 6;
        let transfers = (0..n)
            .map(|j| {
                let r = splitmix(self.seed ^ (h << 8) ^ j);
                Transfer {
                    from: (r % u64::from(ACCOUNTS)) as u8,
                    to: ((r >> 8) % u64::from(ACCOUNTS)) as u8,
                    amount: (r >> 16) % 50_000,
                }
            })
            .collect();
        let block = LedgerBlock {
            height: h,
            prev_hash: state.last_block_hash,
            app_hash: state.app_hash,
            transfers,
            last_commit: LedgerCommit {
                height: h - 1,
                block_hash: state.last_block_hash,
            },
        };
        let seen = LedgerCommit {
            height: h,
            block_hash: block.hash(),
        };
        let parts = PartSet::from_block(&block);
        (block, parts, seen)
    }
}

/// The ledger app's record kinds: the embedder's range of tags.
const BALANCE: RecordKind = RecordKind::embedder(0x40);
const META: RecordKind = RecordKind::embedder(0x41);
/// Key prefixes in the app database.
const BALANCE_PREFIX: u8 = b'b';
const META_KEY: &[u8] = b"m";

/// The app's height and hash: height ‖ app hash (little-endian).
fn encode_meta(info: &AppInfo) -> Bytes {
    let mut b = BytesMut::with_capacity(40);
    b.put_u64_le(info.height);
    b.put_slice(&info.app_hash);
    encode_record(META_KEY, META, &b)
}

/// The ledger app: balances, written through a `HoldingDb` so block sync can hold them.
pub struct LedgerApp {
    db: Arc<HoldingDb<Arc<dyn Db>>>,
    balances: BTreeMap<u8, u64>,
    committed: AppInfo,
    pending: Option<(u64, BTreeMap<u8, u64>)>,
}

impl LedgerApp {
    /// Opens the app over `db`, reading its committed balances.
    pub fn open(db: Arc<HoldingDb<Arc<dyn Db>>>) -> Result<Self> {
        let committed = Self::read_meta(&db, false)?;
        let mut balances = BTreeMap::new();
        for a in 0..ACCOUNTS {
            let k = [BALANCE_PREFIX, a];
            let v = match db.get(&k)? {
                Some(v) => {
                    let p = decode_record(&k, BALANCE, &v).map_err(|reason| Error::Corrupt {
                        db: db.name().into(),
                        key: k.to_vec(),
                        height: None,
                        reason,
                    })?;
                    u64::from_le_bytes(p.try_into().map_err(|_| Error::Corrupt {
                        db: db.name().into(),
                        key: k.to_vec(),
                        height: None,
                        reason: CorruptReason::Invalid("balance is not 8 bytes"),
                    })?)
                }
                None => GENESIS_BALANCE,
            };
            balances.insert(a, v);
        }
        Ok(LedgerApp {
            db,
            balances,
            committed,
            pending: None,
        })
    }

    fn read_meta(db: &HoldingDb<Arc<dyn Db>>, durable: bool) -> Result<AppInfo> {
        let v = if durable {
            db.get_durable(META_KEY)?
        } else {
            db.get(META_KEY)?
        };
        let Some(v) = v else {
            return Ok(AppInfo {
                height: 0,
                app_hash: ledger_hash(b"ledger app genesis"),
            });
        };
        let corrupt = |reason| Error::Corrupt {
            db: db.name().into(),
            key: META_KEY.to_vec(),
            height: None,
            reason,
        };
        let p = decode_record(META_KEY, META, &v).map_err(corrupt)?;
        let mut r = Le(p);
        let info = AppInfo {
            height: r.u64().map_err(corrupt)?,
            app_hash: r.hash().map_err(corrupt)?,
        };
        r.end().map_err(corrupt)?;
        Ok(info)
    }

    /// The balance of `account` (committed, held writes included).
    pub fn balance(&self, account: u8) -> u64 {
        self.balances.get(&account).copied().unwrap_or(0)
    }
}

impl App<Ledger> for LedgerApp {
    fn committed(&self) -> Result<AppInfo> {
        Ok(self.committed)
    }
    fn durable(&self) -> Result<AppInfo> {
        Self::read_meta(&self.db, true)
    }
    fn execute_block(&mut self, block: &LedgerBlock) -> Result<LedgerResults> {
        let mut next = self.balances.clone();
        let mut codes = Vec::with_capacity(block.transfers.len());
        for t in &block.transfers {
            let from = next.get(&t.from).copied().unwrap_or(0);
            if t.from >= ACCOUNTS || t.to >= ACCOUNTS || from < t.amount {
                codes.push(1);
                continue;
            }
            next.insert(t.from, from - t.amount);
            *next.entry(t.to).or_insert(0) += t.amount;
            codes.push(0);
        }
        self.pending = Some((block.height, next));
        Ok(LedgerResults(codes))
    }
    fn commit(&mut self) -> Result<AppInfo> {
        let (height, next) = self
            .pending
            .take()
            .ok_or_else(|| Error::InvalidInput("commit without an executed block".into()))?;
        // App hash: the previous hash, the height and every balance, chained.
        let mut h = Vec::with_capacity(32 + 8 + next.len() * 9);
        h.extend_from_slice(&self.committed.app_hash);
        h.extend_from_slice(&height.to_le_bytes());
        let mut batch = Batch::new();
        for (a, v) in &next {
            h.push(*a);
            h.extend_from_slice(&v.to_le_bytes());
            if self.balances.get(a) != Some(v) {
                let k = [BALANCE_PREFIX, *a];
                batch.put(
                    Bytes::copy_from_slice(&k),
                    encode_record(&k, BALANCE, &v.to_le_bytes()),
                );
            }
        }
        let info = AppInfo {
            height,
            app_hash: ledger_hash(&h),
        };
        batch.put(Bytes::from_static(META_KEY), encode_meta(&info));
        // Held during block sync, one synced batch otherwise.
        self.db.write(&batch, Durability::Synced)?;
        self.balances = next;
        self.committed = info;
        Ok(info)
    }
    fn hold(&mut self) -> Result<bool> {
        self.db.hold()?;
        Ok(true)
    }
    fn stop_holding(&mut self) -> Result<()> {
        self.db.stop_holding()
    }
    fn write_held(&mut self) -> Result<()> {
        self.db.write_held().map(|_| ())
    }
    fn held_bytes(&self) -> u64 {
        self.db.held_bytes()
    }
    fn halt_height(&self) -> Option<u64> {
        None
    }
    fn take_flush_request(&mut self) -> bool {
        false
    }
    fn query(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.db.get_durable(key)
    }
    fn held_store(&self) -> Option<Arc<dyn HeldStore>> {
        Some(self.db.clone())
    }
}
