//! `flushpoint crash-test`: a real-process crash loop. Runs an uncut `sync` for reference,
//! then on fresh homes spawns `flushpoint sync` with the same flags, SIGKILLs it at chosen
//! `@fp` markers — inside flush points (before, between and after the three synced
//! writes), during the restart's recovery (before the handshake, around each repair
//! write), between two block-synced blocks or two consensus blocks — restarts it until a
//! run completes, and compares the final heights and app hash with the reference.
//!
//! Synchronisation, not timing: the children run with `FLUSHPOINT_TEST_MARKER_GATE=1`, so
//! after printing each marker a child waits for a line on its stdin. The parent reads the
//! marker, and either answers (the child goes on) or SIGKILLs the child while it waits
//! there: every kill lands exactly at its marker, on any machine and under any load. A
//! plan with no kill left closes the child's stdin, which lifts the gate.
//!
//! Invariant: a kill is classified from what the child had printed when it died, never
//! from the plan, so "inside a flush point" and "during recovery" count only kills that
//! really landed there.
//! Invariant: everything but the reported times comes from the seed alone; the seed is
//! printed, and rerunning with it replays the same kills at the same markers with the same
//! outcomes (the gated children also run with the flush interval off, so their flush
//! points do not depend on the clock).
//!
//! The parts: `plan` draws each child run's kills from the seed, `child` runs one child
//! and reads what it did, `save_dir` keeps the first home killed inside a flush point; this
//! module runs the reference and the rounds and reports.

mod child;
mod plan;
mod save_dir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use self::child::{ChildChain, Outcome, Runner};
use self::plan::{Plan, Planner};
use self::save_dir::SaveDir;
use super::error::{CliError, CliResult};
use super::flags::{EngineArg, ProfileArg};
use super::out::{self, errln, outln};
use super::sync::targets;

/// Restarts allowed in one round before giving up (each restart must make progress or hit
/// a kill; this bounds a test that cannot finish).
const ROUND_RUNS_MAX: u32 = 200;

/// Flags of `flushpoint crash-test`.
#[derive(Debug, Clone, Args)]
pub struct CrashArgs {
    /// Number of SIGKILLs to land.
    #[arg(long, default_value_t = 50)]
    pub kills: u32,
    /// Seed of the chain and of the kill plans.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Block-synced blocks per child run (small, so many kills finish quickly).
    #[arg(long, default_value_t = 300)]
    pub blocks: u64,
    /// Consensus blocks per child run.
    #[arg(long, default_value_t = 5)]
    pub consensus_blocks: u64,
    /// Block sizes.
    #[arg(long, value_enum, default_value_t = ProfileArg::Light)]
    pub profile: ProfileArg,
    /// Storage engine of the test homes (every child runs `sync --engine` with it).
    #[arg(long, value_enum, default_value_t = EngineArg::Journal)]
    pub engine: EngineArg,
    /// A flush point every this many blocks in the children (more flush points to hit).
    #[arg(long, default_value_t = 25)]
    pub flush_every: u64,
    /// Directory for the test homes [default: a new directory under the system temp dir].
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Copy the home left by the first kill inside a flush point here (for `inspect`): a
    /// new directory, or an existing empty one. A directory with anything in it (a home
    /// above all) is refused before the test starts, and nothing in it is touched.
    #[arg(long, value_name = "DIR")]
    pub save_flush_kill_home: Option<PathBuf>,
}

/// The crash-test's result.
#[derive(Debug, Serialize)]
struct CrashReport {
    seed: u64,
    blocks: u64,
    consensus_blocks: u64,
    profile: &'static str,
    engine: &'static str,
    flush_every: u64,
    kills: u32,
    kills_in_flush: u32,
    kills_in_recovery: u32,
    kills_other: u32,
    /// Kills per marker kind (the marker's first word and, for flush and repair writes,
    /// the database).
    kills_by_marker: BTreeMap<String, u32>,
    child_runs: u32,
    rounds: u32,
    completed_runs_compared: u32,
    restarts_found_by_case: BTreeMap<String, u32>,
    repairs_by_case: BTreeMap<String, u32>,
    mismatches: u32,
    failures: u32,
    reference: serde_json::Value,
    elapsed_s: f64,
}

impl CrashReport {
    /// The report before the first round: the reference run counted, no kill yet.
    fn new(a: &CrashArgs, reference: serde_json::Value) -> Self {
        CrashReport {
            seed: a.seed,
            blocks: a.blocks,
            consensus_blocks: a.consensus_blocks,
            profile: a.profile.name(),
            engine: a.engine.engine().name(),
            flush_every: a.flush_every,
            kills: 0,
            kills_in_flush: 0,
            kills_in_recovery: 0,
            kills_other: 0,
            kills_by_marker: BTreeMap::new(),
            child_runs: 1,
            rounds: 0,
            completed_runs_compared: 0,
            restarts_found_by_case: BTreeMap::new(),
            repairs_by_case: BTreeMap::new(),
            mismatches: 0,
            failures: 0,
            reference,
            elapsed_s: 0.0,
        }
    }

