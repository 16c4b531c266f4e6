//! The node: flush points taken exactly when a trigger fires and written in order, the
//! fsyncs a block costs, the handshake's classification and repairs, reads that say which
//! version they see, an `App` that breaks its contract, and prefetch that never serves a
//! stale value.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own; the node's tests that do are
//! targets of their own (`held_memory`: a counting global allocator; `node_tracing`: a
//! process-wide `tracing` subscriber).
//!
//! Run one module: `cargo test --release --test node deferred_triggers::`.

#[path = "../support/mod.rs"]
mod support;

/// Each node call outside its mode, its reports' counts, a refused block.
mod api_edges;
/// Synced batches per block, exactly, in each mode; one `sync_data` each on redb.
mod consensus_per_block_fsyncs;
/// An `App` that breaks its contract is `Error::Contract`, never a panic.
mod contracts;
/// Background flush points write the synchronous ones' batches, in the same order.
mod deferred_background;
/// A flush point writes block store, then state, then app; a failure stops there.
mod deferred_flush_order;
/// A flush point is taken exactly when a trigger fires.
mod deferred_triggers;
/// Every shape over heights 0..=6 maps to the case ADR 0002's table gives it.
mod handshake_classifier_is_exhaustive;
/// Each crash shape of a real node on redb is repaired to the uncut run's state.
mod handshake_repairs;
/// Prefetch stays within its session and byte bounds.
mod prefetch_bounds;
/// A cancelled session's batches are never read; shutdown joins every worker.
mod prefetch_cancellation;
/// A prefetch session never returns a stale value.
mod prefetch_never_stale;
/// The chain a node builds is the same with prefetch on and off.
mod prefetch_node;
/// While writes are held, queries answer from the durable version.
mod queries_durable;
/// `ReadView::Held` sees held blocks, `ReadView::Durable` only what a flush point made durable.
mod read_views;
/// A whole node over memory: block sync, switch, consensus, stop, restart.
mod smoke;
