//! Argument parsing, dispatch, and the mapping of errors to one-line messages and exit codes.
//!
//! Invariant: every failure prints exactly one line on stderr that says what to do, and
//! exits 1 (2 for usage errors). No command writes to a home it could not lock. A closed
//! stdout or stderr never panics: the command stops cleanly and exits 141 (see `out`).

mod crash;
mod dbwrap;
mod inspect;
mod out;
mod rollback;
mod sync;
mod sync_summary;
mod verify;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

pub use out::EXIT_OUTPUT_CLOSED;
use out::errln;

/// The home used when neither `--home` nor `FLUSHPOINT_HOME` is given.
pub const DEFAULT_HOME: &str = "./flushpoint-home";
/// Environment variable naming the home directory.
pub const HOME_ENV: &str = "FLUSHPOINT_HOME";

/// Exit code for usage errors (bad flags, impossible requests).
pub const EXIT_USAGE: i32 = 2;
/// Exit code for every other failure.
pub const EXIT_FAILURE: i32 = 1;

/// The exit codes, as `--help` shows them.
const EXIT_CODES_HELP: &str = "Exit codes: 0 success; 1 failure (one line on stderr says what to do); \
2 bad flags or usage (nothing written); 141 stdout or stderr was a closed pipe \
(`flushpoint sync | head -1`): the command stopped there, a sync after stopping the node \
cleanly, so the home is consistent and the next sync resumes it.";

/// flushpoint: crash-safe persistence for BFT chain nodes.
#[derive(Debug, Parser)]
#[command(name = "flushpoint", version, about, long_about = None, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sync a deterministic synthetic chain into the home (resuming it if it exists), then
    /// commit some blocks in consensus mode, and print the fsync accounting.
    Sync(sync::SyncArgs),
    /// Kill `flushpoint sync` with SIGKILL at random moments, restart it until it completes,
    /// and check the result equals an uncut run.
    CrashTest(crash::CrashArgs),
    /// Show a home's heights, flush record, sizes and the handshake's classification,
    /// changing nothing.
    Inspect(inspect::InspectArgs),
    /// Roll a home's block store and state back to a height.
    Rollback(rollback::RollbackArgs),
    /// Read every record and part of a home, check every checksum, pointer and
    /// cross-reference, and report what is damaged (read-only; exit 1 if anything is).
    Verify(verify::VerifyArgs),
}

/// Storage engine of a new home (mirrors `flushpoint::HomeEngine`; ADR 0012).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// Three redb files.
    Redb,
    /// One journal: the three databases as keyspaces of one journal engine (ADR 0008; the
    /// default for a new home).
    Journal,
}

impl EngineArg {
    fn engine(self) -> flushpoint::HomeEngine {
        match self {
            EngineArg::Redb => flushpoint::HomeEngine::Redb,
            EngineArg::Journal => flushpoint::HomeEngine::Journal,
        }
    }
}

/// Block size profile (mirrors `flushpoint::demo::Profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// ≈ 4 KiB of transactions per block.
    Light,
    /// ≈ 1 MiB per block in 64 KiB parts.
    Heavy,
    /// Light, with one heavy block in ten.
    Mixed,
    /// 64 account updates per block, each reading a value (what `--prefetch on` warms).
    Accounts,
}

impl ProfileArg {
    fn profile(self) -> flushpoint::demo::Profile {
        match self {
            ProfileArg::Light => flushpoint::demo::Profile::Light,
            ProfileArg::Heavy => flushpoint::demo::Profile::Heavy,
            ProfileArg::Mixed => flushpoint::demo::Profile::Mixed,
            ProfileArg::Accounts => flushpoint::demo::Profile::Accounts,
        }
    }
    fn name(self) -> &'static str {
        match self {
            ProfileArg::Light => "light",
            ProfileArg::Heavy => "heavy",
            ProfileArg::Mixed => "mixed",
            ProfileArg::Accounts => "accounts",
        }
    }
}

/// A failure: the exit code and one line for stderr.
#[derive(Debug)]
pub struct CliError {
    /// Exit code.
    pub code: i32,
    /// The message (one line).
    pub message: String,
}

impl CliError {
    /// A usage error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }
    /// The command stopped because a write to stdout or stderr failed (see `out`).
    pub fn output_cut() -> Self {
        CliError {
            code: EXIT_OUTPUT_CLOSED,
            message: String::new(),
        }
    }
    /// Any other failure (exit 1).
    pub fn failure(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_FAILURE,
            message: message.into(),
        }
    }
}

/// Result of a command.
pub type CliResult<T> = Result<T, CliError>;

/// The home directory: `--home`, else `FLUSHPOINT_HOME`, else [`DEFAULT_HOME`].
pub fn resolve_home(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os(HOME_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_HOME),
    }
}

fn io_hint(e: &std::io::Error) -> Option<&'static str> {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            Some("the disk is full: free some space and run the command again")
        }
        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => {
            Some("the directory is not writable: pick a writable --home or fix its permissions")
        }
        _ => None,
    }
}

