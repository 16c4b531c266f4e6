//! The merger: merges each runs keyspace's newest runs into one while the policy asks
//! ([`runs_to_merge`]; ADR 0014), so a read probes a few runs.
//!
//! * A merge is planned under the apply lock (its inputs, and its output's id taken then),
//!   written with no lock (runs are immutable), and installed under the apply lock: one
//!   `Durability::None` commit swaps the manifest rows (durable with the next checkpoint,
//!   which syncs the output first), and the output takes the inputs' place in the read
//!   list, behind any run written since the plan.
//! * [`Merger`] owns the merger thread ([`Merger::start`]: by the background applier once a
//!   keyspace is indexed by runs); [`MergerState`], its part of the engine's state, says
//!   whether it runs and whether a merge may be due. Without the thread (inline applier,
//!   or before it starts) each apply step merges itself ([`merge_runs`]).
//!
//! Invariant: a merge's inputs stay listed, together and in order, until its install; every
//! run in front of them has a higher id than its output ([`merge_position`], checked at
//! the install before anything is written).
//! Invariant: a merge's output points only where its inputs did; tombstones are dropped
//! only when the output is the keyspace's oldest run.
//! Invariant: a stopping or poisoned engine plans no merge, and one being written ends at
//! its next look ([`MERGE_STOP_CHECK_OPS`]), its output deleted, never listed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::applier::{ApplyTurn, UnitApplier};
use super::apply::write_live;
use super::engine::{Shared, spawn_poisoning_on_panic};
use super::format::{RUN_LEVEL, RUN_VALUES, RUNS, runs_dir};
use super::limits::{MERGE_STOP_CHECK_OPS, RUN_MERGE_RATIO, RUNS_MAX};
use super::manifest::{RunList, RunPointers, RunValue, write_run_as};
use super::run::{MergedRuns, Run, run_file_name};
use super::state::{Core, ENGINE_NAME};
use super::unit::UnitOp;
use crate::db::{Direction, KeyRange};
use crate::error::{Error, Result};
use crate::sync::{Mutex, thread};

/// The merger's part of the engine's state (under the state lock).
#[derive(Debug, Default)]
pub(super) struct MergerState {
    /// True while the merger thread runs ([`run_merger`]): apply steps leave run merges to
    /// it. False before it is started, after it stopped, and with the inline applier:
    /// each apply step then merges itself.
    live: bool,
    /// Set by an apply step for the merger: the runs changed, a merge may be due.
    wanted: bool,
}

impl MergerState {
    pub(super) fn is_live(&self) -> bool {
        self.live
    }

    /// The merger thread runs (`true`) or has stopped.
    pub(super) fn set_live(&mut self, live: bool) {
        self.live = live;
    }

    /// After an apply step: a merge may be due; returns whether the merger thread will
    /// look (else the step merges itself).
    pub(super) fn want_merge_if_live(&mut self) -> bool {
        self.wanted |= self.live;
        self.live
    }
}

