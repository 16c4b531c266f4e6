//! What every role of the engine shares ([`Core`]): the directory and its file system, the
//! options, the redb index and its guard, the poison, the counts, the loom step, and the
//! **state lock** over [`State`], whose parts each belong to one role.
//!
//! Why one state lock for the roles' parts rather than one each: the waits and the reads
//! span roles. The applier waits on its queue, the checkpoint clock and the merger's run
//! counts under one condition variable; a reader takes the overlay, the runs and a redb
//! read transaction as one snapshot; an apply step hands its units from the overlay to its
//! runs in one critical section. Each part is a type of its role's file, changed only
//! through that role's code; the lock is held briefly, never across file I/O.
//!
//! Invariant: the state lock is the innermost of the engine's locks (`mod.rs`), taken
//! last and let go before any other is taken.
//! Invariant: the first failed write or sync poisons the engine ([`Core::fail`]); every
//! waiter is woken so that it sees it.
//! Invariant: every call into redb runs under the index's guard ([`Core::index_call`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::Database;

use super::applier::Queue;
use super::checkpoint::CheckpointClock;
use super::format::segment_file_name;
use super::index::IndexLayout;
use super::manifest::Manifest;
use super::merger::MergerState;
use super::options::{Counters, JournalOptions};
use super::segments::SegmentMap;
use crate::db::{BackendCounters, GuardedDrop, RedbGuard};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::FileSystem;
use crate::poison::Poison;
use crate::sync::{Condvar, Mutex, MutexGuard, Step};

/// The name errors of the engine itself carry.
pub(super) const ENGINE_NAME: &str = "journal";

/// `map_err` for a file operation outside the write path (open, reads): no poison.
pub(super) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(ENGINE_NAME, op, path, e)
}

/// The error for an invalid unit recovery must not discard.
pub(super) fn corrupt(segment: &Path, offset: u64, reason: CorruptReason) -> Error {
    let name = segment
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Error::Corrupt {
        db: format!(
            "{ENGINE_NAME} segment {} at offset {offset}",
            segment.display()
        ),
        key: name.into_bytes(),
        height: None,
        reason,
    }
}

/// The engine's state under the state lock, one part per role.
#[derive(Debug)]
pub(super) struct State {
    /// The applier's: unapplied units (the overlay and its queue), what is durable and
    /// applied.
    pub(super) queue: Queue,
    /// The segments': live segments, held and doomed ones, readers' pins, live bytes.
    pub(super) segments: SegmentMap,
    /// The runs manifest's: each runs keyspace's readable runs, those to sync and unlink.
    pub(super) manifest: Manifest,
    /// The merger's: whether its thread runs, whether a merge may be due.
    pub(super) merger: MergerState,
    /// The checkpoints': when the last one ran and what was applied since.
    pub(super) clock: CheckpointClock,
    /// Keyspaces whose index values are tagged: name → smallest value kept in the journal.
    pub(super) separated: HashMap<String, u64>,
    /// Set when the engine closes: the threads end, waits return.
    pub(super) stop: bool,
}

impl State {
    /// True when the index holds changes no checkpoint made durable: units applied since
    /// the last one, or runs listed since (a merge's output is listed with no unit applied).
    pub(super) fn index_changed_since_checkpoint(&self) -> bool {
        self.queue.applied_seq() > self.clock.checkpoint_seq() || self.manifest.has_unsynced()
    }
}

/// What every role shares; see the module's docs.
pub(super) struct Core {
    pub(super) fs: Arc<dyn FileSystem>,
    pub(super) dir: PathBuf,
    pub(super) options: JournalOptions,
    /// Dropped (closed) under `index_guard`.
    pub(super) index: GuardedDrop<Database>,
    /// The index file's boundary with redb: every call into `index` runs under it
    /// ([`Core::index_call`]); a redb panic poisons the engine.
    pub(super) index_guard: Arc<RedbGuard>,
    pub(super) index_counters: Arc<BackendCounters>,
    /// How the index stores its pairs and rows (checked or not), decided at open.
    pub(super) layout: IndexLayout,
    /// The engine's poison; it also fences the index file (`CountingBackend::fenced_by`).
    pub(super) poison: Arc<Poison>,
    state: Mutex<State>,
    /// Signalled when units become durable or applied, on stop, and on poison.
    pub(super) changed: Condvar,
    pub(super) counters: Counters,
    /// Before each segment file operation and index commit: where a loom model may switch
    /// threads (nothing without `--cfg loom`; `tests/loom_journal.rs`).
    pub(super) step: Step,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalEngine")
            .field("dir", &self.dir)
            .finish()
    }
}

