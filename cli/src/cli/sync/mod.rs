//! `flushpoint sync`: opens (or creates) a home, runs the handshake, block-syncs the
//! synthetic chain to height N with the chosen write mode, commits M blocks in consensus
//! mode, stops cleanly and prints the accounting.
//!
//! The steps of [`run`], in order: `Run::new` checks the flags; `Run::open_home` decides
//! on a read-only open what the run would refuse, then opens the home; `Meters::wrap`
//! wraps its databases for counting; `Run::open_node` runs the handshake;
//! `BlockLoop::block_sync` syncs to N, `BlockLoop::consensus` commits to N + M,
//! `BlockLoop::stop` stops cleanly; `summary` works out and prints what the meters read.
//!
//! Invariant: the chain is a pure function of the seed, the profile and the state, so a run
//! interrupted at any point and resumed with the same flags ends at height N + M with the
//! same app hash as an uninterrupted one.
//! Invariant: nothing is written before every flag is checked and every refusal decided
//! on a read-only open.

mod meters;
mod progress;
mod summary;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use flushpoint::demo::{Block, ChainSpec, Commit, DemoChain, KvApp};
use flushpoint::{
    Db, FlushPolicy, FlushReport, HandshakeReport, HoldingDb, Home, HomeOptions, Mode, NoEvents,
    Node, PREFETCH_WORKERS_DEFAULT, PartSet, PrefetchPool,
};

use self::meters::{Meters, journal_sync_data};
use self::progress::Progress;
use self::summary::{Figures, FlushJson, RunLabels, print_human, summarize};
use super::dbwrap::{Phase, Probe};
use super::error::{CliError, CliResult, describe};
use super::flags::{EngineArg, ProfileArg, resolve_home};
use super::handshake::{classification, handshake_text};
use super::heights::read_durable;
use super::out::{self, outln};

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

/// A run's terms, from its flags: where, which chain, to which heights, how.
struct Run<'a> {
    args: &'a SyncArgs,
    home_path: PathBuf,
    spec: ChainSpec,
    /// The last block-synced height (N).
    target_sync: u64,
    /// The last height (N + M).
    target: u64,
    /// `--mode no-sync`.
    no_sync: bool,
    /// The crash-test probe (markers), under `FLUSHPOINT_CRASH_TEST=1`.
    probe: Option<Arc<Probe>>,
}

impl<'a> Run<'a> {
    /// Checks `a` (each refusal a usage error, before the home is touched) and returns the
    /// run's terms and the home's options.
    fn new(a: &'a SyncArgs) -> CliResult<(Self, HomeOptions)> {
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
        let run = Run {
            args: a,
            home_path,
            spec,
            target_sync,
            target,
            no_sync: a.mode == ModeArg::NoSync,
            probe: Probe::from_env(),
        };
        Ok((run, options))
    }

    /// A library error as the tool says it (what to do about it, for this home).
    fn err(&self, e: flushpoint::Error) -> CliError {
        describe(&e, &self.home_path)
    }

    /// Prints a crash-test marker (nothing outside the crash-test).
    fn mark(&self, line: impl FnOnce() -> String) {
        if let Some(p) = &self.probe {
            p.mark(&line());
        }
    }

    /// Tells the crash-test probe the node's phase (nothing outside the crash-test).
    fn set_phase(&self, phase: Phase) {
        if let Some(p) = &self.probe {
            p.set_phase(phase);
        }
    }

    /// Opens the home: first decides, on a read-only open, what the run would refuse (so a
    /// refusal leaves every file as it was), then opens it for writing.
    fn open_home(&self, options: HomeOptions) -> CliResult<Home> {
        let err = |e| self.err(e);
        self.mark(|| "recovery-begin".into());
        refuse_read_only(&self.home_path, &options, &self.spec, self.target).map_err(
            |e| match e {
                Refusal::Home(e) => err(e),
                Refusal::Cli(e) => e,
            },
        )?;
        let home = Home::open_with(&self.home_path, options).map_err(err)?;
        if let Some(p) = &self.probe {
            // What the handshake is about to find (read-only), so a kill during the repair
            // still tells the crash-test which case it interrupted.
            let d = read_durable(&home).map_err(err)?;
            let case = classification(&d.observed, d.state.is_some())
                .case
                .unwrap_or("inconsistent");
            p.mark(&format!("handshake-begin case={case}"));
        }
        Ok(home)
    }

    /// Opens the app over the app database (with prefetch workers for `--prefetch on`) and
    /// the node over the three `dbs`: the handshake runs here.
    fn open_node(&self, dbs: [Arc<dyn Db>; 3]) -> CliResult<Opened> {
        let err = |e| self.err(e);
        let [bs_db, st_db, app_db] = dbs;
        let pool = match self.args.prefetch {
            PrefetchArg::On => Some(PrefetchPool::new(PREFETCH_WORKERS_DEFAULT).map_err(err)?),
            PrefetchArg::Off => None,
        };
        let mut app = KvApp::open(Arc::new(HoldingDb::new(app_db))).map_err(err)?;
        if let Some(pool) = &pool {
            app = app.with_prefetch(pool);
        }
        let (node, report) = Node::open(
            bs_db,
            st_db,
            Box::new(app),
            self.spec.chain(),
            Box::new(NoEvents),
        )
        .map_err(err)?;
        self.mark(|| {
            format!(
                "handshake-end case={} applied={} app_replayed={} height={}",
                report.case.name(),
                report.applied,
                report.app_replayed,
                report.height
            )
        });
        Ok(Opened { node, report, pool })
    }

