//! `compare`: flushpoint beside its peers on the same disk, in one run, in one table; index
//! lookups on a 100k-block fixture (disk and memory); and the deferred sync at scale.
//!
//! ```text
//! compare --dir D [--rounds 3] [--secs 5] [--profile light|heavy|both] [--quick]
//! compare index --dir D [--blocks 100000]
//! compare scale --dir D --heights 10000,100000,300000
//! compare run-one --contender X --profile P --dir D --shape FILE (--secs S | --blocks N)
//! compare prefetch --dir D [--samples 5] [--block-txs 256] [--rounds 3] [--quick]
//! ```
//!
//! Each write run is a fresh subprocess (`run-one`) on an empty directory, so peak RSS,
//! `/proc/<pid>/io` and sync counts belong to one contender. Rounds interleave every
//! contender; figures are medians (min–max) over rounds, and ratios to flushpoint deferred
//! are taken within each round.
//!
//! Invariant: every row is the result of a run whose outcome was checked; a failed check
//! is printed as FAIL and makes the command exit non-zero.

mod check;
mod flushpoint_runs;
mod journal_runs;
mod peers;
mod prefetch_bench;
mod report;
mod shape;
mod sys;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

use flushpoint_runs::FpMode;

use peers::Peer;
use shape::Shape;
use sys::ProcIo;

// The allocator of the `flushpoint` tool, for every contender alike (flushpoint, fjall and
// redb allocate through it; RocksDB's C++ keeps the system's): the tool's own file, whose
// module doc says what it sets and why.
#[path = "../../../cli/src/allocator.rs"]
mod allocator;

/// mimalloc, keeping the memory it frees (see [`allocator`]).
#[global_allocator]
static GLOBAL: allocator::Global = mimalloc::MiMalloc;

/// Blocks sampled to measure the shape (covers the chain's 13-, 50- and 200-block periods).
const SHAPE_SAMPLE_BLOCKS: u64 = 200;
/// Most blocks one timed run writes (light / heavy): keeps the memory floor's data and the
/// fastest runs bounded, as perf-baseline.md did.
const MAX_BLOCKS_LIGHT: u64 = 100_000;
const MAX_BLOCKS_HEAVY: u64 = 1_500;
/// The held point read must stay below this (issue 11).
const HELD_READ_NS_MAX: f64 = 1_000.0;

#[derive(Debug, Parser)]
#[command(name = "compare", about = "flushpoint beside its peers, in one table")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    all: AllArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One contender, one run, one JSON line (used by the main command).
    RunOne(RunOneArgs),
    /// The index lookups only.
    Index(IndexArgs),
    /// flushpoint deferred light sync at several heights.
    Scale(ScaleArgs),
    /// Prefetch: block execution on a cold ≥ 2 GiB state with and without completed
    /// prefetch, and the warm small case.
    Prefetch(prefetch_bench::PrefetchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProfileSel {
    Light,
    Heavy,
    Both,
}

#[derive(Debug, Args)]
struct AllArgs {
    /// Data directory on a real disk (each run starts from an empty directory under it).
    #[arg(long, default_value = "target/compare-data")]
    dir: PathBuf,
    /// Rounds (each runs every contender once per profile).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds of blocks per run (the final flush/sync and close count in the time).
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Block profile(s).
    #[arg(long, value_enum, default_value_t = ProfileSel::Both)]
    profile: ProfileSel,
    /// CI mode: tiny sizes, 1 round, well under a minute; the < 1 µs bound is printed but
    /// not asserted.
    #[arg(long)]
    quick: bool,
    /// Blocks in the index fixture.
    #[arg(long, default_value_t = 100_000)]
    index_blocks: u64,
    /// Skip the index benchmarks.
    #[arg(long)]
    no_index: bool,
    /// Seed of the index lookups' sampled heights and keys.
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// Run only these contenders (comma-separated row names; default: every row).
    #[arg(long, value_delimiter = ',')]
    contenders: Vec<String>,
}

#[derive(Debug, Args)]
struct RunOneArgs {
    #[arg(long)]
    contender: String,
    #[arg(long)]
    profile: String,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    shape: PathBuf,
    #[arg(long)]
    secs: Option<f64>,
    #[arg(long)]
    blocks: Option<u64>,
}

#[derive(Debug, Args)]
struct IndexArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, default_value_t = 100_000)]
    blocks: u64,
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value_t = 11)]
    seed: u64,
}

