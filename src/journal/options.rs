//! The journal's options and what it reports: who applies units ([`Applier`]), how a
//! keyspace is indexed ([`KeyspaceOptions`]), the engine's options ([`JournalOptions`]),
//! its counts ([`JournalCounts`]) and what it occupies on disk ([`JournalUsage`]).
//!
//! Invariant: plain data; the defaults are the constants of [`super::limits`].
//! Invariant: imports no other part of the engine but its limits.

use std::collections::BTreeMap;
use std::time::Duration;

use super::limits::{
    APPLY_BATCH_DELAY, APPLY_WHILE_SYNCING_BYTES_MIN, CHECKPOINT_BYTES, CHECKPOINT_INTERVAL,
    INDEX_CACHE_BYTES, MERGER_NICE_INCREMENT, OVERLAY_BYTES_MAX, PREPARED_UNITS_BELOW_BYTES,
    SEGMENT_BYTES,
};
use super::run::RUN_BLOCK_BYTES;
use crate::db::BackendCounts;

/// Who applies durable units to redb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Applier {
    /// A background thread (the node's setting): writes return after the append and sync.
    Background,
    /// The writing thread, right after its unit (deterministic: power-cut enumeration).
    Inline,
}

/// How a keyspace's applied entries are indexed ([`KeyspaceOptions::index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyspaceIndex {
    /// A table in the journal's redb index (the default).
    #[default]
    Tree,
    /// Sorted run files (ADR 0014): each apply step writes the keyspace's ops as one
    /// immutable run, synced before the checkpoint that lists it; a read asks the runs
    /// newest first (a bloom filter, then one block). For small values under random keys
    /// (an app's state), whose inserts into a B-tree larger than its cache read and
    /// rewrite most of its leaves every step. Each apply step adds a run; the newest runs
    /// are merged into one when their bytes reach the next older run's, so at most a few
    /// remain (with the background applier, on a merger thread beside the apply steps).
    Runs,
}

/// Options of a keyspace, fixed when it is created
/// ([`JournalEngine::keyspace_with`](super::JournalEngine::keyspace_with)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyspaceOptions {
    /// How its applied entries are indexed.
    pub index: KeyspaceIndex,
    /// Values of at least this many bytes are written once, to the journal: the index (the
    /// tree, or the runs) holds a pointer to the value's bytes in its unit (ADR 0013,
    /// ADR 0016 for runs), and the segment is kept while any pointer into it remains. For
    /// large values: block parts, pruned by height, or an app's large values. A segment
    /// comes back only when every value in it is gone (for runs: when merges have dropped
    /// every pointer into it, shadowed ones included), and nothing compacts a segment a
    /// few live values hold; the space between them is given back at once. `None` (the
    /// default): every value goes to the index.
    pub separate_values_from: Option<u32>,
}

impl KeyspaceOptions {
    /// Options keeping values of `bytes` or more in the journal.
    pub fn separating_values_from(bytes: u32) -> Self {
        KeyspaceOptions {
            separate_values_from: Some(bytes),
            ..KeyspaceOptions::default()
        }
    }

    /// Options indexing the keyspace by sorted runs ([`KeyspaceIndex::Runs`]).
    pub fn indexed_by_runs() -> Self {
        KeyspaceOptions {
            index: KeyspaceIndex::Runs,
            ..KeyspaceOptions::default()
        }
    }

    /// These options with [`KeyspaceOptions::index`] set.
    pub fn with_index(self, index: KeyspaceIndex) -> Self {
        KeyspaceOptions { index, ..self }
    }

    /// These options, with values of `bytes` or more kept in the journal
    /// ([`KeyspaceOptions::separate_values_from`]).
    pub fn with_values_separated_from(self, bytes: u32) -> Self {
        KeyspaceOptions {
            separate_values_from: Some(bytes),
            ..self
        }
    }
}

