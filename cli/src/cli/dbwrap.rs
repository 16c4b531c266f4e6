//! The CLI's database wrapper: downgrades `Synced` writes to `Buffered` for `--mode no-sync`
//! (floor measurement only) and, under `FLUSHPOINT_CRASH_TEST=1`, announces every synced
//! write of a flush point or of the handshake's repair on stdout so `crash-test` can time
//! its kills.
//!
//! Invariant: without the crash-test variable and outside `no-sync`, a write passes through
//! unchanged (same batch, same durability) — the wrapper changes no durability claim.
//! Invariant: `FLUSHPOINT_TEST_FLUSH_DELAY_MS` only adds sleeps *between* completed synced
//! writes; it never reorders or skips one. It is a test knob, read only with the crash-test
//! variable set.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flushpoint::{Batch, Db, DbIter, Direction, Durability, KeyRange, Result};

/// Environment variable that makes `sync` print `@fp` markers for `crash-test`.
pub const CRASH_TEST_ENV: &str = "FLUSHPOINT_CRASH_TEST";
/// Test-only: milliseconds to sleep after each synced write of a flush point or repair.
pub const FLUSH_DELAY_ENV: &str = "FLUSHPOINT_TEST_FLUSH_DELAY_MS";
/// Prefix of every marker line.
pub const MARKER: &str = "@fp";

/// What the node is doing, as the wrapper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Opening the home and running the handshake.
    Recovery = 0,
    /// Block sync: synced writes happen only at flush points.
    BlockSync = 1,
    /// Consensus: synced writes per block.
    Consensus = 2,
}

/// Shared crash-test probe: the phase and the marker output.
#[derive(Debug)]
pub struct Probe {
    phase: AtomicU8,
    delay_ms: u64,
    flushes: AtomicU64,
}

impl Probe {
    /// The probe, if `FLUSHPOINT_CRASH_TEST=1`.
    pub fn from_env() -> Option<Arc<Probe>> {
        if std::env::var(CRASH_TEST_ENV).ok().as_deref() != Some("1") {
            return None;
        }
        let delay_ms = std::env::var(FLUSH_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Some(Arc::new(Probe {
            phase: AtomicU8::new(Phase::Recovery as u8),
            delay_ms,
            flushes: AtomicU64::new(0),
        }))
    }

    /// Sets the phase.
    pub fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::SeqCst);
    }

    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::SeqCst) {
            0 => Phase::Recovery,
            1 => Phase::BlockSync,
            _ => Phase::Consensus,
        }
    }

    /// Prints one marker line and flushes it before returning, so a kill after this call
    /// leaves the line in the pipe.
    pub fn mark(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{MARKER} {line}");
        let _ = out.flush();
    }

    fn pause(&self) {
        if self.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.delay_ms));
        }
    }
}

/// Which database a wrapper stands for (flush order: block store, state, app).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The block store (step 1 of a flush point).
    BlockStore,
    /// The state (step 2).
    State,
    /// The app (step 3).
    App,
}

impl Which {
    fn label(self) -> &'static str {
        match self {
            Which::BlockStore => "block-store",
            Which::State => "state",
            Which::App => "app",
        }
    }
}

/// A database as the CLI hands it to the node.
#[derive(Debug)]
pub struct CliDb {
    inner: Arc<dyn Db>,
    which: Which,
    downgrade_sync: bool,
    probe: Option<Arc<Probe>>,
}

impl CliDb {
    /// Wraps `inner`.
    pub fn new(
        inner: Arc<dyn Db>,
        which: Which,
        downgrade_sync: bool,
        probe: Option<Arc<Probe>>,
    ) -> Self {
        CliDb {
            inner,
            which,
            downgrade_sync,
            probe,
        }
    }
}

impl Db for CliDb {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner.get(key)
    }
    fn contains(&self, key: &[u8]) -> Result<bool> {
        self.inner.contains(key)
    }
    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        self.inner.range(range, direction)
    }
    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        let d = if self.downgrade_sync {
            Durability::Buffered
        } else {
            durability
        };
        let probe = match (&self.probe, durability) {
            (Some(p), Durability::Synced) if p.phase() != Phase::Consensus => p,
            _ => return self.inner.write(batch, d),
        };
        let what = self.which.label();
        match probe.phase() {
            Phase::BlockSync => {
                // In block sync every synced write belongs to a flush point (steps 1–3).
                if self.which == Which::BlockStore {
                    let n = probe.flushes.fetch_add(1, Ordering::SeqCst) + 1;
                    probe.mark(&format!("flush-begin n={n}"));
                }
                probe.mark(&format!("flush-write-begin {what}"));
                self.inner.write(batch, d)?;
                probe.mark(&format!("flush-write-done {what}"));
                if self.which == Which::App {
                    probe.mark("flush-end");
                } else {
                    // Test knob: a window between two steps of the flush point.
                    probe.pause();
                }
            }
            _ => {
                probe.mark(&format!("repair-write-begin {what}"));
                self.inner.write(batch, d)?;
                probe.mark(&format!("repair-write-done {what}"));
                probe.pause();
            }
        }
        Ok(())
    }
    fn disk_size_bytes(&self) -> Result<u64> {
        self.inner.disk_size_bytes()
    }
}
