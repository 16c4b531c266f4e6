//! Block execution: a block validated against the state, saved in the block store,
//! executed by the app, its results saved, the app committed and the next state saved — the
//! same steps in every mode (held during block sync and in a consensus unit, each its own
//! synced write on the ordered consensus path), and the app's contract checked around them.
//!
//! Invariant: a block is validated before anything of it is written; a refused block
//! leaves the node usable.
//! Invariant: results are saved before the app commits, and the state after it: a crash
//! between them leaves a shape the handshake repairs (`BlockStoreAhead`, `StateBehindApp`).
//! Invariant: an embedder's broken contract is an `Error::Contract` before the state that
//! relies on it is saved, never a panic.

use crate::app::AppInfo;
use crate::chain::{Chain, ChainBlock, ChainState};
use crate::error::{Error, Result};
use crate::types::PartSet;

use super::events::Event;
use super::{Node, contract};

impl<C: Chain> Node<C> {
    /// Checks that `block` follows the state: the engine's own rule (the next height), then
    /// the chain's ([`Chain::validate`]). Bad blocks are refused before anything is written,
    /// so they never poison the node.
    pub(super) fn validate(&self, block: &C::Block) -> Result<()> {
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

    /// Validates `block`, then saves it. A refused block (bad header, gap, incomplete parts)
    /// writes nothing and leaves the node usable; a failed write poisons it.
    pub(super) fn save_checked(
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

    /// Checks `block` against the state, executes it, saves results, commits the app and
    /// saves the state — in that order (results before the app commits; state after).
    pub(super) fn apply(&mut self, block: &C::Block) -> Result<Vec<Event>> {
        self.validate(block)?;
        self.apply_validated(block)
    }

    /// [`Node::apply`] for a block [`Node::save_checked`] has just validated against this
    /// same state (the state changes only in `apply_validated`, after the check): the data
    /// hash over every transaction is not computed twice per block.
    pub(super) fn apply_validated(&mut self, block: &C::Block) -> Result<Vec<Event>> {
        debug_assert!(self.validate(block).is_ok(), "invariant: validated block");
        let h = block.height();
        let results = self.app.execute_block(block)?;
        // Crash: the results must be saved before the app commits: a crash after the commit
        // rebuilds the state from them (StateBehindApp).
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
        // Crash: the state is saved after the app commit: a crash before this line leaves
        // the app one ahead of the state, which the handshake repairs from the saved results.
        self.state_store.save_state(&next)?;
        self.state = next;
        Ok(self.chain.events(block, &results))
    }

    /// The app's side of `commit` for block `h`: it returned `h`, and `committed()` agrees.
    pub(super) fn check_commit(&self, h: u64, info: AppInfo) -> Result<()> {
        contract("height returned by App::commit", h, info.height)?;
        contract(
            "App::committed().height after App::commit",
            info.height,
            self.app.committed()?.height,
        )
    }

    /// The app's durable height, normalized like the handshake's (an empty app is at the
    /// genesis state's height).
    pub(super) fn app_durable_height(&self) -> Result<u64> {
        let h = self.app.durable()?.height;
        Ok(if h == 0 {
            self.state.initial_height().saturating_sub(1)
        } else {
            h
        })
    }

    /// Before a flush point F → F′ writes anything: the app committed the window, and an
    /// app that holds has nothing of it on disk yet (its `hold` held).
    pub(super) fn check_app_window(&self, from: u64, to: u64) -> Result<()> {
        contract(
            "App::committed().height at a flush point",
            to,
            self.app.committed()?.height,
        )?;
        if self.app_share.holds() {
            contract(
                "App::durable().height inside a held window (App::hold returned true)",
                from,
                self.app_durable_height()?,
            )?;
        }
        Ok(())
    }
}
