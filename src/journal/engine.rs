//! The engine's public face: [`JournalEngine`] and its keyspaces ([`JournalDb`]), a thin
//! façade over the roles (`mod.rs` lists them and their locks). What it does itself: the
//! write path of one unit ([`Shared::commit`]: room in the overlay, append, sync, hand-off
//! to the applier), a keyspace's creation record, and the close.
//!
//! Invariant: a unit enters the overlay only after it is in its segment and, when synced,
//! after its sync: a reader never sees a write a crash could take back once `Ok`.
//! Invariant: the close stops the threads, then applies and checkpoints what it can; a
//! failure there loses nothing (the units are in the journal).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use redb::{ReadableDatabase, TableDefinition};

use super::applier::{Pending, UnitApplier, note_overlay_peak, run_applier};
use super::format::{
    INDEX_KIND_RUNS, META, META_INDEX_PREFIX, META_SEPARATE_PREFIX, runs_dir, table_name,
};
use super::limits::SEPARATE_VALUES_MIN_BYTES;
use super::manifest::sync_runs;
use super::merger::Merger;
use super::open;
use super::options::{
    Applier, JournalCounts, JournalOptions, JournalUsage, KeyspaceIndex, KeyspaceOptions,
};
use super::overlay::UnitOps;
use super::reads::{self, open_read_table};
use super::segments::{Segments, UnitToAppend};
use super::state::{Core, ENGINE_NAME};
use super::unit::{self, KEYSPACE_NAME_BYTES_MAX, Sections, UnitOp};
use super::usage;
use crate::db::{
    Batch, Db, DbIter, Direction, Durability, EntryRef, KeyRange, Op, UnitGroup, UnitMember,
    UnitPart,
};
use crate::error::{Error, Result};
use crate::fs::{FileLock, FileSystem, create_dir_all_durably};
use crate::sync::{Mutex, thread};

/// The engine's roles, shared by its handles and threads.
pub(super) struct Shared {
    /// What every role shares: files, index, poison, counts, the state lock.
    pub(super) core: Core,
    /// The writer's and the spare's locks.
    pub(super) segments: Segments,
    /// The apply lock.
    pub(super) applier: UnitApplier,
    /// The merger thread.
    pub(super) merger: Merger,
    /// The journal directory's lock (`recovery::lock_dir`); last, so that
    /// the lock is released after the index is closed.
    _lock: FileLock,
}

impl Shared {
    pub(super) fn new(
        core: Core,
        segments: Segments,
        applier: UnitApplier,
        merger: Merger,
        lock: FileLock,
    ) -> Shared {
        Shared {
            core,
            segments,
            applier,
            merger,
            _lock: lock,
        }
    }

