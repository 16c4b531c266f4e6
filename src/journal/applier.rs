//! The applier: the queue of units written but not yet applied to the index, and the apply
//! step that takes them there (ADR 0008, 0015).
//!
//! * [`Queue`], its part of the engine's state: the overlay readers see the unapplied units
//!   through, the units in seq order, the unit being synced that a step may begin on
//!   (`placed`), and how far units are durable and applied.
//! * [`UnitApplier`] owns the apply lock ([`ApplyTurn`]: one apply step, checkpoint, merge
//!   plan or install, or keyspace record at a time); the background thread runs
//!   [`run_applier`] (its handle is the engine's, joined by the close); an apply step ([`UnitApplier::apply_step`]) writes its units into
//!   one index transaction (`apply.rs`), hands them from the overlay to the index (and a
//!   runs keyspace's new run), then merges inline or wakes the merger, and checkpoints when
//!   due.
//! * The waits of writers and callers on the applier: room in the overlay, every unit
//!   applied, a placed unit queued.
//!
//! Invariant: the overlay holds every unit not yet applied to redb; a unit leaves it only
//! after the redb commit holding it returned, so overlay-then-redb never misses a write.
//! Invariant: only durable units are applied, in seq order; a step begun on a placed unit
//! commits only once that unit is durable and in the overlay.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::apply::apply_units;
use super::checkpoint;
use super::engine::Shared;
use super::limits::{MERGER_BEHIND_RECHECK, POISON_RECHECK, RUNS_BEHIND_MAX};
use super::merger;
use super::options::Applier;
use super::overlay::{Overlay, UnitOps};
use super::segments::{Segments, Writer};
use super::state::{Core, ENGINE_NAME, State};
use crate::error::Result;
use crate::sync::{Mutex, MutexGuard};

/// A unit written but not yet applied to redb.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) seq: u64,
    /// Where the unit lies: segment and offset of its first byte, and its encoded length.
    pub(super) segment: u64,
    pub(super) offset: u64,
    pub(super) len: u64,
    /// Bytes of its keys and values (what the overlay's budget counts).
    pub(super) bytes: u64,
    pub(super) ops: Arc<UnitOps>,
    /// When the unit entered the overlay (the applier's batching clock).
    queued_at: Instant,
}

impl Pending {
    /// Unit `seq` of `ops`, lying at `(segment, offset, len)`.
    pub(super) fn new(
        seq: u64,
        (segment, offset, len): (u64, u64, u64),
        ops: Arc<UnitOps>,
    ) -> Pending {
        Pending {
            seq,
            segment,
            offset,
            len,
            bytes: ops.sections.byte_size(),
            ops,
            queued_at: Instant::now(),
        }
    }
}

/// The applier's part of the engine's state (under the state lock).
#[derive(Debug)]
pub(super) struct Queue {
    /// The unapplied units' writes, read newest first.
    overlay: Overlay,
    /// Unapplied units, in seq order.
    units: VecDeque<Pending>,
    /// Bytes of the units in `units`.
    overlay_bytes: u64,
    /// Every unit with seq ≤ this is durable.
    durable_through: u64,
    applied_seq: u64,
    /// Callers in [`UnitApplier::wait_applied`]: the background applier applies at once
    /// while there are any (no batching delay).
    apply_waiters: usize,
    /// The synced unit being written and synced now, placed in its segment, when the
    /// background applier may begin to apply it meanwhile
    /// ([`JournalOptions::apply_while_syncing_bytes_min`](super::JournalOptions)): not in
    /// the overlay, not readable; cleared when it enters the overlay.
    placed: Option<Pending>,
    /// Where the last applied unit ends (segment, offset after it).
    applied_end: (u64, u64),
}

impl Queue {
    /// An empty queue after an open: units through `durable_through` are durable, through
    /// `applied_seq` applied (the last ending at `applied_end`); an overlay of
    /// `overlay_bytes_max`.
    pub(super) fn recovered(
        overlay_bytes_max: u64,
        durable_through: u64,
        applied_seq: u64,
        applied_end: (u64, u64),
    ) -> Queue {
        Queue {
            overlay: Overlay::new(overlay_bytes_max),
            units: VecDeque::new(),
            overlay_bytes: 0,
            durable_through,
            applied_seq,
            apply_waiters: 0,
            placed: None,
            applied_end,
        }
    }

    /// Puts `unit` in the overlay and the queue; its batching clock starts now.
    pub(super) fn push(&mut self, mut unit: Pending) {
        self.overlay.push(unit.seq, unit.bytes, &unit.ops);
        if let Some(last) = self.units.back() {
            assert_eq!(
                last.seq + 1,
                unit.seq,
                "invariant: units queue in seq order"
            );
        }
        self.overlay_bytes += unit.bytes;
        unit.queued_at = Instant::now();
        self.units.push_back(unit);
    }