/// Options of [`JournalEngine::open`](super::JournalEngine::open); `Default` takes the
/// constant each field names, and the `with_…` methods set a field.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JournalOptions {
    /// See [`SEGMENT_BYTES`].
    pub segment_bytes: u64,
    /// See [`CHECKPOINT_BYTES`].
    pub checkpoint_bytes: u64,
    /// See [`CHECKPOINT_INTERVAL`] (used by [`Applier::Background`] only).
    pub checkpoint_interval: Duration,
    /// See [`OVERLAY_BYTES_MAX`].
    pub overlay_bytes_max: u64,
    /// See [`APPLY_BATCH_DELAY`] (used by [`Applier::Background`] only).
    pub apply_batch_delay: Duration,
    /// redb's page cache for the index, in bytes. See [`INDEX_CACHE_BYTES`].
    pub index_cache_bytes: usize,
    /// Who applies units.
    pub applier: Applier,
    /// Prepared segments: a segment for small synced units starts as `segment_bytes` of
    /// zeros written and synced ahead of time (by the applier thread, by the open of a new
    /// journal, or at the roll), so a unit's `sync_data` overwrites allocated, written
    /// blocks and changes no file size: no metadata to journal (half the cost of an
    /// appending `fdatasync` on ext4 on this machine class). Costs one extra write of each
    /// such segment's bytes, off the writer's path; such a segment file is `segment_bytes`
    /// long from the start. Which units count as small: `prepared_units_below_bytes`.
    /// Default: on.
    pub prepare_segments: bool,
    /// With `prepare_segments`: the synced units that take prepared segments are those
    /// under this many bytes (default [`PREPARED_UNITS_BELOW_BYTES`]); a larger or buffered
    /// unit that rolls the journal creates an empty segment instead, and a small synced
    /// unit that ends a run of
    /// [`SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL`](super::SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL)
    /// rolls on into the spare when one is ready. `u64::MAX`: every synced unit's roll
    /// takes a prepared segment; 0: none does.
    pub prepared_units_below_bytes: u64,
    /// Body bytes after which a run file's block closes (keyspaces indexed by runs; at
    /// least 1). Default [`RUN_BLOCK_BYTES`]: a point read costs one `pread` of one block.
    /// Tests use a few bytes so that a run has many blocks.
    pub run_block_bytes: usize,
    /// Synced units of at least this many bytes are applied while they are written and
    /// synced ([`Applier::Background`] only; default [`APPLY_WHILE_SYNCING_BYTES_MIN`];
    /// `u64::MAX`: never, every unit is applied once durable).
    pub apply_while_syncing_bytes_min: u64,
    /// How many nice steps below the opening thread the merger thread runs (default
    /// [`MERGER_NICE_INCREMENT`]; 0: the same priority; at most
    /// [`MERGER_NICE_INCREMENT_MAX`](super::MERGER_NICE_INCREMENT_MAX), else
    /// [`JournalEngine::open`](super::JournalEngine::open) returns
    /// [`Error::InvalidInput`](crate::Error::InvalidInput)). Linux only; elsewhere ignored.
    pub merger_nice_increment: u8,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            segment_bytes: SEGMENT_BYTES,
            checkpoint_bytes: CHECKPOINT_BYTES,
            checkpoint_interval: CHECKPOINT_INTERVAL,
            overlay_bytes_max: OVERLAY_BYTES_MAX,
            apply_batch_delay: APPLY_BATCH_DELAY,
            index_cache_bytes: INDEX_CACHE_BYTES,
            applier: Applier::Background,
            prepare_segments: true,
            prepared_units_below_bytes: PREPARED_UNITS_BELOW_BYTES,
            run_block_bytes: RUN_BLOCK_BYTES,
            apply_while_syncing_bytes_min: APPLY_WHILE_SYNCING_BYTES_MIN,
            merger_nice_increment: MERGER_NICE_INCREMENT,
        }
    }
}

impl JournalOptions {
    /// These options with [`JournalOptions::segment_bytes`] set.
    pub fn with_segment_bytes(self, segment_bytes: u64) -> Self {
        JournalOptions {
            segment_bytes,
            ..self
        }
    }

    /// These options with [`JournalOptions::checkpoint_bytes`] set.
    pub fn with_checkpoint_bytes(self, checkpoint_bytes: u64) -> Self {
        JournalOptions {
            checkpoint_bytes,
            ..self
        }
    }

    /// These options with [`JournalOptions::checkpoint_interval`] set.
    pub fn with_checkpoint_interval(self, checkpoint_interval: Duration) -> Self {
        JournalOptions {
            checkpoint_interval,
            ..self
        }
    }

    /// These options with [`JournalOptions::overlay_bytes_max`] set.
    pub fn with_overlay_bytes_max(self, overlay_bytes_max: u64) -> Self {
        JournalOptions {
            overlay_bytes_max,
            ..self
        }
    }

    /// These options with [`JournalOptions::apply_batch_delay`] set.
    pub fn with_apply_batch_delay(self, apply_batch_delay: Duration) -> Self {
        JournalOptions {
            apply_batch_delay,
            ..self
        }
    }

    /// These options with [`JournalOptions::index_cache_bytes`] set.
    pub fn with_index_cache_bytes(self, index_cache_bytes: usize) -> Self {
        JournalOptions {
            index_cache_bytes,
            ..self
        }
    }

    /// These options with [`JournalOptions::applier`] set.
    pub fn with_applier(self, applier: Applier) -> Self {
        JournalOptions { applier, ..self }
    }

    /// These options with [`JournalOptions::prepare_segments`] set.
    pub fn with_prepare_segments(self, prepare_segments: bool) -> Self {
        JournalOptions {
            prepare_segments,
            ..self
        }
    }

    /// These options with [`JournalOptions::prepared_units_below_bytes`] set.
    pub fn with_prepared_units_below_bytes(self, prepared_units_below_bytes: u64) -> Self {
        JournalOptions {
            prepared_units_below_bytes,
            ..self
        }
    }

    /// These options with [`JournalOptions::run_block_bytes`] set.
    pub fn with_run_block_bytes(self, run_block_bytes: usize) -> Self {
        JournalOptions {
            run_block_bytes,
            ..self
        }
    }