#[derive(Debug, Args)]
struct ScaleArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,300000")]
    heights: Vec<u64>,
}

/// A contender of the write table.
#[derive(Debug, Clone, Copy)]
pub struct Contender {
    /// Row name (also the `run-one --contender` value).
    pub name: &'static str,
    what: Kind,
    /// Crash safety, as printed.
    pub crash_safe: &'static str,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Fp(FpMode),
    /// A flushpoint mode on three keyspaces of one journal (ADR 0008).
    Journal(FpMode),
    /// The shape's blocks as one journal unit each (`journal_runs::run_unit_per_block`).
    JournalUnit,
    /// `BlockStore::save_block` alone on a journal home's block store
    /// (`journal_runs::run_save_block`).
    JournalSave,
    Peer(Peer),
}

/// Every contender, in table order.
pub const CONTENDERS: &[Contender] = &[
    Contender {
        name: "fp-deferred",
        what: Kind::Fp(FpMode::Deferred),
        crash_safe: "yes (window)",
    },
    Contender {
        name: "fp-per-block",
        what: Kind::Fp(FpMode::PerBlock),
        crash_safe: "yes",
    },
    Contender {
        name: "fpj-deferred",
        what: Kind::Journal(FpMode::Deferred),
        crash_safe: "yes (window)",
    },
    Contender {
        name: "fpj-per-block",
        what: Kind::Journal(FpMode::PerBlock),
        crash_safe: "yes",
    },
    Contender {
        name: "fpj-unit",
        what: Kind::JournalUnit,
        crash_safe: "yes",
    },
    Contender {
        name: "fpj-save-block",
        what: Kind::JournalSave,
        crash_safe: "yes",
    },
    Contender {
        name: "fp-legacy",
        what: Kind::Fp(FpMode::Legacy),
        crash_safe: "yes",
    },
    Contender {
        name: "fp-no-sync",
        what: Kind::Fp(FpMode::NoSync),
        crash_safe: "NO",
    },
    Contender {
        name: "fp-memory",
        what: Kind::Fp(FpMode::Memory),
        crash_safe: "NO (memory)",
    },
    Contender {
        name: "fjall-sync",
        what: Kind::Peer(Peer::FjallSync),
        crash_safe: "yes",
    },
    Contender {
        name: "fjall-buffered",
        what: Kind::Peer(Peer::FjallBuffered),
        crash_safe: "NO",
    },
    Contender {
        name: "redb-block",
        what: Kind::Peer(Peer::RedbBlock),
        crash_safe: "yes",
    },
    Contender {
        name: "redb-window",
        what: Kind::Peer(Peer::RedbWindow),
        crash_safe: "yes (window)",
    },
    Contender {
        name: "rocks-sync",
        what: Kind::Peer(Peer::RocksSync),
        crash_safe: "yes",
    },
    Contender {
        name: "rocks-nosync",
        what: Kind::Peer(Peer::RocksNoSync),
        crash_safe: "NO",
    },
    Contender {
        name: "raw-sync",
        what: Kind::Peer(Peer::RawSync),
        crash_safe: "limit",
    },
    Contender {
        name: "raw-sync-blocks",
        what: Kind::Peer(Peer::RawSyncBlocks),
        crash_safe: "limit",
    },
    Contender {
        name: "raw-seq",
        what: Kind::Peer(Peer::RawSeq),
        crash_safe: "limit (window)",
    },
];

impl Contender {
    /// The stores whose records the row writes: the block store's alone for the rows of
    /// `save_block` and its raw limit, all three for the others. Its logical bytes count
    /// these.
    pub fn stores(&self) -> &'static [shape::Store] {
        match self.what {
            Kind::JournalSave | Kind::Peer(Peer::RawSyncBlocks) => &[shape::Store::Blocks],
            _ => &shape::Store::ALL,
        }
    }

    /// The raw limit of the same bytes, whose commit time this row's is compared with:
    /// `raw-sync-blocks` for the block store's records alone, `raw-sync` for whole blocks.
    pub fn raw_limit(&self) -> &'static str {
        if self.stores() == [shape::Store::Blocks] {
            "raw-sync-blocks"
        } else {
            "raw-sync"
        }
    }
}

