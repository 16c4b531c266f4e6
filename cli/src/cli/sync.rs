//! `flushpoint sync`: opens (or creates) a home, runs the handshake, block-syncs the
//! synthetic chain to height N with the chosen write mode, commits M blocks in consensus
//! mode, stops cleanly and prints the accounting.
//!
//! Invariant: the chain is a pure function of the seed, the profile and the state, so a run
//! interrupted at any point and resumed with the same flags ends at height N + M with the
//! same app hash as an uninterrupted one.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use flushpoint::demo::{ChainSpec, KvApp};
use flushpoint::{
    BackendCounters, CountingDb, Db, FlushPolicy, HoldingDb, Home, HomeOptions, Mode, NoEvents,
    Node, SyncCounters, SyncCounts,
};

use super::dbwrap::{CliDb, CliUnitGroup, Phase, Probe, UnitCounters, Which};
use super::error::{CliError, CliResult, describe};
use super::flags::{EngineArg, ProfileArg, resolve_home};
use super::handshake::{classification, handshake_text};
use super::heights::{Durable, read_durable};
use super::out::{self, errln, outln};
use super::sync_summary::{
    Databases, DbSummary, FlushJson, FsyncsPerBlock, HandshakeJson, JournalSummary, SyncSummary,
    print_human,
};

/// How plain progress lines are spaced when stderr is not a terminal.
const PLAIN_PROGRESS_INTERVAL: Duration = Duration::from_secs(2);

/// How blocks are written during the block-sync part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Writes held in memory and written at flush points (flushpoint's block sync).
    Deferred,
    /// Each block written as it comes: 1 + 3 synced batches (the consensus path).
    PerBlock,
    /// The reference node's old path: 5 synced batches per block.
    Legacy,
    /// Deferred, with every write downgraded to unsynced: the floor, not crash-safe.
    NoSync,
}

impl ModeArg {
    fn name(self) -> &'static str {
        match self {
            ModeArg::Deferred => "deferred",
            ModeArg::PerBlock => "per-block",
            ModeArg::Legacy => "legacy",
            ModeArg::NoSync => "no-sync",
        }
    }
}

/// Flags of `flushpoint sync`.
#[derive(Debug, Clone, Args)]
pub struct SyncArgs {
    /// Home directory [default: $FLUSHPOINT_HOME, else ./flushpoint-home]
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Length of the block-synced part of the chain (heights 1..=N).
    #[arg(long, default_value_t = 10000)]
    pub blocks: u64,
    /// Blocks committed in consensus mode after the block-synced part (the run ends at N+M).
    #[arg(long, default_value_t = 20)]
    pub consensus_blocks: u64,
    /// Block sizes.
    #[arg(long, value_enum, default_value_t = ProfileArg::Light)]
    pub profile: ProfileArg,
    /// How the block-synced part is written.
    #[arg(long, value_enum, default_value_t = ModeArg::Deferred)]
    pub mode: ModeArg,
    /// Seed of the synthetic chain.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Storage engine of a new home [default: journal]. Chosen only when the home is created:
    /// an existing home keeps its own, and naming another is refused.
    #[arg(long, value_enum)]
    pub engine: Option<EngineArg>,
    /// How a new journal home indexes its app state [default: runs]: `runs` writes it as
    /// sorted run files (ADR 0014), `tree` inserts it into the index's B-tree. Chosen
    /// only when the home is created: an existing home keeps its own, and naming another
    /// is refused; `runs` on a redb home is refused.
    #[arg(long, value_enum)]
    pub app_index: Option<AppIndexArg>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Take flush points on the block loop's thread, stopping it while they write (by
    /// default a flush thread writes each window while the next one executes).
    #[arg(long)]
    pub sync_flush: bool,
    /// Test knob: also take a flush point every this many blocks (crash-test uses it).
    #[arg(long, hide = true)]
    pub flush_every: Option<u64>,
    /// Prefetch: read the state block N+1 will read on background threads while block N
    /// executes (`on`), or not (`off`). Helps when the state is larger than memory and cold;
    /// the app hash is the same either way.
    #[arg(long, value_enum, default_value_t = PrefetchArg::Off)]
    pub prefetch: PrefetchArg,
    /// Page cache of the home's storage, in MiB: a journal home's index [default: 8], or a
    /// redb home's three databases, a third each [default: 192, 64 each]. On a redb home a
    /// larger cache keeps more of a large app state in memory: block sync is faster at
    /// scale and the process holds more (300k light blocks: 58 s at 192 MiB, 41 s at 768
    /// MiB; peak RSS 1.2 → 2.0 GiB). A journal home's index holds small records only (the
    /// app's state is in runs, parts and large values in the journal): 8 MiB syncs as fast
    /// as 64 (benches/compare/PERFORMANCE.md, "The index cache, again").
    #[arg(long, value_name = "MIB")]
    pub cache_mib: Option<u64>,
}

