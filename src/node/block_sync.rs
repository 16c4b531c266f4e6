//! Block sync: every database holds its writes, and flush points write them — on the node's
//! thread, or frozen and handed to the flush thread (background flush points) — through the
//! one `WritePath::write_window`; a window's events fire and the durable height moves only
//! once its write returned `Ok`.
//!
//! Invariant: a flush point F → F′ is taken between blocks; its window holds exactly blocks
//! F+1..F′ of every database, and the flush record {F, F′} is in the block store's window.
//! Invariant: with background flush points at most one window is in flight (frozen, being
//! written by the flush thread in the same order and batches as a synchronous flush point);
//! its events fire on the node's thread once the thread returned `Ok`, and the next window
//! is frozen only after that.
//! Invariant: the policy (`FlushScheduler::due`) decides when; this file takes the flush
//! point it decided and does not decide again.

use std::time::Instant;

use crate::chain::{Chain, ChainBlock, ChainState};
use crate::error::{Error, Result};
use crate::types::{FlushRecord, PartSet};

use super::deferred::{FlushInputs, FlushPolicy, FlushReport, FlushTrigger};
use super::events::Event;
use super::scheduler::{merge_reports, trace_flush_point};
use super::write_path::{AppShare, AppStore, AppWrite, Writer};
use super::{Mode, Node, contract};

impl<C: Chain> Node<C> {
    /// Starts block sync: every database holds its writes until a flush point.
    pub fn start_block_sync(&mut self, policy: FlushPolicy, now: Instant) -> Result<()> {
        self.check_poison()?;
        if self.mode == Mode::BlockSync {
            return Ok(());
        }
        // Outside block sync every applied block is durable, so the window starts empty.
        assert_eq!(
            self.flush.durable_height(),
            self.state.height(),
            "invariant: block sync starts with nothing held"
        );
        // The app first: its `Err` leaves whether it holds unknown, so it poisons the node
        // before the node's own databases hold anything (a later `commit_block` must never
        // land in a window). The node calls `App::hold` once per block sync.
        // Consensus units keep every database holding between blocks (nothing held then):
        // block sync takes them over as they are.
        if !self.app_share.joins_unit() {
            let r = self.app.hold();
            let holds = self.poisoned(r)?;
            self.app_share = self.share_of(holds);
            let r = self.block_db.hold().and_then(|()| self.state_db.hold());
            self.poisoned(r)?;
        }
        self.mode = Mode::BlockSync;
        self.flush.deferred.policy = policy;
        // The interval counts from the start of block sync, not from the last flush.
        self.flush.deferred.last_flush = now;
        Ok(())
    }

    /// The app's share once [`crate::App::hold`] returned `holds`.
    pub(super) fn share_of(&self, holds: bool) -> AppShare {
        if !holds {
            return AppShare::NotHeld;
        }
        AppShare::Held(self.app.held_store().map(|store| AppStore {
            member: self.path.member_name(&*store),
            store,
        }))
    }

    /// Lets the app start reading what block `next` will read ([`crate::App::prefetch`])
    /// before the node applies the block before it: call it with block N+1, then
    /// [`Node::sync_block`] (or [`Node::commit_block`]) with block N, and the app's
    /// background reads overlap block N's execution. `next` must be the block after the
    /// node's next one; it is not validated or written (it is validated when applied).
    ///
    /// `Err`: the app's hook failed; nothing was written and the node is not poisoned (a
    /// prefetch is advisory).
    pub fn prefetch_next(&mut self, next: &C::Block) -> Result<()> {
        self.check_poison()?;
        let expected = self.state.height().saturating_add(2);
        if next.height() != expected {
            return Err(Error::InvalidInput(format!(
                "prefetch_next takes block {expected} (the node is at {}), got {}",
                self.state.height(),
                next.height()
            )));
        }
        self.app.prefetch(next)
    }

