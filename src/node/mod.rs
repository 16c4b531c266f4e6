//! The node-facing facade: the block store, the state store and the app, driven block by
//! block in block-sync mode (writes held, flushed at flush points) or consensus mode (each
//! block written as it comes), with the start-up handshake.
//!
//! Invariant: only the flush point and the handshake's repair write to more than one
//! database, and both write in the order block store → state → app, each step starting
//! after the previous one's sync returned `Ok` — or, when the databases are members of one
//! unit group (ADR 0011), a flush point writes the block store's, the state's and (when its
//! held store is a member) the app's windows as one unit, and so does a consensus block.
//! Invariant: an event fires only after its block is durable in all three databases, in
//! block order, at most once; blocks replayed by the handshake fire none.
//! Invariant: after any failed write the node is poisoned: every later call fails, and only
//! a restart (which runs the handshake) continues.
//! Invariant: an embedder's [`App`] that breaks its contract (a height it did not commit, a
//! held write `write_held` did not write) is reported as `Error::Contract` before the next
//! write, never by a panic; the node is poisoned.
//! Invariant: with background flush points at most one window is in flight (frozen, being
//! written by the flush thread in the same order and batches as a synchronous flush point);
//! its events fire on the node's thread once the thread returned `Ok`, and the next window
//! is frozen only after that.

mod deferred;
mod events;
mod flush_thread;
pub mod handshake;

pub use deferred::{
    DeferredWrites, FLUSH_BYTES_MAX, FLUSH_INTERVAL, FlushInputs, FlushPolicy, FlushReport,
    FlushTrigger, HELD_KEY_BYTES,
};
pub use events::{Event, EventKind, EventSink, HeldEvents, NoEvents};
pub use handshake::{HandshakeCase, Observed, classify};

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::app::{App, AppInfo};
use crate::chain::{Chain, ChainBlock, ChainState};
use crate::db::{Batch, Db, Durability, EntryRef, UnitGroup, UnitMember, UnitPart};
use crate::error::{Error, Heights, Result};
use crate::holding::{FrozenWindow, HeldStore, HoldingDb};
use crate::home::Home;
use crate::store::{BlockStore, StateStore};
use crate::types::PartSet;

/// A database handle as the node holds it.
pub type NodeDb = Arc<HoldingDb<Arc<dyn Db>>>;

/// How blocks are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Mode {
    /// Block sync: writes held, written at flush points.
    BlockSync,
    /// Consensus: per block, `save_block` (1 sync), results, app commit, state (4 in all).
    Consensus,
    /// The reference node's old path: consensus plus a second block-store sync (5 in all).
    Legacy,
}

/// What the handshake found and did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HandshakeReport {
    /// What it observed.
    pub observed: Observed,
    /// The case.
    pub case: HandshakeCase,
    /// Blocks replayed on the app only.
    pub app_replayed: u64,
    /// Blocks applied to app and state.
    pub applied: u64,
    /// The height all three databases are at afterwards.
    pub height: u64,
}

/// Which version of the node's data a read sees.
///
/// During block sync the node has applied blocks whose writes are still held in memory
/// (up to [`Node::height`]); only blocks up to [`Node::durable_height`] are on disk in all
/// three databases. Outside block sync both views are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadView {
    /// Everything applied, held writes included (up to [`Node::height`]). What block sync
    /// itself reads; a crash or a drop without [`Node::stop`] can still lose it.
    Held,
    /// What a flush point acknowledged (up to [`Node::durable_height`]), read from disk:
    /// what survives a crash. Queries and RPC read this version (ADR 0002).
    Durable,
}

/// A node's databases and app.
///
/// # Lifecycle
///
/// [`Node::open_home`] builds a node that owns its [`Home`]: the home stays locked while the
/// node lives, and a second open of it gets [`Error::HomeLocked`]; dropping the node
/// releases it. [`Node::open`] takes any databases; a [`Home`]'s databases keep its lock
/// alive on their own.
///
/// # Dropping without [`Node::stop`]
///
/// In block sync, dropping the node without `stop` loses what is held: the blocks, results,
/// state and app writes applied since the last flush point (heights
/// `durable_height() + 1..=height()`), and their events, which never fire. It never loses
/// what a flush point acknowledged: every block up to the last [`Node::durable_height`]
/// read before the drop is on disk, and the next open's handshake finds the home consistent
/// at that height (`tests/node_drop_without_stop.rs`). A background window in flight is
/// written to the end before the drop returns (it may leave the home one window above that
/// height, never below). In consensus mode nothing is held, so a drop loses nothing.
pub struct Node<C: Chain> {
    block_db: NodeDb,
    state_db: NodeDb,
    block_store: BlockStore<C::Block>,
    state_store: StateStore<C>,
    app: Box<dyn App<C>>,
    chain: C,
    state: C::State,
    mode: Mode,
    app_holds: bool,
    deferred: DeferredWrites,
    sink: Box<dyn EventSink>,
    poison: crate::poison::Poison,
    /// The app's held store when background flush points are on (see `start_block_sync`).
    app_store: Option<Arc<dyn HeldStore>>,
    /// The window the flush thread is writing (background flush points only).
    in_flight: Option<InFlight>,
    /// The thread that writes frozen windows, started at the first background flush point.
    flush_thread: flush_thread::FlushThread,
    /// The home the node owns (see [`Node::open_home`]), dropped after the databases above.
    home: Option<Home>,
    /// Set when the block store's and the state's databases are members of one unit group
    /// (ADR 0011): flush points and consensus blocks are written as units.
    unit: Option<NodeUnit>,
}

/// The stores of one unit: `(member name, store)`, in the node's order.
type UnitStores<'a> = Vec<(&'a str, &'a dyn HeldStore)>;