/// The smallest `--cache-mib`: redb needs room for a few pages per database.
pub const CACHE_MIB_MIN: u64 = 3;

/// The largest `--cache-mib` (1 TiB): far above any machine this runs on, and its bytes fit
/// a `usize` on 64-bit targets.
pub const CACHE_MIB_MAX: u64 = 1024 * 1024;

/// The home's options for `a`: the engine asked for and, with `--cache-mib`, the cache of
/// either engine (all of it to a journal's index; a third to each redb database). A cache
/// out of [`CACHE_MIB_MIN`]..=[`CACHE_MIB_MAX`] is a usage error.
pub fn home_options(a: &SyncArgs) -> CliResult<HomeOptions> {
    let mut options = HomeOptions {
        engine: a.engine.map(EngineArg::engine),
        app_index: a.app_index.map(AppIndexArg::index),
        ..HomeOptions::default()
    };
    if let Some(mib) = a.cache_mib {
        if !(CACHE_MIB_MIN..=CACHE_MIB_MAX).contains(&mib) {
            return Err(CliError::usage(format!(
                "--cache-mib must be between {CACHE_MIB_MIN} and {CACHE_MIB_MAX} (MiB), not {mib}"
            )));
        }
        let bytes = usize::try_from(mib * 1024 * 1024).map_err(|_| {
            CliError::usage(format!(
                "--cache-mib {mib} does not fit this machine's memory"
            ))
        })?;
        options.journal.index_cache_bytes = bytes;
        options.redb.cache_bytes = bytes / 3;
    }
    Ok(options)
}

/// `--app-index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AppIndexArg {
    /// A table in the journal's redb index.
    Tree,
    /// Sorted run files (ADR 0014; the default for a new journal home).
    Runs,
}

impl AppIndexArg {
    fn index(self) -> flushpoint::KeyspaceIndex {
        match self {
            AppIndexArg::Tree => flushpoint::KeyspaceIndex::Tree,
            AppIndexArg::Runs => flushpoint::KeyspaceIndex::Runs,
        }
    }
}

/// `--prefetch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrefetchArg {
    /// Read the next block's state in the background (two worker threads).
    On,
    /// No prefetch (the default).
    Off,
}

