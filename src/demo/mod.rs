//! The demo chain: one implementation of the [`crate::Chain`] seam, used by the
//! `flushpoint` tool, the tests and the benches (feature `demo`).
//!
//! A deterministic synthetic chain ([`ChainSpec`]) with a tendermint-like header (block hash
//! = sha256 of the header, transactions under the header's data hash), validator-set and
//! consensus-params histories, and [`KvApp`], a key-value state machine with a bounded undo
//! log. Nothing in the engine depends on it: the crate root names none of these types, and
//! an embedder brings its own ([`DemoChain`] is what it replaces; the `ledger_node` example
//! is a second chain).
//!
//! Invariant: the engine's modules import nothing from here (only their unit tests do):
//! this folder depends on the crate's seam (`Chain`, `App`, `HoldingDb`), never the other
//! way.

mod chain;
mod kv;
mod spec;
mod types;

pub use chain::{DemoChain, DemoHistory, Genesis};
pub use kv::{
    KvApp, PREFETCH_COLD_READ_NANOS, PREFETCH_PROBE_EVERY_BLOCKS, Tx, UNDO_RETENTION_BLOCKS,
};
pub use spec::{ChainSpec, Profile, account_key};
pub use types::{
    Block, BlockResults, Commit, ConsensusParams, Header, State, TxResult, TypedHistoryEntry,
    Validator, ValidatorSet, sha256,
};
