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

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use super::dbwrap::{CRASH_TEST_ENV, MARKER, MARKER_GATE_ENV};
use super::error::{CliError, CliResult};
use super::flags::{EngineArg, HOME_ENV, ProfileArg};
use super::out::{self, errln, outln};

/// A child that prints nothing for this long is hung: it is killed and the test fails (a
/// watchdog only; no kill is timed).
const CHILD_SILENCE_MAX: Duration = Duration::from_secs(120);
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

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// When to kill.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Trigger {
    /// At the nth marker starting with this text (counted from when the trigger is active),
    /// while the child waits at it.
    Marker(&'static str, u64),
    /// Never (let the run complete).
    Never,
}

#[derive(Debug, Clone)]
struct Plan {
    /// Active from spawn until `handshake-end`.
    recovery: Trigger,
    /// Active from `handshake-end`.
    main: Trigger,
}

#[derive(Debug, Default)]
struct Outcome {
    killed: bool,
    /// The marker the child was waiting at when it was killed (without `@fp`).
    killed_at: Option<String>,
    in_flush: bool,
    in_recovery: bool,
    exit_ok: bool,
    handshake_case: Option<String>,
    found_case: Option<String>,
    json: Option<serde_json::Value>,
    run_time: Option<Duration>,
}

fn spawn_reader(child: &mut Child) -> Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

fn sigkill(child: &Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) with a pid we spawned and have not yet reaped; no memory is touched.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

struct Runner<'a> {
    exe: PathBuf,
    args: &'a CrashArgs,
}