/// Counters of one database: its batches (its `CountingDb`) and, on a journal home, its
/// parts of the units the node wrote through the unit group.
struct Meter {
    sync: Arc<SyncCounters>,
    backend: Arc<BackendCounters>,
    units: Option<Arc<UnitCounters>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Snap {
    /// Batches, and bytes of batches and unit parts together.
    counts: SyncCounts,
    sync_data: u64,
    units: u64,
}

impl Meter {
    fn snap(&self) -> Snap {
        let mut counts = self.sync.snapshot();
        let (mut units, mut unit_bytes) = (0, 0);
        if let Some(u) = &self.units {
            units = u.units();
            unit_bytes = u.bytes_written();
        }
        counts.bytes_written += unit_bytes;
        Snap {
            counts,
            sync_data: self.backend.snapshot().sync_data_calls,
            units,
        }
    }
}

fn snap3(m: &[Meter; 3]) -> [Snap; 3] {
    [m[0].snap(), m[1].snap(), m[2].snap()]
}

fn synced(s: &[Snap; 3]) -> u64 {
    s.iter().map(|x| x.counts.synced_batches).sum()
}

struct Progress {
    bar: Option<indicatif::ProgressBar>,
    last_line: Instant,
    start: Instant,
    quiet: bool,
}

impl Progress {
    fn new(from: u64, to: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(to);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{bar:40}] {pos}/{len} blocks  {per_sec}  eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_position(from);
            b
        });
        Progress {
            bar,
            last_line: Instant::now(),
            start: Instant::now(),
            quiet,
        }
    }

    fn update(&mut self, height: u64, target: u64, phase: &str, flushes: u64) {
        if let Some(b) = &self.bar {
            b.set_position(height);
            b.set_message(format!("{phase}, {flushes} flush points"));
        } else if !self.quiet && self.last_line.elapsed() >= PLAIN_PROGRESS_INTERVAL {
            self.last_line = Instant::now();
            errln!(
                "progress: height {height}/{target} ({phase}), {flushes} flush points, {:.1} s",
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The node's next block. With `prefetch`, block N+1 (below `target`) goes to the node
/// first, so its reads start while block N executes; its transactions are kept in
/// `upcoming` and reused for it, so each block's transactions are built once.
fn next_block(
    spec: &ChainSpec,
    node: &mut Node<flushpoint::demo::DemoChain>,
    prefetch: bool,
    target: u64,
    upcoming: &mut Option<Vec<bytes::Bytes>>,
) -> flushpoint::Result<(
    flushpoint::demo::Block,
    flushpoint::PartSet,
    flushpoint::demo::Commit,
)> {
    let (b, parts, c) = match upcoming.take() {
        Some(txs) => spec.next_block_with(node.state(), txs),
        None => spec.next_block(node.state()),
    };
    if prefetch && b.header.height < target {
        let next = spec.preview(b.header.height + 1);
        node.prefetch_next(&next)?;
        *upcoming = Some(next.txs);
    }
    Ok((b, parts, c))
}

/// Real `sync_data` calls of a journal home's engine so far (segments and index); 0 on redb.
fn journal_sync_data(home: &Home) -> u64 {
    home.journal().map_or(0, |j| {
        let c = j.counts();
        c.journal_sync_data_calls + c.index.sync_data_calls
    })
}

/// Synced units written through the CLI's unit group so far (a unit writes the three
/// databases at once, past the per-database meters; a synced batch of one keyspace is
/// counted there, not here); 0 on redb.
fn synced_units(group: Option<&CliUnitGroup>) -> u64 {
    group.map_or(0, CliUnitGroup::synced_units)
}

/// The run's two targets: the last block-synced height (`initial_height - 1 + blocks`)
/// and the last height (`+ consensus_blocks`). A sum past `u64::MAX` is a usage error, so a
/// flag never wraps into a small height.
pub fn targets(initial_height: u64, blocks: u64, consensus_blocks: u64) -> CliResult<(u64, u64)> {
    let target_sync = initial_height
        .checked_sub(1)
        .and_then(|h| h.checked_add(blocks));
    let target = target_sync.and_then(|t| t.checked_add(consensus_blocks));
    match (target_sync, target) {
        (Some(s), Some(t)) => Ok((s, t)),
        _ => Err(CliError::usage(format!(
            "--blocks {blocks} + --consensus-blocks {consensus_blocks} from initial height {initial_height} ends past the largest height ({}): use smaller counts",
            u64::MAX
        ))),
    }
}

/// Stops the node cleanly (held writes flushed, the home consistent) after a write to
/// stdout or stderr failed, and ends the command with [`CliError::output_cut`].
fn stop_on_cut(
    node: Node<flushpoint::demo::DemoChain>,
    err: impl Fn(flushpoint::Error) -> CliError,
) -> CliResult<()> {
    node.stop(Instant::now()).map_err(err)?;
    Err(CliError::output_cut())
}

/// The refusal of a home above the run's target.
fn above_target(home: &std::path::Path, height: u64, target: u64) -> CliError {
    CliError::usage(format!(
        "home {} is at height {height}, above this run's target {target}: use larger --blocks/--consensus-blocks, or `flushpoint rollback`",
        home.display(),
    ))
}

/// Why [`refuse_read_only`] refused.
enum Refusal {
    Home(flushpoint::Error),
    Cli(CliError),
}

/// Decides, on a read-only open of an existing home, what the run would refuse once the
/// home is open — another engine, a damaged home, another chain's genesis, a home above
/// `target` — so that a refusal leaves every file as it was (a writable open rewrites
/// redb's headers and a journal's recovery state first). `Ok` when there is no home yet.
fn refuse_read_only(
    home_path: &std::path::Path,
    options: &HomeOptions,
    spec: &ChainSpec,
    target: u64,
) -> Result<(), Refusal> {
    let format = home_path.join("FORMAT");
    if !format.try_exists().unwrap_or(true) {
        return Ok(());
    }
    let home = Home::open_read_only(home_path, options).map_err(Refusal::Home)?;
    let (node, _) = Node::open_home(
        home,
        |db| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(db)))?)),
        spec.chain(),
        Box::new(NoEvents),
    )
    .map_err(Refusal::Home)?;
    if node.height() > target {
        return Err(Refusal::Cli(above_target(home_path, node.height(), target)));
    }
    Ok(())
}

