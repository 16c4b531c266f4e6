//! Crashes: a power cut at every write, every file-system operation and every byte of a
//! node's life — and again inside each recovery — reopens at or above every acknowledged
//! height, equal to the uncut run there; the ordering rules observed at the moment they
//! matter; the same checks on a second chain; the simulated disk they run on.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own. The long sweeps run CI's slice;
//! `FLUSHPOINT_FULL=1` runs them whole.
//!
//! Run one module: `cargo test --release --test crash power_cut_files:: -- --nocapture`.

#[path = "../support/mod.rs"]
mod support;

/// A crash at any write of `save_block`, `prune` or `rollback_to` leaves a block store that
/// opens and, repeated, equals the uncut run.
mod block_store_crash_points;
/// A node dropped in block sync without `stop` reopens at or above its durable height.
mod node_drop_without_stop;
/// Byte level: redb on a simulated disk cut at every `write`, `set_len` and `sync_data`.
mod power_cut_bytes;
/// Batch level: a cut after any synced write of block sync, the switch and consensus.
mod power_cut_every_step;
/// File-system level: a cut at every operation of creating a home and syncing it.
mod power_cut_files;
/// The same for a journal home.
mod power_cut_journal_home;
/// A cut at every operation of a rollback and of an open finishing it.
mod rollback_power_cut;
/// Crash-ordering rules, each observed at the moment it matters.
mod rules;
/// The power-cut sweep, the handshake repairs and the fsync counts on two chains.
mod second_chain;
/// The simulated machine of `support::disk` does what the crash suites assume.
mod sim_disk_model;