/// The merger thread's handle; see the module's docs.
#[derive(Debug)]
pub(super) struct Merger {
    /// The merger thread, once started (by the applier, after its first step once a
    /// keyspace is indexed by runs).
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Merger {
    pub(super) fn new() -> Merger {
        Merger {
            thread: Mutex::new(None),
        }
    }

    /// Starts the merger thread if a keyspace is indexed by runs and none runs yet (the
    /// background applier, after a step). Merges stay inline until then.
    pub(super) fn start(&self, s: &Arc<Shared>) -> Result<()> {
        let core = &s.core;
        let mut handle = self.thread.lock().expect("merger lock");
        if handle.is_some() {
            return Ok(());
        }
        {
            let mut st = core.lock_state();
            if st.manifest.is_empty() || st.stop {
                return Ok(());
            }
            st.merger.live = true;
        }
        // A panic (a broken invariant) poisons the engine rather than leave merges undone
        // unnoticed.
        let spawned = spawn_poisoning_on_panic(s, "journal-merger", "merge", |s| {
            // Below the block loop and the applier (`MERGER_NICE_INCREMENT`). A refusal only
            // costs speed: the merges are the same, so the thread goes on.
            let increment = s.core.options.merger_nice_increment;
            if let Err(e) = super::thread_priority::lower_calling_threads_priority(increment) {
                tracing::warn!(
                    dir = %s.core.dir.display(),
                    increment,
                    error = %e,
                    "the journal's merger thread kept its priority"
                );
            }
            run_merger(&s.core, &s.applier)
        });
        match spawned {
            Ok(t) => {
                *handle = Some(t);
                Ok(())
            }
            Err(e) => {
                core.lock_state().merger.live = false;
                Err(core.fail(Error::storage(ENGINE_NAME, "spawn merger", e)))
            }
        }
    }

    /// Waits for the merger thread to end (after `stop`: the merge it is writing ends at
    /// its next look, its partial output deleted, never listed).
    pub(super) fn join(&self) {
        if let Some(t) = self.thread.lock().expect("merger lock").take() {
            let _ = t.join();
        }
    }
}

/// The merger thread: writes each merge that is due beside the apply steps, and lists
/// it under the apply lock. A long merge (the whole app state, at scale) does not hold
/// the next step, nor the flush point that waits for it (ADR 0014, "Merges on their own
/// thread"). Stops when the engine does (the merge it is writing ends at its next look at
/// the stop, its output deleted) or is poisoned.
fn run_merger(core: &Core, applier: &UnitApplier) {
    loop {
        {
            let mut st = core.lock_state();
            loop {
                if st.stop || core.poison.is_set() {
                    return;
                }
                if st.merger.wanted {
                    st.merger.wanted = false;
                    break;
                }
                st = core.changed.wait(st).expect("journal state lock");
            }
        }
        if merge_beside_steps(core, applier).is_err() {
            // Poisoned (by `fail`): writers see it on their next call.
            return;
        }
    }
}

/// Every merge that is due, each written without a lock and installed under the apply
/// lock; another is looked for after each (steps may have added runs meanwhile).
fn merge_beside_steps(core: &Core, applier: &UnitApplier) -> Result<()> {
    for name in runs_keyspaces(core) {
        // A stopping engine merges nothing (the next open's steps merge what is due);
        // a poisoned one writes nothing more.
        while !core.lock_state().stop && !core.poison.is_set() {
            let plan = {
                let turn = applier.lock();
                plan_merge(core, &turn, &name)
            };
            let Some(plan) = plan else {
                break;
            };
            let Some(merge) = write_merge(core, plan)? else {
                break;
            };
            let turn = applier.lock();
            install_merge(core, &turn, merge)?;
            // An applier waiting for the merger to catch up (`RUNS_BEHIND_MAX`) looks
            // again.
            core.changed.notify_all();
        }
    }
    Ok(())
}

/// Merges each runs keyspace's newest runs while the policy asks ([`runs_to_merge`]),
/// inline: the caller holds the apply lock (an apply step with no merger thread, or the
/// close). The output replaces them in the read order and in the manifest (a
/// `Durability::None` transaction, durable with the next checkpoint, which syncs the
/// output first); the inputs are unlinked after that checkpoint. Tombstones are dropped
/// only when the output is the keyspace's oldest run.
// Crash: before the next checkpoint a cut leaves the inputs listed and the output not
// (deleted on open); after it the output listed and whole, the inputs unlisted (deleted
// on open if their unlink was lost).
pub(super) fn merge_runs(core: &Core, turn: &ApplyTurn<'_>) -> Result<()> {
    for name in runs_keyspaces(core) {
        if let Some(plan) = plan_merge(core, turn, &name)
            && let Some(merge) = write_merge(core, plan)?
        {
            install_merge(core, turn, merge)?;
        }
    }
    Ok(())
}

/// The keyspaces indexed by runs.
fn runs_keyspaces(core: &Core) -> Vec<String> {
    core.lock_state().manifest.keyspaces()
}

/// A merge to write ([`plan_merge`]).
pub(super) struct MergePlan {
    keyspace: String,
    /// The runs to merge, newest first: the keyspace's newest runs when it was planned.
    inputs: Vec<Arc<Run>>,
    /// The inputs include the keyspace's oldest run: tombstones are dropped.
    oldest: bool,
    /// The output's id, taken with the plan.
    id: u64,
}

/// A merge's output, written and not yet listed ([`install_merge`]).
pub(super) struct WrittenMerge {
    keyspace: String,
    /// The runs merged, newest first: the keyspace's newest runs when the merge began.
    inputs: Vec<Arc<Run>>,
    out: Arc<Run>,
    /// The bytes the output's pointers lead to, per segment (empty unless separating).
    out_pointers: RunPointers,
}

/// The merge [`runs_to_merge`] asks for in `keyspace`, if any: its newest runs as they
/// stand, and the id the output will take. The caller holds the apply lock, so no apply
/// step is between taking its run's id and listing the run: every run with a lower id
/// than the output's is listed now (among the inputs or older), and every run written
/// after takes a higher id and holds newer ops. So the ids still order the runs by the
/// age of their ops, as recovery reads them, however long the merge takes.
fn plan_merge(core: &Core, _turn: &ApplyTurn<'_>, keyspace: &str) -> Option<MergePlan> {
    let list = {
        let st = core.lock_state();
        // A stopping engine merges nothing: merges only speed reads up, and a close
        // should not wait for one (the next open's steps merge what is due). A poisoned
        // one writes nothing more.
        if st.stop || core.poison.is_set() {
            return None;
        }
        st.manifest.list(keyspace)?
    };
    let take = runs_to_merge(&list);
    if take < 2 {
        return None;
    }
    Some(MergePlan {
        keyspace: keyspace.to_owned(),
        inputs: list[..take].to_vec(),
        oldest: take == list.len(),
        id: core.lock_state().manifest.take_id(),
    })
}

/// Writes a planned merge's output, not yet listed ([`install_merge`] lists it).
/// Needs no lock: runs are immutable, and only an install changes a list past its
/// newest run.
// Crash: until its install commits, the output is listed by no manifest: a cut leaves
// it partial or whole and unlisted (deleted on open), the inputs and any newer runs
// listed as before.
/// `None` when the engine began to stop during the write: the partial output is
/// deleted (never listed), so a close does not wait for a long merge.
fn write_merge(core: &Core, plan: MergePlan) -> Result<Option<WrittenMerge>> {
    // The output's id was taken with the plan: taken when the write begins, a run an apply
    // step writes in between would have a lower id than the output although its ops are
    // newer (and recovery orders runs by id).
    let MergePlan {
        keyspace,
        inputs,
        oldest,
        id,
    } = plan;
    // Streamed: the inputs are read a block at a time, never whole.
    let mut merged = UntilStop {
        ops: MergedRuns::over(&inputs, &KeyRange::all(), Direction::Forward, !oldest),
        core,
        seen: 0,
        stopped: false,
    };
    let keys_max = inputs.iter().map(|r| r.ops()).sum();
    let separating = core.lock_state().separated.contains_key(&keyspace);
    let (out, out_pointers) = write_run_as(
        core,
        &keyspace,
        id,
        (&mut merged).map(|op| op.map(|(k, v)| (k, v.map(RunValue::Stored)))),
        keys_max,
        separating,
    )?;
    if merged.stopped {
        drop(out);
        // Crash: the file is listed nowhere; an unlink lost in a cut leaves it for the
        // next open, which deletes every unlisted run. Not an error either way: nothing
        // durable depends on it.
        let path = runs_dir(&core.dir, &keyspace).join(run_file_name(id));
        let _ = core.fs.remove_file(&path);
        return Ok(None);
    }
    Ok(Some(WrittenMerge {
        keyspace,
        inputs,
        out,
        out_pointers,
    }))
}

/// Lists a written merge: one `Durability::None` commit inserts the output's manifest
/// row and removes the inputs' (durable with the next checkpoint, which syncs the
/// output first), then the output takes the inputs' place in the read list, behind any
/// run written since the merge began. The caller holds the apply lock: no checkpoint
/// is between its run syncs and its commit, and no other step changes the manifest.
fn install_merge(core: &Core, _turn: &ApplyTurn<'_>, merge: WrittenMerge) -> Result<()> {
    core.poison.check(ENGINE_NAME)?;
    let WrittenMerge {
        keyspace: name,
        inputs,
        out,
        out_pointers,
    } = merge;
    // Checked before the manifest is written, so a broken invariant leaves the index as
    // it was. The apply lock is held (by the caller) from here to the list's change, so
    // the runs in front of the inputs stay as checked.
    let newer = {
        let st = core.lock_state();
        let checked = merge_position(st.manifest.list(&name).as_ref(), &inputs, out.id());
        // Crash: none (nothing written yet). The state lock is let go before the
        // panic: a panic holding it would poison it, and the close that follows (a
        // drop) would panic on it again, aborting the process. The thread's catch
        // poisons the engine instead, and the apply lock the caller holds is taken
        // poison or not (`UnitApplier::lock`).
        drop(st);
        checked.unwrap_or_else(|invariant| panic!("invariant: {invariant}"))
    };
    let txn = core.begin_index_write(redb::Durability::None)?;
    core.index_call("write runs", || {
        let mut manifest = RUNS
            .open_mut(&txn, core.layout)
            .map_err(core.failing("open runs"))?;
        manifest
            .insert(&(name.as_str(), out.id()), RUN_LEVEL)
            .map_err(core.failing("write runs"))?;
        for r in &inputs {
            manifest
                .remove(&(name.as_str(), r.id()))
                .map_err(core.failing("write runs"))?;
        }
        Ok(())
    })?;
    // A separating keyspace (ADR 0016): the inputs' pointer rows leave with them and the
    // output's come in; the live bytes change by the pointers the merge dropped (keys it
    // found newer ops for), in this transaction with the manifest.
    // Crash: a cut before the checkpoint that makes this commit durable leaves the
    // inputs listed with their rows and live bytes (the output unlisted, deleted on
    // open); after it, the output's rows and the lowered live bytes, and a segment no
    // pointer holds any more is doomed only by a checkpoint that finds it so.
    let live_now = if core.lock_state().separated.contains_key(&name) {
        let delta = move_pointer_rows(core, &txn, &name, &inputs, &out, &out_pointers)?;
        write_live(core, &txn, delta)?
    } else {
        Vec::new()
    };
    core.step.point();
    core.index_call("commit", || {
        txn.into_inner().commit().map_err(core.failing("commit"))
    })?;
    core.counters.run_merges.add(1);
    if newer > 0 {
        core.counters.merges_behind_newer_runs.add(1);
    }
    let mut st = core.lock_state();
    st.segments.note_live(live_now);
    st.manifest.install(&name, inputs, out, newer);
    Ok(())
}

/// A separating keyspace's merge in `txn`: the inputs' pointer rows removed, the output's
/// inserted; returns the change of the live bytes per segment (never a rise).
fn move_pointer_rows(
    core: &Core,
    txn: &redb::WriteTransaction,
    name: &str,
    inputs: &[Arc<Run>],
    out: &Run,
    out_pointers: &RunPointers,
) -> Result<BTreeMap<u64, i64>> {
    let mut delta: BTreeMap<u64, i64> = BTreeMap::new();
    core.index_call("write run values", || {
        let mut rows = RUN_VALUES
            .open_mut(txn, core.layout)
            .map_err(core.failing("open run values"))?;
        for r in inputs {
            let from = (name, r.id(), 0u64);
            let through = (name, r.id(), u64::MAX);
            let held: Vec<(u64, u64)> = rows
                .rows_in(from..=through, "read run values", |(_, _, segment)| {
                    Some(segment)
                })
                .map_err(|e| core.failed(e))?;
            for (segment, bytes) in held {
                rows.remove(&(name, r.id(), segment))
                    .map_err(core.failing("write run values"))?;
                *delta.entry(segment).or_default() -=
                    i64::try_from(bytes).expect("live bytes fit i64");
            }
        }
        for (&segment, &bytes) in out_pointers {
            rows.insert(&(name, out.id(), segment), bytes)
                .map_err(core.failing("write run values"))?;
            *delta.entry(segment).or_default() += i64::try_from(bytes).expect("live bytes fit i64");
        }
        drop(rows);
        Ok(())
    })?;
    // A merge keeps or drops its inputs' ops, never makes one: its output points at
    // no byte an input did not.
    assert!(
        delta.values().all(|change| *change <= 0),
        "invariant: a merge's output points only where its inputs did"
    );
    Ok(delta)
}

/// Where a written merge's inputs stand in its keyspace's read list `runs` (newest first):
/// the number of runs in front of them, or the install invariant that is broken. Runs
/// written since the merge was planned are in front of its inputs, which are still there,
/// together and in order (only an install changes a list past its newest run, and one
/// merge is written at a time), and each of those runs has a higher id than the output
/// (its id was taken at the plan: [`plan_merge`]).
fn merge_position(
    runs: Option<&RunList>,
    inputs: &[Arc<Run>],
    out_id: u64,
) -> std::result::Result<usize, &'static str> {
    let runs = runs.ok_or("a merged keyspace is indexed by runs")?;
    let first = inputs.first().ok_or("a merge has inputs")?;
    let newer = runs
        .iter()
        .position(|r| Arc::ptr_eq(r, first))
        .ok_or("a merge's inputs stay listed until it is installed")?;
    let together = runs
        .get(newer..newer + inputs.len())
        .is_some_and(|listed| listed.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b)));
    if !together {
        return Err("a merge's inputs are listed together, as when it began");
    }
    if !runs[..newer].iter().all(|r| r.id() > out_id) {
        return Err("a run written during a merge has a higher id than its output");
    }
    Ok(newer)
}