    /// Hands the unit being written and synced to the background applier.
    pub(super) fn place(&mut self, unit: Pending) {
        self.placed = Some(unit);
    }

    /// The placed unit (if any) is durable: it enters the overlay as `unit`; returns the
    /// bytes the overlay holds now.
    pub(super) fn push_placed(&mut self, unit: Pending) -> u64 {
        self.placed = None;
        self.push(unit);
        self.overlay_bytes
    }

    /// Every unit through `through` is durable.
    pub(super) fn note_durable(&mut self, through: u64) {
        self.durable_through = self.durable_through.max(through);
    }

    /// Unapplied units.
    pub(super) fn len(&self) -> usize {
        self.units.len()
    }

    pub(super) fn applied_seq(&self) -> u64 {
        self.applied_seq
    }

    /// Where the last applied unit ends (segment, offset after it).
    pub(super) fn applied_end(&self) -> (u64, u64) {
        self.applied_end
    }

    /// The unapplied units' writes.
    pub(super) fn overlay(&self) -> &Overlay {
        &self.overlay
    }

    /// True when an unapplied unit writes `keyspace`.
    pub(super) fn writes(&self, keyspace: &str) -> bool {
        self.units.iter().any(|u| u.ops.writes(keyspace))
    }

    /// The units the next step applies: with `placed_too` and none queued, the placed one
    /// (and true); else every durable queued one.
    fn take_for_step(&self, placed_too: bool) -> (Vec<Pending>, bool) {
        match &self.placed {
            Some(placed) if placed_too && self.units.is_empty() => {
                assert_eq!(
                    placed.seq,
                    self.applied_seq + 1,
                    "invariant: a placed unit follows every applied one"
                );
                (vec![placed.clone()], true)
            }
            _ => (
                self.units
                    .iter()
                    .take_while(|u| u.seq <= self.durable_through)
                    .cloned()
                    .collect(),
                false,
            ),
        }
    }

    /// `units` are applied (their index commit returned): they leave the queue and the
    /// overlay; returns their bytes.
    fn pop_applied(&mut self, units: &[Pending]) -> u64 {
        let mut bytes = 0;
        for u in units {
            let front = self
                .units
                .pop_front()
                .expect("invariant: applied units queued");
            assert_eq!(front.seq, u.seq, "invariant: units apply in seq order");
            self.overlay.remove(u.seq, u.bytes, &u.ops);
            self.overlay_bytes -= u.bytes;
            bytes += u.bytes;
        }
        // The budget's count is the bytes of the units still queued (checked in tests
        // and debug builds: a sum over the queue per step).
        debug_assert_eq!(
            self.overlay_bytes,
            self.units.iter().map(|u| u.bytes).sum::<u64>(),
            "invariant: the overlay's byte count is its queued units' bytes"
        );
        let last = units.last().expect("a step applies at least one unit");
        self.applied_seq = last.seq;
        self.applied_end = (last.segment, last.offset + last.len);
        bytes
    }
}

/// Proof that the caller holds the apply lock ([`UnitApplier::lock`]): taken by the
/// functions that must run one at a time against apply steps (checkpoints, merge plans
/// and installs, run syncs).
pub(super) struct ApplyTurn<'a> {
    _apply: MutexGuard<'a, ()>,
}

/// The apply lock; see the module's docs.
#[derive(Debug)]
pub(super) struct UnitApplier {
    /// One apply step (or checkpoint, merge plan or install, keyspace record) at a time.
    apply: Mutex<()>,
}

impl UnitApplier {
    pub(super) fn new() -> UnitApplier {
        UnitApplier {
            apply: Mutex::new(()),
        }
    }

    /// The apply lock, whether or not a thread panicked holding it: it guards no data
    /// (`()`), only the order of apply steps, checkpoints and merge installs; a panic on an
    /// engine thread poisons the engine itself (`spawn_poisoning_on_panic`), which every
    /// write path checks.
    pub(super) fn lock(&self) -> ApplyTurn<'_> {
        ApplyTurn {
            _apply: self
                .apply
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }

    /// Applies every durable unapplied unit to redb (`Durability::None`), then runs a
    /// checkpoint if one is due (or `force`d and anything was applied since the last).
    pub(super) fn apply_step(&self, core: &Core, force: bool) -> Result<()> {
        self.apply_step_taking(core, force, false)
    }