/// What to do about an error of `kind` (the library's structured kind, never its text).
fn kind_hint(kind: flushpoint::ErrorKind) -> Option<&'static str> {
    match kind {
        flushpoint::ErrorKind::DiskFull => Some(
            "the disk is full: free some space and rerun; the handshake repairs the home on the next start (nothing durable is lost)",
        ),
        _ => None,
    }
}

/// The kind of `e`, or of the first failure for a poisoned database.
fn root_kind(e: &flushpoint::Error) -> flushpoint::ErrorKind {
    match e {
        flushpoint::Error::Poisoned { cause, .. } => cause.kind,
        _ => e.kind(),
    }
}

/// A redb home's database names and their files (as `flushpoint::Home` lays them out).
const REDB_FILES: [(&str, &str); 3] = [
    ("block store", "blockstore.redb"),
    ("state", "state.redb"),
    ("app", "app.redb"),
];

/// What to do about damaged bytes in database `db` of `home`: the handshake repairs the
/// shapes a crash leaves, never damaged bytes, so rerunning does not help.
fn damaged_hint(db: &str, home: &Path) -> String {
    let part = REDB_FILES
        .iter()
        .find(|(name, _)| *name == db)
        .map(|(_, file)| home.join(file))
        .filter(|p| p.exists())
        .map_or_else(
            || format!("the home {}", home.display()),
            |p| format!("the file {}", p.display()),
        );
    format!(
        "{part} is damaged, and rerunning does not repair it: restore the home from a backup, or move it aside and sync a new one (`flushpoint sync --home NEW_DIR`)"
    )
}

fn io_source_hint(e: &flushpoint::Error) -> Option<&'static str> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = cur {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && let Some(h) = io_hint(io)
        {
            return Some(h);
        }
        cur = s.source();
    }
    None
}

/// Turns a library error into a one-line message that says what to do.
pub fn describe(e: &flushpoint::Error, home: &Path) -> CliError {
    use flushpoint::Error as E;
    let text = e.to_string().replace('\n', " ");
    let msg = match e {
        E::HomeLocked { .. } => format!(
            "{text} (another `flushpoint` is using {}; wait for it to finish or stop it, then retry)",
            home.display()
        ),
        E::HomeVersion { .. } => text,
        E::HomeEngine { recorded, .. } => {
            format!("{text}; leave --engine out, or pass --engine {recorded}")
        }
        E::Home { source, .. } => match io_hint(source) {
            Some(h) => format!("{text}: {h}"),
            None => text,
        },
        E::RollbackInterrupted { to, .. } => format!(
            "{text}: run `flushpoint rollback --home {} --to {to}`",
            home.display()
        ),
        E::Inconsistent { .. } => format!(
            "{text}; run `flushpoint inspect --home {}` for details; restore the home from a backup or sync a new one",
            home.display()
        ),
        E::Corrupt { db, .. } => format!("{text}: {}", damaged_hint(db, home)),
        E::Poisoned { db, .. } | E::Storage { db, .. }
            if root_kind(e) == flushpoint::ErrorKind::Corrupt =>
        {
            format!("{text}: {}", damaged_hint(db, home))
        }
        E::Poisoned { .. } | E::Storage { .. } => {
            match kind_hint(root_kind(e)).or_else(|| io_source_hint(e)) {
                Some(h) => format!("{text}: {h}"),
                None => format!(
                    "{text}; rerun the command: the start-up handshake checks and repairs the home"
                ),
            }
        }
        _ => text,
    };
    CliError::failure(msg)
}

/// Parses the arguments, runs the command, prints a failure, returns the exit code.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    EXIT_USAGE
                } else {
                    0
                };
            }
            let rendered = e.to_string();
            let first = rendered
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("bad arguments");
            errln!("{first} (see `flushpoint --help`)");
            return EXIT_USAGE;
        }
    };
    let result = match cli.command {
        Command::Sync(a) => sync::run(&a),
        Command::CrashTest(a) => crash::run(&a),
        Command::Inspect(a) => inspect::run(&a),
        Command::Rollback(a) => rollback::run(&a),
        Command::Verify(a) => verify::run(&a),
    };
    match (result, out::failure()) {
        // The command stopped on a failed write to stdout or stderr: a closed pipe exits
        // quietly; another write error is said, if stderr still takes it.
        (Ok(()), Some((code, message)))
        | (
            Err(CliError {
                code: EXIT_OUTPUT_CLOSED,
                ..
            }),
            Some((code, message)),
        ) => {
            if let Some(m) = message {
                errln!("flushpoint: {m}");
            }
            code
        }
        (Ok(()), None) => 0,
        (Err(e), _) => {
            errln!("flushpoint: {}", e.message.replace('\n', " "));
            e.code
        }
    }
}

/// Bytes as a short human string (KiB, MiB, GiB).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
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