    /// Writes `sections` as one unit (`Synced`: and syncs it), then hands it to the
    /// applier (inline: applies it). Errors name `db`.
    fn commit(&self, db: &str, sections: Sections, durability: Durability) -> Result<()> {
        let core = &self.core;
        core.poison.check(db)?;
        // Ordered by key before any lock is taken (O(n) when it already is).
        let ops = Arc::new(UnitOps::new(sections));
        let synced = match durability {
            Durability::Synced => true,
            Durability::Buffered => false,
        };
        {
            let mut w = self.segments.lock_writer();
            core.poison.check(db)?;
            self.applier.wait_for_room(core, &mut w, db)?;
            let seq = w.next_seq();
            let len = unit::encoded_len(&ops.sections).ok_or_else(|| {
                Error::InvalidInput("a journal unit's body must be under 4 GiB".into())
            })?;
            // A large synced unit may be applied while it is written and synced (the
            // background applier): placed, it is handed over, readable by no one.
            let apply_while_syncing = synced
                && core.options.applier == Applier::Background
                && len >= core.options.apply_while_syncing_bytes_min;
            // The unit as it will be queued, built once (its byte count is a pass over
            // its ops), when it is placed.
            let mut unit = None;
            let placed = |segment: u64, offset: u64| {
                let placed = Pending::new(seq, (segment, offset, len), ops.clone());
                if apply_while_syncing {
                    core.lock_state().queue.place(placed.clone());
                    core.changed.notify_all();
                }
                unit = Some(placed);
            };
            let to_append = UnitToAppend {
                seq,
                len,
                synced,
                sections: &ops.sections,
            };
            let offset = self.segments.append(core, &mut w, to_append, placed)?;
            let unit = unit.expect("invariant: append places the unit before writing it");
            assert_eq!(
                (unit.segment, unit.offset),
                (w.segment(), offset),
                "invariant: the unit lies where it was placed"
            );
            // The unit enters the overlay only after it is in the file, and (synced) after
            // its sync: a reader never sees a write a crash could take back once `Ok`.
            if synced {
                w.sync(core)?;
            }
            w.finished(seq);
            let mut st = core.lock_state();
            // Crash: none here (the unit is durable). A step begun on it while it was
            // synced commits only after this push (`wait_until_queued`).
            let overlay_bytes = st.queue.push_placed(unit);
            note_overlay_peak(core, overlay_bytes);
        }
        core.changed.notify_all();
        if core.options.applier == Applier::Inline {
            self.applier.apply_step(core, false)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.core.fmt(f)
    }
}

/// Starts one of the engine's threads, named `name`, running `body`; a panic in it (a
/// broken invariant) poisons the engine, naming `op`, so no caller waits on it forever.
pub(super) fn spawn_poisoning_on_panic(
    shared: &Arc<Shared>,
    name: &str,
    op: &'static str,
    body: impl FnOnce(&Arc<Shared>) + Send + 'static,
) -> std::io::Result<thread::JoinHandle<()>> {
    let s = shared.clone();
    let thread_name = name.to_owned();
    thread::Builder::new().name(name.into()).spawn(move || {
        let run = std::panic::AssertUnwindSafe(|| body(&s));
        if std::panic::catch_unwind(run).is_err() {
            s.core.fail(Error::storage(
                ENGINE_NAME,
                op,
                format!("the {thread_name} thread panicked"),
            ));
        }
    })
}

/// Keeps the applier thread alive while any engine or keyspace handle exists; its drop
/// is the close.
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    /// The background applier thread ([`Applier::Background`]).
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let s = &self.shared;
        s.core.lock_state().stop = true;
        s.core.changed.notify_all();
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            // A panicking applier has already poisoned nothing we could repair here.
            let _ = t.join();
        }
        // The merger ends the merge it is writing at its next look at `stop` (the partial
        // output deleted, never listed); the closing step below plans no merge.
        s.merger.join();
        s.core.lock_state().merger.set_live(false);
        // A clean close applies and checkpoints what it can; a failure here (a cut power
        // supply in the tests) loses nothing: the units are in the journal.
        if !s.core.poison.is_set() {
            let _ = s.applier.apply_step(&s.core, true);
        }
    }
}

/// The journal engine: a directory of segment files and one redb index.
///
/// Cheap to clone; the applier stops when the engine and every keyspace handle are dropped.
#[derive(Debug, Clone)]
pub struct JournalEngine {
    handle: Arc<Handle>,
}

/// One keyspace of a [`JournalEngine`], as a [`Db`].
///
/// `write` with `Synced`: one unit appended and one `sync_data` of the segment; durable
/// when it returns `Ok`. `Buffered`: appended only; durable at the next sync (a later
/// synced unit, a segment roll, or the applier's need for room). `Err`: the unit may or
/// may not be durable; the engine, and every keyspace of it, is poisoned.
#[derive(Debug, Clone)]
pub struct JournalDb {
    handle: Arc<Handle>,
    name: String,
}

