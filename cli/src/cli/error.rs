//! The tool's failures: the exit codes, [`CliError`] (a code and one line for stderr), and
//! [`describe`], which turns a library error into a line that says what to do.
//!
//! Invariant: a message is one line and names the action that helps (retry, free space,
//! restore, `inspect`, `rollback`); the action is chosen from the library's typed error and
//! its structured kind, never from its text.
//! Invariant: imports nothing from the tool's other modules (the bottom layer).

use std::path::Path;

/// Exit code for usage errors (bad flags, impossible requests).
pub const EXIT_USAGE: i32 = 2;
/// Exit code for every other failure.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code after a write to a closed pipe (`EPIPE`): 128 + SIGPIPE, what the shell
/// reports for a process the signal ended, so a pipeline's status still says the command
/// did not finish its output.
pub const EXIT_OUTPUT_CLOSED: i32 = 141;

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