impl Runner<'_> {
    fn command(&self, home: &Path, stderr_file: &Path) -> CliResult<Command> {
        let a = self.args;
        let mut c = Command::new(&self.exe);
        c.arg("sync")
            .arg("--home")
            .arg(home)
            .args(["--blocks", &a.blocks.to_string()])
            .args(["--consensus-blocks", &a.consensus_blocks.to_string()])
            .args(["--seed", &a.seed.to_string()])
            .args(["--profile", a.profile.name()])
            .args(["--flush-every", &a.flush_every.to_string()])
            .args(["--engine", a.engine.engine().name()])
            // Synchronous flush points: every marker then comes from one thread, in one
            // order, so a seed replays the same kills. Background flush points write the same
            // batches in the same order (ADR 0004); the power-cut suites cover them.
            .arg("--sync-flush")
            .arg("--json")
            .env(CRASH_TEST_ENV, "1")
            .env(MARKER_GATE_ENV, "1")
            .env_remove(HOME_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(stderr_file).map_err(
                |e| {
                    CliError::failure(format!(
                        "cannot create {}: {e}; pick a writable --work-dir",
                        stderr_file.display()
                    ))
                },
            )?));
        Ok(c)
    }

    fn run_child(&self, home: &Path, plan: &Plan, stderr_file: &Path) -> CliResult<Outcome> {
        let mut child = self
            .command(home, stderr_file)?
            .spawn()
            .map_err(|e| CliError::failure(format!("cannot start {}: {e}", self.exe.display())))?;
        // The gate: one line per marker lets the child go on; dropping it lifts the gate.
        let mut gate = child.stdin.take();
        if plan.recovery == Trigger::Never && plan.main == Trigger::Never {
            gate = None;
        }
        let rx = spawn_reader(&mut child);
        let mut lines: Vec<(Instant, String)> = Vec::new();
        let mut after_handshake = false;
        let mut count = 0u64;
        let mut killed_at = None;
        loop {
            match rx.recv_timeout(CHILD_SILENCE_MAX) {
                Ok((t, line)) => {
                    let body = line.strip_prefix(MARKER).map(str::trim_start);
                    let trig = if after_handshake {
                        &plan.main
                    } else {
                        &plan.recovery
                    };
                    if let (Trigger::Marker(m, nth), Some(b)) = (trig, body)
                        && b.starts_with(m)
                    {
                        count += 1;
                        if count == *nth {
                            // The child is waiting at this marker for our answer: the kill
                            // lands exactly here.
                            sigkill(&child);
                            killed_at = Some(b.to_string());
                            lines.push((t, line));
                            break;
                        }
                    }
                    if !after_handshake && body.is_some_and(|b| b.starts_with("handshake-end")) {
                        after_handshake = true;
                        count = 0;
                        if plan.main == Trigger::Never {
                            gate = None;
                        }
                    }
                    if body.is_some()
                        && let Some(g) = &mut gate
                    {
                        // A child that died on its own cannot read: ignore the error, the
                        // reader sees the end of its output.
                        let _ = g.write_all(b"\n").and_then(|()| g.flush());
                    }
                    lines.push((t, line));
                }
                Err(RecvTimeoutError::Timeout) => {
                    sigkill(&child);
                    let _ = child.wait();
                    return Err(CliError::failure(format!(
                        "a child `flushpoint sync` printed nothing for {} s; see {}",
                        CHILD_SILENCE_MAX.as_secs(),
                        stderr_file.display()
                    )));
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        drop(gate);
        let status = child
            .wait()
            .map_err(|e| CliError::failure(format!("cannot wait for the child: {e}")))?;
        // Whatever the child printed before it died is in the pipe: read it all.
        lines.extend(rx.iter());
        let mut o = classify_lines(&lines, killed_at.is_some(), status.success());
        o.killed_at = killed_at;
        Ok(o)
    }
}

fn classify_lines(lines: &[(Instant, String)], killed: bool, exit_ok: bool) -> Outcome {
    let mut o = Outcome {
        killed,
        exit_ok,
        ..Outcome::default()
    };
    let (mut flush_open, mut rec_begin, mut rec_end, mut done) = (false, None, None, None);
    for (t, line) in lines {
        if let Some(b) = line.strip_prefix(MARKER).map(str::trim_start) {
            if b.starts_with("flush-begin") {
                flush_open = true;
            } else if b.starts_with("flush-end") {
                flush_open = false;
            } else if let Some(rest) = b.strip_prefix("handshake-begin") {
                o.found_case = rest
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("case="))
                    .map(str::to_string);
            } else if b.starts_with("recovery-begin") {
                rec_begin = Some(*t);
            } else if let Some(rest) = b.strip_prefix("handshake-end") {
                rec_end = Some(*t);
                o.handshake_case = rest
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("case="))
                    .map(str::to_string);
            } else if b.starts_with("sync-done") {
                done = Some(*t);
            }
        } else if line.starts_with('{') {
            o.json = serde_json::from_str(line).ok();
        }
    }
    o.in_flush = killed && flush_open;
    o.in_recovery = killed && rec_begin.is_some() && rec_end.is_none();
    o.run_time = rec_end.zip(done).map(|(b, e)| e - b);
    o
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

/// Runs `flushpoint crash-test`.
pub fn run(a: &CrashArgs) -> CliResult<()> {
    if a.blocks == 0 || a.flush_every == 0 {
        return Err(CliError::usage(
            "--blocks and --flush-every must be at least 1",
        ));
    }
    // The children's run ends at N + M (the chain starts at height 1): refused here, before
    // the work directory exists, rather than by every child.
    super::sync::targets(1, a.blocks, a.consensus_blocks)?;
    let work = a.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "flushpoint-crash-test-{}-{}",
            std::process::id(),
            a.seed
        ))
    });
    let mut save_dir = match &a.save_flush_kill_home {
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
    let runner = Runner { exe, args: a };
    let t0 = Instant::now();
    let stderr_file = work.join("child-stderr.log");
    let fail_child = |what: &str| {
        let tail = std::fs::read_to_string(&stderr_file)
            .ok()
            .and_then(|s| s.lines().last().map(str::to_string))
            .unwrap_or_default();
        CliError::failure(format!("{what}: {tail}"))
    };

    // The uncut reference run.
    let ref_home = work.join("reference");
    let _ = std::fs::remove_dir_all(&ref_home);
    let never = Plan {
        recovery: Trigger::Never,
        main: Trigger::Never,
    };
    let r = runner.run_child(&ref_home, &never, &stderr_file)?;
    let reference = match (r.exit_ok, r.json) {
        (true, Some(j)) => j,
        _ => return Err(fail_child("the reference run failed")),
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

    let mut rng = Rng(a.seed ^ 0x00c0_ffee);
    let mut rep = CrashReport {
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
        reference: reference.clone(),
        elapsed_s: 0.0,
    };
    let flush_markers = [
        "flush-write-begin block-store",
        "flush-write-done block-store",
        "flush-write-begin state",
        "flush-write-done state",
        "flush-write-begin app",
        "flush-write-done app",
    ];
    let recovery_markers = ["handshake-begin", "repair-write-begin", "repair-write-done"];
    let expected_flushes = (a.blocks / a.flush_every).max(1);
    while rep.kills < a.kills {
        if out::cut() {
            // No child runs between two rounds: stop here, the work directory cleaned up.
            if a.work_dir.is_none() {
                let _ = std::fs::remove_dir_all(&work);
            }
            return Err(CliError::output_cut());
        }
        rep.rounds += 1;
        let home = work.join(format!("round-{}", rep.rounds));
        let _ = std::fs::remove_dir_all(&home);
        let mut prev_in_flush = false;
        let mut restart = false;
        let mut runs = 0;
        loop {
            runs += 1;
            if runs > ROUND_RUNS_MAX {
                return Err(CliError::failure(format!(
                    "round {} did not complete after {ROUND_RUNS_MAX} runs",
                    rep.rounds
                )));
            }
            let budget_left = rep.kills < a.kills;
            let plan = if !budget_left {
                never.clone()
            } else {
                let recovery = if restart && (prev_in_flush || rng.chance(30)) {
                    let m = recovery_markers[rng.below(recovery_markers.len() as u64) as usize];
                    let nth = if m == "handshake-begin" {
                        1
                    } else {
                        1 + rng.below(2)
                    };
                    Trigger::Marker(m, nth)
                } else {
                    Trigger::Never
                };
                let pick = rng.below(100);
                let main = if pick < 70 {
                    let m = flush_markers[rng.below(flush_markers.len() as u64) as usize];
                    Trigger::Marker(m, 1 + rng.below(expected_flushes.min(4)))
                } else if pick < 90 || a.consensus_blocks == 0 {
                    // Between two block-synced blocks, held writes in memory.
                    Trigger::Marker("block ", 1 + rng.below(a.flush_every.saturating_mul(2)))
                } else {
                    Trigger::Marker("consensus-block", 1 + rng.below(a.consensus_blocks))
                };
                Plan { recovery, main }
            };
            let o = runner.run_child(&home, &plan, &stderr_file)?;
            rep.child_runs += 1;
            if restart {
                if let Some(c) = &o.found_case {
                    *rep.restarts_found_by_case.entry(c.clone()).or_default() += 1;
                }
                if let Some(c) = &o.handshake_case {
                    *rep.repairs_by_case.entry(c.clone()).or_default() += 1;
                }
            }
            if o.killed {
                rep.kills += 1;
                if let Some(m) = &o.killed_at {
                    *rep.kills_by_marker.entry(marker_kind(m)).or_default() += 1;
                }
                if o.in_flush {
                    rep.kills_in_flush += 1;
                    if let Some(dst) = save_dir.as_mut().filter(|d| !d.saved) {
                        dst.save(&home)?;
                    }
                } else if o.in_recovery {
                    rep.kills_in_recovery += 1;
                } else {
                    rep.kills_other += 1;
                }
                prev_in_flush = o.in_flush;
                restart = true;
                continue;
            }
            if !o.exit_ok {
                rep.failures += 1;
                let e = fail_child(&format!("round {}: a child run failed", rep.rounds));
                errln!("flushpoint: {}", e.message);
                break;
            }
            match o.json {
                Some(j) => {
                    rep.completed_runs_compared += 1;
                    if let Some(diff) = compare(&reference, &j) {
                        rep.mismatches += 1;
                        errln!(
                            "flushpoint: MISMATCH in round {} (seed {}): {diff}; home kept at {}",
                            rep.rounds,
                            a.seed,
                            home.display()
                        );
                    }
                }
                None => rep.failures += 1,
            }
            break;
        }
        if rep.mismatches == 0 {
            let _ = std::fs::remove_dir_all(&home);
        }
        if !a.json && !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            errln!(
                "progress: round {} complete, {} kills so far",
                rep.rounds,
                rep.kills
            );
        }
    }
    rep.elapsed_s = t0.elapsed().as_secs_f64();
    if a.work_dir.is_none() && rep.mismatches == 0 {
        let _ = std::fs::remove_dir_all(&work);
    }
    if a.json {
        outln!(
            "{}",
            serde_json::to_string(&rep).unwrap_or_else(|_| "{}".into())
        );
    } else {
        outln!(
            "kills: {} over {} child runs in {} rounds — inside a flush point: {}, during recovery: {}, elsewhere: {}",
            rep.kills,
            rep.child_runs,
            rep.rounds,
            rep.kills_in_flush,
            rep.kills_in_recovery,
            rep.kills_other
        );
        let fmt = |m: &BTreeMap<String, u32>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        outln!(
            "restarts by what the handshake found: {}",
            fmt(&rep.restarts_found_by_case)
        );
        outln!("repairs completed by case: {}", fmt(&rep.repairs_by_case));
        outln!("kills by marker: {}", fmt(&rep.kills_by_marker));
        outln!(
            "completed runs compared with the reference: {}; mismatches: {}; failed runs: {}; {:.1} s",
            rep.completed_runs_compared,
            rep.mismatches,
            rep.failures,
            rep.elapsed_s
        );
        if rep.kills_in_recovery == 0 {
            outln!(
                "note: no kill landed during recovery in this run (try another --seed or more --kills)"
            );
        }
    }
    if rep.mismatches > 0 || rep.failures > 0 {
        return Err(CliError::failure(format!(
            "crash-test failed: {} mismatch(es), {} failed run(s); replay with --seed {}",
            rep.mismatches, rep.failures, a.seed
        )));
    }
    Ok(())
}

