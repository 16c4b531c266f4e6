//! What happens at open, as one decision table (ADR 0017), and the repairs it names.
//!
//! Before the node sees its databases, the home has already been made whole by the layers
//! below: the journal engine replays its segments (whole units only; a torn tail is cut, a
//! damaged unit refused: `src/journal/`, ADR 0008), and `Home::open` finishes a rollback a
//! crash interrupted after its app step, or refuses one interrupted before it
//! (`src/rollback.rs`, ADR 0006). Then `Node::open` refuses another chain's home, and:
//!
//! 1. [`case_at_open`] names the case: `Fresh` when nothing is stored, else the pure
//!    [`classify`] of the heights (B, S, A) and the flush record; a refusal writes nothing.
//! 2. [`decide`] maps the case to its [`Repair`] — one `match`, one row per case, each
//!    naming what is done and the cases a crash during it leaves for the next open.
//! 3. `Node::repair` carries it out (and first records the genesis hash of a home that has
//!    none), then checks the app's committed height against the state's.
//!
//! Invariant: every repair writes in the crash order of the writes it finishes (the flush
//! point's block store → state → app, a block's results → app commit → state), so a crash
//! during it leaves one of its row's `crash_leaves` cases, and the next open finishes it.
//! Invariant: a repair reads only local data: the stored blocks and results.
//! Invariant: blocks replayed by the repair fire no event.

use crate::chain::{Chain, ChainBlock, ChainState};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::types::Hash;

use super::handshake::{HandshakeCase, Observed, classify};
use super::{HandshakeReport, Node, contract, fmt_record};

/// What the handshake does for one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Repair {
    /// Save the genesis state and its hash (one synced batch).
    SaveGenesis,
    /// Nothing: the three databases agree.
    Nothing,
    /// Replay blocks `from..=to` on the app only, each app hash checked.
    ReplayApp { from: u64, to: u64 },
    /// Replay `from..=to` on the app, then apply stored block `block` (results, app commit,
    /// state: each synced).
    ReplayAppThenApply { from: u64, to: u64, block: u64 },
    /// Rebuild the state at `block` from its saved results and the app's committed hash.
    RebuildState { block: u64 },
    /// Replay `from..=state` on the app, then finish the flush point to `to`: apply blocks
    /// `state + 1..=to` from the local block store with the state and the app held, write
    /// the state's batch, then the app's.
    RollForward { from: u64, state: u64, to: u64 },
}

/// One row of the decision table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Row {
    /// What is done.
    pub(super) repair: Repair,
    /// The cases a crash during it leaves (the home classified again at the next open).
    /// The first is the case itself, cut before its first write.
    pub(super) crash_leaves: &'static [HandshakeCase],
}

/// The case of what open observed: `Fresh` when no state is saved and nothing else is
/// stored, otherwise [`classify`]'s. `Err`: why the home is refused (nothing is written).
pub(super) fn case_at_open(state_saved: bool, o: &Observed) -> Result<HandshakeCase, &'static str> {
    match (state_saved, o.block_store_height, o.app_height) {
        (false, 0, 0) => Ok(HandshakeCase::Fresh),
        (false, _, _) => Err("blocks or app state exist but no state was saved"),
        (true, _, _) => classify(o),
    }
}

/// The decision table: what the handshake does in `case` with heights (B, S, A) observed in
/// `o`, and the cases a crash during it leaves. Why each crash column holds:
///
/// - `Fresh`: one synced batch — no state yet, or the genesis state.
/// - `Consistent`: nothing is written.
/// - `AppBehind`: the app's own commits, one block at a time — the app between A and S.
/// - `BlockStoreAhead`: the app to S, then B's results, app commit, state, each synced —
///   the app committing B before the state is saved leaves `StateBehindApp`.
/// - `StateBehindApp`: one synced batch of the state.
/// - `FlushRollForward`: the app to S (the record kept), the state's batch at B (the app
///   then behind it), the app's batch.
#[rustfmt::skip]
pub(super) fn decide(case: HandshakeCase, o: &Observed) -> Row {
    use HandshakeCase::*;
    let (b, s, a) = (o.block_store_height, o.state_height, o.app_height);
    let row = |repair, crash_leaves| Row { repair, crash_leaves };
    match case {
        // case          => what is done,                                               a crash during it leaves
        Fresh            => row(Repair::SaveGenesis,                                     &[Fresh, Consistent]),
        Consistent       => row(Repair::Nothing,                                         &[Consistent]),
        AppBehind        => row(Repair::ReplayApp { from: a + 1, to: s },                &[AppBehind, Consistent]),
        BlockStoreAhead  => row(Repair::ReplayAppThenApply { from: a + 1, to: s, block: b },
                                                                                         &[BlockStoreAhead, StateBehindApp, Consistent]),
        StateBehindApp   => row(Repair::RebuildState { block: b },                       &[StateBehindApp, Consistent]),
        FlushRollForward => row(Repair::RollForward { from: a + 1, state: s, to: b },    &[FlushRollForward, AppBehind, Consistent]),
    }
}

