//! Sorted run files (ADR 0014): an immutable file of ops in strictly increasing key order —
//! the newest op per key of one or more apply steps, a delete kept as a tombstone — read by
//! key with a bloom filter and a block index, or in key order either way, and merged
//! newest-first into a new run.
//!
//! * `format`: the file's bytes — its layout (also in `docs/FORMAT.md`), constants, and the
//!   encoding and checked decoding of each part;
//! * `bloom`: the filter over a run's keys;
//! * `writer`: [`RunWriter`], a run written op by op;
//! * `reader`: [`Run`], an open run and its point reads ([`Lookup`]);
//! * `iter`: a run's ops in a range, several runs merged newest first ([`MergedRuns`]).
//!
//! The journal engine writes one run per apply step of a keyspace indexed by runs, syncs it
//! before a checkpoint's manifest lists it, and reads the listed runs newest first
//! ([`MergedRuns`] for ranges).
//!
//! Invariant: opening and reading never panic on any bytes; a run whose checks fail is
//! [`Error::Corrupt`](crate::Error::Corrupt) naming the run (and the key being read), never
//! wrong bytes.
//! Invariant: this module never syncs on its own: a run is durable when its owner syncs it
//! ([`Run::sync_data`]; ADR 0014: before a manifest lists it).
//! Invariant: this module imports only the crate's db, error and fs layers and the journal's
//! unit byte helpers; never the engine.

mod bloom;
mod format;
mod iter;
mod reader;
#[cfg(test)]
mod test_support;
mod writer;

pub(super) use format::run_file_name;
pub(crate) use iter::MergedRuns;
pub(crate) use reader::{Lookup, Run};
pub use writer::RUN_BLOCK_BYTES;
pub(crate) use writer::RunWriter;
