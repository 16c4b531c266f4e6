//! The tool's stdout and stderr writes: a failed write never panics (`println!` does); and
//! [`human_bytes`], the one way the commands print a byte count.
//!
//! A write that fails (a closed pipe, `flushpoint sync | head -1`; a full disk under a
//! redirect) is dropped and remembered. A command checks [`cut`] where stopping is safe:
//! `sync` between blocks stops the node cleanly (its held writes flushed, the home
//! consistent), then the tool exits [`EXIT_OUTPUT_CLOSED`] for a closed pipe, 1 for any
//! other write error.
//!
//! Invariant: nothing in the tool writes to stdout or stderr except through this module,
//! but for three writers that ignore their errors: the crash-test markers (the parent that
//! reads them may be gone), clap's `--help` and `--version`, and the progress bar
//! (indicatif, on a terminal only).
//! Invariant: imports only the exit codes (`error`) from the tool's other modules.

use std::fmt;
use std::io::Write;
use std::sync::OnceLock;

use super::error::{EXIT_FAILURE, EXIT_OUTPUT_CLOSED};

/// The first failed write: its error kind and text.
static FAILED: OnceLock<(std::io::ErrorKind, String)> = OnceLock::new();

fn record(stream: &str, e: &std::io::Error) {
    let _ = FAILED.set((e.kind(), format!("cannot write to {stream}: {e}")));
}

/// Writes `args` and a newline to stdout and flushes it; a failure is remembered.
pub fn line_out(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out
        .write_fmt(format_args!("{args}\n"))
        .and_then(|()| out.flush())
    {
        record("stdout", &e);
    }
}

/// Writes `args` and a newline to stderr; a failure is remembered.
pub fn line_err(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    if let Err(e) = err.write_fmt(format_args!("{args}\n")) {
        record("stderr", &e);
    }
}

/// Whether a write to stdout or stderr has failed: the command should stop (cleanly).
pub fn cut() -> bool {
    FAILED.get().is_some()
}

/// The exit code and message of a failed write, if one failed: a closed pipe is
/// [`EXIT_OUTPUT_CLOSED`] and no message; any other error exits 1 with its text.
pub fn failure() -> Option<(i32, Option<&'static str>)> {
    FAILED.get().map(|(kind, text)| {
        if *kind == std::io::ErrorKind::BrokenPipe {
            (EXIT_OUTPUT_CLOSED, None)
        } else {
            (EXIT_FAILURE, Some(text.as_str()))
        }
    })
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

/// `println!` that never panics (see the module doc).
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::cli::out::line_out(format_args!($($t)*))
    };
}

/// `eprintln!` that never panics (see the module doc).
macro_rules! errln {
    ($($t:tt)*) => {
        $crate::cli::out::line_err(format_args!($($t)*))
    };
}

pub(crate) use {errln, outln};
