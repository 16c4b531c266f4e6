//! The journal's limits: every bound the engine works within, with its unit and why.
//!
//! The public ones are the defaults of [`JournalOptions`](super::JournalOptions); the
//! private ones are fixed. Measurements behind them are in `benches/compare/PERFORMANCE.md`.
//!
//! Invariant: constants only; related bounds are checked at compile time below.
//! Invariant: imports nothing but the unit format's sizes.

use std::time::Duration;

use super::unit;

/// Bytes after which the active segment is closed and a new one started. Why this bound:
/// trimming frees whole segments, so this is the granularity space comes back in; 64 MiB
/// is one checkpoint's worth of units, so a checkpoint can usually free a segment.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Applied bytes (keys and values) after which a checkpoint runs. Why this bound: it caps
/// what an open replays beyond the unapplied units ([`OVERLAY_BYTES_MAX`]; ~64 MiB of
/// units: well under a second of sequential read and redb inserts) and what the journal
/// holds past redb.
pub const CHECKPOINT_BYTES: u64 = 64 * 1024 * 1024;
/// Longest time between checkpoints while units are being applied. Why this bound: a quiet
/// node's replay on open and its journal's size stay bounded even when few bytes arrive.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);
/// Bytes (keys and values) of unapplied units above which writers wait for the applier.
/// Why this bound: the applier takes every durable unit in one step (ADR 0008), and at
/// scale a step's cost is mostly its sweep of the index's leaves, which grows little with
/// the units in it; four checkpoints' worth lets a step take about four flush windows when
/// the applier is behind, so the leaves are swept a quarter as often. It also bounds the
/// overlay's memory and what an open replays (at most this, one unit and a checkpoint's
/// worth). With [`INDEX_CACHE_BYTES`] it is faster at scale than a smaller overlay beside a
/// larger cache, at the same or a lower peak RSS.
pub const OVERLAY_BYTES_MAX: u64 = 4 * CHECKPOINT_BYTES;
/// How long the background applier lets a durable unit wait for others before applying it.
/// Why this bound: each apply step is one redb commit, whose CPU cost does not shrink with
/// the unit (a commit per consensus-block unit costs several times the block's append and
/// `fdatasync`); 20 ms gathers ~tens of blocks per commit, and a reader sees the overlay
/// meanwhile, so nothing waits on it.
pub const APPLY_BATCH_DELAY: Duration = Duration::from_millis(20);
/// The smallest synced unit the background applier begins to apply while the unit is
/// still being written and synced (ADR 0015, "Applied while it is synced"): its run files
/// and index inserts are made meanwhile, and the step's index commit waits until the unit
/// is durable and in the overlay. Why this bound: a flush window's unit (tens of MiB) is
/// applied while its window is in flight, where `write + sync` then `apply` took about as
/// long as a light window's execution; a consensus block's unit (10 KiB light, ~1.8 MiB
/// heavy) is left to the batching delay, which gathers many into one step.
pub const APPLY_WHILE_SYNCING_BYTES_MIN: u64 = 4 << 20;
/// How many nice steps below the thread that opens the engine the merger thread runs
/// (Linux: a nice value is per thread, and the kernel caps it at 19; elsewhere nothing
/// changes). Why: a merge only makes later reads cheaper, yet at an equal share it takes
/// CPU from the block loop whenever the loop, the flush thread and the applier keep every
/// core of a two-core machine busy. Lowered, the merger still runs whenever a core is
/// free; what it is late with is only more runs for a read to probe, and a merger three
/// times the usual run count behind makes the background applier wait for it (units stay
/// in the overlay, writers wait once it is full), so the files and probes stay bounded.
/// 19 takes the lowest priority.
pub const MERGER_NICE_INCREMENT: u8 = 19;
/// The largest
/// [`JournalOptions::merger_nice_increment`](super::JournalOptions::merger_nice_increment):
/// nice values go from -20 to 19.
pub const MERGER_NICE_INCREMENT_MAX: u8 = 39;
/// redb's page cache for the index, in bytes. Why this bound: the app's state is in sorted
/// runs (ADR 0014) and the parts and the app's large values in the journal (ADR 0013,
/// 0016), so the index holds the block store's and the state's small records and pointers:
/// an apply step appends to the right edges of their trees, and a node reads its last few
/// blocks and its state, so a cache of a few MiB holds what is hot; the rest is the OS page
/// cache's. 8 MiB peaks ~90 MB lower in RSS than 64 MiB on a 300k-block sync and is no
/// slower. An embedder whose own keyspaces are large trees read at random gains by raising
/// it (`index_cache_bytes`).
pub const INDEX_CACHE_BYTES: usize = 8 * 1024 * 1024;

/// Units of at least this many bytes, and buffered units, go to segments that are not
/// prepared: a roll for one creates an empty segment that grows, and leaves the spare for a
/// small synced unit. Why this bound: a prepared segment saves a synced unit's `sync_data`
/// one metadata write (the file's size), which matters to a consensus block of ~10–20 KB;
/// its zeros cost a second write of every byte the segment will hold. A flush point's unit
/// is tens of MiB, synced once, and a heavy block's `save_block` ~0.9 MB: beside their data
/// the metadata write is nothing, and the zeros are the cost (prepared zeros made heavy
/// `save_block`'s p99 ten times longer and doubled its bytes written). At 256 KiB the
/// metadata write a prepared segment saves (~0.065 ms) is under a tenth of the unit's own
/// write (~0.75 ms at a commodity SSD's speed).
pub const PREPARED_UNITS_BELOW_BYTES: u64 = 256 * 1024;