/// The home's lock file (the library's `LOCK`: an exclusive `flock` while a home is open).
const LOCK_FILE: &str = "LOCK";
/// The file naming a directory a flushpoint home.
const FORMAT_FILE: &str = "FORMAT";

/// The `--save-flush-kill-home` directory, claimed for this run: new or empty, and locked
/// with its own `LOCK` (the home's protocol) from the start, so no `flushpoint` opens it
/// while the copy is written.
struct SaveDir {
    path: PathBuf,
    /// Holds the flock on `path/LOCK` for the run.
    _lock: std::fs::File,
    /// The run created `path` (removed again if nothing was saved in it).
    created: bool,
    /// The home has been copied in.
    saved: bool,
}

impl SaveDir {
    /// Claims `dst`, refusing (usage error, nothing written) an existing non-directory, a
    /// flushpoint home, a locked directory, a non-empty one, and one that holds or lies
    /// in the work directory `work`.
    fn claim(dst: &Path, work: &Path) -> CliResult<SaveDir> {
        let shown = dst.display();
        let refuse = |why: String| {
            CliError::usage(format!(
                "--save-flush-kill-home {shown}: {why}; name a new or empty directory"
            ))
        };
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let (dst_abs, work_abs) = (abs(dst), abs(work));
        if dst_abs.starts_with(&work_abs) || work_abs.starts_with(&dst_abs) {
            return Err(refuse(format!(
                "overlaps the work directory {}",
                work.display()
            )));
        }
        let created = match std::fs::symlink_metadata(dst) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dst).map_err(|e| {
                    CliError::failure(format!("cannot create {shown}: {e}; pick a writable DIR"))
                })?;
                true
            }
            Err(e) => return Err(refuse(format!("cannot read it: {e}"))),
            Ok(m) if !m.is_dir() => return Err(refuse("exists and is not a directory".into())),
            Ok(_) => {
                if dst.join(FORMAT_FILE).exists() {
                    return Err(refuse(
                        "is a flushpoint home (it has a FORMAT file); it is left as it is".into(),
                    ));
                }
                if is_locked(&dst.join(LOCK_FILE)) {
                    return Err(refuse("is locked: a `flushpoint` is using it".into()));
                }
                let mut entries =
                    std::fs::read_dir(dst).map_err(|e| refuse(format!("cannot read it: {e}")))?;
                if entries.next().is_some() {
                    return Err(refuse("exists and is not empty".into()));
                }
                false
            }
        };
        let lock = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(dst.join(LOCK_FILE))
            .map_err(|e| refuse(format!("cannot create its LOCK: {e}")))?;
        if lock.try_lock().is_err() {
            // Another process created and locked it between the check and here.
            return Err(refuse("is locked: a `flushpoint` is using it".into()));
        }
        Ok(SaveDir {
            path: dst.to_path_buf(),
            _lock: lock,
            created,
            saved: false,
        })
    }

    /// Copies `home` (killed, not open) in, but for its `LOCK`: this one's stays held.
    fn save(&mut self, home: &Path) -> CliResult<()> {
        copy_home(home, &self.path).map_err(|e| {
            CliError::failure(format!(
                "cannot copy the home to {}: {e}",
                self.path.display()
            ))
        })?;
        self.saved = true;
        Ok(())
    }
}

impl Drop for SaveDir {
    /// A directory nothing was saved in is left as it was found (or not left at all).
    fn drop(&mut self) {
        if !self.saved {
            if self.created {
                let _ = std::fs::remove_dir_all(&self.path);
            } else {
                let _ = std::fs::remove_file(self.path.join(LOCK_FILE));
            }
        }
    }
}

/// Whether `lock` exists and another open file description holds its `flock` (probed with
/// a shared, non-blocking lock, released at once).
fn is_locked(lock: &Path) -> bool {
    match std::fs::File::open(lock) {
        Ok(f) => matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
}

/// Copies a home's files, and its subdirectories' (a journal home's `journal/`), but not
/// its top-level `LOCK` (the destination holds its own).
fn copy_home(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_file() {
            if e.file_name() == LOCK_FILE && dst.join(LOCK_FILE).exists() {
                continue;
            }
            std::fs::copy(e.path(), dst.join(e.file_name()))?;
        } else if t.is_dir() {
            copy_home(&e.path(), &dst.join(e.file_name()))?;
        }
    }
    Ok(())
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
