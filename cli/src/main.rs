//! The `flushpoint` command-line tool: `sync` a synthetic chain into a home directory,
//! `crash-test` it with SIGKILL, `inspect` a home and `rollback` one.
//!
//! Exit codes: 0 success, 1 failure (a one-line message on stderr says what to do), 2 bad
//! flags or usage.

mod cli;

/// The tool's allocator: mimalloc. Why: the journal engine frees on its applier thread the
/// keys and values the block loop allocated (a window's writes, once applied). glibc's
/// `free` of another thread's block took 25 % of the applier's CPU at 30k light blocks
/// (`perf`), and a 100k-block journal sync took 26.7–29.1 s against 18.5–21.0 s with
/// mimalloc (`benches/compare/PERFORMANCE.md`, "The allocator"). The library leaves the
/// choice to the embedder.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let code = cli::run();
    std::process::exit(code);
}