/// The node's unit group (ADR 0011).
struct NodeUnit {
    /// The block store's database's membership (the group and its member name).
    block_store: UnitMember,
    /// The state database's member name.
    state: String,
    /// Consensus blocks are written as one unit each: `None` until the first consensus
    /// block (or the switch to consensus) decides it; `Some(true)` once the app holds and
    /// its held store is a member of the group (every database then holds in consensus too,
    /// one block at a time).
    consensus: Option<bool>,
}

/// Writes the frozen windows of `stores` (each `(member name, store)`) as one unit of
/// `group`, then drops them from the stores. Returns the key and value bytes written.
fn write_unit(group: &dyn UnitGroup, stores: &[(&str, &dyn HeldStore)]) -> Result<u64> {
    let windows: Vec<Option<FrozenWindow>> = stores
        .iter()
        .map(|(_, s)| s.frozen_window())
        .collect::<Result<_>>()?;
    let mut entries: Vec<(&str, Box<dyn Iterator<Item = EntryRef<'_>> + '_>)> = stores
        .iter()
        .zip(&windows)
        .filter_map(|((name, _), w)| w.as_ref().map(|w| (*name, Box::new(w.entries()) as _)))
        .collect();
    let mut parts: Vec<UnitPart<'_, '_>> = entries
        .iter_mut()
        .map(|(name, it)| (*name, &mut **it as &mut dyn Iterator<Item = EntryRef<'_>>))
        .collect();
    // Crash: one unit. A cut before it is durable leaves none of the windows on disk, after
    // it every one (recovery keeps whole units only): never the state without its blocks,
    // never the app without the state.
    group.write_unit(&mut parts, Durability::Synced)?;
    drop(parts);
    drop(entries);
    let mut bytes = 0;
    for ((_, store), window) in stores.iter().zip(&windows) {
        if let Some(w) = window {
            bytes += store.frozen_written(w)?.bytes;
        }
    }
    Ok(bytes)
}

/// A window frozen at a background flush point, being written by the flush thread.
struct InFlight {
    from: u64,
    to: u64,
    trigger: FlushTrigger,
    /// The window's events, fired once the thread returned `Ok`.
    events: HeldEvents,
    started: Instant,
    handle: flush_thread::FlushTicket,
}
/// Both flush points' blocks as one report: `Some` means blocks `from + 1..=to` became
/// durable during the call that returns it.
fn merge_reports(a: Option<FlushReport>, b: Option<FlushReport>) -> Option<FlushReport> {
    match (a, b) {
        (Some(a), Some(b)) => Some(FlushReport {
            trigger: b.trigger,
            from: a.from.min(b.from),
            to: a.to.max(b.to),
            bytes: a.bytes + b.bytes,
            duration: a.duration + b.duration,
            loop_wait: a.loop_wait + b.loop_wait,
            flush_points: a.flush_points + b.flush_points,
        }),
        (a, b) => a.or(b),
    }
}

impl<C: Chain> std::fmt::Debug for Node<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("height", &self.state.height())
            .field("mode", &self.mode)
            .finish()
    }
}

/// Reads what the handshake looks at, normalized, without changing anything.
pub fn observe<C: Chain>(
    block_store: &BlockStore<C::Block>,
    state_store: &StateStore<C>,
    app: &dyn App<C>,
) -> Result<(Option<C::State>, Observed)> {
    let state = state_store.load_state()?;
    let empty = state
        .as_ref()
        .map_or(0, |s| s.initial_height().saturating_sub(1));
    let norm = |h: u64| if h == 0 { empty } else { h };
    let observed = Observed {
        block_store_height: norm(block_store.height()),
        state_height: state.as_ref().map_or(0, |s| s.height()),
        app_height: norm(app.durable()?.height),
        record: block_store.load_flush_record()?,
    };
    Ok((state, observed))
}

