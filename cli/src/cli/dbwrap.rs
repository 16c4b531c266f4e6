//! The CLI's database wrapper: downgrades `Synced` writes to `Buffered` for `--mode no-sync`
//! (floor measurement only) and, under `FLUSHPOINT_CRASH_TEST=1`, announces every synced
//! write of a flush point or of the handshake's repair on stdout so `crash-test` can time
//! its kills.
//!
//! Invariant: without the crash-test variable and outside `no-sync`, a write passes through
//! unchanged (same batch, same durability) — the wrapper changes no durability claim.
//! Invariant: `FLUSHPOINT_TEST_MARKER_GATE=1` only makes the process wait, after printing
//! each marker, for one line on stdin (the parent's "go on"); it never reorders or skips a
//! write. A parent that wants the child dead at a marker SIGKILLs it while it waits there,
//! so the kill lands exactly at that marker, whatever the machine's speed. EOF on stdin
//! lifts the gate. It is a test knob, read only with the crash-test variable set.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flushpoint::db::{UnitGroup, UnitMember, UnitPart};
use flushpoint::{Batch, Db, DbWrapper, Durability, EntryRef, Result};

/// Environment variable that makes `sync` print `@fp` markers for `crash-test`.
pub const CRASH_TEST_ENV: &str = "FLUSHPOINT_CRASH_TEST";
/// Test-only: after each marker, wait for a line on stdin (see the module doc).
pub const MARKER_GATE_ENV: &str = "FLUSHPOINT_TEST_MARKER_GATE";
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
    /// `FLUSHPOINT_TEST_MARKER_GATE=1` was set (fixed for the process's life).
    marker_gate: bool,
    /// Still waiting at each marker for the parent's line (false once stdin ended).
    gate_open: AtomicBool,
    flushes: AtomicU64,
}

