//! # flushpoint
//!
//! The persistence layer a BFT chain node embeds: a block store that saves any block in one
//! atomic synced batch (one fsync), [`HoldingDb`] overlays that defer the block store's,
//! the state's and the application's writes during block sync and write them at flush
//! points in crash-safe order, and a start-up handshake that classifies what a crash left
//! and repairs it or refuses with the heights involved.
//!
//! The engine is chain-agnostic: an embedder brings its own block, commit, state and
//! results types and its rules through [`Chain`] (ADR 0009), and its application through
//! [`App`]. `flushpoint::demo` (feature `demo`) is one implementation — a synthetic chain
//! and a key-value app — that the example below, the `flushpoint` tool, the tests and the
//! benches use; the `ledger_node` example is another, with its own encoding, hash function
//! and app.
//!
//! # Example
//!
//! A node over three databases (in memory here; [`Home`] and [`Node::open_home`] give the
//! on-disk home, on the journal engine by default), block-syncing with deferred writes, then
//! committing in consensus. The chain and app are the demo's, so the example is compiled
//! and run with the `demo` feature (the library's tests turn it on):
//!
#![cfg_attr(feature = "demo", doc = "```")]
#![cfg_attr(not(feature = "demo"), doc = "```ignore")]
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
//!
//! # The crate root
//!
//! | group | names |
//! |---|---|
//! | node | [`Node`], [`ReadView`], [`Mode`], [`FlushPolicy`], [`FlushTrigger`], [`FlushReport`], [`DeferredWrites`], [`HandshakeCase`], [`HandshakeReport`], [`Event`], [`EventKind`], [`EventSink`], [`NoEvents`] |
//! | home | [`Home`], [`HomeOptions`], [`HomeEngine`]; [`rollback()`] and [`RollbackReport`], [`verify()`] and [`VerifyReport`] |
//! | seam | [`Chain`], [`ChainBlock`], [`ChainCommit`], [`ChainState`], [`ChainResults`], [`StoredHistory`], [`HistorySlot`], [`HistoryValue`], [`Hash`](type@Hash), [`PartSet`]; [`App`], [`AppInfo`], [`HeldStore`] |
//! | storage | [`Db`], [`DbWrapper`], [`Batch`], [`Op`], [`Durability`], [`KeyRange`], [`Direction`], [`DbIter`], [`Entry`], [`EntryRef`], [`MemoryDb`], [`RedbDb`], [`RedbOptions`], [`HoldingDb`] |
//! | errors | [`Error`], [`ErrorKind`], [`Result`], [`BoxError`], [`CorruptReason`], [`Heights`], [`PoisonCause`], [`EnginePanic`], [`RollbackRefusal`] |
//!
//! # Modules
//!
//! | module | what it holds |
//! |---|---|
//! | [`node`] | the node's parts: the flush policy's inputs, held events, the handshake's classifier ([`node::classify`], [`node::observe`]) and limits |
//! | [`home`] | a home's file names, format version, default engine and pending rollback |
//! | [`journal`] | the journal engine (ADR 0008): [`journal::JournalEngine`], its options, counts, usage and tuning constants |
//! | [`db`] | the [`Db`] trait and its batch types, counters, unit groups (ADR 0011), the backends |
//! | [`holding`] | [`HoldingDb`] and the held windows a flush point writes |
//! | [`store`] | [`store::BlockStore`] and [`store::StateStore`], the node's stores over any [`Db`] |
//! | [`prefetch`] | prefetch workers and sessions (ADR 0010) |
//! | [`fs`] | the file layer: [`fs::FileSystem`], the real file system, the copy-on-write scratch |
//! | [`codec`] | keys and checksummed record framing (ADR 0001) |
//! | [`records`] | the engine's own records and their codec |
//! | [`verify`](mod@verify) | what [`verify()`] reports |
//! | `testing` | test doubles: the simulated file system, recording and failing databases (feature `testkit`) |
//! | `demo` | a synthetic chain and a key-value app (feature `demo`) |
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `testkit` | off | `flushpoint::testing` (the test doubles) and the benchmark baseline `Mode::Legacy` |
//! | `demo` | off | `flushpoint::demo` (the demo chain and app) |
//!
//! The tool (`cli/`), the benches, the examples, the fuzz crate and the library's own tests
//! turn both on; an embedder needs neither.
//!
//! # Layers
//!
//! Each module imports only from modules of its own layer or of the layers below it in this
//! table, lowest first, and no modules import each other in a circle (`tests/layers.rs`
//! checks every file of `src/` against it):
//!
//! | layer | modules | what they are |
//! |---|---|---|
//! | 0 | `counts`, `rng` | leaves that import nothing from the crate: the one counter shape (`counts!`); splitmix64 |
//! | 1 | `error`, `engine`, `sync`, `poison` | the error type and the engine names it carries; the lock and thread shim (loom); a handle's poisoning |
//! | 2 | `codec`, `aliasing` | keys and checksummed records (ADR 0001); byte-range aliasing checks |
//! | 3 | `fs` | files: the real file system, the simulated one, the copy-on-write scratch |
//! | 4 | `db` | the [`Db`] trait, its batch types, the memory and redb backends, counters |
//! | 5 | `journal`, `prefetch` | the journal engine (ADR 0008); prefetch workers (ADR 0010) |
//! | 6 | `holding` | [`HoldingDb`]: writes held in memory until a flush point |
//! | 7 | `types` | the records the stores keep: part sets, block metas, history entries |
//! | 8 | `chain`, `app` | the seam an embedder implements: [`Chain`], [`App`] |
//! | 9 | `store` | [`store::BlockStore`], [`store::StateStore`] |
//! | 10 | `home` | [`Home`]: a directory's databases on one engine, its `FORMAT` and lock |
//! | 11 | `node` | [`Node`]: block sync, flush points, consensus, the handshake |
//! | 12 | `rollback`, `verify` | [`rollback()`], [`verify()`] of a home |
//! | 13 | `demo`, `testing` | the demo chain and app; test doubles |

