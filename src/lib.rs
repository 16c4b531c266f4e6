//! # flushpoint
//!
//! The persistence layer a BFT chain node embeds: a block store that saves any block in one
//! atomic synced batch (one fsync), `HoldingDb` overlays that defer the block store's, the
//! state's and the application's writes during block sync and write them at flush points in
//! crash-safe order, and a start-up handshake that classifies what a crash left and repairs
//! it or refuses with the heights involved.
//!
//! # Layers
//!
//! Each module imports only from modules of its own layer or of the layers above it in this
//! table, lowest first (`tests/layers.rs` checks every file of `src/` against it):
//!
//! | layer | modules | what they are |
//! |---|---|---|
//! | 1 | `error`, `engine`, `sync`, `poison` | the error type and the engine names it carries; the lock and thread shim (loom); a handle's poisoning |
//! | 2 | `codec`, `aliasing` | keys and checksummed records (ADR 0001); byte-range aliasing checks |
//! | 3 | `fs` | files: the real file system, the simulated one, the copy-on-write scratch |
//! | 4 | `db` | the [`Db`] trait, its batch types, the memory and redb backends, counters |
//! | 5 | `journal`, `prefetch` | the journal engine (ADR 0008); prefetch workers (ADR 0010) |
//! | 6 | `holding` | [`HoldingDb`]: writes held in memory until a flush point |
//! | 7 | `types`, `chain`, `app` | the seam an embedder implements: [`Chain`], [`App`] |
//! | 8 | `store` | [`BlockStore`], [`StateStore`] |
//! | 9 | `home` | [`Home`]: a directory's databases on one engine, its `FORMAT` and lock |
//! | 10 | `node` | [`Node`]: block sync, flush points, consensus, the handshake |
//! | 11 | `rollback`, `verify` | [`rollback`](crate::rollback()), [`verify`](crate::verify()) of a home |
//! | 12 | `demo`, `testing` | the demo chain and app; test doubles |
//!
//! The engine is chain-agnostic: an embedder brings its own block, commit, state and
//! results types and its rules through [`Chain`] (ADR 0009), and its application through
//! [`App`]. [`demo`] is one implementation — a synthetic chain and a key-value app — that
//! the example below, the `flushpoint` tool, the tests and the benches use; the
//! `ledger_node` example is another, with its own encoding, hash function and app.
//!
//! # Example
//!
//! A node over three databases (in memory here; [`Home`] and [`Node::open_home`] give the
//! on-disk home, on the journal engine by default), block-syncing with deferred writes, then
//! committing in consensus:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Instant;
//! use flushpoint::demo::{ChainSpec, KvApp, Profile};
//! use flushpoint::{Db, FlushPolicy, HoldingDb, MemoryDb, NoEvents, Node, ReadView};
//!
//! let spec = ChainSpec::new(1, Profile::Light);
//! let app = KvApp::open(Arc::new(HoldingDb::new(
//!     Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
//! )))?;
//! let (mut node, report) = Node::open(
//!     Arc::new(MemoryDb::new("block store")),
//!     Arc::new(MemoryDb::new("state")),
//!     Box::new(app),
//!     spec.chain(),
//!     Box::new(NoEvents),
//! )?;
//! assert_eq!(report.height, 0);
//!
//! // Block sync: held in memory, durable at flush points.
//! node.start_block_sync(FlushPolicy::default(), Instant::now())?;
//! for _ in 0..20 {
//!     let (block, parts, seen_commit) = spec.next_block(node.state());
//!     node.sync_block(&block, &parts, &seen_commit, Instant::now())?;
//! }
//! assert_eq!(node.height(), 20);
//! // The switch to consensus is a flush point: everything applied is durable after it.
//! node.switch_to_consensus(Instant::now())?;
//! assert_eq!(node.durable_height(), 20);
//!
//! // Consensus: each block durable when `commit_block` returns.
//! let (block, parts, seen_commit) = spec.next_block(node.state());
//! node.commit_block(&block, &parts, &seen_commit)?;
//! assert_eq!(node.load_block(21, ReadView::Durable)?.map(|b| b.hash()), Some(block.hash()));
//! node.stop(Instant::now())?;
//! # Ok::<(), flushpoint::Error>(())
//! ```