impl JournalEngine {
    /// Opens (or creates) the journal in `dir` on `fs`, recovering what a crash left.
    ///
    /// Recovery: redb at its last checkpoint; units past it replayed; a torn tail (an
    /// invalid unit in the last segment that no later valid unit shows was ever durable)
    /// truncated; any other invalid unit refused with [`Error::Corrupt`] naming the segment
    /// and offset. Nothing is written before that decision (redb's own repair aside).
    /// On `Ok` the replayed units are applied and checkpointed. A new journal's spare
    /// segment is written and synced before its index is created, so that its first commit
    /// does not wait for one.
    pub fn open(fs: Arc<dyn FileSystem>, dir: &Path, options: JournalOptions) -> Result<Self> {
        let shared = open::open(fs, dir, options)?;
        let thread = match shared.core.options.applier {
            Applier::Background => {
                // A panic in the applier (a broken invariant) must not leave writers
                // waiting for room forever: it poisons the engine.
                Some(
                    spawn_poisoning_on_panic(&shared, "journal-applier", "apply", run_applier)
                        .map_err(|e| Error::storage(ENGINE_NAME, "spawn applier", e))?,
                )
            }
            Applier::Inline => None,
        };
        Ok(JournalEngine {
            handle: Arc::new(Handle {
                shared,
                thread: Mutex::new(thread),
            }),
        })
    }

    /// The keyspace `name` as a [`Db`] (created by its first write), with the options it
    /// was created with (the default for a new one). Names are 1 to
    /// [`KEYSPACE_NAME_BYTES_MAX`] bytes.
    pub fn keyspace(&self, name: &str) -> Result<Arc<JournalDb>> {
        check_keyspace_name(name)?;
        Ok(Arc::new(JournalDb {
            handle: self.handle.clone(),
            name: name.to_string(),
        }))
    }

    /// The keyspace `name`, created with `options` if it does not exist yet. A keyspace's
    /// options are fixed at creation: an existing one (in the index, or written since
    /// open) keeps its own, which [`JournalDb::options`] reports. Separation and an index
    /// of runs are recorded in the index with a durable commit before this returns (a
    /// runs keyspace's directory created durably before it), so the keyspace's first
    /// value is applied under them.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad name, a threshold below
    /// [`SEPARATE_VALUES_MIN_BYTES`], or (runs) a name that is
    /// not ASCII letters, digits, `_` and `-` (it names a directory), before anything is
    /// written; a failed record poisons the engine.
    pub fn keyspace_with(&self, name: &str, options: KeyspaceOptions) -> Result<Arc<JournalDb>> {
        check_keyspace_name(name)?;
        check_keyspace_options(name, options)?;
        let db = self.keyspace(name)?;
        let runs = options.index == KeyspaceIndex::Runs;
        let mut records = Vec::with_capacity(2);
        if let Some(from) = options.separate_values_from {
            records.push((format!("{META_SEPARATE_PREFIX}{name}"), u64::from(from)));
        }
        if runs {
            records.push((format!("{META_INDEX_PREFIX}{name}"), INDEX_KIND_RUNS));
        }
        if records.is_empty() {
            return Ok(db);
        }
        record_keyspace(&self.handle.shared, name, options, &records)?;
        Ok(db)
    }

    /// Writes the batches of several keyspaces as **one** unit: after a crash all of them
    /// are present or none. `Synced`: one append and one `sync_data`, durable when this
    /// returns `Ok`. `Err`: the unit may or may not be durable; the engine is poisoned.
    pub fn commit(&self, batches: &[(&str, &Batch)], durability: Durability) -> Result<()> {
        let mut sections = Vec::with_capacity(batches.len());
        for (name, batch) in batches {
            check_keyspace_name(name)?;
            sections.push((name.to_string(), batch_ops(batch)));
        }
        self.handle
            .shared
            .commit(ENGINE_NAME, Sections(sections), durability)
    }

    /// Applies every durable unit and runs a checkpoint (then trims), on this thread.
    pub fn checkpoint(&self) -> Result<()> {
        let s = &self.handle.shared;
        {
            let mut w = s.segments.lock_writer();
            if w.has_unsynced() {
                w.sync(&s.core)?;
            }
        }
        s.applier.apply_step(&s.core, true)
    }

    /// The engine's counts so far.
    pub fn counts(&self) -> JournalCounts {
        let core = &self.handle.shared.core;
        core.counters.snapshot(core.index_counters.snapshot())
    }

    /// The seq of the last unit applied to redb, and of the last checkpoint.
    pub fn applied_and_checkpoint_seq(&self) -> (u64, u64) {
        let st = self.handle.shared.core.lock_state();
        (st.queue.applied_seq(), st.clock.checkpoint_seq())
    }

