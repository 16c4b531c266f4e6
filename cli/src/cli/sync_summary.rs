//! What `flushpoint sync` reports: the summary (`--json` prints it as one object) and its
//! human rendering.

use serde::Serialize;

use flushpoint::{JournalCounts, Observed};

use super::heights::HeightsJson;
use super::out::{human_bytes, outln};

/// Per-database figures of a run.
#[derive(Debug, Serialize)]
pub struct DbSummary {
    /// Batches written `Synced` (each one fsync-backed commit).
    pub synced_batches: u64,
    /// Batches written `Buffered`.
    pub buffered_batches: u64,
    /// Units it had a part in (a journal home: a flush point or a consensus block writes
    /// the three databases as one unit, one sync, ADR 0011; not counted in the batches). 0
    /// on redb.
    pub units: u64,
    /// Real `sync_data` calls redb made on the file.
    pub sync_data_calls: u64,
    /// Key and value bytes written, in batches and unit parts.
    pub bytes_written: u64,
    /// The file's size on disk at the end.
    pub disk_size_bytes: u64,
}

/// The three databases' figures, in flush order.
#[derive(Debug, Serialize)]
pub struct Databases {
    /// The block store.
    pub block_store: DbSummary,
    /// The state store.
    pub state: DbSummary,
    /// The app's database.
    pub app: DbSummary,
}

/// The journal engine's figures (a journal home only).
#[derive(Debug, Serialize)]
pub struct JournalSummary {
    /// The engine's counts since this process opened it (recovery included).
    pub counts: JournalCounts,
    /// Bytes its segments and index occupy on disk at the end.
    pub disk_size_bytes: u64,
}

/// Synced batches per block.
#[derive(Debug, Serialize)]
pub struct FsyncsPerBlock {
    /// Synced batches over the three databases, during the block-sync part (its flush
    /// points included); on a journal home, synced units (a flush point is one, ADR 0011).
    pub block_sync: f64,
    /// The same during the consensus part (redb: 4 per block; journal: 1).
    pub consensus: f64,
    /// Real `sync_data` calls per block over the whole run (redb: on the three files;
    /// journal: on its segments and its index).
    pub sync_data_overall: f64,
}

/// One flush point of the run, as the block loop saw it complete.
#[derive(Debug, Serialize)]
pub struct FlushJson {
    /// Why it was taken (the last trigger, when one call completed two windows).
    pub trigger: flushpoint::FlushTrigger,
    /// Blocks `from + 1..=to` became durable.
    pub from: u64,
    /// See `from`.
    pub to: u64,
    /// Key and value bytes written.
    pub bytes: u64,
    /// Flush points this entry covers (2 when one call completed a window in flight and
    /// took the next).
    pub flush_points: u64,
    /// Seconds from freezing the window to its last synced batch.
    pub duration_s: f64,
    /// Seconds the block loop waited for it (all of `duration_s` for a synchronous flush
    /// point; for a background one, only the wait for the window in flight).
    pub loop_wait_s: f64,
    /// Seconds since the run started, when the loop saw it complete.
    pub at_s: f64,
}

/// What the start-up handshake found and did.
#[derive(Debug, Serialize)]
pub struct HandshakeJson {
    /// Case name.
    pub case: &'static str,
    /// What it observed.
    pub observed: Observed,
    /// Blocks replayed on the app only.
    pub app_replayed: u64,
    /// Blocks applied to app and state.
    pub applied: u64,
    /// The height afterwards.
    pub height: u64,
}

