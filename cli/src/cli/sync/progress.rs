//! `sync`'s progress on stderr while it runs.
//!
//! Invariant: progress goes to stderr only, so stdout carries the summary alone.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crate::cli::out::errln;

/// How plain progress lines are spaced when stderr is not a terminal.
const PLAIN_PROGRESS_INTERVAL: Duration = Duration::from_secs(2);

/// The progress display: a bar on a terminal, else a plain line every
/// [`PLAIN_PROGRESS_INTERVAL`]; nothing with `--json`.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    last_line: Instant,
    start: Instant,
    quiet: bool,
}

impl Progress {
    /// A display of heights `from..=to`; silent when `quiet`.
    pub fn new(from: u64, to: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(to);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{bar:40}] {pos}/{len} blocks  {per_sec}  eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_position(from);
            b
        });
        Progress {
            bar,
            last_line: Instant::now(),
            start: Instant::now(),
            quiet,
        }
    }

    /// Shows `height` of `target`, in `phase`, after `flushes` flush points.
    pub fn update(&mut self, height: u64, target: u64, phase: &str, flushes: u64) {
        if let Some(b) = &self.bar {
            b.set_position(height);
            b.set_message(format!("{phase}, {flushes} flush points"));
        } else if !self.quiet && self.last_line.elapsed() >= PLAIN_PROGRESS_INTERVAL {
            self.last_line = Instant::now();
            errln!(
                "progress: height {height}/{target} ({phase}), {flushes} flush points, {:.1} s",
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
