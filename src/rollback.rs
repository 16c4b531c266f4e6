//! Rollback: lowers a home's app, block store and state to a height `to`, consistently, with
//! an intent file that makes every crash point either finishable or refused.
//!
//! Steps (each line below is a crash point; `adr/0006-rollback-in-the-library.md` has the
//! crash table):
//! 1. Check and plan, writing nothing: the home's shape must be one the handshake accepts
//!    (a flush point's roll-forward is refused until repaired), the block store must still
//!    hold block `to + 1`, the app must be able to roll back to `to`
//!    ([`App::rollback_floor`]), and the state at `to` is rebuilt from the stored history and
//!    blocks `to` and `to + 1`, checked against block `to + 1`'s header.
//! 2. The intent file [`ROLLBACK_INTENT_FILE`] — `{to, step, rebuilt state}`, a framed record
//!    with a crc32 — is written to a temporary name, fsynced, renamed into place and the
//!    home directory fsynced: durable before any database changes.
//! 3. Step `app`: the app rolls back to `to` ([`App::rollback_to`], one synced write), and its
//!    app hash is checked against the rebuilt state's. The intent is rewritten (same four
//!    operations) with step `stores`: from here on no app is needed to finish.
//! 4. Step `stores`: the block store is rolled back to `to` (top down, synced batches), then
//!    the state is written from the intent (one synced batch: the state at `to`, results and
//!    history above it removed).
//! 5. The intent file is removed and the directory fsynced.
//!
//! Why this order: the block store goes before the state so that no crash leaves a block
//! store one block above a rolled-back state, the shape the handshake takes for a per-block
//! crash and repairs by applying that block again (undoing the rollback); with the state
//! still above the block store, the handshake refuses instead. The state's rebuild needs
//! block `to + 1`, which step 4 removes: it is done in step 1 and kept in the intent. The app
//! goes first because only a caller that has the app can roll it back: once it is done,
//! [`Home::open`] finishes any interrupted rollback by itself (steps 4–5, all idempotent),
//! and before it is done `Home::open` refuses the home with [`Error::RollbackInterrupted`]
//! (rerunning [`rollback`] with the same target finishes it).
//!
//! Invariant: every file operation (intent create, write, sync, rename, remove, directory
//! fsync) goes through the home's [`FileSystem`], so a simulated one can cut the power at
//! each. Invariant: the intent file is durable before the first database write and removed
//! only after the last; while it exists no node starts on the home.

use std::sync::Arc;

use bytes::Bytes;

use crate::app::App;
use crate::chain::{Chain, ChainState, HistorySlot, StoredHistory};
use crate::db::Db;
use crate::error::{Error, Heights, Result, RollbackRefusal, hex};
use crate::home::{
    Home, Intent, Opaque, RebuiltState, Step, finish_stores, read_intent, write_intent,
};
use crate::node::{HandshakeCase, Observed, classify, observe};
use crate::store::{BlockStore, StateStore};

/// What [`rollback`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RollbackReport {
    /// The target height.
    pub to: u64,
    /// The heights found on disk when this call started (normalized as the handshake does).
    pub before: Heights,
    /// True when this call finished a rollback a crash had interrupted.
    pub finished_interrupted: bool,
    /// True when everything was already at or below `to`: nothing was written.
    pub nothing_to_do: bool,
    /// True when this call rolled the app back.
    pub app_rolled_back: bool,
    /// True when this call lowered the state.
    pub state_rolled_back: bool,
    /// Blocks this call removed from the block store.
    pub blocks_removed: u64,
}

fn stores<C: Chain>(home: &Home) -> Result<(BlockStore<C::Block>, StateStore<C>)> {
    Ok((
        BlockStore::open(home.block_store_db.clone() as Arc<dyn Db>)?,
        StateStore::open(home.state_db.clone() as Arc<dyn Db>),
    ))
}

/// The stores' loads a chain reads to rebuild a past state.
struct Stored<'a, C: Chain> {
    bs: &'a BlockStore<C::Block>,
    st: &'a StateStore<C>,
}

