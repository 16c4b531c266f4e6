//! What `sync` counts: each database wrapped in a `CountingDb` (its batches) and the tool's
//! `CliDb` (no-sync, crash-test markers), the real syncs below them, and the synced units a
//! journal home writes through the tool's unit group.
//!
//! Invariant: counting changes no write: the wrappers pass every batch through with the
//! durability it was given (but for `--mode no-sync`, see `dbwrap`).

use std::sync::Arc;
use std::time::Instant;

use flushpoint::db::{BackendCounters, CountingDb, SyncCounters, SyncCounts};
use flushpoint::{Db, Home};

use crate::cli::dbwrap::{CliDb, CliUnitGroup, Probe, UnitCounters, Which};

/// Counters of one database: its batches (its `CountingDb`) and, on a journal home, its
/// parts of the units the node wrote through the unit group.
struct Meter {
    sync: Arc<SyncCounters>,
    backend: Arc<BackendCounters>,
    units: Option<Arc<UnitCounters>>,
}

/// One database's counts at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snap {
    /// Batches, and bytes of batches and unit parts together.
    pub counts: SyncCounts,
    /// Real `sync_data` calls on its file (redb; 0 on a journal home).
    pub sync_data: u64,
    /// Units it had a part in.
    pub units: u64,
}

impl Meter {
    fn snap(&self) -> Snap {
        let mut counts = self.sync.snapshot();
        let (mut units, mut unit_bytes) = (0, 0);
        if let Some(u) = &self.units {
            units = u.units();
            unit_bytes = u.bytes_written();
        }
        counts.bytes_written += unit_bytes;
        Snap {
            counts,
            sync_data: self.backend.snapshot().sync_data_calls,
            units,
        }
    }
}

/// The three databases' counts and the unit group's synced units at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// Per database, in flush order (block store, state, app).
    pub dbs: [Snap; 3],
    /// Synced units written through the tool's unit group so far (a unit writes the three
    /// databases at once, past the per-database meters; a synced batch of one keyspace is
    /// counted there, not here); 0 on redb.
    pub synced_units: u64,
    /// When the reading was taken.
    pub at: Instant,
}

impl Reading {
    /// Synced batches over the three databases.
    pub fn synced_batches(&self) -> u64 {
        self.dbs.iter().map(|x| x.counts.synced_batches).sum()
    }
}

/// The meters of a home's three databases.
pub struct Meters {
    meters: [Meter; 3],
    unit_group: Option<Arc<CliUnitGroup>>,
}

impl Meters {
    /// Wraps `home`'s three databases for counting, no-sync and the crash-test markers;
    /// returns the meters and the wrapped databases (block store, state, app).
    pub fn wrap(
        home: &Home,
        no_sync: bool,
        probe: &Option<Arc<Probe>>,
    ) -> (Self, [Arc<dyn Db>; 3]) {
        // The real syncs per database: redb's file counters; a journal's three keyspaces share
        // its segments, counted by the engine (see `journal_sync_data`).
        let backends: [Arc<BackendCounters>; 3] = match home.redb_dbs() {
            Some(dbs) => dbs.map(|d| d.backend_counters()),
            None => Default::default(),
        };
        let [bs_backend, st_backend, app_backend] = backends;
        // A journal home's keyspaces are one unit group (ADR 0011): the CLI's wrappers pass it
        // on, through its own group (markers, no-sync), so the node writes units.
        let unit_group = home
            .block_store_db
            .unit_group()
            .map(|m| Arc::new(CliUnitGroup::new(m.group, no_sync, probe.clone())));
        let wrap = |db: Arc<dyn Db>, backend: Arc<BackendCounters>, which: Which| {
            let member = db.unit_group();
            let counting = Arc::new(CountingDb::new(db));
            let m = Meter {
                sync: counting.counters(),
                backend,
                units: member
                    .as_ref()
                    .zip(unit_group.as_ref())
                    .map(|(member, group)| group.counters(&member.name)),
            };
            let mut cli = CliDb::new(counting as Arc<dyn Db>, which, no_sync, probe.clone());
            if let (Some(group), Some(member)) = (&unit_group, member) {
                cli = cli.in_group(group.clone(), member.name);
            }
            (Arc::new(cli) as Arc<dyn Db>, m)
        };
        let (bs_db, bs_m) = wrap(home.block_store_db.clone(), bs_backend, Which::BlockStore);
        let (st_db, st_m) = wrap(home.state_db.clone(), st_backend, Which::State);
        let (app_db, app_m) = wrap(home.app_db.clone(), app_backend, Which::App);
        let meters = Meters {
            meters: [bs_m, st_m, app_m],
            unit_group,
        };
        (meters, [bs_db, st_db, app_db])
    }

    /// The counts now.
    pub fn read(&self) -> Reading {
        let m = &self.meters;
        Reading {
            dbs: [m[0].snap(), m[1].snap(), m[2].snap()],
            synced_units: self
                .unit_group
                .as_deref()
                .map_or(0, CliUnitGroup::synced_units),
            at: Instant::now(),
        }
    }
}

/// Real `sync_data` calls of a journal home's engine so far (segments and index); 0 on redb.
pub fn journal_sync_data(home: &Home) -> u64 {
    home.journal().map_or(0, |j| {
        let c = j.counts();
        c.journal_sync_data_calls + c.index.sync_data_calls
    })
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
