//! The home: what an open accepts and what it refuses writing nothing (another genesis, a
//! `FORMAT` its files do not match, the other engine), a journal home's life, rollback's
//! bounds, and `verify` finding each damage its table lists.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own; the home's tests that do are targets
//! of their own (`home_lock`: re-runs its own binary as a second process; `damaged_home`:
//! peak RSS).
//!
//! Run one module: `cargo test --release --test home verify::`.

#[path = "../support/mod.rs"]
mod support;

/// A home whose files do not match its `FORMAT` is `HomeDamaged`, nothing written.
mod format_mismatch;
/// A home checks its genesis on every open: another is `GenesisMismatch`.
mod genesis;
/// A journal home records its engine, refuses the other, rolls back.
mod journal;
/// Every refusal decided on a read-only open leaves every file byte for byte.
mod refusals_write_nothing;
/// Rollback's bounds through the library; each refusal leaves the databases as they were.
mod rollback_refusals;
/// `flushpoint::verify`: a clean home is clean; each check finds the damage it looks for.
mod verify;