    /// Bytes the journal directory's files occupy (segments, index and runs).
    pub fn disk_size_bytes(&self) -> Result<u64> {
        usage::disk_size_bytes(&self.handle.shared.core)
    }

    /// What the journal occupies on disk, and each keyspace's applied entries: logical
    /// bytes beside the index pages and the journal bytes they take.
    ///
    /// Reads every applied entry of every keyspace (one read transaction): for inspection
    /// and measurement, not for a running node's hot path. Units not yet applied are not
    /// counted (after an open or a checkpoint there are none). In a home only the block
    /// store keeps values in the journal, so its on-disk share is its `index_bytes` plus
    /// `held_segment_bytes` (`flushpoint inspect` prints it).
    pub fn usage(&self) -> Result<JournalUsage> {
        usage::usage(&self.handle.shared.core)
    }

    /// The engine's roles (the unit tests reach inside).
    #[cfg(test)]
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }
}

/// Refuses, before anything is written, a separation threshold below
/// [`SEPARATE_VALUES_MIN_BYTES`] and a runs keyspace's name that cannot name a directory.
fn check_keyspace_options(name: &str, options: KeyspaceOptions) -> Result<()> {
    if let Some(from) = options.separate_values_from
        && from < SEPARATE_VALUES_MIN_BYTES
    {
        return Err(Error::InvalidInput(format!(
            "journal keyspace {name:?}: values kept in the journal must be at least \
             {SEPARATE_VALUES_MIN_BYTES} bytes, not {from}"
        )));
    }
    if options.index == KeyspaceIndex::Runs
        && !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Error::InvalidInput(format!(
            "journal keyspace {name:?}: a keyspace indexed by runs names a directory: \
             ASCII letters, digits, '_' and '-' only"
        )));
    }
    Ok(())
}

/// Records keyspace `name`'s `options` (as the meta `records`) with a durable commit,
/// unless it exists already (in the index, or written since open): it keeps its own.
fn record_keyspace(
    s: &Shared,
    name: &str,
    options: KeyspaceOptions,
    records: &[(String, u64)],
) -> Result<()> {
    let core = &s.core;
    let runs = options.index == KeyspaceIndex::Runs;
    // The apply lock: no unit of this keyspace is applied while its format is decided.
    let turn = s.applier.lock();
    core.poison.check(name)?;
    {
        let st = core.lock_state();
        if st.separated.contains_key(name) || st.manifest.indexes(name) || st.queue.writes(name) {
            return Ok(());
        }
    }
    let exists = core.index_call("begin read", || {
        let txn = core
            .index
            .begin_read()
            .map_err(|e| Error::storage(name, "begin read", e))?;
        Ok(open_read_table(&txn, name, name)?.is_some())
    })?;
    if exists {
        return Ok(());
    }
    if runs {
        // Crash: a cut after this leaves an empty directory and no record: the
        // keyspace does not exist, and a later creation with runs finds it there.
        let kdir = runs_dir(&core.dir, name);
        core.step.point();
        create_dir_all_durably(&*core.fs, &kdir)
            .map_err(core.failing_io("create directory", &kdir))?;
    }
    let txn = core.begin_index_write(redb::Durability::Immediate)?;
    core.index_call("record keyspace", || {
        let mut meta = META
            .open_mut(&txn, core.layout)
            .map_err(core.failing("open meta"))?;
        for (key, value) in records {
            meta.insert(&key.as_str(), *value)
                .map_err(core.failing("write meta"))?;
        }
        if !runs {
            // The keyspace's table exists from now on: a later open sees it created.
            let table_name = table_name(name);
            let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&table_name);
            txn.open_table(def).map_err(core.failing("open table"))?;
        }
        Ok(())
    })?;
    // This durable commit also makes the apply steps since the last checkpoint durable,
    // with the manifest rows of their runs: those runs are synced first, as a
    // checkpoint syncs them (the apply lock is held: no run is listed meanwhile; the
    // merger may be writing one, unlisted).
    let synced_runs = sync_runs(core, &turn)?;
    // Crash: the records (and a separating tree keyspace's empty table) are durable
    // together or not at all; no unit of this keyspace is applied before it (the apply
    // lock), so its entries are all in its kind's format, or (a cut before it, a unit
    // replayed) all in the default one.
    core.index_call("record keyspace", || {
        txn.into_inner()
            .commit()
            .map_err(core.failing("record keyspace"))
    })?;
    let mut st = core.lock_state();
    st.manifest.listed_durably(synced_runs);
    if let Some(from) = options.separate_values_from {
        st.separated.insert(name.to_string(), u64::from(from));
    }
    if runs {
        st.manifest.add_keyspace(name);
    }
    Ok(())
}

