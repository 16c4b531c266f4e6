//! Argument parsing, dispatch, and the mapping of errors to one-line messages and exit codes.
//!
//! The tool's modules point one way, each importing only from layers listed before it:
//!
//! 1. `error` (exit codes, [`CliError`], `describe`),
//! 2. `out` (stdout and stderr writes, byte counts),
//! 3. `flags` (the home, the engine, the profile), `dbwrap` (the database wrapper: no-sync,
//!    crash-test markers), `heights` (what a home holds durably), `handshake` (the
//!    handshake in words),
//! 4. `sync` (inside it: `args`, `meters` and `progress`, then `summary`, then its
//!    `mod.rs`),
//! 5. the commands above `sync`: `crash` (crash-test: it checks its targets as `sync` does
//!    and runs `sync` as a child process; inside it: `plan` and `save_dir`, then `child`,
//!    then its `mod.rs`), `inspect`, `rollback`, `verify`;
//! 6. this module, which parses and dispatches to the commands.
//!
//! Invariant: every failure prints exactly one line on stderr that says what to do, and
//! exits 1 (2 for usage errors). No command writes to a home it could not lock. A closed
//! stdout or stderr never panics: the command stops cleanly and exits 141 (see `out`).
//! Invariant: no module imports from its own layer or one listed after it, nor from this
//! one (`cli/tests/cli/module_layers.rs` checks every file).

mod crash;
mod dbwrap;
mod error;
mod flags;
mod handshake;
mod heights;
mod inspect;
mod out;
mod rollback;
mod sync;
mod verify;

use clap::{Parser, Subcommand};

use error::{CliError, EXIT_OUTPUT_CLOSED, EXIT_USAGE};
use out::errln;

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