/// Small synced units in a row (this one counted) before one rolls early into the spare,
/// leaving a growing segment's room unused. Why: a spare's zeros pay off only over a run of
/// small synced units (consensus blocks); a small unit among large ones (a heavy chain's
/// empty block) that rolled into the spare would let the large units that follow fill it:
/// a segment of zeros written for one block's saving. Any unit of at least
/// [`PREPARED_UNITS_BELOW_BYTES`] starts the count again; small buffered units leave it as it
/// is. What it costs a node that switches from block sync to consensus: its first 3 blocks'
/// syncs append (~0.12 ms against ~0.055 ms over zeros).
pub const SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL: u32 = 4;

/// Bytes of zeros per write when a spare is prepared: one page. Why: the page cache sizes
/// its folios by the write that creates them; zeros written 1 MiB at a time leave 1 MiB
/// folios, and every unit's `sync_data` then writes back a whole folio (~75× a 10 KB unit).
/// Page-sized writes keep each unit's writeback to the pages it touched. 16,384 writes per
/// 64 MiB spare, off the writer's path.
pub(super) const ZERO_CHUNK_BYTES: u64 = 4096;

/// The smallest value a home's block store keeps in the journal rather than in the index
/// (ADR 0013). Why 1 KiB: a block part (up to 64 KiB) is written once, to the journal, and
/// the index holds a 25-byte pointer; below a kilobyte the value costs the index little
/// more than its pointer would, and a load saves a `pread`.
pub const SEPARATE_VALUES_FROM_BYTES: u32 = 1024;
/// The smallest threshold [`KeyspaceOptions::separate_values_from`](super::KeyspaceOptions)
/// accepts. Why: a value shorter than a pointer (25 bytes) and its read costs more kept
/// apart than inline.
pub const SEPARATE_VALUES_MIN_BYTES: u32 = 64;
/// The grain a held segment's dead space is given back in: a file-system block. Why:
/// `fallocate(PUNCH_HOLE)` frees whole blocks only (it zeroes a partial one, freeing
/// nothing), so only the whole 4 KiB blocks between kept values are punched.
pub(super) const PUNCH_BLOCK_BYTES: u64 = 4096;

/// Runs a keyspace holds at most after a step's merges: past it, the newest are merged
/// whatever their sizes. Why 8: a read of a key no run holds probes every run's filter
/// (each passes ~1 % of absent keys: a `pread` each), and a range reads a block per run
/// ahead; 8 bounds both, as the measured prototype did (ADR 0014).
pub(super) const RUNS_MAX: usize = 8;
/// Runs a keyspace may hold while the merger thread is behind, before the background
/// applier waits for it: the applier begins no step that would add a run until a merge
/// brings the count under this (units wait in the overlay meanwhile, and writers once
/// that is full). Why a bound: the merger runs below the block loop
/// ([`MERGER_NICE_INCREMENT`]) and may get little CPU while the loop and the applier keep
/// every core busy; a merger that gets the idle CPU stays within about [`RUNS_MAX`] plus a
/// few, so 3 × [`RUNS_MAX`] is never reached by it, and stops the files and filter probes
/// growing without limit for one that gets none.
pub(super) const RUNS_BEHIND_MAX: usize = 3 * RUNS_MAX;
/// How often an applier waiting for the merger ([`RUNS_BEHIND_MAX`]) looks again without
/// being woken. Why: a poison is set without the state lock, so its wake-up can come
/// between the applier's look and its wait; this bounds what that costs.
pub(super) const MERGER_BEHIND_RECHECK: Duration = Duration::from_millis(50);
/// How often a thread waiting for the applier or for its unit (room in the overlay, a unit
/// applied, a placed unit queued) looks again without being woken. Why: a poison is set
/// without the state lock, so its wake-up can come between the look and the wait; this
/// bounds what that costs.
pub(super) const POISON_RECHECK: Duration = Duration::from_millis(50);
/// A merge takes the newest runs while their bytes together are at least `1 /
/// RUN_MERGE_RATIO` of the next older run's. Why 1 (the newest together at least as large
/// as the next older): the prototype's ½ (2) rewrote the app's state more often, about a
/// third more bytes of runs on a 300k-block sync, and was no faster; nor was a cap of 16
/// runs instead of [`RUNS_MAX`].
pub(super) const RUN_MERGE_RATIO: u64 = 1;
/// Ops between two looks at whether the engine is stopping, while a merge is written.
/// Why: a look takes the state lock; every 4,096 ops (~0.7 MiB of the app's ops) it costs
/// nothing beside the write, and a close waits for at most that many more.
pub(super) const MERGE_STOP_CHECK_OPS: u64 = 4096;

const _: () = assert!(
    OVERLAY_BYTES_MAX >= CHECKPOINT_BYTES,
    "writers must be able to run ahead of the applier by at least one checkpoint"
);
const _: () = assert!(
    SEGMENT_BYTES >= (unit::HEADER_BYTES + unit::TRAILER_BYTES) as u64,
    "a segment holds at least one empty unit"
);
const _: () = assert!(
    RUNS_BEHIND_MAX > RUNS_MAX,
    "a merger is behind only past the runs a step's merges leave"
);
const _: () = assert!(
    MERGER_NICE_INCREMENT <= MERGER_NICE_INCREMENT_MAX,
    "the default nice increment is one the options accept"
);
const _: () = assert!(
    SEPARATE_VALUES_FROM_BYTES >= SEPARATE_VALUES_MIN_BYTES,
    "the home's threshold is one the options accept"
);
