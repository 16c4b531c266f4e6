//! The database layer: every `Db` honours one contract, redb files and the records in them
//! report damage as typed errors, and a failed write or fsync poisons instead of lying.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own (no global allocator, no process-wide
//! measurement or subscriber); a test that does is a target of its own (`tests/README.md`).
//!
//! Run one module: `cargo test --release --test db conformance::`.

#[path = "../support/mod.rs"]
mod support;

/// Every backend (memory, redb, journal keyspaces) against one contract and a `BTreeMap`
/// model; lying `Db`s rejected.
mod conformance;
/// `Error::Corrupt` reads as a sentence.
mod corrupt_display;
/// An embedder's record kinds are framed and checked like ours.
mod embedder_records;
/// Every error has a kind and keeps its source; a poisoned handle keeps the first kind.
mod error_kinds;
/// EIO at every `sync_data`, `write` and `set_len` of a redb run: poisoned, nothing retried.
mod fsync_failure;
/// `HoldingDb` equals a disk-plus-overlay model; lying `HoldingDb`s rejected.
mod holding_model;
/// Every stored record reports any damage as `Error::Corrupt`, never wrong data.
mod records_corruption;
/// A redb file is created atomically: at most a `.creating` leftover.
mod redb_create_atomic;
/// redb's verdict that bytes are damaged is `ErrorKind::Corrupt`.
mod redb_damaged_kind;
/// A flipped bit in a redb pair reads as `Error::Corrupt` naming database and key.
mod redb_pair_checksums;