    /// Prints the report: one JSON object, or the human summary.
    fn print(&self, json: bool) {
        if json {
            outln!(
                "{}",
                serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
            );
            return;
        }
        outln!(
            "kills: {} over {} child runs in {} rounds — inside a flush point: {}, during recovery: {}, elsewhere: {}",
            self.kills,
            self.child_runs,
            self.rounds,
            self.kills_in_flush,
            self.kills_in_recovery,
            self.kills_other
        );
        let fmt = |m: &BTreeMap<String, u32>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        outln!(
            "restarts by what the handshake found: {}",
            fmt(&self.restarts_found_by_case)
        );
        outln!("repairs completed by case: {}", fmt(&self.repairs_by_case));
        outln!("kills by marker: {}", fmt(&self.kills_by_marker));
        outln!(
            "completed runs compared with the reference: {}; mismatches: {}; failed runs: {}; {:.1} s",
            self.completed_runs_compared,
            self.mismatches,
            self.failures,
            self.elapsed_s
        );
        if self.kills_in_recovery == 0 {
            outln!(
                "note: no kill landed during recovery in this run (try another --seed or more --kills)"
            );
        }
    }
}

/// The test under way: its children's runner, its plans, where homes go, and the counts.
struct CrashTest<'a> {
    args: &'a CrashArgs,
    runner: Runner,
    planner: Planner,
    /// The `--save-flush-kill-home` directory, claimed.
    save_dir: Option<SaveDir>,
    /// Where the rounds' homes are made.
    work: PathBuf,
    report: CrashReport,
}

impl CrashTest<'_> {
    /// One round: a fresh home, child runs on it killed as planned and restarted until one
    /// completes, then that run compared with the reference.
    fn round(&mut self) -> CliResult<()> {
        self.report.rounds += 1;
        let home = self.work.join(format!("round-{}", self.report.rounds));
        let _ = std::fs::remove_dir_all(&home);
        let mut prev_in_flush = false;
        let mut restart = false;
        let mut runs = 0;
        loop {
            runs += 1;
            if runs > ROUND_RUNS_MAX {
                return Err(CliError::failure(format!(
                    "round {} did not complete after {ROUND_RUNS_MAX} runs",
                    self.report.rounds
                )));
            }
            let plan = if self.report.kills < self.args.kills {
                self.planner.plan(restart, prev_in_flush)
            } else {
                Plan::NEVER
            };
            let o = self.runner.run_child(&home, &plan)?;
            self.report.child_runs += 1;
            if restart {
                self.count_restart(&o);
            }
            if o.killed {
                self.count_kill(&o, &home)?;
                prev_in_flush = o.in_flush;
                restart = true;
                continue;
            }
            self.check_completed(o, &home);
            break;
        }
        if self.report.mismatches == 0 {
            let _ = std::fs::remove_dir_all(&home);
        }
        if !self.args.json && !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            errln!(
                "progress: round {} complete, {} kills so far",
                self.report.rounds,
                self.report.kills
            );
        }
        Ok(())
    }

    /// Counts what a restart's handshake found and repaired.
    fn count_restart(&mut self, o: &Outcome) {
        let rep = &mut self.report;
        if let Some(c) = &o.found_case {
            *rep.restarts_found_by_case.entry(c.clone()).or_default() += 1;
        }
        if let Some(c) = &o.handshake_case {
            *rep.repairs_by_case.entry(c.clone()).or_default() += 1;
        }
    }

    /// Counts a kill by where it landed; the first home killed inside a flush point is
    /// saved with `--save-flush-kill-home`.
    fn count_kill(&mut self, o: &Outcome, home: &Path) -> CliResult<()> {
        let rep = &mut self.report;
        rep.kills += 1;
        if let Some(m) = &o.killed_at {
            *rep.kills_by_marker.entry(marker_kind(m)).or_default() += 1;
        }
        if o.in_flush {
            rep.kills_in_flush += 1;
            if let Some(dst) = &mut self.save_dir {
                dst.save_first(home)?;
            }
        } else if o.in_recovery {
            rep.kills_in_recovery += 1;
        } else {
            rep.kills_other += 1;
        }
        Ok(())
    }

    /// Checks a run that was not killed: it must have exited 0 with a summary equal to the
    /// reference's (heights and app hash).
    fn check_completed(&mut self, o: Outcome, home: &Path) {
        let rep = &mut self.report;
        if !o.exit_ok {
            rep.failures += 1;
            let e = self
                .runner
                .fail(&format!("round {}: a child run failed", rep.rounds));
            errln!("flushpoint: {}", e.message);
            return;
        }
        match o.json {
            Some(j) => {
                rep.completed_runs_compared += 1;
                if let Some(diff) = compare(&rep.reference, &j) {
                    rep.mismatches += 1;
                    errln!(
                        "flushpoint: MISMATCH in round {} (seed {}): {diff}; home kept at {}",
                        rep.rounds,
                        self.args.seed,
                        home.display()
                    );
                }
            }
            None => rep.failures += 1,
        }
    }
}