impl<C: Chain> Node<C> {
    /// Opens the node over its databases, runs the handshake (repairing what a crash left,
    /// or refusing with the heights), and returns it in consensus mode (call
    /// [`Node::start_block_sync`] to hold writes).
    pub fn open(
        block_store_db: Arc<dyn Db>,
        state_db: Arc<dyn Db>,
        app: Box<dyn App<C>>,
        chain: C,
        sink: Box<dyn EventSink>,
    ) -> Result<(Node<C>, HandshakeReport)> {
        let genesis_id = chain.genesis_id();
        if chain.genesis_state([0; 32]).initial_height() == 0 {
            return Err(Error::InvalidInput(
                "the genesis initial height must be at least 1".into(),
            ));
        }
        let block_db: NodeDb = Arc::new(HoldingDb::new(block_store_db));
        let state_db: NodeDb = Arc::new(HoldingDb::new(state_db));
        let block_store = BlockStore::open(block_db.clone() as Arc<dyn Db>)?;
        let state_store = StateStore::open(state_db.clone() as Arc<dyn Db>);
        let (state, observed) = observe(&block_store, &state_store, &*app)?;
        // Another chain's home is refused before anything is written or repaired.
        match state_store.load_genesis_hash()? {
            Some(stored) if stored != genesis_id => {
                return Err(Error::GenesisMismatch {
                    stored: crate::hex(&stored),
                    given: crate::hex(&genesis_id),
                });
            }
            _ => {}
        }
        let genesis_recorded = state_store.load_genesis_hash()?.is_some();
        let (state, case) = match state {
            None => {
                if block_store.height() != 0 || app.durable()?.height != 0 {
                    tracing::error!(
                        target: "flushpoint::handshake",
                        block_store_height = block_store.height(),
                        state_height = 0u64,
                        app_height = app.durable()?.height,
                        record = %fmt_record(observed.record),
                        reason = "blocks or app state exist but no state was saved",
                        "handshake refused the home; nothing was changed on disk"
                    );
                    return Err(Error::Inconsistent {
                        heights: Heights {
                            block_store_height: block_store.height(),
                            state_height: 0,
                            app_height: app.durable()?.height,
                        },
                        record: fmt_record(observed.record),
                        reason: "blocks or app state exist but no state was saved".into(),
                    });
                }
                let s = chain.genesis_state(app.committed()?.app_hash);
                // The genesis state and its hash in one synced batch.
                state_store.save_genesis(&s, &genesis_id)?;
                (s, HandshakeCase::Fresh)
            }
            Some(s) => {
                let case = classify(&observed).map_err(|reason| {
                    tracing::error!(
                        target: "flushpoint::handshake",
                        block_store_height = observed.block_store_height,
                        state_height = observed.state_height,
                        app_height = observed.app_height,
                        record = %fmt_record(observed.record),
                        reason,
                        "handshake refused the home; nothing was changed on disk"
                    );
                    Error::Inconsistent {
                        heights: Heights {
                            block_store_height: observed.block_store_height,
                            state_height: observed.state_height,
                            app_height: observed.app_height,
                        },
                        record: fmt_record(observed.record),
                        reason: reason.into(),
                    }
                })?;
                // A home created before the genesis record existed: record it now, once
                // the shape is accepted (a refusal writes nothing).
                if !genesis_recorded {
                    tracing::info!(
                        target: "flushpoint::handshake",
                        "recording the genesis hash of a home created before the record existed"
                    );
                    state_store.save_genesis_hash(&genesis_id)?;
                }
                (s, case)
            }
        };
        tracing::info!(
            target: "flushpoint::handshake",
            case = case.name(),
            block_store_height = observed.block_store_height,
            state_height = observed.state_height,
            app_height = observed.app_height,
            record = %fmt_record(observed.record),
            "handshake classified the home"
        );
        let flushed = state.height();
        let unit = match (block_db.unit_member(), state_db.unit_member()) {
            (Some(b), Some(s)) if b.same_group(&s) && b.name != s.name => Some(NodeUnit {
                block_store: b,
                state: s.name,
                consensus: None,
            }),
            _ => None,
        };
        let mut node = Node {
            block_db,
            state_db,
            block_store,
            state_store,
            app,
            chain,
            state,
            mode: Mode::Consensus,
            app_holds: false,
            deferred: DeferredWrites::new(FlushPolicy::default(), flushed, Instant::now()),
            sink,
            poison: crate::poison::Poison::default(),
            app_store: None,
            in_flight: None,
            flush_thread: Default::default(),
            home: None,
            unit,
        };
        let report = node.repair(observed, case)?;
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
        node.deferred.flushed_height = node.state.height();
        Ok((node, report))
    }

    /// Opens the node over the databases of `home`, as [`Node::open`] does, and keeps the
    /// home: it stays locked until the node is dropped (or stopped), so a second
    /// [`Home::open`] of the same directory — from this process or another — fails with
    /// [`Error::HomeLocked`] ([`crate::ErrorKind::Locked`]) meanwhile.
    ///
    /// `app` builds the application over the home's app database.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use flushpoint::demo::{ChainSpec, KvApp, Profile};
    /// use flushpoint::{Db, HoldingDb, Home, NoEvents, Node};
    ///
    /// let spec = ChainSpec::new(1, Profile::Light);
    /// let home = Home::open(std::path::Path::new("node-home"))?;
    /// let (node, _report) = Node::open_home(
    ///     home,
    ///     |app_db| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
    ///     spec.chain(),
    ///     Box::new(NoEvents),
    /// )?;
    /// assert!(Home::open(std::path::Path::new("node-home")).is_err()); // locked
    /// drop(node); // unlocks
    /// # Ok::<(), flushpoint::Error>(())
    /// ```
    ///
    /// `Err`: as [`Node::open`]; the home is closed (and unlocked) when this returns.
    pub fn open_home(
        home: Home,
        app: impl FnOnce(Arc<dyn Db>) -> Result<Box<dyn App<C>>>,
        chain: C,
        sink: Box<dyn EventSink>,
    ) -> Result<(Node<C>, HandshakeReport)> {
        let app = app(home.app_db.clone() as Arc<dyn Db>)?;
        let (mut node, report) = Node::open(
            home.block_store_db.clone(),
            home.state_db.clone(),
            app,
            chain,
            sink,
        )?;
        node.home = Some(home);
        Ok((node, report))
    }

    /// The home this node owns, when opened with [`Node::open_home`].
    pub fn home(&self) -> Option<&Home> {
        self.home.as_ref()
    }