    /// Prints what the run found and is about to do (nothing with `--json`).
    fn print_start(&self, home: &Home, report: &HandshakeReport) {
        let a = self.args;
        if a.json {
            return;
        }
        outln!(
            "flushpoint sync: home {} ({} engine), chain seed {}, profile {}, mode {}",
            self.home_path.display(),
            home.engine(),
            a.seed,
            a.profile.name(),
            a.mode.name()
        );
        outln!("{}", handshake_text(report));
        outln!(
            "target: {} block-synced + {} consensus blocks = height {}",
            a.blocks,
            a.consensus_blocks,
            self.target
        );
        if self.no_sync {
            outln!(
                "note: --mode no-sync syncs nothing; it measures the floor and is NOT crash-safe"
            );
        }
    }

    /// The flush policy of the block-sync phase.
    fn flush_policy(&self) -> FlushPolicy {
        let mut policy = FlushPolicy {
            background: !self.args.sync_flush,
            ..FlushPolicy::default()
        };
        if let Some(n) = self.args.flush_every {
            policy.window_blocks_max = Some(n);
        }
        if self.probe.as_ref().is_some_and(|p| p.gated()) {
            // Gated markers stall the child for as long as its parent takes to answer: with the
            // time trigger off, flush points (and so the markers) depend on the seed alone and
            // a crash-test plan replays exactly.
            policy.interval = Duration::MAX;
        }
        policy
    }

    /// The mode the block-sync phase commits each block in, or `None` for held writes
    /// written at flush points.
    fn per_block_mode(&self) -> Option<Mode> {
        match self.args.mode {
            ModeArg::Deferred | ModeArg::NoSync => None,
            ModeArg::PerBlock => Some(Mode::Consensus),
            ModeArg::Legacy => Some(Mode::Legacy),
        }
    }

    /// What names the run in its summary.
    fn labels(&self) -> RunLabels {
        RunLabels {
            home: self.home_path.display().to_string(),
            seed: self.args.seed,
            profile: self.args.profile.name(),
            mode: self.args.mode.name(),
            floor_only: self.no_sync,
        }
    }
}

/// The node after the handshake, what the handshake did, and the prefetch workers.
struct Opened {
    node: Node<DemoChain>,
    report: HandshakeReport,
    pool: Option<PrefetchPool>,
}

/// What the clean stop leaves for the summary.
struct Stopped {
    flush_points: u64,
    peak_held_bytes: u64,
    /// Wall time from the first block to the stop.
    elapsed: Duration,
    timeline: Vec<FlushJson>,
}

/// The node and what drives it block by block, from the handshake to the clean stop: the
/// chain's next block (and prefetch of the one after), the progress display, the flush
/// timeline.
struct BlockLoop<'a> {
    run: &'a Run<'a>,
    node: Node<DemoChain>,
    /// The prefetch workers, kept alive for the node's life: dropping the pool stops them
    /// (declared after `node`, so dropped after it).
    pool: Option<PrefetchPool>,
    /// With prefetch, the next block's transactions, built once: for its preview and the
    /// block itself.
    upcoming: Option<Vec<bytes::Bytes>>,
    progress: Progress,
    /// When the first block began: the timeline's times count from here.
    started: Instant,
    timeline: Vec<FlushJson>,
}

impl<'a> BlockLoop<'a> {
    fn new(
        run: &'a Run<'a>,
        node: Node<DemoChain>,
        pool: Option<PrefetchPool>,
        started: Instant,
    ) -> Self {
        let progress = Progress::new(node.height(), run.target, run.args.json);
        BlockLoop {
            run,
            node,
            pool,
            upcoming: None,
            progress,
            started,
            timeline: Vec::new(),
        }
    }

    /// Adds a completed flush point to the timeline.
    fn record(&mut self, r: Option<FlushReport>) {
        if let Some(r) = r {
            self.timeline.push(FlushJson::new(r, self.started));
        }
    }

    /// The node's next block. With prefetch, block N+1 (below the target) goes to the node
    /// first, so its reads start while block N executes; its transactions are kept in
    /// `upcoming` and reused for it, so each block's transactions are built once.
    fn next_block(&mut self) -> flushpoint::Result<(Block, PartSet, Commit)> {
        let spec = &self.run.spec;
        let (b, parts, c) = match self.upcoming.take() {
            Some(txs) => spec.next_block_with(self.node.state(), txs),
            None => spec.next_block(self.node.state()),
        };
        if self.pool.is_some() && b.header.height < self.run.target {
            let next = spec.preview(b.header.height + 1);
            self.node.prefetch_next(&next)?;
            self.upcoming = Some(next.txs);
        }
        Ok((b, parts, c))
    }

