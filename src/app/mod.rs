//! The application side: the [`App`] trait an application implements so its commits can be
//! held ([`crate::demo::KvApp`] is one implementation).
//!
//! Invariant: an app's `commit` writes through its own database handle; whether that write
//! is held or synced is the holding switch's business, not the app's.
//! Invariant: queries answer from the durable version; before the first durable commit
//! they are refused with `Error::NotYetDurable`.

use bytes::Bytes;

use crate::chain::Chain;
use crate::error::Result;
use crate::types::Hash;

/// An app's height and app hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct AppInfo {
    /// The last committed height (0: nothing committed).
    pub height: u64,
    /// The app hash after it.
    pub app_hash: Hash,
}

/// An application of chain `C` whose commits can be held during block sync.
///
/// The node calls, per block: `execute_block`, then (after saving the results) `commit`.
/// During block sync it calls `hold` once, and at each flush point `write_held`, after the
/// block store and the state are durable.
///
/// # Contract
///
/// The node checks what its crash argument needs from an implementation and, when it is
/// broken, returns [`crate::Error::Contract`] ([`crate::ErrorKind::Contract`]) instead of
/// panicking; the node is then poisoned and writes nothing past the broken call
/// (`tests/node/contracts.rs`):
/// - `commit` after `execute_block(h)` returns height `h`, and `committed()` then says `h`;
/// - after `hold` returned `true`, commits stay off the disk until `write_held`: `durable()`
///   stays at the last flush point's height;
/// - `write_held` returning `Ok` leaves `held_bytes() == 0` and `durable()` at
///   `committed()`'s height (with [`App::held_store`], the store's `write_frozen` likewise);
/// - after the handshake, `committed()` is at the state's height.
///
/// The node's side: it calls `hold` at most once per block sync, and `stop_holding` only
/// after a flush point's `write_held` returned `Ok` with nothing left held (a
/// [`crate::HoldingDb`] refuses `stop_holding` with writes held, with the same error). An
/// `Err` from `hold` poisons the node (whether the app holds is then unknown).
///
/// On databases of one unit group (ADR 0011: e.g. three keyspaces of one
/// [`crate::journal::JournalEngine`]) whose `held_store` is a member too, the app keeps holding in
/// consensus: `hold` is called once, at the first consensus block or block sync, and
/// `stop_holding` is not called; each consensus block is then committed held and written in
/// the node's unit (`held_store`'s frozen window), so `durable()` reaches its height when
/// `commit_block` returns. If `hold` returns `false` or the store is not a member,
/// `stop_holding` is called at once and consensus keeps the ordered path.
///
/// # Panics
///
/// The node does not panic on a broken contract. A panic inside an implementation's own
/// method unwinds through the node call that made it; on the flush thread (background flush
/// points) it is returned as an error and poisons the node.
pub trait App<C: Chain>: Send {
    /// Height and app hash of the last commit, held or durable.
    fn committed(&self) -> Result<AppInfo>;

    /// Height and app hash on disk.
    fn durable(&self) -> Result<AppInfo>;

    /// Executes `block` (at `committed().height + 1`) without committing it.
    fn execute_block(&mut self, block: &C::Block) -> Result<C::Results>;

    /// Commits the executed block; returns the new height and app hash.
    ///
    /// `Ok` when not holding: durable. When holding: durable after the next `write_held`.
    fn commit(&mut self) -> Result<AppInfo>;

    /// Starts holding commits. Returns false when this app cannot hold (it is then written
    /// per block, and flush points skip it).
    fn hold(&mut self) -> Result<bool>;

    /// Stops holding; nothing may be held (call `write_held` first).
    fn stop_holding(&mut self) -> Result<()>;

    /// Writes every held commit as one synced batch.
    ///
    /// `Ok`: durable at `committed().height`. `Err`: unknown; the app is poisoned.
    fn write_held(&mut self) -> Result<()>;

    /// Bytes the app holds (counted toward the flush-point memory trigger).
    fn held_bytes(&self) -> u64;

    /// The height at which the app halts, if any: a flush point is taken there.
    fn halt_height(&self) -> Option<u64>;

    /// Returns and clears the app's request for a flush point (e.g. it wrote a halt param).
    fn take_flush_request(&mut self) -> bool;

    /// Answers a query from durable state.
    fn query(&self, key: &[u8]) -> Result<Option<Bytes>>;

    /// Called by the node just before a flush point takes the app's held writes — before it
    /// freezes [`App::held_store`] (background flush points) and before
    /// [`App::write_held`] — on the node's thread, between blocks. The last moment to add
    /// held writes that belong to the window (e.g. records worth computing once per window
    /// rather than once per block). The default does nothing.
    fn prepare_flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// Called by [`crate::Node::prefetch_next`] with block N+1 before the node executes
    /// block N: the moment to start reading, in the background, the state `next` will read
    /// (e.g. queue its keys on a [`crate::prefetch::PrefetchSession`] that execution reads first), so
    /// the reads overlap block N's execution. Advisory: nothing may be written, and block
    /// N+1's execution must be correct whether or not it ran. The default does nothing.
    fn prefetch(&mut self, next: &C::Block) -> Result<()> {
        let _ = next;
        Ok(())
    }

    /// The app's held storage, when a flush thread may write it: the node then freezes the
    /// app's held writes between blocks and writes them from its flush thread after the block
    /// store and the state (background flush points, [`crate::FlushPolicy::background`]),
    /// while the app executes the next blocks into a new open window. `None` (the default): the
    /// node calls [`App::write_held`] on its own thread and flush points stay synchronous.
    fn held_store(&self) -> Option<std::sync::Arc<dyn crate::holding::HeldStore>> {
        None
    }

    /// The lowest height the app's durable state can be rolled back to now ([`App::rollback_to`]),
    /// or `None` when the app cannot roll back at all (the default).
    ///
    /// A rollback below the app's durable height is refused with
    /// [`crate::Error::AppCannotRollBack`] unless the target is at or above this height;
    /// [`crate::rollback`] asks before it writes anything.
    fn rollback_floor(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Rolls the app's durable state back to `height` (at or above
    /// [`App::rollback_floor`], at most the durable height; nothing may be held or executed
    /// and not committed) and returns its height and app hash there.
    ///
    /// `Ok`: durable at `height`, and a rerun is a no-op. `Err`: the durable state is at the
    /// old height or at `height`, never between (the rollback is one synced write). The
    /// default refuses with [`crate::Error::AppCannotRollBack`] and writes nothing.
    fn rollback_to(&mut self, height: u64) -> Result<AppInfo> {
        let app_height = self.durable()?.height;
        if height == app_height {
            return self.durable();
        }
        Err(crate::Error::AppCannotRollBack {
            to: height,
            app_height,
            lowest: None,
        })
    }
}