impl<C: Chain> StoredHistory<C> for Stored<'_, C> {
    fn block(&self, height: u64) -> Result<Option<C::Block>> {
        self.bs.load_block(height)
    }
    fn results(&self, height: u64) -> Result<Option<C::Results>> {
        self.st.load_results(height)
    }
    fn history(&self, slot: HistorySlot, height: u64) -> Result<Option<(u64, Bytes)>> {
        self.st.load_history(slot, height)
    }
}

/// Rolls `home` (opened with [`Home::open_for_rollback`]) and `app` (over the home's app
/// database) back to height `to`, or finishes a rollback to `to` that a crash interrupted.
///
/// `Ok`: the block store, the state and the app are durable at `to` or below (an app that
/// was behind stays behind: the handshake replays it), and the intent file is gone. `Err`
/// before the intent is written ([`Error::RollbackRefused`], [`Error::AppCannotRollBack`],
/// a read error): nothing was written. `Err` after: the intent stays; rerunning with the
/// same `to` finishes the rollback, and [`Home::open`] finishes or refuses it.
pub fn rollback<C: Chain>(
    home: &Home,
    app: &mut dyn App<C>,
    chain: &C,
    to: u64,
) -> Result<RollbackReport> {
    let (fs, dir) = (home.fs(), home.path());
    let (bs, st) = stores::<C>(home)?;
    let (state, observed) = observe(&bs, &st, app)?;
    let before = Heights {
        block_store_height: observed.block_store_height,
        state_height: observed.state_height,
        app_height: observed.app_height,
    };
    let mut report = RollbackReport {
        to,
        before,
        finished_interrupted: false,
        nothing_to_do: false,
        app_rolled_back: false,
        state_rolled_back: false,
        blocks_removed: 0,
    };
    let mut intent = match read_intent(fs, dir)? {
        Some(i) if i.to != to => {
            return Err(refused(
                to,
                before,
                RollbackRefusal::OtherInProgress { in_progress: i.to },
            ));
        }
        // The older tool lowered the state first: done, its block store step is left (and
        // the app's, should the app be above `to`); not done, it had written nothing but the
        // intent, which the new one replaces.
        Some(i) if i.legacy && st.height()? == to => {
            report.finished_interrupted = true;
            // Through the app step: a no-op unless the app is above `to`.
            Intent {
                to,
                step: Step::App,
                state_height_before: before.state_height,
                state: None,
                legacy: false,
            }
        }
        Some(i) if !i.legacy => {
            report.finished_interrupted = true;
            i
        }
        _ => {
            let Some(current) = state else {
                return Err(refused(to, before, RollbackRefusal::NoState));
            };
            let stored = Stored { bs: &bs, st: &st };
            match start(home, &*app, chain, &stored, &current, &observed, to)? {
                Some(intent) => intent,
                None => {
                    report.nothing_to_do = true;
                    return Ok(report);
                }
            }
        }
    };
    if intent.step == Step::App {
        report.app_rolled_back = app_step(home, app, &mut intent)?;
    }
    drop((bs, st));
    let bs = BlockStore::<Opaque>::open(home.block_store_db.clone() as Arc<dyn Db>)?;
    let (removed, lowered) = finish_stores(home, &bs, &intent)?;
    report.blocks_removed = removed;
    report.state_rolled_back = lowered;
    Ok(report)
}

/// [`Error::RollbackRefused`] for a rollback to `to` from the heights `before`.
fn refused(to: u64, before: Heights, reason: RollbackRefusal) -> Error {
    Error::RollbackRefused {
        to,
        heights: before,
        reason,
    }
}