/// The contenders this build can run (RocksDB rows only with the `rocksdb` feature), or
/// those of them named in `only` (every name must be one; nothing runs otherwise).
pub fn contenders_among(only: &[String]) -> Result<Vec<Contender>, String> {
    let all = contenders();
    if let Some(unknown) = only
        .iter()
        .find(|n| !all.iter().any(|c| c.name == n.as_str()))
    {
        let names: Vec<&str> = all.iter().map(|c| c.name).collect();
        return Err(format!(
            "--contenders: no contender {unknown} in this build (it runs {})",
            names.join(", ")
        ));
    }
    Ok(all
        .into_iter()
        .filter(|c| only.is_empty() || only.iter().any(|n| n == c.name))
        .collect())
}

/// The contenders this build can run (RocksDB rows only with the `rocksdb` feature).
pub fn contenders() -> Vec<Contender> {
    CONTENDERS
        .iter()
        .copied()
        .filter(|c| {
            cfg!(feature = "rocksdb")
                || !matches!(c.what, Kind::Peer(Peer::RocksSync | Peer::RocksNoSync))
        })
        .collect()
}

/// What one `run-one` child reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// Contender name.
    pub contender: String,
    /// Profile.
    pub profile: String,
    /// Blocks written.
    pub blocks: u64,
    /// First block to files closed, seconds.
    pub elapsed_s: f64,
    /// First block until every block written is durable, seconds: `elapsed_s` without the
    /// close (for flushpoint rows: the stop's flush point returned; for the journal, the
    /// applier's backlog and the closing checkpoint come after it; for peers: the last
    /// commit, `persist`, `flush_wal` or `fdatasync` returned).
    #[serde(default)]
    pub durable_s: f64,
    /// Logical bytes of those blocks (the shape's keys + values).
    pub logical_bytes: u64,
    /// Sync calls counted.
    pub syncs: u64,
    /// How they were counted.
    pub sync_method: String,
    /// `/proc/self/io` over the timed part (files closed).
    pub io: ProcIo,
    /// Bytes allocated on disk after close.
    pub disk_bytes: u64,
    /// Peak RSS of the child.
    pub peak_rss_bytes: u64,
    /// Flush points (flushpoint rows).
    pub flush_points: u64,
    /// Batches written `Synced` over the three databases (flushpoint rows).
    pub synced_batches: u64,
    /// Median and 99th percentile of one block's commit time, ms (the rows that sync
    /// every block: `peers::CommitTimes`).
    #[serde(default)]
    pub commit_ms: Option<(f64, f64)>,
    /// The outcome check's error, if it failed.
    pub error: Option<String>,
}

impl RunReport {
    /// Takes a run's blocks, times, syncs (counted as `sync_method` says) and commit times.
    fn take_peer_out(&mut self, out: &peers::PeerOut, sync_method: &str) {
        self.blocks = out.blocks;
        self.elapsed_s = out.elapsed.as_secs_f64();
        self.durable_s = out.durable.as_secs_f64();
        self.syncs = out.syncs;
        self.commit_ms = out.commits.p50_p99_ms();
        self.sync_method = sync_method.into();
    }
}

