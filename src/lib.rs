//! # flushpoint
//!
//! The persistence layer a BFT chain node embeds: a block store that saves any block in one
//! atomic synced batch (one fsync), `HoldingDb` overlays that defer the block store's, the
//! state's and the application's writes during block sync and write them at flush points in
//! crash-safe order, and a start-up handshake that classifies what a crash left and repairs
//! it or refuses with the heights involved.
//!
//! Layers (dependencies point down): `codec` (keys, records) → `db` (the [`Db`] trait,
//! backends, counters) → stores ([`BlockStore`], [`StateStore`]).

#![deny(unsafe_code)]

mod app;
mod chain;
pub mod codec;
mod db;
mod error;
mod fs;
mod holding;
mod home;
mod node;
mod poison;
mod rollback;
pub(crate) mod store;
pub mod testing;
mod types;

pub use app::{App, AppInfo, KvApp, Tx, UNDO_RETENTION_BLOCKS};
pub use chain::{ChainSpec, Profile};
pub use db::{
    BackendCounters, BackendCounts, Batch, CountingBackend, CountingDb, Db, DbIter, Direction,
    Durability, Entry, KeyRange, MemoryDb, Op, RedbDb, RedbOptions, SyncCounters, SyncCounts,
    collect_range, fsync_dir,
};
pub use error::{
    BoxError, CorruptReason, Error, ErrorKind, Heights, PoisonCause, Result, RollbackRefusal, hex,
};
pub use fs::{
    DirFate, FileFate, FileSystem, FsBackend, FsFile, OpenMode, SimFile, SimFs, SimOp, SimStats,
    StdFile, StdFs, create_dir_all_durably,
};
pub use holding::{HeldStore, HeldWrite, HoldingDb};
pub use home::{HOME_FORMAT_VERSION, Home};
pub use node::{
    DeferredWrites, Event, EventKind, EventSink, FLUSH_BYTES_MAX, FLUSH_INTERVAL, FlushInputs,
    FlushPolicy, FlushReport, FlushTrigger, Genesis, HandshakeCase, HandshakeReport, Mode,
    NoEvents, Node, NodeDb, Observed, classify, observe,
};
pub use rollback::{ROLLBACK_INTENT_FILE, RollbackReport, pending_rollback, rollback};
pub use store::{BlockStore, HISTORY_CHECKPOINT_INTERVAL, PRUNE_BATCH_BLOCKS, StateStore};
pub use types::*;