/// Runs `flushpoint sync`.
pub fn run(a: &SyncArgs) -> CliResult<()> {
    let home_path = resolve_home(a.home.as_deref());
    if a.blocks == 0 {
        return Err(CliError::usage(
            "--blocks must be at least 1 (the block-synced part cannot be empty)",
        ));
    }
    if a.flush_every == Some(0) {
        return Err(CliError::usage("--flush-every must be at least 1"));
    }
    let spec = ChainSpec::new(a.seed, a.profile.profile());
    let (target_sync, target) = targets(spec.initial_height, a.blocks, a.consensus_blocks)?;
    let options = home_options(a)?;
    let err = |e: flushpoint::Error| describe(&e, &home_path);
    let probe = Probe::from_env();
    if let Some(p) = &probe {
        p.mark("recovery-begin");
    }
    refuse_read_only(&home_path, &options, &spec, target).map_err(|e| match e {
        Refusal::Home(e) => err(e),
        Refusal::Cli(e) => e,
    })?;
    let home = Home::open_with(&home_path, options).map_err(err)?;
    if let Some(p) = &probe {
        // What the handshake is about to find (read-only), so a kill during the repair
        // still tells the crash-test which case it interrupted.
        let d = read_durable(&home).map_err(err)?;
        let case = classification(&d.observed, d.state.is_some())
            .case
            .unwrap_or("inconsistent");
        p.mark(&format!("handshake-begin case={case}"));
    }
    let no_sync = a.mode == ModeArg::NoSync;

    // The real syncs per database: redb's file counters; a journal's three keyspaces share
    // its segments, counted by the engine (see `journal_sync_data`).
    let backends: [Arc<BackendCounters>; 3] = match home.redb_dbs() {
        Some(dbs) => dbs.map(|d| d.backend_counters()),
        None => Default::default(),
    };
    let [bs_backend, st_backend, app_backend] = backends;
    // A journal home's keyspaces are one unit group (ADR 0011): the CLI's wrappers pass it
    // on, through its own group (markers, no-sync), so the node writes units.
    let unit_group = home
        .block_store_db
        .unit_group()
        .map(|m| Arc::new(CliUnitGroup::new(m.group, no_sync, probe.clone())));
    let wrap = |db: Arc<dyn Db>, backend: Arc<BackendCounters>, which: Which| {
        let member = db.unit_group();
        let counting = Arc::new(CountingDb::new(db));
        let m = Meter {
            sync: counting.counters(),
            backend,
            units: member
                .as_ref()
                .zip(unit_group.as_ref())
                .map(|(member, group)| group.counters(&member.name)),
        };
        let mut cli = CliDb::new(counting as Arc<dyn Db>, which, no_sync, probe.clone());
        if let (Some(group), Some(member)) = (&unit_group, member) {
            cli = cli.in_group(group.clone(), member.name);
        }
        (Arc::new(cli) as Arc<dyn Db>, m)
    };
    let (bs_db, bs_m) = wrap(home.block_store_db.clone(), bs_backend, Which::BlockStore);
    let (st_db, st_m) = wrap(home.state_db.clone(), st_backend, Which::State);
    let (app_db, app_m) = wrap(home.app_db.clone(), app_backend, Which::App);
    let meters = [bs_m, st_m, app_m];

    // Kept alive for the node's life: dropping it stops the workers.
    let pool = match a.prefetch {
        PrefetchArg::On => {
            Some(flushpoint::PrefetchPool::new(flushpoint::PREFETCH_WORKERS_DEFAULT).map_err(err)?)
        }
        PrefetchArg::Off => None,
    };
    let mut app = KvApp::open(Arc::new(HoldingDb::new(app_db))).map_err(err)?;
    if let Some(pool) = &pool {
        app = app.with_prefetch(pool);
    }
    let (mut node, report) = Node::open(
        bs_db,
        st_db,
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .map_err(err)?;
    if let Some(p) = &probe {
        p.mark(&format!(
            "handshake-end case={} applied={} app_replayed={} height={}",
            report.case.name(),
            report.applied,
            report.app_replayed,
            report.height
        ));
    }

    if !a.json {
        outln!(
            "flushpoint sync: home {} ({} engine), chain seed {}, profile {}, mode {}",
            home_path.display(),
            home.engine(),
            a.seed,
            a.profile.name(),
            a.mode.name()
        );
        outln!("{}", handshake_text(&report));
        outln!(
            "target: {} block-synced + {} consensus blocks = height {target}",
            a.blocks,
            a.consensus_blocks
        );
        if no_sync {
            outln!(
                "note: --mode no-sync syncs nothing; it measures the floor and is NOT crash-safe"
            );
        }
    }
    if node.height() > target {
        return Err(above_target(&home_path, node.height(), target));
    }

    let start_height = node.height();
    let s0 = snap3(&meters);
    let u0 = synced_units(unit_group.as_deref());
    let j0 = journal_sync_data(&home);
    let t0 = Instant::now();
    let mut progress = Progress::new(start_height, target, a.json);
    let mut timeline: Vec<FlushJson> = Vec::new();
    let mut record = |r: Option<flushpoint::FlushReport>| {
        if let Some(r) = r {
            timeline.push(FlushJson {
                trigger: r.trigger,
                from: r.from,
                to: r.to,
                bytes: r.bytes,
                flush_points: r.flush_points,
                duration_s: r.duration.as_secs_f64(),
                loop_wait_s: r.loop_wait.as_secs_f64(),
                at_s: t0.elapsed().as_secs_f64(),
            });
        }
    };

    // Part 1: the block-synced part, up to N.
    let mut policy = FlushPolicy {
        background: !a.sync_flush,
        ..FlushPolicy::default()
    };
    if let Some(n) = a.flush_every {
        policy.window_blocks_max = Some(n);
    }
    if probe.as_ref().is_some_and(|p| p.gated()) {
        // Gated markers stall the child for as long as its parent takes to answer: with the
        // time trigger off, flush points (and so the markers) depend on the seed alone and
        // a crash-test plan replays exactly.
        policy.interval = Duration::MAX;
    }
    let per_block = match a.mode {
        ModeArg::Deferred | ModeArg::NoSync => None,
        ModeArg::PerBlock => Some(Mode::Consensus),
        ModeArg::Legacy => Some(Mode::Legacy),
    };
    if let Some(m) = per_block {
        node.set_per_block_mode(m).map_err(err)?;
    } else if node.height() < target_sync {
        if let Some(p) = &probe {
            p.set_phase(Phase::BlockSync);
        }
        node.start_block_sync(policy, Instant::now()).map_err(err)?;
    }
    // With prefetch, the next block's transactions are built once: for its preview and the
    // block itself.
    let mut upcoming: Option<Vec<bytes::Bytes>> = None;
    while node.height() < target_sync {
        if out::cut() {
            return stop_on_cut(node, err);
        }
        let (b, parts, c) =
            next_block(&spec, &mut node, pool.is_some(), target, &mut upcoming).map_err(err)?;
        if per_block.is_some() {
            node.commit_block(&b, &parts, &c).map_err(err)?;
        } else {
            let now = Instant::now();
            record(node.sync_block(&b, &parts, &c, now).map_err(err)?);
            record(node.on_timer(now).map_err(err)?);
        }
        if let Some(p) = &probe {
            // Between two blocks (held writes in memory): a crash-test kill point.
            p.mark(&format!("block h={}", node.height()));
        }
        progress.update(
            node.height(),
            target,
            "block sync",
            node.deferred().flush_points,
        );
    }
    record(node.switch_to_consensus(Instant::now()).map_err(err)?);
    if let Some(p) = &probe {
        p.set_phase(Phase::Consensus);
    }
    node.set_per_block_mode(Mode::Consensus).map_err(err)?;
    let t1 = Instant::now();
    let h1 = node.height();
    let s1 = snap3(&meters);
    let u1 = synced_units(unit_group.as_deref());

    // Part 2: consensus, up to N + M.
    while node.height() < target {
        if out::cut() {
            return stop_on_cut(node, err);
        }
        let (b, parts, c) =
            next_block(&spec, &mut node, pool.is_some(), target, &mut upcoming).map_err(err)?;
        node.commit_block(&b, &parts, &c).map_err(err)?;
        if let Some(p) = &probe {
            // After a consensus block's four synced writes: a crash-test kill point.
            p.mark(&format!("consensus-block h={}", node.height()));
        }
        progress.update(
            node.height(),
            target,
            "consensus",
            node.deferred().flush_points,
        );
    }
    let s2 = snap3(&meters);
    let u2 = synced_units(unit_group.as_deref());
    let flush_points = node.deferred().flush_points;
    let peak_held_bytes = node.deferred().peak_held_bytes;
    record(node.stop(Instant::now()).map_err(err)?);
    let elapsed = t0.elapsed();
    progress.finish();
    let s3 = snap3(&meters);
    let j3 = journal_sync_data(&home);
    if let Some(p) = &probe {
        p.mark("sync-done");
    }

    let Durable {
        heights, app_hash, ..
    } = read_durable(&home).map_err(err)?;
    let sync_blocks = h1 - start_height;
    let cons_blocks = target - h1;
    let blocks = sync_blocks + cons_blocks;
    let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
    let mut dbs = Vec::with_capacity(3);
    let mut bytes_written = 0;
    let mut sync_data = 0;
    for i in 0..3 {
        let d = s3[i].counts - s0[i].counts;
        let sd = s3[i].sync_data - s0[i].sync_data;
        bytes_written += d.bytes_written;
        sync_data += sd;
        let disk = match home.redb_dbs() {
            Some(dbs) => dbs[i].disk_size_bytes().map_err(err)?,
            None => 0,
        };
        dbs.push(DbSummary {
            synced_batches: d.synced_batches,
            buffered_batches: d.buffered_batches,
            units: s3[i].units - s0[i].units,
            sync_data_calls: sd,
            bytes_written: d.bytes_written,
            disk_size_bytes: disk,
        });
    }
    sync_data += j3 - j0;
    let journal = match home.journal() {
        Some(j) => Some(JournalSummary {
            counts: j.counts(),
            disk_size_bytes: j.disk_size_bytes().map_err(err)?,
        }),
        None => None,
    };
    let mut dbs = dbs.into_iter();
    let mut next_db = || dbs.next().expect("three databases");
    let databases = Databases {
        block_store: next_db(),
        state: next_db(),
        app: next_db(),
    };
    let secs = elapsed.as_secs_f64();
    let sync_secs = t1.saturating_duration_since(t0).as_secs_f64();
    let summary = SyncSummary {
        home: home_path.display().to_string(),
        seed: a.seed,
        profile: a.profile.name(),
        mode: a.mode.name(),
        engine: home.engine().name(),
        floor_only: no_sync,
        target_height: target,
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
            block_sync: per(synced(&s1) - synced(&s0) + (u1 - u0), sync_blocks),
            consensus: per(synced(&s2) - synced(&s1) + (u2 - u1), cons_blocks),
            sync_data_overall: per(sync_data, blocks),
        },
        flush_points,
        flush_loop_wait_s: timeline.iter().map(|f| f.loop_wait_s).sum(),
        flush_timeline: timeline,
        bytes_written,
        databases,
        journal,
        peak_held_bytes,
        peak_rss_bytes: peak_rss_bytes(),
        heights,
        app_hash,
        handshake: HandshakeJson {
            case: report.case.name(),
            observed: report.observed,
            app_replayed: report.app_replayed,
            applied: report.applied,
            height: report.height,
        },
    };
    drop(home);
    if a.json {
        let line = serde_json::to_string(&summary)
            .map_err(|e| CliError::failure(format!("cannot render the summary: {e}")))?;
        outln!("{line}");
    } else {
        print_human(&summary);
    }
    Ok(())
}

