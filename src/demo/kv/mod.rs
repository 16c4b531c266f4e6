//! The demo application: a key-value state machine driven by the transactions in each block.
//!
//! Its parts, each in its own file: `tx` (the transactions and their bytes), `layout` (the
//! keys and records in the app's database), `execute` (a block's execution and the app
//! hash), `prefetch` (reading the next block's state ahead), `undo` (the undo log and
//! rollback). This file is [`KvApp`]: the state it holds, and the [`App`] seam that ties the
//! parts to its [`HoldingDb`].
//!
//! Invariant: a commit writes its values, its meta and its undo record in one batch (or,
//! while holding, into the same window), so no commit is durable without its undo record
//! nor the record without the commit.
//! Invariant: the app's results and hashes depend on the blocks alone: prefetch and holding
//! change when state is read and written, never what.

mod execute;
mod layout;
mod prefetch;
mod tx;
mod undo;

use std::sync::Arc;

use bytes::Bytes;

use self::execute::{Writes, app_hash, execute};
use self::layout::{AppMeta, AppValue, CommitKeys, HALT_HEIGHT_KEY, data_key, undo_key};
use self::prefetch::Prefetch;
pub use self::prefetch::{PREFETCH_COLD_READ_NANOS, PREFETCH_PROBE_EVERY_BLOCKS};
pub use self::tx::Tx;
pub use self::undo::UNDO_RETENTION_BLOCKS;
use self::undo::{UndoOwed, durable_undo_run, put_undo, rollback_batch};
use super::chain::DemoChain;
use super::types::{Block, BlockResults};
use crate::app::{App, AppInfo};
use crate::codec::keys;
use crate::db::{Batch, Db, Durability};
use crate::error::{Error, Result};
use crate::holding::HoldingDb;
use crate::prefetch::{PrefetchPool, PrefetchSource, PrefetchStats};
use crate::types::{decode, encode};

/// An executed, uncommitted block.
#[derive(Debug)]
struct Pending {
    height: u64,
    writes: Writes,
}

/// The demo key-value application over a [`HoldingDb`].
#[derive(Debug)]
pub struct KvApp<D: Db> {
    db: Arc<HoldingDb<D>>,
    committed: AppInfo,
    pending: Option<Pending>,
    /// While holding: the last [`UNDO_RETENTION_BLOCKS`] commits since the last flush point,
    /// whose undo records are not written yet. Empty when not holding.
    undo_owed: UndoOwed,
    halt_height: Option<u64>,
    flush_requested: bool,
    /// With prefetch on: two sessions, block heights alternating between them, so the next
    /// block's keys are fetched while this block reads its own (see [`App::prefetch`]),
    /// and when to use them.
    prefetch: Option<Prefetch>,
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
            undo_owed: UndoOwed::default(),
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
        self.prefetch = Some(Prefetch::new(pool, source, always));
        self
    }

    /// The prefetch sessions' counters added up (zero without prefetch).
    pub fn prefetch_stats(&self) -> Vec<PrefetchStats> {
        self.prefetch.as_ref().map_or(Vec::new(), Prefetch::stats)
    }

    /// Reads app key `key` as block `h`'s execution finds it before its own writes: the
    /// prefetch session of height `h`, then the database (held writes included).
    fn read_for_execution(&mut self, h: u64, key: &Bytes) -> Result<Option<Bytes>> {
        let dk = data_key(key);
        let db = &self.db;
        let stored = match &mut self.prefetch {
            Some(p) => p.read(h, &dk, || db.get(&dk))?,
            None => db.get(&dk)?,
        };
        match stored {
            Some(v) => Ok(Some(Self::decode_value(db, key, &v)?)),
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

    /// Reads `key` as of the last commit (held writes included).
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.db.get(&data_key(key))? {
            Some(v) => Ok(Some(Self::decode_value(&self.db, key, &v)?)),
            None => Ok(None),
        }
    }

    /// The halt height stored in the app's state, if any (a value that is not 8 bytes
    /// reads as none).
    fn stored_halt_height(&self) -> Result<Option<u64>> {
        Ok(match self.db.get(&data_key(HALT_HEIGHT_KEY))? {
            Some(v) => Self::decode_value(&self.db, HALT_HEIGHT_KEY, &v)?
                .as_ref()
                .try_into()
                .map(u64::from_be_bytes)
                .ok(),
            None => None,
        })
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
        let (writes, results) = execute(&block.txs, |k| self.read_for_execution(h, k))?;
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
        let info = AppInfo {
            height: p.height,
            app_hash: app_hash(&self.committed.app_hash, p.height, &p.writes),
        };
        let mut batch = Batch::with_capacity(p.writes.len() + 3);
        let keys = CommitKeys::new(p.writes.keys());
        for ((k, v), r) in p.writes.iter().zip(keys.ranges()) {
            let dk = keys.data_key(r);
            debug_assert_eq!(dk, data_key(k), "invariant: the data key of {k:?}");
            match v {
                Some(v) => {
                    let rec = encode(&dk, &AppValue(v.clone()));
                    batch.put(dk, rec);
                }
                None => {
                    batch.delete(dk);
                }
            }
        }
        let mk = keys::singleton(keys::APP_META);
        batch.put(Bytes::copy_from_slice(&mk), encode(&mk, &AppMeta(info)));
        let prev = self.committed;
        let data_keys: Vec<&[u8]> = keys.iter().collect();
        let held = if self.db.is_holding() {
            // Held: the undo record is owed, written by `UndoOwed::write` before the flush
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
            let entries = keys
                .ranges()
                .zip(before)
                .map(|(r, old)| (keys.app_key(r), old))
                .collect();
            put_undo(&mut batch, p.height, prev, entries);
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
            self.undo_owed.push(p.height, prev, keys, before_in_window);
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
        self.undo_owed.write(&self.db)?;
        self.db.write_held().map(|_| ())
    }

    fn prepare_flush(&mut self) -> Result<()> {
        self.undo_owed.write(&self.db)
    }

    fn held_bytes(&self) -> u64 {
        self.db.held_bytes()
    }

    fn prefetch(&mut self, next: &Block) -> Result<()> {
        if let Some(p) = &self.prefetch {
            p.queue(next);
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
        Ok(Some(durable_undo_run(&self.db, top)?.saturating_sub(1)))
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
        let (batch, prev) = rollback_batch(&self.db, durable, height)?;
        self.db.write(&batch, Durability::Synced)?;
        self.committed = prev;
        self.halt_height = self.stored_halt_height()?;
        Ok(prev)
    }
}
