//! Regressions: what fuzzing and mutation testing found, pinned so it stays found — every
//! stored fuzz input replayed through its target's check, and the edges of the codec, the
//! redb backend and the chain seam that no property suite reached.
//!
//! Invariant: one module per property, each stating it in its own `//!`; shared helpers
//! only through `crate::support`.
//! Invariant: nothing here needs a process of its own.
//!
//! Run one module: `cargo test --release --test regressions fuzz_corpus::`.

#[path = "../support/mod.rs"]
mod support;

/// `rebuild_state`, history loads, rollback and stored blocks at the chain seam's edges.
mod chain_seam_edges;
/// The codec's documented bytes; the redb backend's creation, integrity check and counters.
mod codec_and_redb_edges;
/// Every stored input of `tests/fuzz_corpus/` passes its fuzz target's check.
mod fuzz_corpus;