    /// [`Self::apply_step`]; with `placed_too` (the background applier's own steps) and no
    /// unit queued, the step takes the unit being written and synced, when there is one
    /// (`Queue::placed`), and commits once that unit is in the overlay.
    fn apply_step_taking(&self, core: &Core, force: bool, placed_too: bool) -> Result<()> {
        let turn = self.lock();
        core.poison.check(ENGINE_NAME)?;
        let (units, while_syncing) = core.lock_state().queue.take_for_step(placed_too);
        if !units.is_empty() {
            apply_taken(core, &turn, &units, while_syncing)?;
        }
        // Crash: a merge the merger listed after the last checkpoint is in the index's
        // manifest, not synced; redb's close would make that manifest durable on its own,
        // so a close (forced) checkpoints it, syncing the output first, even when no unit
        // was applied since. Without it a cut after a clean close refuses the open (the
        // output listed, torn).
        let due = checkpoint::due(&core.lock_state(), force, &core.options);
        if due {
            checkpoint::checkpoint(core, &turn)?;
        }
        Ok(())
    }

    /// One turn of a wait for the applier: inline, applies a step; in the background, waits
    /// (up to [`POISON_RECHECK`]) for the applier to signal.
    fn apply_or_wait(&self, core: &Core, st: MutexGuard<'_, State>) -> Result<()> {
        match core.options.applier {
            Applier::Inline => {
                drop(st);
                self.apply_step(core, false)
            }
            Applier::Background => {
                // Timed: a poison set between the check and the wait is seen anyway.
                drop(core.wait_changed(st, POISON_RECHECK));
                Ok(())
            }
        }
    }

    /// Waits (or, inline, applies) until every unit written before the call is applied:
    /// its writes have left the overlay. Unsynced units are synced first (they cannot be
    /// applied before).
    pub(super) fn wait_applied(&self, core: &Core, segments: &Segments) -> Result<()> {
        let target = segments.lock_writer().written_through();
        core.lock_state().queue.apply_waiters += 1;
        core.changed.notify_all();
        let waited = self.wait_applied_through(core, segments, target);
        core.lock_state().queue.apply_waiters -= 1;
        waited
    }

    fn wait_applied_through(&self, core: &Core, segments: &Segments, target: u64) -> Result<()> {
        loop {
            core.poison.check(ENGINE_NAME)?;
            let st = core.lock_state();
            // Closing: the close applies what is left (a wait for memory, not durability).
            if st.queue.applied_seq >= target || st.stop {
                return Ok(());
            }
            if st.queue.durable_through < target {
                drop(st);
                let mut w = segments.lock_writer();
                w.sync(core)?;
                continue;
            }
            self.apply_or_wait(core, st)?;
        }
    }

    /// Waits (or, inline, applies) until the overlay is under its budget. Unsynced units
    /// cannot be applied, so they are synced first when they are what blocks the budget.
    pub(super) fn wait_for_room(&self, core: &Core, w: &mut Writer, db: &str) -> Result<()> {
        loop {
            core.poison.check(db)?;
            let st = core.lock_state();
            if st.queue.overlay_bytes <= core.options.overlay_bytes_max || st.queue.units.is_empty()
            {
                return Ok(());
            }
            core.counters.overlay_waits.add(1);
            if st.queue.durable_through < w.written_through() {
                drop(st);
                w.sync(core)?;
                continue;
            }
            self.apply_or_wait(core, st)?;
        }
    }
}

/// Applies `units` (taken by the step holding `turn`; `while_syncing`: the placed unit,
/// whose commit waits until it is queued), hands them from the overlay to the index, and
/// merges inline or wakes the merger.
fn apply_taken(
    core: &Core,
    turn: &ApplyTurn<'_>,
    units: &[Pending],
    while_syncing: bool,
) -> Result<()> {
    let last_seq = units.last().expect("a step applies at least one unit").seq;
    // Crash: a step begun while its unit is synced writes its runs (listed by no
    // manifest: deleted on open) and its inserts (an uncommitted transaction), and
    // commits only once the unit is durable and in the overlay, so neither the index
    // nor a reader ever holds what a cut could take back.
    let before_commit = || {
        if while_syncing {
            wait_until_queued(core, last_seq)
        } else {
            Ok(())
        }
    };
    let applied = apply_units(core, units, before_commit)?;
    if while_syncing {
        core.counters.steps_begun_while_syncing.add(1);
    }
    core.counters.apply_steps.add(1);
    let mut st = core.lock_state();
    st.segments
        .note_applied(applied.segments_started, applied.value_ranges);
    st.segments.note_live(applied.live_now);
    // The step's runs become readable under the same lock as its units leave the
    // overlay: a reader sees each op in one of them, never in neither.
    st.manifest.add_step_runs(applied.new_runs);
    // The applied units leave the overlay only now, after their commit returned
    // (their ops are freed after the lock is let go: `units` holds them until this
    // step returns).
    let bytes = st.queue.pop_applied(units);
    st.clock.note_applied(bytes);
    // The merger thread merges beside the next steps; without one, this step does.
    let merger_live = st.merger.want_merge_if_live();
    drop(st);
    // Writers waiting for room are woken.
    core.changed.notify_all();
    if merger_live {
        // One condvar: this wakes no one the line above did not. It keeps the merger's
        // wake-up apart from the writers', so that the planted bug that drops the writers'
        // (in tests/planted/) leaves the merger's.
        core.changed.notify_all();
    } else {
        merger::merge_runs(core, turn)?;
    }
    Ok(())
}