/// The directory the test's homes go in: `--work-dir`, else a new one under the system's
/// temporary directory.
fn work_dir(a: &CrashArgs) -> PathBuf {
    a.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "flushpoint-crash-test-{}-{}",
            std::process::id(),
            a.seed
        ))
    })
}

/// The uncut reference run, on a home of its own in `work` (removed after): its summary.
/// Prints what the test is about to do (not with `--json`).
fn reference_run(a: &CrashArgs, runner: &Runner, work: &Path) -> CliResult<serde_json::Value> {
    let ref_home = work.join("reference");
    let _ = std::fs::remove_dir_all(&ref_home);
    let r = runner.run_child(&ref_home, &Plan::NEVER)?;
    let reference = match (r.exit_ok, r.json) {
        (true, Some(j)) => j,
        _ => return Err(runner.fail("the reference run failed")),
    };
    let _ = std::fs::remove_dir_all(&ref_home);
    let run_time = r.run_time.unwrap_or_default();
    if !a.json {
        outln!(
            "crash-test: seed {}, chain of {} block-synced + {} consensus blocks (profile {}, {} engine, a flush point every {} blocks), {} kills",
            a.seed,
            a.blocks,
            a.consensus_blocks,
            a.profile.name(),
            a.engine.engine().name(),
            a.flush_every,
            a.kills
        );
        outln!(
            "reference (uncut): heights {}, app hash {}, {:.0} ms",
            reference["heights"],
            reference["app_hash"].as_str().unwrap_or("?"),
            run_time.as_secs_f64() * 1000.0
        );
    }
    Ok(reference)
}

/// Runs `flushpoint crash-test`: checks the flags, claims the directories, runs the
/// reference, then rounds until `--kills` kills have landed, and reports.
pub fn run(a: &CrashArgs) -> CliResult<()> {
    if a.blocks == 0 || a.flush_every == 0 {
        return Err(CliError::usage(
            "--blocks and --flush-every must be at least 1",
        ));
    }
    // The children's run ends at N + M (the chain starts at height 1): refused here, before
    // the work directory exists, rather than by every child.
    targets(1, a.blocks, a.consensus_blocks)?;
    let work = work_dir(a);
    let save_dir = match &a.save_flush_kill_home {
        Some(dst) => Some(SaveDir::claim(dst, &work)?),
        None => None,
    };
    let exe = std::env::current_exe()
        .map_err(|e| CliError::failure(format!("cannot find the flushpoint binary: {e}")))?;
    std::fs::create_dir_all(&work).map_err(|e| {
        CliError::failure(format!(
            "cannot create work directory {}: {e}; pass a writable --work-dir",
            work.display()
        ))
    })?;
    let runner = Runner {
        exe,
        chain: ChildChain {
            seed: a.seed,
            blocks: a.blocks,
            consensus_blocks: a.consensus_blocks,
            profile: a.profile,
            flush_every: a.flush_every,
            engine: a.engine,
        },
        stderr_file: work.join("child-stderr.log"),
    };
    let t0 = Instant::now();
    let reference = reference_run(a, &runner, &work)?;
    let mut test = CrashTest {
        args: a,
        runner,
        planner: Planner::new(a.seed, a.blocks, a.flush_every, a.consensus_blocks),
        save_dir,
        work,
        report: CrashReport::new(a, reference),
    };
    while test.report.kills < a.kills {
        if out::cut() {
            // No child runs between two rounds: stop here, the work directory cleaned up.
            if a.work_dir.is_none() {
                let _ = std::fs::remove_dir_all(&test.work);
            }
            return Err(CliError::output_cut());
        }
        test.round()?;
    }
    let rep = &mut test.report;
    rep.elapsed_s = t0.elapsed().as_secs_f64();
    if a.work_dir.is_none() && rep.mismatches == 0 {
        let _ = std::fs::remove_dir_all(&test.work);
    }
    rep.print(a.json);
    if rep.mismatches > 0 || rep.failures > 0 {
        return Err(CliError::failure(format!(
            "crash-test failed: {} mismatch(es), {} failed run(s); replay with --seed {}",
            rep.mismatches, rep.failures, a.seed
        )));
    }
    Ok(())
}

/// How a completed run differs from the reference (heights, app hash), if it does.
fn compare(reference: &serde_json::Value, got: &serde_json::Value) -> Option<String> {
    for k in ["heights", "app_hash"] {
        if reference.get(k) != got.get(k) {
            return Some(format!(
                "{k}: reference {}, crash-tested run {}",
                reference.get(k).unwrap_or(&serde_json::Value::Null),
                got.get(k).unwrap_or(&serde_json::Value::Null)
            ));
        }
    }
    None
}

/// A marker's kind: its first word, and the database for flush and repair writes
/// (`flush-write-done state`), without heights or counters.
fn marker_kind(marker: &str) -> String {
    let mut words = marker.split_whitespace();
    let first = words.next().unwrap_or_default();
    match (first, words.next()) {
        (f, Some(db)) if f.contains("-write-") => format!("{f} {db}"),
        (f, _) => f.to_string(),
    }
}
