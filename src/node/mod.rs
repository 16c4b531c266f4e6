//! The node: the block store, the state store and the app, driven block by block in
//! block-sync mode (writes held, written at flush points) or consensus mode (each block
//! durable as it comes), with the start-up handshake.
//!
//! One file per role: `open.rs` (opening, what the handshake observes), `recovery.rs`
//! (what happens at open as one decision table, and its repairs), `execute.rs` (a block
//! validated, saved and applied), `block_sync.rs` (holding and flush points),
//! `consensus.rs` (per-block commits and the switch), `write_path.rs` (the ordered-or-unit
//! choice and the one `write_window`), `scheduler.rs` (when to flush, the window in
//! flight), `reads.rs` (read views); `deferred.rs` (the flush policy), `handshake.rs` (the
//! classifier), `events.rs` and `flush_thread.rs`.
//!
//! A *window* is the writes of blocks F+1..F′ held until flush point F′; the words for its
//! states (open, frozen, in flight, held, unit) are defined once in [`crate::holding`].
//!
//! Invariant: only a window's write (`WritePath::write_window`) and the handshake's repair
//! write to more than one database, and both write in the order block store → state → app,
//! each step starting after the previous one's sync returned `Ok` — or, when the databases
//! are members of one unit group (ADR 0011), the block store's, the state's and (when its
//! held store is a member) the app's windows as one unit.
//! Invariant: the ordered-or-unit choice is made once, at open, and carried as a value.
//! Invariant: an event fires only after its block is durable in all three databases, in
//! block order, at most once; blocks replayed by the handshake fire none.
//! Invariant: after any failed write the node is poisoned: every later call fails, and only
//! a restart (which runs the handshake) continues.
//! Invariant: an embedder's [`App`] that breaks its contract (a height it did not commit, a
//! held write `write_held` did not write) is reported as `Error::Contract` before the next
//! write, never by a panic; the node is poisoned.

mod block_sync;
mod consensus;
mod deferred;
mod events;
mod execute;
mod flush_thread;
mod handshake;
mod open;
mod reads;
mod recovery;
mod scheduler;
mod write_path;

pub use deferred::{
    DeferredWrites, FLUSH_BYTES_MAX, FLUSH_INTERVAL, FlushInputs, FlushPolicy, FlushReport,
    FlushTrigger, HELD_KEY_BYTES,
};
pub use events::{Event, EventKind, EventSink, HeldEvents, NoEvents};
pub use handshake::{HandshakeCase, Observed, classify};
pub use open::observe;
pub use reads::ReadView;

use std::sync::Arc;

use crate::app::App;
use crate::chain::{Chain, ChainState};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::holding::HoldingDb;
use crate::home::Home;
use crate::store::{BlockStore, StateStore};

use scheduler::FlushScheduler;
use write_path::{AppShare, WritePath};

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
    /// A benchmark baseline, not a mode to run a node in: only with the `testkit` feature
    /// (the tool's `--mode legacy`, the benches and the tests).
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    Legacy,
}

impl Mode {
    /// Whether each consensus block syncs the block store a second time ([`Mode::Legacy`]'s
    /// extra write; never without the `testkit` feature).
    fn second_block_store_sync(self) -> bool {
        #[cfg(feature = "testkit")]
        if self == Mode::Legacy {
            return true;
        }
        false
    }
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
/// at that height (`tests/crash/node_drop_without_stop.rs`). A background window in flight is
/// written to the end before the drop returns (it may leave the home one window above that
/// height, never below). In consensus mode nothing is held, so a drop loses nothing.
pub struct Node<C: Chain> {
    block_db: NodeDb,
    state_db: NodeDb,
    block_store: BlockStore<C::Block>,
    state_store: StateStore<C>,
    app: Box<dyn App<C>>,
    chain: C,
    /// The chain's state after the last block applied (held or durable).
    state: C::State,
    mode: Mode,
    sink: Box<dyn EventSink>,
    poison: crate::poison::Poison,
    /// The app's share of a window, decided each time the app is asked to hold.
    app_share: AppShare,
    /// When to flush, the durable height and the window in flight.
    flush: FlushScheduler,
    /// The home the node owns (see [`Node::open_home`]), dropped after the databases above.
    home: Option<Home>,
    /// How windows reach the disk: ordered batches or one unit, chosen at open.
    path: WritePath,
}

impl<C: Chain> std::fmt::Debug for Node<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("height", &self.state.height())
            .field("mode", &self.mode)
            .finish()
    }
}

impl<C: Chain> Node<C> {
    fn check_poison(&self) -> Result<()> {
        self.poison.check("node")
    }

    /// Poisons the node with `r`'s error, if it is one, and passes `r` on.
    fn poisoned<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && !self.poison.is_set()
        {
            tracing::error!(target: "flushpoint::node", error = %e, "node poisoned: restart it (the handshake checks and repairs the home)");
            self.poison.set(e);
        }
        r
    }
}

impl<C: Chain> Drop for Node<C> {
    /// Dropping a node without [`Node::stop`] loses its held (never acknowledged) blocks; a
    /// window in flight is still written to the end, so the databases are closed when the
    /// drop returns and the home can be reopened at once.
    fn drop(&mut self) {
        if let Some(f) = self.flush.take_in_flight(true) {
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
