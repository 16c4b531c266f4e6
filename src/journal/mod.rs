//! The shared journal engine (ADR 0008, after ADR 0005 §1–2): several keyspaces written as
//! crc32-framed **units** appended to segment files, one `sync_data` per synced unit, with
//! redb as a checkpointed index the units are applied to in the background.
//!
//! * [`JournalEngine::keyspace`] gives a [`Db`](crate::Db) ([`JournalDb`]): the node runs on
//!   it unchanged. [`JournalEngine::commit`] writes batches of several keyspaces as **one**
//!   unit with one sync: atomic across keyspaces.
//! * Reads see the units not yet applied (an in-memory overlay per keyspace), then redb.
//! * The applier applies durable units to redb with `Durability::None`; a checkpoint (one
//!   `Immediate` commit recording `applied_seq`) runs every [`CHECKPOINT_BYTES`] or
//!   [`CHECKPOINT_INTERVAL`]; only then are whole segments below it deleted.
//! * Values of a separating keyspace ([`KeyspaceOptions`], the home's block store) at or
//!   above its threshold are written once: the index holds a pointer to their bytes in
//!   the unit, and a segment is kept while a pointer into it remains (ADR 0013).
//! * Recovery on open: redb at its last checkpoint, units past it replayed, a torn tail
//!   truncated, any other invalid unit refused with [`Error::Corrupt`](crate::Error) naming
//!   the segment and offset — decided before anything is written.
//!
//! The engine by role, one file each, each role a type owning its lock and its part of the
//! state; [`JournalEngine`] (`engine.rs`) is the façade, and owns the applier thread:
//!
//! * `segments.rs`: append, sync, roll, spare; the trim (punch, unlink). `Segments` owns
//!   the writer lock and the spare lock; `SegmentMap` its state.
//! * `applier.rs`: the queue of unapplied units, the apply step, the background loop.
//!   `UnitApplier` owns the apply lock; `Queue` its state. `apply.rs`: one step's index
//!   transaction.
//! * `checkpoint.rs`: the durable checkpoint, then the trim; `CheckpointClock` its state.
//! * `manifest.rs`: run files written, synced, unlinked; `Manifest` its state.
//! * `merger/`: merge plans, merges, installs. `Merger` owns the merger thread;
//!   `MergerState` its state.
//! * `reads.rs`: snapshots, point reads, ranges. `open.rs`: recovery at open (decide, then
//!   repair). `usage.rs`: disk usage.
//! * `state.rs`: what every role shares (`Core`): files, index, poison, counts, and the
//!   state lock over `State`, whose parts are the roles' (why one lock: its docs).
//! * `limits.rs`, `options.rs`, `format.rs`: bounds; options and counts; names on disk.
//!   `index.rs`: the index's layout, decided at open, and its checked pairs and rows (a
//!   crc32 with each, checked on every read).
//!   `unit.rs`, `overlay.rs`, `recovery.rs`, `run.rs`: unit framing, the overlay, the
//!   segment scan, run files.
//!
//! The locks, always taken in this order (never the reverse): the writer lock
//! (`Segments`) → the spare lock (`Segments`) → the apply lock (`UnitApplier`) → the
//! thread handles' locks (`Merger`, the engine's applier handle) → the state lock (`Core`).
//!
//! Invariant: the writer lock is held across a unit's append and sync, so units reach the
//! file, and the overlay, in seq order; it is the outermost lock.
//! Invariant: the apply lock orders apply steps, checkpoints, merge plans and installs and
//! keyspace records; functions that need it take its proof (`applier::ApplyTurn`).
//! Invariant: the state lock is the innermost: held briefly, never across file I/O, and
//! across a redb call only for a `begin_read` (a snapshot's, `usage`'s); no other engine
//! lock is taken while it is held.
//! Invariant: a unit is durable exactly when a `sync_data` of its segment returned `Ok`
//! after it was written; the first failed write or sync poisons the engine (the crate's one
//! `Poison`), never retried.
//! Invariant: only durable units are applied to redb, in seq order; redb's durable state is
//! always a prefix of the journal (all units ≤ `applied_seq`).
//! Invariant: this module never imports the store, node or app layers.

mod applier;
mod apply;
mod checkpoint;
mod engine;
mod format;
mod index;
mod limits;
mod manifest;
mod merger;
mod open;
mod options;
mod overlay;
mod reads;
mod recovery;
mod run;
mod segments;
mod state;
mod thread_priority;
mod unit;
mod usage;

pub use engine::{JournalDb, JournalEngine};
pub use format::{INDEX_FILE, RUNS_DIR, SPARE_SEGMENT_FILE, segment_file_name};
pub use limits::{
    APPLY_BATCH_DELAY, APPLY_WHILE_SYNCING_BYTES_MIN, CHECKPOINT_BYTES, CHECKPOINT_INTERVAL,
    INDEX_CACHE_BYTES, MERGER_NICE_INCREMENT, MERGER_NICE_INCREMENT_MAX, OVERLAY_BYTES_MAX,
    PREPARED_UNITS_BELOW_BYTES, SEGMENT_BYTES, SEPARATE_VALUES_FROM_BYTES,
    SEPARATE_VALUES_MIN_BYTES, SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL,
};
pub use options::{
    Applier, JournalCounts, JournalOptions, JournalUsage, KeyspaceIndex, KeyspaceOptions,
    KeyspaceUsage,
};
pub use run::RUN_BLOCK_BYTES;
pub use unit::KEYSPACE_NAME_BYTES_MAX;