impl Probe {
    /// The probe, if `FLUSHPOINT_CRASH_TEST=1`.
    pub fn from_env() -> Option<Arc<Probe>> {
        if std::env::var(CRASH_TEST_ENV).ok().as_deref() != Some("1") {
            return None;
        }
        let gated = std::env::var(MARKER_GATE_ENV).ok().as_deref() == Some("1");
        Some(Arc::new(Probe {
            phase: AtomicU8::new(Phase::Recovery as u8),
            marker_gate: gated,
            gate_open: AtomicBool::new(gated),
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

    /// Whether the process runs gated (`FLUSHPOINT_TEST_MARKER_GATE=1`), even once the
    /// parent has lifted the gate: what depends on it is decided once, from the variable.
    pub fn gated(&self) -> bool {
        self.marker_gate
    }

    /// Prints one marker line and flushes it, so a kill after this call leaves the line in
    /// the pipe; then, gated, waits for one line on stdin before returning (EOF or a read
    /// error lifts the gate for good).
    pub fn mark(&self, line: &str) {
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{MARKER} {line}");
            let _ = out.flush();
        }
        if self.gate_open.load(Ordering::SeqCst) {
            let mut go_on = String::new();
            match std::io::stdin().lock().read_line(&mut go_on) {
                Ok(n) if n > 0 => {}
                _ => self.gate_open.store(false, Ordering::SeqCst),
            }
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
    /// The database's place in the CLI's unit group (a journal home): see [`CliUnitGroup`].
    unit: Option<UnitMember>,
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
            unit: None,
        }
    }

    /// The same wrapper, a member `name` of `group` (the CLI's [`CliUnitGroup`] over the
    /// journal's): the node then writes its flush points and consensus blocks as units.
    pub fn in_group(mut self, group: Arc<CliUnitGroup>, name: String) -> Self {
        self.unit = Some(UnitMember {
            group: group as Arc<dyn UnitGroup>,
            name,
        });
        self
    }
}

/// A journal's unit group as the CLI hands it to the node (ADR 0011): `--mode no-sync`
/// downgrades a unit as [`CliDb`] downgrades a batch; under the crash test a flush point's
/// unit is announced with the markers of the three steps it replaces — the block store's
/// around the one write (a kill at `flush-write-begin block-store` lands before the unit,
/// every later one after it) — so `crash-test` times its kills on either engine.
/// It also counts each member's parts and bytes ([`UnitCounters`]): a unit reaches the
/// journal past the databases' own counting wrappers.
#[derive(Debug)]
pub struct CliUnitGroup {
    inner: Arc<dyn UnitGroup>,
    downgrade_sync: bool,
    probe: Option<Arc<Probe>>,
    counters: Mutex<BTreeMap<String, Arc<UnitCounters>>>,
    /// Units written synced (after `--mode no-sync`'s downgrade) that returned `Ok`: each is
    /// one synced write of the journal, whichever members it holds.
    synced_units: AtomicU64,
}

/// One member's share of the units written through a [`CliUnitGroup`] that returned `Ok`.
#[derive(Debug, Default)]
pub struct UnitCounters {
    units: AtomicU64,
    bytes_written: AtomicU64,
}

impl UnitCounters {
    /// Units the member had a part in.
    pub fn units(&self) -> u64 {
        self.units.load(Ordering::SeqCst)
    }
    /// Key and value bytes of its parts.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::SeqCst)
    }
}

impl CliUnitGroup {
    /// Wraps the journal's group.
    pub fn new(inner: Arc<dyn UnitGroup>, downgrade_sync: bool, probe: Option<Arc<Probe>>) -> Self {
        CliUnitGroup {
            inner,
            downgrade_sync,
            probe,
            counters: Mutex::default(),
            synced_units: AtomicU64::new(0),
        }
    }

    /// Units written synced so far (see the field).
    pub fn synced_units(&self) -> u64 {
        self.synced_units.load(Ordering::SeqCst)
    }

    /// The counters of member `name` (the same ones on every call).
    pub fn counters(&self, name: &str) -> Arc<UnitCounters> {
        let mut all = self
            .counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.entry(name.to_string()).or_default().clone()
    }

    /// Writes the unit through the journal's group, counting each part's entries.
    fn write_counted(&self, parts: &mut [UnitPart<'_, '_>], d: Durability) -> Result<()> {
        let names: Vec<String> = parts.iter().map(|(name, _)| name.to_string()).collect();
        let mut bytes = vec![0u64; parts.len()];
        let res = {
            let mut counted: Vec<_> = parts
                .iter_mut()
                .zip(bytes.iter_mut())
                .map(|((name, entries), b)| {
                    let entries = (&mut **entries).inspect(move |(k, v)| {
                        *b += (k.len() + v.map_or(0, |v| v.len())) as u64;
                    });
                    (*name, entries)
                })
                .collect();
            let mut wrapped: Vec<UnitPart<'_, '_>> = counted
                .iter_mut()
                .map(|(name, entries)| (*name, entries as &mut dyn Iterator<Item = EntryRef<'_>>))
                .collect();
            self.inner.write_unit(&mut wrapped, d)
        };
        if res.is_ok() {
            if d == Durability::Synced {
                self.synced_units.fetch_add(1, Ordering::SeqCst);
            }
            for (name, b) in names.iter().zip(bytes) {
                let c = self.counters(name);
                c.units.fetch_add(1, Ordering::SeqCst);
                c.bytes_written.fetch_add(b, Ordering::SeqCst);
            }
        }
        res
    }
}

impl UnitGroup for CliUnitGroup {
    fn write_unit(&self, parts: &mut [UnitPart<'_, '_>], durability: Durability) -> Result<()> {
        let d = if self.downgrade_sync {
            Durability::Buffered
        } else {
            durability
        };
        let probe = match (&self.probe, durability) {
            (Some(p), Durability::Synced) if p.phase() == Phase::BlockSync => p,
            _ => return self.write_counted(parts, d),
        };
        let n = probe.flushes.fetch_add(1, Ordering::SeqCst) + 1;
        probe.mark(&format!("flush-begin n={n}"));
        probe.mark("flush-write-begin block-store");
        self.write_counted(parts, d)?;
        probe.mark("flush-write-done block-store");
        for what in ["state", "app"] {
            probe.mark(&format!("flush-write-begin {what}"));
            probe.mark(&format!("flush-write-done {what}"));
        }
        probe.mark("flush-end");
        Ok(())
    }

    fn wait_applied(&self) -> Result<()> {
        self.inner.wait_applied()
    }
}

// Reads, `name` and `disk_size_bytes` forward; writes pass through the downgrade and the
// crash-test markers, and the unit group is the CLI's own.
impl DbWrapper for CliDb {
    type Inner = dyn Db;
    fn inner(this: &Self) -> &Self::Inner {
        &*this.inner
    }
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        let probed = matches!(
            (&this.probe, durability),
            (Some(p), Durability::Synced) if p.phase() != Phase::Consensus
        );
        if probed {
            // The crash-test markers live in `write`: give it the batch.
            return <Self as DbWrapper>::write(this, &Batch::from_entries(entries), durability);
        }
        let d = if this.downgrade_sync {
            Durability::Buffered
        } else {
            durability
        };
        this.inner.write_entries(entries, d)
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        let d = if this.downgrade_sync {
            Durability::Buffered
        } else {
            durability
        };
        let probe = match (&this.probe, durability) {
            (Some(p), Durability::Synced) if p.phase() != Phase::Consensus => p,
            _ => return this.inner.write(batch, d),
        };
        let what = this.which.label();
        match probe.phase() {
            Phase::BlockSync => {
                // In block sync every synced write belongs to a flush point (steps 1–3).
                if this.which == Which::BlockStore {
                    let n = probe.flushes.fetch_add(1, Ordering::SeqCst) + 1;
                    probe.mark(&format!("flush-begin n={n}"));
                }
                probe.mark(&format!("flush-write-begin {what}"));
                this.inner.write(batch, d)?;
                probe.mark(&format!("flush-write-done {what}"));
                if this.which == Which::App {
                    probe.mark("flush-end");
                }
            }
            _ => {
                probe.mark(&format!("repair-write-begin {what}"));
                this.inner.write(batch, d)?;
                probe.mark(&format!("repair-write-done {what}"));
            }
        }
        Ok(())
    }
    fn unit_group(this: &Self) -> Option<UnitMember> {
        this.unit.clone()
    }
}
