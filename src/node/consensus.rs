//! Consensus mode: one block at a time, durable before `commit_block` returns — as one unit
//! through `WritePath::write_window` when the app's window joins the node's unit group
//! (ADR 0011), otherwise each write its own synced batch (ADR 0002) — and the switch to it
//! from block sync.
//!
//! Invariant: a consensus block's events fire only after its last write returned `Ok`.
//! Invariant: whether consensus blocks are units is decided once per holding of the app
//! (its first consensus block, or the switch from block sync) and kept in `AppShare`.
//! Invariant: the switch takes a flush point first; nothing held is ever dropped by it.

use std::time::Instant;

use bytes::Bytes;

use crate::chain::{Chain, ChainState};
use crate::db::{Batch, Db, Durability};
use crate::error::{Error, Result};
use crate::types::PartSet;

use super::deferred::{FlushReport, FlushTrigger};
use super::write_path::AppShare;
use super::{Mode, Node, contract};

impl<C: Chain> Node<C> {
    /// Sets the per-block mode used outside block sync (`Consensus` or `Legacy`).
    pub fn set_per_block_mode(&mut self, mode: Mode) -> Result<()> {
        if self.mode == Mode::BlockSync || mode == Mode::BlockSync {
            return Err(Error::InvalidInput(
                "use start_block_sync / switch_to_consensus to enter or leave block sync".into(),
            ));
        }
        if mode.second_block_store_sync() && self.app_share.joins_unit() {
            return Err(Error::InvalidInput(
                "Legacy mode (a second block-store sync) has no meaning when consensus blocks are units (ADR 0011)".into(),
            ));
        }
        self.mode = mode;
        Ok(())
    }

    /// Takes a flush point and turns holding off: later blocks go through
    /// [`Node::commit_block`].
    pub fn switch_to_consensus(&mut self, now: Instant) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        if self.mode != Mode::BlockSync {
            return Ok(None);
        }
        let report = self.flush_point(FlushTrigger::SwitchToConsensus, now)?;
        if self.app_share.joins_unit() {
            // Consensus blocks are units when the app's window joins the flush point's:
            // every database keeps holding, one block at a time.
            self.mode = Mode::Consensus;
            return Ok(report);
        }
        // Whatever the app still holds now, `stop_holding` would drop: refuse instead.
        let r = contract(
            "App::held_bytes at App::stop_holding (after the flush point)",
            0,
            self.app.held_bytes(),
        );
        self.poisoned(r)?;
        let r = self
            .block_db
            .stop_holding()
            .and_then(|()| self.state_db.stop_holding());
        self.poisoned(r)?;
        if self.app_share.holds() {
            let r = self.app.stop_holding();
            self.poisoned(r)?;
        }
        // Decided: consensus blocks take the ordered path until the app holds again.
        self.app_share = AppShare::NotHeld;
        self.mode = Mode::Consensus;
        Ok(report)
    }

    /// Commits a block in consensus mode: `save_block` (one synced batch), then results, the
    /// app commit and the state, each synced; then its events fire. When consensus blocks
    /// are units (ADR 0011) the same writes are held and written as one unit instead.
    pub fn commit_block(
        &mut self,
        block: &C::Block,
        parts: &PartSet,
        seen_commit: &C::Commit,
    ) -> Result<()> {
        self.check_poison()?;
        if self.mode == Mode::BlockSync {
            return Err(Error::InvalidInput(
                "commit_block during block sync: switch to consensus first".into(),
            ));
        }
        if self.consensus_units()? {
            // One unit per block (ADR 0011): saved, executed, committed and stored held, then
            // written together; its events fire once it is durable.
            self.save_checked(block, parts, seen_commit)?;
            let r = self.apply_validated(block);
            let events = self.poisoned(r)?;
            let (from, to) = (self.flush.durable_height(), self.state.height());
            let r = self.write_held_window(from, to);
            self.poisoned(r)?;
            self.release_window(events.into_iter(), to);
            return Ok(());
        }
        self.save_checked(block, parts, seen_commit)?;
        if self.mode.second_block_store_sync() {
            // The reference node's old second block-store fsync (an empty key, synced).
            let mut b = Batch::new();
            b.put(Bytes::from_static(&[0x00]), Bytes::new());
            let r = self.block_db.write(&b, Durability::Synced);
            self.poisoned(r)?;
        }
        let r = self.apply_validated(block);
        let events = self.poisoned(r)?;
        // Crash: each write above was synced before the next started; the block is durable.
        self.release_window(events.into_iter(), self.state.height());
        Ok(())
    }

    /// Whether consensus blocks are written as one unit each, deciding it at the first call
    /// in consensus mode on a unit path: the app must hold ([`crate::App::hold`]) and its
    /// held store be a member of the node's group; then every database holds, one block at
    /// a time. Otherwise consensus blocks take the ordered path.
    fn consensus_units(&mut self) -> Result<bool> {
        if self.mode != Mode::Consensus || !self.path.is_unit() {
            return Ok(false);
        }
        if !matches!(self.app_share, AppShare::Unasked) {
            return Ok(self.app_share.joins_unit());
        }
        // As at the start of block sync: the app first; an `Err` poisons the node before any
        // of its own databases holds.
        let r = self.app.hold();
        let holds = self.poisoned(r)?;
        let share = self.share_of(holds);
        if share.joins_unit() {
            self.app_share = share;
            let r = self.block_db.hold().and_then(|()| self.state_db.hold());
            self.poisoned(r)?;
            return Ok(true);
        }
        if holds {
            // It holds but cannot join: back to the ordered path (nothing is held yet).
            let r = self.app.stop_holding();
            self.poisoned(r)?;
        }
        self.app_share = AppShare::NotHeld;
        Ok(false)
    }

    /// Stops cleanly: takes a flush point if in block sync, then closes the databases.
    pub fn stop(mut self, now: Instant) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        let report = if self.mode == Mode::BlockSync {
            self.flush_point(FlushTrigger::Stop, now)?
        } else {
            None
        };
        // Closing explicitly: dropping the handles closes the files (redb writes its clean
        // shutdown marker), before the caller can reopen the home.
        drop(self);
        Ok(report)
    }
}
