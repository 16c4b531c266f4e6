//! The journal engine: a synced unit is one `sync_data`, recovery keeps what was
//! acknowledged and refuses damage, a failed write or sync poisons every keyspace, and a
//! power cut or EIO at any file-system operation loses nothing acknowledged — alone and
//! under the node.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own; the journal's tests that do are
//! targets of their own (`journal_recovery_bounds`: peak RSS; `journal_merger_priority`: the
//! one merger thread of its process).
//!
//! Run one module: `cargo test --release --test journal eio::`.

#[path = "../support/mod.rs"]
mod support;

/// A large synced unit is applied while it is synced, committed only once durable.
mod apply_while_syncing;
/// Segments cut or lost below what the index applied are refused, nothing written.
mod damage;
/// One engine per journal directory, however it is reached (a symlink).
mod dir_lock;
/// EIO at every file-system operation of a journal's life and of its recovery.
mod eio;
/// A new index checks every pair and row it reads: a flipped value, key or row is Corrupt.
mod index_checksums;
/// One engine per journal directory: a second open is `Locked`.
mod lock;
/// The node on one journal: a power cut at every operation, exact sync counts.
mod node;
/// The unapplied units never hold much more than the overlay budget.
mod overlay_budget;
/// A failed journal sync poisons every keyspace and is never retried.
mod poison;
/// A power cut at every file-system operation of a journal's life, recovery cut again.
mod power_cut;
/// What recovery keeps, truncates and refuses on hand-made damage.
mod recovery;
/// A keyspace indexed by sorted runs: runs written, synced, listed, refused when damaged.
mod runs;
/// A synced unit costs exactly one `sync_data`; a buffered one none.
mod syncs_once;
/// Values kept in the journal read back through pointers; segments kept while pointed at.
mod values;