/// Steps 1 and 2 of a new rollback: checks and plans it writing nothing, then writes its
/// intent durably. `None`: everything is at or below `to` already; nothing was written.
fn start<C: Chain>(
    home: &Home,
    app: &dyn App<C>,
    chain: &C,
    stored: &Stored<'_, C>,
    current: &C::State,
    observed: &Observed,
    to: u64,
) -> Result<Option<Intent>> {
    let before = Heights {
        block_store_height: observed.block_store_height,
        state_height: observed.state_height,
        app_height: observed.app_height,
    };
    let refuse = |reason| refused(to, before, reason);
    match classify(observed) {
        Err(reason) => return Err(refuse(RollbackRefusal::Unrepairable(reason))),
        Ok(HandshakeCase::FlushRollForward) => {
            return Err(refuse(RollbackRefusal::NeedsRepair {
                record: observed.record.map_or("none".into(), |r| r.to_string()),
            }));
        }
        Ok(_) => {}
    }
    let (b, s, a) = (
        before.block_store_height,
        before.state_height,
        before.app_height,
    );
    if to >= b && to >= s && to >= a {
        return Ok(None);
    }
    if to + 1 < stored.bs.base().max(1) {
        return Err(refuse(RollbackRefusal::BelowBase {
            base: stored.bs.base(),
        }));
    }
    if a > to {
        match app.rollback_floor()? {
            Some(lowest) if to >= lowest => {}
            lowest => {
                return Err(Error::AppCannotRollBack {
                    to,
                    app_height: a,
                    lowest,
                });
            }
        }
    }
    // Step 1: rebuild first: nothing is written if any input is missing.
    let new_state = if to < s {
        let rebuilt = chain
            .rebuild_state(current, to, stored)?
            .map_err(|m| refuse(RollbackRefusal::StateRebuild(m)))?;
        if rebuilt.height() != to {
            return Err(Error::Contract {
                what: "Chain::rebuild_state(..).height()",
                expected: to,
                found: rebuilt.height(),
            });
        }
        Some(RebuiltState {
            height: to,
            app_hash: rebuilt.app_hash(),
            initial_height: rebuilt.initial_height(),
            bytes: rebuilt.encode(),
        })
    } else {
        None
    };
    let intent = Intent {
        to,
        step: if a > to { Step::App } else { Step::Stores },
        state_height_before: s,
        state: new_state,
        legacy: false,
    };
    // Step 2: the intent, durable before any database changes: from here on every
    // crash leaves it, so Home::open and a rerun know a rollback is under way.
    // Crash: before this returns, no database has changed; after, the intent names the
    // rollback and every later step is finished by a rerun (or, past the app step, by
    // Home::open).
    write_intent(home.fs(), home.path(), &intent)?;
    tracing::info!(
        target: "flushpoint::rollback",
        to,
        block_store_height = b,
        state_height = s,
        app_height = a,
        "rollback started"
    );
    Ok(Some(intent))
}

/// Step 3: the app rolls back to the intent's target from its own undo log (it needs no
/// block), its app hash is checked against the rebuilt state's, and the intent moves to
/// step `stores`. Returns whether the app was rolled back by this call.
fn app_step<C: Chain>(home: &Home, app: &mut dyn App<C>, intent: &mut Intent) -> Result<bool> {
    let to = intent.to;
    let mut rolled_back = false;
    if app.durable()?.height > to {
        app.rollback_to(to)?;
        rolled_back = true;
    }
    let now = app.durable()?;
    if now.height > to {
        return Err(Error::Rollback(format!(
            "the app reports height {} after rolling back to {to}",
            now.height
        )));
    }
    if let Some(s) = &intent.state
        && now.height == to
        && to >= s.initial_height
        && now.app_hash != s.app_hash
    {
        return Err(Error::AppHashMismatch {
            height: to,
            expected: hex(&s.app_hash),
            got: hex(&now.app_hash),
        });
    }
    // The app is done: from here on Home::open finishes the rollback by itself.
    // Crash: before this write the intent says `app` (a rerun redoes the app's no-op
    // rollback); after it, `stores`.
    intent.step = Step::Stores;
    write_intent(home.fs(), home.path(), intent)?;
    Ok(rolled_back)
}
