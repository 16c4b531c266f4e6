//! What `flushpoint sync` reports: the summary (`--json` prints it as one object), how it
//! is worked out from the meters' readings ([`Figures`]), and its human rendering.
//!
//! Invariant: reads the home's sizes and counts only; writes nothing.

use std::time::{Duration, Instant};

use serde::Serialize;

use flushpoint::journal::JournalCounts;
use flushpoint::node::Observed;
use flushpoint::{Db, HandshakeReport, Home};

use super::meters::{Reading, Snap, peak_rss_bytes};
use crate::cli::heights::{Durable, HeightsJson};
use crate::cli::out::{human_bytes, outln};

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

impl FlushJson {
    /// The entry of flush point `r`, seen complete at `since.elapsed()` into the run.
    pub fn new(r: flushpoint::FlushReport, since: Instant) -> Self {
        FlushJson {
            trigger: r.trigger,
            from: r.from,
            to: r.to,
            bytes: r.bytes,
            flush_points: r.flush_points,
            duration_s: r.duration.as_secs_f64(),
            loop_wait_s: r.loop_wait.as_secs_f64(),
            at_s: since.elapsed().as_secs_f64(),
        }
    }
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
    /// How long the home took to open, recovery included.
    pub open: OpenTimes,
}

/// How long the start took, in seconds: what a restart costs before the first block.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct OpenTimes {
    /// The read-only open and handshake that decide, before anything is written, what the
    /// run would refuse (0 for a new home).
    pub check_s: f64,
    /// The writable open: the engine's recovery (a journal's replay of the units past its
    /// checkpoint; redb's repair of an unclean file) and a rollback's finish.
    pub home_s: f64,
    /// The handshake: the heights classified and a crash's shape repaired.
    pub handshake_s: f64,
    /// The three, from the command's start to the node ready.
    pub total_s: f64,
}

/// What names a run in its summary.
pub struct RunLabels {
    /// The home directory, as given.
    pub home: String,
    /// Chain seed.
    pub seed: u64,
    /// Profile name.
    pub profile: &'static str,
    /// Block-sync mode name.
    pub mode: &'static str,
    /// `--mode no-sync`.
    pub floor_only: bool,
}

/// What a run measured, from the handshake's end to the clean stop.
pub struct Figures {
    /// The height after the handshake.
    pub start_height: u64,
    /// The height at the end of the block-sync phase (N).
    pub block_sync_end_height: u64,
    /// The height the run ends at (N + M).
    pub target: u64,
    /// The meters before the first block.
    pub start: Reading,
    /// The meters after block sync's last flush point.
    pub after_block_sync: Reading,
    /// The meters after the last consensus block.
    pub after_consensus: Reading,
    /// The meters after the clean stop.
    pub after_stop: Reading,
    /// The journal engine's real `sync_data` calls during the run (0 on redb).
    pub journal_sync_data: u64,
    /// Wall time from the first block to the clean stop.
    pub elapsed: Duration,
    /// Flush points taken.
    pub flush_points: u64,
    /// Most bytes one database held at once.
    pub peak_held_bytes: u64,
    /// Every flush point the run completed, in order.
    pub timeline: Vec<FlushJson>,
}

/// `n / d`, 0 when `d` is 0.
fn per(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// The three databases' figures between `start` and `end`, with their sizes on disk; and
/// the bytes written and real syncs over the three.
fn databases(
    home: &Home,
    start: &[Snap; 3],
    end: &[Snap; 3],
) -> flushpoint::Result<(Databases, u64, u64)> {
    let mut dbs = Vec::with_capacity(3);
    let mut bytes_written = 0;
    let mut sync_data = 0;
    for i in 0..3 {
        let d = end[i].counts - start[i].counts;
        let sd = end[i].sync_data - start[i].sync_data;
        bytes_written += d.bytes_written;
        sync_data += sd;
        let disk = match home.redb_dbs() {
            Some(dbs) => dbs[i].disk_size_bytes()?,
            None => 0,
        };
        dbs.push(DbSummary {
            synced_batches: d.synced_batches,
            buffered_batches: d.buffered_batches,
            units: end[i].units - start[i].units,
            sync_data_calls: sd,
            bytes_written: d.bytes_written,
            disk_size_bytes: disk,
        });
    }
    let mut dbs = dbs.into_iter();
    let mut next_db = || dbs.next().expect("three databases");
    let databases = Databases {
        block_store: next_db(),
        state: next_db(),
        app: next_db(),
    };
    Ok((databases, bytes_written, sync_data))
}

/// The summary of a run: `labels`, the figures `f`, what `home` holds at the end
/// (`durable`, read after the stop), and what the handshake did (`report`).
pub fn summarize(
    labels: RunLabels,
    home: &Home,
    f: Figures,
    durable: Durable,
    report: &HandshakeReport,
    open: OpenTimes,
) -> flushpoint::Result<SyncSummary> {
    let sync_blocks = f.block_sync_end_height - f.start_height;
    let cons_blocks = f.target - f.block_sync_end_height;
    let blocks = sync_blocks + cons_blocks;
    let (databases, bytes_written, mut sync_data) =
        databases(home, &f.start.dbs, &f.after_stop.dbs)?;
    sync_data += f.journal_sync_data;
    let journal = match home.journal() {
        Some(j) => Some(JournalSummary {
            counts: j.counts(),
            disk_size_bytes: j.disk_size_bytes()?,
        }),
        None => None,
    };
    let (s0, s1, s2) = (&f.start, &f.after_block_sync, &f.after_consensus);
    let secs = f.elapsed.as_secs_f64();
    let sync_secs = s1.at.saturating_duration_since(s0.at).as_secs_f64();
    Ok(SyncSummary {
        home: labels.home,
        seed: labels.seed,
        profile: labels.profile,
        mode: labels.mode,
        engine: home.engine().name(),
        floor_only: labels.floor_only,
        target_height: f.target,
        blocks,
        block_sync_blocks: sync_blocks,
        consensus_blocks: cons_blocks,
        elapsed_s: secs,
        blocks_per_s: if secs > 0.0 {
            blocks as f64 / secs
        } else {
            0.0
        },
        ms_per_block: if blocks == 0 {
            0.0
        } else {
            secs * 1000.0 / blocks as f64
        },
        block_sync_blocks_per_s: if sync_secs > 0.0 {
            sync_blocks as f64 / sync_secs
        } else {
            0.0
        },
        fsyncs_per_block: FsyncsPerBlock {
            block_sync: per(
                s1.synced_batches() - s0.synced_batches() + (s1.synced_units - s0.synced_units),
                sync_blocks,
            ),
            consensus: per(
                s2.synced_batches() - s1.synced_batches() + (s2.synced_units - s1.synced_units),
                cons_blocks,
            ),
            sync_data_overall: per(sync_data, blocks),
        },
        flush_points: f.flush_points,
        flush_loop_wait_s: f.timeline.iter().map(|t| t.loop_wait_s).sum(),
        flush_timeline: f.timeline,
        bytes_written,
        databases,
        journal,
        peak_held_bytes: f.peak_held_bytes,
        peak_rss_bytes: peak_rss_bytes(),
        heights: durable.heights,
        app_hash: durable.app_hash,
        handshake: HandshakeJson {
            case: report.case.name(),
            observed: report.observed,
            app_replayed: report.app_replayed,
            applied: report.applied,
            height: report.height,
        },
        open,
    })
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
