//! The node's reads: heights, the state, app queries and blocks, each through a
//! [`ReadView`] — what block sync has applied (held writes included), or what a flush point
//! made durable, read from disk.
//!
//! Invariant: a [`ReadView::Durable`] read comes from the disk only, never from a held or
//! frozen window, and sees nothing above [`Node::durable_height`].
//! Invariant: nothing here writes (the durable view's database refuses writes).

use std::sync::Arc;

use bytes::Bytes;

use crate::app::App;
use crate::chain::{Chain, ChainBlock, ChainState};
use crate::db::{Batch, Db, Durability};
use crate::error::{Error, Result};
use crate::store::{BlockStore, StateStore};

use super::{DeferredWrites, Mode, Node, NodeDb};

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

impl<C: Chain> Node<C> {
    /// The height applied (held or durable).
    pub fn height(&self) -> u64 {
        self.state.height()
    }

    /// The height durable in all three databases.
    pub fn durable_height(&self) -> u64 {
        self.flush.durable_height()
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
        &self.flush.deferred
    }

    /// The memory the open window takes over the three databases, as the flush trigger
    /// counts it ([`super::FlushInputs::held_bytes`]: key and value bytes, replaced short
    /// values still kept, and [`super::HELD_KEY_BYTES`] per key).
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

    /// Key and value bytes of the open window in the block store, the state and the app.
    fn held_bytes(&self) -> [u64; 3] {
        [
            self.block_db.held_bytes(),
            self.state_db.held_bytes(),
            self.app.held_bytes(),
        ]
    }

    /// The memory the open window takes in the block store, the state and the app, as the
    /// flush trigger counts it ([`super::FlushInputs::held_bytes`]).
    pub(super) fn held_memory_each(&self) -> [u64; 3] {
        [
            self.block_db.held_memory(),
            self.state_db.held_memory(),
            self.app
                .held_store()
                .and_then(|s| s.held_memory())
                .unwrap_or_else(|| self.app.held_bytes()),
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