    fn repair(&mut self, o: Observed, case: HandshakeCase) -> Result<HandshakeReport> {
        let (b, s, a) = (o.block_store_height, o.state_height, o.app_height);
        let mut report = HandshakeReport {
            observed: o,
            case,
            app_replayed: 0,
            applied: 0,
            height: s,
        };
        match case {
            HandshakeCase::Fresh | HandshakeCase::Consistent => {}
            HandshakeCase::AppBehind => {
                report.app_replayed = self.replay_app(a + 1, s)?;
            }
            HandshakeCase::BlockStoreAhead => {
                report.app_replayed = self.replay_app(a + 1, s)?;
                self.apply_stored(b)?;
                report.applied = 1;
            }
            HandshakeCase::StateBehindApp => {
                let block = self.load_stored_block(b)?;
                let results = self.state_store.load_results(b)?.ok_or_else(|| Error::NotFound {
                    db: self.state_db.name().to_string(),
                    what: format!("results of block {b}, needed to rebuild the state the app already committed"),
                })?;
                let committed = self.app.committed()?;
                // The shape says the app's durable height is B; an app reporting another
                // committed height would have its hash saved under the wrong block.
                contract(
                    "App::committed().height at the handshake (its durable height is B)",
                    b,
                    committed.height,
                )?;
                let next = self
                    .chain
                    .next_state(&self.state, &block, &results, committed.app_hash);
                self.state_store.save_state(&next)?;
                self.state = next;
                report.applied = 1;
            }
            HandshakeCase::FlushRollForward => {
                report.app_replayed = self.replay_app(a + 1, s)?;
                // Roll forward: the window's blocks are durable locally; apply them with the
                // state and app held, then write state, then app — steps 2 and 3 of the flush
                // point the crash interrupted. A crash here leaves the same shape again.
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
                self.state_db.stop_holding()?;
                report.applied = b - s;
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
        Ok(report)
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
                    expected: crate::hex(&expected),
                    got: crate::hex(&info.app_hash),
                });
            }
        }
        Ok(if from <= to { to - from + 1 } else { 0 })
    }

    fn apply_stored(&mut self, h: u64) -> Result<Vec<Event>> {
        let block = self.load_stored_block(h)?;
        self.apply(&block)
    }

    /// Checks that `block` follows the state: the engine's own rule (the next height), then
    /// the chain's ([`Chain::validate`]). Bad blocks are refused before anything is written,
    /// so they never poison the node.
    fn validate(&self, block: &C::Block) -> Result<()> {
        let h = block.height();
        let bad = |reason: String| Err(Error::InvalidBlock { height: h, reason });
        if Some(h) != self.state.height().checked_add(1) {
            return bad("height is not the state's next height".into());
        }
        match self.chain.validate(&self.state, block) {
            Ok(()) => Ok(()),
            Err(reason) => bad(reason),
        }
    }

    /// Checks `block` against the state, executes it, saves results, commits the app and
    /// saves the state — in that order (results before the app commits; state after).
    fn apply(&mut self, block: &C::Block) -> Result<Vec<Event>> {
        self.validate(block)?;
        self.apply_validated(block)
    }

    /// [`Node::apply`] for a block [`Node::save_checked`] has just validated against this
    /// same state (the state changes only in `apply_validated`, after the check): the data
    /// hash over every transaction is not computed twice per block.
    fn apply_validated(&mut self, block: &C::Block) -> Result<Vec<Event>> {
        debug_assert!(self.validate(block).is_ok(), "invariant: validated block");
        let h = block.height();
        let results = self.app.execute_block(block)?;
        // The results must be saved before the app commits: a crash after the commit rebuilds
        // the state from them (StateBehindApp).
        self.state_store.save_results(h, &results)?;
        let info = self.app.commit()?;
        // Before the state is saved: a state built on a height the app did not commit would
        // be durable past the broken contract.
        self.check_commit(h, info)?;
        let next = self
            .chain
            .next_state(&self.state, block, &results, info.app_hash);
        // The chain's contract: the state it builds is at the block's height with the app's
        // hash (the handshake's classification reads both back).
        contract("Chain::next_state(..).height()", h, next.height())?;
        if next.app_hash() != info.app_hash {
            return Err(Error::Contract {
                what: "Chain::next_state(..).app_hash() is the app's committed hash",
                expected: h,
                found: h,
            });
        }
        // The state is saved after the app commit: a crash before this line leaves the app
        // one ahead of the state, which the handshake repairs from the saved results.
        self.state_store.save_state(&next)?;
        self.state = next;
        Ok(self.chain.events(block, &results))
    }

    /// The app's side of `commit` for block `h`: it returned `h`, and `committed()` agrees.
    fn check_commit(&self, h: u64, info: AppInfo) -> Result<()> {
        contract("height returned by App::commit", h, info.height)?;
        contract(
            "App::committed().height after App::commit",
            info.height,
            self.app.committed()?.height,
        )
    }

    /// The app's durable height, normalized like the handshake's (an empty app is at the
    /// genesis state's height).
    fn app_durable_height(&self) -> Result<u64> {
        let h = self.app.durable()?.height;
        Ok(if h == 0 {
            self.state.initial_height().saturating_sub(1)
        } else {
            h
        })
    }

    /// Before a flush point F → F′ writes anything: the app committed the window, and an
    /// app that holds has nothing of it on disk yet (its `hold` held).
    fn check_app_window(&self, from: u64, to: u64) -> Result<()> {
        contract(
            "App::committed().height at a flush point",
            to,
            self.app.committed()?.height,
        )?;
        if self.app_holds {
            contract(
                "App::durable().height inside a held window (App::hold returned true)",
                from,
                self.app_durable_height()?,
            )?;
        }
        Ok(())
    }

    /// The app's held store and its member name, when the app holds and its store is a
    /// member of the node's unit group: its window then joins the node's units.
    fn app_unit_store(&self) -> Option<(String, Arc<dyn HeldStore>)> {
        if !self.app_holds {
            return None;
        }
        let store = self.app.held_store()?;
        let name = self.unit_member_name(&*store)?;
        Some((name, store))
    }

    /// `store`'s member name when it is a member of the node's unit group.
    fn unit_member_name(&self, store: &dyn HeldStore) -> Option<String> {
        let unit = self.unit.as_ref()?;
        let member = store.unit_member()?;
        member.same_group(&unit.block_store).then_some(member.name)
    }

    /// The stores of one unit, in the node's order: block store, state, then the app's when
    /// it is a member (`app`).
    fn unit_stores<'a>(
        &'a self,
        app: Option<&'a (String, Arc<dyn HeldStore>)>,
    ) -> Option<(&'a dyn UnitGroup, UnitStores<'a>)> {
        let unit = self.unit.as_ref()?;
        let mut stores: UnitStores<'_> = vec![
            (&unit.block_store.name, &*self.block_db as &dyn HeldStore),
            (&unit.state, &*self.state_db as &dyn HeldStore),
        ];
        if let Some((name, store)) = app {
            stores.push((name, &**store));
        }
        Some((&*unit.block_store.group, stores))
    }

    /// Whether consensus blocks are written as one unit each, deciding it at the first call
    /// in consensus mode: the app must hold ([`App::hold`]) and its held store be a member of
    /// the node's group; then every database holds, one block at a time. Otherwise (or
    /// without a group) consensus blocks take the ordered path.
    fn consensus_units(&mut self) -> Result<bool> {
        if self.mode != Mode::Consensus {
            return Ok(false);
        }
        let Some(unit) = &self.unit else {
            return Ok(false);
        };
        if let Some(decided) = unit.consensus {
            return Ok(decided);
        }
        // As at the start of block sync: the app first; an `Err` poisons the node before any
        // of its own databases holds.
        let r = self.app.hold();
        self.app_holds = self.poisoned(r)?;
        let joins = self.app_unit_store().is_some();
        if joins {
            let r = self.block_db.hold().and_then(|()| self.state_db.hold());
            self.poisoned(r)?;
        } else if self.app_holds {
            // It holds but cannot join: back to the ordered path (nothing is held yet).
            let r = self.app.stop_holding();
            self.poisoned(r)?;
            self.app_holds = false;
        }
        self.unit.as_mut().expect("checked above").consensus = Some(joins);
        Ok(joins)
    }

    fn check_poison(&self) -> Result<()> {
        self.poison.check("node")
    }

    fn poisoned<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && !self.poison.is_set()
        {
            tracing::error!(target: "flushpoint::node", error = %e, "node poisoned: restart it (the handshake checks and repairs the home)");
            self.poison.set(e);
        }
        r
    }

    /// Starts block sync: every database holds its writes until a flush point.
    pub fn start_block_sync(&mut self, policy: FlushPolicy, now: Instant) -> Result<()> {
        self.check_poison()?;
        if self.mode == Mode::BlockSync {
            return Ok(());
        }
        // Outside block sync every applied block is durable, so the window starts empty.
        assert_eq!(
            self.deferred.flushed_height,
            self.state.height(),
            "invariant: block sync starts with nothing held"
        );
        // The app first: its `Err` leaves whether it holds unknown, so it poisons the node
        // before the node's own databases hold anything (a later `commit_block` must never
        // land in an overlay). The node calls `App::hold` once per block sync.
        // Consensus units keep every database holding between blocks (nothing held then):
        // block sync takes them over as they are.
        let holding = self
            .unit
            .as_ref()
            .is_some_and(|u| u.consensus == Some(true));
        if !holding {
            let r = self.app.hold();
            self.app_holds = self.poisoned(r)?;
            let r = self.block_db.hold().and_then(|()| self.state_db.hold());
            self.poisoned(r)?;
        }
        self.app_store = if policy.background && self.app_holds {
            self.app.held_store()
        } else {
            None
        };
        self.mode = Mode::BlockSync;
        self.deferred.policy = policy;
        // The interval counts from the start of block sync, not from the last flush.
        self.deferred.last_flush = now;
        Ok(())
    }

    /// Sets the per-block mode used outside block sync (`Consensus` or `Legacy`).
    pub fn set_per_block_mode(&mut self, mode: Mode) -> Result<()> {
        if self.mode == Mode::BlockSync || mode == Mode::BlockSync {
            return Err(Error::InvalidInput(
                "use start_block_sync / switch_to_consensus to enter or leave block sync".into(),
            ));
        }
        if mode == Mode::Legacy
            && self
                .unit
                .as_ref()
                .is_some_and(|u| u.consensus == Some(true))
        {
            return Err(Error::InvalidInput(
                "Legacy mode (a second block-store sync) has no meaning when consensus blocks are units (ADR 0011)".into(),
            ));
        }
        self.mode = mode;
        Ok(())
    }

    /// Lets the app start reading what block `next` will read ([`App::prefetch`]) before
    /// the node applies the block before it: call it with block N+1, then
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
        self.deferred.held_events.extend(&events);
        let held = self.held_memory();
        self.deferred.peak_held_bytes = self.deferred.peak_held_bytes.max(held);
        let taken = self.maybe_flush(now)?;
        Ok(merge_reports(done, taken))
    }

    /// Validates `block`, then saves it. A refused block (bad header, gap, incomplete parts)
    /// writes nothing and leaves the node usable; a failed write poisons it.
    fn save_checked(
        &mut self,
        block: &C::Block,
        parts: &PartSet,
        seen_commit: &C::Commit,
    ) -> Result<()> {
        self.validate(block)?;
        match self.block_store.save_block(block, parts, seen_commit) {
            Err(e) if self.block_store.is_poisoned() => self.poisoned(Err(e)),
            r => r,
        }
    }

    fn held_bytes(&self) -> [u64; 3] {
        [
            self.block_db.held_bytes(),
            self.state_db.held_bytes(),
            self.app.held_bytes(),
        ]
    }

    /// The memory the open window takes in the block store, the state and the app, as the
    /// flush trigger counts it ([`FlushInputs::held_bytes`]).
    fn held_memory_each(&self) -> [u64; 3] {
        [
            self.block_db.held_memory(),
            self.state_db.held_memory(),
            self.app
                .held_store()
                .and_then(|s| s.held_memory())
                .unwrap_or_else(|| self.app.held_bytes()),
        ]
    }

    /// The first height of the open window: above the window in flight, if any.
    fn window_start(&self) -> u64 {
        self.in_flight
            .as_ref()
            .map_or(self.deferred.flushed_height, |f| f.to)
    }

    fn maybe_flush(&mut self, now: Instant) -> Result<Option<FlushReport>> {
        let inputs = FlushInputs {
            since_last_flush: now.saturating_duration_since(self.deferred.last_flush),
            held_bytes: self.held_memory_each(),
            held_blocks: self.state.height() - self.window_start(),
            height: self.state.height(),
            halt_height: self.app.halt_height(),
            app_requested: self.app.take_flush_request(),
        };
        match self.deferred.policy.decide(&inputs) {
            // The interval bounds what a crash costs to redo; it does not justify stopping the
            // loop while a window is in flight: it is taken once that window is durable.
            Some(FlushTrigger::Interval) if self.in_flight.is_some() => Ok(None),
            Some(trigger) => self.flush_point(trigger, now),
            None => Ok(None),
        }
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

    /// True when flush points run on the flush thread.
    fn background_flush(&self) -> bool {
        self.deferred.policy.background
            && self.mode == Mode::BlockSync
            && self.app_holds
            && self.app_store.is_some()
    }

    /// Completes the window in flight if its thread finished (or, with `wait`, once it
    /// does): fires its events in block order and advances the durable height. A failed
    /// window poisons the node and fires nothing.
    fn finish_in_flight(&mut self, wait: bool) -> Result<Option<FlushReport>> {
        match &mut self.in_flight {
            None => return Ok(None),
            Some(f) => {
                if !wait && !f.handle.is_finished() {
                    return Ok(None);
                }
            }
        }
        let f = self.in_flight.take().expect("checked above");
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
        // Step 4, as in a synchronous flush point: every database is durable at `f.to`
        // (the thread returned `Ok` after the app's batch); only now do the window's events
        // fire, in block order, once.
        for e in f.events.iter() {
            self.sink.fire(&e);
        }
        self.deferred.flushed_height = f.to;
        self.deferred.flush_points += 1;
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

    /// Freezes the window F → F′ and hands it to a flush thread, which writes it in the
    /// synchronous flush point's order, each step one synced batch started after the
    /// previous returned `Ok`.
    fn submit_flush_point(&mut self, from: u64, to: u64, trigger: FlushTrigger) -> Result<()> {
        assert!(from < to, "invariant: flush heights increase");
        assert!(
            self.in_flight.is_none(),
            "invariant: at most one window in flight"
        );
        // Between blocks the block store is at `to`, unless blocks were saved around the
        // node (through `Node::block_store`): refused before anything is written.
        contract(
            "block store height at a flush point (a block saved around the node?)",
            to,
            self.block_store.height(),
        )?;
        self.check_app_window(from, to)?;
        if self.app_holds {
            self.app.prepare_flush()?;
        }
        let app_store = self
            .app_store
            .clone()
            .expect("invariant: background flush points have the app's held store");
        self.block_store
            .save_flush_record(&crate::types::FlushRecord { from, to })?;
        // Freezing is cheap and happens between blocks, so each frozen window holds exactly
        // blocks F+1..F′ of every database.
        self.block_db.freeze()?;
        self.state_db.freeze()?;
        app_store.freeze()?;
        let (block_db, state_db) = (self.block_db.clone(), self.state_db.clone());
        // With a unit group: its group and member names, and the app's name when it joins.
        let app_member = self.unit_member_name(&*app_store);
        let unit = self.unit.as_ref().map(|u| {
            (
                u.block_store.group.clone(),
                u.block_store.name.clone(),
                u.state.clone(),
                app_member,
            )
        });
        let handle = self.flush_thread.submit(Box::new(move || -> Result<u64> {
            if let Some((group, block_name, state_name, app_name)) = unit {
                // Crash: as `write_flush_point` with a group: one unit, then the app
                // alone when it is not a member.
                let mut stores: Vec<(&str, &dyn HeldStore)> =
                    vec![(&block_name, &*block_db), (&state_name, &*state_db)];
                if let Some(name) = &app_name {
                    stores.push((name, &*app_store));
                }
                let mut bytes = write_unit(&*group, &stores)?;
                if app_name.is_none() {
                    bytes += app_store.write_frozen()?.bytes;
                }
                // The window is durable; it stays in flight until the group has applied
                // it too (its writes leave the group's memory), so the next window
                // freezes only then: two windows in memory at most (ADR 0015).
                group.wait_applied()?;
                return Ok(bytes);
            }
            // Crash: the same three steps as `write_flush_point`, in the same order —
            // block store (with the flush record), then state, then app; a cut between
            // them leaves the shapes of ADR 0002's crash table.
            let mut bytes = block_db.write_frozen()?.bytes;
            bytes += state_db.write_frozen()?.bytes;
            bytes += app_store.write_frozen()?.bytes;
            Ok(bytes)
        }))?;
        tracing::debug!(
            target: "flushpoint::flush",
            from,
            to,
            trigger = ?trigger,
            "flush point submitted to the flush thread"
        );
        self.in_flight = Some(InFlight {
            from,
            to,
            trigger,
            events: std::mem::take(&mut self.deferred.held_events),
            started: Instant::now(),
            handle,
        });
        Ok(())
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
        let from = self.deferred.flushed_height;
        let to = self.state.height();
        if to == from {
            self.deferred.last_flush = now;
            return Ok(done);
        }
        if self.background_flush() && !trigger.waits_for_durability() {
            let r = self.submit_flush_point(from, to, trigger);
            self.poisoned(r)?;
            // The interval counts from the submission: the loop did not stop for the write.
            self.deferred.last_flush = Instant::now().max(now);
            return Ok(done);
        }
        // Planted bug (loom only, `tests/loom_flush.rs`): events fired before the writes.
        #[cfg(loom_bug_events_before_write)]
        for e in std::mem::take(&mut self.deferred.held_events).iter() {
            self.sink.fire(&e);
        }
        // The synchronous write starts now: the wait for the window in flight, if any, is
        // that window's report's.
        let write_start = Instant::now();
        let r = self.write_flush_point(from, to);
        let bytes = self.poisoned(r)?;
        // Step 4: every database is durable at `to`; the window's events fire, in block
        // order, once. Moving this above the writes would fire events for blocks a crash
        // can still lose.
        for e in std::mem::take(&mut self.deferred.held_events).iter() {
            self.sink.fire(&e);
        }
        self.deferred.flushed_height = to;
        // Planted bug (loom only): the timer's flush point leaves F stale, so the next flush
        // decision and window are computed from a height already flushed.
        #[cfg(loom_bug_stale_flush_decision)]
        if trigger == FlushTrigger::Interval {
            self.deferred.flushed_height = from;
        }
        self.deferred.flush_points += 1;
        let end = Instant::now();
        self.deferred.last_flush = end.max(now);
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

    fn write_flush_point(&mut self, from: u64, to: u64) -> Result<u64> {
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
        if self.app_holds {
            self.app.prepare_flush()?;
        }
        // Step 1: the block store's blocks F+1..F′ and the flush record, one synced batch.
        // It must come first: steps 2 and 3 are replayed from these blocks after a crash.
        self.block_store
            .save_flush_record(&crate::types::FlushRecord { from, to })?;
        let app_unit = self.app_unit_store();
        let mut bytes;
        if let Some((group, stores)) = self.unit_stores(app_unit.as_ref()) {
            // Steps 1–3 as one unit (ADR 0011): the block store, the state and, when it is a
            // member, the app — all durable or none.
            for (_, store) in &stores {
                store.freeze()?;
            }
            bytes = write_unit(group, &stores)?;
        } else {
            bytes = self.block_db.write_held()?.bytes;
            // Step 2: the state at F′ and the results F+1..F′. Only after step 1 is durable.
            bytes += self.state_db.write_held()?.bytes;
        }
        // Step 3: the app, last: an app ahead of the state could not be rolled forward.
        if app_unit.is_none() {
            bytes += self.app.held_bytes();
            if self.app_holds {
                self.app.write_held()?;
            }
        }
        debug_assert_eq!(
            [self.block_db.held_bytes(), self.state_db.held_bytes()],
            [0, 0],
            "invariant: the node's overlays are empty after a flush point"
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

    /// Takes a flush point and turns holding off: later blocks go through
    /// [`Node::commit_block`].
    pub fn switch_to_consensus(&mut self, now: Instant) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        if self.mode != Mode::BlockSync {
            return Ok(None);
        }
        let report = self.flush_point(FlushTrigger::SwitchToConsensus, now)?;
        let joins = self.app_unit_store().is_some();
        if let Some(unit) = &mut self.unit {
            // Consensus blocks are units when the app's window joins the flush point's:
            // every database keeps holding, one block at a time.
            unit.consensus = Some(joins);
            if joins {
                self.app_store = None;
                self.mode = Mode::Consensus;
                return Ok(report);
            }
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
        if self.app_holds {
            let r = self.app.stop_holding();
            self.poisoned(r)?;
        }
        self.mode = Mode::Consensus;
        Ok(report)
    }

    /// Commits a block in consensus mode: `save_block` (one synced batch), then results, the
    /// app commit and the state, each synced; then its events fire.
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
            let (from, to) = (self.deferred.flushed_height, self.state.height());
            let r = self.write_flush_point(from, to);
            self.poisoned(r)?;
            for e in &events {
                self.sink.fire(e);
            }
            self.deferred.flushed_height = to;
            return Ok(());
        }
        self.save_checked(block, parts, seen_commit)?;
        if self.mode == Mode::Legacy {
            // The reference node's old second block-store fsync (an empty key, synced).
            let mut b = Batch::new();
            b.put(Bytes::from_static(&[0x00]), Bytes::new());
            let r = self.block_db.write(&b, Durability::Synced);
            self.poisoned(r)?;
        }
        let r = self.apply_validated(block);
        let events = self.poisoned(r)?;
        for e in &events {
            self.sink.fire(e);
        }
        self.deferred.flushed_height = self.state.height();
        Ok(())
    }

    /// Stops cleanly: takes a flush point if in block sync, then closes the databases.
    pub fn stop(mut self, now: Instant) -> Result<Option<FlushReport>> {
        self.check_poison()?;
        let report = if self.mode == Mode::BlockSync {
            // Planted bug (loom only): stop asks the policy instead of flushing what is held.
            #[cfg(loom_bug_stop_asks_policy)]
            let report = self.maybe_flush(now)?;
            #[cfg(not(loom_bug_stop_asks_policy))]
            let report = self.flush_point(FlushTrigger::Stop, now)?;
            report
        } else {
            None
        };
        // Closing explicitly: dropping the handles closes the files (redb writes its clean
        // shutdown marker), before the caller can reopen the home.
        drop(self);
        Ok(report)
    }

    /// The height applied (held or durable).
    pub fn height(&self) -> u64 {
        self.state.height()
    }

    /// The height durable in all three databases.
    pub fn durable_height(&self) -> u64 {
        self.deferred.flushed_height
    }

    /// The current state, held writes included ([`ReadView::Held`]); [`Node::rpc_state`] is
    /// the durable one.
    pub fn state(&self) -> &C::State {
        &self.state
    }

    /// The state on disk, for RPC ([`ReadView::Durable`]). Refused before the first flush
    /// point of a fresh node.
    pub fn rpc_state(&self) -> Result<C::State> {
        let durable = StateStore::<C>::open(Arc::new(DiskOnly(self.state_db.clone())));
        let Some(s) = durable.load_state()? else {
            return Err(Error::NotYetDurable { what: "the state" });
        };
        if s.height() < s.initial_height() {
            return Err(Error::NotYetDurable { what: "the state" });
        }
        Ok(s)
    }

    /// An app query, answered from durable state.
    pub fn query(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.app.query(key)
    }

    /// The node's block store. Its reads serve held blocks ([`ReadView::Held`]: during block
    /// sync, blocks no flush point has made durable yet); for what survives a crash, read
    /// with [`ReadView::Durable`] through [`Node::load_block`] and its siblings.
    ///
    /// For reads: a block saved, pruned or rolled back through it bypasses the node, and the
    /// next flush point refuses with [`Error::Contract`] (the node is poisoned).
    pub fn block_store(&self) -> &BlockStore<C::Block> {
        &self.block_store
    }

    /// The highest block `view` sees: [`Node::height`] for [`ReadView::Held`],
    /// [`Node::durable_height`] for [`ReadView::Durable`].
    pub fn block_height(&self, view: ReadView) -> u64 {
        match view {
            ReadView::Held => self.block_store.height(),
            ReadView::Durable => self.durable_height(),
        }
    }

    /// The block at `height` as `view` sees it: `None` if it is not stored, pruned, or (for
    /// [`ReadView::Durable`]) above [`Node::durable_height`]. Durable reads come from the
    /// disk only, never from a held or frozen window.
    pub fn load_block(&self, height: u64, view: ReadView) -> Result<Option<C::Block>> {
        match self.blocks(view, height)? {
            Some(store) => store.get().load_block(height),
            None => Ok(None),
        }
    }

    /// The block with `hash` as `view` sees it (see [`Node::load_block`]).
    pub fn load_block_by_hash(
        &self,
        hash: &crate::types::Hash,
        view: ReadView,
    ) -> Result<Option<C::Block>> {
        let Some(store) = self.blocks(view, 0)? else {
            return Ok(None);
        };
        let store = store.get();
        match store.height_by_hash(hash)? {
            Some(h) if view == ReadView::Held || h <= self.durable_height() => store.load_block(h),
            _ => Ok(None),
        }
    }

    /// The seen commit of block `height` as `view` sees it (see [`Node::load_block`]).
    pub fn load_seen_commit(&self, height: u64, view: ReadView) -> Result<Option<C::Commit>> {
        match self.blocks(view, height)? {
            Some(store) => store.get().load_seen_commit(height),
            None => Ok(None),
        }
    }

    /// The block store as `view` sees it, or `None` when `height` is above what it sees.
    fn blocks(&self, view: ReadView, height: u64) -> Result<Option<BlocksView<'_, C::Block>>> {
        Ok(match view {
            ReadView::Held => Some(BlocksView::Held(&self.block_store)),
            ReadView::Durable if height > self.durable_height() => None,
            ReadView::Durable => Some(BlocksView::Durable(BlockStore::open(Arc::new(DiskOnly(
                self.block_db.clone(),
            )))?)),
        })
    }

    /// The state store.
    pub fn state_store(&self) -> &StateStore<C> {
        &self.state_store
    }

    /// The app.
    pub fn app(&self) -> &dyn App<C> {
        &*self.app
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Deferral counters (flush points, peak held bytes).
    pub fn deferred(&self) -> &DeferredWrites {
        &self.deferred
    }

    /// The memory the open window takes over the three databases, as the flush trigger
    /// counts it ([`FlushInputs::held_bytes`]: key and value bytes, replaced short values
    /// still kept, and [`HELD_KEY_BYTES`] per key).
    pub fn held_memory(&self) -> u64 {
        self.held_memory_each().iter().sum()
    }

    /// Bytes held in memory by the block store, the state and the app: the open window plus
    /// a window frozen for a flush (in flight, or kept after its write failed).
    pub fn held(&self) -> [u64; 3] {
        let open = self.held_bytes();
        let app_frozen = self.app.held_store().map_or(0, |s| s.frozen_bytes());
        [
            open[0] + self.block_db.frozen_bytes(),
            open[1] + self.state_db.frozen_bytes(),
            open[2] + app_frozen,
        ]
    }
}

/// A block store seen through a [`ReadView`].
enum BlocksView<'a, B: ChainBlock> {
    Held(&'a BlockStore<B>),
    /// A read-only store over the disk under the node's block store, opened for one read.
    Durable(BlockStore<B>),
}

impl<B: ChainBlock> BlocksView<'_, B> {
    fn get(&self) -> &BlockStore<B> {
        match self {
            BlocksView::Held(s) => s,
            BlocksView::Durable(s) => s,
        }
    }
}

/// A holding database seen from disk only: held and frozen windows are invisible, and
/// writes are refused (it serves [`ReadView::Durable`] reads).
#[derive(Debug)]
struct DiskOnly(NodeDb);

impl Db for DiskOnly {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.0.get_durable(key)
    }
    fn range(
        &self,
        range: crate::db::KeyRange,
        direction: crate::db::Direction,
    ) -> Result<crate::db::DbIter<'_>> {
        self.0.range_durable(range, direction)
    }
    fn write(&self, _: &Batch, _: Durability) -> Result<()> {
        Err(Error::InvalidInput(format!(
            "{}: the durable read view is read-only",
            self.0.name()
        )))
    }
}