/// What [`Core::new`] takes: the open's results.
pub(super) struct CoreParts {
    pub(super) fs: Arc<dyn FileSystem>,
    pub(super) dir: PathBuf,
    pub(super) options: JournalOptions,
    pub(super) index: GuardedDrop<Database>,
    pub(super) index_guard: Arc<RedbGuard>,
    pub(super) index_counters: Arc<BackendCounters>,
    pub(super) layout: IndexLayout,
    pub(super) poison: Arc<Poison>,
    pub(super) state: State,
    pub(super) counters: Counters,
}

impl Core {
    pub(super) fn new(parts: CoreParts) -> Core {
        let CoreParts {
            fs,
            dir,
            options,
            index,
            index_guard,
            index_counters,
            layout,
            poison,
            state,
            counters,
        } = parts;
        Core {
            fs,
            dir,
            options,
            index,
            index_guard,
            index_counters,
            layout,
            poison,
            state: Mutex::new(state),
            changed: Condvar::new(),
            counters,
            step: Step::default(),
        }
    }

    /// The state lock (innermost: no other engine lock is taken while it is held).
    pub(super) fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("journal state lock")
    }

    /// Lets the state lock go until [`Core::changed`] is signalled or `timeout` passes,
    /// and takes it again.
    pub(super) fn wait_changed<'a>(
        &self,
        st: MutexGuard<'a, State>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(st, timeout)
            .expect("journal state lock")
            .0
    }

    /// Records a write-path failure: poisons the engine, wakes every waiter.
    pub(super) fn fail(&self, err: Error) -> Error {
        self.poison.set(&err);
        self.changed.notify_all();
        err
    }

    /// `map_err` for a redb call on the write path: the failure poisons the engine.
    pub(super) fn failing<E: Into<crate::error::BoxError>>(
        &self,
        op: &'static str,
    ) -> impl FnOnce(E) -> Error + '_ {
        move |e| {
            // Poisoned already (another thread's failure): the index is fenced and refused
            // this call for that reason; the caller is told the first cause, not the fence.
            if let Err(poisoned) = self.poison.check(ENGINE_NAME) {
                return poisoned;
            }
            self.fail(Error::storage(ENGINE_NAME, op, e))
        }
    }

    /// An error met on the write path (a corrupt row or pair, or a storage error already
    /// named): it poisons the engine. Poisoned already, the first cause is returned, as
    /// [`Core::failing`] does.
    pub(super) fn failed(&self, err: Error) -> Error {
        if let Err(poisoned) = self.poison.check(ENGINE_NAME) {
            return poisoned;
        }
        self.fail(err)
    }

    /// `map_err` for a file operation on the write path: the failure poisons the engine.
    pub(super) fn failing_io<'a>(
        &'a self,
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> Error + 'a {
        move |e| self.fail(Error::io(ENGINE_NAME, op, path, e))
    }

    pub(super) fn segment_path(&self, index: u64) -> PathBuf {
        self.dir.join(segment_file_name(index))
    }

    /// A write transaction on the index with `durability`; a failure poisons the engine.
    /// Dropped without its commit, it is aborted in redb under the index's guard.
    pub(super) fn begin_index_write(
        &self,
        durability: redb::Durability,
    ) -> Result<GuardedDrop<redb::WriteTransaction>> {
        let txn = self.index_call("begin write", || {
            let mut txn = self
                .index
                .begin_write()
                .map_err(self.failing("begin write"))?;
            txn.set_durability(durability)
                .map_err(self.failing("set durability"))?;
            Ok(txn)
        })?;
        Ok(GuardedDrop::new(
            self.index_guard.clone(),
            "abort write",
            txn,
        ))
    }

    /// Runs `f`, a call into the index's redb, under the index's guard: a redb panic (a
    /// damaged page) is `Error::CorruptFile` naming `index.redb`; it poisons the engine
    /// (and fences the index's writes) and wakes every waiter. Never called with a
    /// redb call made while one of the engine's locks is taken inside `f`.
    pub(super) fn index_call<T>(
        &self,
        op: &'static str,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let r = self.index_guard.call(op, f);
        if matches!(r, Err(Error::CorruptFile { .. })) {
            self.changed.notify_all();
        }
        r
    }

    /// Bytes the files at `paths` occupy on disk (allocated). A missing one counts 0: a
    /// doomed segment may be unlinked meanwhile.
    pub(super) fn allocated_bytes(&self, paths: impl IntoIterator<Item = PathBuf>) -> Result<u64> {
        let mut total = 0;
        for path in paths {
            if self.fs.exists(&path).map_err(io_err("stat file", &path))? {
                total += self
                    .fs
                    .allocated_bytes(&path)
                    .map_err(io_err("stat file", &path))?;
            }
        }
        Ok(total)
    }
}