fn run_one(a: &RunOneArgs) -> RunReport {
    let mut rep = RunReport {
        contender: a.contender.clone(),
        profile: a.profile.clone(),
        blocks: 0,
        elapsed_s: 0.0,
        durable_s: 0.0,
        logical_bytes: 0,
        syncs: 0,
        sync_method: String::new(),
        io: ProcIo::default(),
        disk_bytes: 0,
        peak_rss_bytes: 0,
        flush_points: 0,
        synced_batches: 0,
        commit_ms: None,
        error: None,
    };
    let r = (|| -> Result<(), String> {
        let shape: Shape = serde_json::from_slice(
            &std::fs::read(&a.shape).map_err(|e| format!("read shape: {e}"))?,
        )
        .map_err(|e| format!("parse shape: {e}"))?;
        let c = CONTENDERS
            .iter()
            .find(|c| c.name == a.contender)
            .ok_or(format!("unknown contender {}", a.contender))?;
        let _ = std::fs::remove_dir_all(&a.dir);
        std::fs::create_dir_all(&a.dir).map_err(|e| e.to_string())?;
        let (secs, blocks) = (a.secs, a.blocks);
        let cap = if a.profile == "heavy" {
            MAX_BLOCKS_HEAVY
        } else {
            MAX_BLOCKS_LIGHT
        };
        let stop = move |n: u64, el: Duration| match (blocks, secs) {
            (Some(b), _) => n >= b,
            (None, Some(s)) => n >= cap || el.as_secs_f64() >= s,
            (None, None) => true,
        };
        let mut io0 = ProcIo::default();
        let mut io1 = ProcIo::default();
        match c.what {
            Kind::Fp(mode) => {
                let out = flushpoint_runs::run_write(
                    mode,
                    &a.profile,
                    &a.dir,
                    &stop,
                    &mut || io0 = ProcIo::now(),
                    &mut || io1 = ProcIo::now(),
                )?;
                rep.blocks = out.blocks;
                rep.elapsed_s = out.elapsed.as_secs_f64();
                rep.durable_s = out.durable.as_secs_f64();
                rep.syncs = out.syncs;
                rep.flush_points = out.flush_points;
                rep.synced_batches = out.synced_batches;
                rep.sync_method = if mode == FpMode::Memory {
                    "none (memory)"
                } else {
                    "backend"
                }
                .into();
            }
            Kind::Journal(mode) => {
                let out = journal_runs::run_write(
                    mode,
                    &a.profile,
                    &a.dir,
                    &stop,
                    &mut || io0 = ProcIo::now(),
                    &mut || io1 = ProcIo::now(),
                )?;
                rep.blocks = out.blocks;
                rep.elapsed_s = out.elapsed.as_secs_f64();
                rep.durable_s = out.durable.as_secs_f64();
                rep.syncs = out.syncs;
                rep.flush_points = out.flush_points;
                rep.synced_batches = out.synced_batches;
                rep.sync_method = "journal counters".into();
            }
            Kind::JournalUnit => {
                let pool = shape::pool();
                let out = journal_runs::run_unit_per_block(
                    &shape,
                    &pool,
                    &a.dir,
                    &stop,
                    &mut || io0 = ProcIo::now(),
                    &mut || io1 = ProcIo::now(),
                )?;
                rep.take_peer_out(&out, "journal counters");
            }
            Kind::JournalSave => {
                let out = journal_runs::run_save_block(
                    &a.profile,
                    &a.dir,
                    journal_runs::save_blocks_to_make(&a.profile, a.secs, a.blocks),
                    &stop,
                    &mut || io0 = ProcIo::now(),
                    &mut || io1 = ProcIo::now(),
                )?;
                rep.take_peer_out(&out, "journal counters");
            }
            Kind::Peer(p) => {
                let pool = shape::pool();
                let out = peers::run_peer(
                    p,
                    &shape,
                    &pool,
                    &a.dir,
                    &stop,
                    &mut || io0 = ProcIo::now(),
                    &mut || io1 = ProcIo::now(),
                )?;
                rep.take_peer_out(&out, p.sync_method());
            }
        }
        check_durable_time(rep.durable_s, rep.elapsed_s)?;
        rep.io = io1.since(&io0);
        rep.logical_bytes = shape.logical_bytes_in(c.stores(), rep.blocks);
        rep.disk_bytes = sys::disk_bytes(&a.dir);
        Ok(())
    })();
    rep.peak_rss_bytes = sys::peak_rss_bytes();
    rep.error = r.err();
    rep
}

/// A run's clock: the blocks became durable after the first block and no later than the
/// files closed. A row whose timer stopped elsewhere fails its run.
fn check_durable_time(durable_s: f64, elapsed_s: f64) -> Result<(), String> {
    if durable_s > 0.0 && durable_s <= elapsed_s {
        Ok(())
    } else {
        Err(format!(
            "durable after {durable_s:.3} s is outside (0, {elapsed_s:.3} s], the time to the files closed"
        ))
    }
}