/// The summary `sync` prints (`--json`: this object).
#[derive(Debug, Serialize)]
pub struct SyncSummary {
    /// The home directory.
    pub home: String,
    /// Chain seed.
    pub seed: u64,
    /// Profile.
    pub profile: &'static str,
    /// Mode of the block-sync part.
    pub mode: &'static str,
    /// The home's storage engine: `redb` or `journal`.
    pub engine: &'static str,
    /// True for `--mode no-sync`: nothing was synced; a floor, not a crash-safe result.
    pub floor_only: bool,
    /// The height the run ends at (N + M).
    pub target_height: u64,
    /// Blocks applied by this run (block sync + consensus; not the handshake's).
    pub blocks: u64,
    /// Of which block-synced.
    pub block_sync_blocks: u64,
    /// Of which committed in consensus mode.
    pub consensus_blocks: u64,
    /// Wall time of the run after the handshake, in seconds.
    pub elapsed_s: f64,
    /// Blocks per second over the run.
    pub blocks_per_s: f64,
    /// Milliseconds per block over the run.
    pub ms_per_block: f64,
    /// Blocks per second during the block-sync part.
    pub block_sync_blocks_per_s: f64,
    /// Synced batches (and real syncs) per block.
    pub fsyncs_per_block: FsyncsPerBlock,
    /// Flush points taken.
    pub flush_points: u64,
    /// Seconds the block loop stood still in flush points (sum of `loop_wait_s`).
    pub flush_loop_wait_s: f64,
    /// Every flush point the run completed, in order.
    pub flush_timeline: Vec<FlushJson>,
    /// Key and value bytes written, over the three databases.
    pub bytes_written: u64,
    /// Per database (on a journal home `sync_data_calls` and `disk_size_bytes` are 0 per
    /// database: the three share the journal, see `journal`).
    pub databases: Databases,
    /// The journal's figures, on a journal home.
    pub journal: Option<JournalSummary>,
    /// Most bytes one database held at once.
    pub peak_held_bytes: u64,
    /// Peak resident set size of the process.
    pub peak_rss_bytes: u64,
    /// Final heights, read back from disk after the clean stop.
    pub heights: HeightsJson,
    /// Final app hash (hex).
    pub app_hash: String,
    /// The start-up handshake.
    pub handshake: HandshakeJson,
}

/// Prints `s` for a person: rates, fsyncs, flush points, per-database figures, heights.
pub fn print_human(s: &SyncSummary) {
    outln!(
        "done: {} blocks in {:.2} s — {:.0} blocks/s, {:.3} ms/block (block sync {} blocks at {:.0} blocks/s, consensus {} blocks)",
        s.blocks,
        s.elapsed_s,
        s.blocks_per_s,
        s.ms_per_block,
        s.block_sync_blocks,
        s.block_sync_blocks_per_s,
        s.consensus_blocks
    );
    outln!(
        "fsyncs per block: block sync {:.4} synced batches, consensus {:.2}; real sync_data calls {:.4} per block overall",
        s.fsyncs_per_block.block_sync,
        s.fsyncs_per_block.consensus,
        s.fsyncs_per_block.sync_data_overall
    );
    outln!(
        "flush points: {}; the block loop waited {:.2} s for them ({:.0}% of the run)",
        s.flush_points,
        s.flush_loop_wait_s,
        if s.elapsed_s > 0.0 {
            100.0 * s.flush_loop_wait_s / s.elapsed_s
        } else {
            0.0
        }
    );
    for f in &s.flush_timeline {
        outln!(
            "  blocks {:>7}..={:<7} {:?} ({} flush point{}): {} in {:.2} s, loop waited {:.2} s (at {:.2} s)",
            f.from + 1,
            f.to,
            f.trigger,
            f.flush_points,
            if f.flush_points == 1 { "" } else { "s" },
            human_bytes(f.bytes),
            f.duration_s,
            f.loop_wait_s,
            f.at_s
        );
    }
    outln!(
        "bytes written: {}; peak held: {}; peak RSS: {}",
        human_bytes(s.bytes_written),
        human_bytes(s.peak_held_bytes),
        human_bytes(s.peak_rss_bytes)
    );
    outln!(
        "  {:<12} {:>8} {:>9} {:>7} {:>10} {:>14} {:>12}",
        "database",
        "synced",
        "buffered",
        "units",
        "sync_data",
        "bytes written",
        "on disk"
    );
    let d3 = [
        ("block store", &s.databases.block_store),
        ("state", &s.databases.state),
        ("app", &s.databases.app),
    ];
    for (name, d) in d3 {
        outln!(
            "  {:<12} {:>8} {:>9} {:>7} {:>10} {:>14} {:>12}",
            name,
            d.synced_batches,
            d.buffered_batches,
            d.units,
            d.sync_data_calls,
            human_bytes(d.bytes_written),
            human_bytes(d.disk_size_bytes)
        );
    }
    if let Some(j) = &s.journal {
        outln!(
            "  {:<12} {} units, {} sync_data on segments, {} checkpoints, {} on disk (the three databases share it)",
            "journal",
            j.counts.units_written,
            j.counts.journal_sync_data_calls,
            j.counts.checkpoints,
            human_bytes(j.disk_size_bytes)
        );
    }
    outln!(
        "heights: block store {}, state {}, app {}",
        s.heights.block_store,
        s.heights.state,
        s.heights.app
    );
    outln!("app hash: {}", s.app_hash);
    if s.floor_only {
        outln!("note: no-sync run — a floor measurement, nothing here survives a power cut");
    }
}
