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

mod args;
mod meters;
mod progress;
mod summary;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::demo::{Block, ChainSpec, Commit, DemoChain, KvApp};
use flushpoint::prefetch::{PREFETCH_WORKERS_DEFAULT, PrefetchPool};
use flushpoint::{
    Db, FlushPolicy, FlushReport, HandshakeReport, HoldingDb, Home, HomeOptions, Mode, NoEvents,
    Node, PartSet,
};

use self::args::{ModeArg, PrefetchArg, home_options};
pub use self::args::{SyncArgs, targets};
use self::meters::{Meters, journal_sync_data};
use self::progress::Progress;
use self::summary::{Figures, FlushJson, OpenTimes, RunLabels, print_human, summarize};
use super::dbwrap::{Phase, Probe};
use super::error::{CliError, CliResult, describe};
use super::flags::resolve_home;
use super::handshake::{classification, handshake_text};
use super::heights::read_durable;
use super::out::{self, outln};

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
    /// refusal leaves every file as it was), then opens it for writing. Notes how long each
    /// took in `times`.
    fn open_home(&self, options: HomeOptions, times: &mut OpenTimes) -> CliResult<Home> {
        let err = |e| self.err(e);
        self.mark(|| "recovery-begin".into());
        let began = Instant::now();
        refuse_read_only(&self.home_path, &options, &self.spec, self.target).map_err(
            |e| match e {
                Refusal::Home(e) => err(e),
                Refusal::Cli(e) => e,
            },
        )?;
        let checked = Instant::now();
        times.check_s = (checked - began).as_secs_f64();
        let home = Home::open_with(&self.home_path, options).map_err(err)?;
        times.home_s = checked.elapsed().as_secs_f64();
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
    /// the node over the three `dbs`: the handshake runs here, its time noted in `times`.
    fn open_node(&self, dbs: [Arc<dyn Db>; 3], times: &mut OpenTimes) -> CliResult<Opened> {
        let err = |e| self.err(e);
        let began = Instant::now();
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
        times.handshake_s = began.elapsed().as_secs_f64();
        times.total_s = times.check_s + times.home_s + times.handshake_s;
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
    fn print_start(&self, home: &Home, report: &HandshakeReport, times: &OpenTimes) {
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
            "opened in {:.3} s: read-only check {:.3} s, open and recovery {:.3} s, handshake {:.3} s",
            times.total_s,
            times.check_s,
            times.home_s,
            times.handshake_s
        );
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
        let mut policy = FlushPolicy::default().with_background(!self.args.sync_flush);
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
    let mut times = OpenTimes::default();
    let home = run.open_home(options, &mut times)?;
    let (meters, dbs) = Meters::wrap(&home, run.no_sync, &run.probe);
    let Opened { node, report, pool } = run.open_node(dbs, &mut times)?;
    run.print_start(&home, &report, &times);
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
    let summary = summarize(run.labels(), &home, figures, durable, &report, times).map_err(err)?;
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