impl<C: Chain> Node<C> {
    /// Carries out the decision table's row for `case` on the home observed as `o`, after
    /// recording the genesis hash `genesis_id` if the home has none (`genesis_recorded`).
    pub(super) fn repair(
        &mut self,
        o: Observed,
        case: HandshakeCase,
        genesis_id: &Hash,
        genesis_recorded: bool,
    ) -> Result<HandshakeReport> {
        tracing::info!(
            target: "flushpoint::handshake",
            case = case.name(),
            block_store_height = o.block_store_height,
            state_height = o.state_height,
            app_height = o.app_height,
            record = %fmt_record(o.record),
            "handshake classified the home"
        );
        if case != HandshakeCase::Fresh && !genesis_recorded {
            // A home without the genesis record (written by an older version): record it,
            // once the shape is accepted (a refusal writes nothing).
            tracing::info!(
                target: "flushpoint::handshake",
                "recording the genesis hash of a home created before the record existed"
            );
            self.state_store.save_genesis_hash(genesis_id)?;
        }
        let mut report = HandshakeReport {
            observed: o,
            case,
            app_replayed: 0,
            applied: 0,
            height: o.state_height,
        };
        match decide(case, &o).repair {
            Repair::SaveGenesis => self.state_store.save_genesis(&self.state, genesis_id)?,
            Repair::Nothing => {}
            Repair::ReplayApp { from, to } => report.app_replayed = self.replay_app(from, to)?,
            Repair::ReplayAppThenApply { from, to, block } => {
                report.app_replayed = self.replay_app(from, to)?;
                self.apply_stored(block)?;
                report.applied = 1;
            }
            Repair::RebuildState { block } => {
                self.rebuild_state(block)?;
                report.applied = 1;
            }
            Repair::RollForward { from, state, to } => {
                report.app_replayed = self.replay_app(from, state)?;
                self.roll_forward(state, to)?;
                report.applied = to - state;
            }
        }
        report.height = self.state.height();
        contract(
            "App::committed().height after the handshake",
            report.height,
            self.app
                .committed()?
                .height
                .max(self.state.initial_height() - 1),
        )?;
        if report.app_replayed + report.applied > 0 {
            tracing::info!(
                target: "flushpoint::handshake",
                case = case.name(),
                app_replayed = report.app_replayed,
                applied = report.applied,
                height = report.height,
                "handshake repaired the home"
            );
        }
        Ok(report)
    }

    /// `StateBehindApp`: the app committed block `b` but its state was not saved; the state
    /// at `b` is rebuilt from `b`'s saved results and the app's committed hash.
    fn rebuild_state(&mut self, b: u64) -> Result<()> {
        let block = self.load_stored_block(b)?;
        let results = self
            .state_store
            .load_results(b)?
            .ok_or_else(|| Error::NotFound {
                db: self.state_db.name().to_string(),
                what: format!(
                    "results of block {b}, needed to rebuild the state the app already committed"
                ),
            })?;
        let committed = self.app.committed()?;
        // The shape says the app's durable height is B; an app reporting another committed
        // height would have its hash saved under the wrong block.
        contract(
            "App::committed().height at the handshake (its durable height is B)",
            b,
            committed.height,
        )?;
        let next = self
            .chain
            .next_state(&self.state, &block, &results, committed.app_hash);
        // Crash: one synced batch; before it the shape is `StateBehindApp` again.
        self.state_store.save_state(&next)?;
        self.state = next;
        Ok(())
    }

    /// `FlushRollForward`: steps 2 and 3 of the flush point S → B a crash interrupted. The
    /// window's blocks are durable locally; they are applied with the state and the app
    /// held, then the state is written, then the app.
    fn roll_forward(&mut self, s: u64, b: u64) -> Result<()> {
        // Crash: a cut here leaves the same shape again (nothing written until the state's
        // batch; then `AppBehind` until the app's).
        self.state_db.hold()?;
        let app_holds = self.app.hold()?;
        for h in s + 1..=b {
            self.apply_stored(h)?;
        }
        self.state_db.write_held()?;
        if app_holds {
            self.app.prepare_flush()?;
            self.app.write_held()?;
            // Stopping with writes still held would drop them: refuse first.
            contract(
                "App::held_bytes after App::write_held",
                0,
                self.app.held_bytes(),
            )?;
            self.app.stop_holding()?;
        }
        self.state_db.stop_holding()
    }

    fn load_stored_block(&self, h: u64) -> Result<C::Block> {
        self.block_store
            .load_block(h)?
            .ok_or_else(|| Error::NotFound {
                db: self.block_db.name().to_string(),
                what: format!("block {h}, needed by the handshake"),
            })
    }