    /// These options with [`JournalOptions::apply_while_syncing_bytes_min`] set.
    pub fn with_apply_while_syncing_bytes_min(self, apply_while_syncing_bytes_min: u64) -> Self {
        JournalOptions {
            apply_while_syncing_bytes_min,
            ..self
        }
    }

    /// These options with [`JournalOptions::merger_nice_increment`] set.
    pub fn with_merger_nice_increment(self, merger_nice_increment: u8) -> Self {
        JournalOptions {
            merger_nice_increment,
            ..self
        }
    }
}

crate::counts::counts! {
    /// The engine's counts as it keeps them: one counter per [`JournalCounts`] field but the
    /// index's own, which its [`BackendCounters`](crate::db::BackendCounters) keep.
    pub(super) struct Counters =>
    /// The engine's I/O and work counts
    /// ([`JournalEngine::counts`](super::JournalEngine::counts)).
    pub struct JournalCounts {
        /// `sync_data` calls on segment files (one per synced unit, plus one per roll of a
        /// segment holding unsynced units, plus recovery's).
        journal_sync_data_calls: count,
        /// Directory fsyncs (one per segment created).
        dir_sync_calls: count,
        /// Units appended.
        units_written: count,
        /// Bytes appended to segments.
        journal_bytes_written: count,
        /// Durable redb commits (checkpoints).
        checkpoints: count,
        /// Apply steps: the applier's redb transactions, each holding every durable unit not
        /// yet applied when it began (`units_written / apply_steps` is the units per step).
        apply_steps: count,
        /// Of those, the steps begun while their unit was still being written and synced
        /// ([`JournalOptions::apply_while_syncing_bytes_min`]).
        steps_begun_while_syncing: count,
        /// Segments deleted by trims.
        segments_deleted: count,
        /// Times a writer found the unapplied units over `overlay_bytes_max` and waited (or, with
        /// unsynced units in the way, synced them; inline, applied them).
        overlay_waits: count,
        /// The most bytes the unapplied units held at once (after a unit entered the overlay).
        overlay_bytes_peak: peak,
        /// Spare segments prepared (zeros written and synced; ADR 0008, "Prepared segments").
        segments_prepared: count,
        /// Values applied as pointers into the journal rather than copied to the index
        /// (ADR 0013).
        values_kept_in_journal: count,
        /// Values read back from segments.
        values_read_from_journal: count,
        /// Times a checkpoint kept a segment it no longer needed for replay because the index
        /// still points at values in it.
        segments_kept_for_values: count,
        /// Bytes of held segments given back to the file system around the kept values
        /// (`FsFile::punch_hole`; ADR 0013).
        bytes_punched: count,
        /// Run files written (keyspaces indexed by runs; ADR 0014): by apply steps and by
        /// merges, a merge that a stop cancelled included (its file is deleted at once;
        /// [`JournalCounts::run_merges`] counts only the merges listed).
        runs_written: count,
        /// Their bytes.
        run_bytes_written: count,
        /// `sync_data` calls on run files (one per run, by the checkpoint that lists it).
        run_sync_data_calls: count,
        /// Merges of runs listed (each writes one run from several; ADR 0014).
        run_merges: count,
        /// Of those, the merges listed behind a run an apply step wrote while the merge was
        /// being written (the merger thread; ADR 0014, "Merges on their own thread").
        merges_behind_newer_runs: count,
        /// Run files unlinked after a checkpoint no longer listed them.
        runs_deleted: count,
    }
    with {
        /// The index file's own I/O (redb's).
        index: BackendCounts,
    }
}

/// What one keyspace's applied entries occupy ([`JournalUsage::keyspaces`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KeyspaceUsage {
    /// Entries in the index.
    pub entries: u64,
    /// Their keys' and values' bytes as written: the logical size.
    pub logical_bytes: u64,
    /// The index's pages for the keyspace: what redb's table statistics count as stored,
    /// metadata and fragmented bytes.
    pub index_bytes: u64,
    /// Values kept in the journal's segments, the index holding a pointer (ADR 0013).
    pub values_in_journal: u64,
    /// Their bytes (part of `logical_bytes`).
    pub values_in_journal_bytes: u64,
}

/// What the journal occupies on disk, and each keyspace in it
/// ([`JournalEngine::usage`](super::JournalEngine::usage)).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct JournalUsage {
    /// Bytes the index file occupies (allocated).
    pub index_file_bytes: u64,
    /// Bytes the segments below the checkpoint, kept for the values in them, occupy
    /// (allocated): with the dead space given back, those values to the 4 KiB block.
    pub held_segment_bytes: u64,
    /// Bytes the other segment files occupy (allocated): those at or past the checkpoint
    /// (whole units of every keyspace), the spare, and any doomed one not yet unlinked.
    pub other_segment_bytes: u64,
    /// Bytes the run files of keyspaces indexed by runs occupy (allocated; ADR 0014): the
    /// readable runs (each keyspace's share is its `index_bytes`).
    pub run_file_bytes: u64,
    /// Per keyspace, by name.
    pub keyspaces: BTreeMap<String, KeyspaceUsage>,
}