/// Reports a durable flush point as a `tracing` event (target `flushpoint::flush`).
fn trace_flush_point(r: &FlushReport, background: bool) {
    tracing::info!(
        target: "flushpoint::flush",
        from = r.from,
        to = r.to,
        trigger = ?r.trigger,
        bytes = r.bytes,
        duration_ms = r.duration.as_secs_f64() * 1e3,
        loop_wait_ms = r.loop_wait.as_secs_f64() * 1e3,
        background,
        "flush point durable"
    );
}

impl<C: Chain> Drop for Node<C> {
    /// Dropping a node without [`Node::stop`] loses its held (never acknowledged) blocks; a
    /// window in flight is still written to the end, so the databases are closed when the
    /// drop returns and the home can be reopened at once.
    fn drop(&mut self) {
        if let Some(f) = self.in_flight.take() {
            let _ = f.handle.join();
        }
    }
}

/// `Err(Error::Contract)` unless an embedder's implementation reported `found == expected`.
fn contract(what: &'static str, expected: u64, found: u64) -> Result<()> {
    if found == expected {
        return Ok(());
    }
    tracing::error!(
        target: "flushpoint::node",
        what,
        expected,
        found,
        "an embedder's implementation broke its contract"
    );
    Err(Error::Contract {
        what,
        expected,
        found,
    })
}

fn fmt_record(r: Option<crate::types::FlushRecord>) -> String {
    r.map_or_else(|| "absent".to_string(), |r| r.to_string())
}