fn check_keyspace_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > KEYSPACE_NAME_BYTES_MAX {
        return Err(Error::InvalidInput(format!(
            "journal keyspace name {name:?} must be 1 to {KEYSPACE_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

fn batch_ops(batch: &Batch) -> Vec<UnitOp> {
    batch
        .ops()
        .iter()
        .map(|op| match op {
            Op::Put(k, v) => (k.clone(), Some(v.clone())),
            Op::Delete(k) => (k.clone(), None),
        })
        .collect()
}

impl JournalDb {
    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// The options this keyspace was created with.
    pub fn options(&self) -> KeyspaceOptions {
        let st = self.shared().core.lock_state();
        let from = st.separated.get(&self.name).copied();
        let index = if st.manifest.indexes(&self.name) {
            KeyspaceIndex::Runs
        } else {
            KeyspaceIndex::Tree
        };
        KeyspaceOptions {
            index,
            separate_values_from: from.map(|f| u32::try_from(f).unwrap_or(u32::MAX)),
        }
    }

    fn write_sections(&self, ops: Vec<UnitOp>, durability: Durability) -> Result<()> {
        self.shared().commit(
            &self.name,
            Sections(vec![(self.name.clone(), ops)]),
            durability,
        )
    }
}

impl Db for JournalDb {
    fn name(&self) -> &str {
        &self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.get_many(&[key])?.pop().expect("one key, one answer"))
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        reads::get_many(&self.shared().core, &self.name, keys)
    }

    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        reads::range(&self.shared().core, &self.name, range, direction)
    }

    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        self.write_sections(batch_ops(batch), durability)
    }

    fn write_entries<'a>(
        &self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        let ops = entries.map(|(k, v)| (k.clone(), v.cloned())).collect();
        self.write_sections(ops, durability)
    }

    /// Every keyspace of one engine is a member of the same group: the engine's
    /// [`UnitGroup::write_unit`] writes parts of several keyspaces as one unit.
    fn unit_group(&self) -> Option<UnitMember> {
        Some(UnitMember {
            group: self.handle.clone() as Arc<dyn UnitGroup>,
            name: self.name.clone(),
        })
    }
}

/// The engine's keyspaces as one [`UnitGroup`]: a unit is one framed record in the journal,
/// so its parts are all present after a crash or none is (ADR 0008, recovery keeps whole
/// units only); `Synced` is one `sync_data`.
impl UnitGroup for Handle {
    fn write_unit(&self, parts: &mut [UnitPart<'_, '_>], durability: Durability) -> Result<()> {
        let mut sections = Vec::with_capacity(parts.len());
        for (name, _) in parts.iter() {
            check_keyspace_name(name)?;
        }
        for (name, entries) in parts.iter_mut() {
            // The overlay's own `Bytes`: a reference count each, no key or value copied.
            let ops: Vec<UnitOp> = entries.map(|(k, v)| (k.clone(), v.cloned())).collect();
            if !ops.is_empty() {
                sections.push((name.to_string(), ops));
            }
        }
        if sections.is_empty() {
            return Ok(());
        }
        self.shared
            .commit(ENGINE_NAME, Sections(sections), durability)
    }

    fn wait_applied(&self) -> Result<()> {
        let s = &self.shared;
        s.applier.wait_applied(&s.core, &s.segments)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::{Duration, Instant};

    /// Polls `done` every millisecond until it holds; fails the test after 20 s (a background
    /// thread that never gets there).
    pub(crate) fn wait_for(what: &str, done: &dyn Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