/// Peak resident set size of this process (`VmHWM` in /proc/self/status), in bytes.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::error::EXIT_USAGE;
    use clap::Parser;

    /// `flushpoint sync`'s flags alone.
    #[derive(Parser)]
    struct Sync {
        #[command(flatten)]
        args: SyncArgs,
    }

    fn options(flags: &[&str]) -> CliResult<HomeOptions> {
        let parsed = Sync::try_parse_from(std::iter::once("sync").chain(flags.iter().copied()))
            .expect("flags parse");
        home_options(&parsed.args)
    }

    #[test]
    fn cache_mib_sets_the_journal_index_and_a_third_to_each_redb_database() {
        let o = options(&["--cache-mib", "768"]).expect("in range");
        assert_eq!(o.journal.index_cache_bytes, 768 << 20);
        assert_eq!(o.redb.cache_bytes, 256 << 20);
        let d = options(&[]).expect("defaults");
        let defaults = HomeOptions::default();
        assert_eq!(
            d.journal.index_cache_bytes,
            defaults.journal.index_cache_bytes
        );
        assert_eq!(d.redb.cache_bytes, defaults.redb.cache_bytes);
        // The flag's documented defaults are the engines' own.
        assert_eq!(defaults.journal.index_cache_bytes, 8 << 20);
        assert_eq!(defaults.redb.cache_bytes * 3, 192 << 20);
    }

    #[test]
    fn targets_that_overflow_a_height_are_a_usage_error() {
        assert_eq!(targets(1, 10, 2).expect("small"), (10, 12));
        assert_eq!(targets(5, 10, 0).expect("initial height 5"), (14, 14));
        assert_eq!(
            targets(1, u64::MAX - 2, 2).expect("ends at u64::MAX"),
            (u64::MAX - 2, u64::MAX)
        );
        for (initial, n, m) in [
            (1, u64::MAX, 1),
            (1, u64::MAX - 1, 2),
            (2, u64::MAX, 0),
            (1, 1, u64::MAX),
            (0, 1, 1),
        ] {
            let Err(e) = targets(initial, n, m) else {
                panic!("{initial} + {n} + {m} did not overflow");
            };
            assert_eq!(e.code, EXIT_USAGE, "{}", e.message);
            assert!(e.message.contains("--blocks"), "{}", e.message);
        }
    }

    #[test]
    fn cache_mib_out_of_range_is_a_usage_error() {
        for bad in ["0", "2", &(CACHE_MIB_MAX + 1).to_string()] {
            let e = options(&["--cache-mib", bad]).expect_err(bad);
            assert_eq!(e.code, EXIT_USAGE, "{bad}: {}", e.message);
            assert!(e.message.contains("--cache-mib"), "{}", e.message);
        }
        assert!(options(&["--cache-mib", &CACHE_MIB_MIN.to_string()]).is_ok());
        assert!(options(&["--cache-mib", &CACHE_MIB_MAX.to_string()]).is_ok());
    }
}