    /// Applies a block received in block sync. Its writes are held; when a flush-point
    /// trigger fires after it, the flush point is taken before this returns.
    ///
    /// `Ok(None)`: the block is applied and held (durable at the next flush point).
    /// `Ok(Some(_))`: a flush point made it and every earlier block durable.
    /// `Err`: the node is poisoned; restart it.
    pub fn sync_block(
        &mut self,
        block: &C::Block,
        parts: &PartSet,
        seen_commit: &C::Commit,
        now: Instant,
    ) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        if self.mode != Mode::BlockSync {
            return Err(Error::InvalidInput("sync_block outside block sync".into()));
        }
        let done = self.finish_in_flight(false)?;
        self.save_checked(block, parts, seen_commit)?;
        let r = self.apply_validated(block);
        let events = self.poisoned(r)?;
        self.flush.deferred.held_events.extend(&events);
        let held = self.held_memory();
        self.flush.deferred.peak_held_bytes = self.flush.deferred.peak_held_bytes.max(held);
        let taken = self.maybe_flush(now)?;
        Ok(merge_reports(done, taken))
    }

    /// The timer: takes a flush point if the interval passed, also when no block arrived,
    /// and completes a background flush point whose window became durable.
    pub fn on_timer(&mut self, now: Instant) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        if self.mode != Mode::BlockSync {
            return Ok(None);
        }
        let done = self.finish_in_flight(false)?;
        let taken = self.maybe_flush(now)?;
        Ok(merge_reports(done, taken))
    }

    /// Takes the flush point the policy finds due now, if any.
    pub(super) fn maybe_flush(&mut self, now: Instant) -> Result<Option<FlushReport>> {
        let inputs = FlushInputs {
            since_last_flush: now.saturating_duration_since(self.flush.deferred.last_flush),
            held_bytes: self.held_memory_each(),
            held_blocks: self.state.height() - self.flush.window_start(),
            height: self.state.height(),
            halt_height: self.app.halt_height(),
            app_requested: self.app.take_flush_request(),
        };
        match self.flush.due(&inputs) {
            Some(trigger) => self.flush_point(trigger, now),
            None => Ok(None),
        }
    }

    /// Takes a flush point now (between blocks), if anything is held.
    ///
    /// With background flush points ([`FlushPolicy::background`]) the window is frozen and
    /// written by the flush thread: the call returns once it is submitted (after waiting for
    /// the window before it, if any), except for triggers that
    /// [wait for durability](FlushTrigger::waits_for_durability). `Ok(Some(report))`: the
    /// blocks `report.from + 1..=report.to` became durable during this call.
    pub fn flush_point(
        &mut self,
        trigger: FlushTrigger,
        now: Instant,
    ) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        // At most one window in flight: the one before is durable before the next freezes.
        let done = self.finish_in_flight(true)?;
        let from = self.flush.durable_height();
        let to = self.state.height();
        if to == from {
            self.flush.deferred.last_flush = now;
            return Ok(done);
        }
        if self.background_flush() && !trigger.waits_for_durability() {
            let r = self.submit_window(from, to, trigger);
            self.poisoned(r)?;
            // The interval counts from the submission: the loop did not stop for the write.
            self.flush.deferred.last_flush = Instant::now().max(now);
            return Ok(done);
        }
        // The synchronous write starts now: the wait for the window in flight, if any, is
        // that window's report's.
        let write_start = Instant::now();
        let r = self.write_held_window(from, to);
        let bytes = self.poisoned(r)?;
        // Step 4, after the write returned `Ok`.
        let events = std::mem::take(&mut self.flush.deferred.held_events);
        self.release_window(events.iter(), to);
        self.flush.deferred.flush_points += 1;
        let end = Instant::now();
        self.flush.deferred.last_flush = end.max(now);
        let duration = end.saturating_duration_since(write_start);
        let report = FlushReport {
            trigger,
            from,
            to,
            bytes,
            duration,
            loop_wait: duration,
            flush_points: 1,
        };
        trace_flush_point(&report, false);
        Ok(merge_reports(done, Some(report)))
    }

    /// True when flush points run on the flush thread: the policy asks for it and the app
    /// holds with a held store the thread can write.
    fn background_flush(&self) -> bool {
        self.flush.deferred.policy.background
            && self.mode == Mode::BlockSync
            && self.app_share.store().is_some()
    }

    /// Before a window's write, on the node's thread between blocks: the contracts it relies
    /// on, the app's last held writes ([`crate::App::prepare_flush`]) and the flush record,
    /// which joins the block store's window (step 1 writes it with blocks F+1..F′).
    fn begin_window(&mut self, from: u64, to: u64) -> Result<()> {
        assert!(from < to, "invariant: flush heights increase");
        // Between blocks the block store is at `to`, unless blocks were saved around the
        // node (through `Node::block_store`): refused before anything is written.
        contract(
            "block store height at a flush point (a block saved around the node?)",
            to,
            self.block_store.height(),
        )?;
        // The app's contract is checked before step 1: a broken one writes nothing.
        self.check_app_window(from, to)?;
        if self.app_share.holds() {
            self.app.prepare_flush()?;
        }
        self.block_store
            .save_flush_record(&FlushRecord { from, to })
    }

    /// Writes the window F → F′ on the node's thread — a synchronous flush point, or a
    /// consensus block written as a unit — and checks that the app is durable at `to` with
    /// nothing held. Returns the key and value bytes written.
    pub(super) fn write_held_window(&mut self, from: u64, to: u64) -> Result<u64> {
        self.begin_window(from, to)?;
        let Node {
            path,
            block_db,
            state_db,
            app,
            app_share,
            ..
        } = self;
        let holds = app_share.holds();
        // An app outside the node's units writes its own window (nothing when it does not
        // hold: its commits are on disk already).
        let mut app_hook = || -> Result<u64> {
            let bytes = app.held_bytes();
            if holds {
                app.write_held()?;
            }
            Ok(bytes)
        };
        let app_write = match app_share.store() {
            Some(AppStore {
                store,
                member: Some(name),
            }) => AppWrite::Member(name, &**store),
            _ => AppWrite::Hook(&mut app_hook),
        };
        let bytes = path.write_window(block_db, state_db, app_write, Writer::NodeThread)?;
        debug_assert_eq!(
            [self.block_db.held_bytes(), self.state_db.held_bytes()],
            [0, 0],
            "invariant: the node's open windows are empty after a flush point"
        );
        // `write_held` returned `Ok`: the app says it is durable at `to` with nothing held.
        // The window's events fire only if it is.
        contract(
            "App::held_bytes after App::write_held",
            0,
            self.app.held_bytes(),
        )?;
        contract(
            "App::durable().height after App::write_held",
            to,
            self.app_durable_height()?,
        )?;
        Ok(bytes)
    }

    /// Freezes the window F → F′ and hands its write to the flush thread, which writes it
    /// as a synchronous flush point does (the same order, the same synced batches or unit).
    fn submit_window(&mut self, from: u64, to: u64, trigger: FlushTrigger) -> Result<()> {
        assert!(
            !self.flush.in_flight(),
            "invariant: at most one window in flight"
        );
        self.begin_window(from, to)?;
        let app = self
            .app_share
            .store()
            .cloned()
            .expect("invariant: background flush points have the app's held store");
        // Freezing is cheap and happens between blocks, so each frozen window holds exactly
        // blocks F+1..F′ of every database.
        self.block_db.freeze()?;
        self.state_db.freeze()?;
        app.store.freeze()?;
        let (path, block_db, state_db) = (
            self.path.clone(),
            self.block_db.clone(),
            self.state_db.clone(),
        );
        let job = Box::new(move || -> Result<u64> {
            let app_write = match &app.member {
                Some(name) => AppWrite::Member(name, &*app.store),
                None => AppWrite::Frozen(&*app.store),
            };
            path.write_window(&block_db, &state_db, app_write, Writer::FlushThread)
        });
        self.flush.submit(job, from, to, trigger)
    }

    /// Completes the window in flight if its thread finished (or, with `wait`, once it
    /// does): fires its events in block order and advances the durable height. A failed
    /// window poisons the node and fires nothing.
    pub(super) fn finish_in_flight(&mut self, wait: bool) -> Result<Option<FlushReport>> {
        let Some(f) = self.flush.take_in_flight(wait) else {
            return Ok(None);
        };
        let wait_start = Instant::now();
        let joined = f.handle.join().unwrap_or_else(|_| {
            Err(Error::InvalidInput(
                "the flush thread panicked; the window's durability is unknown".into(),
            ))
        });
        let loop_wait = wait_start.elapsed();
        let bytes = self.poisoned(joined)?;
        // The app's held store wrote its window: the app must be durable at `to` before the
        // window's events fire.
        let r = self.app_durable_height().and_then(|found| {
            contract(
                "App::durable().height after its held store's write_frozen",
                f.to,
                found,
            )
        });
        self.poisoned(r)?;
        // Step 4, as in a synchronous flush point: the thread returned `Ok` after the app's
        // batch.
        self.release_window(f.events.iter(), f.to);
        self.flush.deferred.flush_points += 1;
        let report = FlushReport {
            trigger: f.trigger,
            from: f.from,
            to: f.to,
            bytes,
            duration: f.started.elapsed(),
            loop_wait,
            flush_points: 1,
        };
        trace_flush_point(&report, true);
        Ok(Some(report))
    }

    /// Step 4 of a window — a flush point's or a consensus block's — whose write returned
    /// `Ok`: every database is durable at `to`; its events fire, in block order, once, and
    /// only then does the durable height move to `to`.
    pub(super) fn release_window(&mut self, events: impl Iterator<Item = Event>, to: u64) {
        // Crash: only after the window's write returned `Ok`. Moving this above the writes
        // would fire events for blocks a crash can still lose.
        for e in events {
            self.sink.fire(&e);
        }
        self.flush.deferred.flushed_height = to;
    }
}