#![deny(unsafe_code)]

mod aliasing;
mod app;
mod chain;
pub mod codec;
mod counts;
pub mod db;
#[cfg(any(test, feature = "demo", doc))]
pub mod demo;
mod engine;
mod error;
pub mod fs;
pub mod holding;
pub mod home;
pub mod journal;
pub mod node;
mod poison;
pub mod prefetch;
#[cfg(any(test, feature = "testkit", feature = "demo", doc))]
mod rng;
mod rollback;
pub mod store;
mod sync;
#[cfg(any(test, feature = "testkit", doc))]
pub mod testing;
mod types;
pub mod verify;

/// The engine's own records — what the block store and the state store keep besides the
/// chain's bytes — and their codec: [`records::encode`] frames a [`records::Record`] under
/// its key, [`records::decode`] checks and reads it back (ADR 0001).
///
/// Invariant: `decode(encode(x)) == x` for every record, and `decode` of any bytes returns
/// a value or a [`CorruptReason`], never a panic.
/// Invariant: a façade over the private `types` module: re-exports only.
pub mod records {
    pub use crate::types::{
        BLOCK_PART_SIZE_BYTES, BlockMeta, BlockStoreState, CommitRecord, FlushRecord, GenesisHash,
        Hash, HeightValue, HistoryEntry, PartRecord, PartSet, Record, ResultsRecord, StateRecord,
        StateStoreBase, decode, encode,
    };
}

// The root names an embedder uses; the items of public modules among them are inlined
// (`doc(inline)`) so that the front page lists them with their summaries.
pub use app::{App, AppInfo};
pub use chain::{
    Chain, ChainBlock, ChainCommit, ChainResults, ChainState, HistorySlot, HistoryValue,
    StoredHistory,
};
#[doc(inline)]
pub use db::{
    Batch, Db, DbIter, DbWrapper, Direction, Durability, Entry, EntryRef, KeyRange, MemoryDb, Op,
    RedbDb, RedbOptions,
};
pub use error::{
    BoxError, CorruptReason, EnginePanic, Error, ErrorKind, Heights, PoisonCause, Result,
    RollbackRefusal,
};
#[doc(inline)]
pub use holding::{HeldStore, HoldingDb};
#[doc(inline)]
pub use home::{Home, HomeEngine, HomeOptions};
#[doc(inline)]
pub use node::{
    DeferredWrites, Event, EventKind, EventSink, FlushPolicy, FlushReport, FlushTrigger,
    HandshakeCase, HandshakeReport, Mode, NoEvents, Node, ReadView,
};
pub use rollback::{RollbackReport, rollback};
pub use types::{Hash, PartSet};
#[doc(inline)]
pub use verify::{VerifyReport, verify};
