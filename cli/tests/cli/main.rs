//! The `flushpoint` tool, run as the built binary on temporary homes: what each command
//! prints and exits with, what it refuses writing nothing, real `kill -9` crash tests, and
//! the tool's own module layers.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! (running the binary, killing it at a marker) only through `crate::cli_support`.
//! Invariant: the binary runs in a child process with `FLUSHPOINT_HOME` removed from its
//! environment, so no test depends on the caller's shell.
//!
//! Run one module: `cargo test --release -p flushpoint-cli --test cli crash_test::`.

#[path = "../cli_support/mod.rs"]
mod cli_support;

/// A closed stdout or stderr stops cleanly, exit 141, the home consistent.
mod closed_output;
/// A flag sum past `u64::MAX` is a usage error before anything is written.
mod count_overflow;
/// `crash-test --save-flush-kill-home` writes only a new or empty directory.
mod crash_save_home;
/// `crash-test` kills real `sync` processes at markers; no mismatch; replayable.
mod crash_test;
/// A damaged home's message says restore, not rerun.
mod damaged_home;
/// Each user error is one line saying what to do, exit 2 for usage, 1 otherwise.
mod errors;
/// `inspect` changes nothing; `rollback` refuses what it cannot follow.
mod inspect_rollback;
/// A journal home's `sync --json` counts each database's parts of the units.
mod journal_counts;
/// The tool on a journal home, and the kill loop on it.
mod journal_home;
/// The tool's modules point one way.
mod module_layers;
/// `sync` says how long its open took: check, recovery, handshake.
mod open_times;
/// Every refusal leaves every file of the home byte for byte.
mod refusals;
/// A run ends where asked; a rerun changes nothing; an interrupted run resumes.
mod sync_resume;
/// `verify` exits 1 naming damage and writes nothing.
mod verify;