#![deny(unsafe_code)]

mod aliasing;
mod app;
mod chain;
pub mod codec;
mod db;
pub mod demo;
mod engine;
mod error;
mod fs;
mod holding;
mod home;
mod journal;
mod node;
mod poison;
mod prefetch;
mod rollback;
pub(crate) mod store;
mod sync;
pub mod testing;
mod types;
mod verify;

pub use app::{App, AppInfo};
pub use chain::{
    Chain, ChainBlock, ChainCommit, ChainResults, ChainState, HistorySlot, HistoryValue,
    StoredHistory,
};
pub use db::{
    BackendCounters, BackendCounts, Batch, CountingBackend, CountingDb, Db, DbIter, DbWrapper,
    Direction, Durability, Entry, EntryRef, KeyRange, MemoryDb, Op, RedbDb, RedbOptions,
    SyncCounters, SyncCounts, UnitGroup, UnitMember, UnitPart, collect_range, fsync_dir,
    inside_guarded_redb_call, quiet_caught_redb_panics,
};
pub use error::{
    BoxError, CorruptReason, EnginePanic, Error, ErrorKind, Heights, PoisonCause, Result,
    RollbackRefusal, hex,
};
pub use fs::{
    DirFate, FileFate, FileSystem, FsBackend, FsFile, OpenMode, SCRATCH_BYTES_MAX, ScratchFs,
    SimFault, SimFile, SimFs, SimOp, SimStats, StdFile, StdFs, create_dir_all_durably,
};
pub use holding::{FrozenWindow, HeldStore, HeldWrite, HoldingDb};
pub use home::{
    HOME_ENGINE_DEFAULT, HOME_FORMAT_VERSION, Home, HomeEngine, HomeOptions, JOURNAL_DIR,
};
pub use home::{ROLLBACK_INTENT_FILE, pending_rollback};
pub use journal::{
    APPLY_BATCH_DELAY, APPLY_WHILE_SYNCING_BYTES_MIN, Applier, CHECKPOINT_BYTES,
    CHECKPOINT_INTERVAL, INDEX_CACHE_BYTES, INDEX_FILE, JournalCounts, JournalDb, JournalEngine,
    JournalOptions, JournalUsage, KEYSPACE_NAME_BYTES_MAX, KeyspaceIndex, KeyspaceOptions,
    KeyspaceUsage, MERGER_NICE_INCREMENT, MERGER_NICE_INCREMENT_MAX, OVERLAY_BYTES_MAX,
    PREPARED_UNITS_BELOW_BYTES, RUN_BLOCK_BYTES, RUNS_DIR, SEGMENT_BYTES,
    SEPARATE_VALUES_FROM_BYTES, SEPARATE_VALUES_MIN_BYTES, SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL,
    SPARE_SEGMENT_FILE, segment_file_name,
};
pub use node::{
    DeferredWrites, Event, EventKind, EventSink, FLUSH_BYTES_MAX, FLUSH_INTERVAL, FlushInputs,
    FlushPolicy, FlushReport, FlushTrigger, HELD_KEY_BYTES, HandshakeCase, HandshakeReport,
    HeldEvents, Mode, NoEvents, Node, NodeDb, Observed, ReadView, classify, observe,
};
pub use prefetch::{
    PREFETCH_BATCH_KEYS, PREFETCH_ENTRY_OVERHEAD_BYTES, PREFETCH_SESSION_BYTES_MAX,
    PREFETCH_SESSIONS_MAX, PREFETCH_WORKERS_DEFAULT, PrefetchPool, PrefetchSession, PrefetchSource,
    PrefetchStats,
};
pub use rollback::{RollbackReport, rollback};
pub use store::{
    BlockStore, HISTORY_CHECKPOINT_INTERVAL, PRUNE_BATCH_BLOCKS, STATE_PRUNE_BATCH_HEIGHTS,
    StatePruneReport, StateStore,
};
pub use types::*;
pub use verify::{Problem, VERIFY_PROBLEMS_MAX, VerifyCounts, VerifyReport, verify};