/// Waits until unit `seq`, placed and taken by an apply step while it was synced, is
/// durable and in the overlay (its writer pushes it after its sync); `Err` when the
/// engine is poisoned meanwhile (its write or sync failed: it never will be).
fn wait_until_queued(core: &Core, seq: u64) -> Result<()> {
    loop {
        core.poison.check(ENGINE_NAME)?;
        // Checked under the lock the wait lets go: the push (under it) and its wake-up
        // cannot fall between the check and the wait.
        let st = core.lock_state();
        if st.queue.units.front().is_some_and(|u| u.seq == seq) {
            assert!(
                st.queue.durable_through >= seq,
                "invariant: a unit enters the overlay durable"
            );
            return Ok(());
        }
        // Timed: a poison set between the check and the wait is seen anyway.
        drop(core.wait_changed(st, POISON_RECHECK));
    }
}

/// The background applier: applies as units become durable, checkpoints when due; between
/// steps it keeps a spare segment ready and starts the merger once a keyspace is indexed
/// by runs.
pub(super) fn run_applier(s: &Arc<Shared>) {
    let core = &s.core;
    loop {
        let Some(start_merger) = wait_for_work(core) else {
            return;
        };
        if s.applier.apply_step_taking(core, false, true).is_err()
            || s.segments.keep_spare_ready(core).is_err()
            || (start_merger && s.merger.start(s).is_err())
        {
            // Poisoned (by `fail`): writers see it on their next call.
            return;
        }
    }
}

/// Waits until a step is due (a durable unit old enough or wanted at once, a checkpoint
/// due, or a placed unit with every earlier one applied); `Some(start the merger)`, or
/// `None` when the engine stops or is poisoned.
fn wait_for_work(core: &Core) -> Option<bool> {
    let mut st = core.lock_state();
    loop {
        if st.stop || core.poison.is_set() {
            return None;
        }
        let q = &st.queue;
        // The oldest durable unit's age: applied once it is `apply_batch_delay` old,
        // or at once when the overlay is half its budget (writers may wait).
        let durable_age = q
            .units
            .front()
            .filter(|u| u.seq <= q.durable_through)
            .map(|u| u.queued_at.elapsed());
        let since = st.clock.since_last();
        let time_due =
            st.index_changed_since_checkpoint() && since >= core.options.checkpoint_interval;
        let apply_due = durable_age.is_some_and(|age| {
            age >= core.options.apply_batch_delay
                || q.overlay_bytes >= core.options.overlay_bytes_max / 2
                || q.apply_waiters > 0
        });
        // A placed unit, every earlier one applied: its step begins now.
        let placed_due = q.placed.is_some() && q.units.is_empty();
        // A step adds a run: none while the merger is that far behind (it wakes
        // this thread when it installs a merge). A checkpoint due meanwhile
        // waits too: its step would apply the queued units.
        let merger_behind = st.merger.is_live() && st.manifest.any_list_at_least(RUNS_BEHIND_MAX);
        if merger_behind {
            st = core.wait_changed(st, MERGER_BEHIND_RECHECK);
            continue;
        }
        if apply_due || time_due || placed_due {
            // Looked at here, under the lock already held: no lock of its own
            // per step (each would be one more step for a loom model).
            return Some(!st.merger.is_live() && !st.manifest.is_empty());
        }
        let wait = match durable_age {
            Some(age) => core.options.apply_batch_delay.saturating_sub(age),
            None => core.options.checkpoint_interval.saturating_sub(since),
        }
        .max(Duration::from_millis(1));
        st = core.wait_changed(st, wait);
    }
}

/// The overlay's peak: `bytes` held at once after a unit entered it.
pub(super) fn note_overlay_peak(core: &Core, bytes: u64) {
    core.counters.overlay_bytes_peak.raise(bytes);
}