    /// Replays blocks `from..=to` on the app only, checking each app hash against the chain.
    fn replay_app(&mut self, from: u64, to: u64) -> Result<u64> {
        for h in from..=to {
            let block = self.load_stored_block(h)?;
            self.app.execute_block(&block)?;
            let info = self.app.commit()?;
            self.check_commit(h, info)?;
            let expected = if h == self.state.height() {
                self.state.app_hash()
            } else {
                self.load_stored_block(h + 1)?.parent_app_hash()
            };
            if info.app_hash != expected {
                return Err(Error::AppHashMismatch {
                    height: h,
                    expected: crate::error::hex(&expected),
                    got: crate::error::hex(&info.app_hash),
                });
            }
        }
        Ok(if from <= to { to - from + 1 } else { 0 })
    }

    fn apply_stored(&mut self, h: u64) -> Result<()> {
        let block = self.load_stored_block(h)?;
        self.apply(&block).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FlushRecord;

    /// Every shape with heights in `0..=5` and any flush record, as the classifier sees it.
    fn shapes() -> Vec<Observed> {
        let mut records = vec![None];
        for to in 1..=5 {
            for from in 0..to {
                records.push(Some(FlushRecord { from, to }));
            }
        }
        let mut out = Vec::new();
        for b in 0..=5 {
            for s in 0..=5 {
                for a in 0..=5 {
                    for &record in &records {
                        out.push(Observed {
                            block_store_height: b,
                            state_height: s,
                            app_height: a,
                            record,
                        });
                    }
                }
            }
        }
        out
    }

    /// The shapes a repair passes through, one per durable write (a holding app's),
    /// starting with the shape itself: what a crash after each write leaves.
    fn shapes_during(o: &Observed, repair: Repair) -> Vec<Observed> {
        let at = |s: u64, a: u64| Observed {
            state_height: s,
            app_height: a,
            ..*o
        };
        let (s, a) = (o.state_height, o.app_height);
        let mut out = vec![*o];
        match repair {
            Repair::SaveGenesis | Repair::Nothing => {}
            Repair::ReplayApp { from, to } => out.extend((from..=to).map(|h| at(s, h))),
            Repair::ReplayAppThenApply { from, to, block } => {
                out.extend((from..=to).map(|h| at(s, h)));
                // Results saved (no height moves), the app committed, the state saved.
                out.extend([at(s, to), at(s, block), at(block, block)]);
            }
            Repair::RebuildState { block } => out.push(at(block, a.max(block))),
            Repair::RollForward { from, state, to } => {
                out.extend((from..=state).map(|h| at(s, h)));
                // The state's batch, then the app's.
                out.extend([at(to, state.max(a)), at(to, to)]);
            }
        }
        out
    }

    /// The table's crash column is what the repairs leave: every shape a repair passes
    /// through classifies to a case of its row, and its last one is consistent.
    #[test]
    fn every_repair_cut_at_any_write_leaves_a_case_of_its_row() {
        let mut rows = 0;
        for o in shapes() {
            let Ok(case) = case_at_open(true, &o) else {
                continue;
            };
            let row = decide(case, &o);
            assert_eq!(
                row.crash_leaves[0], case,
                "{o:?}: the first is the case itself"
            );
            let during = shapes_during(&o, row.repair);
            for cut in &during {
                let left = classify(cut);
                assert!(
                    left.is_ok_and(|c| row.crash_leaves.contains(&c)),
                    "{case:?} at {o:?}: a cut at {cut:?} leaves {left:?}, not in {:?}",
                    row.crash_leaves
                );
            }
            let last = during.last().expect("the shape itself");
            assert_eq!(
                classify(last),
                Ok(HandshakeCase::Consistent),
                "{case:?} at {o:?}"
            );
            rows += 1;
        }
        assert!(rows > 100, "the domain reaches every case ({rows} shapes)");
    }

    /// Negative control: a row whose crash column misses a case its repair passes through
    /// is caught by the same check.
    #[test]
    fn a_crash_column_missing_a_case_is_caught() {
        let o = Observed {
            block_store_height: 3,
            state_height: 2,
            app_height: 1,
            record: None,
        };
        let row = decide(HandshakeCase::BlockStoreAhead, &o);
        let wrong = [HandshakeCase::BlockStoreAhead, HandshakeCase::Consistent];
        let missed = shapes_during(&o, row.repair)
            .iter()
            .any(|cut| !classify(cut).is_ok_and(|c| wrong.contains(&c)));
        assert!(
            missed,
            "the app committing B before the state leaves StateBehindApp"
        );
    }

    /// `Fresh` only with nothing stored; without a state anything stored is refused.
    #[test]
    fn a_home_without_a_state_is_fresh_only_when_empty() {
        for o in shapes().into_iter().filter(|o| o.state_height == 0) {
            let fresh = o.block_store_height == 0 && o.app_height == 0;
            assert_eq!(
                case_at_open(false, &o).is_ok_and(|c| c == HandshakeCase::Fresh),
                fresh,
                "{o:?}"
            );
            assert_eq!(case_at_open(false, &o).is_err(), !fresh, "{o:?}");
        }
    }
}