/// How many of `runs` (newest first) to merge into one: the newest while their bytes
/// together are at least `1 / RUN_MERGE_RATIO` of the next older run's, and at least enough
/// that [`RUNS_MAX`] runs remain; 0 when fewer than two would be merged.
fn runs_to_merge(runs: &[Arc<Run>]) -> usize {
    let sizes: Vec<u64> = runs.iter().map(|r| r.file_bytes()).collect();
    runs_to_merge_by_bytes(&sizes)
}

/// [`runs_to_merge`] over the runs' sizes in bytes, newest first.
fn runs_to_merge_by_bytes(sizes: &[u64]) -> usize {
    let Some(&newest) = sizes.first() else {
        return 0;
    };
    let mut take = 1;
    let mut bytes = newest;
    while let Some(&next) = sizes.get(take) {
        if bytes.saturating_mul(RUN_MERGE_RATIO) < next {
            break;
        }
        bytes = bytes.saturating_add(next);
        take += 1;
    }
    // After merging `take`, `len - take + 1` runs remain.
    let take = take.max((sizes.len() + 1).saturating_sub(RUNS_MAX));
    if take >= 2 { take } else { 0 }
}

/// A merge's ops, ended early once the engine is stopping or poisoned ([`write_merge`]).
struct UntilStop<'a, I> {
    ops: I,
    core: &'a Core,
    seen: u64,
    stopped: bool,
}

impl<I: Iterator<Item = Result<UnitOp>>> Iterator for UntilStop<'_, I> {
    type Item = Result<UnitOp>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        if self.seen.is_multiple_of(MERGE_STOP_CHECK_OPS)
            && (self.core.lock_state().stop || self.core.poison.is_set())
        {
            self.stopped = true;
            return None;
        }
        self.seen += 1;
        self.ops.next()
    }
}

#[cfg(test)]
mod tests;
