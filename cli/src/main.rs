//! The `flushpoint` command-line tool: `sync` a synthetic chain into a home directory,
//! `crash-test` it with SIGKILL, `inspect` a home and `rollback` one.
//!
//! Exit codes: 0 success, 1 failure (a one-line message on stderr says what to do), 2 bad
//! flags or usage, 141 a closed stdout or stderr (the command stopped cleanly; see
//! `cli::out`).
//!
//! Invariant: the process's exit code is the one `cli::run` returns; the allocator is
//! configured before anything else runs.

mod allocator;
mod cli;

/// The tool's allocator: mimalloc, configured by [`allocator::configure`].
#[global_allocator]
static GLOBAL: allocator::Global = mimalloc::MiMalloc;

fn main() {
    allocator::configure();
    let code = cli::run();
    std::process::exit(code);
}
