//! One child run: spawn `flushpoint sync`, answer its gated markers, kill it where its plan
//! says, and read what it did from what it printed.
//!
//! Invariant: a kill lands while the child waits at its marker (the gate), never on a
//! timer; a child silent for [`CHILD_SILENCE_MAX`] is killed and fails the test.
//! Invariant: an outcome is classified from what the child had printed when it died, never
//! from the plan.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::plan::{Plan, Trigger};
use crate::cli::dbwrap::{CRASH_TEST_ENV, MARKER, MARKER_GATE_ENV};
use crate::cli::error::{CliError, CliResult};
use crate::cli::flags::{EngineArg, HOME_ENV, ProfileArg};

/// A child that prints nothing for this long is hung: it is killed and the test fails (a
/// watchdog only; no kill is timed).
const CHILD_SILENCE_MAX: Duration = Duration::from_secs(120);

/// What one child run did, from what it printed and how it ended.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The parent killed it.
    pub killed: bool,
    /// The marker the child was waiting at when it was killed (without `@fp`).
    pub killed_at: Option<String>,
    /// Killed inside a flush point (after its `flush-begin`, before its `flush-end`).
    pub in_flush: bool,
    /// Killed during recovery (after `recovery-begin`, before `handshake-end`).
    pub in_recovery: bool,
    /// It exited with status 0.
    pub exit_ok: bool,
    /// The case the handshake reported when it ended (`handshake-end case=`).
    pub handshake_case: Option<String>,
    /// The case the handshake was about to repair (`handshake-begin case=`).
    pub found_case: Option<String>,
    /// Its `--json` summary, when it completed.
    pub json: Option<serde_json::Value>,
    /// From the handshake's end to `sync-done`.
    pub run_time: Option<Duration>,
}

/// Reads the child's stdout on a thread, each line with when it was read.
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

/// Sends SIGKILL to `child`.
fn sigkill(child: &Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) with a pid we spawned and have not yet reaped; no memory is touched.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// What every child syncs: the `sync` flags the test passes on.
#[derive(Debug, Clone, Copy)]
pub struct ChildChain {
    /// `--seed`.
    pub seed: u64,
    /// `--blocks`.
    pub blocks: u64,
    /// `--consensus-blocks`.
    pub consensus_blocks: u64,
    /// `--profile`.
    pub profile: ProfileArg,
    /// `--flush-every`.
    pub flush_every: u64,
    /// `--engine`.
    pub engine: EngineArg,
}

/// Runs `flushpoint sync` children, each on the same chain.
pub struct Runner {
    /// This binary.
    pub exe: PathBuf,
    /// What every child syncs.
    pub chain: ChildChain,
    /// Where every child's stderr goes (each run's replaces the last's).
    pub stderr_file: PathBuf,
}

impl Runner {
    /// The child's command: `sync` of the chain on `home`, its markers gated, its stderr to
    /// `stderr_file`.
    fn command(&self, home: &Path) -> CliResult<Command> {
        let a = &self.chain;
        let stderr_file = &self.stderr_file;
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

    /// Runs one child on `home`, killing it as `plan` says, and reads what it did.
    pub fn run_child(&self, home: &Path, plan: &Plan) -> CliResult<Outcome> {
        let stderr_file = &self.stderr_file;
        let mut child = self
            .command(home)?
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

    /// A failure about a child: `what`, then the last line the child wrote on stderr.
    pub fn fail(&self, what: &str) -> CliError {
        let tail = std::fs::read_to_string(&self.stderr_file)
            .ok()
            .and_then(|s| s.lines().last().map(str::to_string))
            .unwrap_or_default();
        CliError::failure(format!("{what}: {tail}"))
    }
}

/// What a child did, from the lines it printed (`lines`, with when each was read), whether
/// it was `killed`, and whether it exited 0.
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
