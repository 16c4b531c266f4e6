//! The block store and the state store: blocks contiguous and saved in one synced batch,
//! loaded back until pruned or rolled back, the first failed write poisoning; the state's
//! history loaded back and pruned, a prune cut anywhere reading as before or after.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own.
//!
//! Run one module: `cargo test --release --test store state_store_prune::`.

#[path = "../support/mod.rs"]
mod support;

/// A gap, a repeat, height 0, an incomplete part set or a wrong commit is refused.
mod block_store_contiguity;
/// What was saved loads back by height and hash until pruned or rolled back.
mod block_store_loads;
/// A part set that is not the block's own encoding is refused before anything is written.
mod block_store_part_set;
/// The first failed write poisons the block store.
mod block_store_poison;
/// A prune cut after it raised the base reads as the finished one.
mod block_store_prune_interrupted;
/// Rollback to exactly the base; a flush record kept or removed at its `to` height.
mod block_store_rollback_edges;
/// `save_block` is one synced batch and, on redb, one `sync_data`.
mod block_store_syncs_once;
/// The state, results and history load back against a model of the updates.
mod state_store_history;
/// A prune keeps every retained load; a cut at any of its writes reads as before or after.
mod state_store_prune;
