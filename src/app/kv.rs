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
//! Keeps no undo log, so it cannot roll back (`rollback_to` refuses).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::{App, AppInfo};
use crate::codec::{Reader, RecordKind, Writer, keys};
use crate::db::{Batch, Db, Durability};
use crate::error::{CorruptReason, Error, Result};
use crate::holding::HoldingDb;
use crate::types::{
    Block, BlockResults, ConsensusParams, Hash, Record, TxResult, Validator, decode, encode,
};

/// Key of the halt-height parameter in the app's key space.
pub const HALT_HEIGHT_KEY: &[u8] = b"param/halt_height";

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
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AppMeta(AppInfo);

impl Record for AppMeta {
    const KIND: RecordKind = RecordKind::AppMeta;
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
    const KIND: RecordKind = RecordKind::AppValue;
    fn encode_payload(&self, w: &mut Writer) {
        w.raw(&self.0);
    }
    fn payload_size_hint(&self) -> usize {
        self.0.len()
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        Ok(AppValue(Bytes::copy_from_slice(r.rest())))
    }
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
    halt_height: Option<u64>,
    flush_requested: bool,
}

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
            halt_height,
            flush_requested: false,
        })
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

    /// Reads `key` as of the last commit (held writes included).
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.db.get(&data_key(key))? {
            Some(v) => Ok(Some(Self::decode_value(&self.db, key, &v)?)),
            None => Ok(None),
        }
    }
}

impl<D: Db + 'static> App for KvApp<D> {
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
                None => 1,
            };
            results.tx_results.push(TxResult {
                code,
                data: Bytes::new(),
            });
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
        let mut batch = Batch::new();
        for (k, v) in &p.writes {
            hasher.update((k.len() as u64).to_be_bytes());
            hasher.update(k);
            let dk = data_key(k);
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
        self.db.write(&batch, Durability::Synced)?;
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
        self.db.stop_holding()
    }

    fn write_held(&mut self) -> Result<()> {
        self.db.write_held().map(|_| ())
    }

    fn held_bytes(&self) -> u64 {
        self.db.held_bytes()
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
}