fn spawn_one(
    contender: &str,
    profile: &str,
    dir: &Path,
    shape: &Path,
    secs: Option<f64>,
    blocks: Option<u64>,
) -> RunReport {
    let exe = std::env::current_exe().expect("own executable");
    let mut cmd = Command::new(exe);
    cmd.args(["run-one", "--contender", contender, "--profile", profile])
        .arg("--dir")
        .arg(dir)
        .arg("--shape")
        .arg(shape);
    if let Some(s) = secs {
        cmd.args(["--secs", &s.to_string()]);
    }
    if let Some(b) = blocks {
        cmd.args(["--blocks", &b.to_string()]);
    }
    let failed = |e: String| RunReport {
        contender: contender.into(),
        profile: profile.into(),
        blocks: 0,
        elapsed_s: 0.0,
        durable_s: 0.0,
        logical_bytes: 0,
        syncs: 0,
        sync_method: String::new(),
        io: ProcIo::default(),
        disk_bytes: 0,
        peak_rss_bytes: 0,
        flush_points: 0,
        synced_batches: 0,
        commit_ms: None,
        error: Some(e),
    };
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return failed(format!("spawn: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let rep = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<RunReport>(l).ok())
        .unwrap_or_else(|| {
            failed(format!(
                "child exited {} without a report: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ))
        });
    let _ = std::fs::remove_dir_all(dir);
    rep
}

fn write_shape(dir: &Path, profile: &str) -> Result<(PathBuf, Shape), String> {
    let shape = flushpoint_runs::measure_shape(profile, SHAPE_SAMPLE_BLOCKS)?;
    let path = dir.join(format!("shape-{profile}.json"));
    std::fs::write(
        &path,
        serde_json::to_vec(&shape).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    Ok((path, shape))
}

fn machine_line() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let args: Vec<String> = std::env::args().collect();
    format!(
        "command: {}\nmachine: {cores} cores; load avg (1 min) now {:.2}; {}; rocksdb rows: {}",
        args.join(" "),
        sys::load_avg_1m(),
        sys::page_reporting_line(
            std::fs::read_to_string(sys::PAGE_REPORTING_ORDER)
                .ok()
                .as_deref()
        ),
        if cfg!(feature = "rocksdb") {
            "on"
        } else {
            "off (build with --features rocksdb)"
        }
    )
}

fn main_all(a: &AllArgs) -> Result<u64, String> {
    let (rounds, secs, profiles) = if a.quick {
        (1, 0.3, vec!["light", "heavy"])
    } else {
        let p = match a.profile {
            ProfileSel::Light => vec!["light"],
            ProfileSel::Heavy => vec!["heavy"],
            ProfileSel::Both => vec!["light", "heavy"],
        };
        (a.rounds.max(1), a.secs, p)
    };
    let cs = contenders_among(&a.contenders)?;
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("create {}: {e}", a.dir.display()))?;
    println!(
        "compare: dir {}, {rounds} round(s), {secs} s per run, profiles {profiles:?}{}",
        a.dir.display(),
        if a.quick { ", QUICK" } else { "" }
    );
    println!("{}", machine_line());
    let mut failures = 0u64;
    let mut shapes = Vec::new();
    for p in &profiles {
        let (path, shape) = write_shape(&a.dir, p)?;
        report::print_shape(&shape);
        shapes.push((p.to_string(), path));
    }
    // results[profile][contender][round]
    let mut results: Vec<Vec<Vec<RunReport>>> = vec![vec![Vec::new(); cs.len()]; profiles.len()];
    let mut loads = Vec::new();
    for round in 0..rounds {
        let l0 = sys::load_avg_1m();
        for (pi, (p, shape_path)) in shapes.iter().enumerate() {
            // Rotate the order each round, so no contender always runs first.
            for k in 0..cs.len() {
                let ci = (k + round) % cs.len();
                let c = &cs[ci];
                let dir = a.dir.join(format!("run-{}", c.name));
                let r = spawn_one(c.name, p, &dir, shape_path, Some(secs), None);
                eprintln!(
                    "round {} {p} {:<15} {:>7} blocks {:>8.3} s {}",
                    round + 1,
                    c.name,
                    r.blocks,
                    r.elapsed_s,
                    r.error.as_deref().unwrap_or("ok")
                );
                results[pi][ci].push(r);
            }
        }
        let l1 = sys::load_avg_1m();
        loads.push((l0, l1));
    }
    for (pi, p) in profiles.iter().enumerate() {
        failures += report::print_write_table(p, &cs, &results[pi], &loads);
        report::print_commit_table(p, &cs, &results[pi]);
    }
    if !a.no_index {
        let blocks = if a.quick { 2_000 } else { a.index_blocks };
        failures += index(&a.dir, blocks, a.quick, a.seed)?;
    }
    Ok(failures)
}

fn index(dir: &Path, blocks: u64, quick: bool, seed: u64) -> Result<u64, String> {
    let fixture = dir.join(format!("fixture-{blocks}"));
    println!(
        "\n## Index lookups: {blocks} light blocks (fixture {}), seed {seed}",
        fixture.display()
    );
    let (built, t) = flushpoint_runs::build_fixture(&fixture, blocks)?;
    if built {
        println!("fixture built in {:.1} s (deferred sync)", t.as_secs_f64());
    } else {
        println!("fixture reused (built earlier)");
    }
    let cfg = flushpoint_runs::IndexConfig {
        blocks,
        keys: if quick { 200 } else { 2_000 },
        passes: if quick { 1 } else { 5 },
        held_bytes: if quick { 4 << 20 } else { 64 << 20 },
        seed,
    };
    let rows = match flushpoint_runs::index_bench(&fixture, &cfg) {
        Ok(r) => r,
        Err(e) => {
            println!("FAIL: index outcome check: {e}");
            return Ok(1);
        }
    };
    println!("all index lookups checked against their oracles before timing: PASS");
    report::print_index(&rows);
    let held = rows
        .iter()
        .filter(|r| r.lookup.starts_with("held point read"))
        .map(|r| r.ns_per_lookup)
        .fold(0.0, f64::max);
    if quick {
        println!(
            "held point read: {held:.0} ns (bound {HELD_READ_NS_MAX:.0} ns; quick mode: not asserted)"
        );
        Ok(0)
    } else if held < HELD_READ_NS_MAX {
        println!("held point read < 1 µs: PASS ({held:.0} ns)");
        Ok(0)
    } else {
        println!("held point read < 1 µs: FAIL ({held:.0} ns)");
        Ok(1)
    }
}

fn scale(a: &ScaleArgs) -> Result<u64, String> {
    std::fs::create_dir_all(&a.dir).map_err(|e| e.to_string())?;
    println!("{}", machine_line());
    let (path, _) = write_shape(&a.dir, "light")?;
    println!("\n## Scale: flushpoint deferred, light blocks");
    println!(
        "| blocks | blocks/s | s | peak RSS | on-disk ÷ logical | syncs/block | flush points | load avg start → end |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut failures = 0;
    for &n in &a.heights {
        let l0 = sys::load_avg_1m();
        let r = spawn_one(
            "fp-deferred",
            "light",
            &a.dir.join("scale-run"),
            &path,
            None,
            Some(n),
        );
        let l1 = sys::load_avg_1m();
        if let Some(e) = &r.error {
            println!("| {n} | FAIL: {e} |");
            failures += 1;
            continue;
        }
        println!(
            "| {} | {:.0} | {:.1} | {} | {:.2} | {:.4} | {} | {l0:.2} → {l1:.2} |",
            r.blocks,
            r.blocks as f64 / r.elapsed_s,
            r.elapsed_s,
            report::mib(r.peak_rss_bytes),
            r.disk_bytes as f64 / r.logical_bytes.max(1) as f64,
            r.syncs as f64 / r.blocks.max(1) as f64,
            r.flush_points,
        );
    }
    Ok(failures)
}

fn finish(r: Result<u64, String>) -> ExitCode {
    match r {
        Ok(0) => {
            println!("\nchecks: every outcome check passed: PASS");
            ExitCode::SUCCESS
        }
        Ok(n) => {
            println!("\nchecks: {n} FAILED");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("\nerror: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    allocator::configure();
    let cli = Cli::parse();
    match &cli.cmd {
        Some(Cmd::RunOne(a)) => {
            let rep = run_one(a);
            println!(
                "{}",
                serde_json::to_string(&rep).expect("report serializes")
            );
            if rep.error.is_some() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Some(Cmd::Index(a)) => {
            let _ = std::fs::create_dir_all(&a.dir);
            finish(index(
                &a.dir,
                if a.quick { 2_000 } else { a.blocks },
                a.quick,
                a.seed,
            ))
        }
        Some(Cmd::Scale(a)) => finish(scale(a)),
        Some(Cmd::Prefetch(a)) => finish(prefetch_bench::run(a).map(|ok| u64::from(!ok))),
        None => finish(main_all(&cli.all)),
    }
}

#[cfg(test)]
mod tests {
    use super::check_durable_time;

    /// The durable time lies within the run; unset (0) or after the close is refused.
    #[test]
    fn a_durable_time_outside_the_run_is_refused() {
        assert!(check_durable_time(3.6, 5.6).is_ok());
        assert!(check_durable_time(5.6, 5.6).is_ok());
        assert!(check_durable_time(0.0, 5.6).is_err(), "never set");
        assert!(check_durable_time(5.7, 5.6).is_err(), "after the close");
    }
}