    /// The block-sync phase, up to N: blocks held and written at flush points (or each
    /// committed as it comes, for `--mode per-block` and `legacy`); it ends with the node's
    /// last flush point and the switch to consensus mode.
    fn block_sync(mut self) -> CliResult<Self> {
        let run = self.run;
        let err = |e| run.err(e);
        let per_block = run.per_block_mode();
        if let Some(m) = per_block {
            self.node.set_per_block_mode(m).map_err(err)?;
        } else if self.node.height() < run.target_sync {
            run.set_phase(Phase::BlockSync);
            self.node
                .start_block_sync(run.flush_policy(), Instant::now())
                .map_err(err)?;
        }
        while self.node.height() < run.target_sync {
            if out::cut() {
                return self.stop_on_cut();
            }
            let (b, parts, c) = self.next_block().map_err(err)?;
            if per_block.is_some() {
                self.node.commit_block(&b, &parts, &c).map_err(err)?;
            } else {
                let now = Instant::now();
                let r = self.node.sync_block(&b, &parts, &c, now).map_err(err)?;
                self.record(r);
                let r = self.node.on_timer(now).map_err(err)?;
                self.record(r);
            }
            // Between two blocks (held writes in memory): a crash-test kill point.
            run.mark(|| format!("block h={}", self.node.height()));
            self.progress.update(
                self.node.height(),
                run.target,
                "block sync",
                self.node.deferred().flush_points,
            );
        }
        let r = self.node.switch_to_consensus(Instant::now()).map_err(err)?;
        self.record(r);
        run.set_phase(Phase::Consensus);
        self.node.set_per_block_mode(Mode::Consensus).map_err(err)?;
        Ok(self)
    }

    /// The consensus phase, up to N + M: each block committed with its own synced writes.
    fn consensus(mut self) -> CliResult<Self> {
        let run = self.run;
        let err = |e| run.err(e);
        while self.node.height() < run.target {
            if out::cut() {
                return self.stop_on_cut();
            }
            let (b, parts, c) = self.next_block().map_err(err)?;
            self.node.commit_block(&b, &parts, &c).map_err(err)?;
            // After a consensus block's four synced writes: a crash-test kill point.
            run.mark(|| format!("consensus-block h={}", self.node.height()));
            self.progress.update(
                self.node.height(),
                run.target,
                "consensus",
                self.node.deferred().flush_points,
            );
        }
        Ok(self)
    }

    /// Stops the node cleanly (its last flush point, if it holds anything).
    fn stop(self) -> CliResult<Stopped> {
        let run = self.run;
        // The pool outlives the node's stop: dropped at the end of this function.
        let BlockLoop {
            node,
            pool: _pool,
            progress,
            started,
            mut timeline,
            ..
        } = self;
        let flush_points = node.deferred().flush_points;
        let peak_held_bytes = node.deferred().peak_held_bytes;
        if let Some(r) = node.stop(Instant::now()).map_err(|e| run.err(e))? {
            timeline.push(FlushJson::new(r, started));
        }
        let elapsed = started.elapsed();
        progress.finish();
        Ok(Stopped {
            flush_points,
            peak_held_bytes,
            elapsed,
            timeline,
        })
    }

    /// Stops the node cleanly (held writes flushed, the home consistent) after a write to
    /// stdout or stderr failed, and ends the command with [`CliError::output_cut`].
    fn stop_on_cut(self) -> CliResult<Self> {
        let run = self.run;
        self.node.stop(Instant::now()).map_err(|e| run.err(e))?;
        Err(CliError::output_cut())
    }
}

/// Runs `flushpoint sync`: the steps of the module doc, in order.
pub fn run(a: &SyncArgs) -> CliResult<()> {
    let (run, options) = Run::new(a)?;
    let err = |e| run.err(e);
    let home = run.open_home(options)?;
    let (meters, dbs) = Meters::wrap(&home, run.no_sync, &run.probe);
    let Opened { node, report, pool } = run.open_node(dbs)?;
    run.print_start(&home, &report);
    let start_height = node.height();
    if start_height > run.target {
        return Err(above_target(&run.home_path, start_height, run.target));
    }
    let start = meters.read();
    let journal_start = journal_sync_data(&home);
    let block_loop = BlockLoop::new(&run, node, pool, start.at).block_sync()?;
    let block_sync_end_height = block_loop.node.height();
    let after_block_sync = meters.read();
    let block_loop = block_loop.consensus()?;
    let after_consensus = meters.read();
    let stopped = block_loop.stop()?;
    let after_stop = meters.read();
    let journal_end = journal_sync_data(&home);
    run.mark(|| "sync-done".into());

    let figures = Figures {
        start_height,
        block_sync_end_height,
        target: run.target,
        start,
        after_block_sync,
        after_consensus,
        after_stop,
        journal_sync_data: journal_end - journal_start,
        elapsed: stopped.elapsed,
        flush_points: stopped.flush_points,
        peak_held_bytes: stopped.peak_held_bytes,
        timeline: stopped.timeline,
    };
    let durable = read_durable(&home).map_err(err)?;
    let summary = summarize(run.labels(), &home, figures, durable, &report).map_err(err)?;
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
